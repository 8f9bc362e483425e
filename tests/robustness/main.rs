//! The robustness suite: the real `switchboard` binary against the fake Discord, tried the way
//! an attacker or an unlucky community would — messages that used to crash the splitter,
//! floods, half-open connections, garbage on every input path, a soak that watches memory.
//! Every wait is bounded; the whole suite stays within a couple of minutes.

#[path = "../support/mod.rs"]
mod support;

mod allowlist;
mod browsers;
mod connections;
mod flood;
mod garbage;
mod soak;
mod splitter;

use std::time::Duration;

use serde_json::{json, Value};

/// A keep-alive HTTP client for the tool server (the `tools` CLI starts a process per call;
/// floods and soaks need thousands of calls).
pub struct Client {
    agent: ureq::Agent,
    url: String,
    token: String,
}

/// One answer: the HTTP status, the `Retry-After` header, and the JSON body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<String>,
    pub body: Value,
}

impl Client {
    pub fn new(url: &str, token: &str) -> Client {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into();
        Client {
            agent,
            url: url.to_owned(),
            token: token.to_owned(),
        }
    }

    /// `POST /v1/call` with `{"tool", "input"}`.
    pub fn call(&self, tool: &str, input: Value) -> Answer {
        let body = json!({ "tool": tool, "input": input }).to_string();
        self.post("/v1/call", body.into_bytes())
    }

    pub fn post(&self, path: &str, body: Vec<u8>) -> Answer {
        let request = ureq::http::Request::builder()
            .method("POST")
            .uri(format!("{}{path}", self.url))
            .header("authorization", format!("Bearer {}", self.token))
            .header("content-type", "application/json")
            .body(body)
            .expect("a request");
        let mut response = self.agent.run(request).expect("the tool server answers");
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = response
            .body_mut()
            .read_to_string()
            .expect("the answer is text");
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Answer {
            status,
            retry_after,
            body,
        }
    }
}

/// The resident set of a process, in KiB (Linux `/proc`).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// `[toolserver]` lines that take switchboard's own per-caller quota out of the way (the
/// per-channel quota stays, it is what a flood must meet).
pub const GENEROUS_CALLER_QUOTA: &str =
    "[toolserver.rate_limits]\nper_caller_per_minute = 1000000\nper_caller_burst = 100000\n";
