//! The built-in `openai` runner's token budget end to end (issue 25 §1, §2): every request
//! the scripted model receives, counted with the runner's own tokenizer, fits
//! `agent.context_tokens − agent.answer_tokens`; older tool results are pruned to make it fit
//! (never the two most recent turns, never `agent.protected_tools`); when that is not enough
//! the older part is compacted (a dedicated request, the identifier guard, the summary stored
//! and starting the next run's prompt); a request that cannot fit fails the run with the
//! reason and is never sent.

#[path = "support/events.rs"]
mod events;
#[path = "support/model.rs"]
mod model;
mod support;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use events::{next_event, subscribe, Received};
use fake_discord::demo;
use model::{messages, text, tool_call, FakeModel};
use serde_json::{json, Value};
use support::console::ConsoleLogin;
use support::{reply_to, Allow, Fake, Switchboard, TempDir};
use switchboard_context::{count_chat, Tiktoken};

const BOT_MENTION: &str = "<@1000000000000000001>";
const RUN_TIMEOUT: Duration = Duration::from_secs(20);
const PRUNED: &str = "[output pruned: ";

/// Text of `chars` characters that tokenizes like prose with identifiers (no repeats the
/// tokenizer could merge), the same for the same seed.
fn filler(seed: u64, chars: usize) -> String {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let mut out = String::new();
    while out.len() < chars {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        out.push_str(&format!("deploy-{:05} ", (state >> 33) % 100_000));
    }
    out.truncate(chars);
    out
}

/// The tools these runs may call: what the scripted model calls, and a known schema cost.
const SCOPE: &str = "tool_scope = [\"surface.messages.*\"]\n";

fn agent_config(
    model: &FakeModel,
    context_tokens: usize,
    answer_tokens: usize,
    extra: &str,
) -> String {
    format!(
        "[agent]\nrunner = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\nsystem_prompt = \"You are the context test agent.\"\nmax_tool_rounds = 8\ntimeout_s = 15\ncontext_messages = 5\nstream = \"off\"\nerror_reply = \"agent failed: {{reason}}\"\ncontext_tokens = {context_tokens}\nanswer_tokens = {answer_tokens}\n{extra}",
        model.base_url
    )
}

/// The first words of the compaction request's system prompt.
const COMPACTION: &str = "You compact a Discord conversation";
/// The first line of the summary's message in a chat request.
const SUMMARY_HEADER: &str = "Summary of the earlier conversation";

/// Whether a recorded request is a compaction request (not a turn of the chat).
fn is_compaction(request: &Value) -> bool {
    messages(request)
        .first()
        .and_then(|m| m["content"].as_str())
        .is_some_and(|c| c.starts_with(COMPACTION))
}

/// A well-formed summary that names nothing: what a careless model writes.
fn careless_summary() -> (u16, Value) {
    text("## Decisions\n- none\n## Open questions\n- none\n## Facts\n- a long release discussion\n## Who asked what\n- several people posted notes")
}

/// The tokens of a request the model received, as the runner counts them.
fn tokens(request: &Value) -> usize {
    let counter = Tiktoken::for_model("fake-model");
    let tools = request["tools"].as_array().cloned().unwrap_or_default();
    count_chat(&counter, messages(request), &tools)
}

/// Asks the bot in #ops (Stanley mentions it) and waits for its reply.
fn ask(fake: &Fake, sb: &Switchboard, words: &str) -> Value {
    let trigger = fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} {words}"));
    reply_to(fake, sb, demo::OPS, &trigger)
}

/// The feed's `context.pruned` events, subscribed before a run starts.
fn pruned_events(sb: &Switchboard) -> mpsc::Receiver<Received> {
    let feed = subscribe(&sb.url, &sb.token, "?types=context.pruned");
    // The subscription is served before the run publishes anything.
    std::thread::sleep(Duration::from_millis(300));
    feed
}

/// The tool results of a request by call id: (call id, content).
fn results(request: &Value) -> Vec<(String, String)> {
    messages(request)
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or_default().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Serves the operator console beside the tool server.
const CONSOLE: &str = "console = true\n";

/// A session's memory as the console's Scopes view reads it, logged in with the operator
/// token as the page is (`GET /console/api/sessions/{id}/memory`).
fn console_memory(sb: &Switchboard, session: u64) -> Value {
    ConsoleLogin::new(&sb.url, &sb.token).get(&format!("sessions/{session}/memory"))
}

/// Posts `count` long messages in #release-room and waits until switchboard has them.
fn long_messages(fake: &Fake, sb: &Switchboard, count: u64) -> Vec<String> {
    let ids: Vec<String> = (0..count)
        .map(|i| fake.post(demo::RELEASE_ROOM, demo::TOMAS, &filler(i, 1_900)))
        .collect();
    sb.wait_listed("release-room", &ids, RUN_TIMEOUT);
    ids
}

#[test]
fn a_long_tool_loop_prunes_older_results_and_every_request_fits_the_budget() {
    const ROUNDS: usize = 6;
    let (context_tokens, answer_tokens) = (9_000, 1_000);
    let limit = context_tokens - answer_tokens;
    let model = FakeModel::start(|requests| {
        let n = requests.len();
        if n <= ROUNDS {
            tool_call(
                &format!("call_{n}"),
                "surface__messages__list",
                r##"{"sessionId":"#release-room","limit":3}"##,
            )
        } else {
            text("Read them all.")
        }
    });
    let fake = Fake::start();
    let dir = TempDir::new("context-prune");
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &agent_config(&model, context_tokens, answer_tokens, SCOPE),
    );
    long_messages(&fake, &sb, 3);
    let feed = pruned_events(&sb);
    let reply = ask(&fake, &sb, "read the release room again and again");
    assert_eq!(reply["content"], "Read them all.", "{reply}");

    let requests = model.requests();
    assert_eq!(requests.len(), ROUNDS + 1, "every round reached the model");
    // Each result, whole, as the request right after its round carried it.
    let whole: Vec<(String, String)> = (1..=ROUNDS)
        .map(|n| {
            let (id, content) = results(&requests[n]).pop().expect("the newest result");
            assert_eq!(id, format!("call_{n}"));
            assert!(
                content.starts_with("{\"ok\":true"),
                "the newest result is whole: {content}"
            );
            (id, content)
        })
        .collect();
    let mut pruned_somewhere = false;
    for (index, request) in requests.iter().enumerate() {
        let sent = tokens(request);
        assert!(
            sent <= limit,
            "request {index} carries {sent} tokens, over the {limit} of the budget"
        );
        let results = results(request);
        assert_eq!(
            results.len(),
            index,
            "request {index}: one result per earlier round"
        );
        for (position, (id, content)) in results.iter().enumerate() {
            let recent = position + 2 >= results.len();
            if recent {
                assert!(
                    content.starts_with("{\"ok\":true"),
                    "request {index}: {id} is one of the two most recent turns and stays whole: {content}"
                );
            } else if content.starts_with(PRUNED) {
                pruned_somewhere = true;
                let original = &whole[position].1;
                assert!(
                    content.starts_with(&format!(
                        "{PRUNED}{} chars] (ran at ",
                        original.chars().count()
                    )),
                    "the marker keeps the size and the timing: {content}"
                );
            }
        }
        // The calls of pruned results keep their name and arguments.
        for message in messages(request)
            .iter()
            .filter(|m| m["role"] == "assistant")
        {
            if let Some(calls) = message["tool_calls"].as_array() {
                for call in calls {
                    assert_eq!(
                        call["function"]["name"], "surface__messages__list",
                        "{call}"
                    );
                    assert!(
                        call["function"]["arguments"]
                            .as_str()
                            .is_some_and(|a| a.contains("#release-room")),
                        "{call}"
                    );
                }
            }
        }
    }
    assert!(pruned_somewhere, "older results were pruned");

    // Without pruning, the last request would not have fitted.
    let mut unpruned = requests[ROUNDS].clone();
    for message in unpruned["messages"].as_array_mut().expect("messages") {
        if message["role"] == "tool" {
            let id = message["tool_call_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let original = whole.iter().find(|(w, _)| *w == id).expect("a known call");
            message["content"] = json!(original.1);
        }
    }
    let unpruned_tokens = tokens(&unpruned);
    assert!(
        unpruned_tokens > limit,
        "the loop overflows without pruning: {unpruned_tokens} tokens against {limit}"
    );

    let event = next_event(&feed, "context.pruned", RUN_TIMEOUT);
    assert_eq!(event["session"], demo::OPS.to_string(), "{event}");
    let (before, after) = (
        event["beforeTokens"].as_u64().expect("beforeTokens"),
        event["afterTokens"].as_u64().expect("afterTokens"),
    );
    assert!(
        before > limit as u64 && after <= limit as u64 && after < before,
        "{event}"
    );
    assert!(event["prunedResults"].as_u64() >= Some(1), "{event}");
}

#[test]
fn protected_tools_keep_their_results_while_others_are_pruned() {
    const ROUNDS: usize = 6;
    // Lists take about 1,400 tokens each, reads 770: the last request needs about 7,300.
    let (context_tokens, answer_tokens) = (7_000, 1_000);
    let limit = context_tokens - answer_tokens;
    let fake = Fake::start();
    let dir = TempDir::new("context-protected");
    // Odd rounds list (protected), even rounds read one long message (not protected).
    let read_target = std::sync::Arc::new(std::sync::OnceLock::<String>::new());
    let target = std::sync::Arc::clone(&read_target);
    let model = FakeModel::start(move |requests| {
        let n = requests.len();
        if n > ROUNDS {
            return text("Done.");
        }
        if n % 2 == 1 {
            tool_call(
                &format!("call_{n}"),
                "surface__messages__list",
                r##"{"sessionId":"#release-room","limit":2}"##,
            )
        } else {
            let id = target.get().cloned().unwrap_or_default();
            tool_call(
                &format!("call_{n}"),
                "surface__messages__read",
                &format!(r##"{{"sessionId":"#release-room","messageId":"{id}"}}"##),
            )
        }
    });
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &agent_config(
            &model,
            context_tokens,
            answer_tokens,
            &format!("{SCOPE}protected_tools = [\"surface.messages.list\"]\n"),
        ),
    );
    let ids = long_messages(&fake, &sb, 2);
    read_target.set(ids[0].clone()).expect("set once");
    let reply = ask(&fake, &sb, "compare them");
    assert_eq!(reply["content"], "Done.", "{reply}");

    let requests = model.requests();
    assert_eq!(requests.len(), ROUNDS + 1);
    let mut pruned_reads = 0;
    for (index, request) in requests.iter().enumerate() {
        let sent = tokens(request);
        assert!(sent <= limit, "request {index}: {sent} tokens over {limit}");
        for (id, content) in results(request) {
            let round: usize = id.trim_start_matches("call_").parse().expect("call_N");
            if round % 2 == 1 {
                assert!(
                    content.starts_with("{\"ok\":true"),
                    "request {index}: {id} is surface.messages.list, protected, never pruned: {content}"
                );
            } else if content.starts_with(PRUNED) {
                pruned_reads += 1;
            }
        }
    }
    assert!(pruned_reads > 0, "the unprotected reads gave way");
}

#[test]
fn a_request_that_cannot_fit_fails_the_run_with_the_reason_and_is_never_sent() {
    let model = FakeModel::start(|_| text("never asked"));
    let fake = Fake::start();
    let dir = TempDir::new("context-too-big");
    let (context_tokens, answer_tokens) = (1_000, 500);
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &agent_config(
            &model,
            context_tokens,
            answer_tokens,
            "tool_scope = [\"surface.help\"]\n",
        ),
    );
    let long = filler(7, 1_900);
    let counter = Tiktoken::for_model("fake-model");
    let trigger_tokens = switchboard_context::TokenCounter::count(&counter, &long);
    assert!(
        trigger_tokens > context_tokens - answer_tokens,
        "the trigger alone ({trigger_tokens} tokens) is over the budget"
    );
    let reply = ask(&fake, &sb, &long);
    let content = reply["content"].as_str().unwrap_or_default();
    assert!(
        content.starts_with("agent failed: the request does not fit agent.context_tokens: the two most recent turns take"),
        "the reason says what does not fit: {content}"
    );
    assert!(content.contains("of the 500 tokens"), "{content}");
    assert!(model.requests().is_empty(), "nothing was sent to the model");
}

#[test]
fn protected_results_that_outgrow_the_budget_fail_the_run_when_their_compaction_fails() {
    let model = FakeModel::start(|requests| {
        let n = requests.len();
        if requests.last().is_some_and(is_compaction) {
            return (500, json!({"error": {"message": "the summariser is down"}}));
        }
        tool_call(
            &format!("call_{n}"),
            "surface__messages__list",
            r##"{"sessionId":"#release-room","limit":3}"##,
        )
    });
    let fake = Fake::start();
    let dir = TempDir::new("context-rounds");
    let (context_tokens, answer_tokens) = (9_000, 1_000);
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &agent_config(
            &model,
            context_tokens,
            answer_tokens,
            &format!("{SCOPE}protected_tools = [\"surface.messages.*\"]\n"),
        ),
    );
    long_messages(&fake, &sb, 3);
    let reply = ask(&fake, &sb, "keep reading");
    let content = reply["content"].as_str().unwrap_or_default();
    assert!(
        content.starts_with("agent failed: this run's tool results do not fit agent.context_tokens (8000 tokens a request may carry)"),
        "{content}"
    );
    let requests = model.requests();
    assert!(
        requests.iter().any(is_compaction),
        "a compaction was tried first"
    );
    assert!(
        (2..=8).contains(&requests.len()),
        "it stopped when the rounds outgrew the budget: {}",
        requests.len()
    );
    for request in &requests {
        assert!(tokens(request) <= context_tokens - answer_tokens);
        for (id, content) in results(request) {
            assert!(!content.starts_with(PRUNED), "{id} is protected: {content}");
        }
    }
}

#[test]
fn older_transcript_messages_are_summarised_when_the_history_does_not_fit() {
    let model = FakeModel::start(|requests| {
        if requests.last().is_some_and(is_compaction) {
            text("## Decisions\n- none\n## Open questions\n- none\n## Facts\n- notes 0 to 3 were release notes\n## Who asked what\n- nothing asked")
        } else {
            text("Caught up.")
        }
    });
    let fake = Fake::start();
    let dir = TempDir::new("context-history");
    let (context_tokens, answer_tokens) = (8_000, 1_000);
    let limit = context_tokens - answer_tokens;
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &agent_config(
            &model,
            context_tokens,
            answer_tokens,
            "tool_scope = [\"surface.help\"]\ncontext_messages = 20\n",
        )
        .replace("context_messages = 5\n", ""),
    );
    let history: Vec<String> = (0..14)
        .map(|i| {
            fake.post(
                demo::OPS,
                demo::TOMAS,
                &format!("note {i}: {}", filler(100 + i, 1_800)),
            )
        })
        .collect();
    sb.wait_listed("ops", &history, RUN_TIMEOUT);
    let feed = pruned_events(&sb);
    let reply = ask(&fake, &sb, "catch me up");
    assert_eq!(reply["content"], "Caught up.", "the run answers: {reply}");

    let (compactions, requests): (Vec<Value>, Vec<Value>) =
        model.requests().into_iter().partition(is_compaction);
    assert!(!compactions.is_empty(), "the older part was compacted");
    assert_eq!(requests.len(), 1);
    let sent = tokens(&requests[0]);
    assert!(sent <= limit, "{sent} tokens over {limit}");
    let contents: Vec<&str> = messages(&requests[0])
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        contents.last().is_some_and(|c| c.ends_with("catch me up")),
        "the trigger is last: {contents:?}"
    );
    assert!(
        contents.iter().any(|c| c.contains("note 13: ")),
        "the newest history message is kept"
    );
    assert!(
        !contents.iter().any(|c| c.contains("note 0: ")),
        "the oldest history message is left out"
    );
    assert!(
        contents
            .iter()
            .any(|c| c.starts_with(SUMMARY_HEADER) && c.contains("notes 0 to 3 were release notes")),
        "its summary takes its place: {contents:?}"
    );
    let event = next_event(&feed, "context.pruned", RUN_TIMEOUT);
    assert!(event["droppedMessages"].as_u64() >= Some(1), "{event}");
    assert!(
        event["afterTokens"].as_u64() <= Some(limit as u64),
        "{event}"
    );
}

/// The acceptance run of issue 25 §2: a 300-message channel history and a 12-round tool loop
/// with large results. Every request fits; older results are pruned before anything is
/// compacted; a compaction request happens; a careless summary that loses the path the
/// trigger asks about is retried with the path listed, then the path is appended by the
/// guard; the summary is stored and starts the next run's prompt, after a restart.
#[test]
fn a_long_session_is_pruned_then_compacted_and_its_guarded_summary_starts_the_next_run() {
    const ROUNDS: usize = 12;
    const HISTORY: u64 = 300;
    const PATH: &str = "/srv/release/keystone-7.toml";
    let (context_tokens, answer_tokens) = (15_000, 2_000);
    let limit = context_tokens - answer_tokens;
    let first_run = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let script_run = std::sync::Arc::clone(&first_run);
    let model = FakeModel::start(move |requests| {
        let last = requests.last().expect("the current request");
        if is_compaction(last) {
            return careless_summary();
        }
        if !script_run.load(std::sync::atomic::Ordering::SeqCst) {
            return text("Picked up where we were.");
        }
        let round = requests.iter().filter(|r| !is_compaction(r)).count();
        // Three small reads, then large ones: pruning alone is enough at first.
        let limit = if round <= 3 { 2 } else { 5 };
        if round <= ROUNDS {
            tool_call(
                &format!("call_{round}"),
                "surface__messages__list",
                &format!(r##"{{"sessionId":"#release-room","limit":{limit}}}"##),
            )
        } else {
            text("Checked everything.")
        }
    });
    let fake = Fake::start();
    let dir = TempDir::new("context-compaction");
    let config = agent_config(
        &model,
        context_tokens,
        answer_tokens,
        &format!("{SCOPE}max_tool_rounds = {ROUNDS}\ncontext_messages = 400\n"),
    )
    .replace("context_messages = 5\n", "")
    .replace("max_tool_rounds = 8\n", "")
    .replace("timeout_s = 15", "timeout_s = 60");
    let sb = Switchboard::start_full(&fake, dir.path(), &Allow::default(), CONSOLE, &config);
    long_messages(&fake, &sb, 5);
    let mut history = vec![fake.post(
        demo::OPS,
        demo::TOMAS,
        &format!("the release config lives at {PATH}"),
    )];
    for i in 1..HISTORY {
        history.push(fake.post(demo::OPS, demo::TOMAS, &format!("status {i} ok")));
    }
    sb.wait_listed("ops", &history[history.len() - 1..], RUN_TIMEOUT);
    let feed = subscribe(
        &sb.url,
        &sb.token,
        "?types=context.pruned,context.compacted",
    );
    std::thread::sleep(Duration::from_millis(300));
    let trigger = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} check {PATH} against the release room, round after round"),
    );
    let reply = reply_to(&fake, &sb, demo::OPS, &trigger);
    assert_eq!(reply["content"], "Checked everything.", "{reply}");

    let requests = model.requests();
    for (index, request) in requests.iter().enumerate() {
        let sent = tokens(request);
        assert!(
            sent <= limit,
            "request {index} carries {sent} tokens, over the {limit} of the budget"
        );
    }
    let chat: Vec<&Value> = requests.iter().filter(|r| !is_compaction(r)).collect();
    assert_eq!(chat.len(), ROUNDS + 1, "every round reached the model");
    assert!(
        chat[0].to_string().contains("status 1 ok"),
        "the first request holds the whole history"
    );
    let first_compaction = requests
        .iter()
        .position(is_compaction)
        .expect("a compaction request happens");
    assert!(
        requests[..first_compaction]
            .iter()
            .any(|r| results(r).iter().any(|(_, c)| c.starts_with(PRUNED))),
        "older results were pruned before anything was compacted"
    );
    // The careless summary lost the path: the retry names it.
    let retry = &requests[first_compaction + 1];
    assert!(is_compaction(retry), "the guard asked again");
    assert!(retry.to_string().contains(PATH), "the retry lists {PATH}");

    // The events: pruned first, then compacted, before and after counted.
    let mut kinds = Vec::new();
    let mut compacted = None;
    let deadline = Instant::now() + RUN_TIMEOUT;
    while compacted.is_none() && Instant::now() < deadline {
        if let Ok(Some((kind, data))) = feed.recv_timeout(Duration::from_secs(1)) {
            if kind == "context.compacted" {
                compacted = Some(data.clone());
            }
            kinds.push(kind);
        }
    }
    let compacted = compacted.unwrap_or_else(|| {
        panic!(
            "no context.compacted event ({kinds:?}); the log says:\n{}",
            sb.stderr()
                .lines()
                .filter(|l| l.contains("compact"))
                .collect::<Vec<_>>()
                .join("\n")
        )
    });
    assert_eq!(
        kinds.first().map(String::as_str),
        Some("context.pruned"),
        "{kinds:?}"
    );
    assert!(
        compacted["beforeTokens"].as_u64() > Some(limit as u64)
            && compacted["afterTokens"].as_u64() <= Some(limit as u64),
        "{compacted}"
    );
    assert!(
        compacted["keptByGuard"]
            .as_array()
            .is_some_and(|kept| kept.iter().any(|k| k == PATH)),
        "the guard kept the path: {compacted}"
    );
    // The request after the compaction carries the summary with the path restored.
    let summarised = requests[first_compaction..]
        .iter()
        .find(|r| !is_compaction(r))
        .expect("a request after the compaction");
    let summary = messages(summarised)
        .iter()
        .filter_map(|m| m["content"].as_str())
        .find(|c| c.starts_with(SUMMARY_HEADER))
        .expect("the summary is in the request")
        .to_owned();
    assert!(summary.contains(PATH), "{summary}");

    // The operator reads the stored summary.
    let read = sb.tools(&[
        "memory.summary",
        &format!("--session-id={}", demo::OPS),
        "--output=json",
    ]);
    assert_eq!(read.code, Some(0), "{read:?}");
    let stored_summary = read.json();
    assert!(
        stored_summary["summary"]
            .as_str()
            .is_some_and(|s| s.contains(PATH)),
        "{stored_summary}"
    );
    // The summarised messages stay in the store and in search.
    let found = sb.tools(&[
        "surface.messages.search",
        "--session-id=#ops",
        "--output=json",
        "keystone",
    ]);
    let found: Vec<String> = found.json()["results"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["message"]["messageId"].as_str().map(str::to_owned))
        .collect();
    assert!(
        found.contains(&history[0]),
        "the summarised message is still found: {found:?}"
    );
    // The console's Scopes view shows it.
    let shown = console_memory(&sb, demo::OPS);
    assert!(
        shown["summary"]["summary"]
            .as_str()
            .is_some_and(|s| s.contains(PATH) && s.contains("## Decisions")),
        "{shown}"
    );

    // The next run, after a restart, starts from the stored summary.
    drop(feed);
    sb.terminate(Duration::from_secs(10));
    first_run.store(false, std::sync::atomic::Ordering::SeqCst);
    let before = model.requests().len();
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &config);
    let again = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} where were we?"),
    );
    let reply = reply_to(&fake, &sb, demo::OPS, &again);
    assert_eq!(reply["content"], "Picked up where we were.", "{reply}");
    let next = &model.requests()[before..];
    let prompt = next
        .iter()
        .find(|r| !is_compaction(r))
        .expect("the next run's request");
    let stored = messages(prompt)
        .iter()
        .filter_map(|m| m["content"].as_str())
        .find(|c| c.starts_with(SUMMARY_HEADER))
        .unwrap_or_else(|| panic!("the stored summary starts the next prompt: {prompt}"));
    assert!(stored.contains(PATH), "{stored}");
    assert!(
        !messages(prompt)
            .iter()
            .filter_map(|m| m["content"].as_str())
            .filter(|c| !c.starts_with(SUMMARY_HEADER))
            .any(|c| c.contains("the release config lives at")),
        "the messages the summary covers are not listed again"
    );
}
