//! The full-text index stays exact: after any sequence of inserts, edits, reactions, deletions,
//! forgotten channels, reopenings (which prune by retention) and batch boundaries, it holds the
//! words of the live messages and nothing else, as FTS5's own vocabulary table reads it.
//! (Moved from `bot/tests/search_index.rs` with the store it tested.)

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures_executor::block_on;
use proptest::prelude::*;
use switchboard_records::{Message, SearchMatch, SearchQuery, SearchTerm, Snowflake};
use switchboard_store::{CacheOptions, Store};
use switchboard_store_sqlite::{SqliteBackend, SqliteOptions};

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

fn message(channel: Snowflake, n: u64, text: &str) -> Message {
    Message {
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

/// A store over SQLite at `path` keeping `keep` messages per channel.
fn open(path: &str, keep: usize) -> Store {
    let backend = SqliteBackend::open(
        path,
        SqliteOptions {
            retention: switchboard_store::Retention {
                messages_per_channel: keep,
                ..Default::default()
            },
            ..SqliteOptions::default()
        },
    )
    .unwrap();
    Store::open(
        Arc::new(backend),
        CacheOptions {
            messages_per_channel: keep,
        },
    )
    .unwrap()
}

fn search(store: &Store, word: &str) -> BTreeSet<Snowflake> {
    let query = SearchQuery {
        terms: vec![SearchTerm {
            any_of: vec![SearchMatch::Words {
                text: word.to_owned(),
                prefix: false,
            }],
        }],
        channels: CHANNELS.to_vec(),
        author: None,
        before: None,
        after: None,
        limit: 1_000,
    };
    let hits = block_on(store.backend().search(query, Duration::from_secs(5))).unwrap();
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
        let keep = 8;
        let mut store = open(&path, keep);
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
                Op::Flush => store.flush_blocking().unwrap(),
                Op::Reopen => {
                    store.close().unwrap();
                    store = open(&path, keep);
                }
            }
        }
        store.flush_blocking().unwrap();
        store.close().unwrap();
        drop(store);
        assert_index_holds_exactly(&path);
        // Reopened, the store lists what the file holds (retention applied at open): every
        // search answers exactly those messages.
        let store = open(&path, keep);
        assert_searches_match(&store);
        store.close().unwrap();
    }
}
