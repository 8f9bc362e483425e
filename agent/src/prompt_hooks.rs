//! `[[hooks.prompt]]` in the built-in `openai` runner: before each request to the model, the
//! operator's commands see the fitted request's messages and may rewrite the system prompt
//! and the messages ([`switchboard_engine::hooks::prompt`]: the same JSON-over-stdin contract, empty
//! environment, process group and timeouts as the call pipeline's hooks). Hooks run in the
//! order they are listed, each on what the one before left.
//!
//! A hook fails when it cannot start, exits non-zero, overruns its `timeout_ms`, answers
//! garbage, or rewrites the request past the budget (`agent.context_tokens −
//! agent.answer_tokens`, counted as every request is). A failed hook leaves the request as it
//! was (a WARN line and a `hook.failed` event name the hook and why) unless it is `required`:
//! then the run fails, saying so, and the request is not sent. Compaction requests are not
//! shown to prompt hooks: they carry the model's own instructions for summarising.

use serde_json::{json, Value};
use switchboard_context::{count_chat, TokenCounter};
use switchboard_engine::Core;

/// One request's place, for the hooks' input and the failure event.
pub(crate) struct RequestPlace<'a> {
    /// The session the run answers in.
    pub session: entity::Snowflake,
    /// The run's id.
    pub run: &'a str,
    /// `agent.model`.
    pub model: &'a str,
    /// The tool loop's round (0 first).
    pub round: usize,
}

/// Runs every prompt hook on `messages`; `Err` with the reason when a `required` one failed.
pub(crate) async fn apply(
    core: &Core,
    place: &RequestPlace<'_>,
    mut messages: Vec<Value>,
    tools: &[Value],
    limit: usize,
    counter: &dyn TokenCounter,
) -> Result<Vec<Value>, String> {
    let hooks = core.settings().config().hooks.prompt.clone();
    for hook in &hooks {
        let program = hook.command.first().cloned().unwrap_or_default();
        let input = json!({
            "hook": "prompt",
            "session": place.session.to_string(),
            "run": place.run,
            "model": place.model,
            "round": place.round,
            "messages": messages,
        });
        let outcome = match switchboard_engine::hooks::prompt(hook, &input).await {
            Ok(answer) => {
                let rewritten = rewrite(&messages, answer);
                let tokens = count_chat(counter, &rewritten, tools);
                if tokens <= limit {
                    Ok(rewritten)
                } else {
                    Err(format!(
                        "hook {program} rewrote the request to {tokens} tokens, over the {limit} a request may carry (agent.context_tokens − agent.answer_tokens)"
                    ))
                }
            }
            Err(error) => Err(error.to_string()),
        };
        match outcome {
            Ok(rewritten) => messages = rewritten,
            Err(why) if hook.required => {
                tracing::warn!(
                    run = place.run,
                    "a required prompt hook failed; the run stops: {why}"
                );
                return Err(why);
            }
            Err(why) => {
                tracing::warn!(
                    run = place.run,
                    "a prompt hook failed; the request goes as it was: {why}"
                );
                core.events().publish(
                    "hook.failed",
                    Some(place.session),
                    json!({
                        "hook": "prompt",
                        "program": program,
                        "run": place.run,
                        "round": place.round,
                        "error": why,
                    }),
                );
            }
        }
    }
    Ok(messages)
}

/// `messages` with what the hook answered: its whole list, then its system text (which
/// replaces the first system message's text, or becomes the first message).
fn rewrite(messages: &[Value], answer: switchboard_engine::hooks::PromptAnswer) -> Vec<Value> {
    let mut rewritten = answer.messages.unwrap_or_else(|| messages.to_vec());
    if let Some(system) = answer.system {
        match rewritten.first_mut() {
            Some(first) if first["role"] == "system" => first["content"] = Value::String(system),
            _ => rewritten.insert(0, json!({"role": "system", "content": system})),
        }
    }
    rewritten
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_engine::hooks::PromptAnswer;

    #[test]
    fn the_system_text_replaces_the_first_system_message_or_becomes_one() {
        let messages = vec![
            json!({"role": "system", "content": "old"}),
            json!({"role": "user", "content": "hi"}),
        ];
        let answer = PromptAnswer {
            system: Some("new".into()),
            messages: None,
        };
        assert_eq!(rewrite(&messages, answer.clone())[0]["content"], "new");
        let without = PromptAnswer {
            messages: Some(vec![json!({"role": "user", "content": "only"})]),
            ..answer
        };
        let rewritten = rewrite(&messages, without);
        assert_eq!(rewritten.len(), 2);
        assert_eq!(rewritten[0], json!({"role": "system", "content": "new"}));
        assert_eq!(rewritten[1]["content"], "only");
        assert_eq!(rewrite(&messages, PromptAnswer::default()), messages);
    }
}
