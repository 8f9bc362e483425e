//! Conversations in threads (`agent.reply_in_thread`): the thread an answer goes into, started
//! from the message it answers, and the name it gets.
//!
//! A thread is started through [`Core::call`] like any other action, so the allowlist (the
//! parent's), permission rules, rate limits and the audit log apply to it.

use std::sync::Arc;

use entity::Snowflake;
use serde_json::json;
use switchboard_engine::runs::Trigger;
use switchboard_engine::surface::{AllowedChannel, SessionKind};
use switchboard_engine::Core;

/// Longest thread name switchboard makes, in characters (Discord allows 100; the rest is
/// room for the ellipsis and for people renaming it).
const NAME_CHARS: usize = 80;

/// A thread's name for a conversation that starts with `text` (the trigger's readable text):
/// its words without the bot's own `@handle`, cut at a word boundary to at most 80 characters
/// with an ellipsis; `Conversation with {author}` when nothing is left. Always 1 to 100
/// characters, on one line.
pub fn thread_name(text: &str, bot_handle: Option<&str>, author: &str) -> String {
    let cleaned = match bot_handle.filter(|handle| !handle.is_empty()) {
        Some(handle) => text.replace(handle, " "),
        None => text.to_owned(),
    };
    let mut name = String::new();
    let mut chars = 0;
    for word in cleaned.split_whitespace() {
        let word_chars = word.chars().count();
        let gap = usize::from(chars > 0);
        if chars + gap + word_chars > NAME_CHARS {
            if chars == 0 {
                name.extend(word.chars().take(NAME_CHARS - 1));
            }
            name.push('…');
            return name;
        }
        if gap == 1 {
            name.push(' ');
        }
        name.push_str(word);
        chars += gap + word_chars;
    }
    if name.is_empty() {
        let fallback: String = format!("Conversation with {author}")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        return fallback.chars().take(NAME_CHARS).collect();
    }
    name
}

/// The thread the answer to `trigger` goes into, started from its message in `channel` (or
/// the one already started from it); `None`, logged, when the trigger is not a message in a
/// text channel or the thread cannot be started: the answer then stays in the channel.
pub async fn open(
    core: &Arc<Core>,
    channel: AllowedChannel,
    trigger: &Trigger,
) -> Option<Snowflake> {
    let message_id = trigger.message_id?;
    if trigger.workflow_id.is_some() {
        return None;
    }
    let surface = core.surface();
    if surface.session(channel.id())?.kind != SessionKind::Channel {
        return None;
    }
    // A message starts at most one thread: a run that stopped half-way left it behind.
    let existing = surface
        .thread(message_id)
        .filter(|thread| thread.parent_id() == Some(channel.id()));
    match existing {
        Some(thread) => Some(thread.session.id),
        None => start(core, channel, trigger, message_id).await,
    }
}

/// `trigger` as answered in `thread`: the thread's session, and no message to reply to (the
/// message lives in the parent).
pub fn in_thread(trigger: &Trigger, thread: Snowflake) -> Trigger {
    Trigger {
        channel_id: thread,
        message_id: None,
        ..trigger.clone()
    }
}

async fn start(
    core: &Arc<Core>,
    channel: AllowedChannel,
    trigger: &Trigger,
    message_id: Snowflake,
) -> Option<Snowflake> {
    let bot_handle = core
        .surface()
        .bot_user_id()
        .map(|bot| core.readable(&format!("<@{bot}>")).into_owned());
    let input = json!({
        "sessionId": channel.id().to_string(),
        "name": thread_name(&trigger.text, bot_handle.as_deref(), &trigger.author_name),
        "messageId": message_id.to_string(),
    });
    let context = crate::stream::reply_context(trigger);
    let output = match core.call(&context, "surface.threads.create", input).await {
        Ok(output) => output,
        Err(error) => {
            tracing::warn!(session = %channel.id(), message = %message_id, code = %error.code, "could not start a thread for the answer ({}); answering in the channel", error.message);
            return None;
        }
    };
    let thread = serde_json::from_str::<serde_json::Value>(output.get())
        .ok()
        .and_then(|value| value["channelId"].as_str()?.parse::<Snowflake>().ok());
    if thread.is_none() {
        tracing::warn!(session = %channel.id(), "surface.threads.create answered no channelId; answering in the channel");
    }
    thread
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_name_is_the_question_without_the_bots_handle() {
        assert_eq!(
            thread_name(
                "@switchboard  how do I\nrotate the keys?",
                Some("@switchboard"),
                "Mira"
            ),
            "how do I rotate the keys?"
        );
    }

    #[test]
    fn a_long_question_is_cut_at_a_word_with_an_ellipsis() {
        let text = "word ".repeat(40);
        let name = thread_name(&text, None, "Mira");
        assert!(name.ends_with("word…"), "{name}");
        assert!(name.chars().count() <= NAME_CHARS + 1);
    }

    #[test]
    fn a_bare_mention_names_the_conversation_after_its_author() {
        assert_eq!(
            thread_name("@switchboard", Some("@switchboard"), "Mira"),
            "Conversation with Mira"
        );
    }

    #[test]
    fn one_endless_word_is_cut_inside() {
        let name = thread_name(&"x".repeat(500), None, "Mira");
        assert_eq!(name.chars().count(), NAME_CHARS);
        assert!(name.ends_with('…'));
    }

    proptest! {
        #[test]
        fn every_name_is_one_line_of_1_to_100_characters(
            text in "\\PC{0,300}",
            author in "\\PC{0,120}",
        ) {
            let name = thread_name(&text, Some("@bot"), &author);
            let chars = name.chars().count();
            prop_assert!((1..=100).contains(&chars), "{chars} chars: {name:?}");
            prop_assert!(!name.contains('\n') && !name.contains('\r'));
        }
    }
}
