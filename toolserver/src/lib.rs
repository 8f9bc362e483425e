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

// The engine's modules, at the paths they had before the cut.
pub use switchboard_engine::{
    allowlist, approvals, auth, chunk, clock, cluster, events, governance, handoff, live, metrics,
    runs, schedules, scopes, surface, trust, workflow, workspaces,
};

/// The operator console (`switchboard-console`).
pub use switchboard_console as console;
/// The HTTP front (`switchboard-http`).
pub use switchboard_http as http;
pub use switchboard_http::{idempotency, openapi};

/// The test kit (`switchboard-testkit`), with the `testing` feature.
#[cfg(feature = "testing")]
pub use switchboard_testkit::{memory, testing};

pub use switchboard_engine::{
    example, input_schema, output, output_schema, parse_input, BatchCall, CallContext,
    CallObserver, Core, Decision, Front, Invocation, MessageView, PlanContext, Planned, Registry,
    Secrets, SessionRequest, SessionView, StartError, Surface, Target, Tool, ToolError, ToolOutput,
    ToolSpec,
};
pub use switchboard_front::{error_response, ApiError};
pub use switchboard_http::parse_batch;

/// `usage.report`'s reading of the store, for the `switchboard usage` command and the console.
pub use switchboard_callables::usage::report as usage_report;
/// Every callable the tool server offers, registered: what the composition root hands
/// [`Core::new`]; and their ids, for config validation.
pub use switchboard_callables::{callable_ids, registry};
