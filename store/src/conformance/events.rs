//! The conformance tests of the events aggregate: appended in order with increasing ids on
//! every node, read after an id, bounded by pruning, announced once per batch, garbage refused
//! with a typed error.

use std::time::{Duration, Instant};

use futures_executor::block_on;

use super::agents::race;
use super::{Fixture, MakePlace, CHANNEL};
use crate::events::{EventRow, KeptEvent, MAX_EVENT_BATCH, MAX_EVENT_BODY};
use crate::feed::{Changed, Next};
use crate::{Backend, StoreErrorKind};

fn event(n: u64) -> EventRow {
    EventRow {
        kind: if n.is_multiple_of(2) {
            "call.finished".into()
        } else {
            "gateway.state".into()
        },
        session: n.is_multiple_of(2).then_some(CHANNEL),
        caller: n
            .is_multiple_of(3)
            .then(|| format!("token «{n}» 🧵 ' OR 1=1 --")),
        time_ms: 1_700_000_000_000 + n,
        body: format!(r#"{{"type":"call.finished","n":{n},"text":"ünï\"cøde\\"}}"#),
    }
}

/// The handle a second node would use, or the first one again.
fn other_node(f: &Fixture) -> std::sync::Arc<dyn Backend> {
    f.place
        .second_node()
        .unwrap_or_else(|| std::sync::Arc::clone(&f.backend))
}

fn ids(kept: &[KeptEvent]) -> Vec<u64> {
    kept.iter().map(|e| e.id).collect()
}

/// Batches appended through two nodes get increasing ids, every id above the ones before;
/// a read after an id answers what followed it, in order, whole, at most the limit; the
/// bounds name the oldest and newest; a durable store keeps them across a reopen and gives
/// greater ids after it.
pub fn events_are_appended_in_order_and_read_after_an_id(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    assert_eq!(
        block_on(f.backend.event_bounds()).unwrap(),
        crate::EventBounds::default()
    );
    let first = block_on(f.backend.append_events((0..3).map(event).collect())).unwrap();
    let other = other_node(&f);
    let second = block_on(other.append_events((3..5).map(event).collect())).unwrap();
    assert!(block_on(f.backend.append_events(Vec::new()))
        .unwrap()
        .is_empty());
    let all: Vec<u64> = first.iter().chain(&second).copied().collect();
    assert!(all.windows(2).all(|w| w[0] < w[1]), "{all:?}");
    assert!(all[0] > 0);
    for backend in [&f.backend, &other] {
        let read = block_on(backend.events_after(0, 100)).unwrap();
        assert_eq!(ids(&read), all);
        let rows: Vec<EventRow> = read.into_iter().map(|e| e.row).collect();
        assert_eq!(rows, (0..5).map(event).collect::<Vec<_>>());
        assert_eq!(
            ids(&block_on(backend.events_after(all[2], 100)).unwrap()),
            all[3..]
        );
        assert_eq!(
            ids(&block_on(backend.events_after(all[0], 2)).unwrap()),
            all[1..3]
        );
        assert!(block_on(backend.events_after(all[4], 100))
            .unwrap()
            .is_empty());
        assert!(block_on(backend.events_after(u64::MAX, 100))
            .unwrap()
            .is_empty());
        assert!(block_on(backend.events_after(0, 0)).unwrap().is_empty());
        let bounds = block_on(backend.event_bounds()).unwrap();
        assert_eq!((bounds.oldest, bounds.newest), (Some(all[0]), all[4]));
    }
    f.reopen();
    if f.place.durable() {
        assert_eq!(ids(&block_on(f.backend.events_after(0, 100)).unwrap()), all);
        let after = block_on(f.backend.append_events(vec![event(9)])).unwrap();
        assert!(after[0] > all[4], "ids keep increasing after a reopen");
    } else {
        assert!(block_on(f.backend.events_after(0, 100)).unwrap().is_empty());
    }
}

/// Pruning keeps the newest events only, and always the newest one (so the newest id given
/// stays known); the bounds say which are kept.
pub fn pruning_events_keeps_the_newest(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    let all = block_on(f.backend.append_events((0..10).map(event).collect())).unwrap();
    assert_eq!(block_on(f.backend.prune_events(4)).unwrap(), 6);
    assert_eq!(block_on(f.backend.prune_events(4)).unwrap(), 0);
    let other = other_node(&f);
    assert_eq!(
        ids(&block_on(other.events_after(0, 100)).unwrap()),
        all[6..]
    );
    let bounds = block_on(other.event_bounds()).unwrap();
    assert_eq!((bounds.oldest, bounds.newest), (Some(all[6]), all[9]));
    assert_eq!(block_on(other.prune_events(0)).unwrap(), 3);
    assert_eq!(
        ids(&block_on(f.backend.events_after(0, 100)).unwrap()),
        all[9..]
    );
    let next = block_on(f.backend.append_events(vec![event(11)])).unwrap();
    assert!(next[0] > all[9]);
}

/// Appends raced from many threads on two nodes get distinct ids, each batch's increasing and
/// every one readable in id order.
pub fn events_raced_from_many_threads_are_ordered(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    let batches = race(&f, 6, |backend, i| {
        (0..10)
            .map(|b| {
                let rows = (0..5)
                    .map(|n| event((i * 100 + b * 5 + n) as u64))
                    .collect();
                block_on(backend.append_events(rows)).unwrap()
            })
            .collect::<Vec<_>>()
    });
    let mut given: Vec<u64> = Vec::new();
    for batch in batches.iter().flatten() {
        assert!(batch.windows(2).all(|w| w[0] < w[1]), "{batch:?}");
        given.extend(batch);
    }
    given.sort_unstable();
    given.dedup();
    assert_eq!(given.len(), 300, "every id distinct");
    let mut read = Vec::new();
    let mut after = 0;
    for _ in 0..100 {
        let page = block_on(f.backend.events_after(after, 64)).unwrap();
        let Some(last) = page.last() else { break };
        after = last.id;
        read.extend(ids(&page));
    }
    assert_eq!(read, given, "read back whole and in id order");
}

/// One append is announced once on the feed, with its highest id, on this node and — when
/// the backend is shared — on the other node too.
pub fn an_event_batch_is_announced_once(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    let second = f.place.second_node();
    let mut here = f.backend.subscribe();
    let mut there = second.as_ref().map(|s| s.subscribe());
    let appended = block_on(f.backend.append_events((0..4).map(event).collect())).unwrap();
    let newest = *appended.last().unwrap();
    let wait_for = |changes: &mut crate::feed::Changes| {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            match changes.try_next() {
                Some(Next::Change(change)) => {
                    if let Changed::Events(_) = change.what {
                        seen.push(change.what);
                    }
                }
                Some(_) => {}
                None if seen.is_empty() => std::thread::sleep(Duration::from_millis(5)),
                // Anything more of the one append would be published together.
                None => break,
            }
        }
        seen
    };
    assert_eq!(wait_for(&mut here), vec![Changed::Events(newest)]);
    if let Some(there) = there.as_mut() {
        assert_eq!(wait_for(there), vec![Changed::Events(newest)]);
    }
}

/// A batch over the bound, a body over the bound or text with NUL is refused with a typed
/// error and keeps nothing; quotes, SQL and Unicode are kept verbatim.
pub fn garbage_events_are_refused_not_fatal(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    let too_many = (0..=MAX_EVENT_BATCH as u64).map(event).collect();
    let long = EventRow {
        body: "x".repeat(MAX_EVENT_BODY + 1),
        ..event(1)
    };
    let nul = EventRow {
        caller: Some("nul\0caller".into()),
        ..event(2)
    };
    for refused in [too_many, vec![long], vec![event(3), nul]] {
        let err = block_on(f.backend.append_events(refused)).unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::Conflict, "{err}");
    }
    assert!(block_on(f.backend.events_after(0, 10)).unwrap().is_empty());
    let odd = EventRow {
        kind: "'); DROP TABLE events; --".into(),
        ..event(6)
    };
    let kept = block_on(f.backend.append_events(vec![odd.clone()])).unwrap();
    let read = block_on(f.backend.events_after(0, 10)).unwrap();
    assert_eq!(
        read,
        vec![KeptEvent {
            id: kept[0],
            row: odd
        }]
    );
}
