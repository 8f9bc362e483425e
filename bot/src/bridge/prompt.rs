//! The prompt a command agent reads on stdin.

use crate::store::{Store, StoredMessage};
use entity::Snowflake;

/// What started a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    pub channel_id: Snowflake,
    pub message_id: Snowflake,
    pub author_id: Snowflake,
    pub author_name: String,
    /// The trigger's canonical (readable) text.
    pub text: String,
}

fn line(store: &Store, message: &StoredMessage) -> String {
    let author = store
        .user_display_name(message.author_id)
        .unwrap_or_else(|| format!("user_{}", message.author_id));
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
    let mut prompt = format!(
        "{author} (user id {author_id}) wrote in session {channel} (message {message}):\n{text}\n",
        author = trigger.author_name,
        author_id = trigger.author_id,
        channel = trigger.channel_id,
        message = trigger.message_id,
        text = trigger.text,
    );
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
