//! The change feed across nodes.
//!
//! Every transaction that changes something (a writer batch, a claim, a decision) ends by
//! adding one `changes` row: its origin (the node), a batch number unique to that origin, and
//! the ids of what changed (JSON). It takes [`CHANGES_LOCK`](crate::schema::CHANGES_LOCK) just
//! before (so ids become visible in order) and sends `NOTIFY switchboard_changes` with only the
//! row's id: one notification per batch, never per message. Each node's listener keeps a
//! connection of its own (notifications reach only the session that listens, and a pooled
//! connection would lose them), reads the rows after the last one it saw, and publishes other
//! nodes' changes to the local feed. It also reads every [`POLL`] without a notification, so a
//! notification missed while it reconnected costs a second, not a change. Rows are kept a day.
//!
//! The row also tells a writer whether a batch whose commit answer was lost (the connection
//! broke during `COMMIT`) was committed: `(origin, batch)` is unique.

use std::sync::Arc;
use std::time::Duration;

use entity::Snowflake;
use futures_util::future::poll_fn;
use serde_json::{json, Value};
use switchboard_store::feed::{Changed, FeedSender, Origin};
use tokio::sync::{watch, Notify};
use tokio_postgres::{AsyncMessage, NoTls};
use tracing::{debug, warn};

use crate::pipeline::{p, Stmt};

/// The channel notifications go on.
pub(crate) const CHANNEL: &str = "switchboard_changes";

/// How often the listener reads new rows when no notification came.
const POLL: Duration = Duration::from_secs(1);

/// Most rows read at once.
const ROWS_PER_READ: i64 = 500;

fn id(value: &Value) -> Option<Snowflake> {
    value.as_u64().map(Snowflake)
}

/// One change as a row's body holds it.
fn encode_one(change: &Changed) -> Option<Value> {
    Some(match change {
        Changed::Session(id) => json!(["s", id.0]),
        Changed::SessionRemoved(id) => json!(["S", id.0]),
        Changed::Thread(id) => json!(["t", id.0]),
        Changed::User(id) => json!(["u", id.0]),
        Changed::Role(id) => json!(["r", id.0]),
        Changed::RoleRemoved(id) => json!(["R", id.0]),
        Changed::Message { channel_id, id } => json!(["m", channel_id.0, id.0]),
        Changed::MessagesDeleted { channel_id, ids } => {
            json!([
                "d",
                channel_id.0,
                ids.iter().map(|id| id.0).collect::<Vec<u64>>()
            ])
        }
        Changed::ChannelForgotten(id) => json!(["f", id.0]),
        Changed::Gap(id) => json!(["g", id.0]),
        Changed::TriggerClaimed(id) => json!(["c", id.0]),
        Changed::Workflow(id) => json!(["w", id]),
        Changed::Approval(id) => json!(["a", id]),
        Changed::Scope(id) => json!(["o", id.0]),
        Changed::Events(newest) => json!(["e", newest]),
        _ => return None,
    })
}

/// The body of a `changes` row.
pub(crate) fn encode<'a>(changes: impl IntoIterator<Item = &'a Changed>) -> String {
    Value::Array(changes.into_iter().filter_map(encode_one).collect()).to_string()
}

fn decode_one(value: &Value) -> Option<Changed> {
    let parts = value.as_array()?;
    let kind = parts.first()?.as_str()?;
    let first = parts.get(1)?;
    Some(match kind {
        "s" => Changed::Session(id(first)?),
        "S" => Changed::SessionRemoved(id(first)?),
        "t" => Changed::Thread(id(first)?),
        "u" => Changed::User(id(first)?),
        "r" => Changed::Role(id(first)?),
        "R" => Changed::RoleRemoved(id(first)?),
        "m" => Changed::Message {
            channel_id: id(first)?,
            id: id(parts.get(2)?)?,
        },
        "d" => Changed::MessagesDeleted {
            channel_id: id(first)?,
            ids: parts.get(2)?.as_array()?.iter().filter_map(id).collect(),
        },
        "f" => Changed::ChannelForgotten(id(first)?),
        "g" => Changed::Gap(id(first)?),
        "c" => Changed::TriggerClaimed(id(first)?),
        "w" => Changed::Workflow(first.as_str()?.to_owned()),
        "a" => Changed::Approval(first.as_str()?.to_owned()),
        "o" => Changed::Scope(id(first)?),
        "e" => Changed::Events(first.as_u64()?),
        _ => return None,
    })
}

/// The changes a row's body holds (a body that does not read holds none).
pub(crate) fn decode(body: &str) -> Vec<Changed> {
    match serde_json::from_str::<Value>(body) {
        Ok(Value::Array(items)) => items.iter().filter_map(decode_one).collect(),
        _ => Vec::new(),
    }
}

/// The statements a changing transaction ends with: the lock, then the row and its
/// notification (`$1` origin, `$2` batch, `$3` body; nothing is sent for an empty body).
pub(crate) const LOCK: &str = "SELECT pg_advisory_xact_lock($1)";
pub(crate) const INSERT: &str = "WITH c AS (
        INSERT INTO changes (origin, batch, body) VALUES ($1, $2, $3) RETURNING id)
    SELECT pg_notify('switchboard_changes', id::text) FROM c WHERE $3 <> '[]'";

/// Those two statements for batch `batch` of `origin` holding `body`.
pub(crate) fn recorded(origin: i64, batch: i64, body: String) -> [Stmt; 2] {
    [
        Stmt::new(LOCK, vec![p(crate::schema::CHANGES_LOCK)]),
        Stmt::new(INSERT, vec![p(origin), p(batch), p(body)]),
    ]
}

/// The listener's end: stops when `stop` turns true.
pub(crate) struct Listener {
    pub(crate) config: tokio_postgres::Config,
    pub(crate) feed: FeedSender,
    pub(crate) origin: Origin,
    pub(crate) last: i64,
    pub(crate) location: String,
    pub(crate) stop: watch::Receiver<bool>,
    pub(crate) connect_timeout: Duration,
}

impl Listener {
    /// Listens, reads and publishes until stopped; reconnects after failures with backoff.
    pub(crate) async fn run(mut self) {
        let mut backoff = Duration::from_millis(100);
        loop {
            if *self.stop.borrow() {
                return;
            }
            match self.session().await {
                Ok(()) => return,
                Err(err) => {
                    debug!(location = %self.location, %err, "the change listener lost its connection; reconnecting");
                }
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                _ = self.stop.changed() => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    /// One connection's life: `Ok` when stopped, `Err` when the connection failed.
    async fn session(&mut self) -> Result<(), String> {
        let connect = self.config.connect(NoTls);
        // A connect that hangs is retried like a refused one.
        let (client, mut connection) = tokio::time::timeout(self.connect_timeout, connect)
            .await
            .map_err(|_| "connecting timed out".to_owned())?
            .map_err(|err| err.to_string())?;
        let woken = Arc::new(Notify::new());
        let wake = Arc::clone(&woken);
        let driver = tokio::spawn(async move {
            while let Some(message) = poll_fn(|cx| connection.poll_message(cx)).await {
                match message {
                    Ok(AsyncMessage::Notification(_)) => wake.notify_one(),
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            // The connection ended: wake the reader so it notices.
            wake.notify_one();
        });
        let result = async {
            let pg = |err: tokio_postgres::Error| err.to_string();
            client
                .batch_execute(&format!("LISTEN {CHANNEL}"))
                .await
                .map_err(pg)?;
            let read = client
                .prepare("SELECT id, origin, body FROM changes WHERE id > $1 ORDER BY id LIMIT $2")
                .await
                .map_err(pg)?;
            loop {
                loop {
                    let rows = client
                        .query(&read, &[&self.last, &ROWS_PER_READ])
                        .await
                        .map_err(pg)?;
                    let full = rows.len() as i64 == ROWS_PER_READ;
                    for row in rows {
                        let id: i64 = row.get(0);
                        let origin = Origin(row.get::<_, i64>(1) as u64);
                        self.last = self.last.max(id);
                        if origin == self.origin {
                            continue;
                        }
                        let feed = self.feed.for_origin(origin);
                        for change in decode(row.get::<_, &str>(2)) {
                            feed.publish(change);
                        }
                    }
                    if !full {
                        break;
                    }
                }
                if client.is_closed() {
                    return Err("the connection closed".to_owned());
                }
                tokio::select! {
                    () = woken.notified() => {}
                    () = tokio::time::sleep(POLL) => {}
                    _ = self.stop.changed() => return Ok(()),
                }
            }
        }
        .await;
        driver.abort();
        if let Err(err) = &result {
            warn!(location = %self.location, %err, "the change listener's connection failed; reconnecting");
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn change() -> impl Strategy<Value = Changed> {
        let id = any::<u64>().prop_map(Snowflake);
        prop_oneof![
            id.clone().prop_map(Changed::Session),
            id.clone().prop_map(Changed::SessionRemoved),
            id.clone().prop_map(Changed::Thread),
            id.clone().prop_map(Changed::User),
            id.clone().prop_map(Changed::Role),
            id.clone().prop_map(Changed::RoleRemoved),
            (id.clone(), id.clone())
                .prop_map(|(channel_id, id)| Changed::Message { channel_id, id }),
            (id.clone(), prop::collection::vec(id.clone(), 0..4))
                .prop_map(|(channel_id, ids)| Changed::MessagesDeleted { channel_id, ids }),
            id.clone().prop_map(Changed::ChannelForgotten),
            id.clone().prop_map(Changed::Gap),
            id.clone().prop_map(Changed::TriggerClaimed),
            ".*".prop_map(Changed::Workflow),
            ".*".prop_map(Changed::Approval),
            id.prop_map(Changed::Scope),
            any::<u64>().prop_map(Changed::Events),
        ]
    }

    proptest! {
        #[test]
        fn every_change_reads_back_as_written(changes in prop::collection::vec(change(), 0..8)) {
            prop_assert_eq!(decode(&encode(&changes)), changes);
        }

        #[test]
        fn a_body_that_does_not_read_holds_nothing_and_never_panics(body in ".*") {
            let _ = decode(&body);
        }
    }

    #[test]
    fn unknown_or_damaged_entries_are_skipped() {
        assert_eq!(
            decode(r#"[["s", 1], ["zz", 2], ["m", 1], "x", ["w", "wf_1"]]"#),
            vec![
                Changed::Session(Snowflake(1)),
                Changed::Workflow("wf_1".into())
            ]
        );
        assert!(decode("not json").is_empty());
    }
}
