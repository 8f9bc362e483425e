//! Backfill gaps: after the gateway identified afresh, messages of a channel after some id may
//! be missing until that channel's backfill caught up.

use entity::Snowflake;

/// Messages of `channel_id` after `after` may be missing. A channel has at most one open gap:
/// opening another keeps the older start (its messages are still unfetched).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gap {
    /// The channel.
    pub channel_id: Snowflake,
    /// The id after which messages may be missing.
    pub after: Snowflake,
}
