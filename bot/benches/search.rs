//! Full-text search over a large store, printed as plain figures.
//!
//! Builds a file store of `SEARCH_BENCH_MESSAGES` messages (default 1,000,000) over 100
//! channels through the store's own ingest path (`insert_message`, the writer's batches, which
//! keep the index too), timing that ingest; then runs `SEARCH_BENCH_QUERIES` searches (default
//! 2,000) of six kinds, round robin, each over all 100 channels as a search without
//! `sessionId` does, and prints p50 / p99 per kind and overall, and the index's size.
//!
//! The text: 6 to 18 words per message drawn from a 5,000-word vocabulary with a skewed
//! (roughly Zipf) distribution, as chat is; one message in ten mentions one of 50 users.
//!
//! Run: `cargo bench -p bot --bench search`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bot::store::{fts_expression, Snowflake, Store, StoreOptions, StoreSearch, StoredMessage};
use entity::Mention;
use toolserver::surface::{SearchMatch, SearchTerm};

const CHANNELS: u64 = 100;
const USERS: u64 = 50;
const VOCABULARY: usize = 5_000;
const BASE_ID: u64 = 1_300_000_000_000_000_000;
const CHANNEL_BASE: u64 = 1_100_000_000_000_000_000;
const USER_BASE: u64 = 1_200_000_000_000_000_000;
const LIMIT: usize = 20;

/// A small deterministic generator (xorshift64*), so every run indexes the same text.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A vocabulary rank, skewed toward the common words: rank = V · u³.
    fn rank(&mut self) -> usize {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((VOCABULARY as f64) * u * u * u) as usize
    }
}

/// Word `rank` of the vocabulary: pronounceable, distinct, 4 to 10 letters.
fn word(rank: usize) -> String {
    const SYLLABLES: [&str; 20] = [
        "ka", "lo", "mi", "ne", "ru", "sa", "te", "vo", "zi", "pa", "de", "fo", "gu", "ha", "ji",
        "bo", "ce", "wu", "xi", "yo",
    ];
    let mut n = rank;
    let mut out = String::new();
    for _ in 0..2 {
        out.push_str(SYLLABLES[n % 20]);
        n /= 20;
    }
    out.push_str(SYLLABLES[n % 20]);
    n /= 20;
    if n > 0 || rank.is_multiple_of(3) {
        out.push_str(SYLLABLES[n % 20]);
    }
    out
}

fn user_name(n: u64) -> String {
    format!("user{n:02}")
}

fn message(n: u64, rng: &mut Rng) -> StoredMessage {
    let words = 6 + rng.below(13);
    let mut text: Vec<String> = (0..words).map(|_| word(rng.rank())).collect();
    let mut content = text.clone();
    if n.is_multiple_of(10) {
        let user = rng.below(USERS);
        content.insert(0, format!("<@{}>", USER_BASE + user));
        text.insert(0, format!("@{}", user_name(user)));
    }
    StoredMessage {
        id: Snowflake(BASE_ID + n),
        channel_id: Snowflake(CHANNEL_BASE + n % CHANNELS),
        author_id: Snowflake(USER_BASE + rng.below(USERS)),
        author_is_bot: false,
        content: content.join(" "),
        text: text.join(" "),
        timestamp: "2026-11-22T12:00:00.000000+00:00".into(),
        edited_timestamp: None,
        reply_to: None,
        attachments: Vec::new(),
        reactions: Vec::new(),
    }
}

fn words(text: &str, prefix: bool) -> SearchMatch {
    SearchMatch::Words {
        text: text.to_owned(),
        prefix,
    }
}

/// The query kinds: what a person types, as the tool server parses it.
const KINDS: [&str; 6] = [
    "rare word",
    "common word",
    "two words",
    "phrase",
    "prefix",
    "@mention",
];

fn query(kind: usize, rng: &mut Rng) -> Vec<SearchTerm> {
    let term = |any_of: Vec<SearchMatch>| SearchTerm { any_of };
    match kind {
        // Ranks 1,000 and up: each in well under 1% of messages.
        0 => vec![term(vec![words(
            &word(1_000 + rng.below(4_000) as usize),
            false,
        )])],
        // Ranks 0-49: the chat's "the", "deploy", "ok" — each in several % of messages.
        1 => vec![term(vec![words(&word(rng.below(50) as usize), false)])],
        2 => vec![
            term(vec![words(&word(rng.rank()), false)]),
            term(vec![words(&word(rng.rank()), false)]),
        ],
        3 => {
            let phrase = format!("{} {}", word(rng.rank()), word(rng.rank()));
            vec![term(vec![words(&phrase, false)])]
        }
        4 => {
            let stem: String = word(100 + rng.below(900) as usize)
                .chars()
                .take(4)
                .collect();
            vec![term(vec![words(&stem, true)])]
        }
        _ => {
            let user = rng.below(USERS);
            vec![term(vec![
                words(&user_name(user), false),
                SearchMatch::Mentions(Mention::User(Snowflake(USER_BASE + user))),
            ])]
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let count: u64 = env("SEARCH_BENCH_MESSAGES", 1_000_000);
    let queries: u64 = env("SEARCH_BENCH_QUERIES", 2_000);
    let dir = TempDir::new();
    let path = dir.0.join("search.db");
    let per_channel = usize::try_from(count / CHANNELS + 1).unwrap_or(usize::MAX);
    let store = match Store::open(
        &path.to_string_lossy(),
        StoreOptions {
            messages_per_channel: per_channel,
            ..StoreOptions::default()
        },
    ) {
        Ok(store) => store,
        Err(err) => {
            eprintln!("cannot open the bench store: {err}");
            std::process::exit(1);
        }
    };
    println!(
        "search bench: {count} messages over {CHANNELS} channels, {queries} queries, store at {}",
        path.display()
    );

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let started = Instant::now();
    for n in 0..count {
        store.insert_message(message(n, &mut rng));
    }
    if let Err(err) = store.flush() {
        eprintln!("flush failed: {err}");
        std::process::exit(1);
    }
    let elapsed = started.elapsed();
    println!(
        "ingest with the FTS index: {:.0} msg/s ({count} in {:.1} s); searches rank the newest {} matches",
        count as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64(),
        bot::store::RANKED_CANDIDATES
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let channels: Vec<Snowflake> = (0..CHANNELS).map(|c| Snowflake(CHANNEL_BASE + c)).collect();
    let mut per_kind: Vec<Vec<Duration>> = vec![Vec::new(); KINDS.len()];
    let mut hits_per_kind = vec![0usize; KINDS.len()];
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    // Warm the page cache and the prepared statement as a running service has them.
    for i in 0..50 {
        let expression = fts_expression(&query(i % KINDS.len(), &mut rng));
        let search = StoreSearch {
            expression,
            channels: channels.clone(),
            author: None,
            before: None,
            after: None,
            limit: LIMIT,
        };
        let _ = runtime.block_on(store.search(search, Duration::from_secs(5)));
    }
    for i in 0..queries as usize {
        let kind = i % KINDS.len();
        let search = StoreSearch {
            expression: fts_expression(&query(kind, &mut rng)),
            channels: channels.clone(),
            author: None,
            before: None,
            after: None,
            limit: LIMIT,
        };
        let started = Instant::now();
        let result = runtime.block_on(store.search(search, Duration::from_secs(5)));
        let took = started.elapsed();
        match result {
            Ok(hits) => hits_per_kind[kind] += hits.len(),
            Err(err) => {
                eprintln!("search failed: {err}");
                std::process::exit(1);
            }
        }
        per_kind[kind].push(took);
    }
    println!("| query | p50 | p99 | mean hits (of {LIMIT}) |");
    println!("|---|---|---|---|");
    let mut all: Vec<Duration> = Vec::new();
    for (kind, mut times) in per_kind.into_iter().enumerate() {
        times.sort();
        let n = times.len().max(1);
        println!(
            "| {} | {} | {} | {:.1} |",
            KINDS[kind],
            ms(percentile(&times, 0.50)),
            ms(percentile(&times, 0.99)),
            hits_per_kind[kind] as f64 / n as f64
        );
        all.extend(times);
    }
    all.sort();
    println!(
        "| **all** | **{}** | **{}** | |",
        ms(percentile(&all, 0.50)),
        ms(percentile(&all, 0.99))
    );
    if let Err(err) = store.close() {
        eprintln!("close failed: {err}");
    }
    // Measured once the store is closed: it holds its file's lock while open.
    index_size(&path);
}

/// The index's size (its b-tree blocks, doclists included), and the whole file's.
fn index_size(path: &std::path::Path) {
    let Ok(conn) =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        eprintln!("cannot open the store to measure it");
        return;
    };
    let index: i64 = conn
        .query_row(
            "SELECT (SELECT COALESCE(SUM(LENGTH(block)), 0) FROM messages_fts_data)
                  + (SELECT COALESCE(SUM(LENGTH(sz)), 0) FROM messages_fts_docsize)",
            [],
            |row| row.get(0),
        )
        .unwrap_or_else(|err| {
            eprintln!("cannot measure the index: {err}");
            -1
        });
    let page_size: i64 = conn
        .query_row("PRAGMA page_size", [], |row| row.get(0))
        .unwrap_or(0);
    let pages: i64 = conn
        .query_row("PRAGMA page_count", [], |row| row.get(0))
        .unwrap_or(0);
    let mib = |bytes: i64| bytes as f64 / (1024.0 * 1024.0);
    println!(
        "index: {:.1} MiB; whole store file: {:.1} MiB",
        mib(index),
        mib(page_size * pages)
    );
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("switchboard-search-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(err) = std::fs::create_dir_all(&dir) {
            eprintln!("cannot create {}: {err}", dir.display());
            std::process::exit(1);
        }
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
