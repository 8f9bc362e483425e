//! The event hub as Server-Sent Events: `GET /v1/events`, and the encoding the console's relay
//! shares. The hub, its filters and who may see what are the engine's (`events.rs`,
//! `visibility.rs`); this is only the wire.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use protocol::ErrorCode;
use serde_json::Value;

use crate::api_error::ApiError;
use crate::error::ToolError;
use crate::events::{caller_filter, resume_from, EventsQuery, Next, Subscription, HEARTBEAT};
use crate::http::{ApiSettings, Authed};
use crate::server::Core;

/// A control event (no id, so a client's `Last-Event-ID` stays on the last real event).
pub(crate) fn control(kind: &'static str, data: &Value) -> SseEvent {
    SseEvent::default().event(kind).data(data.to_string())
}

/// One hub event as an SSE event (its id, type and data).
pub(crate) fn sse_event(next: Next) -> SseEvent {
    match next {
        Next::Event(event) => SseEvent::default()
            .id(event.id.to_string())
            .event(event.kind.as_ref())
            .data(event.data()),
        Next::Notice(kind, data) | Next::End(kind, data) => control(kind, &data),
    }
}

/// A subscription as SSE events.
pub(crate) fn into_sse(
    subscription: Subscription,
) -> impl futures_util::Stream<Item = Result<SseEvent, Infallible>> {
    futures_util::stream::unfold(subscription, |mut subscription| async move {
        let next = subscription.next().await?;
        Some((Ok(sse_event(next)), subscription))
    })
}

/// The query of an events route, or a typed error naming its parameters.
pub(crate) fn events_query(
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<EventsQuery, ToolError> {
    query.map(|Query(query)| query).map_err(|rejection| {
        ToolError::usage(
            ErrorCode::BadRequest,
            format!("{rejection}; the parameters are types, session and lastEventId"),
        )
    })
}

/// The `Last-Event-ID` header, when sent.
pub(crate) fn last_event_id(headers: &HeaderMap) -> Option<&str> {
    headers.get("last-event-id").and_then(|v| v.to_str().ok())
}

/// The gap between heartbeat comments: [`HEARTBEAT`], shorter when the connection's idle
/// timeout is.
pub(crate) fn heartbeat(idle_timeout: Duration) -> Duration {
    HEARTBEAT
        .min(idle_timeout / 2)
        .max(Duration::from_millis(100))
}

/// `GET /v1/events`: the SSE stream.
pub(crate) async fn stream(
    State(core): State<Arc<Core>>,
    State(api): State<ApiSettings>,
    Authed(context): Authed,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let query = events_query(query)?;
    let filter = caller_filter(&core, &context.caller, &query)?;
    let last = resume_from(last_event_id(&headers), &query)?;
    let subscriber = crate::visibility::subscriber(&core, &context.caller);
    let subscription = core.events().subscribe_as(filter, last, subscriber)?;
    Ok(Sse::new(into_sse(subscription))
        .keep_alive(
            KeepAlive::new()
                .interval(heartbeat(api.limits.idle_timeout))
                .text("heartbeat"),
        )
        .into_response())
}
