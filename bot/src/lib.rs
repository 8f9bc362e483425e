//! The Discord side of switchboard: the serenity gateway client and the slash commands, the durable
//! session/message store, and [`DiscordSurface`], the Discord implementation of
//! `switchboard_engine::Surface`.
//!
//! # Rate limits
//!
//! Every Discord REST call of the service goes through one [`rest::DiscordRest`] (clones share
//! its limiter): the surface's actions, slash-command registration, and the answers to every
//! interaction (slash commands, autocompletes, approval clicks).
//! It follows Discord's rules rather than reacting to 429s:
//!
//! - a request waits for its bucket ([`rest::route`] keys routes by method, template and major
//!   parameter; `X-RateLimit-Bucket`, `-Remaining` and `-Reset-After` of the previous answer
//!   set the gate), one request per bucket in flight;
//! - at most 50 requests in any second across buckets, a slot held while the request is in
//!   flight and for a second after its answer (interaction callbacks exempt, as on Discord);
//! - a 429 that happens anyway is honoured (`retry_after`, every bucket when `global`) and
//!   counted ([`rest::RestStats`]);
//! - 401, 403 and 429 answers are counted over a sliding 10 minutes ([`rest::invalid`]); past
//!   `discord.invalid_request_percent` of Discord's 10,000, the routes that earned them are no
//!   longer called (the call fails `unavailable`, and an error is logged saying why) until the
//!   count falls back.
//!
//! No wait is unbounded: a bucket closed longer than [`rest::limits::MAX_WAIT`] fails the call at
//! once with `rate_limited` and its retry-after, and garbage headers cost a one-second backoff.
//! serenity's own HTTP client makes one request: `GET /gateway`, when the gateway starts.

#![warn(missing_docs)]

pub mod approvals;
pub mod backfill;
pub mod commands;
pub mod gateway;
pub mod lease;
pub mod observe;
pub mod payload;
pub mod registration;
pub mod rest;
pub mod service;
pub mod session_lost;
pub mod shards;
pub mod surface;

pub use surface::DiscordSurface;
