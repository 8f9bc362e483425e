//! The real `tools` binary, spawned as agents spawn it, against a scripted HTTP responder on
//! 127.0.0.1:0 (pins the wire: headers, body, exit codes, error lines).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use protocol::context::CONTEXT_ENV_HEADERS;
use protocol::{CallRequest, ErrorBody, ErrorKind};
use serde_json::{json, Value};

/// No child may run longer than this.
const CHILD_LIMIT: Duration = Duration::from_secs(20);

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The two stderr lines of a failure: the parsed error JSON and the human line.
    fn error(&self) -> (ErrorBody, String) {
        let mut lines = self.stderr.lines();
        let json = lines.next().unwrap_or_default();
        let body: ErrorBody = serde_json::from_str(json).unwrap_or_else(|e| {
            panic!("stderr line 1 is not an error body ({e}): {}", self.stderr)
        });
        let human = lines.next().unwrap_or_default().to_owned();
        assert_eq!(
            lines.next(),
            None,
            "more than two stderr lines: {}",
            self.stderr
        );
        (body, human)
    }
}

/// Runs `tools` with a clean environment plus `env`, feeding `stdin`, bounded by CHILD_LIMIT.
fn tools(args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tools"));
    cmd.args(args)
        .env_clear()
        .envs(env.iter().copied())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn tools");
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes()).expect("write stdin");
    }
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out = thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > CHILD_LIMIT {
            let _ = child.kill();
            panic!("tools {args:?} ran longer than {CHILD_LIMIT:?}");
        }
        thread::sleep(Duration::from_millis(5));
    };
    Run {
        code: status.code().expect("exit code (not a signal)"),
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
    }
}

/// One request as the responder saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: BTreeMap<String, String>,
    body: String,
}

/// A scripted answer.
struct Answer {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
}

fn answer(status: u16, body: Value) -> Answer {
    Answer {
        status,
        headers: vec![("content-type", "application/json".into())],
        body: body.to_string(),
    }
}

fn error_answer(status: u16, kind: &str, code: &str, message: &str, details: Value) -> Answer {
    answer(
        status,
        json!({"ok": false, "error": {"kind": kind, "code": code, "message": message,
               "retryable": false, "details": details}}),
    )
}

/// A tiny HTTP/1.1 responder on 127.0.0.1:0: records each request, answers from a script.
struct Responder {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Responder {
    fn start(script: impl Fn(&Seen) -> Answer + Send + 'static) -> Responder {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&seen);
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let Some(request) = read_request(&stream) else {
                    continue;
                };
                let reply = script(&request);
                record.lock().expect("lock").push(request);
                let _ = write_answer(stream, &reply);
            }
        });
        Responder { url, seen }
    }

    /// Answers every request with the same thing.
    fn fixed(status: u16, body: Value) -> Responder {
        let body = body.to_string();
        Responder::start(move |_| Answer {
            status,
            headers: vec![("content-type", "application/json".into())],
            body: body.clone(),
        })
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }

    fn env(&self) -> Vec<(&'static str, &str)> {
        vec![("SWITCHBOARD_URL", self.url.as_str())]
    }
}

fn read_request(stream: &TcpStream) -> Option<Seen> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Seen {
        method,
        path,
        headers,
        body: String::from_utf8(body).ok()?,
    })
}

fn write_answer(mut stream: TcpStream, a: &Answer) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} X\r\ncontent-length: {}\r\nconnection: close\r\n",
        a.status,
        a.body.len()
    );
    for (k, v) in &a.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(a.body.as_bytes())?;
    stream.flush()
}

/// A loopback port with nothing listening.
fn closed_port_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    format!("http://127.0.0.1:{port}")
}

fn ok_value(value: Value) -> Responder {
    Responder::fixed(200, json!({"ok": true, "value": value}))
}

#[test]
fn version_prints_the_crate_version() {
    let run = tools(&["--version"], &[], None);
    assert_eq!(run.code, 0);
    assert_eq!(
        run.stdout.trim(),
        format!("tools {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn no_arguments_prints_help_and_exits_2() {
    let run = tools(&[], &[], None);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("Usage: tools ID"), "{}", run.stderr);
}

#[test]
fn help_flag_prints_help_and_exits_0() {
    let run = tools(&["--help"], &[], None);
    assert_eq!(run.code, 0);
    assert!(run.stdout.contains("Exit codes:"), "{}", run.stdout);
    let run = tools(&["help"], &[], None);
    assert_eq!(run.code, 0);
    assert!(run.stdout.contains("Usage: tools ID"), "{}", run.stdout);
}

#[test]
fn flag_without_value_is_a_usage_error_in_two_lines() {
    let server = ok_value(json!(null));
    let run = tools(&["surface.messages.send", "--silent"], &server.env(), None);
    assert_eq!(run.code, 2);
    let (body, human) = run.error();
    assert!(!body.ok);
    assert_eq!(body.error.kind, ErrorKind::Usage);
    assert_eq!(body.error.code, "missing_value");
    assert!(human.starts_with("error (usage): "), "{human}");
    assert!(human.contains("--silent=true"), "{human}");
    assert!(
        server.seen().is_empty(),
        "a usage error must not reach the server"
    );
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["x.y", "--=x"][..],
        &["x.y", "--ids:json=[1,"],
        &["x.y", "--input=[1]"],
        &["x.y", "-x"],
        &["--output=yaml", "x.y"],
        &["x.y", "--output=yaml"],
        &["x.y", "--timeout=never"],
        &["--bogus"],
        &["--output=text"],
    ] {
        let run = tools(args, &[("SWITCHBOARD_URL", &closed_port_url())], None);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert_eq!(run.error().0.error.kind, ErrorKind::Usage, "{args:?}");
    }
}

#[test]
fn https_url_is_a_usage_error_that_mentions_tls() {
    let run = tools(
        &["x.y"],
        &[("SWITCHBOARD_URL", "https://example.invalid")],
        None,
    );
    assert_eq!(run.code, 2);
    let (body, human) = run.error();
    assert_eq!(body.error.code, "bad_url");
    assert!(human.contains("TLS"), "{human}");
}

#[test]
fn unreachable_server_exits_6_and_asks_whether_switchboard_runs() {
    let url = closed_port_url();
    let run = tools(
        &["surface.messages.list"],
        &[("SWITCHBOARD_URL", &url)],
        None,
    );
    assert_eq!(run.code, 6);
    let (body, human) = run.error();
    assert_eq!(body.error.kind, ErrorKind::Unavailable);
    assert_eq!(body.error.code, "unreachable");
    assert_eq!(
        human,
        format!(
            "error (unavailable): cannot reach switchboard at {url} — is switchboard running at \
             {url}? (set SWITCHBOARD_URL)"
        )
    );
}

#[test]
fn url_flag_overrides_the_environment() {
    let server = ok_value(json!("pong"));
    let closed = closed_port_url();
    let url_flag = format!("--url={}", server.url);
    let run = tools(&["x.y", &url_flag], &[("SWITCHBOARD_URL", &closed)], None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "\"pong\"\n");
}

#[test]
fn call_is_one_post_with_token_context_headers_and_the_request_body() {
    let server = ok_value(json!({"id": "9"}));
    let mut env = server.env();
    env.push(("SWITCHBOARD_TOKEN", "sekrit"));
    let context: Vec<(&str, String)> = CONTEXT_ENV_HEADERS
        .iter()
        .map(|(var, _)| (*var, format!("value of {var}")))
        .collect();
    env.extend(context.iter().map(|(k, v)| (*k, v.as_str())));
    let run = tools(
        &[
            "surface.messages.send",
            "--session-id=#ops",
            "hello",
            "--silent=true",
            "--reply-to:json={\"id\":\"5\"}",
            "world",
            "--",
            "--not-a-flag",
        ],
        &env,
        None,
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.stdout, "{\"id\":\"9\"}\n");
    assert_eq!(run.stderr, "");

    let seen = server.seen();
    assert_eq!(seen.len(), 1, "one round trip");
    let req = &seen[0];
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("POST", "/v1/call")
    );
    assert_eq!(
        req.headers.get("authorization").map(String::as_str),
        Some("Bearer sekrit")
    );
    assert_eq!(
        req.headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    for (var, header) in CONTEXT_ENV_HEADERS {
        assert_eq!(
            req.headers.get(header),
            Some(&format!("value of {var}")),
            "{header}"
        );
    }
    let body: CallRequest = serde_json::from_str(&req.body).expect("CallRequest body");
    assert_eq!(
        body,
        CallRequest {
            tool: "surface.messages.send".into(),
            input: Some(
                json!({"replyTo": {"id": "5"}})
                    .as_object()
                    .cloned()
                    .expect("obj")
            ),
            args: json!({"sessionId": "#ops", "silent": "true"})
                .as_object()
                .cloned()
                .expect("obj"),
            positional: vec!["hello".into(), "world".into(), "--not-a-flag".into()],
        }
    );
}

#[test]
fn without_token_or_context_only_the_working_directory_and_a_call_id_are_sent() {
    let server = ok_value(json!(1));
    let run = tools(&["x.y"], &server.env(), None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let req = &server.seen()[0];
    assert!(!req.headers.contains_key("authorization"));
    let context: Vec<&String> = req
        .headers
        .keys()
        .filter(|h| h.starts_with("x-switchboard-"))
        .collect();
    assert_eq!(
        context,
        ["x-switchboard-cwd", "x-switchboard-tool-call-id"],
        "{:?}",
        req.headers
    );
    // A call id of its own, so the server's approval for it can be found.
    let id = &req.headers["x-switchboard-tool-call-id"];
    assert!(id.starts_with("cli-") && id.len() == 20, "{id}");
    let here = std::env::current_dir().expect("cwd");
    assert_eq!(
        req.headers["x-switchboard-cwd"],
        here.to_str().expect("utf-8 cwd")
    );
    assert_eq!(req.body, "{\"tool\":\"x.y\"}");
}

#[test]
fn input_from_stdin_is_the_base_object() {
    let server = ok_value(json!(true));
    let run = tools(
        &["x.y", "--input=@-", "--limit=5"],
        &server.env(),
        Some("{\"sessionId\":\"#ops\",\"n\":[1]}"),
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let body: Value = serde_json::from_str(&server.seen()[0].body).expect("json");
    assert_eq!(
        body,
        json!({"tool": "x.y", "input": {"sessionId": "#ops", "n": [1]}, "args": {"limit": "5"}})
    );
}

#[test]
fn output_formats() {
    let value = json!({"messages": [{"ts": "2024-05-01T12:00:00Z", "authorName": "stanley", "text": "ping"}]});
    let server = ok_value(value.clone());
    let run = tools(&["x.y"], &server.env(), None);
    assert_eq!(run.stdout, format!("{value}\n"));
    let run = tools(&["x.y", "--output=pretty"], &server.env(), None);
    assert_eq!(
        run.stdout,
        format!(
            "{}\n",
            serde_json::to_string_pretty(&value).expect("pretty")
        )
    );
    let run = tools(&["--output=text", "x.y"], &server.env(), None);
    assert_eq!(run.stdout, "[2024-05-01 12:00:00] stanley: ping\n");
}

#[test]
fn each_error_kind_exits_with_its_code() {
    for (status, kind, exit) in [
        (500, "internal", 1),
        (400, "usage", 2),
        (401, "denied", 3),
        (403, "denied", 3),
        (404, "not_found", 4),
        (409, "conflict", 5),
        (503, "unavailable", 6),
        (504, "timeout", 7),
        (499, "cancelled", 8),
    ] {
        let server = Responder::start(move |_| {
            error_answer(
                status,
                kind,
                "some_code",
                "Something went wrong.",
                json!({}),
            )
        });
        let run = tools(&["x.y"], &server.env(), None);
        assert_eq!(run.code, exit, "{kind}: {}", run.stderr);
        assert_eq!(run.stdout, "");
        let (body, human) = run.error();
        assert_eq!(body.error.kind.as_str(), kind);
        assert_eq!(body.error.code, "some_code");
        assert_eq!(human, format!("error ({kind}): Something went wrong."));
    }
}

#[test]
fn rate_limit_shows_when_to_retry() {
    let server = Responder::start(|_| {
        let mut a = error_answer(
            429,
            "unavailable",
            "rate_limited",
            "Too many sends to #ops.",
            json!({"retryAfterMs": 500}),
        );
        a.headers.push(("retry-after", "1".into()));
        a
    });
    let run = tools(&["x.y"], &server.env(), None);
    assert_eq!(run.code, 6);
    assert_eq!(
        run.error().1,
        "error (unavailable): Too many sends to #ops. (retry after 0.5 s)"
    );

    let server = Responder::start(|_| {
        let mut a = error_answer(503, "unavailable", "busy", "Busy.", json!({}));
        a.headers.push(("retry-after", "3".into()));
        a
    });
    let run = tools(&["x.y"], &server.env(), None);
    assert_eq!(
        run.error().1,
        "error (unavailable): Busy. (retry after 3 s)"
    );
}

#[test]
fn a_body_that_is_not_json_exits_1_and_names_the_status() {
    let server = Responder::start(|_| Answer {
        status: 502,
        headers: vec![("content-type", "text/html".into())],
        body: "<html>Bad gateway</html>".into(),
    });
    let run = tools(&["x.y"], &server.env(), None);
    assert_eq!(run.code, 1);
    let (body, human) = run.error();
    assert_eq!(body.error.kind, ErrorKind::Internal);
    assert_eq!(body.error.code, "bad_response");
    assert!(human.contains("HTTP 502"), "{human}");
    assert!(human.contains("Bad gateway"), "{human}");
}

#[test]
fn a_json_answer_without_the_envelope_exits_1() {
    let server = Responder::fixed(200, json!({"hello": "world"}));
    let run = tools(&["x.y"], &server.env(), None);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.error().1.contains("HTTP 200"));
}

#[test]
fn a_slow_server_times_out_with_exit_7() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    // Accept and hold connections without answering.
    thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().flatten() {
            held.push(s);
        }
    });
    let started = Instant::now();
    let run = tools(
        &["x.y", "--timeout=0.3"],
        &[("SWITCHBOARD_URL", &url)],
        None,
    );
    assert_eq!(run.code, 7, "{}", run.stderr);
    assert_eq!(run.error().0.error.kind, ErrorKind::Timeout);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn list_prints_ids_and_descriptions() {
    let list = json!({"tools": [
        {"id": "surface.messages.list", "description": "Read recent messages.", "inputSchema": {}, "mutating": false},
        {"id": "surface.messages.send", "description": "Send a message.", "inputSchema": {}, "mutating": true, "primary": "text"}
    ]});
    let server = Responder::fixed(200, list.clone());
    let run = tools(&["--list"], &server.env(), None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.starts_with(
            "surface.messages.list  Read recent messages.\n\
         surface.messages.send  Send a message. [changes state]\n"
        ),
        "{}",
        run.stdout
    );
    let req = &server.seen()[0];
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("GET", "/v1/tools")
    );

    let run = tools(&["--list", "--output=json"], &server.env(), None);
    assert_eq!(run.stdout, format!("{list}\n"));
}

#[test]
fn help_for_an_unknown_callable_suggests_the_nearest_name() {
    let server = Responder::start(|_| {
        error_answer(
            404,
            "not_found",
            "unknown_tool",
            "No callable 'surface.mesages.send'.",
            json!({"suggestion": "surface.messages.send", "known": ["surface.messages.send"]}),
        )
    });
    for args in [
        &["help", "surface.mesages.send"][..],
        &["surface.mesages.send", "--help"],
    ] {
        let run = tools(args, &server.env(), None);
        assert_eq!(run.code, 4, "{args:?}");
        assert_eq!(
            run.error().1,
            "error (not_found): unknown callable 'surface.mesages.send'; did you mean \
             'surface.messages.send'?"
        );
    }
    let seen = server.seen();
    assert!(seen
        .iter()
        .all(|r| r.method == "GET" && r.path == "/v1/tools/surface.mesages.send"));

    let run = tools(&["surface.mesages.send", "hi"], &server.env(), None);
    assert_eq!(run.code, 4);
    assert!(run
        .error()
        .1
        .ends_with("did you mean 'surface.messages.send'?"));
}

#[test]
fn help_renders_fields_from_the_schema() {
    let detail = json!({
        "id": "surface.messages.send",
        "description": "Send a message.",
        "inputSchema": {"type": "object", "properties": {
            "sessionId": {"type": "string", "description": "Where."},
            "text": {"type": "string", "description": "What."}
        }, "required": ["sessionId", "text"]},
        "mutating": true,
        "primary": "text",
        "help": "Longer help.",
        "examples": [{"description": "Say hi", "cli": "tools surface.messages.send --session-id=#ops hi",
                      "input": {"sessionId": "#ops", "text": "hi"}}]
    });
    let server = Responder::fixed(200, detail);
    let run = tools(&["help", "surface.messages.send"], &server.env(), None);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout
            .contains("--session-id  string  required  Where."),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("Longer help."));
    assert!(run
        .stdout
        .contains("tools surface.messages.send --session-id=#ops hi"));
}

// ---- against the real tool server (switchboard_testkit::testing::TestServer, recording platform) ----

mod against_the_server {
    use super::*;
    use entity::Snowflake;
    use switchboard_testkit::platform::demo::{OPS, STANLEY};
    use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};

    async fn server() -> TestServer {
        TestServer::start(&DEMO_CONFIG)
            .await
            .unwrap_or_else(|e| panic!("test server: {e}"))
    }

    /// Runs `tools` off the async runtime so the in-process server keeps serving.
    async fn tools_at(server: &TestServer, token: Option<&str>, args: &[&str]) -> Run {
        let url = server.url();
        let token = token.map(str::to_owned);
        let args: Vec<String> = args.iter().map(std::string::ToString::to_string).collect();
        tokio::task::spawn_blocking(move || {
            let mut env = vec![("SWITCHBOARD_URL", url.as_str())];
            if let Some(token) = &token {
                env.push(("SWITCHBOARD_TOKEN", token.as_str()));
            }
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            tools(&args, &env, None)
        })
        .await
        .expect("tools runner")
    }

    fn sends(server: &TestServer) -> Vec<(u64, String)> {
        server
            .sends()
            .into_iter()
            .map(|m| (m.channel_id.id().get(), m.content))
            .collect()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn list_shows_the_callables() {
        let server = server().await;
        let run = tools_at(&server, Some(server.operator_token()), &["--list"]).await;
        assert_eq!(run.code, 0, "{}", run.stderr);
        for id in [
            "surface.messages.list",
            "surface.messages.send",
            "surface.sessions.list",
        ] {
            assert!(
                run.stdout.lines().any(|l| l.starts_with(id)),
                "{id} missing from:\n{}",
                run.stdout
            );
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn help_for_send_shows_its_fields_primary_and_examples() {
        let server = server().await;
        let token = server.operator_token().to_owned();
        for args in [
            &["help", "surface.messages.send"][..],
            &["surface.messages.send", "--help"],
        ] {
            let run = tools_at(&server, Some(&token), args).await;
            assert_eq!(run.code, 0, "{}", run.stderr);
            let out = &run.stdout;
            assert!(out.starts_with("surface.messages.send — "), "{out}");
            assert!(out.contains("--session-id"), "{out}");
            assert!(out.contains("--reply-to-message-id"), "{out}");
            assert!(
                out.lines().any(|l| l.trim_start().starts_with("--text")
                    && l.contains("bare words fill this field")),
                "{out}"
            );
            assert!(
                out.lines()
                    .any(|l| l.trim_start().starts_with("--paths") && l.contains("array")),
                "{out}"
            );
            assert!(out.contains("Examples:\n"), "{out}");
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn messages_list_reads_the_cached_messages() {
        let server = server().await;
        server
            .surface()
            .post(Snowflake(OPS), Snowflake(STANLEY), "deploy is done");
        let token = server.operator_token().to_owned();
        let run = tools_at(
            &server,
            Some(&token),
            &["surface.messages.list", "--session-id=#ops"],
        )
        .await;
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(run.stdout.lines().count(), 1, "json output is one line");
        let value: Value = serde_json::from_str(&run.stdout).expect("json value");
        let messages = value["messages"].as_array().expect("messages");
        assert!(
            messages.iter().any(|m| m["text"] == "deploy is done"),
            "{value}"
        );

        let run = tools_at(
            &server,
            Some(&token),
            &[
                "surface.messages.list",
                "--session-id=#ops",
                "--limit=5",
                "--output=text",
            ],
        )
        .await;
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert!(
            run.stdout.starts_with("session: #ops (channel "),
            "{}",
            run.stdout
        );
        assert!(
            run.stdout
                .lines()
                .any(|l| l.starts_with('[') && l.ends_with("] Stanley: deploy is done")),
            "{}",
            run.stdout
        );
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn send_takes_the_text_from_bare_words() {
        let server = server().await;
        let token = server.operator_token().to_owned();
        let run = tools_at(
            &server,
            Some(&token),
            &[
                "surface.messages.send",
                "--session-id=#ops",
                "--silent=true",
                "hello",
                "world",
            ],
        )
        .await;
        assert_eq!(run.code, 0, "{}", run.stderr);
        let value: Value = serde_json::from_str(&run.stdout).expect("json value");
        assert_eq!(value["channelId"], OPS.to_string());
        assert_eq!(sends(&server), vec![(OPS, "hello world".to_owned())]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_capability_token_is_bound_to_its_session() {
        let server = server().await;
        let token = server.mint(OPS, "req-1", &["surface.*"], Duration::from_secs(60));
        let run = tools_at(
            &server,
            Some(&token),
            &["surface.messages.send", "from the agent"],
        )
        .await;
        assert_eq!(run.code, 0, "{}", run.stderr);
        assert_eq!(sends(&server), vec![(OPS, "from the agent".to_owned())]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn an_unknown_callable_gets_the_nearest_name() {
        let server = server().await;
        let token = server.operator_token().to_owned();
        for args in [
            &["surface.mesages.send", "--session-id=#ops", "hi"][..],
            &["help", "surface.mesages.send"],
        ] {
            let run = tools_at(&server, Some(&token), args).await;
            assert_eq!(run.code, 4, "{args:?}: {}", run.stderr);
            let (body, human) = run.error();
            assert_eq!(body.error.code, "unknown_tool");
            assert_eq!(
                human,
                "error (not_found): unknown callable 'surface.mesages.send'; did you mean \
                 'surface.messages.send'?"
            );
        }
        assert!(sends(&server).is_empty());
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn an_unknown_session_is_not_found_with_a_suggestion() {
        let server = server().await;
        let token = server.operator_token().to_owned();
        let run = tools_at(
            &server,
            Some(&token),
            &["surface.messages.send", "--session-id=#opps", "hi"],
        )
        .await;
        assert_eq!(run.code, 4, "{}", run.stderr);
        let (body, human) = run.error();
        assert_eq!(body.error.kind, ErrorKind::NotFound);
        assert!(human.starts_with("error (not_found): "), "{human}");
        assert!(human.contains("ops"), "{human}");
        assert!(sends(&server).is_empty());
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_bad_value_for_a_typed_field_is_a_usage_error_from_the_server() {
        let server = server().await;
        let token = server.operator_token().to_owned();
        let run = tools_at(
            &server,
            Some(&token),
            &[
                "surface.messages.send",
                "--session-id=#ops",
                "--silent=maybe",
                "hi",
            ],
        )
        .await;
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(run.error().1.contains("--silent"), "{}", run.stderr);
        assert!(sends(&server).is_empty());
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn without_a_token_the_call_is_denied() {
        let server = server().await;
        let run = tools_at(
            &server,
            None,
            &["surface.messages.send", "--session-id=#ops", "hi"],
        )
        .await;
        assert_eq!(run.code, 3, "{}", run.stderr);
        let (body, human) = run.error();
        assert_eq!(body.error.kind, ErrorKind::Denied);
        assert!(human.starts_with("error (denied): "), "{human}");
        assert!(sends(&server).is_empty());
    }
}

#[test]
fn a_mistyped_option_of_the_cli_gets_a_did_you_mean_and_reaches_no_server() {
    let server = ok_value(json!(null));
    for (args, option) in [
        (&["--lst"][..], "--list"),
        (&["--hlep"], "--help"),
        (&["x.y", "--lst"], "--list"),
        (&["x.y", "--hlep"], "--help"),
        (&["x.y", "--timout"], "--timeout"),
    ] {
        let run = tools(args, &server.env(), None);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        let (body, human) = run.error();
        assert_eq!(body.error.code, "unknown_option", "{args:?}");
        assert!(
            human.contains(&format!("did you mean '{option}'?")),
            "{args:?}: {human}"
        );
    }
    // A field two edits from an option is not taken for it.
    let run = tools(&["x.y", "--limit"], &server.env(), None);
    let (body, human) = run.error();
    assert_eq!(body.error.code, "missing_value", "{human}");
    assert!(!human.contains("--list"), "{human}");
    assert!(
        server.seen().is_empty(),
        "a usage error must not reach the server"
    );
}

/// The server's answer to a field the callable does not have, as the tool server words it.
fn unknown_field(field: &str) -> Answer {
    error_answer(
        400,
        "usage",
        "unknown_field",
        &format!("Unknown field '{field}'. Fields: limit, sessionId"),
        json!({"field": field, "known": ["limit", "sessionId"]}),
    )
}

#[test]
fn a_mistyped_output_option_is_reported_as_the_option_not_as_a_field_of_the_callable() {
    let server = Responder::start(|seen| {
        let request: CallRequest = serde_json::from_str(&seen.body).expect("a call");
        let field = request.args.keys().find(|k| *k != "sessionId").cloned();
        unknown_field(&field.unwrap_or_default())
    });
    for args in [
        &["x.y", "--session-id=#ops", "--outptu=text"][..],
        &["--outptu=text", "x.y"],
        &["x.y", "--ouptut=json"],
    ] {
        let run = tools(args, &server.env(), None);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        let (body, human) = run.error();
        assert_eq!(body.error.code, "unknown_option", "{args:?}: {human}");
        assert!(human.contains("did you mean '--output'?"), "{human}");
        assert!(!human.contains("Unknown field"), "{human}");
    }
    // Nearer to one of the callable's fields than to an option: the server's answer stands.
    let run = tools(&["x.y", "--limt=5"], &server.env(), None);
    let (body, human) = run.error();
    assert_eq!(body.error.code, "unknown_field", "{human}");
    assert!(human.contains("Unknown field 'limt'"), "{human}");
}

#[test]
fn output_with_a_space_works_like_output_with_an_equals_sign() {
    let value = json!({"messages": [{"ts": "2024-05-01T12:00:00Z", "authorName": "stanley", "text": "ping"}]});
    let server = ok_value(value);
    let spaced = tools(
        &["x.y", "--output", "text", "--limit=2"],
        &server.env(),
        None,
    );
    let joined = tools(&["x.y", "--output=text", "--limit=2"], &server.env(), None);
    let before = tools(
        &["--output", "text", "x.y", "--limit=2"],
        &server.env(),
        None,
    );
    assert_eq!(spaced.code, 0, "{}", spaced.stderr);
    assert_eq!(spaced.stdout, "[2024-05-01 12:00:00] stanley: ping\n");
    assert_eq!(spaced.stdout, joined.stdout);
    assert_eq!(before.stdout, joined.stdout);
    let bodies: Vec<Value> = server
        .seen()
        .iter()
        .map(|s| serde_json::from_str(&s.body).expect("json"))
        .collect();
    assert_eq!(bodies.len(), 3);
    for body in &bodies {
        assert_eq!(
            body["args"],
            json!({"limit": "2"}),
            "'text' is not a word of the call"
        );
        assert!(
            body.get("positional").is_none_or(|p| p == &json!([])),
            "{body}"
        );
    }
}
