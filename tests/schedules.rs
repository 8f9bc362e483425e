//! Scheduled prompts end to end (issue 26 §3) with the scripted OpenAI-compatible model: a
//! schedule every 2 s posts 3 times and each firing leaves a receipt naming the run and the
//! message it posted; a schedule whose run posts nothing is recorded as failed and paused
//! after 3, with a notice in its channel; a schedule due while the service was stopped fires
//! once after the start; a schedule that names an agent fires with that agent.

#[path = "support/model.rs"]
mod model;
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fake_discord::demo;
use model::{text, FakeModel};
use serde_json::Value;
use support::{bot_posts, poll, Allow, Fake, Switchboard, TempDir};

const WAIT: Duration = Duration::from_secs(40);

fn agent(model: &FakeModel) -> String {
    format!(
        "[agent]\nrunner = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\nsystem_prompt = \"You post scheduled digests.\"\ntimeout_s = 15\nstream = \"off\"\nerror_reply = \"agent failed: {{reason}}\"\n",
        model.base_url
    )
}

/// A model that answers `Digest N` to its N-th request.
fn counting_model() -> FakeModel {
    let count = Arc::new(AtomicUsize::new(0));
    FakeModel::start(move |_| {
        text(&format!(
            "Digest {}",
            count.fetch_add(1, Ordering::SeqCst) + 1
        ))
    })
}

fn create(sb: &Switchboard, args: &[&str]) -> String {
    let mut all = vec!["schedule.create", "--session-id=#ops"];
    all.extend_from_slice(args);
    let made = sb.tools(&all).json();
    made["scheduleId"]
        .as_str()
        .expect("a schedule id")
        .to_owned()
}

fn get(sb: &Switchboard, id: &str) -> Value {
    sb.tools(&["schedule.get", id]).json()
}

fn receipts(schedule: &Value) -> Vec<Value> {
    schedule["receipts"].as_array().cloned().unwrap_or_default()
}

/// The receipts of firings that ran, newest first. A firing that comes due while the
/// schedule's previous one still runs is not run beside it: it is recorded as skipped once
/// that one ends (on a busy machine a run, the first above all, may take longer than the 2 s
/// between firings).
fn ran(kept: &[Value]) -> Vec<Value> {
    kept.iter()
        .filter(|r| r["outcome"]["status"] != "skipped")
        .cloned()
        .collect()
}

/// Every due time `every_s` apart from the oldest receipt's to the newest's is accounted for
/// exactly once: the firing of a receipt that ran, or one counted in a skipped receipt.
fn assert_each_due_time_once(kept: &[Value], every_s: i64) {
    let at = |text: &Value| {
        chrono::DateTime::parse_from_rfc3339(text.as_str().expect("a time"))
            .expect("an RFC 3339 time")
    };
    let mut due = Vec::new();
    for receipt in kept {
        let outcome = &receipt["outcome"];
        if outcome["status"] == "skipped" {
            let (first, last) = (at(&outcome["first"]), at(&outcome["last"]));
            let count = (last - first).num_seconds() / every_s + 1;
            assert_eq!(outcome["count"], count, "{receipt}");
            assert_eq!(at(&receipt["firingAt"]), last, "{receipt}");
            due.extend((0..count).map(|n| first + chrono::Duration::seconds(n * every_s)));
        } else {
            due.push(at(&receipt["firingAt"]));
        }
    }
    due.sort_unstable();
    for pair in due.windows(2) {
        assert_eq!(
            (pair[1] - pair[0]).num_seconds(),
            every_s,
            "a due time fired twice or went unaccounted: {kept:#?}"
        );
    }
}

#[test]
fn a_schedule_every_2s_posts_3_times_and_each_firing_leaves_a_receipt() {
    let model = counting_model();
    let fake = Fake::start();
    let dir = TempDir::new("schedule-every");
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &agent(&model));
    let id = create(&sb, &["--prompt=Post the digest", "--every=2s"]);

    let shown = poll("3 receipts of firings that ran", WAIT, || {
        let shown = get(&sb, &id);
        (ran(&receipts(&shown)).len() >= 3).then_some(shown)
    });
    sb.tools(&["schedule.cancel", &id]).json();
    let posts = bot_posts(&fake, demo::OPS);
    let texts: Vec<&str> = posts.iter().filter_map(|m| m["content"].as_str()).collect();
    for n in 1..=3 {
        assert!(texts.contains(&format!("Digest {n}").as_str()), "{texts:?}");
    }
    // Newest first; each names its run and the message it posted, which is in the channel.
    let kept = receipts(&shown);
    let mut runs = Vec::new();
    for receipt in &ran(&kept) {
        assert_eq!(receipt["outcome"]["status"], "delivered", "{receipt}");
        let run = receipt["runId"].as_str().expect("a run id");
        assert!(run.starts_with("run-"), "{receipt}");
        runs.push(run.to_owned());
        let ids = receipt["outcome"]["messageIds"].as_array().unwrap();
        assert_eq!(ids.len(), 1, "{receipt}");
        assert!(
            posts.iter().any(|m| m["id"] == ids[0]),
            "{} is not a bot message in #ops",
            ids[0]
        );
    }
    let firings = runs.len();
    runs.sort();
    runs.dedup();
    assert_eq!(runs.len(), firings, "each firing is its own run");
    // Firings are 2 s apart, in order, each due time run or counted as skipped once.
    assert_each_due_time_once(&kept, 2);
    assert_eq!(get(&sb, &id)["status"], "cancelled");
}

#[test]
fn a_schedule_whose_run_posts_nothing_fails_and_is_paused_after_3_with_a_notice() {
    // The model answers with no text at all: the run ends without error and posts nothing.
    let model = FakeModel::start(|_| text(""));
    let fake = Fake::start();
    let dir = TempDir::new("schedule-silent");
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &agent(&model));
    let id = create(&sb, &["--prompt=Post the digest", "--every=2s"]);

    let shown = poll("the schedule paused", WAIT, || {
        let shown = get(&sb, &id);
        (shown["status"] == "paused").then_some(shown)
    });
    let kept = receipts(&shown);
    let failed = ran(&kept);
    assert_eq!(failed.len(), 3, "{shown}");
    assert_each_due_time_once(&kept, 2);
    for receipt in &failed {
        assert_eq!(receipt["outcome"]["status"], "failed", "{receipt}");
        assert_eq!(receipt["outcome"]["reason"], "nothing_posted", "{receipt}");
        assert!(receipt["runId"].is_string(), "{receipt}");
    }
    assert_eq!(shown["failuresInARow"], 3);
    assert!(shown.get("nextAt").is_none(), "{shown}");
    // The channel is told, once.
    let notice = poll("the pause notice", WAIT, || {
        bot_posts(&fake, demo::OPS).into_iter().find(|m| {
            m["content"]
                .as_str()
                .is_some_and(|t| t.contains("is paused"))
        })
    });
    let text = notice["content"].as_str().unwrap();
    assert!(text.contains(&id), "{text}");
    assert!(text.contains("schedule.resume"), "{text}");
    // Paused: no more firings.
    let asked = model.requests().len();
    assert_eq!(asked, 3);
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(model.requests().len(), asked, "a paused schedule fired");
    assert_eq!(
        bot_posts(&fake, demo::OPS).len(),
        1,
        "only the notice was posted"
    );
}

#[test]
fn a_schedule_whose_run_answers_no_reply_gets_no_reply_receipts_and_is_never_failed_or_paused() {
    let model = FakeModel::start(|_| text("NO_REPLY"));
    let fake = Fake::start();
    let dir = TempDir::new("schedule-no-reply");
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &agent(&model));
    let id = create(&sb, &["--prompt=Post only if news", "--every=2s"]);

    // Four firings: past the 3 failures that would have paused a failing schedule.
    let shown = poll("4 receipts of firings that ran", WAIT, || {
        let shown = get(&sb, &id);
        (ran(&receipts(&shown)).len() >= 4).then_some(shown)
    });
    sb.tools(&["schedule.cancel", &id]).json();
    assert_each_due_time_once(&receipts(&shown), 2);
    for receipt in &ran(&receipts(&shown)) {
        assert_eq!(receipt["outcome"]["status"], "no_reply", "{receipt}");
        assert!(receipt["runId"].is_string(), "{receipt}");
    }
    assert_eq!(shown["status"], "active", "{shown}");
    assert_eq!(shown["failuresInARow"], 0, "{shown}");
    assert!(
        bot_posts(&fake, demo::OPS).is_empty(),
        "NO_REPLY posts nothing, not even a notice"
    );
}

#[test]
fn a_paused_schedule_resumed_with_schedule_resume_fires_and_delivers_again() {
    // Silent for the first 3 requests (the schedule pauses), then a digest.
    let model = FakeModel::start(|requests| {
        if requests.len() <= 3 {
            text("")
        } else {
            text("Back with a digest")
        }
    });
    let fake = Fake::start();
    let dir = TempDir::new("schedule-resume");
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &agent(&model));
    let id = create(&sb, &["--prompt=Post the digest", "--every=2s"]);
    poll("the schedule paused", WAIT, || {
        (get(&sb, &id)["status"] == "paused").then_some(())
    });

    let resumed = sb.tools(&["schedule.resume", &id]).json();
    assert_eq!(resumed["status"], "active", "{resumed}");
    assert_eq!(resumed["failuresInARow"], 0, "{resumed}");
    let shown = poll("a delivered firing", WAIT, || {
        let shown = get(&sb, &id);
        receipts(&shown)
            .first()
            .is_some_and(|r| r["outcome"]["status"] == "delivered")
            .then_some(shown)
    });
    sb.tools(&["schedule.cancel", &id]).json();
    assert_eq!(shown["failuresInARow"], 0, "{shown}");
    assert!(
        bot_posts(&fake, demo::OPS)
            .iter()
            .any(|m| m["content"] == "Back with a digest"),
        "the resumed schedule posted"
    );
    // Resuming what is not paused is a conflict, not a change.
    let again = sb.tools(&["schedule.resume", &id]);
    assert_ne!(again.code, Some(0), "{again:?}");
}

#[test]
fn a_schedule_due_while_the_service_was_stopped_fires_once_after_the_start() {
    let model = counting_model();
    let fake = Fake::start();
    let dir = TempDir::new("schedule-missed");
    let config = agent(&model);
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &config);
    let at = (chrono::Utc::now() + chrono::Duration::seconds(4))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let id = create(
        &sb,
        &["--prompt=Post the launch note", &format!("--at={at}")],
    );
    let (status, _) = sb.terminate(Duration::from_secs(20));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    // Down while it comes due.
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        model.requests().is_empty(),
        "it fired while the service was down"
    );

    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &config);
    let shown = poll("the missed firing's receipt", WAIT, || {
        let shown = get(&sb, &id);
        (!receipts(&shown).is_empty() && shown["status"] != "active").then_some(shown)
    });
    assert_eq!(shown["status"], "done", "{shown}\n{}", sb.stderr());
    let kept = receipts(&shown);
    assert_eq!(kept.len(), 1, "{shown}");
    assert_eq!(kept[0]["outcome"]["status"], "delivered", "{shown}");
    assert_eq!(kept[0]["firingAt"].as_str().unwrap(), at.as_str());
    // Once: one model request, one message, and nothing more a while later.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(model.requests().len(), 1);
    let texts: Vec<String> = bot_posts(&fake, demo::OPS)
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(texts, ["Digest 1"]);
}

#[test]
fn a_firing_missed_for_longer_than_missed_max_age_is_recorded_skipped_not_run() {
    let model = counting_model();
    let fake = Fake::start();
    let dir = TempDir::new("schedule-skipped");
    let config = format!("{}\n[scheduler]\nmissed_max_age_s = 1\n", agent(&model));
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &config);
    let at = (chrono::Utc::now() + chrono::Duration::seconds(3))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let id = create(
        &sb,
        &["--prompt=Post the launch note", &format!("--at={at}")],
    );
    let (status, _) = sb.terminate(Duration::from_secs(20));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    std::thread::sleep(Duration::from_secs(6));

    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &config);
    let shown = poll("the skipped firing's receipt", WAIT, || {
        let shown = get(&sb, &id);
        (!receipts(&shown).is_empty() && shown["status"] != "active").then_some(shown)
    });
    assert_eq!(shown["status"], "done", "{shown}");
    let kept = receipts(&shown);
    assert_eq!(kept.len(), 1, "{shown}");
    assert_eq!(kept[0]["outcome"]["status"], "skipped", "{shown}");
    assert_eq!(kept[0]["outcome"]["count"], 1, "{shown}");
    assert!(kept[0].get("runId").is_none(), "{shown}");
    assert!(model.requests().is_empty(), "a skipped firing ran");
    assert!(bot_posts(&fake, demo::OPS).is_empty());
}

#[test]
fn a_schedule_in_the_config_fires_under_its_config_id_and_a_call_cannot_cancel_it() {
    let model = counting_model();
    let fake = Fake::start();
    let dir = TempDir::new("schedule-config");
    let entry = "\n[[schedules]]\nname = \"digest\"\nsession = \"#ops\"\nprompt = \"Post the digest\"\nevery = \"2s\"\n";
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &format!("{}{entry}", agent(&model)),
    );
    let shown = poll("2 receipts of firings that ran", WAIT, || {
        let shown = get(&sb, "config:digest");
        (ran(&receipts(&shown)).len() >= 2).then_some(shown)
    });
    assert_eq!(shown["createdBy"], "config");
    assert_each_due_time_once(&receipts(&shown), 2);
    for receipt in &ran(&receipts(&shown)) {
        assert_eq!(receipt["outcome"]["status"], "delivered", "{receipt}");
    }
    // Not cancelled by a call: it belongs to the file.
    let refused = sb.tools(&["schedule.cancel", "config:digest"]);
    assert_eq!(refused.code, Some(2), "{refused:?}");
    assert!(
        refused.stderr.contains("[[schedules]]") || refused.stdout.contains("[[schedules]]"),
        "{refused:?}"
    );
}

#[test]
fn a_schedule_that_names_an_agent_fires_with_that_agent_not_the_sessions() {
    let model = FakeModel::start(|_| text("the release digest"));
    let fake = Fake::start();
    let dir = TempDir::new("schedule-agent");
    let agents = format!(
        "[agents]\ndefault = \"support\"\n\n[agents.support]\nrunner = \"openai\"\nbase_url = \"{url}\"\nmodel = \"support-model\"\nstream = \"off\"\n\n[agents.release]\nrunner = \"openai\"\nbase_url = \"{url}\"\nmodel = \"release-model\"\nstream = \"off\"\nanswer_label = \"footer\"\n",
        url = model.base_url
    );
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &agents);
    // #ops answers with `support` (the default); the schedule asks for `release`.
    let at = (chrono::Utc::now() + chrono::Duration::seconds(2))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let id = create(
        &sb,
        &[
            "--prompt=Post the release digest",
            &format!("--at={at}"),
            "--agent=release",
        ],
    );
    let shown = poll("a receipt", WAIT, || {
        let shown = get(&sb, &id);
        (!receipts(&shown).is_empty()).then_some(shown)
    });
    assert_eq!(
        receipts(&shown)[0]["outcome"]["status"],
        "delivered",
        "{shown}"
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 1, "one firing, one model request");
    assert_eq!(requests[0]["model"], "release-model");
    let posts = bot_posts(&fake, demo::OPS);
    let texts: Vec<&str> = posts.iter().filter_map(|m| m["content"].as_str()).collect();
    assert!(
        texts.contains(&"the release digest\n-# release"),
        "the answer is the release agent's, labelled as its: {texts:?}"
    );
}

#[test]
fn two_services_on_one_postgres_store_fire_each_due_time_of_a_schedule_once() {
    use switchboard_store_postgres::testing::PgCluster;
    let cluster = PgCluster::shared();
    let url = cluster.url(&cluster.database().expect("a database"));
    let model = counting_model();
    let fake = Fake::start();
    let (dir_a, dir_b) = (TempDir::new("schedule-pg-a"), TempDir::new("schedule-pg-b"));
    let start = |dir: &TempDir| {
        Switchboard::start_sections(
            &fake,
            dir.path(),
            &Allow::default(),
            support::Sections {
                extra: &agent(&model),
                store_url: Some(&url),
                ..support::Sections::default()
            },
        )
    };
    let a = start(&dir_a);
    let b = start(&dir_b);
    let id = create(&a, &["--prompt=Post the digest", "--every=2s"]);
    // Both nodes see the one schedule.
    assert_eq!(get(&b, &id)["scheduleId"], id.as_str());

    poll("4 receipts of firings that ran", WAIT, || {
        let shown = get(&b, &id);
        (ran(&receipts(&shown)).len() >= 4).then_some(shown)
    });
    b.tools(&["schedule.cancel", &id]).json();
    // Let a firing already running on either node finish before counting.
    std::thread::sleep(Duration::from_secs(3));
    let kept = receipts(&get(&a, &id));
    // Each due time fired once (or was counted as skipped once), whichever node had it.
    assert_each_due_time_once(&kept, 2);
    let kept = ran(&kept);
    let firings = kept.len();
    for receipt in &kept {
        assert_eq!(receipt["outcome"]["status"], "delivered", "{receipt}");
    }
    // One model request and one post per firing, whichever node ran it.
    assert_eq!(model.requests().len(), firings, "{kept:?}");
    assert_eq!(bot_posts(&fake, demo::OPS).len(), firings, "{kept:?}");
}
