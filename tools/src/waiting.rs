//! A call that may wait for a person: when the server asks an approver before running it, the
//! call's answer can take minutes. The call runs on its own thread while this one looks, once a
//! second, whether an approval waits on it (`GET /v1/approvals?toolCallId=…`), says where on
//! stderr, and lets the wait run until the approval expires instead of the `--timeout`.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::client::Client;
use crate::failure::Failure;

/// How long the call runs before the first look for an approval (most calls are done by then).
const FIRST_LOOK: Duration = Duration::from_millis(700);
/// How often to look again.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// How long one look may take.
const LOOK_TIMEOUT: Duration = Duration::from_secs(5);
/// After an approval expires, the server still answers (denied); wait this much longer for it.
const AFTER_EXPIRY: Duration = Duration::from_secs(15);

/// An approval a call waits on, as `GET /v1/approvals` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    pub id: String,
    pub where_: String,
    pub expires_at_ms: Option<u64>,
}

impl Waiting {
    /// Reads the first approval out of `{"approvals":[...]}`.
    pub fn from_answer(answer: &Value) -> Option<Waiting> {
        let card = answer.get("approvals")?.as_array()?.first()?;
        Some(Waiting {
            id: card.get("id")?.as_str()?.to_owned(),
            where_: card
                .get("sessionLabel")
                .and_then(Value::as_str)
                .unwrap_or("Discord")
                .to_owned(),
            expires_at_ms: card.get("expiresAtMs").and_then(Value::as_u64),
        })
    }

    /// The line printed on stderr.
    pub fn line(&self, now_ms: u64) -> String {
        let left = self
            .expires_at_ms
            .map(|at| {
                format!(
                    "; denied in {} s if nobody decides",
                    at.saturating_sub(now_ms) / 1000
                )
            })
            .unwrap_or_default();
        format!(
            "waiting for approval in {} (id {}): an approver clicks Approve or Deny there{left}",
            self.where_, self.id
        )
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Posts `body` to `/v1/call` with `call` (whose own timeout must cover the longest approval),
/// looking for an approval with `look` (a client with a short timeout). The call fails with a
/// timeout after `timeout`, unless an approval is pending: then it waits until that approval
/// expires. `say` gets the waiting line (stderr in the binary).
pub fn post_call(
    call: Client,
    look: &Client,
    body: Vec<u8>,
    tool_call_id: &str,
    timeout: Duration,
    say: &mut dyn FnMut(&str),
) -> Result<Value, Failure> {
    let (done, answer) = mpsc::channel();
    let timeout_failure = call.timeout_failure();
    std::thread::spawn(move || {
        let _ = done.send(call.post("/v1/call", &body));
    });
    let started = Instant::now();
    let mut deadline = started + timeout;
    let mut next_look = started + FIRST_LOOK;
    let mut seen: Option<String> = None;
    let path = format!(
        "/v1/approvals?toolCallId={}",
        crate::client::path_segment(tool_call_id)
    );
    loop {
        let now = Instant::now();
        let wake = deadline.min(next_look).max(now);
        match answer.recv_timeout(wake - now) {
            Ok(result) => return result,
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err(timeout_failure),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(timeout_failure);
        }
        if now >= next_look {
            next_look = now + LOOK_EVERY;
            // A failed look (an older server without /v1/approvals) changes nothing.
            if let Some(waiting) = look.get(&path).ok().as_ref().and_then(Waiting::from_answer) {
                if seen.as_deref() != Some(waiting.id.as_str()) {
                    say(&waiting.line(now_ms()));
                    seen = Some(waiting.id.clone());
                }
                if let Some(expires) = waiting.expires_at_ms {
                    let left = Duration::from_millis(expires.saturating_sub(now_ms()));
                    deadline = deadline.max(now + left + AFTER_EXPIRY);
                }
            }
        }
    }
}

/// The timeout a look may take.
pub fn look_timeout() -> Duration {
    LOOK_TIMEOUT
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_waiting_line_names_the_place_and_the_id() {
        let answer = json!({"approvals": [{"id": "apr_1", "sessionLabel": "#release-room", "expiresAtMs": 61_000}]});
        let waiting = Waiting::from_answer(&answer).unwrap();
        assert_eq!(
            waiting.line(1_000),
            "waiting for approval in #release-room (id apr_1): an approver clicks Approve or Deny there; denied in 60 s if nobody decides"
        );
        assert_eq!(Waiting::from_answer(&json!({"approvals": []})), None);
        assert_eq!(Waiting::from_answer(&json!("garbage")), None);
        assert_eq!(
            Waiting::from_answer(&json!({"approvals": [{"no": "id"}]})),
            None
        );
    }
}
