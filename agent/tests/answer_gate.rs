//! A run may start while its trigger's answered-record is still being written; everything it
//! does that others can see waits for the record, and a record that fails stops the run with
//! nothing posted. Against the test kit's recording platform, with a scripted record.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent::Bridge;
use entity::Snowflake;
use switchboard_engine::runs::{Runs, Trigger};
use switchboard_records::TriggerClaim;
use switchboard_store::{Claim, Durable, StoreError, StoreErrorKind, StoreFuture, TriggerStore};
use switchboard_testkit::platform::{demo, SurfaceCall};
use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};

/// A record whose durability the test decides: each take hands back a recording that resolves
/// with whatever the test sends on the channel it keeps.
#[derive(Default)]
struct ScriptedRecord {
    pending: Mutex<Vec<tokio::sync::oneshot::Sender<Result<(), StoreError>>>>,
}

impl ScriptedRecord {
    /// Resolves every claim made so far as durable (`failure`: as failed with that message);
    /// how many there were.
    fn settle(&self, failure: Option<&str>) -> usize {
        let pending = std::mem::take(&mut *self.pending.lock().unwrap());
        let n = pending.len();
        for sender in pending {
            let outcome = match failure {
                None => Ok(()),
                Some(message) => Err(StoreError::new(
                    StoreErrorKind::Unavailable,
                    message.to_owned(),
                )),
            };
            let _ = sender.send(outcome);
        }
        n
    }
}

impl TriggerStore for ScriptedRecord {
    fn claim_trigger(&self, _: TriggerClaim) -> StoreFuture<'_, Claim> {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        self.pending.lock().unwrap().push(sender);
        let durable = Durable::new(async move {
            receiver
                .await
                .unwrap_or_else(|_| Err(StoreError::new(StoreErrorKind::Closed, "dropped")))
        });
        Box::pin(std::future::ready(Ok(Claim::Won(durable))))
    }

    fn is_claimed(&self, _: Snowflake) -> StoreFuture<'_, bool> {
        Box::pin(std::future::ready(Ok(false)))
    }

    fn claims_after(&self, _: Option<Snowflake>, _: usize) -> StoreFuture<'_, Vec<TriggerClaim>> {
        Box::pin(std::future::ready(Ok(Vec::new())))
    }
}

struct Setup {
    server: TestServer,
    bridge: Bridge,
    record: Arc<ScriptedRecord>,
    dir: PathBuf,
}

/// The in-memory tool server and a bridge whose agent is `script` (a `sh` body; `$DIR` is a
/// scratch directory).
async fn setup(name: &str, script: &str) -> Setup {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("answer-gate-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let agent = dir.join("agent.sh");
    std::fs::write(
        &agent,
        format!("#!/bin/sh\nDIR='{}'\n{script}\n", dir.display()),
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let text = format!(
        "{DEMO_CONFIG}\n[agent]\nrunner = \"command\"\ncommand = [\"{}\"]\ncwd = \"{}\"\ntimeout_s = 20\nstream = \"off\"\n",
        agent.display(),
        dir.display()
    );
    let config = switchboard_config::Config::parse(&text, "gate.toml").expect("config");
    let server = TestServer::start(&text).await.expect("server");
    let record = Arc::new(ScriptedRecord::default());
    let bridge = Bridge::with_answers(
        config.agent.clone().expect("[agent]"),
        Arc::clone(server.core()),
        server.url(),
        record.clone(),
    );
    Setup {
        server,
        bridge,
        record,
        dir,
    }
}

fn trigger(setup: &Setup) -> Trigger {
    let message =
        setup
            .server
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

/// What the run showed in Discord: sends, reactions and typing.
fn visible(setup: &Setup) -> Vec<SurfaceCall> {
    setup
        .server
        .surface()
        .calls()
        .into_iter()
        .filter(|call| {
            matches!(
                call,
                SurfaceCall::Send(_)
                    | SurfaceCall::Edit { .. }
                    | SurfaceCall::AddReaction { .. }
                    | SurfaceCall::RemoveReaction { .. }
                    | SurfaceCall::Typing(_)
            )
        })
        .collect()
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn exists(dir: &Path, name: &str) -> bool {
    dir.join(name).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_waits_for_the_record_and_then_is_posted() {
    let setup = setup("late", "echo hello\n: > \"$DIR/exited\"").await;
    setup.server.surface().clear_calls();
    setup.bridge.enqueue(trigger(&setup));
    // The agent starts and finishes while the record is still being written...
    wait_for("the agent to run", || exists(&setup.dir, "exited")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // ...and nothing of the run shows before it is durable.
    assert_eq!(visible(&setup), Vec::new(), "nothing before the record");
    assert_eq!(setup.record.settle(None), 1, "one record for one trigger");
    wait_for("the reply", || {
        visible(&setup)
            .iter()
            .any(|call| matches!(call, SurfaceCall::Send(sent) if sent.content.contains("hello")))
    })
    .await;
    wait_for("the ✅", || {
        visible(&setup)
            .iter()
            .any(|call| matches!(call, SurfaceCall::AddReaction { emoji, .. } if emoji == "✅"))
    })
    .await;
    let _ = std::fs::remove_dir_all(&setup.dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_fails_stops_the_run_with_nothing_shown() {
    // The agent would answer after 30 s; a failed record must stop it long before.
    let setup = setup("fails", ": > \"$DIR/started\"\nsleep 30\necho too late").await;
    setup.server.surface().clear_calls();
    let trigger = trigger(&setup);
    setup.bridge.enqueue(trigger.clone());
    wait_for("the agent to start", || exists(&setup.dir, "started")).await;
    setup.record.settle(Some("disk full (test)"));
    wait_for("the run to stop", || {
        setup
            .bridge
            .list(Some(trigger.channel_id))
            .iter()
            .all(|run| run.state != switchboard_engine::runs::RunState::Running)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        visible(&setup),
        Vec::new(),
        "a run whose record failed shows nothing"
    );
    assert_eq!(
        setup.server.core().metrics().totals().runs,
        1,
        "the stopped run is counted as finished"
    );
    let _ = std::fs::remove_dir_all(&setup.dir);
}
