//! `GET /v1/events`: the event hub as Server-Sent Events. The hub, its filters and who may see
//! what are the engine's (`events.rs`, `visibility.rs`); the encoding is `switchboard_front`'s,
//! which the console's relay shares.

use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use switchboard_front::sse::{events_query, heartbeat, into_sse, last_event_id};

use crate::events::{resume_from, EventsQuery};
use crate::server::Core;
use crate::visibility::caller_filter;
use crate::{ApiSettings, Authed};
use switchboard_front::ApiError;

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
