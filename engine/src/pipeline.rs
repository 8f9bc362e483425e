//! The one way a call runs. Every front (HTTP, the CLI through HTTP, the agent bridge in
//! process) calls [`Core::call`]; nothing else can reach a callable's handler. The stages
//! are listed on [`Core::call`], where the public docs show them.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use entity::{Mention, Snowflake};
use protocol::{ErrorCode, ErrorKind};
use serde_json::{json, Value};
use switchboard_config::{HookFailure, Policy};

use crate::allowlist;
use crate::approvals::{AskRequest, Outcome};
use crate::auth::{Caller, Capability};
use crate::error::ToolError;
use crate::governance::{audit_input, AuditRow, Verdict};
use crate::hooks::{self, BeforeAnswer};
use crate::invocation::{CallContext, Front, Invocation, PlanContext, Target};
use crate::live::Settings;
use crate::registry::{PlaceRequest, Registry, SessionRequest, ToolOutput};
use crate::server::Core;
use crate::surface::{AllowedChannel, AllowedPlace, SessionKind};

/// What the permission stage decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Not decided: the call was refused before the permission stage.
    Undecided,
    /// The rules allow it.
    Allowed,
    /// The rules ask, and an approver said yes.
    Approved,
    /// The rules ask, and it was denied (by an approver, or the timeout).
    NotApproved,
    /// The rules deny it.
    Denied,
}

impl Decision {
    /// The name the audit record keeps: `allow`, `ask`, `deny`, or `-`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Undecided => "-",
            Decision::Allowed => "allow",
            Decision::Approved | Decision::NotApproved => "ask",
            Decision::Denied => "deny",
        }
    }
}

/// The callables a run's own answer uses (a call with [`Front::RunAnswer`]): posting and
/// editing the reply or its draft, removing the draft, the ⏳/✅ reactions on the trigger, and
/// typing.
pub const ANSWER_CALLABLES: [&str; 6] = [
    "surface.messages.send",
    "surface.messages.edit",
    "surface.messages.delete",
    "surface.reactions.add",
    "surface.reactions.remove",
    "surface.typing",
];

/// What the audit log's `decided_by` says for a run's own answer.
pub const RUN_ANSWER: &str = "run-answer";

/// The run whose own answer this call shows, when it is one: a [`Front::RunAnswer`] call (only
/// the agent bridge, in process, makes one) of an answer callable with a run's capability.
fn run_answer<'c>(context: &'c CallContext, tool_id: &str) -> Option<&'c Capability> {
    if context.front != Front::RunAnswer || !ANSWER_CALLABLES.contains(&tool_id) {
        return None;
    }
    context.caller.capability()
}

/// What the stages learned about a call, for its audit record.
#[derive(Debug)]
struct Trail {
    targets: Vec<Snowflake>,
    decision: Decision,
    decided_by: Option<std::borrow::Cow<'static, str>>,
    /// The input as the audit log keeps it (cut, or hashed).
    input: Value,
    /// The handler started: a failure now is not a refusal (its audit row is always its own).
    handled: bool,
    /// What the handler caused in a workspace, bounded ([`crate::call_events::note_call_event`]).
    events: Vec<Value>,
}

impl Trail {
    fn new() -> Trail {
        Trail {
            targets: Vec::new(),
            decision: Decision::Undecided,
            decided_by: None,
            input: Value::Null,
            handled: false,
            events: Vec::new(),
        }
    }
}

pub use crate::observer::CallObserver;

/// What admission gives a call: the go-ahead, or a before-hook's rewritten input to check
/// again from the start.
pub(crate) enum Admission<'a> {
    /// Every check passed: run the handler with this invocation.
    Go(Invocation<'a>),
    /// A before-hook rewrote the input.
    Rewrite(Value),
}

/// One call passing through the stages. Only [`Core::call`] makes one.
pub(crate) struct Gate<'a> {
    core: &'a Core,
    /// The settings the call started with: every stage reads these, never newer ones.
    settings: &'a Settings,
    context: &'a CallContext,
    tool_id: &'static str,
    trail: Mutex<Trail>,
    observer: Option<&'a dyn CallObserver>,
}

impl<'a> Gate<'a> {
    /// What a callable's plan may use.
    pub(crate) fn plan_context(&self) -> PlanContext<'a> {
        PlanContext {
            core: self.core,
            settings: self.settings,
            context: self.context,
        }
    }

    fn trail(&self) -> std::sync::MutexGuard<'_, Trail> {
        self.trail
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Notes the input for the audit record.
    pub(crate) fn note_input(&self, input: &Value) {
        let audit = &self.settings.config().audit;
        self.trail().input = audit_input(input, audit.text_chars, audit.redact);
    }

    /// Stages 3 to 10 for one callable, in order: validate (its plan), then [`Gate::admit`]
    /// (4 resolve, 5 allowlist, 6 permission, 7 rate limits, 8 before-hooks), 9 the handler
    /// ([`Gate::execute`]), 10 the after-hooks ([`Gate::after`]). A before-hook's rewrite is
    /// checked again from stage 3, once. Stages 1, 2 and 11 are [`Core::call`]'s.
    pub(crate) async fn stages(
        &self,
        callable: &dyn crate::registry::Callable,
        input: Value,
    ) -> Result<ToolOutput, ToolError> {
        let mut input = input;
        let mut rewritten = false;
        loop {
            self.note_input(&input);
            let planned = callable.plan(self.plan_context(), &input)?;
            let note: &dyn crate::registry::AskNote = planned.as_ref();
            match self
                .admit(planned.sessions(), planned.place(), &input, rewritten, note)
                .await?
            {
                Admission::Go(invocation) => {
                    let output = self.execute(planned.run(&invocation)).await?;
                    return self.after(&invocation, &input, output).await;
                }
                Admission::Rewrite(new_input) => {
                    input = new_input;
                    rewritten = true;
                }
            }
        }
    }

    /// Stages 4 to 8: resolve and allowlist every session the plan named, decide permission
    /// (asking an approver when the rules say so), spend the channels' rate limits, run the
    /// before-hooks. The [`Invocation`] they give is the only way to a handler. After a
    /// before-hook's rewrite (`rewritten`), the limits were spent and the hooks ran already.
    /// (The caller's own budget was spent before any of this, by [`Core::call`].)
    pub(crate) async fn admit(
        &self,
        sessions: &[SessionRequest],
        place: Option<&PlaceRequest>,
        input: &Value,
        rewritten: bool,
        note: &dyn crate::registry::AskNote,
    ) -> Result<Admission<'a>, ToolError> {
        let core = self.core;
        // Resolve each session, then allowlist it, in the order the plan named them.
        let mut targets = Vec::with_capacity(sessions.len());
        self.trail().targets.clear();
        for request in sessions {
            let id = self.resolve(request)?;
            self.trail().targets.push(id);
            let location = core
                .allowlist
                .check_with(&self.settings.allow, core.surface.as_ref(), id)
                .await
                .map_err(|error| in_field(request, error))?;
            if request.changes_channel && !self.settings.allow.manages(&location) {
                return Err(in_field(request, allowlist::not_managed(id, &location)));
            }
            targets.push(Target {
                channel: AllowedChannel::checked(id),
                location,
            });
        }
        // Where a channel is created: allowed by its guild or category, or not at all.
        let place = match place {
            Some(request) => Some(self.place(request).await?),
            None => None,
        };
        // Permission.
        let mut ids: Vec<Snowflake> = targets.iter().map(Target::channel_id).collect();
        if let Some(category) = place.and_then(AllowedPlace::category) {
            ids.push(category);
            self.trail().targets.push(category);
        }
        match run_answer(self.context, self.tool_id) {
            // A run's own answer, in its own session: the answer, whatever the scope and the
            // rules say of the run's explicit calls (its audit row says so).
            Some(run) => {
                self.in_runs_own_session(run, &targets).await?;
                let mut trail = self.trail();
                trail.decision = Decision::Allowed;
                trail.decided_by = Some(RUN_ANSWER.into());
            }
            None => {
                // `command =` / `path =` rules see the command, and the path relative to the
                // workspace of the session the call acts in.
                let workspace = targets.first().and_then(|target| {
                    crate::workspaces::Workspaces::dir_for(self.settings, target)
                });
                let args =
                    crate::governance::CallArgs::of(self.tool_id, input, workspace.as_deref());
                let verdict = self.settings.governance.decide_with(
                    self.tool_id,
                    &self.context.caller,
                    &ids,
                    &args,
                );
                self.permit(&verdict, &ids, input, &targets, note).await?;
            }
        }
        // Rate limits: each channel's share (the caller's was spent when the call came in). A
        // run's own ⏳/✅ and typing — a few per run, bounded by the runs — spend none: the
        // channel's budget is for what is posted there.
        let marks_only = run_answer(self.context, self.tool_id).is_some()
            && !self.tool_id.starts_with("surface.messages.");
        if !rewritten && !marks_only {
            let limits = &self.settings.limits;
            for (request, target) in sessions.iter().zip(&targets) {
                if request.spend > 0 {
                    limits.check_channel_n(target.channel_id().get(), request.spend)?;
                }
            }
            // Channels made in a guild spend from the guild's share, as posts do from a
            // channel's: an agent cannot fill a server with channels.
            if let Some(place) = place {
                limits.check_channel_n(place.guild().get(), 1)?;
            }
        }
        // Before-hooks.
        if !rewritten {
            if let Some(rewrite) = self.before_hooks(input, &ids).await? {
                return Ok(Admission::Rewrite(rewrite));
            }
        }
        Ok(Admission::Go(Invocation {
            core,
            settings: self.settings,
            context: self.context,
            tool_id: self.tool_id,
            targets,
            place,
            mentions: crate::server::mention_policy(self.settings),
            observer: self.observer,
        }))
    }

    /// Where a channel is to be created: the guild the input names, else the category's, else
    /// that of the call's context session; allowed when the allowlist lists the guild or the
    /// category (stage 5 for a channel that does not exist yet).
    async fn place(&self, request: &PlaceRequest) -> Result<AllowedPlace, ToolError> {
        let core = self.core;
        let in_parent = |mut error: ToolError| {
            error.message = format!("parentId: {}", error.message);
            error
        };
        let category_guild = match request.category {
            Some(category) => {
                let location = core
                    .allowlist
                    .locate(core.surface.as_ref(), category)
                    .await
                    .map_err(in_parent)?;
                if location.kind != SessionKind::Category {
                    return Err(ToolError::usage(
                        ErrorCode::InvalidInput,
                        format!(
                            "parentId {category} is not a category: name a category of the guild, or leave parentId out"
                        ),
                    )
                    .with_details(json!({ "field": "parentId" })));
                }
                location.guild_id
            }
            None => None,
        };
        let guild = match (request.guild, category_guild) {
            (Some(given), Some(of_category)) if given != of_category => {
                return Err(ToolError::usage(
                    ErrorCode::InvalidInput,
                    format!(
                        "parentId {} is a category of guild {of_category}, not of guild {given}",
                        request.category.map(|c| c.to_string()).unwrap_or_default()
                    ),
                )
                .with_details(json!({ "field": "guild" })))
            }
            (Some(guild), _) | (None, Some(guild)) => guild,
            (None, None) => self.context_guild().await?,
        };
        if !self.settings.allow.allows_creating(guild, request.category) {
            return Err(allowlist::not_creatable(guild, request.category));
        }
        Ok(AllowedPlace::checked(guild, request.category))
    }

    /// The guild of the call's context session, for a channel created with no guild named.
    async fn context_guild(&self) -> Result<Snowflake, ToolError> {
        let request = SessionRequest {
            field: "guild".to_owned(),
            reference: None,
            spend: 0,
            changes_channel: false,
        };
        let id = self.resolve(&request).map_err(|mut error| {
            if error.code == ErrorCode::NoSession {
                error.message = "Name the guild (guild=ID) or a category (parentId=ID) to create the channel in: this call has no session to take the guild from".to_owned();
            }
            error
        })?;
        let location = self
            .core
            .allowlist
            .locate(self.core.surface.as_ref(), id)
            .await?;
        location.guild_id.ok_or_else(|| {
            ToolError::usage(
                ErrorCode::InvalidInput,
                "This call's session is a direct message, which is in no guild: name the guild (guild=ID) or a category (parentId=ID)",
            )
            .with_details(json!({ "field": "guild" }))
        })
    }

    /// Refuses a run's answer anywhere but the run's own session, a thread of it (an answer
    /// moved into a thread), and, when the run's session is such a thread, the channel its
    /// trigger is in (the ⏳/✅ on the trigger).
    async fn in_runs_own_session(
        &self,
        run: &Capability,
        targets: &[Target],
    ) -> Result<(), ToolError> {
        let own = run.grant.session_id;
        for target in targets {
            let id = target.channel_id();
            if id == own || target.location.parent_channel_id == Some(own) {
                continue;
            }
            let parent = self
                .core
                .allowlist
                .locate(self.core.surface.as_ref(), own)
                .await
                .ok()
                .and_then(|location| location.parent_channel_id);
            if parent != Some(id) {
                return Err(ToolError::denied(
                    ErrorCode::OutOfScope,
                    format!(
                        "'{}' as the run's answer acts only in the run's own session {own}, not in {id}",
                        self.tool_id
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The permission stage: allow goes on, deny refuses, ask waits for an approver. An
    /// operator callable (deciding an approval, changing a scope) cannot wait for an approval
    /// itself: a rule asking for one refuses it.
    async fn permit(
        &self,
        verdict: &Verdict,
        targets: &[Snowflake],
        input: &Value,
        resolved: &[Target],
        note: &dyn crate::registry::AskNote,
    ) -> Result<(), ToolError> {
        let tool_id = self.tool_id;
        if verdict.policy == Policy::Ask && crate::auth::is_operator_callable(tool_id) {
            {
                let mut trail = self.trail();
                trail.decision = Decision::Denied;
                trail.decided_by = Some(verdict.by.clone());
            }
            return Err(ToolError::denied(
                ErrorCode::PermissionDenied,
                format!(
                    "'{tool_id}' is an operator action and cannot wait for an approval ({} asks); write an allow or deny rule for it",
                    verdict.by
                ),
            )
            .with_details(json!({ "rule": verdict.by })));
        }
        match verdict.policy {
            Policy::Allow => {
                let mut trail = self.trail();
                trail.decision = Decision::Allowed;
                trail.decided_by = Some(verdict.by.clone());
                Ok(())
            }
            Policy::Deny => {
                {
                    let mut trail = self.trail();
                    trail.decision = Decision::Denied;
                    trail.decided_by = Some(verdict.by.clone());
                }
                Err(ToolError::denied(
                    ErrorCode::PermissionDenied,
                    format!(
                        "'{tool_id}' is not allowed here ({}); the operator decides what runs where",
                        verdict.by
                    ),
                )
                .with_details(json!({ "rule": verdict.by })))
            }
            Policy::Ask => {
                let note = note.note(resolved).await;
                self.ask(verdict, targets, input, note).await
            }
        }
    }

    /// Posts an approval request showing the whole `input` and waits for the decision.
    async fn ask(
        &self,
        verdict: &Verdict,
        targets: &[Snowflake],
        input: &Value,
        note: Option<String>,
    ) -> Result<(), ToolError> {
        let core = self.core;
        let capability = self.context.caller.capability();
        let channel = self
            .settings
            .governance
            .permissions()
            .approvals_channel
            .or_else(|| capability.map(|c| c.grant.session_id))
            .or_else(|| targets.first().copied());
        let Some(channel) = channel else {
            let mut trail = self.trail();
            trail.decision = Decision::NotApproved;
            trail.decided_by = Some(verdict.by.clone());
            return Err(ToolError::denied(
                ErrorCode::ApprovalDenied,
                format!(
                    "'{}' needs an approval ({}), but there is nowhere to ask: set permissions.approvals_channel",
                    self.tool_id, verdict.by
                ),
            ));
        };
        let audit_input = self.trail().input.clone();
        let caller = &self.context.caller;
        let request = AskRequest {
            tool: self.tool_id.to_owned(),
            input: input.clone(),
            note,
            audit_input,
            targets: targets.to_vec(),
            session_label: targets
                .first()
                .map_or_else(|| "-".to_owned(), |id| self.label(*id)),
            requested_by: self.requested_by(),
            caller: caller.key(),
            owner: match capability {
                // An agent run belongs to the person whose message started it; a run the
                // operator minted (no such person), to the operator.
                Some(run) => run
                    .grant
                    .requested_by
                    .map_or_else(|| "operator".to_owned(), |user| format!("discord:{user}")),
                None => caller.principal(),
            },
            run: capability.map(|c| c.grant.request_id.clone()),
            tool_call_id: self.context.tool_call_id.clone(),
            channel: AllowedChannel::checked(channel),
        };
        let session = targets.first().copied();
        // The event stream is a log: it carries the audit log's copy of the input.
        core.events.publish_about(
            "approval.requested",
            session,
            Some(self.context.caller.limit_key().as_str()),
            json!({
                "tool": self.tool_id,
                "requestedBy": request.requested_by,
                "run": request.run,
                "toolCallId": request.tool_call_id,
                "preview": crate::approvals::preview(&request.audit_input),
            }),
        );
        if let Some(observer) = self.observer {
            observer.awaiting_approval(
                self.tool_id,
                self.settings.governance.permissions().ask_timeout,
            );
        }
        // The wait ends with the run: a decision after it must not act for a run that is over.
        let ended = async {
            match capability {
                Some(capability) => capability.ended().await,
                None => std::future::pending().await,
            }
        };
        let outcome = match core
            .approvals
            .ask_until(core.surface.as_ref(), request, ended)
            .await
        {
            Ok(outcome) => outcome,
            Err(how) => {
                self.decided(session, "cancelled", "-");
                let mut trail = self.trail();
                trail.decision = Decision::NotApproved;
                trail.decided_by = Some("run ended".into());
                return Err(crate::server::run_ended(how));
            }
        };
        let (decision, by) = match &outcome {
            Outcome::Approved(by) => ("approved", by.as_str()),
            Outcome::Denied(by) => ("denied", by.as_str()),
            Outcome::Expired => ("expired", "-"),
        };
        self.decided(session, decision, by);
        let mut trail = self.trail();
        match outcome {
            Outcome::Approved(by) => {
                trail.decision = Decision::Approved;
                trail.decided_by = Some(by.into());
                Ok(())
            }
            Outcome::Denied(by) => {
                trail.decision = Decision::NotApproved;
                trail.decided_by = Some(by.clone().into());
                Err(ToolError::denied(
                    ErrorCode::ApprovalDenied,
                    format!("'{}' was denied by {by}", self.tool_id),
                ))
            }
            Outcome::Expired => {
                trail.decision = Decision::NotApproved;
                trail.decided_by = Some("expired".into());
                Err(ToolError::denied(
                    ErrorCode::ApprovalExpired,
                    format!(
                        "Nobody approved '{}' within {} s (permissions.ask_timeout_s)",
                        self.tool_id,
                        self.settings.governance.permissions().ask_timeout.as_secs()
                    ),
                ))
            }
        }
    }

    /// Publishes `approval.decided` for this call's ask.
    fn decided(&self, session: Option<Snowflake>, decision: &str, by: &str) {
        self.core.events.publish_about(
            "approval.decided",
            session,
            Some(self.context.caller.limit_key().as_str()),
            json!({
                "tool": self.tool_id,
                "toolCallId": self.context.tool_call_id,
                "decision": decision,
                "by": by,
            }),
        );
    }

    /// A session as people read it and can type it back: `#alias`, `#name`, `#channel_<id>`.
    fn label(&self, id: Snowflake) -> String {
        self.plan_context().mapper().session_reference(id)
    }

    /// Who asked, as people read it.
    fn requested_by(&self) -> String {
        match &self.context.caller {
            Caller::Operator => "the operator".to_owned(),
            Caller::Unauthenticated => "an unauthenticated caller".to_owned(),
            Caller::Token(token) => format!("token {}", token.name),
            Caller::Discord(user) => format!("@{} in Discord", user.name),
            Caller::Capability(capability) => {
                let grant = &capability.grant;
                match grant.requested_by {
                    Some(user) => format!(
                        "agent run {} for {}",
                        grant.request_id,
                        self.plan_context().mapper().readable(Mention::User(user))
                    ),
                    None => format!("agent run {}", grant.request_id),
                }
            }
        }
    }

    /// The call as hooks see it.
    fn hook_call(&self, input: &Value, targets: &[Snowflake]) -> Value {
        let capability = self.context.caller.capability();
        json!({
            "tool": self.tool_id,
            "input": input,
            "caller": self.context.caller.limit_key().as_str(),
            "sessions": targets,
            "run": capability.map(|c| c.grant.request_id.clone()),
        })
    }

    /// Runs the before-hooks that match, in order: `Some` is a rewritten input.
    async fn before_hooks(
        &self,
        input: &Value,
        targets: &[Snowflake],
    ) -> Result<Option<Value>, ToolError> {
        let hooks = &self.settings.config().hooks;
        for hook in hooks
            .before
            .iter()
            .filter(|hook| switchboard_config::glob_matches(&hook.tool, self.tool_id))
        {
            let program = hook.command.first().cloned().unwrap_or_default();
            match hooks::before(hook, &self.hook_call(input, targets)).await {
                Ok(BeforeAnswer::Allow) => {}
                Ok(BeforeAnswer::Rewrite(rewritten)) => return Ok(Some(rewritten)),
                Ok(BeforeAnswer::Refuse(reason)) => {
                    self.trail().decided_by = Some(format!("hook {program}").into());
                    return Err(ToolError::denied(
                        ErrorCode::HookDenied,
                        format!("A hook refused '{}': {reason}", self.tool_id),
                    )
                    .with_details(json!({ "hook": program, "reason": reason })));
                }
                Err(error) => self.hook_failed(&error)?,
            }
        }
        Ok(None)
    }

    /// A failed hook refuses the call, unless `hooks.on_error = "allow"`.
    fn hook_failed(&self, error: &hooks::HookError) -> Result<(), ToolError> {
        tracing::warn!(tool = self.tool_id, %error, "hook failed");
        match self.settings.config().hooks.on_error {
            HookFailure::Allow => Ok(()),
            HookFailure::Deny => Err(ToolError::denied(
                ErrorCode::HookFailed,
                format!(
                    "'{}' was refused because a hook failed: {error}",
                    self.tool_id
                ),
            )),
        }
    }

    /// Stage 9: the handler, within the concurrency cap and the call timeout.
    pub(crate) async fn execute(
        &self,
        handler: impl Future<Output = Result<ToolOutput, ToolError>>,
    ) -> Result<ToolOutput, ToolError> {
        let core = self.core;
        let _permit = core.permits.try_acquire().map_err(|_| {
            ToolError::new(
                ErrorKind::Unavailable,
                ErrorCode::Busy,
                "The tool server is at its concurrent call limit; retry shortly",
            )
            .with_retry_after(Duration::from_secs(1))
        })?;
        let mut call_timeout = self.settings.config().toolserver.call_timeout;
        if crate::handoff::HELD_OPEN.contains(&self.tool_id) {
            // Held open until its run finishes; its own `timeoutS` bounds it.
            call_timeout = call_timeout
                .max(crate::handoff::MAX_HANDOFF_TIMEOUT + std::time::Duration::from_secs(30));
        }
        self.trail().handled = true;
        match tokio::time::timeout(call_timeout, handler).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::new(
                ErrorKind::Timeout,
                ErrorCode::Timeout,
                format!(
                    "'{}' did not finish within {} s; it may still complete — check before retrying a mutation",
                    self.tool_id,
                    call_timeout.as_secs()
                ),
            )),
        }
    }

    /// Stage 10: after-hooks see the answer and may transform it.
    pub(crate) async fn after(
        &self,
        invocation: &Invocation<'a>,
        input: &Value,
        output: ToolOutput,
    ) -> Result<ToolOutput, ToolError> {
        let hooks = &self.settings.config().hooks;
        let matching: Vec<_> = hooks
            .after
            .iter()
            .filter(|hook| switchboard_config::glob_matches(&hook.tool, self.tool_id))
            .collect();
        if matching.is_empty() {
            return Ok(output);
        }
        let targets: Vec<Snowflake> = invocation
            .targets()
            .iter()
            .map(Target::channel_id)
            .collect();
        let mut value: Value = serde_json::from_str(output.get())
            .map_err(|e| ToolError::internal(format!("the answer is not JSON: {e}")))?;
        for hook in matching {
            let mut call = self.hook_call(input, &targets);
            call["output"] = value.clone();
            match hooks::after(hook, &call).await {
                Ok(Some(replaced)) => value = replaced,
                Ok(None) => {}
                Err(error) => self.hook_failed(&error)?,
            }
        }
        crate::registry::output(&value)
    }

    /// A session reference (or the context's default) as a channel id.
    fn resolve(&self, request: &SessionRequest) -> Result<Snowflake, ToolError> {
        let reference = request
            .reference
            .as_deref()
            .or(self.context.session_ref.as_deref())
            .ok_or_else(|| {
                in_field(
                    request,
                    ToolError::usage(
                        ErrorCode::NoSession,
                        "No session given and none in this call's context. Pass --session-id=ID (a channel id, <#id>, or a configured token such as #ops), or set SWITCHBOARD_SESSION_ID.",
                    ),
                )
            })?;
        self.plan_context()
            .mapper()
            .resolve_session(reference)
            .map_err(|error| {
                in_field(
                    request,
                    ToolError::not_found(ErrorCode::UnknownSession, error.to_string())
                        .with_details(serde_json::json!({ "reference": reference })),
                )
            })
    }
}

/// An error about a session named in another field than `sessionId` says which.
fn in_field(request: &SessionRequest, mut error: ToolError) -> ToolError {
    if request.field != "sessionId" {
        error.message = format!("{}: {}", request.field, error.message);
    }
    error
}

impl Core {
    /// One call through the whole pipeline. The caller was authenticated by the front; every
    /// call is audited.
    ///
    /// The stages, in order, each refusing with a typed error before the next runs:
    ///
    /// 1. **authenticate**: the front turns the presented token into a
    ///    [`Caller`](crate::auth::Caller) with [`Core::authenticate`];
    /// 2. **scope**: the callable must be visible to the caller — its token's scope, and for an
    ///    agent run its session's (else `out_of_scope`, or `unknown_tool` with a suggestion from
    ///    what the caller may call). Then, before any other work, the call spends the caller's
    ///    budget for that callable — a refused one too, and every name it may not call under
    ///    one key per caller — so a flood of refusals meets `rate_limited`;
    /// 3. **validate**: the input against the callable's schema, then the callable's own rules
    ///    and CPU work ([`Tool::plan`](crate::Tool::plan)), which names the sessions the call
    ///    acts in;
    /// 4. **resolve** every named session reference (`#ops`, `<#id>`, an id);
    /// 5. **allowlist** each of them;
    /// 6. **permission**: allow / ask / deny rules, the last match winning (`permission_denied`;
    ///    an ask waits for an approver: `approval_denied`, `approval_expired`);
    /// 7. **rate limits** per channel (a send split in k parts spends k);
    /// 8. **before-hooks**: may refuse (`hook_denied`) or rewrite the input, which is then
    ///    checked again from stage 3;
    /// 9. the **handler**, with its resolved targets and the
    ///    [`MentionPolicy`](crate::surface::MentionPolicy) — only now are files read — within
    ///    the concurrency cap and the call timeout;
    /// 10. **after-hooks** may transform the answer;
    /// 11. the **audit** record: a row in the ledger (the audit log) and a `tracing` line
    ///     (target `audit`); refusals past a few per window are counted into one row
    ///     (`refusals.rs`).
    pub async fn call(
        &self,
        context: &CallContext,
        tool_id: &str,
        input: Value,
    ) -> Result<ToolOutput, ToolError> {
        self.run_call(context, tool_id, input, None, None).await
    }

    /// [`Core::call`], telling `observer` what the call waits for while it runs (an approval):
    /// the same stages, the same answer.
    pub async fn call_observed(
        &self,
        context: &CallContext,
        tool_id: &str,
        input: Value,
        observer: &dyn CallObserver,
    ) -> Result<ToolOutput, ToolError> {
        self.run_call(context, tool_id, input, Some(observer), None)
            .await
    }

    /// [`Core::call`], and whether its handler started: a call refused before (false) did
    /// nothing, so a retry may run it (what an idempotency key's release needs).
    pub async fn call_reporting(
        &self,
        context: &CallContext,
        tool_id: &str,
        input: Value,
    ) -> (Result<ToolOutput, ToolError>, bool) {
        let handled = std::sync::atomic::AtomicBool::new(false);
        let result = self
            .run_call(context, tool_id, input, None, Some(&handled))
            .await;
        (result, handled.into_inner())
    }

    async fn run_call(
        &self,
        context: &CallContext,
        tool_id: &str,
        input: Value,
        observer: Option<&dyn CallObserver>,
        handled: Option<&std::sync::atomic::AtomicBool>,
    ) -> Result<ToolOutput, ToolError> {
        let started = Instant::now();
        let started_ms = crate::clock::now_ms();
        // Scope.
        let refused = |tool: std::borrow::Cow<'static, str>, error: &dyn Fn() -> ToolError| {
            // A name the caller may not call spends from one budget per caller, whatever the
            // name: trying names costs what calling does. Past it, nothing more is worked out.
            let error = match self
                .settings()
                .limits
                .check_caller(context.caller.limit_key(), crate::ratelimit::NOT_CALLABLE)
            {
                Ok(()) => error(),
                Err(limited) => limited,
            };
            let result = Err(error);
            self.audit(context, tool, Trail::new(), &result, started, started_ms);
            result
        };
        let (tool_id, tool) = match self.registry.lookup(tool_id) {
            Some((id, tool))
                if self.may_call(&context.caller, id) || run_answer(context, id).is_some() =>
            {
                (id, tool)
            }
            // Out of scope for everyone, with the reason and what to do.
            Some((id, _)) if self.workflows_missing(id) => {
                return refused(id.into(), &crate::workflow::workflows_unavailable);
            }
            // A callable outside the caller's scope looks like any other it may not call.
            Some((id, _)) => {
                return refused(id.into(), &|| {
                    ToolError::denied(
                        ErrorCode::OutOfScope,
                        format!("'{id}' is outside this token's tool scope"),
                    )
                });
            }
            None => {
                // Suggest only what this caller may call.
                return refused("-".into(), &|| {
                    let visible = self
                        .registry
                        .ids()
                        .filter(|id| self.may_call(&context.caller, id));
                    Registry::unknown(tool_id, visible)
                });
            }
        };
        // An agent run's calls act only once its trigger is durably taken (see `RunGate`), and
        // not at all once the run is over.
        let mut refused = None;
        if let Caller::Capability(capability) = &context.caller {
            if let Some(run_gate) = &capability.grant.gate {
                let unrecorded = || {
                    ToolError::new(
                        ErrorKind::Cancelled,
                        ErrorCode::RunAborted,
                        "this run was stopped before it could act: the message that started it could not be recorded as answered, so it is not answered (the service log says why)",
                    )
                };
                refused = if run_answer(context, tool_id).is_some() {
                    // The answer is shown as the run ends (its ✅ after it): only the record
                    // of its trigger holds it back.
                    (!run_gate.opened().await).then(unrecorded)
                } else {
                    tokio::select! {
                        opened = run_gate.opened() => (!opened).then(unrecorded),
                        how = capability.ended() => Some(crate::server::run_ended(how)),
                    }
                };
            }
        }
        let settings = self.settings();
        // The caller's budget for this callable, spent before any work: refused calls spend it
        // too, so a flood of them meets `rate_limited`.
        let refused = refused.or_else(|| {
            settings
                .limits
                .check_caller(context.caller.limit_key(), tool_id)
                .err()
        });
        if let Some(refused) = refused {
            let result = Err(refused);
            self.audit(
                context,
                tool_id.into(),
                Trail::new(),
                &result,
                started,
                started_ms,
            );
            return result;
        }
        let gate = Gate {
            core: self,
            settings: &settings,
            context,
            tool_id,
            trail: Mutex::new(Trail::new()),
            observer,
        };
        let events = crate::call_events::CallEvents::new(&settings);
        let result = crate::call_events::CALL_EVENTS
            .scope(events.clone(), gate.stages(tool.as_ref(), input))
            .await;
        let mut trail = std::mem::replace(&mut *gate.trail(), Trail::new());
        trail.events = events.take();
        if let Some(handled) = handled {
            handled.store(trail.handled, std::sync::atomic::Ordering::Relaxed);
        }
        self.audit(context, tool_id.into(), trail, &result, started, started_ms);
        result
    }

    /// The audit record: a row for the ledger, a DEBUG line (target `audit`) per call, and an
    /// INFO line per refusal burst (one per caller and code every few seconds, with how many
    /// there were).
    fn audit(
        &self,
        context: &CallContext,
        tool_id: std::borrow::Cow<'static, str>,
        trail: Trail,
        result: &Result<ToolOutput, ToolError>,
        started: Instant,
        started_ms: u64,
    ) {
        let (outcome, code) = match result {
            Ok(_) => ("ok", None),
            Err(error) => (error.kind.as_str(), Some(error.code.as_str())),
        };
        let took = started.elapsed();
        let duration_ms = took.as_millis() as u64;
        let caller = context.caller.limit_key();
        let capability = context.caller.capability();
        self.metrics
            .call_finished(&tool_id, outcome, trail.decision.as_str(), code, took);
        // Its text is written by the hub's writer (for the store) and when someone reads it;
        // the call only moves or shares what it needs into it.
        let caller_key: Arc<str> = match &caller {
            crate::auth::CallerKey::Named(name) => Arc::clone(name),
            other => Arc::from(other.static_name()),
        };
        self.events.publish_call_finished(
            trail.targets.first().copied(),
            crate::events::CallFinished {
                tool: tool_id.clone(),
                caller: caller_key,
                run: capability.map(|c| c.grant.request_id.clone()),
                sessions: trail.targets.clone(),
                tool_call_id: context.tool_call_id.clone(),
                decision: trail.decision.as_str(),
                outcome,
                code: code.map(str::to_owned),
                duration_ms,
            },
        );
        if tracing::enabled!(target: "audit", tracing::Level::DEBUG) {
            let targets: Vec<String> = trail.targets.iter().map(ToString::to_string).collect();
            tracing::debug!(
                target: "audit",
                caller = caller.as_str(),
                tool = %tool_id,
                sessions = %targets.join(","),
                request = context.request_id.as_deref().unwrap_or("-"),
                tool_call = context.tool_call_id.as_deref().unwrap_or("-"),
                decision = trail.decision.as_str(),
                outcome,
                code = code.unwrap_or(""),
                ms = duration_ms,
                "call"
            );
        }
        let row = AuditRow {
            time_ms: started_ms,
            caller: match &caller {
                crate::auth::CallerKey::Named(name) => std::borrow::Cow::Owned(name.to_string()),
                other => std::borrow::Cow::Borrowed(other.static_name()),
            },
            run: capability.map(|c| c.grant.request_id.clone()),
            requested_by: match &context.caller {
                Caller::Discord(user) => Some(user.id),
                other => other.capability().and_then(|c| c.grant.requested_by),
            },
            tool: tool_id.clone(),
            // The trail is the call's own: its parts move into the row.
            sessions: trail.targets,
            input: trail.input,
            decision: std::borrow::Cow::Borrowed(trail.decision.as_str()),
            decided_by: trail.decided_by,
            outcome: std::borrow::Cow::Borrowed(outcome),
            code: code.map(|c| std::borrow::Cow::Owned(c.to_owned())),
            duration_ms,
            count: 1,
            events: trail.events,
        };
        match result {
            // A refusal (refused before its handler ran): counted past a few per window.
            Err(error) if !trail.handled => {
                let recorded = self.refusals.record(row, started);
                if recorded.opens_burst
                    && matches!(error.kind, ErrorKind::Denied | ErrorKind::Unavailable)
                {
                    tracing::info!(
                        target: "audit",
                        caller = caller.as_str(),
                        tool = %tool_id,
                        code = %error.code,
                        "refused a call from {} ({}); more like it within {} s are counted",
                        caller.as_str(),
                        error.code,
                        crate::refusals::WINDOW.as_secs()
                    );
                }
                for row in recorded.rows {
                    self.keep_refusal(row);
                }
            }
            _ => self.governance.record(row),
        }
    }

    /// Writes a refusal's row; a counted one (count over one) gets an INFO line too.
    fn keep_refusal(&self, row: AuditRow) {
        if row.count > 1 {
            tracing::info!(
                target: "audit",
                caller = %row.caller,
                tool = %row.tool,
                code = row.code.as_deref().unwrap_or("-"),
                count = row.count,
                "refused {} more call(s) from {} ({}) in {} s",
                row.count,
                row.caller,
                row.code.as_deref().unwrap_or("-"),
                crate::refusals::WINDOW.as_secs()
            );
        }
        self.governance.record(row);
    }

    /// Writes the counted rows of refusal bursts whose window has ended (`all`: every pending
    /// count, at shutdown). The HTTP front runs it every second.
    pub fn flush_refusals(&self, all: bool) {
        for row in self.refusals.flush(Instant::now(), all) {
            self.keep_refusal(row);
        }
    }
}
