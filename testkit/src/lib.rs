//! Test doubles for switchboard's tests and benchmarks (this workspace's crates use them as a
//! dev-dependency; the service never does):
//!
//! * [`platform::RecordingPlatform`]: the chat platform for tests; what it holds is the store's
//!   (its memory backend, seeded with the shared demo world); it records every action asked of
//!   it and applies the action's effect to the store;
//! * [`testing::TestServer`]: the whole tool server (engine, callables, HTTP front, console)
//!   on 127.0.0.1:0 over one, with a memory store; [`testing::load`]: a bounded load harness.

#![warn(missing_docs)]

// The engine's modules and the fronts, at the paths these files name them by.
use switchboard_console as console;
use switchboard_engine::{approvals, auth, governance, server, surface, Secrets};
use switchboard_http as http;

pub mod platform;
pub mod testing;

fn registry() -> switchboard_engine::Registry {
    switchboard_callables::registry()
}
