//! The switchboard tool server: how an agent acts in a chat platform.
//!
//! * [`Surface`]: the seam a chat platform implements (the bot implements it for Discord; the
//!   `testing` feature's `memory::MemorySurface` implements it in memory).
//! * [`Core`]: what every call needs, authentication, and [`Core::call`] — the one pipeline
//!   every call takes: scope, validation, session resolution, allowlist, permission, rate
//!   limits, hooks, handler, audit (see [`Decision`] and the stages on [`Core::call`]).
//! * [`Tool`] and [`Registry`]: the callables (`surface.*`, `attachment.download`,
//!   `workflow.*`), each planning then running.
//! * [`http`]: the HTTP front; the `tools` CLI (its own crate) speaks to it. Beside calls it
//!   serves batches ([`Core::call_batch`]), the live feed ([`events`]), Prometheus metrics
//!   ([`metrics`]) and its own OpenAPI document (`/openapi.json`).
//! * [`runs`]: the seam the agent crate implements; [`workflow`]: workflows that wait on
//!   people and resume the agent. Files are read from and saved to a run's working directory
//!   only.
//! * [`trust`]: whose words an agent may act on, and how everyone else's are quoted in its
//!   prompts.
//! * [`clock`]: the service's one wall clock.
//!
//! This crate knows nothing of serenity.

#![warn(missing_docs)]

pub mod allowlist;
pub mod approvals;
pub mod auth;
mod batch;
mod browsers;
mod callables;
mod chat;
/// `agent.handoff`'s seam types (the bridge implements [`runs::Runs::handoff`]).
pub mod handoff {
    pub use crate::callables::agents::{
        HandoffAnswer, HandoffRequest, SessionAgent, DEFAULT_HANDOFF_TIMEOUT, MAX_HANDOFF_TIMEOUT,
    };
}
pub mod chunk;
pub mod clock;
mod coerce;
mod connections;
pub mod console;
mod error;
pub mod events;
mod files;
pub mod governance;
mod hooks;
pub mod http;
pub mod idempotency;
mod invocation;
pub mod live;
#[cfg(feature = "testing")]
pub mod memory;
pub mod metrics;
pub mod openapi;
mod pipeline;
mod ratelimit;
mod refusals;
mod registry;
mod render;
pub mod runs;
pub mod scopes;
mod server;
pub mod surface;
#[cfg(feature = "testing")]
pub mod testing;
pub mod trust;
mod visibility;
pub mod workflow;
pub mod workspaces;

pub use batch::{parse_batch, BatchCall};
pub use error::ToolError;
pub use invocation::{
    CallContext, Front, Invocation, MessageView, PlanContext, SessionView, Target,
};
pub use pipeline::{CallObserver, Decision};
pub use registry::{
    example, input_schema, output, output_schema, parse_input, Planned, Registry, SessionRequest,
    Tool, ToolOutput, ToolSpec,
};
pub use server::{Core, Secrets, StartError};

/// The id of every callable the tool server registers, for config validation (rules, scopes
/// and hooks must name real callables).
pub fn callable_ids() -> Vec<String> {
    let mut registry = Registry::new();
    callables::register_all(&mut registry);
    registry.ids().map(str::to_owned).collect()
}
pub use surface::Surface;
