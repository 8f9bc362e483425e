//! The memory backend's agent aggregates: memory, runs, schedules, usage, the cluster. Each
//! answer is made under the backend's one lock, so every decision is atomic.

use std::collections::{BTreeMap, HashMap};

use entity::Snowflake;
use switchboard_records::cluster::NODES_KEPT_MS;
use switchboard_records::notes::SUMMARIES_KEPT_PER_SESSION;
use switchboard_records::schedule::RECEIPTS_KEPT_PER_SCHEDULE;
use switchboard_records::usage::fold_usage;
use switchboard_records::{
    AfterFiring, FiringClaim, KeptUsage, Lease, NewRun, Node, NodeBeat, Note, NoteLimits,
    NoteScope, Receipt, Run, RunEnd, RunFilter, RunJoin, RunState, Schedule, ScheduleStatus,
    ShardLease, Summary, UsageGroup, UsageQuery, UsageRow, UsageSubject, UsageTotals,
};

use super::MemoryBackend;
use crate::aggregates::{
    ready, ClusterStore, Enqueued, Firing, Heartbeat, MemoryStore, NotePut, RunStore,
    ScheduleStore, ShardGrant, StoreFuture, UsageStore,
};
use crate::error::{StoreError, StoreErrorKind};

/// What the agent aggregates keep.
#[derive(Debug, Default)]
pub(super) struct Kept {
    /// Per session: (save order, summary).
    pub(super) summaries: BTreeMap<Snowflake, Vec<(u64, Summary)>>,
    summaries_saved: u64,
    /// By (scope as text, key).
    pub(super) notes: BTreeMap<(String, String), Note>,
    pub(super) runs: BTreeMap<String, Run>,
    next_seq: u64,
    pub(super) schedules: BTreeMap<String, Schedule>,
    /// Per schedule, oldest first.
    receipts: HashMap<String, Vec<Receipt>>,
    /// By id.
    pub(super) usage: BTreeMap<u64, UsageRow>,
    next_usage_id: u64,
    nodes: BTreeMap<String, Node>,
    shards: BTreeMap<u32, ShardLease>,
    identify: HashMap<u32, u64>,
    once: HashMap<String, u64>,
    shard_count: Option<u32>,
}

fn note_key(scope: NoteScope, key: &str) -> (String, String) {
    (scope.to_string(), key.to_owned())
}

/// Whether a run that ends may end in this state.
pub fn check_end(end: &RunEnd) -> Result<(), StoreError> {
    if matches!(
        end.state,
        RunState::Finished | RunState::Failed | RunState::Aborted
    ) {
        Ok(())
    } else {
        Err(StoreError::new(
            StoreErrorKind::Conflict,
            format!(
                "a run ends finished, failed or aborted, not {}; report how it ended",
                end.state
            ),
        ))
    }
}

/// The refusal of a schedule id not kept.
pub fn unknown_schedule(id: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::NotFound,
        format!("there is no schedule {id}; list them with schedule.list"),
    )
}

/// How many of a session's runs wait, of `queued` queued and `running` running: while none
/// runs, the oldest queued one is about to start and does not wait (every backend's
/// `enqueue_run` bounds this).
pub fn waiting_runs(queued: usize, running: usize) -> usize {
    if running == 0 {
        queued.saturating_sub(1)
    } else {
        queued
    }
}

/// What a firing claim that did not win answers, from the schedule as it is now (see
/// [`ScheduleStore::claim_firing`](crate::ScheduleStore::claim_firing)): unknown, no longer
/// active, or its due time taken by another claimer.
pub fn lost_firing(schedule_id: &str, now: Option<Schedule>) -> Result<Firing, StoreError> {
    match now {
        None => Err(unknown_schedule(schedule_id)),
        Some(schedule) if schedule.status != ScheduleStatus::Active => {
            Ok(Firing::Inactive(schedule.status))
        }
        Some(_) => Ok(Firing::Taken),
    }
}

/// The refusal of a run id already kept.
pub fn duplicate_run(id: &str) -> StoreError {
    StoreError::new(
        StoreErrorKind::Conflict,
        format!("a run with id {id} is already kept; give each run a new id"),
    )
}

impl MemoryBackend {
    fn decide<T: Send + 'static>(
        &self,
        decide: impl FnOnce(&mut Kept) -> Result<T, StoreError>,
    ) -> StoreFuture<'_, T> {
        ready(self.open().and_then(|()| decide(&mut self.data().agents)))
    }
}

impl MemoryStore for MemoryBackend {
    fn save_summary(&self, summary: Summary) -> StoreFuture<'_, ()> {
        self.decide(|kept| {
            kept.summaries_saved += 1;
            let order = kept.summaries_saved;
            let list = kept.summaries.entry(summary.session_id).or_default();
            list.push((order, summary));
            list.sort_by_key(|(order, s)| (s.created_ms, *order));
            let extra = list.len().saturating_sub(SUMMARIES_KEPT_PER_SESSION);
            list.drain(..extra);
            Ok(())
        })
    }

    fn summary(&self, session_id: Snowflake) -> StoreFuture<'_, Option<Summary>> {
        self.decide(move |kept| {
            Ok(kept
                .summaries
                .get(&session_id)
                .and_then(|list| list.last())
                .map(|(_, s)| s.clone()))
        })
    }

    fn summaries(&self, session_id: Snowflake, limit: usize) -> StoreFuture<'_, Vec<Summary>> {
        self.decide(move |kept| {
            Ok(kept
                .summaries
                .get(&session_id)
                .map_or_else(Vec::new, |list| {
                    list.iter()
                        .rev()
                        .take(limit)
                        .map(|(_, s)| s.clone())
                        .collect()
                }))
        })
    }

    fn put_note(&self, note: Note, limits: NoteLimits) -> StoreFuture<'_, NotePut> {
        self.decide(move |kept| {
            let scope = note.scope.to_string();
            let (mut notes, mut chars) = (0, 0);
            for ((s, key), n) in kept.notes.range((scope.clone(), String::new())..) {
                if *s != scope {
                    break;
                }
                if *key != note.key {
                    notes += 1;
                    chars += n.text.chars().count();
                }
            }
            let current = kept
                .notes
                .range((scope.clone(), String::new())..)
                .take_while(|((s, _), _)| *s == scope)
                .fold((0, 0), |(n, c), (_, note)| {
                    (n + 1, c + note.text.chars().count())
                });
            if notes + 1 > limits.max_notes || chars + note.text.chars().count() > limits.max_chars
            {
                return Ok(NotePut::Full {
                    notes: current.0,
                    chars: current.1,
                });
            }
            kept.notes.insert((scope, note.key.clone()), note);
            Ok(NotePut::Saved)
        })
    }

    fn note(&self, scope: NoteScope, key: &str) -> StoreFuture<'_, Option<Note>> {
        let key = note_key(scope, key);
        self.decide(move |kept| Ok(kept.notes.get(&key).cloned()))
    }

    fn notes(&self, scope: NoteScope, limit: usize) -> StoreFuture<'_, Vec<Note>> {
        self.decide(move |kept| {
            let scope = scope.to_string();
            Ok(kept
                .notes
                .range((scope.clone(), String::new())..)
                .take_while(|((s, _), _)| *s == scope)
                .take(limit)
                .map(|(_, n)| n.clone())
                .collect())
        })
    }

    fn forget_note(&self, scope: NoteScope, key: &str) -> StoreFuture<'_, bool> {
        let key = note_key(scope, key);
        self.decide(move |kept| Ok(kept.notes.remove(&key).is_some()))
    }

    fn summaries_after(
        &self,
        after: Option<Snowflake>,
        sessions: usize,
    ) -> StoreFuture<'_, Vec<Summary>> {
        self.summaries_after_impl(after, sessions)
    }

    fn notes_after(
        &self,
        after: Option<(NoteScope, String)>,
        limit: usize,
    ) -> StoreFuture<'_, Vec<Note>> {
        self.decide(move |kept| {
            let after = after.map(|(scope, key)| (scope.to_string(), key));
            Ok(kept
                .notes
                .iter()
                .filter(|(k, _)| after.as_ref().is_none_or(|after| *k > after))
                .take(limit)
                .map(|(_, n)| n.clone())
                .collect())
        })
    }
}

impl MemoryBackend {
    fn summaries_after_impl(
        &self,
        after: Option<Snowflake>,
        sessions: usize,
    ) -> StoreFuture<'_, Vec<Summary>> {
        self.decide(move |kept| {
            let lower = after.map_or(0, |id| id.0.saturating_add(1));
            Ok(kept
                .summaries
                .range(Snowflake(lower)..)
                .take(sessions)
                .flat_map(|(_, list)| list.iter().map(|(_, s)| s.clone()))
                .collect())
        })
    }
}

impl RunStore for MemoryBackend {
    fn enqueue_run(&self, run: NewRun, max_queued_per_session: usize) -> StoreFuture<'_, Enqueued> {
        self.decide(move |kept| {
            if kept.runs.contains_key(&run.id) {
                return Err(duplicate_run(&run.id));
            }
            let (queued, running) = kept
                .runs
                .values()
                .filter(|r| r.session == run.session)
                .fold((0, 0), |(q, r), run| match run.state {
                    RunState::Queued => (q + 1, r),
                    RunState::Running => (q, r + 1),
                    _ => (q, r),
                });
            let waiting = waiting_runs(queued, running);
            if waiting >= max_queued_per_session {
                return Ok(Enqueued::Full { queued: waiting });
            }
            kept.next_seq += 1;
            let run = Run::queued(run, kept.next_seq);
            kept.runs.insert(run.id.clone(), run.clone());
            Ok(Enqueued::Queued(Box::new(run)))
        })
    }

    fn claim_next_run(&self, lease: Lease) -> StoreFuture<'_, Option<Run>> {
        self.decide(move |kept| {
            // Per session, its oldest unfinished run: the only one that may run.
            let mut head: HashMap<&str, &Run> = HashMap::new();
            for run in kept.runs.values().filter(|r| !r.state.is_over()) {
                let entry = head.entry(run.session.as_str()).or_insert(run);
                if run.seq < entry.seq {
                    *entry = run;
                }
            }
            let Some(id) = head
                .values()
                .filter(|r| r.state == RunState::Queued)
                .min_by_key(|r| r.seq)
                .map(|r| r.id.clone())
            else {
                return Ok(None);
            };
            let run = kept.runs.get_mut(&id).expect("the run just found");
            run.state = RunState::Running;
            run.lease_until_ms = Some(lease.until_ms());
            run.started_ms = Some(lease.now_ms);
            run.node = Some(lease.node);
            Ok(Some(run.clone()))
        })
    }

    fn start_run(&self, run: NewRun, lease: Lease) -> StoreFuture<'_, Run> {
        self.decide(move |kept| {
            if kept.runs.contains_key(&run.id) {
                return Err(duplicate_run(&run.id));
            }
            kept.next_seq += 1;
            let run = Run::started(run, kept.next_seq, lease);
            kept.runs.insert(run.id.clone(), run.clone());
            Ok(run)
        })
    }

    fn join_runs(&self, join: RunJoin) -> StoreFuture<'_, Vec<Run>> {
        let (held, node, run_ids, now_ms) = (join.held, join.node, join.run_ids, join.now_ms);
        self.decide(move |kept| {
            let Some((session, lease)) = kept
                .runs
                .get(&held)
                .filter(|r| r.state == RunState::Running && r.node.as_deref() == Some(&node))
                .map(|r| (r.session.clone(), r.lease_until_ms))
            else {
                return Ok(Vec::new());
            };
            let mut joined = Vec::new();
            for id in &run_ids {
                if let Some(run) = kept.runs.get_mut(id) {
                    if run.state == RunState::Queued && run.session == session {
                        run.state = RunState::Running;
                        run.node = Some(node.clone());
                        run.lease_until_ms = lease;
                        run.started_ms = Some(now_ms);
                        joined.push(run.clone());
                    }
                }
            }
            joined.sort_by_key(|r| r.seq);
            Ok(joined)
        })
    }

    fn heartbeat_run(&self, run_id: &str, lease: Lease) -> StoreFuture<'_, Heartbeat> {
        let run_id = run_id.to_owned();
        self.decide(move |kept| {
            Ok(match kept.runs.get_mut(&run_id) {
                Some(run)
                    if run.state == RunState::Running
                        && run.node.as_deref() == Some(lease.node.as_str()) =>
                {
                    let until_ms = lease.until_ms();
                    run.lease_until_ms = Some(until_ms);
                    Heartbeat::Held {
                        until_ms,
                        abort_requested: run.abort_requested,
                    }
                }
                _ => Heartbeat::Lost,
            })
        })
    }

    fn finish_run(&self, run_id: &str, node: &str, end: RunEnd) -> StoreFuture<'_, Option<Run>> {
        let (run_id, node) = (run_id.to_owned(), node.to_owned());
        self.decide(move |kept| {
            check_end(&end)?;
            Ok(match kept.runs.get_mut(&run_id) {
                Some(run)
                    if run.state == RunState::Running
                        && run.node.as_deref() == Some(node.as_str()) =>
                {
                    run.state = end.state;
                    run.final_text = end.final_text;
                    run.usage = end.usage;
                    run.finished_ms = Some(end.at_ms);
                    run.lease_until_ms = None;
                    Some(run.clone())
                }
                _ => None,
            })
        })
    }

    fn request_abort(&self, run_id: &str, at_ms: u64) -> StoreFuture<'_, Option<Run>> {
        let run_id = run_id.to_owned();
        self.decide(move |kept| {
            Ok(kept.runs.get_mut(&run_id).map(|run| {
                match run.state {
                    RunState::Queued => {
                        run.state = RunState::Aborted;
                        run.abort_requested = true;
                        run.finished_ms = Some(at_ms);
                    }
                    RunState::Running => run.abort_requested = true,
                    _ => {}
                }
                run.clone()
            }))
        })
    }

    fn interrupt_expired_runs(&self, now_ms: u64, limit: usize) -> StoreFuture<'_, Vec<Run>> {
        self.decide(move |kept| {
            let mut expired: Vec<&mut Run> = kept
                .runs
                .values_mut()
                .filter(|r| {
                    r.state == RunState::Running && r.lease_until_ms.is_some_and(|u| u < now_ms)
                })
                .collect();
            expired.sort_by_key(|r| r.seq);
            Ok(expired
                .into_iter()
                .take(limit)
                .map(|run| {
                    run.state = RunState::Interrupted;
                    run.finished_ms = Some(now_ms);
                    run.lease_until_ms = None;
                    run.clone()
                })
                .collect())
        })
    }

    fn rerun_run(&self, run_id: &str, trigger: String) -> StoreFuture<'_, Option<Run>> {
        let run_id = run_id.to_owned();
        self.decide(move |kept| {
            let Some(run) = kept.runs.get(&run_id) else {
                return Ok(None);
            };
            let (session, seq, ended) = (run.session.clone(), run.seq, run.finished_ms);
            let overtaken = kept.runs.values().any(|o| {
                o.session == session
                    && o.seq > seq
                    && o.started_ms
                        .is_some_and(|at| ended.is_none_or(|end| at >= end))
            });
            let Some(run) = kept.runs.get_mut(&run_id) else {
                return Ok(None);
            };
            if run.state != RunState::Interrupted || overtaken {
                return Ok(None);
            }
            *run = Run::queued(
                NewRun {
                    id: run.id.clone(),
                    session: run.session.clone(),
                    agent: run.agent.clone(),
                    trigger,
                    requested_by: run.requested_by.clone(),
                    parent_run: run.parent_run.clone(),
                    enqueued_ms: run.enqueued_ms,
                },
                run.seq,
            );
            Ok(Some(run.clone()))
        })
    }

    fn run(&self, run_id: &str) -> StoreFuture<'_, Option<Run>> {
        let run_id = run_id.to_owned();
        self.decide(move |kept| Ok(kept.runs.get(&run_id).cloned()))
    }

    fn runs(&self, filter: RunFilter) -> StoreFuture<'_, Vec<Run>> {
        self.decide(move |kept| {
            let mut runs: Vec<Run> = kept
                .runs
                .values()
                .filter(|r| filter.matches(r))
                .cloned()
                .collect();
            runs.sort_by_key(|r| std::cmp::Reverse(r.seq));
            runs.truncate(filter.capped_limit());
            Ok(runs)
        })
    }

    fn prune_runs(&self, before_ms: u64) -> StoreFuture<'_, usize> {
        self.decide(move |kept| {
            let before = kept.runs.len();
            kept.runs.retain(|_, r| {
                !(r.state.is_over() && r.finished_ms.is_some_and(|at| at < before_ms))
            });
            Ok(before - kept.runs.len())
        })
    }

    fn import_runs(&self, runs: Vec<Run>) -> StoreFuture<'_, ()> {
        self.decide(move |kept| {
            for run in runs {
                let place_taken = kept.runs.values().any(|r| r.seq == run.seq);
                if kept.runs.contains_key(&run.id) || place_taken {
                    continue;
                }
                kept.next_seq = kept.next_seq.max(run.seq);
                kept.runs.insert(run.id.clone(), run);
            }
            Ok(())
        })
    }
}

impl ScheduleStore for MemoryBackend {
    fn save_schedule(&self, mut schedule: Schedule) -> StoreFuture<'_, ()> {
        self.decide(move |kept| {
            if let Some(old) = kept.schedules.get(&schedule.id) {
                schedule.last_fired_ms = schedule.last_fired_ms.max(old.last_fired_ms);
            }
            kept.schedules.insert(schedule.id.clone(), schedule);
            Ok(())
        })
    }

    fn schedule(&self, id: &str) -> StoreFuture<'_, Option<Schedule>> {
        let id = id.to_owned();
        self.decide(move |kept| Ok(kept.schedules.get(&id).cloned()))
    }

    fn schedules(&self, after: Option<String>, limit: usize) -> StoreFuture<'_, Vec<Schedule>> {
        self.decide(move |kept| {
            Ok(kept
                .schedules
                .values()
                .filter(|s| after.as_ref().is_none_or(|after| s.id > *after))
                .take(limit)
                .cloned()
                .collect())
        })
    }

    fn delete_schedule(&self, id: &str) -> StoreFuture<'_, bool> {
        let id = id.to_owned();
        self.decide(move |kept| {
            kept.receipts.remove(&id);
            Ok(kept.schedules.remove(&id).is_some())
        })
    }

    fn claim_firing(&self, claim: FiringClaim) -> StoreFuture<'_, Firing> {
        self.decide(move |kept| {
            let schedule = kept
                .schedules
                .get_mut(&claim.schedule_id)
                .ok_or_else(|| unknown_schedule(&claim.schedule_id))?;
            if schedule.status != ScheduleStatus::Active {
                return Ok(Firing::Inactive(schedule.status));
            }
            if schedule
                .last_fired_ms
                .is_some_and(|last| claim.due_ms <= last)
            {
                return Ok(Firing::Taken);
            }
            schedule.last_fired_ms = Some(claim.due_ms);
            schedule.next_due_ms = claim.next_due_ms;
            Ok(Firing::Won(schedule.clone()))
        })
    }

    fn record_receipt(&self, receipt: Receipt, after: AfterFiring) -> StoreFuture<'_, Schedule> {
        self.decide(move |kept| {
            let schedule = kept
                .schedules
                .get_mut(&receipt.schedule_id)
                .ok_or_else(|| unknown_schedule(&receipt.schedule_id))?;
            count_firing(schedule, &receipt, after);
            let schedule = schedule.clone();
            let list = kept
                .receipts
                .entry(receipt.schedule_id.clone())
                .or_default();
            list.push(receipt);
            let extra = list.len().saturating_sub(RECEIPTS_KEPT_PER_SCHEDULE);
            list.drain(..extra);
            Ok(schedule)
        })
    }

    fn receipts(&self, schedule_id: &str, limit: usize) -> StoreFuture<'_, Vec<Receipt>> {
        let id = schedule_id.to_owned();
        self.decide(move |kept| {
            Ok(kept.receipts.get(&id).map_or_else(Vec::new, |list| {
                list.iter().rev().take(limit).cloned().collect()
            }))
        })
    }

    fn set_schedule_status(
        &self,
        id: &str,
        status: ScheduleStatus,
    ) -> StoreFuture<'_, Option<Schedule>> {
        let id = id.to_owned();
        self.decide(move |kept| {
            Ok(kept.schedules.get_mut(&id).map(|schedule| {
                set_status(schedule, status);
                schedule.clone()
            }))
        })
    }
}

/// Counts a firing on its schedule (see
/// [`ScheduleStore::record_receipt`](crate::ScheduleStore::record_receipt)).
pub fn count_firing(schedule: &mut Schedule, receipt: &Receipt, after: AfterFiring) {
    use switchboard_records::FiringOutcome;
    if receipt.outcome.is_failure() {
        schedule.consecutive_failures = schedule.consecutive_failures.saturating_add(1);
    } else if receipt.outcome != FiringOutcome::Skipped {
        schedule.consecutive_failures = 0;
    }
    if schedule.status == ScheduleStatus::Active {
        if after.one_shot {
            schedule.status = ScheduleStatus::Done;
        } else if schedule.consecutive_failures >= after.pause_after {
            schedule.status = ScheduleStatus::Paused;
        }
    }
}

/// Sets a schedule's status; a paused schedule set active forgets its failures in a row.
pub fn set_status(schedule: &mut Schedule, status: ScheduleStatus) {
    if schedule.status == ScheduleStatus::Paused && status == ScheduleStatus::Active {
        schedule.consecutive_failures = 0;
    }
    schedule.status = status;
}

impl UsageStore for MemoryBackend {
    fn record_usage(&self, row: UsageRow) -> StoreFuture<'_, ()> {
        self.decide(move |kept| {
            kept.next_usage_id += 1;
            kept.usage.insert(kept.next_usage_id, row.capped());
            Ok(())
        })
    }

    fn usage_sum(
        &self,
        subject: UsageSubject,
        since_ms: u64,
        until_ms: u64,
    ) -> StoreFuture<'_, UsageTotals> {
        self.decide(move |kept| {
            let mut totals = UsageTotals::default();
            for row in kept
                .usage
                .values()
                .filter(|row| row.at_ms >= since_ms && row.at_ms < until_ms && subject.matches(row))
            {
                totals.add(row);
            }
            Ok(totals)
        })
    }

    fn usage_report(&self, query: UsageQuery) -> StoreFuture<'_, Vec<UsageGroup>> {
        self.decide(move |kept| Ok(fold_usage(kept.usage.values(), &query)))
    }

    fn prune_usage(&self, before_ms: u64) -> StoreFuture<'_, usize> {
        self.decide(move |kept| {
            let before = kept.usage.len();
            kept.usage.retain(|_, row| row.at_ms >= before_ms);
            Ok(before - kept.usage.len())
        })
    }

    fn usage_after(&self, after_id: u64, limit: usize) -> StoreFuture<'_, Vec<KeptUsage>> {
        self.decide(move |kept| {
            Ok(kept
                .usage
                .range(after_id.saturating_add(1)..)
                .take(limit)
                .map(|(id, row)| KeptUsage {
                    id: *id,
                    row: row.clone(),
                })
                .collect())
        })
    }

    fn import_usage(&self, rows: Vec<KeptUsage>) -> StoreFuture<'_, ()> {
        self.decide(move |kept| {
            for KeptUsage { id, row } in rows {
                kept.next_usage_id = kept.next_usage_id.max(id);
                kept.usage.entry(id).or_insert_with(|| row.capped());
            }
            Ok(())
        })
    }
}

impl ClusterStore for MemoryBackend {
    fn node_heartbeat(&self, beat: NodeBeat) -> StoreFuture<'_, ()> {
        self.decide(move |kept| {
            let forget_before = beat.at_ms.saturating_sub(NODES_KEPT_MS);
            kept.nodes.retain(|_, n| n.last_seen_ms >= forget_before);
            kept.nodes.insert(
                beat.node_id.clone(),
                Node {
                    node_id: beat.node_id,
                    started_ms: beat.started_ms,
                    address: beat.address,
                    last_seen_ms: beat.at_ms,
                },
            );
            Ok(())
        })
    }

    fn nodes(&self, seen_since_ms: u64, limit: usize) -> StoreFuture<'_, Vec<Node>> {
        self.decide(move |kept| {
            Ok(kept
                .nodes
                .values()
                .filter(|n| n.last_seen_ms >= seen_since_ms)
                .take(limit)
                .cloned()
                .collect())
        })
    }

    fn acquire_shard(&self, shard: u32, lease: Lease) -> StoreFuture<'_, ShardGrant> {
        let Lease {
            node,
            now_ms,
            lease_ms,
        } = lease;
        self.decide(move |kept| {
            if let Some(lease) = kept.shards.get(&shard) {
                if lease.node_id != node && lease.until_ms > now_ms {
                    return Ok(ShardGrant::Taken(lease.clone()));
                }
            }
            let until_ms = now_ms.saturating_add(lease_ms);
            kept.shards.insert(
                shard,
                ShardLease {
                    shard,
                    node_id: node,
                    until_ms,
                },
            );
            Ok(ShardGrant::Held { until_ms })
        })
    }

    fn release_shard(&self, shard: u32, node: &str) -> StoreFuture<'_, bool> {
        let node = node.to_owned();
        self.decide(move |kept| {
            if kept.shards.get(&shard).is_some_and(|l| l.node_id == node) {
                kept.shards.remove(&shard);
                return Ok(true);
            }
            Ok(false)
        })
    }

    fn shard_leases(&self) -> StoreFuture<'_, Vec<ShardLease>> {
        self.decide(|kept| Ok(kept.shards.values().cloned().collect()))
    }

    fn take_identify_slot(
        &self,
        bucket: u32,
        now_ms: u64,
        spacing_ms: u64,
    ) -> StoreFuture<'_, u64> {
        self.decide(move |kept| {
            let next = kept.identify.entry(bucket).or_insert(0);
            let slot = (*next).max(now_ms);
            *next = slot.saturating_add(spacing_ms);
            Ok(slot)
        })
    }

    fn once(&self, key: &str, now_ms: u64, ttl_ms: u64) -> StoreFuture<'_, bool> {
        let key = key.to_owned();
        self.decide(move |kept| {
            kept.once.retain(|_, until| *until > now_ms);
            if kept.once.contains_key(&key) {
                return Ok(false);
            }
            kept.once.insert(key, now_ms.saturating_add(ttl_ms));
            Ok(true)
        })
    }

    fn shard_count(&self) -> StoreFuture<'_, Option<u32>> {
        self.decide(|kept| Ok(kept.shard_count))
    }

    fn raise_shard_count(&self, total: u32) -> StoreFuture<'_, u32> {
        self.decide(move |kept| {
            let agreed = kept.shard_count.unwrap_or(0).max(total);
            kept.shard_count = Some(agreed);
            Ok(agreed)
        })
    }

    fn once_held(&self, key: &str, now_ms: u64) -> StoreFuture<'_, bool> {
        let key = key.to_owned();
        self.decide(move |kept| Ok(kept.once.get(&key).is_some_and(|until| *until > now_ms)))
    }
}
