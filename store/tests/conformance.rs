//! The conformance suite on the memory backend, played as two nodes sharing the data: every
//! test's cache watches the change feed, and the convergence test gets its second node.

use std::sync::{Arc, Mutex};

use switchboard_store::conformance::{Options, Place};
use switchboard_store::{Backend, MemoryBackend, MemoryOptions};

struct Memory {
    options: MemoryOptions,
    second: Mutex<Option<Arc<dyn Backend>>>,
}

impl Place for Memory {
    fn open(&self) -> Arc<dyn Backend> {
        let backend = MemoryBackend::new(self.options.clone());
        *self.second.lock().unwrap() = Some(Arc::new(backend.node()));
        Arc::new(backend)
    }

    fn durable(&self) -> bool {
        false
    }

    fn second_node(&self) -> Option<Arc<dyn Backend>> {
        self.second.lock().unwrap().clone()
    }
}

fn memory(options: &Options) -> Box<dyn Place> {
    Box::new(Memory {
        options: MemoryOptions {
            retention: *options,
            ..MemoryOptions::default()
        },
        second: Mutex::new(None),
    })
}

switchboard_store::conformance_tests!(memory);
