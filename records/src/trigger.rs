//! Trigger claims: the durable record that a message is being answered, so it is answered at
//! most once across reconnects, re-identifies, restarts and (with a shared store) nodes.

use entity::Snowflake;

/// How long a claim is remembered, by the time in its message id: a week (the longest
/// `agent.missed_max_age_s`) and a day. Older messages are never answered as missed ones.
pub const CLAIMS_KEPT_MS: u64 = 8 * 24 * 3600 * 1000;

/// A claim on one message: whoever records it first answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerClaim {
    /// The session the message was posted in.
    pub channel_id: Snowflake,
    /// The message to answer.
    pub message_id: Snowflake,
    /// When it was claimed, ms since the Unix epoch.
    pub claimed_ms: u64,
}

/// The smallest message id Discord could give at `ms` (milliseconds since the Unix epoch).
pub fn first_id_at(ms: u64) -> Snowflake {
    Snowflake(ms.saturating_sub(protocol::DISCORD_EPOCH_MS) << 22)
}
