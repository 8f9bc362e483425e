//! A session's memory in the console: its current compaction summary (`memory.summary`), its
//! notes (`memory.read`), the notes kept about users (`admin.memory.list`, when the login's
//! scope names it), and deleting a note — a change, so it takes the CSRF token like the
//! console's other forms, and it is the `memory.forget` call, audited through the pipeline
//! as the logged-in caller.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ToolError;
use crate::{call, json_body, no_store, session_id, Change, Operator, Shared};
use protocol::ErrorCode;
use switchboard_front::ApiError;

/// `GET /console/api/sessions/{id}/memory`: `{summary, notes, userNotes}`, each null when
/// the login's scope does not name its callable (`memory.summary`, `memory.read`,
/// `admin.memory.list`).
pub(crate) async fn session_memory(
    State(core): Shared,
    operator: Operator,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let session = session_id(&id)?.to_string();
    // A part the login's scope does not name is null (the page says so), not an error.
    let summary = if operator.may(&core, "memory.summary") {
        call(
            &core,
            &operator,
            "memory.summary",
            json!({ "sessionId": session }),
        )
        .await?
    } else {
        Value::Null
    };
    let notes = if operator.may(&core, "memory.read") {
        call(
            &core,
            &operator,
            "memory.read",
            json!({ "scope": "session", "sessionId": session }),
        )
        .await?["notes"]
            .take()
    } else {
        Value::Null
    };
    let user_notes = if operator.may(&core, "admin.memory.list") {
        let all = call(&core, &operator, "admin.memory.list", json!({})).await?;
        Value::Array(
            all["notes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|n| n["scope"].as_str().is_some_and(|s| s.starts_with("user:")))
                .cloned()
                .collect(),
        )
    } else {
        Value::Null
    };
    Ok(no_store(json!({
        "summary": summary,
        "notes": notes,
        "userNotes": user_notes,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ForgetBody {
    /// `session:<id>` or `user:<id>`, as the notes are listed.
    scope: String,
    key: String,
}

/// `POST /console/api/memory/forget` `{scope, key}`: `memory.forget` as the login.
pub(crate) async fn forget(
    State(core): Shared,
    Change(operator): Change,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body: ForgetBody = json_body(body)?;
    let input = match body.scope.split_once(':') {
        Some(("session", id)) => {
            json!({ "scope": "session", "sessionId": session_id(id)?.to_string(), "key": body.key })
        }
        Some(("user", id)) => json!({
            "scope": "user",
            "userId": crate::invocation::parse_id("user", id)?.to_string(),
            "key": body.key,
        }),
        _ => {
            return Err(ApiError::from(ToolError::usage(
                ErrorCode::BadRequest,
                "scope must be session:<id> or user:<id>, as the notes are listed",
            )))
        }
    };
    let answer = call(&core, &operator, "memory.forget", input).await?;
    tracing::info!(scope = %body.scope, key = %body.key, by = %operator.by(), forgotten = %answer["forgotten"], "note forgotten from the console");
    Ok(no_store(answer))
}
