//! Discord's rate-limit buckets, end to end: the real `switchboard run` against the fake (which
//! enforces Discord's buckets: 5 message creates per 5 s per channel), driven through the real
//! `tools` CLI. A burst waits for its bucket instead of earning 429s.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fake_discord::demo;
use support::{Allow, Fake, Sections, Switchboard, TempDir};

/// Sends in the burst.
const SENDS: usize = 40;
/// `tools` processes running at once.
const AT_ONCE: usize = 8;
/// The fake's (and Discord's) message-create bucket: this many per window, per channel.
const BUCKET_LIMIT: usize = 5;
const BUCKET_WINDOW: Duration = Duration::from_secs(5);

/// switchboard's own quotas, raised out of the way so Discord's bucket is the only limit.
const QUOTAS_OUT_OF_THE_WAY: &str = "[toolserver.rate_limits]
per_caller_per_minute = 100000
per_caller_burst = 10000
per_channel_mutating_per_minute = 100000
per_channel_mutating_burst = 10000";

#[test]
fn a_burst_of_40_sends_to_one_channel_waits_for_the_bucket_and_earns_no_429() {
    let fake = Fake::start();
    let dir = TempDir::new("buckets");
    let sb = Arc::new(Switchboard::start_sections(
        &fake,
        dir.path(),
        &Allow::default(),
        Sections {
            toolserver: "",
            // `[toolserver.rate_limits]` is its own table: it goes after the rest.
            extra: QUOTAS_OUT_OF_THE_WAY,
            ..Sections::default()
        },
    ));
    // The slash commands were registered through the same client.
    let registered = support::poll(
        "slash command registration",
        Duration::from_secs(10),
        || {
            let puts: Vec<_> = fake
                .fake
                .requests()
                .into_iter()
                .filter(|r| r.method == "PUT" && r.path.ends_with("/commands"))
                .collect();
            (!puts.is_empty()).then_some(puts)
        },
    );
    assert_eq!(registered.len(), 1, "{registered:?}");
    assert_eq!(registered[0].status, 200, "{registered:?}");
    let names: Vec<&str> = registered[0]
        .body
        .as_ref()
        .and_then(|b| b.as_array())
        .map(|commands| commands.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        names.contains(&"abort") && names.contains(&"tools"),
        "{names:?}"
    );

    let path = format!("/api/v10/channels/{}/messages", demo::OPS);
    fake.fake.clear_requests();

    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..AT_ONCE)
        .map(|_| {
            let sb = Arc::clone(&sb);
            let next = Arc::clone(&next);
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                // Bounded: each pass takes one of the SENDS numbers.
                loop {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    if n >= SENDS {
                        return failures;
                    }
                    let text = format!("--text=burst message {n}");
                    let out = sb.tools(&["surface.messages.send", "--session-id=#ops", &text]);
                    if out.code != Some(0) {
                        failures.push(format!("send {n}: {out:?}"));
                    }
                }
            })
        })
        .collect();
    let failures: Vec<String> = workers
        .into_iter()
        .flat_map(|worker| worker.join().expect("a worker thread"))
        .collect();
    let elapsed = started.elapsed();

    assert!(failures.is_empty(), "{failures:#?}\n{}", sb.stderr());
    let posts = fake.requests_to("POST", &path);
    let refused: Vec<_> = posts.iter().filter(|r| r.status == 429).collect();
    assert!(refused.is_empty(), "the fake answered 429: {refused:?}");
    let posted: Vec<String> = posts
        .iter()
        .filter(|r| r.status == 200)
        .filter_map(|r| r.body.as_ref()?["content"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(posted.len(), SENDS, "{posted:#?}");
    for n in 0..SENDS {
        let text = format!("burst message {n}");
        assert!(posted.contains(&text), "{text} was not posted: {posted:#?}");
    }

    // The bucket admits 5 at once, then 5 per 5 s: the last five cannot start before seven
    // resets. Close to that means the client sent each window as soon as it opened.
    let windows = (SENDS - 1) / BUCKET_LIMIT;
    let ideal = BUCKET_WINDOW * windows as u32;
    assert!(elapsed >= ideal, "{elapsed:?} beat the bucket's {ideal:?}");
    assert!(
        elapsed <= ideal + ideal / 5,
        "{elapsed:?} is far from the bucket's {ideal:?}"
    );
    eprintln!(
        "rest_buckets: {SENDS} sends, {AT_ONCE} at a time: {:.2} s elapsed, bucket ideal {:.2} s ({:.3}x)",
        elapsed.as_secs_f64(),
        ideal.as_secs_f64(),
        elapsed.as_secs_f64() / ideal.as_secs_f64()
    );
}
