//! The OpenAI-compatible chat API (issue 26 §5): `GET /v1/models` lists the agents a named
//! token's scope grants; `POST /v1/chat/completions` with `model = "switchboard:NAME"` runs
//! that agent in the session the header names and answers its text (whole, or as chunk
//! events); a token without `agent:NAME` gets 403, and the run may call only what both the
//! token and the agent may.

#[path = "support/model.rs"]
mod model;
mod support;

use model::{messages, text, tool_call, tool_results, FakeModel};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use support::{http_send_within, venv_python, Allow, Fake, Sections, Switchboard, TempDir};

const WEBUI: &str = "webui-token-0123456789abcdef0123456789abcdef";
const OTHER: &str = "other-token-0123456789abcdef0123456789abcdef";

/// switchboard with these agents and tokens (`webui` and `other` read from their env).
fn boot(name: &str, agents: &str, tokens: &str) -> (Fake, TempDir, Switchboard) {
    let fake = Fake::start();
    let dir = TempDir::new(name);
    let sb = Switchboard::start_sections(
        &fake,
        dir.path(),
        &Allow::default(),
        Sections {
            toolserver: tokens,
            extra: agents,
            env: &[("WEBUI_TOKEN", WEBUI), ("OTHER_TOKEN", OTHER)],
            ..Sections::default()
        },
    );
    (fake, dir, sb)
}

fn start(model: &FakeModel, name: &str) -> (Fake, TempDir, Switchboard) {
    let extra = format!(
        r#"
[agents]
default = "support"

[agents.support]
runner = "openai"
base_url = "{url}"
model = "support-model"
system_prompt = "You are the support agent."
stream = "off"
tool_scope = ["surface.help", "surface.messages.*"]

[agents.release]
runner = "openai"
base_url = "{url}"
model = "release-model"
stream = "off"
"#,
        url = model.base_url
    );
    let toolserver = r#"
[[toolserver.tokens]]
name = "webui"
token_env = "WEBUI_TOKEN"
scope = ["agent:support", "surface.messages.*"]

[[toolserver.tokens]]
name = "other"
token_env = "OTHER_TOKEN"
scope = ["surface.help"]
"#;
    boot(name, &extra, toolserver)
}

fn send(sb: &Switchboard, method: &str, path: &str, token: &str, body: &str) -> (u16, String) {
    send_in(sb, method, path, token, Some("#ops"), body)
}

/// One request, in the session `session` names (the `x-switchboard-session-id` header), or
/// without the header; a chunked body is decoded.
fn send_in(
    sb: &Switchboard,
    method: &str,
    path: &str,
    token: &str,
    session: Option<&str>,
    body: &str,
) -> (u16, String) {
    let host = sb.url.trim_start_matches("http://").to_owned();
    let bearer = format!("Bearer {token}");
    let mut headers = vec![
        ("Host", host.as_str()),
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
    ];
    if let Some(session) = session {
        headers.push(("x-switchboard-session-id", session));
    }
    let (status, body) = http_send_within(
        &sb.url,
        method,
        path,
        &headers,
        body,
        Duration::from_secs(30),
    )
    .unwrap_or_else(|e| panic!("the request is answered: {e}\n{}", sb.stderr()));
    (status, dechunk(&body))
}

/// A `Transfer-Encoding: chunked` body decoded (a body that is not chunked comes back as is).
fn dechunk(raw: &str) -> String {
    let mut out = String::new();
    let mut rest = raw;
    loop {
        let Some((size, after)) = rest.split_once("\r\n") else {
            return raw.to_owned();
        };
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            return raw.to_owned();
        };
        if size == 0 {
            return out;
        }
        let Some(chunk) = after.get(..size) else {
            return raw.to_owned();
        };
        out.push_str(chunk);
        rest = after.get(size + 2..).unwrap_or("");
    }
}

#[test]
fn a_chat_completion_runs_the_agent_under_the_tokens_scope_and_others_get_403() {
    let model = FakeModel::start(|requests| {
        let request = requests.last().expect("the current request");
        match tool_results(request).pop() {
            None => tool_call("call_help", "surface__help", "{}"),
            Some((_, result)) => text(&format!(
                "help was {}",
                result["error"]["code"].as_str().unwrap_or("allowed")
            )),
        }
    });
    let (_fake, _dir, sb) = start(&model, "chat-api");

    let (status, body) = send(&sb, "GET", "/v1/models", WEBUI, "");
    assert_eq!(status, 200, "{body}");
    let models: Value = serde_json::from_str(&body).expect("json");
    let ids: Vec<&str> = models["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(ids, ["switchboard:support"], "{body}");

    let ask = json!({
        "model": "switchboard:support",
        "messages": [{"role": "user", "content": "What can you do?"}],
    })
    .to_string();
    let (status, body) = send(&sb, "POST", "/v1/chat/completions", WEBUI, &ask);
    assert_eq!(status, 200, "{body}\n{}", sb.stderr());
    let answer: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(answer["object"], "chat.completion");
    // The token may not call surface.help, so neither may the run it started.
    assert_eq!(
        answer["choices"][0]["message"]["content"], "help was out_of_scope",
        "{body}"
    );
    let first = &model.requests()[0];
    assert_eq!(first["model"], "support-model");
    let asked = messages(first).iter().any(|m| {
        m["content"]
            .as_str()
            .is_some_and(|c| c.contains("What can you do?"))
    });
    assert!(asked, "{first}");

    let streamed = json!({
        "model": "switchboard:support",
        "stream": true,
        "messages": [{"role": "user", "content": "again"}],
    })
    .to_string();
    let (status, body) = send(&sb, "POST", "/v1/chat/completions", WEBUI, &streamed);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("chat.completion.chunk"), "{body}");
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");

    // A token without agent:support, and an agent outside webui's grants: 403.
    let (status, body) = send(&sb, "POST", "/v1/chat/completions", OTHER, &ask);
    assert_eq!(status, 403, "{body}");
    let release = ask.replace("switchboard:support", "switchboard:release");
    let (status, body) = send(&sb, "POST", "/v1/chat/completions", WEBUI, &release);
    assert_eq!(status, 403, "{body}");
    let (status, body) = send(&sb, "GET", "/v1/models", OTHER, "");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).expect("json")["data"],
        json!([])
    );
    // Garbage is refused in OpenAI's error shape.
    let (status, body) = send(&sb, "POST", "/v1/chat/completions", WEBUI, "{not json");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("\"error\""), "{body}");
}

#[test]
fn the_official_openai_client_streams_a_completion_and_a_token_without_the_agent_gets_403() {
    let model = FakeModel::start(|_| text("streamed through the official client"));
    let (_fake, _dir, sb) = start(&model, "chat-openai-client");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/chat/client.py");
    let mut child = std::process::Command::new(venv_python())
        .arg(script)
        .arg(format!("{}/v1", sb.url))
        .arg(WEBUI)
        .arg(OTHER)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the Python client");
    let status = support::wait_bounded(&mut child, std::time::Duration::from_secs(120));
    let mut out = String::new();
    let mut err = String::new();
    if let Some(mut pipe) = child.stdout.take() {
        let _ = pipe.read_to_string(&mut out);
    }
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut err);
    }
    assert!(
        status.is_some_and(|s| s.success()),
        "the client failed: {status:?}\n{out}\n{err}\n{}",
        sb.stderr()
    );
    let seen: Value = serde_json::from_str(out.trim()).expect("one JSON line");
    assert_eq!(seen["models"], json!(["switchboard:support"]), "{seen}");
    assert_eq!(
        seen["text"], "streamed through the official client",
        "{seen}"
    );
    assert_eq!(seen["finish"], "stop", "{seen}");
    assert_eq!(seen["refused"], 403, "{seen}");
}

#[test]
fn without_a_session_header_the_run_works_in_the_tokens_api_session_listed_and_audited() {
    let model = FakeModel::start(|_| {
        let (status, mut body) = text("answered in my own session");
        body["usage"] = json!({"prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40});
        (status, body)
    });
    let (_fake, _dir, sb) = start(&model, "chat-api-session");
    let ask = json!({
        "model": "switchboard:support",
        "messages": [{"role": "user", "content": "hello"}],
    })
    .to_string();
    let (status, body) = send_in(&sb, "POST", "/v1/chat/completions", WEBUI, None, &ask);
    assert_eq!(status, 200, "{body}\n{}", sb.stderr());
    let answer: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "answered in my own session"
    );
    // The usage is the run's recorded usage: what the model reported.
    assert_eq!(
        answer["usage"],
        json!({"prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40}),
        "{body}"
    );

    // The operator's session list (what the console shows) has the token's API session.
    let sessions = sb.tools(&["surface.sessions.list", "--limit=1000"]).json();
    let api = sessions["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .find(|s| s["kind"] == "api")
        .unwrap_or_else(|| panic!("no API session listed: {sessions}"))
        .clone();
    assert_eq!(api["title"], "api:webui", "{api}");
    assert_eq!(api["reference"], "api:webui", "{api}");
    let api_id = api["channelId"].as_str().expect("id").to_owned();

    // The audit log has the completion, in that session, as the token, naming the run.
    let audit = sb.tools(&["audit.list", "--tool=chat.completions"]).json();
    let row = &audit["audit"][0];
    assert_eq!(row["caller"], "token:webui", "{audit}");
    assert_eq!(row["sessions"], json!([api_id]), "{audit}");
    assert_eq!(row["outcome"], "ok", "{audit}");
    assert!(
        row["run"].as_str().is_some_and(|r| r.starts_with("run-")),
        "{audit}"
    );
    // The same session again, by name in the header.
    let (status, body) = send_in(
        &sb,
        "POST",
        "/v1/chat/completions",
        WEBUI,
        Some("api:webui"),
        &ask,
    );
    assert_eq!(status, 200, "{body}");
    let audit = sb.tools(&["audit.list", "--tool=chat.completions"]).json();
    let sessions: Vec<&Value> = audit["audit"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| &r["sessions"])
        .collect();
    assert_eq!(sessions, [&json!([api_id]), &json!([api_id])], "{audit}");

    // Another token's API session is 403 and says which one is the caller's; a session that
    // names nothing is 400.
    let (status, body) = send_in(
        &sb,
        "POST",
        "/v1/chat/completions",
        WEBUI,
        Some("api:other"),
        &ask,
    );
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("session_not_allowed") && body.contains("api:webui"),
        "{body}"
    );
    let (status, body) = send_in(
        &sb,
        "POST",
        "/v1/chat/completions",
        WEBUI,
        Some(&api_id),
        &ask,
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = send_in(
        &sb,
        "POST",
        "/v1/chat/completions",
        WEBUI,
        Some("#no-such-channel"),
        &ask,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("unknown_session"), "{body}");
    assert_eq!(model.requests().len(), 3, "refused requests reach no model");
}

/// One step of a gated streamed answer: an event, or waiting until the test releases it.
#[derive(Clone)]
enum Step {
    Event(Value),
    Wait,
}

/// A streaming OpenAI-compatible server on loopback whose answers stop at [`Step::Wait`]
/// until the test releases them: request N gets answer N (the last again past the end).
/// Blocking sockets on their own threads, every wait bounded.
struct GatedModel {
    base_url: String,
    requests: Arc<Mutex<Vec<Value>>>,
    release: mpsc::Sender<()>,
}

impl GatedModel {
    fn start(answers: Vec<Vec<Step>>) -> GatedModel {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (release, gate) = mpsc::channel();
        let gate = Arc::new(Mutex::new(gate));
        let seen = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming().take(16) {
                let Ok(stream) = stream else { continue };
                let (seen, gate, answers) = (Arc::clone(&seen), Arc::clone(&gate), answers.clone());
                std::thread::spawn(move || serve_gated(stream, &seen, &gate, &answers));
            }
        });
        GatedModel {
            base_url: format!("http://{addr}/v1"),
            requests,
            release,
        }
    }

    fn requests(&self) -> Vec<Value> {
        self.requests.lock().expect("requests").clone()
    }
}

fn serve_gated(
    mut stream: TcpStream,
    seen: &Mutex<Vec<Value>>,
    gate: &Mutex<mpsc::Receiver<()>>,
    answers: &[Vec<Step>],
) {
    let Some(request) = support::read_json_request(&stream) else {
        return;
    };
    let index = {
        let mut seen = seen.lock().expect("requests");
        seen.push(request);
        seen.len() - 1
    };
    let answer = &answers[index.min(answers.len() - 1)];
    let _ = stream.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n",
    );
    for step in answer {
        match step {
            Step::Event(event) => {
                if stream
                    .write_all(format!("data: {event}\n\n").as_bytes())
                    .and_then(|()| stream.flush())
                    .is_err()
                {
                    return;
                }
            }
            Step::Wait => {
                let _ = gate
                    .lock()
                    .expect("gate")
                    .recv_timeout(Duration::from_secs(30));
            }
        }
    }
    let _ = stream.write_all(b"data: [DONE]\n\n");
}

fn content(text: &str) -> Step {
    Step::Event(json!({"choices": [{"index": 0, "delta": {"content": text}}]}))
}

/// A streamed chat completion being read: the `data:` events one at a time.
struct Reading {
    reader: BufReader<TcpStream>,
    /// The completion's id (`chatcmpl-<run id>`), once an event said it.
    id: String,
}

impl Reading {
    fn open(sb: &Switchboard, token: &str, body: &str) -> Reading {
        let addr = sb.url.trim_start_matches("http://");
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(15)))
            .expect("timeout");
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).expect("send");
        let mut reader = BufReader::new(stream);
        let mut status = String::new();
        reader.read_line(&mut status).expect("status line");
        assert!(status.contains(" 200 "), "{status}");
        Reading {
            reader,
            id: String::new(),
        }
    }

    /// The next `data:` event (`"[DONE]"` as a string); fails past the read timeout.
    fn next(&mut self) -> Value {
        for _ in 0..10_000 {
            let mut line = String::new();
            let read = self
                .reader
                .read_line(&mut line)
                .expect("the next event in time");
            assert!(read > 0, "the stream ended before [DONE]");
            if let Some(data) = line.trim_end().strip_prefix("data: ") {
                return if data == "[DONE]" {
                    json!("[DONE]")
                } else {
                    serde_json::from_str(data).expect("an event is JSON")
                };
            }
        }
        panic!("no event in 10000 lines");
    }

    /// Reads events until their text adds up to `want`: the text read.
    fn text_until(&mut self, want: &str) -> String {
        let mut text = String::new();
        for _ in 0..1_000 {
            let event = self.next();
            assert_ne!(event, json!("[DONE]"), "the stream ended at {text:?}");
            if let Some(id) = event["id"].as_str() {
                self.id = id.to_owned();
            }
            if let Some(delta) = event["choices"][0]["delta"]["content"].as_str() {
                text.push_str(delta);
            }
            if text.contains(want) {
                return text;
            }
        }
        panic!("{want:?} never came: {text:?}");
    }
}

fn gated_agents(model: &GatedModel, name: &str) -> (Fake, TempDir, Switchboard) {
    handoff_agents(&model.base_url, name)
}

/// switchboard whose `support` agent may hand off to `helper`, both on the model at `url`.
fn handoff_agents(url: &str, name: &str) -> (Fake, TempDir, Switchboard) {
    let extra = format!(
        r#"
[agents]
default = "support"

[agents.support]
runner = "openai"
base_url = "{url}"
model = "support-model"
tool_scope = ["surface.help", "surface.messages.*", "agent.handoff"]

[agents.helper]
runner = "openai"
base_url = "{url}"
model = "helper-model"
tool_scope = ["surface.help"]
"#
    );
    let toolserver = r#"
[[toolserver.tokens]]
name = "webui"
token_env = "WEBUI_TOKEN"
scope = ["agent:support", "surface.*", "agent.handoff"]

[[toolserver.tokens]]
name = "other"
token_env = "OTHER_TOKEN"
scope = ["agent:support"]
"#;
    boot(name, &extra, toolserver)
}

#[test]
fn a_streamed_completion_sends_the_models_text_as_it_comes_and_usage_last() {
    let model = GatedModel::start(vec![vec![
        content("Hel"),
        content("lo"),
        Step::Wait,
        content(" world"),
        Step::Event(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
        Step::Event(
            json!({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}}),
        ),
    ]]);
    let (_fake, _dir, sb) = gated_agents(&model, "chat-api-stream");
    let ask = json!({
        "model": "switchboard:support",
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "greet"}],
    })
    .to_string();
    let mut reading = Reading::open(&sb, WEBUI, &ask);
    // The model is held after "Hello": it reaches the client before the model finished.
    let first = reading.text_until("Hello");
    assert_eq!(first, "Hello");
    model.release.send(()).expect("release the model");
    let mut rest = String::new();
    let mut events = Vec::new();
    loop {
        let event = reading.next();
        if event == json!("[DONE]") {
            break;
        }
        if let Some(delta) = event["choices"][0]["delta"]["content"].as_str() {
            rest.push_str(delta);
        }
        events.push(event);
        assert!(events.len() < 100, "{events:?}");
    }
    assert_eq!(format!("{first}{rest}"), "Hello world");
    let finish = events
        .iter()
        .find(|e| e["choices"][0]["finish_reason"] == "stop");
    assert!(finish.is_some(), "{events:?}");
    let last = events.last().expect("a last chunk");
    assert_eq!(last["choices"], json!([]), "{last}");
    assert_eq!(
        last["usage"],
        json!({"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}),
        "{last}"
    );
    assert_eq!(model.requests().len(), 1);
}

#[test]
fn a_client_that_goes_away_mid_stream_stops_the_run_and_the_model_sees_no_more_rounds() {
    // Round 1 writes, waits, then asks for a tool: were the run not stopped, a second round
    // would follow.
    let model = GatedModel::start(vec![
        vec![
            content("Working on it"),
            Step::Wait,
            Step::Event(json!({"choices": [{"index": 0, "delta": {"tool_calls": [{
                "index": 0, "id": "call_1", "type": "function",
                "function": {"name": "surface__help", "arguments": "{}"}}]}}]})),
            Step::Event(
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            ),
        ],
        vec![content("second round")],
    ]);
    let (_fake, _dir, sb) = gated_agents(&model, "chat-api-disconnect");
    let ask = json!({
        "model": "switchboard:support",
        "stream": true,
        "messages": [{"role": "user", "content": "work"}],
    })
    .to_string();
    let mut reading = Reading::open(&sb, WEBUI, &ask);
    reading.text_until("Working on it");
    let listed = sb.tools(&["runs.list"]).json();
    let run = listed["runs"][0].clone();
    assert_eq!(run["agent"], "support", "{listed}");
    assert_eq!(run["startedBy"], "token:webui", "{listed}");
    drop(reading);

    // The run ends while the model is still held: it was stopped, not finished.
    support::poll("the run to stop", Duration::from_secs(10), || {
        let listed = sb.tools(&["runs.list"]).json();
        listed["runs"].as_array()?.is_empty().then_some(())
    });
    let audit = sb.tools(&["audit.list", "--tool=chat.completions"]).json();
    assert_eq!(audit["audit"][0]["code"], "client_disconnected", "{audit}");
    assert_eq!(audit["audit"][0]["run"], run["runId"], "{audit}");
    model.release.send(()).expect("release the model");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(model.requests().len(), 1, "{:?}", model.requests());
}

/// `GET /v1/runs…` as `token`: (status, JSON).
fn runs_api(sb: &Switchboard, method: &str, path: &str, token: &str) -> (u16, Value) {
    let body = if method == "POST" { "{}" } else { "" };
    let (status, body) = send_in(sb, method, path, token, None, body);
    let value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (status, value)
}

fn held_chat(sb: &Switchboard, words: &str) -> Reading {
    let ask = json!({
        "model": "switchboard:support",
        "stream": true,
        "messages": [{"role": "user", "content": words}],
    })
    .to_string();
    let mut reading = Reading::open(sb, WEBUI, &ask);
    reading.text_until("holding");
    reading
}

#[test]
fn the_runs_api_shows_and_stops_a_tokens_own_runs_and_answers_others_404() {
    let model = GatedModel::start(vec![vec![content("holding"), Step::Wait, content(".")]]);
    let (_fake, _dir, sb) = gated_agents(&model, "chat-api-runs");
    let mut first = held_chat(&sb, "one");
    let _second = held_chat(&sb, "two");

    let (status, listed) = runs_api(&sb, "GET", "/v1/runs", WEBUI);
    assert_eq!(status, 200, "{listed}");
    let runs = listed["runs"].as_array().expect("runs").clone();
    assert_eq!(runs.len(), 2, "{listed}");
    for run in &runs {
        assert_eq!(run["startedBy"], "token:webui", "{run}");
        assert_eq!(run["agent"], "support", "{run}");
        assert_eq!(run["state"], "running", "{run}");
        assert_eq!(run["parentRunId"], Value::Null, "{run}");
    }
    let ids: Vec<String> = runs
        .iter()
        .map(|r| r["runId"].as_str().expect("id").to_owned())
        .collect();
    // Pages: one run, then the other, then no cursor.
    let (_, page) = runs_api(&sb, "GET", "/v1/runs?limit=1", WEBUI);
    assert_eq!(page["runs"].as_array().map(Vec::len), Some(1), "{page}");
    let cursor = page["nextCursor"].as_str().expect("a cursor").to_owned();
    let (_, rest) = runs_api(
        &sb,
        "GET",
        &format!("/v1/runs?limit=1&cursor={cursor}"),
        WEBUI,
    );
    assert_eq!(rest["runs"].as_array().map(Vec::len), Some(1), "{rest}");
    assert_eq!(rest["nextCursor"], Value::Null, "{rest}");
    assert_ne!(page["runs"][0]["runId"], rest["runs"][0]["runId"]);
    let (_, queued) = runs_api(&sb, "GET", "/v1/runs?state=queued", WEBUI);
    assert_eq!(queued["runs"], json!([]), "{queued}");
    let (_, by_session) = runs_api(&sb, "GET", "/v1/runs?session=api:webui", WEBUI);
    assert_eq!(
        by_session["runs"].as_array().map(Vec::len),
        Some(2),
        "{by_session}"
    );
    for garbage in [
        "/v1/runs?limit=0",
        "/v1/runs?limit=lots",
        "/v1/runs?state=done",
        "/v1/runs?cursor=x",
        "/v1/runs?colour=red",
    ] {
        let (status, body) = runs_api(&sb, "GET", garbage, WEBUI);
        assert_eq!(status, 400, "{garbage}: {body}");
    }

    // Another token sees none of them, and cannot tell them from runs that do not exist.
    let (status, theirs) = runs_api(&sb, "GET", "/v1/runs", OTHER);
    assert_eq!((status, &theirs["runs"]), (200, &json!([])), "{theirs}");
    // The first stream's run.
    let first_run = first
        .id
        .strip_prefix("chatcmpl-")
        .expect("a run's completion");
    assert!(ids.iter().any(|id| id == first_run), "{ids:?} {first_run}");
    let ids: Vec<String> = if ids[0] == first_run {
        ids
    } else {
        vec![ids[1].clone(), ids[0].clone()]
    };
    let one = format!("/v1/runs/{}", ids[0]);
    let (status, body) = runs_api(&sb, "GET", &one, OTHER);
    assert_eq!(status, 404, "{body}");
    let (status, missing) = runs_api(&sb, "GET", "/v1/runs/run-00000000000000ff", OTHER);
    assert_eq!(status, 404, "{missing}");
    assert_eq!(body["error"]["code"], missing["error"]["code"]);
    let (status, body) = runs_api(&sb, "POST", &format!("{one}/abort"), OTHER);
    assert_eq!(status, 404, "{body}");

    // The token that started it, and the operator, read it.
    let (status, run) = runs_api(&sb, "GET", &one, WEBUI);
    assert_eq!((status, &run["runId"]), (200, &json!(ids[0])), "{run}");
    let (status, run) = runs_api(&sb, "GET", &one, &sb.token);
    assert_eq!((status, &run["runId"]), (200, &json!(ids[0])), "{run}");

    // It stops it: its stream ends with the error, and it is gone from the list.
    let (status, stopped) = runs_api(&sb, "POST", &format!("{one}/abort"), WEBUI);
    assert_eq!(status, 200, "{stopped}");
    assert_eq!(stopped["runId"], json!(ids[0]));
    let ended = first.next();
    assert_eq!(ended["error"]["code"], "handoff_failed", "{ended}");
    assert_eq!(first.next(), json!("[DONE]"));
    let (_, left) = runs_api(&sb, "GET", "/v1/runs", WEBUI);
    assert_eq!(left["runs"].as_array().map(Vec::len), Some(1), "{left}");
    assert_eq!(left["runs"][0]["runId"], json!(ids[1]), "{left}");

    // An ended run stays readable by id from the node's record, with its end state, and
    // still only to whom may see it.
    let (status, aborted) = runs_api(&sb, "GET", &one, WEBUI);
    assert_eq!(status, 200, "{aborted}");
    assert_eq!(aborted["state"], "aborted", "{aborted}");
    assert!(
        aborted["endedMs"].as_u64() >= aborted["startedMs"].as_u64(),
        "{aborted}"
    );
    let (status, body) = runs_api(&sb, "GET", &one, OTHER);
    assert_eq!(status, 404, "{body}");

    // The other run finishes (both held model streams go on): its answer is read afterwards.
    for _ in 0..2 {
        model.release.send(()).expect("release the model");
    }
    let two = format!("/v1/runs/{}", ids[1]);
    let finished = support::poll("the second run to finish", Duration::from_secs(15), || {
        let (status, run) = runs_api(&sb, "GET", &two, WEBUI);
        (status == 200 && run["state"] == "finished").then_some(run)
    });
    assert_eq!(finished["answer"], "holding.", "{finished}");
    assert_eq!(finished["startedBy"], "token:webui", "{finished}");
    assert_eq!(finished["agent"], "support", "{finished}");
    let (status, body) = runs_api(&sb, "GET", &two, OTHER);
    assert_eq!(status, 404, "{body}");
    let (_, live) = runs_api(&sb, "GET", "/v1/runs", WEBUI);
    assert_eq!(live["runs"], json!([]), "{live}");
    let (_, ended) = runs_api(&sb, "GET", "/v1/runs?state=finished", WEBUI);
    assert_eq!(ended["runs"][0]["runId"], json!(ids[1]), "{ended}");
    let (_, theirs) = runs_api(&sb, "GET", "/v1/runs?state=finished", OTHER);
    assert_eq!(theirs["runs"], json!([]), "{theirs}");
    let audit = sb.tools(&["audit.list", "--tool=runs.abort"]).json();
    let callers: Vec<&Value> = audit["audit"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| &r["caller"])
        .collect();
    assert!(callers.contains(&&json!("token:webui")), "{audit}");
}

#[test]
fn a_handoffs_sub_run_is_listed_under_its_run_and_stops_with_it() {
    let model = GatedModel::start(vec![
        // The chat run's agent hands off to helper...
        vec![
            Step::Event(json!({"choices": [{"index": 0, "delta": {"tool_calls": [{
                "index": 0, "id": "call_1", "type": "function",
                "function": {"name": "agent__handoff", "arguments": "{\"agent\":\"helper\",\"prompt\":\"help\"}"}}]}}]})),
            Step::Event(
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            ),
        ],
        // ...whose run writes and is held.
        vec![content("helping"), Step::Wait, content(" done")],
        vec![content("after the handoff")],
    ]);
    let (_fake, _dir, sb) = gated_agents(&model, "chat-api-subrun");
    let ask = json!({
        "model": "switchboard:support",
        "stream": true,
        "messages": [{"role": "user", "content": "get help"}],
    })
    .to_string();
    let _reading = Reading::open(&sb, WEBUI, &ask);
    let runs = support::poll("the sub-run to be listed", Duration::from_secs(15), || {
        let (_, listed) = runs_api(&sb, "GET", "/v1/runs", WEBUI);
        let runs = listed["runs"].as_array()?.clone();
        (runs.len() == 2).then_some(runs)
    });
    let parent = runs
        .iter()
        .find(|r| r["parentRunId"].is_null())
        .expect("the chat run");
    let child = runs
        .iter()
        .find(|r| !r["parentRunId"].is_null())
        .expect("the sub-run");
    let parent_id = parent["runId"].as_str().expect("id");
    assert_eq!(child["parentRunId"], json!(parent_id), "{runs:?}");
    assert_eq!(child["agent"], "helper", "{child}");
    assert_eq!(child["startedBy"], "token:webui", "{child}");
    assert!(
        child["runId"]
            .as_str()
            .is_some_and(|id| id.starts_with(&format!("{parent_id}."))),
        "{child}"
    );
    // The operator's runs.list shows the same.
    let listed = sb.tools(&["runs.list"]).json();
    assert_eq!(listed["runs"].as_array().map(Vec::len), Some(2), "{listed}");

    // Stopping the chat run stops its sub-run; the model sees no round after.
    let (status, body) = runs_api(&sb, "POST", &format!("/v1/runs/{parent_id}/abort"), WEBUI);
    assert_eq!(status, 200, "{body}");
    support::poll("both runs to stop", Duration::from_secs(10), || {
        let (_, listed) = runs_api(&sb, "GET", "/v1/runs", &sb.token);
        listed["runs"].as_array()?.is_empty().then_some(())
    });
    model.release.send(()).expect("release the model");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(model.requests().len(), 2, "{:?}", model.requests());
}

/// A model answer with the usage it reports.
fn with_usage((status, mut body): (u16, Value), prompt: u64, completion: u64) -> (u16, Value) {
    body["usage"] = json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    });
    (status, body)
}

#[test]
fn a_chat_api_run_and_its_handoffs_sub_run_are_run_rows_with_their_usage() {
    let model = FakeModel::start(|requests| {
        let request = requests.last().expect("this request");
        if request["model"] == "helper-model" {
            with_usage(text("helped"), 20, 5)
        } else if tool_results(request).is_empty() {
            with_usage(
                tool_call(
                    "call_1",
                    "agent__handoff",
                    r#"{"agent":"helper","prompt":"help"}"#,
                ),
                11,
                3,
            )
        } else {
            with_usage(text("all done"), 31, 9)
        }
    });
    let (_fake, dir, sb) = handoff_agents(&model.base_url, "chat-api-rows");
    let ask = json!({
        "model": "switchboard:support",
        "messages": [{"role": "user", "content": "get help"}],
    })
    .to_string();
    let (status, body) = send_in(&sb, "POST", "/v1/chat/completions", WEBUI, None, &ask);
    assert_eq!(status, 200, "{body}\n{}", sb.stderr());
    assert!(body.contains("all done"), "{body}");
    drop(sb);

    // The rows every node would list, as the store keeps them.
    let backend = switchboard_store_sqlite::SqliteBackend::open(
        dir.path().join("switchboard.db").to_str().expect("path"),
        Default::default(),
    )
    .expect("the store opens");
    let rows = futures_executor::block_on(switchboard_store::RunStore::runs(
        &backend,
        switchboard_records::RunFilter {
            limit: 10,
            ..Default::default()
        },
    ))
    .expect("runs");
    assert_eq!(rows.len(), 2, "{rows:#?}");
    let chat = rows
        .iter()
        .find(|r| r.parent_run.is_none())
        .expect("the chat run's row");
    let sub = rows
        .iter()
        .find(|r| r.parent_run.is_some())
        .expect("the sub-run's row");
    assert_eq!(chat.trigger, "api", "{chat:?}");
    assert_eq!(chat.agent, "support");
    assert_eq!(chat.requested_by.as_deref(), Some("token:webui"));
    assert_eq!(chat.state, switchboard_records::RunState::Finished);
    assert_eq!(chat.final_text.as_deref(), Some("all done"));
    let usage = chat.usage.expect("the chat run's usage");
    assert_eq!((usage.tokens_in, usage.tokens_out), (11 + 31, 3 + 9));
    assert_eq!(sub.parent_run.as_deref(), Some(chat.id.as_str()));
    assert_eq!(sub.trigger, "handoff", "{sub:?}");
    assert_eq!(sub.agent, "helper");
    assert_eq!(
        sub.session, chat.session,
        "the sub-run works in the chat run's session"
    );
    assert_eq!(sub.state, switchboard_records::RunState::Finished);
    assert_eq!(sub.final_text.as_deref(), Some("helped"));
    let usage = sub.usage.expect("the sub-run's usage");
    assert_eq!((usage.tokens_in, usage.tokens_out), (20, 5));
    assert!(sub.seq > chat.seq && sub.finished_ms <= chat.finished_ms);
}
