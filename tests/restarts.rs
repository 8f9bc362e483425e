//! A run cut short by a restart of a one-node switchboard on SQLite (issue 23 §3, "nothing
//! silently lost … this holds on one SQLite node too"): its question is told at once by the
//! restarted process — not after the run's lease — and the channel's next question is answered;
//! a run that ends within the shutdown's grace is answered before the process exits and is
//! never told it was cut; under `agent.interrupted = "rerun"` the cut run runs again and posts
//! none of the parts it posted before (the same nonces). The lease here is 60 s, longer than
//! any wait in these tests, so a test that passed by waiting out the lease would time out
//! instead.

mod support;

use std::path::Path;
use std::time::Duration;

use fake_discord::demo;
use support::{agent_log, bot_posts, poll, script, Allow, Fake, Switchboard, TempDir};

const BOT_MENTION: &str = "<@1000000000000000001>";

/// The command agent: logs `start MESSAGE`, sleeps as long as `DIR/sleep` says (taking the
/// file: only the next run sleeps), then answers `answer to MESSAGE`.
fn config(dir: &Path) -> String {
    agent_config(dir, "", "")
}

/// The command agent of [`config`], which runs the shell lines `before_sleep` before it
/// sleeps, under `[agent]` settings `agent_extra`.
fn agent_config(dir: &Path, before_sleep: &str, agent_extra: &str) -> String {
    let agent = script(
        dir,
        "agent.sh",
        &format!(
            r#"cat > /dev/null
echo "start $SWITCHBOARD_MESSAGE_ID" >> "{d}/log"
{before_sleep}
if [ -f "{d}/sleep" ]; then n=$(cat "{d}/sleep"); rm -f "{d}/sleep"; sleep "$n"; fi
echo "answer to $SWITCHBOARD_MESSAGE_ID""#,
            d = dir.display()
        ),
    );
    format!(
        "{}\n[cluster]\nlease_s = 60\n",
        support::command_agent(&agent, dir, 90, agent_extra)
    )
}

fn started(dir: &Path, message: &str) -> bool {
    agent_log(dir).contains(&format!("start {message}"))
}

/// Posts a mention in `#ops` whose run sleeps `sleep_s` and waits until the run started; the
/// mention's id.
fn ask_and_wait_for_the_run(fake: &Fake, out: &Path, sleep_s: u32, text: &str) -> String {
    std::fs::write(out.join("sleep"), sleep_s.to_string()).expect("write");
    let asked = fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} {text}"));
    poll("the run to start", Duration::from_secs(20), || {
        started(out, &asked).then_some(())
    });
    asked
}

/// The bot's replies to `trigger` in `#ops`, by their text.
fn replies(fake: &Fake, trigger: &str) -> Vec<String> {
    bot_posts(fake, demo::OPS)
        .into_iter()
        .filter(|m| m["message_reference"]["message_id"] == trigger)
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect()
}

/// After the restart: the cut question is told once (within 15 s, a quarter of the lease),
/// and a new question in the same channel is answered.
fn the_cut_question_is_told_and_the_channel_goes_on(fake: &Fake, sb: &Switchboard, cut: &str) {
    let told = poll(
        "the cut question to be told it was interrupted",
        Duration::from_secs(15),
        || {
            let replies = replies(fake, cut);
            (!replies.is_empty()).then_some(replies)
        },
    );
    assert_eq!(told.len(), 1, "{told:?}\n{}", sb.stderr());
    assert!(told[0].contains("interrupted"), "{told:?}");
    let next = fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} and now?"));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let answered = loop {
        let replies = replies(fake, &next);
        if !replies.is_empty() {
            break replies;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the next question was not answered within 20 s; the bot posted {:?}\n{}",
            bot_posts(fake, demo::OPS),
            sb.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(answered, [format!("answer to {next}")]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(replies(fake, cut).len(), 1, "the cut question is told once");
}

#[test]
fn a_run_cut_by_a_kill_is_told_at_once_by_the_restarted_node() {
    let fake = Fake::start();
    let dir = TempDir::new("restart-kill");
    let out = dir.path();
    let config = config(out);
    let sb = Switchboard::start_with(&fake, out, &Allow::default(), &config);
    let cut = ask_and_wait_for_the_run(&fake, out, 30, "take your time");
    sb.kill();

    let sb = Switchboard::start_with(&fake, out, &Allow::default(), &config);
    the_cut_question_is_told_and_the_channel_goes_on(&fake, &sb, &cut);
}

#[test]
fn a_run_longer_than_the_shutdown_grace_gives_its_lease_back_and_is_told_after_the_restart() {
    let fake = Fake::start();
    let dir = TempDir::new("restart-grace");
    let out = dir.path();
    let config = config(out);
    let sb = Switchboard::start_with(&fake, out, &Allow::default(), &config);
    let cut = ask_and_wait_for_the_run(&fake, out, 60, "take your time");
    let (status, log) = sb.terminate(Duration::from_secs(30));
    assert!(status.is_some_and(|s| s.success()), "clean shutdown: {log}");
    assert!(log.contains("runs still going at shutdown"), "{log}");
    assert!(replies(&fake, &cut).is_empty(), "nothing was answered yet");

    let sb = Switchboard::start_with(&fake, out, &Allow::default(), &config);
    the_cut_question_is_told_and_the_channel_goes_on(&fake, &sb, &cut);
}

#[test]
fn a_run_that_ends_within_the_shutdown_grace_is_answered_before_the_process_exits() {
    let fake = Fake::start();
    let dir = TempDir::new("restart-drain");
    let out = dir.path();
    let config = config(out);
    let sb = Switchboard::start_with(&fake, out, &Allow::default(), &config);
    let asked = ask_and_wait_for_the_run(&fake, out, 2, "a quick one");
    let (status, log) = sb.terminate(Duration::from_secs(30));
    assert!(status.is_some_and(|s| s.success()), "clean shutdown: {log}");
    assert_eq!(
        replies(&fake, &asked),
        [format!("answer to {asked}")],
        "{log}"
    );

    // Started again, nothing about it is told.
    let sb = Switchboard::start_with(&fake, out, &Allow::default(), &config);
    let next = fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} and now?"));
    poll(
        "the next question's answer",
        Duration::from_secs(20),
        || (!replies(&fake, &next).is_empty()).then_some(()),
    );
    assert_eq!(replies(&fake, &asked).len(), 1, "{}", sb.stderr());
}

/// The command agent of a rerun: logs `start MESSAGE`, posts a long text (several parts once
/// split) through `tools surface.messages.send`, logs `posted MESSAGE`, sleeps as long as
/// `DIR/sleep` says (only the first run), then answers `answer to MESSAGE`.
fn rerun_config(dir: &Path) -> String {
    let posts = format!(
        r#"text=$(seq 1 150 | sed "s/^/part of $SWITCHBOARD_MESSAGE_ID line /" | tr '\n' ' ')
"{t}" surface.messages.send "$text" >> "{d}/tools.out" 2>&1
echo "posted $SWITCHBOARD_MESSAGE_ID" >> "{d}/log""#,
        d = dir.display(),
        t = support::tools_bin().display(),
    );
    agent_config(dir, &posts, "interrupted = \"rerun\"")
}

#[test]
fn a_rerun_after_a_kill_posts_none_of_the_parts_the_cut_run_posted_again() {
    let fake = Fake::start();
    let dir = TempDir::new("restart-rerun");
    let out = dir.path();
    let config = rerun_config(out);
    let sb = Switchboard::start_with(&fake, out, &Allow::default(), &config);
    std::fs::write(out.join("sleep"), "30").expect("write");
    let cut = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} a long one"),
    );
    poll("the run to post its parts", Duration::from_secs(30), || {
        agent_log(out)
            .contains(&format!("posted {cut}"))
            .then_some(())
    });
    let parts = |fake: &Fake| -> Vec<String> {
        bot_posts(fake, demo::OPS)
            .into_iter()
            .filter_map(|m| m["content"].as_str().map(str::to_owned))
            .filter(|text| text.contains(&format!("part of {cut}")))
            .collect()
    };
    let posted = parts(&fake);
    assert!(
        posted.len() >= 2,
        "the text is posted as several parts: {posted:?}\n{}",
        std::fs::read_to_string(out.join("tools.out")).unwrap_or_default()
    );
    sb.kill();

    let sb = Switchboard::start_with(&fake, out, &Allow::default(), &config);
    let answered = poll("the rerun's answer", Duration::from_secs(30), || {
        let replies = replies(&fake, &cut);
        (!replies.is_empty()).then_some(replies)
    });
    assert_eq!(answered, [format!("answer to {cut}")], "{}", sb.stderr());
    let starts = agent_log(out)
        .iter()
        .filter(|line| **line == format!("start {cut}"))
        .count();
    assert_eq!(starts, 2, "the cut run ran again: {:?}", agent_log(out));
    assert_eq!(
        parts(&fake),
        posted,
        "each part is in the channel once, as first posted\n{}",
        sb.stderr()
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(replies(&fake, &cut).len(), 1, "answered once");
}
