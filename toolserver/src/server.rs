//! The tool server's core: authentication, the policy path every call takes, and start-up.

use protocol::ErrorCode;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use entity::Aliases;
use serde_json::Value;
use switchboard_config::{AliasComments, Config};
use tokio::sync::Semaphore;

use crate::allowlist::Allowlist;
use crate::auth::{Caller, CapabilityRefusal, CapabilityStore, OperatorToken, CAPABILITY_PREFIX};
use crate::error::ToolError;
use crate::invocation::{CallContext, Invocation};
use crate::ratelimit::Limits;
use crate::registry::{Registry, ToolOutput};
use crate::surface::Surface;
use protocol::{ErrorKind, ToolEntry};

/// Why the server refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("no operator token: set the environment variable {env_name} (or, on a loopback bind only, toolserver.insecure_no_auth = true)")]
    NoOperatorToken { env_name: String },
    #[error("toolserver.insecure_no_auth needs a loopback bind, but bind is {bind}")]
    InsecureNotLoopback { bind: SocketAddr },
    #[error("cannot listen on {bind}: {source} (is another switchboard running? pick another toolserver.bind, or --port for the playground)")]
    Bind {
        bind: SocketAddr,
        source: std::io::Error,
    },
}

/// Everything a call needs, shared by the HTTP front and in-process callers.
pub struct Core {
    pub(crate) surface: Arc<dyn Surface>,
    pub(crate) aliases: Aliases,
    pub(crate) alias_comments: AliasComments,
    pub(crate) allowlist: Arc<Allowlist>,
    pub(crate) limits: Limits,
    pub(crate) registry: Registry,
    pub(crate) allow_role_mentions: bool,
    pub(crate) rendered: crate::render::RenderCache,
    pub capabilities: CapabilityStore,
    pub(crate) download_max_bytes: u64,
    pub(crate) max_parts_per_send: usize,
    pub(crate) workflows: std::sync::OnceLock<Arc<crate::workflow::WorkflowEngine>>,
    operator: Option<OperatorToken>,
    refusals: crate::refusals::RefusalLog,
    call_timeout: Duration,
    permits: Semaphore,
    /// Connection cap and timeouts for the HTTP front.
    pub(crate) connection_limits: crate::connections::Limits,
}

impl Core {
    /// Builds the core; refuses to run without an operator token unless the operator opted into
    /// `insecure_no_auth` on a loopback bind.
    pub fn new(
        config: &Config,
        surface: Arc<dyn Surface>,
        operator_token: Option<String>,
    ) -> Result<Core, StartError> {
        let operator_token = operator_token.filter(|t| !t.trim().is_empty());
        let ts = &config.toolserver;
        if operator_token.is_none() {
            if !ts.insecure_no_auth {
                return Err(StartError::NoOperatorToken {
                    env_name: ts.operator_token_env.clone(),
                });
            }
            if !ts.bind.ip().is_loopback() {
                return Err(StartError::InsecureNotLoopback { bind: ts.bind });
            }
            tracing::warn!(
                bind = %ts.bind,
                "tool server runs WITHOUT authentication (toolserver.insecure_no_auth = true); anyone on this machine can call it"
            );
        }
        let mut registry = Registry::new();
        crate::callables::register_all(&mut registry);
        Ok(Core {
            surface,
            aliases: config.aliases.clone(),
            alias_comments: config.alias_comments.clone(),
            allowlist: Arc::new(Allowlist::new(&config.discord)),
            limits: Limits::new(&ts.rate_limits),
            registry,
            allow_role_mentions: config.discord.allow_role_mentions,
            rendered: crate::render::RenderCache::new(),
            capabilities: CapabilityStore::new(),
            download_max_bytes: ts.download_max_bytes,
            max_parts_per_send: ts.max_parts_per_send,
            workflows: std::sync::OnceLock::new(),
            operator: operator_token.as_deref().map(OperatorToken::new),
            refusals: crate::refusals::RefusalLog::new(),
            call_timeout: ts.call_timeout,
            permits: Semaphore::new(ts.max_concurrent_calls),
            connection_limits: crate::connections::Limits::from_config(ts),
        })
    }

    pub fn surface(&self) -> &Arc<dyn Surface> {
        &self.surface
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// `toolserver.max_parts_per_send`: the most messages one send may post.
    pub fn max_parts_per_send(&self) -> usize {
        self.max_parts_per_send
    }

    /// The allowlist every call is checked against; the bot applies the same one at ingest,
    /// so nothing from a channel the agent may not see is stored.
    pub fn allowlist(&self) -> &Arc<Allowlist> {
        &self.allowlist
    }

    /// Turns the `workflow.*` callables on (they answer `unavailable` until then: workflows
    /// resume agent runs, so only a host with an agent bridge provides them). Once only.
    pub fn set_workflows(&self, engine: Arc<crate::workflow::WorkflowEngine>) -> bool {
        self.workflows.set(engine).is_ok()
    }

    pub fn workflows(&self) -> Option<&Arc<crate::workflow::WorkflowEngine>> {
        self.workflows.get()
    }

    /// Whether the allowlist lets the agent act in `channel_id` (the same check every callable
    /// makes; it may look the channel up once).
    pub async fn check_allowed(&self, channel_id: entity::Snowflake) -> Result<(), ToolError> {
        self.allowlist
            .check(self.surface.as_ref(), channel_id)
            .await
            .map(drop)
    }

    /// Who presents `bearer`: the operator, a live capability, or nobody (401).
    pub fn authenticate(&self, bearer: Option<&str>) -> Result<Caller, ToolError> {
        let Some(token) = bearer.map(str::trim).filter(|t| !t.is_empty()) else {
            return match self.operator {
                None => Ok(Caller::Unauthenticated),
                Some(_) => Err(ToolError::unauthenticated(
                    ErrorCode::MissingToken,
                    "No token: send Authorization: Bearer <token> (the tools CLI reads SWITCHBOARD_TOKEN)",
                )),
            };
        };
        if token.starts_with(CAPABILITY_PREFIX) {
            return self
                .capabilities
                .resolve(token)
                .map(Caller::Capability)
                .map_err(|refusal| match refusal {
                    CapabilityRefusal::Expired => ToolError::unauthenticated(
                        ErrorCode::TokenExpired,
                        "This capability token has expired; its run is over",
                    ),
                    CapabilityRefusal::Unknown => ToolError::unauthenticated(
                        ErrorCode::InvalidToken,
                        "This capability token is not valid (revoked, or never issued)",
                    ),
                });
        }
        match &self.operator {
            Some(operator) if operator.matches(token) => Ok(Caller::Operator),
            _ => Err(ToolError::unauthenticated(
                ErrorCode::InvalidToken,
                "The token is not valid for this server",
            )),
        }
    }

    /// The callables this caller may call.
    pub fn tools_for(&self, caller: &Caller) -> Vec<ToolEntry> {
        self.registry
            .iter()
            .filter(|tool| caller.may_call(&tool.entry().id))
            .map(|tool| tool.entry().clone())
            .collect()
    }

    /// One call through the whole policy path: scope, per-caller rate limit, concurrency cap,
    /// input validation, the handler (which applies the allowlist and channel limits), timeout.
    /// Every call is a DEBUG line (target `audit`); refusals are also an INFO line, at most
    /// one per caller and code every few seconds, with how many there were.
    pub async fn call(
        &self,
        context: &CallContext,
        tool_id: &str,
        input: Value,
    ) -> Result<ToolOutput, ToolError> {
        let started = Instant::now();
        let result = self.call_inner(context, tool_id, input).await;
        let ms = started.elapsed().as_millis() as u64;
        let caller = context.caller.key();
        let (outcome, code) = match &result {
            Ok(_) => ("ok", ""),
            Err(error) => (error.kind.as_str(), error.code.as_str()),
        };
        tracing::debug!(
            target: "audit",
            caller = %caller,
            tool = tool_id,
            session = context.session_ref.as_deref().unwrap_or("-"),
            request = context.request_id.as_deref().unwrap_or("-"),
            tool_call = context.tool_call_id.as_deref().unwrap_or("-"),
            outcome,
            code,
            ms,
            "call"
        );
        if let Err(error) = &result {
            if matches!(error.kind, ErrorKind::Denied | ErrorKind::Unavailable) {
                if let Some(count) = self.refusals.record(&caller, error.code.as_str(), started) {
                    tracing::info!(
                        target: "audit",
                        caller = %caller,
                        tool = tool_id,
                        code = %error.code,
                        count,
                        "refused {count} call(s) from {caller} ({}) since the last line like this",
                        error.code
                    );
                }
            }
        }
        result
    }

    async fn call_inner(
        &self,
        context: &CallContext,
        tool_id: &str,
        input: Value,
    ) -> Result<ToolOutput, ToolError> {
        let tool = match self.registry.get(tool_id) {
            Some(tool) if context.caller.may_call(tool_id) => Arc::clone(tool),
            // A callable outside the caller's scope looks like any other it may not call.
            Some(_) => {
                return Err(ToolError::denied(
                    ErrorCode::OutOfScope,
                    format!("'{tool_id}' is outside this token's tool scope"),
                ))
            }
            None => return Err(self.registry.unknown(tool_id)),
        };
        self.limits.check_caller(&context.caller.key(), tool_id)?;
        let _permit = self.permits.try_acquire().map_err(|_| {
            ToolError::new(
                ErrorKind::Unavailable,
                ErrorCode::Busy,
                "The tool server is at its concurrent call limit; retry shortly",
            )
            .with_retry_after(Duration::from_secs(1))
        })?;
        let invocation = Invocation {
            core: self,
            context,
            tool_id,
            mutating: tool.entry().mutating,
        };
        match tokio::time::timeout(self.call_timeout, tool.call(&invocation, input)).await {
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

    /// Forgets expired capability tokens and recovered rate-limit keys.
    pub fn prune(&self) {
        self.capabilities.prune_expired();
        self.limits.prune();
        self.refusals.prune(Instant::now());
    }
}
