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

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use switchboard_agents::AgentGrants;
use switchboard_chat_api::{
    parse_request, ApiError, ChatCompletion, ChunkStream, CompletionUsage, FinishReason, ModelList,
    Role, SSE_CONTENT_TYPE,
};

use switchboard_engine::auth::Caller;
use switchboard_engine::handoff::HandoffRequest;
use switchboard_engine::runs::{AbortTarget, Runs};
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

/// The audit row of one chat completion (`chat.completions`), beside its run's own calls:
/// who asked, the run, the session it worked in, how it ended.
pub(crate) struct ChatAudit {
    pub(crate) started: std::time::Instant,
    pub(crate) started_ms: u64,
    pub(crate) session: entity::Snowflake,
    pub(crate) agent: String,
    pub(crate) stream: bool,
    pub(crate) messages: usize,
}

impl ChatAudit {
    pub(crate) fn record(
        &self,
        core: &Core,
        caller: &Caller,
        run: Option<String>,
        failure: Option<(&'static str, String)>,
    ) {
        use std::borrow::Cow;
        let (outcome, code) = match failure {
            None => (Cow::Borrowed("ok"), None),
            Some((kind, code)) => (Cow::Borrowed(kind), Some(Cow::Owned(code))),
        };
        core.governance()
            .record(switchboard_engine::governance::AuditRow {
                time_ms: self.started_ms,
                caller: Cow::Owned(caller.key()),
                run,
                requested_by: None,
                tool: Cow::Borrowed("chat.completions"),
                sessions: vec![self.session],
                input: serde_json::json!({
                    "model": format!("switchboard:{}", self.agent),
                    "messages": self.messages,
                    "stream": self.stream,
                }),
                decision: Cow::Borrowed("allow"),
                decided_by: Some(Cow::Owned(format!("agent:{}", self.agent))),
                outcome,
                code,
                duration_ms: self.started.elapsed().as_millis() as u64,
                count: 1,
                events: Vec::new(),
            });
    }
}

/// Where a chat completion's run works: the session the `x-switchboard-session-id` header
/// names (a Discord session the allowlist allows, or the caller's own `api:<token name>`),
/// else the caller's API-only session. Another caller's API session, or a channel the
/// allowlist refuses, is 403; a reference that names nothing is 400.
async fn chat_session(
    core: &Core,
    context: &switchboard_engine::CallContext,
) -> Result<switchboard_engine::surface::AllowedChannel, ApiError> {
    let refused_session = |refused: switchboard_engine::ToolError| {
        ApiError::permission("session_not_allowed", refused.message)
    };
    let Some(reference) = context.session_ref.as_deref() else {
        return core
            .api_sessions()
            .own(&context.caller)
            .map(|(channel, _)| channel)
            .map_err(refused_session);
    };
    if let Some(api) = core.api_sessions().named(reference, &context.caller) {
        return api.map(|(channel, _)| channel).map_err(refused_session);
    }
    let session = {
        let settings = core.settings();
        entity::Mapper::new(settings.aliases(), core.surface().as_ref()).resolve_session(reference)
    };
    match session {
        Ok(id) => core.allowed(id).await.map_err(refused_session),
        Err(refused) => Err(ApiError::invalid_request(
            "unknown_session",
            None,
            format!(
                "{refused} (the {} header names a session: an alias such as #ops, an id, or api:<token name>; leave it out to work in your API-only session)",
                protocol::context::HEADER_SESSION_ID
            ),
        )),
    }
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
    let session = match chat_session(&core, &context).await {
        Ok(session) => session,
        Err(refused) => return error(&refused),
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
    let Ok(permit) = CHAT_RUNS.try_acquire() else {
        return error(&ApiError::rate_limited(
            "too_many_runs",
            format!("{MAX_CHAT_RUNS} chat completions are running; retry shortly"),
        ));
    };
    let audit = ChatAudit {
        started: std::time::Instant::now(),
        started_ms: switchboard_engine::clock::now_ms(),
        session: session.id(),
        agent: request.agent.to_string(),
        stream: request.stream,
        messages: request.messages.len(),
    };
    let (text, text_so_far) = tokio::sync::watch::channel(String::new());
    let (started, run_started) = tokio::sync::oneshot::channel();
    let handoff = HandoffRequest {
        caller: context.caller.clone(),
        agent: request.agent.to_string(),
        prompt,
        session,
        timeout: CHAT_TIMEOUT,
        text: request.stream.then_some(text),
        started: Some(started),
    };
    let runner = Arc::clone(runs);
    let mut task = tokio::spawn(async move {
        let answer = runner.handoff(handoff).await;
        drop(permit);
        answer
    });
    // Refused before it started (an unknown agent, a budget): an answer of its own, not a
    // stream.
    let Ok(run_id) = run_started.await else {
        let outcome = (&mut task).await;
        let failure = answer_error(outcome);
        let refused = match &failure {
            Ok(_) => ApiError::from_status(500, "internal", "the run ended before it started"),
            Err(refused) => refused.clone(),
        };
        audit.record(
            &core,
            &context.caller,
            None,
            Some((
                "refused",
                refused.body.error.code.clone().unwrap_or_default(),
            )),
        );
        return error(&refused);
    };
    let guard = AbortOnDrop {
        runs: Arc::clone(runs),
        run_id: Some(run_id.clone()),
    };
    let id = format!("chatcmpl-{run_id}");
    let created = now_s();
    if !request.stream {
        let outcome = answer_error((&mut task).await);
        guard.disarm();
        return match outcome {
            Ok(answer) => {
                audit.record(&core, &context.caller, Some(run_id), None);
                axum::Json(ChatCompletion::answer(
                    id,
                    created,
                    request.model,
                    answer.text,
                    FinishReason::Stop,
                    answer
                        .usage
                        .map(|u| CompletionUsage::new(u.prompt_tokens, u.completion_tokens)),
                ))
                .into_response()
            }
            Err(refused) => {
                audit.record(
                    &core,
                    &context.caller,
                    Some(run_id),
                    Some((
                        "failed",
                        refused.body.error.code.clone().unwrap_or_default(),
                    )),
                );
                error(&refused)
            }
        };
    }
    let streaming = Streaming {
        core: Arc::clone(&core),
        caller: context.caller.clone(),
        audit,
        run_id,
        chunks: ChunkStream::new(id, created, request.model, request.include_usage),
        text_so_far,
        sent: String::new(),
        task,
        guard,
        done: false,
    };
    let body = axum::body::Body::from_stream(futures_util::stream::unfold(
        streaming,
        |mut streaming| async move {
            let next = streaming.next().await?;
            Some((Ok::<_, std::convert::Infallible>(next), streaming))
        },
    ));
    (
        [
            (header::CONTENT_TYPE, SSE_CONTENT_TYPE),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// A finished run as the chat API answers it: the answer, or the error in OpenAI's shape.
fn answer_error(
    outcome: Result<
        Result<switchboard_engine::handoff::HandoffAnswer, switchboard_engine::ToolError>,
        tokio::task::JoinError,
    >,
) -> Result<switchboard_engine::handoff::HandoffAnswer, ApiError> {
    match outcome {
        Ok(Ok(answer)) if !answer.timed_out => Ok(answer),
        Ok(Ok(_)) => Err(ApiError::from_status(
            504,
            "timeout",
            "the agent did not finish in time",
        )),
        Ok(Err(refused)) => Err(ApiError::from_status(
            refused.status().as_u16(),
            refused.code.as_str(),
            refused.message,
        )),
        Err(_) => Err(ApiError::from_status(
            500,
            "internal",
            "the agent's run failed unexpectedly",
        )),
    }
}

/// Stops the run when the answer is dropped before it finished: the client went away.
struct AbortOnDrop {
    runs: Arc<dyn Runs>,
    run_id: Option<String>,
}

impl AbortOnDrop {
    fn disarm(mut self) {
        self.run_id = None;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(run_id) = self.run_id.take() {
            tracing::info!(run = %run_id, "the chat client went away; its run is stopped");
            let _ = self
                .runs
                .abort(AbortTarget::Run(&run_id), entity::Snowflake(0), true);
        }
    }
}

/// A stream dropped before its end: the client went away. The run is stopped (the guard) and
/// the completion audited as cancelled.
impl Drop for Streaming {
    fn drop(&mut self) {
        if !self.done {
            self.audit.record(
                &self.core,
                &self.caller,
                Some(self.run_id.clone()),
                Some(("cancelled", "client_disconnected".to_owned())),
            );
        }
    }
}

/// A streamed completion: the model's text as it comes, then the end.
struct Streaming {
    core: Arc<Core>,
    caller: Caller,
    audit: ChatAudit,
    run_id: String,
    chunks: ChunkStream,
    text_so_far: tokio::sync::watch::Receiver<String>,
    /// The current model round's text sent so far.
    sent: String,
    task: tokio::task::JoinHandle<
        Result<switchboard_engine::handoff::HandoffAnswer, switchboard_engine::ToolError>,
    >,
    guard: AbortOnDrop,
    done: bool,
}

impl Streaming {
    /// The next events to send; `None` once the stream ended.
    async fn next(&mut self) -> Option<String> {
        if self.done {
            return None;
        }
        loop {
            tokio::select! {
                biased;
                outcome = &mut self.task => {
                    self.done = true;
                    self.guard.run_id = None;
                    return Some(self.end(answer_error(outcome)));
                }
                changed = self.text_so_far.changed() => {
                    if changed.is_err() {
                        // The run stopped publishing: only its end is left.
                        let outcome = (&mut self.task).await;
                        self.done = true;
                        self.guard.run_id = None;
                        return Some(self.end(answer_error(outcome)));
                    }
                    let now = self.text_so_far.borrow_and_update().clone();
                    if let Some(delta) = self.delta(&now) {
                        return Some(self.chunks.text(&delta));
                    }
                }
            }
        }
    }

    /// What to send for the text so far `now`: the rest of this round's text; for a new model
    /// round (its text does not continue what was sent), a paragraph break and the new text.
    fn delta(&mut self, now: &str) -> Option<String> {
        let delta = match now.strip_prefix(self.sent.as_str()) {
            Some(rest) => rest.to_owned(),
            None => format!("\n\n{now}"),
        };
        self.sent = now.to_owned();
        (!delta.is_empty()).then_some(delta)
    }

    /// The last events: what of the final text was not sent, the finish (with usage when
    /// asked), `[DONE]`; or the error.
    fn end(
        &mut self,
        outcome: Result<switchboard_engine::handoff::HandoffAnswer, ApiError>,
    ) -> String {
        match outcome {
            Ok(answer) => {
                self.audit
                    .record(&self.core, &self.caller, Some(self.run_id.clone()), None);
                let sent = self.sent.trim_start();
                let rest = if let Some(rest) = answer.text.strip_prefix(sent) {
                    rest.to_owned()
                } else if sent.starts_with(answer.text.as_str()) {
                    String::new()
                } else if sent.is_empty() {
                    answer.text.clone()
                } else {
                    format!("\n\n{}", answer.text)
                };
                let mut out = self.chunks.text(&rest);
                let usage = answer
                    .usage
                    .map(|u| CompletionUsage::new(u.prompt_tokens, u.completion_tokens));
                out.push_str(&self.chunks.finish(FinishReason::Stop, usage));
                out
            }
            Err(refused) => {
                self.audit.record(
                    &self.core,
                    &self.caller,
                    Some(self.run_id.clone()),
                    Some((
                        "failed",
                        refused.body.error.code.clone().unwrap_or_default(),
                    )),
                );
                self.chunks.fail(&refused)
            }
        }
    }
}
