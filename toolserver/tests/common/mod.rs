//! What the tool server's integration tests share.

pub mod sse;
pub mod console;
