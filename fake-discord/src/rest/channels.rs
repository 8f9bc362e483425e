//! Guild channel routes: create one (`POST /guilds/{id}/channels`), change one (`PATCH
//! /channels/{id}`: a guild channel here, a thread in [`super::threads`]), delete one
//! (`DELETE /channels/{id}`). As the spec has them: `name` 1 to 100 characters, `type` one of the
//! creatable guild types, `topic` within its type's limit, `parent_id` a category of the same
//! guild; every field problem in one 50035; MANAGE_CHANNELS (a guild's
//! `bot_can_manage_channels`) or 50013; CHANNEL_CREATE / CHANNEL_UPDATE / CHANNEL_DELETE (and
//! THREAD_DELETE for a deleted channel's threads) on the gateway.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::Value;

use super::{path_id, JsonBody};
use crate::api_error::{ApiError, FormErrors};
use crate::payloads;
use crate::shared::{ChannelChange, Shared};
use crate::snowflake::{now_ms, Snowflake};
use crate::state::{guild_channel, Channel, Store};
use crate::world::channel_type;

type Answer = Result<Json<Value>, ApiError>;
type Created = Result<(StatusCode, Json<Value>), ApiError>;

/// The guild channel types the create route accepts, as the fake models them (the spec's
/// enum also has 14, a directory, which bots cannot make).
const CREATABLE: [u8; 6] = [
    channel_type::GUILD_TEXT,
    channel_type::GUILD_VOICE,
    channel_type::GUILD_CATEGORY,
    channel_type::GUILD_ANNOUNCEMENT,
    channel_type::GUILD_STAGE_VOICE,
    channel_type::GUILD_FORUM,
];

/// The longest topic a channel of `kind` takes: 4,096 characters for a forum, 1,024 for the
/// rest (Discord's documented limits; the spec's schema says 4,096 for all).
fn max_topic_chars(kind: u8) -> usize {
    if kind == channel_type::GUILD_FORUM {
        4096
    } else {
        1024
    }
}

/// Whether a channel of `kind` keeps a topic (voice and stage channels and categories do not).
fn has_topic(kind: u8) -> bool {
    matches!(
        kind,
        channel_type::GUILD_TEXT | channel_type::GUILD_ANNOUNCEMENT | channel_type::GUILD_FORUM
    )
}

/// A channel's `name`: required on create, 1 to 100 characters.
fn name_field(body: &Value, required: bool, errors: &mut FormErrors) -> Option<String> {
    match body.get("name") {
        Some(Value::String(name)) => {
            if (1..=100).contains(&name.chars().count()) {
                Some(name.clone())
            } else {
                errors.add(
                    &["name"],
                    "BASE_TYPE_BAD_LENGTH",
                    "Must be between 1 and 100 in length.",
                );
                None
            }
        }
        None | Some(Value::Null) => {
            if required {
                errors.add(&["name"], "BASE_TYPE_REQUIRED", "This field is required");
            }
            None
        }
        Some(_) => {
            errors.add(
                &["name"],
                "STRING_TYPE_CONVERT",
                "Could not interpret as string.",
            );
            None
        }
    }
}

/// `topic`: absent (`None`), cleared by `null` or `""` (`Some(None)`), or set.
fn topic_field(body: &Value, kind: u8, errors: &mut FormErrors) -> Option<Option<String>> {
    match body.get("topic") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::String(topic)) => {
            let max = max_topic_chars(kind);
            if topic.chars().count() > max {
                errors.add(
                    &["topic"],
                    "BASE_TYPE_MAX_LENGTH",
                    format!("Must be {max} or fewer in length."),
                );
                None
            } else {
                Some(Some(topic.clone()).filter(|t| !t.is_empty()))
            }
        }
        Some(_) => {
            errors.add(
                &["topic"],
                "STRING_TYPE_CONVERT",
                "Could not interpret as string.",
            );
            None
        }
    }
}

/// `parent_id`: absent, `null` (no category), or a snowflake.
fn parent_field(body: &Value, errors: &mut FormErrors) -> Option<Option<Snowflake>> {
    match body.get("parent_id") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::String(text)) => match Snowflake::from_digits(text) {
            Some(id) => Some(Some(id)),
            None => {
                errors.add(
                    &["parent_id"],
                    "NUMBER_TYPE_COERCE",
                    format!("Value \"{text}\" is not snowflake."),
                );
                None
            }
        },
        Some(_) => {
            errors.add(
                &["parent_id"],
                "NUMBER_TYPE_COERCE",
                "Value is not snowflake.",
            );
            None
        }
    }
}

/// A category of `guild` to put a channel of `kind` in: categories hold no categories, and the
/// parent must be a category of the same guild (50035 otherwise, on `parent_id`).
fn check_parent(
    store: &Store,
    guild: Snowflake,
    kind: u8,
    parent: Snowflake,
    errors: &mut FormErrors,
) {
    let is_category = store
        .channels
        .get(&parent)
        .is_some_and(|p| p.guild_id == Some(guild) && p.kind == channel_type::GUILD_CATEGORY);
    if kind == channel_type::GUILD_CATEGORY {
        errors.add(
            &["parent_id"],
            "CHANNEL_PARENT_INVALID_TYPE",
            "Categories cannot have subcategories",
        );
    } else if !is_category {
        errors.add(
            &["parent_id"],
            "CHANNEL_PARENT_INVALID",
            "Invalid parent: must be a category of this guild",
        );
    }
}

/// MANAGE_CHANNELS in `guild`, or 50013.
fn may_manage(s: &Shared, guild: Snowflake) -> Result<(), ApiError> {
    let allowed = s
        .world
        .guilds
        .iter()
        .any(|g| g.id == guild && g.bot_can_manage_channels);
    if allowed {
        Ok(())
    } else {
        Err(ApiError::missing_permissions())
    }
}

/// `POST /guilds/{guild_id}/channels`: creates a channel (201 with it; CHANNEL_CREATE).
pub(super) async fn create(
    State(s): State<Arc<Shared>>,
    Path(guild_id): Path<String>,
    JsonBody(body): JsonBody,
) -> Created {
    let guild = path_id("guild_id", &guild_id)?;
    if !s.world.guilds.iter().any(|g| g.id == guild) {
        return Err(ApiError::unknown_guild());
    }
    let mut errors = FormErrors::new();
    let name = name_field(&body, true, &mut errors);
    let kind = match body.get("type") {
        None | Some(Value::Null) => channel_type::GUILD_TEXT,
        Some(value) => match value
            .as_u64()
            .and_then(|k| u8::try_from(k).ok())
            .filter(|k| CREATABLE.contains(k))
        {
            Some(kind) => kind,
            None => {
                errors.add(
                    &["type"],
                    "BASE_TYPE_CHOICES",
                    "Value must be one of {0, 2, 4, 5, 13, 15}.",
                );
                channel_type::GUILD_TEXT
            }
        },
    };
    let topic = topic_field(&body, kind, &mut errors).flatten();
    let parent = parent_field(&body, &mut errors).flatten();
    let mut store = s.lock();
    if let Some(parent) = parent {
        check_parent(&store, guild, kind, parent, &mut errors);
    }
    errors.into_result()?;
    may_manage(&s, guild)?;
    let id = s.ids.next();
    let position = store
        .channels
        .values()
        .filter(|c| c.guild_id == Some(guild))
        .count() as u16;
    let channel = Channel {
        topic: topic.filter(|_| has_topic(kind)),
        ..guild_channel(
            id,
            guild,
            name.unwrap_or_default(),
            kind,
            parent,
            position,
            now_ms(),
        )
    };
    store.channels.insert(id, channel.clone());
    s.publish_channel_event(&store, &channel, ChannelChange::Created, false);
    Ok((
        StatusCode::CREATED,
        Json(payloads::channel(&s.dir, &channel)),
    ))
}

/// `PATCH /channels/{channel_id}`: a thread's changes go to [`super::threads::modify`]; a guild
/// channel takes `name`, `topic` and `parent_id` (CHANNEL_UPDATE); a DM answers 50003.
pub(super) async fn modify(
    state: State<Arc<Shared>>,
    path: Path<String>,
    JsonBody(body): JsonBody,
) -> Answer {
    let State(s) = &state;
    let channel_id = path_id("channel_id", &path.0)?;
    let before = s.lock().readable_channel(channel_id)?.clone();
    if channel_type::is_thread(before.kind) {
        return super::threads::modify(state, path, JsonBody(body)).await;
    }
    let Some(guild) = before.guild_id else {
        return Err(ApiError::cannot_act_on_dm());
    };
    let mut errors = FormErrors::new();
    let name = name_field(&body, false, &mut errors);
    let topic = topic_field(&body, before.kind, &mut errors);
    let parent = parent_field(&body, &mut errors);
    let mut store = s.lock();
    if let Some(Some(parent)) = parent {
        check_parent(&store, guild, before.kind, parent, &mut errors);
    }
    errors.into_result()?;
    may_manage(s, guild)?;
    // Changed meanwhile (deleted by someone else): as Discord, the newest state wins.
    let mut after = store.readable_channel(channel_id)?.clone();
    if let Some(name) = name {
        after.name = name;
    }
    if let Some(topic) = topic.filter(|_| has_topic(after.kind)) {
        after.topic = topic;
    }
    if let Some(parent) = parent {
        after.parent_id = parent;
    }
    store.channels.insert(channel_id, after.clone());
    s.publish_channel_event(&store, &after, ChannelChange::Updated, true);
    Ok(Json(payloads::channel(&s.dir, &after)))
}

/// `DELETE /channels/{channel_id}`: deletes a guild channel with its threads (200 with the
/// channel; CHANNEL_DELETE, THREAD_DELETE), or a thread; a category's channels stay, without a
/// parent. A DM is closed: nothing is deleted, and the DM answers.
pub(super) async fn delete(State(s): State<Arc<Shared>>, Path(channel_id): Path<String>) -> Answer {
    let channel_id = path_id("channel_id", &channel_id)?;
    let mut store = s.lock();
    let channel = store.readable_channel(channel_id)?.clone();
    let Some(guild) = channel.guild_id else {
        return Ok(Json(payloads::channel(&s.dir, &channel)));
    };
    may_manage(&s, guild)?;
    remove_channel(&s, &mut store, &channel);
    Ok(Json(payloads::channel(&s.dir, &channel)))
}

/// Deletes a guild channel and its threads (their messages with them), and takes a deleted
/// category's channels out of it, publishing each change. Shared with the control API.
pub(crate) fn remove_channel(s: &Shared, store: &mut Store, channel: &Channel) {
    let mut doomed: Vec<Channel> = store
        .channels
        .values()
        .filter(|c| c.parent_id == Some(channel.id) && channel_type::is_thread(c.kind))
        .cloned()
        .collect();
    doomed.push(channel.clone());
    for c in doomed {
        let was_visible = store.bot_can_see(&c);
        store.channels.remove(&c.id);
        store.messages.remove(&c.id);
        s.publish_channel_event(store, &c, ChannelChange::Deleted, was_visible);
    }
    if channel.kind == channel_type::GUILD_CATEGORY {
        let children: Vec<Snowflake> = store
            .channels
            .values()
            .filter(|c| c.parent_id == Some(channel.id))
            .map(|c| c.id)
            .collect();
        for id in children {
            if let Some(child) = store.channels.get_mut(&id) {
                child.parent_id = None;
                let child = child.clone();
                s.publish_channel_event(store, &child, ChannelChange::Updated, true);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn topics_are_limited_by_type_and_kept_only_where_discord_shows_them() {
        assert_eq!(max_topic_chars(channel_type::GUILD_FORUM), 4096);
        assert_eq!(max_topic_chars(channel_type::GUILD_TEXT), 1024);
        assert!(has_topic(channel_type::GUILD_TEXT));
        assert!(!has_topic(channel_type::GUILD_VOICE));
        let mut errors = FormErrors::new();
        let long = json!({ "topic": "x".repeat(1025) });
        assert_eq!(
            topic_field(&long, channel_type::GUILD_TEXT, &mut errors),
            None
        );
        assert!(!errors.is_empty());
        let mut errors = FormErrors::new();
        assert_eq!(
            topic_field(&long, channel_type::GUILD_FORUM, &mut errors),
            Some(Some("x".repeat(1025)))
        );
        assert_eq!(
            topic_field(&json!({ "topic": "" }), 0, &mut errors),
            Some(None)
        );
        assert!(errors.is_empty());
    }
}
