//! The `schedule.*` callables from outside (issue 26 §3): made, listed, shown with their
//! receipts and cancelled over `POST /v1/call`, kept in the store; every bad input refused
//! with a typed error that names the field; a caller sees only what it made.

mod common;

use std::sync::Arc;

use common::console::{call_as, ci_asks_config};
use entity::Snowflake;
use serde_json::{json, Value};
use switchboard_engine::schedules::Scheduling;
use switchboard_records::{FiringOutcome, Receipt};
use switchboard_store::ScheduleStore;
use switchboard_testkit::platform::RecordingPlatform;
use switchboard_testkit::testing::TestServer;

const ALL: &str = "all-secret-value";
const OTHER: &str = "other-secret-value";

const TOKENS: &str = r#"
[[toolserver.tokens]]
name = "all"
token_env = "ALL_TOKEN"
scope = ["*"]

[[toolserver.tokens]]
name = "other"
token_env = "OTHER_TOKEN"
scope = ["schedule.*"]
"#;

async fn server(scheduling: bool) -> TestServer {
    let server = TestServer::start_with_tokens(
        &ci_asks_config(TOKENS, ""),
        Arc::new(RecordingPlatform::demo()),
        &[("ci", "ci-secret"), ("all", ALL), ("other", OTHER)],
    )
    .await
    .unwrap();
    if scheduling {
        let store = Arc::clone(server.store()) as Arc<dyn ScheduleStore>;
        server
            .core()
            .set_scheduling(Arc::new(Scheduling::new(store)));
    }
    server
}

async fn ok(server: &TestServer, token: &str, tool: &str, input: Value) -> Value {
    let answer = call_as(server, token, tool, input).await;
    assert_eq!(answer.status, 200, "{tool}: {}", answer.body);
    answer.body["value"].clone()
}

async fn refused(server: &TestServer, token: &str, tool: &str, input: Value) -> (u16, Value) {
    let answer = call_as(server, token, tool, input).await;
    assert_ne!(
        answer.status, 200,
        "{tool} was not refused: {}",
        answer.body
    );
    (answer.status, answer.body["error"].clone())
}

#[tokio::test]
async fn a_schedule_is_made_listed_shown_with_receipts_and_cancelled() {
    let server = server(true).await;
    let operator = server.operator_token().to_owned();
    let made = ok(
        &server,
        &operator,
        "schedule.create",
        json!({"sessionId": "#ops", "prompt": " Post the digest ", "every": "2s"}),
    )
    .await;
    let id = made["scheduleId"].as_str().unwrap().to_owned();
    assert!(id.starts_with("sch_"), "{made}");
    assert_eq!(made["sessionId"], demo_world::OPS.to_string());
    assert_eq!(made["prompt"], "Post the digest");
    assert_eq!(made["every"], "2s");
    assert_eq!(made["status"], "active");
    assert_eq!(made["createdBy"], "operator");
    assert!(made["nextAt"].is_string(), "{made}");

    // Kept in the store, with its cursor at creation.
    let kept = server.store().schedule(&id).await.unwrap().unwrap();
    assert_eq!(kept.session_id, Snowflake(demo_world::OPS));
    assert!(kept.last_fired_ms.is_some());

    let listed = ok(&server, &operator, "schedule.list", json!({})).await;
    assert_eq!(listed["schedules"].as_array().unwrap().len(), 1);
    let elsewhere = ok(
        &server,
        &operator,
        "schedule.list",
        json!({"sessionId": "#release-room"}),
    )
    .await;
    assert!(elsewhere["schedules"].as_array().unwrap().is_empty());

    // A receipt the scheduler wrote shows in schedule.get, newest first.
    server
        .store()
        .record_receipt(
            Receipt {
                schedule_id: id.clone(),
                due_ms: 1_000,
                run_id: Some("run-00aa".into()),
                outcome: FiringOutcome::Posted,
                message_ids: vec!["1000000000000009999".into()],
                error: None,
                at_ms: 2_000,
                detail: None,
            },
            switchboard_records::AfterFiring {
                pause_after: 3,
                one_shot: false,
            },
        )
        .await
        .unwrap();
    let shown = ok(
        &server,
        &operator,
        "schedule.get",
        json!({"scheduleId": id}),
    )
    .await;
    let receipt = &shown["receipts"][0];
    assert_eq!(receipt["runId"], "run-00aa");
    assert_eq!(receipt["outcome"]["status"], "delivered");
    assert_eq!(receipt["outcome"]["messageIds"][0], "1000000000000009999");

    let cancelled = ok(
        &server,
        &operator,
        "schedule.cancel",
        json!({"scheduleId": id}),
    )
    .await;
    assert_eq!(cancelled["status"], "cancelled");
    assert!(cancelled.get("nextAt").is_none(), "{cancelled}");
    let (_, error) = refused(
        &server,
        &operator,
        "schedule.resume",
        json!({"scheduleId": id}),
    )
    .await;
    assert_eq!(error["code"], "schedule_not_paused");
}

#[tokio::test]
async fn a_caller_sees_and_cancels_only_the_schedules_it_made() {
    let server = server(true).await;
    let made = ok(
        &server,
        ALL,
        "schedule.create",
        json!({"sessionId": "#ops", "prompt": "p", "cron": "0 9 * * 1-5", "tz": "Europe/Paris"}),
    )
    .await;
    assert_eq!(made["createdBy"], "token:all");
    assert_eq!(made["tz"], "Europe/Paris");
    let id = made["scheduleId"].as_str().unwrap();
    let listed = ok(&server, OTHER, "schedule.list", json!({})).await;
    assert!(listed["schedules"].as_array().unwrap().is_empty());
    let (status, error) =
        refused(&server, OTHER, "schedule.cancel", json!({"scheduleId": id})).await;
    assert_eq!(
        (status, error["code"].as_str()),
        (404, Some("unknown_schedule"))
    );
    // The operator sees every schedule.
    let operator = server.operator_token().to_owned();
    let listed = ok(&server, &operator, "schedule.list", json!({})).await;
    assert_eq!(listed["schedules"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn bad_schedule_input_is_refused_with_the_field_and_what_to_do() {
    let server = server(true).await;
    let operator = server.operator_token().to_owned();
    let cases = [
        (
            json!({"sessionId": "#ops", "prompt": "p", "cron": "61 * * * *"}),
            "cron",
        ),
        (
            json!({"sessionId": "#ops", "prompt": "p", "every": "0s"}),
            "every",
        ),
        (
            json!({"sessionId": "#ops", "prompt": "p", "every": "soon"}),
            "every",
        ),
        (
            json!({"sessionId": "#ops", "prompt": "p", "at": "2001-01-01T00:00:00Z"}),
            "at",
        ),
        (
            json!({"sessionId": "#ops", "prompt": "p", "at": "tomorrow"}),
            "at",
        ),
        (
            json!({"sessionId": "#ops", "prompt": "p", "cron": "* * * * *", "tz": "Mars/Olympus"}),
            "tz",
        ),
        (
            json!({"sessionId": "#ops", "prompt": "p", "every": "1h", "cron": "* * * * *"}),
            "at|every|cron",
        ),
        (json!({"sessionId": "#ops", "prompt": "p"}), "at|every|cron"),
        (
            json!({"sessionId": "#ops", "prompt": "   ", "every": "1h"}),
            "prompt",
        ),
        (
            json!({"sessionId": "#ops", "prompt": "x".repeat(5000), "every": "1h"}),
            "prompt",
        ),
        (
            json!({"sessionId": "#ops", "prompt": "p", "every": "1h", "agent": "support"}),
            "agent",
        ),
    ];
    for (input, field) in cases {
        let (status, error) = refused(&server, &operator, "schedule.create", input.clone()).await;
        assert_eq!(status, 400, "{input}: {error}");
        assert_eq!(error["details"]["field"], field, "{input}: {error}");
        assert!(!error["message"].as_str().unwrap().is_empty());
    }
    // Unknown fields, a channel the allowlist refuses, ids that are not ids.
    let (status, _) = refused(
        &server,
        &operator,
        "schedule.create",
        json!({"sessionId": "#ops", "prompt": "p", "evry": "1h"}),
    )
    .await;
    assert_eq!(status, 400);
    let (_, error) = refused(
        &server,
        &operator,
        "schedule.create",
        json!({"sessionId": "#random", "prompt": "p", "every": "1h"}),
    )
    .await;
    assert_eq!(error["code"], "channel_not_allowed", "{error}");
    for id in ["", "../etc", "sch 1", "config:"] {
        let (status, _) = refused(
            &server,
            &operator,
            "schedule.get",
            json!({"scheduleId": id}),
        )
        .await;
        assert_eq!(status, 400, "{id:?}");
    }
    let (status, error) = refused(
        &server,
        &operator,
        "schedule.get",
        json!({"scheduleId": "sch_00"}),
    )
    .await;
    assert_eq!(
        (status, error["code"].as_str()),
        (404, Some("unknown_schedule"))
    );
    let (status, error) = refused(
        &server,
        &operator,
        "schedule.cancel",
        json!({"scheduleId": "config:digest"}),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        error["message"].as_str().unwrap().contains("[[schedules]]"),
        "{error}"
    );
    // Nothing was kept.
    assert!(server.store().schedules(None, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn without_a_scheduler_the_callables_say_so() {
    let server = server(false).await;
    let operator = server.operator_token().to_owned();
    let (status, error) = refused(
        &server,
        &operator,
        "schedule.create",
        json!({"sessionId": "#ops", "prompt": "p", "every": "1h"}),
    )
    .await;
    assert_eq!(
        (status, error["code"].as_str()),
        (403, Some("schedules_unavailable"))
    );
}
