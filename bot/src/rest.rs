//! Discord REST: the one client every Discord REST call of the service goes through (the
//! surface's actions, slash-command answers and registration, approval cards). Our own
//! requests, so every answer's status, error code, field errors and `Retry-After` reach the
//! tool errors, and retries stay bounded; Discord's rate limits are followed before each
//! request ([`limits`]), and answers of 401/403/429 are counted to protect the token
//! ([`invalid`]).

pub mod invalid;
pub mod limits;
pub mod route;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use entity::Snowflake;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use switchboard_engine::surface::{Fetched, OutgoingFile, SurfaceError};

use limits::{retry_after_of, Limiter};
pub use limits::{LimiterOptions, RestStats};
use route::Route;

/// Discord's API, or the same paths under a proxy or fake.
pub const DISCORD_API: &str = "https://discord.com";
/// Attempts for a request (the first plus retries after 5xx or a lost connection when the
/// request is idempotent).
const ATTEMPTS: u32 = 3;
/// Attempts for a request Discord keeps answering with a global 429 (not acted on, so safe to
/// send again). More than [`ATTEMPTS`]: a global 429 says nothing of the request itself, and
/// when its wait ends every request it held goes at once, so under a burst the slot that frees
/// may go to another request several times over.
const GLOBALLY_LIMITED_ATTEMPTS: u32 = 10;
/// Longest `retry_after` retried within a call; a longer one is returned to the caller (the
/// bucket still waits it out before its next request).
const MAX_RETRY_WAIT: Duration = Duration::from_secs(5);
/// The most one call may take, queueing for its bucket and every attempt included.
const CALL_DEADLINE: Duration = Duration::from_secs(120);

/// A REST client bound to one bot token. Clones share one rate limiter.
#[derive(Clone)]
pub struct DiscordRest {
    client: reqwest::Client,
    api: String,
    authorization: String,
    limiter: Arc<Limiter>,
    /// Where each answer is counted (`switchboard_discord_requests_total`), once set.
    metrics: Arc<OnceLock<Arc<switchboard_engine::metrics::Metrics>>>,
    /// The runtime the client was made on, which sends every request (see [`DiscordRest::send`]).
    io: Option<tokio::runtime::Handle>,
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What a request carries.
#[derive(Clone, Copy)]
enum Payload<'a> {
    Empty,
    Json(&'a Value),
    /// `multipart/form-data`: the JSON as `payload_json`, the files as `files[n]`.
    Files(&'a Value, &'a [OutgoingFile]),
}

impl Payload<'_> {
    fn multipart(json: &Value, files: &[OutgoingFile]) -> reqwest::multipart::Form {
        let payload = reqwest::multipart::Part::text(json.to_string())
            .mime_str("application/json")
            .expect("a valid mime type");
        files.iter().enumerate().fold(
            reqwest::multipart::Form::new().part("payload_json", payload),
            |form, (index, file)| {
                form.part(
                    format!("files[{index}]"),
                    reqwest::multipart::Part::bytes(file.content.clone())
                        .file_name(file.filename.clone()),
                )
            },
        )
    }
}

/// A failed request: the surface error, plus whether trying again may help.
#[derive(Debug)]
struct Failure {
    error: SurfaceError,
    retry_after: Option<Duration>,
    retryable: bool,
    /// A global 429 (not the route's).
    global: bool,
}

fn nonce() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = switchboard_engine::clock::now_micros();
    // At most 25 characters, as Discord requires: "sb" + 13 hex + 8 hex.
    format!(
        "sb{:013x}{:08x}",
        now & 0x000f_ffff_ffff_ffff,
        COUNTER.fetch_add(1, Ordering::Relaxed) as u32
    )
}

/// Percent-encodes an emoji for a reaction route.
fn encode_path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~' | b':') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Maps Discord's answer onto the surface's error kinds.
fn failure(status: StatusCode, headers: &reqwest::header::HeaderMap, body: Value) -> Failure {
    let code = body.get("code").and_then(Value::as_i64).unwrap_or(0);
    let message = body
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("no message")
        .to_owned();
    let described = format!(
        "Discord answered {} (code {code}): {message}",
        status.as_u16()
    );
    if status == StatusCode::TOO_MANY_REQUESTS {
        let wait = retry_after_of(headers, &body);
        return Failure {
            error: SurfaceError::RateLimited { retry_after: wait },
            retry_after: Some(wait),
            retryable: true,
            global: limits::says_global(headers, &body),
        };
    }
    if status.is_server_error() {
        return Failure {
            error: SurfaceError::Unavailable(described),
            retry_after: None,
            retryable: true,
            global: false,
        };
    }
    let error = match (code, status) {
        (10003 | 10008, _) | (_, StatusCode::NOT_FOUND) => SurfaceError::NotFound(described),
        // Thread is archived: the state forbids it, not the input.
        (50083, _) => SurfaceError::Conflict(described),
        (50001 | 50013 | 50005, _) | (_, StatusCode::FORBIDDEN | StatusCode::UNAUTHORIZED) => {
            SurfaceError::Denied(described)
        }
        _ => SurfaceError::InvalidInput {
            message: described,
            details: body.get("errors").cloned().unwrap_or(Value::Null),
        },
    };
    Failure {
        error,
        retry_after: None,
        retryable: false,
        global: false,
    }
}

/// Where a channel sits, from `GET /channels/{id}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelFacts {
    /// The guild the channel belongs to; `None` for a DM.
    pub guild_id: Option<Snowflake>,
    /// The category of a channel, or the channel a thread lives in; `None` when it has neither.
    pub parent_id: Option<Snowflake>,
    /// Discord's channel `type` (0 text, 1 DM, 4 category, 11 public thread, 15 forum...), which
    /// [`SessionKind::from_channel_type`](switchboard_records::SessionKind::from_channel_type)
    /// maps to a session kind; 0 when the answer
    /// has none.
    pub kind: u64,
}

fn id_field(value: &Value, key: &str) -> Option<Snowflake> {
    value
        .get(key)
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<u64>().ok())
        .map(Snowflake)
}

impl DiscordRest {
    /// `base` is `https://discord.com` or a proxy/fake such as `http://127.0.0.1:PORT`; the
    /// rate limits are Discord's, and routes stop past half of Discord's invalid-request limit.
    pub fn new(base: &str, token: &str) -> Result<Self, reqwest::Error> {
        DiscordRest::with_options(base, token, LimiterOptions::default())
    }

    /// [`DiscordRest::new`] with explicit rate-limit options.
    pub fn with_options(
        base: &str,
        token: &str,
        options: LimiterOptions,
    ) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .user_agent(concat!(
                "DiscordBot (https://github.com/switchboard, ",
                env!("CARGO_PKG_VERSION"),
                ")"
            ))
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(20))
            .build()?;
        Ok(DiscordRest {
            client,
            api: format!("{}/api/v10", base.trim_end_matches('/')),
            authorization: format!("Bot {token}"),
            limiter: Arc::new(Limiter::new(options)),
            metrics: Arc::default(),
            io: tokio::runtime::Handle::try_current().ok(),
        })
    }

    /// Sends on the runtime the client was made on (the service's). A connection is driven by a
    /// task spawned where it was opened and then pooled: a request from the gateway's thread
    /// (an interaction's answer, a backfill) would otherwise leave that connection's traffic on
    /// the gateway's thread for good, in the way of every event after it. Dropping the answer
    /// stops the request, as dropping `send` itself would.
    async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Result<reqwest::Response>, tokio::task::JoinError> {
        let Some(io) = &self.io else {
            return Ok(request.send().await);
        };
        let task = io.spawn(request.send());
        let _abort = AbortOnDrop(task.abort_handle());
        task.await
    }

    /// Counts every answer from now on in `metrics` (this client and its clones; once).
    pub fn observe(&self, metrics: Arc<switchboard_engine::metrics::Metrics>) {
        let _ = self.metrics.set(metrics);
    }

    /// Takes this node's share of the bot's global limit and invalid-request budget, `nodes`
    /// nodes sharing the token ([`Limiter::share_among`]).
    pub fn share_limits_among(&self, nodes: u32) {
        self.limiter.share_among(nodes);
    }

    /// The rate limiter's counters: requests sent, 429s received, waits, invalid answers.
    pub fn stats(&self) -> RestStats {
        self.limiter.stats()
    }

    /// What the rate limits have left now (the console's health panel).
    pub fn headroom(&self) -> switchboard_engine::headroom::RateHeadroom {
        self.limiter.headroom()
    }

    /// Counts a request another client makes (serenity's `GET /gateway`) against this one's
    /// global limit: hold the answer while it is made; its second starts when it is dropped.
    pub async fn hold_global_slot(&self) -> Result<limits::GlobalHold, SurfaceError> {
        self.limiter.hold_global().await
    }

    async fn once(
        &self,
        method: &Method,
        path: &str,
        route: &Route,
        body: Payload<'_>,
    ) -> Result<Value, Failure> {
        let ticket = self.limiter.acquire(route).await.map_err(|error| Failure {
            error,
            retry_after: None,
            retryable: false,
            global: false,
        })?;
        let mut request = self
            .client
            .request(method.clone(), format!("{}{path}", self.api))
            .header(reqwest::header::AUTHORIZATION, &self.authorization);
        match body {
            Payload::Empty => {}
            Payload::Json(body) => request = request.json(body),
            Payload::Files(json, files) => {
                request = request.multipart(Payload::multipart(json, files));
            }
        }
        // Only a runtime shutting down stops the task, or a panic inside reqwest.
        let sent = self.send(request).await.map_err(|stopped| Failure {
            error: SurfaceError::Unavailable(format!(
                "the request stopped before Discord answered: {stopped}"
            )),
            retry_after: None,
            retryable: false,
            global: false,
        })?;
        if let Some(metrics) = self.metrics.get() {
            let status = sent.as_ref().map_or(0, |r| r.status().as_u16());
            metrics.discord_request(method.as_str(), path, status);
        }
        let response = sent.map_err(|e| Failure {
            error: SurfaceError::Unavailable(format!("cannot reach Discord: {e}")),
            retry_after: None,
            retryable: e.is_connect() || e.is_timeout(),
            global: false,
        })?;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = match response.bytes().await {
            Ok(bytes) => bytes,
            Err(e) => {
                // The headers arrived: the bucket still learns from them.
                self.limiter
                    .complete(ticket, route, status.as_u16(), &headers, &Value::Null);
                return Err(Failure {
                    error: SurfaceError::Unavailable(format!("Discord's answer was cut off: {e}")),
                    retry_after: None,
                    retryable: true,
                    global: false,
                });
            }
        };
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        self.limiter
            .complete(ticket, route, status.as_u16(), &headers, &body);
        if status.is_success() {
            Ok(body)
        } else {
            Err(failure(status, &headers, body))
        }
    }

    /// Sends a request, retrying 5xx and 429 a bounded number of times when `idempotent`.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        idempotent: bool,
    ) -> Result<Value, SurfaceError> {
        let payload = body.as_ref().map_or(Payload::Empty, Payload::Json);
        self.call_with(method, path, payload, idempotent).await
    }

    /// Sends a request through the rate limiter within [`CALL_DEADLINE`]. A 429 is retried
    /// (Discord did not act on it) when its wait is short; 5xx and lost connections only when
    /// `idempotent`.
    async fn call_with(
        &self,
        method: Method,
        path: &str,
        body: Payload<'_>,
        idempotent: bool,
    ) -> Result<Value, SurfaceError> {
        let route = Route::of(&method, path);
        let attempts = async {
            let mut attempt = 0;
            loop {
                attempt += 1;
                let failure = match self.once(&method, path, &route, body).await {
                    Ok(value) => return Ok(value),
                    Err(failure) => failure,
                };
                let honoured = failure.retry_after.is_some();
                let wait = failure
                    .retry_after
                    .unwrap_or(Duration::from_millis(200 * 2u64.pow(attempt - 1)));
                let may_retry = failure.retryable && (idempotent || honoured);
                let most = if failure.global {
                    GLOBALLY_LIMITED_ATTEMPTS
                } else {
                    ATTEMPTS
                };
                if !(may_retry && attempt < most && wait <= MAX_RETRY_WAIT) {
                    return Err(failure.error);
                }
                tracing::warn!(route = %route.label, attempt, wait_ms = wait.as_millis() as u64, error = %failure.error, "retrying Discord request");
                // After a 429 the limiter holds the bucket (or every bucket) for its wait.
                if !honoured {
                    tokio::time::sleep(wait).await;
                }
            }
        };
        tokio::time::timeout(CALL_DEADLINE, attempts)
            .await
            .unwrap_or_else(|_| {
                Err(SurfaceError::Unavailable(format!(
                    "no answer from Discord for {} within {} s (queued behind its rate limits or retrying)",
                    route.label,
                    CALL_DEADLINE.as_secs()
                )))
            })
    }

    /// `GET /gateway/bot`: the shard count Discord recommends and its IDENTIFY concurrency.
    pub async fn gateway_bot(&self) -> Result<crate::shards::Recommended, SurfaceError> {
        let value = self.call(Method::GET, "/gateway/bot", None, true).await?;
        crate::shards::Recommended::from_json(&value).ok_or_else(|| {
            SurfaceError::Unavailable(format!(
                "GET /gateway/bot answered without a shard count: {value}"
            ))
        })
    }

    /// The bot's own user (`GET /users/@me`): how a token is checked before connecting.
    pub async fn current_user(&self) -> Result<Value, SurfaceError> {
        self.call(Method::GET, "/users/@me", None, true).await
    }

    /// Where a channel sits (`GET /channels/{id}`): its guild, its parent and its type. Retried
    /// after 5xx and 429, like every request here.
    pub async fn channel(&self, channel_id: Snowflake) -> Result<ChannelFacts, SurfaceError> {
        let value = self
            .call(Method::GET, &format!("/channels/{channel_id}"), None, true)
            .await?;
        Ok(ChannelFacts {
            guild_id: id_field(&value, "guild_id"),
            parent_id: id_field(&value, "parent_id"),
            kind: value.get("type").and_then(Value::as_u64).unwrap_or(0),
        })
    }

    /// Posts a message. The body carries a nonce with `enforce_nonce` ([`Self::post_message_body`]),
    /// so the retries after a timeout or 5xx can never post twice: `nonce` when given (an agent
    /// run's, the same when the run runs again, so Discord answers with the message posted the
    /// first time), else a unique one.
    /// With files, the request is `multipart/form-data` (`payload_json` plus `files[n]`).
    pub async fn send_message(
        &self,
        channel_id: Snowflake,
        content: &str,
        reply_to: Option<Snowflake>,
        allowed_mentions: Value,
        files: &[OutgoingFile],
        nonce: Option<&str>,
    ) -> Result<Value, SurfaceError> {
        let mut body = json!({
            "content": content,
            "allowed_mentions": allowed_mentions,
        });
        if let Some(nonce) = nonce {
            body["nonce"] = json!(nonce);
        }
        if let Some(reply_to) = reply_to {
            body["message_reference"] = json!({
                "message_id": reply_to.to_string(),
                "channel_id": channel_id.to_string(),
                "fail_if_not_exists": false,
            });
        }
        self.post_message_body(channel_id, body, files).await
    }

    /// Downloads an attachment from its CDN url (no bot token is sent), keeping at most
    /// `limit` bytes.
    pub async fn fetch(&self, url: &str, limit: u64) -> Result<Fetched, SurfaceError> {
        let unavailable =
            |e: reqwest::Error| SurfaceError::Unavailable(format!("cannot fetch {url}: {e}"));
        let mut response = self
            .client
            .get(url)
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .map_err(unavailable)?;
        let status = response.status();
        if status == StatusCode::NOT_FOUND {
            return Err(SurfaceError::NotFound(format!(
                "the attachment at {url} is gone (404)"
            )));
        }
        if !status.is_success() {
            return Err(SurfaceError::Unavailable(format!(
                "fetching {url} answered {}",
                status.as_u16()
            )));
        }
        if response
            .content_length()
            .is_some_and(|length| length > limit)
        {
            return Ok(Fetched::OverLimit);
        }
        let mut content = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(unavailable)? {
            if content.len() as u64 + chunk.len() as u64 > limit {
                return Ok(Fetched::OverLimit);
            }
            content.extend_from_slice(&chunk);
        }
        Ok(Fetched::Bytes(content))
    }

    /// Replaces the content of one of the bot's own messages (`PATCH /channels/{id}/messages/{id}`)
    /// under the given `allowed_mentions`; returns Discord's message JSON, whose `edited_timestamp`
    /// is now set.
    pub async fn edit_message(
        &self,
        channel_id: Snowflake,
        message_id: Snowflake,
        content: &str,
        allowed_mentions: Value,
    ) -> Result<Value, SurfaceError> {
        self.call(
            Method::PATCH,
            &format!("/channels/{channel_id}/messages/{message_id}"),
            Some(json!({ "content": content, "allowed_mentions": allowed_mentions })),
            true,
        )
        .await
    }

    /// Posts a message whose body the caller built (content, components, allowed mentions),
    /// with `files` attached (`multipart/form-data`) when there are any; `enforce_nonce` is
    /// set on the body's `nonce` (a unique one added when it has none), so retries never post
    /// twice.
    pub async fn post_message_body(
        &self,
        channel_id: Snowflake,
        mut body: Value,
        files: &[OutgoingFile],
    ) -> Result<Value, SurfaceError> {
        if body.get("nonce").is_none() {
            body["nonce"] = json!(nonce());
        }
        body["enforce_nonce"] = json!(true);
        let path = format!("/channels/{channel_id}/messages");
        if files.is_empty() {
            return self.call(Method::POST, &path, Some(body), true).await;
        }
        body["attachments"] = files
            .iter()
            .enumerate()
            .map(|(index, file)| json!({ "id": index, "filename": file.filename }))
            .collect();
        self.call_with(Method::POST, &path, Payload::Files(&body, files), true)
            .await
    }

    /// Replaces a message with a body the caller built.
    pub async fn edit_message_body(
        &self,
        channel_id: Snowflake,
        message_id: Snowflake,
        body: Value,
    ) -> Result<Value, SurfaceError> {
        self.call(
            Method::PATCH,
            &format!("/channels/{channel_id}/messages/{message_id}"),
            Some(body),
            true,
        )
        .await
    }

    /// Deletes a message (`DELETE /channels/{id}/messages/{id}`); someone else's needs
    /// MANAGE_MESSAGES in that channel.
    pub async fn delete_message(
        &self,
        channel_id: Snowflake,
        message_id: Snowflake,
    ) -> Result<(), SurfaceError> {
        self.call(
            Method::DELETE,
            &format!("/channels/{channel_id}/messages/{message_id}"),
            None,
            true,
        )
        .await
        .map(drop)
    }

    /// Adds the bot's reaction to a message (`PUT .../reactions/{emoji}/@me`). `emoji` is a Unicode
    /// emoji or a custom one as `name:id`; it is percent-encoded here.
    pub async fn add_reaction(
        &self,
        channel_id: Snowflake,
        message_id: Snowflake,
        emoji: &str,
    ) -> Result<(), SurfaceError> {
        self.own_reaction(Method::PUT, channel_id, message_id, emoji)
            .await
    }

    /// Removes the bot's own reaction from a message (`DELETE .../reactions/{emoji}/@me`); `emoji`
    /// as for [`DiscordRest::add_reaction`].
    pub async fn remove_reaction(
        &self,
        channel_id: Snowflake,
        message_id: Snowflake,
        emoji: &str,
    ) -> Result<(), SurfaceError> {
        self.own_reaction(Method::DELETE, channel_id, message_id, emoji)
            .await
    }

    /// `PUT` or `DELETE` of the bot's own reaction (`.../reactions/{emoji}/@me`), `emoji`
    /// percent-encoded.
    async fn own_reaction(
        &self,
        method: Method,
        channel_id: Snowflake,
        message_id: Snowflake,
        emoji: &str,
    ) -> Result<(), SurfaceError> {
        let path = format!(
            "/channels/{channel_id}/messages/{message_id}/reactions/{}/@me",
            encode_path_segment(emoji)
        );
        self.call(method, &path, None, true).await.map(drop)
    }

    /// A channel, thread or DM as Discord describes it (`GET /channels/{id}`).
    pub async fn channel_json(&self, channel_id: Snowflake) -> Result<Value, SurfaceError> {
        self.call(Method::GET, &format!("/channels/{channel_id}"), None, true)
            .await
    }

    /// Opens a public thread without a starter message (`POST /channels/{id}/threads`, type
    /// 11); returns the thread. Not retried: a retry after a lost answer could open two.
    pub async fn create_thread(
        &self,
        parent: Snowflake,
        name: &str,
        auto_archive_minutes: Option<u32>,
    ) -> Result<Value, SurfaceError> {
        let mut body = json!({ "name": name, "type": 11 });
        if let Some(minutes) = auto_archive_minutes {
            body["auto_archive_duration"] = json!(minutes);
        }
        self.call(
            Method::POST,
            &format!("/channels/{parent}/threads"),
            Some(body),
            false,
        )
        .await
    }

    /// Opens a thread from a message (`POST /channels/{id}/messages/{id}/threads`); the thread
    /// takes the message's id. Not retried, like [`DiscordRest::create_thread`] (a second try
    /// would only be refused: one thread per message).
    pub async fn create_thread_from_message(
        &self,
        parent: Snowflake,
        message_id: Snowflake,
        name: &str,
        auto_archive_minutes: Option<u32>,
    ) -> Result<Value, SurfaceError> {
        let mut body = json!({ "name": name });
        if let Some(minutes) = auto_archive_minutes {
            body["auto_archive_duration"] = json!(minutes);
        }
        self.call(
            Method::POST,
            &format!("/channels/{parent}/messages/{message_id}/threads"),
            Some(body),
            false,
        )
        .await
    }

    /// Adds the bot to a thread's members (`PUT /channels/{id}/thread-members/@me`).
    pub async fn join_thread(&self, thread: Snowflake) -> Result<(), SurfaceError> {
        self.call(
            Method::PUT,
            &format!("/channels/{thread}/thread-members/@me"),
            None,
            true,
        )
        .await
        .map(drop)
    }

    /// Changes a channel or thread (`PATCH /channels/{id}`: a channel's `name` and `topic`, a
    /// thread's `archived`, `locked`, ...); returns it. Retried: the same change twice is one.
    pub async fn modify_channel(
        &self,
        channel: Snowflake,
        body: Value,
    ) -> Result<Value, SurfaceError> {
        self.call(
            Method::PATCH,
            &format!("/channels/{channel}"),
            Some(body),
            true,
        )
        .await
    }

    /// Creates a guild channel (`POST /guilds/{id}/channels` with `name`, `type`, `parent_id`,
    /// `topic`); returns it. Not retried: a retry after a lost answer could make two.
    pub async fn create_channel(
        &self,
        guild: Snowflake,
        body: Value,
    ) -> Result<Value, SurfaceError> {
        self.call(
            Method::POST,
            &format!("/guilds/{guild}/channels"),
            Some(body),
            false,
        )
        .await
    }

    /// Deletes a channel (`DELETE /channels/{id}`); returns it. Not retried: after a lost
    /// answer the retry would be told the channel is unknown, though the delete worked.
    pub async fn delete_channel(&self, channel: Snowflake) -> Result<Value, SurfaceError> {
        self.call(Method::DELETE, &format!("/channels/{channel}"), None, false)
            .await
    }

    /// A guild's active threads (`GET /guilds/{id}/threads/active`): `{threads, members}`.
    pub async fn active_threads(&self, guild: Snowflake) -> Result<Value, SurfaceError> {
        self.call(
            Method::GET,
            &format!("/guilds/{guild}/threads/active"),
            None,
            true,
        )
        .await
    }

    /// A channel's archived public threads, newest archived first
    /// (`GET /channels/{id}/threads/archived/public?limit=N`, N in 2..=100):
    /// `{threads, members, has_more}`.
    pub async fn archived_public_threads(
        &self,
        parent: Snowflake,
        limit: u32,
    ) -> Result<Value, SurfaceError> {
        let limit = limit.clamp(2, 100);
        self.call(
            Method::GET,
            &format!("/channels/{parent}/threads/archived/public?limit={limit}"),
            None,
            true,
        )
        .await
    }

    /// Pins a message (`PUT /channels/{id}/messages/pins/{id}`).
    pub async fn pin(&self, channel: Snowflake, message: Snowflake) -> Result<(), SurfaceError> {
        self.call(
            Method::PUT,
            &format!("/channels/{channel}/messages/pins/{message}"),
            None,
            true,
        )
        .await
        .map(drop)
    }

    /// Unpins a message (`DELETE /channels/{id}/messages/pins/{id}`).
    pub async fn unpin(&self, channel: Snowflake, message: Snowflake) -> Result<(), SurfaceError> {
        self.call(
            Method::DELETE,
            &format!("/channels/{channel}/messages/pins/{message}"),
            None,
            true,
        )
        .await
        .map(drop)
    }

    /// One page of a channel's pins, most recently pinned first
    /// (`GET /channels/{id}/messages/pins?limit=50[&before=<pinned_at>]`):
    /// `{items: [{pinned_at, message}], has_more}`.
    pub async fn pins(
        &self,
        channel: Snowflake,
        before: Option<&str>,
    ) -> Result<Value, SurfaceError> {
        let mut path = format!("/channels/{channel}/messages/pins?limit=50");
        if let Some(before) = before {
            path.push_str("&before=");
            path.push_str(&encode_path_segment(before));
        }
        self.call(Method::GET, &path, None, true).await
    }

    /// Shows the bot as typing in a channel (`POST /channels/{id}/typing`); Discord shows it for
    /// about ten seconds, or until the bot's next message.
    pub async fn typing(&self, channel_id: Snowflake) -> Result<(), SurfaceError> {
        self.call(
            Method::POST,
            &format!("/channels/{channel_id}/typing"),
            None,
            true,
        )
        .await
        .map(drop)
    }

    /// Answers an interaction (`POST /interactions/{id}/{token}/callback`) with `body`
    /// (`{"type": 4, "data": {...}}` for a message). Not retried after a 5xx or a lost
    /// connection: Discord accepts one answer per interaction.
    pub async fn interaction_response(
        &self,
        interaction_id: Snowflake,
        token: &str,
        body: Value,
    ) -> Result<(), SurfaceError> {
        let path = format!(
            "/interactions/{interaction_id}/{}/callback",
            encode_path_segment(token)
        );
        self.call(Method::POST, &path, Some(body), false)
            .await
            .map(drop)
    }

    /// Replaces the application's global slash commands
    /// (`PUT /applications/{id}/commands`) with `commands`, a JSON array of command objects.
    pub async fn set_global_commands(
        &self,
        application_id: Snowflake,
        commands: Value,
    ) -> Result<Value, SurfaceError> {
        self.call(
            Method::PUT,
            &format!("/applications/{application_id}/commands"),
            Some(commands),
            true,
        )
        .await
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "object",
    }
}

/// One page of a channel's history.
#[derive(Debug, Clone, PartialEq)]
pub struct MessagePage {
    /// The messages as Discord sent them, newest first.
    pub messages: Vec<Value>,
}

impl DiscordRest {
    /// `GET /channels/{id}/messages` with `limit` (1 to 100) and `before` / `after`: at most
    /// `limit` messages, newest first. It goes through the rate limiter like every request, so
    /// a caller paging through history waits for the bucket's refill instead of earning 429s,
    /// and is retried after 5xx and 429 like every idempotent request here.
    pub async fn list_messages(
        &self,
        channel_id: Snowflake,
        before: Option<Snowflake>,
        after: Option<Snowflake>,
        limit: u8,
    ) -> Result<MessagePage, SurfaceError> {
        let mut path = format!(
            "/channels/{channel_id}/messages?limit={}",
            limit.clamp(1, 100)
        );
        if let Some(before) = before {
            path.push_str(&format!("&before={before}"));
        }
        if let Some(after) = after {
            path.push_str(&format!("&after={after}"));
        }
        let value = self.call(Method::GET, &path, None, true).await?;
        match value {
            Value::Array(messages) => Ok(MessagePage { messages }),
            other => Err(SurfaceError::Unavailable(format!(
                "Discord's answer to a message listing is not a list of messages (a {})",
                json_kind(&other)
            ))),
        }
    }
}

/// The console reads the one REST client's rate limits through this.
impl switchboard_engine::headroom::HeadroomSource for DiscordRest {
    fn headroom(&self) -> switchboard_engine::headroom::RateHeadroom {
        DiscordRest::headroom(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderMap;

    #[test]
    fn nonces_are_unique_and_short() {
        let a = nonce();
        let b = nonce();
        assert_ne!(a, b);
        assert!(a.len() <= 25, "{a}");
    }

    #[test]
    fn emoji_is_percent_encoded() {
        assert_eq!(encode_path_segment("✅"), "%E2%9C%85");
        assert_eq!(encode_path_segment("blob:123"), "blob:123");
    }

    #[test]
    fn discord_errors_map_onto_surface_errors() {
        let h = HeaderMap::new();
        let discord = |code: u32, message: &str| json!({"code": code, "message": message});
        let cases = [
            (404, discord(10003, "Unknown Channel"), "NotFound"),
            (404, discord(10008, "Unknown Message"), "NotFound"),
            (403, discord(50001, "Missing Access"), "Denied"),
            (403, discord(50013, "Missing Permissions"), "Denied"),
            (403, discord(50005, "Cannot edit"), "Denied"),
            (
                400,
                json!({"code": 50035, "message": "Invalid Form Body", "errors": {"content": {}}}),
                "InvalidInput",
            ),
            (400, discord(50083, "Thread is archived"), "Conflict"),
            (500, json!({}), "Unavailable"),
            (502, Value::Null, "Unavailable"),
        ];
        for (status, body, expected) in cases {
            let f = failure(StatusCode::from_u16(status).unwrap(), &h, body);
            assert!(
                format!("{:?}", f.error).starts_with(expected),
                "{status}: {:?}",
                f.error
            );
        }
        let f = failure(
            StatusCode::TOO_MANY_REQUESTS,
            &h,
            json!({"message": "You are being rate limited.", "retry_after": 0.5, "global": false}),
        );
        assert_eq!(
            f.error,
            SurfaceError::RateLimited {
                retry_after: Duration::from_millis(500)
            }
        );
        assert!(f.retryable);
    }

    #[test]
    fn field_errors_travel_in_details() {
        let f = failure(
            StatusCode::BAD_REQUEST,
            &HeaderMap::new(),
            json!({"code": 50035, "message": "Invalid Form Body", "errors": {"content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH"}]}}}),
        );
        match f.error {
            SurfaceError::InvalidInput { details, .. } => {
                assert!(details["content"]["_errors"].is_array());
            }
            other => panic!("{other:?}"),
        }
    }
}
