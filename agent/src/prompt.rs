//! The prompts agents read: the whole prompt a command agent gets on stdin, and the chat turns
//! an OpenAI-compatible model gets. The session's messages come from the platform's cache
//! through [`Surface`](toolserver::Surface), rendered readable when read (so a renamed user
//! shows under the new name, as in `surface.messages.list`).

use std::sync::Arc;

use entity::Snowflake;
use toolserver::runs::Trigger;
use toolserver::surface::{AllowedChannel, MessageInfo, MessageQuery};
use toolserver::Core;

/// The newest `count` messages of the session, oldest first.
fn recent(core: &Core, channel: AllowedChannel, count: usize) -> Vec<Arc<MessageInfo>> {
    core.surface().messages(
        channel,
        MessageQuery {
            limit: count,
            before: None,
            after: None,
        },
    )
}

fn line(core: &Core, message: &MessageInfo) -> String {
    format!(
        "[{}] {}: {}",
        message.timestamp,
        message.author_name,
        core.readable(&message.content)
    )
}

/// The trigger, its author, and the last `context` messages of the session as a transcript.
pub fn build(core: &Core, channel: AllowedChannel, trigger: &Trigger, context: usize) -> String {
    let transcript: Vec<String> = if context == 0 {
        Vec::new()
    } else {
        recent(core, channel, context)
            .iter()
            .map(|m| line(core, m))
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
    /// People (and other bots).
    User,
    /// The bot itself.
    Assistant,
}

/// One turn of the conversation a chat model sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatTurn {
    /// Who said it.
    pub role: Role,
    /// What they said, readable.
    pub content: String,
}

/// The session transcript as chat turns: the bot's own messages are the assistant's, everyone
/// else's are user turns prefixed with the author's name. The trigger, already stored, is last.
pub fn conversation(
    core: &Core,
    channel: AllowedChannel,
    trigger: &Trigger,
    context: usize,
    bot_id: Option<Snowflake>,
) -> Vec<ChatTurn> {
    let messages = recent(core, channel, context.max(1));
    let mut turns: Vec<ChatTurn> = messages
        .iter()
        .map(|m| {
            let text = core.readable(&m.content);
            if Some(m.author_id) == bot_id {
                ChatTurn {
                    role: Role::Assistant,
                    content: text.into_owned(),
                }
            } else {
                ChatTurn {
                    role: Role::User,
                    content: format!("{}: {text}", m.author_name),
                }
            }
        })
        .collect();
    // A resumed workflow's prompt is not a stored message: it always comes last.
    let trigger_listed = trigger.workflow_id.is_none()
        && trigger
            .message_id
            .is_some_and(|id| core.surface().message(channel, id).is_some());
    if !trigger_listed || turns.is_empty() {
        turns.push(ChatTurn {
            role: Role::User,
            content: format!("{}: {}", trigger.author_name, trigger.text),
        });
    }
    turns
}
