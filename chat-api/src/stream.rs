//! A streamed answer as server-sent events: `data: {chunk}\n\n` for each
//! `chat.completion.chunk`, then `data: [DONE]\n\n`, in the order the official clients expect:
//! the role first, the text as it comes, a last chunk with `finish_reason`, the usage chunk
//! (empty `choices`) when asked for, then `[DONE]`. An error after the stream began is an
//! event `data: {"error": {...}}`, which the Python client raises as `APIError`.

use serde_json::Map;

use crate::error::ApiError;
use crate::wire::{
    ChatCompletionChunk, ChunkChoice, ChunkObject, CompletionUsage, Delta, FinishReason, Role,
};

/// The event that ends every stream.
pub const SSE_DONE: &str = "data: [DONE]\n\n";

/// A comment line: keeps proxies from closing a stream while the agent's tools run (every SSE
/// reader skips it).
pub const SSE_KEEPALIVE: &str = ": keep-alive\n\n";

/// The `Content-Type` of a streamed answer.
pub const SSE_CONTENT_TYPE: &str = "text/event-stream";

/// One `data:` event holding `value` as JSON (which has no raw newline, so one line).
pub fn sse_event(value: &impl serde::Serialize) -> String {
    let json = serde_json::to_string(value).unwrap_or_else(|_| "{}".to_owned());
    format!("data: {json}\n\n")
}

/// Where a stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Fresh,
    Started,
    Ended,
}

/// Writes one answer's events in order; after it ends, it writes nothing more.
#[derive(Debug, Clone)]
pub struct ChunkStream {
    id: String,
    created: i64,
    model: String,
    include_usage: bool,
    state: State,
}

impl ChunkStream {
    /// A stream for the answer `id` (`chatcmpl-…`) to `model`, created at `created` (Unix
    /// seconds); `include_usage` from the request's `stream_options`.
    pub fn new(
        id: impl Into<String>,
        created: i64,
        model: impl Into<String>,
        include_usage: bool,
    ) -> Self {
        ChunkStream {
            id: id.into(),
            created,
            model: model.into(),
            include_usage,
            state: State::Fresh,
        }
    }

    fn chunk(&self, delta: Delta, finish_reason: Option<FinishReason>) -> ChatCompletionChunk {
        ChatCompletionChunk {
            id: self.id.clone(),
            object: ChunkObject::ChatCompletionChunk,
            created: self.created,
            model: self.model.clone(),
            choices: vec![ChunkChoice {
                index: 0,
                delta,
                logprobs: None,
                finish_reason,
                extra: Map::new(),
            }],
            usage: None,
            system_fingerprint: None,
            service_tier: None,
            extra: Map::new(),
        }
    }

    fn start(&mut self, out: &mut String) {
        if self.state == State::Fresh {
            self.state = State::Started;
            out.push_str(&sse_event(&self.chunk(
                Delta {
                    role: Some(Role::Assistant),
                    content: Some(String::new()),
                    ..Delta::default()
                },
                None,
            )));
        }
    }

    /// The events for more text (the role chunk first, once). Empty text writes only that.
    pub fn text(&mut self, text: &str) -> String {
        let mut out = String::new();
        if self.state == State::Ended {
            return out;
        }
        self.start(&mut out);
        if !text.is_empty() {
            out.push_str(&sse_event(&self.chunk(
                Delta {
                    content: Some(text.to_owned()),
                    ..Delta::default()
                },
                None,
            )));
        }
        out
    }

    /// The events that end the answer: the chunk with `finish_reason`, the usage chunk when
    /// asked for (`usage` of the whole run), and `[DONE]`.
    pub fn finish(&mut self, reason: FinishReason, usage: Option<CompletionUsage>) -> String {
        let mut out = String::new();
        if self.state == State::Ended {
            return out;
        }
        self.start(&mut out);
        out.push_str(&sse_event(&self.chunk(Delta::default(), Some(reason))));
        if self.include_usage {
            let mut last = self.chunk(Delta::default(), None);
            last.choices.clear();
            last.usage = Some(usage.unwrap_or_default());
            out.push_str(&sse_event(&last));
        }
        out.push_str(SSE_DONE);
        self.state = State::Ended;
        out
    }

    /// The events that end the answer with an error (the run failed, timed out, or crossed a
    /// budget after the stream began): the error event, then `[DONE]`.
    pub fn fail(&mut self, error: &ApiError) -> String {
        if self.state == State::Ended {
            return String::new();
        }
        self.state = State::Ended;
        format!("{}{SSE_DONE}", sse_event(&error.body))
    }

    /// Whether the answer has ended.
    pub fn ended(&self) -> bool {
        self.state == State::Ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn events(text: &str) -> Vec<Value> {
        assert!(text.ends_with("\n\n"), "{text:?}");
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let data = e.strip_prefix("data: ").unwrap();
                if data == "[DONE]" {
                    json!("[DONE]")
                } else {
                    serde_json::from_str(data).unwrap()
                }
            })
            .collect()
    }

    #[test]
    fn a_stream_sends_the_role_the_text_the_finish_the_usage_and_done_in_order() {
        let mut stream =
            ChunkStream::new("chatcmpl-run1", 1_700_000_000, "switchboard:support", true);
        let mut text = stream.text("Hel");
        text.push_str(&stream.text(""));
        text.push_str(&stream.text("lo"));
        text.push_str(&stream.finish(FinishReason::Stop, Some(CompletionUsage::new(12, 3))));
        let events = events(&text);
        assert_eq!(events.len(), 6);
        assert_eq!(
            events[0]["choices"][0]["delta"],
            json!({"role": "assistant", "content": ""})
        );
        assert_eq!(events[0]["object"], "chat.completion.chunk");
        assert_eq!(events[1]["choices"][0]["delta"], json!({"content": "Hel"}));
        assert_eq!(events[2]["choices"][0]["delta"], json!({"content": "lo"}));
        assert_eq!(events[3]["choices"][0]["finish_reason"], "stop");
        assert_eq!(events[3]["choices"][0]["delta"], json!({}));
        assert_eq!(events[4]["choices"], json!([]));
        assert_eq!(
            events[4]["usage"],
            json!({"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15})
        );
        assert_eq!(events[5], json!("[DONE]"));
        for event in &events[..5] {
            assert_eq!(event["id"], "chatcmpl-run1");
            assert_eq!(event["created"], 1_700_000_000);
        }
        assert!(stream.ended());
        assert_eq!(stream.text("late"), "");
        assert_eq!(stream.finish(FinishReason::Stop, None), "");
    }

    #[test]
    fn without_include_usage_no_usage_chunk_is_sent() {
        let mut stream = ChunkStream::new("c", 1, "m", false);
        let events = events(&stream.finish(FinishReason::Stop, Some(CompletionUsage::new(1, 1))));
        assert_eq!(events.len(), 3);
        assert!(events[1].get("usage").is_none());
    }

    #[test]
    fn an_error_mid_stream_is_an_error_event_then_done_once() {
        let mut stream = ChunkStream::new("c", 1, "m", true);
        stream.text("partial");
        let error = ApiError::budget("your daily token budget is used up");
        let events = events(&stream.fail(&error));
        assert_eq!(events[0]["error"]["code"], "budget_exceeded");
        assert_eq!(events[1], json!("[DONE]"));
        assert_eq!(stream.fail(&error), "");
        assert_eq!(stream.finish(FinishReason::Stop, None), "");
    }

    #[test]
    fn text_with_newlines_stays_one_data_line() {
        let mut stream = ChunkStream::new("c", 1, "m", false);
        let text = stream.text("a\n\nb\r\n");
        assert_eq!(text.matches("\n\n").count(), 2);
        assert_eq!(
            events(&text)[1]["choices"][0]["delta"]["content"],
            "a\n\nb\r\n"
        );
    }
}
