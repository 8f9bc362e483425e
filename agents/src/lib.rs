//! Named agents: the rules every part of switchboard shares about them, with no I/O.
//!
//! - [`AgentName`]: `[A-Za-z0-9_-]{1,64}`, never `default` or `max_handoff_depth` (the
//!   `[agents]` table's own keys, in any case).
//! - `agent:NAME` / `agent:*` entries in a named token's scope ([`parse_scope_entry`],
//!   [`AgentGrants`]): which agents a token may talk to through the chat API. A callable glob
//!   (`*`) never grants an agent.
//! - The `[agents]` table ([`RawAgents`], [`settings`]): agent tables beside `default` and
//!   `max_handoff_depth`, and references to agents from other sections ([`agent_ref`]), each
//!   refusal with a did-you-mean.
//! - The handoff depth rule ([`handoff_depth`]).
//! - [`Finding`]: the located problem every config section validated outside the config crate
//!   reports (this crate is the one they all depend on, since they all name agents).
//!
//! # How the service wires this
//!
//! - The config crate reads `agents: Option<RawAgents<RawAgent>>` (its own `RawAgent`, the
//!   keys `[agent]` has), checks each agent table as it checks `[agent]`, calls [`settings`]
//!   with `legacy_agent = raw.agent.is_some()`, and hands every [`Finding`] to its collector
//!   (`c.add(f.span, f.key_path, f.message, f.help)`). `[sessions.X] agent = "NAME"` gains a
//!   field checked with [`agent_ref`]. In `[[toolserver.tokens]]` scopes, entries for which
//!   [`is_agent_entry`] holds go to [`scope_entry`] instead of the callable-glob check.
//! - The chat API front builds [`AgentGrants::from_scope`] from the token's scope (the
//!   operator: [`AgentGrants::all`]); `GET /v1/models` lists [`AgentGrants::visible`]; a
//!   request for an agent outside the grants answers 403.
//! - `agent.handoff` calls [`handoff_depth`] with the asking run's depth (kept on its
//!   capability) before starting anything; the refusal's `code()` is the protocol's error
//!   code.

#![warn(missing_docs)]

mod finding;
mod handoff;
mod name;
mod scope;
mod table;

pub use finding::{bounded, Finding, Findings};
pub use handoff::{handoff_depth, HandoffTooDeep};
pub use name::{AgentName, AgentNameError, MAX_NAME_LEN, RESERVED_NAMES};
pub use scope::{
    is_agent_entry, nearest_agent, parse_scope_entry, scope_entry, AgentGrant, AgentGrants,
    AgentScopeError, AGENT_SCOPE_PREFIX,
};
pub use table::{
    agent_ref, settings, AgentsSettings, RawAgents, DEFAULT_MAX_HANDOFF_DEPTH,
    MAX_HANDOFF_DEPTH_LIMIT,
};
