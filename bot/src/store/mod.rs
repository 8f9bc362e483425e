//! The durable session/message store.
//!
//! The gateway client feeds sessions (channels, threads, DMs, forums), names (users, roles,
//! channels — the entity mapper's learned names) and messages into a [`Store`]; the tool
//! server reads them back. Hot data lives in memory (dashmaps: `hot`), everything durable in
//! an embedded SQLite file in WAL mode (`sqlite`). Write methods change memory at once, so a
//! read right after sees the change, and queue the durable write to one writer thread
//! (`writer`) that commits in batches: ingest never waits on SQLite. [`Store::flush`] waits
//! until everything queued before it is committed; what was flushed survives a crash.
//!
//! Retention: each channel keeps its newest [`StoreOptions::messages_per_channel`] messages;
//! older ones leave memory at once and SQLite at the next prune. A deleted message leaves
//! memory at once, is marked deleted in SQLite and goes at the next prune.
//!
//! At open the schema is created or migrated (`PRAGMA user_version`) and the hot maps are
//! rebuilt from the file. The file is locked while a store has it open.

mod error;
mod hot;
mod ledger;
mod model;
mod search;
mod sqlite;
mod writer;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use entity::NameDirectory;
use switchboard_config::AuditConfig;
use switchboard_records::{Approval, ApprovalCard, SessionScope, Settlement, TriggerClaim};
use switchboard_store::feed::{Changes, FeedSender, Origin};
use switchboard_store::{
    ApprovalStore, AuditStore, ChangeFeed, Claim, Decided, Durable, ScopeStore, StoreErrorKind,
    StoreFuture, TriggerStore,
};
use toolserver::governance::{AuditEntry, AuditFilter, AuditPage, AuditRow};
use tracing::{error, info};

pub use entity::Snowflake;
pub use error::StoreError;
pub use model::{
    SessionKind, StoredAttachment, StoredMessage, StoredReaction, StoredSession, StoredThread,
    ThreadState,
};
pub use search::{fts_expression, SearchError, StoreHit, StoreSearch, RANKED_CANDIDATES};
pub use sqlite::{WorkflowRow, SCHEMA_VERSION};

use hot::{Hot, Inserted, UserEntry};
use sqlite::Change;
use writer::Writer;

/// How the store keeps messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// Newest messages kept per session, in memory and in SQLite (default 1,000).
    pub messages_per_channel: usize,
    /// Audit rows older than this are pruned (`audit.retention_days`, default 90 days).
    pub audit_retention: Duration,
}

impl StoreOptions {
    /// The default of [`StoreOptions::messages_per_channel`].
    pub const DEFAULT_MESSAGES_PER_CHANNEL: usize = 1_000;
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            messages_per_channel: Self::DEFAULT_MESSAGES_PER_CHANNEL,
            audit_retention: AuditConfig::default().retention,
        }
    }
}

/// A handle to the store; clones share it. The writer stops when [`Store::close`] is called
/// or the last handle is dropped (which closes it the same way).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    hot: Arc<Hot>,
    /// The workflows the file held at open.
    workflows_at_open: Vec<WorkflowRow>,
    /// Messages the agent took to answer, younger than [`ANSWERS_KEPT_MS`].
    answered: Mutex<Answered>,
    /// Open backfill gaps: channel → the id after which messages may be missing.
    gaps: Mutex<HashMap<Snowflake, Snowflake>>,
    /// The `/tools` overrides and pending approvals the file held at open.
    ledger_at_open: ledger::LedgerAtOpen,
    /// The approval requests pending now, by id: decided here, under this lock (one process
    /// owns the file), then kept through the writer.
    approvals: Mutex<HashMap<String, Approval>>,
    /// Where changes would be published: this store is one process's, so nobody else's
    /// changes come (nothing is published).
    feed: FeedSender,
    writer: Writer,
    path: String,
    closed: AtomicBool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            if let Err(err) = self.writer.close() {
                let err = writer_error(&self.path, err);
                error!(path = %self.path, "closing the store: {err}");
            }
        }
    }
}

/// How long the record of answered triggers remembers a message (by the time in its id): a week
/// (the longest `agent.missed_max_age_s`) and a day.
pub const ANSWERS_KEPT_MS: u64 = 8 * 24 * 3600 * 1000;

/// Records taken between two prunes of the in-memory set of answered triggers.
const ANSWERS_PRUNE_EVERY: u32 = 1024;

#[derive(Debug, Default)]
struct Answered {
    ids: HashSet<u64>,
    since_prune: u32,
}

/// The smallest message id Discord could give at `ms` (milliseconds since the Unix epoch).
pub fn first_id_at(ms: u64) -> Snowflake {
    Snowflake(ms.saturating_sub(protocol::DISCORD_EPOCH_MS) << 22)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn writer_error(path: &str, err: Option<String>) -> StoreError {
    match err {
        Some(message) => StoreError::Write {
            path: path.to_owned(),
            message,
        },
        None => StoreError::Closed {
            path: path.to_owned(),
        },
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.path)
            .field("messages_per_channel", &self.inner.hot.messages_per_channel)
            .finish_non_exhaustive()
    }
}

/// The sessions a store file holds, read without locking or changing it; fails while a
/// running switchboard holds the file.
pub fn peek_sessions(path: &str) -> Result<Vec<StoredSession>, StoreError> {
    sqlite::peek_sessions(path)
}

impl Store {
    /// Opens the store at `path` (":memory:" for one that lives only as long as the process),
    /// creating or migrating its schema, rebuilding the hot maps and starting the writer.
    pub fn open(path: &str, options: StoreOptions) -> Result<Store, StoreError> {
        let conn = sqlite::open(path)?;
        let keep = options.messages_per_channel;
        let hot = Arc::new(Hot::new(keep));
        sqlite::load(&conn, &hot, path)?;
        // Drop rows retention no longer wants (including rows marked deleted, whose ids the
        // load above remembered).
        match sqlite::prune_all(&conn, keep) {
            Ok(0) => {}
            Ok(pruned) => info!(path, pruned, "pruned old messages from the store"),
            Err(err) => error!(path, %err, "could not prune the store at open; will retry later"),
        }
        let now_ms = toolserver::clock::now_ms();
        let workflows_at_open = sqlite::load_workflows(&conn, now_ms, path)?;
        let ledger_at_open =
            ledger::load(&conn, now_ms, options.audit_retention, path).map_err(|source| {
                StoreError::Load {
                    path: path.to_owned(),
                    source,
                }
            })?;
        let answered = sqlite::load_answered(
            &conn,
            first_id_at(now_ms.saturating_sub(ANSWERS_KEPT_MS)),
            path,
        )?;
        let gaps = sqlite::load_gaps(&conn, path)?;
        let writer = Writer::spawn(
            conn,
            path.to_owned(),
            keep,
            options.audit_retention,
            Arc::clone(&hot),
        )?;
        Ok(Store {
            inner: Arc::new(Inner {
                hot,
                workflows_at_open,
                answered: Mutex::new(Answered {
                    ids: answered,
                    since_prune: 0,
                }),
                gaps: Mutex::new(gaps),
                approvals: Mutex::new(
                    ledger_at_open
                        .pending_approvals
                        .iter()
                        .filter_map(approval_from_record)
                        .map(|approval| (approval.card.id.clone(), approval))
                        .collect(),
                ),
                feed: FeedSender::new(Origin::next()),
                ledger_at_open,
                writer,
                path: path.to_owned(),
                closed: AtomicBool::new(false),
            }),
        })
    }

    /// The path the store was opened with.
    pub fn path(&self) -> &str {
        &self.inner.path
    }

    fn queue(&self, change: Change) {
        let refused = if self.inner.closed.load(Ordering::Relaxed) {
            Some(change)
        } else {
            self.inner.writer.send(change).err()
        };
        if let Some(change) = refused {
            error!(
                path = %self.inner.path,
                "the store is closed; this change stays in memory only: {}",
                change.describe()
            );
        }
    }

    /// Keeps a workflow (replacing the row with its id), through the writer like every change.
    pub fn save_workflow(&self, row: WorkflowRow) {
        self.queue(Change::SaveWorkflow(Box::new(row)));
    }

    /// The workflows the file held when the store was opened (those finished more than a week
    /// earlier were pruned).
    pub fn workflows_at_open(&self) -> &[WorkflowRow] {
        &self.inner.workflows_at_open
    }

    /// Stores a session, replacing the one with its id. Its name becomes one the entity mapper
    /// resolves to the id; a renamed session gives up its old name.
    pub fn upsert_session(&self, session: StoredSession) {
        self.inner.hot.upsert_session(session, |session| {
            self.queue(Change::UpsertSession(Box::new(session.clone())));
        });
    }

    /// Drops the session (and a thread's state); its messages stay until pruned.
    pub fn remove_session(&self, id: Snowflake) {
        self.inner.hot.threads.remove(&id);
        self.inner
            .hot
            .remove_session(id, || self.queue(Change::RemoveSession(id)));
    }

    /// Drops a deleted channel's session and those of its threads, which Discord deletes with
    /// it.
    pub fn remove_channel(&self, id: Snowflake) {
        for thread in self.threads(Some(id)) {
            self.remove_session(thread.session.id);
        }
        self.remove_session(id);
    }

    /// Records a thread's state (archived, locked, auto-archive period, owner); nothing is
    /// written when it is what the store knew. A state without an owner keeps the one known.
    pub fn set_thread_state(&self, id: Snowflake, mut state: ThreadState) {
        if state.owner_id.is_none() {
            state.owner_id = self.thread_state(id).and_then(|known| known.owner_id);
        }
        let changed = self.inner.hot.threads.insert(id, state) != Some(state);
        if changed {
            self.queue(Change::SaveThread(id, state));
        }
    }

    /// What the store knows of a thread's state; `None` when it never learned it.
    pub fn thread_state(&self, id: Snowflake) -> Option<ThreadState> {
        self.inner.hot.threads.get(&id).map(|state| *state)
    }

    /// A known thread: its session (a thread's) and its state (open when never learned).
    pub fn thread(&self, id: Snowflake) -> Option<StoredThread> {
        let session = self.session(id).filter(|s| s.kind == SessionKind::Thread)?;
        Some(StoredThread {
            state: self.thread_state(id).unwrap_or_default(),
            session,
        })
    }

    /// Every known thread, of one channel (`parent`) or of all, archived ones included, sorted
    /// by id.
    pub fn threads(&self, parent: Option<Snowflake>) -> Vec<StoredThread> {
        let mut threads: Vec<StoredThread> = self
            .inner
            .hot
            .sessions
            .iter()
            .filter(|s| s.kind == SessionKind::Thread)
            .filter(|s| parent.is_none_or(|p| s.parent_id == Some(p)))
            .map(|s| s.clone())
            .map(|session| StoredThread {
                state: self.thread_state(session.id).unwrap_or_default(),
                session,
            })
            .collect();
        threads.sort_by_key(|t| t.session.id);
        threads
    }

    /// The known threads that are not archived, of one channel or of all, sorted by id: the
    /// threads whose messages can still arrive.
    pub fn active_threads(&self, parent: Option<Snowflake>) -> Vec<StoredSession> {
        self.threads(parent)
            .into_iter()
            .filter(|t| !t.state.archived)
            .map(|t| t.session)
            .collect()
    }

    /// Full-text search over the stored messages (see `search.rs` for what is indexed). It
    /// runs on the writer's connection once everything queued before it is committed, and is
    /// stopped after `budget` (it holds up writes meanwhile, so the budget is short).
    pub fn search(
        &self,
        search: StoreSearch,
        budget: std::time::Duration,
    ) -> impl std::future::Future<Output = Result<Vec<StoreHit>, SearchError>> + Send + 'static
    {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let queued = !self.inner.closed.load(Ordering::Relaxed)
            && self.inner.writer.query(Box::new(move |conn| {
                // The budget starts when the search does, not while it waits its turn.
                let deadline = std::time::Instant::now() + budget;
                let _ = answer.send(search::run(conn, &search, deadline));
            }));
        async move {
            if !queued {
                return Err(SearchError::Closed);
            }
            answered.await.map_err(|_| SearchError::Closed)?
        }
    }

    /// The session with this id, if the store knows it.
    pub fn session(&self, id: Snowflake) -> Option<StoredSession> {
        self.inner.hot.sessions.get(&id).map(|s| s.clone())
    }

    /// Every known session, sorted by id.
    pub fn sessions(&self) -> Vec<StoredSession> {
        let mut sessions: Vec<StoredSession> =
            self.inner.hot.sessions.iter().map(|s| s.clone()).collect();
        sessions.sort_by_key(|s| s.id);
        sessions
    }

    /// Stores a user's names and whether it is a bot, replacing what was known. Both names (the
    /// username, and the global display name when set) become ones the entity mapper resolves to
    /// the id; names the user no longer has are given up.
    pub fn upsert_user(
        &self,
        id: Snowflake,
        username: &str,
        global_name: Option<&str>,
        is_bot: bool,
    ) {
        let user = UserEntry {
            username: username.into(),
            global_name: global_name.map(Into::into),
            is_bot,
        };
        self.inner.hot.upsert_user(id, user, |user| {
            self.queue(Change::UpsertUser(Box::new((id, user.clone()))));
        });
    }

    /// The name to show for a user: the global (display) name, else the username.
    pub fn user_display_name(&self, id: Snowflake) -> Option<String> {
        let user = self.inner.hot.users.get(&id)?;
        Some(
            user.global_name
                .as_deref()
                .filter(|name| !name.is_empty())
                .unwrap_or(&user.username)
                .to_owned(),
        )
    }

    /// [`Store::user_display_name`], else `user_<id>` (the entity mapper's form for an
    /// unnamed user): what to call the author of a message.
    pub fn author_name(&self, id: Snowflake) -> String {
        self.user_display_name(id)
            .unwrap_or_else(|| format!("user_{id}"))
    }

    /// Whether a known user is a bot.
    pub fn user_is_bot(&self, id: Snowflake) -> Option<bool> {
        self.inner.hot.users.get(&id).map(|user| user.is_bot)
    }

    /// Stores a role's name, replacing what was known; the name becomes one the entity mapper
    /// resolves to the id.
    pub fn upsert_role(&self, id: Snowflake, name: &str) {
        self.inner
            .hot
            .upsert_role(id, name, || self.queue(Change::UpsertRole(id, name.into())));
    }

    /// Forgets a role and gives up its name; nothing happens for an unknown id.
    pub fn remove_role(&self, id: Snowflake) {
        self.inner
            .hot
            .remove_role(id, || self.queue(Change::RemoveRole(id)));
    }

    /// Stores a message. False when that id is already stored or was deleted (so the REST
    /// answer and the gateway echo of the bot's own message store it once), or when it is older
    /// than every cached message of a channel that is full (retention would drop it at once).
    pub fn insert_message(&self, message: StoredMessage) -> bool {
        let (channel_id, id) = (message.channel_id, message.id);
        let inserted = self.inner.hot.insert_message(message, || {
            self.queue(Change::SaveMessage { channel_id, id });
        });
        matches!(inserted, Inserted::Stored { .. })
    }

    /// Replaces a cached message's content and text and sets its edited timestamp. False when
    /// the message isn't cached (unknown, deleted, or beyond retention), or when what it holds
    /// was edited later than `edited_timestamp` (edits seen out of order: the latest edit wins,
    /// whichever arrives last — a live update or a backfilled copy).
    pub fn update_message(
        &self,
        channel_id: Snowflake,
        id: Snowflake,
        content: String,
        text: String,
        edited_timestamp: Option<String>,
    ) -> bool {
        self.inner
            .hot
            .with_message(channel_id, id, |message| {
                if !message.accepts_edit(edited_timestamp.as_deref()) {
                    return false;
                }
                message.edit(&content, &text, edited_timestamp.as_deref());
                self.queue(Change::SaveMessage { channel_id, id });
                true
            })
            .unwrap_or(false)
    }

    /// The newest cached message id of a channel whose author is not `not_by` (the bot's own
    /// messages are stored from REST answers too, even while the gateway is away, so they say
    /// nothing about what the gateway delivered).
    pub fn newest_message_id(
        &self,
        channel_id: Snowflake,
        not_by: Option<Snowflake>,
    ) -> Option<Snowflake> {
        self.inner.hot.newest_message_id(channel_id, not_by)
    }

    /// Notes in memory and queues for the writer that `message_id` is being answered; false
    /// when it was taken before.
    fn note_answer(&self, channel_id: Snowflake, message_id: Snowflake) -> bool {
        let now = toolserver::clock::now_ms();
        {
            let mut answered = lock(&self.inner.answered);
            if !answered.ids.insert(message_id.0) {
                return false;
            }
            answered.since_prune += 1;
            if answered.since_prune >= ANSWERS_PRUNE_EVERY {
                answered.since_prune = 0;
                let below = first_id_at(now.saturating_sub(ANSWERS_KEPT_MS));
                answered.ids.retain(|id| *id >= below.0);
                self.queue(Change::PruneAnswered(below));
            }
        }
        self.queue(Change::TakeAnswer {
            channel_id,
            message_id,
            taken_ms: now,
        });
        true
    }

    /// Takes `message_id` to answer. Whether it was taken before (by this process or an
    /// earlier one: `Ok(None)`) is decided at once, in memory. Otherwise the record goes to
    /// the writer and the answer is the wait for it to be durable: it resolves once the
    /// writer has committed the record and read it back on its own connection (so a failed
    /// commit is never taken for a durable one), without blocking a thread.
    pub fn take_answer(
        &self,
        channel_id: Snowflake,
        message_id: Snowflake,
    ) -> Result<
        Option<impl std::future::Future<Output = Result<(), StoreError>> + Send + 'static>,
        StoreError,
    > {
        if !self.note_answer(channel_id, message_id) {
            return Ok(None);
        }
        let (found, committed) = tokio::sync::oneshot::channel();
        let read_back: writer::Query = Box::new(move |conn| {
            let row = conn.query_row(
                "SELECT 1 FROM answered_triggers WHERE message_id = ?1",
                [message_id.0 as i64],
                |_| Ok(()),
            );
            let _ = found.send(row.map_err(|err| err.to_string()));
        });
        let path = self.inner.path.clone();
        if !self.inner.writer.query(read_back) {
            return Err(StoreError::Closed { path });
        }
        Ok(Some(async move {
            match committed.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(message)) => Err(StoreError::Write {
                    path,
                    message: format!("the answered-trigger record was not committed: {message}"),
                }),
                Err(_) => Err(StoreError::Closed { path }),
            }
        }))
    }

    /// Whether the agent took `message_id` to answer (within the record's week and a day).
    pub fn is_answered(&self, message_id: Snowflake) -> bool {
        lock(&self.inner.answered).ids.contains(&message_id.0)
    }

    /// Records that messages of `channel_id` after `after` may be missing (the gateway
    /// identified afresh); an older gap of the channel stays, since it is still unfetched.
    pub fn open_gap(&self, channel_id: Snowflake, after: Snowflake) {
        let mut gaps = lock(&self.inner.gaps);
        let kept = gaps.entry(channel_id).or_insert(after);
        if after < *kept {
            *kept = after;
        }
        self.queue(Change::OpenGap { channel_id, after });
    }

    /// The channel's backfill caught up: nothing before now is missing.
    pub fn close_gap(&self, channel_id: Snowflake) {
        if lock(&self.inner.gaps).remove(&channel_id).is_some() {
            self.queue(Change::CloseGap(channel_id));
        }
    }

    /// Every open backfill gap: channel → the id after which messages may be missing.
    pub fn gaps(&self) -> HashMap<Snowflake, Snowflake> {
        lock(&self.inner.gaps).clone()
    }

    /// Deletes one message: it is no longer listed or readable. False when it wasn't cached.
    pub fn delete_message(&self, channel_id: Snowflake, id: Snowflake) -> bool {
        self.delete_messages(channel_id, &[id]) == 1
    }

    /// Deletes messages of one channel; returns how many were cached.
    pub fn delete_messages(&self, channel_id: Snowflake, ids: &[Snowflake]) -> usize {
        self.inner.hot.delete_messages(channel_id, ids, |ids| {
            self.queue(Change::DeleteMessages {
                channel_id,
                ids: ids.into_boxed_slice(),
            });
        })
    }

    /// Counts one reaction with `emoji` (`me`: the bot's own) on a cached message.
    pub fn add_reaction(&self, channel_id: Snowflake, id: Snowflake, emoji: &str, me: bool) {
        self.change_reactions(channel_id, id, |reactions| {
            hot::add_reaction(reactions, emoji, me);
            true
        });
    }

    /// Removes one reaction with `emoji` (`me`: the bot's own) from a cached message.
    pub fn remove_reaction(&self, channel_id: Snowflake, id: Snowflake, emoji: &str, me: bool) {
        self.change_reactions(channel_id, id, |reactions| {
            hot::remove_reaction(reactions, emoji, me)
        });
    }

    /// Removes every reaction from a cached message.
    pub fn remove_all_reactions(&self, channel_id: Snowflake, id: Snowflake) {
        self.change_reactions(channel_id, id, |reactions| {
            let had = !reactions.is_empty();
            reactions.clear();
            had
        });
    }

    /// Removes every reaction with `emoji` from a cached message.
    pub fn remove_emoji_reactions(&self, channel_id: Snowflake, id: Snowflake, emoji: &str) {
        self.change_reactions(channel_id, id, |reactions| {
            let before = reactions.len();
            reactions.retain(|r| r.emoji != emoji);
            reactions.len() != before
        });
    }

    fn change_reactions(
        &self,
        channel_id: Snowflake,
        id: Snowflake,
        change: impl FnOnce(&mut Vec<StoredReaction>) -> bool,
    ) {
        self.inner.hot.with_message(channel_id, id, |message| {
            let mut reactions = message.reactions().to_vec();
            if change(&mut reactions) {
                message.set_reactions(reactions);
                self.queue(Change::SaveMessage { channel_id, id });
            }
        });
    }

    /// The newest `limit` cached messages with `after < id < before`, oldest first.
    pub fn messages(
        &self,
        channel_id: Snowflake,
        limit: usize,
        before: Option<Snowflake>,
        after: Option<Snowflake>,
    ) -> Vec<StoredMessage> {
        self.inner.hot.messages(channel_id, limit, before, after)
    }

    /// A cached message; None when unknown, deleted or beyond retention.
    pub fn message(&self, channel_id: Snowflake, id: Snowflake) -> Option<StoredMessage> {
        self.inner.hot.message(channel_id, id)
    }

    /// Forgets every message of a channel, in memory and in SQLite (rows deleted, not marked):
    /// for channels the allowlist no longer allows. Returns how many were cached.
    pub fn forget_channel_messages(&self, channel_id: Snowflake) -> usize {
        self.inner.hot.forget_channel(channel_id, |_| {
            self.queue(Change::ForgetChannel(channel_id));
        })
    }

    /// Changes whenever a user, role or channel name appears, changes or goes (what readable
    /// text renders from).
    pub fn names_revision(&self) -> u64 {
        self.inner
            .hot
            .names_revision
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Channels that have cached messages.
    pub fn channels_with_messages(&self) -> Vec<Snowflake> {
        self.inner.hot.channels_with_messages()
    }

    /// How many messages are cached (deleted ones excluded).
    pub fn message_count(&self) -> usize {
        self.inner.hot.message_count()
    }

    /// Blocks until every write queued before the call is committed. From async code, call it
    /// through `spawn_blocking`.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.inner
            .writer
            .flush()
            .map_err(|err| writer_error(&self.inner.path, err))
    }

    /// Commits what is queued, stops the writer, prunes and checkpoints. Later writes stay in
    /// memory only (and are logged); calling it again does nothing.
    pub fn close(&self) -> Result<(), StoreError> {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.inner
            .writer
            .close()
            .map_err(|err| writer_error(&self.inner.path, err))
    }
}

impl Store {
    /// The `/tools` overrides the file held at open.
    pub fn scope_overrides_at_open(&self) -> Vec<(Snowflake, Vec<String>)> {
        self.inner.ledger_at_open.overrides.clone()
    }

    fn queue_ledger(&self, change: ledger::LedgerChange) {
        self.queue(Change::Ledger(Box::new(change)));
    }
}

/// A kept approval record as the store traits read it; `None` when its card does not parse.
fn approval_from_record(record: &ledger::ApprovalRecord) -> Option<Approval> {
    let card: ApprovalCard = serde_json::from_value(record.card.clone()).ok()?;
    Some(Approval {
        binding: card.binding.clone(),
        card,
        channel_id: record.channel_id,
        message_id: record.message_id,
    })
}

fn closed(path: &str) -> switchboard_store::StoreError {
    switchboard_store::StoreError::new(
        StoreErrorKind::Closed,
        format!("the store at {path} is closed"),
    )
}

/// The audit log, kept in SQLite through the writer.
impl AuditStore for Store {
    fn record(&self, row: AuditRow) -> Result<(), switchboard_store::StoreError> {
        if self.inner.closed.load(Ordering::Relaxed) {
            return Err(closed(&self.inner.path));
        }
        self.queue_ledger(ledger::LedgerChange::Audit(row));
        Ok(())
    }

    fn audit_page(&self, filter: AuditFilter) -> StoreFuture<'_, AuditPage> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let queued = !self.inner.closed.load(Ordering::Relaxed)
            && self.inner.writer.query(Box::new(move |conn| {
                let _ = answer.send(ledger::query(conn, &filter));
            }));
        let path = self.inner.path.clone();
        Box::pin(async move {
            if !queued {
                return Err(closed(&path));
            }
            match answered.await {
                Ok(Ok(page)) => Ok(page),
                Ok(Err(err)) => Err(switchboard_store::StoreError::new(
                    StoreErrorKind::Unavailable,
                    format!("could not read the audit log in {path}: {err}"),
                )),
                Err(_) => Err(closed(&path)),
            }
        })
    }

    fn prune_audit(&self, _before_ms: u64) -> StoreFuture<'_, usize> {
        // The writer prunes by `audit.retention_days` itself.
        switchboard_store::aggregates::ready(Ok(0))
    }

    fn audit_after(&self, _after_id: u64, _limit: usize) -> StoreFuture<'_, Vec<AuditEntry>> {
        switchboard_store::aggregates::ready(Err(switchboard_store::StoreError::new(
            StoreErrorKind::Unavailable,
            "this store is not copied row by row",
        )))
    }

    fn import_audit(&self, _entries: Vec<AuditEntry>) -> Result<(), switchboard_store::StoreError> {
        Err(switchboard_store::StoreError::new(
            StoreErrorKind::Unavailable,
            "this store does not import audit rows",
        ))
    }
}

/// `/tools` overrides, kept in SQLite through the writer.
impl ScopeStore for Store {
    fn set_session_scope(
        &self,
        session_id: Snowflake,
        scope: Option<Vec<String>>,
    ) -> Result<(), switchboard_store::StoreError> {
        if self.inner.closed.load(Ordering::Relaxed) {
            return Err(closed(&self.inner.path));
        }
        self.queue_ledger(ledger::LedgerChange::SessionScope(session_id, scope));
        Ok(())
    }

    fn session_scopes(&self) -> StoreFuture<'_, Vec<SessionScope>> {
        let scopes = self
            .scope_overrides_at_open()
            .into_iter()
            .map(|(session_id, scope)| SessionScope { session_id, scope })
            .collect();
        switchboard_store::aggregates::ready(Ok(scopes))
    }
}

impl Store {
    fn approvals_lock(&self) -> MutexGuard<'_, HashMap<String, Approval>> {
        self.inner
            .approvals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn keep_approval(&self, approval: &Approval) {
        let record = ledger::ApprovalRecord {
            id: approval.card.id.clone(),
            channel_id: approval.channel_id,
            message_id: approval.message_id,
            pending: approval.is_pending(),
            card: serde_json::to_value(&approval.card).unwrap_or(serde_json::Value::Null),
        };
        self.queue_ledger(ledger::LedgerChange::Approval(record));
    }
}

/// Approval requests: decided under one lock (this process owns the file), kept through the
/// writer. Only pending requests are held in memory.
impl ApprovalStore for Store {
    fn save_approval(&self, approval: Approval) -> Result<(), switchboard_store::StoreError> {
        if self.inner.closed.load(Ordering::Relaxed) {
            return Err(closed(&self.inner.path));
        }
        if !approval.is_pending() {
            return Ok(());
        }
        self.keep_approval(&approval);
        self.approvals_lock()
            .insert(approval.card.id.clone(), approval);
        Ok(())
    }

    fn decide_approval(
        &self,
        id: &str,
        settlement: Settlement,
        at_ms: u64,
    ) -> StoreFuture<'_, Decided> {
        let decided = {
            let mut approvals = self.approvals_lock();
            match approvals.remove(id) {
                Some(mut approval) => {
                    let took = switchboard_store::settle(&mut approval, &settlement, at_ms);
                    self.keep_approval(&approval);
                    Ok(if took {
                        Decided::Decided(approval)
                    } else {
                        Decided::AlreadyDecided(approval)
                    })
                }
                None => Err(switchboard_store::StoreError::new(
                    StoreErrorKind::NotFound,
                    format!("no approval {id} is pending"),
                )),
            }
        };
        switchboard_store::aggregates::ready(decided)
    }

    fn approval(&self, id: &str) -> StoreFuture<'_, Option<Approval>> {
        switchboard_store::aggregates::ready(Ok(self.approvals_lock().get(id).cloned()))
    }

    fn pending_approvals(&self) -> StoreFuture<'_, Vec<Approval>> {
        switchboard_store::aggregates::ready(Ok(self.approvals_lock().values().cloned().collect()))
    }

    fn approvals(&self) -> StoreFuture<'_, Vec<Approval>> {
        self.pending_approvals()
    }
}

/// One process's store: nobody else's changes ever come.
impl ChangeFeed for Store {
    fn origin(&self) -> Origin {
        self.inner.feed.origin()
    }

    fn shared(&self) -> bool {
        false
    }

    fn subscribe(&self) -> Changes {
        self.inner.feed.subscribe()
    }
}

impl NameDirectory for Store {
    fn user_by_key(&self, key: &str) -> Option<Snowflake> {
        self.inner.hot.user_keys.get(key)
    }

    fn role_by_key(&self, key: &str) -> Option<Snowflake> {
        self.inner.hot.role_keys.get(key)
    }

    fn channel_by_key(&self, key: &str) -> Option<Snowflake> {
        self.inner.hot.channel_keys.get(key)
    }

    fn users_by_key(&self, key: &str) -> Vec<Snowflake> {
        self.inner.hot.user_keys.all(key)
    }

    fn channels_by_key(&self, key: &str) -> Vec<Snowflake> {
        self.inner.hot.channel_keys.all(key)
    }

    fn find_user_name(&self, id: Snowflake, accept: &mut dyn FnMut(&str) -> bool) {
        // Copy the names out first: `accept` may call back into this directory.
        let names: Vec<String> = match self.inner.hot.users.get(&id) {
            Some(user) => std::iter::once(&*user.username)
                .chain(user.global_name.as_deref())
                .filter(|name| !name.is_empty())
                .map(str::to_owned)
                .collect(),
            None => return,
        };
        for name in &names {
            if accept(name) {
                return;
            }
        }
    }

    fn role_name(&self, id: Snowflake) -> Option<String> {
        self.inner.hot.roles.get(&id).map(|name| name.to_string())
    }

    fn channel_name(&self, id: Snowflake) -> Option<String> {
        self.inner.hot.sessions.get(&id).map(|s| s.name.clone())
    }
}

/// Workflows: kept as JSON documents through the writer; read back as the file held them at
/// open (a row that no longer parses is logged and left out).
impl switchboard_store::WorkflowStore for Store {
    fn save_workflow(
        &self,
        workflow: &toolserver::workflow::Workflow,
    ) -> Result<(), switchboard_store::StoreError> {
        if self.inner.closed.load(Ordering::Relaxed) {
            return Err(closed(&self.inner.path));
        }
        let body = serde_json::to_string(workflow).map_err(|err| {
            switchboard_store::StoreError::new(StoreErrorKind::Corrupt, err.to_string())
        })?;
        self.save_workflow(WorkflowRow {
            id: workflow.workflow_id.clone(),
            state: workflow.state.as_str().to_owned(),
            finished_ms: workflow.finished_ms,
            body,
        });
        Ok(())
    }

    fn workflows(&self) -> StoreFuture<'_, Vec<toolserver::workflow::Workflow>> {
        let kept = self
            .workflows_at_open()
            .iter()
            .filter_map(|row| match serde_json::from_str(&row.body) {
                Ok(workflow) => Some(workflow),
                Err(error) => {
                    tracing::warn!(workflow = %row.id, "skipping a stored workflow that does not parse: {error}");
                    None
                }
            })
            .collect();
        switchboard_store::aggregates::ready(Ok(kept))
    }

    fn workflow(&self, id: &str) -> StoreFuture<'_, Option<toolserver::workflow::Workflow>> {
        let found = self
            .workflows_at_open()
            .iter()
            .find(|row| row.id == id)
            .and_then(|row| serde_json::from_str(&row.body).ok());
        switchboard_store::aggregates::ready(Ok(found))
    }
}

/// Trigger claims: decided at once in memory (one process owns the file), durable once the
/// writer committed the record.
impl TriggerStore for Store {
    fn claim_trigger(&self, claim: TriggerClaim) -> StoreFuture<'_, Claim> {
        let claimed = match self.take_answer(claim.channel_id, claim.message_id) {
            Ok(None) => Ok(Claim::Taken),
            Ok(Some(recording)) => Ok(Claim::Won(Durable::new(async move {
                recording.await.map_err(|err| {
                    switchboard_store::StoreError::new(StoreErrorKind::Unavailable, err.to_string())
                })
            }))),
            Err(err) => Err(switchboard_store::StoreError::new(
                StoreErrorKind::Closed,
                err.to_string(),
            )),
        };
        switchboard_store::aggregates::ready(claimed)
    }

    fn is_claimed(&self, message_id: Snowflake) -> StoreFuture<'_, bool> {
        switchboard_store::aggregates::ready(Ok(self.is_answered(message_id)))
    }

    fn claims_after(
        &self,
        _after: Option<Snowflake>,
        _limit: usize,
    ) -> StoreFuture<'_, Vec<TriggerClaim>> {
        switchboard_store::aggregates::ready(Err(switchboard_store::StoreError::new(
            StoreErrorKind::Unavailable,
            "this store is not copied row by row",
        )))
    }
}
