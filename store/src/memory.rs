//! The in-memory backend (`store.url = "memory:"`): every aggregate in maps behind one lock,
//! each change durable — as durable as this process — the moment it is made. Nothing outlives
//! the process. [`MemoryBackend::node`] gives a second handle over the same data with its own
//! origin, so tests can play two nodes sharing one database.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use entity::Snowflake;
use switchboard_records::approval::ApprovalState;
use switchboard_records::trigger::{first_id_at, CLAIMS_KEPT_MS};
use switchboard_records::{
    AgentBinding, Approval, AuditEntry, AuditFilter, AuditPage, AuditRow, Gap, IdempotencyKey,
    IdempotencyRequest, KeptKey, Message, MessageQuery, Role, SearchHit, SearchQuery, Session,
    SessionScope, Settlement, StoredAnswer, ThreadState, TriggerClaim, User, Workflow,
};

use crate::aggregates::{
    ready, AgentBindingStore, ApprovalStore, AuditStore, Backend, Census, ChangeFeed, Claim,
    Decided, Durable, IdempotencyStore, MessageStore, Reserved, ScopeStore, SearchStore, Snapshot,
    StoreFuture, TriggerStore, WorkflowStore,
};
use crate::error::{StoreError, StoreErrorKind};
use crate::feed::{Changed, FeedSender, Origin};
use crate::queue::QueueStats;
use crate::Retention;

mod agents;
mod bot_turns;
mod capabilities;
mod event_import;
mod events;
mod idempotency;
pub use agents::{
    check_end, count_firing, duplicate_run, lost_firing, set_status, unknown_schedule, waiting_runs,
};

/// How the memory backend keeps data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryOptions {
    /// What it keeps (audit rows are pruned as new ones come).
    pub retention: Retention,
    /// Most idempotency keys kept at once; past it, the answered key that would expire first
    /// is forgotten early.
    pub idempotency_keys: usize,
}

impl MemoryOptions {
    /// The default bound on idempotency keys (a day of a busy service's keyed calls).
    pub const DEFAULT_IDEMPOTENCY_KEYS: usize = 100_000;
}

impl Default for MemoryOptions {
    fn default() -> Self {
        MemoryOptions {
            retention: Retention::default(),
            idempotency_keys: Self::DEFAULT_IDEMPOTENCY_KEYS,
        }
    }
}

/// Deleted ids a channel remembers (as the SQLite backend keeps deleted rows until a prune).
const TOMBSTONES_PER_CHANNEL: usize = 256;

#[derive(Debug, Default)]
struct Channel {
    live: BTreeMap<Snowflake, Message>,
    deleted: BTreeSet<Snowflake>,
}

#[derive(Debug, Default)]
struct Data {
    sessions: BTreeMap<Snowflake, Session>,
    users: BTreeMap<Snowflake, User>,
    roles: BTreeMap<Snowflake, Role>,
    threads: BTreeMap<Snowflake, ThreadState>,
    channels: HashMap<Snowflake, Channel>,
    gaps: BTreeMap<Snowflake, Snowflake>,
    claims: HashMap<Snowflake, TriggerClaim>,
    workflows: BTreeMap<String, Workflow>,
    approvals: BTreeMap<String, Approval>,
    audit: BTreeMap<u64, AuditRow>,
    next_audit_id: u64,
    scopes: BTreeMap<Snowflake, Vec<String>>,
    agent_bindings: BTreeMap<Snowflake, String>,
    idempotency: idempotency::Keys,
    agents: agents::Kept,
    bot_turns: HashMap<Snowflake, crate::bot_turns::BotTurns>,
    capabilities: capabilities::Capabilities,
    events: events::Events,
}

#[derive(Debug)]
struct Shared {
    data: Mutex<Data>,
    options: MemoryOptions,
    /// Whether a second handle was made: then the data is shared.
    nodes: AtomicBool,
}

/// The in-memory backend; see the module doc.
#[derive(Debug)]
pub struct MemoryBackend {
    shared: Arc<Shared>,
    feed: FeedSender,
    closed: AtomicBool,
}

impl MemoryBackend {
    /// An empty store.
    pub fn new(options: MemoryOptions) -> MemoryBackend {
        MemoryBackend {
            shared: Arc::new(Shared {
                data: Mutex::new(Data::default()),
                options,
                nodes: AtomicBool::new(false),
            }),
            feed: FeedSender::new(Origin::next()),
            closed: AtomicBool::new(false),
        }
    }

    /// Another handle over the same data, as a second node would have: its changes carry its
    /// own origin, and both handles report the data as shared.
    pub fn node(&self) -> MemoryBackend {
        self.shared.nodes.store(true, Ordering::Relaxed);
        MemoryBackend {
            shared: Arc::clone(&self.shared),
            feed: self.feed.for_origin(Origin::next()),
            closed: AtomicBool::new(false),
        }
    }

    fn data(&self) -> MutexGuard<'_, Data> {
        self.shared
            .data
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn open(&self) -> Result<(), StoreError> {
        if self.closed.load(Ordering::Relaxed) {
            return Err(StoreError::closed("memory:"));
        }
        Ok(())
    }

    /// Applies a change under the lock, then publishes what changed.
    fn change(&self, changed: Changed, apply: impl FnOnce(&mut Data)) -> Result<(), StoreError> {
        self.open()?;
        apply(&mut self.data());
        self.feed.publish(changed);
        Ok(())
    }

    fn read<T: Send + 'static>(&self, read: impl FnOnce(&Data) -> T) -> StoreFuture<'_, T> {
        ready(self.open().map(|()| read(&self.data())))
    }
}

fn keep_newest(channel: &mut Channel, keep: usize) {
    while channel.live.len() > keep {
        channel.live.pop_first();
    }
    while channel.deleted.len() > TOMBSTONES_PER_CHANNEL {
        channel.deleted.pop_first();
    }
}

fn newest(channel: &Channel, query: MessageQuery) -> Vec<Message> {
    let lower = query.after.map_or(0, |id| id.0.saturating_add(1));
    let upper = query.before.map_or(u64::MAX, |id| id.0);
    if lower >= upper || query.limit == 0 {
        return Vec::new();
    }
    let mut out: Vec<Message> = channel
        .live
        .range(Snowflake(lower)..Snowflake(upper))
        .rev()
        .take(query.limit)
        .map(|(_, m)| m.clone())
        .collect();
    out.reverse();
    out
}

impl MessageStore for MemoryBackend {
    fn snapshot(&self, messages_per_channel: usize) -> StoreFuture<'_, Snapshot> {
        self.read(move |data| Snapshot {
            sessions: data.sessions.values().cloned().collect(),
            users: data.users.values().cloned().collect(),
            roles: data.roles.values().cloned().collect(),
            threads: data.threads.iter().map(|(id, s)| (*id, *s)).collect(),
            messages: data
                .channels
                .values()
                .flat_map(|c| newest(c, MessageQuery::newest(messages_per_channel)))
                .collect(),
            deleted: data
                .channels
                .iter()
                .flat_map(|(channel, c)| c.deleted.iter().map(move |id| (*channel, *id)))
                .collect(),
            gaps: data
                .gaps
                .iter()
                .map(|(channel_id, after)| Gap {
                    channel_id: *channel_id,
                    after: *after,
                })
                .collect(),
        })
    }

    fn upsert_session(&self, session: Session) -> Result<(), StoreError> {
        self.change(Changed::Session(session.id), |data| {
            data.sessions.insert(session.id, session);
        })
    }

    fn remove_session(&self, id: Snowflake) -> Result<(), StoreError> {
        self.change(Changed::SessionRemoved(id), |data| {
            data.sessions.remove(&id);
            data.threads.remove(&id);
        })
    }

    fn save_thread_state(&self, id: Snowflake, state: ThreadState) -> Result<(), StoreError> {
        let state = ThreadState {
            owner_id: None,
            ..state
        };
        self.change(Changed::Thread(id), |data| {
            data.threads.insert(id, state);
        })
    }

    fn upsert_user(&self, user: User) -> Result<(), StoreError> {
        self.change(Changed::User(user.id), |data| {
            data.users.insert(user.id, user);
        })
    }

    fn upsert_role(&self, role: Role) -> Result<(), StoreError> {
        self.change(Changed::Role(role.id), |data| {
            data.roles.insert(role.id, role);
        })
    }

    fn remove_role(&self, id: Snowflake) -> Result<(), StoreError> {
        self.change(Changed::RoleRemoved(id), |data| {
            data.roles.remove(&id);
        })
    }

    fn save_message(&self, message: Message) -> Result<(), StoreError> {
        let keep = self.shared.options.retention.messages_per_channel;
        let changed = Changed::Message {
            channel_id: message.channel_id,
            id: message.id,
        };
        self.change(changed, |data| {
            let channel = data.channels.entry(message.channel_id).or_default();
            channel.deleted.remove(&message.id);
            channel.live.insert(message.id, message);
            keep_newest(channel, keep);
        })
    }

    fn delete_messages(
        &self,
        channel_id: Snowflake,
        ids: Vec<Snowflake>,
    ) -> Result<(), StoreError> {
        let changed = Changed::MessagesDeleted {
            channel_id,
            ids: ids.clone(),
        };
        self.change(changed, |data| {
            let channel = data.channels.entry(channel_id).or_default();
            for id in ids {
                if channel.live.remove(&id).is_some() {
                    channel.deleted.insert(id);
                }
            }
            keep_newest(channel, usize::MAX);
        })
    }

    fn forget_channel(&self, channel_id: Snowflake) -> Result<(), StoreError> {
        self.change(Changed::ChannelForgotten(channel_id), |data| {
            data.channels.remove(&channel_id);
        })
    }

    fn open_gap(&self, gap: Gap) -> Result<(), StoreError> {
        self.change(Changed::Gap(gap.channel_id), |data| {
            let kept = data.gaps.entry(gap.channel_id).or_insert(gap.after);
            *kept = (*kept).min(gap.after);
        })
    }

    fn close_gap(&self, channel_id: Snowflake) -> Result<(), StoreError> {
        self.change(Changed::Gap(channel_id), |data| {
            data.gaps.remove(&channel_id);
        })
    }

    fn message(&self, channel_id: Snowflake, id: Snowflake) -> StoreFuture<'_, Option<Message>> {
        self.read(move |data| {
            data.channels
                .get(&channel_id)
                .and_then(|c| c.live.get(&id).cloned())
        })
    }

    fn messages(
        &self,
        channel_id: Snowflake,
        query: MessageQuery,
    ) -> StoreFuture<'_, Vec<Message>> {
        self.read(move |data| {
            data.channels
                .get(&channel_id)
                .map(|c| newest(c, query))
                .unwrap_or_default()
        })
    }

    fn session(&self, id: Snowflake) -> StoreFuture<'_, Option<Session>> {
        self.read(move |data| data.sessions.get(&id).cloned())
    }

    fn user(&self, id: Snowflake) -> StoreFuture<'_, Option<User>> {
        self.read(move |data| data.users.get(&id).cloned())
    }

    fn role(&self, id: Snowflake) -> StoreFuture<'_, Option<Role>> {
        self.read(move |data| data.roles.get(&id).cloned())
    }

    fn thread_state(&self, id: Snowflake) -> StoreFuture<'_, Option<ThreadState>> {
        self.read(move |data| data.threads.get(&id).copied())
    }

    fn gap(&self, channel_id: Snowflake) -> StoreFuture<'_, Option<Gap>> {
        self.read(move |data| {
            data.gaps.get(&channel_id).map(|after| Gap {
                channel_id,
                after: *after,
            })
        })
    }

    fn messages_after(
        &self,
        after: Option<Snowflake>,
        limit: usize,
    ) -> StoreFuture<'_, Vec<Message>> {
        self.read(move |data| {
            let lower = after.map_or(0, |id| id.0.saturating_add(1));
            let mut out: Vec<Message> = data
                .channels
                .values()
                .flat_map(|c| c.live.range(Snowflake(lower)..).take(limit))
                .map(|(_, m)| m.clone())
                .collect();
            out.sort_by_key(|m| m.id);
            out.truncate(limit);
            out
        })
    }
}

impl SearchStore for MemoryBackend {
    fn search(&self, query: SearchQuery, _budget: Duration) -> StoreFuture<'_, Vec<SearchHit>> {
        self.read(move |data| {
            crate::scan::search(
                &query,
                query
                    .channels
                    .iter()
                    .filter_map(|c| data.channels.get(c))
                    .flat_map(|c| c.live.values()),
            )
        })
    }
}

impl TriggerStore for MemoryBackend {
    fn claim_trigger(&self, claim: TriggerClaim) -> StoreFuture<'_, Claim> {
        if let Err(err) = self.open() {
            return ready(Err(err));
        }
        let message_id = claim.message_id;
        let won = {
            let mut data = self.data();
            if data.claims.contains_key(&message_id) {
                false
            } else {
                let below = first_id_at(claim.claimed_ms.saturating_sub(CLAIMS_KEPT_MS));
                data.claims.retain(|id, _| *id >= below);
                data.claims.insert(message_id, claim);
                true
            }
        };
        if won {
            self.feed.publish(Changed::TriggerClaimed(message_id));
            ready(Ok(Claim::Won(Durable::now())))
        } else {
            ready(Ok(Claim::Taken))
        }
    }

    fn is_claimed(&self, message_id: Snowflake) -> StoreFuture<'_, bool> {
        self.read(move |data| data.claims.contains_key(&message_id))
    }

    fn claims_after(
        &self,
        after: Option<Snowflake>,
        limit: usize,
    ) -> StoreFuture<'_, Vec<TriggerClaim>> {
        self.read(move |data| {
            let mut out: Vec<TriggerClaim> = data
                .claims
                .values()
                .filter(|c| after.is_none_or(|after| c.message_id > after))
                .cloned()
                .collect();
            out.sort_by_key(|c| c.message_id);
            out.truncate(limit);
            out
        })
    }
}

impl WorkflowStore for MemoryBackend {
    fn save_workflow(&self, workflow: &Workflow) -> Result<(), StoreError> {
        let workflow = workflow.clone();
        self.change(Changed::Workflow(workflow.workflow_id.clone()), |data| {
            data.workflows
                .insert(workflow.workflow_id.clone(), workflow);
        })
    }

    fn workflows(&self) -> StoreFuture<'_, Vec<Workflow>> {
        self.read(|data| data.workflows.values().cloned().collect())
    }

    fn workflow(&self, id: &str) -> StoreFuture<'_, Option<Workflow>> {
        let id = id.to_owned();
        self.read(move |data| data.workflows.get(&id).cloned())
    }
}

/// Settles `approval` as `settlement` at `at_ms` when it is still pending: the rule every
/// backend follows (an approve or deny past the expiry expires it instead). True when this
/// settlement took.
pub fn settle(approval: &mut Approval, settlement: &Settlement, at_ms: u64) -> bool {
    let ApprovalState::Pending { expires_at_ms } = approval.card.state else {
        return false;
    };
    if at_ms >= expires_at_ms && *settlement != Settlement::Expire {
        approval.card.state = ApprovalState::Expired {
            at_ms: expires_at_ms,
        };
        return false;
    }
    approval.card.state = settlement.state(at_ms);
    true
}

impl ApprovalStore for MemoryBackend {
    fn save_approval(&self, approval: Approval) -> Result<(), StoreError> {
        let id = approval.card.id.clone();
        self.change(Changed::Approval(id.clone()), |data| {
            match data.approvals.get(&id) {
                Some(kept) if !kept.is_pending() => {}
                _ => {
                    data.approvals.insert(id, approval);
                }
            }
        })
    }

    fn decide_approval(
        &self,
        id: &str,
        settlement: Settlement,
        at_ms: u64,
    ) -> StoreFuture<'_, Decided> {
        if let Err(err) = self.open() {
            return ready(Err(err));
        }
        let answer = {
            let mut data = self.data();
            match data.approvals.get_mut(id) {
                None => Err(StoreError::new(
                    StoreErrorKind::NotFound,
                    format!("no approval {id} is kept"),
                )),
                Some(approval) => {
                    let was_pending = approval.is_pending();
                    if settle(approval, &settlement, at_ms) {
                        Ok((true, Decided::Decided(approval.clone())))
                    } else {
                        // Expired just now (an approve past its expiry), or settled before.
                        Ok((was_pending, Decided::AlreadyDecided(approval.clone())))
                    }
                }
            }
        };
        ready(answer.map(|(changed, decided)| {
            if changed {
                self.feed.publish(Changed::Approval(id.to_owned()));
            }
            decided
        }))
    }

    fn approval(&self, id: &str) -> StoreFuture<'_, Option<Approval>> {
        let id = id.to_owned();
        self.read(move |data| data.approvals.get(&id).cloned())
    }

    fn pending_approvals(&self) -> StoreFuture<'_, Vec<Approval>> {
        self.read(|data| {
            data.approvals
                .values()
                .filter(|a| a.is_pending())
                .cloned()
                .collect()
        })
    }

    fn approvals(&self) -> StoreFuture<'_, Vec<Approval>> {
        self.read(|data| data.approvals.values().cloned().collect())
    }
}

impl AuditStore for MemoryBackend {
    fn record(&self, row: AuditRow) -> Result<(), StoreError> {
        self.open()?;
        let retention = self.shared.options.retention.audit_retention_ms();
        let mut data = self.data();
        data.next_audit_id += 1;
        let id = data.next_audit_id;
        let oldest = row.time_ms.saturating_sub(retention);
        data.audit.insert(id, row);
        while data
            .audit
            .first_key_value()
            .is_some_and(|(_, row)| row.time_ms < oldest)
        {
            data.audit.pop_first();
        }
        Ok(())
    }

    fn audit_page(&self, filter: AuditFilter) -> StoreFuture<'_, AuditPage> {
        self.read(move |data| {
            switchboard_records::audit::page(data.audit.iter().map(|(id, row)| (*id, row)), &filter)
        })
    }

    fn prune_audit(&self, before_ms: u64) -> StoreFuture<'_, usize> {
        ready(self.open().map(|()| {
            let mut data = self.data();
            let before = data.audit.len();
            data.audit.retain(|_, row| row.time_ms >= before_ms);
            before - data.audit.len()
        }))
    }

    fn audit_after(&self, after_id: u64, limit: usize) -> StoreFuture<'_, Vec<AuditEntry>> {
        self.read(move |data| {
            data.audit
                .range(after_id.saturating_add(1)..)
                .take(limit)
                .map(|(id, row)| AuditEntry {
                    id: *id,
                    row: row.clone(),
                })
                .collect()
        })
    }

    fn import_audit(&self, entries: Vec<AuditEntry>) -> Result<(), StoreError> {
        self.open()?;
        let mut data = self.data();
        for entry in entries {
            data.next_audit_id = data.next_audit_id.max(entry.id);
            data.audit.entry(entry.id).or_insert(entry.row);
        }
        Ok(())
    }
}

impl AgentBindingStore for MemoryBackend {
    fn bind_agent(&self, session_id: Snowflake, agent: Option<String>) -> StoreFuture<'_, ()> {
        ready(self.open().map(|()| {
            let mut data = self.data();
            match agent {
                Some(agent) => data.agent_bindings.insert(session_id, agent),
                None => data.agent_bindings.remove(&session_id),
            };
        }))
    }

    fn bound_agent(&self, session_id: Snowflake) -> StoreFuture<'_, Option<String>> {
        self.read(move |data| data.agent_bindings.get(&session_id).cloned())
    }

    fn agent_bindings(&self) -> StoreFuture<'_, Vec<AgentBinding>> {
        self.read(|data| {
            data.agent_bindings
                .iter()
                .map(|(session_id, agent)| AgentBinding {
                    session_id: *session_id,
                    agent: agent.clone(),
                })
                .collect()
        })
    }
}

impl ScopeStore for MemoryBackend {
    fn set_session_scope(
        &self,
        session_id: Snowflake,
        scope: Option<Vec<String>>,
    ) -> Result<(), StoreError> {
        self.change(Changed::Scope(session_id), |data| match scope {
            Some(scope) => {
                data.scopes.insert(session_id, scope);
            }
            None => {
                data.scopes.remove(&session_id);
            }
        })
    }

    fn session_scopes(&self) -> StoreFuture<'_, Vec<SessionScope>> {
        self.read(|data| {
            data.scopes
                .iter()
                .map(|(session_id, scope)| SessionScope {
                    session_id: *session_id,
                    scope: scope.clone(),
                })
                .collect()
        })
    }
}

impl IdempotencyStore for MemoryBackend {
    fn reserve_idempotency(&self, request: IdempotencyRequest) -> StoreFuture<'_, Reserved> {
        if let Err(err) = self.open() {
            return ready(Err(err));
        }
        let cap = self.shared.options.idempotency_keys;
        ready(self.data().idempotency.reserve(request, cap))
    }

    fn complete_idempotency(
        &self,
        key: &IdempotencyKey,
        answer: StoredAnswer,
    ) -> StoreFuture<'_, ()> {
        let result = self.open().and_then(|()| {
            if self.data().idempotency.complete(key, answer) {
                Ok(())
            } else {
                Err(StoreError::new(
                    StoreErrorKind::NotFound,
                    format!(
                        "the idempotency key {} of {} is not reserved (it expired?)",
                        key.key, key.caller
                    ),
                ))
            }
        });
        ready(result)
    }

    fn release_idempotency(&self, key: &IdempotencyKey) -> StoreFuture<'_, ()> {
        ready(self.open().map(|()| self.data().idempotency.release(key)))
    }

    fn idempotency_keys_after(
        &self,
        after: Option<IdempotencyKey>,
        limit: usize,
    ) -> StoreFuture<'_, Vec<KeptKey>> {
        self.read(move |data| data.idempotency.after(after.as_ref(), limit))
    }
}

impl ChangeFeed for MemoryBackend {
    fn feed(&self) -> &FeedSender {
        &self.feed
    }

    fn shared(&self) -> bool {
        self.shared.nodes.load(Ordering::Relaxed)
    }
}

impl Backend for MemoryBackend {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn location(&self) -> String {
        "memory:".to_owned()
    }

    fn flush(&self) -> StoreFuture<'_, ()> {
        ready(self.open())
    }

    fn close(&self) -> StoreFuture<'_, ()> {
        self.closed.store(true, Ordering::Relaxed);
        ready(Ok(()))
    }

    fn queue_stats(&self) -> QueueStats {
        QueueStats::default()
    }

    fn census(&self) -> StoreFuture<'_, Census> {
        self.read(|data| {
            let count = |n: usize| n as u64;
            Census {
                messages: count(data.channels.values().map(|c| c.live.len()).sum()),
                sessions: count(data.sessions.len()),
                users: count(data.users.len()),
                roles: count(data.roles.len()),
                threads: count(data.threads.len()),
                gaps: count(data.gaps.len()),
                claims: count(data.claims.len()),
                workflows: count(data.workflows.len()),
                approvals: count(data.approvals.len()),
                audit: count(data.audit.len()),
                scopes: count(data.scopes.len()),
                agent_bindings: count(data.agent_bindings.len()),
                idempotency_keys: count(data.idempotency.len()),
                notes: count(data.agents.notes.len()),
                summaries: count(data.agents.summaries.values().map(Vec::len).sum()),
                runs: count(data.agents.runs.len()),
                schedules: count(data.agents.schedules.len()),
                usage: count(data.agents.usage.len()),
                events: 0,
            }
        })
    }
}
