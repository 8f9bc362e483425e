//! A session's `/tools` scope override.

use entity::Snowflake;

/// The explicit callable ids (or globs) a session's runs may call, set with `/tools` or the
/// console; it replaces the session's `[sessions.*] tool_scope` until removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionScope {
    /// The session.
    pub session_id: Snowflake,
    /// What its runs may call.
    pub scope: Vec<String>,
}

/// A session's `/agent set` binding: the configured agent that answers there (and in its
/// threads) until an admin resets it; it outranks `[sessions.X] agent` in the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentBinding {
    /// The session.
    pub session_id: Snowflake,
    /// The configured agent's name, as `/agent set` was given it.
    pub agent: String,
}
