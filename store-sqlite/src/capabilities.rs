//! Run capabilities on SQLite (issue 23): one row per minted token, by digest. One SQLite file
//! is one node's, so this mostly keeps the aggregate's contract; a cluster shares them through
//! PostgreSQL. Each call runs on the writer's thread in a transaction of its own.

use rusqlite::{params, OptionalExtension, Row};
use switchboard_records::{CapabilityEnd, KeptCapability};
use switchboard_store::{check_capability, CapabilityStore, StoreFuture};

use crate::rows::{from_sql, ms_to_sql, to_sql};
use crate::SqliteBackend;

/// Step 16: the capabilities table.
pub(crate) const SCHEMA_CAPABILITIES: &str = "
CREATE TABLE IF NOT EXISTS capabilities (
    digest TEXT PRIMARY KEY,
    session_id INTEGER NOT NULL,
    request_id TEXT NOT NULL,
    scope TEXT NOT NULL,
    client TEXT,
    cwd TEXT,
    trigger_message_id INTEGER,
    requested_by INTEGER,
    minted_ms INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL,
    ended TEXT
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS capabilities_by_expiry ON capabilities (expires_ms);
";

/// Forgets capabilities expired at or before `?1` (at a prune, and hourly with the others).
pub(crate) const DELETE_EXPIRED_CAPABILITIES: &str =
    "DELETE FROM capabilities WHERE expires_ms <= ?1";

const COLUMNS: &str = "digest, session_id, request_id, scope, client, cwd, trigger_message_id, \
                       requested_by, minted_ms, expires_ms, ended";

fn unreadable(detail: impl std::fmt::Display) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        0,
        rusqlite::types::Type::Text,
        format!("a stored capability does not read: {detail}").into(),
    )
}

fn from_row(row: &Row<'_>) -> rusqlite::Result<KeptCapability> {
    let scope: String = row.get(3)?;
    let ended: Option<String> = row.get(10)?;
    let ms = |value: i64| u64::try_from(value).unwrap_or(0);
    Ok(KeptCapability {
        digest: row.get(0)?,
        session_id: from_sql(row.get(1)?),
        request_id: row.get(2)?,
        scope: serde_json::from_str(&scope).map_err(unreadable)?,
        client: row.get(4)?,
        cwd: row.get(5)?,
        trigger_message_id: row.get::<_, Option<i64>>(6)?.map(from_sql),
        requested_by: row.get::<_, Option<i64>>(7)?.map(from_sql),
        minted_ms: ms(row.get(8)?),
        expires_ms: ms(row.get(9)?),
        ended: match ended {
            None => None,
            Some(name) => Some(CapabilityEnd::parse(&name).ok_or_else(|| unreadable(name))?),
        },
    })
}

impl CapabilityStore for SqliteBackend {
    fn save_capability(&self, capability: KeptCapability) -> StoreFuture<'_, ()> {
        if let Err(refused) = check_capability(&capability) {
            return switchboard_store::aggregates::ready(Err(refused));
        }
        self.decide("keep a capability", move |tx| {
            tx.prepare_cached(
                "INSERT INTO capabilities (digest, session_id, request_id, scope, client, cwd,
                     trigger_message_id, requested_by, minted_ms, expires_ms, ended)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                 ON CONFLICT (digest) DO NOTHING",
            )?
            .execute(params![
                capability.digest,
                to_sql(capability.session_id),
                capability.request_id,
                crate::rows::json(&capability.scope)?,
                capability.client,
                capability.cwd,
                capability.trigger_message_id.map(to_sql),
                capability.requested_by.map(to_sql),
                ms_to_sql(capability.minted_ms),
                ms_to_sql(capability.expires_ms),
                capability.ended.map(CapabilityEnd::as_str),
            ])?;
            Ok(Ok(()))
        })
    }

    fn capability(&self, digest: &str) -> StoreFuture<'_, Option<KeptCapability>> {
        let digest = digest.to_owned();
        self.read("a capability", move |conn, _| {
            conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM capabilities WHERE digest = ?1"
            ))?
            .query_row([digest], from_row)
            .optional()
        })
    }

    fn end_capability(&self, digest: &str, how: CapabilityEnd) -> StoreFuture<'_, bool> {
        let digest = digest.to_owned();
        self.decide("end a capability", move |tx| {
            let ended = tx
                .prepare_cached(
                    "UPDATE capabilities SET ended = ?2 WHERE digest = ?1 AND ended IS NULL",
                )?
                .execute(params![digest, how.as_str()])?;
            Ok(Ok(ended > 0))
        })
    }

    fn prune_capabilities(&self, now_ms: u64) -> StoreFuture<'_, usize> {
        self.decide("forget expired capabilities", move |tx| {
            Ok(Ok(tx
                .prepare_cached(DELETE_EXPIRED_CAPABILITIES)?
                .execute([ms_to_sql(now_ms)])?))
        })
    }
}
