//! The conformance tests of the agent aggregates: memory, runs, schedules, usage, the cluster.
//! Every atomic decision is raced on real threads, half of them on a second node when the
//! backend has one.

use std::sync::{Arc, Barrier};

use futures_executor::block_on;
use switchboard_records::notes::SUMMARIES_KEPT_PER_SESSION;
use switchboard_records::{
    AfterFiring, FiringClaim, FiringOutcome, Lease, NewRun, Node, NodeBeat, Note, NoteLimits,
    NoteScope, Receipt, Run, RunEnd, RunFilter, RunJoin, RunState, RunUsage, Schedule,
    ScheduleSpec, ScheduleStatus, Summary, UsageBy, UsageCharge, UsageQuery, UsageRow,
    UsageSubject, UsageTotals,
};

use super::{id, Fixture, MakePlace, CHANNEL, MIRA, OTHER};
use crate::{Backend, Enqueued, Firing, Heartbeat, NotePut, ShardGrant, StoreErrorKind};

/// Runs `each(backend, i)` on `n` threads released together, the odd ones on the second node
/// when there is one; the answers in thread order.
pub(super) fn race<T: Send>(
    f: &Fixture,
    n: usize,
    each: impl Fn(&dyn Backend, usize) -> T + Sync,
) -> Vec<T> {
    let second = f.place.second_node();
    let start = Arc::new(Barrier::new(n));
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let backend = match (&second, i % 2) {
                    (Some(second), 1) => Arc::clone(second),
                    _ => Arc::clone(&f.backend),
                };
                let (start, each) = (Arc::clone(&start), &each);
                scope.spawn(move || {
                    start.wait();
                    each(&*backend, i)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn summary(session: entity::Snowflake, n: u64, created_ms: u64) -> Summary {
    Summary {
        session_id: session,
        text: format!("summary {n}: decisions, open questions — «ünïcode» 🧵"),
        covers_to: id(n),
        tokens: u32::try_from(n).unwrap() * 10,
        created_ms,
    }
}

/// The newest summary wins, history is bounded, sessions are apart, and it is durable.
pub fn summaries_latest_wins_and_history_is_bounded(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    assert_eq!(block_on(f.backend.summary(CHANNEL)).unwrap(), None);
    let total = SUMMARIES_KEPT_PER_SESSION as u64 + 3;
    for n in 1..=total {
        block_on(f.backend.save_summary(summary(CHANNEL, n, 1_000 + n))).unwrap();
    }
    // An older one saved late does not win; one with the same time saved later does.
    block_on(f.backend.save_summary(summary(CHANNEL, 99, 1_000))).unwrap();
    block_on(f.backend.save_summary(summary(OTHER, 1, 5))).unwrap();
    let check = |f: &Fixture| {
        let newest = block_on(f.backend.summary(CHANNEL)).unwrap().unwrap();
        assert_eq!(newest, summary(CHANNEL, total, 1_000 + total));
        let kept = block_on(f.backend.summaries(CHANNEL, 100)).unwrap();
        assert_eq!(kept.len(), SUMMARIES_KEPT_PER_SESSION);
        let created: Vec<u64> = kept.iter().map(|s| s.created_ms).collect();
        let want: Vec<u64> = (0..SUMMARIES_KEPT_PER_SESSION as u64)
            .map(|k| 1_000 + total - k)
            .collect();
        assert_eq!(created, want, "newest first, the oldest dropped");
        assert_eq!(block_on(f.backend.summaries(CHANNEL, 2)).unwrap().len(), 2);
        assert_eq!(
            block_on(f.backend.summary(OTHER)).unwrap(),
            Some(summary(OTHER, 1, 5))
        );
    };
    check(&f);
    if f.place.durable() {
        f.reopen();
        check(&f);
    }
}

fn note(scope: NoteScope, key: &str, text: &str) -> Note {
    Note {
        scope,
        key: key.to_owned(),
        text: text.to_owned(),
        untrusted: false,
        updated_ms: 7,
    }
}

const ROOMY: NoteLimits = NoteLimits {
    max_notes: 100,
    max_chars: 10_000,
};

/// Notes are kept per scope, replaced by key, refused past either limit, forgotten, paged.
pub fn notes_are_kept_per_scope_replaced_and_bounded(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    let session = NoteScope::Session(CHANNEL);
    let user = NoteScope::User(MIRA);
    let put = |f: &Fixture, n: Note, limits| block_on(f.backend.put_note(n, limits)).unwrap();
    assert_eq!(
        put(&f, note(session, "deploy", "on fridays"), ROOMY),
        NotePut::Saved
    );
    let odd = Note {
        untrusted: true,
        ..note(user, "ключ 🔑", "ünïcode \"quoted\" 'text' \\ ;--")
    };
    assert_eq!(put(&f, odd.clone(), ROOMY), NotePut::Saved);
    assert_eq!(
        put(&f, note(NoteScope::Global, "g", "global"), ROOMY),
        NotePut::Saved
    );
    // Replacing by key counts the new text only.
    let tight = NoteLimits {
        max_notes: 2,
        max_chars: 12,
    };
    assert_eq!(
        put(&f, note(session, "deploy", "never friday"), tight),
        NotePut::Saved
    );
    assert_eq!(
        put(&f, note(session, "x", "a"), tight),
        NotePut::Full {
            notes: 1,
            chars: 12
        },
        "characters"
    );
    assert_eq!(
        put(
            &f,
            note(session, "y", ""),
            NoteLimits {
                max_notes: 1,
                max_chars: 100
            }
        ),
        NotePut::Full {
            notes: 1,
            chars: 12
        },
        "count"
    );
    let check = |f: &Fixture| {
        assert_eq!(
            block_on(f.backend.note(session, "deploy")).unwrap(),
            Some(note(session, "deploy", "never friday"))
        );
        assert_eq!(
            block_on(f.backend.note(user, &odd.key)).unwrap().as_ref(),
            Some(&odd)
        );
        assert_eq!(block_on(f.backend.notes(session, 10)).unwrap().len(), 1);
        assert_eq!(
            block_on(f.backend.notes(NoteScope::Session(OTHER), 10)).unwrap(),
            Vec::new()
        );
        let all = block_on(f.backend.notes_after(None, 10)).unwrap();
        let keys: Vec<String> = all
            .iter()
            .map(|n| format!("{}/{}", n.scope, n.key))
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted, "by scope then key");
        assert_eq!(all.len(), 3);
        let first = &all[0];
        let rest = block_on(
            f.backend
                .notes_after(Some((first.scope, first.key.clone())), 10),
        )
        .unwrap();
        assert_eq!(rest, all[1..].to_vec());
        assert_eq!(block_on(f.backend.notes_after(None, 1)).unwrap().len(), 1);
    };
    check(&f);
    if f.place.durable() {
        f.reopen();
        check(&f);
    }
    assert!(block_on(f.backend.forget_note(session, "deploy")).unwrap());
    assert!(!block_on(f.backend.forget_note(session, "deploy")).unwrap());
    assert_eq!(block_on(f.backend.note(session, "deploy")).unwrap(), None);
    assert_eq!(put(&f, note(session, "x", "a"), tight), NotePut::Saved);
}

/// Many threads (and nodes) put notes into one scope at once: the scope never holds more than
/// its limit.
pub fn notes_raced_never_exceed_their_scope_limits(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    let limits = NoteLimits {
        max_notes: 3,
        max_chars: 1_000,
    };
    for round in 0..20u64 {
        let scope = NoteScope::Session(id(round));
        let saved = race(&f, 6, |backend, i| {
            block_on(backend.put_note(note(scope, &format!("k{i}"), "text"), limits)).unwrap()
                == NotePut::Saved
        });
        assert_eq!(saved.iter().filter(|s| **s).count(), 3, "round {round}");
        assert_eq!(block_on(f.backend.notes(scope, 10)).unwrap().len(), 3);
    }
}

fn new_run(run_id: &str, session: entity::Snowflake, enqueued_ms: u64) -> NewRun {
    NewRun {
        id: run_id.to_owned(),
        session: session.to_string(),
        agent: "support".into(),
        trigger: format!("message:{}", id(enqueued_ms)),
        requested_by: Some("user:1".into()),
        parent_run: None,
        enqueued_ms,
    }
}

fn enqueue(f: &Fixture, run: NewRun) -> Run {
    match block_on(f.backend.enqueue_run(run, 10)).unwrap() {
        Enqueued::Queued(run) => *run,
        Enqueued::Full { queued } => panic!("the queue is full at {queued}"),
    }
}

fn claim(backend: &dyn Backend, node: &str, now_ms: u64) -> Option<Run> {
    block_on(backend.claim_next_run(Lease::new(node, now_ms, 1_000))).unwrap()
}

fn end(state: RunState, text: &str, at_ms: u64) -> RunEnd {
    RunEnd {
        state,
        final_text: Some(text.to_owned()),
        usage: Some(RunUsage {
            tokens_in: 1_200 + at_ms % 1_000,
            tokens_out: 340,
            micro_usd: Some(5_170),
        }),
        at_ms,
    }
}

/// An interrupted run put back to run again takes its own place — the first of its session,
/// ahead of the runs queued behind it — with its new trigger; a run not interrupted, or one a
/// later run of its session overtook once it was interrupted, is not put back.
pub fn an_interrupted_run_reruns_in_its_own_place(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    let t = super::now_ms();
    let first = enqueue(&f, new_run("a", CHANNEL, t));
    enqueue(&f, new_run("b", CHANNEL, t + 1));
    assert_eq!(claim(&*f.backend, "node-1", t + 10).unwrap().id, "a");
    assert_eq!(
        block_on(f.backend.rerun_run("a", "again".into())).unwrap(),
        None,
        "a running run is not put back"
    );
    let cut = block_on(f.backend.interrupt_expired_runs(t + 2_000, 10)).unwrap();
    assert_eq!(cut.len(), 1);
    let again = block_on(f.backend.rerun_run("a", "again".into()))
        .unwrap()
        .expect("put back");
    assert_eq!(again.state, RunState::Queued);
    assert_eq!(again.seq, first.seq, "its own place");
    assert_eq!(again.trigger, "again");
    assert_eq!(
        (again.node.as_deref(), again.started_ms, again.finished_ms),
        (None, None, None)
    );
    assert_eq!(
        claim(&*f.backend, "node-2", t + 2_100).unwrap().id,
        "a",
        "ahead of b"
    );
    assert_eq!(claim(&*f.backend, "node-2", t + 2_101), None, "b waits");
    // Cut again, and this time b starts before it is put back: it stays interrupted.
    block_on(f.backend.interrupt_expired_runs(t + 4_000, 10)).unwrap();
    assert_eq!(claim(&*f.backend, "node-2", t + 4_100).unwrap().id, "b");
    assert_eq!(
        block_on(f.backend.rerun_run("a", "x".into())).unwrap(),
        None
    );
    assert_eq!(
        block_on(f.backend.run("a")).unwrap().map(|r| r.state),
        Some(RunState::Interrupted)
    );
    assert_eq!(
        block_on(f.backend.rerun_run("nope", "x".into())).unwrap(),
        None
    );
}

/// A handoff's sub-run or a chat-API run starts at once, beside its session's running run,
/// on the node that asked; it is renewed, ended with its usage and interrupted like a claimed
/// run, listed under the run that handed it off, and runs queued after it wait for it.
pub fn a_run_started_at_once_runs_beside_its_session_and_keeps_its_usage(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    // Now: ended runs are kept a month from their end, and a reopen prunes older ones.
    let t = super::now_ms();
    enqueue(&f, new_run("p", CHANNEL, t + 10));
    let parent = claim(&*f.backend, "node-1", t + 100).expect("p is claimable");
    let sub = NewRun {
        parent_run: Some("p".into()),
        trigger: "handoff".into(),
        ..new_run("p.s1", CHANNEL, t + 110)
    };
    let started = block_on(
        f.backend
            .start_run(sub.clone(), Lease::new("node-1", t + 120, 1_000)),
    )
    .unwrap();
    assert_eq!(started.state, RunState::Running);
    assert_eq!(started.node.as_deref(), Some("node-1"));
    assert_eq!(started.lease_until_ms, Some(t + 1_120));
    assert_eq!(started.started_ms, Some(t + 120));
    assert_eq!(started.parent_run.as_deref(), Some("p"));
    assert_eq!(started.usage, None);
    assert!(
        started.seq > parent.seq,
        "a started run takes the next place"
    );
    let again = block_on(
        f.backend
            .start_run(sub, Lease::new("node-2", t + 130, 1_000)),
    )
    .unwrap_err();
    assert_eq!(again.kind(), StoreErrorKind::Conflict);
    // A chat-API run in a session of its own, and one that will not be renewed.
    let api = NewRun {
        trigger: "api".into(),
        ..new_run("api-1", OTHER, t + 130)
    };
    block_on(
        f.backend
            .start_run(api, Lease::new("node-2", t + 130, 1_000)),
    )
    .unwrap();
    let lost = NewRun {
        parent_run: Some("p".into()),
        ..new_run("p.s2", CHANNEL, t + 131)
    };
    block_on(
        f.backend
            .start_run(lost, Lease::new("node-3", t + 131, 100)),
    )
    .unwrap();
    enqueue(&f, new_run("q", CHANNEL, t + 140));
    assert_eq!(
        block_on(
            f.backend
                .heartbeat_run("p.s1", Lease::new("node-1", t + 500, 1_000))
        )
        .unwrap(),
        Heartbeat::Held {
            until_ms: t + 1_500,
            abort_requested: false
        }
    );
    let interrupted = block_on(f.backend.interrupt_expired_runs(t + 600, 10)).unwrap();
    assert_eq!(
        interrupted
            .iter()
            .map(|r| r.id.as_str())
            .collect::<Vec<_>>(),
        ["p.s2"],
        "only the sub-run whose node stopped renewing"
    );
    let ended = end(RunState::Finished, "the sub-answer", t + 700);
    let done = block_on(f.backend.finish_run("p.s1", "node-1", ended.clone()))
        .unwrap()
        .expect("the node that started it ends it");
    assert_eq!(done.usage, ended.usage);
    block_on(
        f.backend
            .finish_run("api-1", "node-2", end(RunState::Failed, "x", t + 710)),
    )
    .unwrap()
    .expect("the chat-API run ends");
    if f.place.durable() {
        f.reopen();
    }
    eprintln!("AFTER {:?}", block_on(f.backend.run("p.s1")));
    assert_eq!(
        block_on(f.backend.run("p.s1"))
            .unwrap()
            .and_then(|r| r.usage),
        ended.usage,
        "the usage is kept"
    );
    let subs = block_on(f.backend.runs(RunFilter {
        parent_run: Some("p".into()),
        limit: 10,
        ..RunFilter::default()
    }))
    .unwrap();
    assert_eq!(
        subs.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["p.s2", "p.s1"]
    );
    assert_eq!(claim(&*f.backend, "node-2", t + 800), None, "q waits for p");
    block_on(
        f.backend
            .finish_run("p", "node-1", end(RunState::Finished, "y", t + 900)),
    )
    .unwrap()
    .expect("p ends");
    assert_eq!(claim(&*f.backend, "node-2", t + 901).unwrap().id, "q");
}

/// A session's runs run one at a time in the order queued, other sessions' runs meanwhile;
/// only the holder renews or ends a run; the queue is bounded; runs survive a reopen.
pub fn runs_queue_per_session_in_order(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    let a1 = enqueue(&f, new_run("a1", CHANNEL, 10));
    let a2 = enqueue(&f, new_run("a2", CHANNEL, 11));
    let b1 = enqueue(&f, new_run("b1", OTHER, 12));
    assert_eq!(a1.state, RunState::Queued);
    assert!(a1.seq < a2.seq && a2.seq < b1.seq, "queue places grow");
    let duplicate = block_on(f.backend.enqueue_run(new_run("a1", OTHER, 13), 10)).unwrap_err();
    assert_eq!(duplicate.kind(), StoreErrorKind::Conflict);
    // Nothing runs yet: a1 is about to start, so only a2 waits.
    assert_eq!(
        block_on(f.backend.enqueue_run(new_run("a3", CHANNEL, 14), 1)).unwrap(),
        Enqueued::Full { queued: 1 }
    );
    let first = claim(&*f.backend, "node-1", 100).expect("a1 is claimable");
    assert_eq!(first.id, "a1");
    assert_eq!(first.state, RunState::Running);
    assert_eq!(first.node.as_deref(), Some("node-1"));
    assert_eq!(first.lease_until_ms, Some(1_100));
    assert_eq!(first.started_ms, Some(100));
    let second = claim(&*f.backend, "node-2", 101).expect("b1: another session");
    assert_eq!(second.id, "b1");
    assert_eq!(claim(&*f.backend, "node-2", 102), None, "a2 waits for a1");
    // a1 runs now, so a2 waits behind it: a bound of 1 is full.
    assert_eq!(
        block_on(f.backend.enqueue_run(new_run("a3", CHANNEL, 103), 1)).unwrap(),
        Enqueued::Full { queued: 1 }
    );
    assert_eq!(
        block_on(
            f.backend
                .heartbeat_run("a1", Lease::new("node-1", 500, 1_000))
        )
        .unwrap(),
        Heartbeat::Held {
            until_ms: 1_500,
            abort_requested: false
        }
    );
    assert_eq!(
        block_on(
            f.backend
                .heartbeat_run("a1", Lease::new("node-2", 500, 1_000))
        )
        .unwrap(),
        Heartbeat::Lost,
        "not the holder"
    );
    assert_eq!(
        block_on(
            f.backend
                .finish_run("a1", "node-2", end(RunState::Finished, "x", 600))
        )
        .unwrap(),
        None,
        "not the holder"
    );
    let refused = block_on(
        f.backend
            .finish_run("a1", "node-1", end(RunState::Queued, "x", 600)),
    )
    .unwrap_err();
    assert_eq!(refused.kind(), StoreErrorKind::Conflict);
    if f.place.durable() {
        f.reopen();
        assert_eq!(claim(&*f.backend, "node-2", 103), None, "a1 still runs");
    }
    let done = block_on(f.backend.finish_run(
        "a1",
        "node-1",
        end(RunState::Finished, "the answer «ünïcode»", 700),
    ))
    .unwrap()
    .expect("the holder ends it");
    assert_eq!(done.state, RunState::Finished);
    assert_eq!(done.final_text.as_deref(), Some("the answer «ünïcode»"));
    assert_eq!(done.finished_ms, Some(700));
    assert_eq!(done.lease_until_ms, None);
    assert_eq!(
        done.usage.map(|u| u.tokens_in),
        Some(1_900),
        "its usage is kept"
    );
    assert_eq!(
        block_on(
            f.backend
                .heartbeat_run("a1", Lease::new("node-1", 800, 1_000))
        )
        .unwrap(),
        Heartbeat::Lost,
        "an ended run has no lease"
    );
    assert_eq!(claim(&*f.backend, "node-2", 800).unwrap().id, "a2");
    assert_eq!(block_on(f.backend.run("a1")).unwrap(), Some(done));
    assert_eq!(block_on(f.backend.run("nope")).unwrap(), None);
}

/// A run answering a burst takes the runs queued behind it in its session: they run on its
/// node under its lease and end, or are interrupted, with it; a run of another session, one
/// already taken, or a holder that is not the node is refused.
pub fn queued_runs_join_the_run_that_answers_them(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    enqueue(&f, new_run("h", CHANNEL, 10));
    enqueue(&f, new_run("j1", CHANNEL, 11));
    enqueue(&f, new_run("j2", CHANNEL, 12));
    enqueue(&f, new_run("o", OTHER, 13));
    enqueue(&f, new_run("j3", CHANNEL, 14));
    let head = claim(&*f.backend, "node-1", 100).expect("h");
    assert_eq!(head.id, "h");
    let join = |node: &str, list: &[&str], now_ms| RunJoin {
        held: "h".to_owned(),
        node: node.to_owned(),
        run_ids: list.iter().map(|s| (*s).to_owned()).collect(),
        now_ms,
    };
    assert!(
        block_on(f.backend.join_runs(join("node-2", &["j1"], 101)))
            .unwrap()
            .is_empty(),
        "only the holder joins runs into its run"
    );
    let joined = block_on(
        f.backend
            .join_runs(join("node-1", &["j2", "o", "j1", "nope"], 102)),
    )
    .unwrap();
    assert_eq!(
        joined.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["j1", "j2"],
        "this session's queued runs, by queue place"
    );
    for run in &joined {
        assert_eq!(run.state, RunState::Running);
        assert_eq!(run.node.as_deref(), Some("node-1"));
        assert_eq!(run.lease_until_ms, head.lease_until_ms);
        assert_eq!(run.started_ms, Some(102));
    }
    assert!(
        block_on(f.backend.join_runs(join("node-1", &["j1"], 103)))
            .unwrap()
            .is_empty(),
        "a run is joined once"
    );
    assert_eq!(claim(&*f.backend, "node-2", 104).unwrap().id, "o");
    assert_eq!(
        claim(&*f.backend, "node-2", 105),
        None,
        "j3 waits for the burst"
    );
    let interrupted = block_on(f.backend.interrupt_expired_runs(5_000, 10)).unwrap();
    assert_eq!(
        interrupted
            .iter()
            .map(|r| r.id.as_str())
            .collect::<Vec<_>>(),
        ["h", "j1", "j2", "o"],
        "the joined runs are interrupted with the run they joined"
    );
    assert_eq!(claim(&*f.backend, "node-2", 5_001).unwrap().id, "j3");
}

/// Many threads on two nodes claim at once: each run goes to one claimer, a session never has
/// two running, and every session's first run is taken.
pub fn runs_raced_are_claimed_once_and_never_two_per_session(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    const SESSIONS: u64 = 4;
    for round in 0..10u64 {
        for s in 0..SESSIONS {
            for k in 0..2 {
                enqueue(
                    &f,
                    new_run(&format!("r{round}-s{s}-{k}"), id(s), round * 10 + k),
                );
            }
        }
        let claimed = race(&f, 8, |backend, i| {
            claim(backend, &format!("n{i}"), round * 10)
        });
        let mut claimed: Vec<Run> = claimed.into_iter().flatten().collect();
        claimed.sort_by_key(|r| r.seq);
        let ids: Vec<String> = claimed.iter().map(|r| r.id.clone()).collect();
        let want: Vec<String> = (0..SESSIONS).map(|s| format!("r{round}-s{s}-0")).collect();
        assert_eq!(ids, want, "round {round}: the head of each session, once");
        for run in claimed {
            let node = run.node.clone().unwrap();
            block_on(
                f.backend
                    .finish_run(&run.id, &node, end(RunState::Finished, "", 1)),
            )
            .unwrap()
            .expect("its claimer ends it");
        }
        // The second runs of each session, then nothing.
        let claimed = race(&f, 8, |backend, i| {
            claim(backend, &format!("n{i}"), round * 10)
        });
        let mut claimed: Vec<Run> = claimed.into_iter().flatten().collect();
        assert_eq!(claimed.len() as u64, SESSIONS, "round {round}");
        for run in claimed.drain(..) {
            let node = run.node.clone().unwrap();
            block_on(
                f.backend
                    .finish_run(&run.id, &node, end(RunState::Failed, "", 1)),
            )
            .unwrap()
            .unwrap();
        }
    }
}

/// An abort ends a queued run at once and flags a running one; an expired lease interrupts the
/// run exactly once (raced), its node then loses it, and its session moves on.
pub fn aborts_and_expired_leases_end_runs_once(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    enqueue(&f, new_run("running", CHANNEL, 1));
    enqueue(&f, new_run("queued", CHANNEL, 2));
    enqueue(&f, new_run("next", CHANNEL, 3));
    claim(&*f.backend, "node-1", 10).unwrap();
    let aborted = block_on(f.backend.request_abort("queued", 20))
        .unwrap()
        .unwrap();
    assert_eq!(aborted.state, RunState::Aborted);
    assert_eq!(aborted.finished_ms, Some(20));
    let flagged = block_on(f.backend.request_abort("running", 21))
        .unwrap()
        .unwrap();
    assert_eq!(flagged.state, RunState::Running);
    assert!(flagged.abort_requested);
    assert_eq!(
        block_on(f.backend.request_abort("missing", 21)).unwrap(),
        None
    );
    assert_eq!(
        block_on(
            f.backend
                .heartbeat_run("running", Lease::new("node-1", 30, 100))
        )
        .unwrap(),
        Heartbeat::Held {
            until_ms: 130,
            abort_requested: true
        }
    );
    assert_eq!(
        block_on(f.backend.interrupt_expired_runs(130, 10)).unwrap(),
        Vec::new(),
        "a lease ending now has not expired"
    );
    let reaped = race(&f, 6, |backend, _| {
        block_on(backend.interrupt_expired_runs(131, 10)).unwrap()
    });
    let reaped: Vec<Run> = reaped.into_iter().flatten().collect();
    assert_eq!(reaped.len(), 1, "one reaper gets it");
    assert_eq!(reaped[0].id, "running");
    assert_eq!(reaped[0].state, RunState::Interrupted);
    assert_eq!(reaped[0].finished_ms, Some(131));
    assert_eq!(
        block_on(
            f.backend
                .heartbeat_run("running", Lease::new("node-1", 140, 100))
        )
        .unwrap(),
        Heartbeat::Lost
    );
    assert_eq!(
        block_on(
            f.backend
                .finish_run("running", "node-1", end(RunState::Finished, "late", 150))
        )
        .unwrap(),
        None
    );
    assert_eq!(
        block_on(f.backend.run("running")).unwrap().unwrap().state,
        RunState::Interrupted,
        "a late end does not change an interrupted run"
    );
    assert_eq!(claim(&*f.backend, "node-2", 200).unwrap().id, "next");
}

/// Listing filters and pages newest first; pruning forgets only ended runs from before.
pub fn runs_list_by_filter_newest_first_and_prune(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    for n in 0..6u64 {
        let session = if n % 2 == 0 { CHANNEL } else { OTHER };
        let mut run = new_run(&format!("run-{n}"), session, n);
        if n == 5 {
            run.parent_run = Some("run-4".into());
            run.agent = "release".into();
        }
        enqueue(&f, run);
    }
    let ids = |filter: RunFilter| -> Vec<String> {
        block_on(f.backend.runs(filter))
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect()
    };
    let all = RunFilter {
        limit: 100,
        ..RunFilter::default()
    };
    assert_eq!(
        ids(all.clone()),
        ["run-5", "run-4", "run-3", "run-2", "run-1", "run-0"]
    );
    assert_eq!(
        ids(RunFilter {
            session: Some(CHANNEL.to_string()),
            ..all.clone()
        }),
        ["run-4", "run-2", "run-0"]
    );
    assert_eq!(
        ids(RunFilter {
            agent: Some("release".into()),
            ..all.clone()
        }),
        ["run-5"]
    );
    assert_eq!(
        ids(RunFilter {
            parent_run: Some("run-4".into()),
            ..all.clone()
        }),
        ["run-5"]
    );
    let page = block_on(f.backend.runs(RunFilter {
        limit: 2,
        ..all.clone()
    }))
    .unwrap();
    assert_eq!(page.len(), 2);
    assert_eq!(
        ids(RunFilter {
            before_seq: Some(page[1].seq),
            limit: 2,
            ..all.clone()
        }),
        ["run-3", "run-2"]
    );
    let first = claim(&*f.backend, "n", 10).unwrap();
    assert_eq!(first.id, "run-0");
    assert_eq!(
        ids(RunFilter {
            state: Some(RunState::Running),
            ..all.clone()
        }),
        ["run-0"]
    );
    block_on(
        f.backend
            .finish_run("run-0", "n", end(RunState::Finished, "", 50)),
    )
    .unwrap();
    block_on(f.backend.request_abort("run-3", 500)).unwrap();
    assert_eq!(
        block_on(f.backend.prune_runs(100)).unwrap(),
        1,
        "run-0 only"
    );
    assert_eq!(ids(all.clone()).len(), 5);
    assert_eq!(block_on(f.backend.prune_runs(1_000)).unwrap(), 1, "run-3");
    assert_eq!(
        ids(all),
        ["run-5", "run-4", "run-2", "run-1"],
        "queued runs stay"
    );
}

fn schedule(n: u64) -> Schedule {
    Schedule {
        id: format!("sched-{n}"),
        session_id: CHANNEL,
        agent: n.is_multiple_of(2).then(|| "release".to_owned()),
        prompt: format!("post the standup «{n}» 🧵"),
        spec: match n % 3 {
            0 => ScheduleSpec::Every { every_ms: 2_000 },
            1 => ScheduleSpec::At { at_ms: 5_000 },
            _ => ScheduleSpec::Cron {
                expr: "0 9 * * 1-5".into(),
                tz: "Europe/Paris".into(),
            },
        },
        created_by: "operator".into(),
        created_ms: 1_000 + n,
        next_due_ms: Some(10_000),
        last_fired_ms: None,
        status: ScheduleStatus::Active,
        consecutive_failures: 0,
    }
}

fn fire(backend: &dyn Backend, id: &str, due_ms: u64) -> Firing {
    block_on(backend.claim_firing(FiringClaim {
        schedule_id: id.to_owned(),
        due_ms,
        next_due_ms: Some(due_ms + 2_000),
    }))
    .unwrap()
}

fn after(pause_after: u32, one_shot: bool) -> AfterFiring {
    AfterFiring {
        pause_after,
        one_shot,
    }
}

fn receipt(id: &str, due_ms: u64, outcome: FiringOutcome) -> Receipt {
    Receipt {
        schedule_id: id.to_owned(),
        due_ms,
        run_id: Some(format!("run-{due_ms}")),
        outcome,
        message_ids: if outcome == FiringOutcome::Posted {
            vec![id_text(due_ms), id_text(due_ms + 1)]
        } else {
            Vec::new()
        },
        error: (outcome == FiringOutcome::Failed).then(|| "the model refused".to_owned()),
        at_ms: due_ms + 500,
        detail: (outcome == FiringOutcome::Skipped)
            .then(|| r#"{"status":"skipped","count":3,"exact":true}"#.to_owned()),
    }
}

fn id_text(n: u64) -> String {
    id(n).to_string()
}

/// Schedules round-trip, list by id in pages, keep their firing state when saved again, and
/// go with their receipts.
pub fn schedules_round_trip_list_and_delete(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    for n in 1..=5 {
        block_on(f.backend.save_schedule(schedule(n))).unwrap();
    }
    assert!(matches!(
        fire(&*f.backend, "sched-1", 10_000),
        Firing::Won(_)
    ));
    // Saved again by someone who read it before the firing: the firing is not forgotten.
    let edited = Schedule {
        prompt: "edited".into(),
        ..schedule(1)
    };
    block_on(f.backend.save_schedule(edited.clone())).unwrap();
    block_on(f.backend.record_receipt(
        receipt("sched-1", 10_000, FiringOutcome::Posted),
        after(3, false),
    ))
    .unwrap();
    let check = |f: &Fixture| {
        let kept = block_on(f.backend.schedule("sched-1")).unwrap().unwrap();
        assert_eq!(kept.prompt, "edited");
        assert_eq!(kept.last_fired_ms, Some(10_000));
        assert_eq!(kept.spec, schedule(1).spec);
        for n in 2..=5 {
            assert_eq!(
                block_on(f.backend.schedule(&format!("sched-{n}"))).unwrap(),
                Some(schedule(n))
            );
        }
        let page = block_on(f.backend.schedules(None, 2)).unwrap();
        let ids: Vec<&str> = page.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["sched-1", "sched-2"]);
        let rest = block_on(f.backend.schedules(Some("sched-2".into()), 10)).unwrap();
        assert_eq!(rest.len(), 3);
        assert_eq!(
            block_on(f.backend.receipts("sched-1", 10)).unwrap(),
            [receipt("sched-1", 10_000, FiringOutcome::Posted)]
        );
    };
    check(&f);
    if f.place.durable() {
        f.reopen();
        check(&f);
    }
    assert_eq!(fire(&*f.backend, "sched-1", 10_000), Firing::Taken);
    assert!(block_on(f.backend.delete_schedule("sched-1")).unwrap());
    assert!(!block_on(f.backend.delete_schedule("sched-1")).unwrap());
    assert_eq!(block_on(f.backend.schedule("sched-1")).unwrap(), None);
    assert_eq!(block_on(f.backend.receipts("sched-1", 10)).unwrap(), []);
    let gone = block_on(f.backend.claim_firing(FiringClaim {
        schedule_id: "sched-1".into(),
        due_ms: 20_000,
        next_due_ms: None,
    }))
    .unwrap_err();
    assert_eq!(gone.kind(), StoreErrorKind::NotFound);
}

/// Many threads on two nodes claim one firing: exactly one wins and sets the next due time;
/// an earlier due time is taken; a schedule that is not active does not fire.
pub fn a_firing_raced_from_many_threads_fires_once(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    block_on(f.backend.save_schedule(schedule(0))).unwrap();
    for round in 1..=20u64 {
        let due = round * 2_000;
        let firings = race(&f, 6, |backend, _| fire(backend, "sched-0", due));
        let won: Vec<&Firing> = firings
            .iter()
            .filter(|firing| matches!(firing, Firing::Won(_)))
            .collect();
        assert_eq!(won.len(), 1, "round {round}");
        let Firing::Won(schedule) = won[0] else {
            unreachable!()
        };
        assert_eq!(schedule.last_fired_ms, Some(due));
        assert_eq!(schedule.next_due_ms, Some(due + 2_000));
        assert!(firings
            .iter()
            .all(|firing| matches!(firing, Firing::Won(_) | Firing::Taken)));
    }
    assert_eq!(
        fire(&*f.backend, "sched-0", 1_000),
        Firing::Taken,
        "before the last"
    );
    for status in [
        ScheduleStatus::Paused,
        ScheduleStatus::Cancelled,
        ScheduleStatus::Done,
    ] {
        block_on(f.backend.set_schedule_status("sched-0", status))
            .unwrap()
            .unwrap();
        assert_eq!(
            fire(&*f.backend, "sched-0", 100_000),
            Firing::Inactive(status)
        );
    }
}

/// Failed firings in a row pause the schedule at the limit; a delivery resets the count; a
/// skipped firing changes nothing; receipts are newest first and bounded.
pub fn receipts_count_failures_and_pause_the_schedule(make: MakePlace<'_>) {
    use switchboard_records::schedule::RECEIPTS_KEPT_PER_SCHEDULE;
    let f = Fixture::default(make);
    block_on(f.backend.save_schedule(schedule(3))).unwrap();
    let record = |due, outcome| {
        block_on(
            f.backend
                .record_receipt(receipt("sched-3", due, outcome), after(3, false)),
        )
        .unwrap()
    };
    assert_eq!(record(1, FiringOutcome::Nothing).consecutive_failures, 1);
    assert_eq!(record(2, FiringOutcome::Failed).consecutive_failures, 2);
    assert_eq!(record(3, FiringOutcome::Skipped).consecutive_failures, 2);
    assert_eq!(
        block_on(f.backend.receipts("sched-3", 1)).unwrap(),
        [receipt("sched-3", 3, FiringOutcome::Skipped)],
        "with the scheduler's detail"
    );
    assert_eq!(record(4, FiringOutcome::NoReply).consecutive_failures, 0);
    record(5, FiringOutcome::Failed);
    record(6, FiringOutcome::Failed);
    let paused = record(7, FiringOutcome::Nothing);
    assert_eq!(paused.consecutive_failures, 3);
    assert_eq!(
        paused.status,
        ScheduleStatus::Paused,
        "paused after three failures in a row"
    );
    let resumed = block_on(
        f.backend
            .set_schedule_status("sched-3", ScheduleStatus::Active),
    )
    .unwrap()
    .unwrap();
    assert_eq!(resumed.status, ScheduleStatus::Active);
    assert_eq!(resumed.consecutive_failures, 0);
    assert_eq!(
        block_on(
            f.backend
                .set_schedule_status("missing", ScheduleStatus::Paused)
        )
        .unwrap(),
        None
    );
    let newest = block_on(f.backend.receipts("sched-3", 2)).unwrap();
    assert_eq!(
        newest,
        [
            receipt("sched-3", 7, FiringOutcome::Nothing),
            receipt("sched-3", 6, FiringOutcome::Failed)
        ]
    );
    for due in 8..(8 + RECEIPTS_KEPT_PER_SCHEDULE as u64) {
        record(due, FiringOutcome::Posted);
    }
    let kept = block_on(f.backend.receipts("sched-3", 1_000)).unwrap();
    assert_eq!(kept.len(), RECEIPTS_KEPT_PER_SCHEDULE);
    assert_eq!(kept.last().unwrap().due_ms, 8, "the oldest went");
    let missing = block_on(f.backend.record_receipt(
        receipt("missing", 1, FiringOutcome::Posted),
        after(3, false),
    ))
    .unwrap_err();
    assert_eq!(missing.kind(), StoreErrorKind::NotFound);
    // A one-shot schedule is done after its firing, whatever came of it; a schedule that is
    // not active keeps its status.
    block_on(f.backend.save_schedule(schedule(9))).unwrap();
    let done = block_on(
        f.backend
            .record_receipt(receipt("sched-9", 1, FiringOutcome::Failed), after(1, true)),
    )
    .unwrap();
    assert_eq!(done.status, ScheduleStatus::Done);
    assert_eq!(
        fire(&*f.backend, "sched-9", 5),
        Firing::Inactive(ScheduleStatus::Done)
    );
    block_on(
        f.backend
            .set_schedule_status("sched-9", ScheduleStatus::Cancelled),
    )
    .unwrap();
    let cancelled = block_on(f.backend.record_receipt(
        receipt("sched-9", 2, FiringOutcome::Failed),
        after(1, false),
    ))
    .unwrap();
    assert_eq!(cancelled.status, ScheduleStatus::Cancelled);
    assert_eq!(cancelled.consecutive_failures, 2);
}

/// A day, in ms: rows spread over several UTC days.
const DAY_MS: u64 = 86_400_000;
/// UTC midnight five days ago: rows recent enough that no backend's retention prunes them at
/// a reopen, at day boundaries so reports by day are the same every run.
fn start() -> u64 {
    (super::now_ms() / DAY_MS - 5) * DAY_MS
}

fn usage_rows(t0: u64) -> Vec<UsageRow> {
    (0..48u64)
        .map(|n| UsageRow {
            charge: UsageCharge {
                run_id: format!("run-{}", n / 3),
                agent: ["support", "release", "ops"][(n % 3) as usize].to_owned(),
                user: match n % 5 {
                    0 => None,
                    4 => Some(format!("token:ci-{}", n % 2)),
                    _ => Some(id(n % 4).to_string()),
                },
                session: Some(if n % 2 == 0 {
                    CHANNEL.to_string()
                } else {
                    "api:open-webui".into()
                }),
                guild: (n % 7 != 0).then(|| id(100 + n % 2).to_string()),
                model: "gpt-x".into(),
            },
            tokens_in: 100 + n * 7,
            tokens_out: 10 + n,
            micro_usd: 1_000 + n * 13,
            estimated: n % 4 == 0,
            at_ms: t0 + n * DAY_MS / 10,
        })
        .collect()
}

/// Sums over a window and reports of every grouping match the reference fold; pruning
/// forgets old rows; rows recorded from many threads are all counted.
pub fn usage_sums_and_reports_match_the_reference(make: MakePlace<'_>) {
    use switchboard_records::usage::fold_usage;
    let mut f = Fixture::default(make);
    let t0 = start();
    let rows = usage_rows(t0);
    let recorded = race(&f, 6, |backend, i| {
        for row in rows.iter().skip(i).step_by(6) {
            block_on(backend.record_usage(row.clone())).unwrap();
        }
    });
    assert_eq!(recorded.len(), 6);
    let windows = [
        (0, u64::MAX / 2),
        (t0, t0 + DAY_MS),
        (t0 + DAY_MS + 1, t0 + 3 * DAY_MS),
        (t0 + 10 * DAY_MS, t0 + 11 * DAY_MS),
    ];
    let subjects = [
        UsageSubject::User(id(1).to_string()),
        UsageSubject::User("token:ci-1".into()),
        UsageSubject::Session(CHANNEL.to_string()),
        UsageSubject::Session("api:open-webui".into()),
        UsageSubject::Guild(id(101).to_string()),
        UsageSubject::Agent("release".into()),
        UsageSubject::Agent("nobody".into()),
    ];
    let check = |f: &Fixture| {
        for (since, until) in windows {
            for subject in &subjects {
                let mut want = UsageTotals::default();
                rows.iter()
                    .filter(|r| r.at_ms >= since && r.at_ms < until && subject.matches(r))
                    .for_each(|r| want.add(r));
                let got = block_on(f.backend.usage_sum(subject.clone(), since, until)).unwrap();
                assert_eq!(got, want, "{subject:?} in {since}..{until}");
            }
            for by in [
                UsageBy::User,
                UsageBy::Session,
                UsageBy::Guild,
                UsageBy::Agent,
                UsageBy::Day,
            ] {
                for limit in [2, 100] {
                    let query = UsageQuery {
                        by,
                        since_ms: since,
                        until_ms: until,
                        limit,
                    };
                    assert_eq!(
                        block_on(f.backend.usage_report(query.clone())).unwrap(),
                        fold_usage(&rows, &query),
                        "{query:?}"
                    );
                }
            }
        }
    };
    check(&f);
    if f.place.durable() {
        f.reopen();
        check(&f);
    }
    let cut = t0 + 2 * DAY_MS;
    let older = rows.iter().filter(|r| r.at_ms < cut).count();
    assert_eq!(block_on(f.backend.prune_usage(cut)).unwrap(), older);
    let left = block_on(f.backend.usage_sum(
        UsageSubject::Session(CHANNEL.to_string()),
        0,
        u64::MAX / 2,
    ))
    .unwrap()
    .calls
        + block_on(f.backend.usage_sum(
            UsageSubject::Session("api:open-webui".into()),
            0,
            u64::MAX / 2,
        ))
        .unwrap()
        .calls;
    assert_eq!(left as usize, rows.len() - older);
}

fn beat(node: &str, at_ms: u64) -> NodeBeat {
    NodeBeat {
        node_id: node.to_owned(),
        started_ms: 5,
        address: Some(format!("127.0.0.1:80{}", node.len())),
        at_ms,
    }
}

/// Heartbeats say who is alive and where; a node silent for a day is forgotten.
pub fn nodes_heartbeat_and_silent_ones_are_forgotten(make: MakePlace<'_>) {
    use switchboard_records::cluster::NODES_KEPT_MS;
    let f = Fixture::default(make);
    block_on(f.backend.node_heartbeat(beat("node-a", 1_000))).unwrap();
    block_on(f.backend.node_heartbeat(beat("node-b", 2_000))).unwrap();
    block_on(f.backend.node_heartbeat(NodeBeat {
        address: None,
        ..beat("node-a", 3_000)
    }))
    .unwrap();
    let nodes = block_on(f.backend.nodes(0, 10)).unwrap();
    assert_eq!(
        nodes,
        [
            Node {
                node_id: "node-a".into(),
                started_ms: 5,
                address: None,
                last_seen_ms: 3_000
            },
            Node {
                node_id: "node-b".into(),
                started_ms: 5,
                address: Some("127.0.0.1:806".into()),
                last_seen_ms: 2_000
            }
        ]
    );
    let live = block_on(f.backend.nodes(2_500, 10)).unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(block_on(f.backend.nodes(0, 1)).unwrap().len(), 1);
    block_on(
        f.backend
            .node_heartbeat(beat("node-c", 2_500 + NODES_KEPT_MS)),
    )
    .unwrap();
    let kept: Vec<String> = block_on(f.backend.nodes(0, 10))
        .unwrap()
        .into_iter()
        .map(|n| n.node_id)
        .collect();
    assert_eq!(kept, ["node-a", "node-c"], "node-b was silent for a day");
}

/// Many nodes ask for one shard at once: one holds it; it renews, others wait for the lease
/// to end or for a release by the holder.
pub fn a_shard_raced_for_has_one_holder(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    for shard in 0..10u32 {
        let now = u64::from(shard) * 100;
        let grants = race(&f, 6, |backend, i| {
            block_on(backend.acquire_shard(shard, Lease::new(format!("node-{i}"), now, 50)))
                .unwrap()
        });
        let holders: Vec<usize> = grants
            .iter()
            .enumerate()
            .filter(|(_, g)| **g == ShardGrant::Held { until_ms: now + 50 })
            .map(|(i, _)| i)
            .collect();
        assert_eq!(holders.len(), 1, "shard {shard}: {grants:?}");
        let holder = format!("node-{}", holders[0]);
        for grant in &grants {
            if let ShardGrant::Taken(lease) = grant {
                assert_eq!(lease.node_id, holder);
                assert_eq!(lease.until_ms, now + 50);
            }
        }
    }
    let lease_of = |shard: u32| {
        block_on(f.backend.shard_leases())
            .unwrap()
            .into_iter()
            .find(|l| l.shard == shard)
            .unwrap()
    };
    let holder = lease_of(3).node_id;
    let other = if holder == "node-0" {
        "node-1"
    } else {
        "node-0"
    };
    assert_eq!(
        block_on(f.backend.acquire_shard(3, Lease::new(&holder, 320, 50))).unwrap(),
        ShardGrant::Held { until_ms: 370 },
        "the holder renews"
    );
    assert!(matches!(
        block_on(f.backend.acquire_shard(3, Lease::new(other, 369, 50))).unwrap(),
        ShardGrant::Taken(_)
    ));
    assert_eq!(
        block_on(f.backend.acquire_shard(3, Lease::new(other, 370, 50))).unwrap(),
        ShardGrant::Held { until_ms: 420 },
        "free once the lease ended"
    );
    assert!(
        !block_on(f.backend.release_shard(3, &holder)).unwrap(),
        "not its any more"
    );
    assert!(block_on(f.backend.release_shard(3, other)).unwrap());
    assert_eq!(
        block_on(f.backend.acquire_shard(3, Lease::new(&holder, 400, 50))).unwrap(),
        ShardGrant::Held { until_ms: 450 },
        "free once released"
    );
    let shards: Vec<u32> = block_on(f.backend.shard_leases())
        .unwrap()
        .iter()
        .map(|l| l.shard)
        .collect();
    assert_eq!(shards, (0..10).collect::<Vec<_>>());
}

/// IDENTIFY slots of one bucket taken at once from many threads and nodes are each
/// `spacing` apart; buckets are apart; a slot is never before now.
pub fn identify_slots_raced_are_spaced_apart(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    let mut slots = race(&f, 6, |backend, _| {
        block_on(backend.take_identify_slot(0, 1_000, 5_000)).unwrap()
    });
    slots.sort_unstable();
    assert_eq!(slots, [1_000, 6_000, 11_000, 16_000, 21_000, 26_000]);
    assert_eq!(
        block_on(f.backend.take_identify_slot(1, 1_000, 5_000)).unwrap(),
        1_000,
        "another bucket"
    );
    assert_eq!(
        block_on(f.backend.take_identify_slot(0, 100_000, 5_000)).unwrap(),
        100_000,
        "never before now"
    );
    assert_eq!(
        block_on(f.backend.take_identify_slot(0, 100_001, 5_000)).unwrap(),
        105_000
    );
}

/// The cluster's shard count is unset until raised, is never lowered, and nodes raising it
/// at once all end up agreeing on the highest.
pub fn the_shard_count_is_raised_to_the_highest_and_never_lowered(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    assert_eq!(block_on(f.backend.shard_count()).unwrap(), None);
    let answers = race(&f, 6, |backend, i| {
        let asked = 2 + u32::try_from(i).unwrap();
        (asked, block_on(backend.raise_shard_count(asked)).unwrap())
    });
    for (asked, agreed) in answers {
        assert!((asked..=7).contains(&agreed), "{asked} -> {agreed}");
    }
    assert_eq!(block_on(f.backend.shard_count()).unwrap(), Some(7));
    assert_eq!(
        block_on(f.backend.raise_shard_count(3)).unwrap(),
        7,
        "never lowered"
    );
    if let Some(second) = f.place.second_node() {
        assert_eq!(
            block_on(second.shard_count()).unwrap(),
            Some(7),
            "every node"
        );
    }
    assert_eq!(
        block_on(f.backend.raise_shard_count(u32::MAX)).unwrap(),
        u32::MAX
    );
    assert_eq!(block_on(f.backend.shard_count()).unwrap(), Some(u32::MAX));
}

/// A key is won by exactly one of many callers (threads, nodes) until it expires, then once
/// again.
pub fn once_is_won_by_one_caller_until_it_expires(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    for round in 0..10u64 {
        let key = format!("timer:workflow-{round}:deadline «ü»");
        let won = race(&f, 6, |backend, _| {
            block_on(backend.once(&key, 1_000, 500)).unwrap()
        });
        assert_eq!(won.iter().filter(|w| **w).count(), 1, "round {round}");
        assert!(!block_on(f.backend.once(&key, 1_499, 500)).unwrap());
        assert!(block_on(f.backend.once_held(&key, 1_499)).unwrap(), "held");
        assert!(
            !block_on(f.backend.once_held(&key, 1_500)).unwrap(),
            "expired at its end"
        );
        assert!(!block_on(f.backend.once_held("timer:never-taken", 1_000)).unwrap());
        let again = race(&f, 4, |backend, _| {
            block_on(backend.once(&key, 1_500, 500)).unwrap()
        });
        assert_eq!(
            again.iter().filter(|w| **w).count(),
            1,
            "expired: once more"
        );
    }
}

/// Fills `backend` with some of every agent kind: what the copy tests move.
pub fn fill_agent_kinds(backend: &dyn Backend) {
    let limits = NoteLimits {
        max_notes: 10,
        max_chars: 1_000,
    };
    for (scope, key) in [
        (NoteScope::Global, "style"),
        (NoteScope::Session(CHANNEL), "deploy"),
        (NoteScope::User(MIRA), "name"),
    ] {
        block_on(backend.put_note(note(scope, key, "kept «ü»"), limits)).unwrap();
    }
    for session in [CHANNEL, OTHER] {
        for n in 1..=3 {
            block_on(backend.save_summary(summary(session, n, 100 + n))).unwrap();
        }
    }
    for n in 0..3 {
        block_on(backend.save_schedule(schedule(n))).unwrap();
    }
    fire(backend, "sched-1", 10_000);
    for n in 0..4u64 {
        let session = if n < 2 { CHANNEL } else { OTHER };
        block_on(backend.enqueue_run(new_run(&format!("copied-{n}"), session, n), 10)).unwrap();
    }
    // Recent: ended runs past their lifetime are pruned.
    let t = super::now_ms();
    let run = block_on(backend.claim_next_run(Lease::new("node-1", t, 1_000)))
        .unwrap()
        .unwrap();
    block_on(backend.finish_run(&run.id, "node-1", end(RunState::Finished, "done", t + 10)))
        .unwrap()
        .unwrap();
    block_on(backend.claim_next_run(Lease::new("node-1", t + 20, 1_000))).unwrap();
    for row in usage_rows(start()).into_iter().take(7) {
        block_on(backend.record_usage(row)).unwrap();
    }
}

/// Asserts that `to` holds every agent kind `from` holds.
pub fn assert_holds_agent_kinds(from: &dyn Backend, to: &dyn Backend) {
    assert_eq!(
        block_on(to.notes_after(None, 100)).unwrap(),
        block_on(from.notes_after(None, 100)).unwrap(),
        "notes"
    );
    assert_eq!(
        block_on(to.summaries_after(None, 100)).unwrap(),
        block_on(from.summaries_after(None, 100)).unwrap(),
        "summaries"
    );
    assert_eq!(
        block_on(to.schedules(None, 100)).unwrap(),
        block_on(from.schedules(None, 100)).unwrap(),
        "schedules"
    );
    let all = RunFilter {
        limit: 100,
        ..RunFilter::default()
    };
    assert_eq!(
        block_on(to.runs(all.clone())).unwrap(),
        block_on(from.runs(all)).unwrap(),
        "runs, under their places"
    );
    assert_eq!(
        block_on(to.usage_after(0, 100)).unwrap(),
        block_on(from.usage_after(0, 100)).unwrap(),
        "usage rows, under their ids"
    );
}

/// The listings a copy reads page through every agent kind, and the imports keep ids.
pub fn agent_kinds_can_be_listed_and_imported_for_a_copy(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    fill_agent_kinds(&*f.backend);
    let summaries = block_on(f.backend.summaries_after(None, 1)).unwrap();
    assert_eq!(summaries.len(), 3, "one session's, oldest first");
    assert!(summaries
        .windows(2)
        .all(|w| w[0].created_ms < w[1].created_ms));
    let rest = block_on(f.backend.summaries_after(Some(summaries[0].session_id), 10)).unwrap();
    assert_eq!(rest.len(), 3);
    assert_ne!(rest[0].session_id, summaries[0].session_id);
    let usage = block_on(f.backend.usage_after(0, 3)).unwrap();
    assert_eq!(usage.len(), 3);
    let more = block_on(f.backend.usage_after(usage[2].id, 100)).unwrap();
    assert_eq!(more.len(), 4);
    assert!(more[0].id > usage[2].id);
    // Rows already kept are skipped; a new id is kept under it, and later rows go above.
    let far = more[3].id + 100;
    let mut imported = usage.clone();
    imported.push(switchboard_records::KeptUsage {
        id: far,
        row: usage[0].row.clone(),
    });
    block_on(f.backend.import_usage(imported)).unwrap();
    block_on(f.backend.record_usage(usage[1].row.clone())).unwrap();
    let all = block_on(f.backend.usage_after(0, 100)).unwrap();
    assert_eq!(all.len(), 9);
    assert_eq!(all[7].id, far);
    assert!(all[8].id > far);
    // Runs: an id or a place already kept is skipped; a new one keeps its place.
    let runs = block_on(f.backend.runs(RunFilter {
        limit: 100,
        ..RunFilter::default()
    }))
    .unwrap();
    let top = runs[0].seq;
    let mut moved = runs[0].clone();
    moved.id = "same-place".into();
    let mut copied = runs[1].clone();
    copied.seq = top + 50;
    let mut fresh = runs[1].clone();
    fresh.id = "fresh".into();
    fresh.seq = top + 60;
    block_on(f.backend.import_runs(vec![moved, copied, fresh.clone()])).unwrap();
    assert_eq!(block_on(f.backend.run("same-place")).unwrap(), None);
    assert_eq!(
        block_on(f.backend.run(&runs[1].id)).unwrap().as_ref(),
        Some(&runs[1])
    );
    assert_eq!(block_on(f.backend.run("fresh")).unwrap(), Some(fresh));
    let Enqueued::Queued(later) =
        block_on(f.backend.enqueue_run(new_run("later", MIRA, 1), 10)).unwrap()
    else {
        panic!("queued")
    };
    assert!(later.seq > top + 60);
    let census = block_on(f.backend.census()).unwrap();
    assert_eq!(
        (
            census.notes,
            census.summaries,
            census.schedules,
            census.runs,
            census.usage
        ),
        (3, 6, 3, 6, 9)
    );
}

/// Text as a backend may keep it: PostgreSQL holds no NUL character (it becomes U+FFFD).
fn kept_as(original: &str, kept: &str) -> bool {
    kept == original || kept == original.replace('\0', "\u{FFFD}")
}

/// Garbage into every agent aggregate is answered, never fatal: NULs, quotes, huge keys and
/// ids, empty strings, zero limits, times at the end of `u64`, absurd usage figures.
pub fn garbage_into_the_agent_aggregates_is_answered_not_fatal(make: MakePlace<'_>) {
    use switchboard_records::usage::USAGE_VALUE_MAX;
    let f = Fixture::default(make);
    let b = &*f.backend;
    let nasty = [
        String::new(),
        "\0".to_owned(),
        "'; DROP TABLE notes; --".to_owned(),
        "\u{202e}rtl \u{1F9F5}\r\n\t\\%_".to_owned(),
        "k".repeat(10_000),
    ];
    let roomy = NoteLimits {
        max_notes: 100,
        max_chars: 1_000_000,
    };
    for (i, text) in nasty.iter().enumerate() {
        let key = format!("{text}{i}");
        let put = block_on(b.put_note(note(NoteScope::Session(CHANNEL), &key, text), roomy));
        assert_eq!(put.unwrap(), NotePut::Saved);
        let kept = block_on(b.note(NoteScope::Session(CHANNEL), &key))
            .unwrap()
            .expect("found by the key it was put under");
        assert!(kept_as(text, &kept.text), "{i}");
        assert!(kept_as(&key, &kept.key), "{i}");
        let run_id = format!("run{text}{i}");
        block_on(b.enqueue_run(new_run(&run_id, id(i as u64), 1), 10)).unwrap();
        assert!(block_on(b.run(&run_id)).unwrap().is_some(), "{i}");
        block_on(b.save_summary(Summary {
            text: text.clone(),
            ..summary(OTHER, i as u64, i as u64)
        }))
        .unwrap();
        assert!(block_on(b.heartbeat_run(text, Lease::new(text, 0, 0))).is_ok());
        assert!(block_on(b.schedule(text)).unwrap().is_none());
        assert!(block_on(b.once(text, u64::MAX, u64::MAX)).is_ok());
    }
    assert_eq!(
        block_on(b.put_note(
            note(NoteScope::Global, "x", "y"),
            NoteLimits {
                max_notes: 0,
                max_chars: 0
            }
        ))
        .unwrap(),
        NotePut::Full { notes: 0, chars: 0 }
    );
    // Zero limits answer nothing.
    assert!(block_on(b.notes(NoteScope::Session(CHANNEL), 0))
        .unwrap()
        .is_empty());
    assert!(block_on(b.notes_after(None, 0)).unwrap().is_empty());
    assert!(block_on(b.summaries(OTHER, 0)).unwrap().is_empty());
    assert!(block_on(b.summaries_after(None, 0)).unwrap().is_empty());
    assert!(block_on(b.runs(RunFilter::default())).unwrap().is_empty());
    assert!(block_on(b.schedules(None, 0)).unwrap().is_empty());
    assert!(block_on(b.nodes(0, 0)).unwrap().is_empty());
    assert!(block_on(b.usage_after(0, 0)).unwrap().is_empty());
    // Times at the end of u64 saturate rather than fail.
    let claimed = block_on(b.claim_next_run(Lease::new("node", u64::MAX, u64::MAX))).unwrap();
    assert!(claimed.is_some());
    assert!(block_on(b.interrupt_expired_runs(u64::MAX, 100)).is_ok());
    assert!(block_on(b.take_identify_slot(0, u64::MAX, u64::MAX)).is_ok());
    assert!(block_on(b.take_identify_slot(0, u64::MAX, u64::MAX)).is_ok());
    assert!(block_on(b.acquire_shard(u32::MAX, Lease::new("n", u64::MAX, u64::MAX))).is_ok());
    assert!(block_on(b.prune_runs(u64::MAX)).is_ok());
    // A model reporting absurd figures is capped, so sums never overflow.
    for _ in 0..3 {
        block_on(b.record_usage(UsageRow {
            tokens_in: u64::MAX,
            tokens_out: u64::MAX,
            micro_usd: u64::MAX,
            ..usage_rows(1_000).remove(1)
        }))
        .unwrap();
    }
    let sum =
        block_on(b.usage_sum(UsageSubject::Session("api:open-webui".into()), 0, u64::MAX)).unwrap();
    assert_eq!(sum.tokens_in, 3 * USAGE_VALUE_MAX);
    assert_eq!(sum.micro_usd, 3 * USAGE_VALUE_MAX);
    let report = block_on(b.usage_report(UsageQuery {
        by: UsageBy::Day,
        since_ms: 0,
        until_ms: u64::MAX,
        limit: usize::MAX,
    }))
    .unwrap();
    assert_eq!(report.len(), 1);
    assert!(block_on(b.usage_sum(UsageSubject::Agent("\0".into()), u64::MAX, 0)).is_ok());
}

/// The run decisions not raced above, raced: one session's queue bound and one run id under
/// many enqueuers; a heartbeat or an end against the reaper; an abort against a claim. Each
/// ends one way or the other, never both.
pub fn run_decisions_raced_end_one_way(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    for round in 0..10u64 {
        let session = id(1_000 + round);
        let queued = race(&f, 6, |backend, i| {
            block_on(backend.enqueue_run(new_run(&format!("q{round}-{i}"), session, i as u64), 3))
                .unwrap()
        });
        let won = queued
            .iter()
            .filter(|e| matches!(e, Enqueued::Queued(_)))
            .count();
        // Nothing runs: the first queued is about to start, three wait behind it.
        assert_eq!(won, 4, "round {round}: the session's bound holds");
        let same = race(&f, 6, |backend, _| {
            block_on(backend.enqueue_run(new_run(&format!("same-{round}"), id(round), 1), 10))
        });
        assert_eq!(
            same.iter().filter(|e| e.is_ok()).count(),
            1,
            "one id, one run"
        );
        assert!(same
            .iter()
            .filter_map(|e| e.as_ref().err())
            .all(|err| err.kind() == StoreErrorKind::Conflict));
    }
    // Drain what is queued so each round below starts from one run.
    while let Some(run) = claim(&*f.backend, "drain", 0) {
        block_on(
            f.backend
                .finish_run(&run.id, "drain", end(RunState::Failed, "", 0)),
        )
        .unwrap()
        .unwrap();
    }
    for round in 0..10u64 {
        let t = 1_000 * (round + 1);
        let session = id(2_000 + round);
        enqueue(&f, new_run(&format!("beat-{round}"), session, t));
        let run = claim(&*f.backend, "holder", t).unwrap();
        // At t + 1_001 the lease (until t + 1_000) has ended; a heartbeat and a reaper race.
        let (beat, reaped) = race_two(
            &f,
            |b| block_on(b.heartbeat_run(&run.id, Lease::new("holder", t + 1_001, 1_000))).unwrap(),
            |b| block_on(b.interrupt_expired_runs(t + 1_001, 10)).unwrap(),
        );
        let interrupted = reaped.iter().any(|r| r.id == run.id);
        assert_ne!(
            matches!(beat, Heartbeat::Held { .. }),
            interrupted,
            "round {round}: renewed or interrupted, not both: {beat:?}"
        );
        if !interrupted {
            block_on(
                f.backend
                    .finish_run(&run.id, "holder", end(RunState::Finished, "", t)),
            )
            .unwrap()
            .unwrap();
        }
        // An end and a reaper race the same way.
        enqueue(&f, new_run(&format!("end-{round}"), session, t));
        let run = claim(&*f.backend, "holder", t).unwrap();
        let (ended, reaped) = race_two(
            &f,
            |b| {
                block_on(b.finish_run(&run.id, "holder", end(RunState::Finished, "x", t + 1_001)))
                    .unwrap()
            },
            |b| block_on(b.interrupt_expired_runs(t + 1_001, 10)).unwrap(),
        );
        let interrupted = reaped.iter().any(|r| r.id == run.id);
        assert_ne!(ended.is_some(), interrupted, "round {round}");
        let state = block_on(f.backend.run(&run.id)).unwrap().unwrap().state;
        let want = if interrupted {
            RunState::Interrupted
        } else {
            RunState::Finished
        };
        assert_eq!(state, want);
        // An abort and a claim race: aborted while queued, or claimed and flagged.
        enqueue(&f, new_run(&format!("abort-{round}"), session, t));
        let (aborted, claimed) = race_two(
            &f,
            |b| block_on(b.request_abort(&format!("abort-{round}"), t)).unwrap(),
            |b| block_on(b.claim_next_run(Lease::new("claimer", t, 1_000))).unwrap(),
        );
        let run = block_on(f.backend.run(&format!("abort-{round}")))
            .unwrap()
            .unwrap();
        assert!(aborted.is_some());
        assert!(run.abort_requested, "round {round}");
        match claimed {
            Some(claimed) => {
                assert_eq!(claimed.id, run.id);
                assert_eq!(run.state, RunState::Running, "claimed, then flagged");
                block_on(
                    f.backend
                        .finish_run(&run.id, "claimer", end(RunState::Aborted, "", t)),
                )
                .unwrap()
                .unwrap();
            }
            None => assert_eq!(run.state, RunState::Aborted, "aborted before a claim"),
        }
    }
}

/// Runs `a` and `b` at once on two threads (the second on the second node when there is one).
fn race_two<A: Send, B: Send>(
    f: &Fixture,
    a: impl FnOnce(&dyn Backend) -> A + Send,
    b: impl FnOnce(&dyn Backend) -> B + Send,
) -> (A, B) {
    let second = f
        .place
        .second_node()
        .unwrap_or_else(|| Arc::clone(&f.backend));
    let first_node = Arc::clone(&f.backend);
    let start = Barrier::new(2);
    std::thread::scope(|scope| {
        let first = scope.spawn(|| {
            start.wait();
            a(&*first_node)
        });
        let other = scope.spawn(|| {
            start.wait();
            b(&*second)
        });
        (first.join().unwrap(), other.join().unwrap())
    })
}

/// Receipts recorded at once from many threads and nodes are all counted.
pub fn receipts_raced_are_all_counted(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    block_on(f.backend.save_schedule(schedule(5))).unwrap();
    let counted = race(&f, 6, |backend, i| {
        block_on(backend.record_receipt(
            receipt("sched-5", i as u64, FiringOutcome::Failed),
            after(100, false),
        ))
        .unwrap()
        .consecutive_failures
    });
    let mut counted = counted;
    counted.sort_unstable();
    assert_eq!(counted, [1, 2, 3, 4, 5, 6], "each saw the ones before it");
    let kept = block_on(f.backend.schedule("sched-5")).unwrap().unwrap();
    assert_eq!(kept.consecutive_failures, 6);
    assert_eq!(
        block_on(f.backend.receipts("sched-5", 100)).unwrap().len(),
        6
    );
}
