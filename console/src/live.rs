//! `GET /console/api/events`: the live feed for the console page, authenticated by the
//! login cookie (a browser's `EventSource` cannot send a bearer token).
//!
//! It is a relay of the core's one [`EventHub`](crate::events::EventHub), not a second
//! fan-out: the same subscription (ring, `Last-Event-ID` resumption, lag limit, subscriber
//! cap), filtered for the logged-in caller exactly as `/v1/events` filters for that caller's
//! token. On top: at most [`MAX_STREAMS_PER_LOGIN`] streams per login, a `health.sampled`
//! control event whenever the server took a sparkline sample, and the stream ends (with
//! `stream.closed`, reason `session_ended`) when the login does — at once on logout, within a
//! heartbeat when it expires.

use std::convert::Infallible;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use protocol::{ErrorCode, ErrorKind};
use serde_json::json;
use tokio::sync::watch;
use tokio::time::{Interval, MissedTickBehavior};

use super::logins::{StreamSlot, MAX_STREAMS_PER_LOGIN};
use super::Operator;
use crate::error::ToolError;
use crate::events::{self, EventsQuery, Next, Subscription};
use switchboard_front::sse;
use switchboard_front::ApiError;

/// One console's stream: the hub subscription, and what ends it.
struct Relay {
    core: super::ConsoleState,
    /// The login's cookie value, to look the login up again.
    login_id: String,
    subscription: Subscription,
    endings: watch::Receiver<u64>,
    sampled: watch::Receiver<u64>,
    check: Interval,
    done: bool,
    _slot: StreamSlot,
}

/// What woke the relay.
enum Woke {
    Hub(Option<Next>),
    LoginsChanged(bool),
    Check,
    Sampled(bool),
}

impl Relay {
    fn login_ended(&mut self) -> Option<SseEvent> {
        // Looking the login up also keeps it from idling out while its tab is open.
        if self.core.console.logins.get(&self.login_id).is_some() {
            return None;
        }
        self.done = true;
        Some(sse::control(
            "stream.closed",
            &json!({
                "reason": "session_ended",
                "message": "the console login ended (logged out or expired); log in again",
            }),
        ))
    }

    async fn next(&mut self) -> Option<SseEvent> {
        if self.done {
            return None;
        }
        loop {
            let woke = tokio::select! {
                biased;
                changed = self.endings.changed() => Woke::LoginsChanged(changed.is_ok()),
                _ = self.check.tick() => Woke::Check,
                next = self.subscription.next() => Woke::Hub(next),
                changed = self.sampled.changed() => Woke::Sampled(changed.is_ok()),
            };
            match woke {
                Woke::Hub(None) => return None,
                Woke::Hub(Some(next)) => {
                    if matches!(next, Next::End(..)) {
                        self.done = true;
                    }
                    return Some(sse::sse_event(next));
                }
                // Both senders live in the core this relay holds, so they never close; if one
                // did, end the stream rather than spin on it.
                Woke::LoginsChanged(false) | Woke::Sampled(false) => return None,
                Woke::LoginsChanged(true) | Woke::Check => {
                    if let Some(end) = self.login_ended() {
                        return Some(end);
                    }
                }
                Woke::Sampled(true) => {
                    return Some(sse::control(
                        "health.sampled",
                        &json!({ "atMs": crate::clock::now_ms() }),
                    ));
                }
            }
        }
    }

    fn into_sse(self) -> impl futures_util::Stream<Item = Result<SseEvent, Infallible>> {
        futures_util::stream::unfold(self, |mut relay| async move {
            let event = relay.next().await?;
            Some((Ok(event), relay))
        })
    }
}

/// `GET /console/api/events`: the parameters of `/v1/events` (`types`, `session`,
/// `lastEventId`), the login cookie instead of a token. A read: no CSRF token or `Origin`
/// is needed (the cookie is SameSite=Strict, and an event stream answers no other site).
pub(super) async fn stream(
    State(core): State<super::ConsoleState>,
    operator: Operator,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let query = sse::events_query(query)?;
    let filter = crate::visibility::caller_filter(&core, &operator.login.caller, &query)?;
    let last = events::resume_from(sse::last_event_id(&headers), &query)?;
    let slot = operator.login.stream_slot().ok_or_else(|| {
        ToolError::new(
            ErrorKind::Unavailable,
            ErrorCode::Busy,
            format!(
                "this console login has {MAX_STREAMS_PER_LOGIN} event streams open already; close a console tab, or retry shortly"
            ),
        )
        .with_retry_after(std::time::Duration::from_secs(5))
    })?;
    let subscriber = crate::visibility::subscriber(&core.core, &operator.login.caller);
    let subscription = core.events().subscribe_as(filter, last, subscriber)?;
    let heartbeat = sse::heartbeat(core.idle_timeout);
    let mut check = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
    check.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut sampled = core.console.sampled.subscribe();
    sampled.mark_unchanged();
    let relay = Relay {
        endings: core.console.logins.endings(),
        sampled,
        core: core.clone(),
        login_id: operator.id,
        subscription,
        check,
        done: false,
        _slot: slot,
    };
    Ok(Sse::new(relay.into_sse())
        .keep_alive(KeepAlive::new().interval(heartbeat).text("heartbeat"))
        .into_response())
}
