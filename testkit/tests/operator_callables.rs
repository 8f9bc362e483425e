//! The operator callables (`approvals.list`, `approvals.decide`, `admin.tools.set`,
//! `admin.reload`, `runs.list`, `runs.abort`) from outside: a run's capability never gets them,
//! a named token only when its scope names them, and each goes through the pipeline and is
//! audited like any call.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::console::{call_as, ci_asks_config, pending_cards, send_in_background};
use entity::Snowflake;
use serde_json::{json, Value};
use switchboard_engine::auth::DiscordUser;
use switchboard_engine::live::{ReloadFuture, ReloadRefused, ReloadTrigger, Reloaded, Reloader};
use switchboard_engine::runs::{
    AbortOutcome, AbortTarget, Arrival, RunState, RunView, Runs, Trigger,
};
use switchboard_engine::CallContext;
use switchboard_testkit::platform::RecordingPlatform;
use switchboard_testkit::testing::TestServer;

const CI: &str = "ci-secret-value";
const ADMINS: &str = "admins-secret-value";
const ALL: &str = "all-secret-value";

const OPERATOR_CALLABLES: [&str; 8] = [
    "approvals.list",
    "approvals.decide",
    "admin.tools.set",
    "admin.reload",
    "admin.cluster.status",
    "runs.list",
    "runs.abort",
    "usage.report",
];

/// `admins` may call `admin.*`; `all` may call everything.
const TOKENS: &str = r#"
[[toolserver.tokens]]
name = "admins"
token_env = "ADMINS_TOKEN"
scope = ["admin.*", "surface.*"]

[[toolserver.tokens]]
name = "all"
token_env = "ALL_TOKEN"
scope = ["*"]
"#;

async fn server() -> TestServer {
    TestServer::start_with_tokens(
        &ci_asks_config(TOKENS, ""),
        Arc::new(RecordingPlatform::demo()),
        &[("ci", CI), ("admins", ADMINS), ("all", ALL)],
    )
    .await
    .unwrap()
}

/// An agent with one run going in #ops, started by Stanley, and one queued behind it.
#[derive(Default)]
struct OneRunning {
    aborted: Mutex<Vec<String>>,
}

const RUN: &str = "run-00000000000000aa";

impl OneRunning {
    fn views(&self) -> Vec<RunView> {
        let view = |state, run_id: Option<&str>, by: u64| RunView {
            run_id: run_id.map(str::to_owned),
            session_id: Snowflake(demo_world::OPS),
            state,
            started_ms: run_id.map(|_| 1_700_000_000_000),
            requested_by: Snowflake(by),
            requested_by_name: "someone".into(),
            trigger_message_id: None,
            workflow_id: None,
            text: "summarise #ops".into(),
            parent_run_id: None,
            agent: None,
            started_by: None,
            ended_ms: None,
            answer: None,
            usage: None,
        };
        let mut views = Vec::new();
        if self.aborted.lock().unwrap().is_empty() {
            views.push(view(RunState::Running, Some(RUN), demo_world::STANLEY));
        }
        views.push(view(RunState::Queued, None, demo_world::TOMAS));
        views
    }
}

impl Runs for OneRunning {
    fn arrived(&self, _: &Arrival<'_>) {}
    fn enqueue(&self, _: Trigger) {}
    fn list(&self, session: Option<Snowflake>) -> Vec<RunView> {
        self.views()
            .into_iter()
            .filter(|view| session.is_none_or(|s| s == view.session_id))
            .collect()
    }
    fn abort(&self, target: AbortTarget<'_>, user: Snowflake, admin: bool) -> AbortOutcome {
        let running = self.aborted.lock().unwrap().is_empty();
        let named = match target {
            AbortTarget::Run(id) => id == RUN,
            AbortTarget::Session(session) => session.0 == demo_world::OPS,
        };
        if !running || !named {
            return AbortOutcome::NothingRunning;
        }
        if user.0 != demo_world::STANLEY && !admin {
            return AbortOutcome::NotYours {
                owner: "Stanley".into(),
            };
        }
        self.aborted.lock().unwrap().push(RUN.to_owned());
        AbortOutcome::Stopped {
            run_id: RUN.to_owned(),
            session_id: Snowflake(demo_world::OPS),
        }
    }
}

/// A config file that is fine, or has one located problem.
struct FakeReloader {
    broken: bool,
}

impl Reloader for FakeReloader {
    fn reload(&self, _: ReloadTrigger) -> ReloadFuture<'_> {
        let broken = self.broken;
        Box::pin(async move {
            if broken {
                Err(ReloadRefused {
                    file: "switchboard.toml".into(),
                    problems: vec!["switchboard.toml:3:1: unknown key `discrod`".into()],
                })
            } else {
                Ok(Reloaded {
                    file: "switchboard.toml".into(),
                    summary: "aliases: 1 added".into(),
                    changes: vec!["aliases: 1 added".into()],
                    restart_needed: Vec::new(),
                })
            }
        })
    }
}

fn code(answer: &common::console::Answer) -> &str {
    answer.body["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test]
async fn a_run_never_gets_an_operator_callable_even_with_every_callable_in_scope() {
    let server = server().await;
    assert!(server.core().set_runs(Arc::new(OneRunning::default())));
    let run = server.mint(demo_world::OPS, "run-1", &["*"], Duration::from_secs(60));
    for tool in OPERATOR_CALLABLES {
        let answer = call_as(&server, &run, tool, json!({})).await;
        assert_eq!(code(&answer), "out_of_scope", "{tool}: {}", answer.body);
    }
    let listed = server
        .core()
        .tools_for(&server.core().authenticate(Some(&run)).unwrap());
    for tool in OPERATOR_CALLABLES {
        assert!(!listed.iter().any(|entry| entry.id == tool), "{tool}");
    }
    assert!(
        server.core().runs().unwrap().list(None)[0].state == RunState::Running,
        "nothing was stopped"
    );
}

#[tokio::test]
async fn a_named_token_gets_an_operator_callable_only_when_its_scope_names_it() {
    let server = server().await;
    assert!(server.core().set_runs(Arc::new(OneRunning::default())));
    // `surface.*` names none of them.
    for tool in OPERATOR_CALLABLES {
        let answer = call_as(&server, CI, tool, json!({})).await;
        assert_eq!(code(&answer), "out_of_scope", "ci {tool}: {}", answer.body);
    }
    // `admin.*` names admin.reload, not the runs.
    let reload = call_as(&server, ADMINS, "admin.reload", json!({})).await;
    assert_eq!(code(&reload), "reload_unavailable", "{}", reload.body);
    let runs = call_as(&server, ADMINS, "runs.list", json!({})).await;
    assert_eq!(code(&runs), "out_of_scope", "{}", runs.body);
    // `*` names them all.
    let runs = call_as(&server, ALL, "runs.list", json!({})).await;
    assert_eq!(runs.status, 200, "{}", runs.body);
    assert_eq!(runs.body["value"]["runs"][0]["runId"], RUN);
    let pending = call_as(&server, ALL, "approvals.list", json!({})).await;
    assert_eq!(pending.status, 200, "{}", pending.body);
}

#[tokio::test]
async fn the_operator_lists_runs_and_aborts_one_by_id_through_the_pipeline() {
    let server = server().await;
    let operator = server.operator_token().to_owned();
    let without_agent = call_as(&server, &operator, "runs.list", json!({})).await;
    assert_eq!(code(&without_agent), "no_agent", "{}", without_agent.body);
    let runs = Arc::new(OneRunning::default());
    assert!(server.core().set_runs(runs.clone()));

    let listed = call_as(
        &server,
        &operator,
        "runs.list",
        json!({"sessionId": "#ops"}),
    )
    .await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let listed = &listed.body["value"]["runs"];
    assert_eq!(listed[0]["state"], "running");
    assert_eq!(listed[0]["sessionId"], demo_world::OPS.to_string());
    assert_eq!(listed[0]["requestedBy"], demo_world::STANLEY.to_string());
    assert_eq!(listed[0]["startedMs"], 1_700_000_000_000u64);
    assert_eq!(listed[1]["state"], "queued");
    assert_eq!(listed[1]["runId"], Value::Null);

    for (input, expected) in [
        (json!({}), "invalid_input"),
        (json!({"runId": RUN, "sessionId": "#ops"}), "invalid_input"),
        (json!({"runId": "run-zz"}), "invalid_input"),
        (json!({"runId": "run-00000000000000bb"}), "nothing_running"),
    ] {
        let answer = call_as(&server, &operator, "runs.abort", input.clone()).await;
        assert_eq!(code(&answer), expected, "{input}: {}", answer.body);
    }
    let stopped = call_as(&server, &operator, "runs.abort", json!({"runId": RUN})).await;
    assert_eq!(stopped.status, 200, "{}", stopped.body);
    assert_eq!(stopped.body["value"]["runId"], RUN);
    assert_eq!(*runs.aborted.lock().unwrap(), vec![RUN.to_owned()]);
    let rows: Vec<_> = server
        .audit_rows()
        .into_iter()
        .filter(|row| row.tool.starts_with("runs."))
        .collect();
    assert!(
        rows.iter()
            .any(|row| row.tool == "runs.abort" && row.outcome == "ok" && row.caller == "operator"),
        "{rows:?}"
    );
    assert!(rows.iter().any(|row| row.tool == "runs.list"), "{rows:?}");
}

#[tokio::test]
async fn from_discord_a_user_stops_only_their_own_run_in_their_channel() {
    let server = server().await;
    let runs = Arc::new(OneRunning::default());
    assert!(server.core().set_runs(runs.clone()));
    let as_user = |user: u64| CallContext {
        caller: DiscordUser::caller(Snowflake(user), Vec::new(), "someone"),
        client: Some("discord".into()),
        ..CallContext::operator()
    };
    let ops = json!({"sessionId": demo_world::OPS.to_string()});
    let tomas = server
        .core()
        .call(&as_user(demo_world::TOMAS), "runs.abort", ops.clone())
        .await
        .unwrap_err();
    assert_eq!(tomas.code.as_str(), "not_your_run", "{tomas:?}");
    let by_id = server
        .core()
        .call(
            &as_user(demo_world::STANLEY),
            "runs.abort",
            json!({"runId": RUN}),
        )
        .await
        .unwrap_err();
    assert_eq!(by_id.code.as_str(), "invalid_input", "{by_id:?}");
    assert!(runs.aborted.lock().unwrap().is_empty());
    server
        .core()
        .call(&as_user(demo_world::STANLEY), "runs.abort", ops.clone())
        .await
        .expect("Stanley stops his own run");
    assert_eq!(runs.aborted.lock().unwrap().len(), 1);
    // `/status` lists its channel; a Discord user lists nothing wider.
    let everywhere = server
        .core()
        .call(&as_user(demo_world::TOMAS), "runs.list", json!({}))
        .await
        .unwrap_err();
    assert_eq!(everywhere.code.as_str(), "no_session");
    let rows = server.audit_rows();
    let caller = format!("discord:{}", demo_world::TOMAS);
    assert!(
        rows.iter().any(|row| row.tool == "runs.abort"
            && row.caller == caller
            && row.code.as_deref() == Some("not_your_run")),
        "{rows:?}"
    );
}

#[tokio::test]
async fn approvals_list_shows_pending_and_settled_asks_with_filters() {
    let server = server().await;
    let operator = server.operator_token().to_owned();
    let first = send_in_background(&server, CI, "first", None);
    let cards = pending_cards(&server, 1).await;
    let listed = call_as(
        &server,
        &operator,
        "approvals.list",
        json!({"state": "pending"}),
    )
    .await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(listed.body["value"]["approvals"][0]["id"], cards[0].id);
    assert_eq!(listed.body["value"]["approvals"][0]["state"], "pending");
    let decided = call_as(
        &server,
        &operator,
        "approvals.decide",
        json!({"approvalId": cards[0].id, "approve": false}),
    )
    .await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    assert_eq!(first.await.unwrap().status, 403);

    let pending = call_as(
        &server,
        &operator,
        "approvals.list",
        json!({"state": "pending"}),
    )
    .await;
    assert_eq!(pending.body["value"]["approvals"], json!([]));
    let settled = call_as(
        &server,
        &operator,
        "approvals.list",
        json!({"state": "settled"}),
    )
    .await;
    let card = &settled.body["value"]["approvals"][0];
    assert_eq!(card["id"], cards[0].id);
    assert_eq!(card["state"], "denied");
    assert_eq!(card["by"], "api:operator");
    for (filter, expected) in [
        (json!({"tool": "surface.messages.*"}), 1),
        (json!({"tool": "surface.pins.*"}), 0),
        (json!({"sessionId": "#release-room"}), 1),
        (json!({"sessionId": "#ops"}), 0),
    ] {
        let answer = call_as(&server, &operator, "approvals.list", filter.clone()).await;
        assert_eq!(
            answer.body["value"]["approvals"].as_array().map(Vec::len),
            Some(expected),
            "{filter}: {}",
            answer.body
        );
    }
    for bad in [
        json!({"state": "later"}),
        json!({"limit": 0}),
        json!({"limit": 201}),
    ] {
        let answer = call_as(&server, &operator, "approvals.list", bad.clone()).await;
        assert_eq!(code(&answer), "invalid_input", "{bad}: {}", answer.body);
    }
}

#[tokio::test]
async fn admin_reload_answers_what_changed_or_the_located_problems_and_is_audited() {
    let server = server().await;
    let operator = server.operator_token().to_owned();
    assert!(server
        .core()
        .set_reloader(Arc::new(FakeReloader { broken: false })));
    let reloaded = call_as(&server, &operator, "admin.reload", json!({})).await;
    assert_eq!(reloaded.status, 200, "{}", reloaded.body);
    assert_eq!(reloaded.body["value"]["changes"][0], "aliases: 1 added");
    // The old route is the same callable.
    let route = common::console::request(
        "POST",
        format!("{}/v1/admin/reload", server.url()),
        vec![("authorization", format!("Bearer {operator}"))],
        Some(b"{}".to_vec()),
    )
    .await;
    assert_eq!(route.status, 200, "{}", route.body);
    let rows: Vec<_> = server
        .audit_rows()
        .into_iter()
        .filter(|row| row.tool == "admin.reload")
        .collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows
        .iter()
        .all(|row| row.caller == "operator" && row.outcome == "ok"));

    let broken = TestServer::start(&ci_asks_config("", "")).await.unwrap();
    assert!(broken
        .core()
        .set_reloader(Arc::new(FakeReloader { broken: true })));
    let refused = call_as(&broken, broken.operator_token(), "admin.reload", json!({})).await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert_eq!(code(&refused), "invalid_config");
    assert_eq!(
        refused.body["error"]["details"]["problems"][0],
        "switchboard.toml:3:1: unknown key `discrod`"
    );
}

#[tokio::test]
async fn a_client_cannot_claim_the_consoles_name_for_its_decision() {
    let server = server().await;
    let operator = server.operator_token().to_owned();
    let waiting = send_in_background(&server, CI, "claimed", None);
    let cards = pending_cards(&server, 1).await;
    // The API call says it is the console, in every header a client controls.
    let decided = common::console::request(
        "POST",
        format!("{}/v1/call", server.url()),
        vec![
            ("authorization", format!("Bearer {operator}")),
            ("x-switchboard-client", "console".to_owned()),
            ("user-agent", "console".to_owned()),
        ],
        Some(
            json!({"tool": "approvals.decide", "input": {"approvalId": cards[0].id, "approve": true}})
                .to_string()
                .into_bytes(),
        ),
    )
    .await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    assert_eq!(decided.body["value"]["approval"]["by"], "api:operator");
    assert_eq!(waiting.await.unwrap().status, 200);
    let settled = server.core().approvals().recently_settled();
    assert!(
        matches!(&settled[0].state, switchboard_engine::approvals::ApprovalState::Approved { by, .. } if by == "api:operator"),
        "{settled:?}"
    );

    // A console login's decision is the console's, named by its login.
    let again = send_in_background(&server, CI, "in the console", None);
    let cards = pending_cards(&server, 1).await;
    let login = common::console::log_in(&server).await;
    let decided = common::console::post(
        &server,
        &format!("/console/api/approvals/{}", cards[0].id),
        login.change(&server),
        json!({"approve": true}),
    )
    .await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    assert_eq!(decided.body["approval"]["by"], "console:operator");
    assert_eq!(again.await.unwrap().status, 200);
}
