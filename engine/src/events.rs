//! The live feed: `GET /v1/events` as Server-Sent Events.
//!
//! Every part publishes into one [`EventHub`] (the core's): the pipeline `call.finished` and
//! the approval events, the bot `message.*`, `gateway.state` and `workflow.*`, the agent
//! `run.*`. A subscriber gets what happened after it subscribed, filtered by type and session,
//! and only what it may read (`visibility.rs`): an event carrying a session's messages only
//! where the subscriber's read of them would pass scope, allowlist and rules; other callers'
//! `call.finished` and approvals only for the operator (or a token that may read the audit
//! log). A capability's stream ends when its token does (its run finished or was aborted, or it
//! expired). The operator console's page follows the same hub through `/console/api/events`
//! (its login cookie standing for the token: `console/live.rs`), filtered by the same
//! `visibility::caller_filter` and visibility, and ended when its login ends.
//!
//! Bounds, so that no subscriber can grow memory: the last [`RING_CAPACITY`] events are kept
//! for `Last-Event-ID` resumption (an older id gets an explicit `stream.gap` event first); one
//! [`tokio::sync::broadcast`] channel of [`LAG_CAPACITY`] slots feeds every subscriber, and a
//! subscriber that falls that far behind is sent `stream.dropped` and closed (it may reconnect
//! with its last id); at most [`MAX_SUBSCRIBERS`] streams at once, of them at most
//! [`MAX_STREAMS_PER_CALLER`] per caller other than the operator. A heartbeat comment keeps
//! idle proxies (and the server's own idle timeout) from closing a quiet stream.

/// The hub's store writer and follower: a part of the hub, kept in a file of its own.
mod stored;

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use entity::Snowflake;
use protocol::{ErrorCode, ErrorKind};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::sync::{broadcast, watch};

use crate::error::ToolError;

/// Events kept for `Last-Event-ID` resumption.
pub const RING_CAPACITY: usize = 2048;
/// How far behind the newest event a subscriber may fall before it is dropped.
pub const LAG_CAPACITY: usize = 1024;
/// Streams served at once; more are refused with `busy` (503).
pub const MAX_SUBSCRIBERS: usize = 256;
/// Streams one caller (a token, a run's capability) may hold at once; the operator is not
/// limited but by [`MAX_SUBSCRIBERS`].
pub const MAX_STREAMS_PER_CALLER: usize = 16;
/// The longest gap between two heartbeat comments (shorter when the idle timeout is).
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// Every event type, as `?types=` accepts them (a `prefix.*` pattern matches a family).
pub const EVENT_TYPES: &[&str] = &[
    "call.finished",
    "message.created",
    "message.edited",
    "message.deleted",
    "approval.requested",
    "approval.decided",
    "run.started",
    "run.finished",
    "workflow.waiting",
    "workflow.answered",
    "workflow.timed_out",
    "workflow.cancelled",
    "gateway.state",
    "context.pruned",
    "context.compacted",
];

/// What the parts outside the pipeline publish and count through (the bot, the agent): the
/// core's event hub and metrics, handed out by [`Core::observers`](crate::Core::observers).
#[derive(Clone)]
pub struct Observers {
    /// The live feed.
    pub events: Arc<EventHub>,
    /// The counters.
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// One published event. Its `data` is the JSON object sent (id, type, time, session and the
/// event's own fields), serialized once for every subscriber — on the first read, not at
/// publication: most events (every call's `call.finished`) are never read by anyone, and
/// building their JSON was a measurable share of a call (issue 22 §5). An event kept in the
/// store (`events/stored.rs`) is serialized by the hub's writer task, off the call's path.
pub struct Event {
    /// Increasing. The store's id once the core keeps its events in a store (the same on
    /// every node and after a restart); without one, it starts at the server's start time in
    /// microseconds, so ids of a restarted server are newer than any the last one gave.
    pub id: u64,
    /// `call.finished`, `message.created`, ...
    pub kind: Cow<'static, str>,
    /// The session it happened in, if any: what scopes and `?session=` filter on.
    pub session: Option<Snowflake>,
    /// Whose call it is about (`call.finished`, `approval.*`): the caller's key.
    pub caller: Option<Arc<str>>,
    /// When it was published, ms since the Unix epoch.
    pub(crate) time_ms: u64,
    fields: Fields,
    data: OnceLock<Box<str>>,
}

/// An event's own fields, as published: a JSON value, or a call's `call.finished` as its
/// parts (serialized straight to text when kept or read: no `Value` tree on every call).
pub(crate) enum Fields {
    Value(Value),
    Call(Box<CallFinished>),
}

/// `call.finished`'s own fields, published on every call ([`EventHub::publish_call_finished`]).
/// Its text is written once for the store's row and once more only if a subscriber reads it,
/// with the same keys, values and order as a `Value` object of the same fields would have.
#[derive(Debug, Clone)]
pub struct CallFinished {
    /// The tool called.
    pub tool: Cow<'static, str>,
    /// The caller's key.
    pub caller: Arc<str>,
    /// The run whose capability made the call, if any.
    pub run: Option<String>,
    /// The sessions it touched.
    pub sessions: Vec<Snowflake>,
    /// The model's tool-call id, if it gave one.
    pub tool_call_id: Option<String>,
    /// How the rules decided (`allow`, `ask`, ...).
    pub decision: &'static str,
    /// `ok` or the error's kind.
    pub outcome: &'static str,
    /// The error's code, when it failed.
    pub code: Option<String>,
    /// How long it took.
    pub duration_ms: u64,
}

/// A number written as a JSON string (ids and snowflakes are strings on the wire).
struct AsText<T>(T);

impl<T: std::fmt::Display> serde::Serialize for AsText<T> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

/// The sessions of a `call.finished`, as strings.
struct SessionsText<'a>(&'a [Snowflake]);

impl serde::Serialize for SessionsText<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(AsText))
    }
}

/// A `call.finished`'s whole object. The keys are in a `serde_json::Map`'s order (sorted), so
/// the text is byte for byte what the same event read back from the store renders
/// ([`Event::kept`]).
#[derive(serde::Serialize)]
struct CallFinishedText<'a> {
    caller: &'a str,
    code: Option<&'a str>,
    decision: &'a str,
    #[serde(rename = "durationMs")]
    duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<AsText<u64>>,
    outcome: &'a str,
    run: Option<&'a str>,
    session: Option<AsText<Snowflake>>,
    sessions: SessionsText<'a>,
    time: u64,
    tool: &'a str,
    #[serde(rename = "toolCallId")]
    tool_call_id: Option<&'a str>,
    #[serde(rename = "type")]
    kind: &'a str,
}

impl Event {
    /// The JSON object text subscribers receive (rendered once, on the first read).
    pub fn data(&self) -> &str {
        self.data.get_or_init(|| self.render())
    }

    fn render(&self) -> Box<str> {
        self.text(Some(self.id)).into_boxed_str()
    }

    /// The JSON object text the store keeps: everything sent but the hub's id, which the store
    /// gives (see [`Event::kept`]).
    pub(crate) fn body(&self) -> String {
        self.text(None)
    }

    /// The event's JSON object, with `id` when given.
    fn text(&self, id: Option<u64>) -> String {
        match &self.fields {
            Fields::Call(call) => {
                let text = CallFinishedText {
                    caller: &call.caller,
                    code: call.code.as_deref(),
                    decision: call.decision,
                    duration_ms: call.duration_ms,
                    id: id.map(AsText),
                    outcome: call.outcome,
                    run: call.run.as_deref(),
                    session: self.session.map(AsText),
                    sessions: SessionsText(&call.sessions),
                    time: self.time_ms,
                    tool: &call.tool,
                    tool_call_id: call.tool_call_id.as_deref(),
                    kind: &self.kind,
                };
                // Strings, numbers and nulls only: writing them to a `String` cannot fail.
                serde_json::to_string(&text).unwrap_or_default()
            }
            Fields::Value(fields) => {
                let mut object = self.object(fields);
                if let Some(id) = id {
                    with_id(&mut object, id);
                }
                Value::Object(object).to_string()
            }
        }
    }

    /// An event as published, before it has an id (the store's writer gives it one).
    pub(crate) fn unnumbered(
        kind: Cow<'static, str>,
        session: Option<Snowflake>,
        caller: Option<Arc<str>>,
        fields: Fields,
    ) -> Event {
        Event {
            id: 0,
            kind,
            session,
            caller,
            time_ms: crate::clock::now_ms(),
            fields,
            data: OnceLock::new(),
        }
    }

    /// An event read from the store: its data is the kept body with the store's id.
    pub(crate) fn kept(kept: switchboard_store::KeptEvent) -> Event {
        let row = kept.row;
        let data = match serde_json::from_str::<Map<String, Value>>(&row.body) {
            Ok(mut object) => {
                with_id(&mut object, kept.id);
                Value::Object(object).to_string()
            }
            // Not an object with fields (a row changed by hand): still a valid event.
            Err(_) => json!({ "id": kept.id.to_string(), "type": row.kind, "value": row.body })
                .to_string(),
        };
        Event {
            id: kept.id,
            kind: Cow::Owned(row.kind),
            session: row.session,
            caller: row.caller.map(Arc::from),
            time_ms: row.time_ms,
            fields: Fields::Value(Value::Null),
            data: OnceLock::from(data.into_boxed_str()),
        }
    }

    fn object(&self, fields: &Value) -> Map<String, Value> {
        let mut object = Map::new();
        object.insert("type".into(), Value::String(self.kind.to_string()));
        object.insert("time".into(), Value::from(self.time_ms));
        object.insert(
            "session".into(),
            self.session
                .map_or(Value::Null, |s| Value::String(s.to_string())),
        );
        match fields {
            Value::Object(map) => object.extend(map.clone()),
            Value::Null => {}
            other => {
                object.insert("value".into(), other.clone());
            }
        }
        object
    }
}

/// The event's id in its data, unless its own fields name one (a shell command's events carry
/// the command's `id`, as they always have); the SSE `id:` line is always the hub's.
fn with_id(object: &mut Map<String, Value>, id: u64) {
    object
        .entry("id")
        .or_insert_with(|| Value::String(id.to_string()));
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("session", &self.session)
            .field("caller", &self.caller)
            .field("data", &self.data())
            .finish()
    }
}

struct Ring {
    /// The next id without a store.
    next_id: u64,
    /// The newest events delivered, in id order: with a store, a contiguous run of its rows.
    events: VecDeque<Arc<Event>>,
    /// The newest id delivered (with a store, what is older is not delivered again).
    newest: u64,
}

/// Where events are published and subscribed to.
pub struct EventHub {
    ring: Mutex<Ring>,
    tx: broadcast::Sender<Arc<Event>>,
    closed: watch::Sender<bool>,
    subscribers: Arc<AtomicUsize>,
    /// Streams held per caller (not the operator's).
    per_caller: Arc<PerCaller>,
    dropped: AtomicU64,
    published: AtomicU64,
    /// Set once the core keeps its events in a store ([`EventHub::keep_in`]).
    stored: OnceLock<stored::Stored>,
    /// Events lost on the way to the store (its queue full, or an append failed).
    lost: AtomicU64,
}

impl Default for EventHub {
    fn default() -> Self {
        EventHub::new()
    }
}

impl EventHub {
    /// An empty hub.
    pub fn new() -> EventHub {
        let (tx, _) = broadcast::channel(LAG_CAPACITY);
        let (closed, _) = watch::channel(false);
        EventHub {
            ring: Mutex::new(Ring {
                next_id: crate::clock::now_micros().max(1),
                events: VecDeque::with_capacity(RING_CAPACITY),
                newest: 0,
            }),
            tx,
            closed,
            subscribers: Arc::new(AtomicUsize::new(0)),
            per_caller: Arc::default(),
            dropped: AtomicU64::new(0),
            published: AtomicU64::new(0),
            stored: OnceLock::new(),
            lost: AtomicU64::new(0),
        }
    }

    /// Keeps every event published from now on in `store` (its ids the store's), and — when
    /// `feed` says other nodes share the store — delivers theirs too. Needs a Tokio runtime
    /// (for the writer task); false when there is none or the hub keeps its events already.
    pub fn keep_in(
        self: &Arc<Self>,
        store: Arc<dyn switchboard_store::EventStore>,
        feed: &dyn switchboard_store::ChangeFeed,
    ) -> bool {
        stored::attach(self, store, feed)
    }

    pub(crate) fn stored(&self) -> Option<&stored::Stored> {
        self.stored.get()
    }

    /// Keeps events in a store from now on; what the ring held (numbered by this process,
    /// before the store was handed over) is forgotten, as its ids are not the store's.
    pub(crate) fn set_stored(&self, stored: stored::Stored) -> bool {
        if self.stored.set(stored).is_err() {
            return false;
        }
        let mut ring = self.ring();
        ring.events.clear();
        ring.newest = 0;
        true
    }

    pub(crate) fn closed_watch(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }

    /// Counts `n` events lost on the way to the store.
    pub(crate) fn count_lost(&self, n: u64) -> u64 {
        self.lost.fetch_add(n, Ordering::Relaxed) + n
    }

    /// Events lost on the way to the store since start: its queue was full, or an append
    /// failed (`switchboard_events_lost_total`).
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// Delivers events the store numbered, in id order, to the ring and every subscriber;
    /// any not newer than the newest delivered is skipped.
    pub(crate) fn deliver(&self, events: impl IntoIterator<Item = Event>) {
        let mut ring = self.ring();
        for event in events {
            if event.id <= ring.newest {
                continue;
            }
            ring.newest = event.id;
            let event = Arc::new(event);
            if ring.events.len() == RING_CAPACITY {
                ring.events.pop_front();
            }
            ring.events.push_back(Arc::clone(&event));
            let _ = self.tx.send(event);
        }
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.ring
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Publishes an event of `kind` in `session` with `fields` (an object; anything else is
    /// kept under `value`). Never waits: with a store, the event joins the writer's bounded
    /// queue (a full queue loses it, counted in [`EventHub::lost`]) and reaches subscribers
    /// once the store has given it its id.
    pub fn publish(
        &self,
        kind: impl Into<Cow<'static, str>>,
        session: Option<Snowflake>,
        fields: Value,
    ) {
        self.publish_about(kind, session, None, fields);
    }

    /// [`EventHub::publish`] for an event about one caller's call (`call.finished`,
    /// `approval.*`): other callers see it only when they may read every caller's calls.
    pub fn publish_about(
        &self,
        kind: impl Into<Cow<'static, str>>,
        session: Option<Snowflake>,
        caller: Option<&str>,
        fields: Value,
    ) {
        self.push(
            kind.into(),
            session,
            caller.map(Arc::from),
            Fields::Value(fields),
        );
    }

    /// Publishes a call's `call.finished` in `session` (its first target): its fields are kept
    /// as they are and written as text only for the store's row and when a subscriber reads it
    /// (now or replaying it from the ring), not as a `Value` on every call.
    pub fn publish_call_finished(&self, session: Option<Snowflake>, call: CallFinished) {
        let caller = Some(Arc::clone(&call.caller));
        self.push(
            Cow::Borrowed("call.finished"),
            session,
            caller,
            Fields::Call(Box::new(call)),
        );
    }

    fn push(
        &self,
        kind: Cow<'static, str>,
        session: Option<Snowflake>,
        caller: Option<Arc<str>>,
        fields: Fields,
    ) {
        if let Some(stored) = self.stored.get() {
            self.published.fetch_add(1, Ordering::Relaxed);
            stored.send(self, Event::unnumbered(kind, session, caller, fields));
            return;
        }
        let time_ms = crate::clock::now_ms();
        let mut ring = self.ring();
        let id = ring.next_id;
        ring.next_id += 1;
        ring.newest = id;
        let event = Arc::new(Event {
            id,
            kind,
            session,
            caller,
            time_ms,
            fields,
            data: OnceLock::new(),
        });
        if ring.events.len() == RING_CAPACITY {
            ring.events.pop_front();
        }
        ring.events.push_back(Arc::clone(&event));
        // Sent under the lock, so subscribers see events in id order, and one that subscribes
        // (under the same lock) misses none between the ring and the channel.
        let _ = self.tx.send(event);
        self.published.fetch_add(1, Ordering::Relaxed);
    }

    /// Streams being served now.
    pub fn subscribers(&self) -> usize {
        self.subscribers.load(Ordering::Relaxed)
    }

    /// Subscribers dropped for falling behind, since start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Events published since start (the console's event-rate sparkline).
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Relaxed)
    }

    /// The newest event's id (0 before any).
    pub fn last_id(&self) -> u64 {
        let ring = self.ring();
        ring.events.back().map_or(0, |e| e.id)
    }

    /// Ends every stream (with a `stream.closed` event): the server is shutting down.
    pub fn close(&self) {
        self.closed.send_replace(true);
    }

    /// Ends every stream once what was published so far has reached them (events kept in a
    /// store reach subscribers through the store's writer), or after `within` at the most.
    pub async fn close_when_delivered(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while let Some(stored) = self.stored.get() {
            if stored.caught_up() || tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.close();
    }

    /// A subscription to everything `filter` passes (the operator's), from now, or — with
    /// `last_event_id` — from just after that event while the ring still holds what followed
    /// it (else from the oldest kept, after a `stream.gap`).
    pub fn subscribe(
        self: &Arc<Self>,
        filter: Filter,
        last_event_id: Option<u64>,
    ) -> Result<Subscription, ToolError> {
        self.subscribe_as(filter, last_event_id, Subscriber::default())
    }

    /// [`EventHub::subscribe`] for `subscriber`: its caller's streams counted, only the events
    /// its audience admits, ended when its `until` resolves.
    pub fn subscribe_as(
        self: &Arc<Self>,
        filter: Filter,
        last_event_id: Option<u64>,
        subscriber: Subscriber,
    ) -> Result<Subscription, ToolError> {
        let taken = self.subscribers.fetch_add(1, Ordering::AcqRel);
        let guard = Guard {
            total: Arc::clone(&self.subscribers),
            caller: None,
        };
        if taken >= MAX_SUBSCRIBERS {
            return Err(busy(format!(
                "{MAX_SUBSCRIBERS} event streams are open already; close one, or retry shortly"
            )));
        }
        let mut guard = guard;
        if let Some(caller) = &subscriber.caller {
            {
                let mut held = lock(&self.per_caller);
                let count = held.entry(Arc::clone(caller)).or_insert(0);
                if *count >= MAX_STREAMS_PER_CALLER {
                    return Err(busy(format!(
                        "this token holds {MAX_STREAMS_PER_CALLER} event streams already, the most one caller may; close one (one stream carries every event type), or retry shortly"
                    )));
                }
                *count += 1;
            }
            guard.caller = Some((Arc::clone(&self.per_caller), Arc::clone(caller)));
        }
        let ring = self.ring();
        let rx = self.tx.subscribe();
        let mut notice = None;
        let mut backlog = VecDeque::new();
        let mut last_id = 0;
        let store = self.stored().map(|stored| Arc::clone(&stored.store));
        let mut resume = None;
        if let (Some(last), Some(_)) = (last_event_id, &store) {
            // With a store: from the ring when it holds what followed `last`, else from the
            // store (in `next`, which may wait).
            last_id = last;
            let covered = ring
                .events
                .front()
                .is_some_and(|front| front.id <= last.saturating_add(1) && last <= ring.newest);
            if covered {
                backlog.extend(ring.events.iter().filter(|e| e.id > last).cloned());
            } else {
                resume = Some(last);
            }
        } else if let Some(last) = last_event_id {
            let oldest = ring.events.front().map_or(ring.next_id, |e| e.id);
            last_id = last;
            if last.saturating_add(1) < oldest {
                notice = Some((
                    "stream.gap",
                    json!({
                        "reason": "too_old",
                        "lastEventId": last.to_string(),
                        "oldestKeptId": oldest.to_string(),
                        "message": format!("events after {last} up to {oldest} are no longer kept (the server keeps the last {RING_CAPACITY}, and forgets all on restart); resuming from the oldest kept"),
                    }),
                ));
                last_id = 0;
            }
            backlog.extend(ring.events.iter().filter(|e| e.id > last).cloned());
        }
        drop(ring);
        Ok(Subscription {
            hub: Arc::clone(self),
            backlog,
            notice,
            rx,
            filter,
            audience: subscriber.audience,
            checking: None,
            until: subscriber.until,
            closed: self.closed.subscribe(),
            last_id,
            seen: last_id,
            store,
            resume,
            paging: None,
            ended: false,
            delivered_until: None,
            _guard: guard,
        })
    }
}

/// `stream.gap` for events after `after` the store could not give.
fn unreadable(after: u64, err: &switchboard_store::StoreError) -> Next {
    Next::Notice(
        "stream.gap",
        json!({
            "reason": "unavailable",
            "lastEventId": after.to_string(),
            "message": format!("the events after {after} could not be read from the store ({err}); the stream goes on without them: reconnect later with Last-Event-ID {after} to get them"),
        }),
    )
}

/// No more streams now: `busy` (503), to retry in a few seconds.
fn busy(message: String) -> ToolError {
    ToolError::new(ErrorKind::Unavailable, ErrorCode::Busy, message)
        .with_retry_after(Duration::from_secs(5))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Streams held, by caller key.
type PerCaller = Mutex<HashMap<Arc<str>, usize>>;

/// Counts a subscriber (and its caller's streams) until dropped.
struct Guard {
    total: Arc<AtomicUsize>,
    caller: Option<(Arc<PerCaller>, Arc<str>)>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.total.fetch_sub(1, Ordering::AcqRel);
        if let Some((held, caller)) = &self.caller {
            let mut held = lock(held);
            if let Some(count) = held.get_mut(caller) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    held.remove(caller);
                }
            }
        }
    }
}

/// Whether one subscriber may see an event: now, or once a lookup answers.
pub enum Admit<'a> {
    /// Decided.
    Now(bool),
    /// Decided by this future (an allowlist lookup).
    Later(Pin<Box<dyn Future<Output = bool> + Send + 'a>>),
}

/// What a subscriber may read, beyond what its [`Filter`] asks for.
pub trait Audience: Send {
    /// Whether it may see `event` (which passed its filter).
    fn admits<'a>(&'a mut self, event: &'a Event) -> Admit<'a>;
}

/// Who subscribes, for [`EventHub::subscribe_as`]. The default is the operator: every event,
/// no per-caller count, no end.
#[derive(Default)]
pub struct Subscriber {
    /// The caller's key, whose streams are counted; `None`: not limited (the operator).
    pub caller: Option<Arc<str>>,
    /// What it may read; `None`: everything.
    pub audience: Option<Box<dyn Audience>>,
    /// Ends the stream when it resolves (its token ended), with the `stream.closed` data.
    pub until: Option<Pin<Box<dyn Future<Output = Value> + Send>>>,
}

/// Which events a subscriber gets.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Type patterns (`call.finished`, `message.*`); empty: every type.
    pub types: Vec<String>,
    /// Only this session's events (session-less ones such as `gateway.state` still pass).
    pub session: Option<Snowflake>,
    /// A capability's bound session: it sees nothing of other sessions.
    pub scope_session: Option<Snowflake>,
}

impl Filter {
    /// Whether `event` passes.
    pub fn matches(&self, event: &Event) -> bool {
        if !self.types.is_empty() && !self.types.iter().any(|t| type_matches(t, &event.kind)) {
            return false;
        }
        for wanted in [self.scope_session, self.session].into_iter().flatten() {
            if event.session.is_some_and(|s| s != wanted) {
                return false;
            }
            // Message events always have a session; others without one are global.
        }
        true
    }
}

fn type_matches(pattern: &str, kind: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => kind.starts_with(prefix),
        None => pattern == kind,
    }
}

/// One subscriber's stream.
pub struct Subscription {
    hub: Arc<EventHub>,
    backlog: VecDeque<Arc<Event>>,
    notice: Option<(&'static str, Value)>,
    rx: broadcast::Receiver<Arc<Event>>,
    filter: Filter,
    audience: Option<Box<dyn Audience>>,
    /// An event received and being checked against the audience (kept across a cancelled
    /// `next`, so none is lost).
    checking: Option<Arc<Event>>,
    until: Option<Pin<Box<dyn Future<Output = Value> + Send>>>,
    closed: watch::Receiver<bool>,
    last_id: u64,
    /// The newest id taken from the backlog or the channel, admitted or not: what the channel
    /// must not offer again.
    seen: u64,
    /// The hub's store, when it keeps its events in one.
    store: Option<Arc<dyn switchboard_store::EventStore>>,
    /// A `Last-Event-ID` the ring did not cover: resolved against the store first.
    resume: Option<u64>,
    /// Reading the store after this id, a page at a time, before the channel.
    paging: Option<u64>,
    ended: bool,
    /// Once the streams are closed: the newest id the hub had delivered then; only events up
    /// to it are still handed out, so a stream ends even while events keep coming.
    delivered_until: Option<u64>,
    _guard: Guard,
}

/// What a subscription yields next.
pub enum Next {
    /// An event that passed the filter.
    Event(Arc<Event>),
    /// `stream.gap`: what the client missed is no longer kept; the stream goes on.
    Notice(&'static str, Value),
    /// The stream is over: `stream.dropped` (too slow) or `stream.closed` (shutdown), with its
    /// data.
    End(&'static str, Value),
}

impl Subscription {
    /// Whether this subscriber gets `event`: its filter, then its audience.
    async fn admits(&mut self, event: &Event) -> bool {
        if !self.filter.matches(event) {
            return false;
        }
        match &mut self.audience {
            None => true,
            Some(audience) => match audience.admits(event) {
                Admit::Now(admitted) => admitted,
                Admit::Later(lookup) => lookup.await,
            },
        }
    }

    /// The event being checked when a `next` was cancelled, checked again; `Some` when it is
    /// admitted.
    async fn resume_check(&mut self) -> Option<Arc<Event>> {
        let event = self.checking.clone()?;
        let admitted = self.admits(&event).await;
        self.checking = None;
        self.seen = self.seen.max(event.id);
        admitted.then(|| {
            self.last_id = event.id;
            event
        })
    }

    /// The next event for this subscriber; `None` once ended. Cancel-safe: an event received
    /// but not yet checked is checked by the next call.
    pub async fn next(&mut self) -> Option<Next> {
        if self.ended {
            return None;
        }
        if let Some((kind, data)) = self.notice.take() {
            return Some(Next::Notice(kind, data));
        }
        if let Some(end) = self.until_ended() {
            return Some(end);
        }
        if let Some(event) = self.resume_check().await {
            return Some(Next::Event(event));
        }
        if let Some(notice) = self.resume_from_store().await {
            return Some(notice);
        }
        loop {
            while let Some(event) = self.backlog.pop_front() {
                self.checking = Some(event);
                if let Some(event) = self.resume_check().await {
                    return Some(Next::Event(event));
                }
            }
            match self.next_page().await {
                Some(Ok(())) => {}
                Some(Err(notice)) => return Some(notice),
                None => break,
            }
        }
        if *self.closed.borrow() {
            return Some(self.before_the_end().await);
        }
        loop {
            let until = async {
                match &mut self.until {
                    Some(until) => until.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                changed = self.closed.changed() => {
                    if changed.is_err() || *self.closed.borrow() {
                        return Some(self.before_the_end().await);
                    }
                }
                data = until => {
                    self.ended = true;
                    return Some(Next::End("stream.closed", self.with_last_id(data)));
                }
                received = self.rx.recv() => match received {
                    Ok(event) => {
                        if event.id > self.last_id && event.id > self.seen {
                            self.checking = Some(event);
                            if let Some(event) = self.resume_check().await {
                                return Some(Next::Event(event));
                            }
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        self.ended = true;
                        self.hub.dropped.fetch_add(1, Ordering::Relaxed);
                        return Some(Next::End("stream.dropped", json!({
                            "reason": "slow_consumer",
                            "missed": missed,
                            "lastEventId": self.last_id.to_string(),
                            "message": format!("this stream fell more than {LAG_CAPACITY} events behind and was closed; reconnect with Last-Event-ID to resume from what the server still keeps"),
                        })));
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
            }
        }
    }

    /// A `Last-Event-ID` the ring did not cover, checked against the store: a notice when
    /// events were missed or the id is not the store's; else the store is paged from it.
    /// Cancel-safe: nothing changes until the store has answered.
    async fn resume_from_store(&mut self) -> Option<Next> {
        let last = self.resume?;
        let store = Arc::clone(self.store.as_ref()?);
        let bounds = store.event_bounds().await;
        self.resume = None;
        let bounds = match bounds {
            Ok(bounds) => bounds,
            Err(err) => return Some(unreadable(last, &err)),
        };
        if last > bounds.newest {
            self.last_id = bounds.newest;
            self.seen = bounds.newest;
            return Some(Next::Notice(
                "stream.gap",
                json!({
                    "reason": "unknown_id",
                    "lastEventId": last.to_string(),
                    "newestId": bounds.newest.to_string(),
                    "message": format!("Last-Event-ID {last} is newer than any event this store has given (the newest is {}): it came from another store, or this one was emptied; nothing is replayed, the stream goes on from now", bounds.newest),
                }),
            ));
        }
        match bounds.oldest {
            Some(oldest) if last.saturating_add(1) < oldest => {
                let from = oldest - 1;
                self.last_id = from;
                self.seen = from;
                self.paging = Some(from);
                Some(Next::Notice(
                    "stream.gap",
                    json!({
                        "reason": "too_old",
                        "lastEventId": last.to_string(),
                        "oldestKeptId": oldest.to_string(),
                        "message": format!("events after {last} up to {oldest} are no longer kept (the store keeps the newest {}); resuming from the oldest kept", stored::EVENTS_KEPT),
                    }),
                ))
            }
            _ => {
                self.paging = Some(last);
                None
            }
        }
    }

    /// Reads the next page of the store into the backlog: `None` when not paging, an `Err`
    /// notice when the store could not be read. Cancel-safe like `resume_from_store`.
    async fn next_page(&mut self) -> Option<Result<(), Next>> {
        let after = self.paging?;
        let store = Arc::clone(self.store.as_ref()?);
        let page = store.events_after(after, stored::PAGE).await;
        match page {
            Ok(page) => {
                self.paging = match page.last() {
                    Some(last) if page.len() == stored::PAGE => Some(last.id),
                    _ => None,
                };
                self.backlog
                    .extend(page.into_iter().map(|kept| Arc::new(Event::kept(kept))));
                Some(Ok(()))
            }
            Err(err) => {
                self.paging = None;
                Some(Err(unreadable(after, &err)))
            }
        }
    }

    /// The server closed the streams: what reached this subscriber before that is still
    /// delivered, one event a call, then `stream.closed`.
    async fn before_the_end(&mut self) -> Next {
        let until = *self
            .delivered_until
            .get_or_insert_with(|| self.hub.last_id());
        while let Ok(event) = self.rx.try_recv() {
            if event.id > until {
                break;
            }
            if event.id > self.last_id && event.id > self.seen {
                self.checking = Some(event);
                if let Some(event) = self.resume_check().await {
                    return Next::Event(event);
                }
            }
        }
        self.end_closed()
    }

    fn end_closed(&mut self) -> Next {
        self.ended = true;
        Next::End(
            "stream.closed",
            json!({ "reason": "shutdown", "lastEventId": self.last_id.to_string() }),
        )
    }

    /// `data` with the stream's last event id.
    fn with_last_id(&self, mut data: Value) -> Value {
        if let Value::Object(map) = &mut data {
            map.insert("lastEventId".into(), json!(self.last_id.to_string()));
        }
        data
    }

    /// The end, when `until` has resolved already (checked without waiting).
    fn until_ended(&mut self) -> Option<Next> {
        let until = self.until.as_mut()?;
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match until.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(data) => {
                self.ended = true;
                Some(Next::End("stream.closed", self.with_last_id(data)))
            }
            std::task::Poll::Pending => None,
        }
    }
}

/// `GET /v1/events` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EventsQuery {
    /// Comma-separated type patterns.
    pub types: Option<String>,
    /// A session reference (`#ops`, `<#id>`, an id).
    pub session: Option<String>,
    /// For clients that cannot set the `Last-Event-ID` header.
    pub last_event_id: Option<String>,
}

pub(crate) fn parse_types(text: &str) -> Result<Vec<String>, ToolError> {
    let mut types = Vec::new();
    for pattern in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let known = match pattern.strip_suffix('*') {
            Some(prefix) => EVENT_TYPES.iter().any(|t| t.starts_with(prefix)),
            None => EVENT_TYPES.contains(&pattern),
        };
        if !known || types.len() >= EVENT_TYPES.len() {
            return Err(ToolError::usage(
                ErrorCode::BadRequest,
                format!(
                    "unknown event type '{pattern}'; types takes a comma-separated list of {} or a family such as message.*",
                    EVENT_TYPES.join(", ")
                ),
            ));
        }
        types.push(pattern.to_owned());
    }
    Ok(types)
}

fn parse_last_id(text: &str) -> Result<u64, ToolError> {
    text.trim().parse().map_err(|_| {
        ToolError::usage(
            ErrorCode::BadRequest,
            format!("Last-Event-ID '{text}' is not an event id (a number this server sent)"),
        )
    })
}

/// Where a client resumes: the `Last-Event-ID` header, else `?lastEventId=`.
pub fn resume_from(header: Option<&str>, query: &EventsQuery) -> Result<Option<u64>, ToolError> {
    match header
        .or(query.last_event_id.as_deref())
        .filter(|v| !v.trim().is_empty())
    {
        Some(text) => Ok(Some(parse_last_id(text)?)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(subscription: &mut Subscription) -> Vec<Arc<Event>> {
        let mut out = Vec::new();
        while let Some(event) = subscription.backlog.pop_front() {
            out.push(event);
        }
        out
    }

    #[test]
    fn the_ring_keeps_the_newest_and_ids_increase() {
        let hub = EventHub::new();
        hub.publish("gateway.state", None, json!({ "state": "ready" }));
        let first = hub.last_id();
        for _ in 0..RING_CAPACITY + 10 {
            hub.publish("gateway.state", None, json!({}));
        }
        let ring = hub.ring();
        assert_eq!(ring.events.len(), RING_CAPACITY);
        assert!(ring.events.front().unwrap().id > first);
        assert!(ring
            .events
            .iter()
            .zip(ring.events.iter().skip(1))
            .all(|(a, b)| b.id == a.id + 1));
    }

    #[test]
    fn resuming_replays_what_followed_or_says_there_is_a_gap() {
        let hub = Arc::new(EventHub::new());
        let ids: Vec<u64> = (0..5)
            .map(|i| {
                hub.publish("gateway.state", None, json!({ "i": i }));
                hub.last_id()
            })
            .collect();
        let mut resumed = hub.subscribe(Filter::default(), Some(ids[2])).unwrap();
        assert!(resumed.notice.is_none());
        let replayed: Vec<u64> = drain(&mut resumed).iter().map(|e| e.id).collect();
        assert_eq!(replayed, ids[3..].to_vec());
        let mut old = hub
            .subscribe(Filter::default(), Some(ids[0] - 100))
            .unwrap();
        assert!(old.notice.is_some(), "a gap is announced");
        assert_eq!(drain(&mut old).len(), 5);
    }

    fn a_call_finished() -> CallFinished {
        CallFinished {
            tool: Cow::Borrowed("surface.messages.list"),
            caller: Arc::from("operator"),
            run: None,
            sessions: vec![Snowflake(7), Snowflake(8)],
            tool_call_id: Some("call \"1\" é\n".into()),
            decision: "allow",
            outcome: "ok",
            code: None,
            duration_ms: 3,
        }
    }

    #[test]
    fn call_finished_is_rendered_on_the_first_read_once_and_replayed_alike() {
        let hub = Arc::new(EventHub::new());
        hub.publish_call_finished(Some(Snowflake(7)), a_call_finished());
        let id = hub.last_id();
        assert!(
            hub.ring().events.back().unwrap().data.get().is_none(),
            "nobody has read it yet"
        );
        let mut live = hub.subscribe(Filter::default(), Some(id - 1)).unwrap();
        let mut replayed = hub.subscribe(Filter::default(), Some(id - 1)).unwrap();
        let (live, replayed) = (drain(&mut live), drain(&mut replayed));
        let data: Value = serde_json::from_str(live[0].data()).unwrap();
        assert_eq!(data["id"], id.to_string());
        assert_eq!(data["type"], "call.finished");
        assert_eq!(data["session"], "7");
        assert_eq!(data["sessions"], json!(["7", "8"]));
        assert_eq!(data["tool"], "surface.messages.list");
        assert_eq!(data["caller"], "operator");
        assert_eq!(data["toolCallId"], "call \"1\" é\n");
        assert_eq!(data["durationMs"], 3);
        assert!(data["time"].as_u64().is_some_and(|t| t > 0));
        assert!(
            std::ptr::eq(replayed[0].data(), live[0].data()),
            "rendered once for every reader"
        );
        assert_eq!(live[0].caller.as_deref(), Some("operator"));
    }

    #[test]
    fn call_finished_reads_as_the_same_fields_published_as_json_and_read_back_from_the_store() {
        let call = a_call_finished();
        let compact = Event::unnumbered(
            Cow::Borrowed("call.finished"),
            Some(Snowflake(7)),
            Some(Arc::clone(&call.caller)),
            Fields::Call(Box::new(call)),
        );
        let mut as_json = Event::unnumbered(
            Cow::Borrowed("call.finished"),
            Some(Snowflake(7)),
            Some(Arc::from("operator")),
            Fields::Value(json!({
                "tool": "surface.messages.list",
                "caller": "operator",
                "run": null,
                "sessions": ["7", "8"],
                "toolCallId": "call \"1\" é\n",
                "decision": "allow",
                "outcome": "ok",
                "code": null,
                "durationMs": 3,
            })),
        );
        as_json.time_ms = compact.time_ms;
        assert_eq!(compact.body(), as_json.body(), "the store's row");
        let read_back = Event::kept(switchboard_store::KeptEvent {
            id: 42,
            row: switchboard_store::EventRow {
                kind: "call.finished".into(),
                session: Some(Snowflake(7)),
                caller: Some("operator".into()),
                time_ms: compact.time_ms,
                body: compact.body(),
            },
        });
        let mut compact = compact;
        compact.id = 42;
        as_json.id = 42;
        assert_eq!(compact.data(), as_json.data(), "what subscribers read");
        assert_eq!(
            compact.data(),
            read_back.data(),
            "live and from the store alike"
        );
    }

    #[test]
    fn filters_keep_scope_and_types() {
        let hub = EventHub::new();
        hub.publish("message.created", Some(Snowflake(1)), json!({}));
        hub.publish("message.created", Some(Snowflake(2)), json!({}));
        hub.publish("gateway.state", None, json!({}));
        hub.publish("call.finished", Some(Snowflake(2)), json!({}));
        let ring = hub.ring();
        let scoped = Filter {
            scope_session: Some(Snowflake(1)),
            ..Filter::default()
        };
        let seen: Vec<&str> = ring
            .events
            .iter()
            .filter(|e| scoped.matches(e))
            .map(|e| e.kind.as_ref())
            .collect();
        assert_eq!(seen, ["message.created", "gateway.state"]);
        let typed = Filter {
            types: vec!["call.*".into()],
            ..Filter::default()
        };
        assert_eq!(ring.events.iter().filter(|e| typed.matches(e)).count(), 1);
    }

    #[test]
    fn unknown_types_and_ids_are_refused() {
        assert!(parse_types("message.*,call.finished").is_ok());
        assert!(parse_types("nope").is_err());
        assert!(parse_types("x*").is_err());
        assert!(parse_last_id("12x").is_err());
    }

    #[tokio::test]
    async fn a_slow_subscriber_is_dropped_not_buffered() {
        let hub = Arc::new(EventHub::new());
        let mut slow = hub.subscribe(Filter::default(), None).unwrap();
        for _ in 0..LAG_CAPACITY + 5 {
            hub.publish("gateway.state", None, json!({}));
        }
        match slow.next().await {
            Some(Next::End(kind, _)) => assert_eq!(kind, "stream.dropped"),
            _ => panic!("expected the slow subscriber to be dropped"),
        }
        assert!(slow.next().await.is_none());
        assert_eq!(hub.dropped(), 1);
        drop(slow);
        assert_eq!(hub.subscribers(), 0);
    }

    #[tokio::test]
    async fn closing_the_hub_ends_every_stream() {
        let hub = Arc::new(EventHub::new());
        let mut subscription = hub.subscribe(Filter::default(), None).unwrap();
        hub.close();
        match subscription.next().await {
            Some(Next::End(kind, _)) => assert_eq!(kind, "stream.closed"),
            _ => panic!("expected stream.closed"),
        }
    }

    #[test]
    fn subscribers_are_capped() {
        let hub = Arc::new(EventHub::new());
        let held: Vec<_> = (0..MAX_SUBSCRIBERS)
            .map(|_| hub.subscribe(Filter::default(), None).unwrap())
            .collect();
        assert!(hub.subscribe(Filter::default(), None).is_err());
        drop(held);
        assert!(hub.subscribe(Filter::default(), None).is_ok());
    }
}
