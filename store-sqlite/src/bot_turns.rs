//! The loop guard's counts on SQLite (issue 23 §3): one row per session, decided in a
//! transaction on the writer's thread (one SQLite file is one node's; the row keeps the count
//! across restarts).

use rusqlite::{params, OptionalExtension};
use switchboard_store::{BotMessage, BotTurn, BotTurnStore, BotTurns, StoreFuture};

use crate::rows::to_sql;
use crate::SqliteBackend;

/// Step 20: the loop guard's counts.
pub(crate) const SCHEMA_BOT_TURNS: &str = "
CREATE TABLE IF NOT EXISTS bot_turns (
    session_id INTEGER PRIMARY KEY,
    person_mark INTEGER NOT NULL,
    turns INTEGER NOT NULL,
    said INTEGER NOT NULL
);
";

impl BotTurnStore for SqliteBackend {
    fn count_bot_turn(&self, bot: BotMessage) -> StoreFuture<'_, BotTurn> {
        let session = bot.session;
        self.decide("count a bot's turn", move |tx| {
            let mut kept = tx
                .prepare_cached(
                    "SELECT person_mark, turns, said FROM bot_turns WHERE session_id = ?1",
                )?
                .query_row([to_sql(session)], |row| {
                    Ok(BotTurns {
                        person_mark: row.get::<_, i64>(0)? as u64,
                        turns: u32::try_from(row.get::<_, i64>(1)?).unwrap_or(u32::MAX),
                        said: row.get(2)?,
                    })
                })
                .optional()?
                .unwrap_or_default();
            let turn = kept.count(&bot);
            tx.prepare_cached(
                "INSERT OR REPLACE INTO bot_turns (session_id, person_mark, turns, said)
                 VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                to_sql(session),
                kept.person_mark as i64,
                i64::from(kept.turns),
                kept.said
            ])?;
            Ok(Ok(turn))
        })
    }
}
