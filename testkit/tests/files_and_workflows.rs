//! Files (`surface.messages.send --paths`, `attachment.download`) and `workflow.*`, called
//! in-process through the whole policy path over the test kit's recording platform.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use entity::Snowflake;
use protocol::ErrorKind;
use serde_json::{json, Value};
use switchboard_engine::auth::CapabilityGrant;
use switchboard_engine::surface::SurfaceError;
use switchboard_engine::workflow::{
    Observed, Workflow, WorkflowEngine, WorkflowHooks, WorkflowState,
};
use switchboard_engine::{CallContext, ToolError};
use switchboard_testkit::platform::demo;
use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let path = std::env::temp_dir().join(format!(
            "switchboard-ts-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir");
        Dir(path.canonicalize().expect("canonical"))
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn write(&self, name: &str, content: &[u8]) {
        let path = self.0.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("dirs");
        }
        std::fs::write(path, content).expect("write");
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn operator_in(session: u64, cwd: Option<&Path>) -> CallContext {
    CallContext {
        session_ref: Some(session.to_string()),
        cwd: cwd.map(|p| p.to_string_lossy().into_owned()),
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
        .map(|raw| serde_json::from_str(raw.get()).expect("callables answer JSON"))
}

async fn demo_server(extra: &str) -> TestServer {
    TestServer::start(&format!("{DEMO_CONFIG}{extra}"))
        .await
        .expect("server starts")
}

#[tokio::test]
async fn send_attaches_files_from_the_cwd_to_the_last_part() {
    let server = demo_server("").await;
    let dir = Dir::new("send");
    dir.write("report.txt", b"all green");
    dir.write("logs/build.log", b"ok\n");
    let context = operator_in(demo::OPS, Some(dir.path()));
    let text = "word ".repeat(500);
    let answer = call(
        &server,
        &context,
        "surface.messages.send",
        json!({"text": text, "paths": ["report.txt", "logs/build.log"]}),
    )
    .await
    .expect("sent");
    assert_eq!(answer["messageIds"].as_array().map(Vec::len), Some(2));
    let sent = server.sends();
    assert!(sent[0].files.is_empty());
    let names: Vec<&str> = sent[1].files.iter().map(|f| f.filename.as_str()).collect();
    assert_eq!(names, ["report.txt", "build.log"]);
    assert_eq!(sent[1].files[0].content, b"all green");

    // Files alone make a message.
    call(
        &server,
        &context,
        "surface.messages.send",
        json!({"paths": [dir.path().join("report.txt")]}),
    )
    .await
    .expect("an absolute path inside the cwd is fine");
    assert_eq!(server.sends().len(), 3);
    assert_eq!(server.sends()[2].content, "");
}

#[tokio::test]
async fn refused_paths_are_usage_errors_and_nothing_is_posted() {
    let server = demo_server("").await;
    let dir = Dir::new("refuse");
    dir.write("a.txt", b"a");
    let big = std::fs::File::create(dir.path().join("big.bin")).expect("create");
    big.set_len(8 * 1024 * 1024 + 1).expect("grow");
    let context = operator_in(demo::OPS, Some(dir.path()));
    let eleven = ["a.txt"; 11];
    for (paths, code) in [
        (json!(["../outside.txt"]), "bad_path"),
        (json!(["/etc/hostname"]), "path_outside_cwd"),
        (json!(eleven), "too_many_files"),
        (json!(["big.bin"]), "file_too_large"),
        (json!(["missing.txt"]), "bad_path"),
    ] {
        let error = call(
            &server,
            &context,
            "surface.messages.send",
            json!({"text": "files", "paths": paths}),
        )
        .await
        .expect_err("refused");
        assert_eq!(error.kind, ErrorKind::Usage, "{error:?}");
        // /etc/hostname may not exist in a container: then it cannot be read either.
        assert!(
            error.code == code || (code == "path_outside_cwd" && error.code == "bad_path"),
            "{paths}: {error:?}"
        );
    }
    // A file that exists, one level above the cwd.
    dir.write("inner/keep.txt", b"inner");
    let inner = operator_in(demo::OPS, Some(&dir.path().join("inner")));
    let error = call(
        &server,
        &inner,
        "surface.messages.send",
        json!({"text": "files", "paths": ["../a.txt"]}),
    )
    .await
    .expect_err("outside");
    assert_eq!(error.code, "path_outside_cwd", "{error:?}");
    let no_cwd = call(
        &server,
        &operator_in(demo::OPS, None),
        "surface.messages.send",
        json!({"paths": ["a.txt"]}),
    )
    .await
    .expect_err("no cwd");
    assert_eq!(no_cwd.code, "no_cwd");
    let empty = call(&server, &context, "surface.messages.send", json!({}))
        .await
        .expect_err("nothing to send");
    assert_eq!(empty.code, "empty_text");
    assert!(server.sends().is_empty(), "nothing was posted");
}

#[tokio::test]
async fn download_saves_the_triggers_files_with_safe_names_and_skips_big_ones() {
    let server = demo_server("download_max_bytes = 1000\n").await;
    let dir = Dir::new("download");
    let trigger = server.surface().post_with_files(
        Snowflake(demo::OPS),
        Snowflake(demo::STANLEY),
        "see attached",
        &[
            ("notes.txt", b"first"),
            ("../../etc/passwd", b"root:x:0:0"),
            ("notes.txt", b"second"),
            ("huge.bin", &[7u8; 1001]),
        ],
    );
    let context = CallContext {
        trigger_message_id: Some(trigger),
        ..operator_in(demo::OPS, Some(dir.path()))
    };
    let answer = call(&server, &context, "attachment.download", json!({}))
        .await
        .expect("downloaded");
    let paths: Vec<&str> = answer["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f["path"].as_str().expect("path"))
        .collect();
    assert_eq!(paths, ["notes.txt", "passwd", "notes (2).txt"]);
    assert_eq!(
        std::fs::read(dir.path().join("passwd")).expect("saved inside"),
        b"root:x:0:0"
    );
    assert_eq!(
        std::fs::read(dir.path().join("notes (2).txt")).expect("saved"),
        b"second"
    );
    assert_eq!(answer["skipped"][0]["filename"], "huge.bin");
    assert!(!dir.path().join("huge.bin").exists());

    let into = call(
        &server,
        &context,
        "attachment.download",
        json!({"dir": "inbox"}),
    )
    .await
    .expect("into a subdirectory");
    assert_eq!(into["files"][0]["path"], "inbox/notes.txt");
    let escape = call(
        &server,
        &context,
        "attachment.download",
        json!({"dir": "../x"}),
    )
    .await
    .expect_err("dir outside");
    assert_eq!(escape.code, "path_outside_cwd");
    let no_trigger = call(
        &server,
        &operator_in(demo::OPS, Some(dir.path())),
        "attachment.download",
        json!({}),
    )
    .await
    .expect_err("no trigger");
    assert_eq!(no_trigger.code, "no_message");
    // Another message can be named, in an allowed session only.
    let by_id = call(
        &server,
        &operator_in(demo::OPS, Some(dir.path())),
        "attachment.download",
        json!({"messageId": trigger.to_string(), "dir": "again"}),
    )
    .await
    .expect("by id");
    assert_eq!(by_id["files"].as_array().map(Vec::len), Some(3));
    let elsewhere = call(
        &server,
        &operator_in(demo::OPS, Some(dir.path())),
        "attachment.download",
        json!({"messageId": trigger.to_string(), "sessionId": demo::RANDOM.to_string()}),
    )
    .await
    .expect_err("random is not allowlisted");
    assert_eq!(elsewhere.kind, ErrorKind::Denied);
}

#[derive(Default)]
struct Recorder {
    resumed: Mutex<Vec<Workflow>>,
}

impl WorkflowHooks for Recorder {
    fn resume(&self, workflow: &Workflow) {
        self.resumed.lock().unwrap().push(workflow.clone());
    }
}

fn with_workflows(server: &TestServer) -> (Arc<Recorder>, Arc<WorkflowEngine>) {
    let hooks = Arc::new(Recorder::default());
    let engine = WorkflowEngine::new(
        hooks.clone(),
        server.store().clone(),
        Some(Arc::clone(server.core().events())),
        Vec::new(),
    );
    assert!(server.core().set_workflows(Arc::clone(&engine)));
    (hooks, engine)
}

#[tokio::test]
async fn workflows_are_unavailable_without_an_engine() {
    let server = demo_server("").await;
    let error = call(
        &server,
        &operator_in(demo::OPS, None),
        "workflow.list",
        json!({}),
    )
    .await
    .expect_err("no engine");
    // Not worth retrying: out of scope until an agent can resume workflows.
    assert_eq!(error.kind, ErrorKind::Denied);
    assert_eq!(error.code, "workflows_unavailable");
    let listed = server
        .core()
        .tools_for(&switchboard_engine::auth::Caller::Operator);
    assert!(
        listed
            .iter()
            .all(|entry| !entry.id.starts_with("workflow.")),
        "workflow.* is absent from the list without an engine"
    );
}

#[tokio::test]
async fn a_workflow_resolves_aliases_applies_the_allowlist_and_resumes_on_the_answer() {
    let server = demo_server("").await;
    let (hooks, engine) = with_workflows(&server);
    let context = CallContext {
        trigger_message_id: Some(Snowflake(1_000_000_000_000_000_950)),
        ..operator_in(demo::OPS, None)
    };
    let created = call(
        &server,
        &context,
        "workflow.create",
        json!({"tasks": [{"sessionId": "#release-room", "fromUserId": "@Stanley", "summary": "is the build signed?"}], "timeoutS": 600}),
    )
    .await
    .expect("created");
    let id = created["workflowId"].as_str().expect("id").to_owned();
    let workflow = engine.get(&id).expect("kept");
    assert_eq!(workflow.tasks[0].session_id.get(), demo::RELEASE_ROOM);
    assert_eq!(
        workflow.tasks[0].from_user_id.map(Snowflake::get),
        Some(demo::STANLEY)
    );
    assert_eq!(workflow.origin_session_id.get(), demo::OPS);
    assert_eq!(
        workflow.origin_message_id.map(Snowflake::get),
        Some(1_000_000_000_000_000_950)
    );

    engine.observe(&Observed {
        channel_id: Snowflake(demo::RELEASE_ROOM),
        message_id: Snowflake(1_000_000_000_000_001_000),
        author_id: Snowflake(demo::STANLEY),
        author_is_bot: false,
        author_name: "stanley",
        reply_to: None,
        text: "signed",
        timestamp: "2026-11-22T10:00:00Z",
    });
    let resumed = hooks.resumed.lock().unwrap().clone();
    assert_eq!(resumed.len(), 1);
    let got = call(&server, &context, "workflow.get", json!({"workflowId": id}))
        .await
        .expect("get");
    assert_eq!(got["workflow"]["state"], "answered");
    assert_eq!(got["workflow"]["tasks"][0]["answer"]["text"], "signed");
    let cancel = call(
        &server,
        &context,
        "workflow.cancel",
        json!({"workflowId": id}),
    )
    .await
    .expect_err("already finished");
    assert_eq!(cancel.kind, ErrorKind::Conflict);

    for (input, kind) in [
        (
            json!({"tasks": [{"sessionId": demo::RANDOM.to_string(), "summary": "s"}]}),
            ErrorKind::Denied,
        ),
        (
            json!({"tasks": [{"sessionId": "#nowhere", "summary": "s"}]}),
            ErrorKind::NotFound,
        ),
        (json!({"tasks": []}), ErrorKind::Usage),
        (
            json!({"tasks": [{"sessionId": "#ops", "summary": " "}]}),
            ErrorKind::Usage,
        ),
        (
            json!({"tasks": [{"sessionId": "#ops", "summary": "s", "fromUserId": "@nobody"}]}),
            ErrorKind::Usage,
        ),
        (
            json!({"tasks": [{"sessionId": "#ops", "summary": "s", "messageId": "12"}]}),
            ErrorKind::Usage,
        ),
        (
            json!({"tasks": [{"sessionId": "#ops", "summary": "s"}], "timeoutS": 0}),
            ErrorKind::Usage,
        ),
        (
            json!({"tasks": [{"sessionId": "#ops", "summary": "s"}], "timeoutS": 99_999_999}),
            ErrorKind::Usage,
        ),
        (
            json!({"tasks": [{"sessionId": "#ops", "summary": "s", "extra": 1}]}),
            ErrorKind::Usage,
        ),
    ] {
        let error = call(&server, &context, "workflow.create", input.clone())
            .await
            .expect_err("refused");
        assert_eq!(error.kind, kind, "{input}: {error:?}");
    }
    let denied = call(
        &server,
        &operator_in(demo::RANDOM, None),
        "workflow.create",
        json!({"tasks": [{"sessionId": "#ops", "summary": "s"}]}),
    )
    .await
    .expect_err("the origin must be allowed too");
    assert_eq!(denied.kind, ErrorKind::Denied);
    assert_eq!(engine.list().len(), 1, "refused workflows are not kept");
}

#[tokio::test]
async fn a_run_sees_and_cancels_only_its_sessions_workflows() {
    let server = demo_server("").await;
    let (hooks, engine) = with_workflows(&server);
    let mint = |session: u64| {
        server
            .core()
            .mint_capability(CapabilityGrant {
                session_id: Snowflake(session),
                request_id: format!("run-{session}"),
                scope: vec!["workflow.*".into()],
                ttl: Duration::from_secs(60),
                client: None,
                cwd: None,
                trigger_message_id: None,
                requested_by: None,
                gate: None,
            })
            .expect("mint")
    };
    let as_run = |token: &str| CallContext {
        caller: server.core().authenticate(Some(token)).expect("valid"),
        session_ref: None,
        ..CallContext::operator()
    };
    let ops_run = as_run(&mint(demo::OPS));
    let room_run = as_run(&mint(demo::RELEASE_ROOM));
    let mut context = ops_run.clone();
    context.session_ref = Some(demo::OPS.to_string());
    let created = call(
        &server,
        &context,
        "workflow.create",
        json!({"tasks": [{"sessionId": "#release-room", "summary": "ok?"}]}),
    )
    .await
    .expect("created");
    let id = created["workflowId"].as_str().expect("id");
    let mut other = room_run.clone();
    other.session_ref = Some(demo::RELEASE_ROOM.to_string());
    let listed = call(&server, &other, "workflow.list", json!({}))
        .await
        .expect("list");
    assert_eq!(listed["workflows"], json!([]));
    let foreign = call(
        &server,
        &other,
        "workflow.cancel",
        json!({"workflowId": id}),
    )
    .await
    .expect_err("not its workflow");
    assert_eq!(foreign.kind, ErrorKind::NotFound);
    let mine = call(
        &server,
        &context,
        "workflow.list",
        json!({"state": "waiting"}),
    )
    .await
    .expect("list");
    assert_eq!(mine["workflows"][0]["workflowId"], id);
    call(
        &server,
        &context,
        "workflow.cancel",
        json!({"workflowId": id}),
    )
    .await
    .expect("cancelled");
    assert_eq!(
        engine.get(id).expect("kept").state,
        WorkflowState::Cancelled
    );
    engine.fire_due(u64::MAX);
    assert!(
        hooks.resumed.lock().unwrap().is_empty(),
        "a cancelled workflow never resumes"
    );
    let bad_state = call(&server, &context, "workflow.list", json!({"state": "done"}))
        .await
        .expect_err("bad state");
    assert_eq!(bad_state.kind, ErrorKind::Usage);
}

#[tokio::test]
async fn a_dangling_symlink_is_a_taken_name_and_partial_failures_are_reported() {
    let server = demo_server("").await;
    let dir = Dir::new("download-dangling");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), dir.path().join("dangling"))
        .expect("symlink");
    let trigger = server.surface().post_with_files(
        Snowflake(demo::OPS),
        Snowflake(demo::STANLEY),
        "two files",
        &[("lost.txt", b"never fetched"), ("dangling", b"kept")],
    );
    let context = CallContext {
        trigger_message_id: Some(trigger),
        ..operator_in(demo::OPS, Some(dir.path()))
    };
    // The first fetch fails; the second file is still saved, beside the dangling link.
    server
        .surface()
        .fail_next(SurfaceError::Unavailable("cdn hiccup".into()));
    let answer = call(&server, &context, "attachment.download", json!({}))
        .await
        .expect("partly downloaded");
    assert_eq!(answer["files"][0]["path"], "dangling (2)", "{answer}");
    assert_eq!(
        std::fs::read(dir.path().join("dangling (2)")).expect("saved"),
        b"kept"
    );
    assert_eq!(answer["failed"][0]["filename"], "lost.txt", "{answer}");
    assert_eq!(
        answer["failed"][0]["code"], "discord_unavailable",
        "{answer}"
    );

    // Nothing saved: the call fails and says what was tried.
    server
        .surface()
        .fail_next(SurfaceError::Unavailable("cdn down".into()));
    server
        .surface()
        .fail_next(SurfaceError::Unavailable("cdn down".into()));
    let error = call(&server, &context, "attachment.download", json!({}))
        .await
        .expect_err("nothing saved");
    assert_eq!(error.kind, ErrorKind::Unavailable);
    assert_eq!(
        error.details["failed"].as_array().map(Vec::len),
        Some(2),
        "{error:?}"
    );
}
