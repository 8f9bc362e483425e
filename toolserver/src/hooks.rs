//! Hooks: the operator's own commands in the pipeline. A before-hook sees a call after the
//! permission stage and may refuse it or rewrite its input; an after-hook sees the answer and
//! may transform it.
//!
//! A hook gets the call as JSON on stdin — `{"tool", "input", "caller", "sessions", "run"}`
//! (after-hooks also get `"output"`) — and answers JSON on stdout: before-hooks
//! `{"allow": true}`, `{"allow": false, "reason": "..."}` or `{"allow": true, "input": {...}}`;
//! after-hooks `{"output": ...}`, or nothing to pass the answer through. A hook that exits
//! non-zero, prints something else, or overruns its `timeout_ms` has failed: the call is refused
//! (`hooks.on_error = "deny"`, the default) or goes on (`"allow"`). Hooks start from an empty
//! environment (nothing of switchboard's leaks) and are killed when they overrun.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use switchboard_config::Hook;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Most bytes of a hook's answer that are read.
const MAX_ANSWER: u64 = 1024 * 1024;

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
    /// It did not answer within its timeout (it was killed).
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
    /// Its answer is not the JSON hooks answer with.
    #[error("hook {program} answered something that is not a hook answer: {why}")]
    BadAnswer {
        /// The program.
        program: String,
        /// What was wrong.
        why: String,
    },
}

/// Runs `hook` with `call` on stdin; its stdout, parsed as JSON (`Null` when empty).
async fn run(hook: &Hook, call: &Value) -> Result<Value, HookError> {
    let program = hook.command.first().cloned().unwrap_or_default();
    let mut child = tokio::process::Command::new(&program)
        .args(&hook.command[1..])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| HookError::Spawn {
            program: program.clone(),
            why: error.to_string(),
        })?;
    let input = serde_json::to_vec(call).unwrap_or_default();
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let exchange = async {
        if let Some(stdin) = stdin.as_mut() {
            // A hook that does not read its input is fine; a closed pipe is not a failure.
            let _ = stdin.write_all(&input).await;
        }
        drop(stdin);
        let mut answer = Vec::new();
        if let Some(stdout) = stdout.as_mut() {
            let _ = stdout.take(MAX_ANSWER).read_to_end(&mut answer).await;
        }
        let status = child.wait().await;
        (answer, status)
    };
    let (answer, status) = tokio::time::timeout(hook.timeout, exchange)
        .await
        .map_err(|_| HookError::Timeout {
            program: program.clone(),
            after: hook.timeout,
        })?;
    match status {
        Ok(status) if status.success() => {}
        Ok(status) => {
            return Err(HookError::Failed {
                program,
                status: status.to_string(),
            })
        }
        Err(error) => {
            return Err(HookError::Failed {
                program,
                status: error.to_string(),
            })
        }
    }
    if answer.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&answer).map_err(|error| HookError::BadAnswer {
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
