//! `agent.handoff`: one agent asks another, server-side. The call starts the named agent's run
//! in the caller's session (or another allowed one) and is held open until that run finishes,
//! then answers its final text and run id; past `timeoutS` it answers `timeout` with whatever
//! the run had written. The agent bridge does the work ([`Runs::handoff`]); this file is the
//! callable and the types the seam passes.
//!
//! The sub-run may call only what both the caller and the target agent may (the bridge mints
//! its capability with the intersection), its run id extends the caller's (`run-a.b`: the
//! chain, in every audit row it writes), and the depth and the sub-runs per run are capped.
//! `agent.handoff` is in no default scope: the operator names it in an agent's `tool_scope`.

use std::time::Duration;

use async_trait::async_trait;
use protocol::{Effects, ErrorCode, ErrorKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::auth::Caller;
use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext};
use crate::registry::{
    example, output, output_schema, Planned, SessionRequest, Tool, ToolOutput, ToolSpec,
};

use switchboard_engine::handoff::{
    HandoffRequest, SessionAgent, DEFAULT_HANDOFF_TIMEOUT, MAX_HANDOFF_PROMPT_CHARS,
    MAX_HANDOFF_TIMEOUT,
};

pub struct Handoff;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HandoffInput {
    /// The agent to ask (an `[agents.NAME]` name).
    pub agent: String,
    /// What to ask it.
    pub prompt: String,
    /// Where its run works: this run's session unless another allowed one is named.
    pub session_id: Option<String>,
    /// Seconds to wait for its answer (default 600, at most 3600); past it the call answers
    /// `timeout` with what it had written.
    #[serde(rename = "timeoutS")]
    pub timeout_s: Option<u64>,
}

/// `agent.handoff`'s answer.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct HandoffView {
    /// The sub-run's id, as the audit log's `run` shows it.
    run_id: String,
    /// The agent that answered.
    agent: String,
    /// Its final answer.
    text: String,
}

/// The checked input.
pub struct HandoffPlan {
    agent: String,
    prompt: String,
    timeout: Duration,
    /// The caller is a run working in an API-only session (a chat-API run) and named no
    /// other: the sub-run works there too (no Discord channel, so no allowlist to pass).
    in_api_session: bool,
}

#[async_trait]
impl Tool for Handoff {
    type Input = HandoffInput;
    type Plan = HandoffPlan;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "agent.handoff",
            title: "Hand a task to another agent",
            description: "Ask another configured agent to do something and wait for its answer: its run works in this session (or sessionId) with only the tools both agents may use, and the call answers its final text and run id.",
            help: "The call is held open until the other agent finishes (timeoutS, default 600 s; then `timeout` with its partial text in details). Handoffs nest at most agents.max_handoff_depth deep (default 2); a run has at most 2 handoffs going at once. Not in any default scope: the operator adds agent.handoff to an agent's tool_scope.",
            mutating: true,
            primary: None,
            effects: Effects::ADD,
            output_schema: Some(output_schema::<HandoffView>()),
            examples: vec![example(
                "Ask the release agent",
                "tools agent.handoff --agent=release --prompt='Is the 2.4 checklist done?'",
                json!({"agent": "release", "prompt": "Is the 2.4 checklist done?"}),
            )],
        }
    }

    fn plan(
        &self,
        cx: &PlanContext<'_>,
        input: HandoffInput,
    ) -> Result<Planned<HandoffPlan>, ToolError> {
        let agent = input.agent.trim().to_owned();
        if let Err(error) = switchboard_agents::AgentName::parse(&agent) {
            return Err(ToolError::usage(
                ErrorCode::Other("invalid_agent_name".to_owned()),
                format!("agent: {error}; {}", error.help()),
            ));
        }
        let prompt = input.prompt.trim().to_owned();
        if prompt.is_empty() {
            return Err(ToolError::usage(
                ErrorCode::Other("empty_prompt".to_owned()),
                "prompt: say what the other agent should do",
            ));
        }
        if prompt.chars().count() > MAX_HANDOFF_PROMPT_CHARS {
            return Err(ToolError::usage(
                ErrorCode::Other("prompt_too_long".to_owned()),
                format!("prompt: at most {MAX_HANDOFF_PROMPT_CHARS} characters; hand over less, or point to a message or file"),
            ));
        }
        let timeout = match input.timeout_s {
            None => DEFAULT_HANDOFF_TIMEOUT,
            Some(seconds) if (1..=MAX_HANDOFF_TIMEOUT.as_secs()).contains(&seconds) => {
                Duration::from_secs(seconds)
            }
            Some(seconds) => {
                return Err(ToolError::usage(
                    ErrorCode::Other("invalid_timeout".to_owned()),
                    format!(
                        "timeoutS: {seconds} is out of range; use 1 to {} seconds",
                        MAX_HANDOFF_TIMEOUT.as_secs()
                    ),
                ))
            }
        };
        let in_api_session = input.session_id.is_none()
            && cx
                .core
                .api_sessions()
                .session_of(&cx.context.caller)
                .is_some();
        let plan = HandoffPlan {
            agent,
            prompt,
            timeout,
            in_api_session,
        };
        if in_api_session {
            return Ok(Planned::nowhere(plan));
        }
        Ok(Planned::in_session(
            plan,
            SessionRequest::session_id(input.session_id.as_deref(), 0),
        ))
    }

    async fn run(&self, cx: &Invocation<'_>, plan: HandoffPlan) -> Result<ToolOutput, ToolError> {
        let runs = cx.core.runs().ok_or_else(|| {
            ToolError::not_found(
                ErrorCode::NoAgent,
                "No agent is configured ([agents.NAME] in the config), so there is none to hand off to",
            )
        })?;
        let session = match cx.core.api_sessions().session_of(&cx.context.caller) {
            Some(session) if plan.in_api_session => session,
            _ => cx.target()?.channel,
        };
        let (started, run_started) = tokio::sync::oneshot::channel();
        let agent = plan.agent.clone();
        let timeout = plan.timeout;
        let handoff = runs.handoff(HandoffRequest {
            caller: cx.context.caller.clone(),
            agent: plan.agent,
            prompt: plan.prompt,
            session,
            timeout: plan.timeout,
            text: None,
            started: Some(started),
        });
        // An observer (MCP's progress) learns of the sub-run as soon as it starts.
        tokio::pin!(handoff);
        let answer = tokio::select! {
            answer = &mut handoff => answer,
            started = run_started => {
                if let (Ok(run_id), Some(observer)) = (started, cx.observer) {
                    observer.handing_off(&agent, &run_id, timeout);
                }
                handoff.await
            }
        }?;
        if answer.timed_out {
            return Err(ToolError::new(
                ErrorKind::Timeout,
                ErrorCode::Timeout,
                format!(
                    "agent '{}' did not finish within the handoff's timeout; its run {} was stopped. details.partialText holds what it had written",
                    answer.agent, answer.run_id
                ),
            )
            .with_details(json!({
                "runId": answer.run_id,
                "agent": answer.agent,
                "partialText": answer.text,
            })));
        }
        output(&HandoffView {
            run_id: answer.run_id,
            agent: answer.agent,
            text: answer.text,
        })
    }
}

pub struct SetSessionAgent;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SetAgentInput {
    /// The session to bind (alias like `#help`, or id).
    pub session_id: String,
    /// The agent that answers there from now on; absent (or `reset`): back to the config's.
    pub agent: Option<String>,
}

#[async_trait]
impl Tool for SetSessionAgent {
    type Input = SetAgentInput;
    type Plan = Option<String>;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "admin.agent.set",
            title: "Change a session's agent",
            description: "Choose which configured agent answers in a session (what /agent set does), or go back to the config's choice.",
            help: "An operator callable: the operator, a token whose scope names it (admin.agent.set, admin.*, *), or a discord.admins user's /agent set. The next run in the session (and its threads) uses that agent, on every node. Kept in the store until reset (survives restarts); it outranks [sessions.X] agent in the config.",
            mutating: true,
            primary: None,
            effects: Effects::OVERWRITE,
            output_schema: Some(output_schema::<SessionAgent>()),
            examples: vec![example(
                "The release agent answers in #release-room",
                "tools admin.agent.set --session-id=#release-room --agent=release",
                json!({"sessionId": "#release-room", "agent": "release"}),
            )],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: SetAgentInput,
    ) -> Result<Planned<Option<String>>, ToolError> {
        let agent = input
            .agent
            .map(|a| a.trim().to_owned())
            .filter(|a| !a.is_empty() && a != "reset");
        Ok(Planned::in_session(
            agent,
            SessionRequest::session_id(Some(&input.session_id), 0),
        ))
    }

    async fn run(
        &self,
        cx: &Invocation<'_>,
        agent: Option<String>,
    ) -> Result<ToolOutput, ToolError> {
        if let Caller::Discord(user) = &cx.context.caller {
            if !super::runs::discord_admin(cx, user) {
                return Err(ToolError::denied(
                    ErrorCode::NotAdmin,
                    "Only admins (discord.admins in the config) can change a channel's agent; `/agent` alone shows it.",
                ));
            }
        }
        let runs = cx.core.runs().ok_or_else(|| {
            ToolError::not_found(
                ErrorCode::NoAgent,
                "No agent is configured, so none can answer here",
            )
        })?;
        let session = cx.target()?.channel_id();
        runs.bind_agent(session, agent.clone())
            .await
            .map_err(|why| ToolError::usage(ErrorCode::Other("unknown_agent".to_owned()), why))?;
        tracing::info!(%session, caller = %cx.context.caller.key(), agent = agent.as_deref().unwrap_or("(config)"), "a session's agent changed");
        output(&runs.session_agent(session).await)
    }
}
