//! How a [`ToolError`] becomes an HTTP answer: its status, the JSON error body, and
//! `Retry-After` when it says when to come back. The engine's error knows its status but not
//! axum; every handler of the fronts answers through this.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use protocol::ErrorKind;

use switchboard_engine::ToolError;

/// A [`ToolError`] as an HTTP answer (`?` converts one).
#[derive(Debug)]
pub struct ApiError(pub ToolError);

impl From<ToolError> for ApiError {
    fn from(error: ToolError) -> Self {
        ApiError(error)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let ApiError(error) = self;
        let status = error.status();
        if error.kind == ErrorKind::Internal {
            tracing::error!(code = %error.code, message = %error.message, "internal error");
        }
        let mut response = (status, axum::Json(error.body())).into_response();
        if let Some(wait) = error.retry_after {
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            if let Ok(value) = HeaderValue::from_str(&seconds.max(1).to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
        }
        response
    }
}

/// `error` as an HTTP answer.
pub fn error_response(error: ToolError) -> Response {
    ApiError(error).into_response()
}
