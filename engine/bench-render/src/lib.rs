//! The engine's render cache (`engine/src/render.rs`, compiled here as it stands) beside the
//! cache it replaced (`start_over`: a map cleared whole when full), for `benches/render_cache.rs`.
//! A crate of its own so the benchmark builds without the engine's dependency tree.

#[path = "../../src/render.rs"]
pub mod render;

pub mod start_over;
