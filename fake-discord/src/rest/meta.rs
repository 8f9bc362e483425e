//! Gateway discovery, the current user and application, DM creation and application
//! command registration.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::Method;
use axum::Json;
use serde_json::{json, Value};

use super::{path_id, JsonBody};
use crate::api_error::{ApiError, FormErrors};
use crate::payloads;
use crate::shared::Shared;
use crate::snowflake::{now_ms, Snowflake};
use crate::state::dm_channel;

type Answer = Result<Json<Value>, ApiError>;

pub(super) async fn gateway(State(s): State<Arc<Shared>>) -> Json<Value> {
    Json(json!({ "url": s.gateway_url }))
}

/// `GET /gateway/bot`: the recommended shard count and the session-start budget as the
/// gateway's settings have them now.
pub(super) async fn gateway_bot(State(s): State<Arc<Shared>>) -> Json<Value> {
    let (shards, (total, remaining, reset_after, max_concurrency)) = s.hub.gateway_bot();
    Json(json!({
        "url": s.gateway_url,
        "shards": shards,
        "session_start_limit": {
            "total": total,
            "remaining": remaining,
            "reset_after": reset_after,
            "max_concurrency": max_concurrency,
        },
    }))
}

pub(super) async fn current_user(State(s): State<Arc<Shared>>) -> Json<Value> {
    Json(s.dir.current_user())
}

pub(super) async fn get_user(State(s): State<Arc<Shared>>, Path(user_id): Path<String>) -> Answer {
    let user_id = path_id("user_id", &user_id)?;
    if !s.dir.has_user(user_id) {
        return Err(ApiError::unknown_user());
    }
    Ok(Json(s.dir.user(user_id)))
}

pub(super) async fn application(State(s): State<Arc<Shared>>) -> Json<Value> {
    Json(payloads::application(&s.dir, &s.world))
}

/// `POST /users/@me/channels` `{"recipient_id"}`: the DM channel with that user.
pub(super) async fn create_dm(State(s): State<Arc<Shared>>, JsonBody(body): JsonBody) -> Answer {
    let recipient = body.get("recipient_id").and_then(|v| match v {
        Value::String(text) => Snowflake::from_digits(text),
        Value::Number(n) => n.as_u64().map(Snowflake),
        _ => None,
    });
    let Some(recipient) = recipient else {
        let mut errors = FormErrors::new();
        errors.add(
            &["recipient_id"],
            "BASE_TYPE_REQUIRED",
            "This field is required",
        );
        return Err(ApiError::invalid_form(errors));
    };
    if !s.dir.has_user(recipient) || recipient == s.dir.bot_id {
        return Err(ApiError::unknown_user());
    }
    let mut store = s.lock();
    let existing = store
        .channels
        .values()
        .find(|c| c.recipient_id == Some(recipient))
        .map(|c| c.id);
    let id = match existing {
        Some(id) => id,
        None => {
            let id = s.ids.next();
            store
                .channels
                .insert(id, dm_channel(id, recipient, now_ms()));
            id
        }
    };
    let channel = store.channel(id)?;
    Ok(Json(payloads::channel(&s.dir, channel)))
}

fn check_application(s: &Shared, app_id: &str) -> Result<(), ApiError> {
    let app_id = path_id("application_id", app_id)?;
    if app_id != s.dir.application_id {
        return Err(ApiError::unknown_application());
    }
    Ok(())
}

/// Checks one command body the way Discord does (name 1–32 lowercase chars, description
/// 1–100 chars for chat-input commands).
fn check_command(body: &Value, prefix: &[&str], errors: &mut FormErrors) {
    let Some(map) = body.as_object() else {
        errors.add(
            prefix,
            "DICT_TYPE_CONVERT",
            "Only dictionaries may be used in a DictType",
        );
        return;
    };
    let kind = map.get("type").and_then(Value::as_u64).unwrap_or(1);
    let path = |field: &'static str| -> Vec<&str> {
        let mut p = prefix.to_vec();
        p.push(field);
        p
    };
    match map.get("name").and_then(Value::as_str) {
        None => errors.add(
            &path("name"),
            "BASE_TYPE_REQUIRED",
            "This field is required",
        ),
        Some(name) => {
            let len = name.chars().count();
            let valid_chars = kind != 1
                || name
                    .chars()
                    .all(|c| c == '-' || c == '_' || c.is_alphanumeric() && !c.is_uppercase());
            if !(1..=32).contains(&len) || !valid_chars {
                errors.add(
                    &path("name"),
                    "APPLICATION_COMMAND_INVALID_NAME",
                    "Command name is invalid",
                );
            }
        }
    }
    if kind == 1 {
        match map.get("description").and_then(Value::as_str) {
            Some(d) if (1..=100).contains(&d.chars().count()) => {}
            Some(_) => errors.add(
                &path("description"),
                "BASE_TYPE_BAD_LENGTH",
                "Must be between 1 and 100 in length.",
            ),
            None => errors.add(
                &path("description"),
                "BASE_TYPE_REQUIRED",
                "This field is required",
            ),
        }
    }
}

fn register(
    s: &Shared,
    guild_id: Option<Snowflake>,
    body: &Value,
    replace_all: bool,
) -> Result<Value, ApiError> {
    let items: Vec<Value> = if replace_all {
        match body.as_array() {
            Some(items) => items.clone(),
            None => {
                let mut errors = FormErrors::new();
                errors.add(&[], "BASE_TYPE_LIST", "Must be a list.");
                return Err(ApiError::invalid_form(errors));
            }
        }
    } else {
        vec![body.clone()]
    };
    let mut errors = FormErrors::new();
    for (i, item) in items.iter().enumerate() {
        let index = i.to_string();
        let prefix: Vec<&str> = if replace_all { vec![&index] } else { vec![] };
        check_command(item, &prefix, &mut errors);
    }
    errors.into_result()?;
    let mut store = s.lock();
    let existing = match guild_id {
        Some(g) => store.guild_commands.get(&g).cloned().unwrap_or_default(),
        None => store.global_commands.clone(),
    };
    let mut registered: Vec<Value> = if replace_all {
        Vec::new()
    } else {
        existing.clone()
    };
    let mut out = Vec::new();
    for item in &items {
        let Some(map) = item.as_object() else {
            continue;
        };
        let name = map.get("name").cloned().unwrap_or(Value::Null);
        let id = existing
            .iter()
            .find(|c| c.get("name") == Some(&name))
            .and_then(|c| c.get("id"))
            .and_then(Value::as_str)
            .and_then(Snowflake::from_digits)
            .unwrap_or_else(|| s.ids.next());
        let command = payloads::command(&s.dir, id, guild_id, map);
        registered.retain(|c| c.get("name") != Some(&name));
        registered.push(command.clone());
        out.push(command);
    }
    match guild_id {
        Some(g) => {
            store.guild_commands.insert(g, registered);
        }
        None => store.global_commands = registered,
    }
    Ok(if replace_all {
        Value::Array(out)
    } else {
        out.into_iter().next().unwrap_or(Value::Null)
    })
}

fn known_guild(s: &Shared, guild_id: &str) -> Result<Snowflake, ApiError> {
    let guild_id = path_id("guild_id", guild_id)?;
    if !s.world.guilds.iter().any(|g| g.id == guild_id) {
        return Err(ApiError::unknown_guild());
    }
    Ok(guild_id)
}

/// `PUT` (replace them all) or `POST` (add or update one) of the global commands.
pub(super) async fn write_global_commands(
    method: Method,
    State(s): State<Arc<Shared>>,
    Path(app_id): Path<String>,
    JsonBody(body): JsonBody,
) -> Answer {
    check_application(&s, &app_id)?;
    Ok(Json(register(&s, None, &body, method == Method::PUT)?))
}

pub(super) async fn get_global_commands(
    State(s): State<Arc<Shared>>,
    Path(app_id): Path<String>,
) -> Answer {
    check_application(&s, &app_id)?;
    Ok(Json(Value::Array(s.lock().global_commands.clone())))
}

/// `PUT` (replace them all) or `POST` (add or update one) of a guild's commands.
pub(super) async fn write_guild_commands(
    method: Method,
    State(s): State<Arc<Shared>>,
    Path((app_id, guild_id)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> Answer {
    check_application(&s, &app_id)?;
    let guild_id = known_guild(&s, &guild_id)?;
    Ok(Json(register(
        &s,
        Some(guild_id),
        &body,
        method == Method::PUT,
    )?))
}

pub(super) async fn get_guild_commands(
    State(s): State<Arc<Shared>>,
    Path((app_id, guild_id)): Path<(String, String)>,
) -> Answer {
    check_application(&s, &app_id)?;
    let guild_id = known_guild(&s, &guild_id)?;
    let commands = s
        .lock()
        .guild_commands
        .get(&guild_id)
        .cloned()
        .unwrap_or_default();
    Ok(Json(Value::Array(commands)))
}
