//! The loop guard's count of bot turns per session, kept in the store (issue 23 §3): with
//! several nodes — a shard taken over, a restart — the count is the cluster's, so two bots
//! that answer each other cannot loop on by moving between nodes.
//!
//! Every backend keeps one [`BotTurns`] per session and decides with [`BotTurns::count`], the
//! one rule, atomically (a lock, a transaction with the row locked).

use entity::Snowflake;

use crate::aggregates::StoreFuture;

/// What the loop guard decides for a message from another bot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BotTurn {
    /// Answer it (counted, or older than the last person's message).
    Answer,
    /// Stop, and say why: the first stop since a person wrote, cluster-wide.
    StopAndSay,
    /// Stop quietly (said already).
    Stop,
}

/// Another bot's message for the loop guard to count, with what the counting node knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BotMessage {
    pub session: Snowflake,
    pub message: Snowflake,
    /// The newest message a person wrote in the session that the counting node knows of.
    pub person_since: Option<Snowflake>,
    /// How many bot turns are answered before the guard stops (`agent.max_bot_turns`).
    pub max: u32,
}

/// A session's count as kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BotTurns {
    /// The newest person's message the count started after (0: none known).
    pub person_mark: u64,
    /// Bot turns answered since.
    pub turns: u32,
    /// Whether the guard said why it stopped, since.
    pub said: bool,
}

impl BotTurns {
    /// Counts `bot`'s message against its `max` turns: first, a person's message newer than
    /// the mark (`person_since`) starts the count again; then a bot message older than the
    /// mark is answered without counting (it came before a person wrote: a late copy, a
    /// backfill); any other is counted while the count is under `max`, else stopped — the
    /// first stop says why.
    pub fn count(&mut self, bot: &BotMessage) -> BotTurn {
        let BotMessage {
            message,
            person_since,
            max,
            ..
        } = *bot;
        if let Some(person) = person_since.filter(|person| person.0 > self.person_mark) {
            *self = BotTurns {
                person_mark: person.0,
                turns: 0,
                said: false,
            };
        }
        if message.0 <= self.person_mark {
            BotTurn::Answer
        } else if self.turns < max {
            self.turns += 1;
            BotTurn::Answer
        } else if std::mem::replace(&mut self.said, true) {
            BotTurn::Stop
        } else {
            BotTurn::StopAndSay
        }
    }
}

/// The loop guard's counts (see the module doc). A supertrait of
/// [`RunStore`](crate::RunStore): the bridge keeps both where it keeps its runs.
pub trait BotTurnStore: Send + Sync {
    /// Counts another bot's message (see [`BotTurns::count`]), atomically across nodes: of
    /// concurrent counts each sees the other's.
    fn count_bot_turn(&self, bot: BotMessage) -> StoreFuture<'_, BotTurn>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot(message: u64, person_since: Option<Snowflake>) -> BotMessage {
        BotMessage {
            session: Snowflake(1),
            message: Snowflake(message),
            person_since,
            max: 2,
        }
    }

    #[test]
    fn a_person_resets_the_count_and_older_bot_messages_are_not_counted() {
        let mut kept = BotTurns::default();
        assert_eq!(kept.count(&bot(10, Some(Snowflake(5)))), BotTurn::Answer);
        assert_eq!(kept.count(&bot(11, None)), BotTurn::Answer);
        assert_eq!(kept.count(&bot(12, None)), BotTurn::StopAndSay);
        assert_eq!(kept.count(&bot(13, None)), BotTurn::Stop);
        // The same mark again changes nothing.
        assert_eq!(kept.count(&bot(14, Some(Snowflake(5)))), BotTurn::Stop);
        assert_eq!(kept.count(&bot(16, Some(Snowflake(15)))), BotTurn::Answer);
        assert_eq!(kept.turns, 1);
        assert_eq!(kept.count(&bot(9, None)), BotTurn::Answer);
        assert_eq!(
            kept.turns, 1,
            "a message from before the person wrote is not counted"
        );
    }
}
