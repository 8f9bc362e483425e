//! Discord's JSON error answers (`{"code":50035,"message":"Invalid Form Body","errors":{...}}`)
//! and the HTTP statuses that go with them.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

/// An error answer in Discord's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// The HTTP status of the answer.
    pub status: StatusCode,
    /// Discord's JSON error code (10003, 50035...); 0 for the plain HTTP errors (401, 404 for an
    /// unknown route, 405, 429, injected faults).
    pub code: u32,
    /// The `message` text, worded as Discord words it.
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

    /// 404 10003 Unknown Channel: no channel, thread or DM has this id.
    pub fn unknown_channel() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 10003, "Unknown Channel")
    }
    /// 404 10004 Unknown Guild: the guild in a guild-commands route is not in the world.
    pub fn unknown_guild() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 10004, "Unknown Guild")
    }
    /// 404 10008 Unknown Message: the channel holds no message with this id (never sent, deleted,
    /// or beyond [`SizeLimits::messages_per_channel`](crate::SizeLimits::messages_per_channel)), or an
    /// interaction webhook names a message that is not its own, or `@original` before there is one.
    pub fn unknown_message() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 10008, "Unknown Message")
    }
    /// 404 10013 Unknown User: the user is not in the world (or, opening a DM, is the bot itself).
    pub fn unknown_user() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 10013, "Unknown User")
    }
    /// 400 10014 Unknown Emoji: a reaction's emoji is neither a Unicode emoji nor `name:id`; plain
    /// words like `thumbsup` included.
    pub fn unknown_emoji() -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, 10014, "Unknown Emoji")
    }
    /// 404 10015 Unknown Webhook: an interaction webhook's application id or token matches no
    /// interaction the fake holds, or a follow-up comes before the interaction was answered.
    pub fn unknown_webhook() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 10015, "Unknown Webhook")
    }
    /// 404 10062 Unknown interaction: a callback names an interaction the fake does not hold (never
    /// invoked, or beyond [`SizeLimits::interactions`](crate::SizeLimits::interactions)) or gives the wrong
    /// token.
    pub fn unknown_interaction() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 10062, "Unknown interaction")
    }
    /// 404 10002 Unknown Application: the application id in a commands route is not the bot's.
    pub fn unknown_application() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 10002, "Unknown Application")
    }
    /// 403 50001 Missing Access: the bot cannot see the channel (`bot_can_see: false` on it, or on
    /// a thread's parent).
    pub fn missing_access() -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, 50001, "Missing Access")
    }
    /// 403 50013 Missing Permissions: the bot lacks what the action needs in that channel:
    /// `bot_can_send` to post or type, `bot_can_manage_messages` to delete others' messages or
    /// bulk-delete.
    pub fn missing_permissions() -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, 50013, "Missing Permissions")
    }
    /// 403 50005: the bot tried to edit a message someone else wrote.
    pub fn cannot_edit_others_message() -> ApiError {
        ApiError::new(
            StatusCode::FORBIDDEN,
            50005,
            "Cannot edit a message authored by another user",
        )
    }
    /// 400 50006: the message would show nothing (no content, embeds, components, stickers, poll or
    /// files), when sent or after an edit.
    pub fn cannot_send_empty_message() -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            50006,
            "Cannot send an empty message",
        )
    }
    /// 403 50003: the bot tried to delete someone else's message, or to bulk-delete, in a DM.
    pub fn cannot_act_on_dm() -> ApiError {
        ApiError::new(
            StatusCode::FORBIDDEN,
            50003,
            "Cannot execute action on a DM channel",
        )
    }
    /// 400 50008: posting (or the bot typing) in a channel that holds no messages: a category or a
    /// forum.
    pub fn cannot_send_in_non_text() -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            50008,
            "Cannot send messages in a non-text channel",
        )
    }
    /// 400 50024: the action is not possible on this type of channel (a thread in a voice
    /// channel, a thread change on a channel that is not one).
    pub fn cannot_act_on_channel_type() -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            50024,
            "Cannot execute action on this channel type",
        )
    }
    /// 400 160004: the message already started a thread.
    pub fn thread_already_created() -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            160004,
            "A thread has already been created for this message",
        )
    }
    /// 400 30003: the channel already has the most pins Discord keeps.
    pub fn max_pins() -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            30003,
            "Maximum number of pins reached (250)",
        )
    }
    /// 400 50083: the bot posted or typed in an archived thread.
    pub fn thread_archived() -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, 50083, "Thread is archived")
    }
    /// 400 30010: a message already has reactions with 20 different emoji, and a new one was added.
    pub fn max_reactions() -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            30010,
            "Maximum number of reactions reached (20)",
        )
    }
    /// 400 40060: a second callback to an interaction that was already answered.
    pub fn already_acknowledged() -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            40060,
            "Interaction has already been acknowledged.",
        )
    }
    /// 400 50109: the body (or a multipart request's `payload_json`) is not valid JSON, or a route
    /// that takes only JSON got a form.
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
    /// 401 (code 0): the `Authorization` header is missing, or its token is not one the bot accepts
    /// ([`BotSpec::token`](crate::BotSpec::token)).
    pub fn unauthorized() -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, 0, "401: Unauthorized")
    }
    /// 404 (code 0): no such route, or an attachment URL the fake does not serve.
    pub fn not_found() -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, 0, "404: Not Found")
    }
    /// 405 (code 0): the route exists, but not for this method.
    pub fn method_not_allowed() -> ApiError {
        ApiError::new(StatusCode::METHOD_NOT_ALLOWED, 0, "405: Method Not Allowed")
    }
    /// 500 (code 0): something broke on Discord's side.
    pub fn internal() -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            0,
            "500: Internal Server Error",
        )
    }
    /// 429 (code 0): slow down. `retry_after` (seconds) goes in the body, rounded up in
    /// `Retry-After`, and in `X-RateLimit-Reset-After`; the fake answers it only as an injected
    /// fault.
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
    /// No field errors yet.
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

    /// Whether no field error was recorded.
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
