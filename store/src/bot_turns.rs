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
    /// Counts bot message `message` against `max` turns: first, a person's message newer than
    /// the mark (`person_since`) starts the count again; then a bot message older than the
    /// mark is answered without counting (it came before a person wrote: a late copy, a
    /// backfill); any other is counted while the count is under `max`, else stopped — the
    /// first stop says why.
    pub fn count(
        &mut self,
        message: Snowflake,
        person_since: Option<Snowflake>,
        max: u32,
    ) -> BotTurn {
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
    /// Counts another bot's message `message` in `session` (see [`BotTurns::count`]),
    /// atomically across nodes: of concurrent counts each sees the other's. `person_since`:
    /// the newest message a person wrote in the session that the caller knows of.
    fn count_bot_turn(
        &self,
        session: Snowflake,
        message: Snowflake,
        person_since: Option<Snowflake>,
        max: u32,
    ) -> StoreFuture<'_, BotTurn>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_person_resets_the_count_and_older_bot_messages_are_not_counted() {
        let mut kept = BotTurns::default();
        assert_eq!(
            kept.count(Snowflake(10), Some(Snowflake(5)), 2),
            BotTurn::Answer
        );
        assert_eq!(kept.count(Snowflake(11), None, 2), BotTurn::Answer);
        assert_eq!(kept.count(Snowflake(12), None, 2), BotTurn::StopAndSay);
        assert_eq!(kept.count(Snowflake(13), None, 2), BotTurn::Stop);
        // The same mark again changes nothing.
        assert_eq!(
            kept.count(Snowflake(14), Some(Snowflake(5)), 2),
            BotTurn::Stop
        );
        assert_eq!(
            kept.count(Snowflake(16), Some(Snowflake(15)), 2),
            BotTurn::Answer
        );
        assert_eq!(kept.turns, 1);
        assert_eq!(kept.count(Snowflake(9), None, 2), BotTurn::Answer);
        assert_eq!(
            kept.turns, 1,
            "a message from before the person wrote is not counted"
        );
    }
}
