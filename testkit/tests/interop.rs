//! The interop fronts over a real server on 127.0.0.1:0: `POST /v1/batch`, `GET /v1/events`
//! (SSE) and `GET /metrics` (checked by `promtool`, which must be installed: `.ci/run` does).

mod common;

use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};
use switchboard_testkit::platform::demo;
use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};

struct Answer {
    status: u16,
    content_type: String,
    text: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

async fn request(
    method: &'static str,
    url: String,
    token: Option<String>,
    body: Option<Vec<u8>>,
) -> Answer {
    let task = tokio::task::spawn_blocking(move || {
        let mut builder = ureq::http::Request::builder().method(method).uri(&url);
        if let Some(token) = token {
            builder = builder.header("authorization", format!("Bearer {token}"));
        }
        let request = builder
            .header("content-type", "application/json")
            .body(body.unwrap_or_default())
            .expect("request");
        let mut response = agent().run(request).expect("server answers");
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        Answer {
            status: response.status().as_u16(),
            content_type,
            text: response.body_mut().read_to_string().expect("body is text"),
        }
    });
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("request finished in time")
        .expect("request task")
}

async fn batch(server: &TestServer, body: Vec<u8>) -> Answer {
    request(
        "POST",
        format!("{}/v1/batch", server.url()),
        Some(server.operator_token().to_owned()),
        Some(body),
    )
    .await
}

#[tokio::test]
async fn a_batch_of_five_with_one_failing_call_answers_five_results_in_order() {
    let server = TestServer::start(&DEMO_CONFIG)
        .await
        .expect("server starts");
    let body = json!({
        "calls": [
            {"tool": "surface.messages.send", "input": {"sessionId": "#ops", "text": "one"}},
            {"tool": "surface.messages.send", "input": {"sessionId": "#ops", "text": "two"}},
            {"tool": "surface.messages.send", "input": {"sessionId": "#nowhere", "text": "three"}},
            {"tool": "surface.help", "input": {}},
            {"tool": "surface.messages.send", "args": {"sessionId": "#release-room"}, "positional": ["five"]},
        ],
        "maxConcurrency": 2
    });
    let answer = batch(&server, serde_json::to_vec(&body).unwrap()).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let value = answer.json();
    assert_eq!(value["ok"], true);
    let results = value["value"]["results"].as_array().expect("results");
    assert_eq!(results.len(), 5);
    let oks: Vec<bool> = results.iter().map(|r| r["ok"] == true).collect();
    assert_eq!(oks, [true, true, false, true, true], "{results:?}");
    assert_eq!(results[2]["error"]["code"], "unknown_session");
    assert!(results[3]["value"].is_object() || results[3]["value"].is_string());
    // Each call went through the pipeline on its own: four posts, in the order given (the
    // concurrency of two cannot reorder the results; the posts themselves may interleave).
    let texts: Vec<String> = server.sends().into_iter().map(|m| m.content).collect();
    assert_eq!(texts.len(), 3, "{texts:?}");
    for expected in ["one", "two", "five"] {
        assert!(texts.iter().any(|t| t == expected), "{texts:?}");
    }
    // ... and each was audited.
    let audited = server.audit_rows().len();
    assert!(audited >= 5, "{audited} audit rows");
}

#[tokio::test]
async fn garbage_batches_get_typed_400s() {
    let server = TestServer::start(&DEMO_CONFIG)
        .await
        .expect("server starts");
    let many: Vec<Value> = (0..51)
        .map(|_| json!({"tool": "surface.help", "input": {}}))
        .collect();
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"not json".to_vec(), "bad_request"),
        (b"".to_vec(), "bad_request"),
        (b"[]".to_vec(), "bad_request"),
        (br#"{"calls": {}}"#.to_vec(), "bad_request"),
        (br#"{"calls": []}"#.to_vec(), "bad_request"),
        (br#"{"calls": [{"input": {}}]}"#.to_vec(), "bad_request"),
        (
            br#"{"calls": [{"tool": "surface.help"}], "extra": 1}"#.to_vec(),
            "bad_request",
        ),
        (
            br#"{"calls": [{"tool": "surface.help"}], "maxConcurrency": 0}"#.to_vec(),
            "invalid_input",
        ),
        (
            br#"{"calls": [{"tool": "surface.help"}], "maxConcurrency": -3}"#.to_vec(),
            "bad_request",
        ),
        (
            serde_json::to_vec(&json!({ "calls": many })).unwrap(),
            "too_many_calls",
        ),
        (vec![0xff, 0xfe, 0x00], "bad_request"),
    ];
    for (body, code) in cases {
        let shown = String::from_utf8_lossy(&body)
            .chars()
            .take(60)
            .collect::<String>();
        let answer = batch(&server, body).await;
        assert_eq!(answer.status, 400, "{shown}: {}", answer.text);
        let value = answer.json();
        assert_eq!(value["ok"], false, "{shown}");
        assert_eq!(value["error"]["kind"], "usage", "{shown}");
        assert_eq!(value["error"]["code"], code, "{shown}: {}", answer.text);
    }
    assert!(server.sends().is_empty());
    // Without a token, nothing is read.
    let answer = request(
        "POST",
        format!("{}/v1/batch", server.url()),
        None,
        Some(b"{}".to_vec()),
    )
    .await;
    assert_eq!(answer.status, 401);
}

#[tokio::test]
async fn a_batch_runs_each_call_with_the_callers_scope() {
    let server = TestServer::start(&DEMO_CONFIG)
        .await
        .expect("server starts");
    let token = server.mint(
        demo::OPS,
        "run-b",
        &["surface.messages.list"],
        Duration::from_secs(60),
    );
    let body = json!({"calls": [
        {"tool": "surface.messages.list", "input": {}},
        {"tool": "surface.messages.send", "input": {"text": "not allowed"}},
    ]});
    let answer = request(
        "POST",
        format!("{}/v1/batch", server.url()),
        Some(token),
        Some(serde_json::to_vec(&body).unwrap()),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let results = answer.json()["value"]["results"].clone();
    assert_eq!(results[0]["ok"], true, "{results}");
    assert_eq!(results[1]["error"]["code"], "out_of_scope", "{results}");
    assert!(server.sends().is_empty());
}

/// The codes of a batch's results, in order (`ok` for a success).
fn codes(answer: &Answer) -> Vec<String> {
    answer.json()["value"]["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results: {}", answer.text))
        .iter()
        .map(|r| {
            r["error"]["code"]
                .as_str()
                .map_or_else(|| "ok".to_owned(), str::to_owned)
        })
        .collect()
}

#[tokio::test]
async fn refused_calls_spend_the_callers_budget_and_are_audited_as_counted_bursts() {
    let config = format!(
        "{DEMO_CONFIG}
[[toolserver.tokens]]
name = \"probe\"
token_env = \"PROBE_TOKEN\"
scope = [\"surface.messages.list\"]

[toolserver.rate_limits]
per_caller_per_minute = 60
per_caller_burst = 5
"
    );
    let server = TestServer::start_with_tokens(
        &config,
        std::sync::Arc::new(switchboard_testkit::platform::RecordingPlatform::demo()),
        &[("probe", "probe-secret")],
    )
    .await
    .expect("server starts");
    let as_probe = |body: Value| {
        request(
            "POST",
            format!("{}/v1/batch", server.url()),
            Some("probe-secret".to_owned()),
            Some(serde_json::to_vec(&body).unwrap()),
        )
    };
    // A flood of names the token may not call — 50 different ones, unknown or out of its
    // scope — spends one budget: five are refused for what they are, the rest rate limited.
    let names: Vec<Value> = (0..50)
        .map(|i| {
            let tool = if i % 2 == 0 {
                format!("nope.{i}")
            } else {
                "surface.messages.send".to_owned()
            };
            json!({"tool": tool, "input": {"sessionId": "#ops", "text": "x"}})
        })
        .collect();
    let answer = as_probe(json!({"calls": names, "maxConcurrency": 1})).await;
    let seen = codes(&answer);
    assert_eq!(
        seen.iter().filter(|c| *c == "rate_limited").count(),
        45,
        "{seen:?}"
    );
    assert!(
        seen[..5]
            .iter()
            .all(|c| c == "unknown_tool" || c == "out_of_scope"),
        "{seen:?}"
    );
    // Its callable keeps its own budget; refused calls of it spend that one too.
    let list = json!({"tool": "surface.messages.list", "input": {"sessionId": "#ops"}});
    let bad = json!({"tool": "surface.messages.list", "input": {"sessionId": "#ops", "limit": -1}});
    let answer =
        as_probe(json!({"calls": [list, bad, bad, bad, bad, list], "maxConcurrency": 1})).await;
    assert_eq!(
        codes(&answer),
        [
            "ok",
            "invalid_input",
            "invalid_input",
            "invalid_input",
            "invalid_input",
            "rate_limited"
        ]
    );
    assert!(server.sends().is_empty());
    // Another caller is not touched.
    let answer = batch(
        &server,
        serde_json::to_vec(&json!({"calls": [list]})).unwrap(),
    )
    .await;
    assert_eq!(codes(&answer), ["ok"]);

    // The audit log: every call counted, in a bounded number of rows.
    server.core().flush_refusals(true);
    let rows: Vec<_> = server
        .audit_rows()
        .into_iter()
        .filter(|row| row.caller == "token:probe")
        .collect();
    assert_eq!(
        rows.iter().map(|row| row.count).sum::<u64>(),
        56,
        "{rows:#?}"
    );
    // Rate limited: per callable named (unknown names under one key), ten rows of their own
    // each, and the rest of each counted in one row.
    let limited: Vec<(String, u64)> = rows
        .iter()
        .filter(|row| row.code.as_deref() == Some("rate_limited"))
        .map(|row| (row.tool.to_string(), row.count))
        .collect();
    assert_eq!(
        limited.iter().map(|(_, n)| n).sum::<u64>(),
        46,
        "{limited:?}"
    );
    let counted: Vec<&(String, u64)> = limited.iter().filter(|(_, n)| *n > 1).collect();
    assert_eq!(counted.len(), 2, "{limited:?}");
    assert!(limited.len() <= 2 * 11 + 1, "{limited:?}");
    assert!(rows.len() <= 5 + 23 + 5, "{} rows", rows.len());
}

/// An SSE reader on its own thread: every `event:`/`data:` pair as `(type, data)`, and `None`
/// when the stream ends.
fn subscribe(
    url: String,
    token: String,
    last_event_id: Option<String>,
) -> mpsc::Receiver<Option<(String, String, Option<String>)>> {
    let mut headers = vec![("authorization", format!("Bearer {token}"))];
    if let Some(id) = last_event_id {
        headers.push(("last-event-id", id));
    }
    common::sse::subscribe(url, headers, Duration::from_secs(30), |data| data)
}

fn next_event(
    rx: &mpsc::Receiver<Option<(String, String, Option<String>)>>,
) -> (String, Value, Option<String>) {
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Some((kind, data, id))) => {
            let value = serde_json::from_str(&data).unwrap_or(Value::String(data));
            (kind, value, id)
        }
        other => panic!("no event: {other:?}"),
    }
}

async fn wait_for_subscribers(server: &TestServer, n: usize) {
    for _ in 0..200 {
        if server.core().events().subscribers() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the subscriber never connected");
}

// Multi-threaded: the test blocks on its readers while the server keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_client_sees_a_calls_finish_and_only_its_sessions() {
    let server = TestServer::start(&DEMO_CONFIG)
        .await
        .expect("server starts");
    let all = subscribe(
        format!("{}/v1/events", server.url()),
        server.operator_token().to_owned(),
        None,
    );
    let capability = server.mint(demo::OPS, "run-e", &["surface.*"], Duration::from_secs(60));
    let scoped = subscribe(
        format!("{}/v1/events?types=call.*", server.url()),
        capability.clone(),
        None,
    );
    wait_for_subscribers(&server, 2).await;

    let send = |session: &'static str, text: &'static str| {
        let body = serde_json::to_vec(&json!({"tool": "surface.messages.send", "input": {"sessionId": session, "text": text}})).unwrap();
        request(
            "POST",
            format!("{}/v1/call", server.url()),
            Some(server.operator_token().to_owned()),
            Some(body),
        )
    };
    assert_eq!(send("#release-room", "elsewhere").await.status, 200);
    assert_eq!(send("#ops", "here").await.status, 200);

    let (kind, first, id) = next_event(&all);
    assert_eq!(kind, "call.finished");
    assert_eq!(first["tool"], "surface.messages.send");
    assert_eq!(first["caller"], "operator");
    assert_eq!(first["decision"], "allow");
    assert_eq!(first["outcome"], "ok");
    assert_eq!(first["session"], demo::RELEASE_ROOM.to_string());
    assert!(first["durationMs"].is_u64());
    assert_eq!(id.as_deref(), first["id"].as_str());
    let (_, second, _) = next_event(&all);
    assert_eq!(second["session"], demo::OPS.to_string());

    // The capability of #ops sees its own calls only: not the operator's, even in #ops.
    let own = serde_json::to_vec(
        &json!({"tool": "surface.messages.list", "input": {"sessionId": "#ops"}}),
    )
    .unwrap();
    let listed = request(
        "POST",
        format!("{}/v1/call", server.url()),
        Some(capability),
        Some(own),
    )
    .await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    let (kind, seen, _) = next_event(&scoped);
    assert_eq!(kind, "call.finished");
    assert_eq!(seen["session"], demo::OPS.to_string());
    assert_eq!(seen["tool"], "surface.messages.list", "{seen}");
    assert_eq!(seen["run"], "run-e", "{seen}");

    // Resuming after the first event replays the second.
    let resumed = subscribe(
        format!("{}/v1/events", server.url()),
        server.operator_token().to_owned(),
        id.clone(),
    );
    let (_, replayed, _) = next_event(&resumed);
    assert_eq!(replayed["id"], second["id"]);
    // Ids are the store's: from the first event's predecessor, everything kept follows.
    let first_id: u64 = id
        .as_deref()
        .and_then(|id| id.parse().ok())
        .expect("a numeric id");
    let replay = subscribe(
        format!("{}/v1/events", server.url()),
        server.operator_token().to_owned(),
        Some((first_id - 1).to_string()),
    );
    assert_eq!(next_event(&replay).1["id"], first["id"]);
    // An id the store never gave is said to be unknown; the stream goes on from now.
    let unknown = subscribe(
        format!("{}/v1/events", server.url()),
        server.operator_token().to_owned(),
        Some((first_id + 1_000_000).to_string()),
    );
    let (kind, notice, notice_id) = next_event(&unknown);
    assert_eq!(kind, "stream.gap");
    assert_eq!(notice["reason"], "unknown_id", "{notice}");
    assert!(notice_id.is_none());
    mark(&server, 1);
    assert_eq!(next_event(&unknown).1["marker"], 1);
    server.stop().await;
    // Shutdown ends every stream with a reason.
    let mut ended = false;
    while let Ok(Some((kind, _, _))) = all.recv_timeout(Duration::from_secs(10)) {
        if kind == "stream.closed" {
            ended = true;
        }
    }
    assert!(ended, "the stream says it was closed");
}

/// Publishes a `gateway.state` marker (every subscriber may see it), for reading a stream up to
/// a point: what came before it was decided.
fn mark(server: &TestServer, n: u64) {
    server
        .core()
        .events()
        .publish("gateway.state", None, json!({ "marker": n }));
}

/// The events of `rx` up to the marker `n`, as (type, data).
fn until_mark(
    rx: &mpsc::Receiver<Option<(String, String, Option<String>)>>,
    n: u64,
) -> Vec<(String, Value)> {
    let mut seen = Vec::new();
    loop {
        let (kind, data, _) = next_event(rx);
        if kind == "gateway.state" && data["marker"] == n {
            return seen;
        }
        seen.push((kind, data));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_reaches_only_subscribers_that_may_read_what_it_carries() {
    let rules = "
[[toolserver.tokens]]
name = \"reader\"
token_env = \"READER_TOKEN\"
scope = [\"surface.messages.list\", \"surface.messages.read\", \"surface.help\"]

[[toolserver.tokens]]
name = \"auditor\"
token_env = \"AUDITOR_TOKEN\"
scope = [\"audit.list\"]
";
    let deny = "
[[permissions.rules]]
tool = \"surface.messages.*\"
policy = \"deny\"
session = \"release-room\"
caller = \"token:reader\"
";
    let server = TestServer::start_with_tokens(
        &format!("{DEMO_CONFIG}{rules}{deny}"),
        std::sync::Arc::new(switchboard_testkit::platform::RecordingPlatform::demo()),
        &[("reader", "reader-secret"), ("auditor", "auditor-secret")],
    )
    .await
    .expect("server starts");
    let call_as = |token: &str, tool: &str, input: Value| {
        request(
            "POST",
            format!("{}/v1/call", server.url()),
            Some(token.to_owned()),
            Some(serde_json::to_vec(&json!({"tool": tool, "input": input})).unwrap()),
        )
    };
    // The reader may not read #release-room.
    let refused = call_as(
        "reader-secret",
        "surface.messages.list",
        json!({"sessionId": "#release-room"}),
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.text);
    assert_eq!(refused.json()["error"]["code"], "permission_denied");

    let url = format!("{}/v1/events", server.url());
    let capability = server.mint(demo::OPS, "run-v", &["surface.*"], Duration::from_secs(60));
    let reader = subscribe(url.clone(), "reader-secret".into(), None);
    let auditor = subscribe(url.clone(), "auditor-secret".into(), None);
    let run = subscribe(url.clone(), capability, None);
    wait_for_subscribers(&server, 3).await;

    let hub = server.core().events();
    let message = |session: u64, text: &str| {
        hub.publish(
            "message.created",
            Some(entity::Snowflake(session)),
            json!({ "messageId": "1", "text": text }),
        );
    };
    message(demo::RELEASE_ROOM, "the release secret");
    message(demo::OPS, "hello ops");
    let sent = call_as(
        server.operator_token(),
        "surface.messages.send",
        json!({"sessionId": "#ops", "text": "from the operator"}),
    )
    .await;
    assert_eq!(sent.status, 200, "{}", sent.text);
    let own = call_as("reader-secret", "surface.help", json!({})).await;
    assert_eq!(own.status, 200, "{}", own.text);
    mark(&server, 1);

    let summary = |seen: &[(String, Value)]| -> Vec<String> {
        seen.iter()
            .map(|(kind, data)| match kind.as_str() {
                "message.created" => format!("message {}", data["text"].as_str().unwrap_or("?")),
                "call.finished" => format!(
                    "call {} by {}",
                    data["tool"].as_str().unwrap_or("?"),
                    data["caller"].as_str().unwrap_or("?")
                ),
                other => other.to_owned(),
            })
            .collect()
    };
    // The reader: #ops' message and its own call; not #release-room, not the operator's call.
    assert_eq!(
        summary(&until_mark(&reader, 1)),
        ["message hello ops", "call surface.help by token:reader"]
    );
    // The auditor reads the audit log, so every call, but no message.
    assert_eq!(
        summary(&until_mark(&auditor, 1)),
        [
            "call surface.messages.send by operator",
            "call surface.help by token:reader"
        ]
    );
    // The run of #ops: #ops' message only; others' calls are not its business.
    assert_eq!(summary(&until_mark(&run, 1)), ["message hello ops"]);

    // The rule goes in a reload: the reader sees #release-room from the next event on.
    let reloaded =
        switchboard_config::Config::parse(&format!("{DEMO_CONFIG}{rules}"), "t").unwrap();
    server.core().apply(reloaded);
    message(demo::RELEASE_ROOM, "now readable");
    mark(&server, 2);
    assert_eq!(summary(&until_mark(&reader, 2)), ["message now readable"]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capabilitys_stream_ends_when_its_token_does() {
    let server = TestServer::start(&DEMO_CONFIG)
        .await
        .expect("server starts");
    let url = format!("{}/v1/events", server.url());
    let finished = server.mint(demo::OPS, "run-f", &["surface.*"], Duration::from_secs(60));
    let aborted = server.mint(demo::OPS, "run-a", &["surface.*"], Duration::from_secs(60));
    let expiring = server.mint(demo::OPS, "run-x", &["surface.*"], Duration::from_secs(2));
    let streams: Vec<_> = [&finished, &aborted, &expiring]
        .iter()
        .map(|token| subscribe(url.clone(), (*token).clone(), None))
        .collect();
    wait_for_subscribers(&server, 3).await;
    assert!(server.core().revoke_capability(&finished));
    assert!(server
        .core()
        .end_capability(&aborted, switchboard_engine::auth::TokenEnd::Aborted));
    for (stream, reason) in streams
        .iter()
        .zip(["run_finished", "run_aborted", "token_expired"])
    {
        let (kind, data, _) = next_event(stream);
        assert_eq!(
            (kind.as_str(), data["reason"].as_str()),
            ("stream.closed", Some(reason))
        );
        assert!(data["lastEventId"].is_string(), "{data}");
        assert!(
            matches!(stream.recv_timeout(Duration::from_secs(5)), Ok(None)),
            "the stream ends after saying why"
        );
    }
    // And the token cannot open another.
    let again = request("GET", url, Some(finished), None).await;
    assert_eq!(again.status, 401, "{}", again.text);
    for _ in 0..200 {
        if server.core().events().subscribers() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(server.core().events().subscribers(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_caller_holds_a_bounded_number_of_streams() {
    let server = TestServer::start(&DEMO_CONFIG)
        .await
        .expect("server starts");
    let url = format!("{}/v1/events", server.url());
    let greedy = server.mint(demo::OPS, "run-g", &["surface.*"], Duration::from_secs(60));
    let held: Vec<_> = (0..switchboard_engine::events::MAX_STREAMS_PER_CALLER)
        .map(|_| subscribe(url.clone(), greedy.clone(), None))
        .collect();
    wait_for_subscribers(&server, switchboard_engine::events::MAX_STREAMS_PER_CALLER).await;
    let refused = request("GET", url.clone(), Some(greedy.clone()), None).await;
    assert_eq!(refused.status, 503, "{}", refused.text);
    assert_eq!(refused.json()["error"]["code"], "busy");
    assert!(
        refused.text.contains("this token holds"),
        "{}",
        refused.text
    );
    // Others still get theirs: another run, and the operator.
    let other = server.mint(demo::OPS, "run-o", &["surface.*"], Duration::from_secs(60));
    let others = [
        subscribe(url.clone(), other, None),
        subscribe(url.clone(), server.operator_token().to_owned(), None),
    ];
    wait_for_subscribers(
        &server,
        switchboard_engine::events::MAX_STREAMS_PER_CALLER + 2,
    )
    .await;
    // Its token ending ends its streams, and gives their slots back.
    server.core().revoke_capability(&greedy);
    for stream in &held {
        assert_eq!(next_event(stream).0, "stream.closed");
    }
    for _ in 0..200 {
        if server.core().events().subscribers() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(server.core().events().subscribers(), 2);
    drop((held, others));
}

#[tokio::test]
async fn event_queries_are_checked() {
    let server = TestServer::start(&DEMO_CONFIG)
        .await
        .expect("server starts");
    let token = Some(server.operator_token().to_owned());
    for (query, status) in [
        ("?types=nope", 400),
        ("?bogus=1", 400),
        ("?session=%23nowhere", 404),
        ("?lastEventId=abc", 400),
    ] {
        let answer = request(
            "GET",
            format!("{}/v1/events{query}", server.url()),
            token.clone(),
            None,
        )
        .await;
        assert_eq!(answer.status, status, "{query}: {}", answer.text);
        assert_eq!(answer.json()["ok"], false);
    }
    let capability = server.mint(demo::OPS, "run-q", &["surface.*"], Duration::from_secs(60));
    let answer = request(
        "GET",
        format!("{}/v1/events?session=%23release-room", server.url()),
        Some(capability),
        None,
    )
    .await;
    assert_eq!(answer.status, 403, "{}", answer.text);
    let answer = request("GET", format!("{}/v1/events", server.url()), None, None).await;
    assert_eq!(answer.status, 401);
}

async fn metrics(server: &TestServer, token: Option<String>) -> Answer {
    request("GET", format!("{}/metrics", server.url()), token, None).await
}

fn sample(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|line| line.starts_with(prefix))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// `promtool check metrics` on `text`; promtool must be installed (`.ci/run` installs Debian's
/// `prometheus` package). A missing promtool fails the test.
fn promtool_check(text: &str) {
    use std::io::Write;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool is installed (apt-get install prometheus; .ci/run does)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("promtool reads its input");
    let output = child.wait_with_output().expect("promtool runs");
    assert!(
        output.status.success(),
        "promtool check metrics failed:\n{}{}\n---\n{text}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn metrics_pass_promtool_and_move_when_calls_happen() {
    let server = TestServer::start(&DEMO_CONFIG)
        .await
        .expect("server starts");
    let token = Some(server.operator_token().to_owned());
    let before = metrics(&server, token.clone()).await;
    assert_eq!(before.status, 200);
    assert!(
        before.content_type.starts_with("text/plain"),
        "{}",
        before.content_type
    );
    let key = "switchboard_calls_total{tool=\"surface.messages.send\",outcome=\"ok\"}";
    let sent_before = sample(&before.text, key);
    for text in ["a", "b"] {
        let body = serde_json::to_vec(
            &json!({"tool": "surface.messages.send", "input": {"sessionId": "#ops", "text": text}}),
        )
        .unwrap();
        let answer = request(
            "POST",
            format!("{}/v1/call", server.url()),
            token.clone(),
            Some(body),
        )
        .await;
        assert_eq!(answer.status, 200);
    }
    let body = serde_json::to_vec(
        &json!({"tool": "surface.messages.send", "input": {"sessionId": "#random", "text": "x"}}),
    )
    .unwrap();
    request(
        "POST",
        format!("{}/v1/call", server.url()),
        token.clone(),
        Some(body),
    )
    .await;
    // The store's write queue, as the service reports it from its backend at each scrape: a
    // queue that made writers wait twice, 1.5 s in all, with 3 writes queued.
    server
        .core()
        .metrics()
        .store_queue(3, 2, Duration::from_millis(1_500));
    let after = metrics(&server, token.clone()).await;
    assert_eq!(sample(&after.text, "switchboard_store_queue_depth"), 3.0);
    assert_eq!(
        sample(&after.text, "switchboard_store_queue_waits_total"),
        2.0
    );
    assert_eq!(
        sample(&after.text, "switchboard_store_queue_wait_seconds_total"),
        1.5
    );
    assert_eq!(
        sample(&after.text, key),
        sent_before + 2.0,
        "{}",
        after.text
    );
    assert!(
        sample(
            &after.text,
            "switchboard_calls_total{tool=\"surface.messages.send\",outcome=\"denied\"}"
        ) >= 1.0,
        "{}",
        after.text
    );
    assert!(
        sample(
            &after.text,
            "switchboard_permission_decisions_total{decision=\"allow\"}"
        ) >= 2.0
    );
    assert!(after
        .text
        .contains("switchboard_call_duration_seconds_bucket{tool=\"surface.messages.send\""));
    assert!(after.text.contains("switchboard_approvals_pending 0"));
    assert!(after
        .text
        .contains("switchboard_gateway_state{state=\"none\"} 1"));
    promtool_check(&after.text);
}

#[tokio::test]
async fn metrics_need_the_operator_unless_public() {
    let server = TestServer::start_with_tokens(
        &format!("{DEMO_CONFIG}\n[[toolserver.tokens]]\nname = \"ci\"\ntoken_env = \"CI_TOKEN\"\nscope = [\"surface.*\"]\n"),
        std::sync::Arc::new(switchboard_testkit::platform::RecordingPlatform::demo()),
        &[("ci", "ci-secret")],
    )
    .await
    .expect("server starts");
    assert_eq!(metrics(&server, None).await.status, 401);
    assert_eq!(metrics(&server, Some("ci-secret".into())).await.status, 403);
    let public = TestServer::start(&format!("{DEMO_CONFIG}metrics_public = true\n"))
        .await
        .expect("server starts");
    let answer = metrics(&public, None).await;
    assert_eq!(answer.status, 200);
    promtool_check(&answer.text);
}
