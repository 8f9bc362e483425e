//! Channel and message routes: get a channel, list/create/get/edit/delete messages, bulk
//! delete, reactions and typing.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::Json;
use serde_json::Value;

use super::{path_id, JsonBody, MessageBody, MessagePath};
use crate::api_error::{ApiError, FormErrors};
use crate::attachments;
use crate::payloads;
use crate::shared::{NewMessage, Shared};
use crate::snowflake::Snowflake;
use crate::state::Emoji;
use crate::validation;

type Answer = Result<Json<Value>, ApiError>;
type Empty = Result<StatusCode, ApiError>;

pub(super) async fn get_channel(
    State(s): State<Arc<Shared>>,
    Path(channel_id): Path<String>,
) -> Answer {
    let channel_id = path_id("channel_id", &channel_id)?;
    let store = s.lock();
    let channel = store.readable_channel(channel_id)?;
    Ok(Json(payloads::channel(&s.dir, channel)))
}

/// The `limit` query parameter (1 to 100, `default` when absent); a bad one is a form error.
pub(super) fn query_limit(
    query: &HashMap<String, String>,
    default: usize,
) -> Result<usize, ApiError> {
    let mut errors = FormErrors::new();
    let limit = limit_in(query, 1..=100, default, &mut errors);
    errors.into_result()?;
    Ok(limit)
}

/// The `limit` query parameter within `range` (`default` when absent); a bad one is added to
/// `errors` (and 0 returned).
pub(super) fn limit_in(
    query: &HashMap<String, String>,
    range: std::ops::RangeInclusive<usize>,
    default: usize,
    errors: &mut FormErrors,
) -> usize {
    match query.get("limit") {
        None => default,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if range.contains(&n) => n,
            _ => {
                errors.add(
                    &["limit"],
                    "NUMBER_TYPE_MAX",
                    format!(
                        "int value should be between {} and {}.",
                        range.start(),
                        range.end()
                    ),
                );
                0
            }
        },
    }
}

fn query_id(query: &HashMap<String, String>, key: &str) -> Result<Option<Snowflake>, ApiError> {
    query.get(key).map(|v| path_id(key, v)).transpose()
}

/// `GET /channels/{id}/messages`: newest first, with `limit`, `before`, `after`, `around`.
pub(super) async fn list(
    State(s): State<Arc<Shared>>,
    Path(channel_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Answer {
    let channel_id = path_id("channel_id", &channel_id)?;
    let limit = query_limit(&query, 50)?;
    let before = query_id(&query, "before")?;
    let after = query_id(&query, "after")?;
    let around = query_id(&query, "around")?;
    let store = s.lock();
    store.readable_channel(channel_id)?;
    let all: Vec<_> = store.channel_messages(channel_id).collect();
    let picked: Vec<_> = if let Some(around) = around {
        let split = all.partition_point(|m| m.id < around);
        let older = limit / 2;
        let start = split.saturating_sub(older);
        let end = (start + limit).min(all.len());
        all[start..end].iter().rev().copied().collect()
    } else if let Some(after) = after {
        // Discord returns the oldest `limit` messages after the id, newest first.
        let found: Vec<_> = all
            .iter()
            .filter(|m| m.id > after)
            .take(limit)
            .copied()
            .collect();
        found.into_iter().rev().collect()
    } else {
        all.iter()
            .rev()
            .filter(|m| before.is_none_or(|b| m.id < b))
            .take(limit)
            .copied()
            .collect()
    };
    let out: Vec<Value> = picked
        .into_iter()
        .map(|m| payloads::message(&s.dir, &store, m, false))
        .collect();
    Ok(Json(Value::Array(out)))
}

/// `POST /channels/{id}/messages`: a JSON body, or `multipart/form-data` with a
/// `payload_json` part and `files[0]`..`files[9]` parts.
pub(super) async fn create(
    State(s): State<Arc<Shared>>,
    Path(channel_id): Path<String>,
    body: MessageBody,
) -> Answer {
    let channel_id = path_id("channel_id", &channel_id)?;
    // Access is checked before the body, as Discord does.
    s.lock().sendable_channel(channel_id)?;
    let draft = match body {
        MessageBody::Json(body) => validation::message_create(&body)?,
        MessageBody::Form(form) => {
            let (body, uploads) = attachments::message_form(&form, s.max_upload_bytes)?;
            validation::message_create_with_files(&body, uploads)?
        }
    };
    let message = s.create_message(NewMessage {
        author_id: s.dir.bot_id,
        channel_id,
        draft,
        as_bot_over_rest: true,
        webhook_id: None,
        interaction: None,
    })?;
    Ok(Json(message))
}

pub(super) async fn get_one(
    State(s): State<Arc<Shared>>,
    MessagePath(channel_id, message_id): MessagePath,
) -> Answer {
    let store = s.lock();
    store.readable_channel(channel_id)?;
    let message = store.message(channel_id, message_id)?;
    Ok(Json(payloads::message(&s.dir, &store, message, false)))
}

pub(super) async fn edit(
    State(s): State<Arc<Shared>>,
    JsonBody(body): JsonBody,
    MessagePath(channel_id, message_id): MessagePath,
) -> Answer {
    {
        let store = s.lock();
        store.readable_channel(channel_id)?;
        let message = store.message(channel_id, message_id)?;
        if message.author_id != s.dir.bot_id {
            return Err(ApiError::cannot_edit_others_message());
        }
    }
    let draft = validation::message_edit(&body)?;
    Ok(Json(s.edit_message(channel_id, message_id, draft, true)?))
}

pub(super) async fn delete(
    State(s): State<Arc<Shared>>,
    MessagePath(channel_id, message_id): MessagePath,
) -> Empty {
    s.delete_message(channel_id, message_id, true)?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn bulk_delete(
    State(s): State<Arc<Shared>>,
    Path(channel_id): Path<String>,
    JsonBody(body): JsonBody,
) -> Empty {
    let channel_id = path_id("channel_id", &channel_id)?;
    s.lock().readable_channel(channel_id)?;
    let ids = validation::bulk_delete(&body)?;
    s.bulk_delete(channel_id, &ids)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `PUT` (add) or `DELETE` (remove) the bot's own reaction.
pub(super) async fn react(
    method: Method,
    State(s): State<Arc<Shared>>,
    Path((channel_id, message_id, emoji)): Path<(String, String, String)>,
) -> Empty {
    let channel_id = path_id("channel_id", &channel_id)?;
    let message_id = path_id("message_id", &message_id)?;
    let emoji = Emoji::parse(&emoji)?;
    let add = method == Method::PUT;
    s.react(channel_id, message_id, s.dir.bot_id, &emoji, add)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET .../reactions/{emoji}`: the users who reacted, with `limit` (default 25) and `after`.
pub(super) async fn reactors(
    State(s): State<Arc<Shared>>,
    Path((channel_id, message_id, emoji)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Answer {
    let channel_id = path_id("channel_id", &channel_id)?;
    let message_id = path_id("message_id", &message_id)?;
    let emoji = Emoji::parse(&emoji)?;
    let limit = query_limit(&query, 25)?;
    let after = query_id(&query, "after")?;
    let store = s.lock();
    store.readable_channel(channel_id)?;
    let message = store.message(channel_id, message_id)?;
    let mut users: Vec<Snowflake> = message
        .reactions
        .iter()
        .find(|r| r.emoji == emoji)
        .map(|r| r.users.clone())
        .unwrap_or_default();
    users.sort();
    let out: Vec<Value> = users
        .into_iter()
        .filter(|u| after.is_none_or(|a| *u > a))
        .take(limit)
        .map(|u| s.dir.user(u))
        .collect();
    Ok(Json(Value::Array(out)))
}

pub(super) async fn typing(State(s): State<Arc<Shared>>, Path(channel_id): Path<String>) -> Empty {
    let channel_id = path_id("channel_id", &channel_id)?;
    s.typing(channel_id, s.dir.bot_id, true)?;
    Ok(StatusCode::NO_CONTENT)
}
