//! The direct path for the plainest and most frequent MCP request: one `tools/call` POST with
//! no `_meta` (so no progress token and no per-request protocol metadata) from a client on a
//! protocol revision that needs none (before 2026-07-28). It runs the call through
//! [`Core::call`] like rmcp's path does and writes the JSON-RPC answer around the callable's
//! already-serialized output, instead of rmcp building a service, spawning a task and passing
//! messages per request and the answer being parsed back into a `Value` and serialized again.
//!
//! Anything else — another method, `_meta`, an unknown or newer protocol version, an `Mcp-*`
//! header beyond the version, an unusual `Accept` — returns `None` and goes to rmcp, which
//! answers it (and every error) as before. The answer is the one rmcp gives for the same call:
//! a test below compares them.

use std::borrow::Cow;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use switchboard_engine::{CallContext, Core, ToolError, ToolOutput};

use crate::convert::error_result;

/// The revisions whose requests need no per-request metadata (`2026-07-28` does).
const PLAIN_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// `{"jsonrpc":"2.0","id":…,"method":"tools/call","params":{"name":…,"arguments":{…}}}`.
#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow)]
    jsonrpc: Cow<'a, str>,
    #[serde(borrow)]
    id: &'a RawValue,
    #[serde(borrow)]
    method: Cow<'a, str>,
    params: Option<Params>,
}

#[derive(Deserialize)]
struct Params {
    name: String,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
    #[serde(rename = "_meta", default)]
    meta: Option<Value>,
}

/// The call `body` asks for, when it is one the direct path answers.
pub(crate) struct DirectCall<'a> {
    id: &'a RawValue,
    name: String,
    arguments: Map<String, Value>,
}

impl<'a> DirectCall<'a> {
    /// `Some` only for a plain `tools/call` (see the module's doc); `None`: leave it to rmcp.
    pub(crate) fn parse(headers: &HeaderMap, body: &'a [u8]) -> Option<DirectCall<'a>> {
        if !plain_headers(headers) {
            return None;
        }
        let request: Request<'a> = serde_json::from_slice(body).ok()?;
        if request.jsonrpc != "2.0" || request.method != "tools/call" {
            return None;
        }
        // JSON-RPC ids are numbers or strings; anything else is rmcp's to refuse.
        let id_text = request.id.get();
        // (At most 18 digits: an i64 either way.)
        let is_number = !id_text.is_empty()
            && id_text.len() <= 18
            && id_text.bytes().all(|b| b.is_ascii_digit() || b == b'-');
        if !(is_number || id_text.starts_with('"')) {
            return None;
        }
        let params = request.params?;
        if params.meta.is_some() {
            return None;
        }
        Some(DirectCall {
            id: request.id,
            name: params.name,
            arguments: params.arguments.unwrap_or_default(),
        })
    }

    /// Runs the call through the pipeline and answers it as rmcp would.
    pub(crate) async fn answer(self, core: &Core, mut context: CallContext) -> Response {
        // The client gave no tool-call id: the server hands out one nobody can guess.
        if context.tool_call_id.is_none() {
            context.tool_call_id = crate::server_call_id();
        }
        if context.client.is_none() {
            context.client = Some("mcp".to_owned());
        }
        let result = core
            .call(&context, &self.name, Value::Object(self.arguments))
            .await;
        let body = envelope(self.id, result);
        let mut response = (StatusCode::OK, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

/// `Content-Type: application/json`, an `Accept` naming both JSON and SSE without weights, and
/// no `Mcp-*` header but a plain protocol version (and the session id a stateless server
/// ignores).
fn plain_headers(headers: &HeaderMap) -> bool {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or("").trim());
    if !content_type.is_some_and(|t| t.eq_ignore_ascii_case("application/json")) {
        return false;
    }
    let mut json = false;
    let mut sse = false;
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        if value.contains(';') || value.contains('"') {
            return false;
        }
        for entry in value.split(',') {
            let entry = entry.trim();
            json |= entry.eq_ignore_ascii_case("application/json");
            sse |= entry.eq_ignore_ascii_case("text/event-stream");
        }
    }
    if !(json && sse) {
        return false;
    }
    for (name, value) in headers {
        let name = name.as_str();
        if !name.starts_with("mcp-") || name == "mcp-session-id" {
            continue;
        }
        if name != "mcp-protocol-version" {
            return false;
        }
        if !value.to_str().is_ok_and(|v| PLAIN_VERSIONS.contains(&v)) {
            return false;
        }
    }
    headers.get_all("mcp-protocol-version").iter().count() <= 1
}

/// The JSON-RPC response to request `id` for the pipeline's `result`.
fn envelope(id: &RawValue, result: Result<ToolOutput, ToolError>) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.get().as_bytes());
    out.extend_from_slice(br#","result":"#);
    match result {
        Ok(output) if output.get().trim_start().starts_with('{') => {
            let json = output.get();
            // What `convert::success_result` builds, without parsing the answer back: the
            // answer as structured content, and the same JSON as text.
            out.reserve(json.len() * 2 + 96);
            out.extend_from_slice(br#"{"content":[{"type":"text","text":"#);
            // Writing a str into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut out, json);
            out.extend_from_slice(br#"}],"structuredContent":"#);
            out.extend_from_slice(json.as_bytes());
            out.extend_from_slice(br#","isError":false}"#);
        }
        Ok(output) => write_result(&mut out, crate::convert::success_result(output.get())),
        Err(error) => write_result(&mut out, error_result(&error.body().error)),
    }
    out.push(b'}');
    out
}

/// A result as rmcp writes it for a peer before 2026-07-28 (no `resultType`).
fn write_result(out: &mut Vec<u8>, result: rmcp::model::CallToolResult) {
    let mut result = rmcp::model::ServerResult::CallToolResult(result);
    result.strip_result_type_for_legacy_peer();
    // Writing into a Vec cannot fail, and the result serializes.
    let _ = serde_json::to_writer(out, &result);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{NumberOrString, ServerJsonRpcMessage, ServerResult};
    use serde_json::json;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    const PLAIN: [(&str, &str); 3] = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2025-06-18"),
    ];

    #[test]
    fn only_a_plain_tools_call_takes_the_direct_path() {
        let plain = headers(&PLAIN);
        let call = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"surface.help","arguments":{"a":1}}}"#;
        let direct = DirectCall::parse(&plain, call).expect("a plain call");
        assert_eq!(direct.name, "surface.help");
        assert_eq!(direct.id.get(), "7");
        for body in [
            &br#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#[..],
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":1}}}"#,
            br#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"x"}}"#,
            br#"{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{"name":"x"}}"#,
            br#"{"jsonrpc":"1.0","id":7,"method":"tools/call","params":{"name":"x"}}"#,
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call"}"#,
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":7}}"#,
            br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":[1]}}"#,
            br#"[{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}]"#,
            b"\xff\x00",
        ] {
            assert!(DirectCall::parse(&plain, body).is_none(), "{}", String::from_utf8_lossy(body));
        }
        for odd in [
            headers(&[("content-type", "text/plain"), PLAIN[1]]),
            headers(&[PLAIN[0], ("accept", "application/json")]),
            headers(&[
                PLAIN[0],
                ("accept", "application/json;q=0, text/event-stream"),
            ]),
            headers(&[PLAIN[0], PLAIN[1], ("mcp-protocol-version", "2026-07-28")]),
            headers(&[PLAIN[0], PLAIN[1], ("mcp-protocol-version", "1999-01-01")]),
            headers(&[PLAIN[0], PLAIN[1], ("mcp-method", "tools/call")]),
        ] {
            assert!(DirectCall::parse(&odd, call).is_none(), "{odd:?}");
        }
        assert!(
            DirectCall::parse(&headers(&PLAIN[..2]), call).is_some(),
            "no version header"
        );
    }

    /// The answer rmcp writes for `result` to request `id`.
    fn rmcp_answer(id: NumberOrString, result: rmcp::model::CallToolResult) -> Value {
        let mut result = ServerResult::CallToolResult(result);
        result.strip_result_type_for_legacy_peer();
        let message = ServerJsonRpcMessage::response(result, id);
        serde_json::to_value(message).unwrap()
    }

    #[test]
    fn the_direct_answer_is_the_one_rmcp_gives() {
        let answer = r#"{"session":{"token":"ops"},"messages":[{"text":"say \"hi\"\n\u00e9"}]}"#;
        let output = RawValue::from_string(answer.to_owned()).unwrap();
        let id = RawValue::from_string("12".to_owned()).unwrap();
        let direct: Value = serde_json::from_slice(&envelope(&id, Ok(output))).unwrap();
        assert_eq!(
            direct,
            rmcp_answer(
                NumberOrString::Number(12),
                crate::convert::success_result(answer)
            )
        );
        assert_eq!(
            direct["result"]["structuredContent"]["messages"][0]["text"],
            "say \"hi\"\né"
        );

        let error = ToolError::denied(protocol::ErrorCode::OutOfScope, "no");
        let info = error.body().error.clone();
        let id = RawValue::from_string(r#""a-1""#.to_owned()).unwrap();
        let direct: Value = serde_json::from_slice(&envelope(&id, Err(error))).unwrap();
        assert_eq!(
            direct,
            rmcp_answer(NumberOrString::String("a-1".into()), error_result(&info))
        );
        assert_eq!(direct["result"]["isError"], json!(true));
    }
}
