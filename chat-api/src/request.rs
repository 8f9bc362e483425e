//! `POST /v1/chat/completions`' body, from untrusted bytes to a checked [`ChatRequest`].
//!
//! What switchboard does with each part of OpenAI's request:
//! - `model` must be `switchboard:<agent>`, an agent the token may use (404 for an agent that
//!   does not exist, 403 for one outside the token's scope).
//! - `messages`: `system`, `developer`, `user` and `assistant` messages with text content (a
//!   string, or `text` parts, joined); the last one must be the user's. `tool` and
//!   `function` messages, assistant `tool_calls`, and image, audio and file parts are refused:
//!   the agent's own tools run inside switchboard, under its policy, and the client's never.
//! - `stream`, `stream_options.include_usage`: honoured.
//! - `max_tokens` / `max_completion_tokens`, `temperature`, `top_p`: checked and passed to the
//!   agent's model (a command runner ignores them).
//! - `tools`, `functions` (non-empty), `n` > 1, `logprobs: true`, `audio`, `modalities` with
//!   audio, a `response_format` other than text: refused, since they ask for answers the
//!   agent does not give. `tool_choice: "none"` or `"auto"`, `user`, and every other field
//!   (penalties, `seed`, `stop`, `metadata`, `store`, …) are accepted and ignored, as the
//!   clients that front switchboard send them routinely.

use serde_json::{Map, Value};
use switchboard_agents::{AgentGrants, AgentName};

use crate::error::ApiError;
use crate::model::{parse_model, ModelError};
use crate::wire::Role;

/// The largest body read (the tool server's limit for every body).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// The most messages one request carries.
pub const MAX_MESSAGES: usize = 1_000;
/// The most content parts one message carries.
pub const MAX_PARTS: usize = 100;
/// The most characters of a message's `name` or the request's `user`.
pub const MAX_NAME_CHARS: usize = 256;
/// The largest `max_tokens`.
pub const MAX_MAX_TOKENS: u64 = 1_000_000;

/// A checked request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The agent to run.
    pub agent: AgentName,
    /// `model` as sent (`switchboard:<agent>`), echoed in the answer.
    pub model: String,
    /// The conversation, oldest first; the last is the user's.
    pub messages: Vec<ChatMessage>,
    /// Whether to stream the answer as `chat.completion.chunk` events.
    pub stream: bool,
    /// Whether the stream ends with a usage chunk (`stream_options.include_usage`).
    pub include_usage: bool,
    /// Passed to the agent's model.
    pub sampling: Sampling,
    /// `user`: the client's end-user id, for the logs.
    pub user: Option<String>,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `developer`, `user` or `assistant`.
    pub role: Role,
    /// Its text.
    pub content: String,
    /// `name`, if given.
    pub name: Option<String>,
}

/// What the request asks of the model's sampling.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sampling {
    /// `max_completion_tokens`, else `max_tokens`.
    pub max_tokens: Option<u64>,
    /// `temperature`, 0 to 2.
    pub temperature: Option<f64>,
    /// `top_p`, 0 to 1.
    pub top_p: Option<f64>,
}

/// Why a request was refused. [`RequestError::to_api`] gives the answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The body is over [`MAX_BODY_BYTES`].
    #[error("the request body is {bytes} bytes; at most {MAX_BODY_BYTES} are read")]
    TooLarge {
        /// Its size.
        bytes: usize,
    },
    /// Not JSON.
    #[error("the request body is not JSON: {reason}")]
    NotJson {
        /// The parser's reason.
        reason: String,
    },
    /// JSON, but not an object.
    #[error("the request body must be a JSON object")]
    NotAnObject,
    /// A required field is absent (or `null`).
    #[error("'{param}' is required")]
    Missing {
        /// The field.
        param: String,
    },
    /// A field has the wrong JSON type.
    #[error("'{param}' must be {expected}")]
    WrongType {
        /// The field.
        param: String,
        /// What it must be.
        expected: &'static str,
    },
    /// A number out of its range.
    #[error("'{param}' is {value}; it must be {range}")]
    OutOfRange {
        /// The field.
        param: String,
        /// The value given.
        value: String,
        /// The range.
        range: &'static str,
    },
    /// `model` is refused.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// `messages` is empty.
    #[error("'messages' is empty; send at least the user's message")]
    EmptyMessages,
    /// More than [`MAX_MESSAGES`].
    #[error("'messages' holds {count} messages; at most {MAX_MESSAGES} are read")]
    TooManyMessages {
        /// How many.
        count: usize,
    },
    /// A role that is not OpenAI's.
    #[error("'messages[{index}].role' is '{role}', which is not a role")]
    UnknownRole {
        /// The message's index.
        index: usize,
        /// The role given.
        role: String,
    },
    /// `tool` or `function` messages, or assistant tool calls.
    #[error("'messages[{index}]' is a {what}, which switchboard does not take")]
    ToolMessage {
        /// The message's index.
        index: usize,
        /// What it is.
        what: &'static str,
    },
    /// An image, audio or file part (or any part that is not text).
    #[error("'messages[{index}].content[{part}]' is a '{kind}' part; only text is read")]
    UnsupportedPart {
        /// The message's index.
        index: usize,
        /// The part's index.
        part: usize,
        /// Its type.
        kind: String,
    },
    /// The last message is not the user's.
    #[error("the last message is the {role}'s; it must be the user's")]
    LastNotUser {
        /// Its role.
        role: &'static str,
    },
    /// The user's last message has no text.
    #[error("the last user message is empty")]
    EmptyPrompt,
    /// A parameter asking for what the agent does not give.
    #[error("'{param}' is not supported here: {why}")]
    Unsupported {
        /// The field.
        param: &'static str,
        /// Why, and what to do.
        why: &'static str,
    },
}

impl RequestError {
    /// The request field at fault, as OpenAI names it (`messages[2].content`).
    pub fn param(&self) -> Option<String> {
        Some(match self {
            RequestError::TooLarge { .. }
            | RequestError::NotJson { .. }
            | RequestError::NotAnObject => return None,
            RequestError::Missing { param }
            | RequestError::WrongType { param, .. }
            | RequestError::OutOfRange { param, .. } => param.clone(),
            RequestError::Model(_) => "model".to_owned(),
            RequestError::EmptyMessages
            | RequestError::TooManyMessages { .. }
            | RequestError::LastNotUser { .. }
            | RequestError::EmptyPrompt => "messages".to_owned(),
            RequestError::UnknownRole { index, .. } => format!("messages[{index}].role"),
            RequestError::ToolMessage { index, .. } => format!("messages[{index}]"),
            RequestError::UnsupportedPart { index, part, .. } => {
                format!("messages[{index}].content[{part}].type")
            }
            RequestError::Unsupported { param, .. } => (*param).to_owned(),
        })
    }

    /// The answer: status, OpenAI's error body, and switchboard's code.
    pub fn to_api(&self) -> ApiError {
        match self {
            RequestError::Model(model) => model.to_api(),
            RequestError::TooLarge { .. } => ApiError::new(
                413,
                "invalid_request_error",
                Some("body_too_large"),
                None,
                self.to_string(),
            ),
            RequestError::NotJson { .. } | RequestError::NotAnObject => {
                ApiError::invalid_request("bad_body", None, self.to_string())
            }
            RequestError::Unsupported { .. }
            | RequestError::ToolMessage { .. }
            | RequestError::UnsupportedPart { .. } => {
                ApiError::invalid_request("unsupported_parameter", self.param(), self.to_string())
            }
            _ => ApiError::invalid_request("invalid_input", self.param(), self.to_string()),
        }
    }
}

fn field<'a>(object: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    object.get(name).filter(|value| !value.is_null())
}

fn string_field(
    object: &Map<String, Value>,
    name: &str,
    param: impl FnOnce() -> String,
) -> Result<Option<String>, RequestError> {
    match field(object, name) {
        None => Ok(None),
        Some(Value::String(text)) => {
            if text.chars().count() > MAX_NAME_CHARS {
                return Err(RequestError::OutOfRange {
                    param: param(),
                    value: format!("{} characters long", text.chars().count()),
                    range: "at most 256 characters",
                });
            }
            Ok(Some(text.clone()))
        }
        Some(_) => Err(RequestError::WrongType {
            param: param(),
            expected: "a string",
        }),
    }
}

fn number(
    object: &Map<String, Value>,
    name: &'static str,
    range: std::ops::RangeInclusive<f64>,
    words: &'static str,
) -> Result<Option<f64>, RequestError> {
    match field(object, name) {
        None => Ok(None),
        Some(Value::Number(n)) => {
            let value = n.as_f64().unwrap_or(f64::NAN);
            if range.contains(&value) {
                Ok(Some(value))
            } else {
                Err(RequestError::OutOfRange {
                    param: name.to_owned(),
                    value: n.to_string(),
                    range: words,
                })
            }
        }
        Some(_) => Err(RequestError::WrongType {
            param: name.to_owned(),
            expected: "a number",
        }),
    }
}

fn whole(object: &Map<String, Value>, name: &'static str) -> Result<Option<u64>, RequestError> {
    match field(object, name) {
        None => Ok(None),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(value) if (1..=MAX_MAX_TOKENS).contains(&value) => Ok(Some(value)),
            _ => Err(RequestError::OutOfRange {
                param: name.to_owned(),
                value: n.to_string(),
                range: "a whole number from 1 to 1000000",
            }),
        },
        Some(_) => Err(RequestError::WrongType {
            param: name.to_owned(),
            expected: "a whole number",
        }),
    }
}

fn boolean(object: &Map<String, Value>, name: &'static str) -> Result<bool, RequestError> {
    match field(object, name) {
        None => Ok(false),
        Some(Value::Bool(flag)) => Ok(*flag),
        Some(_) => Err(RequestError::WrongType {
            param: name.to_owned(),
            expected: "true or false",
        }),
    }
}

fn non_empty_array(object: &Map<String, Value>, name: &str) -> bool {
    match field(object, name) {
        Some(Value::Array(items)) => !items.is_empty(),
        Some(_) => true,
        None => false,
    }
}

/// The text of a message's `content`: a string, or an array of `text` parts.
fn content_text(index: usize, content: &Value) -> Result<String, RequestError> {
    let param = || format!("messages[{index}].content");
    match content {
        Value::String(text) => Ok(text.clone()),
        Value::Array(parts) => {
            if parts.len() > MAX_PARTS {
                return Err(RequestError::OutOfRange {
                    param: param(),
                    value: format!("{} parts", parts.len()),
                    range: "at most 100 parts",
                });
            }
            let mut texts = Vec::with_capacity(parts.len());
            for (part_index, part) in parts.iter().enumerate() {
                let Value::Object(part) = part else {
                    return Err(RequestError::WrongType {
                        param: format!("messages[{index}].content[{part_index}]"),
                        expected: "an object such as {\"type\": \"text\", \"text\": \"…\"}",
                    });
                };
                match part.get("type").and_then(Value::as_str) {
                    Some("text") => match part.get("text") {
                        Some(Value::String(text)) => texts.push(text.as_str()),
                        _ => {
                            return Err(RequestError::WrongType {
                                param: format!("messages[{index}].content[{part_index}].text"),
                                expected: "a string",
                            })
                        }
                    },
                    Some(kind) => {
                        return Err(RequestError::UnsupportedPart {
                            index,
                            part: part_index,
                            kind: kind.chars().take(40).collect(),
                        })
                    }
                    None => {
                        return Err(RequestError::Missing {
                            param: format!("messages[{index}].content[{part_index}].type"),
                        })
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        _ => Err(RequestError::WrongType {
            param: param(),
            expected: "a string or an array of text parts",
        }),
    }
}

fn message(index: usize, value: &Value) -> Result<ChatMessage, RequestError> {
    let Value::Object(object) = value else {
        return Err(RequestError::WrongType {
            param: format!("messages[{index}]"),
            expected: "an object with role and content",
        });
    };
    let role = match field(object, "role") {
        None => {
            return Err(RequestError::Missing {
                param: format!("messages[{index}].role"),
            })
        }
        Some(Value::String(role)) => role.as_str(),
        Some(_) => {
            return Err(RequestError::WrongType {
                param: format!("messages[{index}].role"),
                expected: "a string",
            })
        }
    };
    let role = match role {
        "system" => Role::System,
        "developer" => Role::Developer,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => {
            return Err(RequestError::ToolMessage {
                index,
                what: "tool result",
            })
        }
        "function" => {
            return Err(RequestError::ToolMessage {
                index,
                what: "function result",
            })
        }
        other => {
            return Err(RequestError::UnknownRole {
                index,
                role: other.chars().take(40).collect(),
            })
        }
    };
    if role == Role::Assistant
        && (non_empty_array(object, "tool_calls") || field(object, "function_call").is_some())
    {
        return Err(RequestError::ToolMessage {
            index,
            what: "tool call",
        });
    }
    let content = match field(object, "content") {
        Some(content) => content_text(index, content)?,
        None => {
            return Err(RequestError::Missing {
                param: format!("messages[{index}].content"),
            })
        }
    };
    let name = string_field(object, "name", || format!("messages[{index}].name"))?;
    Ok(ChatMessage {
        role,
        content,
        name,
    })
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Developer => "developer",
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// Reads and checks a body. `configured` are the agents the config has; `grants` those the
/// caller's token may use.
pub fn parse_request(
    body: &[u8],
    configured: &[AgentName],
    grants: &AgentGrants,
) -> Result<ChatRequest, RequestError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(RequestError::TooLarge { bytes: body.len() });
    }
    // serde_json refuses nesting deeper than 128: no stack to exhaust.
    let value: Value = serde_json::from_slice(body).map_err(|e| RequestError::NotJson {
        reason: e.to_string(),
    })?;
    let Value::Object(object) = value else {
        return Err(RequestError::NotAnObject);
    };
    let model = match field(&object, "model") {
        Some(Value::String(model)) => model.clone(),
        Some(_) => {
            return Err(RequestError::WrongType {
                param: "model".into(),
                expected: "a string such as \"switchboard:support\"",
            })
        }
        None => {
            return Err(RequestError::Missing {
                param: "model".into(),
            })
        }
    };
    let agent = parse_model(&model, configured, grants)?;
    let messages = match field(&object, "messages") {
        Some(Value::Array(messages)) => messages,
        Some(_) => {
            return Err(RequestError::WrongType {
                param: "messages".into(),
                expected: "an array of messages",
            })
        }
        None => {
            return Err(RequestError::Missing {
                param: "messages".into(),
            })
        }
    };
    if messages.is_empty() {
        return Err(RequestError::EmptyMessages);
    }
    if messages.len() > MAX_MESSAGES {
        return Err(RequestError::TooManyMessages {
            count: messages.len(),
        });
    }
    let messages = messages
        .iter()
        .enumerate()
        .map(|(index, value)| message(index, value))
        .collect::<Result<Vec<_>, _>>()?;
    let last = messages.last().ok_or(RequestError::EmptyMessages)?;
    if last.role != Role::User {
        return Err(RequestError::LastNotUser {
            role: role_name(last.role),
        });
    }
    if last.content.trim().is_empty() {
        return Err(RequestError::EmptyPrompt);
    }
    if non_empty_array(&object, "tools") {
        return Err(RequestError::Unsupported {
            param: "tools",
            why: "the agent uses its own tools, under switchboard's policy; remove tools (and tool_choice)",
        });
    }
    if non_empty_array(&object, "functions") {
        return Err(RequestError::Unsupported {
            param: "functions",
            why: "the agent uses its own tools, under switchboard's policy; remove functions",
        });
    }
    match field(&object, "tool_choice") {
        None => {}
        Some(Value::String(choice)) if choice == "none" || choice == "auto" => {}
        Some(_) => {
            return Err(RequestError::Unsupported {
                param: "tool_choice",
                why: "no client tools are offered; remove tool_choice or set it to \"auto\"",
            })
        }
    }
    match field(&object, "n") {
        None => {}
        Some(n) if n.as_u64() == Some(1) => {}
        Some(_) => {
            return Err(RequestError::Unsupported {
                param: "n",
                why: "one agent run gives one answer; remove n or set it to 1",
            })
        }
    }
    if boolean(&object, "logprobs")? {
        return Err(RequestError::Unsupported {
            param: "logprobs",
            why: "an agent's answer has no token probabilities; remove logprobs",
        });
    }
    if field(&object, "audio").is_some()
        || field(&object, "modalities")
            .and_then(Value::as_array)
            .is_some_and(|m| m.iter().any(|v| v.as_str() != Some("text")))
    {
        return Err(RequestError::Unsupported {
            param: "modalities",
            why: "the agent answers in text only; remove audio and modalities",
        });
    }
    match field(&object, "response_format") {
        None => {}
        Some(format) if format.get("type").and_then(Value::as_str) == Some("text") => {}
        Some(_) => {
            return Err(RequestError::Unsupported {
                param: "response_format",
                why: "the agent answers in free text; remove response_format or set it to {\"type\": \"text\"}",
            })
        }
    }
    let stream = boolean(&object, "stream")?;
    let include_usage = match field(&object, "stream_options") {
        None => false,
        Some(Value::Object(options)) if stream => match field(options, "include_usage") {
            None => false,
            Some(Value::Bool(flag)) => *flag,
            Some(_) => {
                return Err(RequestError::WrongType {
                    param: "stream_options.include_usage".into(),
                    expected: "true or false",
                })
            }
        },
        Some(Value::Object(_)) => {
            return Err(RequestError::Unsupported {
                param: "stream_options",
                why: "it is only allowed when stream is true",
            })
        }
        Some(_) => {
            return Err(RequestError::WrongType {
                param: "stream_options".into(),
                expected: "an object",
            })
        }
    };
    let max_tokens = match whole(&object, "max_completion_tokens")? {
        Some(max) => Some(max),
        None => whole(&object, "max_tokens")?,
    };
    let sampling = Sampling {
        max_tokens,
        temperature: number(&object, "temperature", 0.0..=2.0, "from 0 to 2")?,
        top_p: number(&object, "top_p", 0.0..=1.0, "from 0 to 1")?,
    };
    let user = string_field(&object, "user", || "user".to_owned())?;
    Ok(ChatRequest {
        agent,
        model,
        messages,
        stream,
        include_usage,
        sampling,
        user,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn agents() -> Vec<AgentName> {
        vec![
            AgentName::parse("support").unwrap(),
            AgentName::parse("release").unwrap(),
        ]
    }

    fn parse(body: Value) -> Result<ChatRequest, RequestError> {
        let configured = agents();
        let grants = AgentGrants::from_scope(["agent:support"], &configured);
        parse_request(body.to_string().as_bytes(), &configured, &grants)
    }

    fn hello() -> Value {
        json!({"model": "switchboard:support", "messages": [{"role": "user", "content": "hello"}]})
    }

    #[test]
    fn a_plain_request_names_the_agent_and_the_conversation() {
        let request = parse(json!({
            "model": "switchboard:support",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi", "name": "mira"},
                {"role": "assistant", "content": "Hello!"},
                {"role": "user", "content": [{"type": "text", "text": "What changed"}, {"type": "text", "text": "today?"}]}
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": 256,
            "temperature": 0.2,
            "presence_penalty": 0.5,
            "user": "owui-42"
        }))
        .unwrap();
        assert_eq!(request.agent.as_str(), "support");
        assert_eq!(request.model, "switchboard:support");
        assert_eq!(request.messages.len(), 4);
        assert_eq!(request.messages[1].name.as_deref(), Some("mira"));
        assert_eq!(request.messages[3].content, "What changed\ntoday?");
        assert!(request.stream && request.include_usage);
        assert_eq!(
            request.sampling,
            Sampling {
                max_tokens: Some(256),
                temperature: Some(0.2),
                top_p: None
            }
        );
        assert_eq!(request.user.as_deref(), Some("owui-42"));
    }

    #[test]
    fn client_tools_and_tool_messages_are_refused_with_the_field() {
        let mut body = hello();
        body["tools"] = json!([{"type": "function", "function": {"name": "f"}}]);
        let error = parse(body).unwrap_err();
        assert_eq!(error.param().as_deref(), Some("tools"));
        assert_eq!(
            error.to_api().body.error.code.as_deref(),
            Some("unsupported_parameter")
        );
        let mut empty_tools = hello();
        empty_tools["tools"] = json!([]);
        empty_tools["tool_choice"] = json!("auto");
        assert!(parse(empty_tools).is_ok());
        let error = parse(json!({"model": "switchboard:support", "messages": [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "1"}]},
            {"role": "tool", "tool_call_id": "1", "content": "r"},
            {"role": "user", "content": "y"}
        ]}))
        .unwrap_err();
        assert_eq!(
            error,
            RequestError::ToolMessage {
                index: 1,
                what: "tool call"
            }
        );
    }

    #[test]
    fn images_and_other_parts_are_refused_by_place() {
        let error = parse(json!({"model": "switchboard:support", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "data:"}}]}
        ]}))
        .unwrap_err();
        assert_eq!(
            error.param().as_deref(),
            Some("messages[0].content[1].type")
        );
    }

    #[test]
    fn the_conversation_must_end_with_a_user_message_with_text() {
        assert_eq!(
            parse(json!({"model": "switchboard:support", "messages": []})).unwrap_err(),
            RequestError::EmptyMessages
        );
        assert_eq!(
            parse(json!({"model": "switchboard:support", "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})).unwrap_err(),
            RequestError::LastNotUser { role: "assistant" }
        );
        assert_eq!(
            parse(json!({"model": "switchboard:support", "messages": [{"role": "user", "content": "  "}]})).unwrap_err(),
            RequestError::EmptyPrompt
        );
        assert_eq!(
            parse(json!({"model": "switchboard:support", "messages": [{"role": "robot", "content": "a"}]})).unwrap_err(),
            RequestError::UnknownRole { index: 0, role: "robot".into() }
        );
    }

    #[test]
    fn sampling_parameters_are_checked() {
        for (key, value, param) in [
            ("temperature", json!(3), "temperature"),
            ("top_p", json!(-0.1), "top_p"),
            ("max_tokens", json!(0), "max_tokens"),
            ("max_completion_tokens", json!(1.5), "max_completion_tokens"),
            ("stream", json!("yes"), "stream"),
            ("n", json!(2), "n"),
            ("user", json!(5), "user"),
        ] {
            let mut body = hello();
            body[key] = value;
            assert_eq!(
                parse(body).unwrap_err().param().as_deref(),
                Some(param),
                "{key}"
            );
        }
        let mut body = hello();
        body["stream_options"] = json!({"include_usage": true});
        assert_eq!(
            parse(body).unwrap_err().param().as_deref(),
            Some("stream_options")
        );
        let mut body = hello();
        body["max_completion_tokens"] = json!(10);
        body["max_tokens"] = json!(99);
        assert_eq!(parse(body).unwrap().sampling.max_tokens, Some(10));
    }

    #[test]
    fn bodies_that_are_not_requests_are_refused_before_anything_else() {
        let configured = agents();
        let grants = AgentGrants::all();
        let huge = vec![b' '; MAX_BODY_BYTES + 1];
        assert_eq!(
            parse_request(&huge, &configured, &grants)
                .unwrap_err()
                .to_api()
                .status,
            413
        );
        assert!(matches!(
            parse_request(b"{", &configured, &grants),
            Err(RequestError::NotJson { .. })
        ));
        assert_eq!(
            parse_request(b"[1]", &configured, &grants),
            Err(RequestError::NotAnObject)
        );
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(matches!(
            parse_request(deep.as_bytes(), &configured, &grants),
            Err(RequestError::NotJson { .. })
        ));
        assert_eq!(
            parse_request(b"{\"messages\": []}", &configured, &grants),
            Err(RequestError::Missing {
                param: "model".into()
            })
        );
    }

    #[test]
    fn an_agent_outside_the_tokens_scope_is_403_and_an_unknown_one_404() {
        let mut body = hello();
        body["model"] = json!("switchboard:release");
        assert_eq!(parse(body).unwrap_err().to_api().status, 403);
        let mut body = hello();
        body["model"] = json!("switchboard:suport");
        let error = parse(body).unwrap_err().to_api();
        assert_eq!(error.status, 404);
        assert!(
            error.body.error.message.contains("switchboard:support"),
            "{}",
            error.body.error.message
        );
    }
}
