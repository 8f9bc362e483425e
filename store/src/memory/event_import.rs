//! The memory backend's event import: each event goes into the id-ordered queue at its place.

use super::MemoryBackend;
use crate::aggregates::{ready, StoreFuture};
use crate::event_import::{rows, EventImport};
use crate::events::{check_event_batch, KeptEvent};

impl EventImport for MemoryBackend {
    fn import_events(&self, events: Vec<KeptEvent>) -> StoreFuture<'_, ()> {
        ready(
            self.open()
                .and_then(|()| check_event_batch(&rows(&events)))
                .map(|()| {
                    let data = &mut self.data().events;
                    for event in events {
                        let at = data.kept.partition_point(|kept| kept.id < event.id);
                        if data.kept.get(at).is_some_and(|kept| kept.id == event.id) {
                            continue;
                        }
                        data.newest = data.newest.max(event.id);
                        data.kept.insert(at, event);
                    }
                }),
        )
    }
}
