//! Interaction callbacks and the follow-up webhook routes poise uses
//! (`/webhooks/{application}/{token}`, `.../messages/@original`, `.../messages/{id}`).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::{path_id, JsonBody};
use crate::api_error::{ApiError, FormErrors};
use crate::payloads;
use crate::shared::{NewMessage, Shared};
use crate::snowflake::Snowflake;
use crate::state::InteractionMeta;
use crate::validation::{self, EditDraft, MessageDraft};

/// Callback types Discord accepts for a slash-command interaction.
const CHANNEL_MESSAGE_WITH_SOURCE: u64 = 4;
const DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE: u64 = 5;
const MODAL: u64 = 9;
/// Callback types only a component interaction takes: acknowledge and edit later, or edit the
/// message the component is on now.
const DEFERRED_UPDATE_MESSAGE: u64 = 6;
const UPDATE_MESSAGE: u64 = 7;

fn form_error(field: &str, code: &'static str, message: &str) -> ApiError {
    let mut errors = FormErrors::new();
    errors.add(&[field], code, message);
    ApiError::invalid_form(errors)
}

/// Creates the bot's message answering an interaction.
fn answer_message(
    s: &Shared,
    interaction_id: Snowflake,
    draft: MessageDraft,
) -> Result<Value, ApiError> {
    let (channel_id, meta) = {
        let store = s.lock();
        let i = store
            .interactions
            .get(&interaction_id)
            .ok_or_else(ApiError::unknown_interaction)?;
        (
            i.channel_id,
            InteractionMeta {
                id: i.id,
                name: i.command_name.clone(),
                user_id: i.user_id,
            },
        )
    };
    s.create_message(NewMessage {
        author_id: s.dir.bot_id,
        channel_id,
        draft,
        as_bot_over_rest: false,
        webhook_id: Some(s.dir.application_id),
        interaction: Some(meta),
    })
}

fn message_id_of(value: &Value) -> Option<Snowflake> {
    value
        .get("id")
        .and_then(Value::as_str)
        .and_then(Snowflake::from_digits)
}

/// `POST /interactions/{id}/{token}/callback`.
pub(super) async fn callback(
    State(s): State<Arc<Shared>>,
    Path((interaction_id, token)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    let interaction_id = path_id("interaction_id", &interaction_id)?;
    let (component, channel_id) = {
        let store = s.lock();
        let i = store
            .interactions
            .get(&interaction_id)
            .ok_or_else(ApiError::unknown_interaction)?;
        if i.token != token {
            return Err(ApiError::unknown_interaction());
        }
        if i.response.is_some() {
            return Err(ApiError::already_acknowledged());
        }
        (i.component.clone(), i.channel_id)
    };
    let kind = match body.get("type").map(Value::as_u64) {
        Some(Some(kind)) => kind,
        Some(None) => {
            return Err(form_error(
                "type",
                "NUMBER_TYPE_COERCE",
                "Value is not int.",
            ))
        }
        None => {
            return Err(form_error(
                "type",
                "BASE_TYPE_REQUIRED",
                "This field is required",
            ))
        }
    };
    let message = match kind {
        CHANNEL_MESSAGE_WITH_SOURCE => {
            let data = body.get("data").cloned().unwrap_or(json!({}));
            let draft = validation::message_create(&data)?;
            Some(answer_message(&s, interaction_id, draft)?)
        }
        DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE | MODAL => None,
        DEFERRED_UPDATE_MESSAGE if component.is_some() => None,
        UPDATE_MESSAGE => {
            let Some((message_id, _)) = &component else {
                return Err(form_error(
                    "type",
                    "INTERACTION_RESPONSE_TYPE_INVALID",
                    "Invalid interaction response type for an application command",
                ));
            };
            let data = body.get("data").cloned().unwrap_or(json!({}));
            let draft: EditDraft = validation::message_edit(&data)?;
            s.edit_message(channel_id, *message_id, draft, false)?;
            None
        }
        _ => {
            return Err(form_error(
                "type",
                "INTERACTION_RESPONSE_TYPE_INVALID",
                "Invalid interaction response type for an application command",
            ))
        }
    };
    {
        let mut store = s.lock();
        if let Some(i) = store.interactions.get_mut(&interaction_id) {
            i.response = Some(body.clone());
            i.original_message = message.as_ref().and_then(message_id_of);
        }
    }
    if query.get("with_response").map(String::as_str) == Some("true") {
        Ok(Json(json!({
            "interaction": { "id": interaction_id, "type": 2 },
            "resource": { "type": kind, "message": message },
        }))
        .into_response())
    } else {
        Ok(StatusCode::NO_CONTENT.into_response())
    }
}

/// The interaction a webhook (application id + token) belongs to.
fn interaction_for(s: &Shared, app_id: &str, token: &str) -> Result<Snowflake, ApiError> {
    let app = Snowflake::from_digits(app_id).ok_or_else(ApiError::unknown_webhook)?;
    if app != s.dir.application_id {
        return Err(ApiError::unknown_webhook());
    }
    let mut store = s.lock();
    let i = store.interaction_by_token(token)?;
    Ok(i.id)
}

/// `POST /webhooks/{app}/{token}`: a follow-up message.
pub(super) async fn create_followup(
    State(s): State<Arc<Shared>>,
    Path((app_id, token)): Path<(String, String)>,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let interaction_id = interaction_for(&s, &app_id, &token)?;
    if s.lock()
        .interactions
        .get(&interaction_id)
        .is_none_or(|i| i.response.is_none())
    {
        return Err(ApiError::unknown_webhook());
    }
    let draft = validation::message_create(&body)?;
    let message = answer_message(&s, interaction_id, draft)?;
    if let Some(id) = message_id_of(&message) {
        if let Some(i) = s.lock().interactions.get_mut(&interaction_id) {
            i.followups.push(id);
        }
    }
    Ok(Json(message))
}

/// Resolves `@original` or a follow-up id to (channel, message).
fn webhook_message(
    s: &Shared,
    interaction_id: Snowflake,
    message_id: &str,
) -> Result<(Snowflake, Option<Snowflake>), ApiError> {
    let store = s.lock();
    let i = store
        .interactions
        .get(&interaction_id)
        .ok_or_else(ApiError::unknown_webhook)?;
    if message_id == "@original" {
        return Ok((i.channel_id, i.original_message));
    }
    let id = path_id("message_id", message_id)?;
    if i.original_message == Some(id) || i.followups.contains(&id) {
        Ok((i.channel_id, Some(id)))
    } else {
        Err(ApiError::unknown_message())
    }
}

pub(super) async fn get_webhook_message(
    State(s): State<Arc<Shared>>,
    Path((app_id, token, message_id)): Path<(String, String, String)>,
) -> Result<Json<Value>, ApiError> {
    let interaction_id = interaction_for(&s, &app_id, &token)?;
    let (channel_id, id) = webhook_message(&s, interaction_id, &message_id)?;
    let id = id.ok_or_else(ApiError::unknown_message)?;
    let store = s.lock();
    let message = store.message(channel_id, id)?;
    Ok(Json(payloads::message(&s.dir, &store, message, false)))
}

pub(super) async fn edit_webhook_message(
    State(s): State<Arc<Shared>>,
    Path((app_id, token, message_id)): Path<(String, String, String)>,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let interaction_id = interaction_for(&s, &app_id, &token)?;
    let (channel_id, id) = webhook_message(&s, interaction_id, &message_id)?;
    match id {
        Some(id) => {
            let draft: EditDraft = validation::message_edit(&body)?;
            Ok(Json(s.edit_message(channel_id, id, draft, false)?))
        }
        None => {
            // Editing the original of a deferred response posts it.
            let acknowledged = s
                .lock()
                .interactions
                .get(&interaction_id)
                .is_some_and(|i| i.response.is_some());
            if !acknowledged {
                return Err(ApiError::unknown_message());
            }
            let draft = validation::message_create(&body)?;
            let message = answer_message(&s, interaction_id, draft)?;
            if let Some(i) = s.lock().interactions.get_mut(&interaction_id) {
                i.original_message = message_id_of(&message);
            }
            Ok(Json(message))
        }
    }
}

pub(super) async fn delete_webhook_message(
    State(s): State<Arc<Shared>>,
    Path((app_id, token, message_id)): Path<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    let interaction_id = interaction_for(&s, &app_id, &token)?;
    let (channel_id, id) = webhook_message(&s, interaction_id, &message_id)?;
    let id = id.ok_or_else(ApiError::unknown_message)?;
    s.delete_message(channel_id, id, false)?;
    Ok(StatusCode::NO_CONTENT)
}
