//! The live feed's events on SQLite (issue 23 §3): one row per event, ids from
//! `AUTOINCREMENT` (never reused, so a `Last-Event-ID` means the same after a restart). One
//! SQLite file is one node's; each call runs on the writer's thread in a transaction of its
//! own, so appends are ordered.

use rusqlite::{params, Row};
use switchboard_store::events::{check_event_batch, MAX_EVENTS_READ};
use switchboard_store::feed::Changed;
use switchboard_store::{EventBounds, EventRow, EventStore, KeptEvent, StoreFuture};

use crate::rows::{from_sql, ms_to_sql, to_sql};
use crate::SqliteBackend;

/// Step 17: the events table.
pub(crate) const SCHEMA_EVENTS: &str = "
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    session_id INTEGER,
    caller TEXT,
    time_ms INTEGER NOT NULL,
    body TEXT NOT NULL
);
";

fn from_row(row: &Row<'_>) -> rusqlite::Result<KeptEvent> {
    Ok(KeptEvent {
        id: u64::try_from(row.get::<_, i64>(0)?).unwrap_or(0),
        row: EventRow {
            kind: row.get(1)?,
            session: row.get::<_, Option<i64>>(2)?.map(from_sql),
            caller: row.get(3)?,
            time_ms: u64::try_from(row.get::<_, i64>(4)?).unwrap_or(0),
            body: row.get(5)?,
        },
    })
}

fn id_to_sql(id: u64) -> i64 {
    i64::try_from(id).unwrap_or(i64::MAX)
}

impl EventStore for SqliteBackend {
    fn append_events(&self, events: Vec<EventRow>) -> StoreFuture<'_, Vec<u64>> {
        if let Err(refused) = check_event_batch(&events) {
            return switchboard_store::aggregates::ready(Err(refused));
        }
        let appended = self.decide("append events", move |tx| {
            let mut insert = tx.prepare_cached(
                "INSERT INTO events (kind, session_id, caller, time_ms, body)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            let mut ids = Vec::with_capacity(events.len());
            for event in &events {
                insert.execute(params![
                    event.kind,
                    event.session.map(to_sql),
                    event.caller,
                    ms_to_sql(event.time_ms),
                    event.body,
                ])?;
                ids.push(u64::try_from(tx.last_insert_rowid()).unwrap_or(0));
            }
            Ok(Ok(ids))
        });
        let feed = self.feed.clone();
        Box::pin(async move {
            let ids = appended.await?;
            if let Some(&newest) = ids.last() {
                feed.publish(Changed::Events(newest));
            }
            Ok(ids)
        })
    }

    fn events_after(&self, after: u64, limit: usize) -> StoreFuture<'_, Vec<KeptEvent>> {
        let limit = i64::try_from(limit.min(MAX_EVENTS_READ)).unwrap_or(0);
        self.read("events", move |conn, _| {
            conn.prepare_cached(
                "SELECT id, kind, session_id, caller, time_ms, body FROM events
                 WHERE id > ?1 ORDER BY id LIMIT ?2",
            )?
            .query_map(params![id_to_sql(after), limit], from_row)?
            .collect()
        })
    }

    fn event_bounds(&self) -> StoreFuture<'_, EventBounds> {
        self.read("the events' bounds", |conn, _| {
            conn.prepare_cached("SELECT min(id), max(id) FROM events")?
                .query_row([], |row| {
                    Ok(EventBounds {
                        oldest: row
                            .get::<_, Option<i64>>(0)?
                            .and_then(|id| u64::try_from(id).ok()),
                        newest: row
                            .get::<_, Option<i64>>(1)?
                            .and_then(|id| u64::try_from(id).ok())
                            .unwrap_or(0),
                    })
                })
        })
    }

    fn prune_events(&self, keep: usize) -> StoreFuture<'_, u64> {
        let keep = i64::try_from(keep.max(1)).unwrap_or(i64::MAX);
        self.decide("forget old events", move |tx| {
            let gone = tx
                .prepare_cached(
                    "DELETE FROM events WHERE id <=
                        (SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET ?1)",
                )?
                .execute([keep])?;
            Ok(Ok(gone as u64))
        })
    }
}
