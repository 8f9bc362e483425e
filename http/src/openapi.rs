//! `GET /openapi.json`: an OpenAPI 3.1 document of the HTTP protocol, made from the same
//! schemas the server checks inputs with — every callable's input schema (the ones
//! `/v1/tools` serves), the call envelope, the error shape, and each route's statuses. Like
//! `/v1/tools`, it shows only the callables the caller may call.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::auth::Caller;
use crate::server::Core;
use crate::Authed;
use switchboard_front::ApiError;

/// The error kinds and the statuses they answer with.
const ERROR_KINDS: [&str; 8] = [
    "usage",
    "denied",
    "not_found",
    "conflict",
    "unavailable",
    "timeout",
    "cancelled",
    "internal",
];

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": { "application/json": { "schema": { "$ref": "#/components/schemas/ErrorBody" } } }
    })
}

/// The refusals every authenticated route may answer with, and the ones a call adds.
fn errors(statuses: &[(&str, &str)]) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert(
        "401".into(),
        error_response("No token, or one that is not valid here (kind denied)"),
    );
    for (status, description) in statuses {
        map.insert((*status).into(), error_response(description));
    }
    map
}

/// `{"KEY": [ITEM, …]}`, the shape of every listing's answer.
fn list_of(key: &str, item: Value) -> Value {
    json!({
        "type": "object",
        "required": [key],
        "properties": { key: { "type": "array", "items": item } }
    })
}

fn ok_json(description: &str, schema: Value) -> Value {
    json!({ "description": description, "content": { "application/json": { "schema": schema } } })
}

/// `{"ok": true, "value": VALUE}`, the envelope of a callable's answer.
fn enveloped(value: Value) -> Value {
    json!({
        "type": "object",
        "required": ["ok", "value"],
        "properties": { "ok": { "const": true }, "value": value }
    })
}

/// A route's answers: the refusals `errors(statuses)` and a 200 with `schema` as JSON.
fn answers(statuses: &[(&str, &str)], description: &str, schema: Value) -> Map<String, Value> {
    let mut map = errors(statuses);
    map.insert("200".into(), ok_json(description, schema));
    map
}

fn body_statuses() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "400",
            "The body or input is wrong (kind usage); the message says what to send",
        ),
        (
            "403",
            "Refused by scope, rules, hooks or approvers (kind denied)",
        ),
        (
            "404",
            "No such callable, session, message or user (kind not_found)",
        ),
        ("408", "The body did not arrive in time (body_timeout)"),
        ("409", "The state forbids it (kind conflict)"),
        ("413", "The body is over 1 MiB (body_too_large)"),
        (
            "415",
            "The request is not declared as JSON (unsupported_media_type): send Content-Type: application/json",
        ),
        (
            "429",
            "A rate limit (kind unavailable; Retry-After says when)",
        ),
        (
            "499",
            "The call's agent run was aborted, or ended while the call waited for an approval (kind cancelled: run_aborted, run_ended)",
        ),
        ("500", "A bug (kind internal)"),
        ("503", "Busy, or Discord unavailable (kind unavailable)"),
        (
            "504",
            "The call took too long; it may still complete (kind timeout)",
        ),
    ]
}

/// The document for `caller`.
pub fn document(core: &Core, caller: &Caller) -> Value {
    let mut schemas = Map::new();
    schemas.insert(
        "ErrorInfo".into(),
        json!({
            "type": "object",
            "required": ["kind", "code", "message", "retryable"],
            "properties": {
                "kind": { "type": "string", "enum": ERROR_KINDS },
                "code": { "type": "string", "description": "A stable snake_case name such as unknown_session" },
                "message": { "type": "string" },
                "retryable": { "type": "boolean" },
                "details": { "description": "Structured facts: the field, a suggestion, retryAfterMs, ..." }
            }
        }),
    );
    schemas.insert(
        "ErrorBody".into(),
        json!({
            "type": "object",
            "required": ["ok", "error"],
            "properties": {
                "ok": { "const": false },
                "error": { "$ref": "#/components/schemas/ErrorInfo" }
            }
        }),
    );
    schemas.insert(
        "CallOk".into(),
        enveloped(json!({ "description": "The callable's answer" })),
    );
    schemas.insert(
        "Health".into(),
        json!({
            "type": "object",
            "required": ["status", "discord", "version"],
            "properties": {
                "status": { "type": "string", "enum": ["ok", "degraded"] },
                "reason": { "type": "string", "description": "Why the node is degraded beyond its gateway: its store is unreachable (absent while it is reachable)" },
                "discord": { "type": "string", "enum": ["ready", "connecting", "resuming", "backfilling", "down", "none", "standby"], "description": "The gateway's state; `standby`: a lease node holding no shard (every shard is taken), which is not a fault" },
                "version": { "type": "string" },
                "sandbox": { "type": "string", "description": "The workspace's sandbox: ready, or unavailable with what to install; absent when [workspace] is off" },
                "node": { "type": "string", "description": "This node's id (cluster.node_id); absent without Discord" },
                "store": { "type": "string", "enum": ["sqlite", "postgres", "memory"], "description": "The store's backend; absent without Discord" },
                "shards": {
                    "type": "array",
                    "description": "The gateway shards this node runs; absent without Discord",
                    "items": {
                        "type": "object",
                        "required": ["id", "state"],
                        "properties": {
                            "id": { "type": "integer", "minimum": 0 },
                            "state": { "type": "string", "enum": ["ready", "connecting", "identifying", "resuming", "down"] }
                        }
                    }
                }
            }
        }),
    );
    schemas.insert(
        "ToolEntry".into(),
        json!({
            "type": "object",
            "required": ["id", "description", "inputSchema", "mutating"],
            "properties": {
                "id": { "type": "string" },
                "description": { "type": "string" },
                "inputSchema": { "type": "object" },
                "mutating": { "type": "boolean" },
                "primary": { "type": ["string", "null"] }
            }
        }),
    );
    schemas.insert(
        "ToolDetail".into(),
        json!({
            "allOf": [{ "$ref": "#/components/schemas/ToolEntry" }],
            "type": "object",
            "required": ["help", "examples"],
            "properties": {
                "help": { "type": "string" },
                "examples": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["description", "cli", "input"],
                        "properties": {
                            "description": { "type": "string" },
                            "cli": { "type": "string" },
                            "input": {}
                        }
                    }
                }
            }
        }),
    );
    schemas.insert(
        "MintRequest".into(),
        crate::registry::input_schema::<crate::MintRequest>(),
    );
    // One envelope per callable the caller may call: `tool` names it, `input` is its schema.
    let mut calls = Vec::new();
    for entry in core
        .registry()
        .entries()
        .filter(|e| core.may_call(caller, &e.id))
    {
        let name = format!("Input.{}", entry.id);
        schemas.insert(name.clone(), entry.input_schema.clone());
        calls.push(json!({
            "type": "object",
            "title": entry.id,
            "description": entry.description,
            "required": ["tool"],
            "additionalProperties": false,
            "properties": {
                "tool": { "const": entry.id },
                "input": { "$ref": format!("#/components/schemas/{name}") },
                "args": { "type": "object", "description": "Command-line --field=value flags, as strings; converted with the input schema", "additionalProperties": { "type": "string" } },
                "positional": { "type": "array", "items": { "type": "string" }, "description": "Command-line bare words for the primary field" }
            }
        }));
    }
    let call_request = if calls.is_empty() {
        json!({ "type": "object", "required": ["tool"], "properties": { "tool": { "type": "string" } } })
    } else {
        json!({ "anyOf": calls })
    };
    schemas.insert("CallRequest".into(), call_request);
    schemas.insert(
        "BatchRequest".into(),
        json!({
            "type": "object",
            "required": ["calls"],
            "additionalProperties": false,
            "properties": {
                "calls": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": protocol::MAX_BATCH_CALLS,
                    "items": { "$ref": "#/components/schemas/CallRequest" }
                },
                "maxConcurrency": { "type": "integer", "minimum": 1, "maximum": protocol::MAX_BATCH_CALLS }
            }
        }),
    );
    schemas.insert(
        "BatchAnswer".into(),
        enveloped(json!({
            "type": "object",
            "required": ["results"],
            "properties": {
                "results": {
                    "type": "array",
                    "items": { "anyOf": [
                        { "$ref": "#/components/schemas/CallOk" },
                        { "$ref": "#/components/schemas/ErrorBody" }
                    ] }
                }
            }
        })),
    );

    let mut call_responses = errors(&body_statuses());
    call_responses.insert(
        "409".into(),
        error_response("The state forbids it (kind conflict); with an Idempotency-Key: the key was used for another tool or input (idempotency_key_reused), or its call is still running (idempotency_key_in_flight)"),
    );
    call_responses.insert(
        "200".into(),
        ok_json(
            "The callable's answer",
            json!({ "$ref": "#/components/schemas/CallOk" }),
        ),
    );
    let batch_responses = answers(
        &body_statuses(),
        "One result per call, in order; a refused call fails alone",
        json!({ "$ref": "#/components/schemas/BatchAnswer" }),
    );
    let tools_responses = answers(
        &[],
        "The callables this caller may call",
        list_of("tools", json!({ "$ref": "#/components/schemas/ToolEntry" })),
    );
    let tool_responses = answers(
        &[
            ("400", "The id is not a valid path segment"),
            ("404", "No callable by that id that this caller may call"),
        ],
        "A callable's help",
        json!({ "$ref": "#/components/schemas/ToolDetail" }),
    );
    let approvals_responses = answers(
        &[
            ("400", "An unknown query parameter"),
            ("403", "Only the operator lists every approval"),
        ],
        "The approvals still waiting",
        list_of("approvals", json!({ "type": "object" })),
    );
    let mut mint_responses = errors(&[
        ("400", "The body is not a mint request"),
        ("403", "Only the operator mints tokens"),
        ("404", "The session names nothing"),
        ("408", "The body did not arrive in time"),
        ("413", "The body is over 1 MiB"),
        ("415", "The request is not declared as JSON"),
    ]);
    mint_responses.insert(
        "201".into(),
        ok_json(
            "The token, shown once",
            enveloped(json!({
                "type": "object",
                "required": ["sessionId", "requestId", "scope", "expiresInS", "token"],
                "properties": {
                    "sessionId": { "type": "string" },
                    "requestId": { "type": "string" },
                    "scope": { "type": "array", "items": { "type": "string" } },
                    "expiresInS": { "type": "integer" },
                    "token": { "type": "string" }
                }
            })),
        ),
    );
    let mut events_responses = errors(&[
        ("400", "An unknown type, parameter or Last-Event-ID"),
        ("403", "A capability asked for another session"),
        ("404", "The session names nothing"),
        ("503", "Too many streams are open"),
    ]);
    events_responses.insert(
        "200".into(),
        json!({
            "description": "Server-Sent Events: each event has an id, a type (call.finished, message.created, ...) and a JSON object as data; comments are heartbeats; stream.gap, stream.dropped and stream.closed explain gaps and ends",
            "content": { "text/event-stream": { "schema": { "type": "string" } } }
        }),
    );
    let mut metrics_responses = errors(&[("403", "Only the operator token reads /metrics")]);
    metrics_responses.insert(
        "200".into(),
        json!({
            "description": "Prometheus text format 0.0.4",
            "content": { "text/plain": { "schema": { "type": "string" } } }
        }),
    );
    let cluster_responses = answers(
        &[
            (
                "403",
                "Only the operator, or a token whose scope names admin.cluster.status",
            ),
            (
                "404",
                "No gateway node behind this server (cluster_unavailable)",
            ),
            ("503", "The store could not be read"),
        ],
        "Every node on this store and the shard leases",
        enveloped(crate::registry::output_schema::<
            switchboard_engine::cluster::ClusterStatus,
        >()),
    );
    let openapi_responses = answers(&[], "This document", json!({ "type": "object" }));
    let json_body = |reference: &str| {
        json!({
            "required": true,
            "content": { "application/json": { "schema": { "$ref": format!("#/components/schemas/{reference}") } } }
        })
    };
    let query = |name: &str, description: &str| json!({ "name": name, "in": "query", "required": false, "schema": { "type": "string" }, "description": description });
    agent_schemas(&mut schemas);
    let mut document = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "switchboard tool server",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Governed tools for an AI agent in Discord. Every call — /v1/call, each call of /v1/batch — passes the same pipeline: scope, validation, allowlist, permission, rate limits, hooks, handler, audit. Every route refuses a Host that does not name this server (host_not_allowed, 403) and a request from a web page of another origin (cross_origin, 403); every POST must declare Content-Type: application/json (unsupported_media_type, 415)."
        },
        "security": [{ "bearer": [] }],
        "paths": {
            "/health": { "get": {
                "operationId": "health",
                "summary": "Liveness and Discord's state (no token)",
                "security": [],
                "responses": { "200": ok_json("The service's health", json!({ "$ref": "#/components/schemas/Health" })) }
            } },
            "/v1/tools": { "get": {
                "operationId": "listTools",
                "summary": "The callables this caller may call, with their input schemas",
                "responses": tools_responses
            } },
            "/v1/tools/{id}": { "get": {
                "operationId": "describeTool",
                "summary": "A callable's help and examples",
                "parameters": [{ "name": "id", "in": "path", "required": true, "schema": { "type": "string" } }],
                "responses": tool_responses
            } },
            "/v1/call": { "post": {
                "operationId": "call",
                "summary": "One call through the pipeline",
                "parameters": [{
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": false,
                    "description": "The client's key for this call (1 to 255 visible ASCII characters; a UUID is usual), its caller's own. For a callable that changes something, the same key and input within 24 h answers the first call's answer (status and body, with Idempotent-Replayed: true) without running it again; the same key with another tool or input is 409 idempotency_key_reused, and one whose call is still running 409 idempotency_key_in_flight. A call refused before it acted frees its key. A read runs again whatever its key.",
                    "schema": { "type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$" }
                }],
                "requestBody": json_body("CallRequest"),
                "responses": call_responses
            } },
            "/v1/batch": { "post": {
                "operationId": "batch",
                "summary": "Up to 50 calls, each through the pipeline on its own; results in order",
                "requestBody": json_body("BatchRequest"),
                "responses": batch_responses
            } },
            "/v1/approvals": { "get": {
                "operationId": "listApprovals",
                "summary": "Approvals waiting: all for whoever may decide them, else the caller's own (toolCallId picks one)",
                "parameters": [query("toolCallId", "The x-switchboard-tool-call-id of the waiting call")],
                "responses": approvals_responses
            } },
            "/v1/capabilities": { "post": {
                "operationId": "mintCapability",
                "summary": "The operator mints a capability token bound to a session",
                "requestBody": json_body("MintRequest"),
                "responses": mint_responses
            } },
            "/v1/events": { "get": {
                "operationId": "events",
                "summary": "The live feed as Server-Sent Events, limited to the caller's sessions",
                "parameters": [
                    query("types", "Comma-separated types or families (call.finished,message.*)"),
                    query("session", "Only this session's events (#alias, <#id> or an id)"),
                    query("lastEventId", "Resume after this id (or send the Last-Event-ID header)")
                ],
                "responses": events_responses
            } },
            "/metrics": { "get": {
                "operationId": "metrics",
                "summary": "Prometheus metrics (the operator's token, or none with toolserver.metrics_public)",
                "responses": metrics_responses
            } },
            "/v1/cluster": { "get": {
                "operationId": "clusterStatus",
                "summary": "The cluster: every node (live or gone, its shards, its last heartbeat) and the shard leases (admin.cluster.status)",
                "responses": cluster_responses
            } },
            "/openapi.json": { "get": {
                "operationId": "openapi",
                "summary": "This document, for this caller",
                "responses": openapi_responses
            } }
        },
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "schemas": schemas
        }
    });
    if let Some(paths) = document["paths"].as_object_mut() {
        paths.extend(agent_paths());
    }
    document
}

/// The schemas of the chat API and the runs API.
fn agent_schemas(schemas: &mut Map<String, Value>) {
    schemas.insert(
        "ChatErrorBody".into(),
        json!({
            "description": "An error in OpenAI's shape (the chat API's own refusals)",
            "type": "object",
            "required": ["error"],
            "properties": { "error": {
                "type": "object",
                "required": ["message", "type"],
                "properties": {
                    "message": { "type": "string" },
                    "type": { "type": "string" },
                    "param": { "type": ["string", "null"] },
                    "code": { "type": ["string", "null"] }
                }
            } }
        }),
    );
    schemas.insert(
        "ChatRequest".into(),
        json!({
            "description": "OpenAI's chat completion request: model switchboard:<agent>, text messages; stream and stream_options.include_usage are honoured",
            "type": "object",
            "required": ["model", "messages"],
            "properties": {
                "model": { "type": "string", "description": "switchboard:<agent>, an agent the token's scope grants (agent:NAME)" },
                "messages": { "type": "array", "items": { "type": "object", "required": ["role"], "properties": { "role": { "type": "string" }, "content": {} } } },
                "stream": { "type": "boolean" },
                "stream_options": { "type": "object", "properties": { "include_usage": { "type": "boolean" } } }
            }
        }),
    );
    schemas.insert(
        "Run".into(),
        json!({
            "type": "object",
            "required": ["sessionId", "state", "requestedBy", "requestedByName", "text"],
            "properties": {
                "runId": { "type": ["string", "null"] },
                "sessionId": { "type": "string" },
                "state": { "type": "string", "enum": ["running", "queued"] },
                "startedMs": { "type": ["integer", "null"] },
                "requestedBy": { "type": "string" },
                "requestedByName": { "type": "string" },
                "triggerMessageId": { "type": ["string", "null"] },
                "workflowId": { "type": ["string", "null"] },
                "text": { "type": "string" },
                "parentRunId": { "type": ["string", "null"], "description": "The run whose agent.handoff started this sub-run" },
                "agent": { "type": ["string", "null"] },
                "startedBy": { "type": ["string", "null"], "description": "The API caller that started it (token:NAME, operator)" }
            }
        }),
    );
}

/// `/v1/models`, `/v1/chat/completions` and the runs API.
fn agent_paths() -> Map<String, Value> {
    let chat_error = |description: &str| {
        json!({
            "description": description,
            "content": { "application/json": { "schema": { "anyOf": [
                { "$ref": "#/components/schemas/ChatErrorBody" },
                { "$ref": "#/components/schemas/ErrorBody" }
            ] } } }
        })
    };
    let mut chat_responses = Map::new();
    for (status, description) in body_statuses() {
        chat_responses.insert(status.into(), chat_error(description));
    }
    chat_responses.insert(
        "401".into(),
        chat_error("No token, or one that is not valid here"),
    );
    chat_responses.insert(
        "404".into(),
        chat_error("No such agent (model), or the x-switchboard-session-id header names a session that does not exist"),
    );
    chat_responses.insert(
        "403".into(),
        chat_error("The token's scope grants no agent:<name> for this model, or the x-switchboard-session-id header names a session it may not use (another token's API session, a channel the allowlist refuses): session_not_allowed"),
    );
    chat_responses.insert(
        "200".into(),
        json!({
            "description": "The agent's answer: a chat.completion with usage (the run's recorded tokens), or with stream: true chat.completion.chunk events as the model writes, the last with usage when stream_options.include_usage, then data: [DONE]",
            "content": {
                "application/json": { "schema": { "type": "object", "required": ["id", "object", "choices"] } },
                "text/event-stream": { "schema": { "type": "string" } }
            }
        }),
    );
    let models_responses = answers(
        &[],
        "The agents this token may use, as models switchboard:<agent>",
        json!({ "type": "object", "required": ["object", "data"], "properties": { "object": { "const": "list" }, "data": { "type": "array" } } }),
    );
    let runs_errors = || {
        errors(&[
            ("400", "A query parameter or run id that is wrong (kind usage)"),
            ("403", "The caller may not list or stop runs (out_of_scope): the operator, tokens whose scope names runs.list / runs.abort, and tokens with an agent:<name> grant (their own runs only) may"),
            ("404", "No agent is configured (no_agent), the session names nothing, or no run with that id is running that the caller may see (unknown_run, nothing_running: another token's run answers the same)"),
            ("429", "A rate limit (kind unavailable; Retry-After says when)"),
            ("500", "A bug (kind internal)"),
            ("503", "Busy (kind unavailable)"),
        ])
    };
    let mut list_responses = runs_errors();
    list_responses.insert(
        "200".into(),
        ok_json(
            "Running runs first, then queued ones, then handoffs' sub-runs and chat-API runs; nextCursor when there are more",
            json!({
                "type": "object",
                "required": ["runs"],
                "properties": {
                    "runs": { "type": "array", "items": { "$ref": "#/components/schemas/Run" } },
                    "nextCursor": { "type": ["string", "null"] }
                }
            }),
        ),
    );
    let mut get_responses = runs_errors();
    get_responses.insert(
        "200".into(),
        ok_json("The run", json!({ "$ref": "#/components/schemas/Run" })),
    );
    let mut abort_responses = runs_errors();
    for (status, description) in [
        ("408", "The body did not arrive in time (body_timeout)"),
        ("413", "The body is over 1 MiB (body_too_large)"),
        ("415", "The request is not declared as JSON: send Content-Type: application/json (and {} as the body)"),
    ] {
        abort_responses.insert(status.into(), error_response(description));
    }
    abort_responses.insert(
        "200".into(),
        ok_json(
            "The run is being stopped (its sub-runs with it)",
            json!({ "type": "object", "required": ["runId", "sessionId"], "properties": { "runId": { "type": "string" }, "sessionId": { "type": "string" } } }),
        ),
    );
    let query = |name: &str, description: &str, schema: Value| json!({ "name": name, "in": "query", "required": false, "schema": schema, "description": description });
    let run_id = json!({ "name": "id", "in": "path", "required": true, "schema": { "type": "string" }, "description": "The run's id (run-<hex>, a sub-run's run-<hex>.<hex>)" });
    let paths = json!({
        "/v1/models": { "get": {
            "operationId": "listModels",
            "summary": "The agents this token may use (OpenAI's model list: switchboard:<agent>)",
            "responses": models_responses
        } },
        "/v1/chat/completions": { "post": {
            "operationId": "chatCompletion",
            "summary": "Runs an agent on a conversation (OpenAI-compatible, streamed or not); a client that goes away mid-stream stops the run",
            "parameters": [{
                "name": "x-switchboard-session-id",
                "in": "header",
                "required": false,
                "description": "The session the agent works in: a Discord session the allowlist allows (#alias or id), or api:<token name>. Without it, the run works in the token's own API-only session api:<token name> (listed by surface.sessions.list with kind api, named in the audit log). Another token's API session is 403.",
                "schema": { "type": "string" }
            }],
            "requestBody": { "required": true, "content": { "application/json": { "schema": { "$ref": "#/components/schemas/ChatRequest" } } } },
            "responses": chat_responses
        } },
        "/v1/runs": { "get": {
            "operationId": "listRuns",
            "summary": "The agent's runs the caller may see (runs.list)",
            "parameters": [
                query("session", "Only this session's runs (#alias, id, or api:<token name>)", json!({ "type": "string" })),
                query("state", "Only runs in this state; without it, the runs running and queued now, on every node. finished, failed, aborted and interrupted list ended runs (kept in the store a month; a handoff's sub-runs and chat-API runs: the last 1,000 this node recorded, until a restart)", json!({ "type": "string", "enum": ["running", "queued", "finished", "failed", "aborted", "interrupted"] })),
                query("limit", "At most this many (1 to 200, default 200)", json!({ "type": "integer", "minimum": 1, "maximum": 200 })),
                query("cursor", "The previous page's nextCursor", json!({ "type": "string" }))
            ],
            "responses": list_responses
        } },
        "/v1/runs/{id}": { "get": {
            "operationId": "getRun",
            "summary": "One run the caller may see: running, queued, or among the ended runs this node recorded (runs.list)",
            "parameters": [run_id.clone()],
            "responses": get_responses
        } },
        "/v1/runs/{id}/abort": { "post": {
            "operationId": "abortRun",
            "summary": "Stops a run the caller may stop, and its handoffs' sub-runs (runs.abort)",
            "parameters": [run_id],
            "requestBody": { "required": false, "content": { "application/json": { "schema": { "type": "object" } } } },
            "responses": abort_responses
        } }
    });
    match paths {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// `GET /openapi.json`.
pub(crate) async fn serve(
    State(core): State<Arc<Core>>,
    Authed(context): Authed,
) -> Result<Response, ApiError> {
    Ok(Json(document(&core, &context.caller)).into_response())
}
