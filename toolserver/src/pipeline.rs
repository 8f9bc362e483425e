//! The one way a call runs. Every front (HTTP, the CLI through HTTP, the agent bridge in
//! process) calls [`Core::call`]; nothing else can reach a callable's handler. The stages
//! are listed on [`Core::call`], where the public docs show them.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use entity::Snowflake;
use protocol::{ErrorCode, ErrorKind};
use serde_json::Value;

use crate::error::ToolError;
use crate::invocation::{CallContext, Invocation, PlanContext, Target};
use crate::registry::{Registry, SessionRequest, ToolOutput};
use crate::server::Core;
use crate::surface::AllowedChannel;

/// What the permission stage decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Not decided yet: the call was refused before the permission stage.
    Undecided,
    /// Allowed (today: every call that gets this far).
    Allowed,
}

impl Decision {
    /// The name the audit record keeps.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Undecided => "-",
            Decision::Allowed => "allow",
        }
    }
}

/// What the stages learned about a call, for its audit record.
#[derive(Debug)]
struct Trail {
    targets: Vec<Snowflake>,
    decision: Decision,
}

/// One call passing through the stages. Only [`Core::call`] makes one.
pub(crate) struct Gate<'a> {
    core: &'a Core,
    context: &'a CallContext,
    tool_id: &'static str,
    trail: Mutex<Trail>,
}

impl<'a> Gate<'a> {
    /// What a callable's plan may use.
    pub(crate) fn plan_context(&self) -> PlanContext<'a> {
        PlanContext {
            core: self.core,
            context: self.context,
        }
    }

    fn trail(&self) -> std::sync::MutexGuard<'_, Trail> {
        self.trail
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stages 4 to 8: resolve and allowlist every session the plan named, decide permission,
    /// spend the rate limits, run the before-hooks. The [`Invocation`] they return is the only
    /// way to a handler.
    pub(crate) async fn admit(
        &self,
        sessions: &[SessionRequest],
    ) -> Result<Invocation<'a>, ToolError> {
        let core = self.core;
        // Resolve each session, then allowlist it, in the order the plan named them.
        let mut targets = Vec::with_capacity(sessions.len());
        for request in sessions {
            let id = self.resolve(request)?;
            self.trail().targets.push(id);
            let location = core
                .allowlist
                .check(core.surface.as_ref(), id)
                .await
                .map_err(|error| in_field(request, error))?;
            targets.push(Target {
                channel: AllowedChannel::checked(id),
                location,
            });
        }
        // Permission.
        let decision = Decision::Allowed;
        self.trail().decision = decision;
        // Rate limits: per caller and callable, then each channel's share.
        core.limits
            .check_caller(self.context.caller.limit_key(), self.tool_id)?;
        for (request, target) in sessions.iter().zip(&targets) {
            if request.spend > 0 {
                core.limits
                    .check_channel_n(target.channel_id().get(), request.spend)?;
            }
        }
        // Before-hooks: none yet.
        Ok(Invocation {
            core,
            context: self.context,
            tool_id: self.tool_id,
            targets,
            mentions: core.mention_policy(),
        })
    }

    /// Stage 10: after-hooks (none yet) see the answer and may transform it.
    pub(crate) async fn after(
        &self,
        _invocation: &Invocation<'a>,
        output: ToolOutput,
    ) -> Result<ToolOutput, ToolError> {
        Ok(output)
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
    /// 2. **scope**: the callable must be visible to the caller (else `out_of_scope`);
    /// 3. **validate**: the input against the callable's schema, then the callable's own rules
    ///    and CPU work ([`Tool::plan`](crate::Tool::plan)), which names the sessions the call
    ///    acts in;
    /// 4. **resolve** every named session reference (`#ops`, `<#id>`, an id);
    /// 5. **allowlist** each of them;
    /// 6. **permission**: allow / ask / deny rules (today every call is allowed);
    /// 7. **rate limits**: per caller and callable, and per channel (a send split in k parts
    ///    spends k);
    /// 8. **before-hooks** (none are configured yet);
    /// 9. the **handler**, with its resolved targets and the
    ///    [`MentionPolicy`](crate::surface::MentionPolicy) — only now are files read;
    /// 10. **after-hooks**;
    /// 11. the **audit** record (a `tracing` line, target `audit`, with the fields the audit log
    ///     keeps).
    ///
    /// The concurrency cap and the call timeout wrap stages 3 to 10.
    pub async fn call(
        &self,
        context: &CallContext,
        tool_id: &str,
        input: Value,
    ) -> Result<ToolOutput, ToolError> {
        let started = Instant::now();
        // Scope.
        let (tool_id, tool) = match self.registry.lookup(tool_id) {
            Some((id, tool)) if context.caller.may_call(id) => (id, tool),
            // A callable outside the caller's scope looks like any other it may not call.
            Some((id, _)) => {
                let error = ToolError::denied(
                    ErrorCode::OutOfScope,
                    format!("'{id}' is outside this token's tool scope"),
                );
                return self.refused(context, id, error, started);
            }
            None => {
                let error = Registry::unknown(tool_id, self.registry.ids());
                return self.refused(context, "-", error, started);
            }
        };
        let gate = Gate {
            core: self,
            context,
            tool_id,
            trail: Mutex::new(Trail {
                targets: Vec::new(),
                decision: Decision::Undecided,
            }),
        };
        let result = self.run_stages(&gate, tool, input).await;
        self.audit(context, tool_id, &gate.trail(), &result, started);
        result
    }

    /// A call refused before it had a gate (unknown callable, out of scope), audited.
    fn refused(
        &self,
        context: &CallContext,
        tool_id: &str,
        error: ToolError,
        started: Instant,
    ) -> Result<ToolOutput, ToolError> {
        let trail = Trail {
            targets: Vec::new(),
            decision: Decision::Undecided,
        };
        let result = Err(error);
        self.audit(context, tool_id, &trail, &result, started);
        result
    }

    async fn run_stages(
        &self,
        gate: &Gate<'_>,
        tool: &std::sync::Arc<dyn crate::registry::Callable>,
        input: Value,
    ) -> Result<ToolOutput, ToolError> {
        let tool_id = gate.tool_id;
        let _permit = self.permits.try_acquire().map_err(|_| {
            ToolError::new(
                ErrorKind::Unavailable,
                ErrorCode::Busy,
                "The tool server is at its concurrent call limit; retry shortly",
            )
            .with_retry_after(Duration::from_secs(1))
        })?;
        match tokio::time::timeout(self.call_timeout, tool.call(gate, input)).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::new(
                ErrorKind::Timeout,
                ErrorCode::Timeout,
                format!(
                    "'{tool_id}' did not finish within {} s; it may still complete — check before retrying a mutation",
                    self.call_timeout.as_secs()
                ),
            )),
        }
    }

    /// The audit record: every call is a DEBUG line (target `audit`) with the fields the audit
    /// log keeps; refusals are also an INFO line, at most one per caller and code every few
    /// seconds, with how many there were.
    fn audit(
        &self,
        context: &CallContext,
        tool_id: &str,
        trail: &Trail,
        result: &Result<ToolOutput, ToolError>,
        started: Instant,
    ) {
        let (outcome, code) = match result {
            Ok(_) => ("ok", ""),
            Err(error) => (error.kind.as_str(), error.code.as_str()),
        };
        if tracing::enabled!(target: "audit", tracing::Level::DEBUG) {
            let targets: Vec<String> = trail.targets.iter().map(ToString::to_string).collect();
            tracing::debug!(
                target: "audit",
                caller = context.caller.limit_key().as_str(),
                tool = tool_id,
                sessions = %targets.join(","),
                request = context.request_id.as_deref().unwrap_or("-"),
                tool_call = context.tool_call_id.as_deref().unwrap_or("-"),
                decision = trail.decision.as_str(),
                outcome,
                code,
                ms = started.elapsed().as_millis() as u64,
                "call"
            );
        }
        if let Err(error) = result {
            if matches!(error.kind, ErrorKind::Denied | ErrorKind::Unavailable) {
                let caller = context.caller.limit_key();
                let caller = caller.as_str();
                if let Some(count) = self.refusals.record(caller, error.code.as_str(), started) {
                    tracing::info!(
                        target: "audit",
                        caller,
                        tool = tool_id,
                        code = %error.code,
                        count,
                        "refused {count} call(s) from {caller} ({}) since the last line like this",
                        error.code
                    );
                }
            }
        }
    }
}
