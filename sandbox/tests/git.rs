//! git operations through the sandbox, and checkpoints with undo.

mod common;

use common::*;
use switchboard_sandbox::{Checkpoints, Git, OutputLimits, SandboxErrorKind, ShellOptions};

#[tokio::test]
async fn status_diff_commit_log_and_branch_answer_structurally() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let ws = TempDir::new("git");
    let shell = shell(&sandbox, ws.path(), ShellOptions::default());
    let init = shell
        .run(run("git init -q -b main && git config user.name Tester && git config user.email t@example.com && echo one > a.txt"))
        .await
        .unwrap();
    assert_eq!(init.exit_code, Some(0), "{init:?}");
    // git in the shell's session sandbox, as a workspace runs it.
    let git = Git::in_session(shell.session().clone(), OutputLimits::default());
    let zygote = shell.session().zygote_pid();
    let status = git.status().await.unwrap();
    assert_eq!(status.branch.as_deref(), Some("main"));
    assert_eq!(status.entries.len(), 1);
    assert_eq!(status.entries[0].path, "a.txt");
    assert_eq!(status.entries[0].unstaged, Some("untracked"));

    shell.run(run("git add a.txt")).await.unwrap();
    let staged = git.diff(true, None).await.unwrap();
    assert!(staged.diff.contains("+one"), "{staged:?}");
    let commit = git.commit("first commit", false).await.unwrap();
    assert_eq!(commit.hash.len(), 40);
    assert_eq!(commit.branch.as_deref(), Some("main"));
    assert!(git.status().await.unwrap().clean);

    std::fs::write(ws.path().join("a.txt"), "two\n").unwrap();
    let diff = git.diff(false, Some("a.txt")).await.unwrap();
    assert!(
        diff.diff.contains("-one") && diff.diff.contains("+two"),
        "{diff:?}"
    );
    git.commit("second", true).await.unwrap();
    let nothing = git.commit("empty", true).await.unwrap_err();
    assert_eq!(nothing.kind(), SandboxErrorKind::Git);

    let log = git.log(Some(5)).await.unwrap();
    let subjects: Vec<_> = log.commits.iter().map(|c| c.subject.as_str()).collect();
    assert_eq!(subjects, ["second", "first commit"]);
    assert_eq!(log.commits[0].author, "Tester");

    let created = git.branch(Some("feature"), false).await.unwrap();
    assert_eq!(created.created.as_deref(), Some("feature"));
    assert_eq!(created.current.as_deref(), Some("main"));
    assert_eq!(
        git.branch(Some("feature"), false).await.unwrap_err().kind(),
        SandboxErrorKind::Git
    );
    let switched = git.branch(Some("feature"), true).await.unwrap();
    assert!(switched.switched && switched.created.is_none());
    assert_eq!(switched.current.as_deref(), Some("feature"));
    let new = git.branch(Some("other"), true).await.unwrap();
    assert_eq!(
        (new.created.as_deref(), new.current.as_deref()),
        (Some("other"), Some("other"))
    );
    let listed = git.branch(None, false).await.unwrap();
    assert_eq!(listed.branches, ["feature", "main", "other"]);
    for bad in ["", "-d", "a..b", "with space"] {
        assert!(git.branch(Some(bad), false).await.is_err(), "{bad:?}");
    }
    assert_eq!(
        git.commit("  ", false).await.unwrap_err().kind(),
        SandboxErrorKind::BadRequest
    );
    assert!(zygote.is_some());
    assert_eq!(shell.session().zygote_pid(), zygote, "git ran elsewhere");
}

#[tokio::test]
async fn git_outside_a_repository_is_a_git_error() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let ws = TempDir::new("nogit");
    let git = Git::new(sandbox, ws.path(), OutputLimits::default());
    let error = git.status().await.unwrap_err();
    assert_eq!(error.kind(), SandboxErrorKind::Git);
    assert!(
        error.to_string().contains("not a git repository"),
        "{error}"
    );
}

#[tokio::test]
async fn undo_restores_changed_removes_created_and_recreates_deleted_files() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let base = TempDir::new("undo");
    let ws = base.path().join("ws");
    std::fs::create_dir_all(ws.join("keep")).unwrap();
    std::fs::write(ws.join("changed.txt"), "old\n").unwrap();
    std::fs::write(ws.join("deleted.txt"), "precious\n").unwrap();
    std::fs::write(ws.join("keep/same.txt"), "same\n").unwrap();
    std::fs::write(ws.join(".gitignore"), "target/\n").unwrap();
    let checkpoints = Checkpoints::new(sandbox.clone(), &ws, &base.path().join("shadow")).unwrap();
    assert_eq!(
        checkpoints.undo(None).await.unwrap_err().kind(),
        SandboxErrorKind::NoCheckpoint
    );

    assert!(checkpoints.before_change("run-1").await.unwrap());
    let shell = shell(&sandbox, &ws, ShellOptions::default());
    shell
        .run(run("echo new > changed.txt; rm deleted.txt; mkdir -p made/deep && echo x > made/deep/created.txt; mkdir target && echo big > target/out"))
        .await
        .unwrap();
    // A second change in the same run takes no new snapshot.
    assert!(!checkpoints.before_change("run-1").await.unwrap());
    checkpoints.after_run("run-1").await.unwrap();

    let undo = checkpoints.undo(None).await.unwrap();
    assert_eq!(undo.run, "run-1");
    let mut restored: Vec<_> = undo
        .restored
        .iter()
        .map(|r| (r.path.as_str(), r.action))
        .collect();
    restored.sort();
    assert_eq!(
        restored,
        [
            ("changed.txt", "restored"),
            ("deleted.txt", "recreated"),
            ("made/deep/created.txt", "removed")
        ]
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("changed.txt")).unwrap(),
        "old\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("deleted.txt")).unwrap(),
        "precious\n"
    );
    assert!(
        !ws.join("made").exists(),
        "the directories the run made stay"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("keep/same.txt")).unwrap(),
        "same\n"
    );
    // Ignored build output is not part of a checkpoint.
    assert!(ws.join("target/out").exists());
    // The shadow repository is not in the workspace.
    assert!(!ws.join(".git").exists());
    assert_eq!(
        checkpoints.undo(None).await.unwrap_err().kind(),
        SandboxErrorKind::NoCheckpoint
    );
}

#[tokio::test]
async fn checkpoints_refuse_a_shadow_inside_the_workspace_and_bad_run_ids() {
    let Some(sandbox) = sandbox().await else {
        return;
    };
    let ws = TempDir::new("shadow-inside");
    let error =
        Checkpoints::new(sandbox.clone(), ws.path(), &ws.path().join("shadow")).unwrap_err();
    assert_eq!(error.kind(), SandboxErrorKind::BadRequest);
    let base = TempDir::new("bad-runs");
    std::fs::create_dir_all(base.path().join("ws")).unwrap();
    let checkpoints = Checkpoints::new(
        sandbox,
        &base.path().join("ws"),
        &base.path().join("shadow"),
    )
    .unwrap();
    for bad in ["", "../x", "a/b", "-x", "a..b", "x.lock", &"a".repeat(101)] {
        assert_eq!(
            checkpoints.before_change(bad).await.unwrap_err().kind(),
            SandboxErrorKind::BadRequest,
            "{bad:?}"
        );
    }
    assert_eq!(
        checkpoints
            .undo(Some("never-ran"))
            .await
            .unwrap_err()
            .kind(),
        SandboxErrorKind::NoCheckpoint
    );
}
