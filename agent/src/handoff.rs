//! `agent.handoff` on the bridge's side: the sub-run of another agent, held until it finishes.
//!
//! The sub-run posts nothing: its final text is the call's answer. It gets a capability of its
//! own, scoped to what both the caller and the target agent may call, in the session the call
//! named; its id extends the caller's run id (`run-a.b`, `run-a.b.c`), so every audit row of
//! the sub-run names the chain, and the depth of a run is the dots in its id. At most
//! [`MAX_HANDOFFS_PER_RUN`] sub-runs of one run go at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use entity::Snowflake;
use protocol::{ErrorCode, ErrorKind};
use switchboard_config::{AgentConfig, Runner};
use switchboard_context::{Entry, Message, Speaker};
use switchboard_engine::auth::{random_hex, scope_allows, Caller, CapabilityGrant, TokenEnd};
use switchboard_engine::handoff::{HandoffAnswer, HandoffRequest};
use switchboard_engine::runs::{
    AbortOutcome, RunGate, RunState, RunUsage, RunView, Trigger, RUN_ANSWER_CHARS,
};
use switchboard_engine::ToolError;
use switchboard_engine::{CallContext, Front};
use tokio::sync::{oneshot, watch};

use crate::command::{run_command_with, CommandSpec};
use crate::stream::DraftState;
use crate::{command_answer, demo, openai, prompt, run_cwd, Answer, Bridge};

/// Sub-runs of one run going at once.
pub const MAX_HANDOFFS_PER_RUN: usize = 2;

/// Sub-runs going: how many per asking run, and each one as `runs.list` shows it with what
/// stops it.
#[derive(Default)]
pub(crate) struct Handoffs {
    by_parent: Mutex<HashMap<String, usize>>,
    /// Bounded by what starts them: at most [`MAX_HANDOFFS_PER_RUN`] per run, and the chat
    /// API's own cap on runs at once.
    running: Mutex<BTreeMap<String, Running>>,
}

/// One sub-run going.
struct Running {
    view: RunView,
    stop: Option<oneshot::Sender<()>>,
}

/// A sub-run's entry in [`Handoffs::running`], removed on drop.
struct Listed<'a> {
    handoffs: &'a Handoffs,
    run_id: String,
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        self.handoffs.listed().remove(&self.run_id);
    }
}

/// One sub-run's place in [`Handoffs`], given back on drop.
struct Slot<'a> {
    handoffs: &'a Handoffs,
    parent: String,
}

impl Handoffs {
    fn take(&self, parent: &str) -> Option<Slot<'_>> {
        let mut map = self.lock();
        let going = map.entry(parent.to_owned()).or_default();
        if *going >= MAX_HANDOFFS_PER_RUN {
            return None;
        }
        *going += 1;
        Some(Slot {
            handoffs: self,
            parent: parent.to_owned(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.by_parent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn listed(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Running>> {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Lists a sub-run until the guard drops; `stop` is sent when it is aborted.
    fn list(&self, view: RunView, stop: oneshot::Sender<()>) -> Listed<'_> {
        let run_id = view.run_id.clone().unwrap_or_default();
        self.listed().insert(
            run_id.clone(),
            Running {
                view,
                stop: Some(stop),
            },
        );
        Listed {
            handoffs: self,
            run_id,
        }
    }

    /// The sub-runs going (a session's only, when given), by id: a parent before its own.
    pub(crate) fn views(&self, session: Option<Snowflake>) -> Vec<RunView> {
        self.listed()
            .values()
            .filter(|running| session.is_none_or(|s| running.view.session_id == s))
            .map(|running| running.view.clone())
            .collect()
    }

    /// Who started the listed run `run_id` (its `startedBy`).
    fn started_by(&self, run_id: &str) -> Option<String> {
        self.listed()
            .get(run_id)
            .and_then(|running| running.view.started_by.clone())
    }

    /// Stops the sub-run `run_id` (and those below it) when `user` asked for it or `admin`.
    pub(crate) fn abort(&self, run_id: &str, user: Snowflake, admin: bool) -> AbortOutcome {
        let outcome = {
            let mut listed = self.listed();
            let Some(running) = listed.get_mut(run_id) else {
                return AbortOutcome::NothingRunning;
            };
            if running.view.requested_by != user && !admin {
                return AbortOutcome::NotYours {
                    owner: running.view.requested_by_name.clone(),
                };
            }
            if running
                .stop
                .take()
                .is_some_and(|stop| stop.send(()).is_ok())
            {
                AbortOutcome::Stopped {
                    run_id: run_id.to_owned(),
                    session_id: running.view.session_id,
                }
            } else {
                AbortOutcome::NothingRunning
            }
        };
        if matches!(outcome, AbortOutcome::Stopped { .. }) {
            self.stop_below(run_id);
        }
        outcome
    }

    /// Stops the listed run `run_id` this node runs (a chat-API run or a sub-run), without
    /// asking who may (the caller decided); whether it was running here.
    pub(crate) fn stop(&self, run_id: &str) -> bool {
        let mut listed = self.listed();
        listed
            .get_mut(run_id)
            .and_then(|running| running.stop.take())
            .is_some_and(|stop| stop.send(()).is_ok())
    }

    /// Stops every sub-run below `run_id` (`run_id.…`): a stopped run's handoffs end with it.
    pub(crate) fn stop_below(&self, run_id: &str) {
        let prefix = format!("{run_id}.");
        let mut listed = self.listed();
        for (id, running) in listed.range_mut(prefix.clone()..) {
            if !id.starts_with(&prefix) {
                break;
            }
            if let Some(stop) = running.stop.take() {
                tracing::info!(run = %id, parent = %run_id, "sub-run stops with the run that asked");
                let _ = stop.send(());
            }
        }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut map = self.handoffs.lock();
        if let Some(going) = map.get_mut(&self.parent) {
            *going = going.saturating_sub(1);
            if *going == 0 {
                map.remove(&self.parent);
            }
        }
    }
}

/// The API caller that started a run (`token:NAME`, `operator`), as `runs.list` shows it; a
/// run's sub-run inherits its run's (none for a run started in Discord).
fn started_by(caller: &Caller) -> Option<String> {
    match caller {
        Caller::Operator | Caller::Token(_) | Caller::Unauthenticated => Some(caller.key()),
        Caller::Capability(_) | Caller::Discord(_) => None,
    }
}

/// The asking run's id and handoff depth: a run's capability (`run-a.b` is at depth 1), else
/// a person's call at depth 0.
fn asker(caller: &Caller) -> (Option<&str>, u32) {
    match caller {
        Caller::Capability(capability) => {
            let id = capability.grant.request_id.as_str();
            let depth = if id.starts_with("run-") {
                id.matches('.').count() as u32
            } else {
                0
            };
            (Some(id), depth)
        }
        _ => (None, 0),
    }
}

impl Bridge {
    /// [`switchboard_engine::runs::Runs::handoff`].
    pub(crate) async fn run_handoff(
        &self,
        mut request: HandoffRequest,
    ) -> Result<HandoffAnswer, ToolError> {
        let core = &self.inner.core;
        let settings = core.settings();
        let config = settings.config();
        let (parent, depth) = asker(&request.caller);
        switchboard_agents::handoff_depth(depth, config.agents.max_handoff_depth).map_err(
            |refused| {
                ToolError::denied(
                    ErrorCode::Other(refused.code().to_owned()),
                    format!("{refused}; {}", refused.help()),
                )
                .with_details(serde_json::json!({"depth": refused.depth, "max": refused.max}))
            },
        )?;
        let Some(target) = config.agents.get(request.agent.as_str()) else {
            let names = config.agents.names();
            let near = switchboard_agents::nearest_agent(&request.agent, &names)
                .map(|n| format!(" — did you mean `{n}`?"))
                .unwrap_or_default();
            let listed: Vec<&str> = names
                .iter()
                .map(switchboard_config::AgentName::as_str)
                .collect();
            return Err(ToolError::not_found(
                ErrorCode::Other("unknown_agent".to_owned()),
                format!(
                    "'{}' is not a configured agent{near} The agents are: {}",
                    request.agent,
                    listed.join(", ")
                ),
            ));
        };
        let _slot = match parent {
            Some(parent) => Some(self.inner.handoffs.take(parent).ok_or_else(|| {
                ToolError::new(
                    ErrorKind::Unavailable,
                    ErrorCode::Busy,
                    format!("this run has {MAX_HANDOFFS_PER_RUN} handoffs going already; wait for one to answer"),
                )
                .with_retry_after(Duration::from_secs(5))
            })?),
            None => None,
        };
        // What both may call: the caller's scope (a run's, with its session's) and the target's.
        let scope: Vec<String> = core
            .registry()
            .ids()
            .filter(|id| {
                request.caller.scope_allows(id) && scope_allows(&target.config.tool_scope, id)
            })
            .map(str::to_owned)
            .collect();
        let hex = random_hex(8)
            .map_err(|e| ToolError::internal(format!("cannot draw random bytes: {e}")))?;
        let run_id = match parent {
            Some(parent) if parent.starts_with("run-") => format!("{parent}.{hex}"),
            _ => format!("run-{hex}"),
        };
        let requested_by = match &request.caller {
            Caller::Capability(capability) => capability.grant.requested_by,
            Caller::Discord(user) => Some(user.id),
            _ => None,
        };
        let agent_config = Arc::new(target.config.clone());
        let cwd = run_cwd(&agent_config);
        let session = request.session;
        let grant = CapabilityGrant {
            session_id: session.id(),
            request_id: run_id.clone(),
            scope,
            ttl: request.timeout + Duration::from_secs(60),
            client: Some("handoff".to_owned()),
            cwd: Some(cwd.display().to_string()),
            trigger_message_id: None,
            requested_by,
            gate: Some(RunGate::open()),
        };
        let token = core.mint_capability(grant).map_err(|e| {
            ToolError::internal(format!("cannot start the handoff's run: {}", e.message))
        })?;
        let caller = core.authenticate(Some(&token)).map_err(|e| {
            core.revoke_capability(&token);
            ToolError::internal(format!(
                "the handoff's own token was refused: {}",
                e.message
            ))
        })?;
        let context = CallContext {
            caller,
            request_id: Some(run_id.clone()),
            session_ref: Some(session.id().to_string()),
            client: Some("handoff".to_owned()),
            cwd: Some(cwd.display().to_string()),
            tool_call_id: None,
            trigger_message_id: None,
            front: Front::Api,
        };
        core.events().publish(
            "run.started",
            Some(session.id()),
            serde_json::json!({
                "run": run_id,
                "agent": target.name.as_str(),
                "handoffFrom": parent,
                "requestedBy": requested_by.map(|id| id.to_string()),
            }),
        );
        tracing::info!(run = %run_id, agent = %target.name, from = parent.unwrap_or("-"), "handoff run starts");
        let trigger = Trigger {
            channel_id: session.id(),
            message_id: None,
            author_id: requested_by.unwrap_or_default(),
            author_name: parent.map_or_else(|| "handoff".to_owned(), |p| format!("agent run {p}")),
            author_roles: Vec::new(),
            text: request.prompt.clone(),
            workflow_id: None,
            agent: None,
        };
        let (partial, mut watching) = watch::channel(DraftState::default());
        let partial = Arc::new(partial);
        // The text so far goes on to a caller that streams it, as it comes.
        if let Some(text) = request.text.take() {
            tokio::spawn(async move {
                while watching.changed().await.is_ok() {
                    let now = watching.borrow_and_update().text.clone();
                    text.send_if_modified(|sent| {
                        let changed = *sent != now;
                        *sent = now;
                        changed
                    });
                }
            });
        }
        let (stop, stopped) = oneshot::channel();
        let view = RunView {
            run_id: Some(run_id.clone()),
            session_id: session.id(),
            state: RunState::Running,
            started_ms: Some(switchboard_engine::clock::now_ms()),
            requested_by: requested_by.unwrap_or_default(),
            requested_by_name: trigger.author_name.clone(),
            trigger_message_id: None,
            workflow_id: None,
            text: trigger
                .text
                .chars()
                .take(switchboard_engine::runs::RUN_TEXT_CHARS)
                .collect(),
            parent_run_id: parent.map(str::to_owned),
            agent: Some(target.name.to_string()),
            // A sub-run of an API caller's run is that caller's too.
            started_by: started_by(&request.caller)
                .or_else(|| parent.and_then(|p| self.inner.handoffs.started_by(p))),
            ended_ms: None,
            answer: None,
            usage: None,
        };
        let listed = self.inner.handoffs.list(view.clone(), stop);
        // A sub-run is charged and capped like any run: to the person behind the chain, in
        // the session it works in, as the agent it runs.
        let meter = match self
            .open_meter(
                &trigger,
                &run_id,
                trigger.channel_id,
                target.name.as_str(),
                &agent_config,
            )
            .await
        {
            Ok(meter) => meter,
            Err(refused) => {
                self.inner.core.end_capability(&token, TokenEnd::Finished);
                return Err(ToolError::new(
                    ErrorKind::Denied,
                    ErrorCode::Other("budget_exceeded".to_owned()),
                    refused.message(),
                ));
            }
        };
        // Its row, beside its session's queue: every node lists it and its usage.
        let row = self
            .hold_row(switchboard_records::NewRun {
                id: run_id.clone(),
                session: session.id().to_string(),
                agent: target.name.to_string(),
                trigger: if parent.is_some() {
                    crate::run_rows::HANDOFF_TRIGGER
                } else {
                    crate::run_rows::API_TRIGGER
                }
                .to_owned(),
                requested_by: requested_by
                    .map(|id| format!("user:{id}"))
                    .or_else(|| view.started_by.clone()),
                parent_run: parent.map(str::to_owned),
                enqueued_ms: switchboard_engine::clock::now_ms(),
            })
            .await;
        // Started: past every check (a budget refuses before this, and its caller answers the
        // refusal, not a stream).
        if let Some(started) = request.started.take() {
            let _ = started.send(run_id.clone());
        }
        let work = self.handoff_work(
            &agent_config,
            &context,
            &trigger,
            SubRun {
                token: &token,
                run_id: &run_id,
                meter: meter.as_ref(),
            },
            Arc::clone(&partial),
        );
        // Stopped: `runs.abort`, the run that asked being stopped, a chat client gone. A
        // dropped sender (the listing gone) never stops it.
        let stopped = async {
            if stopped.await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let (answer, timed_out, aborted) = tokio::select! {
            done = tokio::time::timeout(request.timeout, work) => match done {
                Ok(answer) => (answer, false, false),
                Err(_) => (Answer::Aborted, true, false),
            },
            () = stopped => (Answer::Aborted, false, true),
        };
        core.end_capability(
            &token,
            if timed_out || aborted {
                TokenEnd::Aborted
            } else {
                TokenEnd::Finished
            },
        );
        if aborted {
            self.inner.handoffs.stop_below(&run_id);
        }
        let usage = meter.as_ref().map(|meter| {
            let (prompt_tokens, completion_tokens) = meter.tokens();
            switchboard_engine::handoff::HandoffUsage {
                prompt_tokens,
                completion_tokens,
            }
        });
        let outcome = match (&answer, timed_out) {
            (_, true) => "timeout",
            (Answer::Reply(_), _) => "replied",
            (Answer::Failed(_), _) => "failed",
            (Answer::Aborted, _) => "aborted",
        };
        let excerpt = match &answer {
            // A stopped or timed-out run keeps what it had written.
            Answer::Aborted => partial
                .borrow()
                .text
                .chars()
                .take(RUN_ANSWER_CHARS)
                .collect(),
            done => crate::answer_excerpt(done),
        };
        self.end_held_row(
            row,
            outcome,
            Some(excerpt.clone()),
            meter.as_ref().map(crate::run_rows::run_usage),
        )
        .await;
        // Recorded before the listing goes, so that the run is never missing from runs.list.
        self.inner.ended.record(RunView {
            state: crate::ended_state(outcome),
            ended_ms: Some(switchboard_engine::clock::now_ms()),
            answer: Some(excerpt),
            usage: usage.as_ref().map(|usage| RunUsage {
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
            }),
            ..view
        });
        drop(listed);
        core.metrics().run_finished(outcome);
        core.events().publish(
            "run.finished",
            Some(session.id()),
            serde_json::json!({ "run": run_id, "outcome": outcome, "handoffFrom": parent }),
        );
        match answer {
            Answer::Reply(text) => Ok(HandoffAnswer {
                run_id,
                agent: target.name.to_string(),
                text: text.trim().to_owned(),
                timed_out: false,
                usage,
            }),
            Answer::Aborted if timed_out => Ok(HandoffAnswer {
                run_id,
                agent: target.name.to_string(),
                text: partial.borrow().text.clone(),
                timed_out: true,
                usage,
            }),
            Answer::Failed(reason) => Err(ToolError::new(
                ErrorKind::Unavailable,
                ErrorCode::Other("handoff_failed".to_owned()),
                format!("agent '{}' failed: {reason}", target.name),
            )
            .with_details(serde_json::json!({"runId": run_id}))),
            Answer::Aborted => Err(ToolError::new(
                ErrorKind::Unavailable,
                ErrorCode::Other("handoff_failed".to_owned()),
                format!("agent '{}' was stopped", target.name),
            )
            .with_details(serde_json::json!({"runId": run_id}))),
        }
    }

    /// Runs the target agent's runner on the prompt alone; its text so far goes to `partial`.
    async fn handoff_work(
        &self,
        config: &AgentConfig,
        context: &CallContext,
        trigger: &Trigger,
        sub_run: SubRun<'_>,
        partial: Arc<watch::Sender<DraftState>>,
    ) -> Answer {
        let SubRun {
            token,
            run_id,
            meter,
        } = sub_run;
        let core = &self.inner.core;
        let cwd = run_cwd(config);
        match &config.runner {
            Runner::OpenAi(runner) => {
                let message = Message::new(
                    Speaker::Person {
                        id: trigger.author_id,
                        name: trigger.author_name.clone(),
                        trusted: true,
                    },
                    None,
                    String::new(),
                    trigger.text.clone(),
                );
                let transcript = prompt::Transcript {
                    entries: vec![Entry::Message(message.trigger())],
                    untrusted_note: None,
                    summary: None,
                };
                let limits = openai::ContextLimits::of(config);
                let run = openai::Run {
                    runner,
                    core,
                    context,
                    session: trigger.channel_id,
                    limits: &limits,
                    meter,
                    // A sub-run keeps no summary of its own and reads no notes: it answers one
                    // prompt. Its agent's provider prompt and instruction files still apply.
                    memory: None,
                    summary_session: trigger.channel_id,
                    notes: None,
                    system: crate::instructions::system_blocks(
                        core,
                        config,
                        runner,
                        trigger.channel_id,
                    ),
                };
                match openai::answer(run, transcript, config.timeout, Some(partial)).await {
                    Ok(text) => Answer::Reply(text),
                    Err(error) => {
                        tracing::warn!(run = %run_id, "handoff model run failed: {error}");
                        Answer::Failed(error.short_reason())
                    }
                }
            }
            Runner::Demo => {
                let mentions = demo::Mentions {
                    needed_here: false,
                    needed_in_new_threads: false,
                };
                match tokio::time::timeout(
                    config.timeout,
                    demo::answer(core, context, trigger, mentions),
                )
                .await
                {
                    Ok(text) => Answer::Reply(text),
                    Err(_) => {
                        Answer::Failed(format!("no answer within {} s", config.timeout.as_secs()))
                    }
                }
            }
            Runner::Command { program, args, .. } => {
                let spec = CommandSpec {
                    cwd: Some(cwd.clone()),
                    env: self.environment(config, trigger, trigger, token, run_id, &cwd),
                    stderr_lines: Some(crate::command::progress_sink(partial)),
                    ..CommandSpec::new(program.clone(), args.clone(), config.timeout)
                };
                let text = trigger.text.clone();
                let outcome = run_command_with(&spec, move || text, std::future::pending()).await;
                command_answer(run_id, outcome, config.timeout)
            }
        }
    }
}

/// Who a sub-run is: its capability token, its run id, and the meter its model calls charge.
struct SubRun<'a> {
    token: &'a str,
    run_id: &'a str,
    meter: Option<&'a crate::metering::Meter>,
}
