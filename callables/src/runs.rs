//! The operator callables over the agent's runs: `runs.list` (what runs and waits) and
//! `runs.abort` (stop one). Discord's `/status` and `/abort` and the console call them too, so
//! each goes through the pipeline and is audited like any call. An agent run never gets them;
//! a Discord user only in the channel they act in, and stops only a run they started unless
//! they are in `discord.admins`.

use async_trait::async_trait;
use protocol::{Effects, ErrorCode};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::governance::filter_session;
use crate::auth::Caller;
use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext};
use crate::registry::{
    example, output, output_schema, Planned, SessionRequest, Tool, ToolOutput, ToolSpec,
};
use switchboard_engine::runs::{AbortOutcome, AbortTarget, RunState, RunView, Runs};

/// The agent's runs, or `no_agent`.
fn runs<'a>(cx: &Invocation<'a>) -> Result<&'a std::sync::Arc<dyn Runs>, ToolError> {
    cx.core.runs().ok_or_else(|| {
        ToolError::not_found(
            ErrorCode::NoAgent,
            "No agent is configured ([agent] in the config), so there are no runs",
        )
    })
}

/// Whether a Discord user is in `discord.admins`.
pub(crate) fn discord_admin(cx: &Invocation<'_>, user: &crate::auth::DiscordUser) -> bool {
    let admins = &cx.settings().config().discord.admins;
    !admins.is_empty() && switchboard_config::any_principal_matches(admins, user.id, &user.roles)
}

pub struct ListRuns;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListRunsInput {
    /// Only the runs of this session (alias like `#ops`, an id, or an API-only session
    /// `api:NAME`).
    pub session_id: Option<String>,
    /// Only runs in this state. Without it (and without `runId`) the list holds the runs
    /// running and queued now, on every node; `finished`, `failed`, `aborted` and
    /// `interrupted` list ended runs (kept in the store a month; a handoff's sub-runs and
    /// chat-API runs: the last 1,000 this node recorded, until a restart).
    pub state: Option<RunState>,
    /// Only the run with this id (`run-<hex>`; a handoff's `run-<hex>.<hex>`).
    pub run_id: Option<String>,
    /// At most this many runs (1 to 200, default 200).
    pub limit: Option<u32>,
    /// Where the previous page ended (its `nextCursor`). The list is live: runs that start or
    /// end between pages shift it.
    pub cursor: Option<String>,
}

/// The most runs one page lists.
const MAX_RUNS_PAGE: u32 = 200;

/// `runs.list`'s answer.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct RunList {
    /// Running runs first, then queued ones in the order they will run, by session; then
    /// handoffs' sub-runs and chat-API runs (with `parentRunId`, `startedBy`).
    runs: Vec<RunView>,
    /// The next page's `cursor`, when there are more.
    next_cursor: Option<String>,
}

/// `runs.list`'s checked input.
#[derive(Debug)]
pub struct ListPlan {
    session: Option<entity::Snowflake>,
    state: Option<RunState>,
    run_id: Option<String>,
    limit: usize,
    skip: usize,
}

/// A session filter: an API-only session by its name, else as any session reference.
fn runs_session(
    cx: &PlanContext<'_>,
    reference: Option<&str>,
) -> Result<Option<entity::Snowflake>, ToolError> {
    match reference.map(str::trim) {
        Some(name) if name.starts_with(switchboard_engine::api_sessions::API_SESSION_PREFIX) => {
            Ok(Some(switchboard_engine::api_sessions::api_session_id(name)))
        }
        other => filter_session(cx, other),
    }
}

#[async_trait]
impl Tool for ListRuns {
    type Input = ListRunsInput;
    type Plan = ListPlan;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "runs.list",
            title: "List agent runs",
            description: "List the agent's runs: the ones running (with their id, session, start and who asked) and the ones queued; with a state or a run id, also ended ones (their end and answer).",
            help: "An operator callable: the operator, or a token whose scope names it (runs.list, runs.*, *); an agent run never. Discord's /status shows the same for its channel. Stop a run with runs.abort.",
            mutating: false,
            primary: None,
            effects: Effects {
                destructive: false,
                idempotent: true,
                open_world: false,
            },
            output_schema: Some(output_schema::<RunList>()),
            examples: vec![example(
                "What the agent is doing",
                "tools runs.list --output=text",
                json!({}),
            )],
        }
    }

    fn plan(
        &self,
        cx: &PlanContext<'_>,
        input: ListRunsInput,
    ) -> Result<Planned<ListPlan>, ToolError> {
        let session = runs_session(cx, input.session_id.as_deref())?;
        if session.is_none() && matches!(cx.context.caller, Caller::Discord(_)) {
            return Err(ToolError::usage(
                ErrorCode::NoSession,
                "sessionId: from Discord, runs are listed for the channel the command is used in",
            ));
        }
        let limit = input.limit.unwrap_or(MAX_RUNS_PAGE);
        if !(1..=MAX_RUNS_PAGE).contains(&limit) {
            return Err(ToolError::usage(
                ErrorCode::InvalidInput,
                format!("limit: from 1 to {MAX_RUNS_PAGE}, not {limit}"),
            ));
        }
        let skip = match input.cursor.as_deref().map(str::trim) {
            None | Some("") => 0,
            Some(cursor) => cursor
                .parse::<usize>()
                .ok()
                .filter(|skip| *skip <= 100_000)
                .ok_or_else(|| {
                    ToolError::usage(
                        ErrorCode::InvalidInput,
                        "cursor: pass the nextCursor of the previous page as it was",
                    )
                })?,
        };
        let run_id = input.run_id.map(|id| id.trim().to_owned());
        Ok(Planned::nowhere(ListPlan {
            session,
            state: input.state,
            run_id,
            limit: limit as usize,
            skip,
        }))
    }

    async fn run(&self, cx: &Invocation<'_>, plan: ListPlan) -> Result<ToolOutput, ToolError> {
        let own = cx.context.caller.own_runs_only("runs.list");
        // Without a state or an id, the list is what runs and waits now; the node's record of
        // ended runs answers a state that asks for it, or a run id.
        let live_only = plan.state.is_none() && plan.run_id.is_none();
        let listed = runs(cx)?.list_runs(plan.session).await;
        let mut matching = listed.into_iter().filter(|run| {
            plan.state
                .map_or(!(live_only && run.state.ended()), |state| {
                    run.state == state
                })
                && plan
                    .run_id
                    .as_deref()
                    .is_none_or(|id| run.run_id.as_deref() == Some(id))
                && own
                    .as_deref()
                    .is_none_or(|key| run.started_by.as_deref() == Some(key))
        });
        let page: Vec<RunView> = matching.by_ref().skip(plan.skip).take(plan.limit).collect();
        let next_cursor = matching
            .next()
            .map(|_| (plan.skip + page.len()).to_string());
        output(&RunList {
            runs: page,
            next_cursor,
        })
    }
}

pub struct AbortRun;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AbortRunInput {
    /// The run to stop (`run-<hex>`, as runs.list and the audit log's `run` show it).
    pub run_id: Option<String>,
    /// Or: stop whatever runs in this session (alias like `#ops`, or id).
    pub session_id: Option<String>,
}

/// The longest run id taken (`run-` and 16 hex digits, and `.` and 16 more per handoff hop).
const MAX_RUN_ID: usize = 128;

/// `run-<hex>`, or a sub-run's `run-<hex>.<hex>…`.
fn valid_run_id(id: &str) -> bool {
    id.len() <= MAX_RUN_ID
        && id.strip_prefix("run-").is_some_and(|rest| {
            rest.split('.')
                .all(|hex| !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        })
}

/// `runs.abort`'s answer.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Stopped {
    /// The run being stopped.
    run_id: String,
    /// Its session.
    #[schemars(with = "String")]
    session_id: entity::Snowflake,
}

/// Which run `runs.abort` stops, checked.
#[derive(Debug)]
pub enum AbortPlan {
    Run(String),
    Session,
}

#[async_trait]
impl Tool for AbortRun {
    type Input = AbortRunInput;
    type Plan = AbortPlan;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "runs.abort",
            title: "Stop an agent run",
            description: "Stop a running agent run, by its id or by its session; queued runs stay.",
            help: "An operator callable: the operator, or a token whose scope names it (runs.abort, runs.*, *); an agent run never. Discord's /abort calls it for its channel: a user stops only a run they started, unless they are in discord.admins. The run's capability ends at once: a call it still makes, or one waiting on an approval, answers run_aborted. Give runId or sessionId, not both.",
            mutating: true,
            primary: Some("runId"),
            effects: Effects {
                destructive: true,
                idempotent: true,
                open_world: true,
            },
            output_schema: Some(output_schema::<Stopped>()),
            examples: vec![
                example(
                    "Stop a run by its id",
                    "tools runs.abort run-0123456789abcdef",
                    json!({"runId": "run-0123456789abcdef"}),
                ),
                example(
                    "Stop whatever runs in #ops",
                    "tools runs.abort --session-id=#ops",
                    json!({"sessionId": "#ops"}),
                ),
            ],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: AbortRunInput,
    ) -> Result<Planned<AbortPlan>, ToolError> {
        let run_id = input.run_id.as_deref().map(str::trim);
        let session_id = input.session_id.as_deref().map(str::trim);
        match (run_id, session_id) {
            (Some(id), None) => {
                if !valid_run_id(id) {
                    return Err(ToolError::usage(
                        ErrorCode::InvalidInput,
                        "runId: a run id is run- followed by hex digits (a handoff's sub-run adds .hex per hop), as runs.list shows it",
                    ));
                }
                Ok(Planned::nowhere(AbortPlan::Run(id.to_owned())))
            }
            (None, Some(session)) => Ok(Planned::in_session(
                AbortPlan::Session,
                SessionRequest::session_id(Some(session), 0),
            )),
            _ => Err(ToolError::usage(
                ErrorCode::InvalidInput,
                "give runId (run-..., from runs.list) or sessionId, one of them",
            )),
        }
    }

    async fn run(&self, cx: &Invocation<'_>, plan: AbortPlan) -> Result<ToolOutput, ToolError> {
        let runs = runs(cx)?;
        // A token that sees its own runs only stops its own only, by id; another's run is as
        // unknown to it as one that does not exist.
        if let Some(key) = cx.context.caller.own_runs_only("runs.abort") {
            let AbortPlan::Run(id) = &plan else {
                return Err(ToolError::usage(
                    ErrorCode::InvalidInput,
                    "sessionId: this token stops only the runs it started, by their runId",
                ));
            };
            let owned = runs.list_runs(None).await.iter().any(|run| {
                run.run_id.as_deref() == Some(id.as_str())
                    && run.started_by.as_deref() == Some(key.as_str())
            });
            if !owned {
                return Err(nothing_running(&plan));
            }
        }
        let (user, admin) = match &cx.context.caller {
            Caller::Discord(user) => (user.id, discord_admin(cx, user)),
            // The operator and tokens whose scope names runs.abort stop any run.
            _ => (entity::Snowflake(0), true),
        };
        if let (AbortPlan::Run(_), Caller::Discord(_)) = (&plan, &cx.context.caller) {
            return Err(ToolError::usage(
                ErrorCode::InvalidInput,
                "from Discord, /abort stops the run of the channel it is used in",
            ));
        }
        let session;
        let target = match &plan {
            AbortPlan::Run(id) => AbortTarget::Run(id),
            AbortPlan::Session => {
                session = cx.target()?.channel_id();
                AbortTarget::Session(session)
            }
        };
        match runs.abort_run(target, user, admin).await {
            AbortOutcome::Stopped { run_id, session_id } => {
                tracing::info!(run = %run_id, session = %session_id, caller = %cx.context.caller.key(), "run aborted");
                output(&Stopped { run_id, session_id })
            }
            AbortOutcome::NotYours { owner } => Err(ToolError::denied(
                ErrorCode::NotYourRun,
                format!("The running request is {owner}'s; only they or an admin can stop it."),
            )),
            AbortOutcome::NothingRunning => Err(nothing_running(&plan)),
        }
    }
}

/// `runs.abort` found nothing (it may stop) to stop.
fn nothing_running(plan: &AbortPlan) -> ToolError {
    ToolError::not_found(
        ErrorCode::NothingRunning,
        match plan {
            AbortPlan::Run(id) => {
                format!("No run {id} is running (runs.list shows what runs); nothing was stopped")
            }
            AbortPlan::Session => {
                "Nothing is running in this channel; nothing was stopped".to_owned()
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::valid_run_id;

    #[test]
    fn a_run_id_is_run_and_hex_with_a_dotted_hex_part_per_handoff_hop() {
        for ok in [
            "run-0a1b",
            "run-0123456789abcdef.fedcba9876543210",
            "run-a.b.c",
        ] {
            assert!(valid_run_id(ok), "{ok}");
        }
        let long = format!("run-{}", "a".repeat(200));
        for bad in [
            "",
            "run-",
            "run-xyz",
            "run-ab..cd",
            "run-ab.",
            "sess-ab",
            "run-ab/cd",
            long.as_str(),
        ] {
            assert!(!valid_run_id(bad), "{bad}");
        }
    }
}
