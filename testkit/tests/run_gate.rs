//! A run's capability carries its [`RunGate`]: its calls wait until the gate opens, and are
//! refused (and audited) when it is shut, so a run whose trigger could not be recorded as
//! answered never acts.

use std::time::Duration;

use entity::Snowflake;
use serde_json::json;
use switchboard_engine::auth::CapabilityGrant;
use switchboard_engine::runs::RunGate;
use switchboard_engine::CallContext;
use switchboard_testkit::platform::demo;
use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};

fn grant(gate: RunGate) -> CapabilityGrant {
    CapabilityGrant {
        session_id: Snowflake(demo::OPS),
        request_id: "run-gated".into(),
        scope: vec!["surface.*".into()],
        ttl: Duration::from_secs(60),
        client: None,
        cwd: None,
        trigger_message_id: None,
        requested_by: None,
        gate: Some(gate),
    }
}

fn as_run(server: &TestServer, token: &str) -> CallContext {
    CallContext {
        caller: server
            .core()
            .authenticate(Some(token))
            .expect("a live token"),
        session_ref: Some(demo::OPS.to_string()),
        ..CallContext::operator()
    }
}

#[tokio::test]
async fn a_call_waits_for_the_gate_and_acts_once_it_opens() {
    let server = TestServer::start(&DEMO_CONFIG).await.expect("server");
    let (opener, gate) = RunGate::closed();
    let token = server.core().mint_capability(grant(gate)).expect("mint");
    let context = as_run(&server, &token);
    let core = std::sync::Arc::clone(server.core());
    let call = tokio::spawn(async move {
        core.call(
            &context,
            "surface.messages.send",
            json!({ "text": "gated" }),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !call.is_finished(),
        "the call waits while the gate is closed"
    );
    assert!(
        server.sends().is_empty(),
        "nothing is sent before the gate opens"
    );
    opener.open();
    let answer = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the call ends once the gate opens")
        .expect("the task");
    assert!(answer.is_ok(), "{answer:?}");
    assert_eq!(server.sends().len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn a_shut_gate_refuses_every_call_and_the_refusal_is_audited() {
    let server = TestServer::start(&DEMO_CONFIG).await.expect("server");
    let (opener, gate) = RunGate::closed();
    drop(opener);
    let token = server.core().mint_capability(grant(gate)).expect("mint");
    let context = as_run(&server, &token);
    for (tool, input) in [
        ("surface.messages.send", json!({ "text": "never" })),
        ("surface.messages.list", json!({})),
    ] {
        let error = server
            .core()
            .call(&context, tool, input)
            .await
            .expect_err("refused");
        assert_eq!(error.code.as_str(), "run_aborted", "{error:?}");
        assert_eq!(error.kind, protocol::ErrorKind::Cancelled);
        assert!(error.message.contains("not answered"), "{}", error.message);
    }
    assert!(server.sends().is_empty());
    let refused: Vec<_> = server
        .audit_rows()
        .into_iter()
        .filter(|row| row.code.as_deref() == Some("run_aborted"))
        .map(|row| row.tool.into_owned())
        .collect();
    assert_eq!(refused, ["surface.messages.send", "surface.messages.list"]);
    server.stop().await;
}

#[tokio::test]
async fn an_open_gate_does_not_hold_anything() {
    let server = TestServer::start(&DEMO_CONFIG).await.expect("server");
    let token = server
        .core()
        .mint_capability(grant(RunGate::open()))
        .expect("mint");
    let context = as_run(&server, &token);
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        server.core().call(
            &context,
            "surface.messages.send",
            json!({ "text": "at once" }),
        ),
    )
    .await
    .expect("no wait");
    assert!(answer.is_ok(), "{answer:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_call_waiting_for_an_approval_answers_cancelled_when_its_run_ends() {
    let config = format!(
        "{DEMO_CONFIG}\n[permissions]\ndefault = \"allow\"\napprovers = [\"@stanley\"]\n\n[[permissions.rules]]\ntool = \"surface.messages.send\"\npolicy = \"ask\"\n"
    );
    let server = TestServer::start(&config).await.expect("server");
    for (end, code) in [
        (switchboard_engine::auth::TokenEnd::Finished, "run_ended"),
        (switchboard_engine::auth::TokenEnd::Aborted, "run_aborted"),
    ] {
        let token = server
            .core()
            .mint_capability(grant(RunGate::open()))
            .expect("mint");
        let context = as_run(&server, &token);
        let core = std::sync::Arc::clone(server.core());
        let call = tokio::spawn(async move {
            core.call(
                &context,
                "surface.messages.send",
                json!({ "text": "asked" }),
            )
            .await
        });
        for _ in 0..200 {
            if !server.core().approvals().pending().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(server.core().approvals().pending().len(), 1);
        assert!(server.core().end_capability(&token, end));
        let error = tokio::time::timeout(Duration::from_secs(5), call)
            .await
            .expect("the wait ends with the run")
            .expect("the task")
            .expect_err("cancelled");
        assert_eq!(error.kind, protocol::ErrorKind::Cancelled, "{error:?}");
        assert_eq!(error.code.as_str(), code);
        assert_eq!(error.status().as_u16(), 499);
        // The request is withdrawn: no longer pending, its card says so.
        assert!(server.core().approvals().pending().is_empty());
        let withdrawn = server.surface().calls().into_iter().any(|call| {
            matches!(call, switchboard_testkit::platform::SurfaceCall::UpdateApproval { card, .. }
                if matches!(card.state, switchboard_engine::approvals::ApprovalState::Cancelled { .. }))
        });
        assert!(withdrawn, "the card was not redrawn as withdrawn");
    }
    assert!(server.sends().is_empty(), "nothing was posted");
    server.stop().await;
}
