//! Several calls at once: `POST /v1/batch`, over the engine's [`Core::call_batch`] (which
//! in-process callers use too). Each call goes through [`Core::call`] on its own — scope,
//! rules, hooks, limits and audit apply to every one — and one refused call does not fail the
//! others. Results come back in the order the calls were given.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use protocol::{BatchRequest, CallRequest, ErrorCode, DEFAULT_BATCH_CONCURRENCY, MAX_BATCH_CALLS};
use serde_json::Value;

use crate::coerce::merge_cli_input;
use crate::error::ToolError;
use crate::server::Core;
use crate::Authed;
use switchboard_engine::BatchCall;
use switchboard_front::ApiError;

/// A call request's input: `input`, with the CLI's string `args` and bare words converted by
/// the callable's schema when it sent any (as `/v1/call` does).
pub(crate) fn request_input(core: &Core, request: CallRequest) -> Result<Value, ToolError> {
    match core.registry().entry(&request.tool) {
        Some(entry) if !request.args.is_empty() || !request.positional.is_empty() => {
            merge_cli_input(
                &entry.input_schema,
                entry.primary.as_deref(),
                request.input,
                request.args,
                request.positional,
            )
        }
        _ => Ok(Value::Object(request.input.unwrap_or_default())),
    }
}

/// Reads and checks a batch body: JSON of the right shape, 1 to [`MAX_BATCH_CALLS`] calls, a
/// concurrency in range. Every refusal is a typed usage error that says what to send.
pub fn parse_batch(body: &[u8]) -> Result<BatchRequest, ToolError> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let request: BatchRequest =
        serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
            ToolError::usage(
                ErrorCode::BadRequest,
                format!(
                    "The body must be {{\"calls\": [{{\"tool\": \"surface.…\", \"input\": {{…}}}}, …], \"maxConcurrency\": N}}: {} at '{}'",
                    error.inner(),
                    error.path()
                ),
            )
        })?;
    if request.calls.is_empty() {
        return Err(ToolError::usage(
            ErrorCode::BadRequest,
            "calls is empty: send 1 to 50 calls, each {\"tool\": \"surface.…\", \"input\": {…}}",
        ));
    }
    if request.calls.len() > MAX_BATCH_CALLS {
        return Err(ToolError::usage(
            ErrorCode::TooManyCalls,
            format!(
                "A batch holds at most {MAX_BATCH_CALLS} calls; this one has {}. Split it into several batches.",
                request.calls.len()
            ),
        )
        .with_details(serde_json::json!({ "max": MAX_BATCH_CALLS, "got": request.calls.len() })));
    }
    if let Some(width) = request.max_concurrency {
        if width == 0 || width > MAX_BATCH_CALLS {
            return Err(ToolError::usage(
                ErrorCode::InvalidInput,
                format!("maxConcurrency must be between 1 and {MAX_BATCH_CALLS}; leave it out for {DEFAULT_BATCH_CONCURRENCY}"),
            ));
        }
    }
    Ok(request)
}

/// `POST /v1/batch`.
pub(crate) async fn batch(
    State(core): State<Arc<Core>>,
    Authed(context): Authed,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body.map_err(crate::body_error)?;
    let request = parse_batch(&body)?;
    let width = request.max_concurrency.unwrap_or(DEFAULT_BATCH_CONCURRENCY);
    // A call whose flags cannot be converted fails alone, like any other refused call.
    let mut prepared: Vec<Result<BatchCall, ToolError>> = Vec::with_capacity(request.calls.len());
    for (index, call) in request.calls.into_iter().enumerate() {
        let mut context = context.clone();
        // Each call gets its own tool call id (`ID.0`, `ID.1`, ...) so approvals and the audit
        // log tell them apart.
        if let Some(id) = &context.tool_call_id {
            context.tool_call_id = Some(format!("{id}.{index}"));
        }
        let tool = call.tool.clone();
        prepared.push(request_input(&core, call).map(|input| BatchCall {
            context,
            tool,
            input,
        }));
    }
    let runnable: Vec<BatchCall> = prepared
        .iter()
        .filter_map(|call| call.as_ref().ok().cloned())
        .collect();
    let mut ran = core.call_batch(runnable, width).await.into_iter();
    let mut out = String::from("{\"ok\":true,\"value\":{\"results\":[");
    for (index, call) in prepared.into_iter().enumerate() {
        if index > 0 {
            out.push(',');
        }
        let result = match call {
            Ok(_) => ran
                .next()
                .unwrap_or_else(|| Err(ToolError::internal("a batch call lost its result"))),
            Err(error) => Err(error),
        };
        match result {
            Ok(value) => {
                out.push_str("{\"ok\":true,\"value\":");
                out.push_str(value.get());
                out.push('}');
            }
            Err(error) => out.push_str(
                &serde_json::to_string(&error.body())
                    .unwrap_or_else(|_| "{\"ok\":false}".to_owned()),
            ),
        }
    }
    out.push_str("]}}");
    Ok(([(header::CONTENT_TYPE, "application/json")], out).into_response())
}
