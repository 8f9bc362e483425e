//! Streamed replies end to end: the real switchboard with `runner = "openai"` against a fake
//! model that streams its answer (server-sent events, tokens with delays), and a command agent
//! that prints `progress:` lines. The draft is posted after the first text, edited at most once
//! per `agent.stream_interval_ms`, and becomes the answer in place; a long answer follows as
//! new messages instead.

mod support;

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_discord::demo;
use serde_json::{json, Value};
use support::{command_agent, poll, script, Allow, Fake, Switchboard, TempDir};

const WAIT: Duration = Duration::from_secs(20);

/// One streamed answer: events sent `delay` apart.
#[derive(Clone)]
struct Streamed {
    events: Vec<Value>,
    delay: Duration,
}

fn text_events(tokens: &[&str]) -> Vec<Value> {
    tokens
        .iter()
        .map(|t| json!({"choices": [{"index": 0, "delta": {"content": t}}]}))
        .collect()
}

/// A fake OpenAI-compatible server on loopback that streams: request N gets answer N (the last
/// one again past the end). Plain blocking sockets on their own threads, every one bounded.
struct StreamingModel {
    base_url: String,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl StreamingModel {
    fn start(answers: Vec<Streamed>) -> StreamingModel {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming().take(64) {
                let Ok(stream) = stream else { continue };
                let seen = Arc::clone(&seen);
                let answers = answers.clone();
                std::thread::spawn(move || serve(stream, &seen, &answers));
            }
        });
        StreamingModel {
            base_url: format!("http://{addr}/v1"),
            requests,
        }
    }

    fn requests(&self) -> Vec<Value> {
        self.requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

fn serve(mut stream: TcpStream, seen: &Mutex<Vec<Value>>, answers: &[Streamed]) {
    let Some(request) = support::read_json_request(&stream) else {
        return;
    };
    let index = {
        let mut seen = seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.push(request);
        seen.len() - 1
    };
    let answer = &answers[index.min(answers.len() - 1)];
    let _ = stream.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n",
    );
    for event in &answer.events {
        std::thread::sleep(answer.delay);
        if stream
            .write_all(format!("data: {event}\n\n").as_bytes())
            .is_err()
        {
            return;
        }
        let _ = stream.flush();
    }
    let _ = stream.write_all(b"data: [DONE]\n\n");
}

fn openai_agent(model: &StreamingModel, extra: &str) -> String {
    format!(
        "[agent]\nrunner = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\ntimeout_s = 15\nstream_interval_ms = 250\n{extra}",
        model.base_url
    )
}

/// Requests to the channel's messages (posts) and to its messages' ids (edits, deletes).
fn channel_requests(fake: &Fake, method: &str, channel: u64) -> Vec<Value> {
    let prefix = format!("/api/v10/channels/{channel}/messages");
    fake.fake
        .requests()
        .into_iter()
        .filter(|r| r.method == method && r.path.starts_with(&prefix) && r.status < 300)
        .map(|r| r.body.unwrap_or(Value::Null))
        .collect()
}

#[test]
fn a_streamed_answer_is_a_draft_edited_in_place_with_tool_progress_first() {
    let tokens = [
        "The ", "release ", "is ", "green: ", "all ", "checks ", "passed ", "today.",
    ];
    let model = StreamingModel::start(vec![
        Streamed {
            events: vec![
                json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "surface__messages__list", "arguments": ""}}]}}]}),
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"sessionId\":"}}]}}]}),
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"#ops\"}"}}]}}]}),
            ],
            delay: Duration::from_millis(20),
        },
        Streamed {
            events: text_events(&tokens),
            delay: Duration::from_millis(300),
        },
    ]);
    let fake = Fake::start();
    let dir = TempDir::new("stream-edit");
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &openai_agent(&model, ""),
    );
    let trigger = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("<@{}> how is the release?", demo::BOT),
    );
    let full = tokens.concat();
    let reply = poll("the final answer", WAIT, || {
        support::bot_posts(&fake, demo::OPS).into_iter().find(|m| {
            m["message_reference"]["message_id"] == trigger.as_str()
                && m["content"] == full.as_str()
        })
    });
    assert_eq!(
        support::bot_posts(&fake, demo::OPS)
            .iter()
            .filter(|m| m["message_reference"]["message_id"] == trigger.as_str())
            .count(),
        1,
        "one message, edited in place: {}",
        sb.stderr()
    );
    assert!(reply["edited_timestamp"].is_string());
    let posts = channel_requests(&fake, "POST", demo::OPS);
    let draft = posts
        .iter()
        .find(|b| b["message_reference"]["message_id"] == trigger.as_str())
        .expect("the draft was posted as a reply");
    let draft_text = draft["content"].as_str().unwrap_or_default();
    assert!(
        draft_text.contains(&format!("using surface.messages.list in <#{}>", demo::OPS)),
        "the first thing shown is the tool call's progress: {draft_text}"
    );
    assert_eq!(
        draft["allowed_mentions"]["parse"],
        json!([]),
        "a draft pings nobody"
    );
    let edits = channel_requests(&fake, "PATCH", demo::OPS);
    // 8 tokens 300 ms apart at most one edit per 250 ms: partial texts, then the answer.
    assert!(
        edits.len() >= 3,
        "the draft grows as text arrives: {edits:?}"
    );
    assert!(
        edits.len() <= tokens.len() + 2,
        "never more edits than states: {edits:?}"
    );
    let partial = edits
        .iter()
        .filter_map(|b| b["content"].as_str())
        .any(|c| c.starts_with("The release") && c != full);
    assert!(partial, "a partial text was shown: {edits:?}");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r["stream"] == true));
}

#[test]
fn a_long_streamed_answer_follows_as_new_messages_and_the_draft_goes() {
    let word = "word ".repeat(100);
    let chunks: Vec<&str> = std::iter::repeat_n(word.as_str(), 6).collect();
    let model = StreamingModel::start(vec![Streamed {
        events: text_events(&chunks),
        delay: Duration::from_millis(100),
    }]);
    let fake = Fake::start();
    let dir = TempDir::new("stream-long");
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &openai_agent(&model, ""),
    );
    let trigger = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("<@{}> write a lot", demo::BOT),
    );
    poll("the answer's parts", WAIT, || {
        let replies: Vec<Value> = support::bot_posts(&fake, demo::OPS)
            .into_iter()
            .filter(|m| m["message_reference"]["message_id"] == trigger.as_str())
            .collect();
        let total: usize = support::bot_posts(&fake, demo::OPS)
            .iter()
            .map(|m| m["content"].as_str().unwrap_or_default().len())
            .sum();
        (replies.len() == 1 && total >= 2_900).then_some(())
    });
    let deletes = fake
        .fake
        .requests()
        .into_iter()
        .filter(|r| {
            r.method == "DELETE"
                && r.path.contains(&demo::OPS.to_string())
                && !r.path.contains("/reactions/")
        })
        .count();
    assert_eq!(deletes, 1, "the draft was removed: {}", sb.stderr());
}

#[test]
fn stream_off_posts_once_and_a_commands_progress_lines_update_a_status_line() {
    let model = StreamingModel::start(vec![Streamed {
        events: text_events(&["all ", "quiet"]),
        delay: Duration::from_millis(50),
    }]);
    let fake = Fake::start();
    let dir = TempDir::new("stream-off");
    let sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &openai_agent(&model, "stream = \"off\""),
    );
    let trigger = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("<@{}> status", demo::BOT),
    );
    poll("the answer", WAIT, || {
        support::bot_posts(&fake, demo::OPS)
            .into_iter()
            .find(|m| m["message_reference"]["message_id"] == trigger.as_str())
    });
    assert!(channel_requests(&fake, "PATCH", demo::OPS).is_empty());
    assert!(
        model.requests().iter().all(|r| r["stream"].is_null()),
        "off asks for no stream"
    );
    drop(sb);

    // A command agent's `progress:` lines.
    let fake = Fake::start();
    let dir = TempDir::new("stream-progress");
    let agent = script(
        dir.path(),
        "agent.sh",
        "#!/bin/sh\ncat >/dev/null\necho 'progress: reading #ops' >&2\nsleep 1\necho 'progress: writing' >&2\nsleep 1\necho 'All quiet.'\n",
    );
    let _sb = Switchboard::start_with(
        &fake,
        dir.path(),
        &Allow::default(),
        &command_agent(&agent, dir.path(), 20, "stream_interval_ms = 250"),
    );
    let trigger = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("<@{}> status", demo::BOT),
    );
    poll("the answer in place of the status line", WAIT, || {
        support::bot_posts(&fake, demo::OPS).into_iter().find(|m| {
            m["message_reference"]["message_id"] == trigger.as_str() && m["content"] == "All quiet."
        })
    });
    let shown: Vec<String> = channel_requests(&fake, "POST", demo::OPS)
        .into_iter()
        .chain(channel_requests(&fake, "PATCH", demo::OPS))
        .filter_map(|b| b["content"].as_str().map(str::to_owned))
        .collect();
    assert!(
        shown
            .iter()
            .any(|c| c == &format!("_reading <#{}>…_", demo::OPS)),
        "the first progress line: {shown:?}"
    );
    assert!(
        shown.iter().any(|c| c == "_writing…_"),
        "the status line was updated: {shown:?}"
    );
}
