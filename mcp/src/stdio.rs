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

use protocol::context::{CONTEXT_ENV_HEADERS, ENV_TOKEN, ENV_URL, HEADER_CLIENT};
use protocol::{CallRequest, ErrorBody, ErrorCode, ErrorInfo, ErrorKind, ToolEntry};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorData, ListToolsResult, PaginatedRequestParams,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::Value;

use crate::convert::{error_result, server_config, success_result, tool};

/// Connecting to the switchboard never waits longer than this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Answers larger than this are refused rather than buffered.
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

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
        let body = CallRequest {
            tool: request.name.into_owned(),
            input: Some(request.arguments.unwrap_or_default()),
            ..CallRequest::default()
        };
        let url = format!("{}/v1/call", self.remote.base);
        let exchange = self.send(self.http.post(url).json(&body));
        let exchange = tokio::select! {
            exchange = exchange => exchange,
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
