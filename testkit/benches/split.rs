//! What splitting long text for Discord costs: `chunk::split_message` on mixed text of 1 and 2
//! MiB (the ratio shows the split is linear) and on 20,000-character fenced texts, including the
//! shape that used to hang the old splitter (a fence opened on a line longer than a message).
//!
//! Run: `cargo bench -p switchboard-testkit --bench split`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use switchboard_engine::chunk::{split_message, MESSAGE_LIMIT};

/// A deterministic mix of what agents send: prose paragraphs, mentions, multi-byte text, CRLF
/// lines, and code blocks with and without tags, until `bytes` bytes.
fn mixed(bytes: usize) -> String {
    let pieces = [
        "The deploy finished; <@123456789012345678> please check the dashboards. ",
        "Résumé of the incident: naïve retries 日本語 👍🏽 made it worse.\n",
        "Short line.\r\nAnother line with CRLF.\r\n",
        "\n\n",
        "```rust\nfn main() {\n    println!(\"hello\");\n}\n```\n",
        "see <#1000000000000000400> and <@&1000000000000000500> ",
        "```\nplain block line one\nplain block line two\n```\n",
        "a_rather_long_identifier_without_spaces_that_goes_on_and_on_and_on ",
    ];
    let mut text = String::with_capacity(bytes + 128);
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    while text.len() < bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        text.push_str(pieces[(state % pieces.len() as u64) as usize]);
    }
    text
}

fn fenced(chars: usize) -> String {
    let mut text = String::from("```rust\n");
    let mut i = 0;
    while text.len() < chars {
        text.push_str(&format!("    let value_{i} = compute({i}, &table[{i}]);\n"));
        i += 1;
    }
    text.truncate(chars);
    text
}

fn split(c: &mut Criterion) {
    let mut group = c.benchmark_group("split_message");
    let inputs = [
        ("mixed_1MiB", mixed(1 << 20)),
        ("mixed_2MiB", mixed(2 << 20)),
        ("fenced_code_20000", fenced(20_000)),
        (
            "fence_on_one_long_line_20000",
            format!("```{}", "a".repeat(19_997)),
        ),
    ];
    for (name, text) in &inputs {
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_function(*name, |b| {
            b.iter(|| split_message(black_box(text), MESSAGE_LIMIT));
        });
    }
    group.finish();
}

criterion_group!(benches, split);
criterion_main!(benches);
