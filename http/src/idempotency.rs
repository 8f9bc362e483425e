//! `Idempotency-Key` on `POST /v1/call`: a client that retries a call sends the same key, and
//! the call runs once. Keys apply to callables that change something (`mutating`); a read
//! runs again whatever its key. A key is its caller's own (`operator`, `token:ci`, `cap:…`): two callers
//! never share answers. The same key and input within 24 h answers what the first call
//! answered (status and body, with `Idempotent-Replayed: true`), without running it again; the
//! same key with another tool or input is `idempotency_key_reused`, and one whose call is still
//! running is `idempotency_key_in_flight` (both 409). A call refused before its handler ran did
//! nothing, so its key is released and a retry runs. Keys live in the store the composition
//! root hands the core ([`Core::set_idempotency`]), so they hold across restarts.

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use protocol::context::{HEADER_IDEMPOTENCY_KEY, HEADER_IDEMPOTENT_REPLAYED};
use protocol::{ErrorCode, ErrorKind};
use serde_json::Value;
use sha2::{Digest, Sha256};
use switchboard_store::records::{IdempotencyKey, IdempotencyRequest, StoredAnswer};
use switchboard_store::Reserved;

use crate::error::ToolError;
use crate::invocation::CallContext;
use crate::server::Core;
use switchboard_front::ApiError;

/// How long a key is kept: 24 hours.
pub const KEPT_MS: u64 = switchboard_store::records::idempotency::IDEMPOTENCY_KEPT_MS;

/// The longest key taken, in bytes.
pub const MAX_KEY: usize = 255;

/// The request's `Idempotency-Key` ([`key_in`]), read from its head where it lies (taking the
/// whole `HeaderMap` would copy every header of every call).
pub(crate) struct KeyHeader(pub(crate) Option<String>);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for KeyHeader {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(KeyHeader(key_in(&parts.headers)?))
    }
}

/// The `Idempotency-Key` a request sent, if any: 1 to 255 visible ASCII characters.
pub(crate) fn key_in(headers: &HeaderMap) -> Result<Option<String>, ToolError> {
    let mut values = headers.get_all(HEADER_IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let bad = |why: &str| {
        ToolError::usage(
            ErrorCode::BadIdempotencyKey,
            format!("Idempotency-Key {why}: send one key of 1 to {MAX_KEY} visible ASCII characters (a UUID is usual)"),
        )
    };
    if values.next().is_some() {
        return Err(bad("was sent twice"));
    }
    let key = value
        .to_str()
        .map_err(|_| bad("is not visible ASCII"))?
        .trim();
    if key.is_empty() || key.len() > MAX_KEY || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad("is empty, too long or not visible ASCII"));
    }
    Ok(Some(key.to_owned()))
}

/// What a key is bound to: the callable and its input as it will run (after the CLI's string
/// fields are converted), hashed.
pub(crate) fn input_hash(tool: &str, input: &Value) -> String {
    let mut hasher = Sha256::new();
    hasher.update((tool.len() as u64).to_be_bytes());
    hasher.update(tool.as_bytes());
    hasher.update(serde_json::to_vec(input).unwrap_or_default());
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn store_failed(error: &switchboard_store::StoreError) -> ToolError {
    ToolError::store_unavailable(format!("the idempotency key could not be looked up ({error}); nothing was run, retry with the same key"))
}

fn answer(status: u16, body: String, replayed: bool) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response();
    if replayed {
        response
            .headers_mut()
            .insert(HEADER_IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    response
}

/// Runs `tool` under `key` for `context`'s caller: once per key and input.
pub(crate) async fn keyed_call(
    core: &Core,
    context: &CallContext,
    key: String,
    tool: &str,
    input: Value,
) -> Result<Response, ApiError> {
    let store = core.idempotency();
    let key = IdempotencyKey {
        caller: context.caller.key(),
        key,
    };
    let reserved = store
        .reserve_idempotency(IdempotencyRequest {
            key: key.clone(),
            input_hash: input_hash(tool, &input),
            now_ms: crate::clock::now_ms(),
            ttl_ms: KEPT_MS,
        })
        .await
        .map_err(|error| store_failed(&error))?;
    match reserved {
        Reserved::Replay(stored) => {
            tracing::debug!(caller = %key.caller, tool, "idempotency key replayed");
            Ok(answer(stored.status, stored.body, true))
        }
        Reserved::Running => Err(ApiError::from(ToolError::new(
            ErrorKind::Conflict,
            ErrorCode::IdempotencyKeyInFlight,
            "A call with this Idempotency-Key is still running (or the server stopped while it ran); it is not run again. Ask for its answer with the same key once it is done",
        ))),
        Reserved::Mismatch => Err(ApiError::from(ToolError::new(
            ErrorKind::Conflict,
            ErrorCode::IdempotencyKeyReused,
            "This Idempotency-Key was used within 24 h for a call with another tool or input; send a new key for a new call",
        ))),
        Reserved::Fresh => {
            let (result, handled) = core.call_reporting(context, tool, input).await;
            let error = match result {
                Ok(value) => {
                    let body = format!("{{\"ok\":true,\"value\":{}}}", value.get());
                    keep(core, &key, 200, body.clone()).await;
                    return Ok(answer(200, body, false));
                }
                Err(error) => error,
            };
            if handled {
                // It may have acted: a retry answers this failure, never runs it again.
                let body = serde_json::to_string(&error.body()).unwrap_or_default();
                keep(core, &key, error.status().as_u16(), body).await;
            } else if let Err(failed) = core.idempotency().release_idempotency(&key).await {
                // Refused before it acted: nothing was done, so a retry may run it.
                tracing::warn!(caller = %key.caller, %failed, "an idempotency key could not be released; a retry with it answers in-flight until it expires");
            }
            // The error's own response keeps its headers (Retry-After).
            Err(ApiError::from(error))
        }
    }
}

/// Keeps the answer of `key`'s call for its retries.
async fn keep(core: &Core, key: &IdempotencyKey, status: u16, body: String) {
    let stored = StoredAnswer { status, body };
    if let Err(failed) = core.idempotency().complete_idempotency(key, stored).await {
        tracing::warn!(caller = %key.caller, %failed, "an idempotency key's answer could not be kept; a retry with it answers in-flight until it expires");
    }
}
