//! Discord's rate limits, enforced as Discord enforces them.
//!
//! Every matched REST route belongs to a bucket: the route template (`POST
//! /channels/{channel_id}/messages`) split by its major parameter (the channel, guild or
//! webhook in the path), each with a fixed window that starts at its first request. A request
//! past the bucket's limit answers 429 with `retry_after` and `"global": false` (scope `user`);
//! more than [`RateLimits::global_per_second`] requests in any second, all buckets together
//! (interaction callbacks and follow-ups excepted, as on Discord), answer 429 with `"global":
//! true` (scope `global`). Every admitted answer and every route 429 carries
//! `X-RateLimit-Limit`, `-Remaining`, `-Reset`, `-Reset-After` and `-Bucket` (one opaque hash per
//! route template, shared by every channel, as Discord's is); a 429 adds `Retry-After` and
//! `X-RateLimit-Scope`. A global 429 carries `X-RateLimit-Global: true` and no route headers at
//! all, as Discord's: the route's bucket was not spent, and a client must not read it as spent.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// `limit` requests per `window_ms` milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Requests allowed in one window (at least 1).
    pub limit: u32,
    /// The window's length in milliseconds (at least 1).
    pub window_ms: u64,
}

impl Window {
    /// `limit` requests per `window_ms` milliseconds.
    pub const fn new(limit: u32, window_ms: u64) -> Window {
        Window { limit, window_ms }
    }
}

/// The limits the fake enforces. [`RateLimits::discord`] (the default) uses the figures Discord
/// applies to a bot; tests may tighten or relax them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimits {
    /// Requests per second across every bucket (Discord: 50). Interaction callbacks and
    /// follow-ups (`/interactions/...`, `/webhooks/{app}/{token}...`) are exempt.
    pub global_per_second: u32,
    /// `POST /channels/{id}/messages`, per channel (Discord: 5 per 5 s).
    pub message_create: Window,
    /// `PATCH /channels/{id}/messages/{id}`, per channel (5 per 5 s).
    pub message_edit: Window,
    /// `DELETE /channels/{id}/messages/{id}`, per channel (5 per 1 s).
    pub message_delete: Window,
    /// The bot's own reactions (`PUT`/`DELETE .../reactions/{emoji}/@me`), per channel
    /// (1 per 250 ms).
    pub reaction: Window,
    /// Every other route, per route and major parameter (50 per 1 s).
    pub other: Window,
}

impl RateLimits {
    /// Discord's limits for a bot.
    pub const fn discord() -> RateLimits {
        RateLimits {
            global_per_second: 50,
            message_create: Window::new(5, 5_000),
            message_edit: Window::new(5, 5_000),
            message_delete: Window::new(5, 1_000),
            reaction: Window::new(1, 250),
            other: Window::new(50, 1_000),
        }
    }

    /// Every bucket widened out of the way (1,000 per second, globally and per route): for
    /// tests and benchmarks about something other than Discord's pacing.
    pub const fn unthrottled() -> RateLimits {
        let wide = Window::new(1_000, 1_000);
        RateLimits {
            global_per_second: 1_000,
            message_create: wide,
            message_edit: wide,
            message_delete: wide,
            reaction: wide,
            other: wide,
        }
    }

    fn window_for(&self, method: &Method, template: &str) -> Window {
        let window = match (method.as_str(), template) {
            ("POST", "/api/v10/channels/{channel_id}/messages") => self.message_create,
            ("PATCH", "/api/v10/channels/{channel_id}/messages/{message_id}") => self.message_edit,
            ("DELETE", "/api/v10/channels/{channel_id}/messages/{message_id}") => {
                self.message_delete
            }
            ("PUT" | "DELETE", t) if t.ends_with("/reactions/{emoji}/@me") => self.reaction,
            _ => self.other,
        };
        Window {
            limit: window.limit.max(1),
            window_ms: window.window_ms.max(1),
        }
    }
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits::discord()
    }
}

/// Buckets tracked before the expired ones are dropped.
const MAX_BUCKETS: usize = 4096;

/// Where a request stands in its bucket: what the headers say.
#[derive(Clone, Debug, PartialEq)]
pub struct Stamp {
    limit: u32,
    remaining: u32,
    reset_ms: u64,
    reset_after_ms: u64,
    bucket: String,
}

/// Why a request is refused.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// Milliseconds until the request would be admitted.
    pub retry_after_ms: u64,
    /// Whether the global limit refused it (else its bucket).
    pub global: bool,
    stamp: Stamp,
}

#[derive(Debug, Default)]
struct Book {
    /// `(template key, major)` → (window start, requests admitted in it).
    windows: HashMap<(String, String), (u64, u32)>,
    /// Admission times of the last second's requests, oldest first (at most the global limit).
    recent: VecDeque<u64>,
    /// Arrival times of the last second's requests under the global limit, admitted or not
    /// (at most [`MAX_ARRIVALS`]): what a client sent, which `recent` cannot show.
    arrivals: VecDeque<u64>,
    tally: RateTally,
}

/// Arrivals remembered for the per-second peak; past it the peak saturates there.
const MAX_ARRIVALS: usize = 100_000;

/// What the rate limits saw since the fake started (`GET /_fake/ratelimits`): whether the
/// bot's nodes together kept to the global limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RateTally {
    /// The most requests under the global limit (interaction callbacks excepted) that arrived
    /// within any one second, refused ones included.
    pub peak_per_second: u32,
    /// Requests refused by the global limit (`"global": true`).
    pub global_429s: u64,
    /// Requests refused by their route's bucket (`"global": false`).
    pub route_429s: u64,
}

/// The fake's rate-limit state.
#[derive(Debug, Default)]
pub struct RateBook {
    limits: RateLimits,
    book: Mutex<Book>,
}

impl RateBook {
    /// A book enforcing `limits`.
    pub fn new(limits: RateLimits) -> RateBook {
        RateBook {
            limits,
            book: Mutex::new(Book::default()),
        }
    }

    /// Admits one request to `template` (the matched route, `/api/v10/...`) on `path`, or
    /// refuses it, at `now_ms`.
    pub fn admit(
        &self,
        method: &Method,
        template: &str,
        path: &str,
        now_ms: u64,
    ) -> Result<Stamp, Refusal> {
        let window = self.limits.window_for(method, template);
        let route = format!("{method} {template}");
        let bucket = bucket_hash(&route);
        let key = (route, major_parameter(path));
        let mut guard = self
            .book
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let book = &mut *guard;
        if book.windows.len() >= MAX_BUCKETS && !book.windows.contains_key(&key) {
            // Expired windows carry nothing; when even the live ones fill the book, forgetting
            // them all lets at most one window's worth of extra requests through.
            book.windows
                .retain(|_, (start, _)| now_ms < start.saturating_add(window.window_ms));
            if book.windows.len() >= MAX_BUCKETS {
                book.windows.clear();
            }
        }
        if !is_interaction(template) {
            book.count_arrival(now_ms);
        }
        let entry = book.windows.entry(key).or_insert((now_ms, 0));
        if now_ms >= entry.0.saturating_add(window.window_ms) {
            *entry = (now_ms, 0);
        }
        let (start, used) = *entry;
        let reset_ms = start.saturating_add(window.window_ms);
        let stamp = |used: u32| Stamp {
            limit: window.limit,
            remaining: window.limit.saturating_sub(used),
            reset_ms,
            reset_after_ms: reset_ms.saturating_sub(now_ms),
            bucket: bucket.clone(),
        };
        if used >= window.limit {
            book.tally.route_429s += 1;
            return Err(Refusal {
                retry_after_ms: reset_ms.saturating_sub(now_ms).max(1),
                global: false,
                stamp: stamp(used),
            });
        }
        if !is_interaction(template) {
            let global = self.limits.global_per_second.max(1) as usize;
            while book
                .recent
                .front()
                .is_some_and(|&t| t.saturating_add(1000) <= now_ms)
            {
                book.recent.pop_front();
            }
            if book.recent.len() >= global {
                let oldest = book.recent.front().copied().unwrap_or(now_ms);
                book.tally.global_429s += 1;
                return Err(Refusal {
                    retry_after_ms: oldest.saturating_add(1000).saturating_sub(now_ms).max(1),
                    global: true,
                    stamp: stamp(used),
                });
            }
            book.recent.push_back(now_ms);
        }
        entry.1 = used + 1;
        Ok(stamp(used + 1))
    }

    /// What the limits saw so far.
    pub fn tally(&self) -> RateTally {
        self.book
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .tally
    }

    /// Starts the tally afresh (the limits' own state is kept).
    pub fn reset_tally(&self) {
        let mut book = self
            .book
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        book.tally = RateTally::default();
        book.arrivals.clear();
    }
}

impl Book {
    /// Counts a request under the global limit arriving at `now_ms` into the per-second peak.
    fn count_arrival(&mut self, now_ms: u64) {
        while self
            .arrivals
            .front()
            .is_some_and(|&t| t.saturating_add(1000) <= now_ms)
        {
            self.arrivals.pop_front();
        }
        if self.arrivals.len() < MAX_ARRIVALS {
            self.arrivals.push_back(now_ms);
        }
        let in_last_second = u32::try_from(self.arrivals.len()).unwrap_or(u32::MAX);
        self.tally.peak_per_second = self.tally.peak_per_second.max(in_last_second);
    }
}

impl Stamp {
    /// Writes the `X-RateLimit-*` headers (keeping any already set).
    pub fn write(&self, headers: &mut HeaderMap) {
        let pairs = [
            ("x-ratelimit-limit", self.limit.to_string()),
            ("x-ratelimit-remaining", self.remaining.to_string()),
            ("x-ratelimit-reset", seconds(self.reset_ms)),
            ("x-ratelimit-reset-after", seconds(self.reset_after_ms)),
            ("x-ratelimit-bucket", self.bucket.clone()),
        ];
        for (name, value) in pairs {
            if let Ok(v) = HeaderValue::from_str(&value) {
                headers.entry(name).or_insert(v);
            }
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let retry_after = self.retry_after_ms as f64 / 1000.0;
        let body = json!({
            "message": "You are being rate limited.",
            "retry_after": retry_after,
            "global": self.global,
            "code": 0,
        });
        let mut response = (StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response();
        let headers = response.headers_mut();
        let scope = if self.global { "global" } else { "user" };
        headers.insert(
            "retry-after",
            HeaderValue::from(self.retry_after_ms.div_ceil(1000).max(1)),
        );
        headers.insert("x-ratelimit-scope", HeaderValue::from_static(scope));
        if self.global {
            headers.insert("x-ratelimit-global", HeaderValue::from_static("true"));
        } else {
            let mut stamp = self.stamp;
            stamp.remaining = 0;
            stamp.reset_after_ms = stamp.reset_after_ms.max(self.retry_after_ms);
            stamp.write(headers);
        }
        response
    }
}

/// Milliseconds as Discord's seconds with three decimals.
fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

/// Whether the route is an interaction endpoint, which Discord keeps out of the global limit.
fn is_interaction(template: &str) -> bool {
    template.starts_with("/api/v10/interactions/") || template.starts_with("/api/v10/webhooks/")
}

/// The path's major parameter: the channel, guild or webhook (with its token) it acts on, or
/// the interaction it answers; empty when it has none.
fn major_parameter(path: &str) -> String {
    let mut segments = path
        .trim_start_matches("/api/v10")
        .split('/')
        .filter(|s| !s.is_empty());
    match segments.next() {
        Some(kind @ ("channels" | "guilds")) => {
            format!("{kind}/{}", segments.next().unwrap_or_default())
        }
        Some(kind @ ("webhooks" | "interactions")) => {
            let id = segments.next().unwrap_or_default();
            let token = segments.next().unwrap_or_default();
            format!("{kind}/{id}/{token}")
        }
        _ => String::new(),
    }
}

/// A stable opaque bucket id (FNV-1a of the route template), like Discord's hashes.
fn bucket_hash(bucket: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bucket.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CREATE: &str = "/api/v10/channels/{channel_id}/messages";

    fn create(book: &RateBook, channel: u64, now: u64) -> Result<Stamp, Refusal> {
        book.admit(
            &Method::POST,
            CREATE,
            &format!("/api/v10/channels/{channel}/messages"),
            now,
        )
    }

    #[test]
    fn five_creates_per_five_seconds_per_channel() {
        let book = RateBook::new(RateLimits::discord());
        for n in 0..5u32 {
            let stamp = create(&book, 1, 1_000 + u64::from(n)).expect("admitted");
            assert_eq!(stamp.remaining, 4 - n);
            assert_eq!(stamp.limit, 5);
        }
        let refused = create(&book, 1, 1_010).expect_err("the sixth is refused");
        assert!(!refused.global);
        assert_eq!(refused.retry_after_ms, 4_990);
        // Another channel has its own bucket, under the same hash.
        let other = create(&book, 2, 1_010).expect("another channel");
        assert_eq!(other.bucket, create(&book, 1, 6_000).expect("reset").bucket);
        assert_eq!(other.remaining, 4);
    }

    #[test]
    fn the_global_limit_spans_buckets_but_not_interactions() {
        let limits = RateLimits {
            global_per_second: 3,
            ..RateLimits::discord()
        };
        let book = RateBook::new(limits);
        for channel in 1..=3 {
            create(&book, channel, 100).expect("admitted");
        }
        let refused = create(&book, 4, 500).expect_err("global");
        assert!(refused.global);
        assert_eq!(refused.retry_after_ms, 600);
        book.admit(
            &Method::POST,
            "/api/v10/interactions/{interaction_id}/{token}/callback",
            "/api/v10/interactions/9/tok/callback",
            500,
        )
        .expect("interaction callbacks are exempt");
        create(&book, 4, 1_100).expect("a second later");
    }

    #[test]
    fn the_tally_counts_each_kind_of_429_and_the_busiest_second_sent() {
        let limits = RateLimits {
            global_per_second: 3,
            ..RateLimits::discord()
        };
        let book = RateBook::new(limits);
        for channel in 1..=3 {
            create(&book, channel, 100).expect("admitted");
        }
        create(&book, 4, 500).expect_err("global");
        book.admit(
            &Method::POST,
            "/api/v10/interactions/{interaction_id}/{token}/callback",
            "/api/v10/interactions/9/tok/callback",
            500,
        )
        .expect("interaction callbacks are exempt");
        for at in [1_200, 1_300, 1_400, 1_450] {
            let _ = create(&book, 5, at);
        }
        let tally = book.tally();
        // 500 to 1,450: five arrivals within one second, the refused ones included (the
        // interaction callback is not counted).
        assert_eq!(tally.peak_per_second, 5, "{tally:?}");
        assert_eq!(tally.global_429s, 2, "{tally:?}");
        assert_eq!(tally.route_429s, 0, "{tally:?}");

        // A route's own bucket (five creates per five seconds per channel) refuses the sixth.
        let book = RateBook::new(RateLimits::discord());
        for at in 0..6 {
            let _ = create(&book, 7, at * 300);
        }
        let tally = book.tally();
        assert_eq!((tally.route_429s, tally.global_429s), (1, 0), "{tally:?}");
        assert_eq!(tally.peak_per_second, 4, "{tally:?}");
        book.reset_tally();
        assert_eq!(book.tally(), RateTally::default());
    }

    #[test]
    fn refusals_answer_like_discord() {
        let book = RateBook::new(RateLimits::discord());
        for _ in 0..5 {
            create(&book, 1, 0).expect("admitted");
        }
        let response = create(&book, 1, 1_500)
            .expect_err("refused")
            .into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let h = response.headers();
        assert_eq!(h["retry-after"], "4");
        assert_eq!(h["x-ratelimit-remaining"], "0");
        assert_eq!(h["x-ratelimit-reset-after"], "3.500");
        assert_eq!(h["x-ratelimit-scope"], "user");
        assert!(h.get("x-ratelimit-global").is_none());
    }

    #[test]
    fn a_global_refusal_leaves_the_routes_bucket_alone() {
        let limits = RateLimits {
            global_per_second: 2,
            ..RateLimits::discord()
        };
        let book = RateBook::new(limits);
        create(&book, 1, 0).expect("admitted");
        create(&book, 2, 10).expect("admitted");
        let refused = create(&book, 1, 773).expect_err("global");
        assert!(refused.global);
        let response = refused.into_response();
        let h = response.headers();
        assert_eq!(h["x-ratelimit-global"], "true");
        assert_eq!(h["x-ratelimit-scope"], "global");
        assert_eq!(h["retry-after"], "1");
        for route_header in [
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
            "x-ratelimit-reset-after",
            "x-ratelimit-bucket",
        ] {
            assert!(h.get(route_header).is_none(), "{route_header}: {h:?}");
        }
        // The channel's bucket was not spent by the refusal: 4 of 5 are left.
        let next = create(&book, 1, 1_000).expect("a second later");
        assert_eq!(next.remaining, 3);
    }

    #[test]
    fn major_parameters() {
        assert_eq!(
            major_parameter("/api/v10/channels/1/messages/2"),
            "channels/1"
        );
        assert_eq!(major_parameter("/api/v10/guilds/3/members"), "guilds/3");
        assert_eq!(
            major_parameter("/api/v10/webhooks/4/tok/messages/5"),
            "webhooks/4/tok"
        );
        assert_eq!(major_parameter("/api/v10/users/@me"), "");
    }

    #[test]
    fn the_book_stays_bounded() {
        let book = RateBook::new(RateLimits::discord());
        for channel in 0..(MAX_BUCKETS as u64 * 2) {
            // Spread over time so the global limit never refuses.
            let _ = create(&book, channel, channel * 100);
        }
        let held = book.book.lock().unwrap().windows.len();
        assert!(held <= MAX_BUCKETS, "{held}");
    }
}
