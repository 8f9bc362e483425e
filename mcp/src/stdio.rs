//! `switchboard mcp`: an MCP server on standard input and output that forwards every request
//! to a running switchboard over its HTTP API, with the caller's `SWITCHBOARD_URL` and
//! `SWITCHBOARD_TOKEN` (and the `SWITCHBOARD_*` context variables the `tools` CLI sends).
//!
//! `tools/list` is `GET /v1/tools` (so exactly the token's scope) and `tools/call` is one
//! `POST /v1/call`: the running server's pipeline decides everything; nothing is cached here.
//! A refused call comes back as a tool result with `isError` and the server's typed error; a
//! server that cannot be reached, or that refuses the token on `tools/list`, is a JSON-RPC
//! error naming what to fix. Logs go to standard error; standard output carries only MCP.

use std::time::Duration;

use protocol::context::{
    CONTEXT_ENV_HEADERS, ENV_TOKEN, ENV_URL, HEADER_CLIENT, HEADER_TOOL_CALL_ID,
};
use protocol::{CallRequest, ErrorBody, ErrorCode, ErrorInfo, ErrorKind, ToolEntry};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorData, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::Value;

use crate::convert::{error_result, server_config, success_result, tool};

/// Connecting to the switchboard never waits longer than this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Answers larger than this are refused rather than buffered.
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;
/// While a call with a progress token runs, how long before the first look for an approval it
/// waits on (most calls are done by then), and how often after.
const FIRST_LOOK: Duration = Duration::from_millis(700);
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// One look (`GET /v1/approvals?toolCallId=…`) never takes longer than this.
const LOOK_TIMEOUT: Duration = Duration::from_secs(5);
/// A progress notification that cannot go out within this is dropped (stdout is stuck).
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(1);

/// Why the forwarder cannot start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    /// `SWITCHBOARD_URL` is not an http(s) URL.
    #[error("{ENV_URL} must be an http:// or https:// URL, got '{0}'")]
    BadUrl(String),
    /// A variable holds something no HTTP header can carry.
    #[error("{0} holds characters an HTTP header cannot carry")]
    BadEnvironment(&'static str),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
    /// The MCP session could not start (standard input closed before `initialize`, ...).
    #[error("MCP over stdio: {0}")]
    Serve(String),
}

/// Where to forward, and what to send with every request.
#[derive(Debug, Clone)]
pub struct Remote {
    /// `http://host:port`, without a trailing slash.
    pub base: String,
    /// The bearer token, when one is set.
    pub token: Option<String>,
    /// The `x-switchboard-*` context headers.
    pub headers: Vec<(&'static str, String)>,
}

impl Remote {
    /// From the environment as `env` answers it: `SWITCHBOARD_URL` (default
    /// `http://127.0.0.1:7311`), `SWITCHBOARD_TOKEN`, and the context variables.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Remote, StdioError> {
        let url = env(ENV_URL)
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| protocol::context::DEFAULT_URL.to_owned());
        let base = url.trim().trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(StdioError::BadUrl(url));
        }
        let token = env(ENV_TOKEN).filter(|t| !t.trim().is_empty());
        if token.as_deref().is_some_and(|t| {
            reqwest::header::HeaderValue::from_str(&format!("Bearer {t}")).is_err()
        }) {
            return Err(StdioError::BadEnvironment(ENV_TOKEN));
        }
        let mut headers = vec![(HEADER_CLIENT, "mcp-stdio".to_owned())];
        for (var, header) in CONTEXT_ENV_HEADERS {
            // Each forwarded call gets its own tool-call id (see `Forwarder::call_tool`).
            if header == HEADER_TOOL_CALL_ID {
                continue;
            }
            if let Some(value) = env(var).filter(|v| !v.is_empty()) {
                if reqwest::header::HeaderValue::from_str(&value).is_err() {
                    return Err(StdioError::BadEnvironment(var));
                }
                headers.retain(|(name, _)| *name != header);
                headers.push((header, value));
            }
        }
        Ok(Remote {
            base,
            token,
            headers,
        })
    }
}

/// Serves MCP on standard input and output until the client closes it.
pub async fn run(remote: Remote) -> Result<(), StdioError> {
    let forwarder = Forwarder::new(remote)?;
    let running = forwarder
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| StdioError::Serve(e.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|e| StdioError::Serve(e.to_string()))?;
    Ok(())
}

/// The MCP server whose tools are the remote switchboard's.
#[derive(Clone)]
pub struct Forwarder {
    http: reqwest::Client,
    remote: Remote,
}

#[derive(Deserialize)]
struct ToolList {
    tools: Vec<ToolEntry>,
}

/// What one HTTP exchange gave: the body of a 2xx, or the server's typed error.
enum Exchange {
    Ok(Vec<u8>),
    Refused(ErrorInfo),
}

impl Forwarder {
    /// A forwarder to `remote` (no request is sent yet).
    pub fn new(remote: Remote) -> Result<Forwarder, StdioError> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("switchboard-mcp/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Forwarder { http, remote })
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Exchange {
        let mut request = request;
        if let Some(token) = &self.remote.token {
            request = request.bearer_auth(token);
        }
        for (name, value) in &self.remote.headers {
            request = request.header(*name, value);
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) => {
                return Exchange::Refused(local_error(
                    ErrorKind::Unavailable,
                    ErrorCode::Unreachable,
                    format!(
                        "cannot reach switchboard at {} ({error}); is it running, and is {ENV_URL} right?",
                        self.remote.base
                    ),
                ))
            }
        };
        let status = response.status();
        let body = match read_limited(response).await {
            Ok(body) => body,
            Err(message) => {
                return Exchange::Refused(local_error(
                    ErrorKind::Unavailable,
                    ErrorCode::ConnectionLost,
                    message,
                ))
            }
        };
        if status.is_success() {
            return Exchange::Ok(body);
        }
        match serde_json::from_slice::<ErrorBody>(&body) {
            Ok(refusal) => Exchange::Refused(refusal.error),
            Err(_) => Exchange::Refused(local_error(
                ErrorKind::Internal,
                ErrorCode::BadResponse,
                format!(
                    "switchboard answered HTTP {status} without its error body; is {ENV_URL} a switchboard?"
                ),
            )),
        }
    }
}

async fn read_limited(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if chunk.len() > MAX_ANSWER_BYTES.saturating_sub(body.len()) {
                    return Err(format!(
                        "switchboard's answer is over {MAX_ANSWER_BYTES} bytes"
                    ));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(error) => return Err(format!("the connection to switchboard broke: {error}")),
        }
    }
}

fn local_error(kind: ErrorKind, code: ErrorCode, message: String) -> ErrorInfo {
    ErrorInfo {
        retryable: kind.retryable(),
        kind,
        code,
        message,
        details: Value::Null,
    }
}

impl ServerHandler for Forwarder {
    fn get_info(&self) -> ServerConfig {
        server_config()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let url = format!("{}/v1/tools", self.remote.base);
        match self.send(self.http.get(url)).await {
            Exchange::Ok(body) => match serde_json::from_slice::<ToolList>(&body) {
                Ok(list) => Ok(ListToolsResult::with_all_items(
                    list.tools.iter().map(tool).collect(),
                )),
                Err(error) => Err(ErrorData::internal_error(
                    format!("switchboard's tool list is not the protocol's: {error}"),
                    None,
                )),
            },
            Exchange::Refused(error) => Err(ErrorData::internal_error(
                format!(
                    "switchboard refused to list tools: {}: {}",
                    error.code, error.message
                ),
                serde_json::to_value(&error).ok(),
            )),
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let handoff = Handoff::of(&request.name, request.arguments.as_ref());
        let body = CallRequest {
            tool: request.name.into_owned(),
            input: Some(request.arguments.unwrap_or_default()),
            ..CallRequest::default()
        };
        // Its own id, so the approval it may wait on can be found (and the audit log names it);
        // random, so no other caller's id is ever the same.
        let tool_call_id = crate::server_call_id()
            .map(|id| id.replacen("mcp-", "mcp-stdio-", 1))
            .ok_or_else(|| {
                ErrorData::internal_error("cannot draw random bytes for a call id", None)
            })?;
        let url = format!("{}/v1/call", self.remote.base);
        let post = self
            .http
            .post(url)
            .header(HEADER_TOOL_CALL_ID, &tool_call_id)
            .json(&body);
        let exchange = self.send(post);
        let progress = cx
            .meta
            .get_progress_token()
            .map(|token| (cx.peer.clone(), token));
        let exchange = tokio::select! {
            exchange = self.reporting(exchange, &tool_call_id, progress, handoff) => exchange,
            () = cx.ct.cancelled() => {
                return Err(ErrorData::internal_error("the request was cancelled", None));
            }
        };
        let result = match exchange {
            Exchange::Ok(body) => match serde_json::from_slice::<OkBody>(&body) {
                Ok(ok) => success_result(ok.value.get()),
                Err(error) => error_result(&local_error(
                    ErrorKind::Internal,
                    ErrorCode::BadResponse,
                    format!("switchboard's answer is not the protocol's: {error}"),
                )),
            },
            Exchange::Refused(error) => error_result(&error),
        };
        Ok(result.into())
    }
}

impl Forwarder {
    /// Runs `exchange`; with a progress token, looks (like the `tools` CLI) whether the call
    /// waits on an approval, and while it does, reports progress every
    /// [`crate::http::PROGRESS_EVERY`] (progress: seconds waited; total: until it expires).
    /// An `agent.handoff` that waits on no approval reports its sub-run's work the same way
    /// (total: the handoff's timeout), as the HTTP front does.
    async fn reporting(
        &self,
        exchange: impl std::future::Future<Output = Exchange>,
        tool_call_id: &str,
        progress: Option<(Peer<RoleServer>, ProgressToken)>,
        handoff: Option<Handoff>,
    ) -> Exchange {
        let Some((peer, token)) = progress else {
            return exchange.await;
        };
        tokio::pin!(exchange);
        let look = tokio::time::sleep(FIRST_LOOK);
        tokio::pin!(look);
        let mut waiting: Option<(Waiting, tokio::time::Instant, tokio::time::Interval)> = None;
        loop {
            tokio::select! {
                done = &mut exchange => return done,
                () = &mut look, if waiting.is_none() => {
                    let found = match self.pending_approval(tool_call_id).await {
                        Some(pending) => Some(Waiting::Approval(pending)),
                        None => handoff.clone().map(Waiting::Handoff),
                    };
                    match found {
                        Some(found) => {
                            let every = tokio::time::interval(crate::http::PROGRESS_EVERY);
                            waiting = Some((found, tokio::time::Instant::now(), every));
                        }
                        None => look.as_mut().reset(tokio::time::Instant::now() + LOOK_EVERY),
                    }
                }
                _ = async {
                    match waiting.as_mut() {
                        Some((_, _, every)) => every.tick().await,
                        None => std::future::pending().await,
                    }
                } => {
                    if let Some((found, since, _)) = &waiting {
                        let notification = found.notification(token.clone(), since.elapsed());
                        let sent = tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_progress(notification)).await;
                        if !matches!(sent, Ok(Ok(()))) {
                            tracing::debug!("a progress notification could not be sent");
                        }
                    }
                }
            }
        }
    }

    /// The approval the call `tool_call_id` waits on, if any (a failed look is "none yet").
    async fn pending_approval(&self, tool_call_id: &str) -> Option<Pending> {
        let url = format!("{}/v1/approvals", self.remote.base);
        let request = self.http.get(url).query(&[("toolCallId", tool_call_id)]);
        let Ok(Exchange::Ok(body)) = tokio::time::timeout(LOOK_TIMEOUT, self.send(request)).await
        else {
            return None;
        };
        let list: ApprovalList = serde_json::from_slice(&body).ok()?;
        list.approvals.into_iter().next()
    }
}

/// What a call with a progress token is found waiting on.
enum Waiting {
    /// An approver.
    Approval(Pending),
    /// The other agent's run of an `agent.handoff`.
    Handoff(Handoff),
}

impl Waiting {
    fn notification(&self, token: ProgressToken, waited: Duration) -> ProgressNotificationParam {
        match self {
            Waiting::Approval(pending) => pending.notification(token, waited),
            Waiting::Handoff(handoff) => handoff.notification(token, waited),
        }
    }
}

/// An `agent.handoff` call, as its input names it.
#[derive(Clone)]
struct Handoff {
    agent: String,
    timeout: Duration,
}

/// `agent.handoff`'s own default `timeoutS`.
const HANDOFF_DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

impl Handoff {
    /// The handoff a call is, if it is one (its input is checked by the server, not here:
    /// garbage only makes the progress message vaguer).
    fn of(tool: &str, input: Option<&serde_json::Map<String, Value>>) -> Option<Handoff> {
        if tool != "agent.handoff" {
            return None;
        }
        let input = input?;
        let agent = input.get("agent").and_then(Value::as_str).unwrap_or("?");
        let timeout = input
            .get("timeoutS")
            .and_then(Value::as_u64)
            .map_or(HANDOFF_DEFAULT_TIMEOUT, Duration::from_secs);
        Some(Handoff {
            agent: agent.chars().take(64).collect(),
            timeout,
        })
    }

    fn notification(&self, token: ProgressToken, waited: Duration) -> ProgressNotificationParam {
        ProgressNotificationParam::new(token, waited.as_secs_f64())
            .with_total(self.timeout.as_secs_f64())
            .with_message(format!(
                "agent '{}' is working on the handoff ({} s so far)",
                self.agent,
                waited.as_secs()
            ))
    }
}

/// `GET /v1/approvals`'s answer, what progress reports of it.
#[derive(Deserialize)]
struct ApprovalList {
    approvals: Vec<Pending>,
}

/// An approval a call waits on.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Pending {
    tool: String,
    #[serde(default)]
    session_label: Option<String>,
    #[serde(default)]
    expires_at_ms: Option<u64>,
}

impl Pending {
    fn notification(&self, token: ProgressToken, waited: Duration) -> ProgressNotificationParam {
        let mut progress = ProgressNotificationParam::new(token, waited.as_secs_f64());
        if let Some(expires_at_ms) = self.expires_at_ms {
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let left = Duration::from_millis(expires_at_ms.saturating_sub(now_ms));
            progress = progress.with_total((waited + left).as_secs_f64());
        }
        let place = self.session_label.as_deref().unwrap_or("Discord");
        progress.with_message(format!(
            "waiting for an approver to approve '{}' in {place} ({} s so far)",
            self.tool,
            waited.as_secs()
        ))
    }
}

/// `{"ok":true,"value":…}`, the value kept as text.
#[derive(Deserialize)]
struct OkBody<'a> {
    #[serde(borrow)]
    value: &'a serde_json::value::RawValue,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        }
    }

    #[test]
    fn the_environment_names_the_server_token_and_context() {
        let remote = Remote::from_env(&env(&[
            ("SWITCHBOARD_URL", "http://127.0.0.1:9/"),
            ("SWITCHBOARD_TOKEN", "secret"),
            ("SWITCHBOARD_SESSION_ID", "#ops"),
        ]))
        .unwrap();
        assert_eq!(remote.base, "http://127.0.0.1:9");
        assert_eq!(remote.token.as_deref(), Some("secret"));
        assert!(remote
            .headers
            .contains(&(protocol::context::HEADER_SESSION_ID, "#ops".to_owned())));
    }

    #[test]
    fn a_bad_url_or_header_value_is_refused_before_anything_is_sent() {
        assert!(matches!(
            Remote::from_env(&env(&[("SWITCHBOARD_URL", "ftp://x")])),
            Err(StdioError::BadUrl(_))
        ));
        assert!(matches!(
            Remote::from_env(&env(&[("SWITCHBOARD_TOKEN", "a\nb")])),
            Err(StdioError::BadEnvironment(_))
        ));
    }
}
