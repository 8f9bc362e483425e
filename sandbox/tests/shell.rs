//! The shell's behaviour a session depends on: a `cd` holds, a failed command is an answer,
//! background commands are bounded and paged.

mod common;

use common::*;
use switchboard_sandbox::{RunRequest, SandboxErrorKind, ShellOptions};

#[tokio::test]
async fn a_cd_holds_between_runs_but_never_leaves_the_workspace() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let ws = TempDir::new("cwd");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    let answer = shell.run(run("mkdir -p a/b && cd a/b")).await.unwrap();
    assert_eq!(answer.cwd, "a/b");
    let answer = shell.run(run("pwd")).await.unwrap();
    assert_eq!(
        answer.stdout.trim(),
        ws.path().join("a/b").display().to_string()
    );
    // `exit` still reports the directory; a `cd` out of the workspace is not kept.
    assert_eq!(shell.run(run("cd .. && exit 3")).await.unwrap().cwd, "a");
    assert_eq!(shell.run(run("cd /etc")).await.unwrap().cwd, "a");
    assert_eq!(shell.run(run("cd ../..")).await.unwrap().cwd, "a");
    assert_eq!(shell.run(run("cd ..")).await.unwrap().cwd, ".");
    assert_eq!(shell.run(run("cd ..")).await.unwrap().cwd, ".");
    // Whatever a command writes on the side channel, a path outside is not taken.
    assert_eq!(shell.run(run("echo /etc >&3")).await.unwrap().cwd, ".");
    // A directory that disappears sends the next run back to the root.
    shell.run(run("mkdir gone && cd gone")).await.unwrap();
    std::fs::remove_dir(ws.path().join("gone")).unwrap();
    assert_eq!(
        shell.run(run("pwd")).await.unwrap().stdout.trim(),
        ws.path().display().to_string()
    );
}

#[tokio::test]
async fn a_failing_command_is_an_ordinary_answer_with_its_code() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let ws = TempDir::new("exit");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    let answer = shell
        .run(run("echo out; echo err >&2; exit 3"))
        .await
        .unwrap();
    assert_eq!(answer.exit_code, Some(3));
    assert_eq!(answer.stdout, "out\n");
    assert_eq!(answer.stderr, "err\n");
    let answer = shell.run(run("no-such-program-here")).await.unwrap();
    assert_eq!(answer.exit_code, Some(127));
}

#[tokio::test]
async fn garbage_requests_are_typed_errors() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let ws = TempDir::new("garbage");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    for command in ["", "   ", "a\0b"] {
        let error = shell.run(run(command)).await.unwrap_err();
        assert_eq!(error.kind(), SandboxErrorKind::BadRequest, "{command:?}");
    }
    let error = shell
        .run(RunRequest {
            command: "true".into(),
            timeout_s: Some(0),
            background: false,
        })
        .await
        .unwrap_err();
    assert_eq!(error.kind(), SandboxErrorKind::BadRequest);
    for id in ["", "sh-999", "x", "sh-", "sh--1"] {
        assert_eq!(
            shell.output(id, None).unwrap_err().kind(),
            SandboxErrorKind::NoSuchProcess
        );
        assert_eq!(
            shell.kill(id).await.unwrap_err().kind(),
            SandboxErrorKind::NoSuchProcess
        );
    }
    // A command past what one request carries: a typed error that says what to do instead,
    // and the session goes on.
    let huge = format!("echo {}", "x".repeat(300_000));
    let error = shell.run(run(&huge)).await.unwrap_err();
    assert_eq!(error.kind(), SandboxErrorKind::BadRequest);
    assert!(
        error.to_string().contains("write long scripts to a file"),
        "{error}"
    );
    assert_eq!(shell.run(run("echo on")).await.unwrap().stdout, "on\n");
    // Odd but harmless commands run as the shell decides.
    let answer = shell.run(run("'unclosed")).await.unwrap();
    assert_ne!(answer.exit_code, Some(0));
}

#[tokio::test]
async fn background_commands_are_bounded_per_session() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let ws = TempDir::new("max");
    let options = ShellOptions {
        max_processes: 2,
        ..ShellOptions::default()
    };
    let shell = shell(&sandbox, ws.path(), options);
    let first = shell.run(background("sleep 9876.81")).await.unwrap();
    shell.run(background("sleep 9876.82")).await.unwrap();
    let error = shell.run(background("sleep 9876.83")).await.unwrap_err();
    assert_eq!(error.kind(), SandboxErrorKind::TooManyProcesses);
    shell.kill(&first.id).await.unwrap();
    shell.run(background("sleep 9876.84")).await.unwrap();
    shell.kill_all().await;
    assert!(shell.list().iter().all(|p| !p.running));
    assert_eq!(gone("9876.8").await, Vec::<i32>::new());
}

#[tokio::test]
async fn a_cut_output_says_where_the_whole_was_saved() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let ws = TempDir::new("cut");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    let answer = shell.run(run("seq 1 5000")).await.unwrap();
    assert_eq!(answer.stdout.lines().count(), 2000);
    assert!(answer.stdout.starts_with("3001\n") && answer.stdout.ends_with("5000\n"));
    let cut = answer.stdout_cut.unwrap();
    assert_eq!(cut.total_lines, 5000);
    let saved = std::fs::read_to_string(ws.path().join(cut.saved_to.unwrap())).unwrap();
    assert_eq!(saved.lines().count(), 5000);
    let json = serde_json::to_value(&answer_json(&shell).await).unwrap();
    assert!(
        json.get("exitCode").is_some() && json.get("durationMs").is_some(),
        "{json}"
    );
}

async fn answer_json(
    shell: &switchboard_sandbox::ShellSession,
) -> switchboard_sandbox::ShellAnswer {
    shell.run(run("true")).await.unwrap()
}
