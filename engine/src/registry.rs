//! The callable registry: each callable is an id, a description, the JSON Schema of its input
//! (generated from the Rust type), and a handler in two steps.
//!
//! A [`Tool`] first *plans* (checks its input, does its CPU work, and declares the sessions it
//! acts in and what it spends of their budgets), then *runs* with the targets the pipeline
//! resolved and allowed. Only the pipeline can make the [`Invocation`] `run` needs, and every
//! platform action takes an [`AllowedChannel`](crate::surface::AllowedChannel) only the
//! pipeline makes: a callable cannot reach Discord with a channel nobody checked.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use entity::Snowflake;
use protocol::{Effects, ErrorCode, Example, ToolDetail, ToolEntry};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext};

/// What a callable says about itself.
pub struct ToolSpec {
    /// Its id, such as `surface.messages.send`.
    pub id: &'static str,
    /// One sentence.
    pub description: &'static str,
    /// Longer help for `tools help ID`.
    pub help: &'static str,
    /// Whether it changes anything.
    pub mutating: bool,
    /// The field bare command-line words fill.
    pub primary: Option<&'static str>,
    /// Examples for the help.
    pub examples: Vec<Example>,
    /// A short name for people ("Send a message"): MCP hosts show it.
    pub title: &'static str,
    /// What a call does to the world beyond `mutating` (MCP's tool annotations).
    pub effects: Effects,
    /// The JSON Schema of its answer, from [`output_schema`] over the type it answers with.
    pub output_schema: Option<Value>,
}

/// A callable's answer, already serialized: it is written into the HTTP response (or handed to
/// an in-process caller) without building a `Value` tree again.
pub type ToolOutput = Box<serde_json::value::RawValue>;

/// Serializes a callable's answer.
pub fn output<T: serde::Serialize + ?Sized>(value: &T) -> Result<ToolOutput, ToolError> {
    serde_json::value::to_raw_value(value)
        .map_err(|e| ToolError::internal(format!("cannot serialize the answer: {e}")))
}

/// A session a call acts in, as its input names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRequest {
    /// The input field it came from (`sessionId`, `tasks[2].sessionId`), for errors.
    pub field: String,
    /// The reference as given (an id, `<#id>`, an alias); `None`: the call context's session.
    pub reference: Option<String>,
    /// Messages the call posts there (a send split in k parts spends k); 0 for reads.
    pub spend: u32,
    /// The call changes the channel itself (renames or deletes it): it must be a guild channel
    /// whose guild or category the allowlist names — listing the channel alone lets a call
    /// use it, not change it.
    pub changes_channel: bool,
}

impl SessionRequest {
    /// The usual `sessionId` field, defaulting to the context's session.
    pub fn session_id(reference: Option<&str>, spend: u32) -> SessionRequest {
        SessionRequest {
            field: "sessionId".to_owned(),
            reference: reference
                .map(str::trim)
                .filter(|r| !r.is_empty())
                .map(str::to_owned),
            spend,
            changes_channel: false,
        }
    }

    /// The same session, for a call that changes the channel itself (see
    /// [`SessionRequest::changes_channel`]).
    pub fn changing_the_channel(self) -> SessionRequest {
        SessionRequest {
            changes_channel: true,
            ..self
        }
    }
}

/// Where a call creates a channel, as its input names it. The pipeline finds the guild (the
/// one given, else the category's, else that of the call's context session) and allows the
/// place only when the allowlist lists that guild or that category.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaceRequest {
    /// The guild, when the input names one (`guild`).
    pub guild: Option<Snowflake>,
    /// The category to create it under (`parentId`).
    pub category: Option<Snowflake>,
}

/// A checked request: what the handler will run, and where it acts.
pub struct Planned<P> {
    /// What `run` gets.
    pub plan: P,
    /// The sessions the call acts in, in order; the handler finds them, resolved and allowed,
    /// in [`Invocation::targets`].
    pub sessions: Vec<SessionRequest>,
    /// Where the call creates a channel, if it does; the handler finds it, allowed, in
    /// [`Invocation::place`].
    pub place: Option<PlaceRequest>,
}

impl<P> Planned<P> {
    /// A plan that acts in no session (listings, help, workflows by id).
    pub fn nowhere(plan: P) -> Self {
        Planned {
            plan,
            sessions: Vec::new(),
            place: None,
        }
    }

    /// A plan that acts in one session.
    pub fn in_session(plan: P, session: SessionRequest) -> Self {
        Planned {
            plan,
            sessions: vec![session],
            place: None,
        }
    }

    /// A plan that creates a channel at `place` (and acts in no session).
    pub fn creating(plan: P, place: PlaceRequest) -> Self {
        Planned {
            plan,
            sessions: Vec::new(),
            place: Some(place),
        }
    }
}

/// A callable with a typed input.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The input, as its JSON Schema describes it.
    type Input: DeserializeOwned + JsonSchema + Send;
    /// The checked request `run` executes.
    type Plan: Send + Sync;

    /// What the callable says about itself.
    fn spec(&self) -> ToolSpec;

    /// Checks the input beyond its schema and does the call's CPU work, with no I/O and
    /// nothing sent anywhere; names the sessions it acts in.
    fn plan(
        &self,
        cx: &PlanContext<'_>,
        input: Self::Input,
    ) -> Result<Planned<Self::Plan>, ToolError>;

    /// Runs once every check passed, with the resolved, allowed targets.
    async fn run(&self, cx: &Invocation<'_>, plan: Self::Plan) -> Result<ToolOutput, ToolError>;

    /// What an approval card shows beside the input when the rules ask (a command's working
    /// directory, a write's diff), worked out once the targets are resolved; the approval is
    /// bound to it like to the input. Nothing is changed here.
    async fn ask_note(
        &self,
        _cx: &PlanContext<'_>,
        _targets: &[crate::invocation::Target],
        _plan: &Self::Plan,
    ) -> Option<String> {
        None
    }
}

/// [`Tool::ask_note`] for one planned call, for the permission stage.
#[async_trait]
pub(crate) trait AskNote: Sync {
    async fn note(&self, targets: &[crate::invocation::Target]) -> Option<String>;
}

/// One planned call with its tool's type erased: what stages 4 to 9 take (the sessions and
/// place it names, its approval note, and its handler, which only an [`Invocation`] reaches).
#[async_trait]
pub(crate) trait PlannedCall: AskNote + Send + Sync {
    /// The sessions the plan named, in order.
    fn sessions(&self) -> &[SessionRequest];
    /// Where the plan creates a channel, if it does.
    fn place(&self) -> Option<&PlaceRequest>;
    /// The handler, with the targets the stages resolved and allowed.
    async fn run(self: Box<Self>, cx: &Invocation<'_>) -> Result<ToolOutput, ToolError>;
}

struct PlannedOf<'x, T: Tool> {
    tool: &'x T,
    cx: PlanContext<'x>,
    planned: Planned<T::Plan>,
}

#[async_trait]
impl<T: Tool> AskNote for PlannedOf<'_, T> {
    async fn note(&self, targets: &[crate::invocation::Target]) -> Option<String> {
        self.tool
            .ask_note(&self.cx, targets, &self.planned.plan)
            .await
    }
}

#[async_trait]
impl<T: Tool> PlannedCall for PlannedOf<'_, T> {
    fn sessions(&self) -> &[SessionRequest] {
        &self.planned.sessions
    }

    fn place(&self) -> Option<&PlaceRequest> {
        self.planned.place.as_ref()
    }

    async fn run(self: Box<Self>, cx: &Invocation<'_>) -> Result<ToolOutput, ToolError> {
        self.tool.run(cx, self.planned.plan).await
    }
}

/// A registered callable with its input type erased. Stage 3 (validate) is its [`plan`]; the
/// handler of what it plans is reachable only with an [`Invocation`], which only the stages
/// in `pipeline.rs` make, so there is no way to call a handler without them.
///
/// [`plan`]: Callable::plan
pub(crate) trait Callable: Send + Sync {
    fn entry(&self) -> &ToolEntry;
    fn detail(&self) -> &ToolDetail;
    /// Stage 3: the input against the callable's schema, then its own rules and CPU work.
    fn plan<'x>(
        &'x self,
        cx: PlanContext<'x>,
        input: &Value,
    ) -> Result<Box<dyn PlannedCall + 'x>, ToolError>;
}

struct Registered<T: Tool> {
    tool: T,
    detail: ToolDetail,
}

/// The JSON Schema of a callable's input, with subschemas inlined so every front (HTTP, CLI,
/// MCP, an OpenAI-style function list) can use it as is.
pub fn input_schema<T: JsonSchema>() -> Value {
    schema_for::<T>(schemars::generate::Contract::Deserialize)
}

/// The JSON Schema of a callable's answer (the type it serializes), inlined like
/// [`input_schema`]: what MCP's `outputSchema` and a client validating answers read.
pub fn output_schema<T: JsonSchema>() -> Value {
    schema_for::<T>(schemars::generate::Contract::Serialize)
}

fn schema_for<T: JsonSchema>(contract: schemars::generate::Contract) -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|settings| {
            settings.inline_subschemas = true;
            settings.contract = contract;
        })
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
    parse_input_ref(&input)
}

/// [`parse_input`] that leaves the input to its owner (the pipeline keeps it: an approver sees
/// it whole, hooks see it).
pub fn parse_input_ref<I: DeserializeOwned>(input: &Value) -> Result<I, ToolError> {
    // The plain read first: tracking the path costs on every call, and is only needed to say
    // where a bad input went wrong.
    if let Ok(parsed) = I::deserialize(input) {
        return Ok(parsed);
    }
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

impl<T: Tool> Callable for Registered<T> {
    fn entry(&self) -> &ToolEntry {
        &self.detail.entry
    }

    fn detail(&self) -> &ToolDetail {
        &self.detail
    }

    fn plan<'x>(
        &'x self,
        cx: PlanContext<'x>,
        input: &Value,
    ) -> Result<Box<dyn PlannedCall + 'x>, ToolError> {
        // The schema (serde), then the callable's own rules and CPU work. The input stays
        // whole beside its plan: an approver and the hooks see all of it.
        let parsed = parse_input_ref::<T::Input>(input)?;
        let planned = self.tool.plan(&cx, parsed)?;
        Ok(Box::new(PlannedOf {
            tool: &self.tool,
            cx,
            planned,
        }))
    }
}

/// Every callable the server offers, by id.
#[derive(Default)]
pub struct Registry {
    tools: BTreeMap<&'static str, Arc<dyn Callable>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a callable.
    pub fn register<T: Tool>(&mut self, tool: T) {
        let spec = tool.spec();
        let detail = ToolDetail {
            entry: ToolEntry {
                id: spec.id.to_owned(),
                description: spec.description.to_owned(),
                input_schema: input_schema::<T::Input>(),
                mutating: spec.mutating,
                primary: spec.primary.map(str::to_owned),
                title: spec.title.to_owned(),
                effects: spec.effects,
                output_schema: spec.output_schema,
            },
            help: spec.help.to_owned(),
            examples: spec.examples,
        };
        self.tools
            .insert(spec.id, Arc::new(Registered { tool, detail }));
    }

    /// The callable and its id as registered (`'static`: rate limits key on it).
    pub(crate) fn lookup(&self, id: &str) -> Option<(&'static str, &Arc<dyn Callable>)> {
        self.tools.get_key_value(id).map(|(id, tool)| (*id, tool))
    }

    /// The listing entry of a callable.
    pub fn entry(&self, id: &str) -> Option<&ToolEntry> {
        self.tools.get(id).map(|tool| tool.entry())
    }

    /// The full description of a callable.
    pub fn detail(&self, id: &str) -> Option<&ToolDetail> {
        self.tools.get(id).map(|tool| tool.detail())
    }

    /// Every callable's listing entry, by id.
    pub fn entries(&self) -> impl Iterator<Item = &ToolEntry> {
        self.tools.values().map(|tool| tool.entry())
    }

    /// Every callable id.
    pub fn ids(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.tools.keys().copied()
    }

    /// The `not_found` answer for an id nobody may call here: the nearest id in `visible`.
    pub fn unknown<'a>(id: &str, visible: impl Iterator<Item = &'a str>) -> ToolError {
        let known: Vec<&str> = visible.collect();
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
