//! The nonces an agent run's posts carry (`switchboard_engine::nonce`): the same run executed
//! again (`agent.interrupted = "rerun"`, a new capability with the same run id) gives its parts
//! the same nonces, so the platform answers them with the messages posted the first time; a
//! send that is not an agent run's leaves the nonce to the platform (a unique one).

use std::time::Duration;

use entity::Snowflake;
use serde_json::json;
use switchboard_engine::auth::CapabilityGrant;
use switchboard_engine::nonce::MAX_NONCE_CHARS;
use switchboard_engine::runs::RunGate;
use switchboard_engine::CallContext;
use switchboard_testkit::platform::demo;
use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};

fn grant(run: &str, gate: Option<RunGate>) -> CapabilityGrant {
    CapabilityGrant {
        session_id: Snowflake(demo::OPS),
        request_id: run.into(),
        scope: vec!["surface.*".into()],
        ttl: Duration::from_secs(60),
        client: None,
        cwd: None,
        trigger_message_id: None,
        requested_by: None,
        gate,
    }
}

/// A context calling as a capability minted now for `run` (an agent run's when it has a gate).
fn minted(server: &TestServer, run: &str, gate: Option<RunGate>) -> CallContext {
    let token = server
        .core()
        .mint_capability(grant(run, gate))
        .expect("mint");
    CallContext {
        caller: server
            .core()
            .authenticate(Some(&token))
            .expect("a live token"),
        session_ref: Some(demo::OPS.to_string()),
        ..CallContext::operator()
    }
}

/// Sends `texts` in `#ops` as `context`; the nonces of the posts they made, in order.
async fn nonces(
    server: &TestServer,
    context: &CallContext,
    texts: &[String],
) -> Vec<Option<String>> {
    let before = server.sends().len();
    for text in texts {
        server
            .core()
            .call(context, "surface.messages.send", json!({ "text": text }))
            .await
            .expect("sent");
    }
    server.sends()[before..]
        .iter()
        .map(|message| message.nonce.clone())
        .collect()
}

/// The demo config without a channel's rate limit in the way of a dozen posts.
fn config() -> String {
    format!(
        "{DEMO_CONFIG}\n[toolserver.rate_limits]\nper_channel_mutating_per_minute = 1000\nper_channel_mutating_burst = 100\n"
    )
}

#[tokio::test]
async fn a_run_executed_again_posts_its_parts_under_the_same_nonces() {
    let server = TestServer::start(&config()).await.expect("server");
    // A text split in two parts, a short one, and the short one once more.
    let texts = vec!["word ".repeat(600), "short".to_owned(), "short".to_owned()];
    let first = nonces(
        &server,
        &minted(&server, "run-a", Some(RunGate::open())),
        &texts,
    )
    .await;
    assert_eq!(first.len(), 4, "{first:?}");
    for nonce in &first {
        let nonce = nonce.as_deref().expect("an agent run's post has a nonce");
        assert!(nonce.len() <= MAX_NONCE_CHARS, "{nonce}");
    }
    let distinct: std::collections::HashSet<_> = first.iter().collect();
    assert_eq!(distinct.len(), 4, "each post its own nonce: {first:?}");

    let again = nonces(
        &server,
        &minted(&server, "run-a", Some(RunGate::open())),
        &texts,
    )
    .await;
    assert_eq!(
        again, first,
        "the same run again: the same nonces, in order"
    );

    let other = nonces(
        &server,
        &minted(&server, "run-b", Some(RunGate::open())),
        &texts,
    )
    .await;
    assert!(
        other.iter().all(|nonce| !first.contains(nonce)),
        "another run's posts share no nonce: {other:?} {first:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_send_that_is_not_an_agent_runs_leaves_the_nonce_to_the_platform() {
    let server = TestServer::start(&DEMO_CONFIG).await.expect("server");
    let texts = vec!["from the operator".to_owned()];
    let operator = CallContext {
        session_ref: Some(demo::OPS.to_string()),
        ..CallContext::operator()
    };
    assert_eq!(nonces(&server, &operator, &texts).await, [None]);
    // A capability the operator minted (no run gate), even one named like a run.
    let minted_by_hand = minted(&server, "run-a", None);
    assert_eq!(nonces(&server, &minted_by_hand, &texts).await, [None]);
    server.stop().await;
}
