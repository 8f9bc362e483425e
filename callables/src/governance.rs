//! The operator callables that exist so far: `approvals.decide` (an approver's yes or no) and
//! `admin.tools.set` (a session's tool scope). Every front that decides or changes — the
//! console, Discord's buttons and `/tools`, the API, the CLI, MCP — calls them, so each decision
//! and change passes the pipeline and is audited like any call. An agent run never gets them
//! (not even with `tool_scope = ["*"]`); a named token only when its scope names them.

use async_trait::async_trait;
use protocol::{Effects, ErrorCode};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::approvals::{ApprovalCard, Decider};
use crate::auth::Caller;
use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext};
use crate::registry::{
    example, output, output_schema, Planned, SessionRequest, Tool, ToolOutput, ToolSpec,
};
use crate::scopes::{ScopeChange, ScopeError, SessionTools};

pub struct DecideApproval;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DecideInput {
    /// The approval's id (`apr_...`), as its card, `GET /v1/approvals` or the console show it.
    pub approval_id: String,
    /// `true` approves (the waiting call runs), `false` denies it.
    pub approve: bool,
}

/// The longest approval id taken (`apr_` and 32 hex digits; older ids had 16).
const MAX_APPROVAL_ID: usize = 64;

/// `approvals.decide`'s answer: the card as decided.
#[derive(Serialize, JsonSchema)]
struct Decided {
    /// The approval, now approved or denied, with who decided (`by`).
    approval: ApprovalCard,
}

#[async_trait]
impl Tool for DecideApproval {
    type Input = DecideInput;
    type Plan = DecideInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "approvals.decide",
            title: "Decide an approval",
            description: "Approve or deny a call that waits for an approver.",
            help: "An operator callable: the operator, a token whose scope names it (approvals.decide, approvals.*, *), or an approver's button in Discord. Nobody decides an ask their own call or run waits on (permissions.allow_self_approval). With permissions.console_approves = false only Discord's buttons decide. The answer is the card as decided; decidedBy names who decided.",
            mutating: true,
            primary: Some("approvalId"),
            effects: Effects::ADD,
            output_schema: Some(output_schema::<Decided>()),
            examples: vec![example(
                "Approve a waiting send",
                "tools approvals.decide apr_0123456789abcdef0123456789abcdef --approve=true",
                json!({"approvalId": "apr_0123456789abcdef0123456789abcdef", "approve": true}),
            )],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: DecideInput,
    ) -> Result<Planned<DecideInput>, ToolError> {
        let id = input.approval_id.trim();
        if !super::prefixed_hex(id, "apr_", MAX_APPROVAL_ID) {
            return Err(ToolError::usage(
                ErrorCode::InvalidInput,
                "approvalId: an approval id is apr_ followed by hex digits, as its card shows it",
            ));
        }
        Ok(Planned::nowhere(DecideInput {
            approval_id: id.to_owned(),
            approve: input.approve,
        }))
    }

    async fn run(&self, cx: &Invocation<'_>, plan: DecideInput) -> Result<ToolOutput, ToolError> {
        let caller = &cx.context.caller;
        let decider = Decider::of(caller, cx.context.front);
        // A Discord click is answered with the redrawn card; every other front has the card's
        // message edited here.
        let redraw = !matches!(caller, Caller::Discord(_));
        let card = cx
            .core
            .approvals()
            .decide(
                cx.surface(),
                &plan.approval_id,
                &decider,
                plan.approve,
                redraw,
            )
            .await?;
        tracing::info!(approval = %card.id, approve = plan.approve, by = %decider.decided_by(), "approval decided");
        output(&Decided { approval: card })
    }
}

pub struct SetSessionTools;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SetToolsInput {
    /// The session whose runs the change binds (alias like `#ops`, or id).
    pub session_id: String,
    /// `enable`, `disable`, `set` or `reset`.
    pub action: String,
    /// For enable and disable: one callable or glob; for set: `all`, `none`, or callables and
    /// globs separated by commas.
    pub tools: Option<String>,
}

#[async_trait]
impl Tool for SetSessionTools {
    type Input = SetToolsInput;
    type Plan = ScopeChange;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "admin.tools.set",
            title: "Change a session's tools",
            description: "Change which callables agent runs in a session may use (what /tools does).",
            help: "An operator callable: the operator, a token whose scope names it (admin.tools.set, admin.*, *), or a discord.admins user's /tools. The change holds from the next call, a run in progress included, and survives restarts; reset goes back to the config's [sessions.*] tool_scope. Globs are expanded once against the callables that exist, so a new callable never widens an override.",
            mutating: true,
            primary: None,
            effects: Effects::OVERWRITE,
            output_schema: Some(output_schema::<SessionTools>()),
            examples: vec![
                example(
                    "No sends from runs in #ops",
                    "tools admin.tools.set --session-id=#ops --action=disable --tools=surface.messages.send",
                    json!({"sessionId": "#ops", "action": "disable", "tools": "surface.messages.send"}),
                ),
                example(
                    "Back to the config",
                    "tools admin.tools.set --session-id=#ops --action=reset",
                    json!({"sessionId": "#ops", "action": "reset"}),
                ),
            ],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: SetToolsInput,
    ) -> Result<Planned<ScopeChange>, ToolError> {
        let change = ScopeChange::parse(&input.action, input.tools.as_deref())
            .map_err(|error| ToolError::usage(ErrorCode::InvalidInput, error.to_string()))?;
        Ok(Planned::in_session(
            change,
            SessionRequest::session_id(Some(&input.session_id), 0),
        ))
    }

    async fn run(&self, cx: &Invocation<'_>, change: ScopeChange) -> Result<ToolOutput, ToolError> {
        if let Caller::Discord(user) = &cx.context.caller {
            let admins = &cx.settings().config().discord.admins;
            if admins.is_empty()
                || !switchboard_config::any_principal_matches(admins, user.id, &user.roles)
            {
                return Err(ToolError::denied(
                    ErrorCode::NotAdmin,
                    "Only admins (discord.admins in the config) can change the tools of a channel; `/tools` alone shows them.",
                ));
            }
        }
        let session = cx.target()?.channel_id();
        let after =
            cx.core
                .set_session_tools(session, &change)
                .await
                .map_err(|error: ScopeError| {
                    ToolError::usage(ErrorCode::InvalidInput, error.to_string())
                })?;
        tracing::info!(%session, caller = %cx.context.caller.key(), ?change, "a session's tool scope changed");
        output(&after)
    }
}

pub struct ListApprovals;

/// Cards an `approvals.list` page holds unless `limit` says otherwise.
const DEFAULT_APPROVALS: u32 = 50;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListApprovalsInput {
    /// `pending` (waiting for a decision), `settled` (approved, denied, expired or withdrawn,
    /// the last 200 since the service started), or `all` (the default: pending first).
    pub state: Option<String>,
    /// Only approvals of calls acting in this session (alias like `#ops`, or id).
    pub session_id: Option<String>,
    /// Only approvals of callables matching this name or glob (`surface.messages.*`).
    pub tool: Option<String>,
    /// At most this many cards (1 to 200, default 50).
    pub limit: Option<u32>,
}

/// Which approvals `approvals.list` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    Pending,
    Settled,
    All,
}

/// `approvals.list`'s checked input.
#[derive(Debug)]
pub struct ApprovalFilter {
    which: Which,
    session: Option<entity::Snowflake>,
    tool: Option<String>,
    limit: usize,
}

impl ApprovalFilter {
    fn matches(&self, card: &ApprovalCard) -> bool {
        self.session.is_none_or(|s| card.session_id == Some(s))
            && self
                .tool
                .as_deref()
                .is_none_or(|glob| crate::auth::glob_matches(glob, &card.tool))
    }
}

/// `approvals.list`'s answer.
#[derive(Serialize, JsonSchema)]
struct ApprovalList {
    /// Pending cards first (the one that expires first first), then settled ones, newest
    /// first. A pending card shows the whole input; a settled one the copy the audit log keeps.
    approvals: Vec<ApprovalCard>,
}

#[async_trait]
impl Tool for ListApprovals {
    type Input = ListApprovalsInput;
    type Plan = ApprovalFilter;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "approvals.list",
            title: "List approvals",
            description: "List the approvals waiting for a decision and the ones settled lately.",
            help: "An operator callable: the operator, or a token whose scope names it (approvals.list, approvals.*, *); an agent run never. Pending cards show the whole input an approver decides on; settled ones (the last 200 since the service started) show what the audit log keeps. Decide one with approvals.decide.",
            mutating: false,
            primary: None,
            effects: Effects::LOCAL_READ,
            output_schema: Some(output_schema::<ApprovalList>()),
            examples: vec![example(
                "What waits for a decision",
                "tools approvals.list --state=pending",
                json!({"state": "pending"}),
            )],
        }
    }

    fn plan(
        &self,
        cx: &PlanContext<'_>,
        input: ListApprovalsInput,
    ) -> Result<Planned<ApprovalFilter>, ToolError> {
        let which = match input.state.as_deref().map(str::trim) {
            None | Some("all") => Which::All,
            Some("pending") => Which::Pending,
            Some("settled") => Which::Settled,
            Some(other) => {
                return Err(ToolError::usage(
                    ErrorCode::InvalidInput,
                    format!("state must be pending, settled or all, got '{other}'"),
                ))
            }
        };
        let limit = input.limit.unwrap_or(DEFAULT_APPROVALS);
        if !(1..=crate::approvals::RECENT_KEPT as u32).contains(&limit) {
            return Err(ToolError::usage(
                ErrorCode::InvalidInput,
                format!(
                    "limit must be between 1 and {}, got {limit}",
                    crate::approvals::RECENT_KEPT
                ),
            ));
        }
        Ok(Planned::nowhere(ApprovalFilter {
            which,
            session: filter_session(cx, input.session_id.as_deref())?,
            tool: input.tool.map(|t| t.trim().to_owned()),
            limit: limit as usize,
        }))
    }

    async fn run(
        &self,
        cx: &Invocation<'_>,
        filter: ApprovalFilter,
    ) -> Result<ToolOutput, ToolError> {
        let approvals = cx.core.approvals();
        let pending = match filter.which {
            Which::Settled => Vec::new(),
            Which::Pending | Which::All => approvals.pending(),
        };
        let settled = match filter.which {
            Which::Pending => Vec::new(),
            Which::Settled | Which::All => approvals.recently_settled(),
        };
        let approvals = pending
            .into_iter()
            .chain(settled)
            .filter(|card| filter.matches(card))
            .take(filter.limit)
            .collect();
        output(&ApprovalList { approvals })
    }
}

/// A session named only to filter a listing: resolved, never allowlisted (what it lists may
/// be from before the allowlist changed).
pub(super) fn filter_session(
    cx: &PlanContext<'_>,
    reference: Option<&str>,
) -> Result<Option<entity::Snowflake>, ToolError> {
    reference
        .map(str::trim)
        .filter(|reference| !reference.is_empty())
        .map(|reference| {
            cx.mapper().resolve_session(reference).map_err(|error| {
                ToolError::usage(ErrorCode::UnknownSession, format!("sessionId: {error}"))
            })
        })
        .transpose()
}

pub struct ReloadConfig;

/// `admin.reload` takes nothing.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReloadInput {}

#[async_trait]
impl Tool for ReloadConfig {
    type Input = ReloadInput;
    type Plan = ();

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "admin.reload",
            title: "Reload the config",
            description: "Read the config file again and put it in force when it has no problem (what SIGHUP does).",
            help: "An operator callable: the operator, or a token whose scope names it (admin.reload, admin.*, *); an agent run never. The answer lists what changed and the settings that wait for a restart; a file with problems answers invalid_config with each problem located (file:line:col) in details.problems, and the config in force does not change.",
            mutating: true,
            primary: None,
            effects: Effects::LOCAL_READ,
            output_schema: Some(output_schema::<crate::live::Reloaded>()),
            examples: vec![example(
                "Put an edited config in force",
                "tools admin.reload",
                json!({}),
            )],
        }
    }

    fn plan(&self, _: &PlanContext<'_>, _: ReloadInput) -> Result<Planned<()>, ToolError> {
        Ok(Planned::nowhere(()))
    }

    async fn run(&self, cx: &Invocation<'_>, (): ()) -> Result<ToolOutput, ToolError> {
        let Some(reloader) = cx.core.reloader() else {
            // Not a failure to retry: this server has no config file, and never will.
            return Err(ToolError::not_found(
                ErrorCode::ReloadUnavailable,
                "This server was not started from a config file, so there is nothing to reload",
            ));
        };
        match reloader.reload(crate::live::ReloadTrigger::Request).await {
            Ok(reloaded) => output(&reloaded),
            Err(refused) => Err(ToolError::usage(
                ErrorCode::InvalidConfig,
                format!(
                    "{} has {} problem{}; the config in force did not change. Fix them (switchboard check-config lists them) and reload again",
                    refused.file,
                    refused.problems.len(),
                    if refused.problems.len() == 1 { "" } else { "s" }
                ),
            )
            .with_status(http::StatusCode::UNPROCESSABLE_ENTITY)
            .with_details(json!({ "file": refused.file, "problems": refused.problems }))),
        }
    }
}
