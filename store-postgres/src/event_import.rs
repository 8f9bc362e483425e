//! Events imported under their own ids on PostgreSQL (`store copy`): one transaction under the
//! events' lock inserts the batch (`ON CONFLICT (id) DO NOTHING` skips ids already kept) and
//! moves the id sequence past the highest id kept, so later appends get higher ids.

use switchboard_store::event_import::{rows, EventImport};
use switchboard_store::events::check_event_batch;
use switchboard_store::{KeptEvent, StoreFuture};

use crate::error::from_pg;
use crate::pipeline::{self, p, Stmt};
use crate::rows::{ms, to_sql};
use crate::{changes, schema, PgBackend};

const IMPORT: &str = "INSERT INTO events (id, kind, session_id, caller, time_ms, body)
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::bigint[], $6::text[])
    ON CONFLICT (id) DO NOTHING";

const PAST_THE_HIGHEST: &str = "SELECT setval('events_id_seq', greatest(
    (SELECT coalesce(max(id), 1) FROM events),
    (SELECT last_value FROM events_id_seq)))";

impl EventImport for PgBackend {
    fn import_events(&self, events: Vec<KeptEvent>) -> StoreFuture<'_, ()> {
        let rows = rows(&events);
        if let Err(refused) = check_event_batch(&rows) {
            return switchboard_store::aggregates::ready(Err(refused));
        }
        if events.is_empty() {
            return switchboard_store::aggregates::ready(Ok(()));
        }
        self.run("imported events", false, move |shared, client| async move {
            let ids: Vec<i64> = events
                .iter()
                .map(|event| i64::try_from(event.id).unwrap_or(i64::MAX))
                .collect();
            let kinds: Vec<String> = rows.iter().map(|row| row.kind.clone()).collect();
            let sessions: Vec<Option<i64>> =
                rows.iter().map(|row| row.session.map(to_sql)).collect();
            let callers: Vec<Option<String>> = rows.iter().map(|row| row.caller.clone()).collect();
            let times: Vec<i64> = rows.iter().map(|row| ms(row.time_ms)).collect();
            let bodies: Vec<String> = rows.into_iter().map(|row| row.body).collect();
            let stmts = [
                Stmt::new(changes::LOCK, vec![p(schema::CHANGES_LOCK)]),
                Stmt::new(
                    IMPORT,
                    vec![
                        p(ids),
                        p(kinds),
                        p(sessions),
                        p(callers),
                        p(times),
                        p(bodies),
                    ],
                ),
                Stmt::new(PAST_THE_HIGHEST, Vec::new()),
            ];
            pipeline::transaction(&client, &stmts)
                .await
                .map_err(|err| from_pg(&shared.location, "imported events", err))?;
            Ok(())
        })
    }
}
