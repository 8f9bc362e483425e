//! `runner = "openai"`: an OpenAI-compatible chat endpoint driven by a tool-calling loop.
//!
//! The session transcript becomes the messages; the callables in the run's scope become the
//! `tools` list (the same JSON Schemas the HTTP API serves); every tool call goes through
//! [`Core::call`] with the run's capability — the full policy path — and its result or typed
//! error goes back to the model. The final assistant text is the reply.
//!
//! Every request is built through [`switchboard_context`]'s request model and fitted to the
//! token budget (`agent.context_tokens − agent.answer_tokens`, the tool schemas counted)
//! before it is sent: older tool results are pruned first (never the two most recent turns,
//! never `agent.protected_tools`), then, when that is not enough, the older part of the
//! conversation is compacted: a dedicated request asks the model for a structured summary,
//! the guard checks it kept every identifier later turns still refer to (one retry naming
//! the missing ones, then they are appended), the summary takes the older part's place, is
//! stored for the session (it starts the session's later prompts) and `context.compacted` is
//! published. A request that cannot fit even then fails the run with the reason; it is never
//! sent.

use protocol::ErrorCode;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchboard_config::OpenAiRunner;
use switchboard_engine::{BatchCall, CallContext, Core};

use switchboard_context::compact::{self, CompactionSettings};
use switchboard_context::{
    events, fit, Block, Budget, CompactionPlan, Encoding, Entry, FitError, FitReport, Memo,
    Request, Tiktoken, ToolCall, ToolRound, ToolSchema, Tools,
};
use switchboard_store::MemoryStore;

use super::prompt::Transcript;
use super::stream::DraftState;

/// Where a streamed answer's text and tool progress are published (`agent.stream = "edit"`).
pub type DraftSender = std::sync::Arc<tokio::sync::watch::Sender<DraftState>>;

/// The most a streamed answer may send, all events together.
const MAX_STREAM_BYTES: usize = 8 * 1024 * 1024;
/// The longest line of a streamed answer.
const MAX_STREAM_LINE: usize = 1024 * 1024;
/// The most tool calls one streamed message may make.
const MAX_STREAM_TOOL_CALLS: usize = 128;

/// Why a model run failed.
#[derive(Debug, thiserror::Error)]
pub enum OpenAiError {
    /// A request could not be sent or its answer not read (connection refused, DNS, TLS, the
    /// connection dropped), or the HTTP client could not be built.
    #[error("cannot reach the model at {url}: {source}")]
    Unreachable {
        /// `{base_url}/chat/completions` (the bare base URL when the client could not be
        /// built).
        url: String,
        /// The HTTP client's error.
        source: reqwest::Error,
    },
    /// The model server answered with a status other than 2xx.
    #[error("the model server answered {status}: {body}")]
    Status {
        /// The HTTP status code.
        status: u16,
        /// The first 300 characters of its body, for the log.
        body: String,
    },
    /// The answer is not JSON, has no `choices[0].message`, or the model still called tools
    /// in the last round, when none were offered; says what was wrong, with an excerpt.
    #[error("the model server's answer is not a chat completion: {0}")]
    Malformed(String),
    /// The conversation, tool calls included, took longer than the run's timeout.
    #[error("the model did not finish within {0:?}")]
    Timeout(Duration),
    /// `agent.api_key_env` names a variable that is unset or empty; holds its name.
    #[error("the API key variable {0} is not set")]
    MissingKey(String),
    /// A `[[hooks.prompt]]` entry with `required = true` failed: the request was not sent.
    #[error("a required prompt hook failed: {0}")]
    PromptHook(String),
    /// A `[budgets]` cap was crossed by this run: it stops before its next model round.
    #[error("{}", .0.message())]
    Budget(switchboard_usage::Refusal),
    /// What can never be cut from a request (the system prompt, the tool schemas, the two most
    /// recent turns, the message to answer) is bigger than the budget; nothing was sent.
    #[error("the request to the model cannot fit the context budget: {0}")]
    TooBig(#[source] FitError),
    /// Every older tool result is pruned and the transcript left out, and this run's own tool
    /// rounds still do not fit: the compaction that would summarise them failed (or left
    /// them out still).
    #[error("this run's tool rounds do not fit the {limit} tokens a request may carry (agent.context_tokens − agent.answer_tokens) even with every older result pruned, and compacting them failed: {rounds} of them would have to be left out (results of agent.protected_tools are never pruned); raise agent.context_tokens, protect fewer tools, lower agent.max_tool_rounds or ask for less")]
    RoundsOverflow {
        /// This run's tool rounds that would have to be left out.
        rounds: usize,
        /// `context_tokens − answer_tokens`.
        limit: usize,
    },
}

impl OpenAiError {
    /// A few words for the error line posted in Discord.
    pub fn short_reason(&self) -> String {
        match self {
            OpenAiError::Unreachable { .. } => "the model server is unreachable".to_owned(),
            OpenAiError::Status { status, .. } => format!("the model server answered {status}"),
            OpenAiError::Malformed(_) => "the model's answer was malformed".to_owned(),
            OpenAiError::Timeout(limit) => format!("no answer within {} s", limit.as_secs()),
            OpenAiError::MissingKey(name) => format!("{name} is not set"),
            OpenAiError::Budget(refusal) => refusal.message(),
            OpenAiError::PromptHook(_) => "a required prompt hook failed".to_owned(),
            OpenAiError::TooBig(FitError::TooBig {
                part,
                part_tokens,
                limit,
                ..
            }) => format!(
                "the request does not fit agent.context_tokens: {part} take {part_tokens} of the {limit} tokens a request may carry"
            ),
            OpenAiError::TooBig(error) => error.to_string(),
            OpenAiError::RoundsOverflow { rounds, limit } => format!(
                "this run's tool results do not fit agent.context_tokens ({limit} tokens a request may carry) even with older results pruned: {rounds} tool rounds would be lost"
            ),
        }
    }
}

/// The token budget of one run (`[agent]` keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextLimits {
    /// `agent.context_tokens`.
    pub context_tokens: usize,
    /// `agent.answer_tokens`.
    pub answer_tokens: usize,
    /// `agent.protected_tools`: callable globs whose results are never pruned.
    pub protected_tools: Vec<String>,
}

impl ContextLimits {
    /// The limits `agent` sets.
    pub fn of(agent: &switchboard_config::AgentConfig) -> ContextLimits {
        ContextLimits {
            context_tokens: agent.context_tokens,
            answer_tokens: agent.answer_tokens,
            protected_tools: agent.protected_tools.clone(),
        }
    }
}

/// The process's token counter for `model`: the tokenizer of its encoding, memoised. Built on
/// first use (a few hundred milliseconds), then shared by every run.
pub fn counter(model: &str) -> &'static Memo<Tiktoken> {
    static O200K: std::sync::OnceLock<Memo<Tiktoken>> = std::sync::OnceLock::new();
    static CL100K: std::sync::OnceLock<Memo<Tiktoken>> = std::sync::OnceLock::new();
    let encoding = Encoding::for_model(model).encoding;
    let cell = match encoding {
        Encoding::O200kBase => &O200K,
        Encoding::Cl100kBase => &CL100K,
    };
    cell.get_or_init(|| Memo::new(Tiktoken::new(encoding)))
}

/// Function names may hold only `[A-Za-z0-9_-]`: `surface.messages.send` → `surface__messages__send`.
fn function_name(tool_id: &str) -> String {
    tool_id.replace('.', "__")
}

fn excerpt(text: &str) -> String {
    text.chars().take(300).collect()
}

/// Runs the conversation to a final answer. With `draft`, the model is asked to stream
/// (`stream: true`) and the text so far, and a progress line for tool calls, are published
/// there as they arrive.
pub async fn answer(
    run: Run<'_>,
    transcript: Transcript,
    timeout: Duration,
    draft: Option<DraftSender>,
) -> Result<String, OpenAiError> {
    let deadline = Instant::now() + timeout;
    let chat = run.chat_loop(transcript, deadline, draft);
    match tokio::time::timeout(timeout, chat).await {
        Ok(result) => result,
        Err(_) => Err(OpenAiError::Timeout(timeout)),
    }
}

/// What one run's chat loop works with.
pub struct Run<'a> {
    /// `[agent]`'s runner keys.
    pub runner: &'a OpenAiRunner,
    /// The core its tool calls go through.
    pub core: &'a Core,
    /// The run's call context (its capability).
    pub context: &'a CallContext,
    /// The session the run answers in: where its events are published.
    pub session: entity::Snowflake,
    /// The token budget.
    pub limits: &'a ContextLimits,
    /// Where each model call's usage is kept and the run's budgets are checked.
    pub meter: Option<&'a crate::metering::Meter>,
    /// Where a compaction's summary is kept for the session (`summary_session`); without
    /// one, the summary serves this run only.
    pub memory: Option<&'a dyn MemoryStore>,
    /// The session whose transcript the run reads: its summary's owner.
    pub summary_session: entity::Snowflake,
    /// The agent's notes of the session and the requester ([`super::notes::block`]).
    pub notes: Option<String>,
    /// The system message's first blocks: the provider prompt and the instruction files
    /// ([`super::instructions::system_blocks`]).
    pub system: Vec<Block>,
}

/// What a run's requests go to: the chat completions route, with its key.
struct Endpoint<'a> {
    client: reqwest::Client,
    url: String,
    key: Option<String>,
    model: &'a str,
    deadline: Instant,
    meter: Option<&'a crate::metering::Meter>,
}

impl Endpoint<'_> {
    /// One compaction request (never streamed, no tools): the answer's text.
    async fn summarise(&self, request: compact::CompactionRequest) -> Result<String, OpenAiError> {
        let body = json!({
            "model": self.model,
            "messages": request.messages,
            "max_tokens": request.max_tokens,
        });
        let mut http = self
            .client
            .post(&self.url)
            .json(&body)
            .timeout(self.deadline.saturating_duration_since(Instant::now()));
        if let Some(key) = &self.key {
            http = http.bearer_auth(key);
        }
        let response = http
            .send()
            .await
            .map_err(|source| OpenAiError::Unreachable {
                url: self.url.clone(),
                source,
            })?;
        let (message, usage) = read_message(response, &self.url, None).await?;
        // A compaction is a model call like any other: charged and counted against budgets.
        if let Some(meter) = self.meter {
            meter
                .record(usage_of(usage.as_ref(), &body, &message))
                .await;
        }
        Ok(message
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned())
    }
}

impl Run<'_> {
    async fn chat_loop(
        &self,
        transcript: Transcript,
        deadline: Instant,
        draft: Option<DraftSender>,
    ) -> Result<String, OpenAiError> {
        let (runner, core, context) = (self.runner, self.core, self.context);
        let key = match &runner.api_key_env {
            Some(name) => Some(
                std::env::var(name)
                    .ok()
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| OpenAiError::MissingKey(name.clone()))?,
            ),
            None => None,
        };
        let entries = core.tools_for(&context.caller);
        let by_function: HashMap<String, String> = entries
            .iter()
            .map(|e| (function_name(&e.id), e.id.clone()))
            .collect();
        let tools = Tools::new(
            entries
                .iter()
                .map(|e| ToolSchema {
                    name: function_name(&e.id),
                    description: e.description.clone(),
                    parameters: e.input_schema.clone(),
                })
                .collect(),
        );
        // The fitter matches callables by name: the globs become the callables in scope.
        let budget = Budget {
            context_tokens: self.limits.context_tokens,
            answer_tokens: self.limits.answer_tokens,
            // The transcript was read within `agent.context_messages` already.
            context_messages: usize::MAX,
            protected_tools: entries
                .iter()
                .filter(|e| {
                    self.limits
                        .protected_tools
                        .iter()
                        .any(|glob| switchboard_config::glob_matches(glob, &e.id))
                })
                .map(|e| e.id.clone())
                .collect(),
            ..Budget::default()
        };
        let model = runner.model.clone();
        let counter = tokio::task::spawn_blocking(move || counter(&model))
            .await
            .unwrap_or_else(|_| counter(&runner.model));
        let mut system = self.system.clone();
        // The notes take at most a quarter of what a request may carry: the rest is the
        // conversation's, and notes the agent (or anyone it listened to) piled up cannot
        // push every later run of the session past the budget.
        system.extend(
            self.notes
                .as_deref()
                .map(|notes| crate::notes::within(notes, budget.limit() / 4, counter))
                .map(Block::Note),
        );
        system.extend(transcript.untrusted_note.map(Block::Note));
        let mut request = Request {
            system,
            tools,
            summary: transcript.summary,
            entries: transcript.entries,
        };
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|source| OpenAiError::Unreachable {
                url: runner.base_url.clone(),
                source,
            })?;
        let url = format!("{}/chat/completions", runner.base_url.trim_end_matches('/'));
        let endpoint = Endpoint {
            client: client.clone(),
            url: url.clone(),
            key: key.clone(),
            model: &runner.model,
            deadline,
            meter: self.meter,
        };
        for round in 0..=runner.max_tool_rounds {
            // A run that crossed a cap stops here, before asking the model again.
            if let Some(refusal) = self.meter.and_then(crate::metering::Meter::crossed) {
                return Err(OpenAiError::Budget(refusal));
            }
            // The last round offers no tools, so the model has to answer in text; their
            // schemas' room goes back to the conversation.
            let offered = if round < runner.max_tool_rounds {
                None
            } else {
                Some(std::mem::take(&mut request.tools))
            };
            let fitted = self
                .fitted(&mut request, &budget, counter, round, &endpoint)
                .await;
            let (messages, tools) = fitted?;
            if let Some(offered) = offered {
                request.tools = offered;
            }
            let place = crate::prompt_hooks::RequestPlace {
                session: self.session,
                run: context.request_id.as_deref().unwrap_or_default(),
                model: &runner.model,
                round,
            };
            let messages =
                crate::prompt_hooks::apply(core, &place, messages, &tools, budget.limit(), counter)
                    .await
                    .map_err(OpenAiError::PromptHook)?;
            let mut body = json!({"model": runner.model, "messages": messages});
            if !tools.is_empty() {
                body["tools"] = Value::Array(tools);
            }
            if draft.is_some() {
                body["stream"] = json!(true);
                // The last chunk then carries the usage.
                body["stream_options"] = json!({"include_usage": true});
            }
            let mut http = client
                .post(&url)
                .json(&body)
                .timeout(deadline.saturating_duration_since(Instant::now()));
            if let Some(key) = &key {
                http = http.bearer_auth(key);
            }
            let response = http
                .send()
                .await
                .map_err(|source| OpenAiError::Unreachable {
                    url: url.clone(),
                    source,
                })?;
            let (message, usage) = read_message(response, &url, draft.as_ref()).await?;
            if let Some(meter) = self.meter {
                meter
                    .record(usage_of(usage.as_ref(), &body, &message))
                    .await;
            }
            let calls = message
                .get("tool_calls")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if calls.is_empty() {
                return Ok(message
                    .get("content")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned());
            }
            if let Some(draft) = &draft {
                let doing = progress_for(core, &calls);
                draft.send_modify(|state| state.progress = Some(doing));
            }
            let started = chrono::Utc::now();
            let clock = Instant::now();
            let results = run_tools(core, context, &by_function, &calls).await;
            let took = u64::try_from(clock.elapsed().as_millis()).unwrap_or(u64::MAX);
            let started = started.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            let calls = calls
                .iter()
                .zip(results)
                .map(|(call, result)| {
                    let name = call
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    ToolCall {
                        id: call
                            .get("id")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        name: name.to_owned(),
                        tool: callable_of(&by_function, name),
                        arguments: call
                            .pointer("/function/arguments")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        started: Some(started.clone()),
                        duration_ms: Some(took),
                        result,
                    }
                })
                .collect();
            request.entries.push(Entry::Round(ToolRound {
                text: message
                    .get("content")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                calls,
            }));
        }
        Err(OpenAiError::Malformed(
            "the model kept calling tools after being offered none".to_owned(),
        ))
    }

    /// The messages and tools of the next request, fitted to the budget: `context.pruned`
    /// published when anything was pruned or left out; when the fit had to leave entries out,
    /// they are compacted first (at most once a round).
    async fn fitted(
        &self,
        request: &mut Request,
        budget: &Budget,
        counter: &Memo<Tiktoken>,
        round: usize,
        endpoint: &Endpoint<'_>,
    ) -> Result<(Vec<Value>, Vec<Value>), OpenAiError> {
        let first = fit(request, budget, counter).map_err(OpenAiError::TooBig)?;
        self.publish_pruned(&first.report, budget, round);
        let Some(plan) = first.compaction.clone() else {
            return Ok((first.messages(), first.tools()));
        };
        let before = first.report.clone();
        // Older transcript messages may be sent without their summary (as
        // `agent.context_messages` leaves out older ones) when the compaction fails; this
        // run's own rounds may not: the model would lose its work.
        let lost_rounds = dropped_rounds(request, &plan);
        let fallback = (lost_rounds == 0).then(|| (first.messages(), first.tools()));
        drop(first);
        if let Err(reason) = self
            .compact(request, &plan, budget, counter, &before, round, endpoint)
            .await
        {
            tracing::warn!(
                run = self.context.request_id.as_deref().unwrap_or("-"),
                round,
                "the compaction failed; sending the request without the older part: {reason}"
            );
            return fallback.ok_or(OpenAiError::RoundsOverflow {
                rounds: lost_rounds,
                limit: budget.limit(),
            });
        }
        let after = fit(request, budget, counter).map_err(OpenAiError::TooBig)?;
        if let Some(plan) = &after.compaction {
            let rounds = dropped_rounds(request, plan);
            if rounds > 0 {
                return Err(OpenAiError::RoundsOverflow {
                    rounds,
                    limit: budget.limit(),
                });
            }
        }
        Ok((after.messages(), after.tools()))
    }

    /// Compacts the plan's entries into the request's summary: the model's summary, guarded,
    /// stored for the session, `context.compacted` published. On an error nothing changed.
    #[allow(clippy::too_many_arguments)]
    async fn compact(
        &self,
        request: &mut Request,
        plan: &CompactionPlan,
        budget: &Budget,
        counter: &Memo<Tiktoken>,
        before: &FitReport,
        round: usize,
        endpoint: &Endpoint<'_>,
    ) -> Result<(), String> {
        // A summary takes at most an eighth of what a request may carry (2,000 tokens at most).
        let settings = CompactionSettings {
            summary_tokens: (budget.limit() / 8).clamp(256, 2_000),
            ..CompactionSettings::default()
        };
        let job = compact::prepare(request, plan, budget, &settings, counter)
            .map_err(|e| e.to_string())?;
        let outcome = job
            .run(counter, |req| endpoint.summarise(req))
            .await
            .map_err(|e| e.to_string())?;
        let summary_tokens =
            switchboard_context::TokenCounter::count(counter, &outcome.summary.text);
        compact::apply(request, plan, outcome.summary.clone()).map_err(|e| e.to_string())?;
        if let Some(memory) = self.memory {
            super::summaries::save(
                memory,
                self.summary_session,
                &outcome.summary,
                summary_tokens,
            )
            .await;
        }
        let after = fit(request, budget, counter)
            .map(|f| f.report)
            .unwrap_or_default();
        let compacted = events::Compacted::new(
            before,
            &after,
            &outcome,
            job.summarised_entries(),
            job.skipped_entries(),
        );
        let run = self.context.request_id.as_deref().unwrap_or("-");
        tracing::info!(run, round, ?compacted, "context compacted");
        self.publish_context(
            events::COMPACTED,
            round,
            (compacted.before_tokens, compacted.after_tokens),
            budget,
            json!({
                "summaryTokens": summary_tokens,
                "summarisedEntries": compacted.summarised_entries,
                "skippedEntries": compacted.skipped_entries,
                "calls": compacted.calls,
                "retries": compacted.retries,
                "keptByGuard": outcome.kept_by_guard.iter().map(ToString::to_string).collect::<Vec<_>>(),
            }),
        );
        Ok(())
    }

    fn publish_pruned(&self, report: &FitReport, budget: &Budget, round: usize) {
        let Some(pruned) = events::Pruned::from_report(report) else {
            return;
        };
        let run = self.context.request_id.as_deref().unwrap_or("-");
        tracing::debug!(run, round, ?pruned, "context pruned");
        self.publish_context(
            events::PRUNED,
            round,
            (pruned.before_tokens, pruned.after_tokens),
            budget,
            json!({
                "prunedResults": pruned.pruned_results,
                "prunedChars": pruned.pruned_chars,
                "droppedMessages": pruned.dropped_entries,
            }),
        );
    }

    /// Publishes what a round did to this run's context (`kind`): the request's tokens
    /// before and after against the limit, then the event's own `fields`.
    fn publish_context(
        &self,
        kind: &'static str,
        round: usize,
        (before, after): (usize, usize),
        budget: &Budget,
        fields: Value,
    ) {
        let mut event = json!({
            "run": self.context.request_id,
            "round": round,
            "beforeTokens": before,
            "afterTokens": after,
            "limitTokens": budget.limit(),
        });
        if let (Some(event), Value::Object(fields)) = (event.as_object_mut(), fields) {
            event.extend(fields);
        }
        self.core.events().publish(kind, Some(self.session), event);
    }
}

/// This run's tool rounds among the entries a fit had to leave out.
fn dropped_rounds(request: &Request, plan: &CompactionPlan) -> usize {
    plan.entries[..plan.dropped.min(plan.entries.len())]
        .iter()
        .filter(|&&i| matches!(request.entries.get(i), Some(Entry::Round(_))))
        .count()
}

/// The callable a function name stands for (`surface__messages__list` → `surface.messages.list`).
fn callable_of(by_function: &HashMap<String, String>, name: &str) -> String {
    by_function
        .get(name)
        .cloned()
        .unwrap_or_else(|| name.replace("__", "."))
}

/// The assistant message of a chat completion: read whole, or assembled from a stream of
/// `data:` events (text published to `draft` as it comes) when the server streams.
async fn read_message(
    mut response: reqwest::Response,
    url: &str,
    draft: Option<&DraftSender>,
) -> Result<(Value, Option<Value>), OpenAiError> {
    let unreachable = |source| OpenAiError::Unreachable {
        url: url.to_owned(),
        source,
    };
    let status = response.status();
    let streams = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !status.is_success() || !streams || draft.is_none() {
        let text = response.text().await.map_err(unreachable)?;
        if !status.is_success() {
            return Err(OpenAiError::Status {
                status: status.as_u16(),
                body: excerpt(&text),
            });
        }
        let completion: Value = serde_json::from_str(&text)
            .map_err(|e| OpenAiError::Malformed(format!("{e}: {}", excerpt(&text))))?;
        let usage = completion.get("usage").filter(|u| u.is_object()).cloned();
        return completion
            .pointer("/choices/0/message")
            .cloned()
            .map(|message| (message, usage))
            .ok_or_else(|| {
                OpenAiError::Malformed(format!("no choices[0].message in {}", excerpt(&text)))
            });
    }
    let mut assembled = StreamedMessage::default();
    let mut pending: Vec<u8> = Vec::new();
    let mut total = 0usize;
    while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
        total += chunk.len();
        if total > MAX_STREAM_BYTES {
            return Err(OpenAiError::Malformed(format!(
                "the streamed answer passed {MAX_STREAM_BYTES} bytes"
            )));
        }
        pending.extend_from_slice(&chunk);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            if assembled.event(&String::from_utf8_lossy(&line))? {
                let usage = assembled.usage.take();
                return Ok((assembled.finish(), usage));
            }
        }
        if pending.len() > MAX_STREAM_LINE {
            return Err(OpenAiError::Malformed(format!(
                "a streamed line passed {MAX_STREAM_LINE} bytes"
            )));
        }
        if let Some(draft) = draft {
            if assembled.grew {
                assembled.grew = false;
                let text = assembled.content.clone();
                draft.send_modify(|state| {
                    state.text = text;
                    state.progress = None;
                });
            }
        }
    }
    if !pending.is_empty() {
        assembled.event(&String::from_utf8_lossy(&pending))?;
    }
    let usage = assembled.usage.take();
    Ok((assembled.finish(), usage))
}

/// An assistant message assembled from streamed deltas.
#[derive(Default)]
struct StreamedMessage {
    content: String,
    /// Tool calls by their `index`: id, name, arguments so far.
    calls: Vec<(String, String, String)>,
    /// Whether `content` grew since it was last published.
    grew: bool,
    /// The `usage` a chunk carried (the last one, with `stream_options.include_usage`).
    usage: Option<Value>,
}

impl StreamedMessage {
    /// One line of the event stream; true at `data: [DONE]`.
    fn event(&mut self, line: &str) -> Result<bool, OpenAiError> {
        let Some(data) = line.trim().strip_prefix("data:") else {
            // Comments, `event:` and `id:` lines, blank separators.
            return Ok(false);
        };
        let data = data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        let event: Value = serde_json::from_str(data)
            .map_err(|e| OpenAiError::Malformed(format!("{e}: {}", excerpt(data))))?;
        if let Some(usage) = event.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage.clone());
        }
        let Some(delta) = event.pointer("/choices/0/delta") else {
            return Ok(false);
        };
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            if !text.is_empty() {
                self.content.push_str(text);
                self.grew = true;
            }
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            let index = call.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
            if index >= MAX_STREAM_TOOL_CALLS {
                return Err(OpenAiError::Malformed(format!(
                    "tool call index {index} (at most {MAX_STREAM_TOOL_CALLS} calls)"
                )));
            }
            if self.calls.len() <= index {
                self.calls.resize(index + 1, Default::default());
            }
            let slot = &mut self.calls[index];
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                slot.0.push_str(id);
            }
            if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                slot.1.push_str(name);
            }
            if let Some(arguments) = call.pointer("/function/arguments").and_then(Value::as_str) {
                slot.2.push_str(arguments);
            }
        }
        Ok(false)
    }

    fn finish(self) -> Value {
        let mut message = json!({"role": "assistant", "content": self.content});
        if !self.calls.is_empty() {
            message["tool_calls"] = Value::Array(
                self.calls
                    .into_iter()
                    .map(|(id, name, arguments)| {
                        json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
                    })
                    .collect(),
            );
        }
        message
    }
}

/// A short line for the draft while tools run: "using surface.messages.list in #ops".
fn progress_for(core: &Core, calls: &[Value]) -> String {
    let described: Vec<String> = calls
        .iter()
        .take(3)
        .map(|call| {
            let name = call
                .pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or("a tool")
                .replace("__", ".");
            let session = call
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .and_then(|a| serde_json::from_str::<Value>(a).ok())
                .and_then(|a| {
                    a.get("sessionId")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                });
            match session {
                Some(session) => format!("{name} in {}", core.readable(&session)),
                None => name,
            }
        })
        .collect();
    format!("using {}", described.join(", "))
}

/// The tool calls of one model message, each through the full policy path; one result (or
/// typed error) per call, as JSON text, in their order. Several calls run as a batch
/// ([`Core::call_batch`]): at once, each on its own, one refusal failing no other.
async fn run_tools(
    core: &Core,
    context: &CallContext,
    by_function: &HashMap<String, String>,
    calls: &[Value],
) -> Vec<String> {
    if let [call] = calls {
        return vec![match prepare(context, by_function, call) {
            Ok(call) => answer_text(core.call(&call.context, &call.tool, call.input).await),
            Err(refused) => refused,
        }];
    }
    let prepared: Vec<Result<BatchCall, String>> = calls
        .iter()
        .enumerate()
        .map(|(index, call)| {
            if index < protocol::MAX_BATCH_CALLS {
                prepare(context, by_function, call)
            } else {
                Err(error_text(&switchboard_engine::ToolError::usage(
                    ErrorCode::TooManyCalls,
                    format!(
                        "at most {} tool calls run from one message; ask again for the rest",
                        protocol::MAX_BATCH_CALLS
                    ),
                )))
            }
        })
        .collect();
    let runnable: Vec<BatchCall> = prepared
        .iter()
        .filter_map(|call| call.as_ref().ok().cloned())
        .collect();
    let mut ran = core
        .call_batch(runnable, protocol::DEFAULT_BATCH_CONCURRENCY)
        .await
        .into_iter();
    prepared
        .into_iter()
        .map(|call| match call {
            Ok(_) => ran.next().map_or_else(
                || {
                    error_text(&switchboard_engine::ToolError::internal(
                        "a tool call lost its result",
                    ))
                },
                answer_text,
            ),
            Err(refused) => refused,
        })
        .collect()
}

/// One model call's usage: `prompt_tokens` / `completion_tokens` as the model reported them,
/// else estimated from the request's and the answer's length, and marked so.
fn usage_of(
    reported: Option<&Value>,
    request: &Value,
    message: &Value,
) -> switchboard_usage::Usage {
    let field = |name: &str| reported.and_then(|u| u.get(name)).and_then(Value::as_u64);
    if let (Some(prompt), Some(completion)) = (field("prompt_tokens"), field("completion_tokens")) {
        return switchboard_usage::Usage::reported(prompt, completion);
    }
    let prompt_chars = request.get("messages").map_or(0, |m| m.to_string().len()) as u64;
    let completion_chars = message
        .get("content")
        .and_then(Value::as_str)
        .map_or(0, str::len)
        + message.get("tool_calls").map_or(0, |c| c.to_string().len());
    switchboard_usage::Usage::estimate(prompt_chars, completion_chars as u64)
}

fn answer_text(
    result: Result<switchboard_engine::ToolOutput, switchboard_engine::ToolError>,
) -> String {
    match result {
        Ok(output) => {
            crate::scheduled::answered(&output);
            format!("{{\"ok\":true,\"value\":{}}}", output.get())
        }
        Err(error) => error_text(&error),
    }
}

fn error_text(error: &switchboard_engine::ToolError) -> String {
    serde_json::to_string(&error.body()).unwrap_or_default()
}

/// A model's tool call as a call: the callable, the parsed arguments, the context with the
/// call's id. Arguments that are not JSON are refused (as the text the model gets back).
fn prepare(
    context: &CallContext,
    by_function: &HashMap<String, String>,
    call: &Value,
) -> Result<BatchCall, String> {
    let name = call
        .pointer("/function/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let tool_id = callable_of(by_function, name);
    let arguments = call
        .pointer("/function/arguments")
        .and_then(Value::as_str)
        .unwrap_or("{}");
    let input: Value = match serde_json::from_str(if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    }) {
        Ok(value) => value,
        Err(error) => {
            return Err(error_text(&switchboard_engine::ToolError::usage(
                ErrorCode::InvalidArguments,
                format!("the arguments are not JSON: {error}"),
            )));
        }
    };
    let mut context = context.clone();
    context.tool_call_id = call.get("id").and_then(Value::as_str).map(str::to_owned);
    Ok(BatchCall {
        context,
        tool: tool_id,
        input,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_names_round_trip_through_the_allowed_alphabet() {
        let name = function_name("surface.messages.send");
        assert_eq!(name, "surface__messages__send");
        assert!(name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
    }
}
