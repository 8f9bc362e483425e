//! The PostgreSQL backend beside its SQLite twin, in one run: alternating which goes first,
//! medians of rounds. PostgreSQL is a throwaway cluster of Debian's binaries in a temp dir on
//! the same disk as the SQLite files, syncing as a production one does (`fsync`,
//! `full_page_writes` and `synchronous_commit` on), over its Unix socket.
//!
//! - `ingest`: the store side of gateway ingest through the read cache — per event the
//!   author's upsert and the message's insert, on one thread — for `INGEST_EVENTS` (50,000)
//!   events, timed to the end of the flush (durable), in events/s; each round on a fresh
//!   database / file.
//! - `search`: `SEARCH_BENCH_MESSAGES` (1,000,000) messages of the shared corpus
//!   (`switchboard_store::corpus`) written once into each backend, then
//!   `SEARCH_BENCH_QUERIES` (1,200) queries of six kinds, alternating, p50 / p99 per kind.
//!
//! Run: `cargo bench -p switchboard-store-postgres --bench twins -- ingest search`
//! (`COMPARE_ROUNDS` rounds of ingest, default 5). The machine's load average is printed at
//! the start and end of each part: other work on the machine skews a run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_executor::block_on;
use switchboard_records::{Message, SearchQuery, Snowflake, User};
use switchboard_store::corpus::{self, load_average, median, percentile, Rng, KINDS};
use switchboard_store::{Backend, CacheOptions, Store};
use switchboard_store_postgres::testing::PgCluster;
use switchboard_store_postgres::{PgBackend, PgOptions};
use switchboard_store_sqlite::{SqliteBackend, SqliteOptions};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("switchboard-twins-{name}-{}", std::process::id()));
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

const SIDES: [&str; 2] = ["sqlite", "postgres"];

fn open(side: usize, dir: &TempDir, cluster: &PgCluster, keep: usize) -> Arc<dyn Backend> {
    if side == 0 {
        Arc::new(
            SqliteBackend::open(
                &dir.file("store.db"),
                SqliteOptions {
                    retention: switchboard_store::Retention {
                        messages_per_channel: keep,
                        ..Default::default()
                    },
                    ..SqliteOptions::default()
                },
            )
            .expect("SQLite opens"),
        )
    } else {
        let name = cluster.database().expect("a database");
        Arc::new(
            PgBackend::open(
                &cluster.url(&name),
                PgOptions {
                    retention: switchboard_store::Retention {
                        messages_per_channel: keep,
                        ..Default::default()
                    },
                    ..PgOptions::default()
                },
            )
            .expect("PostgreSQL opens"),
        )
    }
}

/// A realistic ~80-byte gateway message.
fn event(n: u64) -> Message {
    let mut m = corpus::message(n, &mut Rng(n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1));
    m.content = format!(
        "<@{}> deploy {n:07} finished on staging; logs are in the usual place ok",
        corpus::USER_BASE
    );
    m.text =
        format!("@tomas-novak deploy {n:07} finished on staging; logs are in the usual place ok");
    m
}

fn ingest(cluster: &PgCluster) {
    let events = env("INGEST_EVENTS", 50_000);
    let rounds = env("COMPARE_ROUNDS", 5) as usize;
    let dir = TempDir::new("ingest");
    println!(
        "## ingest: {events} events (author upsert + insert through the cache), timed to the flush; load average {:.1}",
        load_average()
    );
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut this = [0.0; 2];
        for side in order {
            let _ = std::process::Command::new("sync").status();
            std::thread::sleep(Duration::from_millis(300));
            let backend = open(side, &dir, cluster, events as usize);
            let store = Store::open(
                backend,
                CacheOptions {
                    messages_per_channel: events as usize,
                },
            )
            .expect("the cache opens");
            let messages: Vec<Message> = (0..events).map(event).collect();
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
            this[side] = events as f64 / started.elapsed().as_secs_f64();
            store.close().expect("close");
        }
        println!(
            "round {round}: sqlite {:.0} events/s, postgres {:.0} events/s; ratio {:.2}",
            this[0],
            this[1],
            this[1] / this[0]
        );
        rates[0].push(this[0]);
        rates[1].push(this[1]);
    }
    let ratios: Vec<f64> = rates[0].iter().zip(&rates[1]).map(|(s, p)| p / s).collect();
    println!(
        "ingest: sqlite {:.0} events/s, postgres {:.0} events/s (medians of {rounds}); ratio median {:.2}; load average {:.1}",
        median(rates[0].clone()),
        median(rates[1].clone()),
        median(ratios),
        load_average()
    );
}

fn search(cluster: &PgCluster) {
    let count = env("SEARCH_BENCH_MESSAGES", 1_000_000);
    let queries = env("SEARCH_BENCH_QUERIES", 1_200) as usize;
    let keep = usize::try_from(count / corpus::CHANNELS + 1).unwrap_or(usize::MAX);
    let dir = TempDir::new("search");
    println!(
        "## search: {count} messages over {} channels, {queries} queries per side, alternating; load average {:.1}",
        corpus::CHANNELS,
        load_average()
    );
    let mut backends = Vec::new();
    for (side, name) in SIDES.iter().enumerate() {
        let backend = open(side, &dir, cluster, keep);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let started = Instant::now();
        for n in 0..count {
            backend
                .save_message(corpus::message(n, &mut rng))
                .expect("queued");
        }
        block_on(backend.flush()).expect("flush");
        println!(
            "{name}: wrote {count} messages with the search index in {:.0} s ({:.0} msg/s)",
            started.elapsed().as_secs_f64(),
            count as f64 / started.elapsed().as_secs_f64()
        );
        backends.push(backend);
    }
    // Autovacuum would analyze the fresh table within a minute; do it now.
    let database = backends[1].location();
    let database = database.rsplit('/').next().unwrap_or_default().to_owned();
    cluster
        .psql(&database, "VACUUM ANALYZE messages")
        .expect("analyze");
    let channels: Vec<Snowflake> = corpus::channels();
    let mut times: [Vec<Vec<Duration>>; 2] =
        [vec![Vec::new(); KINDS.len()], vec![Vec::new(); KINDS.len()]];
    let mut hits = [[0usize; KINDS.len()]; 2];
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    let started = Instant::now();
    for i in 0..queries + 60 {
        let kind = i % KINDS.len();
        let search = SearchQuery {
            terms: corpus::query(kind, &mut rng),
            channels: channels.clone(),
            author: None,
            before: None,
            after: None,
            limit: 20,
        };
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            let began = Instant::now();
            let found = block_on(backends[side].search(search.clone(), Duration::from_secs(5)))
                .expect("search")
                .len();
            let took = began.elapsed();
            if i >= 60 {
                times[side][kind].push(took);
                hits[side][kind] += found;
            }
        }
    }
    println!(
        "queries took {:.0} s in all",
        started.elapsed().as_secs_f64()
    );
    println!("| query | sqlite p50 | postgres p50 | sqlite p99 | postgres p99 | hits sqlite / postgres |");
    println!("|---|---|---|---|---|---|");
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1_000.0);
    let mut all: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    for kind in 0..KINDS.len() {
        let mut row = Vec::new();
        for side in 0..2 {
            let mut t = times[side][kind].clone();
            t.sort();
            row.push((percentile(&t, 0.5), percentile(&t, 0.99)));
            all[side].extend(t);
        }
        println!(
            "| {} | {} | {} | {} | {} | {} / {} |",
            KINDS[kind],
            ms(row[0].0),
            ms(row[1].0),
            ms(row[0].1),
            ms(row[1].1),
            hits[0][kind],
            hits[1][kind]
        );
    }
    for side in &mut all {
        side.sort();
    }
    println!(
        "| **all** | **{}** | **{}** | **{}** | **{}** | |",
        ms(percentile(&all[0], 0.5)),
        ms(percentile(&all[1], 0.5)),
        ms(percentile(&all[0], 0.99)),
        ms(percentile(&all[1], 0.99))
    );
    println!("load average {:.1}", load_average());
    for backend in backends {
        block_on(backend.close()).expect("close");
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| args.is_empty() || args.iter().any(|a| a == name);
    let cluster = PgCluster::start_durable().expect("a PostgreSQL for the benchmark");
    if wanted("ingest") {
        ingest(&cluster);
    }
    if wanted("search") {
        search(&cluster);
    }
}
