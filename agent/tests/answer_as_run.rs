//! A run's own visible actions — its reply, its draft, the ⏳/✅ on its trigger, typing — are
//! the run's in the audit log, never the operator's. The answer in the run's own session is
//! shown whatever the session's `/tools` scope says (the row says `run-answer`), while the
//! run's explicit sends still obey it. Against the test kit's recording platform.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::Bridge;
use serde_json::json;
use switchboard_engine::governance::AuditRow;
use switchboard_engine::runs::{Runs, Trigger};
use switchboard_engine::CallContext;
use switchboard_testkit::platform::{demo, SurfaceCall};
use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};

/// The in-memory tool server and a bridge whose command agent hands out its token, waits for
/// `go` (at most 10 s), then answers `the answer` (with a draft first when `stream`).
async fn setup(name: &str, stream: bool) -> (TestServer, Bridge, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("answer-as-run-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let agent = dir.join("agent.sh");
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\nDIR='{}'\ncat > /dev/null\nprintf %s \"$SWITCHBOARD_TOKEN\" > \"$DIR/token\"\necho 'progress: thinking' >&2\ni=0\nwhile [ ! -f \"$DIR/go\" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done\necho 'the answer'\n",
            dir.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let text = format!(
        "{DEMO_CONFIG}\n[agent]\nrunner = \"command\"\ncommand = [\"{}\"]\ncwd = \"{}\"\ntimeout_s = 20\nstream = \"{}\"\nstream_interval_ms = 250\n",
        agent.display(),
        dir.display(),
        if stream { "edit" } else { "off" }
    );
    let config = switchboard_config::Config::parse(&text, "run.toml").expect("config");
    let server = TestServer::start(&text).await.expect("server");
    let bridge = Bridge::new(
        config.agent.clone().expect("[agent]"),
        Arc::clone(server.core()),
        server.url(),
    );
    (server, bridge, dir)
}

fn trigger(server: &TestServer) -> Trigger {
    let message = server
        .surface()
        .post(demo::OPS.into(), demo::STANLEY.into(), "@switchboard hi");
    Trigger {
        channel_id: demo::OPS.into(),
        message_id: Some(message),
        author_id: demo::STANLEY.into(),
        author_name: "Stanley".into(),
        author_roles: Vec::new(),
        text: "@switchboard hi".into(),
        workflow_id: None,
        agent: None,
    }
}

async fn wait_for<T>(what: &str, mut done: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(value) = done() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The rows of `tool` made by `caller`.
fn rows_of(server: &TestServer, tool: &str) -> Vec<AuditRow> {
    server
        .audit_rows()
        .into_iter()
        .filter(|row| row.tool == tool)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reply_is_audited_as_the_run_and_shown_though_the_session_disables_sends() {
    let (server, bridge, dir) = setup("reply", false).await;
    let core = server.core();
    // An admin's `/tools disable surface.messages.send` in #ops.
    core.call(
        &CallContext::operator(),
        "admin.tools.set",
        json!({"sessionId": "#ops", "action": "disable", "tools": "surface.messages.send"}),
    )
    .await
    .expect("the scope changes");
    let trigger = trigger(&server);
    bridge.enqueue(trigger.clone());
    let token = wait_for("the run's token", || {
        std::fs::read_to_string(dir.join("token"))
            .ok()
            .filter(|t| t.starts_with("sbcap_"))
    })
    .await;
    // The run's explicit send obeys the session's scope.
    let run = CallContext {
        caller: core.authenticate(Some(&token)).expect("the run's token"),
        session_ref: Some(demo::OPS.to_string()),
        ..CallContext::operator()
    };
    let explicit = core
        .call(&run, "surface.messages.send", json!({"text": "explicitly"}))
        .await
        .expect_err("the session disabled sends");
    assert_eq!(explicit.code.as_str(), "out_of_scope", "{explicit:?}");
    std::fs::write(dir.join("go"), "").unwrap();
    // The answer is shown all the same, as the run's answer.
    wait_for("the reply", || {
        server
            .surface()
            .calls()
            .iter()
            .any(|call| matches!(call, SurfaceCall::Send(sent) if sent.content.contains("the answer")))
            .then_some(())
    })
    .await;
    wait_for("the ✅", || {
        rows_of(&server, "surface.reactions.add")
            .iter()
            .any(|row| row.input["emoji"] == "✅")
            .then_some(())
    })
    .await;
    let run_id = bridge_run_id(&server);
    let sends = rows_of(&server, "surface.messages.send");
    let reply = sends
        .iter()
        .find(|row| row.outcome == "ok")
        .expect("the reply's row");
    assert!(reply.caller.starts_with("cap:"), "{reply:?}");
    assert_eq!(reply.run.as_deref(), Some(run_id.as_str()));
    assert_eq!(reply.requested_by, Some(demo::STANLEY.into()));
    assert_eq!(
        (&*reply.decision, reply.decided_by.as_deref()),
        ("allow", Some("run-answer"))
    );
    assert!(
        sends
            .iter()
            .any(|row| row.code.as_deref() == Some("out_of_scope")
                && row.run.as_deref() == Some(run_id.as_str())),
        "the explicit send is refused as the run's: {sends:?}"
    );
    // The ⏳ (on and off), the ✅ and typing are the run's too; nothing is the operator's.
    for tool in [
        "surface.reactions.add",
        "surface.reactions.remove",
        "surface.typing",
    ] {
        let rows = rows_of(&server, tool);
        assert!(!rows.is_empty(), "{tool} has no row");
        for row in rows {
            assert_eq!(row.run.as_deref(), Some(run_id.as_str()), "{row:?}");
            assert_eq!(row.decided_by.as_deref(), Some("run-answer"), "{row:?}");
            assert_eq!(row.outcome, "ok", "{row:?}");
        }
    }
    assert!(
        !server
            .audit_rows()
            .iter()
            .any(|row| row.caller == "operator" && row.tool != "admin.tools.set"),
        "{:?}",
        server.audit_rows()
    );
    drop(bridge);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_draft_is_the_runs_and_a_run_answer_cannot_act_elsewhere() {
    let (server, bridge, dir) = setup("draft", true).await;
    let core = server.core();
    bridge.enqueue(trigger(&server));
    let token = wait_for("the run's token", || {
        std::fs::read_to_string(dir.join("token"))
            .ok()
            .filter(|t| t.starts_with("sbcap_"))
    })
    .await;
    wait_for("the draft", || {
        rows_of(&server, "surface.messages.send")
            .iter()
            .any(|row| row.outcome == "ok")
            .then_some(())
    })
    .await;
    // Only the bridge, in process, speaks as the run's answer, and only in the run's session.
    let elsewhere = CallContext {
        caller: core.authenticate(Some(&token)).expect("the run's token"),
        session_ref: Some(demo::OPS.to_string()),
        front: switchboard_engine::Front::RunAnswer,
        ..CallContext::operator()
    };
    let refused = core
        .call(
            &elsewhere,
            "surface.messages.send",
            json!({"sessionId": "#release-room", "text": "not the answer"}),
        )
        .await
        .expect_err("another session is not the run's");
    assert_eq!(refused.code.as_str(), "out_of_scope", "{refused:?}");
    std::fs::write(dir.join("go"), "").unwrap();
    wait_for("the draft edited into the answer", || {
        rows_of(&server, "surface.messages.edit")
            .iter()
            .any(|row| row.input["text"] == "the answer")
            .then_some(())
    })
    .await;
    let run_id = bridge_run_id(&server);
    for row in rows_of(&server, "surface.messages.send")
        .into_iter()
        .chain(rows_of(&server, "surface.messages.edit"))
        .filter(|row| row.outcome == "ok")
    {
        assert_eq!(row.run.as_deref(), Some(run_id.as_str()), "{row:?}");
        assert_eq!(row.decided_by.as_deref(), Some("run-answer"), "{row:?}");
    }
    drop(bridge);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The id of the one run, as the ✅'s or the typing's row names it.
fn bridge_run_id(server: &TestServer) -> String {
    let rows = server.audit_rows();
    let runs: std::collections::BTreeSet<String> =
        rows.iter().filter_map(|row| row.run.clone()).collect();
    assert_eq!(runs.len(), 1, "one run: {rows:?}");
    let run = runs.into_iter().next().unwrap_or_default();
    assert!(run.starts_with("run-"), "{run}");
    run
}
