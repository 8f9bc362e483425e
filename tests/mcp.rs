//! MCP, tested with a client nobody here wrote: the official MCP Python SDK (PyPI `mcp`,
//! pinned in `tests/python-requirements.txt`, installed into `target/py-venv` by
//! `tests/setup-python.sh`, which `./test.sh` calls) against the real binary and the fake
//! Discord — over streamable HTTP at `/mcp` and over stdio through `switchboard mcp`.
//! Without the venv these tests fail, saying how to make it.
//!
//! And garbage at `/mcp`, over raw TCP: every request gets an answer, none a panic or a hang.

#[path = "support/model.rs"]
mod model;
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fake_discord::demo;
use serde_json::Value;
use support::{
    random_token, venv_python, wait_bounded, Allow, Fake, Sections, Switchboard, TempDir,
};

/// `permissions.ask_timeout_s` in the test config: an unanswered ask ends after this.
const ASK_TIMEOUT_S: u64 = 5;
/// The variable the `reader` named token is read from.
const READER_ENV: &str = "SWITCHBOARD_MCP_TEST_READER";
/// How long one Python client run may take (start-up, a 5 s ask, the rest).
const PYTHON_TIMEOUT: Duration = Duration::from_secs(120);

/// Starts switchboard with a `reader` token (scope: help and the message list), and for the
/// operator's calls a deny rule for deletes and an ask rule for reactions that nobody answers.
fn start(fake: &Fake, dir: &Path, reader: &str) -> Switchboard {
    let toolserver = format!(
        "[[toolserver.tokens]]\nname = \"reader\"\ntoken_env = \"{READER_ENV}\"\nscope = [\"surface.help\", \"surface.messages.list\"]\n"
    );
    let extra = format!(
        "[permissions]\nask_timeout_s = {ASK_TIMEOUT_S}\napprovers = [\"@Stanley\"]\n\n[[permissions.rules]]\ntool = \"surface.messages.delete\"\ncaller = \"operator\"\npolicy = \"deny\"\n\n[[permissions.rules]]\ntool = \"surface.reactions.add\"\ncaller = \"operator\"\npolicy = \"ask\"\n"
    );
    Switchboard::start_sections(
        fake,
        dir,
        &Allow::default(),
        Sections {
            toolserver: &toolserver,
            extra: &extra,
            env: &[(READER_ENV, reader)],
            ..Sections::default()
        },
    )
}

/// Runs a client script from `tests/mcp/`; its last stdout line is its JSON summary.
fn run_python(script: &str, envs: &[(&str, String)]) -> Value {
    let python = venv_python();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp");
    let mut child = Command::new(python)
        .arg(dir.join(script))
        .current_dir(&dir)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        // The clients connect as the example host config tells users to.
        .env(
            "MCP_HOST_CONFIG",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/mcp/claude-code.mcp.json"),
        )
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the venv's python");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let status = wait_bounded(&mut child, PYTHON_TIMEOUT);
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    assert!(
        status.is_some_and(|s| s.success()),
        "{script} failed ({status:?}):\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("{script} printed no summary ({e}): {stdout}"))
}

/// The bodies of the messages the fake was asked to post in `#ops`.
fn posted_in_ops(fake: &Fake) -> Vec<String> {
    let path = format!("/api/v10/channels/{}/messages", demo::OPS);
    fake.requests_to("POST", &path)
        .into_iter()
        .filter_map(|r| {
            r.body
                .and_then(|b| b["content"].as_str().map(str::to_owned))
        })
        .collect()
}

#[test]
fn the_python_sdk_talks_to_mcp_over_streamable_http() {
    let fake = Fake::start();
    let dir = TempDir::new("mcp-http");
    let reader = random_token();
    let sb = start(&fake, dir.path(), &reader);
    // The initialize handshake (up to 2025-11-25), then server/discover (2026-07-28).
    for mode in ["legacy", "auto"] {
        let marker = format!("mcp-http-{mode}-{}", random_token());
        let summary = run_python(
            "client_http.py",
            &[
                ("MCP_URL", format!("{}/mcp", sb.url)),
                ("MCP_TOKEN", sb.token.clone()),
                ("MCP_READER_TOKEN", reader.clone()),
                ("MCP_MODE", mode.to_owned()),
                ("MCP_SESSION", "#ops".to_owned()),
                ("MCP_MARKER", marker.clone()),
                ("MCP_ASK_TIMEOUT_S", ASK_TIMEOUT_S.to_string()),
            ],
        );
        let protocol = summary["protocol"].as_str().unwrap_or_default().to_owned();
        match mode {
            "legacy" => assert!(protocol.starts_with("2025-"), "{summary}"),
            _ => assert_eq!(protocol, "2026-07-28", "{summary}"),
        }
        // The send went through the pipeline: the mention was rewritten for Discord.
        let posted = posted_in_ops(&fake);
        let ours: Vec<&String> = posted.iter().filter(|c| c.contains(&marker)).collect();
        assert_eq!(ours.len(), 1, "one POST with the marker: {posted:?}");
        assert!(
            ours[0].contains(&format!("<@{}>", demo::STANLEY)),
            "the mention was rewritten: {ours:?}"
        );
        assert!(
            summary["progress"]
                .as_array()
                .is_some_and(|p| !p.is_empty()),
            "{summary}"
        );
    }
    // Nothing was deleted (the rule denied it) and nothing reacted (nobody approved).
    assert!(fake
        .fake
        .requests()
        .iter()
        .all(|r| r.method != "DELETE" && !r.path.contains("/reactions/")));
}

#[test]
fn the_python_sdk_talks_to_switchboard_mcp_over_stdio() {
    let fake = Fake::start();
    let dir = TempDir::new("mcp-stdio");
    let reader = random_token();
    let sb = start(&fake, dir.path(), &reader);
    for mode in ["legacy", "auto"] {
        let marker = format!("mcp-stdio-{mode}-{}", random_token());
        let summary = run_python(
            "client_stdio.py",
            &[
                (
                    "SWITCHBOARD_BIN",
                    env!("CARGO_BIN_EXE_switchboard").to_owned(),
                ),
                ("MCP_BASE_URL", sb.url.clone()),
                ("MCP_TOKEN", sb.token.clone()),
                ("MCP_MODE", mode.to_owned()),
                ("MCP_SESSION", "#ops".to_owned()),
                ("MCP_MARKER", marker.clone()),
                ("MCP_ASK_TIMEOUT_S", ASK_TIMEOUT_S.to_string()),
            ],
        );
        assert!(
            summary["progress"]
                .as_array()
                .is_some_and(|p| !p.is_empty()),
            "{summary}"
        );
        assert!(summary["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|n| n == "surface.messages.send")));
        let posted = posted_in_ops(&fake);
        assert_eq!(
            posted.iter().filter(|c| c.contains(&marker)).count(),
            1,
            "one POST with the marker: {posted:?}"
        );
    }
}

/// One raw HTTP/1.1 exchange: (status, head, body). Bounded by socket timeouts.
fn exchange(base: &str, request: &[u8]) -> (u16, String, String) {
    let host = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(host).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream
        .set_write_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    // A server may answer (413) before reading everything; a failed write is then fine.
    let _ = stream.write_all(request);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw.as_str(), ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

fn post(base: &str, token: Option<&str>, headers: &str, body: &[u8]) -> (u16, String, String) {
    let host = base.trim_start_matches("http://");
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let mut request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {host}\r\n{auth}{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    exchange(base, &request)
}

const JSON_HEADERS: &str =
    "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n";

#[test]
fn garbage_at_mcp_gets_errors_never_a_panic_or_a_hang() {
    let fake = Fake::start();
    let dir = TempDir::new("mcp-garbage");
    let sb = start(&fake, dir.path(), &random_token());
    let base = sb.url.as_str();
    let token = Some(sb.token.as_str());
    let started = Instant::now();

    // No token, a wrong one: 401 with WWW-Authenticate, for every method.
    for (method, auth) in [("POST", None), ("GET", None), ("DELETE", Some("nope"))] {
        let host = base.trim_start_matches("http://");
        let auth = auth.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        let (status, head, body) = exchange(
            base,
            format!("{method} /mcp HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: application/json\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert_eq!(status, 401, "{method}: {head}\n{body}");
        assert!(
            head.to_ascii_lowercase()
                .contains("www-authenticate: bearer"),
            "{head}"
        );
        assert!(
            body.contains("\"code\":\"missing_token\"")
                || body.contains("\"code\":\"invalid_token\""),
            "{body}"
        );
    }
    // A huge body without a token is refused before it is read.
    let (status, _, _) = post(base, None, JSON_HEADERS, &vec![b'x'; 3 * 1024 * 1024]);
    assert_eq!(status, 401);

    // With a token: each kind of garbage gets its error.
    let cases: Vec<(&str, Vec<u8>, &str, Vec<u16>)> = vec![
        ("not JSON", b"{\"jsonrpc\":".to_vec(), JSON_HEADERS, vec![400]),
        ("binary", vec![0xff, 0x00, 0xfe], JSON_HEADERS, vec![400]),
        ("a JSON array", b"[]".to_vec(), JSON_HEADERS, vec![400, 415]),
        ("an empty object", b"{}".to_vec(), JSON_HEADERS, vec![400, 415]),
        ("a number", b"42".to_vec(), JSON_HEADERS, vec![400, 415]),
        ("an unknown method", br#"{"jsonrpc":"2.0","id":1,"method":"tools/explode","params":{}}"#.to_vec(), JSON_HEADERS, vec![200, 400, 404]),
        ("tools/call without a name", br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{}}"#.to_vec(), JSON_HEADERS, vec![200, 400, 415]),
        ("tools/call with a number for a name", br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":7}}"#.to_vec(), JSON_HEADERS, vec![200, 400, 415]),
        ("arguments that are not an object", br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"surface.help","arguments":[1]}}"#.to_vec(), JSON_HEADERS, vec![200, 400, 415]),
        ("a bogus session id", br#"{"jsonrpc":"2.0","id":5,"method":"tools/list"}"#.to_vec(), "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: no-such-session\r\n", vec![200]),
        ("no session and no initialize", br#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"surface.help"}}"#.to_vec(), JSON_HEADERS, vec![200]),
        ("an unknown protocol version", br#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#.to_vec(), "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 1999-01-01\r\n", vec![400]),
        ("a response nobody asked for", br#"{"jsonrpc":"2.0","id":8,"result":{}}"#.to_vec(), JSON_HEADERS, vec![202, 400]),
        ("the wrong content type", br#"{"jsonrpc":"2.0","id":9,"method":"tools/list"}"#.to_vec(), "Content-Type: text/plain\r\nAccept: application/json, text/event-stream\r\n", vec![415]),
        ("no content type", br#"{"jsonrpc":"2.0","id":9,"method":"tools/list"}"#.to_vec(), "Accept: application/json, text/event-stream\r\n", vec![415]),
        ("no Accept", br#"{"jsonrpc":"2.0","id":10,"method":"tools/list"}"#.to_vec(), "Content-Type: application/json\r\n", vec![406]),
        ("a huge body", { let mut b = b"{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"tools/list\",\"pad\":\"".to_vec(); b.extend(vec![b'a'; 2 * 1024 * 1024]); b.extend_from_slice(b"\"}"); b }, JSON_HEADERS, vec![413]),
        ("deep nesting", { let mut b = vec![b'['; 100_000]; b.extend(vec![b']'; 100_000]); b }, JSON_HEADERS, vec![400, 415]),
    ];
    for (what, body, headers, expected) in cases {
        let (status, head, answer) = post(base, token, headers, &body);
        assert!(
            expected.contains(&status),
            "{what}: status {status}, expected one of {expected:?}\n{head}\n{answer}"
        );
        if status == 200 && what.starts_with("tools/call") {
            // A JSON-RPC error, never a result.
            assert!(answer.contains("\"error\""), "{what}: {answer}");
        }
    }
    // GET and DELETE: no sessions here.
    for method in ["GET", "DELETE"] {
        let host = base.trim_start_matches("http://");
        let (status, head, _) = exchange(
            base,
            format!("{method} /mcp HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n", sb.token).as_bytes(),
        );
        assert_eq!(status, 405, "{method}: {head}");
    }
    // A flood of initialize requests keeps nothing: the server answers each and stays well.
    for id in 0..300 {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"flood","version":"1"}}}}}}"#
        );
        let (status, head, answer) = post(base, token, JSON_HEADERS, body.as_bytes());
        assert_eq!(status, 200, "{head}\n{answer}");
        assert!(
            !head.to_ascii_lowercase().contains("mcp-session-id"),
            "no session is made: {head}"
        );
    }
    // Still serving, correctly.
    let (status, _, answer) = post(
        base,
        token,
        JSON_HEADERS,
        br#"{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"surface.sessions.list","arguments":{}}}"#,
    );
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("\"isError\":false"), "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "garbage took {:?}",
        started.elapsed()
    );
    assert!(
        !sb.stderr().contains("panicked"),
        "switchboard panicked:\n{}",
        sb.stderr()
    );
}

/// `GET /v1/approvals` (with `query`) as `token`: the approvals it lists.
fn approvals_seen(base: &str, token: &str, query: &str) -> Vec<Value> {
    let host = base.trim_start_matches("http://");
    let (status, head, body) = exchange(
        base,
        format!("GET /v1/approvals{query} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    assert_eq!(status, 200, "{head}\n{body}");
    let body: Value = serde_json::from_str(&body).expect("json");
    body["approvals"].as_array().cloned().unwrap_or_default()
}

#[test]
fn an_mcp_call_without_a_call_id_gets_one_nobody_can_guess_or_read() {
    let fake = Fake::start();
    let dir = TempDir::new("mcp-call-id");
    let reader = random_token();
    let sb = start(&fake, dir.path(), &reader);
    // A plain tools/call with JSON-RPC id 1 and no tool-call id: the ask rule makes it wait.
    let base = sb.url.clone();
    let token = sb.token.clone();
    let waiting = std::thread::spawn(move || {
        post(
            &base,
            Some(&token),
            JSON_HEADERS,
            r##"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"surface.reactions.add","arguments":{"sessionId":"#ops","messageId":"1000000000000000999","emoji":"👍"}}}"##.as_bytes(),
        )
    });
    let deadline = Instant::now() + Duration::from_secs(ASK_TIMEOUT_S);
    let card = loop {
        if let Some(card) = approvals_seen(&sb.url, &sb.token, "").pop() {
            break card;
        }
        assert!(Instant::now() < deadline, "the call never waited on an ask");
        std::thread::sleep(Duration::from_millis(50));
    };
    let hex = |text: &str, prefix: &str| {
        text.strip_prefix(prefix)
            .is_some_and(|h| h.len() == 32 && h.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let call_id = card["toolCallId"].as_str().unwrap_or_default().to_owned();
    assert!(hex(&call_id, "mcp-"), "the server's call id: {call_id}");
    assert!(
        hex(card["id"].as_str().unwrap_or_default(), "apr_"),
        "{card}"
    );
    // Another token finds nothing, whether it guesses the JSON-RPC id or knows the real one.
    for query in [
        "?toolCallId=mcp-1".to_owned(),
        format!("?toolCallId={call_id}"),
        String::new(),
    ] {
        assert!(
            approvals_seen(&sb.url, &reader, &query).is_empty(),
            "{query}"
        );
    }
    let (status, _, body) = waiting.join().expect("the call's thread");
    assert_eq!(status, 200);
    assert!(body.contains("approval_expired"), "{body}");
}

#[test]
fn an_mcp_client_with_a_progress_token_hears_progress_while_a_handoffs_run_works() {
    // The helper's model takes its time: long enough for the first notification and a tick.
    let model = model::FakeModel::start(|_| {
        std::thread::sleep(Duration::from_secs(6));
        model::text("the helper is done")
    });
    let fake = Fake::start();
    let dir = TempDir::new("mcp-handoff");
    let extra = format!(
        "[agents]\ndefault = \"helper\"\n\n[agents.helper]\nrunner = \"openai\"\nbase_url = \"{}\"\nmodel = \"helper-model\"\nstream = \"off\"\n",
        model.base_url
    );
    let sb = Switchboard::start_with(&fake, dir.path(), &Allow::default(), &extra);
    // Over streamable HTTP, then over stdio through `switchboard mcp` (which learns of the
    // handoff from its input, not from the engine: no run id in its messages).
    for transport in ["http", "stdio"] {
        let summary = run_python(
            "client_handoff.py",
            &[
                ("MCP_TRANSPORT", transport.to_owned()),
                ("MCP_URL", format!("{}/mcp", sb.url)),
                ("MCP_BASE_URL", sb.url.clone()),
                (
                    "SWITCHBOARD_BIN",
                    env!("CARGO_BIN_EXE_switchboard").to_owned(),
                ),
                ("MCP_TOKEN", sb.token.clone()),
                ("MCP_SESSION", "#ops".to_owned()),
                ("MCP_AGENT", "helper".to_owned()),
            ],
        );
        assert_eq!(summary["result"]["text"], "the helper is done", "{summary}");
        let run = summary["result"]["runId"].as_str().expect("the run id");
        let updates = summary["progress"].as_array().expect("progress");
        let first = updates[0]["message"].as_str().unwrap_or_default();
        assert!(first.contains("agent 'helper'"), "{transport}: {summary}");
        if transport == "http" {
            assert!(first.contains(run), "{summary}");
        }
    }
    assert_eq!(model.requests().len(), 2);
}
