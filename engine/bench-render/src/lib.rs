//! The engine's render cache (`engine/src/render.rs`, compiled here as it stands: a map that
//! starts over when full) beside a bounded-cache crate's (`quick`: `quick_cache`), for
//! `benches/render_cache.rs`. A crate of its own so the benchmark builds without the engine's
//! dependency tree.

#[path = "../../src/render.rs"]
pub mod render;

pub mod quick;
