//! The live feed's events as store rows (issue 23 §3): `/v1/events`, the console and MCP
//! progress see the events of every node, and `Last-Event-ID` means the same on every node and
//! after a restart, because an event's id is the store's.
//!
//! The contract every backend keeps (the conformance suite checks it):
//! - [`EventStore::append_events`] appends a batch in order and answers its ids, increasing,
//!   each greater than every id handed out before on any node; ids become visible in id order
//!   (a reader that has seen id `n` never later finds a new row below `n`), so a reader
//!   following the table with [`EventStore::events_after`] misses nothing. A shared backend
//!   tells other nodes once per batch, through the change feed ([`Changed::Events`] with the
//!   batch's highest id), never once per event.
//! - Ids may skip numbers (a batch that failed), so "missed events" is judged against the
//!   oldest id kept ([`EventBounds`]), not by counting.
//! - [`EventStore::prune_events`] keeps the newest rows only; the newest is always kept, so the
//!   highest id given stays known across a restart.
//!
//! [`Changed::Events`]: crate::feed::Changed::Events

use entity::Snowflake;

use crate::aggregates::StoreFuture;

/// The most events one append may carry; a larger batch is refused (`Conflict`).
pub const MAX_EVENT_BATCH: usize = 1_024;
/// The most events one read answers, whatever limit it asks for.
pub const MAX_EVENTS_READ: usize = 1_024;
/// The longest event body kept (bytes of JSON); a longer one is refused (`Conflict`).
pub const MAX_EVENT_BODY: usize = 256 * 1024;

/// One event to append; the store gives it its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRow {
    /// `call.finished`, `message.created`, ...
    pub kind: String,
    /// The session it happened in, if any.
    pub session: Option<Snowflake>,
    /// Whose call it is about, if any (a caller key).
    pub caller: Option<String>,
    /// When it was published, ms since the Unix epoch.
    pub time_ms: u64,
    /// The event's JSON object (its type, time, session and own fields; not its id).
    pub body: String,
}

/// One kept event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptEvent {
    /// The store's id.
    pub id: u64,
    /// The event.
    pub row: EventRow,
}

/// The ids a store keeps now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventBounds {
    /// The oldest kept (`None`: none kept, none ever appended).
    pub oldest: Option<u64>,
    /// The newest kept, which is the newest ever given (0 before the first append).
    pub newest: u64,
}

/// The events aggregate; see the module doc.
pub trait EventStore: Send + Sync {
    /// Appends `events` in order, as one batch: their ids, increasing. At most
    /// [`MAX_EVENT_BATCH`]; each body at most [`MAX_EVENT_BODY`] bytes.
    fn append_events(&self, events: Vec<EventRow>) -> StoreFuture<'_, Vec<u64>>;
    /// Kept events with an id above `after`, oldest first, at most `limit` (and at most
    /// [`MAX_EVENTS_READ`]).
    fn events_after(&self, after: u64, limit: usize) -> StoreFuture<'_, Vec<KeptEvent>>;
    /// The oldest and newest ids kept.
    fn event_bounds(&self) -> StoreFuture<'_, EventBounds>;
    /// Forgets all but the newest `keep` events (at least one is always kept); how many went.
    fn prune_events(&self, keep: usize) -> StoreFuture<'_, u64>;
}

/// Refuses a batch the contract does not allow (too many events, a body too long), before a
/// backend touches its data.
pub fn check_event_batch(events: &[EventRow]) -> Result<(), crate::StoreError> {
    use crate::{StoreError, StoreErrorKind};
    if events.len() > MAX_EVENT_BATCH {
        return Err(StoreError::new(
            StoreErrorKind::Conflict,
            format!(
                "{} events in one append; at most {MAX_EVENT_BATCH}: split the batch",
                events.len()
            ),
        ));
    }
    if let Some(long) = events.iter().find(|e| e.body.len() > MAX_EVENT_BODY) {
        return Err(StoreError::new(
            StoreErrorKind::Conflict,
            format!(
                "a {} event of {} bytes; an event's body is at most {MAX_EVENT_BODY} bytes",
                long.kind,
                long.body.len()
            ),
        ));
    }
    let nul = |text: &str| text.contains('\0');
    if let Some(bad) = events
        .iter()
        .find(|e| nul(&e.kind) || nul(&e.body) || e.caller.as_deref().is_some_and(nul))
    {
        return Err(StoreError::new(
            StoreErrorKind::Conflict,
            format!(
                "a {:?} event holds a NUL character, which no store keeps; escape it (as JSON does)",
                bad.kind
            ),
        ));
    }
    Ok(())
}
