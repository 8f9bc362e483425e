//! The PostgreSQL backend against a real server doing what servers do: nodes starting together,
//! a crash and restart in the middle of a write stream, an outage, a slow search, a URL that
//! leads nowhere.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use entity::Snowflake;
use futures_executor::block_on;
use switchboard_records::{
    AuditFilter, AuditRow, Message, MessageQuery, SearchMatch, SearchQuery, SearchTerm,
    TriggerClaim,
};
use switchboard_store::{
    AuditStore, Backend, Claim, MessageStore, SearchStore, StoreErrorKind, TriggerStore,
};
use switchboard_store_postgres::testing::PgCluster;
use switchboard_store_postgres::{PgBackend, PgOptions, SCHEMA_VERSION};

const CHANNEL: Snowflake = Snowflake(1_100_000_000_000_000_001);

fn message(n: u64, text: &str) -> Message {
    Message {
        id: Snowflake(1_300_000_000_000_000_000 + n),
        channel_id: CHANNEL,
        author_id: Snowflake(1_200_000_000_000_000_001),
        author_is_bot: false,
        content: text.to_owned(),
        text: text.to_owned(),
        timestamp: "2026-11-22T12:00:00.000000+00:00".into(),
        edited_timestamp: None,
        reply_to: None,
        attachments: Vec::new(),
        reactions: Vec::new(),
    }
}

fn audit(n: u64) -> AuditRow {
    AuditRow {
        time_ms: now_ms(),
        caller: "operator".into(),
        run: Some(format!("run-{n}")),
        requested_by: None,
        tool: "surface.messages.send".into(),
        sessions: vec![CHANNEL],
        input: serde_json::json!({ "n": n }),
        decision: "allow".into(),
        decided_by: None,
        outcome: "ok".into(),
        code: None,
        duration_ms: 1,
        count: 1,
        events: Vec::new(),
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn options() -> PgOptions {
    PgOptions {
        retention: switchboard_store::Retention {
            messages_per_channel: 100_000,
            ..Default::default()
        },
        operation_timeout: Duration::from_secs(10),
        ..PgOptions::default()
    }
}

/// Flushes until it succeeds (PostgreSQL coming back), at most `limit`.
fn flush_within(backend: &PgBackend, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        match block_on(backend.flush()) {
            Ok(()) => return,
            Err(err) => {
                assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
                assert!(Instant::now() < deadline, "never flushed: {err}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn stored_ids(backend: &PgBackend) -> BTreeSet<u64> {
    block_on(backend.messages(CHANNEL, MessageQuery::newest(1_000_000)))
        .expect("read the messages")
        .iter()
        .map(|m| m.id.0 - 1_300_000_000_000_000_000)
        .collect()
}

#[test]
fn nodes_starting_together_on_a_fresh_database_migrate_once() {
    let cluster = PgCluster::shared();
    let name = cluster.empty_database().expect("a database");
    let url = cluster.url(&name);
    const NODES: usize = 6;
    let start = Arc::new(Barrier::new(NODES));
    let opened: Vec<Result<PgBackend, _>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..NODES)
            .map(|_| {
                let start = Arc::clone(&start);
                let url = url.clone();
                scope.spawn(move || {
                    start.wait();
                    PgBackend::open(&url, options())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for backend in &opened {
        assert!(backend.is_ok(), "{:?}", backend.as_ref().err());
    }
    let steps = cluster
        .psql(
            &name,
            "SELECT count(*), max(version) FROM switchboard_migrations",
        )
        .unwrap();
    assert_eq!(steps, format!("{SCHEMA_VERSION}|{SCHEMA_VERSION}"));
    // Every node works on the one schema.
    for (n, backend) in opened.into_iter().enumerate() {
        let backend = backend.unwrap();
        backend.save_message(message(n as u64, "hello")).unwrap();
        block_on(backend.flush()).unwrap();
        block_on(backend.close()).unwrap();
    }
    assert_eq!(
        cluster
            .psql(&name, "SELECT count(*) FROM messages")
            .unwrap(),
        NODES.to_string()
    );
}

/// Ingest sends one notification per batch, never one per message (NOTIFY takes a lock at
/// commit that every writer of the cluster shares).
#[test]
fn ingest_notifies_once_per_batch_not_per_message() {
    use std::sync::atomic::AtomicUsize;
    let cluster = PgCluster::shared();
    let name = cluster.database().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let heard = Arc::new(AtomicUsize::new(0));
    let (client, mut connection) = runtime
        .block_on(
            cluster
                .conninfo(&name)
                .parse::<tokio_postgres::Config>()
                .unwrap()
                .connect(tokio_postgres::NoTls),
        )
        .unwrap();
    let counter = Arc::clone(&heard);
    let driver = std::thread::spawn(move || {
        runtime.block_on(async move {
            let listen = client.batch_execute("LISTEN switchboard_changes");
            let mut listen = std::pin::pin!(listen);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            let mut listening = false;
            loop {
                tokio::select! {
                    done = &mut listen, if !listening => { done.unwrap(); listening = true; }
                    message = std::future::poll_fn(|cx| connection.poll_message(cx)) => {
                        match message {
                            Some(Ok(tokio_postgres::AsyncMessage::Notification(_))) => {
                                counter.fetch_add(1, Ordering::SeqCst);
                            }
                            Some(Ok(_)) => {}
                            _ => return,
                        }
                    }
                    () = tokio::time::sleep_until(deadline) => return,
                }
            }
        });
    });
    std::thread::sleep(Duration::from_millis(300));
    let backend = PgBackend::open(&cluster.url(&name), options()).unwrap();
    const MESSAGES: u64 = 5_000;
    for n in 0..MESSAGES {
        backend.save_message(message(n, "ingest")).unwrap();
    }
    block_on(backend.flush()).unwrap();
    let batches: usize = cluster
        .psql(&name, "SELECT count(*) FROM changes WHERE body <> '[]'")
        .unwrap()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while heard.load(Ordering::SeqCst) < batches && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let heard = heard.load(Ordering::SeqCst);
    assert_eq!(
        heard, batches,
        "one notification per batch that changed something"
    );
    assert!(
        (5..=500).contains(&heard),
        "{MESSAGES} messages went in {heard} batches"
    );
    block_on(backend.close()).unwrap();
    drop(driver);
}

#[test]
fn a_database_of_a_newer_schema_is_refused_not_touched() {
    let cluster = PgCluster::shared();
    let name = cluster.database().unwrap();
    cluster
        .psql(
            &name,
            "INSERT INTO switchboard_migrations (version, applied_by) VALUES (99, 'the future')",
        )
        .unwrap();
    let err = PgBackend::open(&cluster.url(&name), options()).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Corrupt);
    assert!(err.to_string().contains("newer switchboard"), "{err}");
}

#[test]
fn a_url_that_leads_nowhere_is_answered_at_once() {
    let started = Instant::now();
    let err = PgBackend::open(
        "postgres://switchboard@localhost/nothing?host=/nonexistent-dir",
        options(),
    )
    .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable);
    assert!(err.to_string().contains("cannot connect"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    for garbage in ["postgres://[", "host='", "sslmode=require host=/tmp"] {
        let err = PgBackend::open(garbage, options()).unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{garbage}: {err}");
    }
}

#[test]
fn a_search_past_its_budget_is_stopped_with_timed_out() {
    let cluster = PgCluster::shared();
    let name = cluster.database().unwrap();
    let backend = PgBackend::open(&cluster.url(&name), options()).unwrap();
    for n in 0..30_000 {
        backend
            .save_message(message(n, &format!("status report number {n} is green")))
            .unwrap();
    }
    block_on(backend.flush()).unwrap();
    let query = SearchQuery {
        terms: vec![SearchTerm {
            any_of: vec![SearchMatch::Words {
                text: "stat".into(),
                prefix: true,
            }],
        }],
        channels: vec![CHANNEL],
        author: None,
        before: None,
        after: None,
        limit: 20,
    };
    let err = block_on(backend.search(query.clone(), Duration::from_micros(1))).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::TimedOut, "{err}");
    assert!(err.to_string().contains("rarer words"), "{err}");
    // The connection is fine afterwards, and a search with time answers.
    let hits = block_on(backend.search(query, Duration::from_secs(10))).unwrap();
    assert_eq!(hits.len(), 20);
    block_on(backend.close()).unwrap();
}

/// Writes and flushes, crashes PostgreSQL (`pg_ctl restart -m immediate`) while writes keep
/// coming, and checks: the backend reconnects by itself, everything flushed before the crash
/// is there, and every write queued during the outage landed exactly once (audit rows have no
/// natural key: a batch retried after a lost COMMIT answer would show twice).
#[test]
fn a_crash_and_restart_of_postgres_loses_nothing_flushed_and_lands_queued_writes_once() {
    let cluster = PgCluster::start().expect("a PostgreSQL of this test's own");
    let name = cluster.database().unwrap();
    let backend = Arc::new(PgBackend::open(&cluster.url(&name), options()).unwrap());
    for n in 0..500 {
        backend
            .save_message(message(n, "before the crash"))
            .unwrap();
        backend.record(audit(n)).unwrap();
    }
    block_on(backend.flush()).expect("flushed before the crash");

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let backend = Arc::clone(&backend);
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut queued = Vec::new();
            let mut n = 500;
            while !stop.load(Ordering::Relaxed) && n < 5_000 {
                // Every write is queued (the queue is far from full): none may be refused.
                backend
                    .save_message(message(n, "during the outage"))
                    .expect("queued");
                backend.record(audit(n)).expect("queued");
                queued.push(n);
                n += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            queued
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    cluster.restart_immediate().expect("PostgreSQL restarts");
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let queued = writer.join().unwrap();
    assert!(
        queued.len() > 100,
        "writes went on through the crash: {}",
        queued.len()
    );

    flush_within(&backend, Duration::from_secs(60));
    let ids = stored_ids(&backend);
    let expected: BTreeSet<u64> = (0..500).chain(queued.iter().copied()).collect();
    assert_eq!(ids, expected, "every message, once");
    let audit_rows = cluster
        .psql(&name, "SELECT count(*), count(DISTINCT run) FROM audit")
        .unwrap();
    let total = expected.len();
    assert_eq!(
        audit_rows,
        format!("{total}|{total}"),
        "every audit row, once"
    );
    // Decisions and reads work on the new connections.
    let claim = TriggerClaim {
        channel_id: CHANNEL,
        message_id: Snowflake(switchboard_records::trigger::first_id_at(now_ms()).0 + 7),
        claimed_ms: now_ms(),
    };
    assert!(matches!(
        block_on(backend.claim_trigger(claim)).unwrap(),
        Claim::Won(_)
    ));
    let page = block_on(backend.audit_page(AuditFilter {
        limit: 5,
        ..AuditFilter::default()
    }))
    .unwrap();
    assert_eq!(page.rows.len(), 5);
    block_on(backend.close()).unwrap();
}

/// With PostgreSQL down, every operation answers `Unavailable` within a bound (no hang, no
/// panic): reads, decisions, flushes, and writes once the bounded queue is full; the queued
/// writes land once it is back.
#[test]
fn a_node_that_loses_postgres_answers_unavailable_and_catches_up() {
    let cluster = PgCluster::start().expect("a PostgreSQL of this test's own");
    let name = cluster.database().unwrap();
    let backend = PgBackend::open(
        &cluster.url(&name),
        PgOptions {
            queue_capacity: 50,
            ..options()
        },
    )
    .unwrap();
    backend.save_message(message(0, "before")).unwrap();
    block_on(backend.flush()).unwrap();

    cluster.stop_immediate().expect("PostgreSQL stops");
    let bound = Duration::from_secs(8);

    let started = Instant::now();
    let err = block_on(backend.message(CHANNEL, message(0, "").id)).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    assert!(
        started.elapsed() < bound,
        "a read waited {:?}",
        started.elapsed()
    );

    let started = Instant::now();
    let claim = TriggerClaim {
        channel_id: CHANNEL,
        message_id: Snowflake(switchboard_records::trigger::first_id_at(now_ms()).0 + 1),
        claimed_ms: now_ms(),
    };
    let err = block_on(backend.claim_trigger(claim)).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    assert!(started.elapsed() < bound);

    // Writes queue up to the bound, then are refused at once.
    let started = Instant::now();
    let mut accepted = Vec::new();
    let mut refused = None;
    for n in 1..=1_000 {
        match backend.save_message(message(n, "during")) {
            Ok(()) => accepted.push(n),
            Err(err) => {
                refused = Some(err);
                break;
            }
        }
    }
    let refused = refused.expect("a full queue refuses while PostgreSQL is away");
    assert_eq!(refused.kind(), StoreErrorKind::Unavailable, "{refused}");
    assert!(
        refused.to_string().contains("cannot be reached"),
        "{refused}"
    );
    assert!(
        accepted.len() >= 40,
        "the queue held its writes: {}",
        accepted.len()
    );
    assert!(
        started.elapsed() < bound,
        "writes waited {:?}",
        started.elapsed()
    );

    let started = Instant::now();
    let err = block_on(backend.flush()).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    assert!(started.elapsed() < bound);

    cluster.start_again().expect("PostgreSQL starts again");
    flush_within(&backend, Duration::from_secs(60));
    let expected: BTreeSet<u64> = std::iter::once(0).chain(accepted).collect();
    assert_eq!(stored_ids(&backend), expected);
    block_on(backend.close()).unwrap();
}

fn two_nodes() -> (PgBackend, PgBackend) {
    let cluster = PgCluster::shared();
    let name = cluster.database().unwrap();
    let open = || PgBackend::open(&cluster.url(&name), options()).unwrap();
    (open(), open())
}

/// A click handled on one node settles an approval a call waits for on another: the waiting
/// node's feed hears of it (from the other origin), and its own late click is refused.
#[test]
fn a_decision_on_one_node_reaches_the_other_nodes_feed() {
    use switchboard_records::{Approval, ApprovalCard, ApprovalState, Settlement};
    use switchboard_store::feed::{Changed, Next};
    use switchboard_store::{ApprovalStore, ChangeFeed, Decided};
    let (waiting, clicked) = two_nodes();
    let approval = Approval {
        card: ApprovalCard {
            id: "apr_00000000000000aa".into(),
            tool: "surface.messages.send".into(),
            session_id: Some(CHANNEL),
            session_label: "#ops".into(),
            preview: "ship it".into(),
            requested_by: "operator".into(),
            caller: "operator".into(),
            owner: "operator".into(),
            binding: "0123456789ab".into(),
            run: Some("run-1".into()),
            tool_call_id: None,
            state: ApprovalState::Pending {
                expires_at_ms: u64::MAX,
            },
        },
        channel_id: CHANNEL,
        message_id: None,
        binding: "0123456789ab".repeat(5),
    };
    waiting.save_approval(approval.clone()).unwrap();
    block_on(waiting.flush()).unwrap();
    let mut changes = waiting.subscribe();
    let decided = block_on(clicked.decide_approval(
        approval.id(),
        Settlement::Approve { by: "@mira".into() },
        now_ms(),
    ))
    .unwrap();
    assert!(matches!(decided, Decided::Decided(_)), "{decided:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match changes.try_next() {
            Some(Next::Change(change))
                if change.what == Changed::Approval(approval.id().into()) =>
            {
                assert_eq!(change.origin, clicked.origin());
                break;
            }
            Some(Next::Change(_)) => {}
            other => {
                assert!(Instant::now() < deadline, "never heard: {other:?}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    let late = block_on(waiting.decide_approval(
        approval.id(),
        Settlement::Deny {
            by: "@tomas".into(),
        },
        now_ms(),
    ))
    .unwrap();
    let Decided::AlreadyDecided(kept) = late else {
        panic!("decided twice: {late:?}")
    };
    assert!(matches!(kept.card.state, ApprovalState::Approved { ref by, .. } if by == "@mira"));
    block_on(waiting.close()).unwrap();
    block_on(clicked.close()).unwrap();
}

/// Threads on two nodes claim the same triggers at once: each is won exactly once.
#[test]
fn claims_raced_from_two_nodes_are_won_once() {
    let (a, b) = two_nodes();
    let nodes = [&a, &b];
    const ROUNDS: u64 = 50;
    for round in 0..ROUNDS {
        let start = Barrier::new(4);
        let claim = TriggerClaim {
            channel_id: CHANNEL,
            message_id: Snowflake(switchboard_records::trigger::first_id_at(now_ms()).0 + round),
            claimed_ms: now_ms(),
        };
        let won: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|i| {
                    let (node, start, claim) = (nodes[i % 2], &start, claim.clone());
                    scope.spawn(move || {
                        start.wait();
                        usize::from(matches!(
                            block_on(node.claim_trigger(claim)).expect("claim"),
                            Claim::Won(_)
                        ))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(won, 1, "round {round}");
    }
    block_on(a.close()).unwrap();
    block_on(b.close()).unwrap();
}

/// Text PostgreSQL cannot hold as given (NUL characters) or cannot index whole (a token longer
/// than a lexeme may be, more words than a `tsvector` has positions for) is stored, read back
/// and searched, never refused: the NUL becomes U+FFFD, the oversized token is left out of the
/// index, later positions share the last one.
#[test]
fn garbage_text_is_stored_and_searched_not_refused() {
    let cluster = PgCluster::shared();
    let name = cluster.database().unwrap();
    let backend = PgBackend::open(&cluster.url(&name), options()).unwrap();
    let mut nul = message(1, "");
    nul.content = "zero\0byte <@\0>".into();
    nul.text = "zero\0byte".into();
    nul.timestamp = "\0".into();
    let huge_token = "x".repeat(5_000);
    let many_words = format!(
        "{huge_token} {} needle",
        (0..20_000)
            .map(|n| format!("w{n}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    backend.save_message(nul).unwrap();
    backend.save_message(message(2, &many_words)).unwrap();
    backend
        .upsert_user(switchboard_records::User {
            id: Snowflake(9),
            username: "a\0b".into(),
            global_name: None,
            is_bot: false,
        })
        .unwrap();
    block_on(backend.flush()).expect("nothing was refused");
    let stored = block_on(backend.message(CHANNEL, message(1, "").id))
        .unwrap()
        .unwrap();
    assert_eq!(stored.text, "zero\u{FFFD}byte");
    assert_eq!(
        block_on(backend.user(Snowflake(9)))
            .unwrap()
            .unwrap()
            .username,
        "a\u{FFFD}b"
    );
    let search = |word: &str| {
        block_on(backend.search(
            SearchQuery {
                terms: vec![SearchTerm {
                    any_of: vec![SearchMatch::Words {
                        text: word.into(),
                        prefix: false,
                    }],
                }],
                channels: vec![CHANNEL],
                author: None,
                before: None,
                after: None,
                limit: 10,
            },
            Duration::from_secs(10),
        ))
        .expect("a search answers")
        .len()
    };
    assert_eq!(search("zero"), 1);
    assert_eq!(
        search("needle"),
        1,
        "a word past the last position is still found"
    );
    assert_eq!(search("w19999"), 1);
    assert_eq!(
        search(&huge_token),
        0,
        "a token too long to index is left out"
    );
    assert_eq!(search("\0"), 0);
    block_on(backend.close()).unwrap();
}

/// After PostgreSQL restarts, the listener reconnects by itself: a change made on one node
/// reaches the other node's feed again.
#[test]
fn the_feed_between_nodes_comes_back_after_a_restart() {
    use switchboard_store::feed::{Changed, Next};
    use switchboard_store::ChangeFeed;
    let cluster = PgCluster::start().expect("a PostgreSQL of this test's own");
    let name = cluster.database().unwrap();
    let open = || PgBackend::open(&cluster.url(&name), options()).unwrap();
    let (watching, writing) = (open(), open());
    let mut changes = watching.subscribe();
    let heard = |changes: &mut switchboard_store::feed::Changes, n: u64| {
        let want = Changed::Message {
            channel_id: CHANNEL,
            id: message(n, "").id,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match changes.try_next() {
                Some(Next::Change(change)) if change.what == want => return,
                Some(_) => {}
                None => {
                    assert!(
                        Instant::now() < deadline,
                        "message {n} never reached the feed"
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    };
    writing.save_message(message(1, "before")).unwrap();
    block_on(writing.flush()).unwrap();
    heard(&mut changes, 1);
    cluster.restart_immediate().unwrap();
    writing.save_message(message(2, "after")).unwrap();
    flush_within(&writing, Duration::from_secs(30));
    heard(&mut changes, 2);
    block_on(watching.close()).unwrap();
    block_on(writing.close()).unwrap();
}
