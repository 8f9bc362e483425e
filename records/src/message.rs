//! Messages, their attachments and their reactions.

use std::hash::{Hash, Hasher};

use entity::Snowflake;
use serde::{Deserialize, Serialize};

/// A file attached to a message, as Discord described it; no bytes are kept. On the wire:
/// `{"filename","url","size","contentType"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    /// The file's name as uploaded, unsanitized.
    pub filename: String,
    /// Where the file is downloaded from (Discord's CDN; no bot token needed).
    pub url: String,
    /// Its size in bytes, as Discord gave it (0 when a REST answer left it out).
    pub size: u64,
    /// Its media type (`image/png`), when Discord gave one.
    pub content_type: Option<String>,
}

/// The reactions with one emoji on a message. On the wire: `{"emoji","count","me"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Reaction {
    /// The emoji as people read it: the character itself for a Unicode emoji (✅), `name:id`
    /// for a custom one.
    pub emoji: String,
    /// How many users reacted with it, the bot included; never 0 (the entry goes instead).
    pub count: u32,
    /// Whether the bot itself reacted.
    pub me: bool,
}

impl Reaction {
    /// Adds one reaction with `emoji` (`me`: the bot's own) to a message's list. The bot counts
    /// once however often it reacts.
    pub fn add(reactions: &mut Vec<Reaction>, emoji: &str, me: bool) {
        match reactions.iter_mut().find(|r| r.emoji == emoji) {
            Some(reaction) => {
                if !(me && reaction.me) {
                    reaction.count = reaction.count.saturating_add(1);
                }
                reaction.me |= me;
            }
            None => reactions.push(Reaction {
                emoji: emoji.to_owned(),
                count: 1,
                me,
            }),
        }
    }

    /// Removes one reaction with `emoji` (`me`: the bot's own) from a message's list; false
    /// when nothing changed.
    pub fn remove(reactions: &mut Vec<Reaction>, emoji: &str, me: bool) -> bool {
        let Some(index) = reactions.iter().position(|r| r.emoji == emoji) else {
            return false;
        };
        let reaction = &mut reactions[index];
        if me && !reaction.me {
            return false;
        }
        reaction.me &= !me;
        reaction.count = reaction.count.saturating_sub(1);
        if reaction.count == 0 {
            reactions.remove(index);
        }
        true
    }
}

/// A message as it is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The message's id.
    pub id: Snowflake,
    /// The channel, thread or DM it was posted in.
    pub channel_id: Snowflake,
    /// The author's user id.
    pub author_id: Snowflake,
    /// Whether the author is a bot account (the bot itself included).
    pub author_is_bot: bool,
    /// Discord's raw text (mentions as `<@id>`).
    pub content: String,
    /// The readable text made at ingest (mentions as `@name`): a snapshot for that moment (the
    /// trigger's text, the search index); readers render `content` afresh.
    pub text: String,
    /// RFC 3339, as Discord sent it.
    pub timestamp: String,
    /// When it was last edited, RFC 3339 as Discord sent it; `None` if never.
    pub edited_timestamp: Option<String>,
    /// The message this one replies to, if any; that message need not be stored.
    pub reply_to: Option<Snowflake>,
    /// Its files, in Discord's order.
    pub attachments: Vec<Attachment>,
    /// Its reactions, one entry per emoji.
    pub reactions: Vec<Reaction>,
}

impl Message {
    /// A number that changes whenever what readers see of the message changes (its text, an
    /// edit, its files, its reactions): readers may cache what they derive under its id and
    /// this revision. Stable within one process only.
    pub fn revision(&self) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.content.hash(&mut hasher);
        self.edited_timestamp.hash(&mut hasher);
        for attachment in &self.attachments {
            attachment.url.hash(&mut hasher);
            attachment.size.hash(&mut hasher);
        }
        for reaction in &self.reactions {
            reaction.emoji.hash(&mut hasher);
            reaction.count.hash(&mut hasher);
            reaction.me.hash(&mut hasher);
        }
        hasher.finish()
    }

    /// Whether an edit stamped `edited` may replace this message's content (see
    /// [`crate::time::edit_wins`]).
    pub fn accepts_edit(&self, edited: Option<&str>) -> bool {
        let held = match self.edited_timestamp.as_deref() {
            None => None,
            Some(stamp) => crate::time::instant_micros(stamp),
        };
        crate::time::edit_wins(held, edited)
    }
}

/// Which messages of a channel to read: the newest `limit` with `after < id < before`, oldest
/// first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageQuery {
    /// At most this many.
    pub limit: usize,
    /// Only messages older than this one.
    pub before: Option<Snowflake>,
    /// Only messages newer than this one.
    pub after: Option<Snowflake>,
}

impl MessageQuery {
    /// The newest `limit` messages.
    pub fn newest(limit: usize) -> MessageQuery {
        MessageQuery {
            limit,
            before: None,
            after: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachments_and_reactions_keep_the_tool_servers_json_shape() {
        let attachment = Attachment {
            filename: "a.png".into(),
            url: "https://cdn/a.png".into(),
            size: 7,
            content_type: Some("image/png".into()),
        };
        assert_eq!(
            serde_json::to_value(&attachment).unwrap(),
            serde_json::json!({"filename": "a.png", "url": "https://cdn/a.png", "size": 7, "contentType": "image/png"})
        );
        let reaction = Reaction {
            emoji: "✅".into(),
            count: 2,
            me: true,
        };
        assert_eq!(
            serde_json::to_value(&reaction).unwrap(),
            serde_json::json!({"emoji": "✅", "count": 2, "me": true})
        );
    }

    #[test]
    fn reactions_count_the_bot_once() {
        let mut reactions = Vec::new();
        Reaction::add(&mut reactions, "👍", false);
        Reaction::add(&mut reactions, "👍", true);
        Reaction::add(&mut reactions, "👍", true);
        assert_eq!(
            reactions,
            vec![Reaction {
                emoji: "👍".into(),
                count: 2,
                me: true
            }]
        );
        assert!(Reaction::remove(&mut reactions, "👍", true));
        assert!(!Reaction::remove(&mut reactions, "👍", true));
        assert_eq!((reactions[0].count, reactions[0].me), (1, false));
        assert!(Reaction::remove(&mut reactions, "👍", false));
        assert!(reactions.is_empty());
        assert!(!Reaction::remove(&mut reactions, "👍", false));
    }

    #[test]
    fn the_revision_changes_with_what_readers_see() {
        let mut message = Message {
            id: Snowflake(10),
            channel_id: Snowflake(1),
            author_id: Snowflake(2),
            author_is_bot: false,
            content: "hi".into(),
            text: "hi".into(),
            timestamp: "2026-11-22T12:00:00.000000+00:00".into(),
            edited_timestamp: None,
            reply_to: None,
            attachments: Vec::new(),
            reactions: Vec::new(),
        };
        let before = message.revision();
        Reaction::add(&mut message.reactions, "👍", false);
        assert_ne!(message.revision(), before);
    }
}
