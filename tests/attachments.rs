//! Files end to end: `tools surface.messages.send --paths` uploads to the fake as multipart,
//! and a scripted agent's `tools attachment.download` saves what a person attached.

mod support;

use std::path::Path;
use std::time::Duration;

use fake_discord::{demo, NewAttachment, UserMessage};
use serde_json::Value;
use support::{
    command_agent, poll, script, tools_bin, tools_in, Allow, Fake, Switchboard, TempDir,
};

const BOT_MENTION: &str = "<@1000000000000000001>";

fn uploads(fake: &Fake) -> usize {
    fake.requests_to("POST", &format!("/api/v10/channels/{}/messages", demo::OPS))
        .len()
}

#[test]
fn send_with_paths_uploads_the_files_and_refuses_bad_paths_before_posting() {
    let fake = Fake::start();
    let dir = TempDir::new("attach-send");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join("logs")).expect("dirs");
    std::fs::write(work.join("report.txt"), "all green\n").expect("write");
    let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    std::fs::write(work.join("logs/build.bin"), &binary).expect("write");
    std::fs::write(dir.path().join("outside.txt"), "secret").expect("write");

    let sent = tools_in(
        &sb.url,
        &sb.token,
        &work,
        &[
            "surface.messages.send",
            "--session-id=#ops",
            "--paths=report.txt,logs/build.bin",
            "--output=json",
            "the build report",
        ],
    )
    .json();
    let id = sent["messageIds"][0].as_str().expect("id").to_owned();
    let requests = fake.requests_to("POST", &format!("/api/v10/channels/{}/messages", demo::OPS));
    let upload = requests.last().expect("the upload");
    let parts: Vec<(&str, Option<&str>, usize)> = upload
        .parts
        .iter()
        .map(|p| (p.name.as_str(), p.filename.as_deref(), p.size))
        .collect();
    assert_eq!(
        parts,
        [
            ("payload_json", None, parts[0].2),
            ("files[0]", Some("report.txt"), 10),
            ("files[1]", Some("build.bin"), 70_000)
        ]
    );
    assert_eq!(upload.parts[2].content, binary.as_slice());
    let payload = upload.body.as_ref().expect("payload_json");
    assert_eq!(payload["content"], "the build report");
    assert_eq!(
        payload["allowed_mentions"]["parse"],
        serde_json::json!(["users"]),
        "uploads keep the safe mention policy"
    );
    // The message as switchboard cached it lists the attachments.
    let read = sb
        .tools(&[
            "surface.messages.read",
            "--session-id=#ops",
            &id,
            "--output=json",
        ])
        .json();
    let names: Vec<&str> = read["message"]["attachments"]
        .as_array()
        .expect("attachments")
        .iter()
        .map(|a| a["filename"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(names, ["report.txt", "build.bin"]);

    let before = uploads(&fake);
    let big = std::fs::File::create(work.join("big.bin")).expect("create");
    big.set_len(8 * 1024 * 1024 + 1).expect("grow");
    let eleven = ["report.txt"; 11].join(",");
    for (paths, says) in [
        (
            "../outside.txt".to_owned(),
            "outside the run's working directory",
        ),
        (eleven, "at most 10"),
        ("big.bin".to_owned(), "at most 8 MiB"),
    ] {
        let refused = tools_in(
            &sb.url,
            &sb.token,
            &work,
            &[
                "surface.messages.send",
                "--session-id=#ops",
                &format!("--paths={paths}"),
                "files",
            ],
        );
        assert_eq!(
            refused.code,
            Some(2),
            "usage error for {paths}: {refused:?}"
        );
        assert!(refused.stderr.contains(says), "{paths}: {}", refused.stderr);
    }
    assert_eq!(uploads(&fake), before, "nothing was posted");
}

#[test]
fn the_agent_downloads_the_triggers_attachments_with_safe_names_and_a_cap() {
    let fake = Fake::start();
    let dir = TempDir::new("attach-download");
    let out = dir.path();
    let work = out.join("work");
    std::fs::create_dir_all(&work).expect("dirs");
    let agent = script(
        out,
        "agent.sh",
        &format!(
            r#"cat > /dev/null
"{t}" attachment.download --dir=inbox --output=json > "{o}/download.json" 2> "{o}/download.err"
echo $? > "{o}/download.code"
echo NO_REPLY
"#,
            o = out.display(),
            t = tools_bin().display()
        ),
    );
    let config = command_agent(&agent, &work, 30, "");
    let _sb = Switchboard::start_full(
        &fake,
        out,
        &Allow::default(),
        "download_max_bytes = 1000",
        &config,
    );
    fake.fake
        .post_message(UserMessage {
            channel_id: demo::OPS.into(),
            author_id: demo::STANLEY.into(),
            content: format!("{BOT_MENTION} what is in these?"),
            reply_to: None,
            attachments: vec![
                NewAttachment::new("report.txt", b"the report".to_vec()),
                NewAttachment::new("../../etc/passwd", b"not really".to_vec()),
                NewAttachment::new("huge.bin", vec![0u8; 1_001]),
            ],
        })
        .expect("posted");
    let code = poll("the agent's download", Duration::from_secs(20), || {
        std::fs::read_to_string(out.join("download.code"))
            .ok()
            .filter(|c| !c.trim().is_empty())
    });
    let err = std::fs::read_to_string(out.join("download.err")).unwrap_or_default();
    assert_eq!(code.trim(), "0", "{err}");
    let answer: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("download.json")).expect("json"))
            .expect("JSON");
    let paths: Vec<&str> = answer["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| f["path"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(paths, ["inbox/report.txt", "inbox/passwd"]);
    let inbox = work.join("inbox");
    assert_eq!(
        std::fs::read(inbox.join("report.txt")).expect("saved"),
        b"the report"
    );
    assert_eq!(
        std::fs::read(inbox.join("passwd")).expect("saved"),
        b"not really"
    );
    assert!(
        !out.join("etc").exists() && !work.join("etc").exists(),
        "nothing escaped"
    );
    assert_eq!(answer["skipped"][0]["filename"], "huge.bin");
    assert!(!inbox.join("huge.bin").exists(), "over the cap: not saved");
    let saved: Vec<String> = std::fs::read_dir(&inbox)
        .expect("inbox")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(saved.len(), 2, "{saved:?}");
    assert!(Path::new(&inbox).is_dir());
}
