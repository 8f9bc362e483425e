//! The switchboard call engine: how an agent acts in a chat platform, without any front.
//!
//! * [`Surface`]: the seam a chat platform implements (the bot implements it for Discord; the
//!   test kit's recording platform implements it over the store's memory backend).
//! * [`Core`]: what every call needs (settings, the registry, capabilities, the store handles,
//!   observers), authentication, and [`Core::call`] — the one pipeline every call takes:
//!   scope, validation, session resolution, allowlist, permission, rate limits, hooks,
//!   handler, audit (see [`Decision`] and `pipeline.rs`, where the stage sequence lives).
//! * [`Tool`] and [`Registry`]: how a callable plans then runs. The callables themselves are
//!   in their own crate; the composition root hands [`Core::new`] the registry.
//! * [`runs`]: the seam the agent crate implements; [`workflow`]: workflows that wait on
//!   people and resume the agent.
//! * [`trust`]: whose words an agent may act on, and how everyone else's are quoted.
//! * [`events`] and [`metrics`]: what the fronts publish (the feed, the counters).
//! * [`clock`]: the service's one wall clock.
//!
//! This crate knows nothing of axum, rusqlite or serenity.

#![warn(missing_docs)]

pub mod allowlist;
pub mod api_sessions;
pub mod approvals;
pub mod auth;
pub mod batch;
mod call_events;
pub mod cell;
pub mod chunk;
pub mod clock;
pub mod cluster;
pub mod error;
pub mod events;
pub mod governance;
pub mod handoff;
pub mod headroom;
pub mod hooks;
pub mod invocation;
pub mod live;
pub mod metrics;
pub mod nonce;
mod observer;
pub mod pipeline;
pub mod ratelimit;
pub mod refusals;
pub mod registry;
pub mod render;
pub mod run_gate;
pub mod runs;
pub mod schedules;
pub mod scopes;
pub mod server;
pub mod shared_capabilities;
pub mod surface;
pub mod trust;
pub mod visibility;
pub mod workflow;
pub mod workflow_runs;
pub mod workspaces;

pub use batch::BatchCall;
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
pub use surface::Surface;
