//! Hooks: the operator's own commands in the pipeline. A before-hook sees a call after the
//! permission stage and may refuse it or rewrite its input; an after-hook sees the answer and
//! may transform it.
//!
//! A hook gets the call as JSON on stdin — `{"tool", "input", "caller", "sessions", "run"}`
//! (after-hooks also get `"output"`) — and answers JSON on stdout: before-hooks
//! `{"allow": true}`, `{"allow": false, "reason": "..."}` or `{"allow": true, "input": {...}}`;
//! after-hooks `{"output": ...}`, or nothing to pass the answer through. A hook that exits
//! non-zero, prints something else, or overruns its `timeout_ms` has failed: the call is refused
//! (`hooks.on_error = "deny"`, the default) or goes on (`"allow"`). So has one that answers more
//! than a mebibyte, as soon as it does. Hooks start from an empty environment (nothing of
//! switchboard's leaks) and run in a process group of their own ([`process_group`]), killed
//! whole when they overrun, overflow, or exit (nothing they started outlives them).
//!
//! A prompt hook (`[[hooks.prompt]]`, [`prompt`]) runs the same way before each request the
//! built-in `openai` runner sends to the model. It gets `{"hook": "prompt", "session", "run",
//! "model", "round", "messages"}` (`messages`: the request's chat messages as they would be
//! sent, the system message first) and answers nothing or `{}` (send as is),
//! `{"system": "..."}` (the system message's new text) and/or `{"messages": [...]}` (the whole
//! new list: objects with a `role` of `system`, `user`, `assistant` or `tool`). Anything else
//! is a failed hook; what a failure means is the runner's (`required`).

use std::time::Duration;

use process_group::{run_command, CommandSpec, Overflow, RunOutcome, RunnerError, MAX_OUTPUT};
use serde_json::Value;
use switchboard_config::{Hook, PromptHook};

/// What a before-hook said.
#[derive(Debug, Clone, PartialEq)]
pub enum BeforeAnswer {
    /// Go on.
    Allow,
    /// Go on with this input instead (checked again against the callable's schema).
    Rewrite(Value),
    /// Refuse, saying why.
    Refuse(String),
}

/// Why a hook failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookError {
    /// The program could not start.
    #[error("hook {program} could not start: {why}")]
    Spawn {
        /// The program.
        program: String,
        /// What the system said.
        why: String,
    },
    /// It did not answer within its timeout (its process group was killed).
    #[error("hook {program} did not answer within {} ms", .after.as_millis())]
    Timeout {
        /// The program.
        program: String,
        /// Its timeout.
        after: Duration,
    },
    /// It exited with a failure status.
    #[error("hook {program} exited with {status}")]
    Failed {
        /// The program.
        program: String,
        /// How it exited.
        status: String,
    },
    /// Its answer passed the size limit (its process group was killed as soon as it did).
    #[error("hook {program} answered more than {limit} bytes; a hook answers a short JSON object")]
    TooLarge {
        /// The program.
        program: String,
        /// The limit, in bytes.
        limit: usize,
    },
    /// Its answer is not the JSON hooks answer with.
    #[error("hook {program} answered something that is not a hook answer: {why}")]
    BadAnswer {
        /// The program.
        program: String,
        /// What was wrong.
        why: String,
    },
}

/// Runs `hook` with `call` on stdin, in a process group of its own that is killed whole when
/// the hook ends, overruns `timeout_ms` or answers more than [`MAX_OUTPUT`] bytes (at once,
/// without waiting for the timeout); its stdout, parsed as JSON (`Null` when empty).
async fn run(hook: &Hook, call: &Value) -> Result<Value, HookError> {
    run_program(&hook.command, hook.timeout, call).await
}

/// [`run`] for any hook's command line and timeout.
async fn run_program(
    command: &[String],
    timeout: Duration,
    call: &Value,
) -> Result<Value, HookError> {
    let program = command.first().cloned().unwrap_or_default();
    let spec = CommandSpec {
        overflow: Overflow::Fail,
        ..CommandSpec::new(
            program.clone(),
            command.get(1..).unwrap_or_default().to_vec(),
            timeout,
        )
    };
    let input = serde_json::to_string(call).unwrap_or_default();
    let outcome = run_command(&spec, &input, std::future::pending())
        .await
        .map_err(|error| match error {
            RunnerError::Spawn { source, .. } => HookError::Spawn {
                program: program.clone(),
                why: source.to_string(),
            },
            RunnerError::Io(error) => HookError::Failed {
                program: program.clone(),
                status: error.to_string(),
            },
        })?;
    let answer = match outcome {
        RunOutcome::Exited {
            code: Some(0),
            stdout,
            ..
        } => stdout,
        RunOutcome::Exited { code, .. } => {
            return Err(HookError::Failed {
                program,
                status: code.map_or_else(
                    || "a signal".to_owned(),
                    |code| format!("exit status {code}"),
                ),
            })
        }
        RunOutcome::TimedOut { .. } | RunOutcome::Aborted { .. } => {
            return Err(HookError::Timeout {
                program,
                after: timeout,
            })
        }
        RunOutcome::Overflowed { .. } => {
            return Err(HookError::TooLarge {
                program,
                limit: MAX_OUTPUT,
            })
        }
    };
    if answer.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(&answer).map_err(|error| HookError::BadAnswer {
        program,
        why: error.to_string(),
    })
}

/// Runs a before-hook.
pub async fn before(hook: &Hook, call: &Value) -> Result<BeforeAnswer, HookError> {
    let program = hook.command.first().cloned().unwrap_or_default();
    let answer = run(hook, call).await?;
    let bad = |why: &str| HookError::BadAnswer {
        program: program.clone(),
        why: why.to_owned(),
    };
    match answer.get("allow").and_then(Value::as_bool) {
        Some(true) => match answer.get("input") {
            Some(input) if input.is_object() => Ok(BeforeAnswer::Rewrite(input.clone())),
            Some(_) => Err(bad("\"input\" must be an object")),
            None => Ok(BeforeAnswer::Allow),
        },
        Some(false) => Ok(BeforeAnswer::Refuse(
            answer
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("a hook refused this call")
                .to_owned(),
        )),
        None => Err(bad("expected {\"allow\": true|false, ...}")),
    }
}

/// What a prompt hook said: each `Some` replaces that part of the request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PromptAnswer {
    /// The system message's new text.
    pub system: Option<String>,
    /// The request's new messages, whole.
    pub messages: Option<Vec<Value>>,
}

/// The roles a prompt hook's messages may have.
const PROMPT_ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];

/// Runs a prompt hook (`[[hooks.prompt]]`) with `request` on stdin.
pub async fn prompt(hook: &PromptHook, request: &Value) -> Result<PromptAnswer, HookError> {
    let program = hook.command.first().cloned().unwrap_or_default();
    let answer = run_program(&hook.command, hook.timeout, request).await?;
    let bad = |why: String| HookError::BadAnswer {
        program: program.clone(),
        why,
    };
    let mut map = match answer {
        Value::Null => return Ok(PromptAnswer::default()),
        Value::Object(map) => map,
        _ => {
            return Err(bad(
                "expected {\"system\": \"...\"} and/or {\"messages\": [...]}, or nothing"
                    .to_owned(),
            ))
        }
    };
    if let Some(unknown) = map.keys().find(|k| *k != "system" && *k != "messages") {
        return Err(bad(format!(
            "unknown key \"{unknown}\": a prompt hook answers \"system\" and/or \"messages\""
        )));
    }
    let system = match map.remove("system") {
        None => None,
        Some(Value::String(text)) => Some(text),
        Some(_) => return Err(bad("\"system\" must be a string".to_owned())),
    };
    let messages = match map.remove("messages") {
        None => None,
        Some(Value::Array(messages)) => {
            if messages.is_empty() {
                return Err(bad(
                    "\"messages\" is empty; a request needs at least one".to_owned()
                ));
            }
            for (index, message) in messages.iter().enumerate() {
                let role = message.get("role").and_then(Value::as_str);
                if !role.is_some_and(|role| PROMPT_ROLES.contains(&role)) {
                    return Err(bad(format!(
                        "messages[{index}] needs a \"role\" of system, user, assistant or tool"
                    )));
                }
                if !matches!(
                    message.get("content"),
                    Some(Value::String(_) | Value::Null) | None
                ) {
                    return Err(bad(format!(
                        "messages[{index}].content must be a string or null"
                    )));
                }
            }
            Some(messages)
        }
        Some(_) => return Err(bad("\"messages\" must be an array".to_owned())),
    };
    Ok(PromptAnswer { system, messages })
}

/// Runs an after-hook: `Some` replaces the answer.
pub async fn after(hook: &Hook, call: &Value) -> Result<Option<Value>, HookError> {
    let answer = run(hook, call).await?;
    match answer {
        Value::Null => Ok(None),
        Value::Object(mut map) => Ok(map.remove("output")),
        _ => Err(HookError::BadAnswer {
            program: hook.command.first().cloned().unwrap_or_default(),
            why: "expected {\"output\": ...} or nothing".to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hook(script: &str, timeout_ms: u64) -> Hook {
        Hook {
            tool: "*".into(),
            command: vec!["/bin/sh".into(), "-c".into(), script.into()],
            timeout: Duration::from_millis(timeout_ms),
        }
    }

    fn prompt_hook(script: &str, timeout_ms: u64) -> PromptHook {
        PromptHook {
            command: vec!["/bin/sh".into(), "-c".into(), script.into()],
            timeout: Duration::from_millis(timeout_ms),
            required: false,
        }
    }

    #[tokio::test]
    async fn a_prompt_hook_rewrites_the_system_prompt_and_the_messages() {
        let request = json!({"hook": "prompt", "messages": [{"role": "system", "content": "s"}]});
        let nothing = prompt(&prompt_hook("cat >/dev/null", 5000), &request).await;
        assert_eq!(nothing, Ok(PromptAnswer::default()));
        let system = prompt(
            &prompt_hook("cat >/dev/null; echo '{\"system\":\"be brief\"}'", 5000),
            &request,
        )
        .await
        .expect("an answer");
        assert_eq!(system.system.as_deref(), Some("be brief"));
        // The hook reads the request: it echoes its messages back with one more.
        let rewritten = prompt(
            &prompt_hook(
                "python3 -c 'import json,sys; r=json.load(sys.stdin); m=r[\"messages\"]+[{\"role\":\"user\",\"content\":\"more\"}]; print(json.dumps({\"messages\": m}))'",
                5000,
            ),
            &request,
        )
        .await
        .expect("an answer");
        assert_eq!(
            rewritten.messages,
            Some(vec![
                json!({"role": "system", "content": "s"}),
                json!({"role": "user", "content": "more"})
            ])
        );
    }

    #[tokio::test]
    async fn a_prompt_hooks_garbage_is_a_failure_saying_what_was_wrong() {
        let request = json!({"messages": []});
        for (answer, says) in [
            ("[1]", "expected"),
            ("{\"system\": 3}", "\"system\" must be a string"),
            ("{\"messages\": {}}", "must be an array"),
            ("{\"messages\": []}", "is empty"),
            (
                "{\"messages\": [{\"role\": \"wizard\"}]}",
                "messages[0] needs a \"role\"",
            ),
            (
                "{\"messages\": [{\"role\": \"user\", \"content\": 1}]}",
                "content must be",
            ),
            ("{\"sytem\": \"x\"}", "unknown key \"sytem\""),
            ("not json", "not a hook answer"),
        ] {
            let script = format!("cat >/dev/null; printf '%s' '{answer}'");
            let error = prompt(&prompt_hook(&script, 5000), &request)
                .await
                .expect_err(answer);
            assert!(error.to_string().contains(says), "{answer}: {error}");
        }
        let slow = prompt(&prompt_hook("sleep 5", 100), &request).await;
        assert!(matches!(slow, Err(HookError::Timeout { .. })), "{slow:?}");
        let failed = prompt(&prompt_hook("exit 3", 5000), &request).await;
        assert!(
            matches!(failed, Err(HookError::Failed { .. })),
            "{failed:?}"
        );
    }

    #[tokio::test]
    async fn before_hooks_allow_refuse_and_rewrite() {
        let call = json!({"tool": "surface.messages.send", "input": {"text": "hi"}});
        assert_eq!(
            before(
                &hook("cat >/dev/null; echo '{\"allow\":true}'", 5000),
                &call
            )
            .await,
            Ok(BeforeAnswer::Allow)
        );
        assert_eq!(
            before(
                &hook(
                    "cat >/dev/null; echo '{\"allow\":false,\"reason\":\"no\"}'",
                    5000
                ),
                &call
            )
            .await,
            Ok(BeforeAnswer::Refuse("no".into()))
        );
        assert_eq!(
            before(
                &hook(
                    "cat >/dev/null; echo '{\"allow\":true,\"input\":{\"text\":\"bye\"}}'",
                    5000
                ),
                &call
            )
            .await,
            Ok(BeforeAnswer::Rewrite(json!({"text": "bye"})))
        );
        // The hook sees the call.
        assert_eq!(
            before(&hook("grep -q '\"text\":\"hi\"' && echo '{\"allow\":true}' || echo '{\"allow\":false}'", 5000), &call).await,
            Ok(BeforeAnswer::Allow)
        );
    }

    #[tokio::test]
    async fn failing_hooks_are_errors_not_answers() {
        let call = json!({});
        assert!(matches!(
            before(&hook("exit 3", 5000), &call).await,
            Err(HookError::Failed { .. })
        ));
        assert!(matches!(
            before(&hook("echo nonsense", 5000), &call).await,
            Err(HookError::BadAnswer { .. })
        ));
        assert!(matches!(
            before(&hook("echo '{}'", 5000), &call).await,
            Err(HookError::BadAnswer { .. })
        ));
        assert!(matches!(
            before(&hook("sleep 5", 100), &call).await,
            Err(HookError::Timeout { .. })
        ));
        let missing = Hook {
            tool: "*".into(),
            command: vec!["/definitely/not/here".into()],
            timeout: Duration::from_secs(1),
        };
        assert!(matches!(
            before(&missing, &call).await,
            Err(HookError::Spawn { .. })
        ));
    }

    #[tokio::test]
    async fn an_answer_over_a_mebibyte_fails_at_once_not_at_the_timeout() {
        let started = std::time::Instant::now();
        let answer = before(
            &hook("cat >/dev/null; yes | head -c 2000000; sleep 60", 60_000),
            &json!({}),
        )
        .await;
        assert!(
            matches!(answer, Err(HookError::TooLarge { .. })),
            "{answer:?}"
        );
        // Generous: the point is that it does not wait for the 60 s timeout.
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn after_hooks_transform_or_pass_through() {
        let call = json!({"output": {"ok": true}});
        assert_eq!(after(&hook("cat >/dev/null", 5000), &call).await, Ok(None));
        assert_eq!(
            after(
                &hook(
                    "cat >/dev/null; echo '{\"output\":{\"masked\":true}}'",
                    5000
                ),
                &call
            )
            .await,
            Ok(Some(json!({"masked": true})))
        );
    }
}
