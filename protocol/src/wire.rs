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
    /// `ready` (live, and nothing posted while away is missing), `connecting`, `resuming`,
    /// `backfilling` (live again, still fetching what was posted while away), `down`, or
    /// `none` (no Discord behind this server).
    pub discord: String,
    /// The server's version.
    pub version: String,
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
