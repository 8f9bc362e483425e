//! The memory backend's events: a queue in id order under the data lock, so appends from
//! every handle (node) are ordered and visible in id order.

use std::collections::VecDeque;

use super::MemoryBackend;
use crate::aggregates::{ready, StoreFuture};
use crate::events::{
    check_event_batch, EventBounds, EventRow, EventStore, KeptEvent, MAX_EVENTS_READ,
};
use crate::feed::Changed;

/// The kept events and the next id.
#[derive(Debug, Default)]
pub(super) struct Events {
    pub(super) kept: VecDeque<KeptEvent>,
    /// The newest id given (0 before any).
    pub(super) newest: u64,
}

impl EventStore for MemoryBackend {
    fn append_events(&self, events: Vec<EventRow>) -> StoreFuture<'_, Vec<u64>> {
        if let Err(refused) = self.open().and_then(|()| check_event_batch(&events)) {
            return ready(Err(refused));
        }
        if events.is_empty() {
            return ready(Ok(Vec::new()));
        }
        let ids: Vec<u64> = {
            let data = &mut self.data().events;
            events
                .into_iter()
                .map(|row| {
                    data.newest += 1;
                    let id = data.newest;
                    data.kept.push_back(KeptEvent { id, row });
                    id
                })
                .collect()
        };
        if let Some(&newest) = ids.last() {
            self.feed.publish(Changed::Events(newest));
        }
        ready(Ok(ids))
    }

    fn events_after(&self, after: u64, limit: usize) -> StoreFuture<'_, Vec<KeptEvent>> {
        self.read(|data| {
            let kept = &data.events.kept;
            let start = kept.partition_point(|e| e.id <= after);
            kept.iter()
                .skip(start)
                .take(limit.min(MAX_EVENTS_READ))
                .cloned()
                .collect()
        })
    }

    fn event_bounds(&self) -> StoreFuture<'_, EventBounds> {
        self.read(|data| EventBounds {
            oldest: data.events.kept.front().map(|e| e.id),
            newest: data.events.newest,
        })
    }

    fn prune_events(&self, keep: usize) -> StoreFuture<'_, u64> {
        ready(self.open().map(|()| {
            let kept = &mut self.data().events.kept;
            let over = kept.len().saturating_sub(keep.max(1));
            kept.drain(..over);
            over as u64
        }))
    }
}
