//! `agent.handoff` end to end (issue 26 §2) with the scripted model: the caller's run gets the
//! sub-agent's answer as the call's result; the sub-run may call only what both agents may
//! (its tools are the intersection, and a call outside it is refused, audited under the
//! chained run id); the third hop is refused with `handoff_too_deep`; a handoff that outlives
//! its `timeoutS` ends with `timeout`.

#[path = "support/model.rs"]
mod model;
mod support;

use std::time::Duration;

use fake_discord::demo;
use model::{messages, text, tool_call, tool_results, FakeModel};
use serde_json::{json, Value};
use support::{reply_to, Allow, Fake, Switchboard, TempDir};

const BOT_MENTION: &str = "<@1000000000000000001>";

/// `lead` (the default) and `release`, both able to hand off, on one scripted model. `lead`
/// may use the message tools, `release` `surface.help` and sending: what both may is sending
/// (and handing off).
fn agents(model: &FakeModel, extra: &str) -> String {
    format!(
        r#"
[agents]
default = "lead"
{extra}

[agents.lead]
runner = "openai"
base_url = "{url}"
model = "lead-model"
system_prompt = "You are the lead agent."
stream = "off"
tool_scope = ["surface.messages.*", "agent.handoff"]

[agents.release]
runner = "openai"
base_url = "{url}"
model = "release-model"
system_prompt = "You are the release agent."
stream = "off"
tool_scope = ["surface.help", "surface.messages.send", "agent.handoff"]
"#,
        url = model.base_url
    )
}

/// Which agent a request is for, by its system prompt.
fn agent_of(request: &Value) -> &'static str {
    let system = messages(request)[0]["content"].as_str().unwrap_or_default();
    if system.contains("release agent") {
        "release"
    } else {
        "lead"
    }
}

fn tool_names(request: &Value) -> Vec<String> {
    let mut names: Vec<String> = request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The last tool result of a request, as the model read it.
fn last_result(request: &Value) -> Option<Value> {
    tool_results(request).pop().map(|(_, result)| result)
}

fn start(model: &FakeModel, name: &str, extra: &str) -> (Fake, TempDir, Switchboard) {
    let fake = Fake::start();
    let dir = TempDir::new(name);
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &agents(model, extra));
    (fake, dir, sb)
}

fn ask(fake: &Fake, sb: &Switchboard, words: &str) -> String {
    let trigger = fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} {words}"));
    reply_to(fake, sb, demo::OPS, &trigger)["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn a_handoff_answers_the_sub_agents_text_and_its_run_cannot_call_what_the_caller_could_not() {
    let model = FakeModel::start(|requests| {
        let request = requests.last().expect("the current request");
        match (agent_of(request), last_result(request)) {
            ("lead", None) => tool_call(
                "call_lead",
                "agent__handoff",
                r#"{"agent":"release","prompt":"Is 2.4 ready?"}"#,
            ),
            ("lead", Some(result)) => text(&format!(
                "release said: {}",
                result["value"]["text"].as_str().unwrap_or("?")
            )),
            // The sub-run tries a callable its caller may not use.
            (_, None) => tool_call("call_help", "surface__help", "{}"),
            (_, Some(result)) => text(&format!(
                "2.4 is ready (help was {})",
                result["error"]["code"].as_str().unwrap_or("allowed")
            )),
        }
    });
    let (fake, _dir, sb) = start(&model, "handoff-answer", "");
    let reply = ask(&fake, &sb, "is the release ready?");
    assert_eq!(
        reply,
        "**lead:** release said: 2.4 is ready (help was out_of_scope)",
        "log:\n{}",
        sb.stderr()
    );

    let requests = model.requests();
    let release: Vec<&Value> = requests
        .iter()
        .filter(|r| agent_of(r) == "release")
        .collect();
    assert_eq!(release.len(), 2, "the sub-run's two model rounds");
    assert_eq!(release[0]["model"], "release-model");
    // Only what both agents may call is offered.
    assert_eq!(
        tool_names(release[0]),
        ["agent__handoff", "surface__messages__send"]
    );
    // The prompt handed over is what the sub-agent reads.
    let asked = messages(release[0]).iter().any(|m| {
        m["content"]
            .as_str()
            .is_some_and(|c| c.contains("Is 2.4 ready?"))
    });
    assert!(asked, "{}", release[0]);

    // The refused call is audited under the chained run id (`run-<lead>.<sub>`).
    let audit = sb
        .tools(&["audit.list", "--tool=surface.help", "--output=json"])
        .json();
    let rows = audit["audit"].as_array().cloned().unwrap_or_default();
    let row = rows
        .iter()
        .find(|r| r["tool"] == "surface.help")
        .unwrap_or_else(|| panic!("no audit row for the refused call: {audit}"));
    let run = row["run"].as_str().unwrap_or_default();
    assert!(
        run.starts_with("run-") && run.matches('.').count() == 1,
        "the sub-run's id extends its caller's: {row}"
    );
    assert_ne!(row["outcome"], "ok", "{row}");
    // Who asked for the chain is still the person who started it.
    assert_eq!(row["requestedBy"], demo::STANLEY.to_string(), "{row}");
}

#[test]
fn the_third_hop_is_refused_with_handoff_too_deep() {
    // Every agent hands off to the other until refused, then reports what it got.
    let model = FakeModel::start(|requests| {
        let request = requests.last().expect("the current request");
        let other = if agent_of(request) == "lead" {
            "release"
        } else {
            "lead"
        };
        match last_result(request) {
            None => tool_call(
                "call_hop",
                "agent__handoff",
                &json!({"agent": other, "prompt": "pass it on"}).to_string(),
            ),
            Some(result) => text(
                result["value"]["text"]
                    .as_str()
                    .or(result["error"]["code"].as_str())
                    .unwrap_or("?"),
            ),
        }
    });
    let (fake, _dir, sb) = start(&model, "handoff-depth", "");
    let reply = ask(&fake, &sb, "pass it on");
    assert_eq!(reply, "**lead:** handoff_too_deep", "log:\n{}", sb.stderr());
    // The person's run (depth 0) and two sub-runs (depths 1 and 2) reached the model; the
    // third hop started nothing.
    let first_rounds = model
        .requests()
        .iter()
        .filter(|r| last_result(r).is_none())
        .count();
    assert_eq!(first_rounds, 3);
}

#[test]
fn a_handoff_past_its_timeout_ends_with_timeout() {
    let model = FakeModel::start(|requests| {
        let request = requests.last().expect("the current request");
        match (agent_of(request), last_result(request)) {
            ("lead", None) => tool_call(
                "call_slow",
                "agent__handoff",
                r#"{"agent":"release","prompt":"take your time","timeoutS":2}"#,
            ),
            ("lead", Some(result)) => text(&format!(
                "{} after {}",
                result["error"]["code"].as_str().unwrap_or("no error"),
                result["error"]["details"]["runId"]
                    .as_str()
                    .map_or("?", |_| "a run")
            )),
            // The sub-agent's model answers well past the handoff's 2 s.
            _ => {
                std::thread::sleep(Duration::from_secs(5));
                text("too late")
            }
        }
    });
    let (fake, _dir, sb) = start(&model, "handoff-timeout", "");
    let reply = ask(&fake, &sb, "ask release slowly");
    assert_eq!(
        reply,
        "**lead:** timeout after a run",
        "log:\n{}",
        sb.stderr()
    );
}

#[test]
fn garbage_handoff_inputs_get_typed_refusals_and_start_nothing() {
    let model = FakeModel::start(|_| text("should not run"));
    let (_fake, _dir, sb) = start(&model, "handoff-garbage", "");
    let cases: [(Value, &str); 7] = [
        (json!({"agent": "release"}), "invalid_input"),
        (
            json!({"agent": "two words", "prompt": "x"}),
            "invalid_agent_name",
        ),
        (json!({"agent": "release", "prompt": "   "}), "empty_prompt"),
        (
            json!({"agent": "release", "prompt": "x".repeat(16_001)}),
            "prompt_too_long",
        ),
        (
            json!({"agent": "release", "prompt": "x", "timeoutS": 0}),
            "invalid_timeout",
        ),
        (
            json!({"agent": "release", "prompt": "x", "timeoutS": 99_999}),
            "invalid_timeout",
        ),
        (
            json!({"agent": "relase", "prompt": "x", "sessionId": "#ops"}),
            "unknown_agent",
        ),
    ];
    let host = sb.url.trim_start_matches("http://").to_owned();
    let bearer = format!("Bearer {}", sb.token);
    for (input, code) in cases {
        let body = json!({"tool": "agent.handoff", "input": input}).to_string();
        let (status, answer) = support::http_send(
            &sb.url,
            "POST",
            "/v1/call",
            &[
                ("Host", &host),
                ("Authorization", &bearer),
                ("Content-Type", "application/json"),
                ("x-switchboard-session-id", "#ops"),
            ],
            &body,
        )
        .expect("answered");
        assert!((400..500).contains(&status), "{input}: {status} {answer}");
        assert!(
            answer.contains(&format!("\"code\":\"{code}\"")),
            "{input}: {answer}"
        );
    }
    assert!(model.requests().is_empty(), "no run started");
}
