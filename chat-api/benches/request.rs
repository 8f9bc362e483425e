//! Checking a chat completion request against only parsing its JSON (the floor any server
//! pays), on a long conversation as chat UIs send it: 200 messages, ~400 KiB.
//!
//! Run: `cargo bench -p switchboard-chat-api --bench request`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::{json, Value};
use switchboard_agents::{AgentGrants, AgentName};
use switchboard_chat_api::parse_request;

fn body() -> Vec<u8> {
    let turn = "Could you look at the release notes again and tell me which of the changes touch the gateway? ".repeat(20);
    let messages: Vec<Value> =
        std::iter::once(json!({"role": "system", "content": "You are helpful."}))
            .chain((0..199).map(|i| {
                let role = if i % 2 == 0 { "user" } else { "assistant" };
                json!({"role": role, "content": [{"type": "text", "text": turn}]})
            }))
            .collect();
    json!({"model": "switchboard:support", "messages": messages, "stream": true,
           "stream_options": {"include_usage": true}, "temperature": 0.7, "seed": 1})
    .to_string()
    .into_bytes()
}

fn benches(c: &mut Criterion) {
    let body = body();
    let configured = vec![AgentName::parse("support").unwrap()];
    let grants = AgentGrants::from_scope(["agent:support"], &configured);
    assert!(parse_request(&body, &configured, &grants).is_ok());
    let mut group = c.benchmark_group("chat request, 200 messages");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("serde_json::from_slice::<Value> (baseline)", |b| {
        b.iter(|| serde_json::from_slice::<Value>(black_box(&body)).unwrap());
    });
    group.bench_function("parse_request", |b| {
        b.iter(|| parse_request(black_box(&body), &configured, &grants).unwrap());
    });
    group.finish();
}

criterion_group!(group, benches);
criterion_main!(group);
