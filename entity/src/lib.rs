//! Pure text and alias logic for switchboard.
//!
//! * [`Aliases`]: the operator's configured names for users, roles and sessions.
//! * [`NameDirectory`]: names learned at run time (the bot implements it over its store).
//! * [`Mapper`]: rewrites agent text to Discord markup ([`Mapper::outbound`]) and back
//!   ([`Mapper::inbound`]), leaving code spans and fences untouched, and resolves session
//!   references ([`Mapper::resolve_session`]).
//!
//! No I/O, no async, no Discord types: every function here is a pure function of its inputs.
//! Both rewrites scan only for the few bytes that matter (`@`, `#`, `<`, `` ` ``) with `memchr`
//! and copy everything else in bulk, and return the input borrowed when nothing changes.

#![warn(missing_docs)]

mod aliases;
mod code;
mod mapper;
mod names;
pub mod quoting;
mod session_ref;

pub use aliases::{is_valid_alias, normalize_name, AliasError, AliasKind, Aliases};
pub use mapper::{discord_mentions, Mapper, Mention, Note, NoteKind, Outbound, MAX_NOTES};
pub use names::{LearnedNames, NameDirectory, NoNames};
pub use protocol::{Snowflake, SnowflakeError};
pub use session_ref::{nearest, SessionRefError};
