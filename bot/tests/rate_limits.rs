//! The REST client's rate limiting against fake-discord (which enforces Discord's buckets) and
//! against a server answering garbage headers: requests wait for their bucket instead of
//! earning 429s, 429s that happen anyway are honoured and counted, the invalid-request guard
//! stops an offending route, and garbage never hangs or panics the client.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bot::rest::{DiscordRest, LimiterOptions};
use entity::Snowflake;
use fake_discord::{demo, FakeDiscord, FakeOptions, Fault, RateLimits, RestFault, Window, World};
use serde_json::json;
use switchboard_engine::surface::SurfaceError;

/// Every await in these tests ends by itself.
const BOUND: Duration = Duration::from_secs(60);

async fn fake_with(rate_limits: RateLimits) -> FakeDiscord {
    FakeDiscord::start_with(
        World::demo(),
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        FakeOptions {
            rate_limits,
            ..FakeOptions::default()
        },
    )
    .await
    .expect("fake")
}

async fn send(rest: &DiscordRest, channel: u64, text: &str) -> Result<(), SurfaceError> {
    rest.send_message(
        Snowflake(channel),
        text,
        None,
        json!({"parse": []}),
        &[],
        None,
    )
    .await
    .map(drop)
}

fn statuses(fake: &FakeDiscord, status: u16) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.status == status)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_to_one_channel_waits_for_its_bucket_and_earns_no_429() {
    let fake = fake_with(RateLimits {
        message_create: Window::new(5, 1_000),
        ..RateLimits::discord()
    })
    .await;
    let rest = DiscordRest::new(&fake.base_url(), "token").expect("client");
    let started = Instant::now();
    let tasks: Vec<_> = (0..15)
        .map(|n| {
            let rest = rest.clone();
            tokio::spawn(async move { send(&rest, demo::OPS, &format!("burst {n}")).await })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(BOUND, task)
            .await
            .expect("bounded")
            .expect("joined")
            .expect("posted");
    }
    let elapsed = started.elapsed();
    assert_eq!(statuses(&fake, 429), 0, "{:?}", fake.requests());
    assert_eq!(statuses(&fake, 200), 15);
    // Three windows of five: the third cannot start before two resets.
    assert!(elapsed >= Duration::from_millis(1_900), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(20), "{elapsed:?}");
    let stats = rest.stats();
    assert_eq!(stats.rate_limited, 0);
    assert!(stats.waited >= 2, "{stats:?}");
    assert_eq!(stats.requests, 15);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_limit_holds_across_buckets() {
    let fake = fake_with(RateLimits {
        global_per_second: 4,
        ..RateLimits::discord()
    })
    .await;
    let rest = DiscordRest::with_options(
        &fake.base_url(),
        "token",
        LimiterOptions {
            global_per_second: 4,
            ..LimiterOptions::default()
        },
    )
    .expect("client");
    let channels = [
        demo::OPS,
        demo::RELEASE_ROOM,
        demo::RANDOM,
        demo::INCIDENT_THREAD,
    ];
    let started = Instant::now();
    let tasks: Vec<_> = (0..12)
        .map(|n| {
            let rest = rest.clone();
            let channel = channels[n % channels.len()];
            tokio::spawn(async move { rest.channel(Snowflake(channel)).await })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(BOUND, task)
            .await
            .expect("bounded")
            .expect("joined")
            .expect("answered");
    }
    let elapsed = started.elapsed();
    assert_eq!(statuses(&fake, 429), 0, "{:?}", fake.requests());
    // Twelve at four per second: the last four start two seconds after the first.
    assert!(elapsed >= Duration::from_millis(1_900), "{elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_that_happens_anyway_is_honoured_and_counted() {
    let fake = fake_with(RateLimits::discord()).await;
    let rest = DiscordRest::new(&fake.base_url(), "token").expect("client");
    fake.inject_fault(Fault {
        rest: Some(RestFault {
            status: 429,
            count: 1,
            retry_after: Some(0.4),
            path_contains: Some(format!("/channels/{}/messages", demo::OPS)),
        }),
        gateway: None,
        handshakes: None,
    })
    .expect("fault");
    let started = Instant::now();
    tokio::time::timeout(BOUND, send(&rest, demo::OPS, "after the 429"))
        .await
        .expect("bounded")
        .expect("posted on the retry");
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert_eq!(statuses(&fake, 429), 1);
    assert_eq!(statuses(&fake, 200), 1);
    let stats = rest.stats();
    assert_eq!(stats.rate_limited, 1);
    assert_eq!(stats.invalid_last_10_min, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_past_the_invalid_request_budget_is_no_longer_called() {
    let fake = fake_with(RateLimits::discord()).await;
    let rest = DiscordRest::with_options(
        &fake.base_url(),
        "token",
        LimiterOptions {
            invalid_budget: 3,
            ..LimiterOptions::default()
        },
    )
    .expect("client");
    let path = format!("/channels/{}/messages", demo::OPS);
    fake.inject_fault(Fault {
        rest: Some(RestFault {
            status: 403,
            count: 3,
            retry_after: None,
            path_contains: Some(path.clone()),
        }),
        gateway: None,
        handshakes: None,
    })
    .expect("fault");
    for n in 0..3 {
        let error = send(&rest, demo::OPS, &format!("denied {n}"))
            .await
            .expect_err("403");
        assert!(matches!(error, SurfaceError::Denied(_)), "{error:?}");
    }
    let error = send(&rest, demo::OPS, "not sent")
        .await
        .expect_err("stopped");
    match &error {
        SurfaceError::Unavailable(why) => {
            assert!(why.contains("stopped calling"), "{why}");
            assert!(why.contains("invalid_request_percent"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    let calls = fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with(&path))
        .count();
    assert_eq!(calls, 3, "the fourth send never reached Discord");
    // A route that earned no invalid answer goes on.
    send(&rest, demo::RANDOM, "elsewhere")
        .await
        .expect("posted");
}

/// A server answering every request with the next of `answers` (the last one repeated);
/// counts the requests it got.
fn scripted(answers: Vec<String>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let served = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&served);
    std::thread::spawn(move || {
        // Bounded: the test's client sends a handful of requests.
        for stream in listener.incoming().take(50) {
            let Ok(mut stream) = stream else { return };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut request = [0u8; 8192];
            let _ = stream.read(&mut request);
            let n = count.fetch_add(1, Ordering::SeqCst);
            let answer = answers
                .get(n)
                .or(answers.last())
                .cloned()
                .unwrap_or_default();
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    (format!("http://{addr}"), served)
}

fn answer(status: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    text
}

const USER: &str = r#"{"id":"1","username":"bot"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_rate_limit_headers_neither_hang_nor_panic() {
    let (base, served) = scripted(vec![
        answer(
            "200 OK",
            &[
                ("X-RateLimit-Remaining", "-1"),
                ("X-RateLimit-Reset-After", "NaN"),
                ("X-RateLimit-Bucket", "b"),
            ],
            USER,
        ),
        answer(
            "200 OK",
            &[
                ("X-RateLimit-Remaining", "0"),
                ("X-RateLimit-Reset-After", "1e999"),
            ],
            USER,
        ),
        answer("200 OK", &[], USER),
    ]);
    let rest = DiscordRest::new(&base, "token").expect("client");
    let started = Instant::now();
    // The garbage answer is still an answer; the route then waits a short backoff, once.
    rest.current_user().await.expect("first");
    rest.current_user()
        .await
        .expect("second, after the backoff");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    // "1e999" is not a finite number of seconds: garbage again, the same short backoff.
    tokio::time::timeout(Duration::from_secs(10), rest.current_user())
        .await
        .expect("no hang")
        .expect("third");
    assert_eq!(served.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_reset_or_retry_after_fails_fast_instead_of_waiting() {
    let (base, served) = scripted(vec![
        answer(
            "200 OK",
            &[
                ("X-RateLimit-Remaining", "0"),
                ("X-RateLimit-Reset-After", "99999999"),
            ],
            USER,
        ),
        answer("200 OK", &[], USER),
    ]);
    let rest = DiscordRest::new(&base, "token").expect("client");
    rest.current_user().await.expect("first");
    let started = Instant::now();
    let error = tokio::time::timeout(Duration::from_secs(5), rest.current_user())
        .await
        .expect("no hang")
        .expect_err("the bucket is closed for longer than a call may wait");
    assert!(started.elapsed() < Duration::from_secs(2));
    match error {
        SurfaceError::RateLimited { retry_after } => {
            assert!(retry_after <= Duration::from_secs(3600), "{retry_after:?}");
            assert!(retry_after > Duration::from_secs(30), "{retry_after:?}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(served.load(Ordering::SeqCst), 1);

    // A 429 whose retry_after is garbage waits the short default, and is counted.
    let (base, served) = scripted(vec![
        answer(
            "429 Too Many Requests",
            &[("Retry-After", "soon")],
            r#"{"message":"You are being rate limited.","retry_after":"NaN","global":"maybe"}"#,
        ),
        answer("200 OK", &[], USER),
    ]);
    let rest = DiscordRest::new(&base, "token").expect("client");
    tokio::time::timeout(Duration::from_secs(10), rest.current_user())
        .await
        .expect("no hang")
        .expect("retried after the default wait");
    assert_eq!(served.load(Ordering::SeqCst), 2);
    assert_eq!(rest.stats().rate_limited, 1);
}
