//! What the context costs the runner: building a prompt for a 300-message session within a
//! 32k budget (target ≤ 2 ms): the first prompt of a session whose messages arrived through
//! the normal path (a fresh memo holding only what the agent's warmer counted as each message
//! was stored: the system message and the tool schemas are still tokenized), cold with
//! nothing warmed (every text tokenized: the warmer dropped everything or never ran), warm
//! (the memo holds every count: every later round and run) and with the estimate; and the
//! tokenizer's cost per 1,000 tokens, `bpe-openai` (what [`Tiktoken`] counts with) against
//! `tiktoken-rs` (what it counted with before; same counts) in the same run.
//!
//! `cargo bench -p switchboard-context --bench context` runs the criterion groups, then the
//! same cases alternating for 21 rounds against a baseline (rendering the same messages as
//! JSON without counting, what building today's prompt costs), printing the medians: the
//! machine drifts, the ratios are what to compare.

#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::Rng;
use criterion::{BatchSize, Criterion, Throughput};
use protocol::Snowflake;
use serde_json::json;
use switchboard_context::{
    fit, Budget, Entry, Estimate, Memo, Message, Request, Speaker, Tiktoken, TokenCounter, Tools,
};

/// The previous tokenizer, `tiktoken-rs`, counting whole texts: the reference the new one is
/// compared with.
#[derive(Clone, Copy)]
struct TiktokenRs(&'static tiktoken_rs::CoreBPE);

impl TiktokenRs {
    fn o200k() -> TiktokenRs {
        TiktokenRs(tiktoken_rs::o200k_base_singleton())
    }
}

impl TokenCounter for TiktokenRs {
    fn count(&self, text: &str) -> usize {
        self.0.encode_ordinary(text).len()
    }
    fn name(&self) -> &'static str {
        "tiktoken-rs o200k_base"
    }
}

/// A stored message as the runner reads it: what it builds the entry from.
struct Stored {
    author: Option<(u64, &'static str, bool)>,
    id: Snowflake,
    timestamp: String,
    text: String,
}

fn session() -> Vec<Stored> {
    let mut rng = Rng::new(2026);
    common::history(&mut rng, 300)
        .into_iter()
        .map(|entry| {
            let Entry::Message(m) = entry else {
                unreachable!("history is messages")
            };
            let author = match m.speaker() {
                Speaker::Person { id, .. } => common::PEOPLE.iter().find(|p| p.0 == id.0).copied(),
                _ => None,
            };
            Stored {
                author,
                id: m.id().expect("id"),
                timestamp: m.timestamp().to_owned(),
                text: m.text().to_owned(),
            }
        })
        .collect()
}

/// The session's stored messages as the run's transcript entries.
fn transcript(stored: &[Stored]) -> Vec<Entry> {
    stored
        .iter()
        .map(|s| {
            let speaker = match s.author {
                Some((id, name, trusted)) => Speaker::Person {
                    id: Snowflake(id),
                    name: name.to_owned(),
                    trusted,
                },
                None => Speaker::Bot,
            };
            Entry::Message(Message::new(
                speaker,
                Some(s.id),
                s.timestamp.clone(),
                s.text.clone(),
            ))
        })
        .collect()
}

/// What the agent's warmer does when each stored message arrives (`agent/src/warm.rs`): its
/// transcript entry's content counted into the memo the runs count through. Nothing else
/// (the system message, the tool schemas) is in it.
fn warmed(stored: &[Stored], tiktoken: &Tiktoken) -> Memo<Tiktoken> {
    let memo = Memo::new(tiktoken.clone());
    for entry in transcript(stored) {
        if let Entry::Message(m) = entry {
            memo.count(m.content());
        }
    }
    memo
}

/// The whole prompt from stored messages: entries, tools, the fit, the messages to send;
/// returns how many messages and tokens it has.
fn prompt(stored: &[Stored], counter: &dyn TokenCounter) -> (usize, usize) {
    let mut entries = transcript(stored);
    entries.push(Entry::Message(
        Message::new(
            Speaker::Person {
                id: Snowflake(common::PEOPLE[0].0),
                name: "Stanley".into(),
                trusted: true,
            },
            Some(common::message_id(300)),
            "t",
            "@switchboard what happened?",
        )
        .trigger(),
    ));
    let request = Request {
        system: common::system(),
        tools: Tools::new(common::tool_schemas()),
        summary: None,
        entries,
    };
    let fitted = fit(&request, &Budget::default(), counter).expect("fits 32k");
    (fitted.messages().len(), fitted.tokens)
}

fn build(stored: &[Stored], counter: &dyn TokenCounter) -> usize {
    let (messages, tokens) = prompt(stored, counter);
    messages + tokens
}

/// What building the prompt costs without a budget: the same messages as chat JSON.
fn baseline(stored: &[Stored]) -> usize {
    let messages: Vec<serde_json::Value> = stored
        .iter()
        .map(|s| match s.author {
            Some((id, name, _)) => {
                json!({"role": "user", "content": format!("{name} (user {id}): {}", s.text)})
            }
            None => json!({"role": "assistant", "content": s.text}),
        })
        .collect();
    let tools: Vec<serde_json::Value> = common::tool_schemas()
        .iter()
        .map(switchboard_context::ToolSchema::to_json)
        .collect();
    messages.len() + tools.len()
}

fn corpus() -> Vec<(&'static str, &'static str)> {
    vec![
        ("chat", include_str!("../tests/corpus/chat.txt")),
        ("code", include_str!("../tests/corpus/code.txt")),
        ("json", include_str!("../tests/corpus/tool_results.json")),
        ("non_latin", include_str!("../tests/corpus/non_latin.txt")),
        ("emoji", include_str!("../tests/corpus/emoji.txt")),
    ]
}

fn prompt_benches(c: &mut Criterion, stored: &[Stored]) {
    let tiktoken = Tiktoken::for_model("gpt-4o");
    let warm = Memo::new(tiktoken.clone());
    build(stored, &warm);
    let mut group = c.benchmark_group("prompt_300_messages_32k");
    group.sample_size(30);
    group.bench_function("baseline_render_only", |b| {
        b.iter(|| baseline(black_box(stored)));
    });
    group.bench_function("first_prompt_messages_warmed", |b| {
        b.iter_batched(
            || warmed(stored, &tiktoken),
            |memo| build(black_box(stored), &memo),
            BatchSize::LargeInput,
        );
    });
    group.bench_function("cold_nothing_warmed", |b| {
        b.iter(|| build(black_box(stored), &Memo::new(tiktoken.clone())));
    });
    group.bench_function("cold_tiktoken_rs", |b| {
        b.iter(|| build(black_box(stored), &Memo::new(TiktokenRs::o200k())));
    });
    group.bench_function("warm_memo", |b| {
        b.iter(|| build(black_box(stored), &warm));
    });
    group.bench_function("estimate", |b| {
        b.iter(|| build(black_box(stored), &Estimate));
    });
    group.finish();
}

fn tokenizer_benches(c: &mut Criterion) {
    let o200k = Tiktoken::for_model("gpt-4o");
    let old = TiktokenRs::o200k();
    let mut group = c.benchmark_group("tokenizer_o200k");
    for (name, text) in corpus() {
        group.throughput(Throughput::Elements(o200k.count(text) as u64));
        group.bench_function(name, |b| b.iter(|| o200k.count(black_box(text))));
        group.bench_function(format!("{name}_tiktoken_rs"), |b| {
            b.iter(|| old.count(black_box(text)));
        });
    }
    group.finish();
}

/// Rounds of the alternating report.
const ROUNDS: usize = 21;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

/// Runs each case once per round, in turn, for `rounds` rounds; the median of each.
/// A named case of the alternating rounds.
type Case<'a> = (&'a str, Box<dyn FnMut() -> usize + 'a>);

fn alternate(rounds: usize, cases: &mut [Case<'_>]) -> Vec<Duration> {
    let mut samples = vec![Vec::new(); cases.len()];
    for _ in 0..rounds {
        for (i, (_, run)) in cases.iter_mut().enumerate() {
            let start = Instant::now();
            black_box(run());
            samples[i].push(start.elapsed());
        }
    }
    samples.into_iter().map(median).collect()
}

fn alternating_report(stored: &[Stored]) {
    let tiktoken = Tiktoken::for_model("gpt-4o");
    let warm = Memo::new(tiktoken.clone());
    build(stored, &warm);
    // One fresh memo per round, warmed as the agent's warmer leaves it, made before the rounds.
    let mut warmed_memos: Vec<Memo<Tiktoken>> =
        (0..ROUNDS).map(|_| warmed(stored, &tiktoken)).collect();
    let mut cases: Vec<Case<'_>> = vec![
        ("baseline (render only)", Box::new(|| baseline(stored))),
        (
            "first prompt, messages warmed",
            Box::new(move || {
                let memo = warmed_memos.pop().expect("a memo per round");
                build(stored, &memo)
            }),
        ),
        (
            "cold, nothing warmed",
            Box::new(|| build(stored, &Memo::new(tiktoken.clone()))),
        ),
        (
            "cold tiktoken-rs (before)",
            Box::new(|| build(stored, &Memo::new(TiktokenRs::o200k()))),
        ),
        ("warm memo", Box::new(|| build(stored, &warm))),
        ("estimate", Box::new(|| build(stored, &Estimate))),
    ];
    let medians = alternate(ROUNDS, &mut cases);
    let bytes: usize = stored.iter().map(|s| s.text.len()).sum();
    let (messages, tokens) = prompt(stored, &warm);
    println!("\nthe prompt: {messages} messages from 300 stored ({bytes} bytes of text), the trigger, 23 tools: {tokens} tokens");
    println!("alternating, {ROUNDS} rounds, median (300 messages, 32k budget):");
    for ((name, _), m) in cases.iter().zip(&medians) {
        println!(
            "  {name:32} {:>9.3} ms  ×{:.1} baseline",
            m.as_secs_f64() * 1e3,
            m.as_secs_f64() / medians[0].as_secs_f64()
        );
    }
    let o200k = Tiktoken::for_model("gpt-4o");
    let old = TiktokenRs::o200k();
    let mut cases: Vec<Case<'_>> = corpus()
        .into_iter()
        .flat_map(|(name, text)| {
            let new = o200k.clone();
            [
                (
                    name,
                    Box::new(move || new.count(text)) as Box<dyn FnMut() -> usize>,
                ),
                (
                    name,
                    Box::new(move || old.count(text)) as Box<dyn FnMut() -> usize>,
                ),
            ]
        })
        .collect();
    let medians = alternate(ROUNDS, &mut cases);
    println!("\ntokenizer o200k_base, {ROUNDS} rounds alternating, median per 1,000 tokens:");
    println!(
        "  {:10} {:>6}          {:>12} {:>12}",
        "text", "", "bpe-openai", "tiktoken-rs"
    );
    for ((name, text), pair) in corpus().iter().zip(medians.chunks(2)) {
        let tokens = o200k.count(text);
        assert_eq!(tokens, old.count(text), "{name}: the tokenizers disagree");
        let per_1000 = |m: &Duration| m.as_secs_f64() * 1e6 * 1000.0 / tokens as f64;
        println!(
            "  {name:10} {tokens:>6} tokens  {:>9.1} µs {:>9.1} µs  ×{:.1} faster",
            per_1000(&pair[0]),
            per_1000(&pair[1]),
            pair[1].as_secs_f64() / pair[0].as_secs_f64()
        );
    }
    println!("\nload average at the end: {}", load_average());
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// How long each tokenizer takes to load its o200k vocabulary, once per process.
fn first_use() {
    let start = Instant::now();
    black_box(Tiktoken::for_model("gpt-4o").count("hello"));
    let new = start.elapsed();
    let start = Instant::now();
    black_box(TiktokenRs::o200k().count("hello"));
    let old = start.elapsed();
    println!(
        "first use (loading o200k_base): bpe-openai {:.0} ms, tiktoken-rs {:.0} ms; load average: {}",
        new.as_secs_f64() * 1e3,
        old.as_secs_f64() * 1e3,
        load_average()
    );
}

fn main() {
    first_use();
    let stored = session();
    let mut c = Criterion::default().configure_from_args();
    prompt_benches(&mut c, &stored);
    tokenizer_benches(&mut c);
    c.final_summary();
    if !std::env::args().any(|a| a == "--test" || a == "--list") {
        alternating_report(&stored);
    }
}
