//! The callable registry: each callable is an id, a description, the JSON Schema of its input
//! (generated from the Rust type), and a handler.

use protocol::ErrorCode;
use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::error::ToolError;
use crate::invocation::Invocation;
use protocol::{Example, ToolDetail, ToolEntry};

/// What a callable says about itself.
pub struct ToolSpec {
    pub id: &'static str,
    pub description: &'static str,
    pub help: &'static str,
    pub mutating: bool,
    /// The field bare command-line words fill.
    pub primary: Option<&'static str>,
    pub examples: Vec<Example>,
}

/// A callable's answer, already serialized: it is written into the HTTP response (or handed to
/// an in-process caller) without building a `Value` tree again.
pub type ToolOutput = Box<serde_json::value::RawValue>;

/// Serializes a callable's answer.
pub fn output<T: serde::Serialize + ?Sized>(value: &T) -> Result<ToolOutput, ToolError> {
    serde_json::value::to_raw_value(value)
        .map_err(|e| ToolError::internal(format!("cannot serialize the answer: {e}")))
}

/// A callable with a typed input.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    type Input: DeserializeOwned + JsonSchema + Send;

    fn spec(&self) -> ToolSpec;
    async fn run(&self, cx: &Invocation<'_>, input: Self::Input) -> Result<ToolOutput, ToolError>;
}

/// A registered callable with its input type erased.
#[async_trait]
pub trait Callable: Send + Sync {
    fn entry(&self) -> &ToolEntry;
    fn detail(&self) -> &ToolDetail;
    async fn call(&self, cx: &Invocation<'_>, input: Value) -> Result<ToolOutput, ToolError>;
}

struct Registered<T: Tool> {
    tool: T,
    detail: ToolDetail,
}

/// The JSON Schema of a callable's input, with subschemas inlined so every front (HTTP, CLI,
/// MCP, an OpenAI-style function list) can use it as is.
pub fn input_schema<T: JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|settings| settings.inline_subschemas = true)
        .into_generator();
    let mut schema = serde_json::to_value(generator.into_root_schema_for::<T>())
        .unwrap_or_else(|_| json!({ "type": "object" }));
    if let Some(map) = schema.as_object_mut() {
        map.remove("$schema");
        map.remove("title");
    }
    schema
}

/// Reads the input with the callable's own type; the error names the field and what was wrong.
pub fn parse_input<I: DeserializeOwned>(input: Value) -> Result<I, ToolError> {
    serde_path_to_error::deserialize(input).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner().to_string();
        let field = if path == "." { String::new() } else { path };
        let message = if field.is_empty() {
            format!("invalid input: {inner}")
        } else {
            format!("invalid input at '{field}': {inner}")
        };
        ToolError::usage(ErrorCode::InvalidInput, message).with_details(json!({ "field": field }))
    })
}

#[async_trait]
impl<T: Tool> Callable for Registered<T> {
    fn entry(&self) -> &ToolEntry {
        &self.detail.entry
    }

    fn detail(&self) -> &ToolDetail {
        &self.detail
    }

    async fn call(&self, cx: &Invocation<'_>, input: Value) -> Result<ToolOutput, ToolError> {
        let input = parse_input::<T::Input>(input)?;
        self.tool.run(cx, input).await
    }
}

/// Every callable the server offers, by id.
#[derive(Default)]
pub struct Registry {
    tools: BTreeMap<&'static str, Arc<dyn Callable>>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register<T: Tool>(&mut self, tool: T) {
        let spec = tool.spec();
        let detail = ToolDetail {
            entry: ToolEntry {
                id: spec.id.to_owned(),
                description: spec.description.to_owned(),
                input_schema: input_schema::<T::Input>(),
                mutating: spec.mutating,
                primary: spec.primary.map(str::to_owned),
            },
            help: spec.help.to_owned(),
            examples: spec.examples,
        };
        self.tools
            .insert(spec.id, Arc::new(Registered { tool, detail }));
    }

    pub fn get(&self, id: &str) -> Option<&Arc<dyn Callable>> {
        self.tools.get(id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Callable>> {
        self.tools.values()
    }

    /// The `not_found` answer for an unknown id, with the nearest known id.
    pub fn unknown(&self, id: &str) -> ToolError {
        let known: Vec<&str> = self.tools.keys().copied().collect();
        let suggestion = entity::nearest(id, known.iter().copied());
        let hint = suggestion.map_or(String::new(), |s| format!(" Did you mean '{s}'?"));
        ToolError::not_found(
            ErrorCode::UnknownTool,
            format!("Unknown callable '{id}'.{hint} List them with `tools --list`."),
        )
        .with_details(json!({ "suggestion": suggestion, "known": known }))
    }
}

/// An [`Example`] from CLI words and the equivalent input.
pub fn example(description: &str, cli: &str, input: Value) -> Example {
    Example {
        description: description.to_owned(),
        cli: cli.to_owned(),
        input,
    }
}
