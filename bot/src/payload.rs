//! Discord messages (gateway models and REST answers) → stored rows, with canonical text.

use entity::{Mapper, Snowflake};
use serde_json::Value;
use serenity::model::channel::{Message, ReactionType};

use switchboard_records as records;

fn id(value: &Value, key: &str) -> Option<Snowflake> {
    value
        .get(key)
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<u64>().ok())
        .map(Snowflake)
}

/// An emoji as the store keeps it and people read it: the character for a Unicode emoji (👍),
/// `name:id` for a custom one. (serenity's `as_data` is the route form, percent-encoded.)
pub fn emoji_text(emoji: &ReactionType) -> String {
    match emoji {
        ReactionType::Unicode(text) => text.clone(),
        other => other.as_data(),
    }
}

/// An emoji object of a REST answer (`{"id", "name"}`) in the same form as [`emoji_text`].
fn emoji_text_of_json(emoji: &Value) -> Option<String> {
    let name = emoji
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match emoji.get("id").and_then(Value::as_str) {
        Some(id) => Some(format!("{name}:{id}")),
        None if !name.is_empty() => Some(name.to_owned()),
        None => None,
    }
}

/// A message from the gateway.
pub fn stored_message_from_model(message: &Message, mapper: &Mapper<'_>) -> records::Message {
    records::Message {
        id: Snowflake(message.id.get()),
        channel_id: Snowflake(message.channel_id.get()),
        author_id: Snowflake(message.author.id.get()),
        author_is_bot: message.author.bot,
        text: mapper.inbound(&message.content).into_owned(),
        content: message.content.clone(),
        timestamp: message.timestamp.to_string(),
        edited_timestamp: message.edited_timestamp.map(|t| t.to_string()),
        reply_to: message
            .message_reference
            .as_ref()
            .and_then(|r| r.message_id)
            .map(|id| Snowflake(id.get())),
        attachments: message
            .attachments
            .iter()
            .map(|a| records::Attachment {
                filename: a.filename.clone(),
                url: a.url.clone(),
                size: u64::from(a.size),
                content_type: a.content_type.clone(),
            })
            .collect(),
        reactions: message
            .reactions
            .iter()
            .map(|r| records::Reaction {
                emoji: emoji_text(&r.reaction_type),
                count: u32::try_from(r.count).unwrap_or(u32::MAX),
                me: r.me,
            })
            .collect(),
    }
}

/// A message from a REST answer (what the bot just sent); `None` when it isn't one.
pub fn stored_message_from_json(value: &Value, mapper: &Mapper<'_>) -> Option<records::Message> {
    let author = value.get("author")?;
    let content = value.get("content")?.as_str()?.to_owned();
    Some(records::Message {
        id: id(value, "id")?,
        channel_id: id(value, "channel_id")?,
        author_id: id(author, "id")?,
        author_is_bot: author.get("bot").and_then(Value::as_bool).unwrap_or(false),
        text: mapper.inbound(&content).into_owned(),
        content,
        timestamp: value.get("timestamp")?.as_str()?.to_owned(),
        edited_timestamp: value
            .get("edited_timestamp")
            .and_then(Value::as_str)
            .map(str::to_owned),
        reply_to: value
            .get("message_reference")
            .and_then(|r| id(r, "message_id")),
        attachments: value
            .get("attachments")
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(|a| {
                        Some(records::Attachment {
                            filename: a.get("filename")?.as_str()?.to_owned(),
                            url: a.get("url")?.as_str()?.to_owned(),
                            size: a.get("size").and_then(Value::as_u64).unwrap_or(0),
                            content_type: a
                                .get("content_type")
                                .and_then(Value::as_str)
                                .map(str::to_owned),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default(),
        reactions: value
            .get("reactions")
            .and_then(Value::as_array)
            .map(|items| {
                items
                    .iter()
                    .filter_map(|r| {
                        Some(records::Reaction {
                            emoji: emoji_text_of_json(r.get("emoji")?)?,
                            count: u32::try_from(r.get("count")?.as_u64()?).unwrap_or(u32::MAX),
                            me: r.get("me").and_then(Value::as_bool).unwrap_or(false),
                        })
                    })
                    .collect()
            })
            .unwrap_or_default(),
    })
}
