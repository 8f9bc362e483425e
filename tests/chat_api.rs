//! The OpenAI-compatible chat API (issue 26 §5): `GET /v1/models` lists the agents a named
//! token's scope grants; `POST /v1/chat/completions` with `model = "switchboard:NAME"` runs
//! that agent in the session the header names and answers its text (whole, or as chunk
//! events); a token without `agent:NAME` gets 403, and the run may call only what both the
//! token and the agent may.

#[path = "support/model.rs"]
mod model;
mod support;

use model::{messages, text, tool_call, tool_results, FakeModel};
use serde_json::{json, Value};
use support::{http_send, venv_python, Allow, Fake, Sections, Switchboard, TempDir};

const WEBUI: &str = "webui-token-0123456789abcdef0123456789abcdef";
const OTHER: &str = "other-token-0123456789abcdef0123456789abcdef";

fn start(model: &FakeModel, name: &str) -> (Fake, TempDir, Switchboard) {
    let fake = Fake::start();
    let dir = TempDir::new(name);
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
    let sb = Switchboard::start_sections(
        &fake,
        dir.path(),
        &Allow::default(),
        Sections {
            toolserver,
            extra: &extra,
            env: &[("WEBUI_TOKEN", WEBUI), ("OTHER_TOKEN", OTHER)],
            ..Sections::default()
        },
    );
    (fake, dir, sb)
}

fn send(sb: &Switchboard, method: &str, path: &str, token: &str, body: &str) -> (u16, String) {
    let host = sb.url.trim_start_matches("http://").to_owned();
    let bearer = format!("Bearer {token}");
    http_send(
        &sb.url,
        method,
        path,
        &[
            ("Host", &host),
            ("Authorization", &bearer),
            ("Content-Type", "application/json"),
            ("x-switchboard-session-id", "#ops"),
        ],
        body,
    )
    .expect("the request is answered")
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
    use std::io::Read;
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
