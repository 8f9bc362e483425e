//! The agent aggregates on a SQLite file: a file of an older schema gains their tables at open,
//! and rows past their lifetimes are forgotten when the file is opened again.

use futures_executor::block_on;
use switchboard_records::run::FINISHED_RUNS_KEPT_MS;
use switchboard_records::usage::USAGE_KEPT_MS;
use switchboard_records::{
    NewRun, Note, NoteLimits, NoteScope, Run, RunFilter, RunState, Snowflake, UsageCharge,
    UsageRow, UsageSubject,
};
use switchboard_store::{Backend, ClusterStore, MemoryStore, NotePut, RunStore, UsageStore};
use switchboard_store_sqlite::{SqliteBackend, SqliteOptions};

mod support;
use support::TempDir;

const SESSION: Snowflake = Snowflake(1_100_000_000_000_000_001);

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn usage(at_ms: u64) -> UsageRow {
    UsageRow {
        charge: UsageCharge {
            run_id: "r".into(),
            agent: "support".into(),
            user: None,
            session: Some(SESSION.to_string()),
            guild: None,
            model: "m".into(),
        },
        tokens_in: 10,
        tokens_out: 1,
        micro_usd: 5,
        estimated: true,
        at_ms,
    }
}

fn ended(id: &str, seq: u64, finished_ms: u64) -> Run {
    Run {
        state: RunState::Finished,
        finished_ms: Some(finished_ms),
        ..Run::queued(
            NewRun {
                id: id.into(),
                session: SESSION.to_string(),
                agent: "support".into(),
                trigger: "api".into(),
                requested_by: None,
                parent_run: None,
                enqueued_ms: finished_ms,
            },
            seq,
        )
    }
}

#[test]
fn ended_runs_and_usage_past_their_lifetimes_are_forgotten_at_open() {
    let dir = TempDir::new("agents-retention");
    let now = now_ms();
    let day = 86_400_000;
    {
        let store = SqliteBackend::open(&dir.db(), SqliteOptions::default()).unwrap();
        block_on(store.import_runs(vec![
            ended("old", 1, now - FINISHED_RUNS_KEPT_MS - day),
            ended("recent", 2, now - day),
        ]))
        .unwrap();
        let queued_long_ago = NewRun {
            id: "waiting".into(),
            session: SESSION.to_string(),
            agent: "support".into(),
            trigger: "api".into(),
            requested_by: None,
            parent_run: None,
            enqueued_ms: 1,
        };
        block_on(store.enqueue_run(queued_long_ago, 10)).unwrap();
        block_on(store.record_usage(usage(now - USAGE_KEPT_MS - day))).unwrap();
        block_on(store.record_usage(usage(now - day))).unwrap();
        assert!(block_on(store.once("timer:a", now - 10_000, 1_000)).unwrap());
        assert!(block_on(store.once("timer:b", now, 3_600_000)).unwrap());
        block_on(store.close()).unwrap();
    }
    let store = SqliteBackend::open(&dir.db(), SqliteOptions::default()).unwrap();
    let ids: Vec<String> = block_on(store.runs(RunFilter {
        limit: 10,
        ..RunFilter::default()
    }))
    .unwrap()
    .into_iter()
    .map(|r| r.id)
    .collect();
    assert_eq!(ids, ["waiting", "recent"], "a queued run stays however old");
    let census = block_on(store.census()).unwrap();
    assert_eq!(census.usage, 1);
    assert_eq!(
        block_on(store.usage_sum(UsageSubject::Session(SESSION.to_string()), 0, u64::MAX / 2))
            .unwrap()
            .calls,
        1
    );
    assert!(!block_on(store.once("timer:b", now + 1, 1_000)).unwrap());
    assert!(block_on(store.once("timer:a", now + 1, 1_000)).unwrap());
}

#[test]
fn a_file_of_schema_6_gains_the_agent_tables() {
    let dir = TempDir::new("agents-upgrade");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/v6.db"),
        dir.db(),
    )
    .unwrap();
    let store = SqliteBackend::open(&dir.db(), SqliteOptions::default()).unwrap();
    let note = Note {
        scope: NoteScope::Global,
        key: "k".into(),
        text: "t".into(),
        untrusted: false,
        updated_ms: 1,
    };
    let limits = NoteLimits {
        max_notes: 1,
        max_chars: 10,
    };
    assert_eq!(
        block_on(store.put_note(note.clone(), limits)).unwrap(),
        NotePut::Saved
    );
    block_on(store.close()).unwrap();
    let store = SqliteBackend::open(&dir.db(), SqliteOptions::default()).unwrap();
    assert_eq!(
        block_on(store.note(NoteScope::Global, "k")).unwrap(),
        Some(note)
    );
}
