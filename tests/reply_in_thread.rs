//! `agent.reply_in_thread` end to end: the real `switchboard run` against the fake Discord,
//! with scripted `sh` agents that log the session they run in. `always` moves the conversation
//! into a thread started from the message (and follow-ups there need no mention); `long` does
//! so only for an answer longer than one message; threads the bot did not start, and the
//! default `never`, keep the mention rule.

mod support;

use std::path::Path;
use std::time::Duration;

use fake_discord::demo;
use serde_json::Value;
use support::{
    agent_log, bot_posts, command_agent, own_reactions, poll, script, Allow, Fake, Switchboard,
    TempDir,
};

const BOT_MENTION: &str = "<@1000000000000000001>";
const WAIT: Duration = Duration::from_secs(10);

/// An agent that logs `run SESSION MESSAGE` to `dir/log`, then answers: 3,500 characters when
/// the prompt says `longplease`, else one line naming its session.
fn session_agent(dir: &Path) -> std::path::PathBuf {
    script(
        dir,
        "agent.sh",
        &format!(
            "prompt=$(cat)\necho \"run $SWITCHBOARD_SESSION_ID $SWITCHBOARD_MESSAGE_ID\" >> \"{d}/log\"\ncase \"$prompt\" in\n  *longplease*) i=0; while [ $i -lt 700 ]; do printf 'word '; i=$((i+1)); done; echo ;;\n  *) echo \"answer in $SWITCHBOARD_SESSION_ID\" ;;\nesac",
            d = dir.display()
        ),
    )
}

fn ran_in(dir: &Path, session: &str) -> usize {
    agent_log(dir)
        .iter()
        .filter(|line| line.split(' ').nth(1) == Some(session))
        .count()
}

fn text(message: &Value) -> &str {
    message["content"].as_str().unwrap_or_default()
}

/// The bot's messages in a thread the fake holds; `None` while the thread does not exist.
fn thread_posts(fake: &Fake, thread: &str) -> Option<Vec<Value>> {
    let id: u64 = thread.parse().expect("an id");
    fake.fake.channel_messages(id.into()).ok()?;
    Some(bot_posts(fake, id))
}

fn start(fake: &Fake, dir: &Path, mode: &str) -> Switchboard {
    let agent = session_agent(dir);
    let extra = match mode {
        "" => String::new(),
        mode => format!("reply_in_thread = \"{mode}\""),
    };
    Switchboard::start_with(
        fake,
        dir,
        &Allow::default(),
        &command_agent(&agent, dir, 60, &extra),
    )
}

#[test]
fn always_answers_in_a_thread_started_from_the_message_and_follow_ups_need_no_mention() {
    let fake = Fake::start();
    let dir = TempDir::new("reply-in-thread-always");
    let out = dir.path();
    let _sb = start(&fake, out, "always");

    let asked = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} how do I rotate the deploy keys?"),
    );
    // A thread from a message takes the message's id, as on Discord.
    let answer = poll("the answer in the new thread", WAIT, || {
        thread_posts(&fake, &asked)?.into_iter().next()
    });
    assert_eq!(text(&answer), format!("answer in {asked}"), "{answer}");
    assert!(
        answer["message_reference"].is_null(),
        "in the thread the answer is no reply: {answer}"
    );
    let created = fake.requests_to(
        "POST",
        &format!("/api/v10/channels/{}/messages/{asked}/threads", demo::OPS),
    );
    assert_eq!(created.len(), 1, "one thread, started from the message");
    let name = created[0].body.as_ref().expect("a body")["name"].clone();
    assert_eq!(name, "how do I rotate the deploy keys?");
    assert!(
        !bot_posts(&fake, demo::OPS)
            .iter()
            .any(|m| text(m).starts_with("answer in")),
        "nothing answered in the channel itself"
    );
    poll("✅ on the question in the channel", WAIT, || {
        let emoji = own_reactions(&fake, demo::OPS, &asked);
        (emoji == ["✅"]).then_some(())
    });

    // The thread is the conversation: a follow-up there needs no mention.
    let thread: u64 = asked.parse().expect("id");
    let follow_up = fake.post(thread, demo::STANLEY, "and the staging ones?");
    let second = poll("the answer to the follow-up", WAIT, || {
        thread_posts(&fake, &asked)?
            .into_iter()
            .find(|m| m["message_reference"]["message_id"] == follow_up.as_str())
    });
    assert_eq!(text(&second), format!("answer in {asked}"));
    assert_eq!(ran_in(out, &asked), 2, "{:?}", agent_log(out));
    assert_eq!(
        fake.requests_mentioning(thread)
            .iter()
            .filter(|r| r.method == "POST" && r.path.ends_with("/threads"))
            .count(),
        1,
        "the follow-up opened no second thread"
    );
}

#[test]
fn long_opens_a_thread_only_for_an_answer_longer_than_one_message() {
    let fake = Fake::start();
    let dir = TempDir::new("reply-in-thread-long");
    let out = dir.path();
    let _sb = start(&fake, out, "long");

    let short = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} quick one"),
    );
    let reply = poll("the short answer in the channel", WAIT, || {
        bot_posts(&fake, demo::OPS)
            .into_iter()
            .find(|m| m["message_reference"]["message_id"] == short.as_str())
    });
    assert_eq!(text(&reply), format!("answer in {}", demo::OPS));
    assert!(thread_posts(&fake, &short).is_none(), "no thread for it");

    let long = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} longplease explain everything"),
    );
    let parts = poll("the long answer's parts in a thread", WAIT, || {
        let posts = thread_posts(&fake, &long)?;
        let chars: usize = posts.iter().map(|m| text(m).trim().len()).sum();
        (chars >= 3_400).then_some(posts)
    });
    assert_eq!(parts.len(), 2, "3,500 characters are two messages");
    assert!(parts.iter().all(|m| text(m).chars().count() <= 2_000));
    assert!(
        !bot_posts(&fake, demo::OPS)
            .iter()
            .any(|m| text(m).contains("word word")),
        "no part of the long answer in the channel"
    );
    // Its run was in the channel: the thread only holds the answer.
    assert_eq!(
        ran_in(out, &demo::OPS.to_string()),
        2,
        "{:?}",
        agent_log(out)
    );
}

#[test]
fn only_threads_the_bot_started_are_conversations_and_only_when_reply_in_thread_is_on() {
    let fake = Fake::start();
    let dir = TempDir::new("reply-in-thread-owner");
    let out = dir.path();
    let sb = start(&fake, out, "always");

    // #incident-42 is a thread of #ops a person started: the mention rule holds there.
    let plain = fake.post(demo::INCIDENT_THREAD, demo::STANLEY, "just talking");
    let mention = fake.post(
        demo::INCIDENT_THREAD,
        demo::STANLEY,
        &format!("{BOT_MENTION} status?"),
    );
    let reply = poll("the answer in the person's thread", WAIT, || {
        bot_posts(&fake, demo::INCIDENT_THREAD)
            .into_iter()
            .find(|m| m["message_reference"]["message_id"] == mention.as_str())
    });
    // Asked in a thread already: answered there, no thread of a thread.
    assert_eq!(text(&reply), format!("answer in {}", demo::INCIDENT_THREAD));
    let incident = demo::INCIDENT_THREAD.to_string();
    assert_eq!(ran_in(out, &incident), 1, "{:?}", agent_log(out));
    assert!(
        !agent_log(out).iter().any(|line| line.ends_with(&plain)),
        "{:?}",
        agent_log(out)
    );
    drop(sb);

    // With the default (`never`), a thread the bot started through a tool is no conversation.
    let dir = TempDir::new("reply-in-thread-never");
    let out = dir.path();
    let sb = start(&fake, out, "");
    let created = sb.tools(&["surface.threads.create", "--session-id=#ops", "notes"]);
    let thread = created.json()["channelId"]
        .as_str()
        .expect("a thread id")
        .to_owned();
    let thread_id: u64 = thread.parse().expect("id");
    let plain = fake.post(thread_id, demo::STANLEY, "no mention here");
    let mention = fake.post(thread_id, demo::STANLEY, &format!("{BOT_MENTION} marker"));
    poll("the marker's run", WAIT, || {
        agent_log(out)
            .iter()
            .any(|line| line == &format!("run {thread} {mention}"))
            .then_some(())
    });
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(ran_in(out, &thread), 1, "{:?}", agent_log(out));
    assert!(!agent_log(out).iter().any(|line| line.ends_with(&plain)));
}
