//! `surface.channels.*` end to end: the real `switchboard run` against the fake Discord, driven
//! through the real `tools` CLI. The channel is made, renamed and deleted over Discord's REST
//! routes, and the bot's session list says so at once (and when someone else changes channels,
//! once the gateway tells it).

mod support;

use std::time::Duration;

use fake_discord::demo;
use serde_json::Value;
use support::{poll, Allow, Fake, Sections, Switchboard, TempDir};

const INGEST: Duration = Duration::from_secs(10);

/// The session `id` as `surface.sessions.list` shows it, if listed.
fn listed(sb: &Switchboard, id: &str) -> Option<Value> {
    let sessions = sb.tools(&["surface.sessions.list", "--limit=1000"]).json();
    sessions["sessions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["channelId"] == id)
        .cloned()
}

/// `GET /channels/{id}` of the fake, as the bot would ask it.
fn fake_channel(fake: &Fake, id: &str) -> (u16, Value) {
    let mut answer = ureq::get(format!("{}/api/v10/channels/{id}", fake.base_url()))
        .header("authorization", "Bot e2e-token")
        .config()
        .http_status_as_error(false)
        .build()
        .call()
        .expect("the fake answers");
    let body = answer.body_mut().read_to_string().expect("body");
    (
        answer.status().as_u16(),
        serde_json::from_str(&body).unwrap_or(Value::Null),
    )
}

#[test]
fn a_channel_is_made_renamed_and_deleted_through_discord_and_the_session_list_follows() {
    let fake = Fake::start();
    let dir = TempDir::new("channels");
    let guild = format!("allowed_guild_ids = [\"{}\"]", demo::GUILD);
    let sb = Switchboard::start_sections(
        &fake,
        dir.path(),
        &Allow::default(),
        Sections {
            discord: &guild,
            ..Sections::default()
        },
    );

    let made = sb
        .tools(&[
            "surface.channels.create",
            &format!("--guild={}", demo::GUILD),
            "--topic=what ships when",
            "launch-plan",
        ])
        .json();
    let id = made["channelId"].as_str().expect("an id").to_owned();
    assert_eq!(made["reference"], "#launch-plan");
    let created = fake.requests_to("POST", &format!("/api/v10/guilds/{}/channels", demo::GUILD));
    assert_eq!(created.len(), 1, "one request, not retried");
    let (status, channel) = fake_channel(&fake, &id);
    assert_eq!(status, 200, "{channel}");
    assert_eq!(channel["topic"], "what ships when");
    assert_eq!(channel["type"], 0);
    // In the session list at once, and usable by its reference.
    assert_eq!(listed(&sb, &id).expect("listed")["title"], "launch-plan");
    sb.tools(&[
        "surface.messages.send",
        "--session-id=#launch-plan",
        "kickoff",
    ])
    .json();
    let messages = fake
        .fake
        .channel_messages(id.parse().expect("id"))
        .expect("messages");
    assert_eq!(messages.len(), 1, "{messages:?}");

    let renamed = sb
        .tools(&[
            "surface.channels.edit",
            &format!("--session-id={id}"),
            "--name=launch-review",
        ])
        .json();
    assert_eq!(renamed["reference"], "#launch-review");
    assert_eq!(fake_channel(&fake, &id).1["name"], "launch-review");
    assert_eq!(listed(&sb, &id).expect("listed")["title"], "launch-review");

    let deleted = sb
        .tools(&["surface.channels.delete", "#launch-review"])
        .json();
    assert_eq!(deleted["deletedChannelId"], id.as_str());
    assert_eq!(fake_channel(&fake, &id).1["code"], 10003);
    assert!(
        listed(&sb, &id).is_none(),
        "gone from the session list at once"
    );

    // Someone else deletes #ops in Discord: the gateway's CHANNEL_DELETE takes it, and its
    // thread, off the list.
    fake.fake
        .delete_channel(demo::OPS.into())
        .expect("the fake deletes #ops");
    poll("#ops and its thread leave the session list", INGEST, || {
        (listed(&sb, &demo::OPS.to_string()).is_none()
            && listed(&sb, &demo::INCIDENT_THREAD.to_string()).is_none())
        .then_some(())
    });
}

#[test]
fn a_channel_only_listed_by_id_is_used_but_never_changed() {
    let fake = Fake::start();
    let dir = TempDir::new("channels-listed");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    for args in [
        &["surface.channels.delete", "#ops"][..],
        &[
            "surface.channels.edit",
            "--session-id=#ops",
            "--name=renamed",
        ],
        &[
            "surface.channels.create",
            &format!("--guild={}", demo::GUILD),
            "new",
        ],
    ] {
        let out = sb.tools(args);
        assert_eq!(out.code, Some(3), "denied: {args:?} {out:?}");
        assert!(out.stderr.contains("channel_not_allowed"), "{out:?}");
    }
    assert!(
        fake.fake.requests().iter().all(|r| {
            let deletes_ops =
                r.method == "DELETE" && r.path == format!("/api/v10/channels/{}", demo::OPS);
            !deletes_ops && !r.path.ends_with("/channels")
        }),
        "Discord never heard of it"
    );
    assert_eq!(fake_channel(&fake, &demo::OPS.to_string()).1["name"], "ops");
}
