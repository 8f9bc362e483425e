//! HTTP helpers for the tests that drive the console and the approval routes: one request
//! (status, JSON body, the cookie it sets), logging in, and the headers a change needs.
// Each test file uses part of it.
#![allow(dead_code)]

use std::time::Duration;

use serde_json::{json, Value};
use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};

/// What the server answered.
pub struct Answer {
    pub status: u16,
    /// The body as JSON (a string when it is not JSON).
    pub body: Value,
    pub set_cookie: Option<String>,
}

/// One request with a JSON content type, off the runtime's threads, bounded in time.
pub async fn request(
    method: &'static str,
    url: String,
    headers: Vec<(&'static str, String)>,
    body: Option<Vec<u8>>,
) -> Answer {
    let task = tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(20)))
            .build()
            .into();
        let mut builder = ureq::http::Request::builder().method(method).uri(&url);
        for (name, value) in headers {
            builder = builder.header(name, value);
        }
        let request = builder
            .header("content-type", "application/json")
            .body(body.unwrap_or_default())
            .expect("request");
        let mut response = agent.run(request).expect("server answers");
        let status = response.status().as_u16();
        let set_cookie = response
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = response.body_mut().read_to_string().expect("body is text");
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Answer {
            status,
            body,
            set_cookie,
        }
    });
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("request finished in time")
        .expect("request task")
}

/// `tool` with `input` over `POST /v1/call` as `token`.
pub async fn call_as(server: &TestServer, token: &str, tool: &str, input: Value) -> Answer {
    request(
        "POST",
        format!("{}/v1/call", server.url()),
        vec![("authorization", format!("Bearer {token}"))],
        Some(
            json!({ "tool": tool, "input": input })
                .to_string()
                .into_bytes(),
        ),
    )
    .await
}

/// The demo config with the console on, and `extra` after it.
pub fn console_config(extra: &str) -> String {
    format!("{DEMO_CONFIG}console = true\n{extra}")
}

pub fn origin(server: &TestServer) -> String {
    server.url()
}

/// A logged-in console: its cookie header and CSRF token.
pub struct Login {
    pub cookie: String,
    pub csrf: String,
}

impl Login {
    /// The headers of a read.
    pub fn read(&self) -> Vec<(&'static str, String)> {
        vec![("cookie", self.cookie.clone())]
    }

    /// The headers of a change: the cookie, the CSRF token, the same origin.
    pub fn change(&self, server: &TestServer) -> Vec<(&'static str, String)> {
        vec![
            ("cookie", self.cookie.clone()),
            ("x-switchboard-csrf", self.csrf.clone()),
            ("origin", origin(server)),
        ]
    }
}

/// `POST /console/api/login` with `token`, as the page sends it.
pub async fn login(server: &TestServer, token: &str) -> Answer {
    request(
        "POST",
        format!("{}/console/api/login", server.url()),
        vec![("origin", origin(server))],
        Some(json!({ "token": token }).to_string().into_bytes()),
    )
    .await
}

/// Logs in with the operator token.
pub async fn log_in(server: &TestServer) -> Login {
    log_in_as(server, server.operator_token()).await
}

/// Logs in with `token`, which must be let in with a strict login cookie.
pub async fn log_in_as(server: &TestServer, token: &str) -> Login {
    let answer = login(server, token).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let set_cookie = answer.set_cookie.expect("a login cookie");
    assert!(set_cookie.contains("HttpOnly"), "{set_cookie}");
    assert!(set_cookie.contains("SameSite=Strict"), "{set_cookie}");
    Login {
        cookie: set_cookie.split(';').next().unwrap_or_default().to_owned(),
        csrf: answer.body["csrf"]
            .as_str()
            .expect("a csrf token")
            .to_owned(),
    }
}

/// Reads `path` (under the server) with `headers`.
pub async fn get(server: &TestServer, path: &str, headers: Vec<(&'static str, String)>) -> Answer {
    request("GET", format!("{}{path}", server.url()), headers, None).await
}

/// Posts `body` to `path` (under the server) with `headers`.
pub async fn post(
    server: &TestServer,
    path: &str,
    headers: Vec<(&'static str, String)>,
    body: Value,
) -> Answer {
    request(
        "POST",
        format!("{}{path}", server.url()),
        headers,
        Some(body.to_string().into_bytes()),
    )
    .await
}

/// A console config with a `ci` token (`surface.*`) whose sends to #release-room are asked,
/// plus `tokens` (more `[[toolserver.tokens]]`) and `permissions` (more `[permissions]` keys).
pub fn ci_asks_config(tokens: &str, permissions: &str) -> String {
    console_config(&format!(
        r##"
[[toolserver.tokens]]
name = "ci"
token_env = "CI_TOKEN"
scope = ["surface.*"]
{tokens}
[permissions]
approvers = ["@stanley"]
{permissions}
[[permissions.rules]]
tool = "surface.messages.send"
session = "#release-room"
caller = "token:ci"
policy = "ask"
"##
    ))
}

/// `token` sends `text` to #release-room over HTTP, in the background (the call waits on its
/// ask).
pub fn send_in_background(
    server: &TestServer,
    token: &str,
    text: &str,
    tool_call_id: Option<&str>,
) -> tokio::task::JoinHandle<Answer> {
    let mut headers = vec![("authorization", format!("Bearer {token}"))];
    if let Some(id) = tool_call_id {
        headers.push(("x-switchboard-tool-call-id", id.to_owned()));
    }
    tokio::spawn(request(
        "POST",
        format!("{}/v1/call", server.url()),
        headers,
        Some(
            json!({"tool": "surface.messages.send", "input": {"sessionId": "#release-room", "text": text}})
                .to_string()
                .into_bytes(),
        ),
    ))
}

/// Waits until `n` asks are pending; their cards.
pub async fn pending_cards(
    server: &TestServer,
    n: usize,
) -> Vec<switchboard_engine::approvals::ApprovalCard> {
    for _ in 0..200 {
        let pending = server.core().approvals().pending();
        if pending.len() >= n {
            return pending;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{n} asks never were pending");
}
