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
use super::search::{self, SearchError, StoreHit, StoreSearch};
use super::sqlite::{self, Change};

/// Most changes committed in one transaction.
pub(crate) const MAX_BATCH: usize = 1_000;
/// Prune the channels written to after this many batches...
const PRUNE_EVERY_BATCHES: u32 = 64;
/// ...or this long after the last prune, whichever comes first.
const PRUNE_INTERVAL: Duration = Duration::from_secs(30);

/// The answer to a flush or close: the first write failure since the previous answer.
type Reply = SyncSender<Result<(), String>>;

pub(crate) enum Command {
    Change(Change),
    Flush(Reply),
    Close(Reply),
    /// A search, run once everything queued before it is committed (so it sees those writes).
    Search(Box<SearchJob>),
}

/// A search for the writer thread, which owns the only connection to the file.
pub(crate) struct SearchJob {
    pub(crate) search: StoreSearch,
    /// When the search is stopped if it is still running.
    pub(crate) deadline: Instant,
    pub(crate) reply: SyncSender<Result<Vec<StoreHit>, SearchError>>,
}

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
        hot: Arc<Hot>,
    ) -> Result<Writer, StoreError> {
        let (queue, commands) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || WriterThread::new(conn, path, keep, hot).run(commands))
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

    /// Waits until everything queued before the call is committed.
    /// `Err(None)`: the writer has stopped; `Err(Some(message))`: a write failed.
    pub(crate) fn flush(&self) -> Result<(), Option<String>> {
        self.round_trip(Command::Flush)
    }

    /// Runs a search after everything queued before it is committed; blocks until it answers.
    pub(crate) fn search(
        &self,
        search: StoreSearch,
        deadline: Instant,
    ) -> Result<Vec<StoreHit>, SearchError> {
        let (reply, answer) = mpsc::sync_channel(1);
        let job = SearchJob {
            search,
            deadline,
            reply,
        };
        self.queue
            .send(Command::Search(Box::new(job)))
            .map_err(|_| SearchError::Closed)?;
        answer.recv().map_err(|_| SearchError::Closed)?
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
    /// The first failure since the last flush answer.
    failure: Option<String>,
    /// Channels with inserts or deletes since the last prune.
    touched: HashSet<Snowflake>,
    batches_since_prune: u32,
    last_prune: Instant,
}

impl WriterThread {
    fn new(conn: Connection, path: String, keep: usize, hot: Arc<Hot>) -> WriterThread {
        WriterThread {
            conn,
            path,
            keep,
            hot,
            failure: None,
            touched: HashSet::new(),
            batches_since_prune: 0,
            last_prune: Instant::now(),
        }
    }

    fn run(mut self, commands: Receiver<Command>) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let mut replies = Vec::new();
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
            let mut searching = None;
            let mut next = Some(first);
            while let Some(command) = next.take() {
                match command {
                    Command::Change(change) => batch.push(change),
                    Command::Flush(reply) => replies.push(reply),
                    Command::Close(reply) => {
                        closing = Some(reply);
                        break;
                    }
                    Command::Search(job) => {
                        searching = Some(job);
                        break;
                    }
                }
                if batch.len() >= MAX_BATCH {
                    break;
                }
                next = commands.try_recv().ok();
            }
            self.commit(&mut batch);
            let answer = match self.failure.take() {
                Some(failure) => Err(failure),
                None => Ok(()),
            };
            let reported = !replies.is_empty();
            for reply in replies.drain(..) {
                let _ = reply.send(answer.clone());
            }
            if let Some(job) = searching {
                // A write failure no flush has heard of waits for the next one.
                if let (Err(failure), false) = (&answer, reported) {
                    self.failure.get_or_insert(failure.clone());
                }
                let _ = job
                    .reply
                    .send(search::run(&self.conn, &job.search, job.deadline));
            }
            if let Some(reply) = closing {
                self.failure = answer.err();
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
            if let Err(err) = sqlite::apply(&self.conn, &self.hot, change) {
                let what = format!("{}: {err}", change.describe());
                self.fail(what);
            }
        }
        if let Err(err) = self.conn.execute_batch("COMMIT") {
            let what = format!("could not commit {} change(s): {err}", batch.len());
            self.fail(what);
            if !self.conn.is_autocommit() {
                if let Err(err) = self.conn.execute_batch("ROLLBACK") {
                    error!(path = %self.path, %err, "could not roll back a failed store transaction");
                }
            }
        }
        batch.clear();
    }

    fn prune_if_due(&mut self) {
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
        let writer = Writer::spawn(conn, ":memory:".into(), 10, Arc::clone(&hot)).unwrap();
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
        let writer = Writer::spawn(conn, ":memory:".into(), 100_000, Arc::clone(&hot)).unwrap();
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
