//! The console's API over HTTP: every route refuses a request without a session; changes need
//! the session's CSRF token and a same-origin `Origin`; reads and changes go through the
//! pipeline and the audit log; garbage gets a clear 4xx.

mod common;

use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::console::{ci_asks_config, console_config, log_in, log_in_as, login, origin, request};
use serde_json::{json, Value};
use switchboard_console::API_ROUTES;
use switchboard_testkit::platform::{RecordingPlatform, SurfaceCall};
use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};

#[tokio::test]
async fn the_console_is_off_unless_configured() {
    let server = TestServer::start(&DEMO_CONFIG).await.unwrap();
    for path in ["/", "/console/app.js", "/console/api/me"] {
        let answer = request("GET", format!("{}{path}", server.url()), vec![], None).await;
        assert_eq!(answer.status, 404, "{path}: {}", answer.body);
    }
}

#[tokio::test]
async fn the_page_and_its_assets_are_served_with_a_strict_policy() {
    let server = TestServer::start(&console_config("")).await.unwrap();
    let page = request("GET", format!("{}/", server.url()), vec![], None).await;
    assert_eq!(page.status, 200);
    let html = page.body.as_str().unwrap_or_default();
    assert!(html.contains("/console/app.js"), "{html}");
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no external resource"
    );
    for asset in ["/console/app.js", "/console/app.css"] {
        let answer = request("GET", format!("{}{asset}", server.url()), vec![], None).await;
        assert_eq!(answer.status, 200, "{asset}");
    }
}

#[tokio::test]
async fn every_console_api_route_refuses_a_request_without_a_session() {
    let server = TestServer::start(&console_config("")).await.unwrap();
    let bearer = format!("Bearer {}", server.operator_token());
    for (method, path) in API_ROUTES {
        for headers in [
            vec![],
            vec![("cookie", "sb_console=0123456789abcdef".to_owned())],
            // The console API is not the bearer API: the operator token alone is not a session.
            vec![("authorization", bearer.clone())],
            vec![
                ("cookie", "sb_console=".to_owned()),
                ("origin", origin(&server)),
            ],
        ] {
            let answer = request(
                method,
                format!("{}{path}", server.url()),
                headers.clone(),
                Some(b"{}".to_vec()),
            )
            .await;
            assert_eq!(
                answer.status, 401,
                "{method} {path} with {headers:?}: {}",
                answer.body
            );
            assert_eq!(
                answer.body["error"]["code"], "console_session",
                "{method} {path}"
            );
        }
    }
}

#[tokio::test]
async fn changes_need_the_csrf_token_and_the_same_origin() {
    let server = TestServer::start(&console_config("")).await.unwrap();
    let login = log_in(&server).await;
    for (method, path) in API_ROUTES.iter().filter(|(method, _)| *method == "POST") {
        let url = format!("{}{path}", server.url());
        let cases = [
            (
                "no csrf",
                vec![
                    ("cookie", login.cookie.clone()),
                    ("origin", origin(&server)),
                ],
            ),
            (
                "wrong csrf",
                vec![
                    ("cookie", login.cookie.clone()),
                    ("origin", origin(&server)),
                    ("x-switchboard-csrf", "0".repeat(32)),
                ],
            ),
            (
                "no origin",
                vec![
                    ("cookie", login.cookie.clone()),
                    ("x-switchboard-csrf", login.csrf.clone()),
                ],
            ),
            (
                "other origin",
                vec![
                    ("cookie", login.cookie.clone()),
                    ("x-switchboard-csrf", login.csrf.clone()),
                    ("origin", "http://evil.example".to_owned()),
                ],
            ),
        ];
        for (case, headers) in cases {
            let answer = request(method, url.clone(), headers, Some(b"{}".to_vec())).await;
            assert_eq!(answer.status, 403, "{path} {case}: {}", answer.body);
            // Another origin is refused before any route, the console's included.
            let code = if case == "other origin" {
                "cross_origin"
            } else {
                "csrf_refused"
            };
            assert_eq!(answer.body["error"]["code"], code, "{path} {case}");
        }
    }
    // The session still works, and reads need no CSRF token.
    let me = request(
        "GET",
        format!("{}/console/api/me", server.url()),
        login.read(),
        None,
    )
    .await;
    assert_eq!(me.status, 200, "{}", me.body);
    assert_eq!(me.body["caller"], "operator");
}

#[tokio::test]
async fn login_refuses_wrong_tokens_other_origins_and_tokens_without_console() {
    let config = console_config(
        r#"
[[toolserver.tokens]]
name = "ci"
token_env = "CI_TOKEN"
scope = ["surface.*"]

[[toolserver.tokens]]
name = "watch"
token_env = "WATCH_TOKEN"
scope = ["console", "surface.*", "audit.*"]
"#,
    );
    let server = TestServer::start_with_tokens(
        &config,
        Arc::new(RecordingPlatform::demo()),
        &[("ci", "ci-secret-value"), ("watch", "watch-secret-value")],
    )
    .await
    .unwrap();
    let wrong = login(&server, "not-the-token").await;
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    assert!(wrong.set_cookie.is_none());
    let empty = login(&server, "").await;
    assert_eq!(empty.status, 401, "{}", empty.body);
    let ci = login(&server, "ci-secret-value").await;
    assert_eq!(ci.status, 403, "{}", ci.body);
    let capability = server.mint(demo_world::OPS, "run-1", &["*"], Duration::from_secs(60));
    let run = login(&server, &capability).await;
    assert_ne!(run.status, 200, "{}", run.body);
    let cross = request(
        "POST",
        format!("{}/console/api/login", server.url()),
        vec![("origin", "http://evil.example".to_owned())],
        Some(
            json!({ "token": server.operator_token() })
                .to_string()
                .into_bytes(),
        ),
    )
    .await;
    assert_eq!(cross.status, 403, "{}", cross.body);
    let watch = login(&server, "watch-secret-value").await;
    assert_eq!(watch.status, 200, "{}", watch.body);
    assert_eq!(watch.body["caller"], "token:watch");
    for garbage in [
        &b"not json"[..],
        b"{\"token\": 5}",
        b"{\"token\":\"x\",\"more\":1}",
        b"",
    ] {
        let answer = request(
            "POST",
            format!("{}/console/api/login", server.url()),
            vec![("origin", origin(&server))],
            Some(garbage.to_vec()),
        )
        .await;
        assert_eq!(
            answer.status,
            400,
            "{:?}: {}",
            String::from_utf8_lossy(garbage),
            answer.body
        );
    }
}

#[tokio::test]
async fn reads_and_changes_pass_the_pipeline_and_the_audit_log() {
    let server = TestServer::start(&console_config("")).await.unwrap();
    let login = log_in(&server).await;
    let url = server.url();
    let sessions = request(
        "GET",
        format!("{url}/console/api/sessions"),
        login.read(),
        None,
    )
    .await;
    assert_eq!(sessions.status, 200, "{}", sessions.body);
    assert!(sessions.body["sessions"]
        .as_array()
        .is_some_and(|s| !s.is_empty()));
    let ops = demo_world::OPS;
    let messages = request(
        "GET",
        format!("{url}/console/api/sessions/{ops}/messages?limit=5"),
        login.read(),
        None,
    )
    .await;
    assert_eq!(messages.status, 200, "{}", messages.body);
    let audit = request(
        "GET",
        format!("{url}/console/api/audit?tool=surface.*&limit=10"),
        login.read(),
        None,
    )
    .await;
    assert_eq!(audit.status, 200, "{}", audit.body);
    let rows = server.audit_rows();
    for tool in ["surface.sessions.list", "surface.messages.list"] {
        assert!(
            rows.iter()
                .any(|row| row.tool == tool && row.caller == "operator"),
            "{tool} is audited: {rows:?}"
        );
    }
    // A session the allowlist refuses is refused here too.
    let random = demo_world::RANDOM;
    let refused = request(
        "GET",
        format!("{url}/console/api/sessions/{random}/messages"),
        login.read(),
        None,
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.body);

    // A scope change: the same store as /tools, audited as the console.
    let changed = request(
        "POST",
        format!("{url}/console/api/sessions/{ops}/scope"),
        login.change(&server),
        Some(
            json!({"action": "set", "tools": "surface.messages.list"})
                .to_string()
                .into_bytes(),
        ),
    )
    .await;
    assert_eq!(changed.status, 200, "{}", changed.body);
    assert_eq!(changed.body["effective"], json!(["surface.messages.list"]));
    assert_eq!(changed.body["overridden"], true);
    let shown = request(
        "GET",
        format!("{url}/console/api/sessions/{ops}/scope"),
        login.read(),
        None,
    )
    .await;
    assert_eq!(shown.body["effective"], json!(["surface.messages.list"]));
    // Through the operator callable: its audit row is the call's, not one built by hand.
    let row = server
        .audit_rows()
        .into_iter()
        .find(|row| row.tool == "admin.tools.set")
        .expect("the change is audited");
    assert_eq!(row.caller, "operator");
    assert_eq!(row.sessions, vec![entity::Snowflake(ops)]);
    assert_eq!(row.outcome, "ok");
    assert_eq!(row.input["action"], "set");
    for (body, why) in [
        (
            json!({"action": "enable", "tools": "surface.nope"}),
            "unknown callable",
        ),
        (json!({"action": "explode"}), "unknown action"),
        (json!({"action": 3}), "wrong type"),
    ] {
        let answer = request(
            "POST",
            format!("{url}/console/api/sessions/{ops}/scope"),
            login.change(&server),
            Some(body.to_string().into_bytes()),
        )
        .await;
        assert_eq!(answer.status, 400, "{why}: {}", answer.body);
    }
    let bad_id = request(
        "GET",
        format!("{url}/console/api/sessions/not-an-id/scope"),
        login.read(),
        None,
    )
    .await;
    assert_eq!(bad_id.status, 400, "{}", bad_id.body);
    let huge = request(
        "POST",
        format!("{url}/console/api/sessions/{ops}/scope"),
        login.change(&server),
        Some(vec![b' '; 64 * 1024]),
    )
    .await;
    assert_eq!(huge.status, 413, "{}", huge.body);
    // Compose exists only in the playground.
    let compose = request(
        "POST",
        format!("{url}/console/api/compose"),
        login.change(&server),
        Some(
            json!({"sessionId": ops.to_string(), "authorId": "1", "content": "hi"})
                .to_string()
                .into_bytes(),
        ),
    )
    .await;
    assert_eq!(compose.status, 404, "{}", compose.body);

    // Logout ends the session for every route.
    let out = request(
        "POST",
        format!("{url}/console/api/logout"),
        login.change(&server),
        Some(b"{}".to_vec()),
    )
    .await;
    assert_eq!(out.status, 200, "{}", out.body);
    let after = request("GET", format!("{url}/console/api/me"), login.read(), None).await;
    assert_eq!(after.status, 401, "{}", after.body);
}

#[tokio::test]
async fn an_approval_decided_in_the_console_lets_the_call_run_and_redraws_the_card() {
    let config = ci_asks_config("", "");
    let server = TestServer::start_with_tokens(
        &config,
        Arc::new(RecordingPlatform::demo()),
        &[("ci", "ci-secret-value")],
    )
    .await
    .unwrap();
    let login = log_in(&server).await;
    let url = server.url();
    let token = "ci-secret-value".to_owned();
    let call = tokio::spawn(request(
        "POST",
        format!("{url}/v1/call"),
        vec![("authorization", format!("Bearer {token}"))],
        Some(
            json!({"tool": "surface.messages.send", "input": {"sessionId": "#release-room", "text": "ship it"}})
                .to_string()
                .into_bytes(),
        ),
    ));
    let mut pending = Value::Null;
    for _ in 0..100 {
        let answer = request(
            "GET",
            format!("{url}/console/api/approvals"),
            login.read(),
            None,
        )
        .await;
        if answer.body["approvals"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
        {
            pending = answer.body["approvals"][0].clone();
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let id = pending["id"]
        .as_str()
        .expect("the ask is pending")
        .to_owned();
    let garbage = request(
        "POST",
        format!("{url}/console/api/approvals/{id}"),
        login.change(&server),
        Some(b"{\"approve\":\"yes\"}".to_vec()),
    )
    .await;
    assert_eq!(garbage.status, 400, "{}", garbage.body);
    let decided = request(
        "POST",
        format!("{url}/console/api/approvals/{id}"),
        login.change(&server),
        Some(b"{\"approve\":true}".to_vec()),
    )
    .await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    assert_eq!(decided.body["approval"]["state"], "approved");
    assert_eq!(decided.body["approval"]["by"], "console:operator");
    let answer = call.await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.body);
    let again = request(
        "POST",
        format!("{url}/console/api/approvals/{id}"),
        login.change(&server),
        Some(b"{\"approve\":false}".to_vec()),
    )
    .await;
    assert_eq!(again.status, 404, "decided once: {}", again.body);
    assert_eq!(again.body["error"]["code"], "unknown_approval");
    assert!(
        server
            .surface()
            .calls()
            .iter()
            .any(|call| matches!(call, SurfaceCall::UpdateApproval { card, .. } if card.id == id)),
        "the Discord card is redrawn"
    );
    let row = server
        .audit_rows()
        .into_iter()
        .find(|row| row.tool == "surface.messages.send")
        .expect("the call is audited");
    assert_eq!(row.decided_by.as_deref(), Some("console:operator"));
    // The decision is a call of its own, audited like any.
    let decision = server
        .audit_rows()
        .into_iter()
        .find(|row| row.tool == "approvals.decide" && row.outcome == "ok")
        .expect("the decision is audited");
    assert_eq!(decision.caller, "operator");
}

/// Runs as the console sees them: one running in #ops, which an abort stops.
#[derive(Default)]
struct OneRun {
    aborted: std::sync::Mutex<Vec<(u64, bool)>>,
}

impl OneRun {
    fn running(&self, channel_id: entity::Snowflake) -> Option<switchboard_engine::runs::Trigger> {
        (channel_id.0 == demo_world::OPS && self.aborted.lock().unwrap().is_empty()).then(|| {
            switchboard_engine::runs::Trigger {
                channel_id,
                message_id: None,
                author_id: entity::Snowflake(demo_world::STANLEY),
                author_name: "Stanley".into(),
                author_roles: Vec::new(),
                text: "summarise #ops".into(),
                workflow_id: None,
                agent: None,
            }
        })
    }
}

impl switchboard_engine::runs::Runs for OneRun {
    fn arrived(&self, _: &switchboard_engine::runs::Arrival<'_>) {}
    fn enqueue(&self, _: switchboard_engine::runs::Trigger) {}
    fn list(&self, _: Option<entity::Snowflake>) -> Vec<switchboard_engine::runs::RunView> {
        self.running(entity::Snowflake(demo_world::OPS))
            .map(|trigger| switchboard_engine::runs::RunView {
                run_id: Some("run-00000000000000aa".into()),
                session_id: trigger.channel_id,
                state: switchboard_engine::runs::RunState::Running,
                started_ms: Some(1),
                requested_by: trigger.author_id,
                requested_by_name: trigger.author_name,
                trigger_message_id: None,
                workflow_id: None,
                text: trigger.text,
                parent_run_id: None,
                agent: None,
                started_by: None,
                ended_ms: None,
                answer: None,
                usage: None,
            })
            .into_iter()
            .collect()
    }
    fn abort(
        &self,
        target: switchboard_engine::runs::AbortTarget<'_>,
        _: entity::Snowflake,
        admin: bool,
    ) -> switchboard_engine::runs::AbortOutcome {
        let switchboard_engine::runs::AbortTarget::Session(channel_id) = target else {
            return switchboard_engine::runs::AbortOutcome::NothingRunning;
        };
        self.aborted.lock().unwrap().push((channel_id.0, admin));
        switchboard_engine::runs::AbortOutcome::Stopped {
            run_id: "run-00000000000000aa".into(),
            session_id: channel_id,
        }
    }
}

#[tokio::test]
async fn runs_in_progress_are_listed_and_aborted_as_an_admin() {
    let server = TestServer::start(&console_config("")).await.unwrap();
    let login = log_in(&server).await;
    let url = server.url();
    let none = request("GET", format!("{url}/console/api/runs"), login.read(), None).await;
    assert_eq!(none.body["agent"], false, "{}", none.body);
    let abort_without_agent = request(
        "POST",
        format!("{url}/console/api/runs/{}/abort", demo_world::OPS),
        login.change(&server),
        Some(b"{}".to_vec()),
    )
    .await;
    assert_eq!(
        abort_without_agent.status, 404,
        "{}",
        abort_without_agent.body
    );

    let runs = Arc::new(OneRun::default());
    assert!(server.core().set_runs(runs.clone()));
    let listed = request("GET", format!("{url}/console/api/runs"), login.read(), None).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(
        listed.body["active"][0]["sessionId"],
        demo_world::OPS.to_string()
    );
    assert_eq!(listed.body["active"][0]["running"]["author"], "Stanley");
    let stopped = request(
        "POST",
        format!("{url}/console/api/runs/{}/abort", demo_world::OPS),
        login.change(&server),
        Some(b"{}".to_vec()),
    )
    .await;
    assert_eq!(stopped.body["outcome"], "stopped", "{}", stopped.body);
    assert_eq!(stopped.body["runId"], "run-00000000000000aa");
    assert_eq!(*runs.aborted.lock().unwrap(), vec![(demo_world::OPS, true)]);
    // The abort is the operator callable, audited as the console's caller like any call.
    let row = server
        .audit_rows()
        .into_iter()
        .rfind(|row| row.tool == "runs.abort")
        .expect("the abort has its audit row");
    assert_eq!(
        (&*row.caller, &*row.outcome, row.sessions.as_slice()),
        (
            "operator",
            "ok",
            [entity::Snowflake(demo_world::OPS)].as_slice()
        )
    );
    // Not in a session the allowlist refuses.
    let refused = request(
        "POST",
        format!("{url}/console/api/runs/{}/abort", demo_world::RANDOM),
        login.change(&server),
        Some(b"{}".to_vec()),
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
}

#[tokio::test]
async fn with_console_approves_off_the_console_cannot_decide() {
    let config = console_config(
        r##"
[permissions]
approvers = ["@stanley"]
console_approves = false

[[permissions.rules]]
tool = "surface.messages.send"
session = "#release-room"
caller = "operator"
policy = "ask"
"##,
    );
    let server = TestServer::start(&config).await.unwrap();
    let login = log_in(&server).await;
    let url = server.url();
    let token = server.operator_token().to_owned();
    let call = tokio::spawn(request(
        "POST",
        format!("{url}/v1/call"),
        vec![("authorization", format!("Bearer {token}"))],
        Some(
            json!({"tool": "surface.messages.send", "input": {"sessionId": "#release-room", "text": "ship it"}})
                .to_string()
                .into_bytes(),
        ),
    ));
    let mut id = None;
    for _ in 0..100 {
        let answer = request(
            "GET",
            format!("{url}/console/api/approvals"),
            login.read(),
            None,
        )
        .await;
        assert_eq!(answer.body["consoleApproves"], false);
        if let Some(found) = answer.body["approvals"][0]["id"].as_str() {
            id = Some(found.to_owned());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let id = id.expect("the ask is pending");
    let refused = request(
        "POST",
        format!("{url}/console/api/approvals/{id}"),
        login.change(&server),
        Some(b"{\"approve\":true}".to_vec()),
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert_eq!(refused.body["error"]["code"], "console_approvals_off");
    assert_eq!(
        server.core().approvals().pending().len(),
        1,
        "still waiting"
    );
    call.abort();
}

/// One SSE event as the reader saw it: its type, its data, its id.
type Seen = (String, Value, Option<String>);

/// An SSE reader on its own thread, each event's data parsed as JSON (else kept as a string).
fn subscribe(url: String, headers: Vec<(&'static str, String)>) -> mpsc::Receiver<Option<Seen>> {
    common::sse::subscribe(url, headers, Duration::from_secs(60), |data| {
        serde_json::from_str(&data).unwrap_or(Value::String(data))
    })
}

/// The next event that is not `health.sampled` (unless that is what is wanted), within 10 s.
fn next_event(rx: &mpsc::Receiver<Option<Seen>>) -> Seen {
    loop {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Some(seen)) if seen.0 == "health.sampled" => continue,
            Ok(Some(seen)) => return seen,
            other => panic!("no event: {other:?}"),
        }
    }
}

async fn wait_for_subscribers(server: &TestServer, n: usize) {
    for _ in 0..500 {
        if server.core().events().subscribers() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "{n} subscribers never connected ({} did)",
        server.core().events().subscribers()
    );
}

/// Rate-limit headroom as the bot's REST client would report it.
struct FixedHeadroom;

impl switchboard_console::health::HeadroomSource for FixedHeadroom {
    fn headroom(&self) -> switchboard_console::health::RateHeadroom {
        use switchboard_console::health::*;
        RateHeadroom {
            buckets: vec![BucketHeadroom {
                route: "POST /channels/1000000000000000401/messages".into(),
                limit: Some(5),
                remaining: Some(1),
                reset_after_ms: Some(1500),
                waiting: 0,
            }],
            buckets_tracked: 3,
            global: GlobalHeadroom {
                limit: 50,
                used: 7,
                paused_for_ms: 0,
            },
            invalid: InvalidHeadroom {
                count: 12,
                budget: 5000,
                discord_limit: 10_000,
                window_s: 600,
            },
        }
    }
}

// Multi-threaded: the test blocks on its readers while the server keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_relays_the_hub_for_the_logged_in_caller_until_logout() {
    let config = console_config(
        r#"
[[toolserver.tokens]]
name = "watch"
token_env = "WATCH_TOKEN"
scope = ["console", "audit.*"]
"#,
    );
    let server = TestServer::start_with_tokens(
        &config,
        Arc::new(RecordingPlatform::demo()),
        &[("watch", "watch-secret-value")],
    )
    .await
    .unwrap();
    let url = server.url();
    let core = Arc::clone(server.core());
    server.console().sample(&core);
    let operator = log_in(&server).await;
    let watch = log_in_as(&server, "watch-secret-value").await;

    // A GET needs the cookie, not the CSRF token; a page of another origin is refused before
    // any route, the cookie notwithstanding.
    let mut from_elsewhere = operator.read();
    from_elsewhere.push(("origin", "http://evil.example".to_owned()));
    let refused = subscribe(format!("{url}/console/api/events"), from_elsewhere);
    let (kind, status, _) = next_event(&refused);
    assert_eq!((kind.as_str(), status), ("http", json!(403)));
    let everything = subscribe(format!("{url}/console/api/events"), operator.read());
    let watching = subscribe(format!("{url}/console/api/events"), watch.read());
    let release_only = subscribe(
        format!("{url}/console/api/events?session=%23release-room"),
        operator.read(),
    );
    wait_for_subscribers(&server, 3).await;

    // What the bot publishes when a message is stored, then a call through the pipeline.
    core.events().publish(
        "message.created",
        Some(entity::Snowflake(demo_world::OPS)),
        json!({ "messageId": "1", "authorName": "Stanley", "text": "hello" }),
    );
    let sent = request(
        "POST",
        format!("{url}/v1/call"),
        vec![("authorization", format!("Bearer {}", server.operator_token()))],
        Some(
            json!({"tool": "surface.messages.send", "input": {"sessionId": "#release-room", "text": "ship it"}})
                .to_string()
                .into_bytes(),
        ),
    )
    .await;
    assert_eq!(sent.status, 200, "{}", sent.body);

    let (kind, data, id) = next_event(&everything);
    assert_eq!(
        (kind.as_str(), data["text"].as_str()),
        ("message.created", Some("hello"))
    );
    let message = id.expect("an event has its id");
    assert_eq!(data["id"], message.as_str(), "the SSE id is the event's");
    let (kind, data, _) = next_event(&everything);
    assert_eq!(kind, "call.finished");
    assert_eq!(data["session"], demo_world::RELEASE_ROOM.to_string());
    // A console login reads messages (the console's pages), so its stream carries them too.
    let (kind, data, _) = next_event(&watching);
    assert_eq!(kind, "message.created", "{data}");
    let (kind, data, _) = next_event(&watching);
    assert_eq!(kind, "call.finished", "{data}");
    assert_eq!(data["tool"], "surface.messages.send");
    // ?session= keeps one session's events.
    let (kind, data, _) = next_event(&release_only);
    assert_eq!(kind, "call.finished");
    assert_eq!(data["session"], demo_world::RELEASE_ROOM.to_string());

    // Last-Event-ID resumes after the event it names.
    let mut resume = operator.read();
    resume.push(("last-event-id", message));
    let resumed = subscribe(format!("{url}/console/api/events"), resume);
    let (kind, _, _) = next_event(&resumed);
    assert_eq!(kind, "call.finished");
    // A garbage id or parameter is a typed 400, not a stream.
    let mut garbage = operator.read();
    garbage.push(("last-event-id", "soon".to_owned()));
    let refused = subscribe(format!("{url}/console/api/events"), garbage);
    assert_eq!(next_event(&refused), ("http".into(), json!(400), None));
    let refused = subscribe(
        format!("{url}/console/api/events?types=nope"),
        operator.read(),
    );
    assert_eq!(next_event(&refused), ("http".into(), json!(400), None));

    // A sparkline sample is announced on the stream, and the health answer carries it.
    tokio::time::sleep(Duration::from_millis(20)).await;
    server.console().sample(&core);
    let sampled = loop {
        match everything.recv_timeout(Duration::from_secs(10)) {
            Ok(Some(seen)) if seen.0 == "health.sampled" => break seen,
            Ok(Some(_)) => continue,
            other => panic!("no health.sampled: {other:?}"),
        }
    };
    assert!(sampled.2.is_none(), "control events carry no id");
    let health = request(
        "GET",
        format!("{url}/console/api/health"),
        operator.read(),
        None,
    )
    .await;
    assert_eq!(health.status, 200, "{}", health.body);
    let points = health.body["series"]["points"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    // (The server's own sampler may have added points beside the test's.)
    assert!(!points.is_empty() && points.len() <= 60, "{}", health.body);
    let total = |key: &str| points.iter().filter_map(|p| p[key].as_f64()).sum::<f64>();
    assert!(total("callsPerS") > 0.0, "{}", health.body);
    assert!(total("eventsPerS") > 0.0, "{}", health.body);
    assert_eq!(health.body["series"]["everyS"], 5);
    // No REST client plugged in: no rate limits to show, said as null.
    assert!(health.body["rateLimits"].is_null(), "{}", health.body);
    assert!(server.console().set_headroom(Arc::new(FixedHeadroom)));
    let health = request(
        "GET",
        format!("{url}/console/api/health"),
        operator.read(),
        None,
    )
    .await;
    let limits = &health.body["rateLimits"];
    assert_eq!(limits["buckets"][0]["remaining"], 1, "{}", health.body);
    assert_eq!(limits["global"]["used"], 7);
    assert_eq!(limits["invalid"]["budget"], 5000);

    // One login holds at most four streams.
    let more: Vec<_> = (0..3)
        .map(|_| subscribe(format!("{url}/console/api/events"), watch.read()))
        .collect();
    wait_for_subscribers(&server, 6).await;
    let fifth = subscribe(format!("{url}/console/api/events"), watch.read());
    assert_eq!(next_event(&fifth), ("http".into(), json!(503), None));
    drop(more);

    // Logging out closes that login's streams at once, with a reason; the others go on.
    let out = request(
        "POST",
        format!("{url}/console/api/logout"),
        operator.change(&server),
        Some(b"{}".to_vec()),
    )
    .await;
    assert_eq!(out.status, 200, "{}", out.body);
    for stream in [&everything, &release_only, &resumed] {
        let (kind, data, _) = next_event(stream);
        assert_eq!(kind, "stream.closed");
        assert_eq!(data["reason"], "session_ended");
        assert!(
            matches!(stream.recv_timeout(Duration::from_secs(10)), Ok(None)),
            "the stream ends after saying why"
        );
    }
    let after = subscribe(format!("{url}/console/api/events"), operator.read());
    assert_eq!(next_event(&after), ("http".into(), json!(401), None));
    core.events()
        .publish("gateway.state", None, json!({ "state": "ready" }));
    let (kind, _, _) = next_event(&watching);
    assert_eq!(kind, "gateway.state", "the watch login's stream still runs");
}

#[tokio::test]
async fn a_correct_token_logs_in_however_many_wrong_ones_came_first() {
    let server = TestServer::start(&console_config("")).await.unwrap();
    // A tokenless guesser spends the failure budget...
    for attempt in 0..30 {
        let wrong = login(&server, &format!("guess-{attempt}")).await;
        assert_eq!(wrong.status, 401, "{}", wrong.body);
    }
    // ...after which its failures are slowed and told to wait...
    let slowed: Vec<_> = (0..4)
        .map(|attempt| {
            let url = server.url();
            let origin = origin(&server);
            tokio::spawn(async move {
                request(
                    "POST",
                    format!("{url}/console/api/login"),
                    vec![("origin", origin)],
                    Some(
                        json!({ "token": format!("again-{attempt}") })
                            .to_string()
                            .into_bytes(),
                    ),
                )
                .await
            })
        })
        .collect();
    // ...while the operator, meanwhile, gets in at once.
    let operator = login(&server, server.operator_token()).await;
    assert_eq!(operator.status, 200, "{}", operator.body);
    for wrong in slowed {
        let wrong = wrong.await.unwrap();
        assert_eq!(wrong.status, 429, "{}", wrong.body);
        assert!(wrong.set_cookie.is_none());
    }
    let again = login(&server, server.operator_token()).await;
    assert_eq!(again.status, 200, "{}", again.body);
}

#[tokio::test]
async fn a_sessions_memory_is_shown_and_a_note_forgotten_through_the_pipeline() {
    let server = TestServer::start(&console_config("")).await.unwrap();
    let url = server.url();
    let ops = demo_world::OPS;
    let login = log_in(&server).await;
    let written = common::console::call_as(
        &server,
        server.operator_token(),
        "memory.write",
        json!({"scope": "session", "sessionId": ops.to_string(), "key": "release-config", "text": "lives at /srv/release"}),
    )
    .await;
    assert_eq!(written.status, 200, "{}", written.body);
    let shown = request(
        "GET",
        format!("{url}/console/api/sessions/{ops}/memory"),
        login.read(),
        None,
    )
    .await;
    assert_eq!(shown.status, 200, "{}", shown.body);
    assert_eq!(
        shown.body["notes"][0]["key"], "release-config",
        "{}",
        shown.body
    );
    assert!(shown.body["summary"]["summary"].is_null(), "{}", shown.body);
    assert!(shown.body["userNotes"].is_array(), "{}", shown.body);

    let forgot = request(
        "POST",
        format!("{url}/console/api/memory/forget"),
        login.change(&server),
        Some(
            json!({"scope": format!("session:{ops}"), "key": "release-config"})
                .to_string()
                .into_bytes(),
        ),
    )
    .await;
    assert_eq!(forgot.status, 200, "{}", forgot.body);
    assert_eq!(forgot.body["forgotten"], true, "{}", forgot.body);
    // Through the callable: its audit row is the call's.
    let row = server
        .audit_rows()
        .into_iter()
        .find(|row| row.tool == "memory.forget")
        .expect("the delete is audited");
    assert_eq!(row.outcome, "ok");
    assert_eq!(row.sessions, vec![entity::Snowflake(ops)]);

    // Without the CSRF token: refused, nothing forgotten.
    let forged = request(
        "POST",
        format!("{url}/console/api/memory/forget"),
        login.read(),
        Some(
            json!({"scope": format!("session:{ops}"), "key": "x"})
                .to_string()
                .into_bytes(),
        ),
    )
    .await;
    assert_eq!(forged.status, 403, "{}", forged.body);
    for (body, why) in [
        (json!({"scope": "team:1", "key": "k"}), "unknown scope kind"),
        (
            json!({"scope": "session:not-an-id", "key": "k"}),
            "bad session id",
        ),
        (json!({"scope": "user:abc", "key": "k"}), "bad user id"),
        (json!({"scope": format!("session:{ops}")}), "no key"),
        (
            json!({"scope": format!("session:{ops}"), "key": " "}),
            "empty key",
        ),
        (json!({"scope": 3, "key": "k"}), "wrong type"),
        (
            json!({"scope": format!("session:{ops}"), "key": "k", "extra": 1}),
            "unknown field",
        ),
    ] {
        let answer = request(
            "POST",
            format!("{url}/console/api/memory/forget"),
            login.change(&server),
            Some(body.to_string().into_bytes()),
        )
        .await;
        assert_eq!(answer.status, 400, "{why}: {}", answer.body);
    }
    let refused = request(
        "GET",
        format!("{url}/console/api/sessions/{}/memory", demo_world::RANDOM),
        login.read(),
        None,
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let bad_id = request(
        "GET",
        format!("{url}/console/api/sessions/not-an-id/memory"),
        login.read(),
        None,
    )
    .await;
    assert_eq!(bad_id.status, 400, "{}", bad_id.body);
}
