//! Threads, pins, search and reactions end to end: the real `switchboard run` against the fake
//! Discord, driven through the real `tools` CLI, garbage included.

mod support;

use std::time::Duration;

use fake_discord::{demo, ChannelPatch};
use serde_json::Value;
use support::{poll, Allow, Fake, Switchboard, TempDir, ToolsOutput};

const INGEST: Duration = Duration::from_secs(10);

/// The error object `tools` printed on stderr, asserting the exit code.
fn error(out: &ToolsOutput, exit: i32) -> Value {
    assert_eq!(out.code, Some(exit), "{out:?}");
    let line = out.stderr.lines().next().unwrap_or_default();
    let value: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("no error JSON on stderr ({e}): {out:?}"));
    value["error"].clone()
}

fn posts_to(fake: &Fake, channel: &str) -> usize {
    fake.requests_to("POST", &format!("/api/v10/channels/{channel}/messages"))
        .len()
}

#[test]
fn threads_are_opened_listed_archived_and_reopened_by_a_send() {
    let fake = Fake::start();
    let dir = TempDir::new("threads");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());

    // From a message: the thread takes its id, and the bot joins it.
    let starter = fake.post(demo::OPS, demo::STANLEY, "deploy failed on staging");
    sb.wait_listed("#ops", std::slice::from_ref(&starter), INGEST);
    let message_id = format!("--message-id={starter}");
    let created = sb
        .tools(&[
            "surface.threads.create",
            "--session-id=#ops",
            &message_id,
            "deploy follow-up",
        ])
        .json();
    assert_eq!(created["channelId"], starter.as_str(), "{created}");
    assert_eq!(created["parentChannelId"], demo::OPS.to_string());
    let token = created["token"].as_str().expect("token").to_owned();
    assert!(token.starts_with('#'), "{created}");
    let joins = fake.requests_to(
        "PUT",
        &format!("/api/v10/channels/{starter}/thread-members/@me"),
    );
    assert_eq!(joins.len(), 1, "the bot joins the thread it opened");

    // The token works as a session: a send lands in the thread.
    let session = format!("--session-id={token}");
    let sent = sb
        .tools(&["surface.messages.send", &session, "looking into it"])
        .json();
    assert_eq!(sent["channelId"], starter.as_str());
    assert_eq!(posts_to(&fake, &starter), 1);

    // Standalone, with an archive period.
    let standalone = sb
        .tools(&[
            "surface.threads.create",
            "--session-id=#ops",
            "--auto-archive-minutes=60",
            "standup",
        ])
        .json();
    let standup = standalone["channelId"].as_str().unwrap().to_owned();
    assert_eq!(standalone["autoArchiveMinutes"], 60);
    let listed = sb
        .tools(&["surface.threads.list", "--session-id=#ops"])
        .json();
    let ids: Vec<&str> = listed["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["channelId"].as_str())
        .collect();
    assert!(
        ids.contains(&starter.as_str()) && ids.contains(&standup.as_str()),
        "{listed}"
    );

    // Archive it; it leaves the active listing and shows with includeArchived.
    let standup_session = format!("--session-id={standup}");
    let archived = sb
        .tools(&["surface.threads.archive", &standup_session, "true"])
        .json();
    assert_eq!(archived["archived"], true);
    let active = sb
        .tools(&["surface.threads.list", "--session-id=#ops"])
        .json();
    assert!(!active.to_string().contains(&standup), "{active}");
    let all = sb
        .tools(&[
            "surface.threads.list",
            "--session-id=#ops",
            "--include-archived=true",
        ])
        .json();
    assert!(all.to_string().contains(&standup), "{all}");

    // A send to the archived thread reopens it and says so.
    let sent = sb
        .tools(&["surface.messages.send", &standup_session, "back again"])
        .json();
    assert_eq!(sent["unarchived"], true, "{sent}");
    assert_eq!(posts_to(&fake, &standup), 1);
    let rejoins = fake.requests_to(
        "PUT",
        &format!("/api/v10/channels/{standup}/thread-members/@me"),
    );
    assert_eq!(
        rejoins.len(),
        2,
        "joined on creation and again when reopened"
    );

    // A moderator archives and locks it: the send is refused and nothing is posted.
    fake.fake
        .update_channel(
            standup.parse::<u64>().unwrap().into(),
            ChannelPatch {
                archived: Some(true),
                locked: Some(true),
                ..ChannelPatch::default()
            },
        )
        .expect("lock the thread");
    let locked = poll("the lock to arrive", INGEST, || {
        let out = sb.tools(&["surface.messages.send", &standup_session, "anyone?"]);
        (out.code != Some(0)).then_some(out)
    });
    let locked = error(&locked, 5);
    assert_eq!(locked["code"], "thread_locked", "{locked}");
    assert_eq!(
        posts_to(&fake, &standup),
        1,
        "nothing posted in the locked thread"
    );
    // Reopening it by hand is refused by Discord too.
    let reopen = sb.tools(&["surface.threads.archive", &standup_session, "false"]);
    assert_eq!(error(&reopen, 3)["code"], "discord_denied");
}

#[test]
fn thread_calls_refuse_garbage_and_disallowed_channels_without_touching_discord() {
    let fake = Fake::start();
    let dir = TempDir::new("threads-garbage");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    fake.fake.clear_requests();
    let long = "x".repeat(101);
    for (args, code) in [
        (
            vec!["surface.threads.create", "--session-id=#ops", ""],
            "invalid_input",
        ),
        (
            vec!["surface.threads.create", "--session-id=#ops", long.as_str()],
            "invalid_input",
        ),
        (
            vec![
                "surface.threads.create",
                "--session-id=#ops",
                "--auto-archive-minutes=61",
                "x",
            ],
            "invalid_input",
        ),
        (
            vec![
                "surface.threads.create",
                "--session-id=#ops",
                "--auto-archive-minutes=soon",
                "x",
            ],
            "invalid_input",
        ),
        (
            vec![
                "surface.threads.create",
                "--session-id=#ops",
                "--message-id=12ab",
                "x",
            ],
            "invalid_input",
        ),
        (vec!["surface.threads.list", "--limit=0"], "invalid_input"),
        (
            vec!["surface.threads.archive", "--session-id=#ops", "maybe"],
            "invalid_input",
        ),
        (
            vec!["surface.pins.add", "--session-id=#ops", "not-an-id"],
            "invalid_input",
        ),
    ] {
        let out = sb.tools(&args);
        assert_eq!(error(&out, 2)["code"], code, "{args:?}");
    }
    // Not allowed: #random and its thread; and a channel where a thread is asked for.
    for args in [
        vec!["surface.threads.create", "--session-id=#random", "x"],
        vec!["surface.threads.list", "--session-id=#random"],
        vec!["surface.pins.list", "--session-id=#random"],
        vec!["surface.messages.search", "--session-id=#random", "deploy"],
    ] {
        let out = sb.tools(&args);
        assert_eq!(error(&out, 3)["code"], "channel_not_allowed", "{args:?}");
    }
    let out = sb.tools(&["surface.threads.archive", "--session-id=#ops", "true"]);
    assert_eq!(error(&out, 2)["code"], "invalid_input");
    let touched: Vec<_> = fake
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/threads") || r.path.contains("/pins") || r.method == "PATCH")
        .collect();
    assert!(touched.is_empty(), "Discord was asked: {touched:?}");
}

#[test]
fn pins_are_added_listed_and_removed_through_tools() {
    let fake = Fake::start();
    let dir = TempDir::new("pins");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let first = fake.post(
        demo::OPS,
        demo::STANLEY,
        "runbook: restart <@1000000000000000102>",
    );
    let second = fake.post(demo::OPS, demo::TOMAS, "second");
    sb.wait_listed("#ops", &[first.clone(), second.clone()], INGEST);
    for id in [&first, &second] {
        sb.tools(&["surface.pins.add", "--session-id=#ops", id])
            .json();
    }
    let list = sb.tools(&["surface.pins.list", "#ops"]).json();
    let pins = list["pins"].as_array().expect("pins").clone();
    assert_eq!(pins.len(), 2, "{list}");
    assert_eq!(
        pins[0]["message"]["messageId"],
        second.as_str(),
        "newest pin first"
    );
    assert_eq!(pins[1]["message"]["text"], "runbook: restart @Tomas");
    assert!(pins[0]["pinnedAt"].is_string());
    sb.tools(&["surface.pins.remove", "--session-id=#ops", &second])
        .json();
    let list = sb.tools(&["surface.pins.list", "#ops"]).json();
    assert_eq!(list["pins"].as_array().unwrap().len(), 1, "{list}");
    // Discord refuses where the bot may not manage messages; an unknown message is not found.
    let release = fake.post(demo::RELEASE_ROOM, demo::STANLEY, "pin me");
    sb.wait_listed("#release-room", std::slice::from_ref(&release), INGEST);
    let out = sb.tools(&["surface.pins.add", "--session-id=#release-room", &release]);
    assert_eq!(error(&out, 3)["code"], "discord_denied");
    let out = sb.tools(&[
        "surface.pins.add",
        "--session-id=#ops",
        "1000000000000009999",
    ]);
    assert_eq!(out.code, Some(4), "{out:?}");
}

#[test]
fn search_finds_words_and_mentions_and_refuses_garbage() {
    let fake = Fake::start();
    let dir = TempDir::new("search");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let mention = fake.post(
        demo::OPS,
        demo::TOMAS,
        "<@1000000000000000101> the deploy of api-gateway failed",
    );
    let plain = fake.post(
        demo::RELEASE_ROOM,
        demo::STANLEY,
        "Rollback plan for the deploy is ready",
    );
    let other = fake.post(demo::OPS, demo::STANLEY, "lunch?");
    sb.wait_listed("#ops", &[mention.clone(), other], INGEST);
    sb.wait_listed("#release-room", std::slice::from_ref(&plain), INGEST);

    let hits = |args: &[&str]| -> Vec<String> {
        let out = sb.tools(args).json();
        out["results"]
            .as_array()
            .unwrap_or_else(|| panic!("no results: {out}"))
            .iter()
            .map(|r| r["message"]["messageId"].as_str().unwrap().to_owned())
            .collect()
    };
    let mut both = hits(&["surface.messages.search", "deploy"]);
    both.sort();
    let mut expected = vec![mention.clone(), plain.clone()];
    expected.sort();
    assert_eq!(both, expected);
    assert_eq!(
        hits(&["surface.messages.search", "@Stanley"]),
        [mention.as_str()]
    );
    assert_eq!(
        hits(&[
            "surface.messages.search",
            "--session-id=#release-room",
            "deploy"
        ]),
        [plain.as_str()]
    );
    assert_eq!(
        hits(&["surface.messages.search", "--author-id=@Stanley", "deploy"]),
        [plain.as_str()]
    );
    assert_eq!(
        hits(&["surface.messages.search", "\"rollback plan\""]),
        [plain.as_str()]
    );
    assert_eq!(
        hits(&["surface.messages.search", "roll*"]),
        [plain.as_str()]
    );
    assert!(hits(&["surface.messages.search", "kubernetes"]).is_empty());
    let out = sb.tools(&["surface.messages.search", "gateway"]).json();
    let snippet = out["results"][0]["snippet"].as_str().unwrap();
    assert!(snippet.contains("**gateway**"), "{snippet}");
    assert!(snippet.contains("@Stanley"), "{snippet}");

    // Index syntax typed by a user is only words; what cannot be searched is a usage error.
    assert_eq!(
        hits(&["surface.messages.search", "deploy\" failed)(*"]),
        [mention.as_str()]
    );
    assert!(hits(&["surface.messages.search", "deploy AND NEAR(failed"]).is_empty());
    let long = "w ".repeat(200);
    for query in ["", "\"", "***", "OR", "a*", "!!! ??", long.as_str()] {
        let out = sb.tools(&["surface.messages.search", query]);
        assert_eq!(error(&out, 2)["code"], "invalid_input", "{query:?}");
    }
    for flag in [
        "--limit=0",
        "--limit=101",
        "--before=yesterday",
        "--after=2014-01-01",
    ] {
        let out = sb.tools(&["surface.messages.search", flag, "deploy"]);
        assert_eq!(error(&out, 2)["code"], "invalid_input", "{flag}");
    }
    let out = sb.tools(&["surface.messages.search", "--author-id=@nobody", "deploy"]);
    assert_eq!(error(&out, 4)["code"], "unknown_user");
}

#[test]
fn reactions_list_shows_emoji_as_characters() {
    let fake = Fake::start();
    let dir = TempDir::new("reactions");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let id = fake.post(demo::OPS, demo::STANLEY, "ship it?");
    sb.wait_listed("#ops", std::slice::from_ref(&id), INGEST);
    fake.fake
        .react(
            demo::OPS.into(),
            id.parse::<u64>().unwrap().into(),
            demo::TOMAS.into(),
            "👍",
            true,
        )
        .expect("react");
    let listed = poll("the reaction to be stored", INGEST, || {
        let out = sb
            .tools(&["surface.reactions.list", "--session-id=#ops", &id])
            .json();
        (!out.to_string().contains("\"reactions\":[]")).then_some(out)
    });
    let text = listed.to_string();
    assert!(text.contains("👍"), "{listed}");
    assert!(!text.contains('%'), "{listed}");
}

#[test]
fn reactions_take_shortcodes_custom_emoji_and_unicode() {
    let fake = Fake::start();
    let dir = TempDir::new("reaction-forms");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let id = fake.post(demo::OPS, demo::STANLEY, "we shipped");
    sb.wait_listed("#ops", std::slice::from_ref(&id), INGEST);
    let message = format!("--message-id={id}");
    let shipit = format!("<:shipit:{}>", demo::SHIPIT_EMOJI);
    for emoji in [":tada:", "✅", shipit.as_str(), ":+1:"] {
        let out = sb.tools(&[
            "surface.reactions.add",
            "--session-id=#ops",
            &message,
            emoji,
        ]);
        assert_eq!(out.code, Some(0), "{emoji}: {out:?}");
    }
    let mut left = support::own_reactions(&fake, demo::OPS, &id);
    left.sort();
    let mut expected = vec!["🎉", "✅", "shipit", "👍"];
    expected.sort_unstable();
    assert_eq!(left, expected);
    // The same forms take a reaction back.
    let out = sb.tools(&[
        "surface.reactions.remove",
        "--session-id=#ops",
        &message,
        ":tada:",
    ]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert!(!support::own_reactions(&fake, demo::OPS, &id).contains(&"🎉".to_owned()));

    // What is no emoji is refused before Discord is asked.
    let reactions = format!("/api/v10/channels/{}/messages/{id}/reactions", demo::OPS);
    let asked_before = fake
        .fake
        .requests()
        .iter()
        .filter(|r| r.path.starts_with(&reactions))
        .count();
    for bad in [":nosuchemoji:", "thumbsup", "<:x:1>", "é"] {
        let out = sb.tools(&["surface.reactions.add", "--session-id=#ops", &message, bad]);
        let error = error(&out, 2);
        assert_eq!(error["code"], "invalid_emoji", "{bad}: {out:?}");
        assert!(
            error["message"]
                .as_str()
                .unwrap_or_default()
                .contains(":tada:"),
            "{out:?}"
        );
    }
    let asked_after = fake
        .fake
        .requests()
        .iter()
        .filter(|r| r.path.starts_with(&reactions))
        .count();
    assert_eq!(
        asked_before, asked_after,
        "an invalid emoji reached Discord"
    );
}
