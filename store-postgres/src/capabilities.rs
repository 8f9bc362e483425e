//! Run capabilities on PostgreSQL (issue 23): one row per minted token, by digest, so a run's
//! capability is valid on every node and its end is seen by every node. Each call is one
//! statement on a pooled connection, committed when its future resolves; none waits for the
//! batched writer (capabilities never go through it).

use switchboard_records::{CapabilityEnd, KeptCapability};
use switchboard_store::{check_capability, CapabilityStore, StoreError, StoreFuture};
use tokio_postgres::Row;

use crate::error::from_pg;
use crate::pipeline::{each, p, Param, Stmt};
use crate::rows::{clean, from_sql, ms, ms_from, to_sql};
use crate::PgBackend;

/// Migration step 10: the capabilities table.
pub(crate) const SCHEMA_CAPABILITIES: &str = "
CREATE TABLE capabilities (
    digest text PRIMARY KEY,
    session_id bigint NOT NULL,
    request_id text NOT NULL,
    scope text[] NOT NULL,
    client text,
    cwd text,
    trigger_message_id bigint,
    requested_by bigint,
    minted_ms bigint NOT NULL,
    expires_ms bigint NOT NULL,
    ended text
);
CREATE INDEX capabilities_by_expiry ON capabilities (expires_ms);
";

/// Forgets capabilities expired at or before `$1` (at a prune, and with the hourly expiry).
pub(crate) const DELETE_EXPIRED_CAPABILITIES: &str =
    "DELETE FROM capabilities WHERE expires_ms <= $1";

fn from_row(location: &str, row: &Row) -> Result<KeptCapability, StoreError> {
    let ended: Option<String> = row.get(10);
    Ok(KeptCapability {
        digest: row.get(0),
        session_id: from_sql(row.get(1)),
        request_id: row.get(2),
        scope: row.get(3),
        client: row.get(4),
        cwd: row.get(5),
        trigger_message_id: row.get::<_, Option<i64>>(6).map(from_sql),
        requested_by: row.get::<_, Option<i64>>(7).map(from_sql),
        minted_ms: ms_from(row.get(8)),
        expires_ms: ms_from(row.get(9)),
        ended: match ended {
            None => None,
            Some(name) => Some(CapabilityEnd::parse(&name).ok_or_else(|| {
                StoreError::new(
                    switchboard_store::StoreErrorKind::Corrupt,
                    format!(
                        "a capability kept in the database at {location} ended as {name:?}, which this switchboard does not know; was the table changed by hand?"
                    ),
                )
            })?),
        },
    })
}

impl PgBackend {
    /// One statement, not waiting for the batched writer; its rows.
    fn capability_statement(
        &self,
        what: &'static str,
        sql: &'static str,
        params: Vec<Param>,
    ) -> StoreFuture<'static, Vec<Row>> {
        self.run(what, false, move |shared, client| async move {
            let mut rows = each(&client, &[Stmt::new(sql, params)])
                .await
                .map_err(|err| from_pg(&shared.location, what, err))?;
            Ok(rows.pop().unwrap_or_default())
        })
    }
}

impl CapabilityStore for PgBackend {
    fn save_capability(&self, capability: KeptCapability) -> StoreFuture<'_, ()> {
        if let Err(refused) = check_capability(&capability) {
            return switchboard_store::aggregates::ready(Err(refused));
        }
        let saved = self.capability_statement(
            "a capability",
            "INSERT INTO capabilities (digest, session_id, request_id, scope, client, cwd,
                 trigger_message_id, requested_by, minted_ms, expires_ms, ended)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
             ON CONFLICT (digest) DO NOTHING",
            vec![
                p(capability.digest),
                p(to_sql(capability.session_id)),
                p(clean(&capability.request_id)),
                p(capability
                    .scope
                    .iter()
                    .map(|pattern| clean(pattern))
                    .collect::<Vec<String>>()),
                p(capability.client.as_deref().map(clean)),
                p(capability.cwd.as_deref().map(clean)),
                p(capability.trigger_message_id.map(to_sql)),
                p(capability.requested_by.map(to_sql)),
                p(ms(capability.minted_ms)),
                p(ms(capability.expires_ms)),
                p(capability.ended.map(|end| end.as_str().to_owned())),
            ],
        );
        Box::pin(async move { saved.await.map(drop) })
    }

    fn capability(&self, digest: &str) -> StoreFuture<'_, Option<KeptCapability>> {
        let location = self.shared.location.clone();
        let rows = self.capability_statement(
            "a capability",
            "SELECT digest, session_id, request_id, scope, client, cwd, trigger_message_id,
                 requested_by, minted_ms, expires_ms, ended
             FROM capabilities WHERE digest = $1",
            vec![p(clean(digest))],
        );
        Box::pin(async move {
            rows.await?
                .first()
                .map(|row| from_row(&location, row))
                .transpose()
        })
    }

    fn end_capability(&self, digest: &str, how: CapabilityEnd) -> StoreFuture<'_, bool> {
        let ended = self.capability_statement(
            "a capability's end",
            "UPDATE capabilities SET ended = $2 WHERE digest = $1 AND ended IS NULL
             RETURNING digest",
            vec![p(clean(digest)), p(how.as_str().to_owned())],
        );
        Box::pin(async move { Ok(!ended.await?.is_empty()) })
    }

    fn prune_capabilities(&self, now_ms: u64) -> StoreFuture<'_, usize> {
        let gone = self.capability_statement(
            "expired capabilities",
            "WITH gone AS (DELETE FROM capabilities WHERE expires_ms <= $1 RETURNING 1)
             SELECT count(*) FROM gone",
            vec![p(ms(now_ms))],
        );
        Box::pin(async move {
            let rows = gone.await?;
            let count: i64 = rows.first().map_or(0, |row| row.get(0));
            Ok(usize::try_from(count).unwrap_or(0))
        })
    }
}
