//! The `fake-discord` binary: prints its base URL first on stdout, serves the demo world or a
//! world file, refuses a garbage world file with a clear message, and takes its flags.

mod common;

use std::process::Stdio;

use common::{get, within};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fake-discord");

async fn first_line(args: &[&str]) -> (tokio::process::Child, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn fake-discord");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = within("first stdout line", lines.next_line())
        .await
        .expect("read")
        .expect("a line");
    (child, line)
}

#[tokio::test]
async fn prints_base_url_and_serves_the_demo_world() {
    let (mut child, url) = first_line(&["--port", "0"]).await;
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let me = get(&url, "/api/v10/users/@me").await;
    assert_eq!(me.body["username"], "switchboard");
    child.start_kill().expect("kill");
    within("exit", child.wait()).await.expect("wait");
}

#[tokio::test]
async fn serves_a_world_file() {
    let dir = std::env::temp_dir().join(format!("fake-discord-world-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("world.json");
    std::fs::write(
        &path,
        r#"{"bot":{"id":"7","username":"tiny"},"users":[{"id":"8","username":"u"}],
            "guilds":[{"id":"9","name":"G","channels":[{"id":"10","name":"c","type":0}]}]}"#,
    )
    .expect("write");
    let path_arg = path.to_string_lossy().to_string();
    let (mut child, url) = first_line(&["--world", &path_arg]).await;
    assert_eq!(
        get(&url, "/api/v10/users/@me").await.body["username"],
        "tiny"
    );
    assert_eq!(get(&url, "/api/v10/channels/10").await.body["name"], "c");
    child.start_kill().expect("kill");
    within("exit", child.wait()).await.expect("wait");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn garbage_world_file_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("fake-discord-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("world.json");
    std::fs::write(&path, "{ this is not json").expect("write");
    let output = within(
        "bad world run",
        Command::new(BIN)
            .arg("--world")
            .arg(&path)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("run");
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not valid JSON"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn max_upload_bytes_flag_lowers_the_limit() {
    let (mut child, url) = first_line(&["--max-upload-bytes", "4"]).await;
    let attach = |content_base64: &str| {
        serde_json::json!({
            "channel_id": "1000000000000000401",
            "author_id": "1000000000000000101",
            "attachments": [{"filename": "f.bin", "content_base64": content_base64}]
        })
    };
    let ok = common::post(&url, "/_fake/messages", &attach("AAAAAA==")).await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    let big = common::post(&url, "/_fake/messages", &attach("AAAAAAA=")).await;
    assert_eq!(big.status, 413, "{}", big.text);
    assert_eq!(big.body["discord"]["code"], 40005);
    child.start_kill().expect("kill");
    within("exit", child.wait()).await.expect("wait");
}

#[tokio::test]
async fn shards_and_max_concurrency_flags_reach_gateway_bot() {
    let (mut child, url) = first_line(&["--shards", "3", "--max-concurrency", "2"]).await;
    let bot = get(&url, "/api/v10/gateway/bot").await.body;
    assert_eq!(bot["shards"], 3);
    assert_eq!(bot["session_start_limit"]["max_concurrency"], 2);
    child.start_kill().expect("kill");
    within("exit", child.wait()).await.expect("wait");
    for args in [
        ["--shards", "0"],
        ["--max-concurrency", "0"],
        ["--shards", "65537"],
    ] {
        let output = within(
            "refused flags",
            Command::new(BIN).args(args).kill_on_drop(true).output(),
        )
        .await
        .expect("run");
        assert!(!output.status.success(), "{args:?}");
        assert!(output.stdout.is_empty());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(args[0]), "{stderr}");
    }
}
