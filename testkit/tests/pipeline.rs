//! The pipeline, stage by stage: when a stage refuses, the handler never runs — nothing reaches
//! the platform, no file is opened, and the refusal is the stage's typed error.

use std::path::PathBuf;
use std::time::Duration;

use protocol::{ErrorCode, ErrorKind};
use serde_json::{json, Value};
use switchboard_engine::auth::Caller;
use switchboard_engine::surface::MentionPolicy;
use switchboard_engine::{CallContext, ToolError};
use switchboard_testkit::platform::{demo, SurfaceCall};
use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};

async fn server(extra: &str) -> TestServer {
    TestServer::start(&format!("{DEMO_CONFIG}{extra}\n"))
        .await
        .expect("server")
}

fn operator_in(session: u64) -> CallContext {
    CallContext {
        session_ref: Some(session.to_string()),
        ..CallContext::operator()
    }
}

async fn call(
    server: &TestServer,
    context: &CallContext,
    tool: &str,
    input: Value,
) -> Result<Value, ToolError> {
    server
        .core()
        .call(context, tool, input)
        .await
        .map(|raw| serde_json::from_str(raw.get()).expect("the answer is JSON"))
}

/// What the handler would have done: every action the surface was asked to take (lookups of
/// unknown channels for the allowlist are not actions).
fn actions(server: &TestServer) -> Vec<SurfaceCall> {
    server
        .surface()
        .calls()
        .into_iter()
        .filter(|c| !matches!(c, SurfaceCall::ChannelInfo(_)))
        .collect()
}

/// A capability for `session` with `scope`, as a caller.
fn capability(server: &TestServer, session: u64, scope: &[&str]) -> CallContext {
    let token = server.mint(session, "run-pipeline", scope, Duration::from_secs(60));
    let caller = server
        .core()
        .authenticate(Some(&token))
        .expect("a live token");
    CallContext {
        caller,
        session_ref: Some(session.to_string()),
        ..CallContext::operator()
    }
}

#[tokio::test]
async fn authenticate_refuses_a_bad_token_before_anything() {
    let server = server("").await;
    let error = server.core().authenticate(Some("not-a-token")).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidToken);
    assert_eq!(error.status().as_u16(), 401);
    let error = server.core().authenticate(None).unwrap_err();
    assert_eq!(error.code, ErrorCode::MissingToken);
    assert!(actions(&server).is_empty());
}

#[tokio::test]
async fn scope_refuses_a_callable_outside_the_token_and_nothing_is_sent() {
    let server = server("").await;
    let context = capability(&server, demo::OPS, &["surface.messages.list"]);
    assert!(matches!(context.caller, Caller::Capability(_)));
    let error = call(
        &server,
        &context,
        "surface.messages.send",
        json!({"text": "hi"}),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::OutOfScope);
    assert!(actions(&server).is_empty(), "{:?}", actions(&server));
}

#[tokio::test]
async fn validation_refuses_bad_input_and_nothing_is_sent() {
    let server = server("").await;
    for input in [
        json!({"text": 5}),
        json!({"text": "hi", "nope": true}),
        json!({"text": "   "}),
        json!({"text": "hi", "replyToMessageId": "not-an-id"}),
    ] {
        let error = call(
            &server,
            &operator_in(demo::OPS),
            "surface.messages.send",
            input.clone(),
        )
        .await
        .unwrap_err();
        assert_eq!(error.kind, ErrorKind::Usage, "{input}: {error:?}");
    }
    assert!(actions(&server).is_empty(), "{:?}", actions(&server));
}

#[tokio::test]
async fn resolution_refuses_an_unknown_session_and_nothing_is_sent() {
    let server = server("").await;
    let error = call(
        &server,
        &CallContext::operator(),
        "surface.messages.send",
        json!({"sessionId": "#no-such-alias", "text": "hi"}),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::UnknownSession);
    let error = call(
        &server,
        &CallContext::operator(),
        "surface.messages.send",
        json!({"text": "hi"}),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::NoSession);
    assert!(actions(&server).is_empty(), "{:?}", actions(&server));
}

#[tokio::test]
async fn the_allowlist_refuses_a_denied_session_before_any_file_is_opened() {
    let server = server("").await;
    let dir = std::env::temp_dir().join(format!("sb-pipeline-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let dir: PathBuf = dir.canonicalize().expect("canonical");
    // A path that does not exist: had the handler (or anything) opened the files first, the
    // error would be `bad_path`, not the allowlist's.
    let context = CallContext {
        cwd: Some(dir.display().to_string()),
        ..operator_in(demo::OPS)
    };
    let error = call(
        &server,
        &context,
        "surface.messages.send",
        json!({"sessionId": demo::RANDOM.to_string(), "text": "hi", "paths": ["missing.txt"]}),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::ChannelNotAllowed, "{error:?}");
    // A thread of a denied channel, and a reaction there, are refused the same way.
    for (tool, input) in [
        (
            "surface.messages.list",
            json!({"sessionId": demo::RANDOM_THREAD.to_string()}),
        ),
        (
            "surface.reactions.add",
            json!({"sessionId": demo::RANDOM.to_string(), "messageId": "1000000000000000999", "emoji": "✅"}),
        ),
    ] {
        let error = call(&server, &context, tool, input).await.unwrap_err();
        assert_eq!(error.kind, ErrorKind::Denied, "{tool}: {error:?}");
    }
    assert!(actions(&server).is_empty(), "{:?}", actions(&server));
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn rate_limits_refuse_after_the_budget_and_nothing_more_is_sent() {
    let server = server(
        "[toolserver.rate_limits]\nper_channel_mutating_per_minute = 1\nper_channel_mutating_burst = 2",
    )
    .await;
    let context = operator_in(demo::OPS);
    call(
        &server,
        &context,
        "surface.messages.send",
        json!({"text": "one"}),
    )
    .await
    .expect("within the budget");
    // Two parts need two units; one is left.
    let long = "word ".repeat(500);
    let error = call(
        &server,
        &context,
        "surface.messages.send",
        json!({"text": long}),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::ChannelRateLimited, "{error:?}");
    let sends = actions(&server)
        .iter()
        .filter(|c| matches!(c, SurfaceCall::Send(_)))
        .count();
    assert_eq!(sends, 1, "the refused send posted something");
}

#[tokio::test]
async fn the_handler_gets_the_configured_mention_policy_for_sends_and_edits() {
    for (allow_roles, roles) in [("false", false), ("true", true)] {
        let config = DEMO_CONFIG.replace(
            "[discord]",
            &format!("[discord]\nallow_role_mentions = {allow_roles}"),
        );
        let server = TestServer::start(&config).await.expect("server");
        let context = operator_in(demo::OPS);
        let sent = call(
            &server,
            &context,
            "surface.messages.send",
            json!({"text": "hi @oncall"}),
        )
        .await
        .expect("sent");
        let id = sent["messageIds"][0].as_str().expect("id").to_owned();
        call(
            &server,
            &context,
            "surface.messages.edit",
            json!({"messageId": id, "text": "edited @oncall"}),
        )
        .await
        .expect("edited");
        let expected = MentionPolicy {
            users: true,
            roles,
            replied_user: false,
        };
        let calls = actions(&server);
        let send = calls.iter().find_map(|c| match c {
            SurfaceCall::Send(m) => Some(m.mentions),
            _ => None,
        });
        let edit = calls.iter().find_map(|c| match c {
            SurfaceCall::Edit { mentions, .. } => Some(*mentions),
            _ => None,
        });
        assert_eq!(
            send,
            Some(expected),
            "send with allow_role_mentions = {allow_roles}"
        );
        assert_eq!(
            edit,
            Some(expected),
            "edit with allow_role_mentions = {allow_roles}"
        );
    }
}

#[tokio::test]
async fn workflow_create_without_an_agent_is_refused_before_any_session_is_looked_at() {
    let server = server("").await;
    let error = call(
        &server,
        &operator_in(demo::OPS),
        "workflow.create",
        json!({"tasks": [{"sessionId": demo::RANDOM.to_string(), "summary": "psst"}]}),
    )
    .await
    .unwrap_err();
    // No engine in this server: the plan refuses before any session is looked at.
    assert_eq!(error.code, ErrorCode::WorkflowsUnavailable);
    assert!(actions(&server).is_empty());
}
