//! The HTTP front of switchboard (axum) over the call engine: health, the tool listing,
//! calls, batches (`batch.rs`), capability minting, the live feed (`sse.rs`), Prometheus
//! metrics (`exposition.rs`), the OpenAPI document (`openapi.rs`), `Idempotency-Key`s
//! (`idempotency.rs`), the checks of every request's head (`browsers.rs`) and the connection
//! loop (`connections.rs`). It mounts the operator console (`switchboard-console`). Each
//! front's state is its own: [`Front`] hands handlers the engine, the API's settings and the
//! console's state by `FromRef`.

#![warn(missing_docs)]

mod batch;
mod browsers;
mod chat;
mod coerce;
mod connections;
mod exposition;
pub mod idempotency;
pub mod openapi;
mod runs;
mod sse;

pub use batch::parse_batch;

// The engine's modules and the console, at the paths these files name them by.
use switchboard_console as console;
use switchboard_engine::{
    auth, clock, error, events, invocation, registry, server, surface, visibility,
};

use protocol::ErrorCode;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, FromRef, FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::auth::{Caller, CapabilityGrant};
use crate::error::ToolError;
use crate::invocation::{parse_id, CallContext};
use crate::registry::{parse_input, Registry};
use crate::server::Core;
use crate::surface::ConnectionState;
use protocol::context::{
    HEADER_CLIENT, HEADER_CWD, HEADER_MESSAGE_ID, HEADER_REQUEST_ID, HEADER_SESSION_ID,
    HEADER_TOOL_CALL_ID,
};
use protocol::{CallRequest, ErrorKind, Health};
use switchboard_front::ApiError;

/// Requests larger than this answer 413.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// How often expired tokens and idle rate-limit keys are dropped.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

type Shared = State<Arc<Core>>;

/// The API's own settings (read at start; a reload does not change them).
#[derive(Debug, Clone, Copy)]
pub struct ApiSettings {
    /// Connection cap and timeouts (`[toolserver]`).
    pub limits: crate::connections::ConnectionLimits,
    /// `toolserver.metrics_public`: `/metrics` without a token.
    pub metrics_public: bool,
}

/// What the HTTP front serves with: the engine, and each front's own state (the API's
/// settings, the console's logins and plug-ins), which handlers take by `FromRef`.
#[derive(Clone, axum::extract::FromRef)]
pub struct Front {
    /// The engine every call goes through.
    pub core: Arc<Core>,
    /// The operator console's state.
    pub console: Arc<crate::console::Console>,
    /// The API's settings.
    pub api: ApiSettings,
}

impl axum::extract::FromRef<Front> for crate::console::ConsoleState {
    fn from_ref(front: &Front) -> Self {
        crate::console::ConsoleState {
            core: Arc::clone(&front.core),
            console: Arc::clone(&front.console),
            idle_timeout: front.api.limits.idle_timeout,
        }
    }
}

impl Front {
    /// The fronts over `core`, set up from the config `core` started with.
    pub fn new(core: Arc<Core>) -> Front {
        let settings = core.settings();
        let toolserver = &settings.config().toolserver;
        Front {
            console: Arc::new(crate::console::Console::new(toolserver.console)),
            api: ApiSettings {
                limits: crate::connections::ConnectionLimits::from_config(toolserver),
                metrics_public: toolserver.metrics_public,
            },
            core,
        }
    }

    /// The operator console's state: plug agent runs' headroom and the playground's compose
    /// box in here.
    pub fn console(&self) -> &Arc<crate::console::Console> {
        &self.console
    }
}

/// The HTTP API over `core`: `GET /health`, `GET /v1/tools`, `GET /v1/tools/{id}`,
/// `POST /v1/call`, `GET /v1/models`, `POST /v1/chat/completions`, `POST /v1/batch`, `GET /v1/events` (SSE), `GET /metrics`,
/// `GET /openapi.json` and `POST /v1/capabilities`; other routes answer 404, bodies over
/// [`MAX_BODY_BYTES`] 413. Without [`serve`]'s connection limits, pruning, and its checks of `Host`,
/// `Origin` and `Content-Type` (`browsers.rs`), which every route served gets.
pub fn router(front: Front) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/tools", get(list_tools))
        .route("/v1/tools/{id}", get(describe_tool))
        .route("/v1/call", post(call))
        .route("/v1/models", get(chat::models))
        .route("/v1/chat/completions", post(chat::completions))
        .route("/v1/runs", get(crate::runs::list))
        .route("/v1/runs/{id}", get(crate::runs::get))
        .route("/v1/runs/{id}/abort", post(crate::runs::abort))
        .route("/v1/capabilities", post(mint_capability))
        .route("/v1/approvals", get(list_approvals))
        .route("/v1/admin/reload", post(reload))
        .route("/v1/cluster", get(cluster_status))
        .merge(crate::console::router(&front.console))
        .route("/v1/batch", post(crate::batch::batch))
        .route("/v1/events", get(crate::sse::stream))
        .route("/metrics", get(crate::exposition::scrape))
        .route("/openapi.json", get(crate::openapi::serve))
        .fallback(unknown_route)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(front)
}

/// Serves until `shutdown` resolves, pruning token and rate-limit state on an interval.
///
/// HTTP/1.1 with `[toolserver]`'s connection cap and timeouts (see `connections`); on
/// shutdown, requests in flight get a few seconds to finish.
pub async fn serve(
    core: Arc<Core>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_front(Front::new(core), Router::new(), listener, shutdown).await
}

/// [`serve`] with `extra` routes beside the API's (the MCP endpoint): the same connection loop,
/// cap, timeouts and pruning. `extra` must not set a fallback (the API's answers 404).
pub async fn serve_with(
    core: Arc<Core>,
    extra: Router,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_front(Front::new(core), extra, listener, shutdown).await
}

/// [`serve_with`] over fronts set up beforehand (the composition root plugs the console's
/// sources in first).
pub async fn serve_front(
    front: Front,
    extra: Router,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let core = Arc::clone(&front.core);
    let pruner = {
        let core = Arc::clone(&core);
        tokio::spawn(async move {
            let first = tokio::time::Instant::now() + PRUNE_EVERY;
            let mut ticker = tokio::time::interval_at(first, PRUNE_EVERY);
            loop {
                ticker.tick().await;
                core.prune();
            }
        })
    };
    // The counts of refusal bursts, written soon after their window ends.
    let refusals = {
        let core = Arc::clone(&core);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(Duration::from_secs(1));
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                core.flush_refusals(false);
            }
        })
    };
    // The console's sparklines: one sample of the counters every few seconds, into a bounded
    // ring (only while the console is served).
    let sampler = front.console.enabled().then(|| {
        let core = Arc::clone(&core);
        let console = Arc::clone(&front.console);
        tokio::spawn(async move {
            let every = crate::console::health::SAMPLE_EVERY;
            let mut ticker = tokio::time::interval(every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                console.sample(&core);
            }
        })
    });
    let limits = front.api.limits;
    // Event streams never end by themselves: close them when shutdown begins, so draining
    // does not wait them out.
    let events = Arc::clone(core.events());
    let shutdown = async move {
        shutdown.await;
        events
            .close_when_delivered(std::time::Duration::from_secs(2))
            .await;
    };
    let guard = crate::browsers::Guard::new(listener.local_addr()?, Arc::clone(&core));
    let result = crate::connections::serve(
        router(front).merge(extra),
        guard,
        listener,
        limits,
        shutdown,
    )
    .await;
    pruner.abort();
    refusals.abort();
    // No count is left behind at shutdown.
    core.flush_refusals(true);
    if let Some(sampler) = sampler {
        sampler.abort();
    }
    result
}

fn header_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token)
}

/// The authenticated caller and the call's context, taken from the request head before any
/// body is read: a request without a valid token costs a header parse, never a body read.
pub struct Authed(pub CallContext);

impl<S> FromRequestParts<S> for Authed
where
    Arc<Core>: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let core = <Arc<Core>>::from_ref(state);
        let caller = core.authenticate_shared(bearer(&parts.headers)).await?;
        Ok(context(&core, caller, &parts.headers).map(Authed)?)
    }
}

/// The call context of an authenticated caller. A capability's session and request come from the
/// token; a header that tries to change them is refused.
fn context(core: &Core, caller: Caller, headers: &HeaderMap) -> Result<CallContext, ToolError> {
    let mut context = CallContext {
        caller: caller.clone(),
        request_id: header_value(headers, HEADER_REQUEST_ID),
        session_ref: header_value(headers, HEADER_SESSION_ID),
        client: header_value(headers, HEADER_CLIENT),
        cwd: header_value(headers, HEADER_CWD),
        tool_call_id: header_value(headers, HEADER_TOOL_CALL_ID),
        trigger_message_id: match header_value(headers, HEADER_MESSAGE_ID) {
            Some(id) => Some(parse_id(HEADER_MESSAGE_ID, &id)?),
            None => None,
        },
        // Whatever the headers say, this is the API front.
        front: crate::invocation::Front::Api,
    };
    if let Caller::Capability(capability) = &caller {
        let grant = &capability.grant;
        let bound_session = grant.session_id.to_string();
        if let Some(asked) = &context.session_ref {
            let same = entity::Mapper::new(core.settings().aliases(), core.surface().as_ref())
                .resolve_session(asked)
                .ok()
                == Some(grant.session_id);
            if !same {
                return Err(ToolError::denied(
                    ErrorCode::ContextOverride,
                    format!("This capability token is bound to session {bound_session}; the {HEADER_SESSION_ID} header cannot move it to '{asked}'. Pass sessionId in the input to act elsewhere."),
                ));
            }
        }
        if let Some(asked) = &context.request_id {
            if asked != &grant.request_id {
                return Err(ToolError::denied(
                    ErrorCode::ContextOverride,
                    format!("This capability token belongs to request {}; the {HEADER_REQUEST_ID} header cannot change it", grant.request_id),
                ));
            }
        }
        context.session_ref = Some(bound_session);
        context.request_id = Some(grant.request_id.clone());
        if grant.client.is_some() {
            context.client = grant.client.clone();
        }
        // Files are read and written under the run's cwd: a capability gets exactly the one
        // it was minted with (none: no file access), never one a header names. (The CLI
        // always sends its directory, so a header is ignored when the grant has none.)
        if grant.cwd.is_some() && context.cwd.is_some() && context.cwd != grant.cwd {
            return Err(ToolError::denied(
                ErrorCode::ContextOverride,
                format!(
                    "This capability token's working directory is {}; the {HEADER_CWD} header cannot change it",
                    grant.cwd.as_deref().unwrap_or("(none)")
                ),
            ));
        }
        context.cwd = grant.cwd.clone();
        if context.trigger_message_id.is_some()
            && context.trigger_message_id != grant.trigger_message_id
        {
            return Err(ToolError::denied(
                ErrorCode::ContextOverride,
                format!("This capability token belongs to a run whose message is fixed; the {HEADER_MESSAGE_ID} header cannot change it"),
            ));
        }
        context.trigger_message_id = grant.trigger_message_id;
    }
    Ok(context)
}

async fn health(State(core): Shared) -> Json<Health> {
    let state = core.surface().connection();
    let standby = core.node().is_some_and(|node| node.standby());
    let status = match state {
        _ if standby => "ok",
        ConnectionState::Ready | ConnectionState::None => "ok",
        ConnectionState::Connecting
        | ConnectionState::Resuming
        | ConnectionState::Backfilling
        | ConnectionState::Down => "degraded",
    };
    let reason = core
        .node()
        .and_then(|node| node.store_trouble().or_else(|| node.shard_trouble()));
    Json(Health {
        status: if reason.is_some() { "degraded" } else { status }.to_owned(),
        reason,
        discord: if standby { "standby" } else { state.as_str() }.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        sandbox: core.workspaces().health(&core.settings()),
        node: core.node().map(|node| node.node_id().to_owned()),
        store: core.node().map(|node| node.store_kind().to_owned()),
        shards: core.node().map(|node| node.shards()),
    })
}

async fn list_tools(State(core): Shared, Authed(context): Authed) -> Result<Response, ApiError> {
    Ok(Json(json!({ "tools": core.tools_for(&context.caller) })).into_response())
}

async fn describe_tool(
    State(core): Shared,
    Authed(context): Authed,
    id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) = id.map_err(|rejection| {
        ToolError::usage(
            ErrorCode::BadRequest,
            format!("{rejection}; the path is /v1/tools/ID with a callable's id"),
        )
    })?;
    match core.registry().detail(&id) {
        Some(detail) if core.may_call(&context.caller, &id) => Ok(Json(detail).into_response()),
        // Out-of-scope callables are reported like unknown ones, suggesting only visible ids.
        _ => Err(ApiError::from(Registry::unknown(
            &id,
            core.registry()
                .ids()
                .filter(|visible| core.may_call(&context.caller, visible)),
        ))),
    }
}

/// `GET /v1/approvals[?toolCallId=ID]` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ApprovalsQuery {
    tool_call_id: Option<String>,
}

/// The approvals still waiting: the operator (and a token that may decide them) sees every
/// one; any other caller only those its own calls wait on, optionally the one named by the
/// `x-switchboard-tool-call-id` it sent with that call (so the CLI can say where to look while
/// it waits). A call id another caller used never shows that caller's approval.
async fn list_approvals(
    State(core): Shared,
    Authed(context): Authed,
    query: Result<axum::extract::Query<ApprovalsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let axum::extract::Query(query) = query.map_err(|rejection| {
        ToolError::usage(
            ErrorCode::BadRequest,
            format!("{rejection}; the only parameter is toolCallId"),
        )
    })?;
    let wanted = query.tool_call_id.filter(|id| !id.trim().is_empty());
    let approvals: Vec<_> = core
        .approvals_visible_to(&context.caller)
        .into_iter()
        .filter(|card| {
            wanted
                .as_deref()
                .is_none_or(|id| card.tool_call_id.as_deref() == Some(id))
        })
        .collect();
    Ok(Json(json!({ "approvals": approvals })).into_response())
}

/// The `body_timeout` answer when `error` (or one of its sources) is the connection loop's
/// body deadline.
fn body_timeout(error: &(dyn std::error::Error + 'static)) -> Option<ToolError> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = source {
        if let Some(timeout) = error.downcast_ref::<crate::connections::BodyTimeout>() {
            return Some(ToolError::new(
                ErrorKind::Timeout,
                ErrorCode::BodyTimeout,
                format!("{timeout}; send the whole body at once (the server's limit is toolserver.body_read_timeout_ms)"),
            )
            .with_status(StatusCode::REQUEST_TIMEOUT));
        }
        source = error.source();
    }
    None
}

fn body_too_large() -> ToolError {
    ToolError::usage(
        ErrorCode::BodyTooLarge,
        format!("Request body is over {MAX_BODY_BYTES} bytes; send less (split the text, or attach files by path)"),
    )
    .with_status(StatusCode::PAYLOAD_TOO_LARGE)
}

pub(crate) fn body_error(rejection: BytesRejection) -> ToolError {
    if let Some(timeout) = body_timeout(&rejection) {
        return timeout;
    }
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        body_too_large()
    } else {
        ToolError::usage(
            ErrorCode::BadBody,
            format!("Cannot read the request body: {rejection}"),
        )
    }
}

/// Reads a request body the way `POST /v1/call` does, for a front mounted beside the API:
/// at most [`MAX_BODY_BYTES`] (else `body_too_large`, 413), within the connection loop's body
/// deadline (else `body_timeout`, 408). Call it only after authenticating.
pub async fn read_body(mut body: axum::body::Body) -> Result<Bytes, ToolError> {
    use http_body::Body as _;
    let mut collected = bytes::BytesMut::new();
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        let frame = frame.map_err(|error| {
            body_timeout(&error).unwrap_or_else(|| {
                ToolError::usage(
                    ErrorCode::BadBody,
                    format!("Cannot read the request body: {error}"),
                )
            })
        })?;
        if let Ok(data) = frame.into_data() {
            if data.len() > MAX_BODY_BYTES.saturating_sub(collected.len()) {
                return Err(body_too_large());
            }
            collected.extend_from_slice(&data);
        }
    }
    Ok(collected.freeze())
}

async fn call(
    State(core): Shared,
    Authed(context): Authed,
    crate::idempotency::KeyHeader(key): crate::idempotency::KeyHeader,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(body_error)?;
    // The plain read first: tracking the path costs on every call, and is only needed to say
    // where a bad body went wrong.
    let request: CallRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(_) => {
            let mut deserializer = serde_json::Deserializer::from_slice(&body);
            serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
                ToolError::usage(
                    ErrorCode::BadRequest,
                    format!(
                    "The body must be {{\"tool\": \"surface.…\", \"input\": {{…}}}}: {} at '{}'",
                    error.inner(),
                    error.path()
                ),
                )
            })?
        }
    };
    let tool = request.tool.clone();
    let input = crate::batch::request_input(&core, request)?;
    // A read runs again whatever its key: only a change has to happen once (and only its
    // answer is worth keeping for a day).
    let changes = core
        .registry()
        .entry(&tool)
        .is_some_and(|entry| entry.mutating);
    if let Some(key) = key.filter(|_| changes) {
        return crate::idempotency::keyed_call(&core, &context, key, &tool, input).await;
    }
    let value = core.call(&context, &tool, input).await?;
    Ok(OkEnvelope::response(value))
}

/// `{"ok":true,"value":` + a callable's answer + `}`, sent without copying the answer (which
/// can be tens of kilobytes): three frames, with an exact length so the answer keeps its
/// `Content-Length`.
struct OkEnvelope {
    parts: [Option<bytes::Bytes>; 3],
    next: usize,
    len: u64,
}

impl OkEnvelope {
    const OPEN: &'static [u8] = b"{\"ok\":true,\"value\":";
    const CLOSE: &'static [u8] = b"}";

    /// A callable's answer as the API's JSON answer `{"ok":true,"value":…}`.
    fn response(value: crate::registry::ToolOutput) -> Response {
        (
            [(header::CONTENT_TYPE, "application/json")],
            axum::body::Body::new(OkEnvelope::new(value)),
        )
            .into_response()
    }

    fn new(value: crate::registry::ToolOutput) -> OkEnvelope {
        let value = bytes::Bytes::from(String::from(Box::<str>::from(value)));
        let len = (Self::OPEN.len() + value.len() + Self::CLOSE.len()) as u64;
        OkEnvelope {
            parts: [
                Some(bytes::Bytes::from_static(Self::OPEN)),
                Some(value),
                Some(bytes::Bytes::from_static(Self::CLOSE)),
            ],
            next: 0,
            len,
        }
    }
}

impl http_body::Body for OkEnvelope {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        while self.next < self.parts.len() {
            let index = self.next;
            self.next += 1;
            if let Some(part) = self.parts[index].take() {
                return std::task::Poll::Ready(Some(Ok(http_body::Frame::data(part))));
            }
        }
        std::task::Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.next >= self.parts.len()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.len)
    }
}

/// `POST /v1/capabilities`: the operator mints a capability token (agents' runners do this
/// in-process; the route is for operators and scripts).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct MintRequest {
    session_id: String,
    request_id: Option<String>,
    /// Glob patterns of callable ids; default `["surface.*"]`.
    scope: Option<Vec<String>>,
    /// Lifetime in seconds; default 600, at most 86,400.
    ttl_s: Option<u64>,
    /// The working directory files are read from and saved to; none: no file access.
    cwd: Option<String>,
    /// The message that started the run (`attachment.download` reads it).
    message_id: Option<String>,
}

async fn mint_capability(
    State(core): Shared,
    Authed(context): Authed,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    if !matches!(context.caller, Caller::Operator | Caller::Unauthenticated) {
        return Err(ApiError::from(ToolError::denied(
            ErrorCode::OperatorOnly,
            "Only the operator token may mint capability tokens",
        )));
    }
    let body = body.map_err(body_error)?;
    let value: Value = serde_json::from_slice(&body).map_err(|e| {
        ToolError::usage(ErrorCode::BadRequest, format!("The body must be JSON: {e}"))
    })?;
    let request: MintRequest = parse_input(value)?;
    let session_id = entity::Mapper::new(core.settings().aliases(), core.surface().as_ref())
        .resolve_session(&request.session_id)
        .or_else(|_| parse_id("sessionId", &request.session_id))
        .map_err(|e| ToolError::usage(ErrorCode::UnknownSession, e.message.clone()))?;
    let ttl = request.ttl_s.unwrap_or(600);
    if ttl == 0 || ttl > 86_400 {
        return Err(ApiError::from(ToolError::usage(
            ErrorCode::InvalidInput,
            "ttlS must be between 1 and 86400 seconds",
        )));
    }
    let grant = CapabilityGrant {
        session_id,
        request_id: match request.request_id {
            Some(id) => id,
            None => crate::auth::random_hex(8)
                .map(|hex| format!("op-{hex}"))
                .map_err(|e| ToolError::internal(format!("cannot draw random bytes: {e}")))?,
        },
        scope: request
            .scope
            .unwrap_or_else(|| vec!["surface.*".to_owned()]),
        ttl: Duration::from_secs(ttl),
        client: None,
        cwd: request.cwd,
        trigger_message_id: request
            .message_id
            .as_deref()
            .map(|id| parse_id("messageId", id))
            .transpose()?,
        requested_by: None,
        gate: None,
    };
    let response = json!({
        "sessionId": session_id.to_string(),
        "requestId": grant.request_id,
        "scope": grant.scope,
        "expiresInS": ttl,
    });
    let token = core.mint_capability(grant)?;
    let mut response = response;
    response["token"] = Value::String(token);
    Ok((
        StatusCode::CREATED,
        Json(json!({ "ok": true, "value": response })),
    )
        .into_response())
}

/// `POST /v1/admin/reload`: the operator callable `admin.reload` (`switchboard reload`), the
/// same as `POST /v1/call` with it: the config file is read again and, when it has no problem,
/// put in force; the answer says what changed and what waits for a restart; a file with
/// problems answers 422 `invalid_config` listing them, and nothing changes. The body, if any,
/// is ignored.
async fn reload(State(core): Shared, Authed(context): Authed) -> Result<Response, ApiError> {
    let value = core.call(&context, "admin.reload", json!({})).await?;
    Ok(OkEnvelope::response(value))
}

/// `GET /v1/cluster`: the operator callable `admin.cluster.status` (`switchboard cluster
/// status`), the same as `POST /v1/call` with it: every node on this store and the shard
/// leases.
async fn cluster_status(
    State(core): Shared,
    Authed(context): Authed,
) -> Result<Response, ApiError> {
    let value = core
        .call(&context, "admin.cluster.status", json!({}))
        .await?;
    Ok(OkEnvelope::response(value))
}

async fn unknown_route(uri: axum::http::Uri) -> ApiError {
    ApiError(ToolError::not_found(
        ErrorCode::UnknownRoute,
        format!("No route {}; the API is GET /health, GET /v1/tools, GET /v1/tools/{{id}}, POST /v1/call, POST /v1/batch, GET /v1/events, GET /metrics, GET /openapi.json, POST /v1/admin/reload, GET /v1/cluster, POST /mcp", uri.path()),
    ))
}
