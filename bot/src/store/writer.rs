//! The writer thread: the one owner of the SQLite connection. It takes whatever changes are
//! queued (up to [`MAX_BATCH`]) into one transaction, so ingest never waits for an fsync per
//! message, answers flushes once the changes queued before them are committed, and prunes
//! old rows now and then.

use std::collections::HashSet;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use entity::Snowflake;
use rusqlite::Connection;
use tracing::{debug, error, warn};

use super::error::StoreError;
use super::hot::Hot;
use super::sqlite::{self, Change, IndexBatch};

/// Most changes committed in one transaction.
pub(crate) const MAX_BATCH: usize = 1_000;
/// Prune the channels written to after this many batches...
const PRUNE_EVERY_BATCHES: u32 = 64;
/// ...or this long after the last prune, whichever comes first.
const PRUNE_INTERVAL: Duration = Duration::from_secs(30);

/// The answer to a flush or close: the first write failure since the previous answer.
type Reply = SyncSender<Result<(), String>>;

/// A read that runs on the writer's connection once the changes queued before it are
/// committed.
pub(crate) type Query = Box<dyn FnOnce(&Connection) + Send>;

pub(crate) enum Command {
    Change(Change),
    Flush(Reply),
    Query(Query),
    Close(Reply),
}

/// How often audit rows past `audit.retention_days` are pruned while running.
const AUDIT_PRUNE_INTERVAL: Duration = Duration::from_secs(3600);

/// The handle the store keeps: a queue into the thread and the thread itself.
pub(crate) struct Writer {
    queue: Sender<Command>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Writer {
    pub(crate) fn spawn(
        conn: Connection,
        path: String,
        keep: usize,
        audit_retention: Duration,
        hot: Arc<Hot>,
    ) -> Result<Writer, StoreError> {
        let (queue, commands) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || {
                WriterThread::new(conn, path, keep, hot)
                    .with_audit_retention(audit_retention)
                    .run(commands);
            })
            .map_err(StoreError::Spawn)?;
        Ok(Writer {
            queue,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queues a change; gives it back when the writer has stopped.
    pub(crate) fn send(&self, change: Change) -> Result<(), Change> {
        match self.queue.send(Command::Change(change)) {
            Ok(()) => Ok(()),
            Err(mpsc::SendError(Command::Change(change))) => Err(change),
            Err(_) => Ok(()),
        }
    }

    /// Runs `query` on the writer's connection after what is queued now is committed; `false`
    /// when the writer has stopped (the query is dropped unrun).
    pub(crate) fn query(&self, query: Query) -> bool {
        self.queue.send(Command::Query(query)).is_ok()
    }

    /// Waits until everything queued before the call is committed.
    /// `Err(None)`: the writer has stopped; `Err(Some(message))`: a write failed.
    pub(crate) fn flush(&self) -> Result<(), Option<String>> {
        self.round_trip(Command::Flush)
    }

    /// Commits what is queued, prunes, checkpoints and stops the thread.
    pub(crate) fn close(&self) -> Result<(), Option<String>> {
        let result = self.round_trip(Command::Close);
        let thread = match self.thread.lock() {
            Ok(mut thread) => thread.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(thread) = thread {
            if thread.join().is_err() {
                error!("the store's writer thread panicked");
            }
        }
        result
    }

    fn round_trip(&self, command: impl FnOnce(Reply) -> Command) -> Result<(), Option<String>> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.queue.send(command(reply)).map_err(|_| None)?;
        answer.recv().map_err(|_| None)?.map_err(Some)
    }
}

struct WriterThread {
    conn: Connection,
    path: String,
    keep: usize,
    /// Where message changes read the rows they write.
    hot: Arc<Hot>,
    /// What the batch being committed owes the search index.
    index: IndexBatch,
    /// The first failure since the last flush answer.
    failure: Option<String>,
    /// Channels with inserts or deletes since the last prune.
    touched: HashSet<Snowflake>,
    batches_since_prune: u32,
    last_prune: Instant,
    audit_retention: Duration,
    last_audit_prune: Instant,
}

impl WriterThread {
    fn new(conn: Connection, path: String, keep: usize, hot: Arc<Hot>) -> WriterThread {
        WriterThread {
            conn,
            path,
            keep,
            hot,
            index: IndexBatch::default(),
            failure: None,
            touched: HashSet::new(),
            batches_since_prune: 0,
            last_prune: Instant::now(),
            audit_retention: Duration::MAX,
            last_audit_prune: Instant::now(),
        }
    }

    fn with_audit_retention(self, audit_retention: Duration) -> WriterThread {
        WriterThread {
            audit_retention,
            ..self
        }
    }

    fn run(mut self, commands: Receiver<Command>) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let mut replies = Vec::new();
        let mut queries: Vec<Query> = Vec::new();
        loop {
            let first = match commands.recv_timeout(PRUNE_INTERVAL) {
                Ok(command) => command,
                Err(RecvTimeoutError::Timeout) => {
                    self.prune_if_due();
                    continue;
                }
                // Every handle is gone without a close: commit nothing more, but leave the
                // file tidy.
                Err(RecvTimeoutError::Disconnected) => {
                    self.finish();
                    return;
                }
            };
            let mut closing = None;
            let mut next = Some(first);
            while let Some(command) = next.take() {
                match command {
                    Command::Change(change) => batch.push(change),
                    Command::Flush(reply) => replies.push(reply),
                    Command::Query(query) => queries.push(query),
                    Command::Close(reply) => {
                        closing = Some(reply);
                        break;
                    }
                }
                if batch.len() >= MAX_BATCH {
                    break;
                }
                next = commands.try_recv().ok();
            }
            self.commit(&mut batch);
            for query in queries.drain(..) {
                query(&self.conn);
            }
            // A failure is kept until a flush or close answers it: a batch committed before
            // the flush arrived must not swallow it.
            if !replies.is_empty() {
                let answer = match self.failure.take() {
                    Some(failure) => Err(failure),
                    None => Ok(()),
                };
                for reply in replies.drain(..) {
                    let _ = reply.send(answer.clone());
                }
            }
            if let Some(reply) = closing {
                self.finish();
                let answer = match self.failure.take() {
                    Some(failure) => Err(failure),
                    None => Ok(()),
                };
                let _ = reply.send(answer);
                return;
            }
            self.batches_since_prune += 1;
            self.prune_if_due();
        }
    }

    fn fail(&mut self, what: String) {
        error!(path = %self.path, "store write failed: {what}");
        self.failure.get_or_insert(what);
    }

    /// Applies a batch in one transaction. Each failed change is logged and remembered; the
    /// rest still commit.
    fn commit(&mut self, batch: &mut Vec<Change>) {
        if batch.is_empty() {
            return;
        }
        if let Err(err) = self.conn.execute_batch("BEGIN") {
            let what = format!(
                "could not begin a transaction for {} change(s): {err}",
                batch.len()
            );
            self.fail(what);
            batch.clear();
            return;
        }
        for change in batch.iter() {
            if let Some(channel) = change.channel() {
                self.touched.insert(channel);
            }
            if let Err(err) = sqlite::apply(&self.conn, &self.hot, &mut self.index, change) {
                let what = format!("{}: {err}", change.describe());
                self.fail(what);
            }
        }
        // Last, so that no later statement of the batch makes FTS5 write its terms out early.
        if let Err(err) = self.index.apply(&self.conn) {
            let what = format!(
                "update the search index for {} change(s): {err}",
                batch.len()
            );
            self.fail(what);
        }
        if let Err(err) = self.conn.execute_batch("COMMIT") {
            let what = format!("could not commit {} change(s): {err}", batch.len());
            self.fail(what);
            self.index.clear();
            if !self.conn.is_autocommit() {
                if let Err(err) = self.conn.execute_batch("ROLLBACK") {
                    error!(path = %self.path, %err, "could not roll back a failed store transaction");
                }
            }
        }
        batch.clear();
    }

    fn prune_if_due(&mut self) {
        if self.last_audit_prune.elapsed() >= AUDIT_PRUNE_INTERVAL {
            self.last_audit_prune = Instant::now();
            let retention = u64::try_from(self.audit_retention.as_millis()).unwrap_or(u64::MAX);
            let oldest = toolserver::clock::now_ms().saturating_sub(retention);
            match super::ledger::prune_audit(&self.conn, oldest) {
                Ok(0) => {}
                Ok(pruned) => debug!(path = %self.path, pruned, "pruned old audit rows"),
                Err(err) => warn!(path = %self.path, %err, "could not prune the audit log"),
            }
        }
        let due = self.batches_since_prune >= PRUNE_EVERY_BATCHES
            || self.last_prune.elapsed() >= PRUNE_INTERVAL;
        if due && !self.touched.is_empty() {
            self.prune();
        }
    }

    fn prune(&mut self) {
        self.batches_since_prune = 0;
        self.last_prune = Instant::now();
        let channels: Vec<Snowflake> = self.touched.drain().collect();
        if let Err(err) = self.conn.execute_batch("BEGIN") {
            warn!(path = %self.path, %err, "could not prune the store; will retry");
            self.touched.extend(channels);
            return;
        }
        let mut pruned = 0;
        for channel in &channels {
            match sqlite::prune_channel(&self.conn, *channel, self.keep) {
                Ok(n) => pruned += n,
                Err(err) => warn!(path = %self.path, %channel, %err, "could not prune a channel"),
            }
        }
        if let Err(err) = self.conn.execute_batch("COMMIT") {
            warn!(path = %self.path, %err, "could not commit pruning; will retry");
            let _ = self.conn.execute_batch("ROLLBACK");
            self.touched.extend(channels);
            return;
        }
        debug!(path = %self.path, channels = channels.len(), pruned, "pruned old messages");
    }

    /// Prunes and checkpoints before the connection closes.
    fn finish(&mut self) {
        if !self.touched.is_empty() {
            self.prune();
        }
        if let Err(err) = sqlite::checkpoint(&self.conn) {
            warn!(path = %self.path, %err, "could not checkpoint the store's WAL");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::model::{SessionKind, StoredMessage, StoredSession};

    fn message(id: u64) -> StoredMessage {
        StoredMessage {
            id: Snowflake(id),
            channel_id: Snowflake(1),
            author_id: Snowflake(2),
            author_is_bot: false,
            content: "hi".into(),
            text: "hi".into(),
            timestamp: "2026-11-22T12:00:00.000000+00:00".into(),
            edited_timestamp: None,
            reply_to: None,
            attachments: Vec::new(),
            reactions: Vec::new(),
        }
    }

    fn save(hot: &Hot, id: u64) -> Change {
        hot.insert_message(message(id), || {});
        Change::SaveMessage {
            channel_id: Snowflake(1),
            id: Snowflake(id),
        }
    }

    #[test]
    fn a_failed_write_reaches_flush_and_the_writer_keeps_going() {
        let conn = sqlite::open(":memory:").unwrap();
        conn.execute_batch("DROP TABLE messages").unwrap();
        let hot = Arc::new(Hot::new(10));
        let writer =
            Writer::spawn(conn, ":memory:".into(), 10, Duration::MAX, Arc::clone(&hot)).unwrap();
        assert!(writer.send(save(&hot, 5)).is_ok());
        let err = writer.flush().unwrap_err().unwrap();
        assert!(err.contains("store message 5 in channel 1"), "{err}");
        // The failure was reported once; later writes that work flush cleanly.
        let session = StoredSession {
            id: Snowflake(1),
            guild_id: None,
            parent_id: None,
            kind: SessionKind::Dm,
            name: "dm".into(),
        };
        assert!(writer
            .send(Change::UpsertSession(Box::new(session)))
            .is_ok());
        assert_eq!(writer.flush(), Ok(()));
        assert_eq!(writer.close(), Ok(()));
        assert_eq!(writer.flush(), Err(None));
        assert!(writer.send(save(&hot, 6)).is_err());
    }

    #[test]
    fn batches_are_capped() {
        let conn = sqlite::open(":memory:").unwrap();
        let hot = Arc::new(Hot::new(100_000));
        let writer = Writer::spawn(
            conn,
            ":memory:".into(),
            100_000,
            Duration::MAX,
            Arc::clone(&hot),
        )
        .unwrap();
        for id in 1..=(MAX_BATCH as u64 * 3 + 7) {
            assert!(writer.send(save(&hot, id)).is_ok());
        }
        assert_eq!(writer.flush(), Ok(()));
        assert_eq!(writer.close(), Ok(()));
    }

    #[test]
    fn change_is_small() {
        // Queued changes are what a burst of ingest costs beyond the hot maps.
        assert!(
            std::mem::size_of::<Change>() <= 32,
            "{}",
            std::mem::size_of::<Change>()
        );
    }
}
