//! The SQLite backend behind the store traits, with the read cache in front, median of rounds.
//! Phase 1 of issue 22 ran it alternately against the store it replaced (`bot::store`, now
//! gone; the figures are in `BENCHMARKS.md`); it stays as the SQLite backend's bench. Four
//! parts:
//!
//! - `ingest`: the store side of gateway ingest — per event the author's upsert and the
//!   message's insert, on one thread — for 50,000 events, timed to the end of the flush
//!   (durable), in events/s (`bot/benches/ingest.rs` adds serenity's gateway in front).
//! - `store`: `insert_message` of 100,000 messages over 100 channels timed to the flush, and
//!   resident memory per cached message, in a child process of its own.
//! - `search`: a store built with 200,000 messages (`SEARCH_BENCH_MESSAGES`), then six query
//!   kinds, p50 / p99 per kind.
//! - `audit`: `/v1/call` on loopback with no audit log and with the backend keeping it,
//!   alternating rounds; the ratio with/without (`bot/benches/audit.rs`).
//!
//! Run: `cargo bench -p switchboard-store-sqlite --bench compare -- ingest store search audit`
//! (`COMPARE_ROUNDS` rounds, default 5; `CALL_BENCH_ROUNDS` for audit).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchboard_records::{Message, SearchQuery, Snowflake, User};
use switchboard_store::{Backend, CacheOptions, Store};
use switchboard_store_sqlite::{SqliteBackend, SqliteOptions};

#[path = "../tests/support/mod.rs"]
mod support;
use support::rss_bytes;

use switchboard_store::corpus::{
    median, percentile, query, Rng, BASE_ID, CHANNELS, CHANNEL_BASE, KINDS, USER_BASE,
};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

fn rounds() -> usize {
    env("COMPARE_ROUNDS", 5) as usize
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("switchboard-compare-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temp dir");
        TempDir(dir)
    }

    fn file(&self, name: &str) -> String {
        let path = self.0.join(name);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        path.to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn new(path: &str, keep: usize) -> Store {
    let backend: Arc<dyn Backend> = Arc::new(
        SqliteBackend::open(
            path,
            SqliteOptions {
                retention: switchboard_store::Retention {
                    messages_per_channel: keep,
                    ..Default::default()
                },
                ..SqliteOptions::default()
            },
        )
        .expect("the backend opens"),
    );
    Store::open(
        backend,
        CacheOptions {
            messages_per_channel: keep,
        },
    )
    .expect("the cache opens")
}

/// A realistic ~80-byte message: raw content with a mention, canonical text with the name.
fn message(n: u64) -> Message {
    let content =
        format!("<@{USER_BASE}> deploy {n:07} finished on staging; logs are in the usual place ok");
    let text =
        format!("@tomas-novak deploy {n:07} finished on staging; logs are in the usual place ok");
    Message {
        id: Snowflake(BASE_ID + n),
        channel_id: Snowflake(CHANNEL_BASE + n % CHANNELS),
        author_id: Snowflake(USER_BASE + n % 50),
        author_is_bot: false,
        content,
        text,
        timestamp: format!(
            "2026-11-22T12:{:02}:{:02}.000000+00:00",
            (n / 60) % 60,
            n % 60
        ),
        edited_timestamp: None,
        reply_to: n.is_multiple_of(10).then(|| Snowflake(BASE_ID + n - 1)),
        attachments: Vec::new(),
        reactions: Vec::new(),
    }
}

/// The store side of gateway ingest: author upsert + message insert per event, durable.
fn ingest() {
    let events = env("INGEST_EVENTS", 50_000);
    let dir = TempDir::new("ingest");
    println!("## ingest: {events} events (author upsert + insert), timed to the flush");
    let (mut rates, mut cpus) = (Vec::new(), Vec::new());
    for round in 0..rounds() {
        quiet_disk();
        let messages: Vec<Message> = (0..events).map(message).collect();
        let cpu_before = cpu_time();
        let store = new(&dir.file("new.db"), events as usize);
        let started = Instant::now();
        for m in messages {
            store.upsert_user(User {
                id: m.author_id,
                username: "tomas-novak".into(),
                global_name: Some("Tomas Novak".into()),
                is_bot: false,
            });
            store.insert_message(m);
        }
        store.flush_blocking().expect("flush");
        let rate = events as f64 / started.elapsed().as_secs_f64();
        store.close().expect("close");
        let cpu = (cpu_time() - cpu_before).as_secs_f64() * 1e6 / events as f64;
        println!("round {round}: {rate:.0} events/s ({cpu:.1} µs CPU/event)");
        rates.push(rate);
        cpus.push(cpu);
    }
    println!(
        "ingest: {:.0} events/s (median of {} rounds); CPU per event {:.1} µs",
        median(rates.clone()),
        rates.len(),
        median(cpus)
    );
}

/// CPU time this process has used (user + system, every thread), from `/proc/self/stat`.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name (which may hold spaces), from field 3 on.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15: 11 and 12 here; clock ticks of 1/100 s.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// Writes back what the previous side left dirty (its checkpoint), so each side starts on a
/// quiet disk.
fn quiet_disk() {
    let _ = std::process::Command::new("sync").status();
    std::thread::sleep(Duration::from_millis(300));
}

const CHILD: &str = "SWITCHBOARD_COMPARE_CHILD";

/// The `store` part, in a child process: prints `rate bytes_per_message`.
fn store_child(dir: &Path) {
    let count = env("STORE_BENCH_MESSAGES", 100_000);
    let per_channel = usize::try_from(count / CHANNELS + 1).unwrap_or(usize::MAX);
    let path = dir.join("new.db").to_string_lossy().into_owned();
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{path}{suffix}"));
    }
    let mut text = 0u64;
    let store = new(&path, per_channel);
    store.flush_blocking().ok();
    let before = rss_bytes();
    let started = Instant::now();
    for n in 0..count {
        let m = message(n);
        text += (m.content.len() + m.text.len()) as u64;
        store.insert_message(m);
    }
    store.flush_blocking().expect("flush");
    let rate = count as f64 / started.elapsed().as_secs_f64();
    let delta = rss_bytes().saturating_sub(before);
    assert_eq!(store.message_count() as u64, count);
    store.close().expect("close");
    println!("{rate} {}", (delta as f64 - text as f64) / count as f64);
}

fn store_bench() {
    let dir = TempDir::new("store");
    let exe = std::env::current_exe().expect("the bench's own path");
    println!("## store: insert_message of {} messages over {CHANNELS} channels, to the flush; memory per message beyond its text", env("STORE_BENCH_MESSAGES", 100_000));
    let mut figures: Vec<(f64, f64)> = Vec::new();
    for round in 0..rounds() {
        quiet_disk();
        let out = std::process::Command::new(&exe)
            .env(CHILD, dir.0.display().to_string())
            .output()
            .expect("the child runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let mut parts = text
            .split_whitespace()
            .map(|p| p.parse::<f64>().unwrap_or(0.0));
        let (rate, bytes) = (parts.next().unwrap_or(0.0), parts.next().unwrap_or(0.0));
        println!("round {round}: {rate:.0} msg/s, {bytes:.0} bytes/message beyond text");
        figures.push((rate, bytes));
    }
    println!(
        "store: {:.0} msg/s and {:.0} B/message (medians)",
        median(figures.iter().map(|f| f.0).collect()),
        median(figures.iter().map(|f| f.1).collect())
    );
}

fn search() {
    let count = env("SEARCH_BENCH_MESSAGES", 200_000);
    let queries = env("SEARCH_BENCH_QUERIES", 1_200) as usize;
    let dir = TempDir::new("search");
    let per_channel = usize::try_from(count / CHANNELS + 1).unwrap_or(usize::MAX);
    let store = new(&dir.file("new.db"), per_channel);
    println!("## search: {count} messages over {CHANNELS} channels, {queries} queries");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let messages: Vec<Message> = (0..count)
        .map(|n| switchboard_store::corpus::message(n, &mut rng))
        .collect();
    let started = Instant::now();
    for m in messages {
        store.insert_message(m);
    }
    store.flush_blocking().expect("flush");
    let ingest = count as f64 / started.elapsed().as_secs_f64();
    println!("ingest with the FTS index: {ingest:.0} msg/s");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let channels: Vec<Snowflake> = (0..CHANNELS).map(|c| Snowflake(CHANNEL_BASE + c)).collect();
    let backend = Arc::clone(store.backend());
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); KINDS.len()];
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    for i in 0..queries + 60 {
        let kind = i % KINDS.len();
        let search = SearchQuery {
            terms: query(kind, &mut rng),
            channels: channels.clone(),
            author: None,
            before: None,
            after: None,
            limit: 20,
        };
        let started = Instant::now();
        let hits = runtime
            .block_on(backend.search(search, Duration::from_secs(5)))
            .expect("search")
            .len();
        let took = started.elapsed();
        std::hint::black_box(hits);
        if i >= 60 {
            times[kind].push(took);
        }
    }
    println!("| query | p50 | p99 |");
    println!("|---|---|---|");
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1_000.0);
    let mut all: Vec<Duration> = Vec::new();
    for (kind, t) in times.iter_mut().enumerate() {
        t.sort();
        println!(
            "| {} | {} | {} |",
            KINDS[kind],
            ms(percentile(t, 0.5)),
            ms(percentile(t, 0.99))
        );
        all.extend(t.iter().copied());
    }
    all.sort();
    println!(
        "| **all** | **{}** | **{}** |",
        ms(percentile(&all, 0.5)),
        ms(percentile(&all, 0.99))
    );
    store.close().expect("close");
}

fn audit() {
    use switchboard_testkit::testing::load::{
        bench_config, busy_ops_surface, http_post, median_min_max, throughput,
    };
    use switchboard_testkit::testing::TestServer;
    const CONNECTIONS: usize = 4;
    const REQUESTS: usize = 5_000;
    let dir = TempDir::new("audit");
    let backend: Arc<dyn Backend> = Arc::new(
        SqliteBackend::open(&dir.file("new.db"), SqliteOptions::default())
            .expect("the backend opens"),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let rounds = switchboard_testkit::testing::load::rounds();
    println!("## audit: /v1/call (surface.messages.list, 50 messages), {CONNECTIONS} connections x {REQUESTS} requests, {rounds} alternating rounds");
    runtime.block_on(async {
        let config = bench_config();
        let none = TestServer::start_with_audit(&config, busy_ops_surface(), Arc::new(switchboard_testkit::testing::NoAudit)).await.expect("server");
        let traits = TestServer::start_with_audit(&config, busy_ops_surface(), backend.clone()).await.expect("server");
        let body = serde_json::to_vec(&serde_json::json!({"tool": "surface.messages.list", "input": {"sessionId": "#ops", "limit": 50}})).unwrap();
        let mut ratios = Vec::new();
        for round in 0..rounds {
            let mut rates = [0.0; 2];
            // Alternate which goes first.
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                let server = [&none, &traits][i];
                let request = http_post("/v1/call", Some(server.operator_token()), &body);
                rates[i] = throughput(server.addr(), request, CONNECTIONS, REQUESTS).await.0;
            }
            ratios.push(rates[1] / rates[0]);
            println!("round: none {:.0} req/s, SQLite {:.0}", rates[0], rates[1]);
        }
        let (median_ratio, _, _) = median_min_max(ratios);
        println!("audit: with/without the audit log in SQLite {median_ratio:.2} (median)");
    });
    let stats = backend.queue_stats();
    futures_executor::block_on(backend.close()).expect("close");
    println!(
        "traits writer queue: high water {} of {}, {} waits",
        stats.high_water, stats.capacity, stats.waits
    );
}

fn main() {
    if let Ok(child) = std::env::var(CHILD) {
        store_child(Path::new(&child));
        return;
    }
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| args.is_empty() || args.iter().any(|a| a == name);
    if wanted("ingest") {
        ingest();
    }
    if wanted("store") {
        store_bench();
    }
    if wanted("search") {
        search();
    }
    if wanted("audit") {
        audit();
    }
}
