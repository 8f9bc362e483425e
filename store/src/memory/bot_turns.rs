//! The memory backend's loop-guard counts: one per session (as many as sessions), decided
//! under the data's lock.

use entity::Snowflake;

use super::MemoryBackend;
use crate::aggregates::{ready, StoreFuture};
use crate::bot_turns::{BotTurn, BotTurnStore};

impl BotTurnStore for MemoryBackend {
    fn count_bot_turn(
        &self,
        session: Snowflake,
        message: Snowflake,
        person_since: Option<Snowflake>,
        max: u32,
    ) -> StoreFuture<'_, BotTurn> {
        ready(self.open().map(|()| {
            self.data()
                .bot_turns
                .entry(session)
                .or_default()
                .count(message, person_since, max)
        }))
    }
}
