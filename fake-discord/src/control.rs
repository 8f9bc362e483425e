//! The control API under `/_fake/` (loopback only): inject messages, edits, deletions,
//! reactions, typing, channel changes and slash-command interactions; read what the fake
//! holds and what it was asked; inject REST and gateway faults; read counters; read and
//! change the gateway's sharding settings, read the IDENTIFY log and the open connections,
//! and close connections one by one or by shard.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::Json;
use axum::Router;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::api_error::ApiError;
use crate::fake::{
    ChannelPatch, CloseTarget, FakeState, Fault, NewChannel, SlashCommand, UserMessage,
};
use crate::shards::{ConnectionInfo, GatewaySettings, GatewaySettingsPatch, IdentifyRecord};
use crate::shared::Shared;
use crate::snowflake::Snowflake;

/// An error answer of the control API: `{"error": "...", "discord": {...}?}`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ControlError {
    /// The request body was not the JSON this route takes.
    #[error("bad request body: {0}")]
    BadBody(String),
    /// Something named in the request does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The request conflicts with the world (e.g. a command the bot never registered).
    #[error("{0}")]
    Conflict(String),
    /// Discord itself would have refused this (the Discord error is attached).
    #[error("Discord would refuse this: {} (code {})", .0.message, .0.code)]
    Discord(ApiError),
    /// The caller is not on the loopback interface.
    #[error("the control API only answers loopback callers")]
    NotLoopback,
}

impl From<ApiError> for ControlError {
    fn from(e: ApiError) -> Self {
        ControlError::Discord(e)
    }
}

impl IntoResponse for ControlError {
    fn into_response(self) -> Response {
        let status = match &self {
            ControlError::BadBody(_) => StatusCode::BAD_REQUEST,
            ControlError::NotFound(_) => StatusCode::NOT_FOUND,
            ControlError::Conflict(_) => StatusCode::CONFLICT,
            ControlError::Discord(e) => e.status,
            ControlError::NotLoopback => StatusCode::FORBIDDEN,
        };
        let mut body = json!({ "error": self.to_string() });
        if let ControlError::Discord(e) = &self {
            body["discord"] = e.body();
        }
        (status, Json(body)).into_response()
    }
}

/// Parses a control body, answering 400 with serde's explanation when it does not fit.
struct Body<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> axum::extract::FromRequest<S> for Body<T> {
    type Rejection = ControlError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| ControlError::BadBody(e.to_string()))?;
        serde_json::from_slice(&bytes)
            .map(Body)
            .map_err(|e| ControlError::BadBody(e.to_string()))
    }
}

fn id(text: &str) -> Result<Snowflake, ControlError> {
    Snowflake::from_digits(text)
        .ok_or_else(|| ControlError::BadBody(format!("`{text}` is not a snowflake id")))
}

/// The control router.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/_fake/messages", post(post_message))
        .route(
            "/_fake/messages/{channel_id}/{message_id}",
            patch(edit_message).delete(delete_message),
        )
        .route("/_fake/reactions", post(reaction).delete(reaction))
        .route("/_fake/typing", post(post_typing))
        .route("/_fake/channels", post(create_channel))
        .route(
            "/_fake/channels/{channel_id}",
            patch(update_channel).delete(delete_channel),
        )
        .route(
            "/_fake/channels/{channel_id}/messages",
            get(channel_messages),
        )
        .route("/_fake/interactions", post(post_interaction))
        .route("/_fake/interactions/{interaction_id}", get(get_interaction))
        .route("/_fake/components", post(post_component))
        .route("/_fake/commands", get(get_commands))
        .route("/_fake/requests", get(get_requests).delete(clear_requests))
        .route(
            "/_fake/ratelimits",
            get(get_ratelimits).delete(reset_ratelimits),
        )
        .route("/_fake/faults", post(post_fault))
        .route("/_fake/dispatch", post(post_dispatch))
        .route("/_fake/state", get(get_state))
        .route("/_fake/gateway", get(get_gateway).patch(patch_gateway))
        .route("/_fake/gateway/identifies", get(get_identifies))
        .route("/_fake/gateway/connections", get(get_connections))
        .route("/_fake/gateway/close", post(post_gateway_close))
        .route("/_fake/world", get(get_world))
        .layer(middleware::from_fn(loopback_only))
        // Attachments travel as base64: room for ten files at the upload limit.
        .layer(DefaultBodyLimit::max(
            shared.max_request_bytes.saturating_mul(2),
        ))
        .with_state(shared)
}

async fn loopback_only(request: Request, next: Next) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip());
    match peer {
        Some(ip) if !ip.is_loopback() => ControlError::NotLoopback.into_response(),
        _ => next.run(request).await,
    }
}

type Answer = Result<Json<Value>, ControlError>;

async fn post_message(State(s): State<Arc<Shared>>, Body(body): Body<UserMessage>) -> Answer {
    Ok(Json(crate::fake::post_message(&s, body)?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ContentEdit {
    content: String,
}

async fn edit_message(
    State(s): State<Arc<Shared>>,
    Path((channel_id, message_id)): Path<(String, String)>,
    Body(body): Body<ContentEdit>,
) -> Answer {
    let message = crate::fake::edit_message(&s, id(&channel_id)?, id(&message_id)?, body.content)?;
    Ok(Json(message))
}

async fn delete_message(
    State(s): State<Arc<Shared>>,
    Path((channel_id, message_id)): Path<(String, String)>,
) -> Result<StatusCode, ControlError> {
    s.delete_message(id(&channel_id)?, id(&message_id)?, false)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct ReactionBody {
    channel_id: Snowflake,
    message_id: Snowflake,
    user_id: Snowflake,
    emoji: String,
}

/// `POST` adds the user's reaction, `DELETE` removes it.
async fn reaction(
    method: Method,
    State(s): State<Arc<Shared>>,
    Body(b): Body<ReactionBody>,
) -> Result<StatusCode, ControlError> {
    let add = method == Method::POST;
    crate::fake::react(&s, b.channel_id, b.message_id, b.user_id, &b.emoji, add)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TypingBody {
    channel_id: Snowflake,
    user_id: Snowflake,
}

async fn post_typing(
    State(s): State<Arc<Shared>>,
    Body(b): Body<TypingBody>,
) -> Result<StatusCode, ControlError> {
    crate::fake::check_user(&s, b.user_id)?;
    s.typing(b.channel_id, b.user_id, false)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn create_channel(State(s): State<Arc<Shared>>, Body(b): Body<NewChannel>) -> Answer {
    Ok(Json(crate::fake::create_channel(&s, b)?))
}

async fn update_channel(
    State(s): State<Arc<Shared>>,
    Path(channel_id): Path<String>,
    Body(b): Body<ChannelPatch>,
) -> Answer {
    Ok(Json(crate::fake::update_channel(&s, id(&channel_id)?, b)?))
}

async fn delete_channel(
    State(s): State<Arc<Shared>>,
    Path(channel_id): Path<String>,
) -> Result<StatusCode, ControlError> {
    crate::fake::delete_channel(&s, id(&channel_id)?)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn channel_messages(State(s): State<Arc<Shared>>, Path(channel_id): Path<String>) -> Answer {
    Ok(Json(Value::Array(crate::fake::channel_messages(
        &s,
        id(&channel_id)?,
    )?)))
}

async fn post_interaction(State(s): State<Arc<Shared>>, Body(b): Body<SlashCommand>) -> Answer {
    Ok(Json(crate::fake::invoke_command(&s, b)?))
}

async fn post_component(
    State(s): State<Arc<Shared>>,
    Body(click): Body<crate::fake::ComponentClick>,
) -> Answer {
    Ok(Json(crate::fake::click_component(&s, click)?))
}

async fn get_interaction(
    State(s): State<Arc<Shared>>,
    Path(interaction_id): Path<String>,
) -> Answer {
    Ok(Json(crate::fake::interaction(&s, id(&interaction_id)?)?))
}

async fn get_commands(State(s): State<Arc<Shared>>) -> Json<Value> {
    Json(crate::fake::commands(&s))
}

async fn get_requests(State(s): State<Arc<Shared>>) -> Json<Value> {
    let requests: Vec<_> = s.lock().requests.iter().cloned().collect();
    Json(json!(requests))
}

async fn clear_requests(State(s): State<Arc<Shared>>) -> StatusCode {
    s.lock().requests.clear();
    StatusCode::NO_CONTENT
}

/// `POST /_fake/dispatch {"t": NAME, "d": JSON}` or `{"t": NAME, "raw_d": TEXT}`: a dispatch
/// sent as given, valid or not (the frame's `d` is `raw_d` verbatim).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDispatch {
    pub t: String,
    #[serde(default)]
    pub d: Option<Value>,
    #[serde(default)]
    pub raw_d: Option<String>,
}

async fn post_dispatch(State(s): State<Arc<Shared>>, Body(b): Body<RawDispatch>) -> Answer {
    let data = match (b.d, b.raw_d) {
        (Some(d), None) => d.to_string(),
        (None, Some(raw)) => raw,
        _ => {
            return Err(ControlError::BadBody(
                "give exactly one of d (JSON) and raw_d (text)".into(),
            ))
        }
    };
    let sessions = s.publish_raw(b.t, data);
    Ok(Json(json!({ "sessions": sessions })))
}

async fn post_fault(State(s): State<Arc<Shared>>, Body(fault): Body<Fault>) -> Answer {
    let affected = crate::fake::inject_fault(&s, fault)?;
    Ok(Json(
        json!({ "ok": true, "gateway_connections_affected": affected }),
    ))
}

async fn get_state(State(s): State<Arc<Shared>>) -> Json<FakeState> {
    Json(crate::fake::state(&s))
}

async fn get_world(State(s): State<Arc<Shared>>) -> Json<Value> {
    Json(json!(*s.world))
}

async fn get_gateway(State(s): State<Arc<Shared>>) -> Json<GatewaySettings> {
    Json(s.hub.settings())
}

async fn patch_gateway(
    State(s): State<Arc<Shared>>,
    Body(patch): Body<GatewaySettingsPatch>,
) -> Result<Json<GatewaySettings>, ControlError> {
    s.hub
        .change_settings(&patch)
        .map(Json)
        .map_err(ControlError::BadBody)
}

async fn get_ratelimits(State(s): State<Arc<Shared>>) -> Json<crate::RateTally> {
    Json(s.rates.tally())
}

async fn reset_ratelimits(State(s): State<Arc<Shared>>) -> StatusCode {
    s.rates.reset_tally();
    StatusCode::NO_CONTENT
}

async fn get_identifies(State(s): State<Arc<Shared>>) -> Json<Vec<IdentifyRecord>> {
    Json(s.hub.identifies())
}

async fn get_connections(State(s): State<Arc<Shared>>) -> Json<Vec<ConnectionInfo>> {
    Json(s.hub.connections())
}

/// `POST /_fake/gateway/close {"connection": id}` or `{"shard": shard_id}`, with `"code"`
/// (4000 to 4999) or without it (a drop, no close frame).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GatewayClose {
    #[serde(default)]
    connection: Option<u64>,
    #[serde(default)]
    shard: Option<u32>,
    #[serde(default)]
    code: Option<u16>,
}

async fn post_gateway_close(State(s): State<Arc<Shared>>, Body(b): Body<GatewayClose>) -> Answer {
    let target = match (b.connection, b.shard) {
        (Some(id), None) => CloseTarget::Connection(id),
        (None, Some(shard)) => CloseTarget::Shard(shard),
        _ => {
            return Err(ControlError::BadBody(
                "give exactly one of `connection` (an id from GET /_fake/gateway/connections) and `shard` (a shard id)".into(),
            ))
        }
    };
    let closed = crate::fake::close_connections(&s, target, b.code)?;
    Ok(Json(json!({ "closed": closed })))
}
