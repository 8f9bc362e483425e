//! Instruction files on a real file system: the order (root first, nearest last; in each
//! directory AGENTS.md, CLAUDE.md, .switchboard/instructions.md), the cap over all files,
//! symlinks out of the root, and files that are not text.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use proptest::prelude::*;
use switchboard_context::instructions::{discover, InstructionsError, SkipReason};

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().expect("parent")).expect("dir");
    fs::write(path, text).expect("write");
}

#[test]
fn files_are_read_from_the_root_down_to_the_workspace_nearest_last() {
    let root = tempfile::tempdir().expect("tempdir");
    let r = root.path();
    let workspace = r.join("team/app");
    fs::create_dir_all(&workspace).expect("workspace");
    write(&r.join("AGENTS.md"), "root agents");
    write(&r.join(".switchboard/instructions.md"), "root switchboard");
    write(&r.join("team/CLAUDE.md"), "team claude");
    write(&workspace.join("AGENTS.md"), "app agents");
    write(&workspace.join("CLAUDE.md"), "app claude");
    write(
        &workspace.join(".switchboard/instructions.md"),
        "app switchboard",
    );
    // Beside the path, not on it: not read.
    write(&r.join("other/AGENTS.md"), "other");

    let found = discover(r, &workspace, 20_000).expect("discovered");
    let read: Vec<(&str, &str)> = found
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.text.as_str()))
        .collect();
    assert_eq!(
        read,
        vec![
            ("AGENTS.md", "root agents"),
            (".switchboard/instructions.md", "root switchboard"),
            ("team/CLAUDE.md", "team claude"),
            ("team/app/AGENTS.md", "app agents"),
            ("team/app/CLAUDE.md", "app claude"),
            ("team/app/.switchboard/instructions.md", "app switchboard"),
        ]
    );
    assert!(found.skipped.is_empty());
    assert_eq!(
        found.files[3].render(),
        "Instructions from team/app/AGENTS.md:\napp agents"
    );
    // The workspace may be the root itself.
    assert_eq!(discover(r, r, 20_000).expect("root").files.len(), 2);
}

#[test]
fn a_symlink_out_of_the_root_is_not_followed_and_one_inside_is() {
    let outside = tempfile::tempdir().expect("outside");
    write(&outside.path().join("secret.md"), "the host's secret");
    let root = tempfile::tempdir().expect("root");
    let r = root.path();
    write(&r.join("shared.md"), "shared inside");
    symlink(outside.path().join("secret.md"), r.join("AGENTS.md")).expect("link out");
    symlink(r.join("shared.md"), r.join("CLAUDE.md")).expect("link in");
    // A directory link out of the root: the file below it leaves the root too.
    fs::create_dir_all(outside.path().join("sb")).expect("dir");
    write(
        &outside.path().join("sb/instructions.md"),
        "outside switchboard",
    );
    symlink(outside.path().join("sb"), r.join(".switchboard")).expect("dir link");

    let found = discover(r, r, 20_000).expect("discovered");
    assert_eq!(found.files.len(), 1);
    assert_eq!(found.files[0].path, "CLAUDE.md");
    assert_eq!(found.files[0].text, "shared inside");
    let skipped: Vec<(&str, &SkipReason)> = found
        .skipped
        .iter()
        .map(|s| (s.path.as_str(), &s.reason))
        .collect();
    assert_eq!(
        skipped,
        vec![
            ("AGENTS.md", &SkipReason::LeavesRoot),
            (".switchboard/instructions.md", &SkipReason::LeavesRoot)
        ]
    );
    assert!(!found.files.iter().any(|f| f.text.contains("secret")));
}

#[test]
fn binary_non_utf8_fifo_directory_and_dangling_files_are_skipped_with_a_reason() {
    let root = tempfile::tempdir().expect("root");
    let r = root.path();
    fs::write(r.join("AGENTS.md"), b"text\0with a NUL").expect("binary");
    fs::write(r.join("CLAUDE.md"), [0xff, 0xfe, b'a']).expect("latin-1");
    fs::create_dir_all(r.join(".switchboard/instructions.md")).expect("a directory");
    let sub = r.join("sub");
    fs::create_dir_all(&sub).expect("sub");
    // A FIFO must be refused at once, not waited on.
    let status = std::process::Command::new("mkfifo")
        .arg(sub.join("AGENTS.md"))
        .status()
        .expect("mkfifo runs");
    assert!(status.success());
    symlink(sub.join("gone.md"), sub.join("CLAUDE.md")).expect("dangling");

    let found = discover(r, &sub, 20_000).expect("discovered");
    assert!(found.files.is_empty(), "{:?}", found.files);
    let reasons: Vec<String> = found
        .skipped
        .iter()
        .map(|s| format!("{}: {}", s.path, s.reason))
        .collect();
    assert_eq!(reasons.len(), 5, "{reasons:?}");
    assert_eq!(found.skipped[0].reason, SkipReason::Binary);
    assert_eq!(found.skipped[1].reason, SkipReason::NotUtf8);
    assert_eq!(found.skipped[2].reason, SkipReason::NotAFile);
    assert_eq!(found.skipped[3].reason, SkipReason::NotAFile);
    assert!(matches!(found.skipped[4].reason, SkipReason::Unreadable(_)));
}

#[test]
fn a_workspace_outside_the_root_or_missing_is_an_error() {
    let root = tempfile::tempdir().expect("root");
    let elsewhere = tempfile::tempdir().expect("elsewhere");
    assert!(matches!(
        discover(root.path(), elsewhere.path(), 100),
        Err(InstructionsError::OutsideRoot { .. })
    ));
    assert!(matches!(
        discover(root.path(), &root.path().join("missing"), 100),
        Err(InstructionsError::Resolve { .. })
    ));
    // `..` cannot climb out either: the path is resolved first.
    let climbing = root.path().join("..");
    assert!(matches!(
        discover(root.path(), &climbing, 100),
        Err(InstructionsError::OutsideRoot { .. })
    ));
}

#[test]
fn a_huge_file_is_read_head_and_tail_only() {
    let root = tempfile::tempdir().expect("root");
    let text = format!("HEAD{}TAIL", "x".repeat(3 * 1024 * 1024));
    write(&root.path().join("AGENTS.md"), &text);
    let found = discover(root.path(), root.path(), 1_000).expect("discovered");
    let file = &found.files[0];
    assert!(file.text.starts_with("HEAD") && file.text.ends_with("TAIL"));
    assert!(file.text.chars().count() <= 1_000);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// However many files of whatever length, all together stay within the cap; a file short
    /// enough is whole; a cut one keeps its head and tail.
    #[test]
    fn the_cap_holds_over_all_files(lengths in prop::collection::vec(0usize..30_000, 1..6), max in 0usize..25_000) {
        let root = tempfile::tempdir().expect("root");
        let r = root.path();
        let mut dir = r.to_path_buf();
        for (i, len) in lengths.iter().enumerate() {
            let text: String = format!("<{i}>{}</{i}>", "é".repeat(*len));
            write(&dir.join("AGENTS.md"), &text);
            dir.push(format!("d{i}"));
        }
        fs::create_dir_all(&dir).expect("workspace");
        let found = discover(r, &dir, max).expect("discovered");
        prop_assert_eq!(found.files.len(), lengths.len());
        let total: usize = found.files.iter().map(|f| f.text.chars().count()).sum();
        prop_assert!(total <= max, "{total} > {max}");
        let whole: usize = lengths.iter().enumerate().map(|(i, l)| l + format!("<{i}></{i}>").len()).sum();
        for (i, file) in found.files.iter().enumerate() {
            if file.cut_chars == 0 {
                prop_assert_eq!(file.text.chars().count(), lengths[i] + format!("<{i}></{i}>").len());
            } else if file.text.chars().count() >= 60 {
                let head = format!("<{i}>");
                let tail = format!("</{i}>");
                prop_assert!(file.text.starts_with(&head) && file.text.ends_with(&tail));
            }
        }
        if whole <= max {
            prop_assert!(found.files.iter().all(|f| f.cut_chars == 0));
        }
    }
}
