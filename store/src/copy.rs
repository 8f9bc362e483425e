//! Copying one store into another (`switchboard store copy --from … --to …`): every kind of
//! thing a store keeps, through the traits, so any backend copies to any other.
//!
//! The copy is a merge: each kind is read from both stores in key order, a page at a time, and
//! only what the target lacks (or holds differently) is written. So it is idempotent (running
//! it again writes nothing) and resumable (a copy stopped half-way — a crash, Ctrl-C, a lost
//! connection — is finished by running it again, which writes only the rest). The target is
//! flushed after every page, so what a copy wrote before it stopped is kept. Nothing in the
//! target is deleted: a copy adds the source's things to it.
//!
//! Audit rows and events keep their ids (so a second run recognises them); trigger claims, idempotency
//! keys (with their answers and expiry) and approvals (pending or settled) are copied as they
//! stand. A message's deleted-but-not-pruned copies are not moved: they are not data, only a
//! guard the cache rebuilds.

use std::cmp::Reverse;
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::ops::ControlFlow;

use entity::Snowflake;
use futures_executor::block_on;
use switchboard_records::{
    ApprovalState, AuditEntry, IdempotencyKey, IdempotencyRequest, KeptKey, KeptUsage, Message,
    Note, NoteLimits, NoteScope, Run, RunFilter, Schedule, Settlement, Summary, TriggerClaim,
};

use crate::aggregates::{Backend, Census};
use crate::error::StoreError;
use crate::events::KeptEvent;

/// Items read per page.
const PAGE: usize = 1_000;

/// A kind of thing a store keeps, in the order a copy moves them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Sessions (channels, threads, DMs...).
    Sessions,
    /// Users.
    Users,
    /// Roles.
    Roles,
    /// Thread states.
    Threads,
    /// Messages, with their attachments and reactions.
    Messages,
    /// Backfill gaps.
    Gaps,
    /// Answered-trigger records.
    Claims,
    /// Workflows.
    Workflows,
    /// Approvals.
    Approvals,
    /// Audit rows.
    Audit,
    /// `/tools` scope overrides.
    Scopes,
    /// `/agent set` bindings.
    AgentBindings,
    /// Idempotency keys.
    IdempotencyKeys,
    /// The agent's notes.
    Notes,
    /// Session summaries.
    Summaries,
    /// Schedules (their receipts are not copied).
    Schedules,
    /// Runs, under their queue places.
    Runs,
    /// Model usage rows, under their ids.
    Usage,
    /// The live feed's events, under their ids (so a client's `Last-Event-ID` means the same
    /// event in the target).
    Events,
}

impl Kind {
    /// Every kind, in copy order.
    pub const ALL: [Kind; 19] = [
        Kind::Sessions,
        Kind::Users,
        Kind::Roles,
        Kind::Threads,
        Kind::Messages,
        Kind::Gaps,
        Kind::Claims,
        Kind::Workflows,
        Kind::Approvals,
        Kind::Audit,
        Kind::Scopes,
        Kind::AgentBindings,
        Kind::IdempotencyKeys,
        Kind::Notes,
        Kind::Summaries,
        Kind::Schedules,
        Kind::Runs,
        Kind::Usage,
        Kind::Events,
    ];

    /// Its name in reports (`messages`, `idempotency keys`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Sessions => "sessions",
            Kind::Users => "users",
            Kind::Roles => "roles",
            Kind::Threads => "threads",
            Kind::Messages => "messages",
            Kind::Gaps => "gaps",
            Kind::Claims => "answered triggers",
            Kind::Workflows => "workflows",
            Kind::Approvals => "approvals",
            Kind::Audit => "audit rows",
            Kind::Scopes => "scopes",
            Kind::AgentBindings => "agent bindings",
            Kind::IdempotencyKeys => "idempotency keys",
            Kind::Notes => "notes",
            Kind::Summaries => "summaries",
            Kind::Schedules => "schedules",
            Kind::Runs => "runs",
            Kind::Usage => "usage rows",
            Kind::Events => "events",
        }
    }

    /// How many of it a census counts.
    pub fn count(self, census: &Census) -> u64 {
        match self {
            Kind::Sessions => census.sessions,
            Kind::Users => census.users,
            Kind::Roles => census.roles,
            Kind::Threads => census.threads,
            Kind::Messages => census.messages,
            Kind::Gaps => census.gaps,
            Kind::Claims => census.claims,
            Kind::Workflows => census.workflows,
            Kind::Approvals => census.approvals,
            Kind::Audit => census.audit,
            Kind::Scopes => census.scopes,
            Kind::AgentBindings => census.agent_bindings,
            Kind::IdempotencyKeys => census.idempotency_keys,
            Kind::Notes => census.notes,
            Kind::Summaries => census.summaries,
            Kind::Schedules => census.schedules,
            Kind::Runs => census.runs,
            Kind::Usage => census.usage,
            Kind::Events => census.events,
        }
    }
}

/// Where a copy is: `done` of the source's `total` of `kind` looked at, `written` of them
/// written to the target this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// The kind being copied.
    pub kind: Kind,
    /// Items of the source looked at so far.
    pub done: u64,
    /// Items of it the source held when the copy began.
    pub total: u64,
    /// Items written to the target so far (the rest were there already).
    pub written: u64,
}

/// One kind's count on both sides after a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    /// The kind.
    pub kind: Kind,
    /// How many the source holds.
    pub source: u64,
    /// How many the target holds.
    pub target: u64,
    /// How many this run wrote.
    pub written: u64,
}

impl fmt::Display for Counted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} in source, {} in target",
            self.kind.name(),
            self.source,
            self.target
        )
    }
}

/// What a finished copy found: one line per kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyReport {
    /// Each kind's counts, in copy order.
    pub counts: Vec<Counted>,
}

impl CopyReport {
    /// Whether the target holds as many of every kind as the source (it may hold more: a copy
    /// never deletes; fewer messages when its retention keeps fewer per channel).
    pub fn complete(&self) -> bool {
        self.counts.iter().all(|c| c.target >= c.source)
    }

    /// How many items this run wrote, of every kind.
    pub fn written(&self) -> u64 {
        self.counts.iter().map(|c| c.written).sum()
    }
}

impl fmt::Display for CopyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for count in &self.counts {
            writeln!(f, "{count}")?;
        }
        Ok(())
    }
}

/// Why a copy stopped.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The source could not be read.
    #[error("reading {what} from the source failed: {source}")]
    Source {
        /// What was being read.
        what: &'static str,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// The target could not be written or read.
    #[error("writing {what} to the target failed: {source}; what was copied so far is kept, run the copy again to finish it")]
    Target {
        /// What was being written.
        what: &'static str,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// The progress callback asked to stop; what was copied so far is kept.
    #[error("the copy was stopped; what was copied so far is kept, run it again to finish it")]
    Interrupted,
}

fn source(what: &'static str) -> impl FnOnce(StoreError) -> CopyError {
    move |source| CopyError::Source { what, source }
}

fn target(what: &'static str) -> impl FnOnce(StoreError) -> CopyError {
    move |source| CopyError::Target { what, source }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One kind being copied: counts what it looked at and wrote, and reports.
struct Tally<'p> {
    kind: Kind,
    total: u64,
    done: u64,
    written: u64,
    progress: &'p mut dyn FnMut(&Progress) -> ControlFlow<()>,
}

impl Tally<'_> {
    fn report(&mut self) -> Result<(), CopyError> {
        let progress = Progress {
            kind: self.kind,
            done: self.done,
            total: self.total,
            written: self.written,
        };
        match (self.progress)(&progress) {
            ControlFlow::Continue(()) => Ok(()),
            ControlFlow::Break(()) => Err(CopyError::Interrupted),
        }
    }
}

/// Reads a store's pages of one kind in key order, as one stream.
struct Pages<T, K, F> {
    buffer: VecDeque<T>,
    after: Option<K>,
    exhausted: bool,
    read: F,
}

impl<T, K: Clone, F: FnMut(Option<K>) -> Result<Vec<T>, CopyError>> Pages<T, K, F> {
    fn new(read: F) -> Self {
        Pages {
            buffer: VecDeque::new(),
            after: None,
            exhausted: false,
            read,
        }
    }

    /// The next item's key without taking it.
    fn peek(&mut self, key: impl Fn(&T) -> K) -> Result<Option<&T>, CopyError> {
        if self.buffer.is_empty() && !self.exhausted {
            let page = (self.read)(self.after.clone())?;
            self.exhausted = page.len() < PAGE;
            if let Some(last) = page.last() {
                self.after = Some(key(last));
            }
            self.buffer.extend(page);
        }
        Ok(self.buffer.front())
    }

    fn take(&mut self) -> Option<T> {
        self.buffer.pop_front()
    }
}

/// Merges a source and a target stream by key: calls `write` with each source item the target
/// lacks or holds differently; flushes the target after every page's worth.
fn merge<T: PartialEq, K: Ord + Clone>(
    tally: &mut Tally<'_>,
    to: &dyn Backend,
    mut from_pages: Pages<T, K, impl FnMut(Option<K>) -> Result<Vec<T>, CopyError>>,
    mut to_pages: Pages<T, K, impl FnMut(Option<K>) -> Result<Vec<T>, CopyError>>,
    key: impl Fn(&T) -> K + Copy,
    mut write: impl FnMut(T) -> Result<(), CopyError>,
) -> Result<(), CopyError> {
    let mut since_flush = 0usize;
    while let Some(item) = from_pages.peek(key)? {
        let wanted = key(item);
        // Skip the target's items before this one (the target may hold more than the source).
        let mut present = false;
        while let Some(other) = to_pages.peek(key)? {
            match key(other).cmp(&wanted) {
                std::cmp::Ordering::Less => {
                    to_pages.take();
                }
                std::cmp::Ordering::Equal => {
                    present = true;
                    break;
                }
                std::cmp::Ordering::Greater => break,
            }
        }
        let item = from_pages.take().expect("peeked");
        let same = present && to_pages.take().is_some_and(|other| other == item);
        tally.done += 1;
        if !same {
            write(item)?;
            tally.written += 1;
            since_flush += 1;
        }
        if tally.done.is_multiple_of(PAGE as u64) {
            if since_flush > 0 {
                block_on(to.flush()).map_err(target(tally.kind.name()))?;
                since_flush = 0;
            }
            tally.report()?;
        }
    }
    block_on(to.flush()).map_err(target(tally.kind.name()))?;
    tally.report()
}

/// Writes each of `items` the target lacks or holds differently (`kept`: the target's, by key).
fn small<T: PartialEq, K: Ord>(
    tally: &mut Tally<'_>,
    to: &dyn Backend,
    items: Vec<T>,
    kept: &BTreeMap<K, T>,
    key: impl Fn(&T) -> K,
    mut write: impl FnMut(T) -> Result<(), StoreError>,
) -> Result<(), CopyError> {
    for item in items {
        tally.done += 1;
        if kept.get(&key(&item)) != Some(&item) {
            write(item).map_err(target(tally.kind.name()))?;
            tally.written += 1;
        }
    }
    block_on(to.flush()).map_err(target(tally.kind.name()))?;
    tally.report()
}

/// Copies everything `from` keeps into `to`; see the module doc. `progress` is called after
/// every page of every kind (and once at each kind's end); answering `Break` stops the copy
/// with [`CopyError::Interrupted`] (what was copied is kept). Blocks until done.
pub fn copy_all(
    from: &dyn Backend,
    to: &dyn Backend,
    progress: &mut dyn FnMut(&Progress) -> ControlFlow<()>,
) -> Result<CopyReport, CopyError> {
    let totals = census(from).map_err(source("the counts"))?;
    let mut written: BTreeMap<Kind, u64> = BTreeMap::new();
    let snapshot = block_on(from.snapshot(0)).map_err(source("sessions, users and roles"))?;
    let kept = block_on(to.snapshot(0)).map_err(target("sessions, users and roles"))?;
    for kind in Kind::ALL {
        let mut tally = Tally {
            kind,
            total: kind.count(&totals),
            done: 0,
            written: 0,
            progress: &mut *progress,
        };
        match kind {
            Kind::Sessions => small(
                &mut tally,
                to,
                snapshot.sessions.clone(),
                &kept.sessions.iter().map(|s| (s.id, s.clone())).collect(),
                |s| s.id,
                |s| to.upsert_session(s),
            )?,
            Kind::Users => small(
                &mut tally,
                to,
                snapshot.users.clone(),
                &kept.users.iter().map(|u| (u.id, u.clone())).collect(),
                |u| u.id,
                |u| to.upsert_user(u),
            )?,
            Kind::Roles => small(
                &mut tally,
                to,
                snapshot.roles.clone(),
                &kept.roles.iter().map(|r| (r.id, r.clone())).collect(),
                |r| r.id,
                |r| to.upsert_role(r),
            )?,
            Kind::Threads => small(
                &mut tally,
                to,
                snapshot.threads.clone(),
                &kept.threads.iter().map(|t| (t.0, *t)).collect(),
                |t| t.0,
                |(id, state)| to.save_thread_state(id, state),
            )?,
            Kind::Messages => merge(
                &mut tally,
                to,
                Pages::new(|after: Option<Snowflake>| {
                    block_on(from.messages_after(after, PAGE)).map_err(source("messages"))
                }),
                Pages::new(|after: Option<Snowflake>| {
                    block_on(to.messages_after(after, PAGE)).map_err(target("messages"))
                }),
                |m: &Message| m.id,
                |m| to.save_message(m).map_err(target("messages")),
            )?,
            Kind::Gaps => small(
                &mut tally,
                to,
                snapshot.gaps.clone(),
                &kept.gaps.iter().map(|g| (g.channel_id, *g)).collect(),
                |g| g.channel_id,
                |g| to.open_gap(g),
            )?,
            Kind::Claims => merge(
                &mut tally,
                to,
                Pages::new(|after: Option<Snowflake>| {
                    block_on(from.claims_after(after, PAGE)).map_err(source("answered triggers"))
                }),
                Pages::new(|after: Option<Snowflake>| {
                    block_on(to.claims_after(after, PAGE)).map_err(target("answered triggers"))
                }),
                |c: &TriggerClaim| c.message_id,
                // A claim held differently (another time) is still the same claim.
                |c| {
                    block_on(to.claim_trigger(c))
                        .map(drop)
                        .map_err(target("answered triggers"))
                },
            )?,
            Kind::Workflows => {
                let workflows = block_on(from.workflows()).map_err(source("workflows"))?;
                let kept = block_on(to.workflows()).map_err(target("workflows"))?;
                small(
                    &mut tally,
                    to,
                    workflows,
                    &kept
                        .into_iter()
                        .map(|w| (w.workflow_id.clone(), w))
                        .collect(),
                    |w| w.workflow_id.clone(),
                    |w| to.save_workflow(&w),
                )?;
            }
            Kind::Approvals => {
                let approvals = block_on(from.approvals()).map_err(source("approvals"))?;
                let kept = block_on(to.approvals()).map_err(target("approvals"))?;
                let kept: BTreeMap<String, _> =
                    kept.into_iter().map(|a| (a.card.id.clone(), a)).collect();
                let mut settle = Vec::new();
                small(
                    &mut tally,
                    to,
                    approvals,
                    &kept,
                    |a| a.card.id.clone(),
                    |a| {
                        // One pending in the target but settled in the source is settled the same
                        // way; a save would not change it.
                        if kept
                            .get(a.id())
                            .is_some_and(switchboard_records::Approval::is_pending)
                            && !a.is_pending()
                        {
                            settle.push(a);
                            Ok(())
                        } else {
                            to.save_approval(a)
                        }
                    },
                )?;
                for approval in settle {
                    let (settlement, at_ms) = match approval.card.state.clone() {
                        ApprovalState::Approved { by, at_ms } => {
                            (Settlement::Approve { by }, at_ms)
                        }
                        ApprovalState::Denied { by, at_ms } => (Settlement::Deny { by }, at_ms),
                        ApprovalState::Expired { at_ms } => (Settlement::Expire, at_ms),
                        ApprovalState::Cancelled { at_ms } => (Settlement::Cancel, at_ms),
                        ApprovalState::Pending { .. } => continue,
                    };
                    block_on(to.decide_approval(approval.id(), settlement, at_ms))
                        .map_err(target("approvals"))?;
                }
            }
            Kind::Audit => merge(
                &mut tally,
                to,
                Pages::new(|after: Option<u64>| {
                    block_on(from.audit_after(after.unwrap_or(0), PAGE))
                        .map_err(source("audit rows"))
                }),
                Pages::new(|after: Option<u64>| {
                    block_on(to.audit_after(after.unwrap_or(0), PAGE)).map_err(target("audit rows"))
                }),
                |e: &AuditEntry| e.id,
                // Rows go one import at a time here; the backend batches its queue anyway.
                |e| to.import_audit(vec![e]).map_err(target("audit rows")),
            )?,
            Kind::Scopes => {
                let scopes = block_on(from.session_scopes()).map_err(source("scopes"))?;
                let kept = block_on(to.session_scopes()).map_err(target("scopes"))?;
                small(
                    &mut tally,
                    to,
                    scopes,
                    &kept.into_iter().map(|s| (s.session_id, s)).collect(),
                    |s| s.session_id,
                    |s| to.set_session_scope(s.session_id, Some(s.scope)),
                )?;
            }
            Kind::AgentBindings => {
                let bindings = block_on(from.agent_bindings()).map_err(source("agent bindings"))?;
                let kept = block_on(to.agent_bindings()).map_err(target("agent bindings"))?;
                small(
                    &mut tally,
                    to,
                    bindings,
                    &kept.into_iter().map(|b| (b.session_id, b)).collect(),
                    |b| b.session_id,
                    |b| block_on(to.bind_agent(b.session_id, Some(b.agent))),
                )?;
            }
            Kind::IdempotencyKeys => {
                let now = now_ms();
                merge(
                    &mut tally,
                    to,
                    Pages::new(|after: Option<IdempotencyKey>| {
                        block_on(from.idempotency_keys_after(after, PAGE))
                            .map_err(source("idempotency keys"))
                    }),
                    Pages::new(|after: Option<IdempotencyKey>| {
                        block_on(to.idempotency_keys_after(after, PAGE))
                            .map_err(target("idempotency keys"))
                    }),
                    |k: &KeptKey| k.key.clone(),
                    |k| copy_key(to, k, now),
                )?;
            }
            Kind::Notes => merge(
                &mut tally,
                to,
                Pages::new(|after: Option<(NoteScope, String)>| {
                    block_on(from.notes_after(after, PAGE)).map_err(source("notes"))
                }),
                Pages::new(|after: Option<(NoteScope, String)>| {
                    block_on(to.notes_after(after, PAGE)).map_err(target("notes"))
                }),
                |n: &Note| (n.scope, n.key.clone()),
                // The source kept it within its limits; the target takes it as it is.
                |n| {
                    block_on(to.put_note(n, NoteLimits::NONE))
                        .map(drop)
                        .map_err(target("notes"))
                },
            )?,
            Kind::Summaries => copy_summaries(&mut tally, from, to)?,
            Kind::Schedules => merge(
                &mut tally,
                to,
                Pages::new(|after: Option<String>| {
                    block_on(from.schedules(after, PAGE)).map_err(source("schedules"))
                }),
                Pages::new(|after: Option<String>| {
                    block_on(to.schedules(after, PAGE)).map_err(target("schedules"))
                }),
                |s: &Schedule| s.id.clone(),
                |s| block_on(to.save_schedule(s)).map_err(target("schedules")),
            )?,
            // Newest first, the order runs are listed in.
            Kind::Runs => merge(
                &mut tally,
                to,
                Pages::new(|after: Option<Reverse<u64>>| {
                    block_on(from.runs(runs_before(after))).map_err(source("runs"))
                }),
                Pages::new(|after: Option<Reverse<u64>>| {
                    block_on(to.runs(runs_before(after))).map_err(target("runs"))
                }),
                |r: &Run| Reverse(r.seq),
                |r| block_on(to.import_runs(vec![r])).map_err(target("runs")),
            )?,
            Kind::Usage => merge(
                &mut tally,
                to,
                Pages::new(|after: Option<u64>| {
                    block_on(from.usage_after(after.unwrap_or(0), PAGE))
                        .map_err(source("usage rows"))
                }),
                Pages::new(|after: Option<u64>| {
                    block_on(to.usage_after(after.unwrap_or(0), PAGE)).map_err(target("usage rows"))
                }),
                |u: &KeptUsage| u.id,
                |u| block_on(to.import_usage(vec![u])).map_err(target("usage rows")),
            )?,
            // Events go one import at a time, in id order; the merge flushes after each page.
            Kind::Events => merge(
                &mut tally,
                to,
                Pages::new(|after: Option<u64>| {
                    block_on(from.events_after(after.unwrap_or(0), PAGE)).map_err(source("events"))
                }),
                Pages::new(|after: Option<u64>| {
                    block_on(to.events_after(after.unwrap_or(0), PAGE)).map_err(target("events"))
                }),
                |e: &KeptEvent| e.id,
                |e| block_on(to.import_events(vec![e])).map_err(target("events")),
            )?,
        }
        written.insert(kind, tally.written);
    }
    let source_counts = census(from).map_err(source("the counts"))?;
    let target_counts = census(to).map_err(target("the counts"))?;
    Ok(CopyReport {
        counts: Kind::ALL
            .iter()
            .map(|kind| Counted {
                kind: *kind,
                source: kind.count(&source_counts),
                target: kind.count(&target_counts),
                written: written.get(kind).copied().unwrap_or(0),
            })
            .collect(),
    })
}

/// A store's census with its events counted (a page at a time: a backend's own census leaves
/// them out, as the live feed keeps only its newest).
fn census(store: &dyn Backend) -> Result<Census, StoreError> {
    let mut census = block_on(store.census())?;
    let mut after = 0;
    loop {
        let page = block_on(store.events_after(after, PAGE))?;
        census.events += page.len() as u64;
        match page.last() {
            // A page shorter than asked may still not be the last (a backend reads at most
            // MAX_EVENTS_READ): only an empty page ends it.
            Some(last) => after = last.id,
            None => return Ok(census),
        }
    }
}

/// A page of runs queued before `after` (newest first).
fn runs_before(after: Option<Reverse<u64>>) -> RunFilter {
    RunFilter {
        before_seq: after.map(|Reverse(seq)| seq),
        limit: PAGE.min(RunFilter::MAX_LIMIT),
        ..RunFilter::default()
    }
}

/// Sessions whose summaries are read per page.
const SUMMARY_SESSIONS: usize = 100;

/// Copies each session's summaries the target lacks, oldest first (so the newest stays the
/// newest).
fn copy_summaries(
    tally: &mut Tally<'_>,
    from: &dyn Backend,
    to: &dyn Backend,
) -> Result<(), CopyError> {
    let mut after = None;
    loop {
        let page =
            block_on(from.summaries_after(after, SUMMARY_SESSIONS)).map_err(source("summaries"))?;
        let Some(last) = page.last() else { break };
        after = Some(last.session_id);
        let mut kept: BTreeMap<Snowflake, Vec<Summary>> = BTreeMap::new();
        for summary in page {
            let session = summary.session_id;
            let theirs = match kept.entry(session) {
                Entry::Occupied(theirs) => theirs.into_mut(),
                Entry::Vacant(slot) => slot.insert(
                    block_on(to.summaries(session, usize::MAX)).map_err(target("summaries"))?,
                ),
            };
            tally.done += 1;
            if let Some(at) = theirs.iter().position(|s| *s == summary) {
                theirs.swap_remove(at);
            } else {
                block_on(to.save_summary(summary)).map_err(target("summaries"))?;
                tally.written += 1;
            }
        }
        tally.report()?;
    }
    tally.report()
}

/// Reserves a key in the target for what is left of its lifetime, with its answer.
fn copy_key(to: &dyn Backend, kept: KeptKey, now: u64) -> Result<(), CopyError> {
    if kept.expires_ms <= now {
        return Ok(());
    }
    block_on(to.reserve_idempotency(IdempotencyRequest {
        key: kept.key.clone(),
        input_hash: kept.input_hash,
        now_ms: now,
        ttl_ms: kept.expires_ms - now,
    }))
    .map_err(target("idempotency keys"))?;
    if let Some(answer) = kept.answer {
        block_on(to.complete_idempotency(&kept.key, answer)).map_err(target("idempotency keys"))?;
    }
    Ok(())
}
