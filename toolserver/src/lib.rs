//! The switchboard tool server: how an agent acts in a chat platform.
//!
//! * [`Surface`]: the seam a chat platform implements (the bot implements it for Discord;
//!   [`memory::MemorySurface`] implements it in memory for tests).
//! * [`Core`]: authentication (operator token, capability tokens), and the policy path every
//!   call takes — scope, rate limits, input validation against the callable's schema, session
//!   resolution, allowlist, handler, timeout — with an audit line per call.
//! * [`http`]: the axum front; the `tools` binary is the command-line front.
//! * [`workflow`]: workflows that wait on people and resume the agent; [`files`]: the run's
//!   working directory, the only place files are read from and saved to.
//!
//! This crate knows nothing of serenity.

pub mod allowlist;
pub mod auth;
mod callables;
pub mod chunk;
pub mod coerce;
mod connections;
pub mod error;
pub mod files;
pub mod http;
pub mod invocation;
pub mod memory;
pub mod pipeline;
pub mod ratelimit;
pub mod refusals;
pub mod registry;
pub mod render;
pub mod runs;
pub mod server;
pub mod surface;
pub mod testing;
pub mod workflow;

pub use error::ToolError;
pub use invocation::CallContext;
pub use server::{Core, StartError};
pub use surface::Surface;
