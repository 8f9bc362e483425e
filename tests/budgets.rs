//! Usage and budgets end to end (issue 26 §4) with the scripted OpenAI-compatible model: each
//! model call's reported usage is recorded and `usage.report` sums it exactly as the model
//! server counted it; a per-user daily token cap refuses the run that would go over it before
//! the model is called (the model server sees no request), with a notice in Discord naming
//! the cap and when it resets; another user is not capped by it.

#[path = "support/model.rs"]
mod model;
mod support;

use std::time::Duration;

use fake_discord::demo;
use model::FakeModel;
use serde_json::{json, Value};
use support::{reply_to, Allow, Fake, Switchboard, TempDir};

const BOT_MENTION: &str = "<@1000000000000000001>";

/// A completion that reports its usage, as OpenAI's does.
fn answer(n: usize) -> (u16, Value) {
    (
        200,
        json!({
            "id": "chatcmpl-e2e",
            "object": "chat.completion",
            "model": "fake-model",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": format!("Answer {n}")}}],
            "usage": {"prompt_tokens": 100 + n as u64, "completion_tokens": 20, "total_tokens": 120 + n as u64}
        }),
    )
}

fn config(model: &FakeModel) -> String {
    format!(
        "[agent]\nrunner = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\nsystem_prompt = \"You answer.\"\ntimeout_s = 15\nstream = \"off\"\nprice_in_per_mtok = 2\nprice_out_per_mtok = 10\n\n[budgets.user]\ntokens_per_day = 240\n",
        model.base_url
    )
}

/// What the model server itself counted: its answers' usage, summed.
fn counted(model: &FakeModel) -> (u64, u64) {
    let asked = model.requests().len();
    let prompt: u64 = (1..=asked).map(|n| 100 + n as u64).sum();
    (prompt, 20 * asked as u64)
}

#[test]
fn a_per_user_daily_token_cap_refuses_the_run_before_the_model_is_called_and_reports_add_up() {
    let model = FakeModel::start(|requests| answer(requests.len()));
    let fake = Fake::start();
    let dir = TempDir::new("budgets");
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &config(&model));

    // Two runs: 101+20 and 102+20 tokens, 243 in all: Stanley is at his 240-token cap.
    for n in 1..=2 {
        let trigger = fake.post(
            demo::OPS,
            demo::STANLEY,
            &format!("{BOT_MENTION} question {n}"),
        );
        let reply = reply_to(&fake, &sb, demo::OPS, &trigger);
        assert_eq!(reply["content"], format!("Answer {n}"));
    }
    assert_eq!(model.requests().len(), 2);

    // The third is refused before the model is asked, with a notice naming the cap.
    let trigger = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} question 3"),
    );
    let notice = reply_to(&fake, &sb, demo::OPS, &trigger);
    let text = notice["content"].as_str().unwrap();
    assert!(text.contains("daily token budget is used up"), "{text}");
    assert!(text.contains("budgets.user.tokens_per_day"), "{text}");
    assert!(text.contains("<t:"), "says when it resets: {text}");
    assert!(!text.contains("<@"), "mentions nobody: {text}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        model.requests().len(),
        2,
        "the model was called for a refused run"
    );

    // Tomas has his own cap.
    let trigger = fake.post(
        demo::OPS,
        demo::TOMAS,
        &format!("{BOT_MENTION} my question"),
    );
    let reply = reply_to(&fake, &sb, demo::OPS, &trigger);
    assert_eq!(reply["content"], "Answer 3");

    // usage.report's sums are the model server's own count, per user and in all.
    let (prompt, completion) = counted(&model);
    let by_day = sb.tools(&["usage.report", "day"]).json();
    let rows = by_day["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{by_day}");
    assert_eq!(rows[0]["promptTokens"], prompt);
    assert_eq!(rows[0]["completionTokens"], completion);
    assert_eq!(rows[0]["totalTokens"], prompt + completion);
    assert_eq!(rows[0]["estimated"], false);
    // $2 per million in, $10 per million out.
    let micros = (prompt * 2 + completion * 10) as f64 / 1_000_000.0;
    let usd = rows[0]["usd"].as_f64().unwrap();
    assert!((usd - micros).abs() < 1e-9, "{usd} vs {micros}");

    let by_user = sb.tools(&["usage.report", "user", "--since=1h"]).json();
    let rows = by_user["rows"].as_array().unwrap();
    let of = |user: u64| {
        rows.iter()
            .find(|r| r["user"].as_str() == Some(&*user.to_string()))
            .unwrap_or_else(|| panic!("no row for {user} in {by_user}"))
            .clone()
    };
    assert_eq!(of(demo::STANLEY)["totalTokens"], 101 + 20 + 102 + 20);
    assert_eq!(of(demo::TOMAS)["totalTokens"], 103 + 20);

    // `switchboard usage` reads the same from the store, with the service stopped.
    let config = sb.config.clone();
    let (status, _) = sb.terminate(Duration::from_secs(20));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    let printed = std::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["--config"])
        .arg(&config)
        .args(["usage", "--by", "user", "--json"])
        .current_dir(dir.path())
        .output()
        .expect("run switchboard usage");
    assert!(printed.status.success(), "{printed:?}");
    let offline: Value = serde_json::from_slice(&printed.stdout).expect("JSON");
    assert_eq!(offline, by_user);
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["--config"])
        .arg(&config)
        .args(["usage", "--since", "soon"])
        .current_dir(dir.path())
        .output()
        .expect("run switchboard usage");
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
}

/// Stanley holds the demo guild's `oncall` role, Tomas none. The role reaches the cap check
/// from the gateway message's `member.roles`: once listed in `budgets.exempt` itself, once as
/// an admin role while `budgets.exempt = ["admins"]`.
#[test]
fn a_user_exempt_only_through_a_role_passes_the_cap_another_user_hits() {
    let oncall = format!("<@&{}>", demo::ONCALL_ROLE);
    let variants = [
        (String::new(), format!("exempt = [\"{oncall}\"]")),
        (
            format!("admins = [\"{oncall}\"]"),
            "exempt = [\"admins\"]".to_owned(),
        ),
    ];
    for (admins, exempt) in variants {
        let model = FakeModel::start(|requests| answer(requests.len()));
        let fake = Fake::start();
        let dir = TempDir::new("budgets-role");
        let extra = config(&model).replace(
            "[budgets.user]",
            &format!("[budgets]\n{exempt}\n\n[budgets.user]"),
        );
        let sb = Switchboard::start_sections(
            &fake,
            dir.path(),
            &Allow::default(),
            support::Sections {
                discord: &admins,
                extra: &extra,
                ..support::Sections::default()
            },
        );
        let ask = |user, text: &str| {
            let trigger = fake.post(demo::OPS, user, &format!("{BOT_MENTION} {text}"));
            reply_to(&fake, &sb, demo::OPS, &trigger)["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        };

        // Tomas (no role) uses up his 240 tokens in two runs; the third is refused.
        for n in 1..=2 {
            assert_eq!(
                ask(demo::TOMAS, &format!("question {n}")),
                format!("Answer {n}")
            );
        }
        let refused = ask(demo::TOMAS, "question 3");
        assert!(
            refused.contains("daily token budget is used up"),
            "{exempt}: {refused}"
        );
        assert_eq!(model.requests().len(), 2, "{exempt}");

        // Stanley spends past the same cap: his role exempts him.
        for n in 3..=5 {
            assert_eq!(
                ask(demo::STANLEY, &format!("question {n}")),
                format!("Answer {n}"),
                "{admins} {exempt}"
            );
        }
        assert_eq!(model.requests().len(), 5, "{exempt}");
        let by_user = sb.tools(&["usage.report", "user"]).json();
        let stanley = by_user["rows"]
            .as_array()
            .and_then(|rows| {
                rows.iter()
                    .find(|r| r["user"].as_str() == Some(&*demo::STANLEY.to_string()))
            })
            .unwrap_or_else(|| panic!("no row for Stanley in {by_user}"))
            .clone();
        assert!(stanley["totalTokens"].as_u64() > Some(240), "{stanley}");
    }
}

#[test]
fn a_run_that_crosses_a_cap_stops_at_its_next_model_round_and_says_so() {
    // The first answer asks for a tool and reports 300 tokens: over the 240-token cap.
    let model = FakeModel::start(|requests| {
        let (status, mut body) = model::tool_call(
            "call-1",
            "surface__messages__list",
            "{\"sessionId\": \"#ops\", \"limit\": 1}",
        );
        body["usage"] = json!({"prompt_tokens": 280, "completion_tokens": 20});
        if requests.len() == 1 {
            (status, body)
        } else {
            answer(requests.len())
        }
    });
    let fake = Fake::start();
    let dir = TempDir::new("budgets-crossed");
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &config(&model));
    let trigger = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} look around"),
    );
    let reply = reply_to(&fake, &sb, demo::OPS, &trigger);
    let text = reply["content"].as_str().unwrap();
    assert!(text.contains("the run stopped"), "{text}");
    assert!(text.contains("budgets.user.tokens_per_day"), "{text}");
    // The tool ran, but the model was not asked again.
    assert_eq!(model.requests().len(), 1);
    let by_user = sb.tools(&["usage.report", "user"]).json();
    assert_eq!(by_user["rows"][0]["totalTokens"], 300, "{by_user}");
}

/// A command agent in #ops and the demo agent in #release-room, one token a day per user, and
/// `budgets.exempt = ["admins"]` with Stanley an admin.
fn runners_without_usage(agent: &std::path::Path) -> String {
    format!(
        r#"
[agents]
default = "cmd"

[agents.cmd]
runner = "command"
command = ["{agent}"]
timeout_s = 15

[agents.demo]
runner = "demo"

[sessions.release-room]
agent = "demo"

[budgets]
exempt = ["admins"]

[budgets.user]
tokens_per_day = 1
"#,
        agent = agent.display()
    )
}

#[test]
fn command_and_demo_runs_are_estimated_and_capped_and_an_exempt_admin_passes_the_cap() {
    let fake = Fake::start();
    let dir = TempDir::new("budgets-runners");
    let agent = support::script(
        dir.path(),
        "agent.sh",
        "cat >/dev/null\necho 'the command agent answers'",
    );
    let sb = Switchboard::start_sections(
        &fake,
        dir.path(),
        &Allow::default(),
        support::Sections {
            discord: r#"admins = ["@Stanley"]"#,
            extra: &runners_without_usage(&agent),
            ..support::Sections::default()
        },
    );
    let ask = |session, user, text: &str| {
        let trigger = fake.post(session, user, &format!("{BOT_MENTION} {text}"));
        reply_to(&fake, &sb, session, &trigger)["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };

    // Tomas's command run is charged an estimate: his one-token day is used up.
    let first = ask(demo::OPS, demo::TOMAS, "what's new?");
    assert!(first.contains("the command agent answers"), "{first}");
    let refused = ask(demo::OPS, demo::TOMAS, "and now?");
    assert!(
        refused.contains("daily token budget is used up"),
        "{refused}"
    );
    assert!(refused.contains("budgets.user.tokens_per_day"), "{refused}");

    // Stanley's demo run is charged too; as an exempt admin he passes the cap Tomas hit.
    let demo_answer = ask(demo::RELEASE_ROOM, demo::STANLEY, "help");
    assert!(!demo_answer.contains("budget"), "{demo_answer}");
    let again = ask(demo::OPS, demo::STANLEY, "still there?");
    assert!(again.contains("the command agent answers"), "{again}");

    // Every run has an estimated usage row, per agent and per user.
    let by_agent = sb.tools(&["usage.report", "agent"]).json();
    let rows = by_agent["rows"].as_array().cloned().unwrap_or_default();
    let row = |agent: &str| {
        rows.iter()
            .find(|r| r["agent"] == agent)
            .unwrap_or_else(|| panic!("no row for {agent} in {by_agent}"))
            .clone()
    };
    for agent in ["cmd", "demo"] {
        let row = row(agent);
        assert_eq!(row["estimated"], true, "{row}");
        assert!(row["promptTokens"].as_u64() > Some(0), "{row}");
        assert!(row["completionTokens"].as_u64() > Some(0), "{row}");
    }
    let by_user = sb.tools(&["usage.report", "user"]).json();
    let users: Vec<&str> = by_user["rows"]
        .as_array()
        .map(|rows| rows.iter().filter_map(|r| r["user"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        users.contains(&&*demo::TOMAS.to_string()) && users.contains(&&*demo::STANLEY.to_string()),
        "{by_user}"
    );
}
