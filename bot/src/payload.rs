//! Discord messages (gateway models and REST answers) → stored rows, with canonical text.

use entity::{Mapper, Snowflake};
use serde::Deserialize;
use serde_json::Value;
use serenity::model::channel::{Message, ReactionType};

use switchboard_records as records;

/// An emoji as the store keeps it and people read it: the character for a Unicode emoji (👍),
/// `name:id` for a custom one. (serenity's `as_data` is the route form, percent-encoded.)
pub fn emoji_text(emoji: &ReactionType) -> String {
    match emoji {
        ReactionType::Unicode(text) => text.clone(),
        other => other.as_data(),
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

/// A message from a REST answer (what the bot just sent); `None` when it isn't one. A REST
/// answer is the gateway's message shape, so it is read by the same model and made a row by
/// [`stored_message_from_model`]: one parser per shape.
pub fn stored_message_from_json(value: &Value, mapper: &Mapper<'_>) -> Option<records::Message> {
    let message = Message::deserialize(value).ok()?;
    Some(stored_message_from_model(&message, mapper))
}

#[cfg(test)]
mod tests {
    use super::*;
    use entity::{Aliases, NoNames};
    use serde_json::json;

    fn answer() -> Value {
        json!({
            "id": "1000000000000000901", "channel_id": "1000000000000000401",
            "author": {"id": "1000000000000000101", "username": "switchboard", "bot": true,
                       "discriminator": "0", "global_name": null, "avatar": null},
            "content": "done <@1000000000000000102>", "timestamp": "2026-01-02T03:04:05.000000+00:00",
            "edited_timestamp": null, "tts": false, "mention_everyone": false, "mentions": [],
            "mention_roles": [], "attachments": [{"id": "1000000000000000950", "filename": "a.txt",
            "url": "https://cdn.example/a.txt", "proxy_url": "https://cdn.example/a.txt",
            "size": 3, "content_type": "text/plain"}], "embeds": [], "pinned": false, "type": 0,
            "reactions": [{"count": 2, "count_details": {"burst": 0, "normal": 2}, "me": true,
            "me_burst": false, "burst_colors": [], "emoji": {"id": null, "name": "👍"}}],
            "message_reference": {"type": 0, "message_id": "1000000000000000900",
                                  "channel_id": "1000000000000000401"}
        })
    }

    #[test]
    fn a_rest_answer_is_read_by_the_gateway_model_into_the_same_row() {
        let aliases = Aliases::default();
        let mapper = Mapper::new(&aliases, &NoNames);
        let from_json = stored_message_from_json(&answer(), &mapper).expect("a message");
        let model: Message = serde_json::from_value(answer()).expect("the model reads it");
        assert_eq!(from_json, stored_message_from_model(&model, &mapper));
        assert_eq!(from_json.id, Snowflake(1_000_000_000_000_000_901));
        assert_eq!(
            from_json.reply_to,
            Some(Snowflake(1_000_000_000_000_000_900))
        );
        assert_eq!(from_json.attachments.len(), 1);
        assert_eq!(from_json.reactions[0].emoji, "👍");
        assert!(from_json.author_is_bot);
    }

    #[test]
    fn an_answer_that_is_not_a_message_is_none() {
        let aliases = Aliases::default();
        let mapper = Mapper::new(&aliases, &NoNames);
        for garbage in [
            json!(null),
            json!({}),
            json!({"id": "x"}),
            json!([1, 2]),
            json!("text"),
        ] {
            assert_eq!(
                stored_message_from_json(&garbage, &mapper),
                None,
                "{garbage}"
            );
        }
    }
}
