//! A scripted OpenAI-compatible chat server on loopback for end-to-end tests: it records every
//! `POST /v1/chat/completions` body and answers from a script (a test server that answers
//! with planned tool calls).

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

/// Decides the answer from every request so far (the current one is last): status and body.
pub type Script = dyn Fn(&[Value]) -> (u16, Value) + Send + Sync;

pub struct ModelState {
    requests: Mutex<Vec<Value>>,
    script: Box<Script>,
    /// Requests numbered (from 1) above this wait before they are answered.
    answered_through: tokio::sync::watch::Sender<usize>,
}

/// A fake OpenAI-compatible server on loopback, on its own runtime: it records every
/// `POST /v1/chat/completions` body and answers from a script.
pub struct FakeModel {
    state: Arc<ModelState>,
    pub base_url: String,
    // Dropping the runtime stops the server.
    _runtime: tokio::runtime::Runtime,
}

impl FakeModel {
    pub fn start(script: impl Fn(&[Value]) -> (u16, Value) + Send + Sync + 'static) -> FakeModel {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("tokio runtime for the fake model");
        let state = Arc::new(ModelState {
            requests: Mutex::new(Vec::new()),
            script: Box::new(script),
            answered_through: tokio::sync::watch::Sender::new(usize::MAX),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(completions))
            .with_state(Arc::clone(&state));
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind the fake model");
        let addr = listener.local_addr().expect("local addr");
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeModel {
            state,
            base_url: format!("http://{addr}/v1"),
            _runtime: runtime,
        }
    }

    /// From now on, requests numbered (from 1) above `n` are recorded at once but answered
    /// only once a later call lets them through: a run stays busy as long as a test needs.
    pub fn answer_through(&self, n: usize) {
        self.state.answered_through.send_replace(n);
    }

    /// Every request body received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.state
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

async fn completions(
    State(state): State<Arc<ModelState>>,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let (number, status, answer) = {
        let mut requests = state
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        requests.push(body);
        let (status, answer) = (state.script)(&requests);
        (requests.len(), status, answer)
    };
    let mut through = state.answered_through.subscribe();
    // The sender lives as long as the state: an error cannot happen while this runs.
    let _ = through.wait_for(|through| number <= *through).await;
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        Json(answer),
    )
}

/// A chat completion whose message asks for one tool call.
pub fn tool_call(id: &str, function: &str, arguments: &str) -> (u16, Value) {
    (
        200,
        json!({
            "id": "chatcmpl-e2e",
            "object": "chat.completion",
            "model": "fake-model",
            "choices": [{
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [{
                        "id": id,
                        "type": "function",
                        "function": {"name": function, "arguments": arguments}
                    }]
                }
            }]
        }),
    )
}

/// A chat completion that answers in text.
pub fn text(content: &str) -> (u16, Value) {
    (
        200,
        json!({
            "id": "chatcmpl-e2e",
            "object": "chat.completion",
            "model": "fake-model",
            "choices": [{
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": content}
            }]
        }),
    )
}

/// The `messages` of a request.
pub fn messages(request: &Value) -> &Vec<Value> {
    request["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("no messages array in {request}"))
}

/// The `tool` messages of a request, each with its content parsed as JSON.
pub fn tool_results(request: &Value) -> Vec<(String, Value)> {
    messages(request)
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            let content = m["content"]
                .as_str()
                .unwrap_or_else(|| panic!("tool content is not a string: {m}"));
            let parsed = serde_json::from_str(content)
                .unwrap_or_else(|e| panic!("tool content is not JSON ({e}): {content}"));
            (
                m["tool_call_id"].as_str().unwrap_or_default().to_owned(),
                parsed,
            )
        })
        .collect()
}
