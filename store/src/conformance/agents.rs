//! The conformance tests of the agent aggregates: memory, runs, schedules, usage, the cluster.
//! Every atomic decision is raced on real threads, half of them on a second node when the
//! backend has one.

use std::sync::{Arc, Barrier};

use futures_executor::block_on;
use switchboard_records::notes::SUMMARIES_KEPT_PER_SESSION;
use switchboard_records::{Note, NoteLimits, NoteScope, Summary};

use super::{id, Fixture, MakePlace, CHANNEL, MIRA, OTHER};
use crate::{Backend, NotePut};

/// Runs `each(backend, i)` on `n` threads released together, the odd ones on the second node
/// when there is one; the answers in thread order.
fn race<T: Send>(f: &Fixture, n: usize, each: impl Fn(&dyn Backend, usize) -> T + Sync) -> Vec<T> {
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
