//! The live feed's events on PostgreSQL (issue 23 §3): one row per event, so every node's
//! `/v1/events` sees every node's events and a `Last-Event-ID` means the same on each.
//!
//! An append is one transaction sent in one round trip: it takes the change lock
//! ([`CHANGES_LOCK`](crate::schema::CHANGES_LOCK)) first, so ids are drawn and become visible
//! in id order across nodes (a reader that saw id `n` never later finds a new row below `n`),
//! inserts the batch with one multi-row `INSERT … SELECT FROM unnest(…)`, and ends with one
//! `changes` row holding only the batch's highest id, and so one `NOTIFY` per batch, never
//! per event. Other nodes' change listeners turn it into [`Changed::Events`] on their feeds.
//! Reads and pruning are single statements on a pooled connection, not waiting for the
//! batched writer.

use switchboard_store::events::{check_event_batch, MAX_EVENTS_READ};
use switchboard_store::feed::Changed;
use switchboard_store::{EventBounds, EventRow, EventStore, KeptEvent, StoreFuture};
use tokio_postgres::Row;

use crate::error::from_pg;
use crate::pipeline::{self, each, p, Stmt};
use crate::rows::{from_sql, ms, ms_from, to_sql};
use crate::{changes, schema, PgBackend};

/// Migration step 11: the events table.
pub(crate) const SCHEMA_EVENTS: &str = "
CREATE TABLE events (
    id bigserial PRIMARY KEY,
    kind text NOT NULL,
    session_id bigint,
    caller text,
    time_ms bigint NOT NULL,
    body text NOT NULL
);
";

const INSERT: &str = "INSERT INTO events (kind, session_id, caller, time_ms, body)
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[], $5::text[])
    RETURNING id";

/// The batch's change row: under the lock, the newest event is this batch's last.
const ANNOUNCE: &str = "WITH c AS (
        INSERT INTO changes (origin, batch, body)
        SELECT $1, $2, '[[\"e\",' || max(id) || ']]' FROM events RETURNING id)
    SELECT pg_notify('switchboard_changes', id::text) FROM c";

fn id_sql(id: u64) -> i64 {
    i64::try_from(id).unwrap_or(i64::MAX)
}

fn id_from(id: i64) -> u64 {
    u64::try_from(id).unwrap_or(0)
}

fn from_row(row: &Row) -> KeptEvent {
    KeptEvent {
        id: id_from(row.get(0)),
        row: EventRow {
            kind: row.get(1),
            session: row.get::<_, Option<i64>>(2).map(from_sql),
            caller: row.get(3),
            time_ms: ms_from(row.get(4)),
            body: row.get(5),
        },
    }
}

impl EventStore for PgBackend {
    fn append_events(&self, events: Vec<EventRow>) -> StoreFuture<'_, Vec<u64>> {
        if let Err(refused) = check_event_batch(&events) {
            return switchboard_store::aggregates::ready(Err(refused));
        }
        if events.is_empty() {
            return switchboard_store::aggregates::ready(Ok(Vec::new()));
        }
        self.run("an events batch", false, move |shared, client| async move {
            let mut kinds = Vec::with_capacity(events.len());
            let mut sessions = Vec::with_capacity(events.len());
            let mut callers = Vec::with_capacity(events.len());
            let mut times = Vec::with_capacity(events.len());
            let mut bodies = Vec::with_capacity(events.len());
            for event in events {
                kinds.push(event.kind);
                sessions.push(event.session.map(to_sql));
                callers.push(event.caller);
                times.push(ms(event.time_ms));
                bodies.push(event.body);
            }
            let stmts = [
                Stmt::new(changes::LOCK, vec![p(schema::CHANGES_LOCK)]),
                Stmt::new(
                    INSERT,
                    vec![p(kinds), p(sessions), p(callers), p(times), p(bodies)],
                ),
                Stmt::new(
                    ANNOUNCE,
                    vec![p(shared.origin_sql()), p(shared.next_batch())],
                ),
            ];
            let rows = pipeline::transaction(&client, &stmts)
                .await
                .map_err(|err| from_pg(&shared.location, "an events batch", err))?;
            let mut ids: Vec<u64> = rows[1].iter().map(|row| id_from(row.get(0))).collect();
            ids.sort_unstable();
            if let Some(&newest) = ids.last() {
                shared.feed.publish(Changed::Events(newest));
            }
            Ok(ids)
        })
    }

    fn events_after(&self, after: u64, limit: usize) -> StoreFuture<'_, Vec<KeptEvent>> {
        let limit = i64::try_from(limit.min(MAX_EVENTS_READ)).unwrap_or(0);
        self.run("events", false, move |shared, client| async move {
            let rows = each(
                &client,
                &[Stmt::new(
                    "SELECT id, kind, session_id, caller, time_ms, body FROM events
                     WHERE id > $1 ORDER BY id LIMIT $2",
                    vec![p(id_sql(after)), p(limit)],
                )],
            )
            .await
            .map_err(|err| from_pg(&shared.location, "events", err))?;
            Ok(rows
                .into_iter()
                .flatten()
                .map(|row| from_row(&row))
                .collect())
        })
    }

    fn event_bounds(&self) -> StoreFuture<'_, EventBounds> {
        self.run("the events' bounds", false, |shared, client| async move {
            let rows = each(
                &client,
                &[Stmt::new("SELECT min(id), max(id) FROM events", Vec::new())],
            )
            .await
            .map_err(|err| from_pg(&shared.location, "the events' bounds", err))?;
            let row = rows.into_iter().flatten().next();
            Ok(EventBounds {
                oldest: row
                    .as_ref()
                    .and_then(|row| row.get::<_, Option<i64>>(0))
                    .map(id_from),
                newest: row
                    .as_ref()
                    .and_then(|row| row.get::<_, Option<i64>>(1))
                    .map_or(0, id_from),
            })
        })
    }

    fn prune_events(&self, keep: usize) -> StoreFuture<'_, u64> {
        let keep = i64::try_from(keep.max(1)).unwrap_or(i64::MAX);
        self.run("old events", false, move |shared, client| async move {
            let rows = each(
                &client,
                &[Stmt::new(
                    "WITH gone AS (
                        DELETE FROM events WHERE id <=
                            (SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET $1)
                        RETURNING 1)
                     SELECT count(*) FROM gone",
                    vec![p(keep)],
                )],
            )
            .await
            .map_err(|err| from_pg(&shared.location, "old events", err))?;
            let gone: i64 = rows
                .into_iter()
                .flatten()
                .next()
                .map_or(0, |row| row.get(0));
            Ok(id_from(gone))
        })
    }
}
