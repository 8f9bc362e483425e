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

/// Channels the start-up test allows (each with history to fetch).
const MANY_CHANNELS: u64 = 35;
/// Messages already in each of them: more than a page, so each takes two requests.
const HISTORY: usize = 120;

/// The demo world plus `MANY_CHANNELS` text channels in its guild; their ids.
fn world_with_many_channels() -> (fake_discord::World, Vec<u64>) {
    let mut world = fake_discord::World::demo();
    let ids: Vec<u64> = (0..MANY_CHANNELS)
        .map(|n| 1_000_000_000_000_010_000 + n)
        .collect();
    for (n, id) in ids.iter().enumerate() {
        world.guilds[0].channels.push(fake_discord::ChannelSpec {
            id: (*id).into(),
            name: format!("busy-{n}"),
            kind: 0,
            parent_id: None,
            topic: None,
            bot_can_see: true,
            bot_can_send: true,
            bot_can_manage_messages: false,
            archived: false,
        });
    }
    (world, ids)
}

#[test]
fn thirty_five_channels_of_history_and_the_first_sends_earn_no_global_429() {
    let (world, channels) = world_with_many_channels();
    let fake = Fake::start_world(world);
    for &channel in &channels {
        for n in 0..HISTORY {
            fake.post(channel, demo::TOMAS, &format!("history {n}"));
        }
    }
    let dir = TempDir::new("many-channels");
    let sb = Arc::new(Switchboard::start_sections(
        &fake,
        dir.path(),
        &Allow {
            // #ops too: the harness waits until its thread is listed.
            channels: channels.iter().copied().chain([demo::OPS]).collect(),
            dms: false,
        },
        Sections {
            extra: QUOTAS_OUT_OF_THE_WAY,
            ..Sections::default()
        },
    ));
    // `/health` says ready once the backfill caught up; sends to ten channels at once follow.
    let sends: Vec<_> = channels
        .iter()
        .take(10)
        .map(|&channel| {
            let sb = Arc::clone(&sb);
            std::thread::spawn(move || {
                sb.tools(&[
                    "surface.messages.send",
                    &format!("--session-id={channel}"),
                    "first words",
                ])
            })
        })
        .collect();
    for send in sends {
        let out = send.join().expect("a send thread");
        assert_eq!(out.code, Some(0), "{out:?}");
    }
    let log = sb.stderr();
    assert!(log.contains("backfill caught up"), "{log}");
    let requests = fake.fake.requests();
    // switchboard asks `/gateway/bot` once (the shard count and IDENTIFY buckets), serenity
    // asks `/gateway` once (the URL its shards connect to): no more.
    let gateway: Vec<_> = requests
        .iter()
        .filter(|r| r.path.ends_with("/gateway") || r.path.ends_with("/gateway/bot"))
        .collect();
    let bot = gateway
        .iter()
        .filter(|r| r.path.ends_with("/gateway/bot"))
        .count();
    assert!(
        bot == 1 && gateway.len() <= 2,
        "the gateway is asked for once by switchboard and at most once by serenity: {gateway:?}"
    );
    let fetched = requests
        .iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/messages"))
        .count();
    assert!(
        fetched > 2 * MANY_CHANNELS as usize,
        "the history took {fetched} requests: too few to fill a second"
    );
    let refused: Vec<_> = requests.iter().filter(|r| r.status == 429).collect();
    assert!(
        refused.is_empty(),
        "{} requests were refused with 429 ({} GETs of history): {:?}\n{}",
        refused.len(),
        fetched,
        refused.iter().take(5).collect::<Vec<_>>(),
        log.lines()
            .filter(|l| l.contains("429"))
            .take(5)
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(!log.contains("Discord answered 429"), "{log}");
}

#[test]
fn a_global_429_waits_for_the_global_limit_not_the_routes_window() {
    // A fake whose global limit (5 a second) is far under switchboard's (50): a burst of sends
    // earns global 429s, each to be waited out for the rest of the fake's second.
    let fake = Fake::start_with(
        fake_discord::World::demo(),
        fake_discord::FakeOptions {
            rate_limits: fake_discord::RateLimits {
                global_per_second: 5,
                ..fake_discord::RateLimits::discord()
            },
            ..fake_discord::FakeOptions::default()
        },
    );
    let dir = TempDir::new("global-429");
    let sb = Arc::new(Switchboard::start_sections(
        &fake,
        dir.path(),
        &Allow::default(),
        Sections {
            extra: QUOTAS_OUT_OF_THE_WAY,
            ..Sections::default()
        },
    ));
    // Start-up is over (its backfill, whose reads share the fake's 5-a-second global limit
    // with the burst, caught up), and its requests out of the fake's window.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !sb.stderr().contains("backfill caught up") {
        assert!(
            std::time::Instant::now() < deadline,
            "start-up never caught up:\n{}",
            sb.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(1500));
    fake.fake.clear_requests();
    let sends: Vec<_> = (0..8)
        .map(|n| {
            let sb = Arc::clone(&sb);
            let session = if n % 2 == 0 { "#ops" } else { "#release-room" };
            std::thread::spawn(move || {
                sb.tools(&[
                    "surface.messages.send",
                    &format!("--session-id={session}"),
                    &format!("burst {n}"),
                ])
            })
        })
        .collect();
    for send in sends {
        let out = send.join().expect("a send thread");
        assert_eq!(out.code, Some(0), "{out:?}\n{}", sb.stderr());
    }
    // Each refused post was sent again: how long after, by the fake's clock.
    let posts: Vec<_> = fake
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/messages"))
        .collect();
    let text = |r: &fake_discord::RecordedRequest| {
        r.body
            .as_ref()
            .and_then(|b| b["content"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let mut gaps = Vec::new();
    for (at, refused) in posts.iter().enumerate().filter(|(_, r)| r.status == 429) {
        let again = posts[at + 1..]
            .iter()
            .find(|r| text(r) == text(refused))
            .unwrap_or_else(|| panic!("{} was never sent again: {posts:?}", text(refused)));
        gaps.push(Duration::from_millis(again.at_ms - refused.at_ms));
    }
    assert!(
        !gaps.is_empty(),
        "the burst earned no 429: the test proves nothing ({posts:?})"
    );
    // A global 429 asks to wait the rest of the fake's second; the route's window (5 s for
    // sends) must not be waited out. A generous bound between the two.
    let longest = gaps.iter().max().copied().unwrap_or_default();
    assert!(
        longest < Duration::from_millis(2500),
        "a refused send went again only after {longest:?} ({gaps:?}): its route waited the window\n{}",
        sb.stderr()
    );
}
