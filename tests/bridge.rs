//! The agent bridge end to end: Discord messages in the fake start a scripted command agent
//! run by the real switchboard; the agent uses the real `tools`; its answer comes back.

mod support;

use std::time::Duration;

use fake_discord::demo;
use serde_json::Value;
use support::{
    bot_posts, command_agent, pid_alive, poll, script, tools_bin, Allow, Fake, Switchboard, TempDir,
};

const BOT_MENTION: &str = "<@1000000000000000001>";

#[test]
fn a_mention_runs_the_agent_and_its_answer_replies_to_the_trigger() {
    let fake = Fake::start();
    let dir = TempDir::new("bridge-mention");
    let out = dir.path();
    let tools = tools_bin();
    let agent = script(
        out,
        "agent.sh",
        &format!(
            r#"cat > "{o}/prompt.txt"
env | sort > "{o}/env.txt"
"{t}" surface.messages.list --output=json > "{o}/list.json" 2> "{o}/list.err"
echo $? > "{o}/list.code"
SWITCHBOARD_SESSION_ID=1000000000000000402 "{t}" surface.messages.list > /dev/null 2> "{o}/forged.err"
echo $? > "{o}/forged.code"
echo "I read $(grep -o messageId "{o}/list.json" | wc -l) messages, @Stanley"
"#,
            o = out.display(),
            t = tools.display()
        ),
    );
    let sb = Switchboard::start_with(
        &fake,
        out,
        &Allow::default(),
        &command_agent(&agent, out, 30, ""),
    );
    let trigger = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} how many messages are here?"),
    );
    let reply = poll("the agent's reply", Duration::from_secs(20), || {
        bot_posts(&fake, demo::OPS).into_iter().next()
    });
    assert_eq!(
        reply["message_reference"]["message_id"],
        trigger.as_str(),
        "{reply}"
    );
    let content = reply["content"].as_str().unwrap();
    assert!(content.starts_with("I read 1 messages"), "{content}");
    assert!(
        content.contains("<@1000000000000000101>"),
        "the reply gets the outbound rewrite: {content}"
    );
    let env = std::fs::read_to_string(out.join("env.txt")).unwrap();
    for expected in [
        format!("SWITCHBOARD_URL={}", sb.url),
        "SWITCHBOARD_SESSION_ID=1000000000000000401".to_owned(),
        "SWITCHBOARD_CLIENT=discord".to_owned(),
        format!("SWITCHBOARD_MESSAGE_ID={trigger}"),
        "SWITCHBOARD_AUTHOR_ID=1000000000000000101".to_owned(),
        format!("SWITCHBOARD_CWD={}", out.display()),
    ] {
        assert!(
            env.lines().any(|l| l == expected),
            "missing {expected} in:\n{env}"
        );
    }
    assert!(env.contains("SWITCHBOARD_TOKEN=sbcap_"), "{env}");
    assert!(env.contains("SWITCHBOARD_REQUEST_ID=run-"), "{env}");
    assert!(
        !env.contains("DISCORD_TOKEN"),
        "the bot token leaked:\n{env}"
    );
    assert!(
        !env.contains("SWITCHBOARD_OPERATOR_TOKEN"),
        "the operator token leaked:\n{env}"
    );
    let prompt = std::fs::read_to_string(out.join("prompt.txt")).unwrap();
    assert!(
        prompt.contains("@switchboard how many messages are here?"),
        "{prompt}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("list.code"))
            .unwrap()
            .trim(),
        "0"
    );
    let listed: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("list.json")).unwrap()).unwrap();
    assert_eq!(
        listed["session"]["channelId"], "1000000000000000401",
        "the capability's session is the default"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("forged.code"))
            .unwrap()
            .trim(),
        "3",
        "a forged session header is refused"
    );
    // The run's token is revoked when it ends.
    let token = env
        .lines()
        .find_map(|l| l.strip_prefix("SWITCHBOARD_TOKEN="))
        .unwrap();
    let after = support::tools_at(&sb.url, token, &["surface.help"]);
    assert_eq!(after.code, Some(3), "{after:?}");
    // ⏳ then ✅ on the trigger; the ✅ may wait for the reactions bucket (1 per 250 ms).
    let reactions = || -> Vec<String> {
        fake.fake
            .requests()
            .iter()
            .filter(|r| r.path.contains(&format!("{trigger}/reactions/")))
            .map(|r| format!("{} {}", r.method, r.path.rsplit('/').nth(1).unwrap_or("")))
            .collect()
    };
    let reactions = support::poll("the ✅ reaction", Duration::from_secs(5), || {
        let now = reactions();
        now.iter()
            .any(|r| r.starts_with("PUT") && r.contains("%E2%9C%85"))
            .then_some(now)
    });
    assert!(
        reactions
            .iter()
            .any(|r| r.starts_with("PUT") && r.contains("%E2%8F%B3")),
        "{reactions:?}"
    );
    assert!(
        reactions
            .iter()
            .any(|r| r.starts_with("PUT") && r.contains("%E2%9C%85")),
        "{reactions:?}"
    );
}

#[test]
fn no_reply_posts_nothing_and_other_bots_and_plain_messages_do_not_trigger() {
    let fake = Fake::start();
    let dir = TempDir::new("bridge-noreply");
    let out = dir.path();
    let agent = script(
        out,
        "agent.sh",
        &format!(
            "cat > /dev/null\necho run >> \"{}/runs\"\necho NO_REPLY",
            out.display()
        ),
    );
    let _sb = Switchboard::start_with(
        &fake,
        out,
        &Allow::default(),
        &command_agent(&agent, out, 30, ""),
    );
    fake.post(demo::OPS, demo::STANLEY, "just chatting, no mention");
    fake.post(
        demo::OPS,
        demo::STANLEY,
        "@everyone and @here are not the bot",
    );
    fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} anything?"),
    );
    poll("the run", Duration::from_secs(20), || {
        std::fs::read_to_string(out.join("runs"))
            .ok()
            .filter(|r| r.lines().count() == 1)
    });
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        std::fs::read_to_string(out.join("runs"))
            .unwrap()
            .lines()
            .count(),
        1
    );
    assert!(
        bot_posts(&fake, demo::OPS).is_empty(),
        "NO_REPLY posted something"
    );
}

#[test]
fn a_timeout_kills_the_process_group_and_posts_the_error_line() {
    let fake = Fake::start();
    let dir = TempDir::new("bridge-timeout");
    let out = dir.path();
    let agent = script(
        out,
        "agent.sh",
        &format!(
            "cat > /dev/null\nsleep 300 &\necho $! > \"{}/child.pid\"\nsleep 300",
            out.display()
        ),
    );
    let _sb = Switchboard::start_with(
        &fake,
        out,
        &Allow::default(),
        &command_agent(&agent, out, 1, ""),
    );
    fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} take forever"),
    );
    let reply = poll("the error line", Duration::from_secs(20), || {
        bot_posts(&fake, demo::OPS).into_iter().next()
    });
    assert_eq!(reply["content"], "agent failed: no answer within 1 s");
    let pid: i32 = std::fs::read_to_string(out.join("child.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    poll("the grandchild to be gone", Duration::from_secs(5), || {
        (!pid_alive(pid)).then_some(())
    });
}

#[test]
fn mentions_in_one_session_run_in_order_and_sessions_run_in_parallel() {
    let fake = Fake::start();
    let dir = TempDir::new("bridge-order");
    let out = dir.path();
    let log = out.join("log");
    let agent = script(
        out,
        "agent.sh",
        &format!(
            "cat > /dev/null\necho \"start $SWITCHBOARD_SESSION_ID $SWITCHBOARD_MESSAGE_ID\" >> \"{l}\"\nsleep 1\necho \"end $SWITCHBOARD_SESSION_ID $SWITCHBOARD_MESSAGE_ID\" >> \"{l}\"\necho NO_REPLY",
            l = log.display()
        ),
    );
    let _sb = Switchboard::start_with(
        &fake,
        out,
        &Allow::default(),
        &command_agent(&agent, out, 30, ""),
    );
    let first = fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} one"));
    let second = fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} two"));
    let other = fake.post(
        demo::RELEASE_ROOM,
        demo::STANLEY,
        &format!("{BOT_MENTION} elsewhere"),
    );
    let lines = poll("three runs", Duration::from_secs(20), || {
        let text = std::fs::read_to_string(&log).ok()?;
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        (lines.len() == 6).then_some(lines)
    });
    let at = |what: &str| {
        lines
            .iter()
            .position(|l| l == what)
            .unwrap_or_else(|| panic!("{what} missing in {lines:?}"))
    };
    let ops = demo::OPS;
    let room = demo::RELEASE_ROOM;
    assert!(
        at(&format!("end {ops} {first}")) < at(&format!("start {ops} {second}")),
        "same session: one after the other, in order: {lines:?}"
    );
    assert!(
        at(&format!("start {room} {other}")) < at(&format!("end {ops} {first}")),
        "other session runs in parallel: {lines:?}"
    );
}

#[test]
fn a_reply_the_tool_server_refuses_is_not_marked_done() {
    let fake = Fake::start();
    let dir = TempDir::new("bridge-refused");
    let out = dir.path();
    let agent = script(out, "agent.sh", "cat > /dev/null\necho an answer");
    let limits = "\n[toolserver.rate_limits]\nper_channel_mutating_per_minute = 1\nper_channel_mutating_burst = 1\n";
    let extra = format!("{}{limits}", command_agent(&agent, out, 30, ""));
    let _sb = Switchboard::start_with(&fake, out, &Allow::default(), &extra);
    fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} first"));
    poll("the first reply", Duration::from_secs(20), || {
        bot_posts(&fake, demo::OPS).into_iter().next()
    });
    let second = fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} second"));
    let failed = format!("{second}/reactions/%E2%9D%8C/@me");
    poll("❌ on the refused run", Duration::from_secs(20), || {
        fake.fake
            .requests()
            .iter()
            .any(|r| r.method == "PUT" && r.path.ends_with(&failed))
            .then_some(())
    });
    let done = format!("{second}/reactions/%E2%9C%85/@me");
    assert!(
        !fake
            .fake
            .requests()
            .iter()
            .any(|r| r.method == "PUT" && r.path.ends_with(&done)),
        "a reply that was never posted must not get ✅"
    );
    assert_eq!(
        bot_posts(&fake, demo::OPS).len(),
        1,
        "only the first reply was posted"
    );
}
