//! Events imported under their own ids on SQLite (`store copy`): `INSERT OR IGNORE` skips ids
//! already kept, and `AUTOINCREMENT` goes on above the highest id imported.

use rusqlite::params;
use switchboard_store::event_import::{rows, EventImport};
use switchboard_store::events::check_event_batch;
use switchboard_store::{KeptEvent, StoreFuture};

use crate::rows::{ms_to_sql, to_sql};
use crate::SqliteBackend;

impl EventImport for SqliteBackend {
    fn import_events(&self, events: Vec<KeptEvent>) -> StoreFuture<'_, ()> {
        let rows = rows(&events);
        if let Err(refused) = check_event_batch(&rows) {
            return switchboard_store::aggregates::ready(Err(refused));
        }
        self.decide("import events", move |tx| {
            let mut insert = tx.prepare_cached(
                "INSERT OR IGNORE INTO events (id, kind, session_id, caller, time_ms, body)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?;
            for event in &events {
                insert.execute(params![
                    i64::try_from(event.id).unwrap_or(i64::MAX),
                    event.row.kind,
                    event.row.session.map(to_sql),
                    event.row.caller,
                    ms_to_sql(event.row.time_ms),
                    event.row.body,
                ])?;
            }
            Ok(Ok(()))
        })
    }
}
