//! The conformance suite on the SQLite backend, each test in a file of its own (durable:
//! the reopen tests check that everything survives close and open).

use std::sync::Arc;

use switchboard_store::conformance::{Options, Place};
use switchboard_store::Backend;
use switchboard_store_sqlite::{SqliteBackend, SqliteOptions};

mod support;
use support::TempDir;

struct File {
    dir: TempDir,
    options: SqliteOptions,
}

impl Place for File {
    fn open(&self) -> Arc<dyn Backend> {
        Arc::new(
            SqliteBackend::open(&self.dir.db(), self.options.clone()).expect("the store opens"),
        )
    }

    fn durable(&self) -> bool {
        true
    }

    fn second_node(&self) -> Option<Arc<dyn Backend>> {
        None
    }
}

fn file(options: &Options) -> Box<dyn Place> {
    Box::new(File {
        dir: TempDir::new("conformance"),
        options: SqliteOptions {
            retention: *options,
            ..SqliteOptions::default()
        },
    })
}

switchboard_store::conformance_tests!(file);
