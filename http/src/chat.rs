//! The OpenAI-compatible chat API into the agents (`switchboard-chat-api`'s wire types):
//! `GET /v1/models` lists the agents the token's scope grants (`agent:NAME`, `agent:*`; the
//! operator: all), and `POST /v1/chat/completions` with `model = "switchboard:NAME"` runs
//! that agent and answers its final text.
//!
//! The run is the agent bridge's handoff run ([`Runs::handoff`](switchboard_engine::runs::Runs::handoff)):
//! under the token's scope intersected with the agent's `tool_scope`, in the session the
//! `x-switchboard-session-id` header names (allowlisted as any session), posting nothing; the
//! conversation is handed over as one prompt. A streamed request gets the same answer as
//! `chat.completion.chunk` events once the run has finished (not token by token yet).

use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use switchboard_agents::AgentGrants;
use switchboard_chat_api::{
    parse_request, ApiError, ChatCompletion, ChunkStream, FinishReason, ModelList, Role,
    SSE_CONTENT_TYPE,
};

use switchboard_engine::auth::Caller;
use switchboard_engine::handoff::HandoffRequest;
use switchboard_engine::Core;

use crate::{Authed, Shared};

/// How long a chat completion's run may take.
const CHAT_TIMEOUT: Duration = Duration::from_secs(600);
/// Chat completions running at once in this process; past it, 429.
const MAX_CHAT_RUNS: usize = 16;
static CHAT_RUNS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_CHAT_RUNS);

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() as i64)
}

fn error(error: &ApiError) -> Response {
    let mut response = (
        axum::http::StatusCode::from_u16(error.status)
            .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR),
        [(header::CONTENT_TYPE, "application/json")],
        error.body_json(),
    )
        .into_response();
    for (name, value) in error.headers() {
        response
            .headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    response
}

/// What agents `caller` may talk to.
fn grants(core: &Core, caller: &Caller) -> AgentGrants {
    let settings = core.settings();
    let names = settings.config().agents.names();
    match caller {
        Caller::Operator | Caller::Unauthenticated => AgentGrants::all(),
        Caller::Token(token) => {
            AgentGrants::from_scope(token.scope.iter().map(String::as_str), &names)
        }
        Caller::Capability(_) | Caller::Discord(_) => AgentGrants::default(),
    }
}

/// `GET /v1/models`.
pub(crate) async fn models(State(core): Shared, Authed(context): Authed) -> Response {
    let settings = core.settings();
    let names = settings.config().agents.names();
    let grants = grants(&core, &context.caller);
    let list = ModelList::of_agents(grants.visible(&names), now_s());
    axum::Json(list).into_response()
}

/// `POST /v1/chat/completions`.
pub(crate) async fn completions(
    State(core): Shared,
    Authed(context): Authed,
    body: axum::body::Body,
) -> Response {
    let body = match crate::read_body(body).await {
        Ok(body) => body,
        Err(refused) => {
            return error(&ApiError::from_status(
                refused.status().as_u16(),
                refused.code.as_str(),
                refused.message,
            ))
        }
    };
    let names = core.settings().config().agents.names();
    let request = match parse_request(&body, &names, &grants(&core, &context.caller)) {
        Ok(request) => request,
        Err(refused) => return error(&refused.to_api()),
    };
    let Some(runs) = core.runs() else {
        return error(&ApiError::unavailable("no_agent", "no agent is configured"));
    };
    let Some(reference) = context.session_ref.as_deref() else {
        return error(&ApiError::invalid_request(
            "session_required",
            None,
            format!(
                "name the session the agent works in with the {} header (an alias such as #ops, or an id)",
                protocol::context::HEADER_SESSION_ID
            ),
        ));
    };
    let session = {
        let settings = core.settings();
        entity::Mapper::new(settings.aliases(), core.surface().as_ref()).resolve_session(reference)
    };
    let session = match session {
        Ok(id) => match core.allowed(id).await {
            Ok(allowed) => allowed,
            Err(refused) => {
                return error(&ApiError::permission(
                    "session_not_allowed",
                    refused.message,
                ))
            }
        },
        Err(refused) => {
            return error(&ApiError::invalid_request(
                "unknown_session",
                None,
                refused.to_string(),
            ))
        }
    };
    let prompt = request
        .messages
        .iter()
        .map(|m| {
            let who = match m.role {
                Role::System | Role::Developer => "instructions",
                Role::Assistant => "you answered",
                _ => "user",
            };
            format!("[{who}] {}", m.content)
        })
        .collect::<Vec<_>>()
        .join("\n\n");
    let Ok(_running) = CHAT_RUNS.try_acquire() else {
        return error(&ApiError::rate_limited(
            "too_many_runs",
            format!("{MAX_CHAT_RUNS} chat completions are running; retry shortly"),
        ));
    };
    let answer = runs
        .handoff(HandoffRequest {
            caller: context.caller.clone(),
            agent: request.agent.to_string(),
            prompt,
            session,
            timeout: CHAT_TIMEOUT,
        })
        .await;
    let answer = match answer {
        Ok(answer) if !answer.timed_out => answer,
        Ok(_) => {
            return error(&ApiError::from_status(
                504,
                "timeout",
                "the agent did not finish in time",
            ))
        }
        Err(refused) => {
            return error(&ApiError::from_status(
                refused.status().as_u16(),
                refused.code.as_str(),
                refused.message,
            ))
        }
    };
    let id = format!("chatcmpl-{}", answer.run_id);
    if request.stream {
        let mut stream = ChunkStream::new(id, now_s(), request.model, request.include_usage);
        let mut text = stream.text(&answer.text);
        text.push_str(&stream.finish(FinishReason::Stop, None));
        return ([(header::CONTENT_TYPE, SSE_CONTENT_TYPE)], text).into_response();
    }
    axum::Json(ChatCompletion::answer(
        id,
        now_s(),
        request.model,
        answer.text,
        FinishReason::Stop,
        None,
    ))
    .into_response()
}
