//! Never miss a message, never answer twice, end to end: the real binary against the fake.
//! Messages posted while the gateway identifies afresh (an op 9 storm) or while switchboard is
//! down are fetched and stored; missed mentions are answered exactly once, across restarts;
//! the gateway's close codes for a bad setup end the process with the right exit code.

mod support;

use std::time::{Duration, Instant};

use fake_discord::{demo, Fault, GatewayFaultKind, HandshakeFault};
use serde_json::Value;
use support::{
    bot_posts, command_agent, poll, replies_per_trigger, script, sqlite_store, Allow, Fake,
    Switchboard, TempDir,
};

const BOT_MENTION: &str = "<@1000000000000000001>";

fn gateway_fault(kind: GatewayFaultKind) -> Fault {
    Fault {
        rest: None,
        gateway: Some(kind),
        handshakes: None,
    }
}

/// Every message of a session switchboard lists (up to 200), oldest first.
fn listed(sb: &Switchboard, session: &str) -> Vec<Value> {
    let arg = format!("--session-id={session}");
    let out = sb.tools(&[
        "surface.messages.list",
        &arg,
        "--limit=200",
        "--output=json",
    ]);
    out.json()["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn listed_ids(sb: &Switchboard, session: &str) -> Vec<String> {
    listed(sb, session)
        .iter()
        .filter_map(|m| m["messageId"].as_str().map(str::to_owned))
        .collect()
}

fn health(sb: &Switchboard) -> Value {
    let (_, body) = support::http_get(&sb.url, "/health").expect("/health answers");
    serde_json::from_str(&body).expect("/health is JSON")
}

fn count_429(fake: &Fake) -> usize {
    fake.fake
        .requests()
        .iter()
        .filter(|r| r.status == 429)
        .count()
}

#[test]
fn an_invalid_session_storm_loses_no_message() {
    let fake = Fake::start();
    let dir = TempDir::new("op9-storm");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let identified = fake.fake.state().sessions_identified;
    let mut ids = Vec::new();
    // A storm: every session switchboard identifies is invalidated (op 9) soon after it
    // is ready, while messages keep coming; serenity waits a few seconds before each fresh
    // identify, and whatever is posted meanwhile the gateway never delivers.
    let mut invalidated = identified - 1;
    let mut storms = 0;
    for i in 0..50 {
        ids.push(fake.post(demo::OPS, demo::STANLEY, &format!("storm {i}")));
        let now = fake.fake.state().sessions_identified;
        if now > invalidated && i < 40 {
            invalidated = now;
            storms += fake
                .fake
                .inject_fault(gateway_fault(GatewayFaultKind::InvalidSession))
                .expect("op 9");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(storms >= 2, "the op 9s reached {storms} connections");
    sb.wait_listed("#ops", &ids, Duration::from_secs(60));
    let all = listed_ids(&sb, "#ops");
    for id in &ids {
        assert_eq!(
            all.iter().filter(|l| *l == id).count(),
            1,
            "{id} in {all:?}"
        );
    }
    poll("/health ready again", Duration::from_secs(30), || {
        (health(&sb)["discord"] == "ready").then_some(())
    });
    assert!(
        fake.fake.state().sessions_identified >= identified + 2,
        "the op 9s forced fresh identifies: {:?}",
        fake.fake.state()
    );
    let log = sb.stderr();
    // The gateway never delivered what was posted between an op 9 and the next identify:
    // those messages came from the backfill.
    let recovered: usize = log
        .lines()
        .filter(|line| line.contains("backfill caught up"))
        .filter_map(|line| line.split("stored=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<usize>().ok())
        .sum();
    assert!(recovered > 0, "no message came from a backfill:\n{log}");
    eprintln!("{recovered} of 50 messages were recovered by backfills");
    assert_eq!(count_429(&fake), 0);
}

#[test]
fn health_is_not_ready_from_an_op_9_until_the_next_session_is() {
    let fake = Fake::start();
    let dir = TempDir::new("op9-health");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    assert_eq!(health(&sb)["discord"], "ready");
    let identified = fake.fake.state().sessions_identified;
    let sent = fake
        .fake
        .inject_fault(gateway_fault(GatewayFaultKind::InvalidSession))
        .expect("op 9");
    assert_eq!(sent, 1, "the op 9 reached the connection");
    // serenity waits about five seconds before it identifies again: all that time the gateway
    // is not live, and /health must not say it is.
    let left = poll("/health to leave ready", Duration::from_secs(3), || {
        let state = health(&sb)["discord"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        (state != "ready").then_some(state)
    });
    assert!(
        left == "resuming" || left == "connecting",
        "{left}\n{}",
        sb.stderr()
    );
    let mut polls = 0;
    poll("the next identify", Duration::from_secs(30), || {
        // Read in this order: a ready seen before the identify is counted is a lie.
        let state = health(&sb)["discord"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if fake.fake.state().sessions_identified > identified {
            return Some(());
        }
        polls += 1;
        assert_ne!(state, "ready", "after {polls} polls:\n{}", sb.stderr());
        None
    });
    assert!(
        polls > 5,
        "only {polls} polls before the identify: the window was not watched"
    );
    poll("/health ready again", Duration::from_secs(30), || {
        (health(&sb)["discord"] == "ready").then_some(())
    });
}

#[test]
fn two_hundred_messages_posted_while_down_are_all_there_and_mentions_answered_once() {
    let fake = Fake::start();
    let dir = TempDir::new("down-200");
    let out = dir.path();
    let agent = script(out, "agent.sh", "cat > /dev/null\necho on it");
    // One reply per missed mention: the backfill delivers them as a burst, which batching would
    // answer together (tests/batch.rs pins that).
    let agent = command_agent(&agent, out, 30, "batch = \"off\"");
    let sb = Switchboard::start_with(&fake, out, &Allow::default(), &agent);
    let (status, log) = sb.terminate(Duration::from_secs(15));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{log}");

    let mut ops = Vec::new();
    let mut room = Vec::new();
    let mut mentions = Vec::new();
    for i in 0..100 {
        let text = if i % 25 == 7 {
            format!("{BOT_MENTION} while you were away {i}")
        } else {
            format!("ops while down {i}")
        };
        let id = fake.post(demo::OPS, demo::STANLEY, &text);
        if text.starts_with(BOT_MENTION) {
            mentions.push(id.clone());
        }
        ops.push(id);
        room.push(fake.post(
            demo::RELEASE_ROOM,
            demo::TOMAS,
            &format!("room while down {i}"),
        ));
    }
    fake.fake.clear_requests();
    let started = Instant::now();
    // `start_with` returns once /health says ready: the gateway is live and the backfill
    // caught up.
    let sb = Switchboard::start_with(&fake, out, &Allow::default(), &agent);
    let ready_after = started.elapsed();
    let ops_listed = listed_ids(&sb, "#ops");
    let room_listed = listed_ids(&sb, "#release-room");
    for id in &ops {
        assert!(ops_listed.contains(id), "{id} missing from #ops");
    }
    assert_eq!(
        room_listed, room,
        "#release-room holds exactly what was posted, in order"
    );
    eprintln!("200 missed messages listed {ready_after:?} after the restart began");
    assert!(ready_after < Duration::from_secs(30), "{ready_after:?}");
    assert_eq!(count_429(&fake), 0);

    let answered = poll(
        "an answer to every missed mention",
        Duration::from_secs(30),
        || {
            let counts = replies_per_trigger(&fake, demo::OPS);
            (counts.len() == mentions.len()).then_some(counts)
        },
    );
    // Let any duplicate show up before counting.
    std::thread::sleep(Duration::from_secs(3));
    let answered_later = replies_per_trigger(&fake, demo::OPS);
    assert_eq!(answered, answered_later);
    for mention in &mentions {
        assert_eq!(answered.get(mention), Some(&1), "{answered:?}");
    }
    assert_eq!(bot_posts(&fake, demo::OPS).len(), mentions.len());
}

#[test]
fn a_mention_posted_while_down_is_answered_once_and_never_again() {
    let fake = Fake::start();
    let dir = TempDir::new("down-mention");
    let out = dir.path();
    let agent = script(out, "agent.sh", "cat > /dev/null\necho here now");
    let agent = command_agent(&agent, out, 30, "");
    let sb = Switchboard::start_with(&fake, out, &Allow::default(), &agent);
    sb.terminate(Duration::from_secs(15));

    let mention = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} are you up?"),
    );
    let sb = Switchboard::start_with(&fake, out, &Allow::default(), &agent);
    poll(
        "the answer to the missed mention",
        Duration::from_secs(30),
        || (replies_per_trigger(&fake, demo::OPS).get(&mention) == Some(&1)).then_some(()),
    );
    let (status, log) = sb.terminate(Duration::from_secs(15));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{log}");

    // Restart as is: the mention is stored, so nothing triggers.
    let sb = Switchboard::start_with(&fake, out, &Allow::default(), &agent);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        replies_per_trigger(&fake, demo::OPS).get(&mention),
        Some(&1)
    );
    sb.terminate(Duration::from_secs(15));

    // Now the store loses #ops's messages (as a store restored from an older copy would):
    // the backfill brings the mention back as missed, and only the record of answered
    // triggers stands between it and a second answer.
    let store = sqlite_store(dir.path().join("switchboard.db").to_str().unwrap());
    assert!(store.forget_channel_messages(demo::OPS.into()) >= 2);
    store.close().expect("close the store");
    let sb = Switchboard::start_with(&fake, out, &Allow::default(), &agent);
    sb.wait_listed(
        "#ops",
        std::slice::from_ref(&mention),
        Duration::from_secs(20),
    );
    poll(
        "the bridge to turn the mention away",
        Duration::from_secs(20),
        || {
            sb.stderr()
                .contains("this message was answered before")
                .then_some(())
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        replies_per_trigger(&fake, demo::OPS).get(&mention),
        Some(&1),
        "{}",
        sb.stderr()
    );
}

#[test]
fn a_missed_trigger_older_than_the_limit_or_ignored_is_stored_not_answered() {
    let fake = Fake::start();
    let dir = TempDir::new("down-ignore");
    let out = dir.path();
    let agent_script = script(out, "agent.sh", "cat > /dev/null\necho hello");
    let ignoring = command_agent(&agent_script, out, 30, "missed_triggers = \"ignore\"");
    let sb = Switchboard::start_with(&fake, out, &Allow::default(), &ignoring);
    sb.terminate(Duration::from_secs(15));
    let ignored = fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} hello?"));
    let sb = Switchboard::start_with(&fake, out, &Allow::default(), &ignoring);
    sb.wait_listed(
        "#ops",
        std::slice::from_ref(&ignored),
        Duration::from_secs(20),
    );
    sb.terminate(Duration::from_secs(15));

    let stale = command_agent(&agent_script, out, 30, "missed_max_age_s = 1");
    let old = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} still there?"),
    );
    std::thread::sleep(Duration::from_millis(2_100));
    let sb = Switchboard::start_with(&fake, out, &Allow::default(), &stale);
    sb.wait_listed("#ops", std::slice::from_ref(&old), Duration::from_secs(20));
    // A live mention is still answered: the limit is for missed ones only.
    let live = fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} now?"));
    poll("the live mention's answer", Duration::from_secs(30), || {
        replies_per_trigger(&fake, demo::OPS)
            .contains_key(&live)
            .then_some(())
    });
    let counts = replies_per_trigger(&fake, demo::OPS);
    assert_eq!(counts.len(), 1, "{counts:?}");
    let log = sb.stderr();
    assert!(log.contains("too old to answer"), "{log}");
}

fn exit_after_close(code: u16) -> (Option<i32>, String) {
    let fake = Fake::start();
    let dir = TempDir::new(&format!("close-{code}"));
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let reached = fake
        .fake
        .inject_fault(gateway_fault(GatewayFaultKind::Close(code)))
        .expect("close fault");
    assert_eq!(reached, 1);
    let (status, log) = sb.wait_exit(Duration::from_secs(20));
    let status = status.unwrap_or_else(|| panic!("still running 20 s after close {code}:\n{log}"));
    (status.code(), log)
}

#[test]
fn disallowed_intents_exit_2_saying_what_to_enable() {
    let (code, log) = exit_after_close(4014);
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("Message Content Intent"), "{log}");
    assert!(log.contains("developer portal"), "{log}");
}

#[test]
fn a_token_the_gateway_rejects_exits_3_and_invalid_intents_are_explained() {
    let (code, log) = exit_after_close(4004);
    assert_eq!(code, Some(3), "{log}");
    let (code, log) = exit_after_close(4013);
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("close 4013"), "{log}");
}

/// After a gateway fault: serenity resumed the session (the fake counted more resumes than
/// `resumed_before`), `/health` says ready again, and the same process still answers tools.
fn back_after_the_fault(fake: &Fake, sb: &Switchboard, resumed_before: u64) {
    poll("a resume after the fault", Duration::from_secs(20), || {
        (fake.fake.state().sessions_resumed > resumed_before).then_some(())
    });
    poll("discord: ready again", Duration::from_secs(20), || {
        support::http_get(&sb.url, "/health")
            .ok()
            .and_then(|(_, body)| serde_json::from_str::<Value>(&body).ok())
            .filter(|health| health["discord"] == "ready")
    });
    assert!(support::pid_alive(sb.pid() as i32), "{}", sb.stderr());
    let listed = sb.tools(&["surface.sessions.list"]);
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
}

#[test]
fn an_invalid_api_version_close_is_named_and_not_fatal() {
    // Discord closes with 4012 when it no longer accepts the gateway version a client speaks.
    // One such close may be a hiccup on Discord's side, so switchboard does not exit: serenity
    // resumes, the close is named in the log, and the service keeps answering. (A stall that
    // lasts is explained after 30 s: `gateway::tests` checks that with paused time.)
    let fake = Fake::start();
    let dir = TempDir::new("close-4012");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let resumed_before = fake.fake.state().sessions_resumed;
    let reached = fake
        .fake
        .inject_fault(gateway_fault(GatewayFaultKind::Close(4012)))
        .expect("close fault");
    assert_eq!(reached, 1);
    back_after_the_fault(&fake, &sb, resumed_before);
    let log = sb.stderr();
    assert!(log.contains("4012"), "the close code is not named:\n{log}");
    // serenity's lines come without its spans, which would format every event with `Debug`.
    let serenity_lines: Vec<&str> = log.lines().filter(|l| l.contains(" serenity::")).collect();
    assert!(
        !serenity_lines.is_empty(),
        "serenity logged nothing:\n{log}"
    );
    for line in serenity_lines {
        let before = &line[..line.find(" serenity::").expect("found")];
        assert!(
            ["INFO", "WARN", "ERROR"]
                .iter()
                .any(|level| before.trim_end().ends_with(level)),
            "a serenity line with span context: {line}"
        );
    }
    let (status, _) = sb.terminate(Duration::from_secs(15));
    assert!(status.is_some());
}

#[test]
fn a_gateway_that_refuses_handshakes_in_a_row_is_named_and_recovered_from() {
    // Discord closing attempt after attempt before the session is ready (here 4012, an API
    // version it no longer accepts): serenity keeps resuming, each close is named in the log,
    // and once Discord accepts again the service is ready without a restart. (A stall that
    // lasts is explained after 30 s: `gateway::tests` checks that with paused time.)
    let fake = Fake::start();
    let dir = TempDir::new("refused-handshakes");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let resumed_before = fake.fake.state().sessions_resumed;
    fake.fake
        .inject_fault(Fault {
            rest: None,
            gateway: Some(GatewayFaultKind::Close(4012)),
            handshakes: Some(HandshakeFault {
                close: 4012,
                count: 6,
            }),
        })
        .expect("fault");
    back_after_the_fault(&fake, &sb, resumed_before);
    let log = sb.stderr();
    assert!(
        log.matches("4012").count() >= 7,
        "each refused attempt is named (the close and six handshakes):\n{log}"
    );
    let (status, _) = sb.terminate(Duration::from_secs(15));
    assert!(status.is_some());
}
