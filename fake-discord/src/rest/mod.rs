//! Discord's REST API v10 under `/api/v10`: the routes serenity and poise use, one layer that
//! records every request, applies injected faults, checks the `Authorization` header and
//! enforces Discord's rate limits ([`ratelimit`]), and a loud 404 for anything else.

pub(crate) mod channels;
mod interactions;
mod messages;
mod meta;
pub mod ratelimit;
mod threads;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use serde_json::Value;

use crate::api_error::{ApiError, FormErrors};
use crate::attachments::{self, MultipartForm};
use crate::shared::Shared;
use crate::snowflake::Snowflake;
use crate::state::{RecordedPart, RecordedRequest};

/// Largest request body accepted without files (Discord's own upload limit for unboosted
/// guilds); multipart bodies may be larger, up to ten files at the upload limit.
pub const MAX_BODY_BYTES: usize = 25 * 1024 * 1024;

/// The largest request body read for a given per-file upload limit.
pub fn max_request_bytes(max_upload_bytes: usize) -> usize {
    max_upload_bytes
        .saturating_mul(attachments::MAX_FILES)
        .saturating_add(1024 * 1024)
        .max(MAX_BODY_BYTES)
}

/// The request body as the recording layer parsed it.
#[derive(Clone, Debug)]
pub(crate) enum ParsedBody {
    Empty,
    Json(Value),
    Invalid,
    /// A `multipart/form-data` body.
    Form(Arc<MultipartForm>),
    /// A `multipart/form-data` body that could not be parsed, and why.
    BadForm(String),
}

/// A handler's JSON body: 50109 if it was not JSON; `{}` if there was none.
pub(crate) struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequestParts<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        match parts.extensions.get::<ParsedBody>() {
            Some(ParsedBody::Json(v)) => Ok(JsonBody(v.clone())),
            Some(ParsedBody::Invalid | ParsedBody::Form(_) | ParsedBody::BadForm(_)) => {
                Err(ApiError::invalid_json())
            }
            Some(ParsedBody::Empty) | None => Ok(JsonBody(Value::Object(Default::default()))),
        }
    }
}

/// A message-create body: JSON (as [`JsonBody`]) or a `multipart/form-data` form; a form
/// that could not be parsed answers 50035.
pub(crate) enum MessageBody {
    Json(Value),
    Form(Arc<MultipartForm>),
}

impl<S: Send + Sync> FromRequestParts<S> for MessageBody {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        match parts.extensions.get::<ParsedBody>() {
            Some(ParsedBody::Json(v)) => Ok(MessageBody::Json(v.clone())),
            Some(ParsedBody::Invalid) => Err(ApiError::invalid_json()),
            Some(ParsedBody::Form(form)) => Ok(MessageBody::Form(form.clone())),
            Some(ParsedBody::BadForm(reason)) => {
                let mut errors = FormErrors::new();
                errors.add(
                    &[],
                    "MULTIPART_INVALID",
                    format!("The multipart/form-data body cannot be parsed: {reason}"),
                );
                Err(ApiError::invalid_form(errors))
            }
            Some(ParsedBody::Empty) | None => {
                Ok(MessageBody::Json(Value::Object(Default::default())))
            }
        }
    }
}

/// The `{channel_id}/messages/{message_id}` of a message route, both parsed as [`path_id`]
/// does (50035 when one is not a snowflake): `MessagePath(channel_id, message_id)`.
pub(crate) struct MessagePath(pub Snowflake, pub Snowflake);

impl<S: Send + Sync> FromRequestParts<S> for MessagePath {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Path((channel_id, message_id)) =
            axum::extract::Path::<(String, String)>::from_request_parts(parts, state)
                .await
                .map_err(IntoResponse::into_response)?;
        path_id("channel_id", &channel_id)
            .and_then(|channel| Ok(MessagePath(channel, path_id("message_id", &message_id)?)))
            .map_err(IntoResponse::into_response)
    }
}

/// Parses an id from a path segment as Discord does (50035 when it is not a snowflake).
pub(crate) fn path_id(field: &str, text: &str) -> Result<Snowflake, ApiError> {
    Snowflake::from_digits(text).ok_or_else(|| {
        let mut errors = crate::api_error::FormErrors::new();
        errors.add(
            &[field],
            "NUMBER_TYPE_COERCE",
            format!("Value \"{text}\" is not snowflake."),
        );
        ApiError::invalid_form(errors)
    })
}

/// The `/api/v10` router.
pub fn router(shared: Arc<Shared>) -> Router {
    let api = Router::new()
        .route("/gateway", get(meta::gateway))
        .route("/gateway/bot", get(meta::gateway_bot))
        .route("/users/@me", get(meta::current_user))
        .route("/users/@me/channels", post(meta::create_dm))
        .route("/users/{user_id}", get(meta::get_user))
        .route("/oauth2/applications/@me", get(meta::application))
        .route("/applications/@me", get(meta::application))
        .route(
            "/applications/{app_id}/commands",
            put(meta::write_global_commands)
                .get(meta::get_global_commands)
                .post(meta::write_global_commands),
        )
        .route(
            "/applications/{app_id}/guilds/{guild_id}/commands",
            put(meta::write_guild_commands)
                .get(meta::get_guild_commands)
                .post(meta::write_guild_commands),
        )
        .route(
            "/channels/{channel_id}",
            get(messages::get_channel)
                .patch(channels::modify)
                .delete(channels::delete),
        )
        .route("/guilds/{guild_id}/channels", post(channels::create))
        .route("/channels/{channel_id}/threads", post(threads::create))
        .route(
            "/channels/{channel_id}/messages/{message_id}/threads",
            post(threads::create_from_message),
        )
        .route(
            "/channels/{channel_id}/thread-members/@me",
            put(threads::join),
        )
        .route(
            "/channels/{channel_id}/thread-members",
            get(threads::members),
        )
        .route(
            "/channels/{channel_id}/threads/archived/public",
            get(threads::archived_public),
        )
        .route("/guilds/{guild_id}/threads/active", get(threads::active))
        .route("/channels/{channel_id}/messages/pins", get(threads::pins))
        .route(
            "/channels/{channel_id}/messages/pins/{message_id}",
            put(threads::pin).delete(threads::unpin),
        )
        .route(
            "/channels/{channel_id}/messages",
            get(messages::list).post(messages::create),
        )
        .route(
            "/channels/{channel_id}/messages/bulk-delete",
            post(messages::bulk_delete),
        )
        .route(
            "/channels/{channel_id}/messages/{message_id}",
            get(messages::get_one)
                .patch(messages::edit)
                .delete(messages::delete),
        )
        .route(
            "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me",
            put(messages::react).delete(messages::react),
        )
        .route(
            "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}",
            get(messages::reactors),
        )
        .route("/channels/{channel_id}/typing", post(messages::typing))
        .route(
            "/interactions/{interaction_id}/{token}/callback",
            post(interactions::callback),
        )
        .route(
            "/webhooks/{app_id}/{token}",
            post(interactions::create_followup),
        )
        .route(
            "/webhooks/{app_id}/{token}/messages/{message_id}",
            get(interactions::get_webhook_message)
                .patch(interactions::edit_webhook_message)
                .delete(interactions::delete_webhook_message),
        )
        .method_not_allowed_fallback(method_not_allowed);
    Router::new()
        .nest("/api/v10", api)
        .fallback(no_route)
        .layer(middleware::from_fn_with_state(shared.clone(), record))
        // `record` bounds and buffers bodies itself; the multipart parser must not apply
        // axum's 2 MB default on top.
        .layer(DefaultBodyLimit::disable())
        .with_state(shared)
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    tracing::warn!(%method, path = %uri.path(), "fake-discord has no such route; answering 404");
    ApiError::not_found()
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    tracing::warn!(%method, path = %uri.path(), "fake-discord route exists but not for this method; answering 405");
    ApiError::method_not_allowed()
}

/// Records the request, applies faults, auth and rate limits (in that order), stamps
/// rate-limit headers.
async fn record(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let arrived_ms = crate::snowflake::now_ms();
    let (mut parts, body) = request.into_parts();
    let method = parts.method.to_string();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().map(str::to_string);
    let template = parts
        .extensions
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_owned());
    let log = |logged, status| {
        log_request(
            &shared,
            arrived_ms,
            &method,
            &path,
            query.as_deref(),
            logged,
            status,
        );
    };
    let Ok(bytes) = axum::body::to_bytes(body, shared.max_request_bytes).await else {
        let response = ApiError::entity_too_large().into_response();
        log((None, Vec::new()), response.status());
        return response;
    };
    let parsed = if attachments::is_multipart(&parts) {
        match attachments::parse_multipart(&parts, bytes.clone()).await {
            Ok(form) => ParsedBody::Form(Arc::new(form)),
            Err(reason) => {
                tracing::debug!(%method, %path, %reason, "unparseable multipart body");
                ParsedBody::BadForm(reason)
            }
        }
    } else if bytes.is_empty() {
        ParsedBody::Empty
    } else {
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) => ParsedBody::Json(v),
            Err(_) => ParsedBody::Invalid,
        }
    };
    let logged = match &parsed {
        ParsedBody::Json(v) => (Some(v.clone()), Vec::new()),
        ParsedBody::Form(form) => (form.payload_value(), form.recorded_parts()),
        _ => (None, Vec::new()),
    };

    let fault = shared.lock().take_rest_fault(&path);
    let response = if let Some(fault) = fault {
        tracing::info!(%method, %path, status = fault.status, "answering with an injected fault");
        let status =
            StatusCode::from_u16(fault.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status == StatusCode::TOO_MANY_REQUESTS {
            ApiError::rate_limited(fault.retry_after).into_response()
        } else {
            ApiError::with_status(status).into_response()
        }
    } else if !is_authorized(&parts, &path, &shared.world.bot) {
        ApiError::unauthorized().into_response()
    } else {
        // Unknown routes (no template) answer 404 without touching any bucket.
        let admitted = template.as_deref().map(|template| {
            shared
                .rates
                .admit(&parts.method, template, &path, crate::snowflake::now_ms())
        });
        match admitted {
            Some(Err(refusal)) => {
                tracing::info!(%method, %path, retry_after_ms = refusal.retry_after_ms, global = refusal.global, "rate limited");
                refusal.into_response()
            }
            admitted => {
                parts.extensions.insert(parsed);
                let mut response = next
                    .run(Request::from_parts(parts, Body::from(bytes)))
                    .await;
                if let Some(Ok(stamp)) = admitted {
                    stamp.write(response.headers_mut());
                }
                response
            }
        }
    };
    log(logged, response.status());
    response
}

fn is_authorized(parts: &Parts, path: &str, bot: &crate::world::BotSpec) -> bool {
    if path == "/api/v10/gateway" || !path.starts_with("/api/") {
        return true;
    }
    parts
        .headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            (v.starts_with("Bot ") && bot.accepts_token(v))
                || (v.starts_with("Bearer ") && v.len() > 7)
        })
}

fn log_request(
    shared: &Shared,
    arrived_ms: u64,
    method: &str,
    path: &str,
    query: Option<&str>,
    (body, parts): (Option<Value>, Vec<RecordedPart>),
    status: StatusCode,
) {
    tracing::debug!(%method, %path, status = status.as_u16(), "rest request");
    shared.lock().record_request(RecordedRequest {
        at_ms: arrived_ms,
        method: method.to_owned(),
        path: path.to_owned(),
        query: query.map(str::to_owned),
        body,
        status: status.as_u16(),
        parts,
    });
}
