//! The memory backend's loop-guard counts: one per session (as many as sessions), decided
//! under the data's lock.

use super::MemoryBackend;
use crate::aggregates::{ready, StoreFuture};
use crate::bot_turns::{BotMessage, BotTurn, BotTurnStore};

impl BotTurnStore for MemoryBackend {
    fn count_bot_turn(&self, bot: BotMessage) -> StoreFuture<'_, BotTurn> {
        ready(self.open().map(|()| {
            self.data()
                .bot_turns
                .entry(bot.session)
                .or_default()
                .count(&bot)
        }))
    }
}
