//! Garbage into every callable and into the HTTP front: whatever arrives, the answer is a typed
//! error or a value — never a panic, never `internal`, never a 5xx — and the server keeps
//! answering.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use proptest::prelude::*;
use protocol::ErrorKind;
use serde_json::{json, Value};
use switchboard_engine::CallContext;
use switchboard_testkit::platform::demo;
use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};

/// Any JSON value, with the field names callables use mixed in so the garbage reaches past
/// "unknown field" into each callable's own checks.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        "\\PC{0,40}".prop_map(Value::String),
        prop_oneof![
            Just("#ops"),
            Just("<#1000000000000000401>"),
            Just("1000000000000000401"),
            Just("18446744073709551616"),
            Just("-1"),
            Just("@everyone"),
            Just("```"),
            Just("../../etc/passwd"),
            Just(""),
        ]
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((field_name(), inner), 0..6)
                .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        ]
    })
}

fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("sessionId".to_owned()),
        Just("messageId".to_owned()),
        Just("text".to_owned()),
        Just("limit".to_owned()),
        Just("emoji".to_owned()),
        Just("paths".to_owned()),
        Just("dir".to_owned()),
        Just("tasks".to_owned()),
        Just("timeoutS".to_owned()),
        Just("replyToMessageId".to_owned()),
        Just("beforeMessageId".to_owned()),
        Just("silent".to_owned()),
        "[a-zA-Z]{1,12}",
    ]
}

/// An object input: most callables take one, and an object gets furthest.
fn input() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => prop::collection::vec((field_name(), json_value()), 0..5)
            .prop_map(|fields| Value::Object(fields.into_iter().collect())),
        1 => json_value(),
    ]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn every_callable_answers_garbage_with_a_typed_error_never_internal() {
    let runtime = runtime();
    let server = runtime.block_on(async {
        TestServer::start(&format!(
            "{DEMO_CONFIG}\n[toolserver.rate_limits]\nper_caller_per_minute = 1000000\nper_caller_burst = 100000\nper_channel_mutating_per_minute = 1000000\nper_channel_mutating_burst = 100000\n"
        ))
        .await
        .expect("server")
    });
    let tools: Vec<String> = server.core().registry().ids().map(str::to_owned).collect();
    assert!(tools.len() >= 8, "{tools:?}");
    let context = CallContext {
        session_ref: Some(demo::OPS.to_string()),
        ..CallContext::operator()
    };
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 3000,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let strategy = (0..tools.len(), input());
    runner
        .run(&strategy, |(index, input)| {
            let tool = &tools[index];
            let result = runtime.block_on(async {
                tokio::time::timeout(
                    Duration::from_secs(10),
                    server.core().call(&context, tool, input.clone()),
                )
                .await
            });
            let result =
                result.map_err(|_| TestCaseError::fail(format!("{tool} hung on {input}")))?;
            if let Err(error) = result {
                prop_assert_ne!(
                    error.kind,
                    ErrorKind::Internal,
                    "{} answered internal for {}: {:?}",
                    tool,
                    input,
                    error
                );
                prop_assert!(!error.message.is_empty());
            }
            Ok(())
        })
        .expect("no callable fails on garbage");
}

/// Sends raw bytes, reads the whole answer (the request says `Connection: close`).
fn raw_exchange(addr: std::net::SocketAddr, request: &[u8]) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(request)?;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

fn status_of(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn garbage_http_bodies_and_headers_get_4xx_and_the_server_keeps_answering() {
    let runtime = runtime();
    let server = runtime.block_on(async { TestServer::start(&DEMO_CONFIG).await.expect("server") });
    let addr = server.addr();
    let token = server.operator_token().to_owned();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 400,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let bodies = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..300),
        json_value().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        (json_value(), json_value()).prop_map(|(tool, input)| {
            serde_json::to_vec(&json!({ "tool": tool, "input": input })).unwrap_or_default()
        }),
        // Deep nesting: serde_json's recursion limit must answer, not overflow the stack.
        (1usize..5000).prop_map(|depth| {
            let mut body = b"{\"tool\":\"surface.help\",\"input\":".to_vec();
            body.extend(std::iter::repeat_n(b'[', depth));
            body.extend(std::iter::repeat_n(b']', depth));
            body.push(b'}');
            body
        }),
    ];
    let paths = prop_oneof![
        Just("/v1/call".to_owned()),
        Just("/v1/capabilities".to_owned()),
        Just("/v1/tools/%FF%FE".to_owned()),
        "/[a-z0-9/%._-]{0,30}",
    ];
    let headers = prop_oneof![
        Just(String::new()),
        Just("x-switchboard-session-id: \u{7f}\u{1}\r\n".to_owned()),
        Just("x-switchboard-message-id: not-an-id\r\n".to_owned()),
        Just("content-type: text/plain\r\n".to_owned()),
        "[a-z-]{1,20}: [ -~]{0,40}\r\n",
    ];
    runner
        .run(&(bodies, paths, headers), |(body, path, header)| {
            let mut request = format!(
                "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n{header}Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .into_bytes();
            request.extend_from_slice(&body);
            let answer = raw_exchange(addr, &request).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let status = status_of(&answer);
            prop_assert!(
                (200..500).contains(&status),
                "{} answered {} for {:?}: {}",
                path,
                status,
                String::from_utf8_lossy(&body),
                answer
            );
            Ok(())
        })
        .expect("no request gets a 5xx");
    let health = raw_exchange(
        addr,
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )
    .expect("health");
    assert_eq!(status_of(&health), 200, "{health}");
}
