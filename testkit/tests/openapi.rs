//! `GET /openapi.json` checked by tools no one here wrote: `openapi-spec-validator` says the
//! document is valid OpenAPI 3.1, and schemathesis calls every operation of a live server
//! with a bounded number of generated examples and finds no 5xx and no answer the document
//! does not describe. Both come from a Python venv `tests/setup-python-interop.sh` makes
//! (`.ci/run` runs it); when it cannot, the test fails.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};

/// The venv's bin directory, made (or found) by the setup script.
fn python_tools() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = Command::new("bash")
        .arg(root.join("tests/setup-python-interop.sh"))
        .output()
        .expect("bash runs tests/setup-python-interop.sh");
    assert!(
        output.status.success(),
        "tests/setup-python-interop.sh failed (python3 with venv and the registry are needed):\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let bin = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    assert!(
        bin.join("schemathesis").exists(),
        "no schemathesis in {}",
        bin.display()
    );
    bin
}

/// Workflows resumed into nothing.
struct Nothing;

impl switchboard_engine::workflow::WorkflowHooks for Nothing {
    fn resume(&self, _: &switchboard_engine::workflow::Workflow) {}
}

async fn fetch_document(server: &TestServer) -> (u16, String) {
    let url = format!("{}/openapi.json", server.url());
    let token = server.operator_token().to_owned();
    tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .build()
            .into();
        let mut request = agent.get(&url);
        if !token.is_empty() {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let mut response = request.call().expect("the server answers");
        (
            response.status().as_u16(),
            response.body_mut().read_to_string().expect("text"),
        )
    })
    .await
    .expect("fetch task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_is_valid_openapi_and_schemathesis_finds_nothing() {
    let bin = python_tools();
    // Rate limits stay on: their 429s are part of the document too.
    let server = TestServer::start(&DEMO_CONFIG)
        .await
        .expect("server starts");
    // With workflows on, as in a service with an agent (without, workflow.* answer 503 by
    // design).
    server
        .core()
        .set_workflows(switchboard_engine::workflow::WorkflowEngine::new(
            std::sync::Arc::new(Nothing),
            server.store().clone(),
            None,
            Vec::new(),
        ));
    let (status, text) = fetch_document(&server).await;
    assert_eq!(status, 200, "{text}");
    let document: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(document["openapi"], "3.1.0");
    let schemas = document["components"]["schemas"]
        .as_object()
        .expect("schemas");
    for id in switchboard_callables::callable_ids() {
        assert!(
            schemas.contains_key(&format!("Input.{id}")),
            "no input schema for {id}"
        );
    }
    let dir = std::env::temp_dir().join(format!("switchboard-openapi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("openapi.json");
    std::fs::write(&file, &text).unwrap();

    let validated = Command::new(bin.join("openapi-spec-validator"))
        .arg(&file)
        .output()
        .expect("openapi-spec-validator runs");
    assert!(
        validated.status.success(),
        "openapi-spec-validator:\n{}{}",
        String::from_utf8_lossy(&validated.stdout),
        String::from_utf8_lossy(&validated.stderr)
    );

    let url = server.url();
    let token = server.operator_token().to_owned();
    let schemathesis = bin.join("schemathesis");
    let report = dir.clone();
    let run = tokio::task::spawn_blocking(move || {
        Command::new(schemathesis)
            .args(["run", file.to_str().unwrap(), "--url", &url])
            .args(["--header", &format!("Authorization: Bearer {token}")])
            .args([
                "--checks",
                "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
            ])
            // A stream never ends: the SSE route is tested by its own tests.
            .args(["--exclude-path", "/v1/events"])
            .args(["--phases", "coverage,fuzzing"])
            // One worker: with two, Hypothesis parses source files from two threads and
            // CPython 3.11's AST recursion counter (gh-106905) sometimes fails the run with
            // "AST constructor recursion depth mismatch", a crash inside the tool itself.
            .args(["--max-examples", "5", "--workers", "1"])
            .args(["--request-timeout", "10", "--max-time", "100"])
            .args(["--generation-deterministic", "--no-shrink"])
            .args(["--report-dir", report.to_str().unwrap()])
            .env("NO_COLOR", "1")
            .env("SCHEMATHESIS_TELEMETRY", "false")
            .output()
            .expect("schemathesis runs")
    });
    let output = tokio::time::timeout(Duration::from_secs(400), run)
        .await
        .expect("schemathesis finished in time")
        .expect("schemathesis task");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "schemathesis found problems:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // It did call the operations.
    assert!(
        stdout.contains("passed") || stdout.contains("PASSED"),
        "{stdout}"
    );
}

#[tokio::test]
async fn the_document_shows_only_what_the_caller_may_call() {
    let server = TestServer::start(&DEMO_CONFIG)
        .await
        .expect("server starts");
    let token = server.mint(
        switchboard_testkit::platform::demo::OPS,
        "run-o",
        &["surface.messages.list"],
        Duration::from_secs(60),
    );
    let url = format!("{}/openapi.json", server.url());
    let (status, text) = tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut response = agent
            .get(&url)
            .header("authorization", format!("Bearer {token}"))
            .call()
            .unwrap();
        (
            response.status().as_u16(),
            response.body_mut().read_to_string().unwrap(),
        )
    })
    .await
    .unwrap();
    assert_eq!(status, 200);
    let document: Value = serde_json::from_str(&text).unwrap();
    let inputs: Vec<&String> = document["components"]["schemas"]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.starts_with("Input."))
        .collect();
    assert_eq!(inputs, ["Input.surface.messages.list"]);
    let server_url = server.url();
    let anonymous = tokio::task::spawn_blocking(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        agent
            .get(format!("{server_url}/openapi.json"))
            .call()
            .unwrap()
            .status()
            .as_u16()
    })
    .await
    .unwrap();
    assert_eq!(anonymous, 401);
}

#[tokio::test]
async fn the_call_operation_documents_the_idempotency_key_and_its_conflicts() {
    let server = TestServer::start(&DEMO_CONFIG).await.unwrap();
    let (status, text) = fetch_document(&server).await;
    assert_eq!(status, 200, "{text}");
    let document: Value = serde_json::from_str(&text).expect("JSON");
    let call = &document["paths"]["/v1/call"]["post"];
    let header = call["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .find(|p| p["name"] == "Idempotency-Key")
        .expect("the Idempotency-Key parameter");
    assert_eq!(header["in"], "header");
    assert_eq!(header["required"], false);
    assert_eq!(header["schema"]["maxLength"], 255);
    let conflict = call["responses"]["409"]["description"]
        .as_str()
        .expect("a 409 answer");
    assert!(
        conflict.contains("idempotency_key_reused")
            && conflict.contains("idempotency_key_in_flight"),
        "{conflict}"
    );
}
