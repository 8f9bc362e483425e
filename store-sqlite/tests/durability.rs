//! What a SIGKILL leaves: everything flushed before it, and a trigger claim once its `Durable`
//! resolved, is there when the file opens again. (Moved from `bot/tests/store.rs` with the
//! store it tested.)

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_executor::block_on;
use switchboard_records::{Message, Snowflake, TriggerClaim};
use switchboard_store::{Backend, CacheOptions, Claim, Store};
use switchboard_store_sqlite::{SqliteBackend, SqliteOptions};

mod support;
use support::TempDir;

const CHANNEL: Snowflake = Snowflake(1_000_000_000_000_000_401);
const AUTHOR: Snowflake = Snowflake(1_000_000_000_000_000_102);
const CHILD_ENV: &str = "SWITCHBOARD_STORE_SQLITE_TEST_CHILD_DB";
const CHILD_MESSAGES: u64 = 500;

fn id(n: u64) -> Snowflake {
    Snowflake(1_300_000_000_000_000_000 + n)
}

fn message(n: u64) -> Message {
    Message {
        id: id(n),
        channel_id: CHANNEL,
        author_id: AUTHOR,
        author_is_bot: false,
        content: format!("message {n} for <@{AUTHOR}>"),
        text: format!("message {n} for @tomas"),
        timestamp: format!("2026-11-22T12:00:{:02}.000000+00:00", n % 60),
        edited_timestamp: None,
        reply_to: None,
        attachments: Vec::new(),
        reactions: Vec::new(),
    }
}

fn open(path: &str) -> (Arc<dyn Backend>, Store) {
    let backend: Arc<dyn Backend> =
        Arc::new(SqliteBackend::open(path, SqliteOptions::default()).expect("the store opens"));
    let store =
        Store::open(Arc::clone(&backend), CacheOptions::default()).expect("the cache loads");
    (backend, store)
}

/// The child half of [`flushed_messages_and_claims_survive_sigkill`]: does nothing in a
/// normal run.
#[test]
fn sigkill_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let (backend, store) = open(&path);
    for n in 1..=CHILD_MESSAGES {
        store.insert_message(message(n));
    }
    store.flush_blocking().unwrap();
    // A claim is durable on its own once its `Durable` resolves, without a flush after it.
    let answered = switchboard_records::trigger::first_id_at(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64,
    );
    let claim = TriggerClaim {
        channel_id: CHANNEL,
        message_id: answered,
        claimed_ms: 1,
    };
    let Claim::Won(durable) = block_on(backend.claim_trigger(claim)).unwrap() else {
        panic!("a fresh claim is won");
    };
    block_on(durable).unwrap();
    println!("flushed {answered}");
    // Unflushed writes after the acknowledgement may or may not survive.
    for n in CHILD_MESSAGES + 1..=CHILD_MESSAGES + 100 {
        store.insert_message(message(n));
    }
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn flushed_messages_and_claims_survive_sigkill() {
    use std::io::{BufRead, BufReader};

    let dir = TempDir::new("sigkill");
    let path = dir.db();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sigkill_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(answered) = line
                .split_once("flushed ")
                .and_then(|(_, id)| id.trim().parse::<u64>().ok())
            {
                let _ = tx.send(Snowflake(answered));
            }
        }
    });
    let flushed = rx.recv_timeout(Duration::from_secs(30));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let answered = flushed.expect("the child never said it had flushed");

    let started = Instant::now();
    let (backend, store) = open(&path);
    let listed = store.messages(CHANNEL, 1_000, None, None);
    assert!(
        listed.len() as u64 >= CHILD_MESSAGES,
        "{} listed",
        listed.len()
    );
    let first: Vec<Snowflake> = listed[..CHILD_MESSAGES as usize]
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(first, (1..=CHILD_MESSAGES).map(id).collect::<Vec<_>>());
    assert_eq!(store.message(CHANNEL, id(250)), Some(message(250)));
    assert!(
        block_on(backend.is_claimed(answered)).unwrap(),
        "a durable claim survives SIGKILL"
    );
    store.close().unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
}
