//! `Idempotency-Key` on `POST /v1/call`, over HTTP: a retried call runs once and answers its
//! first answer; another input under the key is a conflict, as is a key whose call still runs;
//! keys are per caller; a call refused before it acted frees its key; a read runs again.

mod common;

use std::sync::Arc;

use common::console::{ci_asks_config, pending_cards, request, Answer};
use serde_json::{json, Value};
use switchboard_testkit::platform::RecordingPlatform;
use switchboard_testkit::testing::TestServer;

const CI: &str = "ci-secret-value";

async fn server() -> TestServer {
    TestServer::start_with_tokens(
        &ci_asks_config("", ""),
        Arc::new(RecordingPlatform::demo()),
        &[("ci", CI)],
    )
    .await
    .unwrap()
}

/// `tool` with `input` as `token`, under `key`.
async fn keyed(server: &TestServer, token: &str, key: &str, tool: &str, input: Value) -> Answer {
    request(
        "POST",
        format!("{}/v1/call", server.url()),
        vec![
            ("authorization", format!("Bearer {token}")),
            ("idempotency-key", key.to_owned()),
        ],
        Some(
            json!({"tool": tool, "input": input})
                .to_string()
                .into_bytes(),
        ),
    )
    .await
}

fn sent_texts(server: &TestServer) -> Vec<String> {
    server
        .sends()
        .into_iter()
        .map(|sent| sent.content)
        .collect()
}

#[tokio::test]
async fn a_retried_send_with_the_same_key_posts_once_and_answers_the_first_answer() {
    let server = server().await;
    let operator = server.operator_token().to_owned();
    let send = json!({"sessionId": "#ops", "text": "once"});
    let first = keyed(
        &server,
        &operator,
        "k-1",
        "surface.messages.send",
        send.clone(),
    )
    .await;
    assert_eq!(first.status, 200, "{}", first.body);
    let again = keyed(
        &server,
        &operator,
        "k-1",
        "surface.messages.send",
        send.clone(),
    )
    .await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body, first.body, "the first answer, again");
    assert_eq!(sent_texts(&server), vec!["once".to_owned()]);
    let rows = server
        .audit_rows()
        .into_iter()
        .filter(|row| row.tool == "surface.messages.send")
        .count();
    assert_eq!(rows, 1, "the replay did not run the call");

    // Another input under the same key is a conflict, and nothing is sent.
    let other = keyed(
        &server,
        &operator,
        "k-1",
        "surface.messages.send",
        json!({"sessionId": "#ops", "text": "twice"}),
    )
    .await;
    assert_eq!(other.status, 409, "{}", other.body);
    assert_eq!(other.body["error"]["code"], "idempotency_key_reused");
    assert_eq!(other.body["error"]["kind"], "conflict");
    // Another caller's key of the same name is its own.
    let ci = keyed(&server, CI, "k-1", "surface.messages.send", send).await;
    assert_eq!(ci.status, 200, "{}", ci.body);
    assert_eq!(
        sent_texts(&server),
        vec!["once".to_owned(), "once".to_owned()]
    );
}

#[tokio::test]
async fn a_refused_call_frees_its_key_and_a_running_one_holds_it() {
    let server = server().await;
    let operator = server.operator_token().to_owned();
    // Refused before it acted (the allowlist): the same key runs again, and may carry another
    // input now.
    let refused = keyed(
        &server,
        &operator,
        "k-2",
        "surface.messages.send",
        json!({"sessionId": demo_world::RANDOM.to_string(), "text": "nowhere"}),
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let fixed = keyed(
        &server,
        &operator,
        "k-2",
        "surface.messages.send",
        json!({"sessionId": "#ops", "text": "somewhere"}),
    )
    .await;
    assert_eq!(fixed.status, 200, "{}", fixed.body);

    // ci's send to #release-room waits for an approver: its key is taken meanwhile.
    let waiting = {
        let url = server.url();
        tokio::spawn(request(
            "POST",
            format!("{url}/v1/call"),
            vec![
                ("authorization", format!("Bearer {CI}")),
                ("idempotency-key", "k-3".to_owned()),
            ],
            Some(
                json!({"tool": "surface.messages.send", "input": {"sessionId": "#release-room", "text": "ship it"}})
                    .to_string()
                    .into_bytes(),
            ),
        ))
    };
    let cards = pending_cards(&server, 1).await;
    let input = json!({"sessionId": "#release-room", "text": "ship it"});
    let running = keyed(&server, CI, "k-3", "surface.messages.send", input.clone()).await;
    assert_eq!(running.status, 409, "{}", running.body);
    assert_eq!(running.body["error"]["code"], "idempotency_key_in_flight");
    let decided = keyed(
        &server,
        &operator,
        "k-4",
        "approvals.decide",
        json!({"approvalId": cards[0].id, "approve": true}),
    )
    .await;
    assert_eq!(decided.status, 200, "{}", decided.body);
    let first = waiting.await.unwrap();
    assert_eq!(first.status, 200, "{}", first.body);
    // Done now: the retry answers what the call answered, and nothing is asked or sent again.
    let replayed = keyed(&server, CI, "k-3", "surface.messages.send", input).await;
    assert_eq!(replayed.status, 200, "{}", replayed.body);
    assert_eq!(replayed.body, first.body);
    assert!(server.core().approvals().pending().is_empty());
    assert_eq!(
        sent_texts(&server)
            .iter()
            .filter(|text| *text == "ship it")
            .count(),
        1
    );
}

#[tokio::test]
async fn a_read_runs_again_and_a_bad_key_is_refused() {
    let server = server().await;
    let operator = server.operator_token().to_owned();
    let list = json!({"sessionId": "#ops"});
    for _ in 0..2 {
        let read = keyed(
            &server,
            &operator,
            "k-5",
            "surface.messages.list",
            list.clone(),
        )
        .await;
        assert_eq!(read.status, 200, "{}", read.body);
    }
    let reads = server
        .audit_rows()
        .into_iter()
        .filter(|row| row.tool == "surface.messages.list")
        .count();
    assert_eq!(reads, 2, "a read runs each time");
    for bad in ["", &"k".repeat(256), "two words"] {
        let answer = keyed(
            &server,
            &operator,
            bad,
            "surface.messages.send",
            json!({"sessionId": "#ops", "text": "never"}),
        )
        .await;
        assert_eq!(answer.status, 400, "{bad:?}: {}", answer.body);
        assert_eq!(answer.body["error"]["code"], "bad_idempotency_key");
    }
    assert!(sent_texts(&server).is_empty());
}
