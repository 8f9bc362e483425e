//! The engine's events as Server-Sent Events: the encoding `GET /v1/events` and the console's
//! relay share.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::Query;
use axum::http::HeaderMap;
use axum::response::sse::Event as SseEvent;
use protocol::ErrorCode;
use serde_json::Value;
use switchboard_engine::events::{EventsQuery, Next, Subscription, HEARTBEAT};
use switchboard_engine::ToolError;

/// A control event (no id, so a client's `Last-Event-ID` stays on the last real event).
pub fn control(kind: &'static str, data: &Value) -> SseEvent {
    SseEvent::default().event(kind).data(data.to_string())
}

/// One hub event as an SSE event (its id, type and data).
pub fn sse_event(next: Next) -> SseEvent {
    match next {
        Next::Event(event) => SseEvent::default()
            .id(event.id.to_string())
            .event(event.kind.as_ref())
            .data(event.data()),
        Next::Notice(kind, data) | Next::End(kind, data) => control(kind, &data),
    }
}

/// A subscription as SSE events.
pub fn into_sse(
    subscription: Subscription,
) -> impl futures_util::Stream<Item = Result<SseEvent, Infallible>> {
    futures_util::stream::unfold(subscription, |mut subscription| async move {
        let next = subscription.next().await?;
        Some((Ok(sse_event(next)), subscription))
    })
}

/// The query of an events route, or a typed error naming its parameters.
pub fn events_query(
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
pub fn last_event_id(headers: &HeaderMap) -> Option<&str> {
    headers.get("last-event-id").and_then(|v| v.to_str().ok())
}

/// The gap between heartbeat comments: [`HEARTBEAT`], shorter when the connection's idle
/// timeout is.
pub fn heartbeat(idle_timeout: Duration) -> Duration {
    HEARTBEAT
        .min(idle_timeout / 2)
        .max(Duration::from_millis(100))
}
