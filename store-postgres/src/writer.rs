//! The writer: a thread that drains the bounded write queue into batches of up to
//! [`MAX_BATCH`] writes and commits each batch in one round trip (its statements and the
//! batch's `changes` row pipelined between `BEGIN` and `COMMIT`), answers flushes once what
//! was queued before them is committed, publishes each committed change to the local feed, and
//! prunes now and then.
//!
//! Reads see every write queued before them through a watermark: writes are numbered in queue
//! order (an order lock around the send), the writer raises `committed` past each batch, and a
//! read waits until `committed` reaches the number of writes queued when it was made.
//!
//! When PostgreSQL cannot be reached (or restarts) the writer keeps the batch and retries it
//! with backoff (100 ms doubling to 5 s) on a new connection; writes keep queueing up to the
//! queue's bound, and past it are refused with `Unavailable` instead of blocking their caller
//! while the database is away. A batch whose `COMMIT` answer was lost is looked up by its
//! `changes` row before it is retried, so it lands once. A write PostgreSQL refuses for good
//! is logged and reported by the next flush; the batch's other writes still commit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
#[cfg(all(test, feature = "testing"))]
use switchboard_records::AuditRow;
use switchboard_records::Message;
use switchboard_store::feed::{Changed, FeedSender, Origin};
use switchboard_store::queue::{bounded, BoundedReceiver, BoundedSender, QueueStats, Refused};
use switchboard_store::write::{FlushReply, WriterBook};
use switchboard_store::StoreError;
use tokio::runtime::Handle;
use tokio::sync::{oneshot, watch};
use tracing::{debug, error, info, warn};

use crate::pipeline::{p, Stmt};
use crate::{changes, rows};

/// Most writes committed in one transaction.
pub(crate) const MAX_BATCH: usize = 1_000;
/// How often rows past their lifetimes (audit, changes, claims, keys, settled approvals,
/// finished workflows) are pruned.
const EXPIRY_INTERVAL: Duration = Duration::from_secs(3600);
/// The longest pause between two tries of a batch while PostgreSQL is away.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// One durable write, queued by a backend method. (Claims are decided in the database, so
/// `ClaimTrigger` and `PruneClaims` are never queued here.)
pub(crate) type Write = switchboard_store::write::Write<Box<Message>>;

#[allow(clippy::large_enum_variant)] // writes are the common item: no box per message
pub(crate) enum Command {
    Write(Write),
    Flush(FlushReply),
    Close(std::sync::mpsc::SyncSender<Result<(), String>>),
}

/// What the backend and its writer thread share.
pub(crate) struct Shared {
    pub(crate) pool: Pool,
    pub(crate) rt: Handle,
    pub(crate) location: String,
    pub(crate) origin: Origin,
    pub(crate) feed: FeedSender,
    /// Whether the last attempt to write reached PostgreSQL.
    pub(crate) reachable: watch::Sender<bool>,
    /// How many writes are committed (or failed for good), in queue order.
    pub(crate) committed: watch::Sender<u64>,
    /// Set when the backend closes: a writer retrying gives up after the operation timeout.
    pub(crate) closing: AtomicBool,
    /// Numbers for `changes` rows, unique to this origin.
    pub(crate) batches: AtomicU64,
    pub(crate) keep: usize,
    pub(crate) audit_retention: Duration,
    pub(crate) operation_timeout: Duration,
}

impl Shared {
    /// The next batch number for a `changes` row.
    pub(crate) fn next_batch(&self) -> i64 {
        self.batches.fetch_add(1, Ordering::Relaxed) as i64 + 1
    }

    /// The origin as stored.
    pub(crate) fn origin_sql(&self) -> i64 {
        self.origin.0 as i64
    }

    /// The statements that record `changed` alone as this node's next batch.
    pub(crate) fn record_change(&self, changed: &Changed) -> [Stmt; 2] {
        changes::recorded(
            self.origin_sql(),
            self.next_batch(),
            changes::encode([changed]),
        )
    }

    /// Records whether PostgreSQL answered, logging each change once.
    pub(crate) fn set_reachable(&self, reachable: bool) {
        let was = self.reachable.send_replace(reachable);
        if was && !reachable {
            warn!(location = %self.location, "PostgreSQL cannot be reached: writes wait in memory (up to the queue's bound) and are retried");
        } else if !was && reachable {
            info!(location = %self.location, "PostgreSQL is reachable again");
        }
    }
}

/// The handle the backend keeps.
pub(crate) struct Writer {
    queue: BoundedSender<Command>,
    /// Held around a write's send, so queue order is numbering order.
    order: Mutex<()>,
    /// How many writes were queued.
    assigned: AtomicU64,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Writer {
    pub(crate) fn spawn(shared: Arc<Shared>, capacity: usize) -> std::io::Result<Writer> {
        let (queue, commands) = bounded("postgres-writer", capacity);
        let thread = std::thread::Builder::new()
            .name("store-pg-writer".into())
            .spawn(move || WriterThread::new(shared).run(&commands))?;
        Ok(Writer {
            queue,
            order: Mutex::new(()),
            assigned: AtomicU64::new(0),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queues a write. While the queue is full it waits for room as long as PostgreSQL is
    /// reachable; when it is not, the write is refused at once (`Unavailable`).
    pub(crate) fn send(&self, shared: &Shared, write: Write) -> Result<(), StoreError> {
        let _order = self
            .order
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match self
            .queue
            .send_while(Command::Write(write), || *shared.reachable.borrow())
        {
            Ok(()) => {
                self.assigned.fetch_add(1, Ordering::Release);
                Ok(())
            }
            Err(Refused::Gone(_)) => Err(StoreError::closed(&shared.location)),
            Err(Refused::GaveUp(_)) => Err(crate::error::unreachable(
                &shared.location,
                self.queue.stats().depth,
            )),
        }
    }

    /// How many writes were queued so far.
    pub(crate) fn assigned(&self) -> u64 {
        self.assigned.load(Ordering::Acquire)
    }

    /// Queues a flush; its answer, or `None` when it could not be queued (closed, or
    /// PostgreSQL away with the queue full).
    pub(crate) fn flush(&self, shared: &Shared) -> Option<oneshot::Receiver<Result<(), String>>> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send_while(Command::Flush(reply), || *shared.reachable.borrow())
            .ok()
            .map(|()| answer)
    }

    /// Commits what is queued (giving up after the operation timeout while PostgreSQL is
    /// away) and stops the thread.
    pub(crate) fn close(&self, shared: &Shared) -> Result<(), String> {
        shared.closing.store(true, Ordering::SeqCst);
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        let deadline = Instant::now() + shared.operation_timeout;
        let sent = self
            .queue
            .send_while(Command::Close(reply), || Instant::now() < deadline)
            .is_ok();
        let result = if sent {
            answer
                .recv_timeout(shared.operation_timeout * 2)
                .map_err(|_| "the writer did not finish in time".to_owned())
                .and_then(|r| r)
        } else {
            Err("the write queue stayed full while PostgreSQL was away".to_owned())
        };
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            if (result.is_ok() || thread.is_finished()) && thread.join().is_err() {
                error!("the PostgreSQL store's writer thread panicked");
            }
            // Otherwise it is left to finish on its own: closing never waits without bound.
        }
        result
    }

    pub(crate) fn stats(&self) -> QueueStats {
        self.queue.stats()
    }
}

/// Why an attempt to commit failed.
enum Failure {
    /// Retrying may work (the server is away, restarting, the connection broke).
    Transient(String),
    /// The batch itself was refused.
    Permanent(String),
}

fn failure(err: tokio_postgres::Error) -> Failure {
    if crate::error::is_transient(&err) {
        Failure::Transient(err.to_string())
    } else {
        Failure::Permanent(err.to_string())
    }
}

struct WriterThread {
    shared: Arc<Shared>,
    committed: u64,
    book: WriterBook,
    last_expiry: Instant,
    /// When the writer saw the backend closing while it retried.
    closing_since: Option<Instant>,
}

impl WriterThread {
    fn new(shared: Arc<Shared>) -> WriterThread {
        WriterThread {
            shared,
            committed: 0,
            book: WriterBook::default(),
            last_expiry: Instant::now(),
            closing_since: None,
        }
    }

    fn run(mut self, commands: &BoundedReceiver<Command>) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let mut replies = Vec::new();
        loop {
            let first = match commands.recv_timeout(WriterBook::PRUNE_INTERVAL) {
                Ok(command) => command,
                Err(RecvTimeoutError::Timeout) => {
                    self.maintain_if_due();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let mut closing = None;
            commands.take_ready(first, |command| {
                match command {
                    Command::Write(write) => batch.push(write),
                    Command::Flush(reply) => replies.push(reply),
                    Command::Close(reply) => {
                        closing = Some(reply);
                        return false;
                    }
                }
                batch.len() < MAX_BATCH
            });
            if closing.is_some() {
                // Writes that raced the close are still committed.
                while let Ok(command) = commands.try_recv() {
                    if let Command::Write(write) = command {
                        batch.push(write);
                    }
                }
            }
            for chunk in batch.chunks(MAX_BATCH) {
                self.commit(chunk);
            }
            self.committed += batch.len() as u64;
            self.shared.committed.send_replace(self.committed);
            batch.clear();
            self.book.answer(&mut replies);
            if let Some(reply) = closing {
                if self.book.touched_any() {
                    self.prune();
                }
                let _ = reply.send(self.book.close_answer());
                return;
            }
            self.book.batch_done();
            self.maintain_if_due();
        }
    }

    fn fail(&mut self, what: String) {
        error!(location = %self.shared.location, "store write failed: {what}");
        self.book.fail(what);
    }

    /// Commits a batch; a batch PostgreSQL refuses is committed write by write, so only the
    /// refused ones are lost (and reported).
    fn commit(&mut self, batch: &[Write]) {
        if batch.is_empty() {
            return;
        }
        for write in batch {
            if let Some(channel) = write.channel() {
                self.book.touch(channel);
            }
        }
        match self.commit_retrying(batch) {
            Ok(()) => {}
            Err(err) if batch.len() > 1 => {
                debug!(location = %self.shared.location, %err, "a batch was refused; writing it one by one");
                for write in batch {
                    if let Err(err) = self.commit_retrying(std::slice::from_ref(write)) {
                        self.fail(format!("{}: {err}", write.describe()));
                    }
                }
            }
            Err(err) => self.fail(format!("{}: {err}", batch[0].describe())),
        }
    }

    /// Commits a batch, retrying while PostgreSQL is away (until the backend closes and the
    /// operation timeout passed); `Err` when PostgreSQL refused it.
    fn commit_retrying(&mut self, batch: &[Write]) -> Result<(), String> {
        let number = self.shared.next_batch();
        let changed: Vec<Changed> = batch.iter().filter_map(Write::changed).collect();
        let body = changes::encode(&changed);
        let mut backoff = Duration::from_millis(100);
        let mut uncertain = false;
        loop {
            let shared = Arc::clone(&self.shared);
            let attempt = self
                .shared
                .rt
                .block_on(attempt(&shared, batch, number, &body, uncertain));
            match attempt {
                Ok(()) => {
                    self.shared.set_reachable(true);
                    if self.shared.feed.watched() {
                        for change in changed {
                            self.shared.feed.publish(change);
                        }
                    }
                    return Ok(());
                }
                Err(Failure::Permanent(err)) => {
                    self.shared.set_reachable(true);
                    return Err(err);
                }
                Err(Failure::Transient(err)) => {
                    debug!(location = %self.shared.location, %err, "a batch could not be written; retrying");
                    self.shared.set_reachable(false);
                    uncertain = true;
                    if self.shared.closing.load(Ordering::SeqCst) {
                        let since = *self.closing_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= self.shared.operation_timeout {
                            return Err(format!(
                                "PostgreSQL stayed unreachable while the store closed ({err}); {} write(s) were not written",
                                batch.len()
                            ));
                        }
                    }
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    fn maintain_if_due(&mut self) {
        if self.last_expiry.elapsed() >= EXPIRY_INTERVAL {
            self.last_expiry = Instant::now();
            let shared = Arc::clone(&self.shared);
            let expired = self.shared.rt.block_on(async {
                // Every node's writer comes here hourly; one of them prunes.
                if claim_expiry(&shared, crate::now_ms()).await? {
                    expire(&shared).await?;
                }
                Ok::<(), String>(())
            });
            if let Err(err) = expired {
                warn!(location = %self.shared.location, %err, "could not prune expired rows; will retry");
            }
        }
        if self.book.prune_due() {
            self.prune();
        }
    }

    /// Retention: each channel written to keeps its newest live messages; deleted ones go.
    fn prune(&mut self) {
        let mut channels: Vec<i64> = self
            .book
            .take_touched()
            .into_iter()
            .map(rows::to_sql)
            .collect();
        channels.sort_unstable();
        let keep = i64::try_from(self.shared.keep).unwrap_or(i64::MAX);
        let stmt = Stmt::new(PRUNE_CHANNELS, vec![p(channels.clone()), p(keep)]);
        let shared = Arc::clone(&self.shared);
        let pruned: Result<(), String> = self.shared.rt.block_on(async move {
            let client = shared.pool.get().await.map_err(|e| e.to_string())?;
            tokio::time::timeout(
                shared.operation_timeout,
                crate::pipeline::each(&client, std::slice::from_ref(&stmt)),
            )
            .await
            .map_err(|_| "timed out".to_owned())?
            .map(drop)
            .map_err(|e| e.to_string())
        });
        if let Err(err) = pruned {
            warn!(location = %self.shared.location, %err, "could not prune old messages; will retry");
            self.book.retouch(channels.into_iter().map(rows::from_sql));
        }
    }
}

/// Forgets the workflows finished before `$1` (at open, and in the hourly expiry).
pub(crate) const FORGET_FINISHED_WORKFLOWS: &str =
    "DELETE FROM workflows WHERE finished_ms IS NOT NULL AND finished_ms < $1";

/// Deletes, for each channel of `$1`, its deleted messages and the live ones older than its
/// newest `$2`. `$2` is cast: left to inference (`$2 - 1`) it is an `integer`, which the `i64`
/// bound to it does not serialize into.
pub(crate) const PRUNE_CHANNELS: &str = "DELETE FROM messages m
    USING (SELECT c, (SELECT id FROM messages
                      WHERE channel_id = c AND NOT deleted
                      ORDER BY id DESC OFFSET greatest($2::bigint - 1, 0) LIMIT 1) AS oldest
           FROM unnest($1::bigint[]) AS c) k
    WHERE m.channel_id = k.c
      AND (m.deleted OR $2::bigint = 0 OR m.id < coalesce(k.oldest, -9223372036854775808))";

/// One try at committing a batch (after checking, if an earlier try's answer was lost, whether
/// it committed).
async fn attempt(
    shared: &Shared,
    batch: &[Write],
    number: i64,
    body: &str,
    uncertain: bool,
) -> Result<(), Failure> {
    let client = shared
        .pool
        .get()
        .await
        .map_err(|err| Failure::Transient(err.to_string()))?;
    let origin = shared.origin_sql();
    if uncertain {
        let found = client
            .query_opt(
                "SELECT 1 FROM changes WHERE origin = $1 AND batch = $2",
                &[&origin, &number],
            )
            .await
            .map_err(failure)?;
        if found.is_some() {
            return Ok(());
        }
    }
    let mut stmts = rows::statements(batch);
    stmts.extend(changes::recorded(origin, number, body.to_owned()));
    match tokio::time::timeout(
        shared.operation_timeout,
        crate::pipeline::transaction(&client, &stmts),
    )
    .await
    {
        Ok(result) => result.map(drop).map_err(failure),
        Err(_) => {
            // Not back to the pool: it may still be inside this transaction.
            drop(deadpool_postgres::Object::take(client));
            Err(Failure::Transient("the batch timed out".to_owned()))
        }
    }
}

/// The once key of the hourly expiry: taken by one node's writer per period.
const EXPIRY_KEY: &str = "store.expire";

/// Whether this node prunes now: of the nodes whose writers ask within one expiry period
/// (less a minute, so clocks a little apart still alternate), exactly one is told yes. One
/// statement, atomic: a free key is taken, an expired one renewed.
pub(crate) async fn claim_expiry(shared: &Shared, now_ms: u64) -> Result<bool, String> {
    let period = u64::try_from(EXPIRY_INTERVAL.as_millis()).unwrap_or(u64::MAX);
    let until = now_ms.saturating_add(period.saturating_sub(60_000));
    let client = shared.pool.get().await.map_err(|e| e.to_string())?;
    let taken = tokio::time::timeout(
        shared.operation_timeout,
        client.execute(
            "INSERT INTO once_keys (key, until_ms) VALUES ($1, $2)
             ON CONFLICT (key) DO UPDATE SET until_ms = EXCLUDED.until_ms
             WHERE once_keys.until_ms <= $3",
            &[&EXPIRY_KEY, &rows::ms(until), &rows::ms(now_ms)],
        ),
    )
    .await
    .map_err(|_| "timed out".to_owned())?
    .map_err(|e| e.to_string())?;
    Ok(taken > 0)
}

/// Prunes rows past their lifetimes: audit rows past the retention, `changes` rows older than
/// a day, claims older than they are kept, expired idempotency keys, approvals settled and
/// workflows finished longer ago than they are kept.
pub(crate) async fn expire(shared: &Shared) -> Result<(), String> {
    use switchboard_records::approval::SETTLED_APPROVALS_KEPT_MS;
    use switchboard_records::trigger::{first_id_at, CLAIMS_KEPT_MS};
    use switchboard_records::workflow::FINISHED_WORKFLOWS_KEPT_MS;
    let now = crate::now_ms();
    let retention = u64::try_from(shared.audit_retention.as_millis()).unwrap_or(u64::MAX);
    let client = shared.pool.get().await.map_err(|e| e.to_string())?;
    let mut stmts = vec![
        Stmt::new(
            "DELETE FROM audit WHERE time_ms < $1",
            vec![p(rows::ms(now.saturating_sub(retention)))],
        ),
        Stmt::new(
            "DELETE FROM changes WHERE at < now() - interval '1 day'",
            vec![],
        ),
        Stmt::new(
            "DELETE FROM answered_triggers WHERE message_id < $1",
            vec![p(rows::to_sql(first_id_at(
                now.saturating_sub(CLAIMS_KEPT_MS),
            )))],
        ),
        Stmt::new(
            "DELETE FROM idempotency WHERE expires_ms <= $1",
            vec![p(rows::ms(now))],
        ),
        Stmt::new(
            "DELETE FROM approvals WHERE NOT pending AND updated_ms < $1",
            vec![p(rows::ms(now.saturating_sub(SETTLED_APPROVALS_KEPT_MS)))],
        ),
        Stmt::new(
            FORGET_FINISHED_WORKFLOWS,
            vec![p(rows::ms(now.saturating_sub(FINISHED_WORKFLOWS_KEPT_MS)))],
        ),
    ];
    stmts.extend(crate::agents::expiry(now));
    tokio::time::timeout(
        shared.operation_timeout,
        crate::pipeline::each(&client, &stmts),
    )
    .await
    .map_err(|_| "timed out".to_owned())?
    .map(drop)
    .map_err(|e| e.to_string())
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
    use crate::testing::PgCluster;

    fn audit_row() -> AuditRow {
        AuditRow {
            time_ms: crate::now_ms(),
            caller: "operator".into(),
            run: None,
            requested_by: None,
            tool: "surface.messages.send".into(),
            sessions: Vec::new(),
            input: serde_json::json!({}),
            decision: "allow".into(),
            decided_by: None,
            outcome: "ok".into(),
            code: None,
            duration_ms: 1,
            count: 1,
            events: Vec::new(),
        }
    }

    /// Two nodes' writers reach their hourly expiry together: one prunes; the key frees
    /// itself after the period.
    #[test]
    fn the_hourly_expiry_is_claimed_by_one_node() {
        let cluster = PgCluster::shared();
        let name = cluster.database().unwrap();
        let open =
            || crate::PgBackend::open(&cluster.url(&name), crate::PgOptions::default()).unwrap();
        let (a, b) = (open(), open());
        let now = crate::now_ms();
        let claim = |backend: &crate::PgBackend, at: u64| {
            let shared = Arc::clone(&backend.shared);
            backend
                .shared
                .rt
                .block_on(claim_expiry(&shared, at))
                .unwrap()
        };
        assert!(claim(&a, now), "the first node prunes");
        assert!(!claim(&b, now + 1), "the other does not");
        assert!(!claim(&a, now + 2), "nor the first again within the period");
        let later = now + u64::try_from(EXPIRY_INTERVAL.as_millis()).unwrap();
        assert!(claim(&b, later), "a period later, one node prunes again");
        assert!(!claim(&a, later + 1));
        for backend in [a, b] {
            futures_executor::block_on(switchboard_store::Backend::close(&backend)).unwrap();
        }
    }

    /// Retention's statement runs as the writer binds it (`keep` an `i64`) and leaves each
    /// channel its newest `keep` live messages, deleted ones gone.
    #[test]
    fn pruning_keeps_each_channels_newest_messages() {
        let cluster = PgCluster::shared();
        let name = cluster.database().unwrap();
        let backend =
            crate::PgBackend::open(&cluster.url(&name), crate::PgOptions::default()).unwrap();
        cluster
            .psql(
                &name,
                "INSERT INTO messages (id, channel_id, author_id, author_is_bot, content, text, timestamp, deleted, search) \
                 SELECT n, 10 + n % 2, 1, false, 'x', 'x', '', n = 9, ''::tsvector FROM generate_series(1, 10) n",
            )
            .unwrap();
        let shared = Arc::clone(&backend.shared);
        let stmt = Stmt::new(PRUNE_CHANNELS, vec![p(vec![10i64, 11]), p(2i64)]);
        shared
            .rt
            .block_on(async {
                let client = shared.pool.get().await.unwrap();
                crate::pipeline::each(&client, std::slice::from_ref(&stmt)).await
            })
            .unwrap();
        let kept = cluster
            .psql(
                &name,
                "SELECT string_agg(id::text, ',' ORDER BY id) FROM messages",
            )
            .unwrap();
        assert_eq!(kept, "5,7,8,10");
        futures_executor::block_on(switchboard_store::Backend::close(&backend)).unwrap();
    }

    /// The case a crash test cannot aim at: the connection broke after `COMMIT` was sent but
    /// before its answer came. The retry finds the batch's `changes` row and does not apply it
    /// again; a batch that did not commit is applied.
    #[test]
    fn a_batch_whose_commit_answer_was_lost_is_not_applied_twice() {
        let cluster = PgCluster::shared();
        let name = cluster.database().unwrap();
        let backend =
            crate::PgBackend::open(&cluster.url(&name), crate::PgOptions::default()).unwrap();
        let shared = Arc::clone(&backend.shared);
        let batch = vec![Write::Audit(Box::new(audit_row()))];
        let number = shared.next_batch();
        let run = |number: i64, uncertain: bool| {
            shared
                .rt
                .block_on(attempt(&shared, &batch, number, "[]", uncertain))
                .map_err(|err| match err {
                    Failure::Transient(e) | Failure::Permanent(e) => e,
                })
        };
        run(number, false).unwrap();
        run(number, true).unwrap();
        let count = || cluster.psql(&name, "SELECT count(*) FROM audit").unwrap();
        assert_eq!(count(), "1", "a batch found committed is not applied again");
        run(shared.next_batch(), true).unwrap();
        assert_eq!(count(), "2", "a batch not found is applied");
        futures_executor::block_on(switchboard_store::Backend::close(&backend)).unwrap();
    }
}
