//! Both rewrites on a 64 KiB chat transcript and on one 2,000-character message (outbound also
//! with the notes a send's warnings come from).
//!
//! Run: `cargo bench -p entity --bench rewrite`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use entity::{AliasKind, Aliases, LearnedNames, Mapper, Snowflake};
use std::hint::black_box;

fn fixture() -> (Aliases, LearnedNames) {
    let aliases = Aliases::new()
        .with(AliasKind::User, "Stanley", 123456789012345678)
        .and_then(|a| a.with(AliasKind::User, "Ops-Bot", 223456789012345678))
        .and_then(|a| a.with(AliasKind::Session, "ops", 334455667788990011))
        .and_then(|a| a.with(AliasKind::Session, "release-room", 334455667788990022))
        .and_then(|a| a.with(AliasKind::Role, "oncall", 445566778899001122))
        .expect("valid aliases");
    let mut names = LearnedNames::new();
    for (i, name) in ["tomas", "ana", "li", "marta", "devon", "kai"]
        .iter()
        .enumerate()
    {
        names.add_user(Snowflake(523456789012345600 + i as u64), name, None);
    }
    names.add_channel(Snowflake(734455667788990011), "general");
    (aliases, names)
}

/// A chat transcript as the issue describes it: a mention or channel token every few lines,
/// some code, and the look-alikes that must stay as they are (an e-mail address, `C#`, `#4421`).
const LINES: &[&str] = &[
    "stanley: deploying build 4812 to staging now, shout if anything looks off",
    "tomas: the canary in eu-west is still at 2% errors, holding for a bit",
    "ana: ack. @Stanley can you check the dashboards before we widen it?",
    "li: here's the failing query, it times out after 30s on the replica:",
    "```sql\nSELECT * FROM events WHERE tenant_id = $1 ORDER BY ts DESC LIMIT 500;\n```",
    "marta: looks like the index on (tenant_id, ts) got dropped in the last migration",
    "devon: p95 latency doubled since 14:02 UTC, moving this to #release-room",
    "kai: rolled back, graphs recovering. mail kai@example.com for the postmortem doc",
    "stanley: thanks both, let's write it up tomorrow morning",
    "ops-bot: `deploy 4812` finished in 6m12s with 3 retries, paging @oncall",
    "tomas: the flaky test is tests/integration/billing_spec.rb:112, it uses a fixed clock",
    "ana: the C# client also needs the new header; upstream issue #4421 tracks it",
];

fn transcript(target: usize) -> String {
    let mut text = String::with_capacity(target + 200);
    let mut i = 0;
    while text.len() < target {
        text.push_str(LINES[i % LINES.len()]);
        text.push('\n');
        i += 1;
    }
    text.truncate(
        text[..target]
            .trim_end_matches(|c: char| !c.is_ascii())
            .len(),
    );
    text
}

fn message_2000() -> String {
    let mut text = transcript(4000);
    let cut = text
        .char_indices()
        .take_while(|(i, _)| *i < 2000)
        .last()
        .map_or(0, |(i, c)| i + c.len_utf8());
    text.truncate(cut);
    // Do not end inside an unclosed fence: that would make the tail code and skip the work.
    if text.matches("```").count() % 2 == 1 {
        let at = text.rfind("```").unwrap_or(0);
        text.truncate(at);
        while text.len() < 2000 {
            text.push_str("ok @Stanley #ops ");
        }
        text.truncate(2000);
    }
    text
}

fn bench(c: &mut Criterion) {
    let (aliases, names) = fixture();
    let mapper = Mapper::new(&aliases, &names);

    let readable = transcript(64 * 1024);
    let discord = mapper.outbound(&readable).into_owned();
    let mut group = c.benchmark_group("transcript_64k");
    group.throughput(Throughput::Bytes(readable.len() as u64));
    group.bench_function("outbound", |b| {
        b.iter(|| mapper.outbound(black_box(&readable)).len());
    });
    group.throughput(Throughput::Bytes(discord.len() as u64));
    group.bench_function("inbound", |b| {
        b.iter(|| mapper.inbound(black_box(&discord)).len());
    });
    group.finish();

    let message = message_2000();
    let message_discord = mapper.outbound(&message).into_owned();
    let mut group = c.benchmark_group("message_2000");
    group.throughput(Throughput::Bytes(message.len() as u64));
    group.bench_function("outbound", |b| {
        b.iter(|| mapper.outbound(black_box(&message)).len());
    });
    // What a send does: the rewrite plus the notes behind its warnings.
    group.bench_function("outbound_noted", |b| {
        b.iter(|| mapper.outbound_noted(black_box(&message)).text.len());
    });
    group.throughput(Throughput::Bytes(message_discord.len() as u64));
    group.bench_function("inbound", |b| {
        b.iter(|| mapper.inbound(black_box(&message_discord)).len());
    });
    group.finish();

    let sigils = readable.matches(['@', '#']).count();
    eprintln!(
        "transcript: {} bytes, {} lines, {} '@'/'#' sigils; message: {} chars",
        readable.len(),
        readable.lines().count(),
        sigils,
        message.chars().count()
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
