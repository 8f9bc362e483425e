//! MCP over streamable HTTP at `/mcp`, beside the tool server's API.
//!
//! * **Auth first.** Every request to `/mcp` (POST, GET, DELETE) is authenticated from its head
//!   with the API's bearer tokens ([`switchboard_http::Authed`]: the operator, named tokens,
//!   run capabilities, and the `x-switchboard-*` context headers) before its body is read. No
//!   token or a bad one: 401 with `WWW-Authenticate: Bearer` and the API's typed error body.
//! * **Bodies** are read like `POST /v1/call`'s ([`switchboard_http::read_body`]): at most
//!   1 MiB (413 `body_too_large`), within the connection loop's body deadline (408
//!   `body_timeout`); text that is not JSON answers a JSON-RPC parse error (-32700, HTTP 400).
//! * **Stateless.** rmcp serves each POST on its own (`legacy_session_mode = false`): no
//!   session is created or kept, `Mcp-Session-Id` is ignored, GET and DELETE answer 405. The
//!   bound on sessions is therefore zero — a flood of `initialize` requests costs each its
//!   request and nothing after it. Nothing here needs a session: the server sends no requests
//!   of its own and tools do not change within a connection.
//! * **A plain `tools/call`** (no `_meta`, a protocol revision before 2026-07-28) is answered
//!   directly (`direct.rs`): the same pipeline call and the same answer, without rmcp's
//!   per-request service and a parse of the answer back into a `Value`.
//! * **Answers** are plain JSON unless the call reports progress, then an SSE stream of the
//!   progress notifications and the answer (kept alive with comments while a call waits).
//! * **Calls** go through [`Core::call_observed`]; when the rules ask an approver and the
//!   client sent a progress token, a progress notification goes out at once and every
//!   [`PROGRESS_EVERY`] until the decision (progress: seconds waited; total: the ask timeout).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorData, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{Peer, RoleServer, ServerHandler};
use serde_json::Value;
use switchboard_engine::{CallContext, CallObserver, Core, ToolError, ToolOutput};
use switchboard_http::{read_body, Authed, MAX_BODY_BYTES};
use tokio::sync::watch;

use crate::convert::{error_result, server_config, success_result, tool};
use crate::direct::DirectCall;

/// The path the MCP endpoint is served at.
pub const PATH: &str = "/mcp";
/// How often a call waiting for an approval reports progress.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// The longest a progress notification may take to go out before it is dropped (a client that
/// stops reading must not stall the call).
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(1);

/// How the endpoint is set up: the tool server's idle timeout.
///
/// `Host`, `Origin` and `Content-Type` are checked for every route of the tool server before
/// routing (`switchboard-http`'s `browsers.rs`: the bind address, loopback names and
/// `toolserver.allowed_hosts`), so rmcp's own host check (loopback names only) is off: one rule
/// for `/mcp` and the API, the direct path included.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// `toolserver.idle_timeout_s`: SSE streams send a keep-alive comment well within it.
    pub idle_timeout: Duration,
}

/// The `/mcp` routes over `core`, to merge beside the API ([`switchboard_http::serve_with`]).
pub fn router(core: Arc<Core>, options: Options) -> Router {
    let keep_alive =
        (options.idle_timeout / 2).clamp(Duration::from_millis(500), Duration::from_secs(15));
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(Some(keep_alive))
        .with_sse_retry(None)
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .disable_allowed_hosts();
    let handler_core = Arc::clone(&core);
    let service = StreamableHttpService::new(
        move || {
            Ok(Served {
                core: Arc::clone(&handler_core),
            })
        },
        Arc::new(NeverSessionManager::default()),
        config,
    );
    Router::new()
        .route_service(PATH, service)
        .layer(axum::middleware::from_fn_with_state(core, authenticate))
}

/// The caller a request authenticated as, for the handler behind rmcp.
#[derive(Clone)]
struct Caller(Arc<CallContext>);

/// Authenticates from the head, then reads the body with the API's limits.
async fn authenticate(State(core): State<Arc<Core>>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let context = match Authed::from_request_parts(&mut parts, &core).await {
        Ok(Authed(context)) => context,
        Err(error) => return refused(error.0),
    };
    let body = if parts.method == Method::POST {
        let bytes = match read_body(body).await {
            Ok(bytes) => bytes,
            Err(error) => return switchboard_front::error_response(error),
        };
        // The plainest tools/call is answered here; everything else by rmcp.
        if let Some(call) = DirectCall::parse(&parts.headers, &bytes) {
            return call.answer(&core, context).await;
        }
        if let Err(error) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
            return parse_error(&error);
        }
        Body::from(bytes)
    } else {
        body
    };
    parts.extensions.insert(Caller(Arc::new(context)));
    next.run(Request::from_parts(parts, body)).await
}

/// A refused request: the API's typed error, with `WWW-Authenticate` on a 401.
fn refused(error: ToolError) -> Response {
    let unauthenticated = error.status() == StatusCode::UNAUTHORIZED;
    let mut response = switchboard_front::error_response(error);
    if unauthenticated {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"switchboard\""),
        );
    }
    response
}

/// JSON-RPC's parse error for a body that is not JSON.
fn parse_error(error: &serde_json::Error) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": -32700,
            "message": format!("Parse error: the body is not JSON ({error}); send one JSON-RPC message"),
        },
    });
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

/// The MCP server behind rmcp: one per request (stateless), sharing the core.
#[derive(Clone)]
struct Served {
    core: Arc<Core>,
}

impl Served {
    /// The caller `authenticate` found (every request passed it).
    fn caller(cx: &RequestContext<RoleServer>) -> Result<Arc<CallContext>, ErrorData> {
        cx.extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .map(|caller| Arc::clone(&caller.0))
            .ok_or_else(|| {
                ErrorData::internal_error("the request reached MCP without authentication", None)
            })
    }
}

impl ServerHandler for Served {
    fn get_info(&self) -> ServerConfig {
        server_config()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let context = Self::caller(&cx)?;
        let tools = self
            .core
            .registry()
            .entries()
            .filter(|entry| self.core.may_call(&context.caller, &entry.id))
            .map(tool)
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let shared = Self::caller(&cx)?;
        let mut context = CallContext::clone(&shared);
        // The client gave no tool-call id: the server hands out one nobody can guess.
        if context.tool_call_id.is_none() {
            context.tool_call_id = crate::server_call_id();
        }
        if context.client.is_none() {
            context.client = Some("mcp".to_owned());
        }
        let input = Value::Object(request.arguments.unwrap_or_default());
        let call = call(
            &self.core,
            &context,
            &request.name,
            input,
            cx.meta
                .get_progress_token()
                .map(|token| (cx.peer.clone(), token)),
        );
        let result = tokio::select! {
            result = call => result,
            // The client cancelled or went away: stop waiting, as the HTTP API does when its
            // connection closes. Nobody reads this answer.
            () = cx.ct.cancelled() => {
                return Err(ErrorData::internal_error("the request was cancelled", None));
            }
        };
        Ok(answer(result).into())
    }
}

/// A pipeline answer as a tool result.
fn answer(result: Result<ToolOutput, ToolError>) -> rmcp::model::CallToolResult {
    match result {
        Ok(output) => success_result(output.get()),
        Err(error) => error_result(&error.body().error),
    }
}

/// What a call waits for, as progress reports it.
#[derive(Debug, Clone)]
enum Wait {
    /// An approver, for this callable.
    Approval(String),
    /// `agent.handoff`'s sub-run: the agent and the run's id.
    Handoff { agent: String, run_id: String },
}

/// Signals what the call waits for (and at most how long) to the progress loop.
struct ApprovalWait(watch::Sender<Option<(Wait, Duration)>>);

impl CallObserver for ApprovalWait {
    fn awaiting_approval(&self, tool_id: &str, timeout: Duration) {
        self.0
            .send_replace(Some((Wait::Approval(tool_id.to_owned()), timeout)));
    }

    fn handing_off(&self, agent: &str, run_id: &str, timeout: Duration) {
        self.0.send_replace(Some((
            Wait::Handoff {
                agent: agent.to_owned(),
                run_id: run_id.to_owned(),
            },
            timeout,
        )));
    }
}

/// Runs the call; with a progress token, reports the wait for an approval while it lasts.
async fn call(
    core: &Core,
    context: &CallContext,
    tool_id: &str,
    input: Value,
    progress: Option<(Peer<RoleServer>, ProgressToken)>,
) -> Result<ToolOutput, ToolError> {
    let Some((peer, token)) = progress else {
        return core.call(context, tool_id, input).await;
    };
    let (signal, mut waiting) = watch::channel(None);
    let observer = ApprovalWait(signal);
    let call = core.call_observed(context, tool_id, input, &observer);
    tokio::pin!(call);
    let mut ticker: Option<Ticker> = None;
    loop {
        tokio::select! {
            result = &mut call => return result,
            changed = waiting.changed(), if ticker.is_none() => {
                if changed.is_err() {
                    // The observer lives as long as the call: unreachable, but never spin.
                    return call.await;
                }
                if let Some((wait, timeout)) = waiting.borrow_and_update().clone() {
                    ticker = Some(Ticker::new(wait, timeout));
                }
            }
            () = tick(&mut ticker) => {
                if let Some(ticker) = &ticker {
                    let notification = ticker.notification(token.clone());
                    let sent = tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_progress(notification)).await;
                    if !matches!(sent, Ok(Ok(()))) {
                        tracing::debug!("a progress notification could not be sent");
                    }
                }
            }
        }
    }
}

/// The progress of one wait (an approval, a handoff's sub-run).
struct Ticker {
    interval: tokio::time::Interval,
    started: tokio::time::Instant,
    wait: Wait,
    timeout: Duration,
}

impl Ticker {
    fn new(wait: Wait, timeout: Duration) -> Ticker {
        Ticker {
            // The first tick is immediate: the client learns of the wait at once.
            interval: tokio::time::interval(PROGRESS_EVERY),
            started: tokio::time::Instant::now(),
            wait,
            timeout,
        }
    }

    fn notification(&self, token: ProgressToken) -> ProgressNotificationParam {
        let waited = self.started.elapsed();
        let what = match &self.wait {
            Wait::Approval(tool) => format!("waiting for an approver to approve '{tool}'"),
            Wait::Handoff { agent, run_id } => {
                format!("agent '{agent}' is working on the handoff (run {run_id})")
            }
        };
        ProgressNotificationParam::new(token, waited.as_secs_f64())
            .with_total(self.timeout.as_secs_f64())
            .with_message(format!(
                "{what} ({} s of at most {} s)",
                waited.as_secs(),
                self.timeout.as_secs()
            ))
    }
}

/// The next tick of the ticker, or never without one.
async fn tick(ticker: &mut Option<Ticker>) {
    match ticker {
        Some(ticker) => {
            ticker.interval.tick().await;
        }
        None => std::future::pending().await,
    }
}
