//! A small fake Discord for switchboard's tests, benchmarks and offline playground.
//!
//! It speaks enough of Discord's API v10 — REST under `/api/v10` and the gateway websocket —
//! for serenity 0.12 and poise 0.7 to run against it unchanged, and it is strict where Discord
//! is strict (field limits, permissions, unknown ids, Discord's error JSON), so it catches bugs
//! instead of hiding them. A control API under `/_fake/` lets tests act as users, read what the
//! bot did (`GET /_fake/requests`, each request with the status it got) and inject faults (429s,
//! 500s, dropped sockets, op 7, op 9). The gateway shards as Discord's does (see
//! [Shards](#shards)).
//! It binds loopback only and keeps every store bounded.
//!
//! Point serenity at it with `HttpBuilder::new(token).proxy(fake.base_url())
//! .ratelimiter_disabled(true)`; the gateway URL comes from `GET /api/v10/gateway`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), fake_discord::FakeError> {
//! use fake_discord::{FakeDiscord, UserMessage, World, demo};
//! let fake = FakeDiscord::start(World::demo()).await?;
//! println!("{}", fake.base_url()); // http://127.0.0.1:PORT
//! fake.post_message(UserMessage {
//!     channel_id: demo::OPS.into(),
//!     author_id: demo::STANLEY.into(),
//!     content: "hello <@1000000000000000001>".into(),
//!     ..Default::default()
//! })
//! .ok();
//! fake.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # The demo world ([`World::demo`], used by the binary without `--world`)
//!
//! Built from the `demo_world` crate alone (re-exported as [`demo`]): its guild, channels,
//! threads, users, roles and DM, every id and name, are written there and nowhere else. A
//! channel the world marks `bot_can_send: false` answers REST sends 50013.
//!
//! # Attachments
//!
//! `POST /api/v10/channels/{id}/messages` also takes `multipart/form-data`, as Discord does:
//! a `payload_json` part (the JSON body, checked the same way) and file parts `files[0]` to
//! `files[9]`, each with a filename. At most 10 files; content may be empty when a file is
//! attached; `payload_json.attachments` (`[{"id": n, "filename"?, "description"?}]`) renames or
//! describes `files[n]` (an `id` that is not an uploaded `n` → 50035). A missing
//! `payload_json`, an unknown part name or a file without a filename → 400 50035 naming the
//! part; an unparseable multipart body → 400 50035 (`MULTIPART_INVALID`); a file over
//! [`FakeOptions::max_upload_bytes`] (default 10 MiB) → 413 `{"code":40005,"message":"Request
//! entity too large"}`. The request log keeps each part ([`RecordedRequest::parts`]) and the
//! `payload_json` as the body.
//!
//! Messages then carry `attachments: [{id, filename, size, url, proxy_url, content_type,
//! description?}]`, with `url` (and `proxy_url`) =
//! `{base_url}/attachments/{channel_id}/{attachment_id}/{filename, percent-encoded}`. Those
//! URLs are served without auth, like Discord's CDN (`GET`, 404 for anything unknown), from
//! memory (bounded by [`SizeLimits::attachment_bytes`]). Users' messages get attachments through
//! [`UserMessage::attachments`] (`POST /_fake/messages` with
//! `"attachments": [{"filename", "content_base64", "content_type"?}]`). Filenames are kept
//! verbatim, `../../etc/passwd` included: whoever saves them must sanitize.
//!
//! # Rate limits
//!
//! REST requests are held to Discord's limits ([`RateLimits`], set with
//! [`FakeOptions::rate_limits`]): per-route buckets split by channel, guild or webhook (message
//! creates 5 per 5 s per channel, edits 5 per 5 s, deletes 5 per 1 s, the bot's reactions 1 per
//! 250 ms, everything else 50 per 1 s) and 50 requests per second across all of them
//! (interaction callbacks and follow-ups excepted). Every answer carries `X-RateLimit-Limit`,
//! `-Remaining`, `-Reset`, `-Reset-After` and `-Bucket`; a request over a limit answers 429
//! `{"message","retry_after","global","code":0}` with `Retry-After`, `X-RateLimit-Scope`
//! (`user` or `global`) and, for the global limit, `X-RateLimit-Global: true`. Injected faults
//! and the token check come first and spend nothing; the request log records every status.
//! `GET /_fake/ratelimits` ([`FakeDiscord::rate_tally`]) reports the busiest second's requests
//! under the global limit, refused ones included, and the global and route 429s so far: whether
//! several nodes sharing one bot token kept to the global limit together; `DELETE` starts it afresh.
//!
//! # The world file
//!
//! `fake-discord --world FILE` (or [`World::load`]) takes JSON:
//!
//! ```json
//! {
//!   "bot":   {"id": "1000000000000000001", "username": "switchboard"},
//!   "users": [{"id": "1000000000000000101", "username": "stanley", "global_name": "Stanley"}],
//!   "guilds": [{
//!     "id": "1000000000000000200", "name": "Lab",
//!     "roles": [{"id": "1000000000000000301", "name": "oncall"}],
//!     "channels": [
//!       {"id": "1000000000000000401", "name": "ops", "type": 0},
//!       {"id": "1000000000000000403", "name": "secret", "type": 0, "bot_can_send": false},
//!       {"id": "1000000000000000411", "name": "incident-42", "type": 11, "parent_id": "1000000000000000401"}
//!     ]
//!   }],
//!   "dms": [{"id": "1000000000000000501", "recipient_id": "1000000000000000101"}]
//! }
//! ```
//!
//! Channel `type` follows Discord (0 text, 4 category, 5 announcement, 11 public thread,
//! 12 private thread, 15 forum). Per channel, `bot_can_see` and `bot_can_send` default to
//! true and `bot_can_manage_messages` to false. Optional extras: `bot.application_id`,
//! `bot.token` (the only token accepted; by default any non-empty one), user `bot`, guild
//! `owner_id`, `members` (`[{"user_id","roles","nick"}]`, default: every user) and
//! `bot_can_manage_channels` (default true: without it, `POST /guilds/{id}/channels`, `PATCH`
//! and `DELETE /channels/{id}` on its channels answer 50013), role `permissions`, channel
//! `topic` and `archived`, and the world's `guilds_per_shard_max` (see [Shards](#shards)).
//! Unknown keys are rejected.
//!
//! # Guild channels
//!
//! `POST /api/v10/guilds/{id}/channels` creates a channel (201; `name` 1–100 characters,
//! `type` 0, 2, 4, 5, 13 or 15, `topic` up to 1,024 characters — 4,096 for a forum — and kept
//! only by text, announcement and forum channels, `parent_id` a category of the guild; every
//! field problem in one 50035); `PATCH /api/v10/channels/{id}` renames a guild channel, sets or
//! clears its topic, or moves it (a thread's changes follow the thread rules); `DELETE
//! /api/v10/channels/{id}` deletes a channel with its threads (a category's channels stay,
//! without a parent; a DM is only closed). Each sends `CHANNEL_CREATE`, `CHANNEL_UPDATE` or
//! `CHANNEL_DELETE` (and `THREAD_DELETE`) on the gateway.

#![warn(missing_docs)]

mod api_error;
mod attachments;
mod control;
mod fake;
mod gateway;
mod hub;
mod payloads;
mod rest;
mod shards;
mod shared;
mod snowflake;
mod state;
mod validation;
mod world;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use api_error::{ApiError, FormErrors};
pub use attachments::{DEFAULT_MAX_UPLOAD_BYTES, MAX_FILES};
pub use control::ControlError;
pub use fake::{
    ChannelPatch, ComponentClick, FakeState, Fault, GatewayFaultKind, HandshakeFault,
    NewAttachment, NewChannel, RestFault, SlashCommand, UserMessage,
};
pub use hub::{intents, HubLimits};
/// Discord ids: the workspace's one id type, re-exported.
pub use protocol::Snowflake;
pub use rest::ratelimit::{RateLimits, RateTally, Window};
pub use shards::{
    shard_of, ConnectionInfo, ConnectionState, GatewaySettings, GatewaySettingsPatch,
    IdentifyRecord, DEFAULT_GUILDS_PER_SHARD_MAX, DEFAULT_SESSION_START_TOTAL, IDENTIFY_INTERVAL,
    MAX_CONCURRENCY_LIMIT, MAX_SESSION_START_TOTAL, MAX_SHARDS,
};
pub use state::{RecordedPart, RecordedRequest, SizeLimits};
pub use validation::{MAX_CONTENT_CHARS, MAX_NONCE_CHARS};
pub use world::{
    BotSpec, ChannelSpec, DmSpec, EmojiSpec, GuildSpec, MemberSpec, RoleSpec, UserSpec, World,
    WorldError,
};

use shared::Shared;

/// The ids and data of [`World::demo`]: the shared `demo_world` crate.
pub use demo_world as demo;

/// Why the fake could not start.
#[derive(Debug, thiserror::Error)]
pub enum FakeError {
    /// The fake only listens on loopback addresses.
    #[error("refusing to bind {0}: fake-discord only listens on loopback (127.0.0.0/8 or ::1)")]
    NotLoopback(SocketAddr),
    /// The address could not be bound.
    #[error("cannot bind {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why binding failed (the port is taken, say).
        #[source]
        source: std::io::Error,
    },
    /// The world is inconsistent.
    #[error(transparent)]
    World(#[from] WorldError),
    /// An option is out of range (a shard count of 0, say).
    #[error("bad fake-discord option: {0}")]
    Options(String),
}

/// Tunables; the defaults suit tests and the playground.
#[derive(Clone, Copy, Debug)]
pub struct FakeOptions {
    /// The heartbeat interval sent in HELLO, in milliseconds (Discord sends 41250).
    pub heartbeat_interval_ms: u64,
    /// Bounds of the store.
    pub limits: SizeLimits,
    /// Bounds of the gateway hub.
    pub hub: HubLimits,
    /// Largest file accepted per attachment, in bytes (REST uploads and control-API
    /// attachments); a larger one answers 413 `{"code":40005}`. Default
    /// [`DEFAULT_MAX_UPLOAD_BYTES`] (10 MiB, Discord's default).
    pub max_upload_bytes: usize,
    /// The rate limits REST requests are held to (default: Discord's, [`RateLimits::discord`]).
    pub rate_limits: RateLimits,
    /// The shard count `GET /api/v10/gateway/bot` recommends (default 1; `--shards`).
    pub shards: u32,
    /// `session_start_limit.max_concurrency` (default 1; `--max-concurrency`): shard `i`
    /// identifies in bucket `i % max_concurrency`, one IDENTIFY per bucket per 5 s.
    pub max_concurrency: u32,
    /// IDENTIFYs allowed per 24 h (default [`DEFAULT_SESSION_START_TOTAL`], Discord's 1,000).
    pub session_start_total: u32,
    /// Hold unsharded IDENTIFYs to the bucket rule too (default false; see
    /// [`GatewaySettings::limit_unsharded_identifies`]).
    pub limit_unsharded_identifies: bool,
}

impl Default for FakeOptions {
    fn default() -> Self {
        let gateway = GatewaySettings::default();
        FakeOptions {
            heartbeat_interval_ms: 41_250,
            limits: SizeLimits::default(),
            hub: HubLimits::default(),
            max_upload_bytes: DEFAULT_MAX_UPLOAD_BYTES,
            rate_limits: RateLimits::discord(),
            shards: gateway.shards,
            max_concurrency: gateway.max_concurrency,
            session_start_total: gateway.session_start_total,
            limit_unsharded_identifies: gateway.limit_unsharded_identifies,
        }
    }
}

impl FakeOptions {
    /// The gateway settings these options and `world` start with.
    fn gateway_settings(&self, world: &World) -> GatewaySettings {
        GatewaySettings {
            shards: self.shards,
            max_concurrency: self.max_concurrency,
            guilds_per_shard_max: world
                .guilds_per_shard_max
                .unwrap_or(DEFAULT_GUILDS_PER_SHARD_MAX),
            session_start_total: self.session_start_total,
            session_start_remaining: self.session_start_total,
            limit_unsharded_identifies: self.limit_unsharded_identifies,
        }
    }
}

/// A running fake Discord. Dropping it stops the server; [`FakeDiscord::shutdown`] does so
/// gracefully.
#[derive(Debug)]
pub struct FakeDiscord {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stop: Mutex<Option<oneshot::Sender<()>>>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl FakeDiscord {
    /// Starts the fake on `127.0.0.1` with a free port.
    pub async fn start(world: World) -> Result<FakeDiscord, FakeError> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        FakeDiscord::start_with(world, addr, FakeOptions::default()).await
    }

    /// Starts the fake on a given loopback address (port 0 = any free port).
    pub async fn start_on(world: World, addr: SocketAddr) -> Result<FakeDiscord, FakeError> {
        FakeDiscord::start_with(world, addr, FakeOptions::default()).await
    }

    /// Starts the fake with explicit options.
    pub async fn start_with(
        world: World,
        addr: SocketAddr,
        options: FakeOptions,
    ) -> Result<FakeDiscord, FakeError> {
        if !addr.ip().is_loopback() {
            return Err(FakeError::NotLoopback(addr));
        }
        world.validate()?;
        let gateway = options.gateway_settings(&world);
        gateway.check().map_err(FakeError::Options)?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| FakeError::Bind { addr, source })?;
        let local = listener
            .local_addr()
            .map_err(|source| FakeError::Bind { addr, source })?;
        let now = snowflake::now_ms();
        let shared = Arc::new(Shared {
            dir: payloads::Directory::new(&world, now),
            store: Mutex::new(state::Store::new(&world, options.limits, now)),
            hub: hub::Hub::new(options.hub, gateway),
            ids: snowflake::IdGenerator::above(world.max_id()),
            base_url: format!("http://{local}"),
            gateway_url: format!("ws://{local}"),
            heartbeat_interval_ms: options.heartbeat_interval_ms.max(1),
            rates: rest::ratelimit::RateBook::new(options.rate_limits),
            max_upload_bytes: options.max_upload_bytes,
            max_request_bytes: rest::max_request_bytes(options.max_upload_bytes),
            world: Arc::new(world),
        });
        let app = rest::router(shared.clone())
            .merge(control::router(shared.clone()))
            .merge(attachments::router(shared.clone()))
            .merge(gateway::router(shared.clone()));
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let serve = axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(async move {
                let _ = stop_rx.await;
            });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "fake-discord server stopped with an error");
            }
        });
        tracing::info!(base_url = %shared.base_url, "fake-discord listening");
        Ok(FakeDiscord {
            shared,
            addr: local,
            stop: Mutex::new(Some(stop_tx)),
            task: Mutex::new(Some(task)),
        })
    }

    /// `http://127.0.0.1:PORT`: what serenity's `HttpBuilder::proxy` and switchboard's
    /// `discord.api_base_url` take.
    pub fn base_url(&self) -> String {
        self.shared.base_url.clone()
    }

    /// `ws://127.0.0.1:PORT`: the gateway URL `GET /api/v10/gateway` hands out.
    pub fn gateway_url(&self) -> String {
        self.shared.gateway_url.clone()
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The world being served.
    pub fn world(&self) -> &World {
        &self.shared.world
    }

    /// Posts a message as a user (MESSAGE_CREATE); returns the Discord message JSON.
    pub fn post_message(&self, message: UserMessage) -> Result<Value, ControlError> {
        fake::post_message(&self.shared, message)
    }

    /// Edits a message as its author would (MESSAGE_UPDATE).
    pub fn edit_message(
        &self,
        channel_id: Snowflake,
        message_id: Snowflake,
        content: impl Into<String>,
    ) -> Result<Value, ControlError> {
        fake::edit_message(&self.shared, channel_id, message_id, content.into())
    }

    /// Deletes a message (MESSAGE_DELETE).
    pub fn delete_message(
        &self,
        channel_id: Snowflake,
        message_id: Snowflake,
    ) -> Result<(), ControlError> {
        Ok(self.shared.delete_message(channel_id, message_id, false)?)
    }

    /// A user's reaction added (`present`: MESSAGE_REACTION_ADD) or taken back
    /// (MESSAGE_REACTION_REMOVE); `emoji` is unicode or `name:id`.
    pub fn react(
        &self,
        channel_id: Snowflake,
        message_id: Snowflake,
        user_id: Snowflake,
        emoji: &str,
        present: bool,
    ) -> Result<(), ControlError> {
        fake::react(
            &self.shared,
            channel_id,
            message_id,
            user_id,
            emoji,
            present,
        )
    }

    /// A user starts typing (TYPING_START).
    pub fn typing(&self, channel_id: Snowflake, user_id: Snowflake) -> Result<(), ControlError> {
        fake::check_user(&self.shared, user_id)?;
        Ok(self.shared.typing(channel_id, user_id, false)?)
    }

    /// Creates a channel or thread (CHANNEL_CREATE / THREAD_CREATE); returns its JSON.
    pub fn create_channel(&self, channel: NewChannel) -> Result<Value, ControlError> {
        fake::create_channel(&self.shared, channel)
    }

    /// Changes a channel or thread (CHANNEL_UPDATE / THREAD_UPDATE).
    pub fn update_channel(
        &self,
        channel_id: Snowflake,
        patch: ChannelPatch,
    ) -> Result<Value, ControlError> {
        fake::update_channel(&self.shared, channel_id, patch)
    }

    /// Deletes a channel and its threads (CHANNEL_DELETE / THREAD_DELETE).
    pub fn delete_channel(&self, channel_id: Snowflake) -> Result<(), ControlError> {
        fake::delete_channel(&self.shared, channel_id)
    }

    /// Every message held for a channel, oldest first.
    pub fn channel_messages(&self, channel_id: Snowflake) -> Result<Vec<Value>, ControlError> {
        fake::channel_messages(&self.shared, channel_id)
    }

    /// Invokes a registered slash command as a user (INTERACTION_CREATE); returns
    /// `{"id","token","application_id"}`.
    pub fn invoke_command(&self, command: SlashCommand) -> Result<Value, ControlError> {
        fake::invoke_command(&self.shared, command)
    }

    /// Clicks a button on a message as a user (INTERACTION_CREATE type 3); returns
    /// `{"id","token","application_id"}`.
    pub fn click_component(&self, click: ComponentClick) -> Result<Value, ControlError> {
        fake::click_component(&self.shared, click)
    }

    /// An interaction and how the bot answered it:
    /// `{"id","token","name","channel_id","user_id","response","original_message","followups"}`.
    pub fn interaction(&self, interaction_id: Snowflake) -> Result<Value, ControlError> {
        fake::interaction(&self.shared, interaction_id)
    }

    /// The registered commands: `{"global":[...],"guilds":{"id":[...]}}`.
    pub fn commands(&self) -> Value {
        fake::commands(&self.shared)
    }

    /// Every REST request received (bounded log), in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.iter().cloned().collect()
    }

    /// What the rate limits saw since the start: the busiest second's requests and the 429s
    /// of each scope (`GET /_fake/ratelimits`).
    pub fn rate_tally(&self) -> RateTally {
        self.shared.rates.tally()
    }

    /// Starts [`FakeDiscord::rate_tally`] afresh (`DELETE /_fake/ratelimits`).
    pub fn reset_rate_tally(&self) {
        self.shared.rates.reset_tally();
    }

    /// Clears the request log.
    pub fn clear_requests(&self) {
        self.shared.lock().requests.clear();
    }

    /// Injects a fault; returns how many gateway connections a gateway fault reached.
    pub fn inject_fault(&self, fault: Fault) -> Result<usize, ControlError> {
        fake::inject_fault(&self.shared, fault)
    }

    /// Sends a dispatch as given to every gateway session (`d` verbatim, valid JSON or not);
    /// returns how many sessions got it.
    pub fn dispatch_raw(&self, name: &str, d: &str) -> usize {
        self.shared.publish_raw(name.to_owned(), d.to_owned())
    }

    /// The gateway's sharding settings now (`GET /_fake/gateway`).
    pub fn gateway_settings(&self) -> GatewaySettings {
        self.shared.hub.settings()
    }

    /// Changes the gateway's sharding settings while the fake runs (`PATCH /_fake/gateway`):
    /// `max_concurrency`, the guild limit per shard, the session-start budget... All or
    /// nothing; returns the settings now.
    pub fn set_gateway_settings(
        &self,
        patch: GatewaySettingsPatch,
    ) -> Result<GatewaySettings, ControlError> {
        self.shared
            .hub
            .change_settings(&patch)
            .map_err(ControlError::BadBody)
    }

    /// Every IDENTIFY received (the last [`HubLimits::identifies`]), oldest first, accepted or
    /// not (`GET /_fake/gateway/identifies`).
    pub fn identifies(&self) -> Vec<IdentifyRecord> {
        self.shared.hub.identifies()
    }

    /// Every open gateway connection with its session and shard
    /// (`GET /_fake/gateway/connections`).
    pub fn connections(&self) -> Vec<ConnectionInfo> {
        self.shared.hub.connections()
    }

    /// Closes one gateway connection with `code` (4000 to 4999), or drops it without a close
    /// frame (`None`), as a failing node or network would (`POST /_fake/gateway/close`).
    pub fn close_connection(&self, connection: u64, code: Option<u16>) -> Result<(), ControlError> {
        fake::close_connections(
            &self.shared,
            fake::CloseTarget::Connection(connection),
            code,
        )
        .map(|_| ())
    }

    /// Closes (or drops, with `None`) every connection whose session is on shard `shard_id`;
    /// returns how many.
    pub fn close_shard(&self, shard_id: u32, code: Option<u16>) -> Result<usize, ControlError> {
        fake::close_connections(&self.shared, fake::CloseTarget::Shard(shard_id), code)
    }

    /// Counters.
    pub fn state(&self) -> FakeState {
        fake::state(&self.shared)
    }

    /// Stops accepting, closes gateway connections and waits (at most two seconds) for
    /// in-flight requests.
    pub async fn shutdown(self) {
        self.shared.hub.close_all();
        if let Some(stop) = self
            .stop
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            let _ = stop.send(());
        }
        let task = self
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(mut task) = task {
            if tokio::time::timeout(Duration::from_secs(2), &mut task)
                .await
                .is_err()
            {
                task.abort();
            }
        }
    }
}

impl Drop for FakeDiscord {
    fn drop(&mut self) {
        self.shared.hub.close_all();
        if let Some(task) = self
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
    }
}
