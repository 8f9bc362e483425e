//! The storage traits, one per aggregate. Every backend (memory, SQLite, PostgreSQL) implements
//! all of them and [`Backend`]; callers hold the read cache ([`crate::Store`]) or any one trait
//! as `Arc<dyn Trait>`.
//!
//! Three shapes of method:
//! - **Writes** (`upsert_session`, `save_message`, `record`, ...) return at once: the backend
//!   queues them and commits in batches, so no caller waits on the disk per change. They may
//!   wait while the backend's write queue is full (a bound, not a drop: nothing is lost). An
//!   `Err` means the change was not even queued: the store is closed (`Closed`), or a shared
//!   backend cannot reach its database and its queue is full (`Unavailable`: it refuses rather
//!   than block its caller for as long as the database is away). [`Backend::flush`]
//!   resolves once everything queued before it is durable, or says why not.
//! - **Reads** return a [`StoreFuture`] that sees every write queued before the call (read
//!   your writes).
//! - **Atomic decisions** (`claim_trigger`, `decide_approval`, `reserve_idempotency`) return a
//!   future whose answer every backend must make atomically, across threads and — for a shared
//!   backend — across nodes.
//!
//! Every future a backend returns completes without the caller's runtime (the backend's own
//! thread or runtime drives the work), so a caller may also block on it from a plain thread.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use entity::Snowflake;
use switchboard_records::{
    AfterFiring, AgentBinding, Approval, AuditEntry, AuditFilter, AuditPage, AuditRow,
    CapabilityEnd, FiringClaim, Gap, IdempotencyKey, IdempotencyRequest, KeptCapability, KeptKey,
    KeptUsage, Lease, Message, MessageQuery, NewRun, Node, NodeBeat, Note, NoteLimits, NoteScope,
    Receipt, Role, Run, RunEnd, RunFilter, RunJoin, Schedule, ScheduleStatus, SearchHit,
    SearchQuery, Session, SessionScope, Settlement, ShardLease, StoredAnswer, Summary, ThreadState,
    TriggerClaim, UsageGroup, UsageQuery, UsageRow, UsageSubject, UsageTotals, User, Workflow,
};

use crate::error::StoreError;
use crate::feed::{Changes, FeedSender, Origin};
use crate::queue::QueueStats;

/// A store answer to wait for.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// An answer that is ready now.
pub fn ready<'a, T: Send + 'a>(result: Result<T, StoreError>) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(result))
}

/// What a cache needs to start: the message aggregate as stored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Every session.
    pub sessions: Vec<Session>,
    /// Every user.
    pub users: Vec<User>,
    /// Every role.
    pub roles: Vec<Role>,
    /// The state of every thread whose state was kept.
    pub threads: Vec<(Snowflake, ThreadState)>,
    /// The newest live messages of each channel, at most the number asked for.
    pub messages: Vec<Message>,
    /// Deleted message ids not yet pruned, as (channel, message): a late copy of one must not
    /// bring it back.
    pub deleted: Vec<(Snowflake, Snowflake)>,
    /// The open backfill gaps.
    pub gaps: Vec<Gap>,
}

/// Sessions, users, roles, messages, reactions, threads, backfill gaps and retention.
///
/// Retention is the backend's: each channel keeps its newest `messages_per_channel` live
/// messages (an option of the backend); older ones and deleted ones go at the backend's next
/// prune, and a [`Snapshot`] never holds more.
pub trait MessageStore: Send + Sync {
    /// The aggregate as stored, with the newest `messages_per_channel` live messages of each
    /// channel.
    fn snapshot(&self, messages_per_channel: usize) -> StoreFuture<'_, Snapshot>;
    /// Stores a session, replacing the one with its id.
    fn upsert_session(&self, session: Session) -> Result<(), StoreError>;
    /// Removes a session and its thread state; its messages stay until pruned.
    fn remove_session(&self, id: Snowflake) -> Result<(), StoreError>;
    /// Keeps a thread's state (its owner is not kept).
    fn save_thread_state(&self, id: Snowflake, state: ThreadState) -> Result<(), StoreError>;
    /// Stores a user, replacing the one with its id.
    fn upsert_user(&self, user: User) -> Result<(), StoreError>;
    /// Stores a role, replacing the one with its id.
    fn upsert_role(&self, role: Role) -> Result<(), StoreError>;
    /// Removes a role.
    fn remove_role(&self, id: Snowflake) -> Result<(), StoreError>;
    /// Stores a message as given: inserted, or replacing the one with its id (an edit, new
    /// reactions), live even if it was marked deleted. Whether a copy should be stored at all
    /// (a late echo of a deleted message, a replay) is the cache's decision.
    fn save_message(&self, message: Message) -> Result<(), StoreError>;
    /// Marks messages of a channel deleted: no longer read, searched or snapshotted as live,
    /// remembered as deleted until pruned.
    fn delete_messages(&self, channel_id: Snowflake, ids: Vec<Snowflake>)
        -> Result<(), StoreError>;
    /// Removes every message of a channel, live and deleted (the allowlist no longer allows it).
    fn forget_channel(&self, channel_id: Snowflake) -> Result<(), StoreError>;
    /// Records that messages of the gap's channel after its id may be missing; an older open
    /// gap of the channel stays.
    fn open_gap(&self, gap: Gap) -> Result<(), StoreError>;
    /// The channel's backfill caught up.
    fn close_gap(&self, channel_id: Snowflake) -> Result<(), StoreError>;
    /// A live stored message.
    fn message(&self, channel_id: Snowflake, id: Snowflake) -> StoreFuture<'_, Option<Message>>;
    /// The newest `query.limit` live messages with `after < id < before`, oldest first.
    fn messages(&self, channel_id: Snowflake, query: MessageQuery)
        -> StoreFuture<'_, Vec<Message>>;
    /// A stored session.
    fn session(&self, id: Snowflake) -> StoreFuture<'_, Option<Session>>;
    /// A stored user.
    fn user(&self, id: Snowflake) -> StoreFuture<'_, Option<User>>;
    /// A stored role.
    fn role(&self, id: Snowflake) -> StoreFuture<'_, Option<Role>>;
    /// A thread's kept state.
    fn thread_state(&self, id: Snowflake) -> StoreFuture<'_, Option<ThreadState>>;
    /// The open gap of a channel.
    fn gap(&self, channel_id: Snowflake) -> StoreFuture<'_, Option<Gap>>;
    /// The live messages of every channel with an id above `after` (from the first when
    /// `None`), oldest first, at most `limit`: how a copy reads every message, a page at a time.
    fn messages_after(
        &self,
        after: Option<Snowflake>,
        limit: usize,
    ) -> StoreFuture<'_, Vec<Message>>;
}

/// Full-text search over the stored live messages.
pub trait SearchStore: Send + Sync {
    /// The best `query.limit` hits among the newest [`SearchQuery::RANKED_CANDIDATES`] matches
    /// that pass the filters, best first. A search running past `budget` is stopped with
    /// [`crate::StoreErrorKind::TimedOut`].
    fn search(&self, query: SearchQuery, budget: Duration) -> StoreFuture<'_, Vec<SearchHit>>;
}

/// Resolves once a won claim is durable (or says why it never will be: then the claimer must
/// not act, and the message stays unanswered rather than answered twice).
pub struct Durable(Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send>>);

impl Durable {
    /// Durable once `future` resolves `Ok`.
    pub fn new(future: impl Future<Output = Result<(), StoreError>> + Send + 'static) -> Durable {
        Durable(Box::pin(future))
    }

    /// Durable already (the backend decided and committed in one step).
    pub fn now() -> Durable {
        Durable::new(std::future::ready(Ok(())))
    }
}

impl Future for Durable {
    type Output = Result<(), StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx)
    }
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Durable(..)")
    }
}

/// What claiming a trigger found.
#[derive(Debug)]
pub enum Claim {
    /// This claimer won: it alone may answer, once [`Durable`] resolves `Ok` (it may start
    /// meanwhile, but not act).
    Won(Durable),
    /// Someone claimed it before (this process, an earlier one, another node): it must not be
    /// answered again.
    Taken,
}

/// The record of the messages taken to answer, so each is answered at most once.
///
/// A backend decides a claim either way: at once in memory with the record written behind
/// (SQLite, one node: the claim future is ready at once, [`Durable`] waits for the commit), or
/// in the database (PostgreSQL: the claim future waits for `INSERT … ON CONFLICT DO NOTHING`,
/// [`Durable::now`]). Claims are kept at least
/// [`CLAIMS_KEPT_MS`](switchboard_records::trigger::CLAIMS_KEPT_MS) by their message's time.
pub trait TriggerStore: Send + Sync {
    /// Claims a message to answer. Exactly one of any number of concurrent claimers of one
    /// message wins, ever.
    fn claim_trigger(&self, claim: TriggerClaim) -> StoreFuture<'_, Claim>;
    /// Whether a message was claimed.
    fn is_claimed(&self, message_id: Snowflake) -> StoreFuture<'_, bool>;
    /// The kept claims with a message id above `after` (from the first when `None`), by message
    /// id, at most `limit`: how a copy reads every claim.
    fn claims_after(
        &self,
        after: Option<Snowflake>,
        limit: usize,
    ) -> StoreFuture<'_, Vec<TriggerClaim>>;
}

/// Workflows, kept whole by id.
pub trait WorkflowStore: Send + Sync {
    /// Keeps a workflow, replacing the one with its id.
    fn save_workflow(&self, workflow: &Workflow) -> Result<(), StoreError>;
    /// Every kept workflow, by id (finished ones are kept at least
    /// [`FINISHED_WORKFLOWS_KEPT_MS`](switchboard_records::workflow::FINISHED_WORKFLOWS_KEPT_MS));
    /// a kept one that no longer reads is logged and left out.
    fn workflows(&self) -> StoreFuture<'_, Vec<Workflow>>;
    /// One workflow.
    fn workflow(&self, id: &str) -> StoreFuture<'_, Option<Workflow>>;
}

/// What deciding an approval found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// This decision settled it; the record as it now stands.
    Decided(Approval),
    /// It was settled before (by another click, on another node, or it expired); the record
    /// with that earlier settlement.
    AlreadyDecided(Approval),
}

/// Approval requests.
pub trait ApprovalStore: Send + Sync {
    /// Keeps a pending approval (new, or its message id once posted). Once it is settled a
    /// save changes nothing: only [`ApprovalStore::decide_approval`] settles.
    fn save_approval(&self, approval: Approval) -> Result<(), StoreError>;
    /// Settles a pending approval at `at_ms`, atomically: of any number of concurrent
    /// decisions exactly one is [`Decided::Decided`]. An approve or deny at or after its
    /// expiry settles it as expired instead (and answers `AlreadyDecided`). An unknown id is
    /// [`crate::StoreErrorKind::NotFound`].
    fn decide_approval(
        &self,
        id: &str,
        settlement: Settlement,
        at_ms: u64,
    ) -> StoreFuture<'_, Decided>;
    /// One approval.
    fn approval(&self, id: &str) -> StoreFuture<'_, Option<Approval>>;
    /// Every approval still pending, by id (at a start: those an earlier run left, to expire).
    fn pending_approvals(&self) -> StoreFuture<'_, Vec<Approval>>;
    /// Every kept approval, pending or settled, by id: what a copy moves.
    fn approvals(&self) -> StoreFuture<'_, Vec<Approval>>;
}

/// The audit log.
pub trait AuditStore: Send + Sync {
    /// Keeps one row; ids increase in the order rows are recorded.
    fn record(&self, row: AuditRow) -> Result<(), StoreError>;
    /// One page, newest first (see [`AuditFilter`]). A backend may end a page early, with a
    /// cursor, after scanning many rows that do not match.
    fn audit_page(&self, filter: AuditFilter) -> StoreFuture<'_, AuditPage>;
    /// Removes rows from before `before_ms`; how many went. (The backend also prunes by its
    /// `audit_retention` on its own.)
    fn prune_audit(&self, before_ms: u64) -> StoreFuture<'_, usize>;
    /// The rows with an id above `after_id`, oldest first, at most `limit`: how a copy reads
    /// the whole log.
    fn audit_after(&self, after_id: u64, limit: usize) -> StoreFuture<'_, Vec<AuditEntry>>;
    /// Keeps rows under the ids they had in another store (a copy): ids already kept are
    /// skipped, rows recorded later get higher ids. A write, like [`AuditStore::record`].
    fn import_audit(&self, entries: Vec<AuditEntry>) -> Result<(), StoreError>;
}

/// `/tools` scope overrides.
pub trait ScopeStore: Send + Sync {
    /// Sets (`Some`) or removes (`None`) a session's override.
    fn set_session_scope(
        &self,
        session_id: Snowflake,
        scope: Option<Vec<String>>,
    ) -> Result<(), StoreError>;
    /// Every override, by session.
    fn session_scopes(&self) -> StoreFuture<'_, Vec<SessionScope>>;
}

/// `/agent set` bindings (issue 26): which configured agent answers in a session. Kept in
/// the store and read at each run's start, so a binding holds on every node and across
/// restarts.
pub trait AgentBindingStore: Send + Sync {
    /// Binds a session to an agent (`Some`, replacing its binding) or unbinds it (`None`);
    /// resolves once the change is durable.
    fn bind_agent(&self, session_id: Snowflake, agent: Option<String>) -> StoreFuture<'_, ()>;
    /// The agent a session is bound to, if any.
    fn bound_agent(&self, session_id: Snowflake) -> StoreFuture<'_, Option<String>>;
    /// Every binding, by session.
    fn agent_bindings(&self) -> StoreFuture<'_, Vec<AgentBinding>>;
}

/// What reserving an idempotency key found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reserved {
    /// The key is new (or its earlier use expired): run the call, then
    /// [`IdempotencyStore::complete_idempotency`] (or release it if the call never ran).
    Fresh,
    /// The same key and input answered before: answer this, do not run the call.
    Replay(StoredAnswer),
    /// The same key and input is running now (or its caller died before answering): do not
    /// run it again.
    Running,
    /// The key was used with a different input: a conflict.
    Mismatch,
}

/// Idempotency keys: a retried call runs once.
pub trait IdempotencyStore: Send + Sync {
    /// Reserves a key for a call, atomically: of concurrent reservations of one key exactly one
    /// is [`Reserved::Fresh`]. A key whose lifetime ended is fresh again.
    fn reserve_idempotency(&self, request: IdempotencyRequest) -> StoreFuture<'_, Reserved>;
    /// Keeps the answer of a reserved key; later reservations replay it.
    fn complete_idempotency(
        &self,
        key: &IdempotencyKey,
        answer: StoredAnswer,
    ) -> StoreFuture<'_, ()>;
    /// Forgets a reservation whose call never ran (refused before acting), so a retry runs.
    fn release_idempotency(&self, key: &IdempotencyKey) -> StoreFuture<'_, ()>;
    /// The unexpired keys after `after` (from the first when `None`) in (caller, key) order, at
    /// most `limit`: how a copy reads every key.
    fn idempotency_keys_after(
        &self,
        after: Option<IdempotencyKey>,
        limit: usize,
    ) -> StoreFuture<'_, Vec<KeptKey>>;
}

/// The change feed.
pub trait ChangeFeed: Send + Sync {
    /// The sender this handle publishes its durable changes through.
    fn feed(&self) -> &FeedSender;
    /// This handle's origin: the changes it makes carry it.
    fn origin(&self) -> Origin {
        self.feed().origin()
    }
    /// Whether other handles (nodes) may write to the same data, so that readers must watch
    /// the feed to stay correct. One SQLite file is one node's: false.
    fn shared(&self) -> bool;
    /// A watcher of every change from now on, this handle's own included, each published once
    /// it is durable.
    fn subscribe(&self) -> Changes {
        self.feed().subscribe()
    }
}

/// A whole backend: every aggregate, plus flushing and closing.
pub trait Backend:
    MessageStore
    + SearchStore
    + TriggerStore
    + WorkflowStore
    + ApprovalStore
    + AuditStore
    + ScopeStore
    + AgentBindingStore
    + IdempotencyStore
    + MemoryStore
    + RunStore
    + ScheduleStore
    + UsageStore
    + ClusterStore
    + CapabilityStore
    + crate::events::EventStore
    + crate::event_import::EventImport
    + ChangeFeed
{
    /// `memory`, `sqlite` or `postgres`.
    fn kind(&self) -> &'static str;
    /// Where it keeps its data, for logs and errors (a path, a redacted URL).
    fn location(&self) -> String;
    /// Resolves once every write queued before the call is durable; an error names the first
    /// write that failed since the previous flush.
    fn flush(&self) -> StoreFuture<'_, ()>;
    /// Commits what is queued and stops; later writes are refused with
    /// [`crate::StoreErrorKind::Closed`]. Closing again does nothing.
    fn close(&self) -> StoreFuture<'_, ()>;
    /// The write queue's figures (its depth, how often and how long writers waited).
    fn queue_stats(&self) -> QueueStats;
    /// How many of each kind of thing it keeps (what `store copy` reports for both sides).
    fn census(&self) -> StoreFuture<'_, Census>;
}

/// How many of each kind of thing a store keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Census {
    /// Live messages (deleted ones not yet pruned are not counted).
    pub messages: u64,
    /// Sessions.
    pub sessions: u64,
    /// Users.
    pub users: u64,
    /// Roles.
    pub roles: u64,
    /// Kept thread states.
    pub threads: u64,
    /// Open backfill gaps.
    pub gaps: u64,
    /// Trigger claims (answered-trigger records).
    pub claims: u64,
    /// Workflows.
    pub workflows: u64,
    /// Approvals, pending and settled.
    pub approvals: u64,
    /// Audit rows.
    pub audit: u64,
    /// `/tools` scope overrides.
    pub scopes: u64,
    /// `/agent set` bindings.
    pub agent_bindings: u64,
    /// Unexpired idempotency keys.
    pub idempotency_keys: u64,
    /// The agent's notes.
    pub notes: u64,
    /// Session summaries.
    pub summaries: u64,
    /// Runs, queued to ended.
    pub runs: u64,
    /// Schedules.
    pub schedules: u64,
    /// Model usage rows.
    pub usage: u64,
    /// The live feed's kept events: counted by `store copy` (a backend's own census leaves
    /// 0: the feed keeps only its newest, and counting them is a scan).
    pub events: u64,
}

/// What putting a note found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotePut {
    /// Kept (new, or replacing the note with its key).
    Saved,
    /// Not kept: the scope would hold more notes or characters than its limits allow. What it
    /// holds now, so the caller can say what to forget.
    Full {
        /// Notes in the scope.
        notes: usize,
        /// Characters of note text in the scope.
        chars: usize,
    },
}

/// The agent's memory (issue 25): the summary compaction wrote for each session (the newest
/// wins; [`SUMMARIES_KEPT_PER_SESSION`](switchboard_records::notes::SUMMARIES_KEPT_PER_SESSION)
/// are kept), and notes per scope, bounded by the caller's [`NoteLimits`].
///
/// Changes here are acknowledged (futures): the agent tells the model "saved" only once it is.
pub trait MemoryStore: Send + Sync {
    /// Keeps a session's summary; the session's oldest ones beyond those kept go.
    fn save_summary(&self, summary: Summary) -> StoreFuture<'_, ()>;
    /// The session's newest summary (by `created_ms`, then the one saved last).
    fn summary(&self, session_id: Snowflake) -> StoreFuture<'_, Option<Summary>>;
    /// The session's kept summaries, newest first, at most `limit`.
    fn summaries(&self, session_id: Snowflake, limit: usize) -> StoreFuture<'_, Vec<Summary>>;
    /// Keeps a note (replacing the one with its scope and key) if the scope then stays within
    /// `limits`, atomically: concurrent puts never take a scope past its limits.
    fn put_note(&self, note: Note, limits: NoteLimits) -> StoreFuture<'_, NotePut>;
    /// One note.
    fn note(&self, scope: NoteScope, key: &str) -> StoreFuture<'_, Option<Note>>;
    /// A scope's notes by key, at most `limit`.
    fn notes(&self, scope: NoteScope, limit: usize) -> StoreFuture<'_, Vec<Note>>;
    /// Forgets a note; whether there was one.
    fn forget_note(&self, scope: NoteScope, key: &str) -> StoreFuture<'_, bool>;
    /// Every note after `after` in (scope as text, key) order, at most `limit`: how a copy
    /// (and an operator's listing) pages through all of them.
    fn notes_after(
        &self,
        after: Option<(NoteScope, String)>,
        limit: usize,
    ) -> StoreFuture<'_, Vec<Note>>;
    /// The kept summaries of the first `sessions` sessions with an id above `after` (from the
    /// first when `None`), by session, each session's oldest first: how a copy reads them.
    fn summaries_after(
        &self,
        after: Option<Snowflake>,
        sessions: usize,
    ) -> StoreFuture<'_, Vec<Summary>>;
}

/// What queueing a run found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    /// Queued, behind the session's earlier runs.
    Queued(Box<Run>),
    /// Not queued: the session already has `queued` runs waiting, the most allowed.
    Full {
        /// Runs of the session waiting.
        queued: usize,
    },
}

/// What renewing a run's lease found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heartbeat {
    /// The lease is this node's until `until_ms`; `abort_requested`: someone asked the run to
    /// stop.
    Held {
        /// The new end of the lease.
        until_ms: u64,
        /// Someone asked the run to stop.
        abort_requested: bool,
    },
    /// The run is not this node's any more (its lease expired and it was interrupted, or it
    /// ended): stop it without posting.
    Lost,
}

/// Agent runs (issues 23, 26): a per-session FIFO queue, cluster-wide. A session has at most
/// one running run; a run is claimed by exactly one node, under a lease its heartbeats renew;
/// a run whose lease expired is interrupted by whoever looks first.
pub trait RunStore: crate::bot_turns::BotTurnStore + Send + Sync {
    /// Queues a run behind its session's runs, unless the session already has
    /// `max_queued_per_session` waiting: queued runs behind its running one — or, while none
    /// runs, behind the oldest queued, which starts as soon as a node claims it (so an idle
    /// session's first run never counts as waiting, as `agent.queue_per_session` means). A run
    /// id already kept is
    /// [`crate::StoreErrorKind::Conflict`].
    fn enqueue_run(&self, run: NewRun, max_queued_per_session: usize) -> StoreFuture<'_, Enqueued>;
    /// Claims the oldest queued run whose session has nothing running and no older run
    /// queued, for `lease.node` until [`Lease::until_ms`], atomically: of concurrent
    /// claimers on any nodes each run goes to exactly one, and a session never has two running.
    fn claim_next_run(&self, lease: Lease) -> StoreFuture<'_, Option<Run>>;
    /// Keeps a run that starts at once on `lease.node`, outside its session's queue: a
    /// handoff's sub-run or a chat-API run, whose caller waits for its answer (it waits behind
    /// no one; runs queued in its session after it wait for it as for any running run). It
    /// runs under `lease`, renewed and ended like a claimed run, and is interrupted like one
    /// when its node stops renewing. A run id already kept is
    /// [`crate::StoreErrorKind::Conflict`].
    fn start_run(&self, run: NewRun, lease: Lease) -> StoreFuture<'_, Run>;
    /// Takes queued runs into a run `join.node` holds (a burst of messages answered by one
    /// run, issue 25 §5): each of `join.run_ids` still queued in the held run's session
    /// becomes running on that node under the held run's lease, so it ends — or is
    /// interrupted — with it; the others are left as they are. The runs taken, by queue place
    /// (none when the node does not hold `join.held`).
    fn join_runs(&self, join: RunJoin) -> StoreFuture<'_, Vec<Run>>;
    /// Renews a running run's lease to `lease`, if `lease.node` still holds it.
    fn heartbeat_run(&self, run_id: &str, lease: Lease) -> StoreFuture<'_, Heartbeat>;
    /// Ends a run `node` holds (`Finished`, `Failed` or `Aborted`); `None` when the node does
    /// not hold it (it was interrupted meanwhile): the run as it stands is not changed.
    fn finish_run(&self, run_id: &str, node: &str, end: RunEnd) -> StoreFuture<'_, Option<Run>>;
    /// Asks a run to stop: a queued one is aborted at once (at `at_ms`), a running one is
    /// flagged for its node's next heartbeat. The run as it now stands (`None`: no such run).
    fn request_abort(&self, run_id: &str, at_ms: u64) -> StoreFuture<'_, Option<Run>>;
    /// Marks running runs whose lease ended before `now_ms` interrupted and answers them (at
    /// most `limit`), atomically: each such run is answered to exactly one caller.
    fn interrupt_expired_runs(&self, now_ms: u64, limit: usize) -> StoreFuture<'_, Vec<Run>>;
    /// Puts an interrupted run back in its place to run again (`agent.interrupted = "rerun"`):
    /// queued again under its own id and queue place — so the first of its session — with
    /// `trigger` as its trigger, unless a run of its session queued after it started once it
    /// was interrupted (then `None`, as for a run not interrupted: the caller queues it anew).
    fn rerun_run(&self, run_id: &str, trigger: String) -> StoreFuture<'_, Option<Run>>;
    /// One run.
    fn run(&self, run_id: &str) -> StoreFuture<'_, Option<Run>>;
    /// Runs newest first (see [`RunFilter`]).
    fn runs(&self, filter: RunFilter) -> StoreFuture<'_, Vec<Run>>;
    /// Forgets runs that ended before `before_ms`; how many went.
    fn prune_runs(&self, before_ms: u64) -> StoreFuture<'_, usize>;
    /// Keeps runs as they stand in another store (a copy), under their queue places: runs
    /// whose id or place is kept already are skipped; runs queued later get higher places.
    fn import_runs(&self, runs: Vec<Run>) -> StoreFuture<'_, ()>;
}

/// What claiming a firing found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Firing {
    /// This claimer fires it; the schedule now shows the next due time.
    Won(Schedule),
    /// Someone fired this due time already.
    Taken,
    /// The schedule is not active (paused, done, cancelled): nothing fires.
    Inactive(ScheduleStatus),
}

/// Scheduled prompts (issue 26). Each (schedule, due time) fires once, cluster-wide; every
/// firing leaves a receipt, and failed firings in a row pause the schedule.
pub trait ScheduleStore: Send + Sync {
    /// Keeps a schedule, replacing the one with its id.
    fn save_schedule(&self, schedule: Schedule) -> StoreFuture<'_, ()>;
    /// One schedule.
    fn schedule(&self, id: &str) -> StoreFuture<'_, Option<Schedule>>;
    /// Schedules by id after `after`, at most `limit`.
    fn schedules(&self, after: Option<String>, limit: usize) -> StoreFuture<'_, Vec<Schedule>>;
    /// Removes a schedule and its receipts; whether there was one.
    fn delete_schedule(&self, id: &str) -> StoreFuture<'_, bool>;
    /// Claims the firing of a schedule at its due time, atomically: of concurrent claimers of
    /// one (schedule, due time) exactly one wins, and the winner sets the next due time in
    /// the same step. An unknown schedule is [`crate::StoreErrorKind::NotFound`].
    fn claim_firing(&self, claim: FiringClaim) -> StoreFuture<'_, Firing>;
    /// Keeps a firing's receipt (the newest
    /// [`RECEIPTS_KEPT_PER_SCHEDULE`](switchboard_records::schedule::RECEIPTS_KEPT_PER_SCHEDULE)
    /// are kept) and counts it, atomically, as the `schedule` crate's `after_firing` does: a
    /// failure adds one to the failures in a row, a delivery (or `NO_REPLY`) resets them, a
    /// skip leaves them; then `after` applies ([`AfterFiring`]). The schedule as it now stands. An unknown
    /// schedule is [`crate::StoreErrorKind::NotFound`].
    fn record_receipt(&self, receipt: Receipt, after: AfterFiring) -> StoreFuture<'_, Schedule>;
    /// A schedule's receipts, newest first, at most `limit`.
    fn receipts(&self, schedule_id: &str, limit: usize) -> StoreFuture<'_, Vec<Receipt>>;
    /// Sets a schedule's status (pause, cancel, or resume: setting a paused one active forgets
    /// its failures in a row); the schedule as it now stands, `None` when there is none.
    fn set_schedule_status(
        &self,
        id: &str,
        status: ScheduleStatus,
    ) -> StoreFuture<'_, Option<Schedule>>;
}

/// Model usage (issue 26): rows, sums for budgets, reports.
pub trait UsageStore: Send + Sync {
    /// Keeps one model call's usage.
    fn record_usage(&self, row: UsageRow) -> StoreFuture<'_, ()>;
    /// The usage charged to `subject` with `since_ms <= at_ms < until_ms`.
    fn usage_sum(
        &self,
        subject: UsageSubject,
        since_ms: u64,
        until_ms: u64,
    ) -> StoreFuture<'_, UsageTotals>;
    /// Usage grouped (see [`UsageQuery`]; the order of
    /// [`fold_usage`](switchboard_records::usage::fold_usage)).
    fn usage_report(&self, query: UsageQuery) -> StoreFuture<'_, Vec<UsageGroup>>;
    /// Forgets rows from before `before_ms`; how many went.
    fn prune_usage(&self, before_ms: u64) -> StoreFuture<'_, usize>;
    /// The rows with an id above `after_id`, oldest first, at most `limit`: how a copy reads
    /// them.
    fn usage_after(&self, after_id: u64, limit: usize) -> StoreFuture<'_, Vec<KeptUsage>>;
    /// Keeps rows under the ids they had in another store (a copy): ids already kept are
    /// skipped, rows recorded later get higher ids.
    fn import_usage(&self, rows: Vec<KeptUsage>) -> StoreFuture<'_, ()>;
}

/// What asking for a shard found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardGrant {
    /// This node holds it until `until_ms`.
    Held {
        /// The end of the lease.
        until_ms: u64,
    },
    /// Another node holds it.
    Taken(ShardLease),
}

/// Several nodes on one store (issue 23): heartbeats, shard leases (how many a node should
/// hold is the caller's fair share), IDENTIFY slots per `max_concurrency` bucket, and keys
/// that fire once cluster-wide.
pub trait ClusterStore: Send + Sync {
    /// Records a node's heartbeat.
    fn node_heartbeat(&self, beat: NodeBeat) -> StoreFuture<'_, ()>;
    /// Nodes heard from at or after `seen_since_ms`, by id, at most `limit`.
    fn nodes(&self, seen_since_ms: u64, limit: usize) -> StoreFuture<'_, Vec<Node>>;
    /// Takes a shard for `lease.node` until [`Lease::until_ms`] if it is free, its lease
    /// ended, or the node holds it already (then it is renewed), atomically: one holder at a
    /// time.
    fn acquire_shard(&self, shard: u32, lease: Lease) -> StoreFuture<'_, ShardGrant>;
    /// Gives a shard back, if `node` holds it; whether it did.
    fn release_shard(&self, shard: u32, node: &str) -> StoreFuture<'_, bool>;
    /// Every shard lease (expired ones too), by shard.
    fn shard_leases(&self) -> StoreFuture<'_, Vec<ShardLease>>;
    /// Reserves the next IDENTIFY of a `max_concurrency` bucket: the time (ms) this caller may
    /// identify, at least `now_ms` and `spacing_ms` after the slot given before, atomically
    /// across nodes.
    fn take_identify_slot(&self, bucket: u32, now_ms: u64, spacing_ms: u64)
        -> StoreFuture<'_, u64>;
    /// Whether this caller is the one to act on `key` (a timer's firing): true for exactly
    /// one of any number of callers until `now_ms + ttl_ms`, after which the key is free
    /// again. Expired keys are forgotten as others are taken.
    fn once(&self, key: &str, now_ms: u64, ttl_ms: u64) -> StoreFuture<'_, bool>;
    /// The bot's gateway shard count the cluster agreed on, `None` until a node records one.
    fn shard_count(&self) -> StoreFuture<'_, Option<u32>>;
    /// Raises the cluster's shard count to `total` if it is lower (Discord closed a shard with
    /// 4011, or a node started with more), atomically; the count after. It is never lowered:
    /// nodes raising it together agree on the highest.
    fn raise_shard_count(&self, total: u32) -> StoreFuture<'_, u32>;
    /// Whether someone holds `key` (taken with [`ClusterStore::once`]) past `now_ms`, without
    /// taking it: a mark another caller left (a registration done) is read, not claimed.
    fn once_held(&self, key: &str, now_ms: u64) -> StoreFuture<'_, bool>;
}

/// Run capabilities by the digest of their token (issue 23): a capability minted on one node
/// is valid on every node, and its end (the run finished or was aborted) is seen by every node.
/// The token itself is never kept. Changes are acknowledged: a future resolves once durable.
/// Capabilities are short-lived (a run's timeout plus a minute): `store copy` leaves them.
pub trait CapabilityStore: Send + Sync {
    /// Keeps a minted capability. A digest already kept is left as it is, so an ended
    /// capability is never revived. A digest that is not 64 lowercase hex digits is
    /// [`crate::StoreErrorKind::Conflict`].
    fn save_capability(&self, capability: KeptCapability) -> StoreFuture<'_, ()>;
    /// The capability kept under `digest` (ended and expired ones too, until pruned); `None`
    /// for an unknown digest or one that is not a digest.
    fn capability(&self, digest: &str) -> StoreFuture<'_, Option<KeptCapability>>;
    /// Ends the capability kept under `digest` as `how`, atomically: true for the one caller
    /// that ended it, false when it had ended already or is not kept.
    fn end_capability(&self, digest: &str, how: CapabilityEnd) -> StoreFuture<'_, bool>;
    /// Forgets capabilities that expired at or before `now_ms`; how many went.
    fn prune_capabilities(&self, now_ms: u64) -> StoreFuture<'_, usize>;
}

/// The refusal of a capability whose digest is not 64 lowercase hex digits.
pub fn check_capability(capability: &KeptCapability) -> Result<(), StoreError> {
    if switchboard_records::capability::is_digest(&capability.digest) {
        Ok(())
    } else {
        Err(StoreError::new(
            crate::StoreErrorKind::Conflict,
            "a capability is kept by the SHA-256 digest of its token, 64 lowercase hex digits; hash the token first",
        ))
    }
}
