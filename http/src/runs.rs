//! The runs API: `GET /v1/runs`, `GET /v1/runs/{id}`, `POST /v1/runs/{id}/abort`.
//!
//! Each is a call of the operator callables `runs.list` / `runs.abort` through the pipeline
//! (scope, rules, audit), as the caller: the operator and tokens whose scope names them see and
//! stop every run; a token with an `agent:NAME` grant sees and stops only the runs it started
//! (the chat API's, its `agent.handoff`s'), and another's run answers 404 as if it did not
//! exist.

use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use protocol::ErrorCode;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::{Authed, Shared};
use switchboard_engine::ToolError;
use switchboard_front::ApiError;

/// `GET /v1/runs`'s query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunsQuery {
    session: Option<String>,
    state: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

fn json_answer(value: &Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// The callable's answer as it is: already the JSON the route answers.
fn raw_answer(output: switchboard_engine::registry::ToolOutput) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        String::from(Box::<str>::from(output)),
    )
        .into_response()
}

/// The callable's answer as JSON.
fn value(output: &serde_json::value::RawValue) -> Result<Value, ApiError> {
    serde_json::from_str(output.get()).map_err(|e| {
        ApiError::from(ToolError::internal(format!(
            "an answer that is no JSON: {e}"
        )))
    })
}

/// `GET /v1/runs`: the runs the caller may see, running first, a page at a time.
pub(crate) async fn list(
    State(core): Shared,
    Authed(context): Authed,
    query: Result<Query<RunsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|rejection| {
        ToolError::usage(
            ErrorCode::BadRequest,
            format!("{rejection}; the parameters are session, state (running, queued, finished, failed or aborted), limit (1 to 200) and cursor"),
        )
    })?;
    let limit = match query.limit.as_deref() {
        None => None,
        Some(limit) => Some(limit.trim().parse::<u32>().map_err(|_| {
            ToolError::usage(
                ErrorCode::InvalidInput,
                format!("limit: a whole number from 1 to 200, not '{limit}'"),
            )
        })?),
    };
    let mut input = json!({});
    if let Some(session) = query.session {
        input["sessionId"] = json!(session);
    }
    if let Some(state) = query.state {
        input["state"] = json!(state);
    }
    if let Some(limit) = limit {
        input["limit"] = json!(limit);
    }
    if let Some(cursor) = query.cursor {
        input["cursor"] = json!(cursor);
    }
    let output = core.call(&context, "runs.list", input).await?;
    Ok(raw_answer(output))
}

/// `GET /v1/runs/{id}`: one run the caller may see, or 404.
pub(crate) async fn get(
    State(core): Shared,
    Authed(context): Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let output = core
        .call(&context, "runs.list", json!({ "runId": id }))
        .await?;
    let listed = value(&output)?;
    match listed["runs"].get(0) {
        Some(run) => Ok(json_answer(run)),
        None => Err(ToolError::not_found(
            ErrorCode::Other("unknown_run".to_owned()),
            format!("No run {id} that you may see is running, queued or among the recently ended runs this node keeps (GET /v1/runs lists them; an older run is in the audit log)"),
        )
        .into()),
    }
}

/// `POST /v1/runs/{id}/abort`: stops a run the caller may stop.
pub(crate) async fn abort(
    State(core): Shared,
    Authed(context): Authed,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let output = core
        .call(&context, "runs.abort", json!({ "runId": id }))
        .await?;
    Ok(raw_answer(output))
}
