//! The writer thread: the one owner of the SQLite connection. It takes whatever is queued (up to
//! [`MAX_BATCH`] writes) into one transaction, so ingest never waits for an fsync per message;
//! answers flushes once the writes queued before them are committed; runs reads and atomic
//! decisions between batches (so they see every write queued before them); publishes each
//! committed change to the feed; and prunes old rows now and then.
//!
//! The queue is bounded ([`switchboard_store::queue`]): when the disk falls behind, writers wait
//! for room (one WARN per burst) instead of the queue growing without end.

use std::sync::mpsc::RecvTimeoutError;
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use entity::Snowflake;
use rusqlite::Connection;
use switchboard_records::Message;
use switchboard_store::feed::FeedSender;
use switchboard_store::queue::{bounded, BoundedReceiver, BoundedSender, QueueStats};
use switchboard_store::write::{FlushReply, WriterBook};
use switchboard_store::StoreError;
use tokio::sync::oneshot;
use tracing::{debug, error, warn};

use crate::rows::{self, IndexBatch};

/// Most writes committed in one transaction.
pub(crate) const MAX_BATCH: usize = 1_000;
/// How often audit rows past the retention are pruned while running.
const AUDIT_PRUNE_INTERVAL: Duration = Duration::from_secs(3600);
/// A batch that starts within this long of the previous commit's end starts a busy spell:
/// writes are arriving back to back, so the writer lets more of them gather before it commits.
const BUSY_GAP: Duration = Duration::from_millis(1);
/// While busy, the writer sleeps this long at a time for more writes to arrive...
const GATHER_SLICE: Duration = Duration::from_micros(250);
/// ...and at most this long in all, after which it commits what it has.
const GATHER_MAX: Duration = Duration::from_millis(2);

/// A message as it waits in the queue: its strings in one allocation, its lists already JSON.
/// The writer frees what the ingesting thread allocated, and a free from another thread is the
/// costly kind (it takes the allocating arena's lock): one such free per message instead of
/// three, and half the queue slot.
#[derive(Debug)]
pub(crate) struct QueuedMessage {
    pub(crate) id: Snowflake,
    pub(crate) channel_id: Snowflake,
    pub(crate) author_id: Snowflake,
    pub(crate) reply_to: Option<Snowflake>,
    pub(crate) author_is_bot: bool,
    has_edited: bool,
    /// content, text, timestamp and the edited timestamp, back to back.
    body: Box<str>,
    /// Where text, timestamp and the edited timestamp start in `body`.
    cuts: [u32; 3],
    /// The attachments' and reactions' JSON; `None`: none (`[]`).
    pub(crate) attachments: Option<Box<str>>,
    pub(crate) reactions: Option<Box<str>>,
}

impl QueuedMessage {
    pub(crate) fn new(m: Message) -> rusqlite::Result<QueuedMessage> {
        let edited = m.edited_timestamp.as_deref().unwrap_or("");
        let mut body = String::with_capacity(
            m.content.len() + m.text.len() + m.timestamp.len() + edited.len(),
        );
        let cut = |body: &mut String, part: &str| {
            body.push_str(part);
            u32::try_from(body.len())
                .map_err(|err| rusqlite::Error::ToSqlConversionFailure(Box::new(err)))
        };
        let text_at = cut(&mut body, &m.content)?;
        let timestamp_at = cut(&mut body, &m.text)?;
        let edited_at = cut(&mut body, &m.timestamp)?;
        body.push_str(edited);
        let attachments = if m.attachments.is_empty() {
            None
        } else {
            Some(crate::rows::attachments_json(&m.attachments)?.into_boxed_str())
        };
        let reactions = if m.reactions.is_empty() {
            None
        } else {
            Some(crate::rows::reactions_json(&m.reactions)?.into_boxed_str())
        };
        Ok(QueuedMessage {
            id: m.id,
            channel_id: m.channel_id,
            author_id: m.author_id,
            reply_to: m.reply_to,
            author_is_bot: m.author_is_bot,
            has_edited: m.edited_timestamp.is_some(),
            attachments,
            reactions,
            body: body.into_boxed_str(),
            cuts: [text_at, timestamp_at, edited_at],
        })
    }

    fn part(&self, from: usize, to: Option<usize>) -> &str {
        let from = self
            .cuts
            .get(from.wrapping_sub(1))
            .map_or(0, |c| *c as usize);
        let to = to
            .and_then(|t| self.cuts.get(t - 1))
            .map_or(self.body.len(), |c| *c as usize);
        self.body.get(from..to).unwrap_or_default()
    }

    pub(crate) fn content(&self) -> &str {
        self.part(0, Some(1))
    }

    pub(crate) fn text(&self) -> &str {
        self.part(1, Some(2))
    }

    pub(crate) fn timestamp(&self) -> &str {
        self.part(2, Some(3))
    }

    pub(crate) fn edited_timestamp(&self) -> Option<&str> {
        self.has_edited.then(|| self.part(3, None))
    }
}

/// One durable write, queued by a backend method.
pub(crate) type Write =
    switchboard_store::write::Write<QueuedMessage, Box<crate::ledger::QueuedAudit>>;

impl switchboard_store::write::QueuedMessage for QueuedMessage {
    fn id(&self) -> Snowflake {
        self.id
    }

    fn channel_id(&self) -> Snowflake {
        self.channel_id
    }
}

/// A read or decision that runs on the writer's connection between batches.
pub(crate) type Query = Box<dyn FnOnce(&Connection) + Send>;

/// The answer to a close (waited for on a plain thread, not in a runtime).
type CloseReply = std::sync::mpsc::SyncSender<Result<(), String>>;

// Writes are the queue's common item and a message is most of them: boxing it would add an
// allocation per ingested message.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Command {
    Write(Write),
    Flush(FlushReply),
    Query(Query),
    Close(CloseReply),
}

/// How the writer works.
#[derive(Debug, Clone)]
pub(crate) struct WriterOptions {
    pub(crate) keep: usize,
    pub(crate) audit_retention: Duration,
    pub(crate) capacity: usize,
    pub(crate) commit_delay: Option<Duration>,
}

/// The handle the backend keeps: a queue into the thread and the thread itself.
pub(crate) struct Writer {
    queue: BoundedSender<Command>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Writer {
    pub(crate) fn spawn(
        conn: Connection,
        path: String,
        options: WriterOptions,
        feed: FeedSender,
    ) -> std::io::Result<Writer> {
        let (queue, commands) = bounded("sqlite-writer", options.capacity);
        let thread = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || WriterThread::new(conn, path, options, feed).run(&commands))?;
        Ok(Writer {
            queue,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queues a write, waiting while the queue is full; gives it back when the writer stopped.
    #[allow(clippy::result_large_err)] // the write itself, given back: no copy beyond the move
    pub(crate) fn send(&self, write: Write) -> Result<(), Write> {
        match self.queue.send(Command::Write(write)) {
            Ok(()) => Ok(()),
            Err(Command::Write(write)) => Err(write),
            Err(_) => Ok(()),
        }
    }

    /// Runs `query` on the writer's connection after what is queued now is committed; false
    /// when the writer has stopped (the query is dropped unrun).
    pub(crate) fn query(&self, query: Query) -> bool {
        self.queue.send(Command::Query(query)).is_ok()
    }

    /// Resolves once everything queued before the call is committed: `Err(None)` when the
    /// writer has stopped, `Err(Some(message))` when a write failed since the last answer.
    pub(crate) fn flush(
        &self,
    ) -> impl std::future::Future<Output = Result<(), Option<String>>> + Send + 'static {
        let (reply, answer) = oneshot::channel();
        let sent = self.queue.send(Command::Flush(reply)).is_ok();
        async move {
            if !sent {
                return Err(None);
            }
            answer.await.map_err(|_| None)?.map_err(Some)
        }
    }

    /// Commits what is queued, prunes, checkpoints and stops the thread (blocking until it
    /// has).
    pub(crate) fn close(&self) -> Result<(), Option<String>> {
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        let result = if self.queue.send(Command::Close(reply)).is_ok() {
            answer
                .recv()
                .map_err(|_| None)
                .and_then(|r| r.map_err(Some))
        } else {
            Err(None)
        };
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

    pub(crate) fn stats(&self) -> QueueStats {
        self.queue.stats()
    }
}

struct WriterThread {
    conn: Connection,
    path: String,
    options: WriterOptions,
    feed: FeedSender,
    /// What the batch being committed owes the search index.
    index: IndexBatch,
    book: WriterBook,
    last_audit_prune: Instant,
    /// When the last batch was committed: a batch soon after it gathers more writes.
    last_commit: Instant,
}

/// Sleeps in [`GATHER_SLICE`]s while writes keep arriving, taking them into `batch`, until a
/// slice brings none, someone waits (a flush, a read: taken in and answered with this batch;
/// a close: returned), the batch is full, or [`GATHER_MAX`] has passed. Sleeping rather than
/// waiting on the queue means a write during the spell wakes nobody: the queue's senders do no
/// more than push.
fn gather(
    commands: &BoundedReceiver<Command>,
    batch: &mut Vec<Write>,
    replies: &mut Vec<FlushReply>,
    queries: &mut Vec<Query>,
) -> Option<CloseReply> {
    let started = Instant::now();
    while started.elapsed() < GATHER_MAX {
        std::thread::sleep(GATHER_SLICE);
        let before = batch.len();
        while batch.len() < MAX_BATCH {
            match commands.try_recv() {
                Ok(Command::Write(write)) => batch.push(write),
                Ok(Command::Flush(reply)) => replies.push(reply),
                Ok(Command::Query(query)) => queries.push(query),
                Ok(Command::Close(reply)) => return Some(reply),
                Err(_) => break,
            }
        }
        if batch.len() == before
            || batch.len() >= MAX_BATCH
            || !replies.is_empty()
            || !queries.is_empty()
        {
            break;
        }
    }
    None
}

impl WriterThread {
    fn new(
        conn: Connection,
        path: String,
        options: WriterOptions,
        feed: FeedSender,
    ) -> WriterThread {
        WriterThread {
            conn,
            path,
            options,
            feed,
            index: IndexBatch::default(),
            book: WriterBook::default(),
            last_audit_prune: Instant::now(),
            last_commit: Instant::now(),
        }
    }

    fn run(mut self, commands: &BoundedReceiver<Command>) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let mut replies = Vec::new();
        let mut queries: Vec<Query> = Vec::new();
        loop {
            let first = match commands.recv_timeout(WriterBook::PRUNE_INTERVAL) {
                Ok(command) => command,
                Err(RecvTimeoutError::Timeout) => {
                    self.prune_if_due();
                    continue;
                }
                // Every handle is gone without a close: leave the file tidy.
                Err(RecvTimeoutError::Disconnected) => {
                    self.finish();
                    return;
                }
            };
            let mut closing = None;
            commands.take_ready(first, |command| {
                match command {
                    Command::Write(write) => batch.push(write),
                    Command::Flush(reply) => replies.push(reply),
                    Command::Query(query) => queries.push(query),
                    Command::Close(reply) => {
                        closing = Some(reply);
                        return false;
                    }
                }
                batch.len() < MAX_BATCH
            });
            // Writes arriving back to back (ingest, an audit row per call): a commit per few
            // writes would keep this thread busy on a core of its own, taking it from the
            // gateway and the calls. Let the spell's writes gather first, unless someone waits
            // on this batch (a flush, a read, a close) or it is full.
            if closing.is_none()
                && replies.is_empty()
                && queries.is_empty()
                && batch.len() < MAX_BATCH
                && self.last_commit.elapsed() < BUSY_GAP
            {
                closing = gather(commands, &mut batch, &mut replies, &mut queries);
            }
            self.commit(&mut batch);
            self.last_commit = Instant::now();
            for query in queries.drain(..) {
                query(&self.conn);
            }
            self.book.answer(&mut replies);
            if let Some(reply) = closing {
                self.finish();
                let _ = reply.send(self.book.close_answer());
                return;
            }
            self.book.batch_done();
            self.prune_if_due();
        }
    }

    fn fail(&mut self, what: String) {
        error!(path = %self.path, "store write failed: {what}");
        self.book.fail(what);
    }

    /// Applies a batch in one transaction. Each failed write is logged and remembered; the rest
    /// still commit. What changed is published once committed.
    fn commit(&mut self, batch: &mut Vec<Write>) {
        if batch.is_empty() {
            return;
        }
        if let Some(delay) = self.options.commit_delay {
            std::thread::sleep(delay);
        }
        if let Err(err) = self.conn.execute_batch("BEGIN") {
            let what = format!(
                "could not begin a transaction for {} write(s): {err}",
                batch.len()
            );
            self.fail(what);
            batch.clear();
            return;
        }
        for write in batch.iter() {
            if let Some(channel) = write.channel() {
                self.book.touch(channel);
            }
            if let Err(err) = rows::apply(&self.conn, &mut self.index, write) {
                let what = format!("{}: {err}", write.describe());
                self.fail(what);
            }
        }
        // Last, so that no later statement of the batch makes FTS5 write its terms out early.
        if let Err(err) = self.index.apply(&self.conn) {
            let what = format!(
                "update the search index for {} write(s): {err}",
                batch.len()
            );
            self.fail(what);
        }
        if let Err(err) = self.conn.execute_batch("COMMIT") {
            let what = format!("could not commit {} write(s): {err}", batch.len());
            self.fail(what);
            self.index.clear();
            if !self.conn.is_autocommit() {
                if let Err(err) = self.conn.execute_batch("ROLLBACK") {
                    error!(path = %self.path, %err, "could not roll back a failed store transaction");
                }
            }
            batch.clear();
            return;
        }
        if self.feed.watched() {
            for write in batch.iter() {
                if let Some(changed) = write.changed() {
                    self.feed.publish(changed);
                }
            }
        }
        batch.clear();
    }

    fn prune_if_due(&mut self) {
        if self.last_audit_prune.elapsed() >= AUDIT_PRUNE_INTERVAL {
            self.last_audit_prune = Instant::now();
            let retention =
                u64::try_from(self.options.audit_retention.as_millis()).unwrap_or(u64::MAX);
            let oldest = crate::ledger::now_ms().saturating_sub(retention);
            match crate::ledger::prune_audit(&self.conn, oldest) {
                Ok(0) => {}
                Ok(pruned) => debug!(path = %self.path, pruned, "pruned old audit rows"),
                Err(err) => warn!(path = %self.path, %err, "could not prune the audit log"),
            }
            if let Err(err) = crate::agents::prune(&self.conn, crate::ledger::now_ms()) {
                warn!(path = %self.path, %err, "could not prune old runs, usage and keys");
            }
        }
        if self.book.prune_due() {
            self.prune();
        }
    }

    fn prune(&mut self) {
        let channels = self.book.take_touched();
        if let Err(err) = self.conn.execute_batch("BEGIN") {
            warn!(path = %self.path, %err, "could not prune the store; will retry");
            self.book.retouch(channels);
            return;
        }
        let mut pruned = 0;
        for channel in &channels {
            match rows::prune_channel(&self.conn, *channel, self.options.keep) {
                Ok(n) => pruned += n,
                Err(err) => warn!(path = %self.path, %channel, %err, "could not prune a channel"),
            }
        }
        if let Err(err) = self.conn.execute_batch("COMMIT") {
            warn!(path = %self.path, %err, "could not commit pruning; will retry");
            let _ = self.conn.execute_batch("ROLLBACK");
            self.book.retouch(channels);
            return;
        }
        debug!(path = %self.path, channels = channels.len(), pruned, "pruned old messages");
    }

    /// Prunes and checkpoints before the connection closes.
    fn finish(&mut self) {
        if self.book.touched_any() {
            self.prune();
        }
        if let Err(err) = rows::checkpoint(&self.conn) {
            warn!(path = %self.path, %err, "could not checkpoint the store's WAL");
        }
    }
}

/// A write failure or a stopped writer, as the store's error.
pub(crate) fn writer_error(path: &str, err: Option<String>) -> StoreError {
    match err {
        Some(message) => crate::error::write_failed(path, &message),
        None => StoreError::closed(path),
    }
}
