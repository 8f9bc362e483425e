//! `[[hooks.prompt]]` (issue 25 §3), end to end with real script hooks: a hook rewrites the
//! system prompt and the messages of the built-in runner's request before the model sees it;
//! a hook that fails, answers garbage or overruns its timeout leaves the request as it was
//! (a WARN line), and a `required` one that fails stops the run before anything is sent.

#[path = "support/model.rs"]
mod model;
mod support;

use std::time::Duration;

use fake_discord::demo;
use model::{messages, text, FakeModel};
use serde_json::Value;
use support::{poll, reply_to, script, Allow, Fake, Switchboard, TempDir};

const BOT_MENTION: &str = "<@1000000000000000001>";

fn config(model: &FakeModel, hooks: &str) -> String {
    format!(
        "[agent]\nrunner = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\nsystem_prompt = \"You are the hook test agent.\"\ntimeout_s = 30\nstream = \"off\"\ntool_scope = [\"surface.help\"]\nerror_reply = \"agent failed: {{reason}}\"\n{hooks}",
        model.base_url
    )
}

fn contents(request: &Value) -> Vec<String> {
    messages(request)
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect()
}

/// A hook (Python, reading the request from stdin) that saves what it got in `seen.json`,
/// appends a line to the system prompt and a note after the last message.
fn rewriting_hook(dir: &std::path::Path) -> std::path::PathBuf {
    let seen = dir.join("seen.json");
    script(
        dir,
        "rewrite.sh",
        &format!(
            r#"exec /usr/bin/python3 -c '
import json, sys
request = json.load(sys.stdin)
open("{}", "w").write(json.dumps(request))
messages = request["messages"] + [{{"role": "user", "content": "HOOK NOTE: the release is frozen."}}]
system = messages[0]["content"] + "\nHOOK: answer in French."
print(json.dumps({{"system": system, "messages": messages}}))
'"#,
            seen.display()
        ),
    )
}

#[test]
fn a_prompt_hook_rewrites_the_system_prompt_and_the_messages_the_model_sees() {
    let model = FakeModel::start(|_| text("Bonjour."));
    let fake = Fake::start();
    let dir = TempDir::new("prompt-hook");
    let hook = rewriting_hook(dir.path());
    let hooks = format!(
        "[[hooks.prompt]]\ncommand = [\"{}\"]\ntimeout_ms = 10000\n",
        hook.display()
    );
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &config(&model, &hooks),
    );
    let trigger = fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} status?"));
    let reply = reply_to(&fake, &sb, demo::OPS, &trigger);
    assert_eq!(reply["content"], "Bonjour.", "{reply}");

    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    let sent = contents(&requests[0]);
    assert!(
        sent[0].starts_with("You are the hook test agent.")
            && sent[0].ends_with("HOOK: answer in French."),
        "the system prompt as the hook rewrote it: {sent:#?}"
    );
    assert_eq!(
        sent.last().map(String::as_str),
        Some("HOOK NOTE: the release is frozen."),
        "{sent:#?}"
    );
    // What the hook was given: the request as it would have been sent, and where it is.
    let seen: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("seen.json")).expect("the hook ran"),
    )
    .expect("JSON");
    assert_eq!(seen["hook"], "prompt");
    assert_eq!(seen["session"], demo::OPS.to_string());
    assert_eq!(seen["model"], "fake-model");
    assert_eq!(seen["round"], 0);
    assert!(
        seen["run"].as_str().is_some_and(|r| r.starts_with("run-")),
        "{seen}"
    );
    let given: Vec<&str> = seen["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(given[0], "You are the hook test agent.");
    assert!(
        given.last().is_some_and(|m| m.ends_with("status?")),
        "{given:#?}"
    );
}

#[test]
fn a_failing_hook_leaves_the_request_as_it_was_unless_it_is_required() {
    let model = FakeModel::start(|_| text("All good."));
    let fake = Fake::start();
    let dir = TempDir::new("prompt-hook-fail");
    let failing = script(dir.path(), "fail.sh", "cat >/dev/null\nexit 3");
    let garbage = script(
        dir.path(),
        "garbage.sh",
        "cat >/dev/null\necho 'not json at all'",
    );
    let slow = script(dir.path(), "slow.sh", "cat >/dev/null\nsleep 10");
    let too_big = script(
        dir.path(),
        "big.sh",
        "cat >/dev/null\n/usr/bin/python3 -c 'import json; print(json.dumps({\"system\": \"word \" * 40000}))'",
    );
    let rewriting = rewriting_hook(dir.path());
    let hooks = format!(
        "[[hooks.prompt]]\ncommand = [\"{}\"]\n[[hooks.prompt]]\ncommand = [\"{}\"]\n[[hooks.prompt]]\ncommand = [\"{}\"]\ntimeout_ms = 300\n[[hooks.prompt]]\ncommand = [\"{}\"]\n[[hooks.prompt]]\ncommand = [\"{}\"]\ntimeout_ms = 10000\n",
        failing.display(),
        garbage.display(),
        slow.display(),
        too_big.display(),
        rewriting.display()
    );
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &config(&model, &hooks),
    );
    let trigger = fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} status?"));
    let reply = reply_to(&fake, &sb, demo::OPS, &trigger);
    assert_eq!(reply["content"], "All good.", "{reply}");
    // The four failures changed nothing; the last hook's rewrite went through.
    let sent = contents(&model.requests()[0]);
    assert_eq!(
        sent[0], "You are the hook test agent.\nHOOK: answer in French.",
        "{sent:#?}"
    );
    let log = sb.stderr();
    assert_eq!(
        log.matches("a prompt hook failed; the request goes as it was")
            .count(),
        4,
        "{log}"
    );
    for why in [
        "exited with exit status 3",
        "not a hook answer",
        "did not answer within 300 ms",
        "over the 28000 a request may carry",
    ] {
        assert!(log.contains(why), "{why}: {log}");
    }
    sb.terminate(Duration::from_secs(10));

    // Required: the run fails, nothing is sent.
    let required = format!(
        "[[hooks.prompt]]\ncommand = [\"{}\"]\nrequired = true\n",
        failing.display()
    );
    let before = model.requests().len();
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &config(&model, &required),
    );
    let trigger = fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} again?"));
    let reply = reply_to(&fake, &sb, demo::OPS, &trigger);
    assert_eq!(
        reply["content"], "agent failed: a required prompt hook failed",
        "{reply}"
    );
    poll("the log line", Duration::from_secs(5), || {
        sb.stderr()
            .contains("a required prompt hook failed; the run stops")
            .then_some(())
    });
    assert_eq!(model.requests().len(), before, "no request was sent");
}
