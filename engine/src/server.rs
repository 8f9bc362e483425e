//! The tool server's core: what every call needs (the surface, aliases, allowlist, limits,
//! registry, tokens), authentication, and start-up. The pipeline each call takes is in
//! [`crate::pipeline`].

use protocol::ErrorCode;
use std::net::SocketAddr;
use std::sync::Arc;

use entity::Snowflake;
use switchboard_config::Config;
use tokio::sync::Semaphore;

use crate::allowlist::Allowlist;
use crate::auth::{
    Caller, CapabilityGrant, CapabilityRefusal, CapabilityStore, OperatorToken, TokenEnd,
    CAPABILITY_PREFIX,
};
use crate::error::ToolError;
use crate::live::{Live, Reloader, Settings};
use crate::registry::Registry;
use crate::surface::{AllowedChannel, MentionPolicy, Surface};
use protocol::ToolEntry;

/// Why the server refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// No operator token was given (or it was blank) and `toolserver.insecure_no_auth` is off.
    #[error("no operator token: set the environment variable {env_name} (or, on a loopback bind only, toolserver.insecure_no_auth = true)")]
    NoOperatorToken {
        /// The variable the token is read from (`toolserver.operator_token_env`).
        env_name: String,
    },
    /// `toolserver.insecure_no_auth` is on without an operator token, but the server would
    /// listen beyond loopback.
    #[error("toolserver.insecure_no_auth needs a loopback bind, but bind is {bind}")]
    InsecureNotLoopback {
        /// The configured `toolserver.bind`.
        bind: SocketAddr,
    },
    /// The tool server cannot listen on `toolserver.bind` (the address is taken, or not this
    /// machine's).
    #[error("cannot listen on {bind}: {source} (is another switchboard running? pick another toolserver.bind, or --port for the playground)")]
    Bind {
        /// The configured `toolserver.bind`.
        bind: SocketAddr,
        /// The operating system's error.
        source: std::io::Error,
    },
}

/// The secrets the tool server checks callers against, read from the environment variables
/// the config names.
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    /// The operator token (`toolserver.operator_token_env`).
    pub operator: Option<String>,
    /// Each named token's value, by its name (`[[toolserver.tokens]]` `token_env`).
    pub tokens: Vec<(String, String)>,
}

impl Secrets {
    /// Reads every secret the config names from the environment (`env` answers a variable).
    pub fn from_env(config: &Config, env: impl Fn(&str) -> Option<String>) -> Secrets {
        Secrets {
            operator: env(&config.toolserver.operator_token_env),
            tokens: config
                .toolserver
                .tokens
                .iter()
                .filter_map(|token| env(&token.token_env).map(|value| (token.name.clone(), value)))
                .collect(),
        }
    }
}

impl From<Option<String>> for Secrets {
    /// Only an operator token.
    fn from(operator: Option<String>) -> Self {
        Secrets {
            operator,
            tokens: Vec::new(),
        }
    }
}

/// Everything a call needs, shared by the HTTP front and in-process callers.
pub struct Core {
    pub(crate) surface: Arc<dyn Surface>,
    /// What the config says, as of the last (re)load: each call takes it once.
    settings: Live<Settings>,
    /// Serializes [`Core::apply`]s, so settings and the parts' own cells change together.
    applying: std::sync::Mutex<()>,
    pub(crate) allowlist: Arc<Allowlist>,
    pub(crate) registry: Registry,
    pub(crate) rendered: crate::render::RenderCache,
    pub(crate) capabilities: Arc<CapabilityStore>,
    /// Capabilities across nodes, once [`Core::with_store`] gave the core its store.
    shared_capabilities: std::sync::OnceLock<Arc<crate::shared_capabilities::SharedCapabilities>>,
    pub(crate) workflows: std::sync::OnceLock<Arc<crate::workflow::WorkflowEngine>>,
    operator: Option<OperatorToken>,
    named_tokens: Vec<crate::auth::NamedToken>,
    pub(crate) governance: crate::governance::Governance,
    pub(crate) approvals: crate::approvals::Approvals,
    pub(crate) refusals: crate::refusals::RefusalLog,
    /// What `POST /v1/admin/reload` runs, once the host installed it.
    reloader: std::sync::OnceLock<Arc<dyn Reloader>>,
    /// This node in its cluster (`/health`, `admin.cluster.status`), once the host installed it.
    node: std::sync::OnceLock<Arc<dyn crate::cluster::NodeView>>,
    /// The agent's runs (`runs.list`, `runs.abort`), once the host installed them.
    runs: std::sync::OnceLock<Arc<dyn crate::runs::Runs>>,
    scheduling: std::sync::OnceLock<Arc<crate::schedules::Scheduling>>,
    usage: std::sync::OnceLock<Arc<dyn switchboard_store::UsageStore>>,
    /// Where `Idempotency-Key`s and their answers are kept: the composition root's store,
    /// else (tests, a core nobody handed one) one in this process's memory.
    idempotency: std::sync::OnceLock<Arc<dyn switchboard_store::IdempotencyStore>>,
    /// Where the agent's notes and sessions' summaries are kept (`memory.*`).
    memory: std::sync::OnceLock<Arc<dyn switchboard_store::MemoryStore>>,
    pub(crate) permits: Semaphore,
    /// The live feed (`GET /v1/events`).
    pub(crate) events: Arc<crate::events::EventHub>,
    /// The counters `GET /metrics` shows.
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    /// The agent's workspaces (`[workspace]`) and the sandbox their commands run in.
    pub(crate) workspaces: crate::workspaces::Workspaces,
    /// The chat API's API-only sessions used since the start.
    api_sessions: crate::api_sessions::ApiSessions,
}

impl Core {
    /// Builds the core over the callables in `registry` (the composition root hands it the
    /// catalogue; the engine knows none); refuses to run without an operator token unless the
    /// operator opted into `insecure_no_auth` on a loopback bind.
    pub fn new(
        config: &Config,
        surface: Arc<dyn Surface>,
        secrets: Secrets,
        registry: Registry,
    ) -> Result<Core, StartError> {
        let operator_token = secrets.operator.filter(|t| !t.trim().is_empty());
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
        let named_tokens = config
            .toolserver
            .tokens
            .iter()
            .filter_map(|token| {
                let value = secrets
                    .tokens
                    .iter()
                    .find(|(name, _)| *name == token.name)
                    .map(|(_, value)| value.trim())
                    .filter(|value| !value.is_empty());
                if value.is_none() {
                    tracing::warn!(
                        token = %token.name,
                        env = %token.token_env,
                        "named token has no value (its environment variable is unset or empty); it cannot be used"
                    );
                }
                value.map(|value| {
                    crate::auth::NamedToken::new(value, &token.name, token.scope.clone())
                })
            })
            .collect();
        // Until the composition root hands it the service's store: one in memory.
        let store = Arc::new(switchboard_store::MemoryBackend::new(
            switchboard_store::MemoryOptions::default(),
        ));
        let settings = Settings::new(config.clone());
        let governance = crate::governance::Governance::new(
            config.permissions.clone(),
            config.aliases.clone(),
            [],
            [],
            store.clone(),
            store.clone(),
        );
        governance.set_rules(Arc::clone(&settings.governance));
        let approvals = crate::approvals::Approvals::new(&config.permissions, store.clone(), store);
        let events = Arc::new(crate::events::EventHub::new());
        Ok(Core {
            workspaces: crate::workspaces::Workspaces::new(Arc::clone(&events)),
            api_sessions: crate::api_sessions::ApiSessions::default(),
            named_tokens,
            governance,
            approvals,
            surface,
            allowlist: Arc::new(Allowlist::with_rules((*settings.allow).clone())),
            settings: Live::new(settings),
            applying: std::sync::Mutex::new(()),
            registry,
            rendered: crate::render::RenderCache::new(),
            capabilities: Arc::new(CapabilityStore::new()),
            shared_capabilities: std::sync::OnceLock::new(),
            workflows: std::sync::OnceLock::new(),
            operator: operator_token.as_deref().map(OperatorToken::new),
            refusals: crate::refusals::RefusalLog::new(),
            reloader: std::sync::OnceLock::new(),
            runs: std::sync::OnceLock::new(),
            node: std::sync::OnceLock::new(),
            scheduling: std::sync::OnceLock::new(),
            usage: std::sync::OnceLock::new(),
            idempotency: std::sync::OnceLock::new(),
            memory: std::sync::OnceLock::new(),
            permits: Semaphore::new(ts.max_concurrent_calls),
            events,
            metrics: Arc::new(crate::metrics::Metrics::new()),
        })
    }

    /// The chat platform every call acts on.
    pub fn surface(&self) -> &Arc<dyn Surface> {
        &self.surface
    }

    /// Every callable this server offers, with its schema and help.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// `toolserver.max_parts_per_send`: the most messages one send may post.
    pub fn max_parts_per_send(&self) -> usize {
        self.settings().config().toolserver.max_parts_per_send
    }

    /// The settings in force now. A caller that reads several of them takes this once and
    /// keeps it, so a reload in between cannot mix two configs.
    pub fn settings(&self) -> Arc<Settings> {
        self.settings.load()
    }

    /// Puts a reloaded config in force for the next call: aliases, the allowlist, permission
    /// rules and approvers, session scopes, rate limits (their budgets carry over unless the
    /// quotas changed), hooks, audit and send settings. Calls in flight finish with the
    /// settings they started with. `config` should come from
    /// [`switchboard_config::plan_reload`], which keeps what only a restart can change (the
    /// listener, tokens, the concurrency cap) at its running value; this does not apply those.
    pub fn apply(&self, config: Config) -> Arc<Settings> {
        let _one_at_a_time = self
            .applying
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let next = Arc::new(self.settings.load().next(config));
        // The parts read by the bot and the agent outside a call first, then the snapshot
        // calls take: a call that starts after this sees every part new.
        self.allowlist.set_rules(Arc::clone(&next.allow));
        self.governance.set_rules(Arc::clone(&next.governance));
        self.approvals.set_policy(&next.config().permissions);
        self.settings.store(Arc::clone(&next));
        // Once every part is new: what was worked out from the old settings goes.
        self.governance.changed();
        next
    }

    /// Installs what `POST /v1/admin/reload` runs (the host knows the config file). Once only.
    pub fn set_reloader(&self, reloader: Arc<dyn Reloader>) -> bool {
        self.reloader.set(reloader).is_ok()
    }

    /// What `POST /v1/admin/reload` runs; `None` when the host installed nothing.
    pub fn reloader(&self) -> Option<&Arc<dyn Reloader>> {
        self.reloader.get()
    }

    /// Installs this node's view (`/health`'s node, store and shards; `admin.cluster.status`).
    /// Once only.
    pub fn set_node(&self, node: Arc<dyn crate::cluster::NodeView>) -> bool {
        self.node.set(node).is_ok()
    }

    /// This node's view; `None` without Discord behind this server.
    pub fn node(&self) -> Option<&Arc<dyn crate::cluster::NodeView>> {
        self.node.get()
    }

    /// Installs the agent's runs: `runs.list` and `runs.abort` (and the console's runs panel)
    /// answer `no_agent` until then. Once only.
    pub fn set_runs(&self, runs: Arc<dyn crate::runs::Runs>) -> bool {
        self.runs.set(runs).is_ok()
    }

    /// Installs the schedules the `schedule.*` callables serve (they answer
    /// `schedules_unavailable` until then). Once only.
    pub fn set_scheduling(&self, scheduling: Arc<crate::schedules::Scheduling>) -> bool {
        self.scheduling.set(scheduling).is_ok()
    }

    /// The schedules, once [`Core::set_scheduling`] installed them.
    pub fn scheduling(&self) -> Option<&Arc<crate::schedules::Scheduling>> {
        self.scheduling.get()
    }

    /// Installs where model usage is kept: `usage.report` answers `usage_unavailable` until
    /// then. Once only.
    pub fn set_usage(&self, usage: Arc<dyn switchboard_store::UsageStore>) -> bool {
        self.usage.set(usage).is_ok()
    }

    /// Where model usage is kept, once [`Core::set_usage`] installed it.
    pub fn usage(&self) -> Option<&Arc<dyn switchboard_store::UsageStore>> {
        self.usage.get()
    }

    /// The agent's runs, once [`Core::set_runs`] installed them.
    pub fn runs(&self) -> Option<&Arc<dyn crate::runs::Runs>> {
        self.runs.get()
    }

    /// Keeps `Idempotency-Key`s in `store` (the service's store, so a key holds across
    /// restarts). Once only, before the first keyed call.
    pub fn set_idempotency(&self, store: Arc<dyn switchboard_store::IdempotencyStore>) -> bool {
        self.idempotency.set(store).is_ok()
    }

    /// Keeps the agent's notes (`memory.*`) in `store`. Once only, before the first call.
    pub fn set_memory(&self, store: Arc<dyn switchboard_store::MemoryStore>) -> bool {
        self.memory.set(store).is_ok()
    }

    /// Where the agent's notes are kept: the store [`Core::set_memory`] installed, else one
    /// in memory.
    pub fn memory(&self) -> &Arc<dyn switchboard_store::MemoryStore> {
        self.memory.get_or_init(|| {
            Arc::new(switchboard_store::MemoryBackend::new(
                switchboard_store::MemoryOptions::default(),
            ))
        })
    }

    /// Where idempotency keys are kept: the store [`Core::set_idempotency`] installed, else
    /// one in memory.
    pub fn idempotency(&self) -> &Arc<dyn switchboard_store::IdempotencyStore> {
        self.idempotency.get_or_init(|| {
            Arc::new(switchboard_store::MemoryBackend::new(
                switchboard_store::MemoryOptions::default(),
            ))
        })
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

    /// The workflow engine, once [`Core::set_workflows`] installed one; `None` before.
    pub fn workflows(&self) -> Option<&Arc<crate::workflow::WorkflowEngine>> {
        self.workflows.get()
    }

    /// [`Core::authenticate`] for a request that may reach any node of a cluster: a capability
    /// token minted on another node is read from the shared store (then served from a cache
    /// for at most [`RECHECK`](crate::shared_capabilities::RECHECK), so an end written on
    /// any node is refused here within a second). What this node knows is answered at once.
    pub async fn authenticate_shared(&self, bearer: Option<&str>) -> Result<Caller, ToolError> {
        let here = self.authenticate(bearer);
        let (Err(_), Some(token), Some(shared)) =
            (&here, bearer.map(str::trim), self.shared_capabilities.get())
        else {
            return here;
        };
        if !shared.active()
            || !crate::shared_capabilities::well_formed(token)
            || !matches!(
                self.capabilities.resolve(token),
                Err(CapabilityRefusal::Unknown)
            )
        {
            return here;
        }
        match shared.resolve(crate::auth::digest(token)).await {
            Ok(capability) => Ok(Caller::Capability(capability)),
            Err(crate::shared_capabilities::Unresolved::Refused(refusal)) => {
                Err(capability_refused(refusal))
            }
            Err(crate::shared_capabilities::Unresolved::Unavailable(why)) => {
                Err(ToolError::store_unavailable(format!(
                    "This capability token was minted on another node, and the store that shares it cannot be read now ({why}); try again shortly"
                )))
            }
        }
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
            return match self.capabilities.resolve(token) {
                Ok(capability) => Ok(Caller::Capability(capability)),
                // Minted on another node and read from the store a moment ago.
                Err(CapabilityRefusal::Unknown) => self
                    .shared_capabilities
                    .get()
                    .and_then(|shared| shared.fresh(&crate::auth::digest(token)))
                    .map(Caller::Capability)
                    .ok_or_else(|| capability_refused(CapabilityRefusal::Unknown)),
                Err(refusal) => Err(capability_refused(refusal)),
            };
        }
        if let Some(operator) = &self.operator {
            if operator.matches(token) {
                return Ok(Caller::Operator);
            }
        }
        let presented = crate::auth::token_digest(token);
        // Every named token is compared (in constant time), so timing says nothing of which.
        let named = self
            .named_tokens
            .iter()
            .fold(None, |found, named| match found {
                None if named.matches(&presented) => Some(Arc::clone(&named.caller)),
                other => other,
            });
        match named {
            Some(caller) => Ok(Caller::Token(caller)),
            None => Err(ToolError::unauthenticated(
                ErrorCode::InvalidToken,
                "The token is not valid for this server",
            )),
        }
    }

    /// Whether `caller` may see and call `tool_id` (the one answer to that question: lists,
    /// stage 2 of the pipeline, `GET /v1/tools/ID`, MCP and the console all ask this): its own
    /// scope ([`Caller::scope_allows`]), and for an agent run its session's scope too
    /// ([`crate::governance::Governance::session_allows`]). `workflow.*` is out of everyone's
    /// scope while no workflow engine is installed (no agent can resume a workflow), so it is
    /// absent from the lists instead of failing.
    pub fn may_call(&self, caller: &Caller, tool_id: &str) -> bool {
        !self.workflows_missing(tool_id)
            && caller.scope_allows(tool_id)
            && self.governance.session_allows(caller, tool_id)
    }

    /// Whether `tool_id` is a `workflow.*` callable and no engine is installed.
    pub(crate) fn workflows_missing(&self, tool_id: &str) -> bool {
        tool_id.starts_with("workflow.") && self.workflows.get().is_none()
    }

    /// The callables this caller may call.
    pub fn tools_for(&self, caller: &Caller) -> Vec<ToolEntry> {
        self.registry
            .entries()
            .filter(|entry| self.may_call(caller, &entry.id))
            .cloned()
            .collect()
    }

    /// Governance: scopes, rules, where the audit log is kept.
    pub fn governance(&self) -> &crate::governance::Governance {
        &self.governance
    }

    /// The agent's workspaces and their sandbox.
    pub fn workspaces(&self) -> &crate::workspaces::Workspaces {
        &self.workspaces
    }

    /// Installs the workspace's sandbox as [`crate::workspaces::probe`] found it (once, at
    /// start): until then `shell.*`, `git.*` and `workspace.undo` answer `unavailable`.
    pub fn install_sandbox(&self, state: crate::workspaces::SandboxState) {
        self.workspaces.install(state);
    }

    /// The live feed every part publishes to (`GET /v1/events`).
    pub fn events(&self) -> &Arc<crate::events::EventHub> {
        &self.events
    }

    /// The hub and the counters together, for the parts outside the pipeline.
    pub fn observers(&self) -> crate::events::Observers {
        crate::events::Observers {
            events: Arc::clone(&self.events),
            metrics: Arc::clone(&self.metrics),
        }
    }

    /// The Prometheus exposition `GET /metrics` answers: every counter, with the gauges read
    /// now (pending approvals, event subscribers, the gateway's state).
    pub fn exposition(&self) -> String {
        self.metrics.exposition(crate::metrics::Gauges {
            approvals_pending: self.approvals.pending().len(),
            subscribers: self.events.subscribers(),
            subscribers_dropped: self.events.dropped(),
            events_lost: self.events.lost(),
            gateway_state: self.surface.connection().as_str(),
        })
    }

    /// The counters every part records to (`GET /metrics`).
    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.metrics
    }

    /// Approvals in progress.
    pub fn approvals(&self) -> &crate::approvals::Approvals {
        &self.approvals
    }

    /// Keeps the audit log, `/tools` overrides and approvals in `store`, starting from the
    /// overrides it kept (`ScopeStore::session_scopes`). Call before the core serves.
    #[must_use]
    pub fn with_store(
        self,
        store: Arc<dyn switchboard_store::Backend>,
        overrides: Vec<(Snowflake, Vec<String>)>,
    ) -> Core {
        let shared = crate::shared_capabilities::SharedCapabilities::new(store.clone());
        if shared.active() {
            crate::shared_capabilities::SharedCapabilities::sweep_while_alive(Arc::downgrade(
                &shared,
            ));
        }
        let _ = self.shared_capabilities.set(shared);
        self.events.keep_in(store.clone(), &*store);
        self.with_stores(
            store.clone(),
            store.clone(),
            store.clone(),
            store,
            overrides,
        )
    }

    /// [`Core::with_store`] with each aggregate from where it is kept: audit rows, `/tools`
    /// overrides (starting from `overrides`), approval requests, and the feed that tells of
    /// decisions made elsewhere.
    #[must_use]
    pub fn with_stores(
        mut self,
        audit: Arc<dyn switchboard_store::AuditStore>,
        scopes: Arc<dyn switchboard_store::ScopeStore>,
        approvals: Arc<dyn switchboard_store::ApprovalStore>,
        feed: Arc<dyn switchboard_store::ChangeFeed>,
        overrides: Vec<(Snowflake, Vec<String>)>,
    ) -> Core {
        self.governance = self.governance.with_stores(audit, scopes, overrides);
        self.approvals = self.approvals.with_store(approvals, feed);
        self
    }

    /// Keeps the audit log in `audit` alone (a benchmark of the pipeline without one, or with
    /// only one). Call after [`Core::with_store`], before the core serves.
    #[must_use]
    pub fn with_audit(mut self, audit: Arc<dyn switchboard_store::AuditStore>) -> Core {
        let scopes = self.governance.scopes().clone();
        self.governance = self.governance.with_stores(audit, scopes, Vec::new());
        self
    }

    /// Mints a capability token for an agent run (bound to its session, request, scope and
    /// working directory); only its digest is kept.
    pub fn mint_capability(&self, grant: CapabilityGrant) -> Result<String, ToolError> {
        let token = self
            .capabilities
            .mint(grant)
            .map_err(|e| ToolError::internal(format!("cannot draw random bytes: {e}")))?;
        // Not `resolve`: it forgets a token minted already expired, which must still answer
        // `token_expired` to its first call.
        if let (Some(shared), Some(capability)) = (
            self.shared_capabilities.get(),
            self.capabilities.kept(&token),
        ) {
            shared.keep(crate::auth::digest(&token), capability);
        }
        Ok(token)
    }

    /// Revokes a capability token, its run finished; true when it was live. A call still
    /// waiting on the run (for an approval) answers `cancelled` (`run_ended`).
    pub fn revoke_capability(&self, token: &str) -> bool {
        self.end_capability(token, TokenEnd::Finished)
    }

    /// Ends a capability token as `how` (its run finished, or was aborted); true when it was
    /// live. Its event streams close; a call waiting on the run answers `cancelled`, and so
    /// does a later call with an aborted run's token.
    /// On a cluster, every node refuses it within a second.
    pub fn end_capability(&self, token: &str, how: TokenEnd) -> bool {
        let Some(shared) = self.shared_capabilities.get() else {
            return self.capabilities.end(token, how);
        };
        let key = crate::auth::digest(token);
        let minted_here = self.capabilities.resolve(token).ok();
        let ended = self.capabilities.end_digest(key, how);
        if let Some(cached) = shared.end(key, minted_here, how) {
            // Refused here at once, before the end reaches the store.
            self.capabilities.remember_end(key, how, cached.expires_at);
            return true;
        }
        ended
    }

    /// The chat API's API-only sessions (`api:<token name>`).
    pub fn api_sessions(&self) -> &crate::api_sessions::ApiSessions {
        &self.api_sessions
    }

    /// The allowlist's verdict on `channel_id`, as the pipeline gives it: an
    /// [`AllowedChannel`] to act in, or the refusal. For the agent bridge's own actions
    /// (reactions, typing) and reads (prompts).
    pub async fn allowed(&self, channel_id: Snowflake) -> Result<AllowedChannel, ToolError> {
        self.allowlist
            .check(self.surface.as_ref(), channel_id)
            .await
            .map(|_| AllowedChannel::checked(channel_id))
    }

    /// Discord text as people read it: `<@id>` as `@name`, `<#id>` as `#token`, with the
    /// configured aliases and the names the platform learned now. The one rendering tools and
    /// prompts share.
    pub fn readable<'a>(&self, content: &'a str) -> std::borrow::Cow<'a, str> {
        let settings = self.settings();
        entity::Mapper::new(settings.aliases(), self.surface.as_ref()).inbound(content)
    }

    /// A session as people are shown it and can type it back (`#ops`, `#release-checklist`,
    /// `#channel_<id>`): [`entity::Mapper::session_reference`] with the aliases in force.
    pub fn session_reference(&self, channel_id: Snowflake) -> String {
        let settings = self.settings();
        entity::Mapper::new(settings.aliases(), self.surface.as_ref()).session_reference(channel_id)
    }

    /// Agent text as Discord markup: `@name` as `<@id>`, `#token` as `<#id>`.
    pub fn discord_markup<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        let settings = self.settings();
        entity::Mapper::new(settings.aliases(), self.surface.as_ref()).outbound(text)
    }

    /// The mention policy posts get: users always, roles when `discord.allow_role_mentions`.
    pub fn mention_policy(&self) -> MentionPolicy {
        mention_policy(&self.settings())
    }

    /// Forgets expired capability tokens and recovered rate-limit keys, and writes the counts
    /// of refusal bursts whose window has ended.
    pub fn prune(&self) {
        self.capabilities.prune_expired();
        if let Some(shared) = self.shared_capabilities.get() {
            shared.prune();
        }
        self.settings().limits.prune();
        self.flush_refusals(false);
    }
}

impl Core {
    /// The pending asks `caller` may read, oldest first: every one when it may decide them
    /// (`approvals.decide` in its scope), else only those its own calls wait on — whatever
    /// id it asks for, another caller's ask is never among them.
    pub fn approvals_visible_to(
        &self,
        caller: &crate::auth::Caller,
    ) -> Vec<crate::approvals::ApprovalCard> {
        let all = self.approvals.pending();
        if self.may_call(caller, "approvals.decide")
            && !matches!(caller, crate::auth::Caller::Discord(_))
        {
            return all;
        }
        let key = caller.key();
        all.into_iter().filter(|card| card.caller == key).collect()
    }
}

/// The answer to a call of an aborted run: `cancelled` (HTTP 499, the CLI's exit 8).
pub fn run_aborted() -> ToolError {
    ToolError::new(
        protocol::ErrorKind::Cancelled,
        ErrorCode::RunAborted,
        "This call's run was aborted (by /abort or the console, or stopped before it could act); nothing was done",
    )
}

/// Why a capability token is refused, as every front answers it (401, or `run_aborted`).
fn capability_refused(refusal: CapabilityRefusal) -> ToolError {
    match refusal {
        CapabilityRefusal::Expired | CapabilityRefusal::Ended(TokenEnd::Expired) => {
            ToolError::unauthenticated(
                ErrorCode::TokenExpired,
                "This capability token has expired; its run is over",
            )
        }
        CapabilityRefusal::Ended(TokenEnd::Finished) => ToolError::unauthenticated(
            ErrorCode::TokenExpired,
            "This capability token's run has finished, so it no longer acts; nothing was done",
        ),
        CapabilityRefusal::Ended(TokenEnd::Aborted) => run_aborted(),
        CapabilityRefusal::Unknown => ToolError::unauthenticated(
            ErrorCode::InvalidToken,
            "This capability token is not valid (revoked, or never issued)",
        ),
    }
}

/// The answer to a call still waiting when its run ended: `cancelled` (exit 8).
pub fn run_ended(how: TokenEnd) -> ToolError {
    match how {
        TokenEnd::Aborted => run_aborted(),
        TokenEnd::Finished | TokenEnd::Expired => ToolError::new(
            protocol::ErrorKind::Cancelled,
            ErrorCode::RunEnded,
            "This call's run ended while the call waited (for an approval), so it was not done; the approval request is withdrawn",
        ),
    }
}

/// The mention policy `settings` give posts: users always, roles when
/// `discord.allow_role_mentions`.
pub fn mention_policy(settings: &Settings) -> MentionPolicy {
    MentionPolicy {
        users: true,
        roles: settings.config().discord.allow_role_mentions,
        replied_user: false,
    }
}
