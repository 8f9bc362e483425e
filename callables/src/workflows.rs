//! `workflow.*`: ask people elsewhere, and resume when they answer.

use protocol::ErrorCode;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use entity::{normalize_name, Snowflake};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::auth::Caller;
use crate::error::ToolError;
use crate::invocation::{parse_id, Invocation, PlanContext};
use crate::registry::{
    example, output, output_schema, Planned, SessionRequest, Tool, ToolOutput, ToolSpec,
};
use crate::workflow::{
    NewTask, NewWorkflow, Workflow, WorkflowEngine, WorkflowError, DEFAULT_TIMEOUT, MAX_TASKS,
    MAX_TIMEOUT,
};
use protocol::Effects;

const MAX_SUMMARY: usize = 500;
const MAX_DESCRIPTION: usize = 4_000;
const MAX_RESUME_PROMPT: usize = 4_000;

pub(crate) use switchboard_engine::workflow::workflows_unavailable;

fn engine<'a>(cx: &'a Invocation<'_>) -> Result<&'a Arc<WorkflowEngine>, ToolError> {
    cx.core.workflows().ok_or_else(workflows_unavailable)
}

/// The workflows this caller may see: all for the operator, those its session created for a
/// capability.
fn visible(cx: &Invocation<'_>, workflow: &Workflow) -> bool {
    match &cx.context.caller {
        Caller::Capability(capability) => workflow.origin_session_id == capability.grant.session_id,
        Caller::Operator | Caller::Token(_) | Caller::Unauthenticated => true,
        // Out of a Discord user's scope anyway.
        Caller::Discord(_) => false,
    }
}

fn find(cx: &Invocation<'_>, id: &str) -> Result<Workflow, ToolError> {
    engine(cx)?
        .get(id.trim())
        .filter(|w| visible(cx, w))
        .ok_or_else(|| WorkflowError::NotFound(id.trim().to_owned()).into())
}

fn bounded_text(field: &str, text: &str, max: usize) -> Result<(), ToolError> {
    let length = text.chars().count();
    if length > max {
        return Err(ToolError::usage(
            ErrorCode::InvalidInput,
            format!("{field} is {length} characters; at most {max}"),
        )
        .with_details(json!({ "field": field })));
    }
    Ok(())
}

/// A user given as an id, `<@id>`, `@name` or `name` (configured alias or learned name).
fn resolve_user(
    cx: &PlanContext<'_>,
    field: &str,
    reference: &str,
) -> Result<Snowflake, ToolError> {
    if let Ok(id) = parse_id(field, reference) {
        return Ok(id);
    }
    let key = normalize_name(reference.trim().trim_start_matches('@'));
    match cx.mapper().resolve_at_key(&key) {
        Some(entity::Mention::User(id)) => Ok(id),
        _ => Err(ToolError::usage(
            ErrorCode::UnknownUser,
            format!("{field}: '{reference}' is not a user switchboard knows; pass a user id or a configured alias"),
        )
        .with_details(json!({ "field": field }))),
    }
}

pub struct CreateWorkflow;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TaskInput {
    /// Where to wait: channel id, <#id>, or configured token (the allowlist applies).
    pub session_id: String,
    /// Only a reply to this message answers the task.
    pub message_id: Option<String>,
    /// Only a message from this user answers: a user id, <@id>, or a configured alias.
    pub from_user_id: Option<String>,
    /// What the task is, in a line: it heads the answer in the resumed run's prompt.
    pub summary: String,
    /// More about what was asked.
    pub description: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateWorkflowInput {
    /// What to wait for (1 to 20 tasks).
    pub tasks: Vec<TaskInput>,
    /// Resume anyway after this many seconds, with "no answer" for silent tasks (default
    /// 86,400; at most 30 days).
    pub timeout_s: Option<u64>,
    /// Opens the resumed run's prompt (what to do with the answers).
    pub resume_prompt: Option<String>,
}

#[async_trait]
impl Tool for CreateWorkflow {
    type Input = CreateWorkflowInput;
    type Plan = WorkflowPlan;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "workflow.create",
            description: "Wait for people's answers in other sessions, then resume here with them.",
            help: "Each task waits in its session for a reply to `messageId` when given, else for the next message that is not from a bot (from `fromUserId` when given). When every task has its answer, or `timeoutS` passes, a new agent run starts in the session that created the workflow, with each task's summary and answer (or \"no answer\") in its prompt, replying to the message that started this run. Post the question first (surface.messages.send), then pass its message id. Workflows survive restarts.",
            mutating: true,
            primary: None,
            title: "Wait for people's answers",
            effects: Effects::ADD,
            output_schema: Some(output_schema::<Created>()),
            examples: vec![example(
                "Ask Tomas in #release-room, resume here when he replies",
                "tools workflow.create --tasks='[{\"sessionId\":\"#release-room\",\"messageId\":\"1000000000000000950\",\"fromUserId\":\"Tomas\",\"summary\":\"Is the build signed?\"}]' --timeout-s=3600 --resume-prompt='Finish the deploy if the build is signed.'",
                json!({"tasks": [{"sessionId": "#release-room", "messageId": "1000000000000000950", "fromUserId": "Tomas", "summary": "Is the build signed?"}], "timeoutS": 3600, "resumePrompt": "Finish the deploy if the build is signed."}),
            )],
        }
    }

    fn plan(
        &self,
        cx: &PlanContext<'_>,
        input: CreateWorkflowInput,
    ) -> Result<Planned<WorkflowPlan>, ToolError> {
        if cx.core.workflows().is_none() {
            return Err(workflows_unavailable());
        }
        if input.tasks.is_empty() || input.tasks.len() > MAX_TASKS {
            return Err(ToolError::usage(
                ErrorCode::InvalidInput,
                format!(
                    "tasks: give 1 to {MAX_TASKS} tasks, got {}",
                    input.tasks.len()
                ),
            )
            .with_details(json!({ "field": "tasks" })));
        }
        let timeout = match input.timeout_s {
            None => DEFAULT_TIMEOUT,
            Some(seconds) if seconds >= 1 && seconds <= MAX_TIMEOUT.as_secs() => {
                Duration::from_secs(seconds)
            }
            Some(seconds) => {
                return Err(ToolError::usage(
                    ErrorCode::InvalidInput,
                    format!(
                        "timeoutS must be between 1 and {} seconds (30 days), got {seconds}",
                        MAX_TIMEOUT.as_secs()
                    ),
                )
                .with_details(json!({ "field": "timeoutS" })))
            }
        };
        if let Some(prompt) = &input.resume_prompt {
            bounded_text("resumePrompt", prompt, MAX_RESUME_PROMPT)?;
        }
        let mut tasks = Vec::with_capacity(input.tasks.len());
        let mut sessions = Vec::with_capacity(input.tasks.len() + 1);
        for (index, task) in input.tasks.iter().enumerate() {
            let field = |name: &str| format!("tasks[{index}].{name}");
            if task.summary.trim().is_empty() {
                return Err(ToolError::usage(
                    ErrorCode::InvalidInput,
                    format!("{}: say what the task is in a line", field("summary")),
                )
                .with_details(json!({ "field": field("summary") })));
            }
            bounded_text(&field("summary"), &task.summary, MAX_SUMMARY)?;
            if let Some(description) = &task.description {
                bounded_text(&field("description"), description, MAX_DESCRIPTION)?;
            }
            let message_id = task
                .message_id
                .as_deref()
                .map(|id| parse_id(&field("messageId"), id))
                .transpose()?;
            let from_user_id = task
                .from_user_id
                .as_deref()
                .map(|user| resolve_user(cx, &field("fromUserId"), user))
                .transpose()?;
            if task.session_id.trim().is_empty() {
                return Err(ToolError::usage(
                    ErrorCode::InvalidInput,
                    format!("{}: name the session to wait in", field("sessionId")),
                ));
            }
            sessions.push(SessionRequest {
                field: field("sessionId"),
                reference: Some(task.session_id.clone()),
                spend: 0,
                changes_channel: false,
            });
            tasks.push(NewTask {
                // Filled with the resolved session once the pipeline allowed it.
                session_id: Snowflake(0),
                message_id,
                from_user_id,
                summary: task.summary.trim().to_owned(),
                description: task.description.clone(),
            });
        }
        // The workflow resumes where it was created: that session must be allowed too.
        sessions.push(SessionRequest {
            field: "the workflow resumes in the session that creates it".to_owned(),
            reference: None,
            spend: 0,
            changes_channel: false,
        });
        Ok(Planned {
            plan: WorkflowPlan {
                timeout,
                resume_prompt: input.resume_prompt,
                tasks,
            },
            sessions,
            place: None,
        })
    }

    async fn run(&self, cx: &Invocation<'_>, plan: WorkflowPlan) -> Result<ToolOutput, ToolError> {
        let engine = engine(cx)?;
        let targets = cx.targets();
        let (origin, task_targets) = targets
            .split_last()
            .ok_or_else(|| ToolError::internal("workflow.create planned no origin session"))?;
        let mut tasks = plan.tasks;
        for (task, target) in tasks.iter_mut().zip(task_targets) {
            task.session_id = target.channel_id();
        }
        let workflow = engine.create(NewWorkflow {
            origin_session_id: origin.channel_id(),
            origin_message_id: cx.context.trigger_message_id,
            created_by: cx.context.caller.key(),
            timeout: plan.timeout,
            resume_prompt: plan.resume_prompt,
            tasks,
        })?;
        output(&Created {
            workflow_id: workflow.workflow_id,
            state: workflow.state,
            origin_session_id: workflow.origin_session_id.to_string(),
            deadline_ms: workflow.deadline_ms,
            tasks: workflow.tasks.len(),
        })
    }
}

/// A checked `workflow.create`: its tasks' sessions are filled in from the allowed targets.
pub struct WorkflowPlan {
    timeout: Duration,
    resume_prompt: Option<String>,
    tasks: Vec<NewTask>,
}

pub struct ListWorkflows;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListWorkflowsInput {
    /// Only workflows in this state: waiting, answered, timed_out or cancelled.
    pub state: Option<String>,
}

/// `workflow.list`'s answer.
#[derive(Serialize, JsonSchema)]
struct WorkflowList {
    /// The workflows (those in the asked state).
    workflows: Vec<Workflow>,
}

/// `workflow.get`'s and `workflow.cancel`'s answer.
#[derive(Serialize, JsonSchema)]
struct OneWorkflow {
    /// The workflow.
    workflow: Workflow,
}

/// `workflow.create`'s answer.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Created {
    /// Its id (`wf_...`).
    workflow_id: String,
    /// `waiting`.
    state: crate::workflow::WorkflowState,
    /// Where the resumed run happens.
    origin_session_id: String,
    /// When it times out, ms since the Unix epoch.
    deadline_ms: u64,
    /// How many tasks it waits for.
    tasks: usize,
}

#[async_trait]
impl Tool for ListWorkflows {
    type Input = ListWorkflowsInput;
    type Plan = Option<String>;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "workflow.list",
            description: "List workflows, newest first.",
            help: "The operator sees every workflow; an agent run sees those created from its session. Filter with `state` (waiting, answered, timed_out, cancelled).",
            mutating: false,
            primary: Some("state"),
            title: "List workflows",
            effects: Effects::READ,
            output_schema: Some(output_schema::<WorkflowList>()),
            examples: vec![example(
                "What is still waiting",
                "tools workflow.list waiting",
                json!({"state": "waiting"}),
            )],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: ListWorkflowsInput,
    ) -> Result<Planned<Option<String>>, ToolError> {
        let state = input.state.as_deref().map(str::trim);
        const STATES: [&str; 4] = ["waiting", "answered", "timed_out", "cancelled"];
        if let Some(state) = state {
            if !STATES.contains(&state) {
                return Err(ToolError::usage(
                    ErrorCode::InvalidInput,
                    format!("state must be one of {}, got '{state}'", STATES.join(", ")),
                )
                .with_details(json!({ "field": "state" })));
            }
        }
        Ok(Planned::nowhere(state.map(str::to_owned)))
    }

    async fn run(
        &self,
        cx: &Invocation<'_>,
        state: Option<String>,
    ) -> Result<ToolOutput, ToolError> {
        let engine = engine(cx)?;
        let state = state.as_deref();
        let workflows = engine
            .list()
            .into_iter()
            .filter(|w| visible(cx, w))
            .filter(|w| state.is_none_or(|s| w.state.as_str() == s))
            .collect();
        output(&WorkflowList { workflows })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WorkflowIdInput {
    /// The id workflow.create returned (wf_...).
    pub workflow_id: String,
}

/// The callables whose input is one workflow's id: `workflow.get` and `workflow.cancel`.
/// One plan for the two.
#[derive(Debug, Clone, Copy)]
pub enum OnWorkflow {
    Get,
    Cancel,
}

#[async_trait]
impl Tool for OnWorkflow {
    type Input = WorkflowIdInput;
    type Plan = String;

    fn spec(&self) -> ToolSpec {
        match self {
            OnWorkflow::Get => ToolSpec {
                id: "workflow.get",
                description: "One workflow: its tasks and the answers so far.",
                help: "Answers carry the readable text of the message that answered, its author and time.",
                mutating: false,
                primary: Some("workflowId"),
                title: "Show a workflow",
                effects: Effects::READ,
                output_schema: Some(output_schema::<OneWorkflow>()),
                examples: vec![example(
                    "Look at one",
                    "tools workflow.get wf_0123456789abcdef",
                    json!({"workflowId": "wf_0123456789abcdef"}),
                )],
            },
            OnWorkflow::Cancel => ToolSpec {
                id: "workflow.cancel",
                description: "Stop waiting: the workflow never resumes.",
                help: "Only a waiting workflow can be cancelled; one that already resumed answers `conflict`.",
                mutating: true,
                primary: Some("workflowId"),
                title: "Cancel a workflow",
                effects: Effects::OVERWRITE,
                output_schema: Some(output_schema::<OneWorkflow>()),
                examples: vec![example(
                    "Cancel one",
                    "tools workflow.cancel wf_0123456789abcdef",
                    json!({"workflowId": "wf_0123456789abcdef"}),
                )],
            },
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: WorkflowIdInput,
    ) -> Result<Planned<String>, ToolError> {
        Ok(Planned::nowhere(input.workflow_id))
    }

    async fn run(&self, cx: &Invocation<'_>, workflow_id: String) -> Result<ToolOutput, ToolError> {
        let found = find(cx, &workflow_id)?;
        let workflow = match self {
            OnWorkflow::Get => found,
            OnWorkflow::Cancel => engine(cx)?.cancel(&found.workflow_id)?,
        };
        output(&OneWorkflow { workflow })
    }
}
