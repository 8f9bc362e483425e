//! The read cache in front of any backend: sessions, names and the newest messages of each
//! channel in dashmaps, so reads never wait on a backend and the entity mapper resolves names
//! without I/O.
//!
//! Writes change the maps at once (a read right after sees the change) and hand the durable
//! write to the backend, which queues and batches it: ingest never waits on the disk per
//! message. Writes that mirror the maps are handed over in the order they changed the maps
//! (one sequencing lock held across the change and the hand-over, never across a dashmap
//! guard), so the backend ends where the maps are even when two threads change one message.
//!
//! With a backend other nodes write to ([`ChangeFeed::shared`]), a watcher thread reads the
//! change feed and applies every change another node made: it re-reads the changed thing from
//! the backend and puts it in the maps (or takes it out). A watcher that fell behind re-reads
//! the whole aggregate.

mod compact;
mod hot;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use entity::NameDirectory;
use switchboard_records::{
    Gap, Message, MessageQuery, Reaction, Role, Session, SessionKind, Thread, ThreadState, User,
};
use tracing::{error, warn};

use crate::aggregates::{Backend, Snapshot};
use crate::error::StoreError;
use crate::feed::{Changed, Next};
use entity::Snowflake;
use hot::{Hot, Inserted, UserEntry};

/// How the cache keeps messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheOptions {
    /// Newest messages cached per channel (`store.messages_per_channel`; the backend keeps as
    /// many durably).
    pub messages_per_channel: usize,
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            messages_per_channel: 1_000,
        }
    }
}

/// A handle to the cached store; clones share it. The backend is closed when
/// [`Store::close`] is called or the last handle is dropped.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Arc<dyn Backend>,
    hot: Hot,
    /// Open backfill gaps: channel → the id after which messages may be missing.
    gaps: Mutex<HashMap<Snowflake, Snowflake>>,
    /// Held across a change of the maps and its hand-over to the backend.
    sequence: Mutex<()>,
    closed: AtomicBool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            if let Err(err) = futures_executor::block_on(self.backend.close()) {
                error!(store = %self.backend.location(), "closing the store: {err}");
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("backend", &self.inner.backend.location())
            .field("messages_per_channel", &self.inner.hot.messages_per_channel)
            .finish_non_exhaustive()
    }
}

/// How often the feed watcher looks for changes other nodes made when none came.
const WATCH_INTERVAL: Duration = Duration::from_millis(5);

impl Store {
    /// A cache over `backend`, filled from its snapshot. Blocks until the snapshot is read
    /// (from async code, call it through `spawn_blocking`).
    pub fn open(backend: Arc<dyn Backend>, options: CacheOptions) -> Result<Store, StoreError> {
        let hot = Hot::new(options.messages_per_channel);
        let snapshot = futures_executor::block_on(backend.snapshot(options.messages_per_channel))?;
        let gaps = fill(&hot, snapshot);
        let store = Store {
            inner: Arc::new(Inner {
                backend,
                hot,
                gaps: Mutex::new(gaps),
                sequence: Mutex::new(()),
                closed: AtomicBool::new(false),
            }),
        };
        if store.inner.backend.shared() {
            store.watch()?;
        }
        Ok(store)
    }

    /// The backend behind the cache: for the aggregates the cache does not hold (search,
    /// trigger claims, workflows, approvals, audit, scopes, idempotency keys, the feed). Any
    /// one of them is `Arc<dyn Trait>` by upcasting: `let audit: Arc<dyn AuditStore> =
    /// store.backend().clone();`.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    fn sequence(&self) -> MutexGuard<'_, ()> {
        lock(&self.inner.sequence)
    }

    /// Logs a write the backend refused (the store is closed, usually): the cache has it, the
    /// backend will not.
    fn handed(&self, what: &str, result: Result<(), StoreError>) {
        if let Err(err) = result {
            error!(
                store = %self.inner.backend.location(),
                "this change stays in memory only ({what}): {err}"
            );
        }
    }

    /// Stores a session, replacing the one with its id. Its name becomes one the entity mapper
    /// resolves to the id; a renamed session gives up its old name.
    pub fn upsert_session(&self, session: Session) {
        let _sequence = self.sequence();
        let mut kept = None;
        self.inner
            .hot
            .upsert_session(session, |session| kept = Some(session.clone()));
        if let Some(session) = kept {
            self.handed(
                "store a session",
                self.inner.backend.upsert_session(session),
            );
        }
    }

    /// Drops the session (and a thread's state); its messages stay until pruned.
    pub fn remove_session(&self, id: Snowflake) {
        let _sequence = self.sequence();
        self.inner.hot.threads.remove(&id);
        if self.inner.hot.remove_session(id, || {}) {
            self.handed("remove a session", self.inner.backend.remove_session(id));
        }
    }

    /// Drops a deleted channel's session and those of its threads, which Discord deletes with
    /// it.
    pub fn remove_channel(&self, id: Snowflake) {
        for thread in self.threads(Some(id)) {
            self.remove_session(thread.session.id);
        }
        self.remove_session(id);
    }

    /// Records a thread's state; nothing is written when it is what the store knew. A state
    /// without an owner keeps the one known.
    pub fn set_thread_state(&self, id: Snowflake, mut state: ThreadState) {
        let _sequence = self.sequence();
        if state.owner_id.is_none() {
            state.owner_id = self.thread_state(id).and_then(|known| known.owner_id);
        }
        let changed = self.inner.hot.threads.insert(id, state) != Some(state);
        if changed {
            self.handed(
                "keep a thread's state",
                self.inner.backend.save_thread_state(id, state),
            );
        }
    }

    /// What the store knows of a thread's state; `None` when it never learned it.
    pub fn thread_state(&self, id: Snowflake) -> Option<ThreadState> {
        self.inner.hot.threads.get(&id).map(|state| *state)
    }

    /// A known thread: its session and its state (open when never learned).
    pub fn thread(&self, id: Snowflake) -> Option<Thread> {
        let session = self.session(id).filter(|s| s.kind == SessionKind::Thread)?;
        Some(Thread {
            state: self.thread_state(id).unwrap_or_default(),
            session,
        })
    }

    /// Every known thread, of one channel (`parent`) or of all, archived ones included, by id.
    pub fn threads(&self, parent: Option<Snowflake>) -> Vec<Thread> {
        let mut threads: Vec<Thread> = self
            .inner
            .hot
            .sessions
            .iter()
            .filter(|s| s.kind == SessionKind::Thread)
            .filter(|s| parent.is_none_or(|p| s.parent_id == Some(p)))
            .map(|s| s.clone())
            .map(|session| Thread {
                state: self.thread_state(session.id).unwrap_or_default(),
                session,
            })
            .collect();
        threads.sort_by_key(|t| t.session.id);
        threads
    }

    /// The known threads that are not archived, of one channel or of all, by id.
    pub fn active_threads(&self, parent: Option<Snowflake>) -> Vec<Session> {
        self.threads(parent)
            .into_iter()
            .filter(|t| !t.state.archived)
            .map(|t| t.session)
            .collect()
    }

    /// The session with this id, if known.
    pub fn session(&self, id: Snowflake) -> Option<Session> {
        self.inner.hot.sessions.get(&id).map(|s| s.clone())
    }

    /// Every known session, by id.
    pub fn sessions(&self) -> Vec<Session> {
        let mut sessions: Vec<Session> =
            self.inner.hot.sessions.iter().map(|s| s.clone()).collect();
        sessions.sort_by_key(|s| s.id);
        sessions
    }

    /// Stores a user's names and whether it is a bot. Both names become ones the entity mapper
    /// resolves to the id; names the user no longer has are given up. An unchanged user costs
    /// a lookup, not a write.
    pub fn upsert_user(&self, user: User) {
        let entry = UserEntry::from_user(&user);
        if self
            .inner
            .hot
            .users
            .get(&user.id)
            .is_some_and(|old| *old == entry)
        {
            return;
        }
        let _sequence = self.sequence();
        let mut changed = false;
        self.inner
            .hot
            .upsert_user(user.id, entry, |_| changed = true);
        if changed {
            self.handed("store a user", self.inner.backend.upsert_user(user));
        }
    }

    /// A known user.
    pub fn user(&self, id: Snowflake) -> Option<User> {
        self.inner.hot.users.get(&id).map(|user| user.to_user(id))
    }

    /// The name to show for a user: the global (display) name, else the username.
    pub fn user_display_name(&self, id: Snowflake) -> Option<String> {
        self.inner
            .hot
            .users
            .get(&id)
            .map(|user| user.display_name().to_owned())
    }

    /// [`Store::user_display_name`], else `user_<id>` (the entity mapper's form for an unnamed
    /// user): what to call the author of a message.
    pub fn author_name(&self, id: Snowflake) -> String {
        self.user_display_name(id)
            .unwrap_or_else(|| format!("user_{id}"))
    }

    /// Whether a known user is a bot.
    pub fn user_is_bot(&self, id: Snowflake) -> Option<bool> {
        self.inner.hot.users.get(&id).map(|user| user.is_bot)
    }

    /// Stores a role's name; the name becomes one the entity mapper resolves to the id.
    pub fn upsert_role(&self, role: Role) {
        if self
            .inner
            .hot
            .roles
            .get(&role.id)
            .is_some_and(|name| **name == *role.name)
        {
            return;
        }
        let _sequence = self.sequence();
        self.inner.hot.upsert_role(role.id, &role.name, || {});
        self.handed("store a role", self.inner.backend.upsert_role(role));
    }

    /// Forgets a role and gives up its name; nothing happens for an unknown id.
    pub fn remove_role(&self, id: Snowflake) {
        let _sequence = self.sequence();
        if self.inner.hot.remove_role(id, || {}) {
            self.handed("remove a role", self.inner.backend.remove_role(id));
        }
    }

    /// Stores a message. False when that id is already stored or was deleted (so the REST
    /// answer and the gateway echo of the bot's own message store it once), or when it is older
    /// than every cached message of a channel that is full (retention would drop it at once).
    pub fn insert_message(&self, message: Message) -> bool {
        let _sequence = self.sequence();
        let inserted = self.inner.hot.insert_message(&message, || {});
        if !matches!(inserted, Inserted::Stored { .. }) {
            return false;
        }
        self.handed("store a message", self.inner.backend.save_message(message));
        true
    }

    /// Replaces a cached message's content and text and sets its edited timestamp. False when
    /// the message isn't cached, or when what it holds was edited later than
    /// `edited_timestamp` (the latest edit wins, whichever copy arrives last).
    pub fn update_message(
        &self,
        channel_id: Snowflake,
        id: Snowflake,
        content: String,
        text: String,
        edited_timestamp: Option<String>,
    ) -> bool {
        let _sequence = self.sequence();
        let edited = self
            .inner
            .hot
            .with_message(channel_id, id, |message| {
                if !message.accepts_edit(edited_timestamp.as_deref()) {
                    return None;
                }
                message.edit(&content, &text, edited_timestamp.as_deref());
                Some(message.to_stored(id, channel_id))
            })
            .flatten();
        match edited {
            Some(message) => {
                self.handed("edit a message", self.inner.backend.save_message(message));
                true
            }
            None => false,
        }
    }

    /// The newest cached message id of a channel whose author is not `not_by`.
    pub fn newest_message_id(
        &self,
        channel_id: Snowflake,
        not_by: Option<Snowflake>,
    ) -> Option<Snowflake> {
        self.inner.hot.newest_message_id(channel_id, not_by)
    }

    /// Records that messages of `channel_id` after `after` may be missing; an older gap of the
    /// channel stays, since it is still unfetched.
    pub fn open_gap(&self, channel_id: Snowflake, after: Snowflake) {
        let _sequence = self.sequence();
        {
            let mut gaps = lock(&self.inner.gaps);
            let kept = gaps.entry(channel_id).or_insert(after);
            if after < *kept {
                *kept = after;
            }
        }
        self.handed(
            "open a backfill gap",
            self.inner.backend.open_gap(Gap { channel_id, after }),
        );
    }

    /// The channel's backfill caught up: nothing before now is missing.
    pub fn close_gap(&self, channel_id: Snowflake) {
        let _sequence = self.sequence();
        if lock(&self.inner.gaps).remove(&channel_id).is_some() {
            self.handed(
                "close a backfill gap",
                self.inner.backend.close_gap(channel_id),
            );
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

    /// Deletes messages of one channel; returns how many were cached. Each id is remembered
    /// as deleted, so a late copy does not bring it back.
    pub fn delete_messages(&self, channel_id: Snowflake, ids: &[Snowflake]) -> usize {
        let _sequence = self.sequence();
        let mut removed = Vec::new();
        let count = self
            .inner
            .hot
            .delete_messages(channel_id, ids, |ids| removed = ids);
        if count > 0 {
            let ids = removed.into_iter().map(Snowflake).collect();
            self.handed(
                "delete messages",
                self.inner.backend.delete_messages(channel_id, ids),
            );
        }
        count
    }

    /// Counts one reaction with `emoji` (`me`: the bot's own) on a cached message.
    pub fn add_reaction(&self, channel_id: Snowflake, id: Snowflake, emoji: &str, me: bool) {
        self.change_reactions(channel_id, id, |reactions| {
            Reaction::add(reactions, emoji, me);
            true
        });
    }

    /// Removes one reaction with `emoji` (`me`: the bot's own) from a cached message.
    pub fn remove_reaction(&self, channel_id: Snowflake, id: Snowflake, emoji: &str, me: bool) {
        self.change_reactions(channel_id, id, |reactions| {
            Reaction::remove(reactions, emoji, me)
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
        change: impl FnOnce(&mut Vec<Reaction>) -> bool,
    ) {
        let _sequence = self.sequence();
        let changed = self
            .inner
            .hot
            .with_message(channel_id, id, |message| {
                let mut reactions = message.reactions().to_vec();
                if !change(&mut reactions) {
                    return None;
                }
                message.set_reactions(reactions);
                Some(message.to_stored(id, channel_id))
            })
            .flatten();
        if let Some(message) = changed {
            self.handed(
                "change a message's reactions",
                self.inner.backend.save_message(message),
            );
        }
    }

    /// The newest `limit` cached messages with `after < id < before`, oldest first.
    pub fn messages(
        &self,
        channel_id: Snowflake,
        limit: usize,
        before: Option<Snowflake>,
        after: Option<Snowflake>,
    ) -> Vec<Message> {
        let query = MessageQuery {
            limit,
            before,
            after,
        };
        self.query_messages(channel_id, query)
    }

    /// [`Store::messages`] with a [`MessageQuery`].
    pub fn query_messages(&self, channel_id: Snowflake, query: MessageQuery) -> Vec<Message> {
        self.inner
            .hot
            .read_messages(channel_id, query, |id, m| m.to_stored(id, channel_id))
    }

    /// A cached message; `None` when unknown, deleted or beyond retention.
    pub fn message(&self, channel_id: Snowflake, id: Snowflake) -> Option<Message> {
        self.inner
            .hot
            .read_message(channel_id, id, |m| m.to_stored(id, channel_id))
    }

    /// The ids and revisions of what [`Store::query_messages`] answers, without building the
    /// messages: a revision changes whenever what readers see of a message changes (an edit,
    /// its reactions) and never repeats within the process, so readers may cache what they
    /// derive under a message's id and revision and build it only when that changed.
    pub fn message_revisions(
        &self,
        channel_id: Snowflake,
        query: MessageQuery,
    ) -> Vec<(Snowflake, u64)> {
        self.inner
            .hot
            .read_messages(channel_id, query, |id, m| (id, m.revision()))
    }

    /// [`Store::query_messages`], each message with its revision ([`Store::message_revisions`]).
    pub fn messages_with_revisions(
        &self,
        channel_id: Snowflake,
        query: MessageQuery,
    ) -> Vec<(Message, u64)> {
        self.inner.hot.read_messages(channel_id, query, |id, m| {
            (m.to_stored(id, channel_id), m.revision())
        })
    }

    /// [`Store::message`] with its revision ([`Store::message_revisions`]).
    pub fn message_with_revision(
        &self,
        channel_id: Snowflake,
        id: Snowflake,
    ) -> Option<(Message, u64)> {
        self.inner.hot.read_message(channel_id, id, |m| {
            (m.to_stored(id, channel_id), m.revision())
        })
    }

    /// Forgets every message of a channel, cached and stored: for channels the allowlist no
    /// longer allows. Returns how many were cached.
    pub fn forget_channel_messages(&self, channel_id: Snowflake) -> usize {
        let _sequence = self.sequence();
        let count = self.inner.hot.forget_channel(channel_id, |_| {});
        self.handed(
            "forget a channel's messages",
            self.inner.backend.forget_channel(channel_id),
        );
        count
    }

    /// Changes whenever a user, role or channel name appears, changes or goes (what readable
    /// text renders from).
    pub fn names_revision(&self) -> u64 {
        self.inner.hot.names_revision()
    }

    /// Channels that have cached messages.
    pub fn channels_with_messages(&self) -> Vec<Snowflake> {
        self.inner.hot.channels_with_messages()
    }

    /// How many messages are cached (deleted ones excluded).
    pub fn message_count(&self) -> usize {
        self.inner.hot.message_count()
    }

    /// Resolves once every write handed over before the call is durable.
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.inner.backend.flush().await
    }

    /// [`Store::flush`], blocking the thread (not from async code: use `spawn_blocking`).
    pub fn flush_blocking(&self) -> Result<(), StoreError> {
        futures_executor::block_on(self.inner.backend.flush())
    }

    /// Commits what is queued and closes the backend; later writes stay in memory only (and
    /// are logged). Calling it again does nothing. Blocks like [`Store::flush_blocking`].
    pub fn close(&self) -> Result<(), StoreError> {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        futures_executor::block_on(self.inner.backend.close())
    }

    /// Starts the thread that applies other nodes' changes.
    fn watch(&self) -> Result<(), StoreError> {
        let mut changes = self.inner.backend.subscribe();
        let origin = self.inner.backend.origin();
        let inner: Weak<Inner> = Arc::downgrade(&self.inner);
        std::thread::Builder::new()
            .name("store-cache-feed".into())
            .spawn(move || loop {
                let Some(next) = changes.try_next() else {
                    if inner
                        .upgrade()
                        .is_none_or(|i| i.closed.load(Ordering::Relaxed))
                    {
                        return;
                    }
                    std::thread::sleep(WATCH_INTERVAL);
                    continue;
                };
                let Some(inner) = inner.upgrade() else {
                    return;
                };
                let store = Store { inner };
                match next {
                    Next::Change(change) if change.origin == origin => {}
                    Next::Change(change) => store.apply_remote(change.what),
                    Next::Missed(missed) => {
                        warn!(
                            missed,
                            "the store's cache fell behind the change feed; reloading it"
                        );
                        store.reload();
                    }
                    Next::Closed => return,
                }
                // Drop the handle here, not while sleeping: the last handle may go meanwhile.
                if store.inner.closed.load(Ordering::Relaxed) {
                    return;
                }
            })
            .map(drop)
            .map_err(|err| {
                StoreError::new(
                    crate::StoreErrorKind::Unavailable,
                    format!("cannot start the thread that watches the store's changes: {err}"),
                )
                .with_source(err)
            })
    }

    /// Applies a change another node made, read back from the backend.
    fn apply_remote(&self, what: Changed) {
        let backend = &self.inner.backend;
        let location = backend.location();
        let read = |what: &'static str| {
            let location = &location;
            move |err: StoreError| {
                warn!(store = %location, "cannot read {what} another node changed: {err}");
            }
        };
        let hot = &self.inner.hot;
        match what {
            Changed::Session(id) | Changed::SessionRemoved(id) => {
                match futures_executor::block_on(backend.session(id))
                    .map_err(read("a session"))
                    .ok()
                {
                    Some(Some(session)) => hot.upsert_session(session, |_| {}),
                    Some(None) => {
                        hot.threads.remove(&id);
                        hot.remove_session(id, || {});
                    }
                    None => {}
                }
            }
            Changed::Thread(id) => {
                if let Ok(Some(mut state)) =
                    futures_executor::block_on(backend.thread_state(id)).map_err(read("a thread"))
                {
                    state.owner_id = self.thread_state(id).and_then(|known| known.owner_id);
                    hot.threads.insert(id, state);
                }
            }
            Changed::User(id) => {
                if let Ok(Some(user)) =
                    futures_executor::block_on(backend.user(id)).map_err(read("a user"))
                {
                    hot.upsert_user(id, UserEntry::from_user(&user), |_| {});
                }
            }
            Changed::Role(id) | Changed::RoleRemoved(id) => {
                match futures_executor::block_on(backend.role(id))
                    .map_err(read("a role"))
                    .ok()
                {
                    Some(Some(role)) => hot.upsert_role(id, &role.name, || {}),
                    Some(None) => {
                        hot.remove_role(id, || {});
                    }
                    None => {}
                }
            }
            Changed::Message { channel_id, id } => {
                match futures_executor::block_on(backend.message(channel_id, id))
                    .map_err(read("a message"))
                    .ok()
                {
                    Some(Some(message)) => hot.apply_remote(&message),
                    Some(None) => {
                        hot.delete_messages(channel_id, &[id], |_| {});
                    }
                    None => {}
                }
            }
            Changed::MessagesDeleted { channel_id, ids } => {
                hot.delete_messages(channel_id, &ids, |_| {});
            }
            Changed::ChannelForgotten(channel_id) => {
                hot.forget_channel(channel_id, |_| {});
            }
            Changed::Gap(channel_id) => {
                if let Ok(gap) =
                    futures_executor::block_on(backend.gap(channel_id)).map_err(read("a gap"))
                {
                    let mut gaps = lock(&self.inner.gaps);
                    match gap {
                        Some(gap) => gaps.insert(channel_id, gap.after),
                        None => gaps.remove(&channel_id),
                    };
                }
            }
            // Not cached here: their owners (the engine) watch the feed themselves.
            _ => {}
        }
    }

    /// Re-reads the whole aggregate (after missing changes).
    fn reload(&self) {
        let _sequence = self.sequence();
        let backend = &self.inner.backend;
        match futures_executor::block_on(backend.snapshot(self.inner.hot.messages_per_channel)) {
            Ok(snapshot) => {
                let gaps = fill(&self.inner.hot, snapshot);
                *lock(&self.inner.gaps) = gaps;
            }
            Err(err) => {
                error!(store = %backend.location(), "cannot reload the store's cache: {err}");
            }
        }
    }
}

/// Puts a snapshot in the maps; the gaps it holds.
fn fill(hot: &Hot, snapshot: Snapshot) -> HashMap<Snowflake, Snowflake> {
    for session in snapshot.sessions {
        hot.upsert_session(session, |_| {});
    }
    for user in snapshot.users {
        hot.upsert_user(user.id, UserEntry::from_user(&user), |_| {});
    }
    for role in snapshot.roles {
        hot.upsert_role(role.id, &role.name, || {});
    }
    for (id, state) in snapshot.threads {
        hot.threads.insert(id, state);
    }
    for message in &snapshot.messages {
        hot.load_message(message);
    }
    for (channel_id, id) in snapshot.deleted {
        hot.load_deleted(channel_id, id);
    }
    snapshot
        .gaps
        .into_iter()
        .map(|gap| (gap.channel_id, gap.after))
        .collect()
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

    fn find_user_name(&self, id: Snowflake, accept: &mut dyn FnMut(&str) -> bool) {
        // Copy the names out first: `accept` may call back into this directory.
        let names: Vec<String> = match self.inner.hot.users.get(&id) {
            Some(user) => user.names().map(str::to_owned).collect(),
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
