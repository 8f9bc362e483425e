//! Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}` with the HTTP
//! status the official client maps to its exception classes (400 `BadRequestError`, 401
//! `AuthenticationError`, 403 `PermissionDeniedError`, 404 `NotFoundError`, 429
//! `RateLimitError`, 5xx `InternalServerError`).

use serde::{Deserialize, Serialize};

/// The `error` object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// What went wrong and what to do, for a person.
    pub message: String,
    /// The broad kind: `invalid_request_error`, `authentication_error`, `permission_error`,
    /// `not_found_error`, `insufficient_quota`, `rate_limit_error`, `server_error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The request field at fault (`messages[2].content`), or `null`.
    pub param: Option<String>,
    /// A machine-readable code (switchboard's error codes), or `null`.
    pub code: Option<String>,
}

/// The body of an error answer (and of an error event in a stream).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorObject,
}

/// An error answer: its status, body, and whether the client may retry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// The body.
    pub body: ErrorBody,
    /// Whether retrying can help and is safe. The official clients retry 408, 409, 429 and
    /// 5xx answers unless told `x-should-retry: false`; a chat completion runs an agent whose
    /// tools act, so every answer after a run started says false ([`ApiError::headers`]).
    pub retry: bool,
}

impl ApiError {
    /// An error with this status, kind, code, parameter and message.
    pub fn new(
        status: u16,
        kind: &str,
        code: Option<&str>,
        param: Option<String>,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            body: ErrorBody {
                error: ErrorObject {
                    message: message.into(),
                    kind: kind.to_owned(),
                    param,
                    code: code.map(str::to_owned),
                },
            },
            retry: false,
        }
    }

    /// 400: the request is wrong.
    pub fn invalid_request(
        code: &str,
        param: Option<String>,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError::new(400, "invalid_request_error", Some(code), param, message)
    }

    /// 401: no token, or a token this server does not know.
    pub fn authentication(code: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(401, "authentication_error", Some(code), None, message)
    }

    /// 403: the token may not use this agent, or the run may not do this.
    pub fn permission(code: &str, message: impl Into<String>) -> ApiError {
        ApiError::new(403, "permission_error", Some(code), None, message)
    }

    /// 404: no such model (agent).
    pub fn model_not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(
            404,
            "invalid_request_error",
            Some("model_not_found"),
            Some("model".to_owned()),
            message,
        )
    }

    /// 429 for a budget: not retried (it would be refused until the cap resets).
    pub fn budget(message: impl Into<String>) -> ApiError {
        ApiError::new(
            429,
            "insufficient_quota",
            Some("budget_exceeded"),
            None,
            message,
        )
    }

    /// 429 for a rate limit, before any run started: retrying later helps.
    pub fn rate_limited(code: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            retry: true,
            ..ApiError::new(429, "rate_limit_error", Some(code), None, message)
        }
    }

    /// 503 before any run started (the service is busy): retrying later helps.
    pub fn unavailable(code: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            retry: true,
            ..ApiError::new(503, "server_error", Some(code), None, message)
        }
    }

    /// Any other failure, with the status the tool server's error carries (its
    /// `ToolError::status()`), and its code; the kind follows the status. Not retried: the
    /// run may have acted.
    pub fn from_status(status: u16, code: &str, message: impl Into<String>) -> ApiError {
        let kind = match status {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            400..=499 => "invalid_request_error",
            _ => "server_error",
        };
        let status = if (400..=599).contains(&status) {
            status
        } else {
            500
        };
        ApiError::new(status, kind, Some(code), None, message)
    }

    /// The headers to send beside the body: `x-should-retry`, so the official clients do
    /// not run an agent again on their own.
    pub fn headers(&self) -> [(&'static str, &'static str); 1] {
        [("x-should-retry", if self.retry { "true" } else { "false" })]
    }

    /// The body as JSON text.
    pub fn body_json(&self) -> String {
        serde_json::to_string(&self.body).unwrap_or_else(|_| {
            "{\"error\":{\"message\":\"internal error\",\"type\":\"server_error\",\"param\":null,\"code\":null}}".to_owned()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_have_openais_shape_with_null_param_and_code() {
        let error = ApiError::new(500, "server_error", None, None, "boom");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&error.body_json()).unwrap(),
            serde_json::json!({"error": {"message": "boom", "type": "server_error", "param": null, "code": null}})
        );
    }

    #[test]
    fn only_errors_before_a_run_may_be_retried() {
        assert_eq!(
            ApiError::budget("spent").headers(),
            [("x-should-retry", "false")]
        );
        assert_eq!(ApiError::budget("spent").status, 429);
        assert_eq!(
            ApiError::from_status(504, "timeout", "slow").headers(),
            [("x-should-retry", "false")]
        );
        assert!(ApiError::unavailable("unavailable", "busy").retry);
        assert!(ApiError::rate_limited("rate_limited", "slow down").retry);
    }

    #[test]
    fn a_tool_server_status_picks_the_kind_and_nonsense_becomes_500() {
        assert_eq!(
            ApiError::from_status(403, "out_of_scope", "no")
                .body
                .error
                .kind,
            "permission_error"
        );
        assert_eq!(
            ApiError::from_status(409, "conflict", "no").body.error.kind,
            "invalid_request_error"
        );
        assert_eq!(ApiError::from_status(499, "cancelled", "no").status, 499);
        assert_eq!(ApiError::from_status(200, "weird", "no").status, 500);
    }
}
