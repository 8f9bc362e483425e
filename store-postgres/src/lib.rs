//! The PostgreSQL backend of the switchboard store: several switchboard nodes on one database.
//!
//! - **Connections**: any connection string tokio-postgres accepts (`postgres://…` URLs or
//!   `host=… dbname=…`, TCP or a Unix-socket directory as `host=/path`), with a connect timeout
//!   and TCP keepalives set unless the string sets them; a bounded pool
//!   (`deadpool-postgres`) for reads and decisions, and one dedicated connection that listens
//!   for other nodes' changes. No TLS is built in: use a Unix socket, a private network or a
//!   local TLS tunnel (a string that requires TLS is refused at open, saying so).
//! - **Schema**: migrated at open under an advisory lock, so nodes starting together migrate
//!   once (`schema`).
//! - **Writes** are queued (bounded) and committed by one writer thread in batches: one round
//!   trip per batch, multi-row idempotent upserts, one `changes` row and one `NOTIFY` per
//!   batch, never per message (`writer`, `rows`, `changes`). While PostgreSQL is away the
//!   writer keeps the batch and retries; what a flush acknowledged is committed.
//! - **Reads** run on the pool after every write queued before them is committed.
//! - **Decisions** are the database's: a claim is `INSERT … ON CONFLICT DO NOTHING RETURNING`
//!   (the claim future waits for it; [`Durable`] is ready at once), a decision an
//!   `UPDATE … WHERE pending RETURNING`, a reservation an upsert that only takes an expired
//!   key. Each is one round trip, atomic across nodes.
//! - **Search** on a `tsvector` column with a GIN index (`search`).
//! - A node that loses PostgreSQL answers `Unavailable` (reads, decisions, flushes, and writes
//!   once its queue is full), never hangs: every wait is bounded by
//!   [`PgOptions::operation_timeout`]; it reconnects by itself.
//!
//! Everything runs on the backend's own small tokio runtime, so its futures complete whoever
//! polls them (a plain thread with `block_on` too).

mod agents;
mod bot_turns;
mod capabilities;
mod changes;
mod error;
mod event_import;
mod events;
mod pipeline;
mod rows;
mod schema;
mod search;
#[cfg(feature = "testing")]
pub mod testing;
mod writer;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use entity::Snowflake;
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
use tokio::sync::{oneshot, watch};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::NoTls;
use tracing::info;

use crate::error::{from_pg, from_pool, too_slow, unreachable};
use crate::pipeline::{p, Stmt};
use crate::rows::{from_sql, ms, ms_from, to_sql};
pub use crate::schema::SCHEMA_VERSION;
use crate::writer::{Shared, Write, Writer};

/// How the PostgreSQL backend keeps data and talks to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOptions {
    /// What it keeps.
    pub retention: Retention,
    /// Most writes queued for the writer; past it writers wait (while PostgreSQL answers) or
    /// are refused with `Unavailable` (while it does not).
    pub queue_capacity: usize,
    /// Most connections in the pool (reads, searches, decisions, the writer's).
    pub pool_size: usize,
    /// How long connecting may take (unless the connection string sets `connect_timeout`).
    pub connect_timeout: Duration,
    /// TCP keepalive idle time (unless the connection string sets `keepalives_idle`): how soon
    /// a silent peer is probed.
    pub keepalives_idle: Duration,
    /// The longest any one operation waits (a read, a decision, a flush, getting a
    /// connection) before answering `Unavailable`.
    pub operation_timeout: Duration,
}

impl PgOptions {
    /// The default queue capacity: eight full batches.
    pub const DEFAULT_QUEUE_CAPACITY: usize = 8 * writer::MAX_BATCH;
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            retention: Retention::default(),
            queue_capacity: Self::DEFAULT_QUEUE_CAPACITY,
            pool_size: 8,
            connect_timeout: Duration::from_secs(5),
            keepalives_idle: Duration::from_secs(30),
            operation_timeout: Duration::from_secs(30),
        }
    }
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Where a connection string points, without its password: `postgres://user@host:port/db`.
fn location(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "postgres://{}@{host}:{port}/{}",
        config.get_user().unwrap_or(""),
        config.get_dbname().unwrap_or("")
    )
}

/// The connection string parsed, with switchboard's defaults where it says nothing.
fn config(url: &str, options: &PgOptions) -> Result<tokio_postgres::Config, StoreError> {
    let mut config: tokio_postgres::Config = url.parse().map_err(|err| {
        StoreError::new(
            StoreErrorKind::Unavailable,
            "store.url is not a PostgreSQL connection string switchboard can read; write postgres://USER@HOST:PORT/DATABASE, or host=/run/postgresql dbname=switchboard for a Unix socket",
        )
        .with_source(err)
    })?;
    if config.get_ssl_mode() == SslMode::Require {
        return Err(StoreError::new(
            StoreErrorKind::Unavailable,
            format!(
                "store.url asks for TLS (sslmode=require) but this switchboard has no TLS for PostgreSQL; connect over a Unix socket or a private network with sslmode=disable or prefer ({})",
                location(&config)
            ),
        ));
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(options.connect_timeout);
    }
    config.keepalives(true);
    if config.get_keepalives_idle() == Duration::from_secs(2 * 3600) {
        config.keepalives_idle(options.keepalives_idle);
    }
    if config.get_application_name().is_none() {
        config.application_name("switchboard");
    }
    Ok(config)
}

/// The PostgreSQL backend; see the crate doc.
pub struct PgBackend {
    shared: Arc<Shared>,
    writer: Writer,
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    stop_listener: watch::Sender<bool>,
    /// Deleted messages the prune at open removed: a snapshot still reports them.
    tombstones_at_open: Vec<(Snowflake, Snowflake)>,
    closed: AtomicBool,
}

impl std::fmt::Debug for PgBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgBackend")
            .field("location", &self.shared.location)
            .finish_non_exhaustive()
    }
}

/// What opening reads before the writer starts.
struct Opened {
    origin: Origin,
    last_change: i64,
    tombstones: Vec<(Snowflake, Snowflake)>,
}

async fn open_database(
    config: &tokio_postgres::Config,
    location: &str,
    options: &PgOptions,
) -> Result<Opened, StoreError> {
    let (mut client, connection) = tokio::time::timeout(
        options.connect_timeout + Duration::from_secs(1),
        config.connect(NoTls),
    )
    .await
    .map_err(|_| too_slow(location, "connect"))?
    .map_err(|err| {
        let kind = StoreErrorKind::Unavailable;
        StoreError::new(
            kind,
            format!("cannot connect to PostgreSQL at {location}: {err}; check store.url, that the server runs, and that the database and role exist"),
        )
        .with_source(err)
    })?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let who = format!("{} pid {}", hostname(), std::process::id());
    let opened = async {
        schema::migrate(&mut client, location, &who).await?;
        let fail = |what: &'static str| move |err| from_pg(location, what, err);
        let origin: i64 = client
            .query_one("SELECT nextval('switchboard_origins')", &[])
            .await
            .map_err(fail("a node id"))?
            .get(0);
        let last_change: i64 = client
            .query_one("SELECT coalesce(max(id), 0) FROM changes", &[])
            .await
            .map_err(fail("the change feed"))?
            .get(0);
        let tombstones = client
            .query("SELECT channel_id, id FROM messages WHERE deleted", &[])
            .await
            .map_err(fail("deleted messages"))?
            .iter()
            .map(|row| (from_sql(row.get(0)), from_sql(row.get(1))))
            .collect();
        // Finished workflows past their week go at open, as on SQLite (the writer's hourly
        // expiry takes them later otherwise).
        client
            .execute(
                writer::FORGET_FINISHED_WORKFLOWS,
                &[&rows::ms(crate::now_ms().saturating_sub(
                    switchboard_records::workflow::FINISHED_WORKFLOWS_KEPT_MS,
                ))],
            )
            .await
            .map_err(fail("finished workflows"))?;
        // A smaller messages_per_channel takes effect at once; deleted rows go.
        let keep = i64::try_from(options.retention.messages_per_channel).unwrap_or(i64::MAX);
        let pruned = client
            .execute(
                "DELETE FROM messages m USING (
                     SELECT id FROM (
                         SELECT id, row_number() OVER (PARTITION BY channel_id ORDER BY id DESC) AS n
                         FROM messages WHERE NOT deleted) ranked
                     WHERE n > $1) old
                 WHERE m.id = old.id",
                &[&keep],
            )
            .await
            .map_err(fail("old messages"))?
            + client
                .execute("DELETE FROM messages WHERE deleted", &[])
                .await
                .map_err(fail("deleted messages"))?;
        if pruned > 0 {
            info!(location, pruned, "pruned old messages from the store");
        }
        Ok::<_, StoreError>(Opened {
            // Apart from this process's own origins (small numbers).
            origin: Origin(origin as u64 | 1 << 62),
            last_change,
            tombstones,
        })
    }
    .await;
    drop(client);
    let _ = driver.await;
    opened
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "unknown-host".to_owned())
}

impl PgBackend {
    /// Connects, migrates the schema (under the migration lock), prunes, and starts the writer
    /// and the change listener. Blocks until done (from async code, call it through
    /// `spawn_blocking`).
    pub fn open(url: &str, options: PgOptions) -> Result<PgBackend, StoreError> {
        let config = config(url, &options)?;
        let location = location(&config);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("store-postgres")
            .enable_all()
            .build()
            .map_err(|err| {
                StoreError::new(
                    StoreErrorKind::Unavailable,
                    format!("cannot start the PostgreSQL store's threads: {err}"),
                )
                .with_source(err)
            })?;
        let opened = runtime.block_on(open_database(&config, &location, &options))?;
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(2))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.operation_timeout))
            .create_timeout(Some(options.connect_timeout + Duration::from_secs(1)))
            .recycle_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|err| {
                StoreError::new(
                    StoreErrorKind::Unavailable,
                    format!("cannot make a connection pool for {location}: {err}"),
                )
            })?;
        let feed = FeedSender::new(opened.origin);
        let shared = Arc::new(Shared {
            pool,
            rt: runtime.handle().clone(),
            location: location.clone(),
            origin: opened.origin,
            feed: feed.clone(),
            reachable: watch::channel(true).0,
            committed: watch::channel(0).0,
            closing: AtomicBool::new(false),
            batches: AtomicU64::new(0),
            keep: options.retention.messages_per_channel,
            audit_retention: options.retention.audit_retention,
            operation_timeout: options.operation_timeout,
        });
        let writer = Writer::spawn(Arc::clone(&shared), options.queue_capacity).map_err(|err| {
            StoreError::new(
                StoreErrorKind::Unavailable,
                format!("cannot start the store's writer thread: {err}"),
            )
            .with_source(err)
        })?;
        let (stop_listener, stop) = watch::channel(false);
        runtime.spawn(
            changes::Listener {
                config,
                feed,
                origin: opened.origin,
                last: opened.last_change,
                location: location.clone(),
                stop,
                connect_timeout: options.connect_timeout,
            }
            .run(),
        );
        info!(location, "the PostgreSQL store is open");
        Ok(PgBackend {
            shared,
            writer,
            runtime: Mutex::new(Some(runtime)),
            stop_listener,
            tombstones_at_open: opened.tombstones,
            closed: AtomicBool::new(false),
        })
    }

    fn closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    fn write(&self, write: Write) -> Result<(), StoreError> {
        if self.closed() {
            return Err(StoreError::closed(&self.shared.location));
        }
        self.writer.send(&self.shared, write)
    }

    /// Runs `work` on the runtime with a pooled connection, after every write queued before
    /// the call is committed when `after_writes` (reads that must see them).
    fn run<T, F, Fut>(
        &self,
        what: &'static str,
        after_writes: bool,
        work: F,
    ) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Shared>, deadpool_postgres::Object) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        if self.closed() {
            return ready(Err(StoreError::closed(&self.shared.location)));
        }
        let target = if after_writes {
            self.writer.assigned()
        } else {
            0
        };
        let shared = Arc::clone(&self.shared);
        let (answer, answered) = oneshot::channel();
        self.shared.rt.spawn(async move {
            let result = async {
                wait_for_writes(&shared, target).await?;
                let client = shared
                    .pool
                    .get()
                    .await
                    .map_err(|err| from_pool(&shared.location, what, err))?;
                let timeout = shared.operation_timeout;
                let location = shared.location.clone();
                tokio::time::timeout(timeout, work(shared, client))
                    .await
                    .map_err(|_| too_slow(&location, what))?
            }
            .await;
            let _ = answer.send(result);
        });
        let location = self.shared.location.clone();
        Box::pin(async move { answered.await.map_err(|_| StoreError::closed(&location))? })
    }

    /// A read of one statement's rows, mapped by `map`.
    fn query<T, M>(
        &self,
        what: &'static str,
        sql: &'static str,
        params: Vec<pipeline::Param>,
        map: M,
    ) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        M: FnOnce(Vec<tokio_postgres::Row>) -> T + Send + 'static,
    {
        self.run(what, true, move |shared, client| async move {
            let rows = pipeline::each(&client, &[Stmt::new(sql, params)])
                .await
                .map_err(|err| from_pg(&shared.location, what, err))?;
            Ok(map(rows.into_iter().next().unwrap_or_default()))
        })
    }
}

/// Waits until the writer committed the first `target` writes; `Unavailable` when PostgreSQL
/// stays away (a second's grace) or the operation timeout passes.
async fn wait_for_writes(shared: &Shared, target: u64) -> Result<(), StoreError> {
    let mut committed = shared.committed.subscribe();
    let mut reachable = shared.reachable.subscribe();
    let deadline = tokio::time::Instant::now() + shared.operation_timeout;
    let mut away_since: Option<tokio::time::Instant> = None;
    loop {
        let done = *committed.borrow_and_update();
        if done >= target {
            return Ok(());
        }
        let now = tokio::time::Instant::now();
        let limit = if *reachable.borrow_and_update() {
            away_since = None;
            deadline
        } else {
            let since = *away_since.get_or_insert(now);
            (since + Duration::from_secs(1)).min(deadline)
        };
        if now >= limit {
            return Err(if away_since.is_some() {
                unreachable(
                    &shared.location,
                    usize::try_from(target - done).unwrap_or(usize::MAX),
                )
            } else {
                too_slow(&shared.location, "read what was written before")
            });
        }
        tokio::select! {
            _ = committed.changed() => {}
            _ = reachable.changed() => {}
            () = tokio::time::sleep_until(limit) => {}
        }
    }
}

fn user_from_row(row: &tokio_postgres::Row) -> User {
    User {
        id: from_sql(row.get(0)),
        username: row.get(1),
        global_name: row.get(2),
        is_bot: row.get(3),
    }
}

fn thread_from_row(row: &tokio_postgres::Row) -> (Snowflake, ThreadState) {
    (
        from_sql(row.get(0)),
        ThreadState {
            archived: row.get(1),
            locked: row.get(2),
            auto_archive_minutes: u32::try_from(row.get::<_, i32>(3)).unwrap_or(0),
            owner_id: None,
        },
    )
}

fn gap_from_row(row: &tokio_postgres::Row) -> Gap {
    Gap {
        channel_id: from_sql(row.get(0)),
        after: from_sql(row.get(1)),
    }
}

impl MessageStore for PgBackend {
    fn snapshot(&self, messages_per_channel: usize) -> StoreFuture<'_, Snapshot> {
        let pruned = self.tombstones_at_open.clone();
        let keep = i64::try_from(messages_per_channel).unwrap_or(i64::MAX);
        self.run("the store's snapshot", true, move |shared, client| async move {
            let stmts = [
                Stmt::new("SELECT id, guild_id, parent_id, kind, name FROM sessions ORDER BY id", vec![]),
                Stmt::new("SELECT id, username, global_name, is_bot FROM users ORDER BY id", vec![]),
                Stmt::new("SELECT id, name FROM roles ORDER BY id", vec![]),
                Stmt::new(
                    "SELECT id, archived, locked, auto_archive_minutes FROM threads ORDER BY id",
                    vec![],
                ),
                Stmt::new(
                    concat!("SELECT m.* FROM (SELECT DISTINCT channel_id FROM messages WHERE NOT deleted) c
                     CROSS JOIN LATERAL (
                         SELECT ", rows::message_columns!(), "
                         FROM messages WHERE channel_id = c.channel_id AND NOT deleted
                         ORDER BY id DESC LIMIT $1) m"),
                    vec![p(keep)],
                ),
                Stmt::new("SELECT channel_id, id FROM messages WHERE deleted", vec![]),
                Stmt::new("SELECT channel_id, after_id FROM backfill_gaps ORDER BY channel_id", vec![]),
            ];
            let rows = pipeline::transaction_as(
                &client,
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
                &stmts,
            )
            .await
            .map_err(|err| from_pg(&shared.location, "the store's snapshot", err))?;
            let mut deleted: Vec<(Snowflake, Snowflake)> = rows[5]
                .iter()
                .map(|row| (from_sql(row.get(0)), from_sql(row.get(1))))
                .collect();
            deleted.extend(pruned);
            Ok(Snapshot {
                sessions: rows[0].iter().filter_map(rows::session_from_row).collect(),
                users: rows[1].iter().map(user_from_row).collect(),
                roles: rows[2]
                    .iter()
                    .map(|row| Role {
                        id: from_sql(row.get(0)),
                        name: row.get(1),
                    })
                    .collect(),
                threads: rows[3].iter().map(thread_from_row).collect(),
                messages: rows[4].iter().map(rows::message_from_row).collect(),
                deleted,
                gaps: rows[6].iter().map(gap_from_row).collect(),
            })
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
        self.write(Write::SaveMessage(Box::new(message)))
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
        self.query(
            "a message",
            concat!(
                "SELECT ",
                rows::message_columns!(),
                " FROM messages WHERE id = $1 AND channel_id = $2 AND NOT deleted"
            ),
            vec![p(to_sql(id)), p(to_sql(channel_id))],
            |rows| rows.first().map(rows::message_from_row),
        )
    }

    fn messages(
        &self,
        channel_id: Snowflake,
        query: MessageQuery,
    ) -> StoreFuture<'_, Vec<Message>> {
        let lower = query.after.map_or(i64::MIN, to_sql);
        let upper = query.before.map_or(i64::MAX, to_sql);
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        self.query(
            "messages",
            concat!(
                "SELECT ",
                rows::message_columns!(),
                " FROM messages WHERE channel_id = $1 AND NOT deleted AND id > $2 AND id < $3
                 ORDER BY id DESC LIMIT $4"
            ),
            vec![p(to_sql(channel_id)), p(lower), p(upper), p(limit)],
            |rows| {
                let mut out: Vec<Message> = rows.iter().map(rows::message_from_row).collect();
                out.reverse();
                out
            },
        )
    }

    fn session(&self, id: Snowflake) -> StoreFuture<'_, Option<Session>> {
        self.query(
            "a session",
            "SELECT id, guild_id, parent_id, kind, name FROM sessions WHERE id = $1",
            vec![p(to_sql(id))],
            |rows| rows.first().and_then(rows::session_from_row),
        )
    }

    fn user(&self, id: Snowflake) -> StoreFuture<'_, Option<User>> {
        self.query(
            "a user",
            "SELECT id, username, global_name, is_bot FROM users WHERE id = $1",
            vec![p(to_sql(id))],
            |rows| rows.first().map(user_from_row),
        )
    }

    fn role(&self, id: Snowflake) -> StoreFuture<'_, Option<Role>> {
        self.query(
            "a role",
            "SELECT id, name FROM roles WHERE id = $1",
            vec![p(to_sql(id))],
            |rows| {
                rows.first().map(|row| Role {
                    id: from_sql(row.get(0)),
                    name: row.get(1),
                })
            },
        )
    }

    fn thread_state(&self, id: Snowflake) -> StoreFuture<'_, Option<ThreadState>> {
        self.query(
            "a thread's state",
            "SELECT id, archived, locked, auto_archive_minutes FROM threads WHERE id = $1",
            vec![p(to_sql(id))],
            |rows| rows.first().map(|row| thread_from_row(row).1),
        )
    }

    fn gap(&self, channel_id: Snowflake) -> StoreFuture<'_, Option<Gap>> {
        self.query(
            "a backfill gap",
            "SELECT channel_id, after_id FROM backfill_gaps WHERE channel_id = $1",
            vec![p(to_sql(channel_id))],
            |rows| rows.first().map(gap_from_row),
        )
    }

    fn messages_after(
        &self,
        after: Option<Snowflake>,
        limit: usize,
    ) -> StoreFuture<'_, Vec<Message>> {
        self.query(
            "messages",
            concat!(
                "SELECT ",
                rows::message_columns!(),
                " FROM messages WHERE id > $1 AND NOT deleted ORDER BY id LIMIT $2"
            ),
            vec![
                p(after.map_or(i64::MIN, to_sql)),
                p(i64::try_from(limit).unwrap_or(i64::MAX)),
            ],
            |rows| rows.iter().map(rows::message_from_row).collect(),
        )
    }
}

impl SearchStore for PgBackend {
    fn search(&self, query: SearchQuery, budget: Duration) -> StoreFuture<'_, Vec<SearchHit>> {
        let expression = (!query.channels.is_empty() && query.limit > 0)
            .then(|| search::query(&query.terms))
            .flatten();
        let Some(expression) = expression else {
            return ready(Ok(Vec::new()));
        };
        let budget_ms = budget.as_millis().clamp(1, i32::MAX as u128) as i64;
        self.run("search results", true, move |shared, client| async move {
            let channels: Vec<i64> = query.channels.iter().map(|c| to_sql(*c)).collect();
            let stmts = [
                Stmt::new(
                    "SELECT set_config('statement_timeout', $1, true),
                            set_config('plan_cache_mode', 'force_custom_plan', true)",
                    vec![p(budget_ms.to_string())],
                ),
                Stmt::new(
                    search::SEARCH,
                    vec![
                        p(expression),
                        p(channels),
                        p(query.before.map(to_sql)),
                        p(query.after.map(to_sql)),
                        p(query.author.map(to_sql)),
                        p(search::ranked_candidates()),
                        p(i64::try_from(query.limit).unwrap_or(i64::MAX)),
                    ],
                ),
            ];
            let rows = pipeline::transaction(&client, &stmts)
                .await
                .map_err(|err| match err.code() {
                    Some(&tokio_postgres::error::SqlState::QUERY_CANCELED) => StoreError::new(
                        StoreErrorKind::TimedOut,
                        "the search took too long and was stopped; search one session, or use rarer words",
                    )
                    .with_source(err),
                    _ => from_pg(&shared.location, "search results", err),
                })?;
            Ok(rows[1]
                .iter()
                .map(|row| {
                    let message = rows::message_from_row(row);
                    SearchHit {
                        snippet: switchboard_store::scan::snippet_for(&message.text, &query.terms),
                        score: row.get::<_, f64>(11),
                        message,
                    }
                })
                .collect())
        })
    }
}

const CLAIM: &str = "INSERT INTO answered_triggers (message_id, channel_id, taken_ms)
    VALUES ($1, $2, $3) ON CONFLICT (message_id) DO NOTHING RETURNING message_id";

impl TriggerStore for PgBackend {
    fn claim_trigger(&self, claim: TriggerClaim) -> StoreFuture<'_, Claim> {
        self.run("a trigger claim", false, move |shared, client| async move {
            // One round trip: the claim, then the change row. The row is written whether or not
            // this claimer won (it must follow the claim's row lock, and which way the claim
            // went is known only after the trip); another node reading it re-reads a claim that
            // was there anyway. Only a won claim is published here.
            let changed = Changed::TriggerClaimed(claim.message_id);
            let [lock, insert] = shared.record_change(&changed);
            let stmts = [
                Stmt::new(
                    CLAIM,
                    vec![
                        p(to_sql(claim.message_id)),
                        p(to_sql(claim.channel_id)),
                        p(ms(claim.claimed_ms)),
                    ],
                ),
                lock,
                insert,
            ];
            let rows = pipeline::transaction(&client, &stmts)
                .await
                .map_err(|err| from_pg(&shared.location, "a trigger claim", err))?;
            if rows[0].is_empty() {
                return Ok(Claim::Taken);
            }
            shared.feed.publish(changed);
            Ok(Claim::Won(Durable::now()))
        })
    }

    fn is_claimed(&self, message_id: Snowflake) -> StoreFuture<'_, bool> {
        self.query(
            "a trigger claim",
            "SELECT 1 FROM answered_triggers WHERE message_id = $1",
            vec![p(to_sql(message_id))],
            |rows| !rows.is_empty(),
        )
    }

    fn claims_after(
        &self,
        after: Option<Snowflake>,
        limit: usize,
    ) -> StoreFuture<'_, Vec<TriggerClaim>> {
        self.query(
            "trigger claims",
            "SELECT message_id, channel_id, taken_ms FROM answered_triggers
             WHERE message_id > $1 ORDER BY message_id LIMIT $2",
            vec![
                p(after.map_or(i64::MIN, to_sql)),
                p(i64::try_from(limit).unwrap_or(i64::MAX)),
            ],
            |rows| {
                rows.iter()
                    .map(|row| TriggerClaim {
                        message_id: from_sql(row.get(0)),
                        channel_id: from_sql(row.get(1)),
                        claimed_ms: ms_from(row.get(2)),
                    })
                    .collect()
            },
        )
    }
}

impl WorkflowStore for PgBackend {
    fn save_workflow(&self, workflow: &Workflow) -> Result<(), StoreError> {
        self.write(Write::SaveWorkflow(Box::new(workflow.clone())))
    }

    fn workflows(&self) -> StoreFuture<'_, Vec<Workflow>> {
        self.query(
            "workflows",
            "SELECT id, body FROM workflows ORDER BY id",
            vec![],
            |rows| {
                rows.iter()
                    .filter_map(|row| rows::workflow_from_body(row.get(0), row.get(1)))
                    .collect()
            },
        )
    }

    fn workflow(&self, id: &str) -> StoreFuture<'_, Option<Workflow>> {
        self.query(
            "a workflow",
            "SELECT id, body FROM workflows WHERE id = $1",
            vec![p(rows::clean(id))],
            |rows| {
                rows.first()
                    .and_then(|row| rows::workflow_from_body(row.get(0), row.get(1)))
            },
        )
    }
}

/// Settles a pending approval: an approve or deny at or after its expiry expires it instead
/// (`took` false). The state's JSON is serde's (`$5`), or the expired state built here in
/// serde's shape (pinned by a test).
const DECIDE: &str = concat!(
    "UPDATE approvals SET pending = false, updated_ms = $4,
        card = ((card::jsonb - 'state' - 'expiresAtMs' - 'by' - 'atMs')
                || CASE WHEN $2 OR $3 < expires_ms THEN $5::text::jsonb
                        ELSE jsonb_build_object('state', 'expired', 'atMs', expires_ms) END)::text
    WHERE id = $1 AND pending
    RETURNING ",
    rows::approval_columns!(),
    ", ($2 OR $3 < expires_ms) AS took"
);

impl ApprovalStore for PgBackend {
    fn save_approval(&self, approval: Approval) -> Result<(), StoreError> {
        self.write(Write::SaveApproval(Box::new(approval)))
    }

    fn decide_approval(
        &self,
        id: &str,
        settlement: Settlement,
        at_ms: u64,
    ) -> StoreFuture<'_, Decided> {
        let id = rows::clean(id);
        self.run("an approval", true, move |shared, client| async move {
            // One round trip, as for claims: the decision, the change row (written either way;
            // a node re-reading an approval that did not change is harmless), the row as it
            // now stands.
            let state = serde_json::to_string(&settlement.state(at_ms)).unwrap_or_default();
            let changed = Changed::Approval(id.clone());
            let [lock, insert] = shared.record_change(&changed);
            let stmts = [
                Stmt::new(
                    DECIDE,
                    vec![
                        p(id.clone()),
                        p(settlement == Settlement::Expire),
                        p(ms(at_ms)),
                        p(ms(now_ms())),
                        p(state),
                    ],
                ),
                lock,
                insert,
                Stmt::new(
                    concat!(
                        "SELECT ",
                        rows::approval_columns!(),
                        " FROM approvals WHERE id = $1"
                    ),
                    vec![p(id.clone())],
                ),
            ];
            let rows = pipeline::transaction(&client, &stmts)
                .await
                .map_err(|err| from_pg(&shared.location, "an approval", err))?;
            let not_found = || {
                StoreError::new(
                    StoreErrorKind::NotFound,
                    format!("no approval {id} is kept (or its record does not read)"),
                )
            };
            if let Some(row) = rows[0].first() {
                let took: bool = row.get(5);
                let approval = rows::approval_from_row(row).ok_or_else(not_found)?;
                shared.feed.publish(changed);
                return Ok(if took {
                    Decided::Decided(approval)
                } else {
                    Decided::AlreadyDecided(approval)
                });
            }
            rows[3]
                .first()
                .and_then(rows::approval_from_row)
                .map(Decided::AlreadyDecided)
                .ok_or_else(not_found)
        })
    }

    fn approval(&self, id: &str) -> StoreFuture<'_, Option<Approval>> {
        self.query(
            "an approval",
            concat!(
                "SELECT ",
                rows::approval_columns!(),
                " FROM approvals WHERE id = $1"
            ),
            vec![p(rows::clean(id))],
            |rows| rows.first().and_then(rows::approval_from_row),
        )
    }

    fn pending_approvals(&self) -> StoreFuture<'_, Vec<Approval>> {
        self.query(
            "pending approvals",
            concat!(
                "SELECT ",
                rows::approval_columns!(),
                " FROM approvals WHERE pending ORDER BY id"
            ),
            vec![],
            |rows| rows.iter().filter_map(rows::approval_from_row).collect(),
        )
    }

    fn approvals(&self) -> StoreFuture<'_, Vec<Approval>> {
        self.query(
            "approvals",
            concat!(
                "SELECT ",
                rows::approval_columns!(),
                " FROM approvals ORDER BY id"
            ),
            vec![],
            |rows| rows.iter().filter_map(rows::approval_from_row).collect(),
        )
    }
}

/// Most rows one audit page reads before answering with a cursor to continue from.
const MAX_ROWS_SCANNED: usize = 50_000;

impl AuditStore for PgBackend {
    fn record(&self, row: AuditRow) -> Result<(), StoreError> {
        self.write(Write::Audit(Box::new(row)))
    }

    fn audit_page(&self, filter: AuditFilter) -> StoreFuture<'_, AuditPage> {
        self.run("the audit log", true, move |shared, client| async move {
            audit_page(&client, &filter)
                .await
                .map_err(|err| from_pg(&shared.location, "the audit log", err))
        })
    }

    fn prune_audit(&self, before_ms: u64) -> StoreFuture<'_, usize> {
        self.run("the audit log", true, move |shared, client| async move {
            client
                .execute("DELETE FROM audit WHERE time_ms < $1", &[&ms(before_ms)])
                .await
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
                .map_err(|err| from_pg(&shared.location, "the audit log", err))
        })
    }

    fn audit_after(&self, after_id: u64, limit: usize) -> StoreFuture<'_, Vec<AuditEntry>> {
        self.query(
            "the audit log",
            concat!(
                "SELECT ",
                rows::audit_columns!(),
                " FROM audit WHERE id > $1 ORDER BY id LIMIT $2"
            ),
            vec![p(ms(after_id)), p(i64::try_from(limit).unwrap_or(i64::MAX))],
            |rows| rows.iter().map(rows::audit_from_row).collect(),
        )
    }

    fn import_audit(&self, entries: Vec<AuditEntry>) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        self.write(Write::ImportAudit(entries))
    }
}

/// One page of the audit log, newest first: every condition but the tool glob in SQL, the rest
/// by the records' [`Pager`](switchboard_records::audit::Pager) over at most
/// [`MAX_ROWS_SCANNED`] rows.
async fn audit_page(
    client: &deadpool_postgres::Object,
    filter: &AuditFilter,
) -> Result<AuditPage, tokio_postgres::Error> {
    use futures_util::StreamExt;
    let mut sql = String::from(concat!(
        "SELECT ",
        rows::audit_columns!(),
        " FROM audit WHERE true"
    ));
    let mut params: Vec<pipeline::Param> = Vec::new();
    let mut bind = |sql: &mut String, clause: &str, value: pipeline::Param| {
        params.push(value);
        sql.push_str(&clause.replace('?', &format!("${}", params.len())));
    };
    if let Some(since) = filter.since_ms {
        bind(&mut sql, " AND time_ms >= ?", p(ms(since)));
    }
    if let Some(until) = filter.until_ms {
        bind(&mut sql, " AND time_ms < ?", p(ms(until)));
    }
    if let Some(session) = filter.session {
        bind(
            &mut sql,
            " AND ?::bigint = ANY(sessions)",
            p(to_sql(session)),
        );
    }
    if let Some(caller) = &filter.caller {
        bind(&mut sql, " AND caller = ?", p(rows::clean(caller)));
    }
    if let Some(decision) = &filter.decision {
        bind(&mut sql, " AND decision = ?", p(rows::clean(decision)));
    }
    if let Some(before) = filter.before_id {
        bind(&mut sql, " AND id < ?", p(ms(before)));
    }
    sql.push_str(" ORDER BY id DESC");
    let statement = client.prepare_cached(&sql).await?;
    let stream = client
        .query_raw(
            &statement,
            params
                .iter()
                .map(|param| &**param as &(dyn tokio_postgres::types::ToSql + Sync)),
        )
        .await?;
    futures_util::pin_mut!(stream);
    let mut pager = switchboard_records::audit::Pager::new(filter, MAX_ROWS_SCANNED);
    while let Some(row) = stream.next().await {
        if let Some(page) = pager.push(rows::audit_from_row(&row?)) {
            return Ok(page);
        }
    }
    Ok(pager.finish())
}

impl ScopeStore for PgBackend {
    fn set_session_scope(
        &self,
        session_id: Snowflake,
        scope: Option<Vec<String>>,
    ) -> Result<(), StoreError> {
        self.write(Write::SessionScope(session_id, scope))
    }

    fn session_scopes(&self) -> StoreFuture<'_, Vec<SessionScope>> {
        self.query(
            "the /tools overrides",
            "SELECT session_id, scope FROM session_scopes ORDER BY session_id",
            vec![],
            |rows| {
                rows.iter()
                    .filter_map(|row| {
                        let session_id = from_sql(row.get(0));
                        match serde_json::from_str::<Vec<String>>(row.get(1)) {
                            Ok(scope) => Some(SessionScope { session_id, scope }),
                            Err(err) => {
                                tracing::warn!(session = %session_id, %err, "skipping an unreadable /tools override");
                                None
                            }
                        }
                    })
                    .collect()
            },
        )
    }
}

/// Takes a key that is new or expired; an unexpired one is left as it is.
const RESERVE: &str = "INSERT INTO idempotency (caller, key, input_hash, expires_ms)
    VALUES ($1, $2, $3, $4)
    ON CONFLICT (caller, key) DO UPDATE SET input_hash = excluded.input_hash, status = NULL,
        body = NULL, expires_ms = excluded.expires_ms
    WHERE idempotency.expires_ms <= $5
    RETURNING 1";

impl IdempotencyStore for PgBackend {
    fn reserve_idempotency(&self, request: IdempotencyRequest) -> StoreFuture<'_, Reserved> {
        self.run("an idempotency key", false, move |shared, client| async move {
            let caller = rows::clean(&request.key.caller);
            let key = rows::clean(&request.key.key);
            // A key released between the two statements reads as missing: try again (at most
            // a few times; each try either takes the key or reads it).
            for _ in 0..5 {
                let stmts = [
                    Stmt::new(
                        RESERVE,
                        vec![
                            p(caller.clone()),
                            p(key.clone()),
                            p(rows::clean(&request.input_hash)),
                            p(ms(request.now_ms.saturating_add(request.ttl_ms))),
                            p(ms(request.now_ms)),
                        ],
                    ),
                    Stmt::new(
                        "SELECT input_hash, status, body FROM idempotency
                         WHERE caller = $1 AND key = $2",
                        vec![p(caller.clone()), p(key.clone())],
                    ),
                ];
                let rows = pipeline::each(&client, &stmts)
                    .await
                    .map_err(|err| from_pg(&shared.location, "an idempotency key", err))?;
                if !rows[0].is_empty() {
                    return Ok(Reserved::Fresh);
                }
                let Some(row) = rows[1].first() else {
                    continue;
                };
                let hash: &str = row.get(0);
                let status: Option<i32> = row.get(1);
                let body: Option<String> = row.get(2);
                return Ok(match (status, body) {
                    _ if hash != request.input_hash => Reserved::Mismatch,
                    (Some(status), Some(body)) => Reserved::Replay(StoredAnswer {
                        status: u16::try_from(status).unwrap_or(500),
                        body,
                    }),
                    _ => Reserved::Running,
                });
            }
            Err(StoreError::new(
                StoreErrorKind::Conflict,
                "the idempotency key changed hands too often while it was being reserved; retry the call",
            ))
        })
    }

    fn complete_idempotency(
        &self,
        key: &IdempotencyKey,
        answer: StoredAnswer,
    ) -> StoreFuture<'_, ()> {
        let key = key.clone();
        self.run(
            "an idempotency key",
            false,
            move |shared, client| async move {
                let updated = client
                .execute(
                    "UPDATE idempotency SET status = $3, body = $4 WHERE caller = $1 AND key = $2",
                    &[
                        &rows::clean(&key.caller),
                        &rows::clean(&key.key),
                        &i32::from(answer.status),
                        &rows::clean(&answer.body),
                    ],
                )
                .await
                .map_err(|err| from_pg(&shared.location, "an idempotency key", err))?;
                if updated == 0 {
                    return Err(StoreError::new(
                        StoreErrorKind::NotFound,
                        format!(
                            "the idempotency key {} of {} is not reserved (it expired?)",
                            key.key, key.caller
                        ),
                    ));
                }
                Ok(())
            },
        )
    }

    fn release_idempotency(&self, key: &IdempotencyKey) -> StoreFuture<'_, ()> {
        let key = key.clone();
        self.run(
            "an idempotency key",
            false,
            move |shared, client| async move {
                client
                    .execute(
                        "DELETE FROM idempotency WHERE caller = $1 AND key = $2 AND status IS NULL",
                        &[&rows::clean(&key.caller), &rows::clean(&key.key)],
                    )
                    .await
                    .map(drop)
                    .map_err(|err| from_pg(&shared.location, "an idempotency key", err))
            },
        )
    }

    fn idempotency_keys_after(
        &self,
        after: Option<IdempotencyKey>,
        limit: usize,
    ) -> StoreFuture<'_, Vec<KeptKey>> {
        let (caller, key) = after.map_or((None, String::new()), |k| (Some(k.caller), k.key));
        self.query(
            "idempotency keys",
            "SELECT caller, key, input_hash, status, body, expires_ms FROM idempotency
             WHERE expires_ms > $4
               AND ($1::text IS NULL OR caller COLLATE \"C\" > $1
                    OR (caller = $1 AND key COLLATE \"C\" > $2))
             ORDER BY caller COLLATE \"C\", key COLLATE \"C\" LIMIT $3",
            vec![
                p(caller),
                p(key),
                p(i64::try_from(limit).unwrap_or(i64::MAX)),
                p(ms(now_ms())),
            ],
            |rows| {
                rows.iter()
                    .map(|row| KeptKey {
                        key: IdempotencyKey {
                            caller: row.get(0),
                            key: row.get(1),
                        },
                        input_hash: row.get(2),
                        answer: match (
                            row.get::<_, Option<i32>>(3),
                            row.get::<_, Option<String>>(4),
                        ) {
                            (Some(status), Some(body)) => Some(StoredAnswer {
                                status: u16::try_from(status).unwrap_or(500),
                                body,
                            }),
                            _ => None,
                        },
                        expires_ms: ms_from(row.get(5)),
                    })
                    .collect()
            },
        )
    }
}

impl ChangeFeed for PgBackend {
    fn feed(&self) -> &FeedSender {
        &self.shared.feed
    }

    fn shared(&self) -> bool {
        true
    }
}

impl Backend for PgBackend {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn location(&self) -> String {
        self.shared.location.clone()
    }

    fn flush(&self) -> StoreFuture<'_, ()> {
        if self.closed() {
            return ready(Err(StoreError::closed(&self.shared.location)));
        }
        let Some(mut answer) = self.writer.flush(&self.shared) else {
            return ready(Err(unreachable(
                &self.shared.location,
                self.writer.stats().depth,
            )));
        };
        let shared = Arc::clone(&self.shared);
        let (done, result) = oneshot::channel();
        self.shared.rt.spawn(async move {
            let mut reachable = shared.reachable.subscribe();
            let written = |answer: Result<(), String>| {
                answer.map_err(|message| crate::error::write_failed(&shared.location, &message))
            };
            let closed = || StoreError::closed(&shared.location);
            let outcome = tokio::select! {
                answer = &mut answer => answer.map_err(|_| closed()).and_then(written),
                () = async { let _ = reachable.wait_for(|up| !*up).await; } => {
                    // Away: a second's grace (it may be back, or nothing was queued).
                    match tokio::time::timeout(Duration::from_secs(1), answer).await {
                        Ok(answer) => answer.map_err(|_| closed()).and_then(written),
                        Err(_) => Err(unreachable(&shared.location, 0)),
                    }
                }
                () = tokio::time::sleep(shared.operation_timeout) => {
                    Err(too_slow(&shared.location, "flush"))
                }
            };
            let _ = done.send(outcome);
        });
        let location = self.shared.location.clone();
        Box::pin(async move { result.await.map_err(|_| StoreError::closed(&location))? })
    }

    fn close(&self) -> StoreFuture<'_, ()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return ready(Ok(()));
        }
        let result = self
            .writer
            .close(&self.shared)
            .map_err(|message| crate::error::write_failed(&self.shared.location, &message));
        let _ = self.stop_listener.send(true);
        self.shared.pool.close();
        let runtime = self
            .runtime
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(runtime) = runtime {
            // Not a blocking shutdown: close may be called from inside another runtime.
            runtime.shutdown_background();
        }
        ready(result)
    }

    fn queue_stats(&self) -> QueueStats {
        self.writer.stats()
    }

    fn census(&self) -> StoreFuture<'_, Census> {
        let counts = self.query(
            "counts",
            "SELECT (SELECT count(*) FROM messages WHERE NOT deleted),
                    (SELECT count(*) FROM sessions), (SELECT count(*) FROM users),
                    (SELECT count(*) FROM roles), (SELECT count(*) FROM threads),
                    (SELECT count(*) FROM backfill_gaps),
                    (SELECT count(*) FROM answered_triggers),
                    (SELECT count(*) FROM workflows), (SELECT count(*) FROM approvals),
                    (SELECT count(*) FROM audit), (SELECT count(*) FROM session_scopes),
                    (SELECT count(*) FROM idempotency WHERE expires_ms > $1)",
            vec![p(ms(now_ms()))],
            |rows| {
                let Some(row) = rows.first() else {
                    return Census::default();
                };
                let n = |i: usize| u64::try_from(row.get::<_, i64>(i)).unwrap_or(0);
                Census {
                    messages: n(0),
                    sessions: n(1),
                    users: n(2),
                    roles: n(3),
                    threads: n(4),
                    gaps: n(5),
                    claims: n(6),
                    workflows: n(7),
                    approvals: n(8),
                    audit: n(9),
                    scopes: n(10),
                    idempotency_keys: n(11),
                    ..Census::default()
                }
            },
        );
        let more = self.run("counts", false, |shared, client| async move {
            agents::census(&client, &shared.location, Census::default()).await
        });
        Box::pin(async move {
            let agents = more.await?;
            Ok(Census {
                notes: agents.notes,
                summaries: agents.summaries,
                runs: agents.runs,
                schedules: agents.schedules,
                usage: agents.usage,
                agent_bindings: agents.agent_bindings,
                ..counts.await?
            })
        })
    }
}

impl Drop for PgBackend {
    fn drop(&mut self) {
        if !self.closed.load(Ordering::SeqCst) {
            if let Err(err) = futures_executor::block_on(Backend::close(self)) {
                tracing::error!(location = %self.shared.location, "closing the store: {err}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expired_state_the_decision_builds_is_serdes() {
        let expired =
            serde_json::to_value(switchboard_records::ApprovalState::Expired { at_ms: 5 }).unwrap();
        assert_eq!(expired, serde_json::json!({"state": "expired", "atMs": 5}));
    }

    #[test]
    fn a_location_never_shows_the_password() {
        let options = PgOptions::default();
        let config = config(
            "postgres://sb:hunter2@db.example:5433/switchboard",
            &options,
        )
        .unwrap();
        assert_eq!(
            location(&config),
            "postgres://sb@db.example:5433/switchboard"
        );
        let socket = config_str("host=/run/postgresql user=sb dbname=x password=hunter2");
        assert!(!socket.contains("hunter2"), "{socket}");
        assert_eq!(config.get_connect_timeout(), Some(&options.connect_timeout));
        assert_eq!(config.get_keepalives_idle(), options.keepalives_idle);
    }

    fn config_str(url: &str) -> String {
        location(&config(url, &PgOptions::default()).unwrap())
    }

    #[test]
    fn garbage_urls_and_tls_are_typed_errors() {
        for bad in [
            "postgres://a@b/c?sslmode=require",
            "postgres://[::1",
            "host='",
        ] {
            let err = config(bad, &PgOptions::default()).unwrap_err();
            assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{bad}");
            assert!(err.to_string().contains("store.url"), "{err}");
        }
    }
}
