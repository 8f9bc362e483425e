//! The operator console: a one-page web application served at `/` when
//! `toolserver.console = true`, and the API it calls under `/console/api/`.
//!
//! The page's files are compiled into the binary (plain HTML, CSS and JavaScript in
//! `assets/`, no build step). Logging in exchanges the operator token (or a named token with
//! `console` in its scope) for a login cookie — HttpOnly, SameSite=Strict, a random id kept
//! here as a digest ([`logins::Logins`], bounded, with expiry). Every change also needs the
//! login's CSRF token in a header and a same-origin `Origin`. Reads of sessions, messages and
//! the audit log, decisions (`approvals.decide`) and scope changes (`admin.tools.set`) go
//! through [`Core::call`] as the logged-in caller, so the console passes the same pipeline
//! (scope, rules, limits, audit) as every other front and may do only what its token's scope
//! allows: a `console` token reads and sees its own pending asks; deciding others' asks and
//! changing scopes need the operator or a scope that names those callables.
//!
//! Its own crate over the call engine; the HTTP front (`switchboard-http`) mounts [`router`]
//! and hands it a [`ConsoleState`] by `FromRef`.

#![warn(missing_docs)]

// The engine's modules, at the paths these files name them by.
use switchboard_engine::{auth, clock, error, events, invocation, runs, server, visibility};

pub mod health;
mod live;
pub mod logins;
mod memory;
mod usage;

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRef, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use entity::Snowflake;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use protocol::ErrorCode;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::auth::Caller;
use crate::error::ToolError;
use crate::invocation::CallContext;
use crate::server::Core;
use health::{Counters, HeadroomSource, Series};
use logins::{Login, Logins, COOKIE, CSRF_HEADER, LIFETIME};
use switchboard_front::ApiError;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// Bodies the console API takes are small; more is refused.
const MAX_BODY: usize = 16 * 1024;
/// Failed logins per minute across all clients before failures slow down (a brute-force
/// brake; tokens are long anyway). A correct token is never counted nor slowed.
const FAILED_LOGINS_PER_MINUTE: u32 = 30;
/// How long a failed login beyond that budget waits before it is answered.
const FAILED_LOGIN_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);
/// What a console login reads besides its token's own scope: the console's pages (sessions,
/// messages, the audit log). Deciding others' asks and changing scopes are not in it: those
/// take the operator or a scope that names them.
pub const CONSOLE_READS: [&str; 3] = [
    "surface.sessions.list",
    "surface.messages.list",
    "audit.list",
];
/// The most characters a compose box posts.
const MAX_COMPOSE_CHARS: usize = 2000;

/// A user the playground's compose box may post as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ComposeUser {
    /// The user's id.
    pub id: Snowflake,
    /// Their name.
    pub name: String,
}

/// A boxed future, for [`Compose::post`].
pub type ComposeFuture<'a> = Pin<Box<dyn Future<Output = Result<Value, String>> + Send + 'a>>;

/// Posting as a demo user, server side: only the playground provides it (through its fake
/// Discord); the browser never talks to the fake.
pub trait Compose: Send + Sync {
    /// Who may be posted as.
    fn users(&self) -> Vec<ComposeUser>;
    /// Posts `content` in `channel` as `author`, as if they had typed it in Discord.
    fn post(&self, channel: Snowflake, author: Snowflake, content: String) -> ComposeFuture<'_>;
}

/// The console's state: the logins, and what the composition root plugs in.
pub struct Console {
    enabled: bool,
    logins: Logins,
    failed_logins: DefaultDirectRateLimiter,
    compose: OnceLock<Arc<dyn Compose>>,
    headroom: OnceLock<Arc<dyn HeadroomSource>>,
    series: std::sync::Mutex<Series>,
    /// Bumped after each sample, so open event streams tell their page.
    sampled: tokio::sync::watch::Sender<u64>,
}

impl Console {
    /// The console, served when `enabled` (`toolserver.console`).
    pub fn new(enabled: bool) -> Console {
        let per_minute = NonZeroU32::new(FAILED_LOGINS_PER_MINUTE).unwrap_or(NonZeroU32::MIN);
        Console {
            enabled,
            logins: Logins::default(),
            failed_logins: RateLimiter::direct(Quota::per_minute(per_minute)),
            compose: OnceLock::new(),
            headroom: OnceLock::new(),
            series: std::sync::Mutex::default(),
            sampled: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Whether the console is served.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Turns the compose box on (the playground). Once only.
    pub fn set_compose(&self, compose: Arc<dyn Compose>) -> bool {
        self.compose.set(compose).is_ok()
    }

    /// Shows the Discord REST client's rate-limit headroom in the health panel. Once only.
    pub fn set_headroom(&self, headroom: Arc<dyn HeadroomSource>) -> bool {
        self.headroom.set(headroom).is_ok()
    }

    /// The logins held.
    pub fn logins(&self) -> &Logins {
        &self.logins
    }

    fn series(&self) -> std::sync::MutexGuard<'_, Series> {
        self.series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes one sparkline sample of `core`'s counters now. The HTTP front does this every
    /// [`health::SAMPLE_EVERY`] while the console is on; tests call it directly.
    pub fn sample(&self, core: &Core) {
        let totals = core.metrics().totals();
        let counters = Counters {
            calls: totals.calls,
            failed_calls: totals.failed_calls,
            events: core.events().published(),
            runs: totals.runs,
        };
        let point = self.series().record(crate::clock::now_ms(), counters);
        if point.is_some() {
            self.sampled.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// What the console's routes serve with: the engine and the console's own state (handed by
/// the front that mounts it, `FromRef`). Reads as the [`Core`] it carries.
#[derive(Clone)]
pub struct ConsoleState {
    /// The engine every console call goes through.
    pub core: Arc<Core>,
    /// The console's logins and plug-ins.
    pub console: Arc<Console>,
    /// The connection's idle timeout, which the event stream's heartbeat stays under.
    pub idle_timeout: std::time::Duration,
}

impl std::ops::Deref for ConsoleState {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

type Shared = State<ConsoleState>;

/// The console's routes (none when `toolserver.console` is off, so `/` stays a 404).
pub fn router<S>(console: &Console) -> Router<S>
where
    ConsoleState: FromRef<S>,
    S: Clone + Send + Sync + 'static,
{
    if !console.enabled() {
        return Router::new();
    }
    Router::new()
        .route("/", get(index))
        .route("/console/app.js", get(app_js))
        .route("/console/app.css", get(app_css))
        .route("/console/api/login", post(login))
        .route("/console/api/logout", post(logout))
        .route("/console/api/me", get(me))
        .route("/console/api/health", get(health))
        .route("/console/api/events", get(live::stream))
        .route("/console/api/sessions", get(sessions))
        .route("/console/api/sessions/{id}/messages", get(messages))
        .route(
            "/console/api/sessions/{id}/scope",
            get(scope).post(change_scope),
        )
        .route("/console/api/approvals", get(approvals))
        .route("/console/api/approvals/{id}", post(decide))
        .route("/console/api/audit", get(audit))
        .route("/console/api/runs", get(runs))
        .route("/console/api/usage.svg", get(usage::usage_svg))
        .route("/console/api/runs/{id}/abort", post(abort))
        .route("/console/api/compose", post(compose))
        .route(
            "/console/api/sessions/{id}/memory",
            get(memory::session_memory),
        )
        .route("/console/api/memory/forget", post(memory::forget))
}

/// Every route the console API serves, as `METHOD path` (tests try each without a login).
pub const API_ROUTES: &[(&str, &str)] = &[
    ("POST", "/console/api/logout"),
    ("GET", "/console/api/me"),
    ("GET", "/console/api/health"),
    ("GET", "/console/api/events"),
    ("GET", "/console/api/sessions"),
    ("GET", "/console/api/sessions/1000000000000000401/messages"),
    ("GET", "/console/api/sessions/1000000000000000401/scope"),
    ("POST", "/console/api/sessions/1000000000000000401/scope"),
    ("GET", "/console/api/approvals"),
    ("POST", "/console/api/approvals/apr_0000000000000000"),
    ("GET", "/console/api/audit"),
    ("GET", "/console/api/runs"),
    ("POST", "/console/api/runs/1000000000000000401/abort"),
    ("POST", "/console/api/compose"),
    ("GET", "/console/api/sessions/1000000000000000401/memory"),
    ("POST", "/console/api/memory/forget"),
];

fn page_headers(content_type: &'static str) -> [(header::HeaderName, HeaderValue); 6] {
    [
        (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
            ),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (header::REFERRER_POLICY, HeaderValue::from_static("no-referrer")),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
    ]
}

async fn index() -> Response {
    (page_headers("text/html; charset=utf-8"), INDEX_HTML).into_response()
}

async fn app_js() -> Response {
    (page_headers("text/javascript; charset=utf-8"), APP_JS).into_response()
}

async fn app_css() -> Response {
    (page_headers("text/css; charset=utf-8"), APP_CSS).into_response()
}

fn not_logged_in() -> ToolError {
    ToolError::unauthenticated(
        ErrorCode::ConsoleSession,
        "Not logged in to the console (or the login expired): log in with the operator token",
    )
}

fn csrf_refused(why: &str) -> ToolError {
    ToolError::denied(
        ErrorCode::CsrfRefused,
        format!("Change refused: {why}. Reload the console and try again"),
    )
}

/// The logged-in console a request comes from (its login cookie), refused with 401 when
/// there is none.
pub struct Operator {
    login: Login,
    id: String,
}

impl Operator {
    fn context(&self) -> CallContext {
        CallContext {
            caller: self.login.caller.clone(),
            request_id: None,
            session_ref: None,
            client: Some("console".to_owned()),
            cwd: None,
            tool_call_id: None,
            trigger_message_id: None,
            front: crate::invocation::Front::Console,
        }
    }

    /// Who did it, for the log: `console:operator`, `console:token:NAME`.
    fn by(&self) -> String {
        format!("console:{}", self.login.caller.principal())
    }

    /// Whether the login's scope takes `tool` (the operator's takes everything).
    fn may(&self, core: &Core, tool: &str) -> bool {
        core.may_call(&self.login.caller, tool)
    }
}

impl<S> FromRequestParts<S> for Operator
where
    ConsoleState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let core = ConsoleState::from_ref(state);
        let id = parts
            .headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .find_map(logins::cookie_value)
            .ok_or_else(not_logged_in)?
            .to_owned();
        let login = core.console.logins.get(&id).ok_or_else(not_logged_in)?;
        Ok(Operator { login, id })
    }
}

/// A logged-in console making a change: also the login's CSRF token in
/// `x-switchboard-csrf` and a same-origin `Origin`.
pub struct Change(Operator);

impl<S> FromRequestParts<S> for Change
where
    ConsoleState: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let operator = Operator::from_request_parts(parts, state).await?;
        same_origin(&parts.headers)?;
        let presented = parts
            .headers
            .get(CSRF_HEADER)
            .and_then(|value| value.to_str().ok())
            .ok_or_else(|| csrf_refused("the CSRF token header is missing"))?;
        if !operator.login.csrf_matches(presented) {
            return Err(csrf_refused("the CSRF token does not match this login").into());
        }
        Ok(Change(operator))
    }
}

/// Refuses a request whose `Origin` is missing or is not this server (`Host`).
fn same_origin(headers: &HeaderMap) -> Result<(), ToolError> {
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|value| value.to_str().ok())
        .ok_or_else(|| csrf_refused("the request has no Origin header"))?;
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .ok_or_else(|| csrf_refused("the request has no Host header"))?;
    let ours = ["http://", "https://"]
        .iter()
        .any(|scheme| origin.strip_prefix(scheme) == Some(host));
    if ours {
        Ok(())
    } else {
        Err(csrf_refused(&format!(
            "it comes from {origin}, not this server"
        )))
    }
}

fn json_body<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ToolError> {
    let body = body
        .map_err(|e| ToolError::usage(ErrorCode::BadBody, format!("Cannot read the body: {e}")))?;
    if body.len() > MAX_BODY {
        return Err(ToolError::usage(
            ErrorCode::BodyTooLarge,
            format!("The console takes bodies of at most {MAX_BODY} bytes"),
        )
        .with_status(StatusCode::PAYLOAD_TOO_LARGE));
    }
    serde_json::from_slice(&body).map_err(|e| {
        ToolError::usage(
            ErrorCode::BadRequest,
            format!("The body is not what this route takes: {e}"),
        )
    })
}

fn no_store(value: Value) -> Response {
    ([(header::CACHE_CONTROL, "no-store")], Json(value)).into_response()
}

/// Runs `tool` through the pipeline as the console's caller; the answer as JSON.
async fn call(
    core: &Core,
    operator: &Operator,
    tool: &str,
    input: Value,
) -> Result<Value, ToolError> {
    let output = core.call(&operator.context(), tool, input).await?;
    let text: Box<str> = output.into();
    serde_json::from_str(&text)
        .map_err(|e| ToolError::internal(format!("{tool} answered text that is not JSON: {e}")))
}

fn session_id(text: &str) -> Result<Snowflake, ToolError> {
    crate::invocation::parse_id("session", text)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginBody {
    token: String,
}

async fn login(
    State(core): Shared,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    same_origin(&headers)?;
    let LoginBody { token } = json_body(body)?;
    // The token is checked first: a correct one always gets in, however many wrong ones came
    // before it; only failures spend the brake's budget, and past it they are slowed.
    let caller = match core.authenticate(
        Some(&token)
            .filter(|t| !t.trim().is_empty())
            .map(String::as_str),
    ) {
        Ok(caller) => caller,
        Err(error) => {
            if core.console.failed_logins.check().is_ok() {
                return Err(ApiError::from(error));
            }
            tokio::time::sleep(FAILED_LOGIN_PAUSE).await;
            return Err(ApiError::from(ToolError::rate_limited(
                ErrorCode::RateLimited,
                "Too many failed console logins: each failure now waits. A correct token still logs in at once",
                std::time::Duration::from_secs(60),
            )));
        }
    };
    let key = caller.key();
    let caller = match caller {
        Caller::Operator | Caller::Unauthenticated => Some(caller),
        // The login reads what the console shows, and does what the token's scope names.
        Caller::Token(named)
            if named
                .scope
                .iter()
                .any(|s| s == switchboard_config::CONSOLE_SCOPE) =>
        {
            let mut login = crate::auth::NamedCaller::clone(&named);
            for read in CONSOLE_READS {
                if !crate::auth::scope_allows(&login.scope, read) {
                    login.scope.push(read.to_owned());
                }
            }
            Some(Caller::Token(Arc::new(login)))
        }
        Caller::Token(_) | Caller::Capability(_) | Caller::Discord(_) => None,
    };
    let Some(caller) = caller else {
        tracing::info!(caller = %key, "console login refused: not the operator or a console token");
        return Err(ApiError::from(ToolError::denied(
            ErrorCode::OutOfScope,
            "This token may not use the console: log in with the operator token, or a [[toolserver.tokens]] token with \"console\" in its scope",
        )));
    };
    let (id, csrf) = core
        .console
        .logins
        .start(caller.clone())
        .map_err(|e| ToolError::internal(format!("cannot draw random bytes: {e}")))?;
    tracing::info!(caller = %caller.key(), "console login");
    let cookie = format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        LIFETIME.as_secs()
    );
    Ok((
        [
            (header::SET_COOKIE, cookie),
            (header::CACHE_CONTROL, "no-store".to_owned()),
        ],
        Json(json!({ "caller": caller.key(), "csrf": csrf })),
    )
        .into_response())
}

async fn logout(State(core): Shared, Change(operator): Change) -> Response {
    core.console.logins.end(&operator.id);
    (
        [(
            header::SET_COOKIE,
            format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
        )],
        Json(json!({ "loggedOut": true })),
    )
        .into_response()
}

async fn me(State(core): Shared, operator: Operator) -> Response {
    let compose_users = core.console.compose.get().map(|compose| compose.users());
    no_store(json!({
        "caller": operator.login.caller.key(),
        // Who this login is as an approval's owner: its own asks are not its to decide.
        "principal": operator.login.caller.principal(),
        "csrf": operator.login.csrf,
        "consoleApproves": core.governance().rules().permissions().console_approves,
        // What this login's scope takes beyond reading: the page offers only these.
        "mayDecide": operator.may(&core, "approvals.decide"),
        "mayChangeScopes": operator.may(&core, "admin.tools.set"),
        "mayAbort": operator.may(&core, "runs.abort"),
        "compose": compose_users,
        "runs": core.runs().is_some(),
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

async fn health(State(core): Shared, _: Operator) -> Response {
    let state = core.surface().connection();
    no_store(json!({
        "gateway": state.as_str(),
        "version": env!("CARGO_PKG_VERSION"),
        "pendingApprovals": core.approvals().pending().len(),
        "consoleSessions": core.console.logins.len(),
        "botUserId": core.surface().bot_user_id(),
        "eventStreams": core.events().subscribers(),
        "rateLimits": core.console.headroom.get().map(|source| source.headroom()),
        "series": {
            "everyS": health::SAMPLE_EVERY.as_secs(),
            "points": core.console.series().points(),
        },
    }))
}

async fn sessions(State(core): Shared, operator: Operator) -> Result<Response, ApiError> {
    let value = call(
        &core,
        &operator,
        "surface.sessions.list",
        json!({ "limit": 1000 }),
    )
    .await?;
    Ok(no_store(value))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MessagesQuery {
    limit: Option<u32>,
}

async fn messages(
    State(core): Shared,
    operator: Operator,
    Path(id): Path<String>,
    query: Result<Query<MessagesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| {
        ToolError::usage(
            ErrorCode::BadRequest,
            format!("{e}; the only parameter is limit"),
        )
    })?;
    let session = session_id(&id)?;
    let value = call(
        &core,
        &operator,
        "surface.messages.list",
        json!({ "sessionId": session.to_string(), "limit": query.limit.unwrap_or(50).clamp(1, 100) }),
    )
    .await?;
    Ok(no_store(value))
}

async fn scope(
    State(core): Shared,
    _: Operator,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let session = session_id(&id)?;
    core.allowed(session).await?;
    Ok(no_store(json!(core.session_tools(session).await)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScopeBody {
    action: String,
    tools: Option<String>,
}

async fn change_scope(
    State(core): Shared,
    Change(operator): Change,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let session = session_id(&id)?;
    let body: ScopeBody = json_body(body)?;
    // The operator callable, as the logged-in caller: its scope, the allowlist, the rules and
    // the audit log decide, as for every other front.
    let after = call(
        &core,
        &operator,
        "admin.tools.set",
        json!({ "sessionId": session.to_string(), "action": body.action, "tools": body.tools }),
    )
    .await?;
    tracing::info!(%session, by = %operator.by(), "session scope changed in the console");
    Ok(no_store(after))
}

/// The pending asks this login may see: every one when it may decide them, else only those its
/// own calls wait on.
async fn approvals(State(core): Shared, operator: Operator) -> Response {
    no_store(json!({
        "approvals": core.approvals_visible_to(&operator.login.caller),
        "consoleApproves": core.governance().rules().permissions().console_approves,
        "selfApproval": core.governance().rules().permissions().allow_self_approval,
        "mayDecide": operator.may(&core, "approvals.decide"),
        "nowMs": crate::clock::now_ms(),
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecideBody {
    approve: bool,
}

async fn decide(
    State(core): Shared,
    Change(operator): Change,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let DecideBody { approve } = json_body(body)?;
    // The same operator callable as a Discord click, as the logged-in caller.
    let decided = call(
        &core,
        &operator,
        "approvals.decide",
        json!({ "approvalId": id, "approve": approve }),
    )
    .await?;
    Ok(no_store(decided))
}

/// `GET /console/api/audit`: the filters `audit.list` takes.
#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AuditQuery {
    #[serde(skip_serializing_if = "Option::is_none")]
    since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    caller: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decision: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cursor: Option<u64>,
}

async fn audit(
    State(core): Shared,
    operator: Operator,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(mut query) = query.map_err(|e| {
        ToolError::usage(
            ErrorCode::BadRequest,
            format!("{e}; the filters are since, until, tool, sessionId, caller, decision, limit, cursor"),
        )
    })?;
    // An empty filter box means no filter.
    for field in [
        &mut query.since,
        &mut query.until,
        &mut query.tool,
        &mut query.session_id,
        &mut query.caller,
        &mut query.decision,
    ] {
        if field.as_deref().is_some_and(|v| v.trim().is_empty()) {
            *field = None;
        }
    }
    let input = serde_json::to_value(&query).map_err(|e| ToolError::internal(e.to_string()))?;
    let value = call(&core, &operator, "audit.list", input).await?;
    Ok(no_store(value))
}

async fn runs(State(core): Shared, operator: Operator) -> Result<Response, ApiError> {
    if core.runs().is_none() {
        return Ok(no_store(
            json!({ "agent": false, "active": [], "recent": [] }),
        ));
    }
    // What runs now is `runs.list`'s, an operator callable: a login whose scope does not name
    // it sees only the recent runs its audit reads show.
    let active = if operator.may(&core, "runs.list") {
        let listed = call(&core, &operator, "runs.list", json!({})).await?;
        let listed: Vec<crate::runs::RunView> =
            serde_json::from_value(listed["runs"].clone()).unwrap_or_default();
        active_runs(&core, &listed)
    } else {
        Vec::new()
    };
    // Recent runs, from the audit log: each capability's calls, grouped by run.
    let recent = match call(&core, &operator, "audit.list", json!({ "limit": 300 })).await {
        Ok(page) => recent_runs(&page),
        Err(error) => {
            tracing::debug!(%error, "the console cannot read the audit log for recent runs");
            Vec::new()
        }
    };
    Ok(no_store(
        json!({ "agent": true, "active": active, "recent": recent }),
    ))
}

/// `runs.list`'s runs as the runs panel shows them: one row per session with its running run
/// and its queue.
fn active_runs(core: &Core, listed: &[crate::runs::RunView]) -> Vec<Value> {
    let mut sessions: Vec<Snowflake> = listed.iter().map(|run| run.session_id).collect();
    sessions.sort_unstable();
    sessions.dedup();
    let trigger = |run: &crate::runs::RunView| {
        json!({
            "runId": run.run_id,
            "messageId": run.trigger_message_id,
            "author": run.requested_by_name,
            "text": run.text,
            "workflowId": run.workflow_id,
            "startedMs": run.started_ms,
        })
    };
    sessions
        .into_iter()
        .map(|session| {
            let of_session = || listed.iter().filter(move |run| run.session_id == session);
            json!({
                "sessionId": session.to_string(),
                "session": core.session_reference(session),
                "running": of_session()
                    .find(|run| run.state == crate::runs::RunState::Running)
                    .map(trigger),
                "waiting": of_session()
                    .filter(|run| run.state == crate::runs::RunState::Queued)
                    .map(trigger)
                    .collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// Agent runs seen in a page of the audit log (newest first), at most 20: first and last call,
/// how many calls, how many failed.
fn recent_runs(page: &Value) -> Vec<Value> {
    let mut order: Vec<String> = Vec::new();
    let mut runs: std::collections::HashMap<String, Value> = std::collections::HashMap::new();
    for row in page["audit"].as_array().into_iter().flatten() {
        let Some(run) = row["run"].as_str() else {
            continue;
        };
        let time = row["timeMs"].as_u64().unwrap_or(0);
        let failed = row["outcome"].as_str() != Some("ok");
        let entry = runs.entry(run.to_owned()).or_insert_with(|| {
            order.push(run.to_owned());
            json!({ "run": run, "sessions": row["sessions"], "lastMs": time, "firstMs": time, "calls": 0, "failed": 0, "requestedBy": row["requestedBy"] })
        });
        entry["firstMs"] = json!(time);
        entry["calls"] = json!(entry["calls"].as_u64().unwrap_or(0) + 1);
        if failed {
            entry["failed"] = json!(entry["failed"].as_u64().unwrap_or(0) + 1);
        }
    }
    order
        .into_iter()
        .take(20)
        .filter_map(|run| runs.remove(&run))
        .collect()
}

async fn abort(
    State(core): Shared,
    Change(operator): Change,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let session = session_id(&id)?;
    // The operator callable, as the logged-in caller: the operator, or a login whose scope
    // names runs.abort, stops any run; audited like any call.
    let answer = match call(
        &core,
        &operator,
        "runs.abort",
        json!({ "sessionId": session.to_string() }),
    )
    .await
    {
        Ok(stopped) => json!({ "outcome": "stopped", "runId": stopped["runId"] }),
        Err(error) if error.code == ErrorCode::NothingRunning => {
            json!({ "outcome": "nothing_running" })
        }
        Err(error) => return Err(ApiError::from(error)),
    };
    tracing::info!(%session, by = %operator.by(), outcome = %answer["outcome"], "abort from the console");
    Ok(no_store(answer))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ComposeBody {
    session_id: String,
    author_id: String,
    content: String,
}

async fn compose(
    State(core): Shared,
    Change(operator): Change,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let compose = core.console.compose.get().ok_or_else(|| {
        ToolError::not_found(
            ErrorCode::UnknownRoute,
            "Posting as a user exists only in the playground (switchboard playground)",
        )
    })?;
    let body: ComposeBody = json_body(body)?;
    let session = session_id(&body.session_id)?;
    let author = crate::invocation::parse_id("authorId", &body.author_id)?;
    if body.content.trim().is_empty() || body.content.chars().count() > MAX_COMPOSE_CHARS {
        return Err(ApiError::from(ToolError::usage(
            ErrorCode::InvalidInput,
            format!("content must have 1 to {MAX_COMPOSE_CHARS} characters"),
        )));
    }
    if !compose.users().iter().any(|user| user.id == author) {
        return Err(ApiError::from(ToolError::usage(
            ErrorCode::UnknownUser,
            format!("{author} is not a demo user this playground posts as"),
        )));
    }
    core.allowed(session).await?;
    // As Discord's client does: `@name` and `#channel` typed in the box become mentions, so
    // `@switchboard help` reaches the agent.
    let content = core.discord_markup(&body.content).into_owned();
    let posted = compose.post(session, author, content).await.map_err(|e| {
        ToolError::usage(
            ErrorCode::DiscordRejected,
            format!("The fake Discord refused the message: {e}"),
        )
    })?;
    tracing::info!(%session, %author, by = %operator.by(), "console posted as a demo user");
    Ok(no_store(json!({ "posted": posted })))
}
