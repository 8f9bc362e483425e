//! A soak of mixed calls: after warm-up, memory must stop growing (caches are bounded, nothing
//! leaks per call). A longer soak is `cargo bench -p switchboard --bench soak`-sized work; this
//! one stays within CI's budget.

use std::sync::Arc;

use fake_discord::demo;
use serde_json::json;

use crate::support::{Allow, Fake, Switchboard, TempDir};
use crate::{rss_kib, Client, GENEROUS_CALLER_QUOTA};

const WARM_UP: usize = 4_000;
const CALLS: usize = 20_000;
const THREADS: usize = 4;

/// One of the mixed calls, chosen by `i`.
fn mixed_call(client: &Client, i: usize, ids: &[String]) -> u16 {
    let id = &ids[i % ids.len()];
    let answer = match i % 10 {
        0..=2 => client.call(
            "surface.messages.list",
            json!({ "sessionId": "#ops", "limit": 50 }),
        ),
        3 => client.call(
            "surface.messages.list",
            json!({ "sessionId": "#ops", "limit": 20, "beforeMessageId": id }),
        ),
        4 | 5 => client.call(
            "surface.messages.read",
            json!({ "sessionId": "#ops", "messageId": id }),
        ),
        6 => client.call("surface.sessions.list", json!({})),
        7 => client.call("surface.help", json!({})),
        // Refusals are part of the mix: a channel the allowlist refuses, a bad input, and
        // sends past the channel budget.
        8 => match i % 3 {
            0 => client.call(
                "surface.messages.list",
                json!({ "sessionId": demo::RANDOM.to_string() }),
            ),
            1 => client.call("surface.messages.list", json!({ "limit": "many" })),
            _ => client.call("surface.no.such.tool", json!({})),
        },
        _ => client.call(
            "surface.messages.send",
            json!({ "sessionId": "#release-room", "text": format!("soak {i}") }),
        ),
    };
    assert!(
        answer.status < 500,
        "call {i} answered {}: {:?}",
        answer.status,
        answer.body
    );
    answer.status
}

fn run_calls(client: &Arc<Client>, range: std::ops::Range<usize>, ids: &Arc<Vec<String>>) {
    let workers: Vec<_> = (0..THREADS)
        .map(|worker| {
            let client = Arc::clone(client);
            let ids = Arc::clone(ids);
            let range = range.clone();
            std::thread::spawn(move || {
                for i in range.skip(worker).step_by(THREADS) {
                    mixed_call(&client, i, &ids);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("soak worker");
    }
}

#[test]
fn memory_stops_growing_after_warm_up() {
    // switchboard's quotas are under test, not Discord's buckets (which would pace the
    // accepted sends to 1/s and hold every worker).
    let fake = Fake::start_unthrottled();
    let dir = TempDir::new("robust-soak");
    let sb = Switchboard::start_full(
        &fake,
        dir.path(),
        &Allow::default(),
        "",
        GENEROUS_CALLER_QUOTA,
    );
    // A channel with history worth listing: 300 messages, some long, some with mentions.
    let mut ids = Vec::new();
    for i in 0..300 {
        let text = match i % 3 {
            0 => format!("status {i} for <@{}> in <#{}>", demo::STANLEY, demo::OPS),
            1 => format!("{} {i}", "long line ".repeat(150)),
            _ => format!("short {i}"),
        };
        ids.push(fake.post(demo::OPS, demo::TOMAS, &text));
    }
    sb.wait_listed(
        "#ops",
        &ids[ids.len() - 1..],
        std::time::Duration::from_secs(20),
    );
    let client = Arc::new(Client::new(&sb.url, &sb.token));
    let ids = Arc::new(ids);
    run_calls(&client, 0..WARM_UP, &ids);
    let warm = rss_kib(sb.pid());
    run_calls(&client, WARM_UP..CALLS, &ids);
    let end = rss_kib(sb.pid());
    eprintln!("soak: RSS {warm} KiB after {WARM_UP} calls, {end} KiB after {CALLS}");
    assert!(
        end * 10 < warm * 11,
        "RSS grew by more than 10% after warm-up: {warm} KiB -> {end} KiB over {} calls",
        CALLS - WARM_UP
    );
}
