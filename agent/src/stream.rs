//! A reply shown while it is written (`agent.stream = "edit"`): after the first text or
//! progress line, a draft is posted as a reply to the trigger and edited as the answer grows,
//! at most once per `agent.stream_interval_ms`. The final answer replaces the draft in place
//! when it fits one message; otherwise the draft is removed and the parts follow as new
//! messages (so Discord marks them unread).
//!
//! Runners publish into a [`watch`] channel — only the latest state is kept, so a fast model
//! can never queue up edits — and one task per run turns it into posts and edits through
//! [`Core::call`] (the pipeline: allowlist, rate limits, audit). An edit refused by the
//! channel's rate limit is simply retried at the next tick with the newer text.

use std::sync::Arc;
use std::time::Duration;

use entity::Snowflake;
use serde_json::json;
use switchboard_engine::auth::Caller;
use switchboard_engine::runs::{RunGate, Trigger};
use switchboard_engine::{CallContext, Core, Front};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Characters of a draft shown while the answer is written (well under 2,000, so mentions
/// that grow in the outbound rewrite still fit).
pub const DRAFT_CHARS: usize = 1_800;
/// Characters of a progress line.
pub const PROGRESS_CHARS: usize = 200;

/// What a run has shown so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DraftState {
    /// The answer's text so far.
    pub text: String,
    /// What the agent is doing now ("looking at #ops…"); cleared when more text arrives.
    pub progress: Option<String>,
}

impl DraftState {
    /// What the draft message says: the text (cut to [`DRAFT_CHARS`]) and the progress line
    /// in italics under it; `None` while there is nothing to show.
    pub fn render(&self) -> Option<String> {
        let text = self.text.trim();
        let progress = self
            .progress
            .as_deref()
            .map(str::trim)
            .filter(|p| !p.is_empty());
        if text.is_empty() && progress.is_none() {
            return None;
        }
        let mut shown: String = text.chars().take(DRAFT_CHARS).collect();
        if text.chars().count() > DRAFT_CHARS {
            shown.push('…');
        }
        if let Some(progress) = progress {
            if !shown.is_empty() {
                shown.push_str("\n\n");
            }
            let line: String = progress
                .chars()
                .filter(|c| !c.is_control())
                .take(PROGRESS_CHARS)
                .collect();
            shown.push_str(&format!("_{}…_", line.replace('_', "\\_")));
        }
        Some(shown)
    }
}

/// A progress line as runners write it: `progress: <text>` (from a command agent's stderr).
pub fn progress_line(line: &str) -> Option<&str> {
    line.strip_prefix("progress:")
        .map(str::trim)
        .filter(|text| !text.is_empty())
}

/// The draft of one run: a task that follows the run's [`DraftState`] until the sender is
/// dropped, then hands back the draft message's id (if it posted one).
pub struct Draft {
    sender: Arc<watch::Sender<DraftState>>,
    task: JoinHandle<Option<Snowflake>>,
    core: Arc<Core>,
    trigger: Trigger,
    /// The run's answer context ([`Voice::context`]): the draft is the run's.
    context: CallContext,
}

impl Draft {
    /// Starts following a run's progress for `trigger`, showing it at most once per
    /// `interval` (the first time at once).
    /// Nothing is shown before `gate` opens (see [`RunGate`]). Every post, edit and removal
    /// is a call with `context` (the run's answer, [`Voice::context`]).
    pub fn start(
        core: Arc<Core>,
        trigger: &Trigger,
        interval: Duration,
        gate: RunGate,
        context: CallContext,
    ) -> Draft {
        let (sender, receiver) = watch::channel(DraftState::default());
        let task = tokio::spawn(follow(
            Arc::clone(&core),
            trigger.clone(),
            receiver,
            interval,
            gate,
            context.clone(),
        ));
        Draft {
            sender: Arc::new(sender),
            task,
            core,
            trigger: trigger.clone(),
            context,
        }
    }

    /// Where the runner publishes what it has so far.
    pub fn sender(&self) -> Arc<watch::Sender<DraftState>> {
        Arc::clone(&self.sender)
    }

    /// Stops following and settles the draft with the final answer: `Some(text)` edits the
    /// draft into it when it fits one message (true: done, nothing more to post); otherwise,
    /// and for `None` (no reply, or a failure), the draft is removed and false says the
    /// answer is still to be posted.
    pub async fn finish(self, answer: Option<&str>, max_chars: usize) -> bool {
        let Draft {
            sender,
            task,
            core,
            trigger,
            context,
        } = self;
        drop(sender);
        let posted = match task.await {
            Ok(posted) => posted,
            Err(error) => {
                tracing::debug!(%error, "the draft task ended abnormally");
                None
            }
        };
        let Some(message_id) = posted else {
            return false;
        };
        if let Some(answer) = answer.filter(|a| a.chars().count() <= max_chars) {
            let edited = core
                .call(
                    &context,
                    "surface.messages.edit",
                    json!({
                        "sessionId": trigger.channel_id.to_string(),
                        "messageId": message_id.to_string(),
                        "text": answer,
                    }),
                )
                .await;
            match edited {
                Ok(_) => {
                    crate::scheduled::posted(message_id);
                    return true;
                }
                Err(error) => {
                    tracing::warn!(code = %error.code, message = %error.message, "editing the draft into the answer failed; posting it instead");
                }
            }
        }
        let deleted = core
            .call(
                &context,
                "surface.messages.delete",
                json!({
                    "sessionId": trigger.channel_id.to_string(),
                    "messageId": message_id.to_string(),
                }),
            )
            .await;
        if let Err(error) = deleted {
            tracing::debug!(code = %error.code, "removing the draft failed");
        }
        false
    }
}

/// How a run shows its own answer — the reply, the draft, the ⏳/✅ on its trigger, typing:
/// as the run (its capability is the caller, so the audit log names the run), through
/// [`Front::RunAnswer`], which lets these calls show the answer in the run's own session
/// whatever the session's scope and the rules say of the run's explicit calls.
#[derive(Clone)]
pub struct Voice {
    caller: Caller,
    run_id: String,
}

impl Voice {
    /// The voice of the run `run_id` whose capability is `caller`.
    pub fn new(caller: Caller, run_id: &str) -> Voice {
        Voice {
            caller,
            run_id: run_id.to_owned(),
        }
    }

    /// The context of the run's answer in `session`.
    pub fn context(&self, session: Snowflake) -> CallContext {
        CallContext {
            caller: self.caller.clone(),
            request_id: Some(self.run_id.clone()),
            session_ref: Some(session.to_string()),
            client: Some("discord".to_owned()),
            front: Front::RunAnswer,
            ..CallContext::operator()
        }
    }
}

/// The context of switchboard's own posts outside a run (a full queue's notice, the loop
/// guard's, a thread for the answer): the operator, acting in the trigger's session.
pub fn reply_context(trigger: &Trigger) -> CallContext {
    CallContext {
        session_ref: Some(trigger.channel_id.to_string()),
        client: Some("discord".to_owned()),
        ..CallContext::operator()
    }
}

async fn follow(
    core: Arc<Core>,
    trigger: Trigger,
    mut receiver: watch::Receiver<DraftState>,
    interval: Duration,
    gate: RunGate,
    context: CallContext,
) -> Option<Snowflake> {
    let mut posted: Option<Snowflake> = None;
    let mut shown: Option<String> = None;
    let mut next_at = Instant::now();
    // Each round waits for a change, then for the interval since the last show, absorbing
    // newer states meanwhile. When the run ends (the sender is dropped) the final answer
    // settles the draft, so the last partial state is not shown.
    while receiver.changed().await.is_ok() {
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next_at) => break,
                changed = receiver.changed() => if changed.is_err() {
                    return posted;
                },
            }
        }
        let Some(text) = receiver.borrow_and_update().render() else {
            continue;
        };
        if shown.as_deref() == Some(text.as_str()) {
            continue;
        }
        if posted.is_none() && !gate.opened().await {
            return None;
        }
        next_at = Instant::now() + interval;
        match show(&core, &context, &trigger, posted, &text).await {
            Ok(id) => {
                posted = Some(id);
                shown = Some(text);
            }
            Err(error) => {
                tracing::debug!(code = %error.code, message = %error.message, "showing the draft failed; retrying with the next state");
            }
        }
    }
    posted
}

async fn show(
    core: &Core,
    context: &CallContext,
    trigger: &Trigger,
    posted: Option<Snowflake>,
    text: &str,
) -> Result<Snowflake, switchboard_engine::ToolError> {
    match posted {
        Some(message_id) => {
            core.call(
                context,
                "surface.messages.edit",
                json!({
                    "sessionId": trigger.channel_id.to_string(),
                    "messageId": message_id.to_string(),
                    "text": text,
                }),
            )
            .await?;
            Ok(message_id)
        }
        None => {
            let mut input = json!({
                "sessionId": trigger.channel_id.to_string(),
                "text": text,
                // A draft pings nobody; the final answer is an edit, which never pings either.
                "silent": true,
            });
            if let Some(message_id) = trigger.message_id {
                input["replyToMessageId"] = json!(message_id.to_string());
            }
            let output = core.call(context, "surface.messages.send", input).await?;
            let value: serde_json::Value = serde_json::from_str(output.get())
                .map_err(|e| switchboard_engine::ToolError::internal(e.to_string()))?;
            value["messageIds"][0]
                .as_str()
                .and_then(|id| id.parse::<Snowflake>().ok())
                .ok_or_else(|| {
                    switchboard_engine::ToolError::internal(
                        "the draft's send answered no message id",
                    )
                })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draft_shows_text_then_progress_in_italics_and_nothing_when_empty() {
        assert_eq!(DraftState::default().render(), None);
        let state = DraftState {
            text: "Half an answer".to_owned(),
            progress: Some("looking at #ops".to_owned()),
        };
        assert_eq!(
            state.render().as_deref(),
            Some("Half an answer\n\n_looking at #ops…_")
        );
        let long = DraftState {
            text: "x".repeat(5_000),
            progress: None,
        };
        assert_eq!(
            long.render().map(|t| t.chars().count()),
            Some(DRAFT_CHARS + 1)
        );
    }

    #[test]
    fn progress_lines_are_recognised_and_empty_ones_ignored() {
        assert_eq!(
            progress_line("progress: reading #ops"),
            Some("reading #ops")
        );
        assert_eq!(progress_line("progress:   "), None);
        assert_eq!(progress_line("warning: progress: x"), None);
    }
}
