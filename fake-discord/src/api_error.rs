//! Discord's JSON error answers (`{"code":50035,"message":"Invalid Form Body","errors":{...}}`)
//! and the HTTP statuses that go with them.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

/// An error answer in Discord's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: u32,
    pub message: String,
    /// The nested `errors` object of a 50035 answer.
    pub errors: Option<Value>,
    /// Seconds to wait, for 429 answers.
    pub retry_after: Option<f64>,
}

impl ApiError {
    fn new(status: StatusCode, code: u32, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            errors: None,
            retry_after: None,
        }
    }

    pub fn unknown_channel() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 10003, "Unknown Channel")
    }
    pub fn unknown_guild() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 10004, "Unknown Guild")
    }
    pub fn unknown_message() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 10008, "Unknown Message")
    }
    pub fn unknown_user() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 10013, "Unknown User")
    }
    pub fn unknown_emoji() -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, 10014, "Unknown Emoji")
    }
    pub fn unknown_webhook() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 10015, "Unknown Webhook")
    }
    pub fn unknown_interaction() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 10062, "Unknown interaction")
    }
    pub fn unknown_application() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 10002, "Unknown Application")
    }
    pub fn missing_access() -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, 50001, "Missing Access")
    }
    pub fn missing_permissions() -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, 50013, "Missing Permissions")
    }
    pub fn cannot_edit_others_message() -> ApiError {
        ApiError::new(
            StatusCode::FORBIDDEN,
            50005,
            "Cannot edit a message authored by another user",
        )
    }
    pub fn cannot_send_empty_message() -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            50006,
            "Cannot send an empty message",
        )
    }
    pub fn cannot_act_on_dm() -> ApiError {
        ApiError::new(
            StatusCode::FORBIDDEN,
            50003,
            "Cannot execute action on a DM channel",
        )
    }
    pub fn cannot_send_in_non_text() -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            50008,
            "Cannot send messages in a non-text channel",
        )
    }
    pub fn thread_archived() -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, 50083, "Thread is archived")
    }
    pub fn max_reactions() -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            30010,
            "Maximum number of reactions reached (20)",
        )
    }
    pub fn already_acknowledged() -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            40060,
            "Interaction has already been acknowledged.",
        )
    }
    pub fn invalid_json() -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            50109,
            "The request body contains invalid JSON.",
        )
    }
    /// 413 40005: a file (or the whole request) is over the upload limit.
    pub fn entity_too_large() -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            40005,
            "Request entity too large",
        )
    }
    pub fn unauthorized() -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, 0, "401: Unauthorized")
    }
    pub fn not_found() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 0, "404: Not Found")
    }
    pub fn method_not_allowed() -> ApiError {
        ApiError::new(StatusCode::METHOD_NOT_ALLOWED, 0, "405: Method Not Allowed")
    }
    pub fn internal() -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            0,
            "500: Internal Server Error",
        )
    }
    pub fn rate_limited(retry_after: f64) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            0,
            "You are being rate limited.",
        );
        e.retry_after = Some(retry_after);
        e
    }
    /// A plain error with an arbitrary status (used for injected faults).
    pub fn with_status(status: StatusCode) -> ApiError {
        let reason = status.canonical_reason().unwrap_or("Error");
        ApiError::new(status, 0, format!("{}: {reason}", status.as_u16()))
    }
    /// 50035 Invalid Form Body with the given field errors.
    pub fn invalid_form(errors: FormErrors) -> ApiError {
        let mut e = ApiError::new(StatusCode::BAD_REQUEST, 50035, "Invalid Form Body");
        e.errors = Some(errors.into_value());
        e
    }

    /// The JSON body Discord would send.
    pub fn body(&self) -> Value {
        let mut body = json!({ "message": self.message, "code": self.code });
        if let Some(errors) = &self.errors {
            body["errors"] = errors.clone();
        }
        if let Some(retry_after) = self.retry_after {
            body["retry_after"] = json!(retry_after);
            body["global"] = json!(false);
        }
        body
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(self.body())).into_response();
        if let Some(retry_after) = self.retry_after {
            let headers = response.headers_mut();
            let secs = retry_after.ceil().max(0.0) as u64;
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                headers.insert("retry-after", v);
            }
            if let Ok(v) = HeaderValue::from_str(&format!("{retry_after:.3}")) {
                headers.insert("x-ratelimit-reset-after", v);
            }
            headers.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
            headers.insert("x-ratelimit-scope", HeaderValue::from_static("user"));
        }
        response
    }
}

/// Field errors of a 50035 answer, keyed by JSON path (`["allowed_mentions","parse","0"]`).
#[derive(Clone, Debug, Default)]
pub struct FormErrors {
    entries: Vec<(Vec<String>, &'static str, String)>,
}

impl FormErrors {
    pub fn new() -> FormErrors {
        FormErrors::default()
    }

    /// Records an error at `path` with Discord's error `code` and a human message.
    pub fn add(&mut self, path: &[&str], code: &'static str, message: impl Into<String>) {
        self.entries.push((
            path.iter().map(std::string::ToString::to_string).collect(),
            code,
            message.into(),
        ));
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Ok if nothing was recorded, else a 50035 answer.
    pub fn into_result(self) -> Result<(), ApiError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid_form(self))
        }
    }

    fn into_value(self) -> Value {
        let mut root = Map::new();
        for (path, code, message) in self.entries {
            insert_error(
                &mut root,
                &path,
                json!({ "code": code, "message": message }),
            );
        }
        Value::Object(root)
    }
}

fn insert_error(node: &mut Map<String, Value>, path: &[String], error: Value) {
    match path.split_first() {
        None => {
            let list = node
                .entry("_errors".to_string())
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(items) = list {
                items.push(error);
            }
        }
        Some((head, rest)) => {
            let child = node
                .entry(head.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(map) = child {
                insert_error(map, rest, error);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_errors_nest_by_path() {
        let mut errors = FormErrors::new();
        errors.add(
            &["content"],
            "BASE_TYPE_MAX_LENGTH",
            "Must be 2000 or fewer in length.",
        );
        errors.add(
            &["allowed_mentions", "parse", "0"],
            "BASE_TYPE_CHOICES",
            "bad",
        );
        let body = ApiError::invalid_form(errors).body();
        assert_eq!(body["code"], 50035);
        assert_eq!(
            body["errors"]["content"]["_errors"][0]["code"],
            "BASE_TYPE_MAX_LENGTH"
        );
        assert_eq!(
            body["errors"]["allowed_mentions"]["parse"]["0"]["_errors"][0]["message"],
            "bad"
        );
    }
}
