//! `GET /metrics`: the service's counters in the Prometheus text format (0.0.4).
//!
//! Each [`Core`](crate::Core) keeps its own recorder (never the process-global one: tests run several
//! servers in one process). The parts count through [`Metrics`]' typed methods; gauges that are
//! cheaper to read than to track (store size, approvals pending) are read at scrape time from
//! the sources parts register with [`Metrics::on_scrape`].
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `switchboard_calls_total` | counter | `tool`, `outcome` (`ok` or the error kind) |
//! | `switchboard_call_duration_seconds` | histogram | `tool` |
//! | `switchboard_permission_decisions_total` | counter | `decision` (`allow`, `ask`, `deny`) |
//! | `switchboard_approvals_pending` | gauge | |
//! | `switchboard_rate_limit_refusals_total` | counter | `code` |
//! | `switchboard_discord_requests_total` | counter | `method`, `route` (ids as `{id}`), `status` (`error`: no answer) |
//! | `switchboard_gateway_events_total` | counter | `type` |
//! | `switchboard_gateway_state` | gauge | `state` (1 for the current one) |
//! | `switchboard_store_messages`, `switchboard_store_sessions` | gauge | |
//! | `switchboard_store_queue_depth` | gauge | |
//! | `switchboard_store_queue_waits_total` | counter | |
//! | `switchboard_store_queue_wait_seconds_total` | counter | |
//! | `switchboard_agent_runs_total` | counter | `outcome` |
//! | `switchboard_agent_queue_depth` | gauge | |
//! | `switchboard_backfill_messages_total` | counter | |
//! | `switchboard_backfill_channels_pending` | gauge | |
//! | `switchboard_event_subscribers` | gauge | |
//! | `switchboard_event_subscribers_dropped_total` | counter | |
//! | `switchboard_events_lost_total` | counter | |

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use metrics::{Key, Label, Level, Metadata, Recorder, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusRecorder};

const CALLS: &str = "switchboard_calls_total";
const CALL_SECONDS: &str = "switchboard_call_duration_seconds";
const DECISIONS: &str = "switchboard_permission_decisions_total";
const APPROVALS_PENDING: &str = "switchboard_approvals_pending";
const RATE_LIMITED: &str = "switchboard_rate_limit_refusals_total";
const DISCORD_REQUESTS: &str = "switchboard_discord_requests_total";
const GATEWAY_EVENTS: &str = "switchboard_gateway_events_total";
const GATEWAY_STATE: &str = "switchboard_gateway_state";
const STORE_MESSAGES: &str = "switchboard_store_messages";
const STORE_SESSIONS: &str = "switchboard_store_sessions";
const STORE_QUEUE_DEPTH: &str = "switchboard_store_queue_depth";
const STORE_QUEUE_WAITS: &str = "switchboard_store_queue_waits_total";
/// Seconds are fractional and the recorder's counters whole, so this one is rendered here.
const STORE_QUEUE_WAIT_SECONDS: &str = "switchboard_store_queue_wait_seconds_total";
const RUNS: &str = "switchboard_agent_runs_total";
const QUEUE_DEPTH: &str = "switchboard_agent_queue_depth";
/// Messages a backfill fetched (the backfill sets it through [`Metrics::backfill_fetched`]).
pub const BACKFILL_MESSAGES: &str = "switchboard_backfill_messages_total";
/// Channels a backfill has yet to fetch ([`Metrics::set_backfill_pending`]).
pub const BACKFILL_PENDING: &str = "switchboard_backfill_channels_pending";
const SUBSCRIBERS: &str = "switchboard_event_subscribers";
const SUBSCRIBERS_DROPPED: &str = "switchboard_event_subscribers_dropped_total";
const EVENTS_LOST: &str = "switchboard_events_lost_total";

/// The gateway states `switchboard_gateway_state` reports.
const GATEWAY_STATES: [&str; 4] = ["connecting", "ready", "down", "none"];
/// Call latency buckets, in seconds: a call is a few ms here, Discord adds hundreds.
const LATENCY_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
];

static METADATA: Metadata<'static> = Metadata::new("switchboard", Level::INFO, None);

type Source = Box<dyn Fn(&Metrics) + Send + Sync>;

/// The service's counters and gauges, and their exposition.
pub struct Metrics {
    recorder: PrometheusRecorder,
    queue_depth: AtomicI64,
    sources: Mutex<Vec<Source>>,
    /// Running totals the console's sparklines sample (the recorder's own counters are per
    /// label set and not cheap to sum).
    calls: AtomicU64,
    failed_calls: AtomicU64,
    runs: AtomicU64,
    /// Seconds writers waited for room in the store's write queue; `None`
    /// until a store reports.
    store_waited: Mutex<Option<f64>>,
}

/// Running totals since start, for rates: see [`Metrics::totals`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Calls finished, every outcome.
    pub calls: u64,
    /// Calls that finished with an error.
    pub failed_calls: u64,
    /// Agent runs finished.
    pub runs: u64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A recorder with every metric described (so `# HELP` lines come out).
    pub fn new() -> Metrics {
        let builder = PrometheusBuilder::new();
        let builder = builder
            .set_buckets_for_metric(Matcher::Full(CALL_SECONDS.to_owned()), &LATENCY_BUCKETS)
            .unwrap_or_else(|_| PrometheusBuilder::new());
        let recorder = builder.build_recorder();
        let describe = [
            (
                CALLS,
                "Calls finished, by callable and outcome (ok, or the error kind).",
            ),
            (DECISIONS, "Permission decisions made by the rules."),
            (
                RATE_LIMITED,
                "Calls refused by a rate limit, by error code.",
            ),
            (
                DISCORD_REQUESTS,
                "Discord REST requests, by method, route and status (error: no answer).",
            ),
            (GATEWAY_EVENTS, "Gateway events applied, by type."),
            (RUNS, "Agent runs finished, by outcome."),
            (BACKFILL_MESSAGES, "Messages fetched by backfill."),
            (
                STORE_QUEUE_WAITS,
                "Times a writer waited for room in the store's full write queue.",
            ),
            (
                SUBSCRIBERS_DROPPED,
                "Event stream subscribers dropped for falling behind.",
            ),
            (
                EVENTS_LOST,
                "Events not kept in the store (its queue full, or an append failed); no subscriber sees them.",
            ),
        ];
        for (name, help) in describe {
            recorder.describe_counter(name.into(), None, help.into());
        }
        let gauges = [
            (
                APPROVALS_PENDING,
                "Approval requests waiting for an answer.",
            ),
            (
                GATEWAY_STATE,
                "1 for the gateway's current state, 0 for the others.",
            ),
            (STORE_MESSAGES, "Messages held in the store."),
            (
                STORE_SESSIONS,
                "Sessions (channels, threads, DMs) the store knows.",
            ),
            (QUEUE_DEPTH, "Agent runs waiting in the per-session queues."),
            (
                STORE_QUEUE_DEPTH,
                "Writes queued for the store's writer, not yet committed.",
            ),
            (BACKFILL_PENDING, "Channels a backfill has yet to fetch."),
            (SUBSCRIBERS, "Open event streams."),
        ];
        for (name, help) in gauges {
            recorder.describe_gauge(name.into(), None, help.into());
        }
        recorder.describe_histogram(
            CALL_SECONDS.into(),
            Some(Unit::Seconds),
            "Call latency through the whole pipeline, by callable.".into(),
        );
        Metrics {
            recorder,
            queue_depth: AtomicI64::new(0),
            sources: Mutex::new(Vec::new()),
            calls: AtomicU64::new(0),
            failed_calls: AtomicU64::new(0),
            runs: AtomicU64::new(0),
            store_waited: Mutex::new(None),
        }
    }

    fn counter(&self, name: &'static str, labels: Vec<Label>, by: u64) {
        self.recorder
            .register_counter(&Key::from_parts(name, labels), &METADATA)
            .increment(by);
    }

    fn gauge(&self, name: &'static str, labels: Vec<Label>, value: f64) {
        self.recorder
            .register_gauge(&Key::from_parts(name, labels), &METADATA)
            .set(value);
    }

    /// A call finished: `outcome` is `ok` or its error kind; `decision` the permission stage's
    /// (`-` when it was refused before); `code` its error code, if any.
    pub fn call_finished(
        &self,
        tool: &str,
        outcome: &'static str,
        decision: &'static str,
        code: Option<&str>,
        took: Duration,
    ) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if outcome != "ok" {
            self.failed_calls.fetch_add(1, Ordering::Relaxed);
        }
        self.counter(
            CALLS,
            vec![
                Label::new("tool", tool.to_owned()),
                Label::new("outcome", outcome),
            ],
            1,
        );
        self.recorder
            .register_histogram(
                &Key::from_parts(CALL_SECONDS, vec![Label::new("tool", tool.to_owned())]),
                &METADATA,
            )
            .record(took.as_secs_f64());
        if decision != "-" {
            self.counter(DECISIONS, vec![Label::new("decision", decision)], 1);
        }
        if let Some(code) = code.filter(|c| {
            matches!(
                *c,
                "rate_limited" | "channel_rate_limited" | "over_channel_burst"
            )
        }) {
            self.counter(RATE_LIMITED, vec![Label::new("code", code.to_owned())], 1);
        }
    }

    /// One Discord REST answer (`status` 0: none came, the request failed).
    pub fn discord_request(&self, method: &str, path: &str, status: u16) {
        let status = if status == 0 {
            "error".to_owned()
        } else {
            status.to_string()
        };
        self.counter(
            DISCORD_REQUESTS,
            vec![
                Label::new("method", method.to_owned()),
                Label::new("route", route_of(path)),
                Label::new("status", status),
            ],
            1,
        );
    }

    /// One gateway event applied; `kind` is Discord's name for it (`MESSAGE_CREATE`).
    pub fn gateway_event(&self, kind: &str) {
        // Discord's names are short upper-case words; anything else is one bucket, so a
        // strange payload cannot grow the label set.
        let kind = if kind.len() <= 40 && kind.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
        {
            kind.to_owned()
        } else {
            "OTHER".to_owned()
        };
        self.counter(GATEWAY_EVENTS, vec![Label::new("type", kind)], 1);
    }

    /// The gateway's state now (`connecting`, `ready`, `down`, `none`).
    pub fn gateway_state(&self, state: &str) {
        for known in GATEWAY_STATES {
            self.gauge(
                GATEWAY_STATE,
                vec![Label::new("state", known)],
                if known == state { 1.0 } else { 0.0 },
            );
        }
    }

    /// An agent run finished with `outcome` (`replied`, `no_reply`, `failed`, `aborted`).
    pub fn run_finished(&self, outcome: &'static str) {
        self.runs.fetch_add(1, Ordering::Relaxed);
        self.counter(RUNS, vec![Label::new("outcome", outcome)], 1);
    }

    /// Runs waiting in the agent's queues changed by `delta`.
    pub fn queue_depth_add(&self, delta: i64) {
        let now = self.queue_depth.fetch_add(delta, Ordering::Relaxed) + delta;
        self.gauge(QUEUE_DEPTH, Vec::new(), now.max(0) as f64);
    }

    /// Runs waiting in the agent's queues are `depth` (counted in the store: every node's).
    pub fn queue_depth_set(&self, depth: i64) {
        self.queue_depth.store(depth, Ordering::Relaxed);
        self.gauge(QUEUE_DEPTH, Vec::new(), depth.max(0) as f64);
    }

    /// Calls, failed calls and agent runs finished since start.
    pub fn totals(&self) -> Totals {
        Totals {
            calls: self.calls.load(Ordering::Relaxed),
            failed_calls: self.failed_calls.load(Ordering::Relaxed),
            runs: self.runs.load(Ordering::Relaxed),
        }
    }

    /// The store's size now.
    pub fn store_size(&self, messages: usize, sessions: usize) {
        self.gauge(STORE_MESSAGES, Vec::new(), messages as f64);
        self.gauge(STORE_SESSIONS, Vec::new(), sessions as f64);
    }

    /// The store's write queue: writes queued now, how often writers waited for room, and for
    /// how long in all (a full queue makes its writer wait; nothing is dropped).
    pub fn store_queue(&self, depth: usize, waits: u64, waited: Duration) {
        self.gauge(STORE_QUEUE_DEPTH, Vec::new(), depth as f64);
        self.recorder
            .register_counter(&Key::from_name(STORE_QUEUE_WAITS), &METADATA)
            .absolute(waits);
        *self
            .store_waited
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(waited.as_secs_f64());
    }

    /// A backfill fetched `count` more messages.
    pub fn backfill_fetched(&self, count: u64) {
        self.counter(BACKFILL_MESSAGES, Vec::new(), count);
    }

    /// Channels a backfill has yet to fetch.
    pub fn set_backfill_pending(&self, channels: usize) {
        self.gauge(BACKFILL_PENDING, Vec::new(), channels as f64);
    }

    /// Registers a gauge source run before each scrape (such as the store's size). At most a
    /// few dozen: each part registers once.
    pub fn on_scrape(&self, source: impl Fn(&Metrics) + Send + Sync + 'static) {
        let mut sources = self
            .sources
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if sources.len() < 64 {
            sources.push(Box::new(source));
        } else {
            tracing::warn!("too many metric sources registered; this one is ignored");
        }
    }

    /// The exposition text, after the scrape-time sources ran.
    pub fn render(&self) -> String {
        {
            let sources = self
                .sources
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for source in sources.iter() {
                source(self);
            }
        }
        let mut text = self.recorder.handle().render();
        let waited = *self
            .store_waited
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(seconds) = waited {
            use std::fmt::Write as _;
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            let _ = write!(
                text,
                "# HELP {STORE_QUEUE_WAIT_SECONDS} Seconds writers waited for room in the store's full write queue.\n# TYPE {STORE_QUEUE_WAIT_SECONDS} counter\n{STORE_QUEUE_WAIT_SECONDS} {seconds}\n"
            );
        }
        text
    }
}

/// A REST path as a bounded label: ids as `{id}`, a reaction's emoji as `{emoji}`, the query
/// dropped.
pub fn route_of(path: &str) -> String {
    let path = path.split('?').next().unwrap_or_default();
    let mut route = String::with_capacity(path.len());
    let mut after_reactions = false;
    for segment in path.split('/').filter(|s| !s.is_empty()).take(8) {
        route.push('/');
        if after_reactions && segment != "@me" {
            route.push_str("{emoji}");
            after_reactions = false;
            continue;
        }
        after_reactions = segment == "reactions";
        if segment.bytes().all(|b| b.is_ascii_digit()) {
            route.push_str("{id}");
        } else if segment.len() <= 32
            && segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'@'))
        {
            route.push_str(segment);
        } else {
            route.push_str("{other}");
        }
    }
    if route.is_empty() {
        route.push('/');
    }
    route
}

/// What `GET /metrics` shows besides the counters: gauges read from the core at scrape time
/// (`Core::exposition` reads them).
#[derive(Debug, Clone, Copy)]
pub struct Gauges<'a> {
    /// Approvals waiting for a decision.
    pub approvals_pending: usize,
    /// Event streams open now.
    pub subscribers: usize,
    /// Event streams dropped for falling behind, ever.
    pub subscribers_dropped: u64,
    /// Events lost on the way to the store, ever.
    pub events_lost: u64,
    /// The gateway's state (`connected`, `resuming`, ...).
    pub gateway_state: &'a str,
}

impl Metrics {
    /// The Prometheus exposition `GET /metrics` answers: every counter, with `gauges` as read
    /// now.
    pub fn exposition(&self, gauges: Gauges<'_>) -> String {
        self.gauge(
            APPROVALS_PENDING,
            Vec::new(),
            gauges.approvals_pending as f64,
        );
        self.gauge(SUBSCRIBERS, Vec::new(), gauges.subscribers as f64);
        self.recorder
            .register_counter(&Key::from_name(SUBSCRIBERS_DROPPED), &METADATA)
            .absolute(gauges.subscribers_dropped);
        self.recorder
            .register_counter(&Key::from_name(EVENTS_LOST), &METADATA)
            .absolute(gauges.events_lost);
        self.gateway_state(gauges.gateway_state);
        self.render()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_keep_their_shape_and_lose_their_ids() {
        assert_eq!(
            route_of("/channels/123/messages/456/reactions/%F0%9F%91%8D/@me"),
            "/channels/{id}/messages/{id}/reactions/{emoji}/@me"
        );
        assert_eq!(
            route_of("/channels/1/messages?limit=5"),
            "/channels/{id}/messages"
        );
        assert_eq!(route_of("/users/@me"), "/users/@me");
        assert_eq!(route_of(""), "/");
        assert_eq!(route_of("/x/%%%"), "/x/{other}");
    }

    #[test]
    fn counters_render_in_the_text_format() {
        let metrics = Metrics::new();
        metrics.call_finished(
            "surface.messages.send",
            "ok",
            "allow",
            None,
            Duration::from_millis(3),
        );
        metrics.call_finished(
            "surface.messages.send",
            "denied",
            "-",
            Some("rate_limited"),
            Duration::from_millis(1),
        );
        metrics.discord_request("POST", "/channels/9/messages", 200);
        metrics.gateway_event("MESSAGE_CREATE");
        metrics.gateway_event("weird\nname");
        let text = metrics.render();
        assert!(
            text.contains(
                "switchboard_calls_total{tool=\"surface.messages.send\",outcome=\"ok\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("switchboard_rate_limit_refusals_total{code=\"rate_limited\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("switchboard_call_duration_seconds_bucket"),
            "{text}"
        );
        assert!(text.contains("route=\"/channels/{id}/messages\""), "{text}");
        assert!(text.contains("type=\"OTHER\""), "{text}");
        assert!(
            text.contains("# TYPE switchboard_calls_total counter"),
            "{text}"
        );
    }
}
