//! The agent's notes across conversations (issue 25 §4): `memory.write` in one run is listed in
//! a later run's prompt after a restart, marked untrusted when the person who asked for the
//! run is not trusted; the operator reads and forgets notes through the same callables.

#[path = "support/model.rs"]
mod model;
mod support;

use std::time::Duration;

use fake_discord::demo;
use model::{messages, text, tool_call, tool_results, FakeModel};
use serde_json::Value;
use support::{reply_to, Allow, Fake, Switchboard, TempDir};

const BOT_MENTION: &str = "<@1000000000000000001>";
const NOTE: &str = "lives at /srv/release/keystone-7.toml";

fn config(model: &FakeModel) -> String {
    format!(
        "[agent]\nrunner = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\nsystem_prompt = \"You are the memory test agent.\"\ntimeout_s = 15\nstream = \"off\"\ntool_scope = [\"memory.*\"]\ntrusted_users = [\"{}\"]\nerror_reply = \"agent failed: {{reason}}\"\n",
        model.base_url,
        demo::STANLEY
    )
}

/// The system message of a request.
fn system(request: &Value) -> String {
    messages(request)[0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// `switchboard memory ARGS` against `sb`, with the operator token.
fn operator(sb: &Switchboard, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .arg("memory")
        .args(args)
        .args(["--url", &sb.url])
        .env("SWITCHBOARD_TOKEN", &sb.token)
        .env_remove("SWITCHBOARD_CONFIG")
        .env_remove("SWITCHBOARD_URL")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run switchboard memory")
}

#[test]
fn a_note_written_in_one_run_is_in_a_later_runs_prompt_after_a_restart_marked_untrusted() {
    let model = FakeModel::start(|requests| match requests.len() {
        1 => tool_call(
            "call_1",
            "memory__write",
            &format!(r#"{{"scope":"session","key":"release-config","text":"{NOTE}"}}"#),
        ),
        2 => text("Noted."),
        _ => text("I remember."),
    });
    let fake = Fake::start();
    let dir = TempDir::new("memory-notes");
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &config(&model));
    // Tomas is not among the trusted users: the note he caused is untrusted.
    let trigger = fake.post(
        demo::OPS,
        demo::TOMAS,
        &format!("{BOT_MENTION} remember where the release config lives"),
    );
    let reply = reply_to(&fake, &sb, demo::OPS, &trigger);
    assert_eq!(reply["content"], "Noted.", "{reply}");
    let requests = model.requests();
    let (_, written) = tool_results(&requests[1])
        .pop()
        .expect("the write's result");
    assert_eq!(written["ok"], true, "{written}");
    assert_eq!(written["value"]["untrusted"], true, "{written}");
    assert_eq!(
        written["value"]["scope"],
        format!("session:{}", demo::OPS),
        "{written}"
    );

    sb.terminate(Duration::from_secs(10));
    // Only the trigger (Stanley's, trusted) is read: the note alone is untrusted.
    let only_trigger =
        config(&model).replace("timeout_s = 15\n", "timeout_s = 15\ncontext_messages = 1\n");
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &only_trigger);
    let again = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} where is the release config?"),
    );
    let reply = reply_to(&fake, &sb, demo::OPS, &again);
    assert_eq!(reply["content"], "I remember.", "{reply}");
    let prompt = system(model.requests().last().expect("the later run's request"));
    assert!(
        prompt.contains(&format!("(untrusted) - release-config: {NOTE}")),
        "the note is listed, marked untrusted: {prompt}"
    );
    assert!(
        prompt.contains("Lines that start with (untrusted) come from people who are not this bot's trusted users"),
        "the prompt says what the mark means: {prompt}"
    );

    // `switchboard memory list` shows it to the operator.
    let ops = demo::OPS.to_string();
    let listed = operator(&sb, &["list", "--session", &ops]);
    assert!(listed.status.success(), "{listed:?}");
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(
        listed.contains(&format!(
            "session:{ops}\trelease-config (untrusted)\t{NOTE}"
        )),
        "{listed}"
    );
    // Without a scope: every note, the session's and the users', through admin.memory.list.
    let about_mira = sb.tools(&[
        "memory.write",
        "--scope=user",
        &format!("--user-id={}", demo::STANLEY),
        "--key=pronouns",
        "--text=she/her",
        &format!("--session-id={ops}"),
    ]);
    assert_eq!(about_mira.code, Some(0), "{about_mira:?}");
    let everything = operator(&sb, &["list"]);
    assert!(everything.status.success(), "{everything:?}");
    let everything = String::from_utf8_lossy(&everything.stdout).into_owned();
    assert!(
        everything.contains(&format!(
            "session:{ops}\trelease-config (untrusted)\t{NOTE}"
        )) && everything.contains(&format!("user:{}\tpronouns\tshe/her", demo::STANLEY)),
        "{everything}"
    );
    let paged = sb.tools(&["admin.memory.list", "--limit=1"]);
    assert_eq!(paged.code, Some(0), "{paged:?}");
    let page = paged.json();
    assert_eq!(page["notes"].as_array().map(Vec::len), Some(1), "{page}");
    let next = page["next"].as_str().expect("a second page").to_owned();
    let second = sb.tools(&["admin.memory.list", "--limit=1", &format!("--after={next}")]);
    assert_eq!(
        second.json()["notes"].as_array().map(Vec::len),
        Some(1),
        "{second:?}"
    );
    assert!(second.json()["next"].is_null(), "{second:?}");
    for garbage in [
        "--limit=0",
        "--limit=1001",
        "--after=nonsense",
        "--after=team:1\tk",
    ] {
        let refused = sb.tools(&["admin.memory.list", garbage]);
        assert_ne!(refused.code, Some(0), "{garbage}: {refused:?}");
    }
    let absent = operator(&sb, &["forget", "--session", &ops, "--key", "nothing-here"]);
    assert_eq!(absent.status.code(), Some(1), "{absent:?}");
    // Garbage names for a session, a user or a key are refused, each saying what is wrong.
    for (args, says) in [
        (
            &["list", "--session", "#no-such-channel"][..],
            "no-such-channel",
        ),
        (&["list", "--session", "12abc"][..], "12abc"),
        (&["list", "--user", "not-a-user"][..], "not-a-user"),
        (&["forget", "--user", "-5", "--key", "k"][..], "-5"),
        (&["forget", "--session", &ops, "--key", ""][..], "key"),
        (
            &["forget", "--session", &ops, "--key", &"k".repeat(500)][..],
            "key",
        ),
        (&["list", "--session", &ops, "--user", "1"][..], "--user"),
        (&["forget", "--key", "k"][..], "--session"),
    ] {
        let refused = operator(&sb, args);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success() && stderr.contains(says) && !stderr.contains("panicked"),
            "{args:?}: {refused:?}"
        );
    }

    // memory.search finds notes by every word of the query, any case: the session's, and a
    // user's only when one is named (outside a run).
    let search = |query: &str, user: Option<u64>| {
        let mut args = vec![
            "memory.search".to_owned(),
            format!("--query={query}"),
            format!("--session-id={ops}"),
            "--output=json".to_owned(),
        ];
        args.extend(user.map(|u| format!("--user-id={u}")));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let found = sb.tools(&args);
        assert_eq!(found.code, Some(0), "{query}: {found:?}");
        found.json()["notes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| n["key"].as_str().unwrap_or_default().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(search("KEYSTONE-7 release", None), ["release-config"]);
    assert!(search("keystone nowhere", None).is_empty());
    assert!(
        search("she/her", None).is_empty(),
        "a user's notes only when named"
    );
    assert_eq!(search("she/her", Some(demo::STANLEY)), ["pronouns"]);
    for garbage in ["--query= ", &format!("--query={}", "q".repeat(201))] {
        let refused = sb.tools(&["memory.search", garbage, &format!("--session-id={ops}")]);
        assert!(
            refused.code != Some(0) && refused.stderr.contains("query must be 1 to 200"),
            "{refused:?}"
        );
    }

    // The operator reads and forgets it through the same callables.
    let read = sb.tools(&[
        "memory.read",
        "--scope=session",
        &format!("--session-id={ops}"),
    ]);
    assert_eq!(read.code, Some(0), "{read:?}");
    assert!(read.stdout.contains(NOTE), "{read:?}");
    let forgot = sb.tools(&[
        "memory.forget",
        "--scope=session",
        "--key=release-config",
        &format!("--session-id={ops}"),
    ]);
    assert_eq!(forgot.code, Some(0), "{forgot:?}");
    assert!(forgot.stdout.contains("true"), "{forgot:?}");
    let read = sb.tools(&[
        "memory.read",
        "--scope=session",
        &format!("--session-id={ops}"),
    ]);
    assert!(!read.stdout.contains(NOTE), "{read:?}");

    // Garbage is refused with what to do.
    let empty_key = sb.tools(&[
        "memory.write",
        "--scope=session",
        "--key= ",
        "--text=x",
        &format!("--session-id={ops}"),
    ]);
    assert_ne!(empty_key.code, Some(0), "{empty_key:?}");
    assert!(
        empty_key.stderr.contains("key must be 1 to 64"),
        "{empty_key:?}"
    );
    let too_long = "x".repeat(4_001);
    let long = sb.tools(&[
        "memory.write",
        "--scope=session",
        "--key=k",
        &format!("--text={too_long}"),
        &format!("--session-id={ops}"),
    ]);
    assert!(long.stderr.contains("agent.memory_max_chars"), "{long:?}");
    let bad_scope = sb.tools(&[
        "memory.read",
        "--scope=channel",
        &format!("--session-id={ops}"),
    ]);
    assert_ne!(bad_scope.code, Some(0), "{bad_scope:?}");
    let no_user = sb.tools(&[
        "memory.read",
        "--scope=user",
        &format!("--session-id={ops}"),
    ]);
    assert!(no_user.stderr.contains("needs userId"), "{no_user:?}");
}

#[test]
fn notes_past_their_share_of_the_budget_are_left_out_and_the_run_still_answers() {
    let model = FakeModel::start(|_| text("Answered within the budget."));
    let fake = Fake::start();
    let dir = TempDir::new("memory-over-budget");
    // A budget of 3,000 tokens a request, a scope that may hold 100,000 characters.
    let config = config(&model).replace(
        "timeout_s = 15\n",
        "timeout_s = 15\ncontext_tokens = 4000\nanswer_tokens = 1000\nmemory_max_chars = 100000\ncontext_messages = 1\n",
    );
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &config);
    let ops = demo::OPS.to_string();
    // Twelve notes of 640 characters: more tokens than a request may carry.
    let counter = switchboard_context::Tiktoken::for_model("fake-model");
    let mut written_tokens = 0;
    for n in 0..12 {
        let text: String = (0..80).map(|i| format!("n{n}w{i:03} ")).collect();
        written_tokens += switchboard_context::TokenCounter::count(&counter, &text);
        let written = sb.tools(&[
            "memory.write",
            "--scope=session",
            &format!("--key=note-{n:02}"),
            &format!("--text={text}"),
            &format!("--session-id={ops}"),
        ]);
        assert_eq!(written.code, Some(0), "{written:?}");
    }
    assert!(written_tokens > 3_000, "{written_tokens} tokens of notes");
    let trigger = fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} status?"));
    let reply = reply_to(&fake, &sb, demo::OPS, &trigger);
    assert_eq!(reply["content"], "Answered within the budget.", "{reply}");
    let prompt = system(&model.requests()[0]);
    assert!(
        prompt.contains("- note-00: n0w000"),
        "the first notes are listed: {prompt}"
    );
    assert!(!prompt.contains("note-11"), "not all of them: {prompt}");
    assert!(
        prompt.contains("not listed here for lack of room; memory.read"),
        "the prompt says some were left out: {prompt}"
    );
    let notes_tokens = switchboard_context::TokenCounter::count(
        &counter,
        &prompt[prompt.find("Notes you kept").unwrap()..],
    );
    assert!(
        notes_tokens <= 750,
        "a quarter of the 3,000: {notes_tokens}"
    );
}
