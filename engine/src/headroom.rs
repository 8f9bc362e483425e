//! A chat platform's REST rate-limit headroom as the console's health panel shows it: the
//! Discord crate's limiter reports it through [`HeadroomSource`], which the composition root
//! hands the console, so neither side depends on the other.

use serde::Serialize;

/// Buckets shown at most (the tightest first); the rest are counted.
pub const MAX_BUCKETS_SHOWN: usize = 12;

/// One rate-limit bucket the REST client learned from Discord's answers.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BucketHeadroom {
    /// A route that uses it, ids as `{id}` and tokens left out (`POST /channels/{id}/messages`
    /// keeps the channel id: it is the bucket's major parameter).
    pub route: String,
    /// `X-RateLimit-Limit`, once an answer said.
    pub limit: Option<u32>,
    /// Requests left in the window, once an answer said.
    pub remaining: Option<u32>,
    /// When the window resets, from now, while it is running.
    pub reset_after_ms: Option<u64>,
    /// Requests waiting for (or holding) the bucket now.
    pub waiting: usize,
}

/// The bot's global limit: requests per second across every bucket.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GlobalHeadroom {
    /// Requests allowed per second.
    pub limit: u32,
    /// Slots taken now: requests in flight and those answered within the last second.
    pub used: u32,
    /// After a global 429: how long every request still waits.
    pub paused_for_ms: u64,
}

/// The invalid-request guard: 401/403/429 answers against the budget past which routes stop.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InvalidHeadroom {
    /// Invalid answers in the window.
    pub count: u32,
    /// The budget (`discord.invalid_request_percent` of Discord's limit).
    pub budget: u32,
    /// Discord's own limit, past which it bans the IP for an hour.
    pub discord_limit: u32,
    /// The window, in seconds.
    pub window_s: u64,
}

/// The REST client's rate limits now.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RateHeadroom {
    /// The tightest buckets (least left first), at most [`MAX_BUCKETS_SHOWN`].
    pub buckets: Vec<BucketHeadroom>,
    /// Buckets tracked in all.
    pub buckets_tracked: usize,
    /// The global limit.
    pub global: GlobalHeadroom,
    /// The invalid-request guard.
    pub invalid: InvalidHeadroom,
}

/// Where the console reads rate-limit headroom: the bot's REST client.
pub trait HeadroomSource: Send + Sync {
    /// The headroom now. Cheap: the health panel asks every few seconds.
    fn headroom(&self) -> RateHeadroom;
}
