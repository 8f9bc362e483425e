//! `POST /v1/batch`: several calls in one request, each through the pipeline on its own.

use serde::{Deserialize, Serialize};

use crate::CallRequest;

/// The most calls one batch may hold; more is refused (`too_many_calls`) before any runs.
pub const MAX_BATCH_CALLS: usize = 50;
/// How many of a batch's calls run at once when the request does not say.
pub const DEFAULT_BATCH_CONCURRENCY: usize = 8;

/// The body of `POST /v1/batch`: `{"calls":[{"tool","input"},...],"maxConcurrency"?}`.
///
/// Each call is a [`CallRequest`] (so `args` and `positional` work as for `/v1/call`). The
/// answer is `{"ok":true,"value":{"results":[...]}}` with one `{"ok":true,"value"}` or
/// `{"ok":false,"error"}` per call, in the order of `calls`: one refused call does not fail
/// the others.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BatchRequest {
    /// The calls, 1 to [`MAX_BATCH_CALLS`].
    pub calls: Vec<CallRequest>,
    /// How many run at once, 1 to [`MAX_BATCH_CALLS`]; default [`DEFAULT_BATCH_CONCURRENCY`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<usize>,
}
