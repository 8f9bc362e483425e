//! What a front may learn about a call while it runs (below the pipeline and the
//! invocation, which both hold one).

use std::time::Duration;

/// What a front learns about a call while it runs, besides its answer: a front that can tell
/// its client more while it waits (MCP's progress notifications) passes one to
/// [`crate::Core::call_observed`]. Called on the call's task; keep it quick (signal, don't work).
pub trait CallObserver: Send + Sync {
    /// The rules ask: the call now waits for an approver, at most `timeout` (then it is
    /// denied as expired).
    fn awaiting_approval(&self, tool_id: &str, timeout: Duration);
    /// `agent.handoff`: the sub-run `run_id` of `agent` started; the call waits for it, at
    /// most `timeout`.
    fn handing_off(&self, agent: &str, run_id: &str, timeout: Duration) {
        let _ = (agent, run_id, timeout);
    }
}
