//! Several calls at once, for in-process callers (the OpenAI runner's parallel tool calls) and
//! the HTTP front's `POST /v1/batch`. Each call goes through [`Core::call`] on its own — scope,
//! rules, hooks, limits and audit apply to every one — and one refused call does not fail the
//! others. Results come back in the order the calls were given.

use futures_util::stream::{self, StreamExt};
use protocol::MAX_BATCH_CALLS;
use serde_json::Value;

use crate::error::ToolError;
use crate::invocation::CallContext;
use crate::registry::ToolOutput;
use crate::server::Core;

/// One call of a batch: who calls (each may carry its own tool call id), what, with what.
#[derive(Debug, Clone)]
pub struct BatchCall {
    /// The call's context (the caller, and the ids the audit log keeps).
    pub context: CallContext,
    /// The callable's id.
    pub tool: String,
    /// Its input.
    pub input: Value,
}

impl Core {
    /// Runs `calls` through [`Core::call`], at most `max_concurrency` at once (at least one),
    /// and answers one result per call, in their order. The server's own concurrency cap and
    /// call timeout apply to each call as to any other.
    pub async fn call_batch(
        &self,
        calls: Vec<BatchCall>,
        max_concurrency: usize,
    ) -> Vec<Result<ToolOutput, ToolError>> {
        let width = max_concurrency.clamp(1, MAX_BATCH_CALLS);
        stream::iter(calls)
            .map(|call| async move { self.call(&call.context, &call.tool, call.input).await })
            .buffered(width)
            .collect()
            .await
    }
}
