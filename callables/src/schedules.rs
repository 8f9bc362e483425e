//! `schedule.create`, `schedule.list`, `schedule.get`, `schedule.cancel` and
//! `schedule.resume` (issue 26 §3): scheduled prompts kept in the store, fired by the
//! composition root's scheduler loop. The checks (prompt, at / every / cron / tz, agent) are
//! the `switchboard-schedule` crate's; the session is resolved and allowlisted by the
//! pipeline like any call's. The operator sees every schedule; any other caller only those it
//! made.

use async_trait::async_trait;
use protocol::{Effects, ErrorCode};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::json;
use switchboard_records::{Schedule, ScheduleStatus};
use switchboard_schedule::{CreateInput, ListInput, ScheduleId, ScheduleRef, ScheduleView};

use crate::auth::Caller;
use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext};
use crate::registry::{
    example, output, output_schema, Planned, SessionRequest, Tool, ToolOutput, ToolSpec,
};
use switchboard_engine::schedules::{millis, spec_of, stored_spec, view, Scheduling};

/// Schedules read per page while listing or counting.
const PAGE: usize = 500;

fn scheduling<'a>(cx: &Invocation<'a>) -> Result<&'a std::sync::Arc<Scheduling>, ToolError> {
    cx.core.scheduling().ok_or_else(unavailable)
}

fn unavailable() -> ToolError {
    ToolError::new(
        // Not retryable: nothing changes until the operator configures an agent (as
        // `workflows_unavailable`).
        protocol::ErrorKind::Denied,
        ErrorCode::parse("schedules_unavailable"),
        "Schedules are not served here: they run an agent, so run `switchboard run` with an [agent] section in the config.",
    )
}

fn store_failed(error: &switchboard_store::StoreError) -> ToolError {
    ToolError::store_unavailable(format!(
        "the schedules could not be read or kept: {error}; try again"
    ))
}

/// Who made a schedule, as kept: the caller's key, or for an agent run the user who started
/// it (`user:ID`), so that its firings are charged to that user and it outlives the run.
pub(crate) fn creator(caller: &Caller) -> String {
    match caller {
        Caller::Capability(c) => match c.grant.requested_by {
            Some(user) => format!("user:{user}"),
            None => caller.key(),
        },
        Caller::Discord(user) => format!("user:{}", user.id),
        _ => caller.key(),
    }
}

/// Whether `caller` may see and change `schedule`.
fn visible(caller: &Caller, schedule: &Schedule) -> bool {
    matches!(caller, Caller::Operator) || schedule.created_by == creator(caller)
}

fn unknown(id: &str) -> ToolError {
    ToolError::not_found(
        ErrorCode::parse("unknown_schedule"),
        format!("No schedule {id} (schedule.list shows the ones you may see)"),
    )
    .with_details(json!({ "field": "scheduleId" }))
}

/// Every kept schedule, page by page, at most `max` (the configured bound on how many exist).
async fn all(scheduling: &Scheduling, max: usize) -> Result<Vec<Schedule>, ToolError> {
    let mut found: Vec<Schedule> = Vec::new();
    let mut after = None;
    loop {
        let page = scheduling
            .store()
            .schedules(after.clone(), PAGE)
            .await
            .map_err(|e| store_failed(&e))?;
        let full = page.len() == PAGE;
        after = page.last().map(|s| s.id.clone());
        found.extend(page);
        // Each page moves `after` forward; the bound stops a store that keeps answering.
        if !full || found.len() > max.saturating_add(PAGE) {
            return Ok(found);
        }
    }
}

/// A schedule the caller may see.
async fn find(cx: &Invocation<'_>, id: &ScheduleId) -> Result<Schedule, ToolError> {
    let found = scheduling(cx)?
        .store()
        .schedule(id.as_str())
        .await
        .map_err(|e| store_failed(&e))?;
    match found {
        Some(schedule) if visible(&cx.context.caller, &schedule) => Ok(schedule),
        _ => Err(unknown(id.as_str())),
    }
}

/// A schedule as answered, with its newest receipts when `with_receipts`.
async fn shown(
    cx: &Invocation<'_>,
    schedule: &Schedule,
    with_receipts: bool,
) -> Result<ScheduleView, ToolError> {
    let receipts = if with_receipts {
        let kept = cx.settings().config().scheduler.receipts_kept;
        scheduling(cx)?
            .store()
            .receipts(&schedule.id, kept)
            .await
            .map_err(|e| store_failed(&e))?
    } else {
        Vec::new()
    };
    Ok(view(schedule, &receipts))
}

pub struct CreateSchedule;

#[async_trait]
impl Tool for CreateSchedule {
    type Input = CreateInput;
    type Plan = switchboard_schedule::NewSchedule;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "schedule.create",
            title: "Schedule a prompt",
            description: "Run the agent with a prompt in a session at a time (at), repeatedly (every), or on a cron schedule; every firing leaves a receipt of what it posted.",
            help: "Give sessionId, prompt and exactly one of at (RFC 3339), every (2s, 15m, 1h30m) or cron (five fields, with tz). The agent may answer exactly NO_REPLY when there is nothing to post; any other run that posts nothing is a failed firing, and 3 failed firings in a row pause the schedule (schedule.resume starts it again). A firing missed while the service was down runs once on start when younger than scheduler.missed_max_age_s, else is recorded as skipped.",
            mutating: true,
            primary: None,
            effects: Effects::ADD,
            output_schema: Some(output_schema::<ScheduleView>()),
            examples: vec![
                example(
                    "A digest in #ops every morning",
                    "tools schedule.create --session-id=#ops --prompt='Post the overnight digest' --cron='0 9 * * 1-5' --tz=Europe/Paris",
                    json!({"sessionId": "#ops", "prompt": "Post the overnight digest", "cron": "0 9 * * 1-5", "tz": "Europe/Paris"}),
                ),
                example(
                    "A check every 15 minutes",
                    "tools schedule.create --session-id=#ops --prompt='Check the queue; NO_REPLY if it is empty' --every=15m",
                    json!({"sessionId": "#ops", "prompt": "Check the queue; NO_REPLY if it is empty", "every": "15m"}),
                ),
            ],
        }
    }

    fn plan(
        &self,
        cx: &PlanContext<'_>,
        input: CreateInput,
    ) -> Result<Planned<switchboard_schedule::NewSchedule>, ToolError> {
        if cx.core.scheduling().is_none() {
            return Err(unavailable());
        }
        // `agent` must name a configured agent (`[agent]` alone is the one named `agent`).
        let configured = cx.core.settings().config().agents.names();
        let checked = input
            .check(&configured, chrono::Utc::now())
            .map_err(|error| {
                ToolError::usage(
                    ErrorCode::parse(error.code()),
                    format!("{error}: {}", error.help()),
                )
                .with_details(json!({ "field": error.field() }))
            })?;
        let session = SessionRequest::session_id(Some(&checked.session_ref), 0);
        Ok(Planned::in_session(checked, session))
    }

    async fn run(
        &self,
        cx: &Invocation<'_>,
        plan: switchboard_schedule::NewSchedule,
    ) -> Result<ToolOutput, ToolError> {
        let scheduling = scheduling(cx)?;
        let session = cx.target()?.channel_id();
        let limits = cx.settings().config().scheduler;
        let existing = all(scheduling, limits.max_schedules).await?;
        let live: Vec<&Schedule> = existing
            .iter()
            .filter(|s| matches!(s.status, ScheduleStatus::Active | ScheduleStatus::Paused))
            .collect();
        if live.len() >= limits.max_schedules {
            return Err(ToolError::usage(
                ErrorCode::parse("too_many_schedules"),
                format!(
                    "{} schedules exist already (scheduler.max_schedules); cancel one first",
                    live.len()
                ),
            ));
        }
        let here = live.iter().filter(|s| s.session_id == session).count();
        if here >= limits.max_per_session {
            return Err(ToolError::usage(
                ErrorCode::parse("too_many_schedules"),
                format!(
                    "{here} schedules post in this session already (scheduler.max_per_session); cancel one first"
                ),
            ));
        }
        let mut random = [0u8; 8];
        getrandom::fill(&mut random)
            .map_err(|e| ToolError::internal(format!("cannot draw random bytes: {e}")))?;
        let now = chrono::Utc::now();
        let schedule = Schedule {
            id: ScheduleId::from_random(random).as_str().to_owned(),
            session_id: session,
            agent: plan.agent.map(|a| a.as_str().to_owned()),
            prompt: plan.prompt,
            spec: stored_spec(&plan.spec),
            created_by: creator(&cx.context.caller),
            created_ms: millis(now),
            next_due_ms: plan.spec.next_after(now).map(millis),
            // The cursor starts at creation: nothing before it is missed.
            last_fired_ms: Some(millis(now)),
            status: ScheduleStatus::Active,
            consecutive_failures: 0,
        };
        scheduling
            .store()
            .save_schedule(schedule.clone())
            .await
            .map_err(|e| store_failed(&e))?;
        scheduling.changed();
        tracing::info!(schedule = %schedule.id, session = %session, caller = %cx.context.caller.key(), "schedule created");
        output(&view(&schedule, &[]))
    }
}

pub struct ListSchedules;

/// `schedule.list`'s answer.
#[derive(Serialize, JsonSchema)]
struct ScheduleList {
    /// The schedules the caller may see, by id.
    schedules: Vec<ScheduleView>,
}

#[async_trait]
impl Tool for ListSchedules {
    type Input = ListInput;
    type Plan = bool;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "schedule.list",
            title: "List schedules",
            description: "List scheduled prompts: their session, prompt, when they fire, status and next firing.",
            help: "The operator sees every schedule, [[schedules]] entries included (ids config:NAME); other callers see the ones they made. schedule.get ID shows one with its receipts.",
            mutating: false,
            primary: None,
            effects: Effects::READ,
            output_schema: Some(output_schema::<ScheduleList>()),
            examples: vec![example(
                "Every schedule",
                "tools schedule.list",
                json!({}),
            )],
        }
    }

    fn plan(&self, _: &PlanContext<'_>, input: ListInput) -> Result<Planned<bool>, ToolError> {
        Ok(match input.session_id.as_deref() {
            Some(session) => {
                Planned::in_session(true, SessionRequest::session_id(Some(session), 0))
            }
            None => Planned::nowhere(false),
        })
    }

    async fn run(&self, cx: &Invocation<'_>, in_session: bool) -> Result<ToolOutput, ToolError> {
        let scheduling = scheduling(cx)?;
        let session = if in_session {
            Some(cx.target()?.channel_id())
        } else {
            None
        };
        let max = cx.settings().config().scheduler.max_schedules;
        let schedules = all(scheduling, max)
            .await?
            .iter()
            .filter(|s| visible(&cx.context.caller, s))
            .filter(|s| session.is_none_or(|id| s.session_id == id))
            .map(|s| view(s, &[]))
            .collect();
        output(&ScheduleList { schedules })
    }
}

fn id_example(tool: &str, what: &str) -> protocol::Example {
    example(
        what,
        &format!("tools {tool} sch_0123456789abcdef"),
        json!({"scheduleId": "sch_0123456789abcdef"}),
    )
}

/// Sets a schedule's status (cancel, resume).
async fn set_status(
    cx: &Invocation<'_>,
    id: &ScheduleId,
    status: ScheduleStatus,
) -> Result<ToolOutput, ToolError> {
    let schedule = find(cx, id).await?;
    let scheduling = scheduling(cx)?;
    let changed = scheduling
        .store()
        .set_schedule_status(&schedule.id, status)
        .await
        .map_err(|e| store_failed(&e))?
        .ok_or_else(|| unknown(id.as_str()))?;
    scheduling.changed();
    tracing::info!(schedule = %changed.id, status = status.as_str(), caller = %cx.context.caller.key(), "schedule status set");
    output(&shown(cx, &changed, false).await?)
}

/// The callables whose input is one schedule's id: `schedule.get`, `schedule.cancel` and
/// `schedule.resume`. One plan for the three.
#[derive(Debug, Clone, Copy)]
pub enum OnSchedule {
    Get,
    Cancel,
    Resume,
}

#[async_trait]
impl Tool for OnSchedule {
    type Input = ScheduleRef;
    type Plan = ScheduleId;

    fn spec(&self) -> ToolSpec {
        match self {
            OnSchedule::Get => ToolSpec {
                id: "schedule.get",
                title: "Show a schedule",
                description: "One schedule with its newest receipts: each firing's run id and the messages it posted, NO_REPLY, the error, or the firings skipped while the service was down.",
                help: "The id is the main field: tools schedule.get sch_… (or config:NAME). scheduler.receipts_kept receipts are kept, the newest.",
                mutating: false,
                primary: Some("scheduleId"),
                effects: Effects::READ,
                output_schema: Some(output_schema::<ScheduleView>()),
                examples: vec![id_example("schedule.get", "A schedule and its receipts")],
            },
            OnSchedule::Cancel => ToolSpec {
                id: "schedule.cancel",
                title: "Cancel a schedule",
                description:
                    "Stop a schedule for good: it never fires again; its receipts stay readable.",
                help: "A [[schedules]] entry (config:NAME) is removed from the config instead.",
                mutating: true,
                primary: Some("scheduleId"),
                effects: Effects::OVERWRITE,
                output_schema: Some(output_schema::<ScheduleView>()),
                examples: vec![id_example("schedule.cancel", "Cancel one")],
            },
            OnSchedule::Resume => ToolSpec {
                id: "schedule.resume",
                title: "Resume a paused schedule",
                description: "Start a paused schedule again, its failures in a row forgotten; it fires from its next due time.",
                help: "Only a paused schedule resumes; a done or cancelled one answers conflict.",
                mutating: true,
                primary: Some("scheduleId"),
                effects: Effects::OVERWRITE,
                output_schema: Some(output_schema::<ScheduleView>()),
                examples: vec![id_example("schedule.resume", "Resume one")],
            },
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: ScheduleRef,
    ) -> Result<Planned<ScheduleId>, ToolError> {
        if matches!(self, OnSchedule::Cancel) && input.schedule_id.is_config() {
            return Err(ToolError::usage(
                ErrorCode::InvalidInput,
                format!(
                    "{} comes from [[schedules]] in the config: remove its entry there (and reload) to cancel it",
                    input.schedule_id.as_str()
                ),
            )
            .with_details(json!({ "field": "scheduleId" })));
        }
        Ok(Planned::nowhere(input.schedule_id))
    }

    async fn run(&self, cx: &Invocation<'_>, id: ScheduleId) -> Result<ToolOutput, ToolError> {
        match self {
            OnSchedule::Get => get(cx, &id).await,
            OnSchedule::Cancel => set_status(cx, &id, ScheduleStatus::Cancelled).await,
            OnSchedule::Resume => resume(cx, &id).await,
        }
    }
}

/// `schedule.get`: the schedule with its newest receipts.
async fn get(cx: &Invocation<'_>, id: &ScheduleId) -> Result<ToolOutput, ToolError> {
    let found = find(cx, id).await?;
    let mut view = shown(cx, &found, true).await?;
    // Read again after the receipts: the state shown is never older than the newest
    // receipt (a firing keeps its receipt and the schedule's new state in one step).
    if let Some(now) = scheduling(cx)?
        .store()
        .schedule(id.as_str())
        .await
        .map_err(|e| store_failed(&e))?
    {
        let receipts = std::mem::take(&mut view.receipts);
        view = switchboard_engine::schedules::view(&now, &[]);
        view.receipts = receipts;
    }
    output(&view)
}

/// `schedule.resume`: a paused schedule active again.
async fn resume(cx: &Invocation<'_>, id: &ScheduleId) -> Result<ToolOutput, ToolError> {
    let schedule = find(cx, id).await?;
    if schedule.status != ScheduleStatus::Paused {
        return Err(ToolError::new(
            protocol::ErrorKind::Conflict,
            ErrorCode::parse("schedule_not_paused"),
            format!(
                "{} is {}, not paused: nothing to resume",
                schedule.id,
                schedule.status.as_str()
            ),
        ));
    }
    // A spec this build cannot read would never fire: say so rather than resume it.
    spec_of(&schedule)
        .map_err(|e| ToolError::internal(format!("the schedule's spec no longer reads: {e}")))?;
    set_status(cx, id, ScheduleStatus::Active).await
}
