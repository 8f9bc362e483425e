//! What the service benchmarks share: the real service started against an in-process fake
//! Discord and stopped again, the wall clock in nanoseconds, and median/percentile summaries.
//! Each bench includes this file with `mod support;`.

// Each bench uses what it needs of this file.
#![allow(dead_code)]

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fake_discord::{demo, FakeDiscord, FakeOptions, RateLimits, UserMessage, World};
use switchboard_config::Config;

/// Nanoseconds since the epoch (CLOCK_REALTIME), as `date +%s%N` writes them.
pub fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// The median of `values` (nanoseconds), in milliseconds.
pub fn median(values: &mut [i128]) -> f64 {
    values.sort_unstable();
    let n = values.len();
    let mid = if n % 2 == 1 {
        values[n / 2] as f64
    } else {
        (values[n / 2 - 1] + values[n / 2]) as f64 / 2.0
    };
    mid / 1e6
}

/// The `p` percentile (0–1) of `values` (nanoseconds), in milliseconds.
pub fn percentile(values: &mut [i128], p: f64) -> f64 {
    values.sort_unstable();
    let index = ((values.len() - 1) as f64 * p).round() as usize;
    values[index] as f64 / 1e6
}

/// "median ms (p10, p90)" of `values` (nanoseconds).
pub fn spread(values: &[i128]) -> String {
    let mut v = values.to_vec();
    format!(
        "{:7.3} ms  (p10 {:.3}, p90 {:.3})",
        median(&mut v),
        percentile(&mut v, 0.1),
        percentile(&mut v, 0.9)
    )
}

/// Posts "@bot `words`" in #ops as Stanley, as a person would; the message's id.
pub fn mention_in_ops(fake: &FakeDiscord, words: &str) -> String {
    let posted = fake
        .post_message(UserMessage {
            channel_id: demo::OPS.into(),
            author_id: demo::STANLEY.into(),
            content: format!("<@{}> {words}", demo::BOT),
            reply_to: None,
            attachments: Vec::new(),
        })
        .expect("post as a user");
    posted["id"].as_str().expect("message id").to_owned()
}

/// The demo world's fake Discord with its rate-limit buckets out of the way: these benches time
/// switchboard's own path, and a hundred replies in one channel would otherwise queue behind
/// Discord's 5-per-5-seconds bucket.
pub fn start_fake(runtime: &tokio::runtime::Runtime) -> FakeDiscord {
    runtime
        .block_on(FakeDiscord::start_with(
            World::demo(),
            std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, 0)),
            FakeOptions {
                rate_limits: RateLimits::unthrottled(),
                ..FakeOptions::default()
            },
        ))
        .expect("the fake Discord starts")
}

/// The real service (`switchboard::build` and `switchboard::serve`) running on `runtime`.
pub struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<Result<(), switchboard::ServiceError>>,
    /// Where its tool server listens.
    pub addr: std::net::SocketAddr,
}

/// The operator token [`Running`] serves with.
pub const OPERATOR_TOKEN: &str = "bench-operator-token-0123456789abcdef";

impl Running {
    /// Builds and serves `config`, then waits until the bot identified with `fake` and its
    /// guild had time to arrive.
    pub fn start(runtime: &tokio::runtime::Runtime, config: Config, fake: &FakeDiscord) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, listening) = std::sync::mpsc::channel();
        let serving = runtime.spawn(async move {
            let service = switchboard::build(
                config,
                "bench-bot-token".to_owned(),
                Some(OPERATOR_TOKEN.to_owned()).into(),
            )
            .await?;
            switchboard::serve(
                service,
                async {
                    let _ = stopped.await;
                },
                move |addr| {
                    let _ = ready.send(addr);
                },
            )
            .await
        });
        let addr = listening
            .recv_timeout(Duration::from_secs(20))
            .expect("the service listens");
        let deadline = Instant::now() + Duration::from_secs(20);
        while fake.state().sessions_identified == 0 {
            assert!(Instant::now() < deadline, "the bot never identified");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(500));
        Running {
            stop,
            serving,
            addr,
        }
    }

    /// Stops the service (waiting at most 10 s for it to finish).
    pub fn stop(self, runtime: &tokio::runtime::Runtime) {
        let _ = self.stop.send(());
        let serving = self.serving;
        let _ = runtime
            .block_on(async { tokio::time::timeout(Duration::from_secs(10), serving).await });
    }
}
