//! Garbage on the input paths the binary has: gateway payloads (straight from the fake's
//! socket, valid JSON or not) and the `tools` command line. The service keeps ingesting, the
//! CLI always exits with a documented code.

use std::time::Duration;

use fake_discord::demo;
use proptest::prelude::*;

use crate::support::{http_get, tools_at, Allow, Fake, Switchboard, TempDir};

#[test]
fn garbage_gateway_payloads_never_stop_ingest() {
    let fake = Fake::start();
    let dir = TempDir::new("robust-gateway-garbage");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let ops = demo::OPS.to_string();
    let nested = format!("{}{}", "[".repeat(20_000), "]".repeat(20_000));
    let long = "<@1".repeat(200_000);
    let garbage: Vec<(&str, String)> = vec![
        ("MESSAGE_CREATE", "{}".to_owned()),
        ("MESSAGE_CREATE", "null".to_owned()),
        ("MESSAGE_CREATE", "not json at all".to_owned()),
        ("MESSAGE_CREATE", nested),
        (
            "MESSAGE_CREATE",
            format!(r#"{{"id":"1","channel_id":"{ops}","author":{{"id":"x"}},"content":7}}"#),
        ),
        (
            "MESSAGE_CREATE",
            format!(
                r#"{{"id":"18446744073709551616","channel_id":"{ops}","guild_id":"{}","author":{{"id":"{}","username":"stanley"}},"content":"overflowing id","timestamp":"2026-11-23T00:00:00Z","tts":false,"mention_everyone":false,"mentions":[],"mention_roles":[],"attachments":[],"embeds":[],"pinned":false,"type":0}}"#,
                demo::GUILD,
                demo::STANLEY
            ),
        ),
        (
            "MESSAGE_CREATE",
            format!(
                r#"{{"id":"1000000000000090001","channel_id":"{ops}","guild_id":"{}","author":{{"id":"{}","username":"stanley","bot":false}},"content":"{long}","timestamp":"2026-11-23T00:00:00Z","tts":false,"mention_everyone":false,"mentions":[],"mention_roles":[],"attachments":[],"embeds":[],"pinned":false,"type":0}}"#,
                demo::GUILD,
                demo::STANLEY
            ),
        ),
        ("GUILD_CREATE", r#"{"id":"x"}"#.to_owned()),
        ("CHANNEL_CREATE", r#"{"id":"1","type":99}"#.to_owned()),
        (
            "MESSAGE_UPDATE",
            format!(r#"{{"id":"1","channel_id":"{ops}","content":{{}}}}"#),
        ),
        ("MESSAGE_REACTION_ADD", r#"{"emoji":null}"#.to_owned()),
        (
            "INTERACTION_CREATE",
            r#"{"type":3,"data":{"custom_id":null}}"#.to_owned(),
        ),
        ("NO_SUCH_EVENT", r#"{"a":1}"#.to_owned()),
        ("", "{}".to_owned()),
    ];
    for (name, d) in &garbage {
        let delivered = fake.fake.dispatch_raw(name, d);
        assert!(delivered >= 1, "the bot had no gateway session for {name}");
    }
    // Still ingesting, in order, after all of it (a frame that is not JSON may cost a
    // reconnect; the gateway must come back by itself).
    let after = fake.post(demo::OPS, demo::STANLEY, "still here after the garbage");
    sb.wait_listed(&ops, &[after], Duration::from_secs(20));
    let (status, body) = http_get(&sb.url, "/health").expect("health answers");
    assert_eq!(status, 200, "{body}");
    let log = sb.stderr();
    assert!(!log.contains("panicked"), "{log}");
}

/// Command-line words: flags, callables, values that break parsers.
fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("surface.messages.send".to_owned()),
        Just("surface.messages.list".to_owned()),
        Just("--session-id".to_owned()),
        Just("--session-id=".to_owned()),
        Just("--input={".to_owned()),
        Just("--input=@/definitely/not/here".to_owned()),
        Just("--input:json=[".to_owned()),
        Just("--limit=-1".to_owned()),
        Just("--limit:json=1e400".to_owned()),
        Just("--output=yaml".to_owned()),
        Just("--".to_owned()),
        Just("-".to_owned()),
        Just("--list".to_owned()),
        Just("help".to_owned()),
        "--[a-z-]{1,12}(=[ -~]{0,12})?",
        "\\PC{0,16}",
    ]
}

#[test]
fn garbage_command_lines_exit_with_a_documented_code() {
    let fake = Fake::start();
    let dir = TempDir::new("robust-cli-garbage");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 120,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&prop::collection::vec(word(), 0..5), |words| {
            let args: Vec<&str> = words.iter().map(String::as_str).collect();
            let out = tools_at(&sb.url, &sb.token, &args);
            let code = out.code.unwrap_or(-1);
            prop_assert!(
                (0..=8).contains(&code),
                "tools {:?} exited {} (a panic is 101, a signal none): {}",
                args,
                code,
                out.stderr
            );
            prop_assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
            if code != 0 {
                prop_assert!(
                    !out.stderr.trim().is_empty(),
                    "exit {} without a word: {:?}",
                    code,
                    args
                );
            }
            Ok(())
        })
        .expect("every command line gets a documented exit code");
}
