//! The file callables as an agent uses them: confined paths, bounded reads, searches that
//! honour `.gitignore`, and the shell and git refusing when the sandbox is unavailable.

use std::path::Path;
use std::time::Duration;

use switchboard_workspace::*;

fn unavailable() -> SandboxState {
    SandboxState::Unavailable {
        reason: "bwrap was not found".into(),
        install: "apt-get install bubblewrap".into(),
    }
}

fn workspace(dir: &Path) -> Workspace {
    Workspace::open(dir, WorkspaceOptions::default(), unavailable()).unwrap()
}

fn write(path: &str, content: &str) -> WriteRequest {
    WriteRequest {
        path: path.into(),
        content: content.into(),
    }
}

#[tokio::test]
async fn fs_write_refuses_every_way_out_of_the_workspace() {
    let base = tempfile::tempdir().unwrap();
    let ws_dir = base.path().join("ws");
    let outside = base.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let ws = workspace(&ws_dir);
    std::os::unix::fs::symlink(&outside, ws_dir.join("link")).unwrap();
    let absolute = outside.join("abs.txt").display().to_string();
    for path in [
        "/etc/switchboard-escape",
        "../outside/dotdot.txt",
        &absolute,
        "link/linked.txt",
        "link/new/deep.txt",
        "a/../../outside/x",
    ] {
        let error = ws.write(write(path, "x")).await.unwrap_err();
        assert_eq!(
            error.kind(),
            WorkspaceErrorKind::OutsideWorkspace,
            "{path}: {error}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "something was written outside"
    );
    assert!(!Path::new("/etc/switchboard-escape").exists());
    // Reads are refused the same way.
    std::fs::write(outside.join("secret"), "hunter2").unwrap();
    for path in ["../outside/secret", "link/secret", "/etc/passwd"] {
        let error = ws
            .read(ReadRequest {
                path: path.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(error.kind(), WorkspaceErrorKind::OutsideWorkspace, "{path}");
    }
    // Inside, writes make their directories and say whether they created the file.
    let first = ws.write(write("src/new/a.txt", "one\n")).await.unwrap();
    assert_eq!(
        (first.path.as_str(), first.kind),
        ("src/new/a.txt", ChangeKind::Created)
    );
    let second = ws.write(write("src/new/a.txt", "two\n")).await.unwrap();
    assert_eq!(second.kind, ChangeKind::Modified);
    assert_eq!(
        std::fs::read_to_string(ws_dir.join("src/new/a.txt")).unwrap(),
        "two\n"
    );
    let error = ws.write(write("src", "x")).await.unwrap_err();
    assert_eq!(error.kind(), WorkspaceErrorKind::WrongType);
    assert_eq!(
        ws.write(write("", "x")).await.unwrap_err().kind(),
        WorkspaceErrorKind::BadRequest
    );
}

#[tokio::test]
async fn fs_read_keeps_the_head_and_describes_binary_files() {
    let dir = tempfile::tempdir().unwrap();
    let options = WorkspaceOptions {
        output: switchboard_sandbox::OutputLimits {
            max_bytes: 100,
            max_lines: 5,
            max_saved_bytes: 0,
        },
        ..WorkspaceOptions::default()
    };
    let ws = Workspace::open(dir.path(), options, unavailable()).unwrap();
    let text: String = (1..=20).map(|n| format!("line {n}\n")).collect();
    std::fs::write(dir.path().join("a.txt"), &text).unwrap();
    let read = ws
        .read(ReadRequest {
            path: "a.txt".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(read.content, "line 1\nline 2\nline 3\nline 4\nline 5\n");
    assert!(read.truncated);
    assert_eq!(read.next_offset, Some(6));
    let next = ws
        .read(ReadRequest {
            path: "a.txt".into(),
            offset: Some(18),
            limit: Some(10),
        })
        .await
        .unwrap();
    assert_eq!(
        (next.content.as_str(), next.start_line, next.truncated),
        ("line 18\nline 19\nline 20\n", 18, false)
    );
    // One line longer than the byte budget: its head.
    std::fs::write(dir.path().join("long.txt"), "x".repeat(10_000)).unwrap();
    let long = ws
        .read(ReadRequest {
            path: "long.txt".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(long.content.len(), 100);
    assert!(long.truncated);
    std::fs::write(
        dir.path().join("image.png"),
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
    )
    .unwrap();
    let binary = ws
        .read(ReadRequest {
            path: "image.png".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(binary.content, "");
    assert_eq!(binary.binary.unwrap().mime, "image/png");
    let json = serde_json::to_value(&read).unwrap();
    assert!(
        json.get("nextOffset").is_some() && json.get("startLine").is_some(),
        "{json}"
    );
    assert_eq!(
        ws.read(ReadRequest {
            path: "missing".into(),
            ..Default::default()
        })
        .await
        .unwrap_err()
        .kind(),
        WorkspaceErrorKind::NotFound
    );
    std::fs::create_dir(dir.path().join("d")).unwrap();
    assert_eq!(
        ws.read(ReadRequest {
            path: "d".into(),
            ..Default::default()
        })
        .await
        .unwrap_err()
        .kind(),
        WorkspaceErrorKind::WrongType
    );
}

#[tokio::test]
async fn fs_edit_answers_a_unified_diff_and_refuses_ambiguity() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    std::fs::write(
        dir.path().join("a.rs"),
        "fn main() {\n    println!(\"hi\");   \n}\n",
    )
    .unwrap();
    let edit = ws
        .edit(EditRequest {
            path: "a.rs".into(),
            old: "    println!(\"hi\");\n".into(),
            new: "    println!(\"bye\");\n".into(),
            replace_all: false,
        })
        .await
        .unwrap();
    assert_eq!(edit.strategy, Strategy::LineTrimmed);
    assert!(
        edit.diff.contains("+    println!(\"bye\");"),
        "{}",
        edit.diff
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.rs")).unwrap(),
        "fn main() {\n    println!(\"bye\");\n}\n"
    );
    std::fs::write(dir.path().join("b.txt"), "x\nx\n").unwrap();
    let error = ws
        .edit(EditRequest {
            path: "b.txt".into(),
            old: "x".into(),
            new: "y".into(),
            replace_all: false,
        })
        .await
        .unwrap_err();
    assert_eq!(error.kind(), WorkspaceErrorKind::NotUnique);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("b.txt")).unwrap(),
        "x\nx\n",
        "a refused edit wrote"
    );
    std::fs::write(dir.path().join("bin"), b"\xff\xfe\0").unwrap();
    let error = ws
        .edit(EditRequest {
            path: "bin".into(),
            old: "a".into(),
            new: "b".into(),
            replace_all: false,
        })
        .await
        .unwrap_err();
    assert_eq!(error.kind(), WorkspaceErrorKind::Unsupported);
}

fn tree(dir: &Path) {
    for (path, content) in [
        (".gitignore", "target/\n*.log\n"),
        ("src/main.rs", "fn main() { needle(); }\n"),
        ("src/lib.rs", "pub fn needle() {}\n// needle again\n"),
        ("target/debug/out.rs", "needle in ignored output\n"),
        ("debug.log", "needle in a log\n"),
        ("docs/readme.md", "no match here\n"),
        (".hidden/notes.rs", "needle hidden but not ignored\n"),
    ] {
        std::fs::create_dir_all(dir.join(path).parent().unwrap()).unwrap();
        std::fs::write(dir.join(path), content).unwrap();
    }
}

#[tokio::test]
async fn grep_and_glob_honour_gitignore() {
    let dir = tempfile::tempdir().unwrap();
    tree(dir.path());
    let ws = workspace(dir.path());
    let grep = ws
        .grep(GrepRequest {
            pattern: "needle".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let found: Vec<_> = grep
        .matches
        .iter()
        .map(|m| (m.path.as_str(), m.line))
        .collect();
    assert_eq!(
        found,
        [
            (".hidden/notes.rs", 1),
            ("src/lib.rs", 1),
            ("src/lib.rs", 2),
            ("src/main.rs", 1)
        ]
    );
    let only = ws
        .grep(GrepRequest {
            pattern: "needle".into(),
            glob: Some("src/*.rs".into()),
            limit: Some(2),
        })
        .await
        .unwrap();
    assert_eq!(only.matches.len(), 2);
    assert!(only.truncated);
    assert!(only.matches.iter().all(|m| m.path.starts_with("src/")));

    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(dir.path().join("src/lib.rs"))
        .unwrap()
        .set_modified(old)
        .unwrap();
    let glob = ws
        .glob(GlobRequest {
            pattern: "**/*.rs".into(),
        })
        .await
        .unwrap();
    assert_eq!(
        glob.paths.last().map(String::as_str),
        Some("src/lib.rs"),
        "newest first: {:?}",
        glob.paths
    );
    assert!(
        !glob.paths.iter().any(|p| p.starts_with("target/")),
        "{:?}",
        glob.paths
    );
    assert_eq!(glob.paths.len(), 3);
    let top = ws
        .glob(GlobRequest {
            pattern: "*.rs".into(),
        })
        .await
        .unwrap();
    assert!(
        top.paths.is_empty(),
        "* stays in one directory: {:?}",
        top.paths
    );

    let list = ws
        .list(ListRequest {
            path: None,
            depth: Some(2),
        })
        .await
        .unwrap();
    let paths: Vec<_> = list.entries.iter().map(|e| e.path.as_str()).collect();
    assert!(
        paths.contains(&"src/main.rs") && paths.contains(&"src"),
        "{paths:?}"
    );
    assert!(
        !paths
            .iter()
            .any(|p| p.starts_with("target") || p.ends_with(".log")),
        "{paths:?}"
    );
    let shallow = ws
        .list(ListRequest {
            path: Some("src".into()),
            depth: None,
        })
        .await
        .unwrap();
    assert_eq!(shallow.entries.len(), 2);
}

#[tokio::test]
async fn garbage_search_requests_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    for pattern in ["", "(unclosed"] {
        let error = ws
            .grep(GrepRequest {
                pattern: pattern.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(error.kind(), WorkspaceErrorKind::BadRequest, "{pattern}");
    }
    for pattern in ["", "/etc/*", "../*", "a/[", "{a"] {
        let error = ws
            .glob(GlobRequest {
                pattern: pattern.into(),
            })
            .await
            .unwrap_err();
        assert_eq!(error.kind(), WorkspaceErrorKind::BadRequest, "{pattern}");
    }
    let error = ws
        .grep(GrepRequest {
            pattern: "x".into(),
            glob: Some("../x".into()),
            limit: None,
        })
        .await
        .unwrap_err();
    assert_eq!(error.kind(), WorkspaceErrorKind::BadRequest);
    assert_eq!(
        ws.list(ListRequest {
            path: Some("../".into()),
            depth: None
        })
        .await
        .unwrap_err()
        .kind(),
        WorkspaceErrorKind::OutsideWorkspace
    );
}

#[tokio::test]
async fn shell_git_and_undo_answer_unavailable_without_the_sandbox_but_files_work() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace(dir.path());
    let error = ws.shell().unwrap_err();
    assert_eq!(error.kind(), WorkspaceErrorKind::Unavailable);
    assert!(
        error.to_string().contains("apt-get install bubblewrap"),
        "{error}"
    );
    assert_eq!(
        ws.git_status().await.unwrap_err().kind(),
        WorkspaceErrorKind::Unavailable
    );
    assert_eq!(
        ws.undo(None).await.unwrap_err().kind(),
        WorkspaceErrorKind::Unavailable
    );
    ws.write(write("a", "b")).await.unwrap();
}
