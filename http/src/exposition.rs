//! `GET /metrics`: the engine's counters in Prometheus' text format.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use protocol::ErrorCode;

use crate::auth::Caller;
use crate::error::ToolError;
use crate::server::Core;
use crate::ApiSettings;
use switchboard_front::ApiError;

/// `GET /metrics`: the operator's token, or none at all when `toolserver.metrics_public` is
/// on (which the config allows on a loopback bind only).
pub(crate) async fn scrape(
    State(core): State<Arc<Core>>,
    State(api): State<ApiSettings>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if !api.metrics_public {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token);
        let caller = core.authenticate(bearer)?;
        if !matches!(caller, Caller::Operator | Caller::Unauthenticated) {
            return Err(ToolError::denied(
                ErrorCode::OperatorOnly,
                "Only the operator token reads /metrics (or set toolserver.metrics_public = true on a loopback bind)",
            )
            .into());
        }
    }
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        core.exposition(),
    )
        .into_response())
}
