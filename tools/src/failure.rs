//! A failed invocation in the protocol's error shape, and its two stderr lines.

use protocol::ErrorCode;
use protocol::{ErrorBody, ErrorInfo, ErrorKind};
use serde_json::{json, Value};

use crate::args::UsageError;

/// Any failure: from the server, from the transport, or from the command line.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// Boxed: failures travel through every `Result` here and are rare.
    pub info: Box<ErrorInfo>,
    /// The `Retry-After` header, when the server sent one.
    pub retry_after: Option<String>,
    /// Set when the failure means "no callable with this id", for the nicer human line.
    pub unknown_tool: Option<String>,
}

impl Failure {
    pub fn new(
        kind: ErrorKind,
        code: ErrorCode,
        message: impl Into<String>,
        details: Value,
    ) -> Self {
        Failure {
            info: Box::new(ErrorInfo {
                kind,
                code,
                message: message.into(),
                retryable: matches!(kind, ErrorKind::Unavailable | ErrorKind::Timeout),
                details,
            }),
            retry_after: None,
            unknown_tool: None,
        }
    }

    pub fn from_info(info: ErrorInfo) -> Self {
        Failure {
            info: Box::new(info),
            retry_after: None,
            unknown_tool: None,
        }
    }

    pub fn exit_code(&self) -> u8 {
        self.info.kind.exit_code()
    }

    /// The error JSON, `{"ok":false,"error":{...}}`, on one line.
    pub fn json_line(&self) -> String {
        let body = ErrorBody {
            ok: false,
            error: (*self.info).clone(),
        };
        serde_json::to_string(&body).unwrap_or_else(|_| {
            // Serializing plain strings and JSON values can't fail; keep a valid line anyway.
            json!({"ok": false, "error": {"kind": self.info.kind.as_str()}}).to_string()
        })
    }

    /// One line for a human: `error (kind): message`, plus a retry hint when there is one.
    pub fn human_line(&self) -> String {
        let kind = self.info.kind.as_str();
        let details = &self.info.details;
        let mut line = match &self.unknown_tool {
            Some(id) => {
                let mut line = format!("error ({kind}): unknown callable '{id}'");
                match details.get("suggestion").and_then(Value::as_str) {
                    Some(s) => line.push_str(&format!("; did you mean '{s}'?")),
                    None => line.push_str("; run 'tools --list' to see what you may call"),
                }
                line
            }
            None => format!("error ({kind}): {}", one_line(&self.info.message)),
        };
        let already_said = line.to_ascii_lowercase().contains("retry after");
        if let Some(hint) = self.retry_hint().filter(|_| !already_said) {
            line.push_str(&format!(" (retry after {hint})"));
        }
        line
    }

    /// `details.retryAfterMs` (preferred, exact) or the `Retry-After` header, for humans.
    fn retry_hint(&self) -> Option<String> {
        let ms = self
            .info
            .details
            .get("retryAfterMs")
            .and_then(Value::as_f64);
        if let Some(ms) = ms.filter(|ms| ms.is_finite() && *ms >= 0.0) {
            return Some(format!("{} s", seconds(ms / 1000.0)));
        }
        let header = self.retry_after.as_deref()?.trim();
        match header.parse::<f64>() {
            Ok(s) if s.is_finite() && s >= 0.0 => Some(format!("{} s", seconds(s))),
            _ if header.is_empty() => None,
            _ => Some(header.to_owned()),
        }
    }
}

impl From<UsageError> for Failure {
    fn from(e: UsageError) -> Self {
        Failure::new(ErrorKind::Usage, e.code, e.message, json!({}))
    }
}

/// `0.5`, `2`, `1.25`: at most three decimals, no trailing zeros.
fn seconds(s: f64) -> String {
    let text = format!("{s:.3}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Messages are one line on the human line; newlines become spaces.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_line_has_kind_and_message() {
        let f = Failure::new(
            ErrorKind::NotFound,
            ErrorCode::UnknownSession,
            "Unknown session 'opps'. Did you mean 'ops'?",
            json!({"suggestion": "ops"}),
        );
        assert_eq!(
            f.human_line(),
            "error (not_found): Unknown session 'opps'. Did you mean 'ops'?"
        );
        assert_eq!(f.exit_code(), 4);
    }

    #[test]
    fn unknown_callable_line_suggests_the_nearest_name() {
        let mut f = Failure::new(
            ErrorKind::NotFound,
            ErrorCode::UnknownTool,
            "no such tool",
            json!({"suggestion": "surface.messages.send", "known": []}),
        );
        f.unknown_tool = Some("surface.mesages.send".into());
        assert_eq!(
            f.human_line(),
            "error (not_found): unknown callable 'surface.mesages.send'; did you mean 'surface.messages.send'?"
        );
    }

    #[test]
    fn retry_after_is_shown_from_details_or_header() {
        let f = Failure::new(
            ErrorKind::Unavailable,
            ErrorCode::RateLimited,
            "slow down",
            json!({"retryAfterMs": 500}),
        );
        assert_eq!(
            f.human_line(),
            "error (unavailable): slow down (retry after 0.5 s)"
        );
        let mut f = Failure::new(
            ErrorKind::Unavailable,
            ErrorCode::RateLimited,
            "slow down",
            json!({}),
        );
        f.retry_after = Some("2".into());
        assert!(f.human_line().ends_with("(retry after 2 s)"));
        let f = Failure::new(
            ErrorKind::Unavailable,
            ErrorCode::RateLimited,
            "Too many calls; retry after 30 ms",
            json!({"retryAfterMs": 30}),
        );
        assert_eq!(
            f.human_line(),
            "error (unavailable): Too many calls; retry after 30 ms"
        );
    }

    #[test]
    fn json_line_is_the_error_body_on_one_line() {
        let f = Failure::new(
            ErrorKind::Usage,
            ErrorCode::BadFlag,
            "two\nlines",
            json!({}),
        );
        let line = f.json_line();
        assert!(!line.contains('\n'));
        let body: ErrorBody = serde_json::from_str(&line).expect("error body");
        assert_eq!(body.error.code, "bad_flag");
        assert_eq!(f.human_line(), "error (usage): two lines");
    }
}
