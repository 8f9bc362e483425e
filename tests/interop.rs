//! The interop fronts in the whole service, against the fake Discord: the live feed sees a
//! send's `call.finished` and `message.created` (and a message from the gateway), `/metrics`
//! counts Discord's answers and gateway events and passes `promtool`, and `tools --batch`
//! runs a batch, and a shutdown closes the gateway (its last `gateway.state` reaching the feed)
//! before the streams end.

#[path = "support/events.rs"]
mod events;
mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use events::{subscribe, Received};
use fake_discord::demo;
use serde_json::Value;
use support::{Allow, Fake, Switchboard, TempDir};

/// Reads events until `wanted` says it has seen enough; every event read, in order.
fn read_until(
    rx: &mpsc::Receiver<Received>,
    mut wanted: impl FnMut(&str, &Value) -> bool,
) -> Vec<(String, Value)> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Some((kind, value))) => {
                let done = wanted(&kind, &value);
                seen.push((kind, value));
                if done {
                    return seen;
                }
            }
            other => panic!("the stream ended or stalled ({other:?}) after {seen:?}"),
        }
    }
}

fn metrics(sb: &Switchboard) -> String {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    agent
        .get(format!("{}/metrics", sb.url))
        .header("authorization", format!("Bearer {}", sb.token))
        .call()
        .expect("/metrics answers")
        .body_mut()
        .read_to_string()
        .expect("text")
}

#[test]
fn the_feed_sees_a_sends_call_and_message_and_metrics_count_discord() {
    let fake = Fake::start();
    let dir = TempDir::new("interop-feed");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let feed = subscribe(&sb.url, &sb.token, "?types=call.finished,message.*");
    // The subscription is live once the server counts it.
    support::poll("the subscriber", Duration::from_secs(10), || {
        metrics(&sb)
            .contains("switchboard_event_subscribers 1")
            .then_some(())
    });

    let sent = Instant::now();
    let out = sb.tools(&[
        "surface.messages.send",
        "--session-id=#ops",
        "hello @Stanley",
    ]);
    let id = out.json()["messageIds"][0].as_str().expect("id").to_owned();
    let mut finished = None;
    let mut created = None;
    let seen = read_until(&feed, |kind, value| {
        match kind {
            "call.finished" if value["tool"] == "surface.messages.send" => {
                finished = Some(value.clone());
            }
            "message.created" if value["messageId"] == id.as_str() => created = Some(value.clone()),
            _ => {}
        }
        finished.is_some() && created.is_some()
    });
    eprintln!(
        "call.finished and message.created seen {:?} after the send began",
        sent.elapsed()
    );
    let finished = finished.expect("call.finished");
    let created = created.expect("message.created");
    assert_eq!(finished["outcome"], "ok", "{seen:?}");
    assert_eq!(finished["decision"], "allow");
    assert_eq!(finished["session"], demo::OPS.to_string());
    assert_eq!(created["session"], demo::OPS.to_string());
    assert_eq!(created["authorIsBot"], true);
    // Canonical text: the mention as people read it.
    assert_eq!(created["text"], "hello @Stanley", "{created}");
    // The message is stored (and published) before the call finishes.
    let position = |kind: &str| seen.iter().position(|(k, _)| k == kind);
    assert!(
        position("message.created") < position("call.finished"),
        "{seen:?}"
    );
    // The gateway's echo of the bot's own message is not published twice; a message from a
    // person is, with its canonical text.
    let posted = fake.post(demo::OPS, demo::STANLEY, "ping <@1000000000000000001>");
    let seen = read_until(&feed, |kind, value| {
        kind == "message.created" && value["messageId"] == posted.as_str()
    });
    assert!(
        !seen
            .iter()
            .any(|(k, v)| k == "message.created" && v["messageId"] == id.as_str()),
        "{seen:?}"
    );
    assert_eq!(seen.last().unwrap().1["text"], "ping @switchboard");

    let text = metrics(&sb);
    assert!(text.contains("switchboard_discord_requests_total{method=\"POST\",route=\"/channels/{id}/messages\",status=\"200\"}"), "{text}");
    assert!(
        text.contains("switchboard_gateway_events_total{type=\"MESSAGE_CREATE\"}"),
        "{text}"
    );
    assert!(
        text.contains("switchboard_gateway_state{state=\"ready\"} 1"),
        "{text}"
    );
    assert!(text.contains("switchboard_store_messages"), "{text}");
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is installed (apt-get install prometheus; ./test.sh does)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let checked = promtool.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

#[test]
fn tools_batch_runs_a_json_array_in_order() {
    let fake = Fake::start();
    let dir = TempDir::new("interop-batch");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let file = dir.path().join("batch.json");
    std::fs::write(
        &file,
        r##"[
            {"tool": "surface.messages.send", "input": {"sessionId": "#ops", "text": "first"}},
            {"tool": "surface.messages.send", "input": {"sessionId": "#nowhere", "text": "lost"}},
            {"tool": "surface.messages.send", "input": {"sessionId": "#ops", "text": "third"}}
        ]"##,
    )
    .unwrap();
    let out = sb.tools(&["--batch", file.to_str().unwrap()]);
    // The first failure's exit code (not_found: 4), with every result on stdout.
    assert_eq!(out.code, Some(4), "{out:?}");
    let results: Value = serde_json::from_str(out.stdout.trim()).expect("results JSON");
    let oks: Vec<bool> = results
        .as_array()
        .expect("array")
        .iter()
        .map(|r| r["ok"] == true)
        .collect();
    assert_eq!(oks, [true, false, true], "{results}");
    assert_eq!(results[1]["error"]["code"], "unknown_session");
    let posts = support::bot_posts(&fake, demo::OPS);
    let texts: Vec<&str> = posts.iter().filter_map(|p| p["content"].as_str()).collect();
    assert!(
        texts.contains(&"first") && texts.contains(&"third"),
        "{texts:?}"
    );

    // Garbage is a usage error before anything is sent.
    std::fs::write(&file, "{not json").unwrap();
    let out = sb.tools(&["--batch", file.to_str().unwrap()]);
    assert_eq!(out.code, Some(2), "{out:?}");
    let out = sb.tools(&["--batch", "/nonexistent/batch.json"]);
    assert_eq!(out.code, Some(2), "{out:?}");
}

#[test]
fn the_feed_hears_the_gateway_close_before_the_stream_ends_on_shutdown() {
    let fake = Fake::start();
    let dir = TempDir::new("interop-shutdown");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let feed = subscribe(&sb.url, &sb.token, "?types=gateway.state");
    support::poll("the subscriber", Duration::from_secs(10), || {
        metrics(&sb)
            .contains("switchboard_event_subscribers 1")
            .then_some(())
    });
    support::poll("the gateway", Duration::from_secs(10), || {
        sb.stderr().contains("backfill caught up").then_some(())
    });
    let (status, log) = sb.terminate(Duration::from_secs(30));
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{log}");
    // What the gateway said as it closed reached the feed: the tool server closed after it.
    let mut states = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match feed.recv_timeout(left) {
            Ok(Some((kind, value))) if kind == "gateway.state" => {
                states.push(value["state"].as_str().unwrap_or_default().to_owned());
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    assert_eq!(
        states.last().map(String::as_str),
        Some("down"),
        "the feed ended without the gateway's last state ({states:?})\n{log}"
    );
    assert!(!log.contains("an event was not kept"), "{log}");
}
