//! Discord's rate limits, followed so that a request waits for its bucket instead of earning
//! a 429.
//!
//! - Each request belongs to a route ([`Route`]: method, template, major parameters). The
//!   first answer's `X-RateLimit-Bucket` names the route's bucket; the bucket is kept per that
//!   name and the route's major parameters, so routes Discord groups share one.
//! - One request per bucket is in flight at a time (waiting for the bucket is its queue). Before
//!   it goes, a bucket whose `X-RateLimit-Remaining` reached 0 waits for its
//!   `X-RateLimit-Reset-After`; the answer's headers then set the next request's gate.
//! - At most [`GLOBAL_PER_SECOND`] requests start in any second, all buckets together
//!   (interaction callbacks and follow-ups excepted, as Discord exempts them).
//! - A 429 that happens anyway is honoured (its bucket, or every bucket when `global`, waits
//!   its `retry_after`) and counted; a global 429 never touches the route's bucket, whatever
//!   route headers came with it. A request made outside this client (serenity's `GET
//!   /gateway`) holds a global slot ([`Limiter::hold_global`]) so it counts too; 401, 403 and 429s that are not `shared` feed the
//!   [`InvalidGuard`].
//! - Garbage in the headers (negative, NaN, unparseable) never hangs the client: the bucket
//!   waits [`GARBAGE_BACKOFF`] and tries again with one request. No wait is longer than
//!   [`MAX_WAIT`]: a longer one fails at once with `rate_limited` and its retry-after.
//!
//! Every map here is bounded: idle buckets are dropped past [`MAX_BUCKETS`], route mappings
//! past [`MAX_ROUTES`], and a bucket queues at most [`MAX_QUEUED`] requests.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;
use switchboard_engine::headroom::{
    BucketHeadroom, GlobalHeadroom, InvalidHeadroom, RateHeadroom, MAX_BUCKETS_SHOWN,
};
use switchboard_engine::surface::SurfaceError;
use tokio::time::Instant;

use super::invalid::{Blocked, InvalidGuard};
use super::route::Route;

/// Discord's global limit for a bot: requests per second across every bucket.
pub const GLOBAL_PER_SECOND: u32 = 50;
/// The longest a request sleeps for one bucket reset or global pause. A longer wait fails at
/// once with `rate_limited` and its retry-after, so no call sits past the tool server's
/// default 30 s timeout.
pub const MAX_WAIT: Duration = Duration::from_secs(30);
/// The longest reset or `retry_after` believed; longer values are cut to it (Discord's
/// longest per-route windows are minutes; an hour is its ban).
pub const RESET_CAP: Duration = Duration::from_secs(3600);
/// How long a bucket waits after an answer whose rate-limit headers were garbage, or a 429
/// without a usable `retry_after`.
pub const GARBAGE_BACKOFF: Duration = Duration::from_secs(1);
/// Buckets tracked before idle ones are dropped.
pub const MAX_BUCKETS: usize = 2048;
/// Route → bucket mappings kept before unused ones are dropped.
pub const MAX_ROUTES: usize = 4096;
/// Requests that may wait for one bucket; more are refused with `rate_limited` at once.
pub const MAX_QUEUED: usize = 256;
/// How often a request follows its route to a bucket discovered while it waited.
const REMAP_ROUNDS: usize = 3;
/// Longest bucket name accepted from `X-RateLimit-Bucket` (Discord's are 32 hex digits).
const MAX_BUCKET_NAME: usize = 128;

/// What a 429 said about its scope (`X-RateLimit-Scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The bot's own per-route limit.
    User,
    /// The bot's global limit.
    Global,
    /// A limit shared with others (not counted as an invalid request).
    Shared,
}

/// An `X-RateLimit-*` header that is present but not what Discord sends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("header {name} is not {expected}: {value:?}")]
pub struct HeaderError {
    /// The header.
    pub name: &'static str,
    /// What it should hold.
    pub expected: &'static str,
    /// What it held (cut to 64 characters).
    pub value: String,
}

/// What an answer's rate-limit headers say; absent headers are `None`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RateHeaders {
    /// `X-RateLimit-Bucket`: the bucket's opaque name.
    pub bucket: Option<String>,
    /// `X-RateLimit-Limit`.
    pub limit: Option<u32>,
    /// `X-RateLimit-Remaining`.
    pub remaining: Option<u32>,
    /// `X-RateLimit-Reset-After`, cut to [`RESET_CAP`].
    pub reset_after: Option<Duration>,
    /// `X-RateLimit-Global: true`.
    pub global: bool,
    /// `X-RateLimit-Scope`.
    pub scope: Option<Scope>,
}

/// Seconds as Discord writes them (`1`, `0.25`, `64.57`): finite and not negative, cut to
/// [`RESET_CAP`]; `None` for anything else.
pub fn seconds(text: &str) -> Option<Duration> {
    let value: f64 = text.trim().parse().ok()?;
    seconds_f64(value)
}

/// As [`seconds`], from a number.
pub fn seconds_f64(value: f64) -> Option<Duration> {
    (value.is_finite() && value >= 0.0)
        .then(|| Duration::from_secs_f64(value.min(RESET_CAP.as_secs_f64())))
}

fn garbage(name: &'static str, expected: &'static str, value: &str) -> HeaderError {
    HeaderError {
        name,
        expected,
        value: value.chars().take(64).collect(),
    }
}

impl RateHeaders {
    /// Reads the rate-limit headers of an answer.
    pub fn parse(headers: &HeaderMap) -> Result<RateHeaders, HeaderError> {
        let text = |name: &'static str| -> Result<Option<&str>, HeaderError> {
            match headers.get(name) {
                None => Ok(None),
                Some(value) => value
                    .to_str()
                    .map(|v| Some(v.trim()))
                    .map_err(|_| garbage(name, "ASCII text", "(not ASCII)")),
            }
        };
        let count = |name: &'static str| -> Result<Option<u32>, HeaderError> {
            text(name)?
                .map(|v| {
                    v.parse::<u32>()
                        .map_err(|_| garbage(name, "a whole number", v))
                })
                .transpose()
        };
        let bucket = match text("x-ratelimit-bucket")? {
            Some(name)
                if name.is_empty()
                    || name.len() > MAX_BUCKET_NAME
                    || !name.bytes().all(|b| b.is_ascii_graphic()) =>
            {
                return Err(garbage("x-ratelimit-bucket", "a short opaque name", name));
            }
            other => other.map(str::to_owned),
        };
        let reset_after = text("x-ratelimit-reset-after")?
            .map(|v| {
                seconds(v)
                    .ok_or_else(|| garbage("x-ratelimit-reset-after", "seconds, 0 or more", v))
            })
            .transpose()?;
        let scope = match text("x-ratelimit-scope")? {
            Some(v) if v.eq_ignore_ascii_case("shared") => Some(Scope::Shared),
            Some(v) if v.eq_ignore_ascii_case("global") => Some(Scope::Global),
            Some(_) => Some(Scope::User),
            None => None,
        };
        Ok(RateHeaders {
            bucket,
            limit: count("x-ratelimit-limit")?,
            remaining: count("x-ratelimit-remaining")?,
            reset_after,
            global: text("x-ratelimit-global")?.is_some_and(|v| v.eq_ignore_ascii_case("true")),
            scope,
        })
    }
}

/// How long a 429 asks to wait: the body's `retry_after`, else the `Retry-After` header, else
/// [`GARBAGE_BACKOFF`]; cut to [`RESET_CAP`].
pub fn retry_after_of(headers: &HeaderMap, body: &Value) -> Duration {
    body.get("retry_after")
        .and_then(Value::as_f64)
        .and_then(seconds_f64)
        .or_else(|| {
            headers
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(seconds)
        })
        .unwrap_or(GARBAGE_BACKOFF)
}

/// One bucket's gate: how many requests its window has left and when it resets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BucketState {
    limit: Option<u32>,
    /// `None` until an answer said.
    remaining: Option<u32>,
    reset_at: Option<Instant>,
}

impl BucketState {
    /// How long the next request must wait at `now` (zero: it may go).
    pub fn wait(&self, now: Instant) -> Duration {
        match (self.remaining, self.reset_at) {
            (Some(0), Some(reset)) => reset.saturating_duration_since(now),
            _ => Duration::ZERO,
        }
    }

    /// Counts a request that goes at `now` (after [`BucketState::wait`] said zero).
    pub fn spend(&mut self, now: Instant) {
        if self.reset_at.is_some_and(|reset| reset <= now) {
            self.reset_at = None;
            self.remaining = self.limit;
        }
        if let Some(remaining) = &mut self.remaining {
            *remaining = remaining.saturating_sub(1);
        }
    }

    /// Gives back the request [`BucketState::spend`] counted when its answer says the route never
    /// counted it (a global 429 refuses a request before its route's bucket sees it): without
    /// this, every globally refused retry would eat the route's window until it waited a reset
    /// Discord never asked for.
    pub fn refund(&mut self, now: Instant) {
        if self.reset_at.is_some_and(|reset| reset <= now) {
            return;
        }
        if let Some(remaining) = &mut self.remaining {
            if self.limit.is_none_or(|limit| *remaining < limit) {
                *remaining += 1;
            }
        }
    }

    /// Takes in what an answer received at `now` said.
    pub fn update(&mut self, headers: &RateHeaders, now: Instant) {
        if headers.limit.is_some() {
            self.limit = headers.limit;
        }
        match (headers.remaining, headers.reset_after) {
            (Some(remaining), Some(reset_after)) => {
                self.remaining = Some(remaining);
                self.reset_at = Some(now + reset_after);
            }
            // Exhausted with no reset given: wait a conservative while, never forever.
            (Some(0), None) => self.exhaust(now + GARBAGE_BACKOFF),
            (Some(remaining), None) => self.remaining = Some(remaining),
            (None, _) => {}
        }
    }

    /// What is left at `now`: `(limit, remaining, reset after)`, the window counted as reset
    /// once its reset passed.
    pub fn left(&self, now: Instant) -> (Option<u32>, Option<u32>, Option<Duration>) {
        match self.reset_at {
            Some(reset) if reset <= now => (self.limit, self.limit, None),
            Some(reset) => (self.limit, self.remaining, Some(reset - now)),
            None => (self.limit, self.remaining, None),
        }
    }

    /// No request before `until` (a 429's `retry_after`, or a garbage answer's backoff).
    pub fn exhaust(&mut self, until: Instant) {
        self.remaining = Some(0);
        self.reset_at = Some(self.reset_at.map_or(until, |reset| reset.max(until)));
    }
}

/// The global limit. Discord counts a request when it arrives, somewhere between when we sent
/// it and when its answer came back; so a request holds its slot while in flight and for a
/// second after its answer (never less than Discord's own second). Plus a pause after a global
/// 429.
#[derive(Debug)]
pub struct GlobalWindow {
    per_second: u32,
    /// Requests sent and not yet answered.
    in_flight: u32,
    /// When answers came within the last second, oldest first; with `in_flight`, at most
    /// `per_second`.
    recent: VecDeque<Instant>,
    paused_until: Option<Instant>,
}

/// How long a request waits before asking again when every global slot is in flight (their
/// answers free the slots a second later, at the earliest).
pub const IN_FLIGHT_POLL: Duration = Duration::from_millis(25);

impl GlobalWindow {
    /// At most `per_second` (at least 1) requests in any second.
    pub fn new(per_second: u32) -> GlobalWindow {
        let per_second = per_second.max(1);
        GlobalWindow {
            per_second,
            in_flight: 0,
            recent: VecDeque::with_capacity(per_second as usize),
            paused_until: None,
        }
    }

    /// Takes a slot at `now` and answers zero (the request goes, and must
    /// [`GlobalWindow::release`] its slot when answered), or answers how long to wait before
    /// asking again.
    pub fn take(&mut self, now: Instant) -> Duration {
        if let Some(until) = self.paused_until {
            if until > now {
                return until - now;
            }
            self.paused_until = None;
        }
        let second = Duration::from_secs(1);
        while self.recent.front().is_some_and(|&at| at + second <= now) {
            self.recent.pop_front();
        }
        if (self.in_flight as usize + self.recent.len()) < self.per_second as usize {
            self.in_flight += 1;
            return Duration::ZERO;
        }
        match self.recent.front() {
            Some(&oldest) => (oldest + second).saturating_duration_since(now),
            None => IN_FLIGHT_POLL,
        }
    }

    /// The request that took a slot was answered (or abandoned) at `now`: its slot frees a
    /// second later.
    pub fn release(&mut self, now: Instant) {
        if self.in_flight == 0 {
            return;
        }
        self.in_flight -= 1;
        if self.recent.len() >= self.per_second as usize {
            self.recent.pop_front();
        }
        self.recent.push_back(now);
    }

    /// At most `per_second` (at least 1) requests in any second from now on (slots already
    /// taken still count).
    pub fn set_per_second(&mut self, per_second: u32) {
        self.per_second = per_second.max(1);
    }

    /// No request before `until` (a global 429).
    pub fn pause(&mut self, until: Instant) {
        self.paused_until = Some(self.paused_until.map_or(until, |p| p.max(until)));
    }

    /// The slots taken at `now` (in flight, or answered within the last second), and how
    /// long a global pause still lasts.
    pub fn headroom(&self, now: Instant) -> GlobalHeadroom {
        let second = Duration::from_secs(1);
        let recent = self.recent.iter().filter(|&&at| at + second > now).count() as u32;
        GlobalHeadroom {
            limit: self.per_second,
            used: (self.in_flight + recent).min(self.per_second),
            paused_for_ms: self.paused_until.map_or(0, |until| {
                until.saturating_duration_since(now).as_millis() as u64
            }),
        }
    }
}

/// A global slot held by a request in flight; released (a second's hold starts) when dropped.
struct GlobalSlot(Arc<Mutex<GlobalWindow>>);

impl Drop for GlobalSlot {
    fn drop(&mut self) {
        lock(&self.0).release(Instant::now());
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One bucket: its gate, and its queue (the turn one request holds while in flight).
#[derive(Debug, Default)]
struct Bucket {
    turn: Arc<tokio::sync::Mutex<()>>,
    state: Mutex<BucketState>,
    /// Requests waiting for or holding the turn; a bucket with none may be dropped.
    queued: AtomicUsize,
    /// The label of the route that made it (tokens left out), for the console.
    route: String,
}

impl Bucket {
    fn state(&self) -> MutexGuard<'_, BucketState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn idle(&self, now: Instant) -> bool {
        self.queued.load(Ordering::Acquire) == 0 && self.state().wait(now).is_zero()
    }

    fn headroom(&self, now: Instant) -> BucketHeadroom {
        let (limit, remaining, reset_after) = self.state().left(now);
        BucketHeadroom {
            route: self.route.clone(),
            limit,
            remaining,
            reset_after_ms: reset_after.map(|d| d.as_millis() as u64),
            waiting: self.queued.load(Ordering::Acquire),
        }
    }
}

/// Counts one waiting-or-running request on a bucket for as long as it lives.
struct Queued(Arc<Bucket>);

impl Drop for Queued {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A request's place: it holds its bucket's turn until dropped (after
/// [`Limiter::complete`], or when its call is cancelled).
pub struct Ticket {
    bucket_id: String,
    queued: Queued,
    _turn: tokio::sync::OwnedMutexGuard<()>,
    /// `None` for routes outside the global limit.
    _global: Option<GlobalSlot>,
}

#[derive(Debug)]
struct Inner {
    /// Route key → the bucket Discord named for it, and when it was last used.
    routes: HashMap<String, (String, Instant)>,
    /// Bucket id → bucket. Ids are `route KEY` until Discord names the bucket, then
    /// `NAME|MAJOR`.
    buckets: HashMap<String, Arc<Bucket>>,
}

impl Inner {
    fn bucket_id(&self, route: &Route) -> String {
        match self.routes.get(&route.key) {
            Some((id, _)) => id.clone(),
            None => format!("route {}", route.key),
        }
    }

    fn bucket(&mut self, id: &str, route: &Route, now: Instant) -> Arc<Bucket> {
        if let Some(bucket) = self.buckets.get(id) {
            return Arc::clone(bucket);
        }
        if self.buckets.len() >= MAX_BUCKETS {
            self.buckets.retain(|_, bucket| !bucket.idle(now));
            if self.buckets.len() >= MAX_BUCKETS {
                // Only waiting buckets are left: forget those no request is queued on (at worst
                // one of them earns a 429, which is honoured).
                self.buckets
                    .retain(|_, bucket| bucket.queued.load(Ordering::Acquire) > 0);
            }
        }
        let bucket = Arc::new(Bucket {
            route: route.label.clone(),
            ..Bucket::default()
        });
        self.buckets.insert(id.to_owned(), Arc::clone(&bucket));
        bucket
    }

    fn remember_route(&mut self, key: &str, bucket_id: &str, now: Instant) {
        if self.routes.len() >= MAX_ROUTES && !self.routes.contains_key(key) {
            let buckets = &self.buckets;
            self.routes.retain(|_, (id, _)| buckets.contains_key(id));
            if self.routes.len() >= MAX_ROUTES {
                self.routes.retain(|_, (id, _)| {
                    buckets
                        .get(id)
                        .is_some_and(|b| b.queued.load(Ordering::Acquire) > 0)
                });
            }
        }
        self.routes
            .insert(key.to_owned(), (bucket_id.to_owned(), now));
    }
}

/// Counters for logs and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RestStats {
    /// Requests sent.
    pub requests: u64,
    /// 429 answers received (each honoured).
    pub rate_limited: u64,
    /// Times a request waited for its bucket or the global limit before going.
    pub waited: u64,
    /// 401, 403 and non-shared 429 answers in the last 10 minutes.
    pub invalid_last_10_min: u32,
    /// Buckets tracked now.
    pub buckets: usize,
}

/// Tunables of the [`Limiter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimiterOptions {
    /// Requests per second across buckets (Discord: [`GLOBAL_PER_SECOND`]).
    pub global_per_second: u32,
    /// Invalid answers in 10 minutes after which the offending routes stop (1..=10,000).
    pub invalid_budget: u32,
}

impl LimiterOptions {
    /// Discord's global limit, and routes stop past `percent` (1 to 100) of Discord's
    /// invalid-request limit (`discord.invalid_request_percent`).
    pub fn with_invalid_percent(percent: u8) -> LimiterOptions {
        let percent = u32::from(percent.clamp(1, 100));
        LimiterOptions {
            invalid_budget: (super::invalid::DISCORD_INVALID_LIMIT * percent / 100).max(1),
            ..LimiterOptions::default()
        }
    }
}

impl Default for LimiterOptions {
    fn default() -> Self {
        LimiterOptions {
            global_per_second: GLOBAL_PER_SECOND,
            invalid_budget: super::invalid::DISCORD_INVALID_LIMIT / 2,
        }
    }
}

/// Discord's rate limits for one bot token; see the module docs.
#[derive(Debug)]
pub struct Limiter {
    inner: Mutex<Inner>,
    /// The global limit of the whole bot (every node together).
    global_whole: u32,
    /// Shared with the tickets in flight, which release their slots.
    global: Arc<Mutex<GlobalWindow>>,
    invalid: InvalidGuard,
    requests: AtomicU64,
    rate_limited: AtomicU64,
    waited: AtomicU64,
}

/// Whether a 429 is Discord's global limit (its headers or its body say so), which says
/// nothing about the request's route.
pub(crate) fn says_global(headers: &HeaderMap, body: &Value) -> bool {
    RateHeaders::parse(headers).is_ok_and(|rate| rate.global || rate.scope == Some(Scope::Global))
        || body.get("global").and_then(Value::as_bool) == Some(true)
}

fn rate_limited(wait: Duration) -> SurfaceError {
    SurfaceError::RateLimited { retry_after: wait }
}

fn stopped(route: &Route, blocked: &Blocked) -> SurfaceError {
    SurfaceError::Unavailable(format!(
        "switchboard stopped calling {} to protect the bot token: Discord answered 401/403/429 {} times in the last 10 minutes ({} on this route), past this service's budget of {} (discord.invalid_request_percent); it resumes in about {} s. Check the bot's token and permissions",
        route.label,
        blocked.total,
        blocked.on_route,
        blocked.budget,
        blocked.retry_after.as_secs().max(1)
    ))
}

impl Limiter {
    /// A limiter with `options`.
    pub fn new(options: LimiterOptions) -> Limiter {
        Limiter {
            inner: Mutex::new(Inner {
                routes: HashMap::new(),
                buckets: HashMap::new(),
            }),
            global: Arc::new(Mutex::new(GlobalWindow::new(options.global_per_second))),
            global_whole: options.global_per_second,
            invalid: InvalidGuard::new(options.invalid_budget),
            requests: AtomicU64::new(0),
            rate_limited: AtomicU64::new(0),
            waited: AtomicU64::new(0),
        }
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes this node's share of the bot's global limit and invalid-request budget when
    /// `nodes` (at least 1) nodes call Discord with its token: an equal split, so together
    /// they stay within Discord's limits.
    pub fn share_among(&self, nodes: u32) {
        let nodes = nodes.max(1);
        self.global
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .set_per_second(self.global_whole / nodes);
        self.invalid.share_among(nodes);
    }

    /// The counters now.
    pub fn stats(&self) -> RestStats {
        RestStats {
            requests: self.requests.load(Ordering::Relaxed),
            rate_limited: self.rate_limited.load(Ordering::Relaxed),
            waited: self.waited.load(Ordering::Relaxed),
            invalid_last_10_min: self.invalid.count(Instant::now()),
            buckets: self.inner().buckets.len(),
        }
    }

    /// What the rate limits have left now, for the console's health panel: the tightest
    /// buckets Discord told us about (or that requests wait for), the global window, the
    /// invalid-request count against its budget.
    pub fn headroom(&self) -> RateHeadroom {
        let now = Instant::now();
        let (tracked, mut buckets) = {
            let inner = self.inner();
            let shown: Vec<BucketHeadroom> = inner
                .buckets
                .values()
                .map(|bucket| bucket.headroom(now))
                .filter(|b| b.limit.is_some() || b.waiting > 0)
                .collect();
            (inner.buckets.len(), shown)
        };
        // Least left first: the share remaining, then who waits, then the route for a stable
        // order.
        let share = |b: &BucketHeadroom| match (b.remaining, b.limit) {
            (Some(remaining), Some(limit)) if limit > 0 => {
                u64::from(remaining) * 1000 / u64::from(limit)
            }
            _ => 1000,
        };
        buckets.sort_by(|a, b| {
            share(a)
                .cmp(&share(b))
                .then(b.waiting.cmp(&a.waiting))
                .then_with(|| a.route.cmp(&b.route))
        });
        buckets.truncate(MAX_BUCKETS_SHOWN);
        RateHeadroom {
            buckets,
            buckets_tracked: tracked,
            global: lock(&self.global).headroom(now),
            invalid: InvalidHeadroom {
                count: self.invalid.count(now),
                budget: self.invalid.budget(),
                discord_limit: super::invalid::DISCORD_INVALID_LIMIT,
                window_s: super::invalid::WINDOW.as_secs(),
            },
        }
    }

    /// Waits until `route` may send one request: its turn in the bucket, the bucket's reset,
    /// a global slot. Fails at once when a wait would exceed [`MAX_WAIT`], the bucket's queue
    /// is full, or the invalid-request guard stopped the route.
    pub async fn acquire(&self, route: &Route) -> Result<Ticket, SurfaceError> {
        self.invalid
            .check(&route.key, &route.label, Instant::now())
            .map_err(|blocked| stopped(route, &blocked))?;
        let mut round = 0;
        let (bucket_id, bucket, queued, turn) = loop {
            round += 1;
            let (bucket_id, bucket) = {
                let mut inner = self.inner();
                let now = Instant::now();
                let id = inner.bucket_id(route);
                if let Some((_, used)) = inner.routes.get_mut(&route.key) {
                    *used = now;
                }
                let bucket = inner.bucket(&id, route, now);
                if bucket.queued.load(Ordering::Acquire) >= MAX_QUEUED {
                    let wait = bucket.state().wait(now).max(GARBAGE_BACKOFF);
                    tracing::warn!(route = %route.label, queued = MAX_QUEUED, "too many requests waiting for one Discord bucket; refusing this one");
                    return Err(rate_limited(wait));
                }
                bucket.queued.fetch_add(1, Ordering::AcqRel);
                (id, bucket)
            };
            let queued = Queued(Arc::clone(&bucket));
            let turn = Arc::clone(&bucket.turn).lock_owned().await;
            // Discord may have named this route's bucket while we waited: queue there instead.
            if round < REMAP_ROUNDS && self.inner().bucket_id(route) != bucket_id {
                continue;
            }
            break (bucket_id, bucket, queued, turn);
        };
        let mut waited = false;
        loop {
            let wait = bucket.state().wait(Instant::now());
            if wait.is_zero() {
                break;
            }
            if wait > MAX_WAIT {
                return Err(rate_limited(wait));
            }
            waited = true;
            tracing::debug!(route = %route.label, wait_ms = wait.as_millis() as u64, "waiting for the bucket to reset");
            tokio::time::sleep(wait).await;
        }
        let mut global = None;
        if !route.global_exempt {
            loop {
                let wait = lock(&self.global).take(Instant::now());
                if wait.is_zero() {
                    global = Some(GlobalSlot(Arc::clone(&self.global)));
                    break;
                }
                if wait > MAX_WAIT {
                    return Err(rate_limited(wait));
                }
                waited = true;
                tokio::time::sleep(wait).await;
            }
        }
        if waited {
            self.waited.fetch_add(1, Ordering::Relaxed);
        }
        bucket.state().spend(Instant::now());
        self.requests.fetch_add(1, Ordering::Relaxed);
        Ok(Ticket {
            bucket_id,
            queued,
            _turn: turn,
            _global: global,
        })
    }

    /// Takes in the answer to the request `ticket` let through: the bucket's new gate, a 429's
    /// wait, the invalid-request count. Releases the bucket's turn.
    pub fn complete(
        &self,
        ticket: Ticket,
        route: &Route,
        status: u16,
        headers: &HeaderMap,
        body: &Value,
    ) {
        let now = Instant::now();
        let parsed = RateHeaders::parse(headers);
        let global_429 = status == 429 && says_global(headers, body);
        let bucket = match &parsed {
            // A global 429 says nothing about the route's bucket, whatever headers came with it
            // (Discord sends none): only the global limit pauses, and the route gets back the
            // request it counted.
            Ok(_) if global_429 => {
                let bucket = Arc::clone(&ticket.queued.0);
                bucket.state().refund(now);
                bucket
            }
            Ok(rate) => {
                let bucket = match &rate.bucket {
                    Some(name) => {
                        let id = format!("{name}|{}", route.major);
                        if id == ticket.bucket_id {
                            Arc::clone(&ticket.queued.0)
                        } else {
                            let mut inner = self.inner();
                            inner.remember_route(&route.key, &id, now);
                            inner.bucket(&id, route, now)
                        }
                    }
                    None => Arc::clone(&ticket.queued.0),
                };
                bucket.state().update(rate, now);
                bucket
            }
            Err(error) => {
                tracing::warn!(route = %route.label, %error, backoff_ms = GARBAGE_BACKOFF.as_millis() as u64, "Discord's rate-limit headers are garbage; this route waits before its next request");
                let bucket = Arc::clone(&ticket.queued.0);
                bucket.state().exhaust(now + GARBAGE_BACKOFF);
                bucket
            }
        };
        let rate = parsed.unwrap_or_default();
        let mut scope = rate.scope;
        if status == 429 {
            self.rate_limited.fetch_add(1, Ordering::Relaxed);
            let wait = retry_after_of(headers, body);
            if global_429 {
                scope = Some(Scope::Global);
                lock(&self.global).pause(now + wait);
            } else {
                bucket.state().exhaust(now + wait);
            }
            tracing::warn!(route = %route.label, retry_after_ms = wait.as_millis() as u64, global = global_429, scope = ?scope, "Discord answered 429; honouring its retry_after");
        }
        if matches!(status, 401 | 403) || (status == 429 && scope != Some(Scope::Shared)) {
            self.invalid.record(&route.key, now);
        }
        drop(ticket);
    }

    /// Holds one global slot for a request made outside this limiter (serenity's own `GET
    /// /gateway` as the gateway starts): it counts against the global limit from now until a
    /// second after the hold is dropped, as every request here does. Fails like
    /// [`Limiter::acquire`] when the wait would pass [`MAX_WAIT`].
    pub async fn hold_global(&self) -> Result<GlobalHold, SurfaceError> {
        loop {
            let wait = lock(&self.global).take(Instant::now());
            if wait.is_zero() {
                self.requests.fetch_add(1, Ordering::Relaxed);
                return Ok(GlobalHold {
                    _slot: GlobalSlot(Arc::clone(&self.global)),
                });
            }
            if wait > MAX_WAIT {
                return Err(rate_limited(wait));
            }
            self.waited.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(wait).await;
        }
    }
}

/// A global slot held for a request made elsewhere ([`Limiter::hold_global`]); its second
/// starts when it is dropped.
pub struct GlobalHold {
    _slot: GlobalSlot,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).expect("a header value"));
        }
        map
    }

    /// One request on `route` through `limiter`, answered with `status`, `pairs` and `body`.
    async fn answered(
        limiter: &Limiter,
        route: &Route,
        status: u16,
        pairs: &[(&'static str, &str)],
        body: &Value,
    ) {
        let ticket = limiter.acquire(route).await.expect("a ticket");
        limiter.complete(ticket, route, status, &headers(pairs), body);
    }

    #[test]
    fn the_invalid_budget_is_a_share_of_discords_limit() {
        assert_eq!(LimiterOptions::default().invalid_budget, 5_000);
        assert_eq!(
            LimiterOptions::with_invalid_percent(20).invalid_budget,
            2_000
        );
        assert_eq!(
            LimiterOptions::with_invalid_percent(100).invalid_budget,
            10_000
        );
        // Out of range is clamped, never zero or past Discord's limit.
        assert_eq!(LimiterOptions::with_invalid_percent(0).invalid_budget, 100);
        assert_eq!(
            LimiterOptions::with_invalid_percent(255).invalid_budget,
            10_000
        );
    }

    #[tokio::test]
    async fn headroom_shows_the_tightest_buckets_the_global_window_and_invalid_answers() {
        let limiter = Limiter::new(LimiterOptions::with_invalid_percent(1));
        let send = Route::of(&reqwest::Method::POST, "/channels/42/messages");
        answered(
            &limiter,
            &send,
            200,
            &[
                ("x-ratelimit-bucket", "abc"),
                ("x-ratelimit-limit", "5"),
                ("x-ratelimit-remaining", "1"),
                ("x-ratelimit-reset-after", "2"),
            ],
            &Value::Null,
        )
        .await;
        let hook = Route::of(&reqwest::Method::POST, "/webhooks/7/very-secret-token");
        answered(
            &limiter,
            &hook,
            403,
            &[
                ("x-ratelimit-limit", "30"),
                ("x-ratelimit-remaining", "29"),
                ("x-ratelimit-reset-after", "60"),
            ],
            &Value::Null,
        )
        .await;
        let headroom = limiter.headroom();
        assert_eq!(headroom.buckets.len(), 2, "{headroom:?}");
        let tightest = &headroom.buckets[0];
        assert_eq!(tightest.route, "POST /channels/42/messages");
        assert_eq!((tightest.remaining, tightest.limit), (Some(1), Some(5)));
        assert!(tightest.reset_after_ms.is_some_and(|ms| ms <= 2000));
        let shown = serde_json::to_string(&headroom).expect("serializes");
        assert!(!shown.contains("very-secret-token"), "{shown}");
        assert_eq!(headroom.global.limit, GLOBAL_PER_SECOND);
        assert!(headroom.global.used >= 1 && headroom.global.used <= 2);
        assert_eq!(headroom.invalid.count, 1);
        assert_eq!(headroom.invalid.budget, 100);
        assert_eq!(headroom.invalid.discord_limit, 10_000);
        // The send's route had a provisional bucket until Discord named its own: three tracked,
        // the provisional one not shown (nothing was learned about it).
        assert_eq!(headroom.buckets_tracked, 3);
    }

    #[test]
    fn discord_headers_parse() {
        let rate = RateHeaders::parse(&headers(&[
            ("x-ratelimit-bucket", "abcd1234"),
            ("x-ratelimit-limit", "5"),
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset-after", "4.250"),
            ("x-ratelimit-scope", "shared"),
        ]))
        .expect("valid");
        assert_eq!(rate.bucket.as_deref(), Some("abcd1234"));
        assert_eq!(rate.remaining, Some(0));
        assert_eq!(rate.reset_after, Some(Duration::from_millis(4250)));
        assert_eq!(rate.scope, Some(Scope::Shared));
        assert!(!rate.global);
        assert_eq!(
            RateHeaders::parse(&HeaderMap::new()),
            Ok(RateHeaders::default())
        );
    }

    #[test]
    fn garbage_headers_are_typed_errors() {
        for (name, value) in [
            ("x-ratelimit-remaining", "-1"),
            ("x-ratelimit-remaining", "lots"),
            ("x-ratelimit-remaining", "99999999999"),
            ("x-ratelimit-reset-after", "NaN"),
            ("x-ratelimit-reset-after", "-3"),
            ("x-ratelimit-reset-after", "inf"),
            ("x-ratelimit-reset-after", "soon"),
            ("x-ratelimit-limit", "1.5"),
            ("x-ratelimit-bucket", ""),
        ] {
            let error = RateHeaders::parse(&headers(&[(name, value)])).expect_err(value);
            assert_eq!(error.name, name);
        }
        // A huge reset is believed only up to the cap.
        let huge =
            RateHeaders::parse(&headers(&[("x-ratelimit-reset-after", "1e300")])).expect("finite");
        assert_eq!(huge.reset_after, Some(RESET_CAP));
    }

    #[test]
    fn retry_after_prefers_the_body_and_never_panics() {
        let h = headers(&[("retry-after", "3")]);
        assert_eq!(
            retry_after_of(&h, &serde_json::json!({"retry_after": 0.5})),
            Duration::from_millis(500)
        );
        assert_eq!(retry_after_of(&h, &Value::Null), Duration::from_secs(3));
        assert_eq!(
            retry_after_of(
                &HeaderMap::new(),
                &serde_json::json!({"retry_after": 1e300})
            ),
            RESET_CAP
        );
        assert_eq!(
            retry_after_of(
                &headers(&[("retry-after", "NaN")]),
                &serde_json::json!({"retry_after": -1})
            ),
            GARBAGE_BACKOFF
        );
    }

    #[test]
    fn an_exhausted_bucket_waits_for_its_reset_then_opens() {
        let now = Instant::now();
        let mut state = BucketState::default();
        assert_eq!(state.wait(now), Duration::ZERO, "unknown buckets go");
        let rate = RateHeaders {
            limit: Some(5),
            remaining: Some(1),
            reset_after: Some(Duration::from_secs(5)),
            ..RateHeaders::default()
        };
        state.update(&rate, now);
        assert_eq!(state.wait(now), Duration::ZERO);
        state.spend(now);
        assert_eq!(state.wait(now), Duration::from_secs(5));
        let later = now + Duration::from_secs(5);
        assert_eq!(state.wait(later), Duration::ZERO);
        state.spend(later);
        assert_eq!(state.remaining, Some(4), "a new window holds the limit");
    }

    #[tokio::test(start_paused = true)]
    async fn a_global_429_waits_the_global_pause_and_leaves_the_routes_bucket_alone() {
        let limiter = Limiter::new(LimiterOptions::default());
        let send = Route::of(&reqwest::Method::POST, "/channels/42/messages");
        // A global 429 that also carries the route's headers as spent (as a careless server
        // might): only the global limit pauses, for its 227 ms.
        answered(
            &limiter,
            &send,
            429,
            &[
                ("x-ratelimit-global", "true"),
                ("x-ratelimit-scope", "global"),
                ("x-ratelimit-bucket", "abc"),
                ("x-ratelimit-limit", "5"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset-after", "5.0"),
                ("retry-after", "1"),
            ],
            &serde_json::json!({"message": "You are being rate limited.", "retry_after": 0.227, "global": true}),
        )
        .await;
        let started = Instant::now();
        let ticket = limiter.acquire(&send).await.expect("a ticket");
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(227) && waited < Duration::from_millis(300),
            "waited {waited:?}"
        );
        limiter.complete(ticket, &send, 200, &HeaderMap::new(), &Value::Null);
        // A route's own 429 holds its bucket, not the others.
        answered(
            &limiter,
            &send,
            429,
            &[
                ("x-ratelimit-scope", "user"),
                ("x-ratelimit-bucket", "abc"),
                ("x-ratelimit-limit", "5"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset-after", "2.0"),
            ],
            &serde_json::json!({"retry_after": 2.0, "global": false}),
        )
        .await;
        let other = Route::of(&reqwest::Method::POST, "/channels/43/messages");
        let started = Instant::now();
        let ticket = limiter.acquire(&other).await.expect("another channel");
        assert!(
            started.elapsed() < Duration::from_millis(10),
            "{:?}",
            started.elapsed()
        );
        drop(ticket);
        let started = Instant::now();
        let ticket = limiter.acquire(&send).await.expect("the same channel");
        assert!(
            started.elapsed() >= Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        drop(ticket);
        assert_eq!(limiter.stats().rate_limited, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn globally_refused_retries_do_not_spend_the_routes_window() {
        let limiter = Limiter::new(LimiterOptions::default());
        let send = Route::of(&reqwest::Method::POST, "/channels/42/messages");
        let route_left = |remaining: &'static str| {
            [
                ("x-ratelimit-scope", "user"),
                ("x-ratelimit-bucket", "abc"),
                ("x-ratelimit-limit", "5"),
                ("x-ratelimit-remaining", remaining),
                ("x-ratelimit-reset-after", "5.0"),
            ]
        };
        // One send left in the route's 5-second window.
        answered(&limiter, &send, 200, &route_left("1"), &Value::Null).await;
        let global_429 = serde_json::json!({"retry_after": 0.05, "global": true});
        // Three tries of that last send refused by the global limit (no route headers, as
        // Discord sends them): the route never counted them.
        let started = Instant::now();
        for _ in 0..3 {
            answered(
                &limiter,
                &send,
                429,
                &[
                    ("x-ratelimit-global", "true"),
                    ("x-ratelimit-scope", "global"),
                ],
                &global_429,
            )
            .await;
        }
        let ticket = limiter.acquire(&send).await.expect("a ticket");
        let waited = started.elapsed();
        assert!(
            waited < Duration::from_millis(500),
            "the tries and the send waited {waited:?}: the refused tries spent the route's window"
        );
        limiter.complete(ticket, &send, 200, &headers(&route_left("0")), &Value::Null);
        // The window is spent now, by requests the route did count: the next one waits it.
        let started = Instant::now();
        drop(limiter.acquire(&send).await.expect("a ticket"));
        assert!(
            started.elapsed() >= Duration::from_secs(4),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_global_slot_counts_like_a_request() {
        let limiter = Limiter::new(LimiterOptions {
            global_per_second: 2,
            ..LimiterOptions::default()
        });
        let hold = limiter.hold_global().await.expect("a slot");
        let route = Route::of(&reqwest::Method::GET, "/users/@me");
        let ticket = limiter.acquire(&route).await.expect("the second slot");
        // The held request was answered now: its slot frees a second later.
        let started = Instant::now();
        drop(hold);
        let other = Route::of(&reqwest::Method::GET, "/channels/1");
        let third = limiter
            .acquire(&other)
            .await
            .expect("after the hold's second");
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        drop((ticket, third));
    }

    /// Two nodes share the bot's token: each takes half the global limit (and half the
    /// invalid-request budget); alone again, all of it.
    #[test]
    fn nodes_sharing_the_token_split_the_global_limit() {
        let limiter = Limiter::new(LimiterOptions::default());
        let now = Instant::now();
        let taken = |limiter: &Limiter| {
            let mut global = limiter.global.lock().unwrap();
            let mut count = 0;
            while global.take(now).is_zero() && count < 1_000 {
                count += 1;
            }
            for _ in 0..count {
                global.release(now);
            }
            count
        };
        limiter.share_among(2);
        assert_eq!(taken(&limiter), GLOBAL_PER_SECOND / 2);
        assert_eq!(
            limiter.invalid.budget(),
            LimiterOptions::default().invalid_budget / 2
        );
        let later = Limiter::new(LimiterOptions::default());
        later.share_among(2);
        later.share_among(1);
        assert_eq!(taken(&later), GLOBAL_PER_SECOND);
        limiter.share_among(0);
        assert_eq!(
            limiter.invalid.budget(),
            LimiterOptions::default().invalid_budget,
            "no count is one node"
        );
    }

    #[test]
    fn the_global_window_holds_slots_in_flight_and_a_second_after() {
        let start = Instant::now();
        let mut global = GlobalWindow::new(3);
        for _ in 0..3 {
            assert_eq!(global.take(start), Duration::ZERO);
        }
        // All three in flight: no telling when they free, so ask again shortly.
        assert_eq!(global.take(start), IN_FLIGHT_POLL);
        let answered = start + Duration::from_millis(300);
        global.release(answered);
        assert_eq!(
            global.take(answered),
            Duration::from_secs(1),
            "a slot frees a second after its answer, not after its start"
        );
        assert_eq!(
            global.take(answered + Duration::from_secs(1)),
            Duration::ZERO
        );
        global.pause(start + Duration::from_secs(10));
        assert_eq!(
            global.take(start + Duration::from_secs(2)),
            Duration::from_secs(8)
        );
        // A release nobody took a slot for changes nothing.
        let mut idle = GlobalWindow::new(1);
        idle.release(start);
        assert_eq!(idle.take(start), Duration::ZERO);
    }

    /// A header value: what Discord sends, or garbage.
    fn header_value() -> impl Strategy<Value = Option<String>> {
        prop_oneof![
            Just(None),
            (0u32..20).prop_map(|n| Some(n.to_string())),
            (0.0f64..20.0).prop_map(|s| Some(format!("{s:.3}"))),
            prop_oneof![
                Just("NaN".to_owned()),
                Just("-1".to_owned()),
                Just("1e308".to_owned()),
                Just("inf".to_owned()),
                "[ -~]{0,12}",
            ]
            .prop_map(Some),
        ]
    }

    proptest! {
        /// Whatever the headers say, a bucket never lets through more requests than an answer's
        /// Remaining allows before its Reset-After, and never asks to wait longer than the
        /// cap; header parsing never panics.
        #[test]
        fn buckets_never_overrun_and_never_wait_forever(
            steps in proptest::collection::vec(
                (header_value(), header_value(), 0u64..3_000, 0usize..8),
                1..40,
            ),
        ) {
            let start = Instant::now();
            let mut now = start;
            let mut state = BucketState::default();
            // (deadline, allowance) from the last valid answer.
            let mut promise: Option<(Instant, u32)> = None;
            for (remaining, reset_after, advance_ms, tries) in steps {
                let mut map = HeaderMap::new();
                for (name, value) in [("x-ratelimit-remaining", &remaining), ("x-ratelimit-reset-after", &reset_after)] {
                    if let Some(Ok(value)) = value.as_deref().map(HeaderValue::from_str) {
                        map.insert(name, value);
                    }
                }
                match RateHeaders::parse(&map) {
                    Ok(rate) => {
                        state.update(&rate, now);
                        // The latest Remaining holds until the reset the bucket knows of.
                        if let Some(r) = rate.remaining {
                            promise = state.reset_at.map(|deadline| (deadline, r));
                        }
                    }
                    Err(_) => {
                        state.exhaust(now + GARBAGE_BACKOFF);
                        promise = Some((now + GARBAGE_BACKOFF, 0));
                    }
                }
                for _ in 0..tries {
                    let wait = state.wait(now);
                    prop_assert!(wait <= RESET_CAP);
                    if wait.is_zero() {
                        if let Some((deadline, allowance)) = &mut promise {
                            if now < *deadline {
                                prop_assert!(*allowance > 0, "a request went past Remaining before the reset");
                                *allowance -= 1;
                            }
                        }
                        state.spend(now);
                    }
                }
                now += Duration::from_millis(advance_ms);
            }
        }

        /// Whatever the latencies, Discord never counts more than the limit in any second:
        /// when a request starts, the requests started before it that are still in flight or
        /// were answered less than a second ago are fewer than the limit (Discord counts each
        /// somewhere between its start and its answer, so that bounds every second it sees).
        /// Every wait asked for is at most a second (no pause given).
        #[test]
        fn the_global_window_holds(
            per_second in 1u32..10,
            requests in proptest::collection::vec((0u64..400, 1u64..1_500), 1..150),
        ) {
            let start = Instant::now();
            let second = Duration::from_secs(1);
            let mut global = GlobalWindow::new(per_second);
            let mut now = start;
            // (started, answered) of every request that went.
            let mut sent: Vec<(Instant, Instant)> = Vec::new();
            for (gap, latency) in requests {
                now += Duration::from_millis(gap);
                // Answers due by now free their slots, in the order they came.
                let mut due: Vec<Instant> = sent
                    .iter()
                    .map(|&(_, answered)| answered)
                    .filter(|&answered| answered <= now && answered > now - Duration::from_millis(gap))
                    .collect();
                due.sort();
                for answered in due {
                    global.release(answered);
                }
                let wait = global.take(now);
                prop_assert!(wait <= second);
                if wait.is_zero() {
                    let overlapping = sent
                        .iter()
                        .filter(|&&(_, answered)| answered + second > now)
                        .count();
                    prop_assert!(overlapping < per_second as usize, "{} overlapping", overlapping);
                    sent.push((now, now + Duration::from_millis(latency)));
                }
            }
        }
    }
}
