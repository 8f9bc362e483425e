//! What the tool server's integration tests share.

pub mod console;
pub mod sse;
