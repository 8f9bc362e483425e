//! The SQLite backend of the switchboard store: one node, one file.
//!
//! The file is in WAL mode and locked while open (`locking_mode=EXCLUSIVE`), so a second
//! switchboard on it fails at once with [`StoreErrorKind::Locked`](switchboard_store::StoreErrorKind::Locked).
//! One writer thread owns the connection: writes are queued (a bounded queue: writers wait
//! when the disk falls behind, nothing is dropped) and committed in batches; reads, searches
//! and the atomic decisions run on the same thread between batches, so each sees every write
//! queued before it and each decision is atomic. Trigger claims are decided at once in memory
//! (this process is the only one on the file) and made durable by the next batch; the claim's
//! [`Durable`] resolves once the writer committed the row and read it back.
//!
//! At open the schema is created or upgraded (`schema`: the `PRAGMA user_version` ladder, every
//! file from version 1 on), and old rows are pruned (messages past retention, deleted ones,
//! audit rows past retention, settled approvals and finished workflows past their week, claims
//! past theirs, expired idempotency keys).

mod agents;
mod bot_turns;
mod capabilities;
mod error;
mod event_import;
mod events;
mod ledger;
mod rows;
mod schema;
mod search;
mod writer;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use entity::Snowflake;
use rusqlite::Connection;
use switchboard_records::trigger::{first_id_at, CLAIMS_KEPT_MS};
use switchboard_records::{
    Approval, AuditEntry, AuditFilter, AuditPage, AuditRow, Gap, IdempotencyKey,
    IdempotencyRequest, KeptKey, Message, MessageQuery, Role, SearchHit, SearchQuery, Session,
    SessionScope, Settlement, StoredAnswer, ThreadState, TriggerClaim, User, Workflow,
};
use switchboard_store::aggregates::ready;
use switchboard_store::feed::{Changed, FeedSender, Origin};
use switchboard_store::queue::QueueStats;
use switchboard_store::{
    ApprovalStore, AuditStore, Backend, Census, ChangeFeed, Claim, Decided, Durable,
    IdempotencyStore, MessageStore, Reserved, Retention, ScopeStore, SearchStore, Snapshot,
    StoreError, StoreErrorKind, StoreFuture, TriggerStore, WorkflowStore,
};
use tracing::{error, info};

pub use schema::SCHEMA_VERSION;
use writer::{writer_error, Query, Write, Writer, WriterOptions};

/// How the SQLite backend keeps data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteOptions {
    /// What it keeps.
    pub retention: Retention,
    /// Most writes queued for the writer; past it, writers wait for the disk.
    pub queue_capacity: usize,
    /// Sleep this long before each commit: a slow disk, for tests and benchmarks.
    pub commit_delay: Option<Duration>,
}

impl SqliteOptions {
    /// The default queue capacity: eight full batches (its slots are allocated up front, about
    /// 2 MB).
    pub const DEFAULT_QUEUE_CAPACITY: usize = 8 * writer::MAX_BATCH;
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            retention: Retention::default(),
            queue_capacity: Self::DEFAULT_QUEUE_CAPACITY,
            commit_delay: None,
        }
    }
}

/// Records taken between two prunes of the in-memory set of claimed triggers.
const CLAIMS_PRUNE_EVERY: u32 = 1024;

#[derive(Debug, Default)]
struct Claims {
    ids: HashSet<u64>,
    since_prune: u32,
}

/// The SQLite backend; see the crate doc.
pub struct SqliteBackend {
    path: String,
    writer: Writer,
    claims: Mutex<Claims>,
    feed: FeedSender,
    /// Deleted messages the prune at open removed: a snapshot still reports them, so a late
    /// copy of one is not stored again.
    tombstones_at_open: Vec<(Snowflake, Snowflake)>,
    closed: AtomicBool,
}

impl std::fmt::Debug for SqliteBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteBackend")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The sessions a store file holds, read without locking or changing it (for `check-config`);
/// fails while a running switchboard holds the file.
pub fn peek_sessions(path: &str) -> Result<Vec<Session>, StoreError> {
    use rusqlite::OpenFlags;
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|source| error::cannot_open(path, source))?;
    rows::read_sessions(&conn, path)
        .map_err(|source| error::from_open(path, "read the sessions", source))
}

impl SqliteBackend {
    /// Opens the store at `path` (`:memory:` for SQLite's private in-memory database), creating
    /// or upgrading its schema, pruning, and starting the writer. Blocks on the disk.
    pub fn open(path: &str, options: SqliteOptions) -> Result<SqliteBackend, StoreError> {
        let conn = schema::open(path)?;
        let keep = options.retention.messages_per_channel;
        let tombstones_at_open =
            rows::tombstones(&conn).map_err(|source| error::cannot_load(path, source))?;
        match rows::prune_all(&conn, keep) {
            Ok(0) => {}
            Ok(pruned) => info!(path, pruned, "pruned old messages from the store"),
            Err(err) => error!(path, %err, "could not prune the store at open; will retry later"),
        }
        let now = ledger::now_ms();
        let retention = options.retention.audit_retention_ms();
        ledger::prune_at_open(&conn, now, retention, path)
            .map_err(|source| error::cannot_load(path, source))?;
        let claims = load_claims(&conn, first_id_at(now.saturating_sub(CLAIMS_KEPT_MS)))
            .map_err(|source| error::cannot_load(path, source))?;
        let feed = FeedSender::new(Origin::next());
        let writer = Writer::spawn(
            conn,
            path.to_owned(),
            WriterOptions {
                keep,
                audit_retention: options.retention.audit_retention,
                capacity: options.queue_capacity,
                commit_delay: options.commit_delay,
            },
            feed.clone(),
        )
        .map_err(|err| {
            StoreError::new(
                StoreErrorKind::Unavailable,
                format!("cannot start the store's writer thread: {err}"),
            )
            .with_source(err)
        })?;
        Ok(SqliteBackend {
            path: path.to_owned(),
            writer,
            claims: Mutex::new(Claims {
                ids: claims,
                since_prune: 0,
            }),
            feed,
            tombstones_at_open,
            closed: AtomicBool::new(false),
        })
    }

    /// The path it was opened with.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn write(&self, write: Write) -> Result<(), StoreError> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(StoreError::closed(&self.path));
        }
        self.writer
            .send(write)
            .map_err(|_| StoreError::closed(&self.path))
    }

    /// Runs `read` on the writer's connection after everything queued before it is committed.
    fn read<T: Send + 'static>(
        &self,
        what: &'static str,
        read: impl FnOnce(&Connection, &str) -> rusqlite::Result<T> + Send + 'static,
    ) -> StoreFuture<'static, T> {
        self.ask(move |conn, path| {
            read(conn, path).map_err(|err| error::cannot_read(path, what, err))
        })
    }

    /// Runs `ask` on the writer's connection after everything queued before it is committed.
    fn ask<T: Send + 'static>(
        &self,
        ask: impl FnOnce(&Connection, &str) -> Result<T, StoreError> + Send + 'static,
    ) -> StoreFuture<'static, T> {
        if self.closed.load(Ordering::Relaxed) {
            return ready(Err(StoreError::closed(&self.path)));
        }
        let (answer, answered) = tokio::sync::oneshot::channel();
        let path = self.path.clone();
        let query: Query = Box::new(move |conn| {
            let _ = answer.send(ask(conn, &path));
        });
        let queued = self.writer.query(query);
        let path = self.path.clone();
        Box::pin(async move {
            if !queued {
                return Err(StoreError::closed(&path));
            }
            answered.await.map_err(|_| StoreError::closed(&path))?
        })
    }
}

fn load_claims(conn: &Connection, below: Snowflake) -> rusqlite::Result<HashSet<u64>> {
    conn.execute(
        "DELETE FROM answered_triggers WHERE message_id < ?1",
        [rows::to_sql(below)],
    )?;
    let mut stmt = conn.prepare("SELECT message_id FROM answered_triggers")?;
    let rows = stmt.query_map([], |row| row.get::<_, i64>(0))?;
    rows.map(|row| row.map(|id| rows::from_sql(id).0)).collect()
}

impl MessageStore for SqliteBackend {
    fn snapshot(&self, messages_per_channel: usize) -> StoreFuture<'_, Snapshot> {
        let pruned = self.tombstones_at_open.clone();
        self.ask(move |conn, path| {
            let mut snapshot = rows::snapshot(conn, messages_per_channel, path)
                .map_err(|err| error::cannot_load(path, err))?;
            snapshot.deleted.extend(pruned);
            Ok(snapshot)
        })
    }

    fn upsert_session(&self, session: Session) -> Result<(), StoreError> {
        self.write(Write::UpsertSession(session))
    }

    fn remove_session(&self, id: Snowflake) -> Result<(), StoreError> {
        self.write(Write::RemoveSession(id))
    }

    fn save_thread_state(&self, id: Snowflake, state: ThreadState) -> Result<(), StoreError> {
        self.write(Write::SaveThread(id, state))
    }

    fn upsert_user(&self, user: User) -> Result<(), StoreError> {
        self.write(Write::UpsertUser(user))
    }

    fn upsert_role(&self, role: Role) -> Result<(), StoreError> {
        self.write(Write::UpsertRole(role))
    }

    fn remove_role(&self, id: Snowflake) -> Result<(), StoreError> {
        self.write(Write::RemoveRole(id))
    }

    fn save_message(&self, message: Message) -> Result<(), StoreError> {
        let queued = writer::QueuedMessage::new(message).map_err(|err| {
            StoreError::new(
                StoreErrorKind::Unavailable,
                format!("cannot store a message that large: {err}"),
            )
            .with_source(err)
        })?;
        self.write(Write::SaveMessage(queued))
    }

    fn delete_messages(
        &self,
        channel_id: Snowflake,
        ids: Vec<Snowflake>,
    ) -> Result<(), StoreError> {
        self.write(Write::DeleteMessages { channel_id, ids })
    }

    fn forget_channel(&self, channel_id: Snowflake) -> Result<(), StoreError> {
        self.write(Write::ForgetChannel(channel_id))
    }

    fn open_gap(&self, gap: Gap) -> Result<(), StoreError> {
        self.write(Write::OpenGap(gap))
    }

    fn close_gap(&self, channel_id: Snowflake) -> Result<(), StoreError> {
        self.write(Write::CloseGap(channel_id))
    }

    fn message(&self, channel_id: Snowflake, id: Snowflake) -> StoreFuture<'_, Option<Message>> {
        self.read("a message", move |conn, _| {
            rows::message(conn, channel_id, id)
        })
    }

    fn messages(
        &self,
        channel_id: Snowflake,
        query: MessageQuery,
    ) -> StoreFuture<'_, Vec<Message>> {
        self.read("messages", move |conn, _| {
            rows::messages(conn, channel_id, query)
        })
    }

    fn session(&self, id: Snowflake) -> StoreFuture<'_, Option<Session>> {
        self.read("a session", move |conn, _| rows::session(conn, id))
    }

    fn user(&self, id: Snowflake) -> StoreFuture<'_, Option<User>> {
        self.read("a user", move |conn, _| rows::user(conn, id))
    }

    fn role(&self, id: Snowflake) -> StoreFuture<'_, Option<Role>> {
        self.read("a role", move |conn, _| rows::role(conn, id))
    }

    fn thread_state(&self, id: Snowflake) -> StoreFuture<'_, Option<ThreadState>> {
        self.read("a thread's state", move |conn, _| {
            rows::thread_state(conn, id)
        })
    }

    fn gap(&self, channel_id: Snowflake) -> StoreFuture<'_, Option<Gap>> {
        self.read("a backfill gap", move |conn, _| rows::gap(conn, channel_id))
    }

    fn messages_after(
        &self,
        after: Option<Snowflake>,
        limit: usize,
    ) -> StoreFuture<'_, Vec<Message>> {
        self.read("messages", move |conn, _| {
            rows::messages_after(conn, after, limit)
        })
    }
}

impl SearchStore for SqliteBackend {
    fn search(&self, query: SearchQuery, budget: Duration) -> StoreFuture<'_, Vec<SearchHit>> {
        self.ask(move |conn, path| {
            // The budget starts when the search does, not while it waits its turn.
            let deadline = std::time::Instant::now() + budget;
            search::run(conn, &query, deadline, path)
        })
    }
}

impl TriggerStore for SqliteBackend {
    fn claim_trigger(&self, claim: TriggerClaim) -> StoreFuture<'_, Claim> {
        if self.closed.load(Ordering::Relaxed) {
            return ready(Err(StoreError::closed(&self.path)));
        }
        let message_id = claim.message_id;
        {
            let mut claims = lock(&self.claims);
            if !claims.ids.insert(message_id.0) {
                return ready(Ok(Claim::Taken));
            }
            claims.since_prune += 1;
            if claims.since_prune >= CLAIMS_PRUNE_EVERY {
                claims.since_prune = 0;
                let below = first_id_at(claim.claimed_ms.saturating_sub(CLAIMS_KEPT_MS));
                claims.ids.retain(|id| *id >= below.0);
                let _ = self.writer.send(Write::PruneClaims(below));
            }
        }
        if let Err(err) = self.write(Write::ClaimTrigger(claim)) {
            return ready(Err(err));
        }
        // Durable once the writer committed the row and reads it back on its own connection
        // (so a failed commit is never taken for a durable one).
        let durable = self.read("the answered-trigger record", move |conn, _| {
            conn.query_row(
                "SELECT 1 FROM answered_triggers WHERE message_id = ?1",
                [rows::to_sql(message_id)],
                |_| Ok(()),
            )
        });
        ready(Ok(Claim::Won(Durable::new(durable))))
    }

    fn is_claimed(&self, message_id: Snowflake) -> StoreFuture<'_, bool> {
        let claimed = lock(&self.claims).ids.contains(&message_id.0);
        if self.closed.load(Ordering::Relaxed) {
            return ready(Err(StoreError::closed(&self.path)));
        }
        ready(Ok(claimed))
    }

    fn claims_after(
        &self,
        after: Option<Snowflake>,
        limit: usize,
    ) -> StoreFuture<'_, Vec<TriggerClaim>> {
        self.read("answered triggers", move |conn, _| {
            rows::claims_after(conn, after, limit)
        })
    }
}

impl WorkflowStore for SqliteBackend {
    fn save_workflow(&self, workflow: &Workflow) -> Result<(), StoreError> {
        self.write(Write::SaveWorkflow(Box::new(workflow.clone())))
    }

    fn workflows(&self) -> StoreFuture<'_, Vec<Workflow>> {
        self.read("workflows", |conn, path| {
            ledger::workflows(conn, None, path)
        })
    }

    fn workflow(&self, id: &str) -> StoreFuture<'_, Option<Workflow>> {
        let id = id.to_owned();
        self.read("a workflow", move |conn, path| {
            Ok(ledger::workflows(conn, Some(&id), path)?.pop())
        })
    }
}

impl ApprovalStore for SqliteBackend {
    fn save_approval(&self, approval: Approval) -> Result<(), StoreError> {
        self.write(Write::SaveApproval(Box::new(approval)))
    }

    fn decide_approval(
        &self,
        id: &str,
        settlement: Settlement,
        at_ms: u64,
    ) -> StoreFuture<'_, Decided> {
        let id = id.to_owned();
        let feed = self.feed.clone();
        self.ask(
            move |conn, path| match ledger::decide(conn, &id, &settlement, at_ms, path) {
                Ok(Some((changed, decided))) => {
                    if changed {
                        feed.publish(Changed::Approval(id));
                    }
                    Ok(decided)
                }
                Ok(None) => Err(StoreError::new(
                    StoreErrorKind::NotFound,
                    format!("no approval {id} is kept (or its record does not read)"),
                )),
                Err(err) => Err(error::cannot_read(path, "an approval", err)),
            },
        )
    }

    fn approval(&self, id: &str) -> StoreFuture<'_, Option<Approval>> {
        let id = id.to_owned();
        self.read("an approval", move |conn, path| {
            ledger::approval(conn, &id, path)
        })
    }

    fn pending_approvals(&self) -> StoreFuture<'_, Vec<Approval>> {
        self.read("pending approvals", ledger::pending_approvals)
    }

    fn approvals(&self) -> StoreFuture<'_, Vec<Approval>> {
        self.read("approvals", ledger::approvals)
    }
}

impl AuditStore for SqliteBackend {
    fn record(&self, row: AuditRow) -> Result<(), StoreError> {
        self.write(Write::Audit(Box::new(ledger::QueuedAudit::new(row))))
    }

    fn audit_page(&self, filter: AuditFilter) -> StoreFuture<'_, AuditPage> {
        self.read("the audit log", move |conn, _| ledger::query(conn, &filter))
    }

    fn prune_audit(&self, before_ms: u64) -> StoreFuture<'_, usize> {
        self.read("the audit log", move |conn, _| {
            ledger::prune_audit(conn, before_ms)
        })
    }

    fn audit_after(&self, after_id: u64, limit: usize) -> StoreFuture<'_, Vec<AuditEntry>> {
        self.read("the audit log", move |conn, _| {
            ledger::audit_after(conn, after_id, limit)
        })
    }

    fn import_audit(&self, entries: Vec<AuditEntry>) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        self.write(Write::ImportAudit(entries))
    }
}

impl ScopeStore for SqliteBackend {
    fn set_session_scope(
        &self,
        session_id: Snowflake,
        scope: Option<Vec<String>>,
    ) -> Result<(), StoreError> {
        self.write(Write::SessionScope(session_id, scope))
    }

    fn session_scopes(&self) -> StoreFuture<'_, Vec<SessionScope>> {
        self.read("the /tools overrides", ledger::session_scopes)
    }
}

impl IdempotencyStore for SqliteBackend {
    fn reserve_idempotency(&self, request: IdempotencyRequest) -> StoreFuture<'_, Reserved> {
        self.read("an idempotency key", move |conn, _| {
            ledger::reserve(conn, &request)
        })
    }

    fn complete_idempotency(
        &self,
        key: &IdempotencyKey,
        answer: StoredAnswer,
    ) -> StoreFuture<'_, ()> {
        let key = key.clone();
        self.ask(
            move |conn, path| match ledger::complete(conn, &key, &answer) {
                Ok(true) => Ok(()),
                Ok(false) => Err(StoreError::new(
                    StoreErrorKind::NotFound,
                    format!(
                        "the idempotency key {} of {} is not reserved (it expired?)",
                        key.key, key.caller
                    ),
                )),
                Err(err) => Err(error::cannot_read(path, "an idempotency key", err)),
            },
        )
    }

    fn release_idempotency(&self, key: &IdempotencyKey) -> StoreFuture<'_, ()> {
        let key = key.clone();
        self.read("an idempotency key", move |conn, _| {
            ledger::release(conn, &key)
        })
    }

    fn idempotency_keys_after(
        &self,
        after: Option<IdempotencyKey>,
        limit: usize,
    ) -> StoreFuture<'_, Vec<KeptKey>> {
        self.read("idempotency keys", move |conn, _| {
            ledger::keys_after(conn, after.as_ref(), limit, ledger::now_ms())
        })
    }
}

impl ChangeFeed for SqliteBackend {
    fn feed(&self) -> &FeedSender {
        &self.feed
    }

    fn shared(&self) -> bool {
        false
    }
}

impl Backend for SqliteBackend {
    fn kind(&self) -> &'static str {
        "sqlite"
    }

    fn location(&self) -> String {
        self.path.clone()
    }

    fn flush(&self) -> StoreFuture<'_, ()> {
        if self.closed.load(Ordering::Relaxed) {
            return ready(Err(StoreError::closed(&self.path)));
        }
        let flushed = self.writer.flush();
        let path = self.path.clone();
        Box::pin(async move { flushed.await.map_err(|err| writer_error(&path, err)) })
    }

    fn close(&self) -> StoreFuture<'_, ()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return ready(Ok(()));
        }
        ready(
            self.writer
                .close()
                .map_err(|err| writer_error(&self.path, err)),
        )
    }

    fn queue_stats(&self) -> QueueStats {
        self.writer.stats()
    }

    fn census(&self) -> StoreFuture<'_, Census> {
        self.read("counts", |conn, _| {
            agents::census(conn, rows::census(conn, ledger::now_ms())?)
        })
    }
}

impl Drop for SqliteBackend {
    fn drop(&mut self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            if let Err(err) = self.writer.close() {
                error!(path = %self.path, "closing the store: {}", writer_error(&self.path, err));
            }
        }
    }
}
