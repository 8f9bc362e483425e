//! The allowlist as an attacker meets it: categories don't widen it, refused channels leave
//! nothing on disk, refusals don't leak ids, and bad ids don't become a flood of requests to
//! Discord.

use std::process::{Command, Stdio};
use std::time::Duration;

use fake_discord::{demo, ChannelSpec, Snowflake, World};

use crate::support::{poll, Allow, Fake, Sections, Switchboard, TempDir};

const CATEGORY: u64 = 1000000000000000601;
const IN_CATEGORY: u64 = 1000000000000000602;
const THREAD_IN_CATEGORY: u64 = 1000000000000000603;

/// The demo world plus a category `Projects` holding `#alpha`, which has a thread.
fn world_with_a_category() -> World {
    let mut world = World::demo();
    let channel = |id: u64, name: &str, kind: u8, parent: Option<u64>| ChannelSpec {
        id: Snowflake(id),
        name: name.to_owned(),
        kind,
        parent_id: parent.map(Snowflake),
        topic: None,
        bot_can_see: true,
        bot_can_send: true,
        bot_can_manage_messages: false,
        archived: false,
    };
    let channels = &mut world.guilds[0].channels;
    channels.push(channel(CATEGORY, "Projects", 4, None));
    channels.push(channel(IN_CATEGORY, "alpha", 0, Some(CATEGORY)));
    channels.push(channel(
        THREAD_IN_CATEGORY,
        "alpha-thread",
        11,
        Some(IN_CATEGORY),
    ));
    world
}

fn list_exit(sb: &Switchboard, channel: u64) -> (Option<i32>, String) {
    let out = sb.tools(&["surface.messages.list", &format!("--session-id={channel}")]);
    (out.code, format!("{}{}", out.stdout, out.stderr))
}

#[test]
fn a_category_in_the_channel_list_allows_nothing_and_is_named() {
    let fake = Fake::start_world(world_with_a_category());
    let dir = TempDir::new("robust-category-as-channel");
    let allow = Allow {
        channels: vec![demo::OPS, CATEGORY],
        dms: false,
    };
    let sb = Switchboard::start(&fake, dir.path(), &allow);
    for channel in [IN_CATEGORY, THREAD_IN_CATEGORY, CATEGORY] {
        let (code, text) = list_exit(&sb, channel);
        assert_eq!(code, Some(3), "{channel} must be denied: {text}");
        assert!(
            !text.contains(&CATEGORY.to_string()) || channel == CATEGORY,
            "the refusal names the category it sits in: {text}"
        );
        assert!(
            !text.contains(&demo::GUILD.to_string()),
            "the refusal names the guild: {text}"
        );
    }
    let logged = poll("the category warning", Duration::from_secs(5), || {
        let log = sb.stderr();
        log.contains("lists a category").then_some(log)
    });
    assert!(logged.contains("allowed_category_ids"), "{logged}");
    let (_, log) = sb.terminate(Duration::from_secs(10));
    assert!(!log.contains("panicked"), "{log}");

    // The store now knows the category: check-config says where the mistake is.
    let out = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["check-config", "--config"])
        .arg(dir.path().join("switchboard.toml"))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("check-config runs");
    let report = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{report}");
    assert!(
        report.contains("discord.allowed_channel_ids[1]"),
        "{report}"
    );
    assert!(report.contains("is a category (#Projects)"), "{report}");
    assert!(report.contains("allowed_category_ids"), "{report}");
}

#[test]
fn an_allowed_category_allows_its_channels_and_their_threads_only() {
    let fake = Fake::start_world(world_with_a_category());
    let dir = TempDir::new("robust-category-allowed");
    let allow = Allow {
        channels: vec![demo::OPS],
        dms: false,
    };
    let sb = Switchboard::start_sections(
        &fake,
        dir.path(),
        &allow,
        Sections {
            discord: &format!("allowed_category_ids = [\"{CATEGORY}\"]"),
            ..Sections::default()
        },
    );
    for channel in [IN_CATEGORY, THREAD_IN_CATEGORY] {
        let (code, text) = list_exit(&sb, channel);
        assert_eq!(
            code,
            Some(0),
            "{channel} is in the allowed category: {text}"
        );
    }
    let (code, text) = list_exit(&sb, demo::RANDOM);
    assert_eq!(code, Some(3), "#random is outside: {text}");
}

#[test]
fn refused_channels_leave_nothing_in_the_store_file() {
    let fake = Fake::start();
    let dir = TempDir::new("robust-refused-not-stored");
    let allow = Allow {
        channels: vec![demo::OPS],
        dms: false,
    };
    let sb = Switchboard::start(&fake, dir.path(), &allow);
    let secrets = [
        (demo::RANDOM, "marker-refused-random"),
        (demo::RANDOM_THREAD, "marker-refused-thread"),
        (demo::STANLEY_DM, "marker-refused-dm"),
    ];
    for (channel, text) in secrets {
        fake.post(channel, demo::STANLEY, text);
    }
    let last = fake.post(demo::OPS, demo::STANLEY, "marker-allowed");
    sb.wait_listed(&demo::OPS.to_string(), &[last], Duration::from_secs(10));
    let (status, log) = sb.terminate(Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{log}");
    let mut disk = Vec::new();
    for entry in std::fs::read_dir(dir.path()).expect("dir") {
        let path = entry.expect("entry").path();
        if path.to_string_lossy().contains("switchboard.db") {
            disk.extend(std::fs::read(&path).unwrap_or_default());
        }
    }
    let holds = |needle: &str| disk.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(holds("marker-allowed"), "the allowed message is durable");
    for (_, text) in secrets {
        assert!(!holds(text), "{text} reached the store file");
    }
}

#[test]
fn a_loop_of_unknown_channel_ids_asks_discord_once() {
    let fake = Fake::start();
    let dir = TempDir::new("robust-unknown-ids");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let client = crate::Client::new(&sb.url, &sb.token);
    let unknown = 1000000000000009999u64;
    for _ in 0..50 {
        let answer = client.call(
            "surface.messages.list",
            serde_json::json!({ "sessionId": unknown.to_string() }),
        );
        assert_eq!(answer.status, 404, "{answer:?}");
        assert_eq!(answer.body["error"]["code"], "unknown_channel");
    }
    let lookups = fake.requests_to("GET", &format!("/api/v10/channels/{unknown}"));
    assert_eq!(
        lookups.len(),
        1,
        "50 calls became {} lookups",
        lookups.len()
    );
}
