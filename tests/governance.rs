//! Governance end to end, through `tools` against the real binary and the fake Discord: deny
//! rules, asks answered (or not) with Discord's buttons, `/tools` in Discord kept across a
//! restart, hooks, a named token's scope, and the audit log that records all of it.

mod support;

use support::approvals::{card, click, Background};

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use fake_discord::{demo, ComponentClick, SlashCommand};
use serde_json::{json, Value};
use support::{poll, tools_at, Allow, Fake, Sections, Switchboard, TempDir};

const WAIT: Duration = Duration::from_secs(15);

/// The rules every test here runs with: deletes denied; the operator's sends to
/// `#release-room` asked of `@Stanley` (or anyone with `@oncall`), 5 s to answer.
const PERMISSIONS: &str = r##"
[permissions]
default = "allow"
approvers = ["@Stanley"]
ask_timeout_s = 5

[[permissions.rules]]
tool = "surface.messages.delete"
policy = "deny"

[[permissions.rules]]
tool = "surface.messages.send"
session = "#release-room"
caller = "operator"
policy = "ask"
"##;

fn start(fake: &Fake, dir: &Path, extra: &str, env: &[(&str, &str)]) -> Switchboard {
    let extra = format!("{PERMISSIONS}\n{extra}");
    Switchboard::start_sections(
        fake,
        dir,
        &Allow::default(),
        Sections {
            discord: r#"admins = ["@Stanley"]"#,
            extra: &extra,
            env,
            ..Sections::default()
        },
    )
}

/// Messages in `channel` whose content is exactly `text`.
fn posted(fake: &Fake, channel: u64, text: &str) -> usize {
    fake.fake
        .channel_messages(channel.into())
        .unwrap_or_default()
        .iter()
        .filter(|m| m["content"] == text)
        .count()
}

fn audit(sb: &Switchboard, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["audit.list", "--limit=200", "--output=json"];
    all.extend_from_slice(args);
    let out = sb.tools(&all);
    assert_eq!(out.code, Some(0), "{out:?}");
    out.json()["audit"].as_array().expect("rows").clone()
}

#[test]
fn asks_wait_for_an_approver_and_deny_timeout_and_replay_post_nothing() {
    let fake = Fake::start();
    let dir = TempDir::new("gov-ask");
    let sb = start(&fake, dir.path(), "", &[]);

    // Approved: a non-approver's click leaves it pending; the approver's posts it.
    let mut call = Background::start(
        &sb,
        &[
            "surface.messages.send",
            "--session-id=#release-room",
            "ship it @Tomas",
        ],
    );
    let (line, id) = call.waiting_line();
    assert!(line.contains("#release-room"), "{line}");
    let pending = card(&fake, demo::RELEASE_ROOM, &id);
    let content = pending["content"].as_str().expect("content");
    assert!(
        content.contains("surface.messages.send") && content.contains("ship it @Tomas"),
        "the card shows the tool and the input with names: {content}"
    );
    assert_eq!(pending["mentions"], json!([]), "the card pings nobody");
    let refused = click(&fake, &pending, demo::TOMAS, true);
    assert_eq!(refused["response"]["type"], 4);
    assert_eq!(
        refused["response"]["data"]["flags"], 64,
        "only Tomas sees it"
    );
    assert!(refused["response"]["data"]["content"]
        .as_str()
        .expect("text")
        .contains("can't approve"));
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        call.still_running(),
        "a non-approver's click decides nothing"
    );
    assert_eq!(
        posted(&fake, demo::RELEASE_ROOM, "ship it <@1000000000000000102>"),
        0
    );
    let approved = click(&fake, &pending, demo::STANLEY, true);
    assert_eq!(
        approved["response"]["type"], 7,
        "the card is redrawn in place"
    );
    let (code, stdout, stderr) = call.finish();
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert_eq!(
        posted(
            &fake,
            demo::RELEASE_ROOM,
            &format!("ship it <@{}>", demo::TOMAS)
        ),
        1
    );
    let redrawn = card(&fake, demo::RELEASE_ROOM, &id);
    assert!(redrawn["content"]
        .as_str()
        .expect("content")
        .contains(&format!("Approved by <@{}>", demo::STANLEY)));
    assert_eq!(redrawn["components"][0]["components"][0]["disabled"], true);

    // A text too long for the card is attached whole: the approver reads every character the
    // call will post, the tail a cut preview would have hidden included.
    let long = format!("{}… @everyone rm -rf /", "release notes ".repeat(88));
    let call = Background::start(
        &sb,
        &["surface.messages.send", "--session-id=#release-room", &long],
    );
    let (_, long_id) = call.waiting_line();
    let pending = card(&fake, demo::RELEASE_ROOM, &long_id);
    let content = pending["content"].as_str().expect("content");
    assert!(content.contains("too long to show here"), "{content}");
    assert!(
        !content.contains("release notes"),
        "nothing shown cut: {content}"
    );
    let file = &pending["attachments"][0];
    assert_eq!(file["filename"], format!("{long_id}-input.txt"));
    let shown = ureq::get(file["url"].as_str().expect("url"))
        .call()
        .expect("the attachment is served")
        .body_mut()
        .read_to_string()
        .expect("text");
    assert_eq!(shown, format!("sessionId: #release-room\ntext: {long}"));
    assert_eq!(pending["mentions"], json!([]), "the card pings nobody");
    click(&fake, &pending, demo::STANLEY, true);
    let (code, stdout, stderr) = call.finish();
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert_eq!(posted(&fake, demo::RELEASE_ROOM, &long), 1);
    let redrawn = card(&fake, demo::RELEASE_ROOM, &long_id);
    assert_eq!(
        redrawn["attachments"][0]["filename"],
        format!("{long_id}-input.txt"),
        "the redrawn card keeps its file"
    );

    // Denied: exit 3, nothing posted.
    let call = Background::start(
        &sb,
        &[
            "surface.messages.send",
            "--session-id=#release-room",
            "deny me",
        ],
    );
    let (_, id) = call.waiting_line();
    click(
        &fake,
        &card(&fake, demo::RELEASE_ROOM, &id),
        demo::STANLEY,
        false,
    );
    let (code, _, stderr) = call.finish();
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("approval_denied"), "{stderr}");
    assert_eq!(posted(&fake, demo::RELEASE_ROOM, "deny me"), 0);

    // Nobody answers within ask_timeout_s: exit 3, nothing posted, the card says expired.
    let call = Background::start(
        &sb,
        &[
            "surface.messages.send",
            "--session-id=#release-room",
            "too slow",
        ],
    );
    let (_, id) = call.waiting_line();
    let (code, _, stderr) = call.finish();
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("approval_expired"), "{stderr}");
    assert_eq!(posted(&fake, demo::RELEASE_ROOM, "too slow"), 0);
    let expired = card(&fake, demo::RELEASE_ROOM, &id);
    assert!(expired["content"]
        .as_str()
        .expect("content")
        .contains("Expired"));

    // An approval is single use and bound to its text: another text asks again, and the old
    // button (replayed as a raw click) decides nothing.
    let call = Background::start(
        &sb,
        &[
            "surface.messages.send",
            "--session-id=#release-room",
            "other text",
        ],
    );
    let (_, second) = call.waiting_line();
    assert_ne!(second, id);
    let replay = json!({
        "id": "1", "application_id": demo::BOT.to_string(), "type": 3, "token": "replayed",
        "version": 1, "channel_id": demo::RELEASE_ROOM.to_string(),
        "guild_id": demo::GUILD.to_string(),
        "member": {"user": {"id": demo::STANLEY.to_string(), "username": "stanley", "discriminator": "0", "global_name": "Stanley", "avatar": null}, "roles": [], "joined_at": "2026-01-01T00:00:00+00:00", "deaf": false, "mute": false, "flags": 0, "permissions": "0"},
        "data": {"custom_id": format!("sb:approve:{id}"), "component_type": 2},
        "message": expired,
        "locale": "en-US", "entitlements": [], "authorizing_integration_owners": {},
        "attachment_size_limit": 26214400, "app_permissions": "0", "context": 0
    });
    let _ = fake
        .fake
        .dispatch_raw("INTERACTION_CREATE", &replay.to_string());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(posted(&fake, demo::RELEASE_ROOM, "other text"), 0);
    click(
        &fake,
        &card(&fake, demo::RELEASE_ROOM, &second),
        demo::STANLEY,
        false,
    );
    let (code, _, _) = call.finish();
    assert_eq!(code, Some(3));
    assert_eq!(posted(&fake, demo::RELEASE_ROOM, "other text"), 0);

    // Every one of them is in the audit log with its decision and who made it.
    let rows = audit(
        &sb,
        &["--tool=surface.messages.send", "--session-id=#release-room"],
    );
    let decided: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["decision"].as_str().unwrap_or("").to_owned(),
                r["outcome"].as_str().unwrap_or("").to_owned(),
                r["decidedBy"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let stanley = format!("discord:{}", demo::STANLEY);
    assert_eq!(
        decided,
        [
            ("ask".to_owned(), "denied".to_owned(), stanley.clone()),
            ("ask".to_owned(), "denied".to_owned(), "expired".to_owned()),
            ("ask".to_owned(), "denied".to_owned(), stanley.clone()),
            ("ask".to_owned(), "ok".to_owned(), stanley.clone()),
            ("ask".to_owned(), "ok".to_owned(), stanley.clone()),
        ],
        "{rows:#?}"
    );
    // Each click is a call of its own, as the user who clicked: Tomas's was refused.
    let clicks = audit(&sb, &["--tool=approvals.decide"]);
    assert!(
        clicks
            .iter()
            .any(|r| r["caller"] == format!("discord:{}", demo::TOMAS)
                && r["code"] == "not_approver"),
        "{clicks:#?}"
    );
    assert!(
        clicks
            .iter()
            .any(|r| r["caller"] == stanley.as_str() && r["outcome"] == "ok"),
        "{clicks:#?}"
    );
}

fn tools_command(fake: &Fake, user: u64, options: Value) -> String {
    let invoked = fake
        .fake
        .invoke_command(SlashCommand {
            channel_id: demo::OPS.into(),
            user_id: user.into(),
            name: "tools".into(),
            options,
        })
        .expect("the bot registered /tools");
    let id = invoked["id"]
        .as_str()
        .expect("id")
        .parse::<u64>()
        .expect("id");
    let shown = poll("the bot answers /tools", WAIT, || {
        let shown = fake.fake.interaction(id.into()).ok()?;
        (!shown["response"].is_null()).then_some(shown)
    });
    assert_eq!(
        shown["response"]["data"]["flags"], 64,
        "/tools answers privately: {shown}"
    );
    shown["response"]["data"]["content"]
        .as_str()
        .expect("content")
        .to_owned()
}

/// A capability for a run in `#ops`, as an agent's runner would get.
fn run_token(sb: &Switchboard) -> String {
    let text = ureq::post(format!("{}/v1/capabilities", sb.url))
        .header("authorization", format!("Bearer {}", sb.token))
        .content_type("application/json")
        .send(
            json!({"sessionId": "#ops", "scope": ["surface.*"]})
                .to_string()
                .as_bytes(),
        )
        .expect("mint")
        .body_mut()
        .read_to_string()
        .expect("body");
    let answer: Value = serde_json::from_str(&text).expect("json");
    answer["value"]["token"].as_str().expect("token").to_owned()
}

#[test]
fn tools_in_discord_narrows_a_session_for_runs_and_survives_a_restart() {
    let fake = Fake::start();
    let dir = TempDir::new("gov-tools");
    let sb = start(&fake, dir.path(), "", &[]);
    let shown = tools_command(&fake, demo::TOMAS, json!([]));
    assert!(shown.contains("surface.messages.send"), "{shown}");
    assert!(
        shown.contains("permissions.rules[0]"),
        "the delete rule shows: {shown}"
    );

    let disable = json!([
        {"name": "action", "type": 3, "value": "disable"},
        {"name": "tools", "type": 3, "value": "surface.messages.send"}
    ]);
    let refused = tools_command(&fake, demo::TOMAS, disable.clone());
    assert!(refused.contains("Only admins"), "{refused}");
    let run = run_token(&sb);
    let send = |token: &str, text: &str| {
        tools_at(
            &sb.url,
            token,
            &["surface.messages.send", "--session-id=#ops", text],
        )
    };
    assert_eq!(send(&run, "before").code, Some(0));

    let typo = tools_command(
        &fake,
        demo::STANLEY,
        json!([{"name": "action", "type": 3, "value": "disable"}, {"name": "tools", "type": 3, "value": "surface.mesages.send"}]),
    );
    assert!(typo.contains("did you mean"), "{typo}");
    let done = tools_command(&fake, demo::STANLEY, disable);
    assert!(done.contains("Done"), "{done}");
    assert!(!done.contains("`surface.messages.send`"), "{done}");
    let after = send(&run, "after");
    assert_eq!(
        after.code,
        Some(3),
        "the run in progress loses it at once: {after:?}"
    );
    assert_eq!(posted(&fake, demo::OPS, "after"), 0);
    assert_eq!(
        sb.tools(&["surface.messages.send", "--session-id=#ops", "operator"])
            .code,
        Some(0),
        "session scopes bind runs, not the operator"
    );
    // Each change is a call of `admin.tools.set` as the Discord user; a non-admin's is
    // refused and audited too.
    let rows = audit(&sb, &["--tool=admin.tools.set"]);
    let done: Vec<_> = rows.iter().filter(|r| r["outcome"] == "ok").collect();
    assert_eq!(done.len(), 1, "{rows:#?}");
    assert_eq!(done[0]["caller"], format!("discord:{}", demo::STANLEY));
    assert_eq!(done[0]["sessions"], json!([demo::OPS.to_string()]));
    assert!(
        rows.iter()
            .any(|r| r["caller"] == format!("discord:{}", demo::TOMAS) && r["code"] == "not_admin"),
        "{rows:#?}"
    );

    drop(sb);
    let sb = start(&fake, dir.path(), "", &[]);
    let run = run_token(&sb);
    let again = tools_at(
        &sb.url,
        &run,
        &[
            "surface.messages.send",
            "--session-id=#ops",
            "after restart",
        ],
    );
    assert_eq!(again.code, Some(3), "the override was kept: {again:?}");
    let reset = tools_command(
        &fake,
        demo::STANLEY,
        json!([{"name": "action", "type": 3, "value": "reset"}]),
    );
    assert!(reset.contains("Done"), "{reset}");
    assert_eq!(
        tools_at(
            &sb.url,
            &run,
            &["surface.messages.send", "--session-id=#ops", "reset"]
        )
        .code,
        Some(0)
    );
}

#[test]
fn deny_rules_hooks_and_a_named_tokens_scope_hold_and_are_audited() {
    let fake = Fake::start();
    let dir = TempDir::new("gov-hooks");
    let hook = support::script(
        dir.path(),
        "no-secrets.sh",
        "#!/bin/sh\nif grep -q 'password' ; then echo '{\"allow\":false,\"reason\":\"no passwords in chat\"}'; else echo '{\"allow\":true}'; fi\n",
    );
    let extra = format!(
        r#"
[[hooks.before]]
tool = "surface.messages.send"
command = ["{}"]
timeout_ms = 3000

[[toolserver.tokens]]
name = "ci"
token_env = "SWITCHBOARD_CI_TOKEN"
scope = ["surface.messages.list", "surface.messages.read"]
"#,
        hook.display()
    );
    let ci = "ci-token-0123456789abcdef0123456789";
    let sb = start(&fake, dir.path(), &extra, &[("SWITCHBOARD_CI_TOKEN", ci)]);

    // A denied tool exits 3 and reaches nothing (rules bind agent runs unless they say
    // otherwise).
    let id = fake.post(demo::OPS, demo::STANLEY, "delete me");
    sb.wait_listed("#ops", std::slice::from_ref(&id), WAIT);
    let message = format!("--message-id={id}");
    let run = run_token(&sb);
    let denied = tools_at(
        &sb.url,
        &run,
        &["surface.messages.delete", "--session-id=#ops", &message],
    );
    assert_eq!(denied.code, Some(3), "{denied:?}");
    assert!(denied.stderr.contains("permission_denied"), "{denied:?}");
    assert!(fake
        .requests_to(
            "DELETE",
            &format!("/api/v10/channels/{}/messages/{id}", demo::OPS)
        )
        .is_empty());

    // The hook refuses a send with the word, and lets the others through.
    let blocked = sb.tools(&[
        "surface.messages.send",
        "--session-id=#ops",
        "the password is hunter2",
    ]);
    assert_eq!(blocked.code, Some(3), "{blocked:?}");
    assert!(
        blocked.stderr.contains("no passwords in chat"),
        "{blocked:?}"
    );
    assert_eq!(posted(&fake, demo::OPS, "the password is hunter2"), 0);
    assert_eq!(
        sb.tools(&["surface.messages.send", "--session-id=#ops", "all clear"])
            .code,
        Some(0)
    );

    // The ci token sees and calls only its two callables.
    let listed = tools_at(&sb.url, ci, &["--list", "--output=json"]);
    assert_eq!(listed.code, Some(0), "{listed:?}");
    let mut ids: Vec<String> = listed.json()["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["id"].as_str().unwrap_or("").to_owned())
        .collect();
    ids.sort();
    assert_eq!(ids, ["surface.messages.list", "surface.messages.read"]);
    assert_eq!(
        tools_at(&sb.url, ci, &["surface.messages.list", "--session-id=#ops"]).code,
        Some(0)
    );
    let out_of_scope = tools_at(
        &sb.url,
        ci,
        &["surface.messages.send", "--session-id=#ops", "from ci"],
    );
    assert_ne!(out_of_scope.code, Some(0), "{out_of_scope:?}");
    assert_eq!(posted(&fake, demo::OPS, "from ci"), 0);
    let no_audit = tools_at(&sb.url, ci, &["audit.list"]);
    assert_ne!(
        no_audit.code,
        Some(0),
        "audit.list is not in ci's scope: {no_audit:?}"
    );
    let from_run = tools_at(&sb.url, &run, &["audit.list"]);
    assert_ne!(from_run.code, Some(0), "never a run's: {from_run:?}");

    // Each shows in the audit log.
    let rows = audit(&sb, &[]);
    let find = |tool: &str, decision: &str, code: Option<&str>| {
        rows.iter().any(|r| {
            r["tool"] == tool && r["decision"] == decision && code.is_none_or(|c| r["code"] == c)
        })
    };
    assert!(
        find("surface.messages.delete", "deny", Some("permission_denied")),
        "{rows:#?}"
    );
    assert!(
        find("surface.messages.send", "allow", Some("hook_denied")),
        "{rows:#?}"
    );
    assert!(find("surface.messages.send", "allow", None), "{rows:#?}");
    assert!(
        rows.iter()
            .any(|r| r["caller"] == "token:ci" && r["tool"] == "surface.messages.list"),
        "{rows:#?}"
    );
    assert!(
        rows.iter().any(|r| r["caller"] == "token:ci"
            && r["tool"] == "surface.messages.send"
            && r["outcome"] != "ok"),
        "{rows:#?}"
    );
    // Filters and paging work as documented.
    let denied_only = audit(&sb, &["--decision=deny"]);
    assert!(denied_only.iter().all(|r| r["decision"] == "deny") && !denied_only.is_empty());
    let page = sb
        .tools(&["audit.list", "--limit=2", "--output=json"])
        .json();
    let cursor = page["nextCursor"].as_u64().expect("a cursor");
    let older = sb
        .tools(&[
            "audit.list",
            "--limit=2",
            &format!("--cursor={cursor}"),
            "--output=json",
        ])
        .json();
    assert!(older["audit"][0]["id"].as_u64().expect("id") < cursor);
    let bad = sb.tools(&["audit.list", "--since=yesterday"]);
    assert_eq!(bad.code, Some(2), "{bad:?}");

    // And `switchboard audit` prints them for the operator.
    let printed = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["audit", "--decision=deny", "--url", &sb.url])
        .env("SWITCHBOARD_TOKEN", &sb.token)
        .env_remove("SWITCHBOARD_CONFIG")
        .current_dir(dir.path())
        .output()
        .expect("switchboard audit");
    let text = String::from_utf8_lossy(&printed.stdout);
    assert!(
        printed.status.success(),
        "{}",
        String::from_utf8_lossy(&printed.stderr)
    );
    assert!(
        text.contains("surface.messages.delete") && text.contains("permission_denied"),
        "{text}"
    );
    let refused = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["audit", "--url", &sb.url])
        .env("SWITCHBOARD_TOKEN", "wrong")
        .env_remove("SWITCHBOARD_CONFIG")
        .current_dir(dir.path())
        .output()
        .expect("switchboard audit");
    assert_eq!(refused.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("invalid_token"));
}

#[test]
fn check_config_rejects_a_scope_that_names_no_callable_with_a_did_you_mean() {
    let dir = TempDir::new("gov-check");
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n[sessions.ops]\ntool_scope = [\"surface.mesages.*\"]\n",
            support::config_text(
                "http://127.0.0.1:9",
                &dir.path().join("s.db"),
                &Allow::default()
            )
        ),
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .arg("check-config")
        .arg("--config")
        .arg(&config)
        .output()
        .expect("check-config");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("'surface.mesages.*' matches no callable"),
        "{stderr}"
    );
    assert!(
        stderr.contains("did you mean `surface.messages."),
        "{stderr}"
    );
}

#[test]
fn an_approval_left_pending_at_a_restart_comes_back_expired_never_granted() {
    let fake = Fake::start();
    let dir = TempDir::new("gov-restart");
    let sb = start(&fake, dir.path(), "", &[]);
    let call = Background::start(
        &sb,
        &[
            "surface.messages.send",
            "--session-id=#release-room",
            "across a restart",
        ],
    );
    let (_, id) = call.waiting_line();
    let pending = card(&fake, demo::RELEASE_ROOM, &id);
    // Give the batched writer a moment to keep the request, then kill the service outright.
    std::thread::sleep(Duration::from_millis(500));
    sb.kill();
    let (code, _, _) = call.finish();
    assert_ne!(code, Some(0));

    let _sb = start(&fake, dir.path(), "", &[]);
    let expired = poll("the leftover card is redrawn as expired", WAIT, || {
        let now = card(&fake, demo::RELEASE_ROOM, &id);
        now["content"].as_str()?.contains("Expired").then_some(now)
    });
    assert_eq!(expired["components"][0]["components"][0]["disabled"], true);
    let approve = fake.fake.click_component(ComponentClick {
        message_id: pending["id"]
            .as_str()
            .expect("id")
            .parse::<u64>()
            .expect("id")
            .into(),
        user_id: demo::STANLEY.into(),
        custom_id: format!("sb:approve:{id}"),
    });
    assert!(approve.is_err(), "its buttons are disabled");
    assert_eq!(posted(&fake, demo::RELEASE_ROOM, "across a restart"), 0);
}

#[test]
fn a_hook_killed_at_its_timeout_leaves_no_process_and_an_oversized_answer_fails_at_once() {
    let fake = Fake::start();
    let dir = TempDir::new("gov-hook-group");
    let out = dir.path();
    // Leaves two sleeps in the background, then never answers.
    let slow = support::script(
        out,
        "slow.sh",
        &format!(
            "echo $$ >> {d}/leaders\nsleep 300 & echo $! >> {d}/children\nsleep 300 & echo $! >> {d}/children\nsleep 300",
            d = out.display()
        ),
    );
    // Answers 2 MB, then would sit until its minute is up.
    let big = support::script(
        out,
        "big.sh",
        "cat >/dev/null; yes | head -c 2000000; sleep 300",
    );
    let extra = format!(
        r#"
[[hooks.before]]
tool = "surface.messages.send"
command = ["{slow}"]
timeout_ms = 500

[[hooks.before]]
tool = "surface.reactions.add"
command = ["{big}"]
timeout_ms = 60000
"#,
        slow = slow.display(),
        big = big.display()
    );
    let sb = start(&fake, out, &extra, &[]);
    let calls = 3;
    for n in 0..calls {
        let sent = sb.tools(&[
            "surface.messages.send",
            "--session-id=#ops",
            &format!("hello {n}"),
        ]);
        assert_ne!(sent.code, Some(0), "{sent:?}");
        assert!(sent.stderr.contains("hook_failed"), "{sent:?}");
    }
    let read_pids = |file: &str| -> Vec<i32> {
        std::fs::read_to_string(out.join(file))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect()
    };
    let leaders = read_pids("leaders");
    let children = read_pids("children");
    assert_eq!(leaders.len(), calls, "each call ran the hook once");
    assert_eq!(children.len(), 2 * calls, "each hook left two sleeps");
    // Killed with its whole group: nothing of any hook is left, in its group or outside it.
    poll(
        "every hook process to be gone",
        Duration::from_secs(10),
        || {
            let left: Vec<i32> = children
                .iter()
                .chain(&leaders)
                .copied()
                .filter(|&pid| support::pid_running(pid))
                .chain(
                    leaders
                        .iter()
                        .flat_map(|&leader| support::group_members(leader)),
                )
                .collect();
            left.is_empty().then_some(())
        },
    );
    assert!(
        fake.requests_to("POST", &format!("/api/v10/channels/{}/messages", demo::OPS))
            .is_empty(),
        "a refused send reached Discord"
    );

    // Over a mebibyte fails at once, not after the hook's minute.
    let id = fake.post(demo::OPS, demo::STANLEY, "react to me");
    sb.wait_listed("#ops", std::slice::from_ref(&id), WAIT);
    let started = Instant::now();
    let reacted = sb.tools(&[
        "surface.reactions.add",
        "--session-id=#ops",
        &format!("--message-id={id}"),
        "✅",
    ]);
    // Generous: the hook's timeout is 60 s; the answer was too large within a second.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}: {reacted:?}",
        started.elapsed()
    );
    assert!(reacted.stderr.contains("hook_failed"), "{reacted:?}");
    assert!(
        reacted.stderr.contains("more than 1048576 bytes"),
        "{reacted:?}"
    );
}
