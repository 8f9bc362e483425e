//! `runner = "openai"`: an OpenAI-compatible chat endpoint driven by a tool-calling loop.
//!
//! The session transcript becomes the messages; the callables in the run's scope become the
//! `tools` list (the same JSON Schemas the HTTP API serves); every tool call goes through
//! [`Core::call`] with the run's capability — the full policy path — and its result or typed
//! error goes back to the model. The final assistant text is the reply.

use protocol::ErrorCode;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchboard_config::OpenAiRunner;
use toolserver::{BatchCall, CallContext, Core};

use super::prompt::{ChatTurn, Role};

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
        }
    }
}

/// Function names may hold only `[A-Za-z0-9_-]`: `surface.messages.send` → `surface__messages__send`.
fn function_name(tool_id: &str) -> String {
    tool_id.replace('.', "__")
}

fn excerpt(text: &str) -> String {
    text.chars().take(300).collect()
}

/// Runs the conversation to a final answer.
pub async fn answer(
    runner: &OpenAiRunner,
    core: &Core,
    context: &CallContext,
    turns: Vec<ChatTurn>,
    timeout: Duration,
) -> Result<String, OpenAiError> {
    let deadline = Instant::now() + timeout;
    match tokio::time::timeout(timeout, chat_loop(runner, core, context, turns, deadline)).await {
        Ok(result) => result,
        Err(_) => Err(OpenAiError::Timeout(timeout)),
    }
}

async fn chat_loop(
    runner: &OpenAiRunner,
    core: &Core,
    context: &CallContext,
    turns: Vec<ChatTurn>,
    deadline: Instant,
) -> Result<String, OpenAiError> {
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
    let tools: Vec<Value> = entries
        .iter()
        .map(|e| {
            json!({
                "type": "function",
                "function": {
                    "name": function_name(&e.id),
                    "description": e.description,
                    "parameters": e.input_schema,
                }
            })
        })
        .collect();
    let mut messages = vec![json!({"role": "system", "content": runner.system_prompt})];
    messages.extend(turns.into_iter().map(|turn| {
        let role = match turn.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        json!({"role": role, "content": turn.content})
    }));
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|source| OpenAiError::Unreachable {
            url: runner.base_url.clone(),
            source,
        })?;
    let url = format!("{}/chat/completions", runner.base_url.trim_end_matches('/'));
    for round in 0..=runner.max_tool_rounds {
        // The last round offers no tools, so the model has to answer in text.
        let offer_tools = round < runner.max_tool_rounds && !tools.is_empty();
        let mut body = json!({"model": runner.model, "messages": messages});
        if offer_tools {
            body["tools"] = Value::Array(tools.clone());
        }
        let mut request = client
            .post(&url)
            .json(&body)
            .timeout(deadline.saturating_duration_since(Instant::now()));
        if let Some(key) = &key {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .await
            .map_err(|source| OpenAiError::Unreachable {
                url: url.clone(),
                source,
            })?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|source| OpenAiError::Unreachable {
                url: url.clone(),
                source,
            })?;
        if !status.is_success() {
            return Err(OpenAiError::Status {
                status: status.as_u16(),
                body: excerpt(&text),
            });
        }
        let completion: Value = serde_json::from_str(&text)
            .map_err(|e| OpenAiError::Malformed(format!("{e}: {}", excerpt(&text))))?;
        let message = completion
            .pointer("/choices/0/message")
            .cloned()
            .ok_or_else(|| {
                OpenAiError::Malformed(format!("no choices[0].message in {}", excerpt(&text)))
            })?;
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
        messages.push(message);
        let results = run_tools(core, context, &by_function, &calls).await;
        for (call, result) in calls.iter().zip(results) {
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            messages.push(json!({"role": "tool", "tool_call_id": id, "content": result}));
        }
    }
    Err(OpenAiError::Malformed(
        "the model kept calling tools after being offered none".to_owned(),
    ))
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
                Err(error_text(&toolserver::ToolError::usage(
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
                    error_text(&toolserver::ToolError::internal(
                        "a tool call lost its result",
                    ))
                },
                answer_text,
            ),
            Err(refused) => refused,
        })
        .collect()
}

fn answer_text(result: Result<toolserver::ToolOutput, toolserver::ToolError>) -> String {
    match result {
        Ok(output) => format!("{{\"ok\":true,\"value\":{}}}", output.get()),
        Err(error) => error_text(&error),
    }
}

fn error_text(error: &toolserver::ToolError) -> String {
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
    let tool_id = by_function
        .get(name)
        .cloned()
        .unwrap_or_else(|| name.replace("__", "."));
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
            return Err(error_text(&toolserver::ToolError::usage(
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
