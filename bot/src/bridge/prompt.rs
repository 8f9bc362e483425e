//! The prompt a command agent reads on stdin.

use crate::store::{Store, StoredMessage};
use entity::Snowflake;

/// What started a run: a message, or a finished workflow resuming in its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    pub channel_id: Snowflake,
    /// The message the run answers (reactions and the reply go there). For a resumed workflow,
    /// the message whose run created it, when there was one.
    pub message_id: Option<Snowflake>,
    pub author_id: Snowflake,
    pub author_name: String,
    /// The trigger's canonical (readable) text; for a workflow, the resume prompt with the
    /// answers.
    pub text: String,
    /// Set when a finished workflow started this run.
    pub workflow_id: Option<String>,
}

fn line(store: &Store, message: &StoredMessage) -> String {
    let author = store.author_name(message.author_id);
    format!("[{}] {author}: {}", message.timestamp, message.text)
}

/// The trigger, its author, and the last `context` messages of the session as a transcript.
pub fn build(store: &Store, trigger: &Trigger, context: usize) -> String {
    let transcript: Vec<String> = if context == 0 {
        Vec::new()
    } else {
        store
            .messages(trigger.channel_id, context, None, None)
            .iter()
            .map(|m| line(store, m))
            .collect()
    };
    let mut prompt = match (&trigger.workflow_id, trigger.message_id) {
        (Some(workflow), message) => format!(
            "Workflow {workflow} finished; this run continues it in session {channel}{replying}.\n{text}\n",
            channel = trigger.channel_id,
            replying = message.map_or_else(String::new, |m| format!(", replying to message {m}")),
            text = trigger.text,
        ),
        (None, message) => format!(
            "{author} (user id {author_id}) wrote in session {channel}{message}:\n{text}\n",
            author = trigger.author_name,
            author_id = trigger.author_id,
            channel = trigger.channel_id,
            message = message.map_or_else(String::new, |m| format!(" (message {m})")),
            text = trigger.text,
        ),
    };
    if !transcript.is_empty() {
        prompt.push_str(&format!(
            "\nThe last {} messages of the session, oldest first:\n",
            transcript.len()
        ));
        for entry in transcript {
            prompt.push_str(&entry);
            prompt.push('\n');
        }
    }
    prompt.push_str("\nYour standard output is posted as the reply. Print NO_REPLY to post nothing. Use the `tools` command to read or act in Discord (`tools surface.help`).\n");
    prompt
}

/// Who said a turn of a chat conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

/// One turn of the conversation a chat model sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatTurn {
    pub role: Role,
    pub content: String,
}

/// The session transcript as chat turns: the bot's own messages are the assistant's, everyone
/// else's are user turns prefixed with the author's name. The trigger, already stored, is last.
pub fn conversation(
    store: &Store,
    trigger: &Trigger,
    context: usize,
    bot_id: Option<Snowflake>,
) -> Vec<ChatTurn> {
    let mut turns: Vec<ChatTurn> = store
        .messages(trigger.channel_id, context.max(1), None, None)
        .iter()
        .map(|m| {
            if Some(m.author_id) == bot_id {
                ChatTurn {
                    role: Role::Assistant,
                    content: m.text.clone(),
                }
            } else {
                let author = store.author_name(m.author_id);
                ChatTurn {
                    role: Role::User,
                    content: format!("{author}: {}", m.text),
                }
            }
        })
        .collect();
    // A resumed workflow's prompt is not a stored message: it always comes last.
    let trigger_listed = trigger.workflow_id.is_none()
        && trigger
            .message_id
            .is_some_and(|id| store.message(trigger.channel_id, id).is_some());
    if !trigger_listed || turns.is_empty() {
        turns.push(ChatTurn {
            role: Role::User,
            content: format!("{}: {}", trigger.author_name, trigger.text),
        });
    }
    turns
}
