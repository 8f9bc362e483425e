//! End to end: the real `switchboard run` against an in-process fake Discord, driven through
//! the real `tools` CLI and the HTTP API, all over 127.0.0.1.

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use fake_discord::{demo, Fault, GatewayFaultKind, RestFault};
use serde_json::Value;
use support::{wait_bounded, Allow, Fake, Switchboard, TempDir};

/// How long ingest may take to show injected messages.
const INGEST: Duration = Duration::from_secs(10);

fn messages_path(channel: u64) -> String {
    format!("/api/v10/channels/{channel}/messages")
}

fn texts(list: &[Value]) -> Vec<&str> {
    list.iter().filter_map(|m| m["text"].as_str()).collect()
}

fn parse_list(body: &Value) -> Vec<&str> {
    body["allowed_mentions"]["parse"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The error object of the JSON line `tools` printed on stderr.
fn stderr_error(out: &support::ToolsOutput) -> Value {
    let line = out.stderr.lines().next().unwrap_or_default();
    let value: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("no error JSON on stderr ({e}): {out:?}"));
    assert_eq!(value["ok"], false, "{value}");
    value["error"].clone()
}

/// The one message id a send printed.
fn sent_id(out: &support::ToolsOutput) -> String {
    let value = out.json();
    let ids = value["messageIds"].as_array().expect("messageIds");
    assert_eq!(ids.len(), 1, "{value}");
    ids[0].as_str().expect("id").to_owned()
}

#[test]
fn injected_messages_are_listed_with_canonical_text() {
    let fake = Fake::start();
    let dir = TempDir::new("list");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());

    let ids = vec![
        fake.post(
            demo::OPS,
            demo::STANLEY,
            "hi <@1000000000000000001>, status of <#1000000000000000402>?",
        ),
        fake.post(
            demo::OPS,
            demo::TOMAS,
            "<@1000000000000000101> is on it, see <#1000000000000000402>",
        ),
    ];
    let list = sb.wait_listed("#ops", &ids, INGEST);
    let first = list
        .iter()
        .find(|m| m["messageId"] == ids[0].as_str())
        .unwrap();
    assert_eq!(first["text"], "hi @switchboard, status of #release-room?");
    assert_eq!(first["authorName"], "Stanley");
    let second = list
        .iter()
        .find(|m| m["messageId"] == ids[1].as_str())
        .unwrap();
    assert_eq!(second["text"], "@Stanley is on it, see #release-room");
    for text in texts(&list) {
        assert!(!text.contains("<@"), "raw mention left in {text:?}");
        assert!(!text.contains("<#"), "raw channel left in {text:?}");
    }
}

#[test]
fn send_rewrites_mentions_and_never_pings_everyone() {
    let fake = Fake::start();
    let dir = TempDir::new("send");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let path = messages_path(demo::RELEASE_ROOM);

    fake.fake.clear_requests();
    let out = sb.tools(&[
        "surface.messages.send",
        "--session-id=#release-room",
        "--text=ping @Stanley about #ops",
    ]);
    sent_id(&out);
    let posts = fake.requests_to("POST", &path);
    assert_eq!(posts.len(), 1, "{posts:?}");
    let body = posts[0].body.as_ref().expect("a JSON body");
    let content = body["content"].as_str().expect("content");
    assert!(content.contains("<@1000000000000000101>"), "{content}");
    assert!(content.contains("<#1000000000000000401>"), "{content}");
    let parse = parse_list(body);
    assert!(!parse.contains(&"everyone"), "{body}");
    assert!(!parse.contains(&"roles"), "{body}");

    fake.fake.clear_requests();
    let out = sb.tools(&[
        "surface.messages.send",
        "--session-id=#release-room",
        "heads up @everyone and @here: deploy at 5",
    ]);
    sent_id(&out);
    let posts = fake.requests_to("POST", &path);
    assert_eq!(posts.len(), 1, "{posts:?}");
    let body = posts[0].body.as_ref().expect("a JSON body");
    let content = body["content"].as_str().expect("content");
    assert!(content.contains("@everyone"), "{content}");
    assert!(content.contains("@here"), "{content}");
    let parse = parse_list(body);
    assert!(!parse.contains(&"everyone"), "{body}");
    assert!(!parse.contains(&"roles"), "{body}");
}

#[test]
fn a_send_names_each_mention_it_could_not_make_and_why() {
    let fake = Fake::start();
    let dir = TempDir::new("send-warnings");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let out = sb.tools(&[
        "surface.messages.send",
        "--session-id=#ops",
        "--output=json",
        "hello @Nobody and #nochannel; @Stanley, see #release-room and #secret, @everyone",
    ]);
    let answer = out.json();
    assert_eq!(
        answer["messageIds"].as_array().map(Vec::len),
        Some(1),
        "{answer}"
    );
    let warnings = answer["warnings"].as_array().expect("warnings");
    let pairs: Vec<(&str, &str)> = warnings
        .iter()
        .map(|w| {
            (
                w["token"].as_str().unwrap_or_default(),
                w["reason"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        pairs,
        [
            ("@Nobody", "unknown_name"),
            ("#nochannel", "unknown_channel"),
            ("@everyone", "mass_mention"),
            ("#secret", "channel_not_allowed"),
        ],
        "{answer}"
    );
    for warning in warnings {
        let message = warning["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with(warning["token"].as_str().unwrap_or("?")),
            "{warning}"
        );
    }
    // What was posted: the known ones became mentions, the rest stayed text.
    let posts = fake.requests_to("POST", &messages_path(demo::OPS));
    let content = posts.last().and_then(|p| p.body.as_ref()).expect("a post")["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        content.starts_with("hello @Nobody and #nochannel; <@1000000000000000101>"),
        "{content}"
    );

    // A clean send has no warnings at all; the text output shows them one line each.
    let clean = sb
        .tools(&[
            "surface.messages.send",
            "--session-id=#ops",
            "--output=json",
            "thanks @Stanley",
        ])
        .json();
    assert!(clean.get("warnings").is_none(), "{clean}");
    let text = sb.tools(&[
        "surface.messages.send",
        "--session-id=#ops",
        "--output=text",
        "bye @Nobody",
    ]);
    assert_eq!(text.code, Some(0), "{text:?}");
    assert!(
        text.stdout
            .contains("warning (unknown_name): @Nobody is no user, role or alias"),
        "{text:?}"
    );
    // An edit says the same.
    let id = answer["messageIds"][0].as_str().expect("id").to_owned();
    let edited = sb
        .tools(&[
            "surface.messages.edit",
            "--session-id=#ops",
            &format!("--message-id={id}"),
            "--output=json",
            "hello @Nobody",
        ])
        .json();
    assert_eq!(edited["ok"], true, "{edited}");
    assert_eq!(edited["warnings"][0]["reason"], "unknown_name", "{edited}");
}

#[test]
fn edit_applies_outbound_rewrite_and_delete_removes_from_list() {
    let fake = Fake::start();
    let dir = TempDir::new("edit");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());

    let id = sent_id(&sb.tools(&["surface.messages.send", "--session-id=#ops", "thanks"]));
    sb.wait_listed("#ops", std::slice::from_ref(&id), INGEST);

    fake.fake.clear_requests();
    let message_id = format!("--message-id={id}");
    let out = sb.tools(&[
        "surface.messages.edit",
        "--session-id=#ops",
        &message_id,
        "thanks @Stanley",
    ]);
    assert_eq!(out.code, Some(0), "{out:?}");
    let path = format!("{}/{id}", messages_path(demo::OPS));
    let patches = fake.requests_to("PATCH", &path);
    assert_eq!(patches.len(), 1, "{:?}", fake.fake.requests());
    let content = patches[0].body.as_ref().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(content, "thanks <@1000000000000000101>");
    let list = sb.list("#ops");
    let edited = list
        .iter()
        .find(|m| m["messageId"] == id.as_str())
        .expect("still listed");
    assert_eq!(edited["text"], "thanks @Stanley");

    let out = sb.tools(&["surface.messages.delete", "--session-id=#ops", &message_id]);
    assert_eq!(out.code, Some(0), "{out:?}");
    assert_eq!(fake.requests_to("DELETE", &path).len(), 1);
    let list = sb.list("#ops");
    assert!(
        !list.iter().any(|m| m["messageId"] == id.as_str()),
        "deleted message still listed: {list:?}"
    );
    assert!(fake
        .fake
        .channel_messages(demo::OPS.into())
        .unwrap()
        .iter()
        .all(|m| m["id"] != id.as_str()));
}

fn assert_refused_without_a_request(fake: &Fake, sb: &Switchboard, channel: u64, what: &str) {
    fake.fake.clear_requests();
    let session = format!("--session-id={channel}");
    let out = sb.tools(&["surface.messages.send", &session, "should never arrive"]);
    assert_eq!(out.code, Some(3), "{what}: {out:?}");
    let seen = fake.requests_mentioning(channel);
    assert!(
        seen.is_empty(),
        "{what}: the fake saw requests for {channel}: {seen:?}"
    );
}

/// `#ops` and `#release-room` allowed, DMs not.
fn start_with_dms_denied(fake: &Fake, dir: &TempDir) -> Switchboard {
    let allow = Allow {
        channels: vec![demo::OPS, demo::RELEASE_ROOM],
        dms: false,
    };
    Switchboard::start(fake, dir.path(), &allow)
}

#[test]
fn unlisted_channel_is_denied_without_touching_discord() {
    let fake = Fake::start();
    let dir = TempDir::new("allow-channel");
    let sb = start_with_dms_denied(&fake, &dir);
    assert_refused_without_a_request(&fake, &sb, demo::RANDOM, "unlisted channel #random");
}

#[test]
fn thread_of_disallowed_channel_is_denied_without_touching_discord() {
    let fake = Fake::start();
    let dir = TempDir::new("allow-thread");
    let sb = start_with_dms_denied(&fake, &dir);
    assert_refused_without_a_request(
        &fake,
        &sb,
        demo::RANDOM_THREAD,
        "thread of unlisted channel #random",
    );
}

/// A bot learns a DM channel when someone DMs it (Discord's READY lists none); from then on a
/// send there is refused from the cache. (A channel id the bot has never seen costs one
/// `GET /channels/{id}` lookup, since it could be an archived thread of a listed channel.)
#[test]
fn dm_without_allow_dms_is_denied_without_touching_discord() {
    let fake = Fake::start();
    let dir = TempDir::new("allow-dm");
    let sb = start_with_dms_denied(&fake, &dir);
    fake.post(demo::STANLEY_DM, demo::STANLEY, "hello bot, in private");
    // Gateway events arrive in order: once this one is listed, the DM has been ingested.
    let marker = fake.post(demo::OPS, demo::STANLEY, "after the DM");
    sb.wait_listed("#ops", &[marker], Duration::from_secs(10));
    assert_refused_without_a_request(&fake, &sb, demo::STANLEY_DM, "DM without allow_dms");
}

#[test]
fn rate_limits_surface_as_unavailable_with_retry_after() {
    let fake = Fake::start();
    let dir = TempDir::new("429");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let path = messages_path(demo::OPS);

    // A wait longer than the client honours goes straight back to the caller.
    fake.fake
        .inject_fault(Fault {
            rest: Some(RestFault {
                status: 429,
                count: 1,
                retry_after: Some(7.5),
                path_contains: Some(path.clone()),
            }),
            gateway: None,
            handshakes: None,
        })
        .unwrap();
    let out = sb.tools(&["surface.messages.send", "--session-id=#ops", "too soon"]);
    assert_eq!(out.code, Some(6), "{out:?}");
    assert_eq!(
        stderr_error(&out)["details"]["retryAfterMs"],
        7500,
        "{}",
        out.stderr
    );
    assert_eq!(fake.requests_to("POST", &path).len(), 1);

    // Short waits are retried, three attempts in all; then the caller sees the 429.
    fake.fake.clear_requests();
    fake.fake
        .inject_fault(Fault {
            rest: Some(RestFault {
                status: 429,
                count: 3,
                retry_after: Some(0.2),
                path_contains: Some(path.clone()),
            }),
            gateway: None,
            handshakes: None,
        })
        .unwrap();
    let out = sb.tools(&[
        "surface.messages.send",
        "--session-id=#ops",
        "still too soon",
    ]);
    assert_eq!(out.code, Some(6), "{out:?}");
    assert_eq!(
        stderr_error(&out)["details"]["retryAfterMs"],
        200,
        "{}",
        out.stderr
    );
    let posts = fake.requests_to("POST", &path);
    assert_eq!(posts.len(), 3, "{posts:?}");
    assert!(posts.iter().all(|p| p.status == 429), "{posts:?}");
}

#[test]
fn rate_limit_human_line_shows_the_delay() {
    let fake = Fake::start();
    let dir = TempDir::new("429-human");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    fake.fake
        .inject_fault(Fault {
            rest: Some(RestFault {
                status: 429,
                count: 1,
                retry_after: Some(7.5),
                path_contains: Some(messages_path(demo::OPS)),
            }),
            gateway: None,
            handshakes: None,
        })
        .unwrap();
    let out = sb.tools(&["surface.messages.send", "--session-id=#ops", "too soon"]);
    assert_eq!(out.code, Some(6), "{out:?}");
    let human = out.stderr.lines().last().unwrap_or_default();
    assert!(human.contains("7.5 s"), "{human}");
}

#[test]
fn a_server_error_then_success_posts_exactly_once() {
    let fake = Fake::start();
    let dir = TempDir::new("500");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let path = messages_path(demo::OPS);
    let before = fake.fake.channel_messages(demo::OPS.into()).unwrap().len();

    fake.fake.clear_requests();
    fake.fake
        .inject_fault(Fault {
            rest: Some(RestFault {
                status: 500,
                count: 1,
                retry_after: None,
                path_contains: Some(path.clone()),
            }),
            gateway: None,
            handshakes: None,
        })
        .unwrap();
    let id = sent_id(&sb.tools(&["surface.messages.send", "--session-id=#ops", "once only"]));

    let held = fake.fake.channel_messages(demo::OPS.into()).unwrap();
    assert_eq!(held.len(), before + 1, "{held:?}");
    assert_eq!(held.last().unwrap()["id"], id.as_str());
    assert_eq!(held.last().unwrap()["content"], "once only");
    let posts = fake.requests_to("POST", &path);
    let statuses: Vec<u16> = posts.iter().map(|p| p.status).collect();
    assert_eq!(statuses, [500, 200], "{posts:?}");
    let nonces: Vec<&Value> = posts
        .iter()
        .map(|p| &p.body.as_ref().unwrap()["nonce"])
        .collect();
    assert_eq!(nonces[0], nonces[1], "a retry must reuse the nonce");
    assert_eq!(posts[1].body.as_ref().unwrap()["enforce_nonce"], true);
}

#[test]
fn messages_sent_across_a_dropped_gateway_are_all_stored() {
    let fake = Fake::start();
    let dir = TempDir::new("drop");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());

    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(fake.post(demo::OPS, demo::STANLEY, &format!("before drop {i}")));
    }
    let reached = fake
        .fake
        .inject_fault(Fault {
            rest: None,
            gateway: Some(GatewayFaultKind::Drop),
            handshakes: None,
        })
        .unwrap();
    assert_eq!(
        reached, 1,
        "one gateway connection should have been dropped"
    );
    for i in 0..5 {
        ids.push(fake.post(demo::OPS, demo::TOMAS, &format!("after drop {i}")));
    }
    let list = sb.wait_listed("#ops", &ids, Duration::from_secs(20));
    let listed = texts(&list);
    for i in 0..5 {
        assert!(
            listed.contains(&format!("before drop {i}").as_str()),
            "{listed:?}"
        );
        assert!(
            listed.contains(&format!("after drop {i}").as_str()),
            "{listed:?}"
        );
    }
    let state = fake.fake.state();
    assert!(
        state.sessions_resumed >= 1 && state.sessions_identified == 1,
        "the gateway should have resumed, not re-identified: {state:?}"
    );
}

#[test]
fn messages_survive_a_sigkill_and_restart_on_the_same_store() {
    let fake = Fake::start();
    let dir = TempDir::new("crash");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());

    let mut ids = Vec::new();
    for i in 0..6 {
        let channel = if i % 2 == 0 {
            demo::OPS
        } else {
            demo::RELEASE_ROOM
        };
        ids.push((
            channel,
            fake.post(
                channel,
                demo::STANLEY,
                &format!("durable {i} <@1000000000000000102>"),
            ),
        ));
    }
    let ops: Vec<String> = ids
        .iter()
        .filter(|(c, _)| *c == demo::OPS)
        .map(|(_, id)| id.clone())
        .collect();
    let room: Vec<String> = ids
        .iter()
        .filter(|(c, _)| *c == demo::RELEASE_ROOM)
        .map(|(_, id)| id.clone())
        .collect();
    sb.wait_listed("#ops", &ops, INGEST);
    sb.wait_listed("#release-room", &room, INGEST);
    // The writer commits its batch right away; give it a moment.
    std::thread::sleep(Duration::from_secs(1));
    sb.kill();

    let identified = fake.fake.state().sessions_identified;
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    // A fresh process identifies anew: nothing is replayed, so the list comes from SQLite.
    assert_eq!(fake.fake.state().sessions_identified, identified + 1);
    let list = sb.list("#ops");
    let room_list = sb.list("#release-room");
    for id in &ops {
        let m = list.iter().find(|m| m["messageId"] == id.as_str());
        let m = m.unwrap_or_else(|| panic!("{id} lost after SIGKILL: {list:?}"));
        assert!(m["text"].as_str().unwrap().ends_with("@Tomas"), "{m}");
    }
    for id in &room {
        assert!(
            room_list.iter().any(|m| m["messageId"] == id.as_str()),
            "{id} lost after SIGKILL: {room_list:?}"
        );
    }
}

#[test]
fn health_answers_without_a_token_and_calls_need_the_operator_token() {
    let fake = Fake::start();
    let dir = TempDir::new("auth");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let (status, body) = support::http_get(&sb.url, "/health").unwrap();
    assert_eq!(status, 200, "{body}");
    let health: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["discord"], "ready", "{health}");
    let (status, body) = support::http_get(&sb.url, "/v1/tools").unwrap();
    assert_eq!(status, 401, "{body}");

    fake.fake.clear_requests();
    let out = support::tools_at(
        &sb.url,
        "not-the-operator-token",
        &["surface.messages.send", "--session-id=#ops", "intruder"],
    );
    assert_eq!(out.code, Some(3), "{out:?}");
    assert_eq!(stderr_error(&out)["kind"], "denied", "{}", out.stderr);
    assert!(fake.requests_mentioning(demo::OPS).is_empty());
}

#[test]
fn run_without_a_token_exits_2_and_names_the_variable() {
    let fake = Fake::start();
    let dir = TempDir::new("notoken");
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        support::config_text(
            &fake.base_url(),
            &dir.path().join("s.db"),
            &Allow::default(),
        ),
    )
    .unwrap();
    let mut child = support::switchboard_command(&config, dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let status = wait_bounded(&mut child, Duration::from_secs(10)).expect("exits by itself");
    let text = std::io::read_to_string(stderr).unwrap();
    assert_eq!(status.code(), Some(2), "{text}");
    assert!(text.contains("DISCORD_TOKEN"), "{text}");
    assert!(
        fake.fake.requests().is_empty(),
        "no token, yet Discord was called"
    );
}

#[test]
fn a_token_discord_rejects_exits_3_without_hanging() {
    let fake = Fake::start_accepting("the-real-token");
    let dir = TempDir::new("badtoken");
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        support::config_text(
            &fake.base_url(),
            &dir.path().join("s.db"),
            &Allow::default(),
        ),
    )
    .unwrap();
    let mut child = support::switchboard_command(&config, dir.path())
        .env("DISCORD_TOKEN", "a-revoked-token")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let status = wait_bounded(&mut child, Duration::from_secs(20)).expect("exits by itself");
    let text = std::io::read_to_string(stderr).unwrap();
    assert_eq!(status.code(), Some(3), "{text}");
    assert!(text.contains("rejected the bot token"), "{text}");
}

#[test]
fn run_with_a_broken_config_exits_2_with_located_errors() {
    let dir = TempDir::new("broken");
    let config = dir.path().join("broken.toml");
    std::fs::write(
        &config,
        "[discord]\nallowed_channel_ids = [\"not-a-snowflake\"]\nallow_dms = \"yes\"\n",
    )
    .unwrap();
    let mut child = support::switchboard_command(&config, dir.path())
        .env("DISCORD_TOKEN", "e2e-token")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let status = wait_bounded(&mut child, Duration::from_secs(10)).expect("exits by itself");
    let text = std::io::read_to_string(stderr).unwrap();
    assert_eq!(status.code(), Some(2), "{text}");
    // Every problem is reported, each at its file:line:column.
    assert!(
        text.contains("broken.toml:2:"),
        "errors are not located: {text}"
    );
    assert!(text.contains("allowed_channel_ids"), "{text}");
    assert!(
        text.contains("broken.toml:3:"),
        "errors are not located: {text}"
    );
    assert!(text.contains("allow_dms"), "{text}");
}

#[test]
fn sigterm_flushes_the_store_and_exits_0() {
    let fake = Fake::start();
    let dir = TempDir::new("sigterm");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let id = fake.post(demo::OPS, demo::STANLEY, "flush me");
    sb.wait_listed("#ops", &[id], INGEST);
    let started = Instant::now();
    let (status, log) = sb.terminate(Duration::from_secs(15));
    let status = status.unwrap_or_else(|| panic!("no exit 15 s after SIGTERM:\n{log}"));
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("store flushed and closed"), "{log}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "slow shutdown: {:?}",
        started.elapsed()
    );
}

/// A member with no configured alias, so her readable name is the one Discord shows.
const MIRA: u64 = 1000000000000000103;

#[test]
fn a_renamed_user_reads_under_the_new_name_in_tools_and_prompts() {
    let mut world = fake_discord::World::demo();
    world.users.push(fake_discord::UserSpec {
        id: MIRA.into(),
        username: "mira".into(),
        global_name: Some("Mira".into()),
        bot: false,
    });
    if let Some(members) = world.guilds[0].members.as_mut() {
        members.push(fake_discord::MemberSpec {
            user_id: MIRA.into(),
            roles: vec![],
            nick: None,
        });
    }
    let fake = Fake::start_world(world);
    let dir = TempDir::new("rename");
    // The agent writes the prompt it was given where the test can read it.
    let prompt_file = dir.path().join("prompt.txt");
    let agent = support::script(
        dir.path(),
        "agent.sh",
        // Written aside and renamed, so the test never reads a half-written prompt.
        &format!(
            "cat > \"{0}.tmp\" && mv \"{0}.tmp\" \"{0}\"\necho NO_REPLY",
            prompt_file.display()
        ),
    );
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &support::command_agent(&agent, dir.path(), 30, ""),
    );
    let asked = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("<@{MIRA}> can you check the deploy?"),
    );
    let listed = sb.wait_listed("#ops", std::slice::from_ref(&asked), INGEST);
    assert!(
        texts(&listed).contains(&"@mira can you check the deploy?"),
        "{listed:?}"
    );

    // Discord tells the bot the member's new username.
    let renamed = serde_json::json!({
        "guild_id": demo::GUILD.to_string(),
        "roles": [],
        "user": {"id": MIRA.to_string(), "username": "mira.k", "global_name": "Mira", "discriminator": "0", "avatar": null, "bot": false},
        "nick": null,
        "avatar": null,
        "joined_at": "2026-11-01T00:00:00.000000+00:00",
        "premium_since": null,
        "deaf": false,
        "mute": false,
        "pending": false,
        "flags": 0
    });
    assert!(
        fake.fake
            .dispatch_raw("GUILD_MEMBER_UPDATE", &renamed.to_string())
            >= 1
    );
    support::poll("the new name in surface.messages.list", INGEST, || {
        let list = sb.list("#ops");
        texts(&list)
            .contains(&"@mira.k can you check the deploy?")
            .then_some(())
    });

    // The agent's prompt is rendered the same way, at the same moment.
    fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("<@{}> what did I ask Mira?", demo::BOT),
    );
    let prompt = support::poll("the agent's prompt", INGEST, || {
        std::fs::read_to_string(&prompt_file)
            .ok()
            .filter(|p| p.contains("what did I ask"))
    });
    assert!(
        prompt.contains("@mira.k can you check the deploy?"),
        "{prompt}"
    );
    assert!(
        !prompt.contains("@mira can"),
        "the prompt kept the old name: {prompt}"
    );
}

#[test]
fn a_tools_send_retried_with_the_same_idempotency_key_posts_once() {
    let fake = Fake::start();
    let dir = TempDir::new("idempotency");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let send = [
        "--idempotency-key=deploy-42",
        "surface.messages.send",
        "--session-id=#ops",
        "deploying now",
    ];
    let first = sb.tools(&send);
    let id = sent_id(&first);
    // The client retries (its answer was lost, say): the same key and input answer the first
    // answer, and Discord gets one post.
    let again = sb.tools(&send);
    assert_eq!(sent_id(&again), id, "{again:?}");
    let posts = fake.requests_to("POST", &messages_path(demo::OPS));
    assert_eq!(posts.len(), 1, "{posts:?}");
    // The same key with other text is a conflict (exit 5), and nothing more is posted.
    let other = sb.tools(&[
        "--idempotency-key=deploy-42",
        "surface.messages.send",
        "--session-id=#ops",
        "deploying again",
    ]);
    assert_eq!(other.code, Some(5), "{other:?}");
    assert_eq!(stderr_error(&other)["code"], "idempotency_key_reused");
    // Without a key, each invocation gets a fresh one: the same text posts again.
    let fresh = sb.tools(&[
        "surface.messages.send",
        "--session-id=#ops",
        "deploying now",
    ]);
    assert_ne!(sent_id(&fresh), id);
    assert_eq!(fake.requests_to("POST", &messages_path(demo::OPS)).len(), 2);
}

#[test]
fn a_second_switchboard_on_the_same_store_file_exits_2_and_says_why() {
    let fake = Fake::start();
    let dir = TempDir::new("locked");
    let first = Switchboard::start(&fake, dir.path(), &Allow::default());
    // The same config (the same store file), a second process.
    let mut second = support::switchboard_command(&dir.path().join("switchboard.toml"), dir.path())
        .env("DISCORD_TOKEN", "e2e-token")
        .env("SWITCHBOARD_OPERATOR_TOKEN", "second-operator-token")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = second.stderr.take().unwrap();
    let status = wait_bounded(&mut second, Duration::from_secs(15)).expect("exits by itself");
    let text = std::io::read_to_string(stderr).unwrap();
    assert_eq!(status.code(), Some(2), "{text}");
    assert!(text.contains("another switchboard"), "{text}");
    assert!(
        text.contains(
            "the store is SQLite: one node only; for several nodes use store.url = postgres://…"
        ),
        "says how to run several nodes: {text}"
    );
    assert!(text.contains("switchboard.db"), "names the file: {text}");
    // The first one was not disturbed: it still answers calls.
    let posted = fake.post(demo::OPS, demo::STANLEY, "still here");
    first.wait_listed("#ops", &[posted], INGEST);
}

#[test]
fn the_service_runs_on_the_memory_backend_and_writes_no_file() {
    let fake = Fake::start();
    let dir = TempDir::new("memory-store");
    let sb = Switchboard::start_sections(
        &fake,
        dir.path(),
        &Allow::default(),
        support::Sections {
            store_url: Some("memory:"),
            ..support::Sections::default()
        },
    );
    let posted = fake.post(demo::OPS, demo::STANLEY, "kept in memory");
    sb.wait_listed("#ops", &[posted], INGEST);
    let files: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".db"))
        .collect();
    assert!(files.is_empty(), "a memory: store wrote {files:?}");
}
