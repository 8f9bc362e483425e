//! The live feed: `GET /v1/events` as Server-Sent Events.
//!
//! Every part publishes into one [`EventHub`] (the core's): the pipeline `call.finished` and
//! the approval events, the bot `message.*`, `gateway.state` and `workflow.*`, the agent
//! `run.*`. A subscriber gets what happened after it subscribed, filtered by type and session
//! and limited to the sessions its token may see. The operator console's page follows the same
//! hub through `/console/api/events` (its session cookie standing for the token:
//! `console/live.rs`), filtered by the same `caller_filter`.
//!
//! Bounds, so that no subscriber can grow memory: the last [`RING_CAPACITY`] events are kept
//! for `Last-Event-ID` resumption (an older id gets an explicit `stream.gap` event first); one
//! [`tokio::sync::broadcast`] channel of [`LAG_CAPACITY`] slots feeds every subscriber, and a
//! subscriber that falls that far behind is sent `stream.dropped` and closed (it may reconnect
//! with its last id); at most [`MAX_SUBSCRIBERS`] streams at once. A heartbeat comment keeps
//! idle proxies (and the server's own idle timeout) from closing a quiet stream.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use entity::Snowflake;
use protocol::{ErrorCode, ErrorKind};
use serde::Deserialize;
use serde_json::{json, Map, Value};
use tokio::sync::{broadcast, watch};

use crate::auth::Caller;
use crate::error::ToolError;
use crate::http::Authed;
use crate::server::Core;

/// Events kept for `Last-Event-ID` resumption.
pub const RING_CAPACITY: usize = 2048;
/// How far behind the newest event a subscriber may fall before it is dropped.
pub const LAG_CAPACITY: usize = 1024;
/// Streams served at once; more are refused with `busy` (503).
pub const MAX_SUBSCRIBERS: usize = 256;
/// The longest gap between two heartbeat comments (shorter when the idle timeout is).
const HEARTBEAT: Duration = Duration::from_secs(15);

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
/// event's own fields), serialized once for every subscriber.
#[derive(Debug)]
pub struct Event {
    /// Increasing; starts at the server's start time in microseconds, so ids of a restarted
    /// server are newer than any the last one gave.
    pub id: u64,
    /// `call.finished`, `message.created`, ...
    pub kind: Cow<'static, str>,
    /// The session it happened in, if any: what scopes and `?session=` filter on.
    pub session: Option<Snowflake>,
    data: Box<str>,
}

impl Event {
    /// The JSON object text subscribers receive.
    pub fn data(&self) -> &str {
        &self.data
    }

    fn is_message(&self) -> bool {
        self.kind.starts_with("message.")
    }
}

struct Ring {
    next_id: u64,
    events: VecDeque<Arc<Event>>,
}

/// Where events are published and subscribed to.
pub struct EventHub {
    ring: Mutex<Ring>,
    tx: broadcast::Sender<Arc<Event>>,
    closed: watch::Sender<bool>,
    subscribers: Arc<AtomicUsize>,
    dropped: AtomicU64,
    published: AtomicU64,
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
            }),
            tx,
            closed,
            subscribers: Arc::new(AtomicUsize::new(0)),
            dropped: AtomicU64::new(0),
            published: AtomicU64::new(0),
        }
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.ring
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Publishes an event of `kind` in `session` with `fields` (an object; anything else is
    /// kept under `value`). Returns its id.
    pub fn publish(
        &self,
        kind: impl Into<Cow<'static, str>>,
        session: Option<Snowflake>,
        fields: Value,
    ) -> u64 {
        let kind = kind.into();
        let mut ring = self.ring();
        let id = ring.next_id;
        ring.next_id += 1;
        let mut object = Map::with_capacity(8);
        object.insert("id".into(), Value::String(id.to_string()));
        object.insert("type".into(), Value::String(kind.to_string()));
        object.insert("time".into(), Value::from(crate::clock::now_ms()));
        object.insert(
            "session".into(),
            session.map_or(Value::Null, |s| Value::String(s.to_string())),
        );
        match fields {
            Value::Object(map) => object.extend(map),
            Value::Null => {}
            other => {
                object.insert("value".into(), other);
            }
        }
        let data = Value::Object(object).to_string().into_boxed_str();
        let event = Arc::new(Event {
            id,
            kind,
            session,
            data,
        });
        if ring.events.len() == RING_CAPACITY {
            ring.events.pop_front();
        }
        ring.events.push_back(Arc::clone(&event));
        // Sent under the lock, so subscribers see events in id order, and one that subscribes
        // (under the same lock) misses none between the ring and the channel.
        let _ = self.tx.send(event);
        self.published.fetch_add(1, Ordering::Relaxed);
        id
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

    /// A subscription from now, or — with `last_event_id` — from just after that event while
    /// the ring still holds what followed it (else from the oldest kept, after a `stream.gap`).
    pub fn subscribe(
        self: &Arc<Self>,
        filter: Filter,
        last_event_id: Option<u64>,
    ) -> Result<Subscription, ToolError> {
        let taken = self.subscribers.fetch_add(1, Ordering::AcqRel);
        let guard = Guard(Arc::clone(&self.subscribers));
        if taken >= MAX_SUBSCRIBERS {
            return Err(ToolError::new(
                ErrorKind::Unavailable,
                ErrorCode::Busy,
                format!(
                    "{MAX_SUBSCRIBERS} event streams are open already; close one, or retry shortly"
                ),
            )
            .with_retry_after(Duration::from_secs(5)));
        }
        let ring = self.ring();
        let rx = self.tx.subscribe();
        let mut notice = None;
        let mut backlog = VecDeque::new();
        let mut last_id = 0;
        if let Some(last) = last_event_id {
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
            closed: self.closed.subscribe(),
            last_id,
            ended: false,
            _guard: guard,
        })
    }
}

/// Counts a subscriber until dropped.
struct Guard(Arc<AtomicUsize>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
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
    /// Whether `message.*` events may be seen (the caller may read messages).
    pub messages: bool,
}

impl Filter {
    /// Whether `event` passes.
    pub fn matches(&self, event: &Event) -> bool {
        if event.is_message() && !self.messages {
            return false;
        }
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

/// A control event (no id, so a client's `Last-Event-ID` stays on the last real event).
pub(crate) fn control(kind: &'static str, data: &Value) -> SseEvent {
    SseEvent::default().event(kind).data(data.to_string())
}

/// One subscriber's stream.
pub struct Subscription {
    hub: Arc<EventHub>,
    backlog: VecDeque<Arc<Event>>,
    notice: Option<(&'static str, Value)>,
    rx: broadcast::Receiver<Arc<Event>>,
    filter: Filter,
    closed: watch::Receiver<bool>,
    last_id: u64,
    ended: bool,
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
    /// The next event for this subscriber; `None` once ended.
    pub async fn next(&mut self) -> Option<Next> {
        if self.ended {
            return None;
        }
        if let Some((kind, data)) = self.notice.take() {
            return Some(Next::Notice(kind, data));
        }
        while let Some(event) = self.backlog.pop_front() {
            if self.filter.matches(&event) {
                self.last_id = event.id;
                return Some(Next::Event(event));
            }
        }
        if *self.closed.borrow() {
            return Some(self.end_closed());
        }
        loop {
            tokio::select! {
                biased;
                changed = self.closed.changed() => {
                    if changed.is_err() || *self.closed.borrow() {
                        return Some(self.end_closed());
                    }
                }
                received = self.rx.recv() => match received {
                    Ok(event) => {
                        if event.id > self.last_id && self.filter.matches(&event) {
                            self.last_id = event.id;
                            return Some(Next::Event(event));
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

    fn end_closed(&mut self) -> Next {
        self.ended = true;
        Next::End(
            "stream.closed",
            json!({ "reason": "shutdown", "lastEventId": self.last_id.to_string() }),
        )
    }

    /// The subscription as SSE events.
    pub fn into_sse(self) -> impl futures_util::Stream<Item = Result<SseEvent, Infallible>> {
        futures_util::stream::unfold(self, |mut subscription| async move {
            let next = subscription.next().await?;
            Some((Ok(sse_event(next)), subscription))
        })
    }
}

/// `GET /v1/events` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct EventsQuery {
    /// Comma-separated type patterns.
    types: Option<String>,
    /// A session reference (`#ops`, `<#id>`, an id).
    session: Option<String>,
    /// For clients that cannot set the `Last-Event-ID` header.
    last_event_id: Option<String>,
}

fn parse_types(text: &str) -> Result<Vec<String>, ToolError> {
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

/// The filter a `caller` gets for `query`: a capability sees its own session only, message
/// events need the right to read messages, `types` and `session` narrow it. The same rules for
/// `/v1/events` and the console's relay.
pub(crate) fn caller_filter(
    core: &Core,
    caller: &Caller,
    query: &EventsQuery,
) -> Result<Filter, ToolError> {
    let scope_session = caller.capability().map(|c| c.grant.session_id);
    let session = match query.session.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(reference) => Some(
            entity::Mapper::new(core.settings().aliases(), core.surface.as_ref())
                .resolve_session(reference)
                .map_err(|error| {
                    ToolError::not_found(ErrorCode::UnknownSession, error.to_string())
                })?,
        ),
    };
    if let (Some(bound), Some(asked)) = (scope_session, session) {
        if bound != asked {
            return Err(ToolError::denied(
                ErrorCode::OutOfScope,
                format!("this capability token sees the events of session {bound} only"),
            ));
        }
    }
    let messages = matches!(caller, Caller::Operator | Caller::Unauthenticated)
        || core.may_call(caller, "surface.messages.read")
        || core.may_call(caller, "surface.messages.list");
    Ok(Filter {
        types: query
            .types
            .as_deref()
            .map(parse_types)
            .transpose()?
            .unwrap_or_default(),
        session,
        scope_session,
        messages,
    })
}

/// The query of an events route, or a typed error naming its parameters.
pub(crate) fn events_query(
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<EventsQuery, ToolError> {
    query.map(|Query(query)| query).map_err(|rejection| {
        ToolError::usage(
            ErrorCode::BadRequest,
            format!("{rejection}; the parameters are types, session and lastEventId"),
        )
    })
}

/// Where a client resumes: the `Last-Event-ID` header, else `?lastEventId=`.
pub(crate) fn resume_from(
    headers: &HeaderMap,
    query: &EventsQuery,
) -> Result<Option<u64>, ToolError> {
    match headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .or(query.last_event_id.as_deref())
        .filter(|v| !v.trim().is_empty())
    {
        Some(text) => Ok(Some(parse_last_id(text)?)),
        None => Ok(None),
    }
}

/// The gap between heartbeat comments: [`HEARTBEAT`], shorter when the connection's idle
/// timeout is.
pub(crate) fn heartbeat(core: &Core) -> Duration {
    HEARTBEAT
        .min(core.connection_limits.idle_timeout / 2)
        .max(Duration::from_millis(100))
}

/// One hub event as an SSE event (its id, type and data).
pub(crate) fn sse_event(next: Next) -> SseEvent {
    match next {
        Next::Event(event) => SseEvent::default()
            .id(event.id.to_string())
            .event(event.kind.as_ref())
            .data(event.data()),
        Next::Notice(kind, data) | Next::End(kind, data) => control(kind, &data),
    }
}

/// `GET /v1/events`: the SSE stream.
pub(crate) async fn stream(
    State(core): State<Arc<Core>>,
    Authed(context): Authed,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Response, ToolError> {
    let query = events_query(query)?;
    let filter = caller_filter(&core, &context.caller, &query)?;
    let last = resume_from(&headers, &query)?;
    let subscription = core.events.subscribe(filter, last)?;
    Ok(Sse::new(subscription.into_sse())
        .keep_alive(
            KeepAlive::new()
                .interval(heartbeat(&core))
                .text("heartbeat"),
        )
        .into_response())
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
        let first = hub.publish("gateway.state", None, json!({ "state": "ready" }));
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
            .map(|i| hub.publish("gateway.state", None, json!({ "i": i })))
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
            messages: true,
            ..Filter::default()
        };
        let seen: Vec<&str> = ring
            .events
            .iter()
            .filter(|e| scoped.matches(e))
            .map(|e| e.kind.as_ref())
            .collect();
        assert_eq!(seen, ["message.created", "gateway.state"]);
        let no_messages = Filter::default();
        assert_eq!(
            ring.events
                .iter()
                .filter(|e| no_messages.matches(e))
                .count(),
            2
        );
        let typed = Filter {
            types: vec!["call.*".into()],
            messages: true,
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
