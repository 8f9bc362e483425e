//! The hub's events kept in the store (issue 23 §3), so that `/v1/events`, the console and
//! MCP progress see the events of every node, and a `Last-Event-ID` means the same on every
//! node and after a restart: an event's id is the store's ([`switchboard_store::events`]).
//!
//! Publishing stays synchronous and cheap: [`EventHub::publish`] hands the event to a bounded
//! queue ([`QUEUE_CAPACITY`]) and returns; a full queue loses the event, counted
//! (`switchboard_events_lost_total`) and logged, and never blocks a call. One writer task per
//! hub takes what is queued, up to [`BATCH`] at once, serializes each event (off the call's
//! path), and appends the batch: one store round trip per batch.
//!
//! Who delivers to subscribers:
//! - A store one node owns (SQLite, or memory): the writer delivers the batch it appended,
//!   with the ids the store gave, at once.
//! - A store several nodes share (PostgreSQL): the same task follows the table. It starts at
//!   the newest id, and after each of its own appends, at each [`Changed::Events`] of another
//!   node (one `NOTIFY` per batch, through the change listener) and every [`POLL`] regardless,
//!   reads the rows after the last it delivered, [`PAGE`] at a time, and delivers them: every
//!   node's events, in the store's order, each once.
//!
//! Every [`PRUNE_EVERY`] events it appended (and at start) it prunes the table to the newest
//! [`EVENTS_KEPT`]. A subscriber whose `Last-Event-ID` the hub's ring does not cover reads the
//! store itself (`events.rs`), a page at a time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use switchboard_store::events::{check_event_batch, EventRow, MAX_EVENT_BODY};
use switchboard_store::feed::{Changed, Changes, Next as FeedNext, Origin};
use switchboard_store::{ChangeFeed, EventStore};
use tokio::sync::{mpsc, watch};
use tracing::{debug, warn};

use super::{Event, EventHub};

/// Events waiting for the writer; more are lost (and counted), never waited for.
pub const QUEUE_CAPACITY: usize = 8_192;
/// The most events one append carries.
pub const BATCH: usize = 256;
/// Events the store keeps; older ones are pruned.
pub const EVENTS_KEPT: usize = 100_000;
/// Events one read of the store answers (the follower's, a resuming subscriber's).
pub const PAGE: usize = 256;
/// How often a shared store is read without a notification.
pub const POLL: Duration = Duration::from_secs(1);
/// Events appended between two prunes.
const PRUNE_EVERY: u64 = 4_096;
/// Pages the follower reads before it looks at its queue again.
const PAGES_PER_TURN: usize = 16;
/// The least time between two warnings about one kind of trouble.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// What the hub holds of its store.
pub(crate) struct Stored {
    queue: mpsc::Sender<Event>,
    pub(crate) store: Arc<dyn EventStore>,
    /// Events queued for the writer, and those it has handled (kept and delivered, or lost):
    /// equal once everything published so far reached the subscribers.
    queued: AtomicU64,
    handled: Arc<AtomicU64>,
}

impl Stored {
    /// Queues `event` for the writer; a full queue loses it, counted and logged (the first
    /// time, then at each power of two).
    pub(crate) fn send(&self, hub: &EventHub, event: Event) {
        // Counted before it is queued, so the writer can never have handled more than this says.
        self.queued.fetch_add(1, Ordering::AcqRel);
        if let Err(err) = self.queue.try_send(event) {
            self.handled.fetch_add(1, Ordering::AcqRel);
            let lost = hub.count_lost(1);
            if matches!(err, mpsc::error::TrySendError::Closed(_)) && *hub.closed.borrow() {
                // The server is shutting down (its streams are closed): what the last parts
                // say as they stop has no one left to read it.
                debug!(lost, "an event published during shutdown was not kept");
                return;
            }
            if lost.is_power_of_two() {
                let why = match err {
                    mpsc::error::TrySendError::Full(_) => {
                        "its queue is full (the store is slow or away)"
                    }
                    mpsc::error::TrySendError::Closed(_) => "its writer has stopped",
                };
                warn!(lost, capacity = QUEUE_CAPACITY, "an event was not kept: {why}; subscribers will not see it (switchboard_events_lost_total counts them)");
            }
        }
    }

    /// Whether the writer has handled every event queued so far.
    pub(crate) fn caught_up(&self) -> bool {
        self.handled.load(Ordering::Acquire) >= self.queued.load(Ordering::Acquire)
    }
}

/// Starts keeping `hub`'s events in `store`; see [`EventHub::keep_in`].
pub(crate) fn attach(
    hub: &Arc<EventHub>,
    store: Arc<dyn EventStore>,
    feed: &dyn ChangeFeed,
) -> bool {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        warn!("events are not kept in the store: no async runtime to write them from; ids stay this process's");
        return false;
    };
    let (queue, rx) = mpsc::channel(QUEUE_CAPACITY);
    let handled = Arc::new(AtomicU64::new(0));
    let stored = Stored {
        queue,
        store: Arc::clone(&store),
        queued: AtomicU64::new(0),
        handled: Arc::clone(&handled),
    };
    if !hub.set_stored(stored) {
        return false;
    }
    let shared = feed.shared();
    // Where to follow a shared table from is read now, before anyone subscribes, so no event
    // committed after this falls between; the backend's futures run without this runtime.
    // When the store cannot answer now, the writer task asks again until it does.
    let start = shared
        .then(|| futures_executor::block_on(store.event_bounds()).ok())
        .flatten()
        .map(|bounds| bounds.newest);
    let writer = Writer {
        hub: Arc::downgrade(hub),
        store,
        rx,
        changes: feed.subscribe(),
        origin: feed.origin(),
        shared,
        closed: hub.closed_watch(),
        cursor: start.unwrap_or(0),
        appended: 0,
        handled,
        warned: None,
    };
    runtime.spawn(writer.run(start.is_some()));
    true
}

struct Writer {
    hub: Weak<EventHub>,
    store: Arc<dyn EventStore>,
    rx: mpsc::Receiver<Event>,
    changes: Changes,
    origin: Origin,
    /// Whether other nodes append too: then deliver by following the table.
    shared: bool,
    closed: watch::Receiver<bool>,
    /// The newest id delivered by following the table.
    cursor: u64,
    /// Events appended since the last prune.
    appended: u64,
    /// Shared with [`Stored`]: the events taken off the queue and done with.
    handled: Arc<AtomicU64>,
    warned: Option<Instant>,
}

impl Writer {
    async fn run(mut self, started: bool) {
        if self.shared && !started && !self.start_at_newest().await {
            return;
        }
        self.prune().await;
        let mut listening = self.shared;
        // An interval, not a sleep per turn: other changes on the feed must not put it off.
        let mut poll = tokio::time::interval(POLL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                received = self.rx.recv() => match received {
                    Some(first) => {
                        let taken = self.append(first).await;
                        if self.shared {
                            self.follow().await;
                        }
                        self.handled.fetch_add(taken, Ordering::AcqRel);
                    }
                    None => return,
                },
                change = self.changes.next(), if listening => match change {
                    FeedNext::Change(change) => {
                        if change.origin != self.origin && matches!(change.what, Changed::Events(_)) {
                            self.follow().await;
                        }
                    }
                    FeedNext::Missed(_) => self.follow().await,
                    // The store is gone; polling says the rest.
                    FeedNext::Closed => listening = false,
                },
                _ = poll.tick(), if self.shared => self.follow().await,
                changed = self.closed.changed() => {
                    if changed.is_err() || *self.closed.borrow() {
                        // Shutting down: what is queued is appended, then the task ends.
                        while let Ok(first) = self.rx.try_recv() {
                            let taken = self.append(first).await;
                            self.handled.fetch_add(taken, Ordering::AcqRel);
                        }
                        return;
                    }
                }
            }
        }
    }

    /// Follows the table from its newest row (what came before is not delivered live; a
    /// subscriber resuming from an older id reads the store). Retries until the store
    /// answers; false when the hub went first.
    async fn start_at_newest(&mut self) -> bool {
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.store.event_bounds().await {
                Ok(bounds) => {
                    self.cursor = bounds.newest;
                    return true;
                }
                Err(err) => self.warn(&format!(
                    "cannot read where the events table ends ({err}); retrying"
                )),
            }
            if self.hub.strong_count() == 0 {
                return false;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    /// Appends `first` and whatever else is queued (up to [`BATCH`]); on a store one node
    /// owns, delivers them with their ids. Each event is written as text once, for its row;
    /// the events delivered are the ones published, numbered, and render their own text only
    /// if a subscriber reads them (not read back from the rows).
    /// Appends `first` and what queued behind it (up to a batch); how many it took off the queue.
    async fn append(&mut self, first: Event) -> u64 {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match self.rx.try_recv() {
                Ok(event) => batch.push(event),
                Err(_) => break,
            }
        }
        let taken = batch.len() as u64;
        let mut rows: Vec<EventRow> = Vec::with_capacity(batch.len());
        let mut kept: Vec<Event> = Vec::with_capacity(batch.len());
        let mut refused = 0u64;
        for event in batch {
            let row = EventRow {
                kind: event.kind.to_string(),
                session: event.session,
                caller: event.caller.as_deref().map(str::to_owned),
                time_ms: event.time_ms,
                body: event.body(),
            };
            // One event the store would refuse (a body over its bound) must not sink its batch.
            if check_event_batch(std::slice::from_ref(&row)).is_ok() {
                rows.push(row);
                kept.push(event);
            } else {
                refused += 1;
            }
        }
        if refused > 0 {
            let lost = self.hub.upgrade().map_or(0, |hub| hub.count_lost(refused));
            self.warn(&format!(
                "{refused} events were not kept: larger than the store keeps ({MAX_EVENT_BODY} bytes); {lost} lost since start"
            ));
        }
        if rows.is_empty() {
            return taken;
        }
        let count = rows.len() as u64;
        match self.store.append_events(rows).await {
            Ok(ids) => {
                self.appended += count;
                if self.shared {
                    // Delivered by following the table, in the store's order with every node's.
                } else if let Some(hub) = self.hub.upgrade() {
                    hub.deliver(ids.into_iter().zip(kept).map(|(id, mut event)| {
                        event.id = id;
                        event
                    }));
                }
            }
            Err(err) => {
                let lost = self.hub.upgrade().map_or(0, |hub| hub.count_lost(count));
                self.warn(&format!(
                    "{count} events were not kept: the store refused them ({err}); {lost} lost since start"
                ));
            }
        }
        if self.appended >= PRUNE_EVERY {
            self.prune().await;
        }
        taken
    }

    /// Delivers the rows after the last delivered, [`PAGE`] at a time, at most
    /// [`PAGES_PER_TURN`] pages before the queue gets its turn again.
    async fn follow(&mut self) {
        for _ in 0..PAGES_PER_TURN {
            let Some(hub) = self.hub.upgrade() else {
                return;
            };
            match self.store.events_after(self.cursor, PAGE).await {
                Ok(page) => {
                    let full = page.len() == PAGE;
                    if let Some(last) = page.last() {
                        self.cursor = last.id;
                    }
                    hub.deliver(page.into_iter().map(Event::kept));
                    if !full {
                        return;
                    }
                }
                Err(err) => {
                    self.warn(&format!(
                        "cannot read other nodes' events ({err}); retrying"
                    ));
                    return;
                }
            }
        }
    }

    async fn prune(&mut self) {
        self.appended = 0;
        match self.store.prune_events(EVENTS_KEPT).await {
            Ok(0) => {}
            Ok(pruned) => debug!(pruned, kept = EVENTS_KEPT, "pruned old events"),
            Err(err) => self.warn(&format!("cannot prune old events ({err}); will retry")),
        }
    }

    /// Logs `what` unless a warning was logged within [`WARN_EVERY`].
    fn warn(&mut self, what: &str) {
        if self.warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            self.warned = Some(Instant::now());
            warn!("{what}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Filter, Next};
    use serde_json::json;
    use switchboard_store::{MemoryBackend, MemoryOptions};

    async fn next_event(subscription: &mut crate::events::Subscription) -> Arc<Event> {
        match tokio::time::timeout(Duration::from_secs(5), subscription.next()).await {
            Ok(Some(Next::Event(event))) => event,
            Ok(Some(Next::Notice(kind, data) | Next::End(kind, data))) => {
                panic!("expected an event, got {kind}: {data}")
            }
            Ok(None) => panic!("the stream ended"),
            Err(_) => panic!("no event within 5 s"),
        }
    }

    fn stored_hub(store: &Arc<MemoryBackend>) -> Arc<EventHub> {
        let hub = Arc::new(EventHub::new());
        assert!(hub.keep_in(store.clone(), &**store));
        hub
    }

    #[tokio::test]
    async fn closing_after_delivery_ends_streams_only_after_the_last_published_event() {
        let store = Arc::new(MemoryBackend::new(MemoryOptions::default()));
        let hub = stored_hub(&store);
        let mut live = hub.subscribe(Filter::default(), None).unwrap();
        // Published just before shutdown (a gateway saying it closed): the writer still has
        // them when the server closes its streams.
        for i in 0..300 {
            hub.publish("gateway.state", None, json!({ "i": i }));
        }
        hub.close_when_delivered(Duration::from_secs(5)).await;
        let mut seen = 0;
        loop {
            match tokio::time::timeout(Duration::from_secs(5), live.next()).await {
                Ok(Some(Next::Event(_))) => seen += 1,
                Ok(Some(Next::End(kind, _))) => {
                    assert_eq!(kind, "stream.closed");
                    break;
                }
                Ok(Some(Next::Notice(kind, data))) => panic!("{kind}: {data}"),
                Ok(None) => break,
                Err(_) => panic!("the stream neither ended nor delivered within 5 s"),
            }
        }
        assert_eq!(
            seen, 300,
            "the stream ended before it delivered every event"
        );
    }

    #[tokio::test]
    async fn ids_are_the_stores_and_a_new_hub_resumes_from_them() {
        let store = Arc::new(MemoryBackend::new(MemoryOptions::default()));
        let hub = stored_hub(&store);
        let mut live = hub.subscribe(Filter::default(), None).unwrap();
        for i in 0..3 {
            hub.publish("gateway.state", None, json!({ "i": i }));
        }
        let ids: Vec<u64> = [
            next_event(&mut live).await,
            next_event(&mut live).await,
            next_event(&mut live).await,
        ]
        .iter()
        .map(|event| event.id)
        .collect();
        let kept = store.events_after(0, 10).await.unwrap();
        assert_eq!(kept.iter().map(|e| e.id).collect::<Vec<_>>(), ids);
        let mut replayed = hub.subscribe(Filter::default(), Some(ids[0] - 1)).unwrap();
        let first: serde_json::Value =
            serde_json::from_str(next_event(&mut replayed).await.data()).unwrap();
        assert_eq!(
            first["id"],
            ids[0].to_string(),
            "the id field is the store's"
        );
        assert_eq!(first["i"], 0);
        // An event's own `id` field (a shell command's) is kept in its data, live and replayed;
        // its SSE id is still the store's.
        hub.publish("shell.started", None, json!({ "id": "sh-1" }));
        let mut own = next_event(&mut replayed).await;
        for _ in 0..3 {
            if own.kind == "shell.started" {
                break;
            }
            own = next_event(&mut replayed).await;
        }
        assert_eq!(own.kind, "shell.started");
        assert!(own.id > ids[2]);
        let data: serde_json::Value = serde_json::from_str(own.data()).unwrap();
        assert_eq!(data["id"], "sh-1");
        let kept = store.events_after(ids[2], 10).await.unwrap();
        let from_store: serde_json::Value =
            serde_json::from_str(Event::kept(kept[0].clone()).data()).unwrap();
        assert_eq!(from_store["id"], "sh-1");
        // A restarted server (a new hub over the same store) resumes from the same ids.
        drop(live);
        let again = stored_hub(&store);
        let mut resumed = again.subscribe(Filter::default(), Some(ids[0])).unwrap();
        assert_eq!(next_event(&mut resumed).await.id, ids[1]);
        assert_eq!(next_event(&mut resumed).await.id, ids[2]);
        again.publish("gateway.state", None, json!({ "i": 3 }));
        assert!(next_event(&mut resumed).await.id > ids[2]);
    }

    #[tokio::test]
    async fn an_event_too_large_to_keep_is_counted_and_does_not_sink_its_batch() {
        let store = Arc::new(MemoryBackend::new(MemoryOptions::default()));
        let hub = stored_hub(&store);
        let mut live = hub.subscribe(Filter::default(), None).unwrap();
        hub.publish("gateway.state", None, json!({ "n": 1 }));
        hub.publish(
            "gateway.state",
            None,
            json!({ "huge": "x".repeat(MAX_EVENT_BODY) }),
        );
        hub.publish("gateway.state", None, json!({ "n": 3 }));
        let first: serde_json::Value =
            serde_json::from_str(next_event(&mut live).await.data()).unwrap();
        let third: serde_json::Value =
            serde_json::from_str(next_event(&mut live).await.data()).unwrap();
        assert_eq!(
            (first["n"].as_u64(), third["n"].as_u64()),
            (Some(1), Some(3))
        );
        assert_eq!(hub.lost(), 1);
    }

    #[tokio::test]
    async fn events_of_another_node_are_delivered_once_in_order() {
        let store = Arc::new(MemoryBackend::new(MemoryOptions::default()));
        let other = Arc::new(store.node());
        let a = stored_hub(&store);
        let b = stored_hub(&other);
        let mut on_b = b.subscribe(Filter::default(), None).unwrap();
        a.publish("gateway.state", None, json!({ "from": "a" }));
        let first = next_event(&mut on_b).await;
        b.publish("gateway.state", None, json!({ "from": "b" }));
        a.publish("gateway.state", None, json!({ "from": "a2" }));
        let mut seen = vec![first];
        seen.push(next_event(&mut on_b).await);
        seen.push(next_event(&mut on_b).await);
        let ids: Vec<u64> = seen.iter().map(|e| e.id).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        let kept: Vec<u64> = store
            .events_after(0, 10)
            .await
            .unwrap()
            .iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(ids, kept, "each once, in the store's order");
    }

    #[tokio::test]
    async fn an_unknown_or_forgotten_last_event_id_is_announced() {
        let store = Arc::new(MemoryBackend::new(MemoryOptions::default()));
        let hub = stored_hub(&store);
        let mut live = hub.subscribe(Filter::default(), None).unwrap();
        for i in 0..5 {
            hub.publish("gateway.state", None, json!({ "i": i }));
        }
        let mut ids = Vec::new();
        for _ in 0..5 {
            ids.push(next_event(&mut live).await.id);
        }
        // From the future: nothing replayed, the stream goes on from now.
        let mut future = hub
            .subscribe(Filter::default(), Some(ids[4] + 1_000))
            .unwrap();
        match future.next().await {
            Some(Next::Notice("stream.gap", data)) => assert_eq!(data["reason"], "unknown_id"),
            _ => panic!("expected stream.gap unknown_id"),
        }
        hub.publish("gateway.state", None, json!({ "i": 5 }));
        assert!(next_event(&mut future).await.id > ids[4]);
        // Older than what is kept: told, then resumed from the oldest kept.
        store.prune_events(2).await.unwrap();
        let fresh = stored_hub(&Arc::new(store.node()));
        let mut old = fresh.subscribe(Filter::default(), Some(ids[0])).unwrap();
        match old.next().await {
            Some(Next::Notice("stream.gap", data)) => {
                assert_eq!(data["reason"], "too_old");
                assert_eq!(data["lastEventId"], ids[0].to_string());
            }
            _ => panic!("expected stream.gap too_old"),
        }
        assert_eq!(next_event(&mut old).await.id, ids[4]);
    }
}
