//! What the Discord side tells the live feed (`GET /v1/events`) and the metrics: messages
//! stored, edited and deleted (only ever in allowed sessions: nothing else is stored), and the
//! gateway's state.

use entity::Snowflake;
use serde_json::json;
use switchboard_engine::events::Observers;

use switchboard_records as records;

/// `message.created`, with the canonical text as stored.
pub fn message_created(observers: &Observers, message: &records::Message, author_name: &str) {
    observers.events.publish(
        "message.created",
        Some(message.channel_id),
        json!({
            "messageId": message.id.to_string(),
            "authorId": message.author_id.to_string(),
            "authorName": author_name,
            "authorIsBot": message.author_is_bot,
            "text": message.text,
            "replyTo": message.reply_to.map(|id| id.to_string()),
            "attachments": message.attachments.len(),
            "timestamp": message.timestamp,
        }),
    );
}

/// `message.edited`, with the new canonical text.
pub fn message_edited(observers: &Observers, channel: Snowflake, id: Snowflake, text: &str) {
    observers.events.publish(
        "message.edited",
        Some(channel),
        json!({ "messageId": id.to_string(), "text": text }),
    );
}

/// `message.deleted`, one event per message the store held.
pub fn message_deleted(observers: &Observers, channel: Snowflake, id: Snowflake) {
    observers.events.publish(
        "message.deleted",
        Some(channel),
        json!({ "messageId": id.to_string() }),
    );
}
