//! The OpenAI-compatible chat API into switchboard's agents, as wire types and checks: no
//! HTTP server, no runs.
//!
//! - [`parse_request`]: `POST /v1/chat/completions`' body, from untrusted bytes (at most
//!   [`MAX_BODY_BYTES`], [`MAX_MESSAGES`] messages) to a [`ChatRequest`]: the agent from
//!   `model = "switchboard:<agent>"` ([`parse_model`]: 404 for no such agent with a
//!   did-you-mean among the token's own agents, 403 for one outside its scope), text
//!   messages, `stream` and `stream_options.include_usage`, and `max_tokens` /
//!   `max_completion_tokens`, `temperature`, `top_p` passed through. Client `tools`, tool
//!   messages, non-text parts, `n` > 1, logprobs, audio and structured `response_format` are
//!   refused by name ([`RequestError`], with OpenAI's `param`); other fields are ignored.
//! - [`ChatCompletion`], [`ChatCompletionChunk`], [`ModelList`] / [`Model`],
//!   [`CompletionUsage`]: the answers, with the fields and `null`s the official `openai`
//!   Python client requires (checked against its 3.51.0 models), and unknown fields kept
//!   (`extra`) so a real OpenAI answer reads and writes back unchanged.
//! - [`ChunkStream`]: a streamed answer's events in order (role, text, `finish_reason`, the
//!   usage chunk when asked, `data: [DONE]`), or an error event mid-stream; [`SSE_KEEPALIVE`]
//!   for long tool calls.
//! - [`ApiError`]: errors as `{"error": {message, type, param, code}}` with the status the
//!   client maps to its exception, and `x-should-retry: false` on everything after a run
//!   started, since the official clients otherwise retry 429 and 5xx answers on their own and
//!   would run the agent again.
//!
//! # How the service wires this
//!
//! - Routes (in the HTTP front, behind the same `Authed` extractor as `/v1/call`, so a
//!   missing or unknown token is a 401 before the body is read; the answer for it is
//!   [`ApiError::authentication`]): `GET /v1/models` answers
//!   [`ModelList::of_agents`] over `AgentGrants::visible` of the configured agents;
//!   `POST /v1/chat/completions` reads the body within the front's limits, calls
//!   [`parse_request`] with the configured agents and the token's `AgentGrants`, and maps a
//!   refusal with [`RequestError::to_api`].
//! - The run: the agent [`ChatRequest::agent`], in the session named by the
//!   `x-switchboard-session` header (allowlisted as any session) or the token's API-only
//!   session (`api:<token name>`, shown in the console and audit log), under the token's scope
//!   intersected with the agent's `tool_scope`, with [`ChatRequest::messages`] as its
//!   conversation after the agent's own system prompt (a client's system and developer
//!   messages follow it, never replace it) and [`ChatRequest::sampling`] passed to its model.
//!   The budgets check runs first ([`ApiError::budget`] with the refusal's message). The
//!   run's id makes the answer's id (`chatcmpl-<run id>`), and `usage` is the run's summed
//!   usage.
//! - Streaming: `Content-Type: text/event-stream`; each text delta the runner publishes (the
//!   same feed that edits a Discord draft) goes out as [`ChunkStream::text`], an
//!   [`SSE_KEEPALIVE`] every 15 s while tools run, then [`ChunkStream::finish`]; a failure,
//!   timeout or budget crossed mid-run is [`ChunkStream::fail`]. A client that disconnects
//!   aborts the run as `POST /v1/runs/{id}/abort` does.
//! - The built-in OpenAI runner (`agent/src/openai.rs`) reads each model answer's usage with
//!   [`CompletionUsage::of_answer`] (and asks for it when streaming with
//!   `stream_options: {"include_usage": true}`).

#![warn(missing_docs)]

mod error;
mod model;
mod request;
mod stream;
mod wire;

pub use error::{ApiError, ErrorBody, ErrorObject};
pub use model::{model_id, parse_model, ModelError, MODEL_PREFIX};
pub use request::{
    parse_request, ChatMessage, ChatRequest, RequestError, Sampling, MAX_BODY_BYTES,
    MAX_MAX_TOKENS, MAX_MESSAGES, MAX_NAME_CHARS, MAX_PARTS,
};
pub use stream::{sse_event, ChunkStream, SSE_CONTENT_TYPE, SSE_DONE, SSE_KEEPALIVE};
pub use wire::{
    AssistantMessage, AssistantRole, ChatCompletion, ChatCompletionChunk, ChatCompletionObject,
    Choice, ChunkChoice, ChunkObject, Completion, CompletionUsage, Delta, FinishReason, ListObject,
    Model, ModelList, ModelObject, Role, OWNED_BY,
};
