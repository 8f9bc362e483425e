//! The one error type every callable and policy returns, with the HTTP status it answers with
//! (the fronts write the answer).

use std::time::Duration;

use http::StatusCode;
use serde_json::{json, Value};

use protocol::{ErrorBody, ErrorCode, ErrorInfo, ErrorKind};

/// A typed failure: its kind picks the HTTP status and the CLI exit code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{kind:?} ({code}): {message}")]
pub struct ToolError {
    /// Which kind of failure: picks the default HTTP status and whether retrying can help.
    pub kind: ErrorKind,
    /// A stable, machine-readable name such as `unknown_session`.
    pub code: ErrorCode,
    /// One sentence saying what went wrong and what to do.
    pub message: String,
    /// Structured facts for the caller (the field, the suggestion, ...); `Null` when there are
    /// none. `retryAfterMs` is added from `retry_after` when the body is written.
    pub details: Value,
    /// Set for `unavailable` answers that say when to come back.
    pub retry_after: Option<Duration>,
    /// Overrides the kind's default status (401 vs 403, 413, 429 vs 503).
    pub status: Option<StatusCode>,
}

impl ToolError {
    /// An error of `kind` with no details, no `Retry-After` and the kind's default status.
    pub fn new(kind: ErrorKind, code: ErrorCode, message: impl Into<String>) -> Self {
        ToolError {
            kind,
            code,
            message: message.into(),
            details: Value::Null,
            retry_after: None,
            status: None,
        }
    }

    /// The request is wrong and must be fixed before retrying: HTTP 400.
    pub fn usage(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Usage, code, message)
    }

    /// The caller may not do this: HTTP 403.
    pub fn denied(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Denied, code, message)
    }

    /// No credentials, or credentials nobody issued: HTTP 401.
    pub fn unauthenticated(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Denied, code, message).with_status(StatusCode::UNAUTHORIZED)
    }

    /// Nothing by that name (channel, message, workflow, ...): HTTP 404.
    pub fn not_found(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, code, message)
    }

    /// The store could not read or keep what the call needs (code `store_unavailable`): a
    /// retryable HTTP 503.
    pub fn store_unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, ErrorCode::StoreUnavailable, message)
    }

    /// A fault of the server, not of the request (code `internal`): HTTP 500, logged when it
    /// becomes an HTTP answer.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, ErrorCode::Internal, message)
    }

    /// Over a rate limit: HTTP 429 with `Retry-After` and `details.retryAfterMs`.
    pub fn rate_limited(
        code: ErrorCode,
        message: impl Into<String>,
        retry_after: Duration,
    ) -> Self {
        let mut error = Self::new(ErrorKind::Unavailable, code, message)
            .with_status(StatusCode::TOO_MANY_REQUESTS);
        error.retry_after = Some(retry_after);
        error
    }

    /// The same error with `details` replacing its structured facts.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    /// The same error answered with `status` instead of its kind's default.
    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = Some(status);
        self
    }

    /// The same error saying when to come back (`Retry-After` and `details.retryAfterMs`),
    /// without changing its status.
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self
    }

    /// Whether retrying can help: true only for `unavailable` and `timeout` errors.
    pub fn retryable(&self) -> bool {
        self.kind.retryable()
    }

    /// The HTTP status it is answered with: the override if set, else its kind's (400, 403,
    /// 404, 409, 503, 504, 499 for `cancelled`, 500).
    pub fn status(&self) -> StatusCode {
        self.status.unwrap_or(match self.kind {
            ErrorKind::Usage => StatusCode::BAD_REQUEST,
            ErrorKind::Denied => StatusCode::FORBIDDEN,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::Conflict => StatusCode::CONFLICT,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorKind::Cancelled => {
                StatusCode::from_u16(499).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }
            ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        })
    }

    /// The JSON body, with `details.retryAfterMs` filled from `retry_after`.
    pub fn body(&self) -> ErrorBody {
        let mut details = self.details.clone();
        if let Some(wait) = self.retry_after {
            let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
            match &mut details {
                Value::Object(map) => {
                    map.insert("retryAfterMs".into(), json!(ms));
                }
                _ => details = json!({ "retryAfterMs": ms }),
            }
        }
        ErrorBody {
            ok: false,
            error: ErrorInfo {
                kind: self.kind,
                code: self.code.clone(),
                message: self.message.clone(),
                retryable: self.retryable(),
                details,
            },
        }
    }
}
