//! Keeping another store's events under their own ids (`store copy`, issue 23 §1): a copy
//! keeps each event's id, so a second run recognises what it copied and a client's
//! `Last-Event-ID` means the same event in the target.

use crate::aggregates::StoreFuture;
use crate::events::KeptEvent;

/// Events imported as they were kept.
pub trait EventImport: Send + Sync {
    /// Keeps `events` under the ids they had in another store: ids already kept are skipped,
    /// events appended later get higher ids. A batch is refused as
    /// [`append_events`](crate::EventStore::append_events) refuses one (too many, a body too
    /// long, a NUL). Meant for a copy into a store no node is appending to: an id imported
    /// below one already handed out breaks the order readers rely on.
    fn import_events(&self, events: Vec<KeptEvent>) -> StoreFuture<'_, ()>;
}

/// The rows of `events`, for [`check_event_batch`](crate::events::check_event_batch).
pub fn rows(events: &[KeptEvent]) -> Vec<crate::EventRow> {
    events.iter().map(|event| event.row.clone()).collect()
}
