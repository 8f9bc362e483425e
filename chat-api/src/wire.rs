//! The answers, field for field as the official `openai` Python client reads them
//! (`ChatCompletion`, `ChatCompletionChunk`, `Model`, `CompletionUsage`): required fields
//! always present, `null` where OpenAI sends `null`, and any field this crate does not model
//! kept as it came (`extra`), so a real OpenAI answer reads and writes back unchanged.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `object: "chat.completion"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChatCompletionObject {
    /// The only value.
    #[default]
    #[serde(rename = "chat.completion")]
    ChatCompletion,
}

/// `object: "chat.completion.chunk"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChunkObject {
    /// The only value.
    #[default]
    #[serde(rename = "chat.completion.chunk")]
    ChatCompletionChunk,
}

/// `object: "model"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ModelObject {
    /// The only value.
    #[default]
    #[serde(rename = "model")]
    Model,
}

/// `object: "list"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ListObject {
    /// The only value.
    #[default]
    #[serde(rename = "list")]
    List,
}

/// A message's author, as the wire spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// `developer`: instructions (the newer name of `system`).
    Developer,
    /// `system`: instructions.
    System,
    /// `user`: the person.
    User,
    /// `assistant`: the model (here, the agent).
    Assistant,
    /// `tool`: a tool's result.
    Tool,
}

/// `role: "assistant"` in a completion's message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum AssistantRole {
    /// The only value.
    #[default]
    #[serde(rename = "assistant")]
    Assistant,
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end (every finished agent run).
    Stop,
    /// `max_tokens` was reached.
    Length,
    /// The model called tools (never sent by switchboard: its agents' tools run inside).
    ToolCalls,
    /// Content was filtered.
    ContentFilter,
    /// The deprecated form of `tool_calls`.
    FunctionCall,
}

/// Token counts (`usage`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionUsage {
    /// Tokens in the prompt.
    pub prompt_tokens: u64,
    /// Tokens in the completion.
    pub completion_tokens: u64,
    /// Both.
    pub total_tokens: u64,
    /// `prompt_tokens_details`, `completion_tokens_details` and anything newer.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl CompletionUsage {
    /// Usage with these counts.
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> CompletionUsage {
        CompletionUsage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens.saturating_add(completion_tokens),
            extra: Map::new(),
        }
    }

    /// The `usage` of a model's answer (a completion, or a stream's last chunk), when it has
    /// one that reads: how the built-in OpenAI runner learns what a call used.
    pub fn of_answer(answer: &Value) -> Option<CompletionUsage> {
        serde_json::from_value(answer.get("usage")?.clone()).ok()
    }
}

/// The assistant's message in a completion.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// Always `assistant`.
    pub role: AssistantRole,
    /// The text (`null` only when a model answers with tool calls).
    pub content: Option<String>,
    /// A refusal, if the model refused (`null` otherwise).
    #[serde(default)]
    pub refusal: Option<String>,
    /// `annotations`, `tool_calls`, `audio`, … as they came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One choice of a completion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choice {
    /// Its index (always 0 here: `n` is 1).
    pub index: u32,
    /// The message.
    pub message: AssistantMessage,
    /// Log probabilities (`null`: never computed here).
    #[serde(default)]
    pub logprobs: Option<Value>,
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Anything newer, as it came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `POST /v1/chat/completions`' answer: whole when not streaming ([`ChatCompletion`]), or one
/// `data:` event of a streamed answer ([`ChatCompletionChunk`]); the two differ only in their
/// `object` tag and their choices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion<O, C> {
    /// `chatcmpl-…`; here `chatcmpl-` and the run's id (the same for every chunk of an answer).
    pub id: String,
    /// `chat.completion`, or `chat.completion.chunk` for a chunk.
    pub object: O,
    /// Unix seconds (the same for every chunk).
    pub created: i64,
    /// The model as requested (`switchboard:<agent>`).
    pub model: String,
    /// The choices (here one); empty in the usage chunk that ends a stream asked for with
    /// `stream_options.include_usage`.
    pub choices: Vec<C>,
    /// The run's tokens, all its model calls together (of a stream: in that last chunk only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<CompletionUsage>,
    /// The backend's configuration fingerprint (not sent here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    /// The service tier (not sent here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<String>,
    /// Anything newer, as it came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `POST /v1/chat/completions`' answer when not streaming.
pub type ChatCompletion = Completion<ChatCompletionObject, Choice>;

impl ChatCompletion {
    /// A finished run's answer: one choice with its text.
    pub fn answer(
        id: impl Into<String>,
        created: i64,
        model: impl Into<String>,
        text: impl Into<String>,
        finish_reason: FinishReason,
        usage: Option<CompletionUsage>,
    ) -> ChatCompletion {
        ChatCompletion {
            id: id.into(),
            object: ChatCompletionObject::ChatCompletion,
            created,
            model: model.into(),
            choices: vec![Choice {
                index: 0,
                message: AssistantMessage {
                    role: AssistantRole::Assistant,
                    content: Some(text.into()),
                    refusal: None,
                    extra: Map::new(),
                },
                logprobs: None,
                finish_reason,
                extra: Map::new(),
            }],
            usage,
            system_fingerprint: None,
            service_tier: None,
            extra: Map::new(),
        }
    }

    /// The first choice's text, if any.
    pub fn text(&self) -> Option<&str> {
        self.choices.first()?.message.content.as_deref()
    }
}

/// What a chunk adds to the message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    /// The author, in the first chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// More text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// More refusal text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// `tool_calls`, `function_call`, … as they came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One choice of a chunk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkChoice {
    /// Its index (always 0 here).
    pub index: u32,
    /// What it adds.
    pub delta: Delta,
    /// Log probabilities (`null` here).
    #[serde(default)]
    pub logprobs: Option<Value>,
    /// Why it ended, in the last chunk of the choice; `null` before.
    #[serde(default)]
    pub finish_reason: Option<FinishReason>,
    /// Anything newer, as it came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One `data:` event of a streamed answer.
pub type ChatCompletionChunk = Completion<ChunkObject, ChunkChoice>;

/// A model `GET /v1/models` lists: one per agent the token may use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Model {
    /// `switchboard:<agent>`.
    pub id: String,
    /// Always `model`.
    pub object: ModelObject,
    /// Unix seconds (here: when the service started).
    pub created: i64,
    /// Here always `switchboard`.
    pub owned_by: String,
    /// Anything newer, as it came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `GET /v1/models`' answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelList {
    /// Always `list`.
    pub object: ListObject,
    /// The models.
    pub data: Vec<Model>,
}

/// What every model's `owned_by` says.
pub const OWNED_BY: &str = "switchboard";

impl ModelList {
    /// The list for these agents (those the token may use, in config order), each created
    /// at `created`.
    pub fn of_agents<'a>(
        agents: impl IntoIterator<Item = &'a switchboard_agents::AgentName>,
        created: i64,
    ) -> ModelList {
        ModelList {
            object: ListObject::List,
            data: agents
                .into_iter()
                .map(|agent| Model {
                    id: crate::model_id(agent),
                    object: ModelObject::Model,
                    created,
                    owned_by: OWNED_BY.to_owned(),
                    extra: Map::new(),
                })
                .collect(),
        }
    }
}
