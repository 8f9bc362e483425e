//! The full-text index stays exact: after any sequence of inserts, edits, reactions, deletions,
//! forgotten channels, reopenings (which prune by retention) and batch boundaries, it holds the
//! words of the live messages and nothing else; and a store from before the writer kept the
//! index (version 5, per-row triggers) upgrades and stays searchable.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bot::store::{
    Snowflake, Store, StoreOptions, StoreSearch, StoredMessage, StoredReaction, SCHEMA_VERSION,
};
use proptest::prelude::*;

mod support;
use support::TempDir;

const CHANNELS: [Snowflake; 2] = [
    Snowflake(1_100_000_000_000_000_001),
    Snowflake(1_100_000_000_000_000_002),
];
const AUTHOR: Snowflake = Snowflake(1_200_000_000_000_000_001);
const WORDS: [&str; 6] = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"];

fn id(n: u64) -> Snowflake {
    Snowflake(1_300_000_000_000_000_000 + n)
}

fn text_of(words: &[usize]) -> String {
    words
        .iter()
        .map(|w| WORDS[*w])
        .collect::<Vec<_>>()
        .join(" ")
}

fn message(channel: Snowflake, n: u64, text: &str) -> StoredMessage {
    StoredMessage {
        id: id(n),
        channel_id: channel,
        author_id: AUTHOR,
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

fn search(store: &Store, word: &str) -> BTreeSet<Snowflake> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let hits = runtime
        .block_on(store.search(
            StoreSearch {
                expression: format!("text : \"{word}\""),
                channels: CHANNELS.to_vec(),
                author: None,
                before: None,
                after: None,
                limit: 1_000,
            },
            Duration::from_secs(5),
        ))
        .unwrap();
    hits.into_iter().map(|hit| hit.message.id).collect()
}

/// What the store lists as live, by channel: the truth the index must follow.
fn live(store: &Store) -> BTreeMap<Snowflake, String> {
    CHANNELS
        .iter()
        .flat_map(|c| store.messages(*c, 10_000, None, None))
        .map(|m| (m.id, m.text))
        .collect()
}

/// Every search answers exactly the live messages holding the word.
fn assert_searches_match(store: &Store) {
    let live = live(store);
    for word in WORDS {
        let expected: BTreeSet<Snowflake> = live
            .iter()
            .filter(|(_, text)| text.split(' ').any(|w| w == word))
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(search(store, word), expected, "search for {word}");
    }
}

/// Reads the index itself (not through the content table) of a closed store: each (message,
/// word) it holds must be a word of that message's live row, and the other way round; then
/// FTS5's own structure check.
fn assert_index_holds_exactly(path: &str) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let live: BTreeMap<i64, String> = conn
        .prepare("SELECT id, text FROM messages WHERE deleted = 0")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    conn.execute_batch(
        "CREATE VIRTUAL TABLE temp.held USING fts5vocab(main, messages_fts, instance);",
    )
    .unwrap();
    let held: BTreeSet<(i64, String)> = conn
        .prepare("SELECT doc, term FROM temp.held WHERE col = 'text'")
        .unwrap()
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap();
    let expected: BTreeSet<(i64, String)> = live
        .iter()
        .flat_map(|(id, text)| {
            text.split(' ')
                .filter(|w| !w.is_empty())
                .map(move |w| (*id, w.to_owned()))
        })
        .collect();
    assert_eq!(held, expected);
    conn.execute(
        "INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 0)",
        [],
    )
    .unwrap();
}

#[derive(Debug, Clone)]
enum Op {
    Insert {
        channel: usize,
        n: u64,
        words: Vec<usize>,
    },
    Edit {
        n: u64,
        words: Vec<usize>,
    },
    React {
        n: u64,
    },
    Delete {
        ns: Vec<u64>,
    },
    Forget {
        channel: usize,
    },
    Flush,
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    let words = prop::collection::vec(0..WORDS.len(), 0..4);
    prop_oneof![
        6 => (0..2usize, 1..30u64, words.clone())
            .prop_map(|(channel, n, words)| Op::Insert { channel, n, words }),
        3 => (1..30u64, words).prop_map(|(n, words)| Op::Edit { n, words }),
        1 => (1..30u64).prop_map(|n| Op::React { n }),
        2 => prop::collection::vec(1..30u64, 1..4).prop_map(|ns| Op::Delete { ns }),
        1 => (0..2usize).prop_map(|channel| Op::Forget { channel }),
        2 => Just(Op::Flush),
        1 => Just(Op::Reopen),
    ]
}

/// The channel holding message `n`, if the store has it live.
fn channel_of(store: &Store, n: u64) -> Option<Snowflake> {
    CHANNELS
        .into_iter()
        .find(|c| store.message(*c, id(n)).is_some())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_index_holds_exactly_the_live_messages(ops in prop::collection::vec(op(), 1..40)) {
        let dir = TempDir::new("prop");
        let path = dir.db();
        // A small retention, so reopening prunes.
        let options = StoreOptions { messages_per_channel: 8, ..StoreOptions::default() };
        let mut store = Store::open(&path, options.clone()).unwrap();
        let mut edits = 0u32;
        for op in ops {
            match op {
                Op::Insert { channel, n, words } => {
                    store.insert_message(message(CHANNELS[channel], n, &text_of(&words)));
                }
                Op::Edit { n, words } => {
                    if let Some(channel) = channel_of(&store, n) {
                        edits += 1;
                        let text = text_of(&words);
                        let stamp = format!("2026-11-22T13:{:02}:{:02}.000000+00:00", edits / 60, edits % 60);
                        store.update_message(channel, id(n), text.clone(), text, Some(stamp));
                    }
                }
                Op::React { n } => {
                    if let Some(channel) = channel_of(&store, n) {
                        store.add_reaction(channel, id(n), "👍", false);
                    }
                }
                Op::Delete { ns } => {
                    for channel in CHANNELS {
                        let ids: Vec<Snowflake> = ns.iter().map(|n| id(*n)).collect();
                        store.delete_messages(channel, &ids);
                    }
                }
                Op::Forget { channel } => {
                    store.forget_channel_messages(CHANNELS[channel]);
                }
                Op::Flush => store.flush().unwrap(),
                Op::Reopen => {
                    store.close().unwrap();
                    store = Store::open(&path, options.clone()).unwrap();
                }
            }
        }
        store.flush().unwrap();
        store.close().unwrap();
        assert_index_holds_exactly(&path);
        // Reopened, the store lists what the file holds (retention applied at open): every
        // search answers exactly those messages.
        let store = Store::open(&path, options).unwrap();
        assert_searches_match(&store);
        store.close().unwrap();
    }
}

#[test]
fn many_changes_in_one_batch_leave_the_index_exact() {
    // Everything queued before one flush lands in as few writer batches as the queue allows:
    // the same message inserted, edited twice, reacted to, deleted, and its neighbours edited.
    let dir = TempDir::new("batch");
    let path = dir.db();
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    for n in 1..=200 {
        store.insert_message(message(CHANNELS[(n % 2) as usize], n, "alpha bravo"));
    }
    for n in (1..=200).step_by(3) {
        let channel = CHANNELS[(n % 2) as usize];
        store.update_message(
            channel,
            id(n),
            "charlie".into(),
            "charlie".into(),
            Some("2026-11-22T13:00:00.000000+00:00".into()),
        );
        store.update_message(
            channel,
            id(n),
            "delta echo".into(),
            "delta echo".into(),
            Some("2026-11-22T13:00:01.000000+00:00".into()),
        );
        store.add_reaction(channel, id(n), "👍", true);
    }
    for n in (1..=200).step_by(5) {
        store.delete_message(CHANNELS[(n % 2) as usize], id(n));
    }
    store.flush().unwrap();
    assert_searches_match(&store);
    assert!(search(&store, "charlie").is_empty());
    store.close().unwrap();
    assert_index_holds_exactly(&path);
}

/// How a version-5 store kept its index: a trigger per row change.
const V5_TRIGGERS: &str = "
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages WHEN new.deleted = 0 BEGIN
    INSERT INTO messages_fts (rowid, text, refs) VALUES (new.id, new.text, new.refs);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN old.deleted = 0 BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, text, refs)
        VALUES ('delete', old.id, old.text, old.refs);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF text, refs, deleted ON messages
    WHEN old.text IS NOT new.text OR old.refs IS NOT new.refs OR old.deleted IS NOT new.deleted
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, text, refs)
        SELECT 'delete', old.id, old.text, old.refs WHERE old.deleted = 0;
    INSERT INTO messages_fts (rowid, text, refs)
        SELECT new.id, new.text, new.refs WHERE new.deleted = 0;
END;
";

fn triggers(path: &str) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger'",
        [],
        |row| row.get(0),
    )
    .unwrap()
}

#[test]
fn a_version_5_store_with_index_triggers_upgrades_and_stays_searchable() {
    let dir = TempDir::new("migrate-v5");
    let path = dir.db();
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    store.insert_message(message(CHANNELS[0], 1, "alpha bravo"));
    store.insert_message(message(CHANNELS[0], 2, "charlie"));
    store.close().unwrap();
    // Back to version 5 as it was: the triggers, and a row a version-5 writer stored through them.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(V5_TRIGGERS).unwrap();
    conn.execute(
        "INSERT INTO messages (id, channel_id, author_id, author_is_bot, content, text, timestamp)
         VALUES (?1, ?2, ?3, 0, 'delta', 'delta', '2026-11-22T12:00:00.000000+00:00')",
        rusqlite::params![id(3).0 as i64, CHANNELS[0].0 as i64, AUTHOR.0 as i64],
    )
    .unwrap();
    conn.pragma_update(None, "user_version", 5).unwrap();
    drop(conn);
    assert_eq!(triggers(&path), 3);

    let store = Store::open(&path, StoreOptions::default()).unwrap();
    assert_eq!(search(&store, "bravo"), BTreeSet::from([id(1)]));
    assert_eq!(search(&store, "delta"), BTreeSet::from([id(3)]));
    // Changes after the upgrade keep the index exact without the triggers.
    store.update_message(
        CHANNELS[0],
        id(1),
        "echo".into(),
        "echo".into(),
        Some("2026-11-22T13:00:00.000000+00:00".into()),
    );
    store.delete_message(CHANNELS[0], id(2));
    store.insert_message(message(CHANNELS[1], 4, "foxtrot alpha"));
    store.add_reaction(CHANNELS[0], id(3), "✅", false);
    store.flush().unwrap();
    assert!(search(&store, "bravo").is_empty());
    assert!(search(&store, "charlie").is_empty());
    assert_eq!(search(&store, "echo"), BTreeSet::from([id(1)]));
    assert_eq!(search(&store, "alpha"), BTreeSet::from([id(4)]));
    assert_searches_match(&store);
    let live = live(&store);
    assert_eq!(live.len(), 3);
    let reacted = store.message(CHANNELS[0], id(3)).unwrap();
    assert_eq!(
        reacted.reactions,
        vec![StoredReaction {
            emoji: "✅".into(),
            count: 1,
            me: false
        }]
    );
    store.close().unwrap();
    assert_eq!(triggers(&path), 0);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    drop(conn);
    assert_index_holds_exactly(&path);
}

#[test]
fn a_store_at_version_6_that_still_has_the_triggers_loses_them() {
    // Steps may land out of order: a store recorded at the current version that still holds
    // the per-row triggers (which would index every row twice beside the writer) drops them.
    let dir = TempDir::new("migrate-gap");
    let path = dir.db();
    Store::open(&path, StoreOptions::default())
        .unwrap()
        .close()
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(V5_TRIGGERS).unwrap();
    drop(conn);
    let store = Store::open(&path, StoreOptions::default()).unwrap();
    store.insert_message(message(CHANNELS[0], 1, "alpha"));
    store.flush().unwrap();
    assert_eq!(search(&store, "alpha"), BTreeSet::from([id(1)]));
    store.close().unwrap();
    assert_eq!(triggers(&path), 0);
    assert_index_holds_exactly(&path);
}

fn search_hits(store: &Store, expression: &str, limit: usize) -> Vec<bot::store::StoreHit> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(store.search(
            StoreSearch {
                expression: expression.into(),
                channels: CHANNELS.to_vec(),
                author: None,
                before: None,
                after: None,
                limit,
            },
            Duration::from_secs(5),
        ))
        .unwrap()
}

#[test]
fn hits_come_best_first_with_their_snippets() {
    let store = Store::open(":memory:", StoreOptions::default()).unwrap();
    store.insert_message(message(
        CHANNELS[0],
        1,
        "alpha bravo charlie delta echo foxtrot bravo charlie delta echo",
    ));
    store.insert_message(message(CHANNELS[1], 2, "alpha alpha"));
    store.insert_message(message(CHANNELS[0], 3, "alpha bravo"));
    store.insert_message(message(CHANNELS[0], 4, "bravo"));
    store.flush().unwrap();
    let hits = search_hits(&store, "text : \"alpha\"", 10);
    let order: Vec<Snowflake> = hits.iter().map(|hit| hit.message.id).collect();
    assert_eq!(order, [id(2), id(3), id(1)]);
    assert!(
        hits.windows(2).all(|w| w[0].score >= w[1].score),
        "{hits:?}"
    );
    assert_eq!(hits[0].snippet, "**alpha** **alpha**");
    assert_eq!(hits[1].snippet, "**alpha** bravo");
    assert_eq!(hits[1].message.text, "alpha bravo");
    // The limit keeps the best.
    let best: Vec<Snowflake> = search_hits(&store, "text : \"alpha\"", 1)
        .iter()
        .map(|hit| hit.message.id)
        .collect();
    assert_eq!(best, [id(2)]);
}

#[test]
fn only_the_newest_matches_are_ranked() {
    // A perfect match older than the newest RANKED_CANDIDATES matches is not answered, however
    // well it would score: ranking every match of a common word is what made searches slow.
    let store = Store::open(":memory:", StoreOptions::default()).unwrap();
    store.insert_message(message(CHANNELS[0], 1, "alpha"));
    let window = bot::store::RANKED_CANDIDATES as u64;
    for n in 2..=window + 1 {
        store.insert_message(message(
            CHANNELS[(n % 2) as usize],
            n,
            "alpha bravo charlie delta echo",
        ));
    }
    store.insert_message(message(CHANNELS[0], window + 2, "alpha charlie"));
    store.flush().unwrap();
    let hits = search_hits(&store, "text : \"alpha\"", 5);
    assert_eq!(hits.len(), 5);
    assert_eq!(hits[0].message.id, id(window + 2));
    assert!(hits.iter().all(|hit| hit.message.id != id(1)), "{hits:?}");
    // Once it is among the newest (a narrower search), it ranks first.
    let mut narrow = search_hits(&store, "text : \"alpha\" NOT text : \"charlie\"", 5);
    assert_eq!(narrow.remove(0).message.id, id(1));
}
