//! A burst becomes one turn (issue 25 §5), end to end: the real binary, the fake Discord and a
//! scripted OpenAI-compatible model. Mentions posted while a session's run is busy are answered
//! by exactly one more run whose prompt quotes every one of them with its author; each is
//! answered once, a restart and a replay of the whole channel included; `agent.batch = "off"`
//! keeps one run per message.

#[path = "support/model.rs"]
mod model;
mod support;

use std::time::Duration;

use fake_discord::demo;
use model::{messages, text, FakeModel};
use serde_json::Value;
use support::{
    bot_posts, own_reactions, poll, replies_per_trigger, sqlite_store, Allow, Fake, Switchboard,
    TempDir,
};

const BOT_MENTION: &str = "<@1000000000000000001>";

fn config(model: &FakeModel, extra: &str) -> String {
    format!(
        "[agent]\nrunner = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\nsystem_prompt = \"You are the batch test agent.\"\ntimeout_s = 60\nstream = \"off\"\ntool_scope = [\"surface.help\"]\ncontext_messages = 50\n{extra}",
        model.base_url
    )
}

/// A model that answers request N with "answer N".
fn numbered_model() -> FakeModel {
    FakeModel::start(|requests| text(&format!("answer {}", requests.len())))
}

/// Runs `runs.list` lists as queued in `#ops`.
fn queued(sb: &Switchboard) -> usize {
    sb.tools(&["runs.list"]).json()["runs"]
        .as_array()
        .map_or(0, |runs| {
            runs.iter().filter(|r| r["state"] == "queued").count()
        })
}

/// The last message of a request: what the run answers.
fn last_turn(request: &Value) -> String {
    messages(request)
        .last()
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Holds the model, posts a first mention (its run stays busy), then five mentions by two
/// people while it is; waits until the five are queued. Returns (first, the five, authors).
fn burst_while_busy(fake: &Fake, sb: &Switchboard, model: &FakeModel) -> (String, Vec<String>) {
    model.answer_through(0);
    let first = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} first question"),
    );
    poll("the first run's request", Duration::from_secs(30), || {
        (model.requests().len() == 1).then_some(())
    });
    let burst: Vec<String> = (1..=5)
        .map(|i| {
            let author = if i % 2 == 0 {
                demo::TOMAS
            } else {
                demo::STANLEY
            };
            fake.post(
                demo::OPS,
                author,
                &format!("{BOT_MENTION} burst question {i}"),
            )
        })
        .collect();
    poll("the five mentions queued", Duration::from_secs(30), || {
        (queued(sb) == 5).then_some(())
    });
    (first, burst)
}

/// Lets the model answer, and checks the burst was answered by exactly one more run whose
/// prompt holds all five, each with its author, and that each of them was answered once.
fn one_more_run_answers_all_five(fake: &Fake, model: &FakeModel, first: &str, burst: &[String]) {
    model.answer_through(usize::MAX);
    let last = burst.last().expect("five");
    poll("both answers posted", Duration::from_secs(30), || {
        let replies = replies_per_trigger(fake, demo::OPS);
        (replies.get(first) == Some(&1) && replies.get(last) == Some(&1)).then_some(())
    });
    // Nothing else comes.
    std::thread::sleep(Duration::from_secs(2));
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "exactly one more run: {requests:#?}");
    let turn = last_turn(&requests[1]);
    assert!(
        turn.starts_with("5 messages arrived while you were busy"),
        "{turn}"
    );
    for (i, id) in burst.iter().enumerate() {
        let (name, author) = if (i + 1) % 2 == 0 {
            ("Tomas", demo::TOMAS)
        } else {
            ("Stanley", demo::STANLEY)
        };
        assert!(
            turn.contains(&format!(
                "{name} (user {author}, message {id}): @switchboard burst question {}",
                i + 1
            )),
            "message {id} quoted with its author in {turn}"
        );
    }
    // The first question is not among them: it was answered by its own run.
    assert!(!turn.contains("first question"), "{turn}");
    let replies = replies_per_trigger(fake, demo::OPS);
    assert_eq!(replies.len(), 2, "one reply per run: {replies:?}");
    assert_eq!(bot_posts(fake, demo::OPS).len(), 2);
    for id in burst {
        poll(
            "✅ on each message of the burst",
            Duration::from_secs(10),
            || {
                own_reactions(fake, demo::OPS, id)
                    .contains(&"✅".to_owned())
                    .then_some(())
            },
        );
    }
}

#[test]
fn five_mentions_posted_while_a_run_is_busy_are_answered_by_one_more_run() {
    let model = numbered_model();
    let fake = Fake::start();
    let dir = TempDir::new("batch-burst");
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &config(&model, ""));
    let (first, burst) = burst_while_busy(&fake, &sb, &model);
    one_more_run_answers_all_five(&fake, &model, &first, &burst);
}

#[test]
fn a_burst_answered_together_is_not_answered_again_after_a_restart_that_replays_it() {
    let model = numbered_model();
    let fake = Fake::start();
    let dir = TempDir::new("batch-restart");
    let agent = config(&model, "");
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &agent);
    let (first, burst) = burst_while_busy(&fake, &sb, &model);
    one_more_run_answers_all_five(&fake, &model, &first, &burst);
    let (status, log) = sb.terminate(Duration::from_secs(15));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{log}");

    // The store loses #ops's messages (as one restored from an older copy would): the
    // backfill brings all six mentions back as missed, and only the record of answered
    // triggers — which must cover every message of the batch — stands between them and a
    // second answer.
    let store = sqlite_store(dir.path().join("switchboard.db").to_str().unwrap());
    assert!(store.forget_channel_messages(demo::OPS.into()) >= 6);
    store.close().expect("close the store");
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &agent);
    let mut all = burst.clone();
    all.push(first.clone());
    sb.wait_listed("#ops", &all, Duration::from_secs(20));
    poll(
        "the bridge to turn all six away",
        Duration::from_secs(20),
        || {
            (sb.stderr()
                .matches("this message was answered before")
                .count()
                >= 6)
                .then_some(())
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(model.requests().len(), 2, "no run after the restart");
    let replies = replies_per_trigger(&fake, demo::OPS);
    assert_eq!(replies.len(), 2, "{replies:?}\n{}", sb.stderr());
}

#[test]
fn with_batch_off_each_message_of_a_burst_gets_its_own_run() {
    let model = numbered_model();
    let fake = Fake::start();
    let dir = TempDir::new("batch-off");
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &config(&model, "batch = \"off\"\n"),
    );
    let (first, burst) = burst_while_busy(&fake, &sb, &model);
    model.answer_through(usize::MAX);
    poll("six answers", Duration::from_secs(60), || {
        let replies = replies_per_trigger(&fake, demo::OPS);
        (replies.get(&first) == Some(&1) && burst.iter().all(|id| replies.get(id) == Some(&1)))
            .then_some(())
    });
    let requests = model.requests();
    assert_eq!(requests.len(), 6, "one run per message");
    for (i, request) in requests.iter().skip(1).enumerate() {
        let contents: Vec<&str> = messages(request)
            .iter()
            .filter_map(|m| m["content"].as_str())
            .collect();
        assert!(
            contents
                .iter()
                .any(|c| c.ends_with(&format!("burst question {}", i + 1)))
                && !contents
                    .iter()
                    .any(|c| c.contains("arrived while you were busy")),
            "run {} answers its own message alone: {contents:#?}",
            i + 2
        );
    }
}

#[test]
fn batch_max_splits_a_burst_and_the_rest_run_in_order() {
    let model = numbered_model();
    let fake = Fake::start();
    let dir = TempDir::new("batch-max");
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &config(&model, "batch_max = 3\n"),
    );
    let (_, burst) = burst_while_busy(&fake, &sb, &model);
    model.answer_through(usize::MAX);
    poll("three runs", Duration::from_secs(30), || {
        let replies = replies_per_trigger(&fake, demo::OPS);
        (replies.get(&burst[2]) == Some(&1) && replies.get(&burst[4]) == Some(&1)).then_some(())
    });
    std::thread::sleep(Duration::from_secs(1));
    let requests = model.requests();
    assert_eq!(
        requests.len(),
        3,
        "the first, then 3 together, then 2 together"
    );
    let second = last_turn(&requests[1]);
    assert!(second.starts_with("3 messages arrived"), "{second}");
    assert!(
        (1..=3).all(|i| second.contains(&format!("burst question {i}"))),
        "{second}"
    );
    let third = last_turn(&requests[2]);
    assert!(third.starts_with("2 messages arrived"), "{third}");
    assert!(
        third.contains("burst question 4") && third.contains("burst question 5"),
        "{third}"
    );
}

#[test]
fn a_burst_queued_when_the_process_is_killed_is_answered_by_one_run_after_the_restart() {
    let model = numbered_model();
    let fake = Fake::start();
    let dir = TempDir::new("batch-kill");
    let agent = config(&model, "");
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &agent);
    let (first, burst) = burst_while_busy(&fake, &sb, &model);
    // The machine dies with the first run at the model and the five waiting behind it.
    sb.kill();
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &agent);
    // The first question is told it was cut short; the five wait in the store and are
    // answered together by one run, each of them once.
    one_more_run_answers_all_five(&fake, &model, &first, &burst);
    let told: Vec<String> = bot_posts(&fake, demo::OPS)
        .into_iter()
        .filter(|m| m["message_reference"]["message_id"] == first.as_str())
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect();
    assert!(
        told.len() == 1 && told[0].contains("interrupted"),
        "{told:?}\n{}",
        sb.stderr()
    );
}
