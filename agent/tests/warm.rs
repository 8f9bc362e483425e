//! The token-count warmer (issue 25): a message the `openai` agent may read is counted when it
//! is stored — rendered as the run's transcript renders it, with the model's own tokenizer,
//! into the process's memo — so that the first prompt of a run finds the counts instead of
//! tokenizing the session. Against the tool server's in-memory surface; messages arrive
//! through the bridge's ingest hook (`Runs::arrived`), as the gateway hands them over.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::prompt::transcript;
use agent::Bridge;
use entity::Snowflake;
use switchboard_config::Principal;
use switchboard_context::{fit, Budget, Entry, Request, TokenCounter};
use switchboard_engine::runs::{Arrival, Runs, Trigger};
use switchboard_testkit::platform::demo;
use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};

const MODEL: &str = "gpt-4o";

async fn setup() -> (TestServer, Bridge) {
    let text = format!(
        "{DEMO_CONFIG}\n[agent]\nrunner = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"{MODEL}\"\ntimeout_s = 5\nstream = \"off\"\ncontext_messages = 300\ntrusted_users = [\"{}\"]\n",
        demo::STANLEY
    );
    let config = switchboard_config::Config::parse(&text, "warm.toml").expect("config");
    let server = TestServer::start(&text).await.expect("server");
    let bridge = Bridge::new(
        config.agent.clone().expect("[agent]"),
        Arc::clone(server.core()),
        server.url(),
    );
    (server, bridge)
}

/// Hands `message` of `channel` to the bridge as the gateway does once it stored it.
fn hand(bridge: &Bridge, channel: Snowflake, message: Snowflake, author: u64, text: &str) {
    bridge.arrived(&Arrival {
        channel_id: channel,
        message_id: message,
        author_id: author.into(),
        author_name: "someone",
        author_roles: &[],
        author_is_bot: author == demo::BOT,
        in_guild: true,
        parent_id: None,
        content: text,
        text,
        replies_to_bot: false,
        missed: false,
    });
}

/// Stores `text` in #ops as `author` and hands it to the bridge.
fn arrive(server: &TestServer, bridge: &Bridge, author: u64, text: &str) -> Snowflake {
    let id = server.surface().post(demo::OPS.into(), author.into(), text);
    hand(bridge, demo::OPS.into(), id, author, text);
    id
}

/// A nonce for this process and `test`: text no test counted before.
fn nonce(test: u64) -> String {
    format!("{:x}-{test}", std::process::id())
}

/// Waits (boundedly) until the warmer has done `jobs` jobs.
async fn warmed(bridge: &Bridge, jobs: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while bridge.warm_stats().done < jobs {
        assert!(
            Instant::now() < deadline,
            "the warmer did {:?} of {jobs} jobs",
            bridge.warm_stats()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn trigger(message: Snowflake) -> Trigger {
    Trigger {
        channel_id: demo::OPS.into(),
        message_id: Some(message),
        author_id: demo::STANLEY.into(),
        author_name: "Stanley".into(),
        author_roles: Vec::new(),
        text: "status?".into(),
        workflow_id: None,
        agent: None,
    }
}

/// The run's transcript of #ops now, as the `openai` runner reads it.
async fn entries(server: &TestServer, bridge: &Bridge, last: Snowflake) -> Vec<Entry> {
    let channel = server.core().allowed(demo::OPS.into()).await.expect("#ops");
    transcript(
        server.core(),
        channel,
        &trigger(last),
        300,
        bridge.bot_id(),
        &[Principal::User(demo::STANLEY.into())],
        None,
    )
    .entries
}

fn contents(entries: &[Entry]) -> Vec<String> {
    entries
        .iter()
        .filter_map(|e| match e {
            Entry::Message(m) => Some(m.content().to_owned()),
            Entry::Round(_) => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_messages_are_counted_before_a_run_and_the_build_counts_none_again() {
    let (server, bridge) = setup().await;
    let counter = agent::openai::counter(MODEL);
    // Text this process has never counted: people trusted and not, and the bot's own turns.
    let nonce = nonce(1);
    let mut last = Snowflake(0);
    for i in 0..40u64 {
        let author = [demo::STANLEY, demo::TOMAS, demo::BOT][(i % 3) as usize];
        let text = format!(
            "message {i} of run {nonce}: the canary in <#{}> looks fine, p95 {} ms",
            demo::RELEASE_ROOM,
            100 + i
        );
        last = arrive(&server, &bridge, author, &text);
    }
    warmed(&bridge, 40).await;
    assert_eq!(bridge.warm_stats().counted, 40, "{:?}", bridge.warm_stats());
    assert_eq!(bridge.warm_stats().dropped, 0);

    let entries = entries(&server, &bridge, last).await;
    let texts = contents(&entries);
    assert_eq!(texts.len(), 40);
    assert!(
        texts.iter().any(|t| t.starts_with("(untrusted)"))
            && texts.iter().any(|t| !t.contains("(user ")),
        "the transcript has untrusted lines and the bot's own turns: {texts:?}"
    );
    for text in &texts {
        assert!(counter.contains(text), "not warmed: {text:?}");
    }
    // Fitting the transcript tokenizes nothing: every message is a hit.
    let request = Request {
        entries,
        ..Request::default()
    };
    let before = counter.stats();
    let fitted = fit(&request, &Budget::default(), counter).expect("fits");
    let after = counter.stats();
    assert_eq!(fitted.report.dropped_entries, 0);
    assert_eq!(
        after.misses - before.misses,
        0,
        "the build tokenized messages the warmer had counted"
    );
    assert!(after.hits - before.hits >= 40);

    // Without the warmer the same build would tokenize each message: a message that did not
    // go through the ingest hook is a miss.
    let unseen = server.surface().post(
        demo::OPS.into(),
        demo::TOMAS.into(),
        &format!("not handed to the bridge {nonce}"),
    );
    let entries = self::entries(&server, &bridge, unseen).await;
    let last_text = contents(&entries).pop().expect("a message");
    assert!(!counter.contains(&last_text));
    let before = counter.stats();
    fit(
        &Request {
            entries,
            ..Request::default()
        },
        &Budget::default(),
        counter,
    )
    .expect("fits");
    assert_eq!(counter.stats().misses - before.misses, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_messages_are_counted_without_harm() {
    let (server, bridge) = setup().await;
    let counter = agent::openai::counter(MODEL);
    let huge = "x".repeat(1 << 20);
    let unicode: String = [
        '\u{0}',
        '\u{301}',
        '\u{fffd}',
        '\u{10ffff}',
        '\u{202e}',
        '\u{feff}',
        '\u{e000}',
        '🧑',
        '\u{200d}',
        '\u{1f3fd}',
        '\n',
        '\r',
    ]
    .iter()
    .cycle()
    .take(5_000)
    .collect();
    let texts = [
        String::new(),
        huge,
        unicode,
        "<@>".repeat(2_000),
        " ".repeat(70_000),
    ];
    for text in &texts {
        arrive(&server, &bridge, demo::TOMAS, text);
    }
    // And a message that is no longer (or never was) cached: skipped, not a failure.
    hand(
        &bridge,
        demo::OPS.into(),
        Snowflake(42),
        demo::TOMAS,
        "gone",
    );
    warmed(&bridge, 6).await;
    assert_eq!(bridge.warm_stats().counted, 5, "{:?}", bridge.warm_stats());
    // Each counted as the tokenizer counts it (the huge one: past the exact cap, as its bytes).
    let last = server
        .surface()
        .post(demo::OPS.into(), demo::STANLEY.into(), "status?");
    for text in contents(&entries(&server, &bridge, last).await) {
        if text != "status?" && !text.ends_with(": status?") {
            assert!(counter.contains(&text), "not warmed: {text:.80}");
            assert_eq!(counter.count(&text), counter.inner().count(&text));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_the_allowlist_refuses_is_never_read() {
    let (server, bridge) = setup().await;
    hand(
        &bridge,
        Snowflake(77),
        Snowflake(78),
        demo::TOMAS,
        "elsewhere",
    );
    warmed(&bridge, 1).await;
    assert_eq!(bridge.warm_stats().counted, 0);
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recent_sessions_are_counted_at_start() {
    let (server, bridge) = setup().await;
    let counter = agent::openai::counter(MODEL);
    let nonce = nonce(2);
    // Stored before this bridge existed (a restart): never handed to the ingest hook.
    let mut last = Snowflake(0);
    for i in 0..25 {
        last = server.surface().post(
            demo::OPS.into(),
            demo::TOMAS.into(),
            &format!("stored before the restart {i} {nonce}"),
        );
    }
    bridge.warm_recent_sessions();
    let deadline = Instant::now() + Duration::from_secs(20);
    let texts = contents(&entries(&server, &bridge, last).await);
    while !texts.iter().all(|t| counter.contains(t)) {
        assert!(
            Instant::now() < deadline,
            "not warmed at start: {:?}",
            bridge.warm_stats()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
