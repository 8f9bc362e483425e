//! Requests and answers of the HTTP protocol.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The body of `POST /v1/call`.
///
/// `input` is typed JSON. `args` holds command-line values as strings (`{"limit":"5"}`) and
/// `positional` the bare words; the server converts both using the callable's schema (the
/// primary field takes the positional words), so the CLI needs no schema and one round trip.
/// A field given in both `input` and `args` is a usage error.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CallRequest {
    /// The callable's id, such as `surface.messages.send`.
    pub tool: String,
    /// The input object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Map<String, Value>>,
    /// Command-line `--field=value` flags, as strings.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub args: Map<String, Value>,
    /// Command-line bare words.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub positional: Vec<String>,
}

/// `GET /health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// `ok` or `degraded`.
    pub status: String,
    /// Why this node is `degraded` when it is not only its gateway: its store is unreachable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `ready` (live, and nothing posted while away is missing), `connecting`, `resuming`,
    /// `backfilling` (live again, still fetching what was posted while away), `down`,
    /// `standby` (a `cluster.shards = "lease"` node holding no shard: every shard is taken by
    /// another node; not a fault), or `none` (no Discord behind this server).
    pub discord: String,
    /// The server's version.
    pub version: String,
    /// The agent workspace's sandbox: `ready`, or `unavailable: <why>. <what to install>`;
    /// absent when `[workspace]` is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// This node's id (`cluster.node_id`); absent without Discord behind this server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The store's backend: `sqlite`, `postgres` or `memory`; absent without Discord.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
    /// The gateway shards this node runs, by id, each with its state; absent without Discord.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<Vec<ShardHealth>>,
}

/// One gateway shard in `GET /health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardHealth {
    /// The shard's id.
    pub id: u32,
    /// `ready`, `connecting`, `identifying`, `resuming` or `down`.
    pub state: String,
}

/// One callable as `GET /v1/tools` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolEntry {
    /// The callable's id.
    pub id: String,
    /// What it does, in a sentence.
    pub description: String,
    /// The JSON Schema of its input.
    pub input_schema: Value,
    /// Whether it changes anything.
    pub mutating: bool,
    /// The field that bare command-line words fill (`text` for send), if any.
    #[serde(default)]
    pub primary: Option<String>,
    /// A short name for people ("Send a message").
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub title: String,
    /// What a call does to the world beyond `mutating` (MCP's tool annotations).
    #[serde(default)]
    pub effects: Effects,
    /// The JSON Schema of its answer (the `value` of `{"ok":true,"value":…}`), an object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

/// What a call does to the world, as MCP's tool annotations say it (`readOnlyHint` is
/// `!mutating`). Each callable declares its own.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Effects {
    /// A mutating call may destroy or overwrite what exists (delete, edit, remove); false:
    /// it only adds.
    #[serde(default)]
    pub destructive: bool,
    /// Calling it again with the same input changes nothing more.
    #[serde(default)]
    pub idempotent: bool,
    /// It reaches beyond the server: people and content on the chat platform.
    #[serde(default)]
    pub open_world: bool,
}

impl Effects {
    /// A read of the chat platform: idempotent, open world.
    pub const READ: Effects = Effects {
        destructive: false,
        idempotent: true,
        open_world: true,
    };
    /// Adds to the chat platform (a new message, a workflow): not idempotent, open world.
    pub const ADD: Effects = Effects {
        destructive: false,
        idempotent: false,
        open_world: true,
    };
    /// Overwrites or removes on the chat platform (edit, delete, cancel): destructive,
    /// idempotent, open world.
    pub const OVERWRITE: Effects = Effects {
        destructive: true,
        idempotent: true,
        open_world: true,
    };
    /// Marks something on the chat platform (a pin, a reaction, typing, an archived thread):
    /// doing it again changes nothing more; not destructive, open world.
    pub const MARK: Effects = Effects {
        destructive: false,
        idempotent: true,
        open_world: true,
    };
    /// A read of the server's own state (notes, audit, runs, the workspace): idempotent,
    /// closed world.
    pub const LOCAL_READ: Effects = Effects {
        destructive: false,
        idempotent: true,
        open_world: false,
    };
    /// Adds to the server's own state (a commit): not idempotent, closed world.
    pub const LOCAL_ADD: Effects = Effects {
        destructive: false,
        idempotent: false,
        open_world: false,
    };
    /// Overwrites or removes the server's own state (forget a note, edit a file, kill a
    /// command): destructive, idempotent, closed world.
    pub const LOCAL_OVERWRITE: Effects = Effects {
        destructive: true,
        idempotent: true,
        open_world: false,
    };
}

/// An example invocation, as CLI words and as JSON input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Example {
    /// What the example does.
    pub description: String,
    /// The `tools` command line.
    pub cli: String,
    /// The same as JSON input.
    pub input: Value,
}

/// `GET /v1/tools/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDetail {
    /// The listing entry.
    #[serde(flatten)]
    pub entry: ToolEntry,
    /// Longer help.
    pub help: String,
    /// Examples.
    pub examples: Vec<Example>,
}
