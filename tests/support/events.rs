//! A reader of the live feed (`GET /v1/events`, server-sent events) for end-to-end tests.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

pub type Received = Option<(String, Value)>;

/// An SSE reader on its own thread: each event as `(type, data)`, `None` when it ends.
pub fn subscribe(url: &str, token: &str, query: &str) -> mpsc::Receiver<Received> {
    let (tx, rx) = mpsc::channel();
    let url = format!("{url}/v1/events{query}");
    let token = token.to_owned();
    std::thread::spawn(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        let Ok(response) = agent
            .get(&url)
            .header("authorization", format!("Bearer {token}"))
            .call()
        else {
            let _ = tx.send(None);
            return;
        };
        let reader = BufReader::new(response.into_body().into_reader());
        let (mut kind, mut data) = (String::new(), String::new());
        for line in reader.lines() {
            let Ok(line) = line else { break };
            if line.is_empty() {
                if !kind.is_empty() {
                    let value = serde_json::from_str(&data).unwrap_or(Value::Null);
                    if tx.send(Some((std::mem::take(&mut kind), value))).is_err() {
                        return;
                    }
                }
            } else if let Some(rest) = line.strip_prefix("event:") {
                kind = rest.trim().to_owned();
            } else if let Some(rest) = line.strip_prefix("data:") {
                data = rest.trim().to_owned();
            }
        }
        let _ = tx.send(None);
    });
    rx
}

/// The next event of `kind` on `events` (others are skipped), within `timeout`; panics naming
/// what came instead.
pub fn next_event(events: &mpsc::Receiver<Received>, kind: &str, timeout: Duration) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(Some((k, data))) if k == kind => return data,
            Ok(Some(_)) => {}
            other => panic!("no {kind} event: {other:?}"),
        }
    }
}
