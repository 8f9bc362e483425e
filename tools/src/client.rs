//! One HTTP round trip to the tool server, blocking, plain http, no async runtime.
//!
//! Every answer is read as a body whatever its status; [`Client::get`] and [`Client::post`]
//! turn it into the value or a [`Failure`] in the protocol's shape.

use protocol::ErrorCode;
use std::time::Duration;

use protocol::context::{CONTEXT_ENV_HEADERS, ENV_TOKEN, HEADER_CWD, HEADER_TOOL_CALL_ID};
use protocol::{ErrorBody, ErrorKind};
use serde_json::{json, Value};

use crate::args::UsageError;
use crate::failure::Failure;

/// Answers larger than this are refused rather than buffered.
const MAX_BODY: u64 = 64 * 1024 * 1024;
/// Connecting never waits longer than this, even with a long `--timeout`.
const MAX_CONNECT: Duration = Duration::from_secs(10);

/// Where to send requests and what to send with them.
pub struct Client {
    agent: ureq::Agent,
    /// `http://host:port`, without a trailing slash.
    base: String,
    headers: Vec<(&'static str, String)>,
}

impl Client {
    /// `url` is the server (from `--url`, `SWITCHBOARD_URL` or the default); the token and
    /// context headers come from the environment through `env`.
    pub fn new(
        url: &str,
        timeout: Duration,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Client, UsageError> {
        let base = base_url(url)?;
        let mut headers = Vec::new();
        if let Some(token) = env(ENV_TOKEN).filter(|t| !t.is_empty()) {
            check_header_value(ENV_TOKEN, &token)?;
            headers.push(("authorization", format!("Bearer {token}")));
        }
        for (var, header) in CONTEXT_ENV_HEADERS {
            if let Some(value) = env(var).filter(|v| !v.is_empty()) {
                check_header_value(var, &value)?;
                headers.push((header, value));
            }
        }
        // Without SWITCHBOARD_CWD, files (`--paths`, attachment.download) are relative to
        // where the command runs, as a shell user expects.
        if !headers.iter().any(|(name, _)| *name == HEADER_CWD) {
            let here = std::env::current_dir()
                .ok()
                .and_then(|dir| dir.to_str().map(str::to_owned))
                .filter(|dir| check_header_value("the current directory", dir).is_ok());
            if let Some(here) = here {
                headers.push((HEADER_CWD, here));
            }
        }
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .max_redirects(0)
            .timeout_global(Some(timeout))
            .timeout_connect(Some(timeout.min(MAX_CONNECT)))
            .user_agent(concat!("switchboard-tools/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        Ok(Client {
            agent,
            base,
            headers,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// The `x-switchboard-tool-call-id` this client sends; one is made up (and added) when the
    /// environment gave none, so the server's approval for this call can be found.
    pub fn ensure_tool_call_id(&mut self) -> String {
        if let Some((_, id)) = self
            .headers
            .iter()
            .find(|(name, _)| *name == HEADER_TOOL_CALL_ID)
        {
            return id.clone();
        }
        let id = fresh_call_id();
        self.headers.push((HEADER_TOOL_CALL_ID, id.clone()));
        id
    }

    /// Sends `key` as the `Idempotency-Key` of this client's calls: 1 to 255 visible ASCII
    /// characters, else a usage error.
    pub fn set_idempotency_key(&mut self, key: &str) -> Result<(), UsageError> {
        if key.is_empty() || key.len() > 255 || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(UsageError::new(
                ErrorCode::BadIdempotencyKey,
                "--idempotency-key takes 1 to 255 visible ASCII characters (a UUID is usual)",
            ));
        }
        self.headers
            .retain(|(name, _)| *name != protocol::context::HEADER_IDEMPOTENCY_KEY);
        self.headers
            .push((protocol::context::HEADER_IDEMPOTENCY_KEY, key.to_owned()));
        Ok(())
    }

    /// What a call that did not answer in time fails with.
    pub fn timeout_failure(&self) -> Failure {
        let url = &self.base;
        Failure::new(
            ErrorKind::Timeout,
            ErrorCode::ClientTimeout,
            format!("switchboard at {url} did not answer in time (raise --timeout=SECONDS)"),
            json!({"url": url}),
        )
    }

    /// `GET path`: the body as JSON, unwrapping `{"ok":true,"value":...}` when present.
    pub fn get(&self, path: &str) -> Result<Value, Failure> {
        let mut req = self.agent.get(format!("{}{path}", self.base));
        for (name, value) in &self.headers {
            req = req.header(*name, value.as_str());
        }
        let reply = req.call().map_err(|e| self.transport_failure(e))?;
        let body = self.read(reply)?;
        Ok(match body {
            Value::Object(mut map) if map.get("ok") == Some(&Value::Bool(true)) => {
                map.remove("value").unwrap_or(Value::Object(map))
            }
            other => other,
        })
    }

    /// `POST path` with a JSON body: the `value` of `{"ok":true,"value":...}`.
    pub fn post(&self, path: &str, body: &[u8]) -> Result<Value, Failure> {
        let mut req = self.agent.post(format!("{}{path}", self.base));
        for (name, value) in &self.headers {
            req = req.header(*name, value.as_str());
        }
        let reply = req
            .content_type("application/json")
            .send(body)
            .map_err(|e| self.transport_failure(e))?;
        let status = reply.status().as_u16();
        match self.read(reply)? {
            Value::Object(mut map) if map.get("ok") == Some(&Value::Bool(true)) => {
                match map.remove("value") {
                    Some(value) => Ok(value),
                    None => Err(self.bad_response(status, "an ok answer without a value")),
                }
            }
            _ => Err(self.bad_response(status, "JSON that isn't {\"ok\":true,\"value\":...}")),
        }
    }

    /// Reads the body of any answer: 2xx → its JSON; otherwise the error it carries.
    fn read(&self, mut reply: ureq::http::Response<ureq::Body>) -> Result<Value, Failure> {
        let status = reply.status().as_u16();
        let retry_after = reply
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let bytes = reply
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_vec()
            .map_err(|e| self.transport_failure(e))?;
        let Ok(body) = serde_json::from_slice::<Value>(&bytes) else {
            return Err(self.bad_response(
                status,
                &format!("a body that isn't JSON: {}", snippet(&bytes)),
            ));
        };
        if (200..300).contains(&status) && body.get("ok") != Some(&Value::Bool(false)) {
            return Ok(body);
        }
        match serde_json::from_value::<ErrorBody>(body) {
            Ok(err) => {
                let mut failure = Failure::from_info(err.error);
                failure.retry_after = retry_after;
                Err(failure)
            }
            Err(_) => Err(self.bad_response(status, "JSON that isn't a switchboard error body")),
        }
    }

    fn bad_response(&self, status: u16, what: &str) -> Failure {
        Failure::new(
            ErrorKind::Internal,
            ErrorCode::BadResponse,
            format!(
                "switchboard at {} answered HTTP {status} with {what} — is {} a switchboard tool server?",
                self.base, self.base
            ),
            json!({"status": status}),
        )
    }

    /// A request that got no HTTP answer.
    fn transport_failure(&self, e: ureq::Error) -> Failure {
        use std::io::ErrorKind as Io;
        use ureq::Timeout;
        let url = &self.base;
        let unreachable = |why: String| {
            Failure::new(
                ErrorKind::Unavailable,
                ErrorCode::Unreachable,
                format!(
                    "cannot reach switchboard at {url} — is switchboard running at {url}? \
                     (set SWITCHBOARD_URL)"
                ),
                json!({"url": url, "reason": why}),
            )
        };
        match e {
            ureq::Error::ConnectionFailed => unreachable("connection failed".into()),
            ureq::Error::HostNotFound => unreachable("host not found".into()),
            ureq::Error::Timeout(Timeout::Connect | Timeout::Resolve) => {
                unreachable("connect timed out".into())
            }
            ureq::Error::Io(io)
                if matches!(
                    io.kind(),
                    Io::ConnectionRefused
                        | Io::AddrNotAvailable
                        | Io::NotFound
                        | Io::PermissionDenied
                        | Io::HostUnreachable
                        | Io::NetworkUnreachable
                ) =>
            {
                unreachable(io.to_string())
            }
            ureq::Error::Timeout(_) => self.timeout_failure(),
            ureq::Error::BodyExceedsLimit(limit) => Failure::new(
                ErrorKind::Internal,
                ErrorCode::BadResponse,
                format!("switchboard at {url} sent an answer larger than {limit} bytes"),
                json!({"url": url}),
            ),
            other => Failure::new(
                ErrorKind::Unavailable,
                ErrorCode::ConnectionLost,
                format!("the exchange with switchboard at {url} failed: {other}"),
                json!({"url": url}),
            ),
        }
    }
}

/// Checks and normalizes the server URL: `http://host[:port][/prefix]`, no trailing slash.
pub fn base_url(url: &str) -> Result<String, UsageError> {
    let url = url.trim();
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("https://") {
        return Err(UsageError::new(
            ErrorCode::BadUrl,
            format!(
                "{url}: the tools CLI has no TLS built in; use a plain http:// loopback URL \
                 (front a remote server with a local tunnel or proxy)"
            ),
        ));
    }
    let Some(rest) = lower.strip_prefix("http://") else {
        return Err(UsageError::new(
            ErrorCode::BadUrl,
            format!("'{url}' is not a server URL: write it like http://127.0.0.1:7311"),
        ));
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let bad_char = url.chars().any(|c| c.is_whitespace() || c.is_control());
    if host.is_empty() || bad_char || rest.contains(['?', '#']) {
        return Err(UsageError::new(
            ErrorCode::BadUrl,
            format!("'{url}' is not a server URL: write it like http://127.0.0.1:7311"),
        ));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// Header values may not hold control characters; say which variable is wrong.
fn check_header_value(var: &str, value: &str) -> Result<(), UsageError> {
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(UsageError::new(
            ErrorCode::BadEnvironment,
            format!(
                "{var} holds a control character (a newline?), which can't go in an HTTP header"
            ),
        ));
    }
    Ok(())
}

/// A callable id as one path segment: unreserved characters stay, the rest is %-encoded.
pub fn path_segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The start of a body, for error messages.
fn snippet(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.is_empty() {
        return "(empty)".to_owned();
    }
    match text.char_indices().nth(120) {
        Some((i, _)) => format!("{:?}…", &text[..i]),
        None => format!("{text:?}"),
    }
}

/// A tool-call id for a call made from a shell: `cli-` and 16 hex digits from the standard
/// library's per-process random hash keys, the clock and the process id (unguessable enough to
/// keep another caller from reading this call's approval; it is not a secret).
fn fresh_call_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.write_u32(std::process::id());
    format!("cli-{:016x}", hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_url_accepts_plain_http_and_drops_the_trailing_slash() {
        assert_eq!(
            base_url("http://127.0.0.1:7311/"),
            Ok("http://127.0.0.1:7311".into())
        );
        assert_eq!(
            base_url("HTTP://localhost:1/prefix"),
            Ok("HTTP://localhost:1/prefix".into())
        );
    }

    #[test]
    fn base_url_refuses_https_with_a_tls_hint() {
        let e = base_url("https://example.com").map(|_| ()).unwrap_err();
        assert_eq!(e.code, "bad_url");
        assert!(e.message.contains("TLS"), "{}", e.message);
    }

    #[test]
    fn base_url_refuses_garbage() {
        for url in [
            "",
            "127.0.0.1:7311",
            "http://",
            "ftp://x",
            "http://a b",
            "http://h/?q=1",
        ] {
            assert!(base_url(url).is_err(), "{url}");
        }
    }

    #[test]
    fn path_segment_encodes_everything_but_unreserved() {
        assert_eq!(
            path_segment("surface.messages.send"),
            "surface.messages.send"
        );
        assert_eq!(path_segment("a/b c?#é"), "a%2Fb%20c%3F%23%C3%A9");
    }

    #[test]
    fn header_values_with_newlines_are_refused() {
        assert!(check_header_value("SWITCHBOARD_CWD", "/a\nb").is_err());
        assert!(check_header_value("SWITCHBOARD_CWD", "/a b").is_ok());
    }
}
