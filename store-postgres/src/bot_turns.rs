//! The loop guard's counts on PostgreSQL (issue 23 §3): one row per session, shared by every
//! node. A count is one transaction on a pooled connection with the session's row locked
//! (`FOR UPDATE`), so concurrent counts on any nodes queue there and each sees the one before.

use switchboard_store::{BotMessage, BotTurn, BotTurnStore, BotTurns, StoreFuture};

use crate::error::from_pg;
use crate::rows::to_sql;
use crate::PgBackend;

/// Migration step 14: the loop guard's counts.
pub(crate) const SCHEMA_BOT_TURNS: &str = "
CREATE TABLE bot_turns (
    session_id bigint PRIMARY KEY,
    person_mark bigint NOT NULL DEFAULT 0,
    turns bigint NOT NULL DEFAULT 0,
    said boolean NOT NULL DEFAULT false
);
";

impl BotTurnStore for PgBackend {
    fn count_bot_turn(&self, bot: BotMessage) -> StoreFuture<'_, BotTurn> {
        let what = "a bot's turn";
        let session = bot.session;
        self.run(what, false, move |shared, mut client| async move {
            let pg = |err| from_pg(&shared.location, what, err);
            let tx = client.transaction().await.map_err(pg)?;
            let session = to_sql(session);
            tx.execute(
                "INSERT INTO bot_turns (session_id) VALUES ($1) ON CONFLICT (session_id) DO NOTHING",
                &[&session],
            )
            .await
            .map_err(pg)?;
            let row = tx
                .query_one(
                    "SELECT person_mark, turns, said FROM bot_turns WHERE session_id = $1 FOR UPDATE",
                    &[&session],
                )
                .await
                .map_err(pg)?;
            let mut kept = BotTurns {
                person_mark: row.get::<_, i64>(0) as u64,
                turns: u32::try_from(row.get::<_, i64>(1)).unwrap_or(u32::MAX),
                said: row.get(2),
            };
            let turn = kept.count(&bot);
            tx.execute(
                "UPDATE bot_turns SET person_mark = $2, turns = $3, said = $4 WHERE session_id = $1",
                &[
                    &session,
                    &(kept.person_mark as i64),
                    &i64::from(kept.turns),
                    &kept.said,
                ],
            )
            .await
            .map_err(pg)?;
            tx.commit().await.map_err(pg)?;
            Ok(turn)
        })
    }
}
