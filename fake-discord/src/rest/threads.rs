//! Thread and pin routes: create a thread (standalone or from a message), change one (archive,
//! lock, rename), join it and list its members, list a guild's active threads and a channel's
//! archived public ones; pin, unpin and list pins. Each follows Discord's spec: the same
//! validation order, error codes and answer keys.

use std::collections::HashMap;
use std::sync::{Arc, MutexGuard};

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::DateTime;
use serde_json::{json, Value};

use super::{path_id, JsonBody, MessagePath};
use crate::api_error::{ApiError, FormErrors};
use crate::hub::intents;
use crate::payloads;
use crate::shared::{ChannelChange, Shared};
use crate::snowflake::{now_ms, rfc3339, Snowflake};
use crate::state::{Channel, Store};
use crate::world::channel_type;

type Answer = Result<Json<Value>, ApiError>;
type Created = Result<(StatusCode, Json<Value>), ApiError>;
type Empty = Result<StatusCode, ApiError>;

/// The inactivity periods Discord accepts, in minutes.
const AUTO_ARCHIVE_MINUTES: [u64; 4] = [60, 1440, 4320, 10080];
/// Most pins a channel keeps.
const MAX_PINS: usize = 250;

/// The checked fields of a thread creation.
struct ThreadDraft {
    name: String,
    auto_archive_minutes: Option<u32>,
    kind: Option<u8>,
}

/// Validates `name`, `auto_archive_duration` and (standalone only) `type`, collecting every
/// problem into one 50035 as Discord does.
fn thread_draft(body: &Value, standalone: bool) -> Result<ThreadDraft, ApiError> {
    let mut errors = FormErrors::new();
    let name = match body.get("name") {
        Some(Value::String(name)) => {
            let chars = name.chars().count();
            if !(1..=100).contains(&chars) {
                errors.add(
                    &["name"],
                    "BASE_TYPE_BAD_LENGTH",
                    "Must be between 1 and 100 in length.",
                );
            }
            name.clone()
        }
        None | Some(Value::Null) => {
            errors.add(&["name"], "BASE_TYPE_REQUIRED", "This field is required");
            String::new()
        }
        Some(_) => {
            errors.add(
                &["name"],
                "STRING_TYPE_CONVERT",
                "Could not interpret as string.",
            );
            String::new()
        }
    };
    let auto_archive_minutes = auto_archive_duration(body, &mut errors);
    let kind = match body.get("type") {
        None | Some(Value::Null) => None,
        Some(value) if standalone => match value.as_u64().filter(|k| matches!(k, 10..=12)) {
            Some(kind) => Some(kind as u8),
            None => {
                errors.add(
                    &["type"],
                    "BASE_TYPE_CHOICES",
                    "Value must be one of {10, 11, 12}.",
                );
                None
            }
        },
        Some(_) => None,
    };
    errors.into_result()?;
    Ok(ThreadDraft {
        name,
        auto_archive_minutes,
        kind,
    })
}

/// The parent a thread may be opened in: visible, a text or announcement channel, and one
/// the bot may post in (CREATE_PUBLIC_THREADS goes with SEND_MESSAGES in the fake).
fn thread_parent(store: &Store, parent_id: Snowflake) -> Result<Channel, ApiError> {
    let parent = store.readable_channel(parent_id)?;
    if !matches!(
        parent.kind,
        channel_type::GUILD_TEXT | channel_type::GUILD_ANNOUNCEMENT
    ) {
        return Err(ApiError::cannot_act_on_channel_type());
    }
    if !parent.bot_can_send {
        return Err(ApiError::missing_permissions());
    }
    Ok(parent.clone())
}

fn new_thread(
    s: &Shared,
    id: Snowflake,
    parent: &Channel,
    kind: u8,
    draft: ThreadDraft,
) -> Channel {
    let now = now_ms();
    Channel {
        id,
        guild_id: parent.guild_id,
        name: draft.name,
        kind,
        parent_id: Some(parent.id),
        topic: None,
        position: 0,
        bot_can_see: true,
        bot_can_send: parent.bot_can_send,
        bot_can_manage_messages: parent.bot_can_manage_messages,
        archived: false,
        locked: false,
        auto_archive_minutes: draft.auto_archive_minutes.unwrap_or(1440),
        archive_ms: now,
        // Discord adds whoever opens a thread to its members.
        members: vec![(s.dir.bot_id, now)],
        recipient_id: None,
        last_message_id: None,
        message_count: 0,
        created_ms: now,
        // Threads created over REST are the bot's.
        owner_id: Some(s.dir.bot_id),
    }
}

/// The created thread's answer: the thread, and (as Discord adds to a creation) the bot's
/// membership.
fn created(s: &Shared, thread: &Channel) -> (StatusCode, Json<Value>) {
    let mut value = payloads::channel(&s.dir, thread);
    value["member"] = payloads::thread_member(thread.id, s.dir.bot_id, thread.created_ms);
    (StatusCode::CREATED, Json(value))
}

/// `POST /channels/{id}/threads`: a thread without a starter message (type 12 unless told).
pub(super) async fn create(
    State(s): State<Arc<Shared>>,
    Path(channel_id): Path<String>,
    JsonBody(body): JsonBody,
) -> Created {
    let parent_id = path_id("channel_id", &channel_id)?;
    let mut store = s.lock();
    let parent = thread_parent(&store, parent_id)?;
    let draft = thread_draft(&body, true)?;
    let kind = draft.kind.unwrap_or(channel_type::PRIVATE_THREAD);
    let thread = new_thread(&s, s.ids.next(), &parent, kind, draft);
    store.channels.insert(thread.id, thread.clone());
    s.publish_channel_event(&store, &thread, ChannelChange::Created, false);
    Ok(created(&s, &thread))
}

/// `POST /channels/{id}/messages/{id}/threads`: a thread from a message; it takes the
/// message's id, and a message starts at most one thread (160004).
pub(super) async fn create_from_message(
    State(s): State<Arc<Shared>>,
    JsonBody(body): JsonBody,
    MessagePath(parent_id, message_id): MessagePath,
) -> Created {
    let mut store = s.lock();
    let parent = thread_parent(&store, parent_id)?;
    store.message(parent_id, message_id)?;
    let draft = thread_draft(&body, false)?;
    if store.channels.contains_key(&message_id) {
        return Err(ApiError::thread_already_created());
    }
    let kind = if parent.kind == channel_type::GUILD_ANNOUNCEMENT {
        channel_type::ANNOUNCEMENT_THREAD
    } else {
        channel_type::PUBLIC_THREAD
    };
    let thread = new_thread(&s, message_id, &parent, kind, draft);
    store.channels.insert(thread.id, thread.clone());
    s.publish_channel_event(&store, &thread, ChannelChange::Created, false);
    Ok(created(&s, &thread))
}

/// `PATCH /channels/{id}` on a thread: `name`, `archived`, `locked`, `auto_archive_duration`.
/// The bot has no MANAGE_THREADS: it may not lock, nor reopen a locked thread (50013); other
/// channels need MANAGE_CHANNELS, which it lacks too.
pub(super) async fn modify(
    State(s): State<Arc<Shared>>,
    Path(channel_id): Path<String>,
    JsonBody(body): JsonBody,
) -> Answer {
    let channel_id = path_id("channel_id", &channel_id)?;
    let mut store = s.lock();
    let before = store.readable_channel(channel_id)?.clone();
    if !channel_type::is_thread(before.kind) {
        return Err(ApiError::missing_permissions());
    }
    let mut errors = FormErrors::new();
    let flag = |errors: &mut FormErrors, key: &str| match body.get(key) {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => {
            errors.add(
                &[key],
                "BOOLEAN_TYPE_CONVERT",
                "Must be either true or false.",
            );
            None
        }
    };
    let archived = flag(&mut errors, "archived");
    let locked = flag(&mut errors, "locked");
    let name = match body.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) if (1..=100).contains(&name.chars().count()) => {
            Some(name.clone())
        }
        Some(_) => {
            errors.add(
                &["name"],
                "BASE_TYPE_BAD_LENGTH",
                "Must be between 1 and 100 in length.",
            );
            None
        }
    };
    let minutes = auto_archive_duration(&body, &mut errors);
    errors.into_result()?;
    // Locking, unlocking and reopening a locked thread need MANAGE_THREADS.
    if locked.is_some_and(|l| l != before.locked) || (before.locked && archived == Some(false)) {
        return Err(ApiError::missing_permissions());
    }
    // An archived thread takes only the change that reopens it.
    if before.archived && archived != Some(false) && (name.is_some() || minutes.is_some()) {
        return Err(ApiError::thread_archived());
    }
    let mut after = before.clone();
    if let Some(archived) = archived {
        if archived != after.archived {
            after.archive_ms = now_ms();
        }
        after.archived = archived;
    }
    if let Some(name) = name {
        after.name = name;
    }
    if let Some(minutes) = minutes {
        after.auto_archive_minutes = minutes;
    }
    store.channels.insert(channel_id, after.clone());
    s.publish_channel_event(&store, &after, ChannelChange::Updated, true);
    Ok(Json(payloads::channel(&s.dir, &after)))
}

/// A thread the bot can see, or 10003 / 50001; a channel that is not a thread: 50024.
fn readable_thread(store: &Store, id: Snowflake) -> Result<&Channel, ApiError> {
    let thread = store.readable_channel(id)?;
    if !channel_type::is_thread(thread.kind) {
        return Err(ApiError::cannot_act_on_channel_type());
    }
    Ok(thread)
}

/// `PUT /channels/{id}/thread-members/@me`: joins a thread (not an archived one: 50083).
pub(super) async fn join(State(s): State<Arc<Shared>>, Path(channel_id): Path<String>) -> Empty {
    let channel_id = path_id("channel_id", &channel_id)?;
    let mut store = s.lock();
    let thread = readable_thread(&store, channel_id)?;
    if thread.archived {
        return Err(ApiError::thread_archived());
    }
    let bot = s.dir.bot_id;
    if let Some(thread) = store.channels.get_mut(&channel_id) {
        if !thread.members.iter().any(|(u, _)| *u == bot) {
            thread.members.push((bot, now_ms()));
        }
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /channels/{id}/thread-members`: the members, by user id, with `limit` (1-100,
/// default 100) and `after`.
pub(super) async fn members(
    State(s): State<Arc<Shared>>,
    Path(channel_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Answer {
    let channel_id = path_id("channel_id", &channel_id)?;
    let limit = super::messages::query_limit(&query, 100)?;
    let after = query
        .get("after")
        .map(|v| path_id("after", v))
        .transpose()?;
    let store = s.lock();
    let thread = readable_thread(&store, channel_id)?;
    let mut members = thread.members.clone();
    members.sort();
    let out: Vec<Value> = members
        .into_iter()
        .filter(|(u, _)| after.is_none_or(|a| *u > a))
        .take(limit)
        .map(|(u, at)| payloads::thread_member(channel_id, u, at))
        .collect();
    Ok(Json(Value::Array(out)))
}

/// The `members` of a threads listing: the bot's own memberships among `threads`.
fn own_memberships(s: &Shared, threads: &[&Channel]) -> Vec<Value> {
    threads
        .iter()
        .filter_map(|t| {
            t.members
                .iter()
                .find(|(u, _)| *u == s.dir.bot_id)
                .map(|(u, at)| payloads::thread_member(t.id, *u, *at))
        })
        .collect()
}

/// `GET /guilds/{id}/threads/active`: every unarchived thread of the guild the bot can see.
pub(super) async fn active(State(s): State<Arc<Shared>>, Path(guild_id): Path<String>) -> Answer {
    let guild_id = path_id("guild_id", &guild_id)?;
    if !s.world.guilds.iter().any(|g| g.id == guild_id) {
        return Err(ApiError::unknown_guild());
    }
    let store = s.lock();
    let mut threads: Vec<&Channel> = store
        .channels
        .values()
        .filter(|c| c.guild_id == Some(guild_id) && channel_type::is_thread(c.kind))
        .filter(|c| !c.archived && store.bot_can_see(c))
        .collect();
    threads.sort_by_key(|c| c.id);
    Ok(Json(json!({
        "threads": threads.iter().map(|t| payloads::channel(&s.dir, t)).collect::<Vec<_>>(),
        "members": own_memberships(&s, &threads),
        "has_more": false,
    })))
}

/// `GET /channels/{id}/threads/archived/public`: archived public (and announcement) threads,
/// most recently archived first, with `before` (an ISO8601 timestamp) and `limit` (2-100,
/// default 50).
pub(super) async fn archived_public(
    State(s): State<Arc<Shared>>,
    Path(channel_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Answer {
    let (store, channel_id, Page { limit, before }) =
        readable_page(&s, &channel_id, &query, 2..=100)?;
    let mut threads: Vec<&Channel> = store
        .channels
        .values()
        .filter(|c| c.parent_id == Some(channel_id) && c.archived)
        .filter(|c| {
            matches!(
                c.kind,
                channel_type::PUBLIC_THREAD | channel_type::ANNOUNCEMENT_THREAD
            )
        })
        .filter(|c| before.is_none_or(|b| c.archive_ms < b))
        .collect();
    threads.sort_by(|a, b| b.archive_ms.cmp(&a.archive_ms).then(b.id.cmp(&a.id)));
    let has_more = threads.len() > limit;
    threads.truncate(limit);
    Ok(Json(json!({
        "threads": threads.iter().map(|t| payloads::channel(&s.dir, t)).collect::<Vec<_>>(),
        "members": own_memberships(&s, &threads),
        "has_more": has_more,
    })))
}

/// A body's `auto_archive_duration` in minutes, one Discord offers; another is added to
/// `errors`.
fn auto_archive_duration(body: &Value, errors: &mut FormErrors) -> Option<u32> {
    match body.get("auto_archive_duration") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_u64().filter(|m| AUTO_ARCHIVE_MINUTES.contains(m)) {
            Some(minutes) => Some(minutes as u32),
            None => {
                errors.add(
                    &["auto_archive_duration"],
                    "BASE_TYPE_CHOICES",
                    "Value must be one of {60, 1440, 4320, 10080}.",
                );
                None
            }
        },
    }
}

/// A page of a listing: at most `limit`, only those before `before` (Unix ms).
struct Page {
    limit: usize,
    before: Option<u64>,
}

/// The channel of a listing's path, which the bot must be able to read, with the store locked,
/// and the page its query asks for: `limit` within `limits` (default 50), `before` an ISO8601
/// timestamp; every bad parameter in one 50035.
fn readable_page<'s>(
    s: &'s Shared,
    channel_id: &str,
    query: &HashMap<String, String>,
    limits: std::ops::RangeInclusive<usize>,
) -> Result<(MutexGuard<'s, Store>, Snowflake, Page), ApiError> {
    let channel_id = path_id("channel_id", channel_id)?;
    let mut errors = FormErrors::new();
    let limit = super::messages::limit_in(query, limits, 50, &mut errors);
    let before = timestamp_query(query, "before", &mut errors);
    errors.into_result()?;
    let store = s.lock();
    store.readable_channel(channel_id)?;
    Ok((store, channel_id, Page { limit, before }))
}

/// An ISO8601 query parameter as Unix ms; a bad one is added to `errors`.
fn timestamp_query(
    query: &HashMap<String, String>,
    key: &str,
    errors: &mut FormErrors,
) -> Option<u64> {
    let text = query.get(key)?;
    match DateTime::parse_from_rfc3339(text)
        .ok()
        .and_then(|t| u64::try_from(t.timestamp_millis()).ok())
    {
        Some(ms) => Some(ms),
        None => {
            errors.add(&[key], "DATE_TYPE_PARSE", "Could not parse date.");
            None
        }
    }
}

/// Pinning needs MANAGE_MESSAGES in a guild channel (PIN_MESSAGES in the fake is the same
/// grant); an archived thread takes no pins.
fn pinnable(store: &Store, channel_id: Snowflake) -> Result<Channel, ApiError> {
    let channel = store.readable_channel(channel_id)?;
    if channel.guild_id.is_some() && !channel.bot_can_manage_messages {
        return Err(ApiError::missing_permissions());
    }
    if channel.archived {
        return Err(ApiError::thread_archived());
    }
    Ok(channel.clone())
}

fn publish_pins_update(s: &Shared, store: &Store, channel: &Channel) {
    if !store.bot_can_see(channel) {
        return;
    }
    let last = store
        .channel_messages(channel.id)
        .filter_map(|m| m.pinned_ms)
        .max();
    let mut d = json!({
        "channel_id": channel.id,
        "last_pin_timestamp": last.map(rfc3339),
    });
    let intent = match channel.guild_id {
        Some(guild) => {
            d["guild_id"] = json!(guild);
            intents::GUILDS
        }
        None => intents::DIRECT_MESSAGES,
    };
    s.publish("CHANNEL_PINS_UPDATE", &d, Some(intent), channel.guild_id);
}

/// `PUT /channels/{id}/messages/pins/{id}`: pins a message (again: a no-op); 30003 past 250.
pub(super) async fn pin(
    State(s): State<Arc<Shared>>,
    MessagePath(channel_id, message_id): MessagePath,
) -> Empty {
    let mut store = s.lock();
    let channel = pinnable(&store, channel_id)?;
    if store.message(channel_id, message_id)?.pinned {
        return Ok(StatusCode::NO_CONTENT);
    }
    if store
        .channel_messages(channel_id)
        .filter(|m| m.pinned)
        .count()
        >= MAX_PINS
    {
        return Err(ApiError::max_pins());
    }
    // Pin times are distinct per channel, so a `before` cursor never skips a pin.
    let last = store
        .channel_messages(channel_id)
        .filter_map(|m| m.pinned_ms)
        .max()
        .unwrap_or(0);
    let message = store.message_mut(channel_id, message_id)?;
    message.pinned = true;
    message.pinned_ms = Some(now_ms().max(last + 1));
    publish_pins_update(&s, &store, &channel);
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /channels/{id}/messages/pins/{id}`: unpins (a message not pinned: a no-op).
pub(super) async fn unpin(
    State(s): State<Arc<Shared>>,
    MessagePath(channel_id, message_id): MessagePath,
) -> Empty {
    let mut store = s.lock();
    let channel = pinnable(&store, channel_id)?;
    let message = store.message_mut(channel_id, message_id)?;
    if !message.pinned {
        return Ok(StatusCode::NO_CONTENT);
    }
    message.pinned = false;
    message.pinned_ms = None;
    publish_pins_update(&s, &store, &channel);
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /channels/{id}/messages/pins`: `{items: [{pinned_at, message}], has_more}`, most
/// recently pinned first, with `before` (ISO8601) and `limit` (1-50, default 50).
pub(super) async fn pins(
    State(s): State<Arc<Shared>>,
    Path(channel_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Answer {
    let (store, channel_id, Page { limit, before }) =
        readable_page(&s, &channel_id, &query, 1..=50)?;
    let mut pinned: Vec<_> = store
        .channel_messages(channel_id)
        .filter_map(|m| m.pinned_ms.map(|at| (at, m)))
        .filter(|(at, _)| before.is_none_or(|b| *at < b))
        .collect();
    pinned.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.id.cmp(&a.1.id)));
    let has_more = pinned.len() > limit;
    pinned.truncate(limit);
    let items: Vec<Value> = pinned
        .into_iter()
        .map(|(at, m)| {
            let mut message = payloads::message(&s.dir, &store, m, false);
            if let Some(map) = message.as_object_mut() {
                map.remove("guild_id");
                map.remove("member");
            }
            json!({ "pinned_at": rfc3339(at), "message": message })
        })
        .collect();
    Ok(Json(json!({ "items": items, "has_more": has_more })))
}
