//! The conformance suite on the PostgreSQL backend: each test gets a database of its own on a
//! throwaway cluster (from a migrated template), is durable (the reopen tests check everything
//! survives), and has a second node over the same database (the convergence test plays two
//! nodes through LISTEN/NOTIFY).

use std::sync::{Arc, Mutex};

use switchboard_store::conformance::{Options, Place};
use switchboard_store::Backend;
use switchboard_store_postgres::testing::PgCluster;
use switchboard_store_postgres::{PgBackend, PgOptions};

struct Database {
    url: String,
    options: PgOptions,
    second: Mutex<Option<Arc<dyn Backend>>>,
}

impl Place for Database {
    fn open(&self) -> Arc<dyn Backend> {
        let backend = PgBackend::open(&self.url, self.options.clone()).expect("the store opens");
        Arc::new(backend)
    }

    fn durable(&self) -> bool {
        true
    }

    fn second_node(&self) -> Option<Arc<dyn Backend>> {
        let mut second = self.second.lock().unwrap();
        if second.is_none() {
            *second = Some(self.open());
        }
        second.clone()
    }
}

fn database(options: &Options) -> Box<dyn Place> {
    let cluster = PgCluster::shared();
    let name = cluster.database().expect("a test database");
    Box::new(Database {
        url: cluster.url(&name),
        options: PgOptions {
            retention: *options,
            pool_size: 4,
            ..PgOptions::default()
        },
        second: Mutex::new(None),
    })
}

switchboard_store::conformance_tests!(database);
