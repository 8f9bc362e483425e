//! The texts that used to hang the message splitter (and one that amplified 3,003 characters
//! into 403 messages), through the tool server and through an agent's reply.

use std::time::Duration;

use fake_discord::demo;
use serde_json::{json, Value};

use crate::support::{command_agent, poll, script, Allow, Fake, Switchboard, TempDir};
use crate::Client;

/// The texts an outside test found, as (name, text).
fn texts() -> Vec<(&'static str, String)> {
    vec![
        (
            "fence on a 2,500-char line",
            format!("```{}", "a".repeat(2500)),
        ),
        (
            "word salad in a fence",
            format!("```{}", "word ".repeat(600)),
        ),
        (
            // 2,043 characters that only pass 2,000 once @Stanley becomes <@id>.
            "alias expansion past the limit",
            format!("```\n{}", "@Stanley ".repeat(227)),
        ),
    ]
}

/// The bot's messages in `channel` posted after `before` messages existed, in order.
fn new_posts(fake: &Fake, channel: u64, before: usize) -> Vec<Value> {
    crate::support::bot_posts(fake, channel)
        .into_iter()
        .skip(before)
        .collect()
}

/// Each part is a valid Discord message; a fence open at a cut is closed in that part (the
/// last part is as open as the text was: these texts never close their fence).
fn check_parts(name: &str, posts: &[Value]) {
    assert!(!posts.is_empty(), "{name}: nothing posted");
    for (index, post) in posts.iter().enumerate() {
        let content = post["content"].as_str().expect("content");
        let chars = content.chars().count();
        assert!(
            (1..=2000).contains(&chars),
            "{name}: a part of {chars} characters"
        );
        if index + 1 < posts.len() {
            assert_eq!(
                content.matches("```").count() % 2,
                0,
                "{name}: part {index} leaves a fence open: {content:?}"
            );
        }
    }
}

#[test]
fn the_texts_that_hung_the_splitter_are_sent_in_a_few_parts() {
    let fake = Fake::start();
    let dir = TempDir::new("robust-splitter-send");
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let client = Client::new(&sb.url, &sb.token);
    for (name, text) in texts() {
        let before = crate::support::bot_posts(&fake, demo::OPS).len();
        let answer = client.call(
            "surface.messages.send",
            json!({ "sessionId": "#ops", "text": text }),
        );
        assert_eq!(answer.status, 200, "{name}: {answer:?}");
        let ids = answer.body["value"]["messageIds"]
            .as_array()
            .expect("ids")
            .len();
        let posts = new_posts(&fake, demo::OPS, before);
        assert_eq!(posts.len(), ids, "{name}: every part answered is posted");
        check_parts(name, &posts);
        // Even after @Stanley grows to <@id>, these are at most ceil(n / 1,900) + 1 = 3.
        assert!(ids <= 3, "{name}: {ids} parts");
    }
    // A text over toolserver.max_parts_per_send is refused whole, before anything is posted.
    let before = crate::support::bot_posts(&fake, demo::OPS).len();
    let answer = client.call(
        "surface.messages.send",
        json!({ "sessionId": "#ops", "text": "long line of words ".repeat(1500) }),
    );
    assert_eq!(answer.status, 400, "{answer:?}");
    assert_eq!(answer.body["error"]["code"], "too_many_parts", "{answer:?}");
    assert_eq!(crate::support::bot_posts(&fake, demo::OPS).len(), before);
}

#[test]
fn an_agent_reply_that_hung_the_splitter_is_posted() {
    let fake = Fake::start();
    let dir = TempDir::new("robust-splitter-agent");
    let reply = format!("```{}", "a".repeat(2500));
    let agent = script(
        dir.path(),
        "agent.sh",
        &format!("cat > /dev/null\nprintf '%s' '{reply}'"),
    );
    let _sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &command_agent(&agent, dir.path(), 30, ""),
    );
    let before = crate::support::bot_posts(&fake, demo::OPS).len();
    fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("<@{}> quote the long line back", demo::BOT),
    );
    let posts = poll(
        "the agent's reply in two parts",
        Duration::from_secs(20),
        || {
            let posts = new_posts(&fake, demo::OPS, before);
            (posts.len() >= 2).then_some(posts)
        },
    );
    assert_eq!(posts.len(), 2, "{posts:?}");
    check_parts("agent reply", &posts);
    let joined: String = posts
        .iter()
        .map(|p| p["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(joined.matches('a').count(), 2500, "every character arrived");
}
