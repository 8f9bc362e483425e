//! Approvals: a call the rules answer with "ask" waits while a person decides.
//!
//! The pipeline posts an approval card (through the [`Surface`](crate::Surface): in Discord, a
//! message with Approve and Deny buttons) and waits. Only an approver's decision counts; no
//! decision within `permissions.ask_timeout_s` is a denial. Each approval belongs to exactly one
//! waiting call — bound to a hash of what the card shows (its tool, the whole input as the call
//! will run it, its targets and run) — and is used once: a new call, even with the same tool and
//! other text, asks again. An approval left pending when the service stops is settled as
//! expired when it starts again, never as granted.
//!
//! The card shows the whole input, whatever `[audit]` says (the log's cut or hash is for the
//! log; an approver sees everything the call will do). Nobody decides an ask their own call or
//! run waits on — the token or operator that called, or the Discord user whose message started
//! the run — unless `permissions.allow_self_approval` is on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use entity::Snowflake;
use serde_json::Value;
use sha2::{Digest, Sha256};
use switchboard_config::{any_principal_matches, Principal};
use tokio::sync::oneshot;

use switchboard_records::{Approval, Settlement};
use switchboard_store::feed::{Changed, Changes, Next};
use switchboard_store::{ApprovalStore, ChangeFeed, Decided};

use crate::surface::{AllowedChannel, Surface};

pub use switchboard_records::{ApprovalCard, ApprovalState};

/// Who decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decider {
    /// A Discord user clicking a button.
    Discord {
        /// The user.
        user: Snowflake,
        /// Their roles in the guild where they clicked.
        roles: Vec<Snowflake>,
    },
    /// The operator or a named token calling `approvals.decide` (the console does, as the
    /// logged-in caller).
    Caller {
        /// [`Caller::principal`](crate::auth::Caller::principal): `operator`, `token:NAME`.
        principal: String,
        /// Where: `console`, or `api` (HTTP, the CLI, MCP).
        front: &'static str,
    },
}

impl Decider {
    /// The decider `caller` is, deciding through `front` (a console login's decisions are
    /// `console:`'s; the front is the server's knowledge, never a client's claim).
    pub fn of(caller: &crate::auth::Caller, front: crate::auth::Front) -> Decider {
        match caller {
            crate::auth::Caller::Discord(user) => Decider::Discord {
                user: user.id,
                roles: user.roles.clone(),
            },
            other => Decider::Caller {
                principal: other.principal(),
                front: if front == crate::auth::Front::Console {
                    "console"
                } else {
                    "api"
                },
            },
        }
    }

    /// Who, as an approval's owner is written: `discord:<id>`, `operator`, `token:NAME`.
    pub fn principal(&self) -> String {
        match self {
            Decider::Discord { user, .. } => format!("discord:{user}"),
            Decider::Caller { principal, .. } => principal.clone(),
        }
    }

    /// Who decided, as the card and the audit log say it: `discord:<id>`,
    /// `console:operator`, `console:token:NAME`, `api:operator`, ...
    pub fn decided_by(&self) -> String {
        match self {
            Decider::Discord { user, .. } => format!("discord:{user}"),
            Decider::Caller { principal, front } => format!("{front}:{principal}"),
        }
    }
}

/// Why a decision was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    /// No pending approval has that id (never asked, decided already, or expired).
    #[error("this request is no longer pending (it was decided, or it expired)")]
    NotPending,
    /// The user is not in `permissions.approvers`.
    #[error("you can't approve this: only the approvers in permissions.approvers can")]
    NotApprover,
    /// `permissions.console_approves = false`.
    #[error("approvals are decided in Discord only (permissions.console_approves = false)")]
    ConsoleNotAllowed,
    /// The decider's own call or run waits on it, and `permissions.allow_self_approval` is off.
    #[error("nobody decides a request their own call or run waits on: another approver must (permissions.allow_self_approval is off)")]
    SelfApproval,
}

/// How a wait ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Approved by this person.
    Approved(String),
    /// Denied by this person.
    Denied(String),
    /// Nobody decided in time.
    Expired,
}

impl Outcome {
    /// The outcome a settled state stands for; `None` while it is pending.
    fn of(state: &ApprovalState) -> Option<Outcome> {
        match state {
            ApprovalState::Pending { .. } => None,
            ApprovalState::Approved { by, .. } => Some(Outcome::Approved(by.clone())),
            ApprovalState::Denied { by, .. } => Some(Outcome::Denied(by.clone())),
            ApprovalState::Expired { .. } | ApprovalState::Cancelled { .. } => {
                Some(Outcome::Expired)
            }
        }
    }
}

struct Pending {
    card: ApprovalCard,
    channel: AllowedChannel,
    message_id: Option<Snowflake>,
    decided: Option<oneshot::Sender<Outcome>>,
}

/// A call waiting for approval: what the card shows and where it goes.
#[derive(Debug, Clone)]
pub struct AskRequest {
    /// The callable.
    pub tool: String,
    /// The whole input after every check, as the handler will run it.
    pub input: Value,
    /// What the callable adds for the approver (a command's working directory, a write's
    /// diff): shown below the input and bound into the approval's hash with it.
    pub note: Option<String>,
    /// The input as the audit log keeps it (cut or hashed): what the store keeps of the card.
    pub audit_input: Value,
    /// The sessions it acts in.
    pub targets: Vec<Snowflake>,
    /// The first target as people read it.
    pub session_label: String,
    /// Who asked, as people read it.
    pub requested_by: String,
    /// The waiting call's caller key.
    pub caller: String,
    /// Who the ask belongs to (see [`ApprovalCard::owner`]).
    pub owner: String,
    /// The run's request id, for a capability.
    pub run: Option<String>,
    /// The waiting call's tool-call id.
    pub tool_call_id: Option<String>,
    /// Where the card is posted.
    pub channel: AllowedChannel,
}

impl From<&switchboard_config::Permissions> for ApprovalPolicy {
    fn from(permissions: &switchboard_config::Permissions) -> Self {
        ApprovalPolicy {
            approvers: permissions.approvers.clone(),
            console_approves: permissions.console_approves,
            timeout: permissions.ask_timeout,
            allow_self_approval: permissions.allow_self_approval,
        }
    }
}

/// How many settled approvals `approvals.list` remembers (the store keeps every one).
pub const RECENT_KEPT: usize = 200;

/// Every approval in progress, and the last ones settled.
pub struct Approvals {
    pending: Mutex<HashMap<String, Pending>>,
    /// The last [`RECENT_KEPT`] settled cards, newest last, each with the preview the store
    /// keeps (the audit log's copy of the input).
    recent: Mutex<std::collections::VecDeque<ApprovalCard>>,
    /// Who decides, and how long an ask waits: a reload swaps it (an ask already waiting keeps
    /// its deadline; a click is judged by the approvers in force when it comes).
    policy: crate::cell::Live<ApprovalPolicy>,
    /// Where requests are kept and decided: the decision is the store's (atomic, so a request
    /// decided twice — two clicks, two nodes — is decided once).
    store: Arc<dyn ApprovalStore>,
    /// The store's changes: with a shared store, a decision made on another node wakes the
    /// call waiting here.
    feed: Arc<dyn ChangeFeed>,
}

/// `permissions.approvers`, `permissions.console_approves`, `permissions.ask_timeout_s`,
/// `permissions.allow_self_approval`.
#[derive(Debug)]
struct ApprovalPolicy {
    approvers: Vec<Principal>,
    console_approves: bool,
    timeout: Duration,
    allow_self_approval: bool,
}

/// How long past its deadline a request waits for its own node to expire it before any node
/// does ([`Approvals::expire_overdue`]).
pub const OVERDUE_GRACE: Duration = Duration::from_secs(10);

fn now_ms() -> u64 {
    crate::clock::now_ms()
}

/// An input as an approver reads it: one `field: value` line per top-level field, every
/// string whole (a long text shows all of it; nothing is cut).
pub fn preview(input: &Value) -> String {
    match input {
        Value::Object(map) => map
            .iter()
            .map(|(key, value)| match value {
                Value::String(text) => format!("{key}: {text}"),
                other => format!("{key}: {other}"),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

/// A preview with the callable's note below it.
fn with_note(mut preview: String, note: Option<&str>) -> String {
    if let Some(note) = note.filter(|n| !n.is_empty()) {
        preview.push('\n');
        preview.push_str(note);
    }
    preview
}

/// The hash an approval is bound to: the tool, the preview exactly as shown, the whole input,
/// the targets, and the run.
pub fn binding(
    tool: &str,
    preview: &str,
    input: &Value,
    targets: &[Snowflake],
    run: Option<&str>,
) -> String {
    let mut hasher = Sha256::new();
    for part in [tool.as_bytes(), preview.as_bytes()] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    let input = serde_json::to_vec(input).unwrap_or_default();
    hasher.update((input.len() as u64).to_be_bytes());
    hasher.update(&input);
    hasher.update((targets.len() as u64).to_be_bytes());
    for target in targets {
        hasher.update(target.0.to_be_bytes());
    }
    hasher.update(run.unwrap_or("").as_bytes());
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Approvals {
    /// Approvals decided by `approvers`, denied after `timeout`, kept and decided in `store`,
    /// whose changes `feed` carries.
    pub fn new(
        permissions: &switchboard_config::Permissions,
        store: Arc<dyn ApprovalStore>,
        feed: Arc<dyn ChangeFeed>,
    ) -> Self {
        Approvals {
            pending: Mutex::new(HashMap::new()),
            recent: Mutex::new(std::collections::VecDeque::new()),
            policy: crate::cell::Live::new(ApprovalPolicy::from(permissions)),
            store,
            feed,
        }
    }

    /// Puts reloaded `[permissions]` in force for the next ask and the next decision.
    pub(crate) fn set_policy(&self, permissions: &switchboard_config::Permissions) {
        self.policy
            .store(Arc::new(ApprovalPolicy::from(permissions)));
    }

    /// The same approvals, kept in `store`.
    #[must_use]
    pub fn with_store(self, store: Arc<dyn ApprovalStore>, feed: Arc<dyn ChangeFeed>) -> Approvals {
        Approvals {
            store,
            feed,
            ..self
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps a pending request in the store, its preview as `kept_preview` (the audit log's
    /// copy: a store under `audit.redact` keeps no input text).
    fn keep(
        &self,
        card: &ApprovalCard,
        kept_preview: &str,
        binding: &str,
        channel: AllowedChannel,
        message_id: Option<Snowflake>,
    ) {
        let mut kept = card.clone();
        kept.preview = kept_preview.to_owned();
        let approval = Approval {
            card: kept,
            channel_id: channel.id(),
            message_id,
            binding: binding.to_owned(),
        };
        if let Err(error) = self.store.save_approval(approval) {
            tracing::warn!(approval = %card.id, %error, "could not keep the approval request; it is decided in this process only");
        }
    }

    /// Settles `id` in the store; the card as it then stands (the shown preview kept), or —
    /// when the store cannot answer — `card` settled here.
    async fn settle_kept(
        &self,
        mut card: ApprovalCard,
        settlement: Settlement,
    ) -> (ApprovalCard, bool) {
        let at_ms = now_ms();
        match self
            .store
            .decide_approval(&card.id, settlement.clone(), at_ms)
            .await
        {
            Ok(Decided::Decided(kept)) => {
                card.state = kept.card.state;
                self.remember_settled(&card);
                (card, true)
            }
            Ok(Decided::AlreadyDecided(kept)) => {
                card.state = kept.card.state;
                (card, false)
            }
            Err(error) => {
                tracing::warn!(approval = %card.id, %error, "could not keep the decision; it holds in this process only");
                card.state = settlement.state(at_ms);
                (card, true)
            }
        }
    }

    /// Posts the card and waits for a decision (or the timeout). The card is redrawn when it
    /// ends without a Discord click (a click's answer redraws it itself).
    pub async fn ask(&self, surface: &dyn Surface, request: AskRequest) -> Outcome {
        match self
            .ask_until(surface, request, std::future::pending::<()>())
            .await
        {
            Ok(outcome) => outcome,
            Err(()) => Outcome::Expired,
        }
    }

    /// [`Approvals::ask`], giving up when `until` resolves first (the waiting call's run
    /// ended): the request is withdrawn — its card says so, a late click finds it no longer
    /// pending — and `until`'s output is answered.
    pub async fn ask_until<T>(
        &self,
        surface: &dyn Surface,
        request: AskRequest,
        until: impl std::future::Future<Output = T>,
    ) -> Result<Outcome, T> {
        // 128 random bits: an id nobody can guess from another.
        let id = match crate::auth::random_hex(16) {
            Ok(hex) => format!("apr_{hex}"),
            Err(_) => return Ok(Outcome::Expired),
        };
        let timeout = self.policy.load().timeout;
        let shown = with_note(preview(&request.input), request.note.as_deref());
        let kept_preview = with_note(preview(&request.audit_input), request.note.as_deref());
        let hash = binding(
            &request.tool,
            &shown,
            &request.input,
            &request.targets,
            request.run.as_deref(),
        );
        let card = ApprovalCard {
            id: id.clone(),
            tool: request.tool,
            session_id: request.targets.first().copied(),
            session_label: request.session_label,
            preview: shown,
            requested_by: request.requested_by,
            caller: request.caller,
            owner: request.owner,
            binding: hash[..12].to_owned(),
            run: request.run,
            tool_call_id: request.tool_call_id,
            state: ApprovalState::Pending {
                expires_at_ms: now_ms() + timeout.as_millis() as u64,
            },
        };
        let (tx, rx) = oneshot::channel();
        self.lock().insert(
            id.clone(),
            Pending {
                card: card.clone(),
                channel: request.channel,
                message_id: None,
                decided: Some(tx),
            },
        );
        // Watch before the request is kept, so no decision made elsewhere can come unseen.
        let elsewhere = self.feed.shared().then(|| self.feed.subscribe());
        self.keep(&card, &kept_preview, &hash, request.channel, None);
        let posted = surface.post_approval(request.channel, &card).await;
        match posted {
            Ok(message_id) => {
                if let Some(pending) = self.lock().get_mut(&id) {
                    pending.message_id = Some(message_id);
                }
                self.keep(
                    &card,
                    &kept_preview,
                    &hash,
                    request.channel,
                    Some(message_id),
                );
            }
            Err(error) => {
                tracing::warn!(approval = %id, %error, "could not post the approval request; it waits for the console or the timeout");
            }
        }
        let outcome = tokio::select! {
            decided = tokio::time::timeout(timeout, rx) => match decided {
                Ok(Ok(outcome)) => outcome,
                // Timed out, or the sender went away.
                _ => Outcome::Expired,
            },
            outcome = self.decided_elsewhere(&id, elsewhere) => {
                self.lock().remove(&id);
                return Ok(outcome);
            }
            ended = until => {
                self.settle(surface, &id, Settlement::Cancel).await;
                return Err(ended);
            }
        };
        if outcome == Outcome::Expired {
            self.settle(surface, &id, Settlement::Expire).await;
        }
        Ok(outcome)
    }

    /// The outcome of a decision made on another node (a shared store), once `changes` says
    /// the request changed; never, without a shared store.
    async fn decided_elsewhere(&self, id: &str, changes: Option<Changes>) -> Outcome {
        let Some(mut changes) = changes else {
            return std::future::pending().await;
        };
        loop {
            match changes.next().await {
                Next::Change(change) if change.what == Changed::Approval(id.to_owned()) => {}
                Next::Missed(_) => {}
                Next::Change(_) => continue,
                Next::Closed => return std::future::pending().await,
            }
            if let Ok(Some(kept)) = self.store.approval(id).await {
                if let Some(outcome) = Outcome::of(&kept.card.state) {
                    return outcome;
                }
            }
        }
    }

    /// Settles a request nobody decided (still pending) as `settlement`, and redraws its card.
    async fn settle(&self, surface: &dyn Surface, id: &str, settlement: Settlement) {
        let settled = self.lock().remove(id);
        if let Some(pending) = settled {
            let (card, _) = self.settle_kept(pending.card, settlement).await;
            if let Some(message_id) = pending.message_id {
                if let Err(error) = surface
                    .update_approval(pending.channel, message_id, &card)
                    .await
                {
                    tracing::debug!(approval = %id, %error, "could not redraw the settled request");
                }
            }
        }
    }

    /// A decision by `decider`. Returns the redrawn card; when `redraw` the card's message is
    /// edited here (the console, the API), else the caller redraws it (a Discord click answers
    /// with the new card). A refused decision leaves the ask pending.
    pub async fn decide(
        &self,
        surface: &dyn Surface,
        id: &str,
        decider: &Decider,
        approve: bool,
        redraw: bool,
    ) -> Result<ApprovalCard, DecideError> {
        let policy = self.policy.load();
        match decider {
            Decider::Discord { user, roles } => {
                if !any_principal_matches(&policy.approvers, *user, roles) {
                    return Err(DecideError::NotApprover);
                }
            }
            Decider::Caller { .. } => {
                if !policy.console_approves {
                    return Err(DecideError::ConsoleNotAllowed);
                }
            }
        }
        let by = decider.decided_by();
        let settlement = if approve {
            Settlement::Approve { by }
        } else {
            Settlement::Deny { by }
        };
        let local = {
            let mut all = self.lock();
            match all.get(id) {
                Some(pending) => {
                    if !policy.allow_self_approval && pending.card.owner == decider.principal() {
                        return Err(DecideError::SelfApproval);
                    }
                    all.remove(id)
                }
                None => None,
            }
        };
        let Some(mut pending) = local else {
            return self
                .decide_kept(surface, id, decider, settlement, redraw)
                .await;
        };
        let (card, took) = self.settle_kept(pending.card, settlement).await;
        if let Some(decided) = pending.decided.take() {
            // The waiting call may be gone (its client hung up): the decision is still kept.
            // Decided first elsewhere (another node, or past its expiry): that outcome.
            if let Some(outcome) = Outcome::of(&card.state) {
                let _ = decided.send(outcome);
            }
        }
        if !took {
            return Err(DecideError::NotPending);
        }
        pending.card = card;
        if redraw {
            if let Some(message_id) = pending.message_id {
                if let Err(error) = surface
                    .update_approval(pending.channel, message_id, &pending.card)
                    .await
                {
                    tracing::debug!(approval = %id, %error, "could not redraw the decided request");
                }
            }
        }
        Ok(pending.card)
    }

    /// A decision on a request no call of this process waits on: one kept by the store that
    /// another node's call waits on (that node's call learns it from the store's changes).
    async fn decide_kept(
        &self,
        surface: &dyn Surface,
        id: &str,
        decider: &Decider,
        settlement: Settlement,
        redraw: bool,
    ) -> Result<ApprovalCard, DecideError> {
        let kept = match self.store.approval(id).await {
            Ok(Some(kept)) if kept.is_pending() => kept,
            _ => return Err(DecideError::NotPending),
        };
        if !self.policy.load().allow_self_approval && kept.card.owner == decider.principal() {
            return Err(DecideError::SelfApproval);
        }
        let decided = self
            .store
            .decide_approval(id, settlement, now_ms())
            .await
            .map_err(|_| DecideError::NotPending)?;
        let Decided::Decided(kept) = decided else {
            return Err(DecideError::NotPending);
        };
        if redraw {
            if let Some(message_id) = kept.message_id {
                let channel = AllowedChannel::checked(kept.channel_id);
                if let Err(error) = surface
                    .update_approval(channel, message_id, &kept.card)
                    .await
                {
                    tracing::debug!(approval = %id, %error, "could not redraw the decided request");
                }
            }
        }
        Ok(kept.card)
    }

    /// Every pending approval's card, the one that expires first (the oldest, unless a reload
    /// changed the timeout) first.
    pub fn pending(&self) -> Vec<ApprovalCard> {
        let mut cards: Vec<ApprovalCard> = self.lock().values().map(|p| p.card.clone()).collect();
        let expires = |card: &ApprovalCard| match card.state {
            ApprovalState::Pending { expires_at_ms } => expires_at_ms,
            _ => u64::MAX,
        };
        cards.sort_by(|a, b| expires(a).cmp(&expires(b)).then_with(|| a.id.cmp(&b.id)));
        cards
    }

    /// The last settled approvals (at most [`RECENT_KEPT`]), newest first, each with the
    /// preview the store keeps.
    pub fn recently_settled(&self) -> Vec<ApprovalCard> {
        self.recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .rev()
            .cloned()
            .collect()
    }

    /// Remembers a settled card for `approvals.list` (a bounded ring of this process's).
    fn remember_settled(&self, card: &ApprovalCard) {
        let mut recent = self
            .recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        recent.retain(|earlier| earlier.id != card.id);
        if recent.len() >= RECENT_KEPT {
            recent.pop_front();
        }
        recent.push_back(card.clone());
    }

    /// Settles every request the store holds as pending and no call of this process waits
    /// on — left by an earlier run — as expired, redrawing their messages. At start.
    ///
    /// With a shared store (several nodes) nothing is settled here: another node's call may
    /// be waiting on any of them, and each expires by its own deadline (a late decision past
    /// it is refused as expired by the store).
    /// How many were settled.
    pub async fn expire_leftovers(&self, surface: &dyn Surface) -> usize {
        if self.feed.shared() {
            return 0;
        }
        self.expire_kept(surface, |_| true).await
    }

    /// Whether the store is shared with other nodes (then [`Approvals::expire_overdue`] is
    /// worth running now and then).
    pub fn shares_store(&self) -> bool {
        self.feed.shared()
    }

    /// Settles, as expired, every kept request still pending [`OVERDUE_GRACE`] past its
    /// deadline that no call of this process waits on: its node died before its timeout
    /// fired. Any node may run it; the store settles each once, so only one node redraws
    /// its card. How many this node settled.
    pub async fn expire_overdue(&self, surface: &dyn Surface, now_ms: u64) -> usize {
        let grace = u64::try_from(OVERDUE_GRACE.as_millis()).unwrap_or(u64::MAX);
        self.expire_kept(surface, |approval| {
            matches!(approval.card.state, ApprovalState::Pending { expires_at_ms }
                if expires_at_ms.saturating_add(grace) <= now_ms)
        })
        .await
    }

    async fn expire_kept(&self, surface: &dyn Surface, due: impl Fn(&Approval) -> bool) -> usize {
        let kept = match self.store.pending_approvals().await {
            Ok(kept) => kept,
            Err(error) => {
                tracing::warn!(%error, "could not read the approval requests left pending");
                return 0;
            }
        };
        let mut settled_count = 0;
        for approval in kept {
            if !due(&approval) || self.lock().contains_key(approval.id()) {
                continue;
            }
            let Ok(Decided::Decided(settled)) = self
                .store
                .decide_approval(approval.id(), Settlement::Expire, now_ms())
                .await
            else {
                continue;
            };
            settled_count += 1;
            if let Some(message_id) = settled.message_id {
                let channel = AllowedChannel::checked(settled.channel_id);
                if let Err(error) = surface
                    .update_approval(channel, message_id, &settled.card)
                    .await
                {
                    tracing::debug!(approval = %settled.card.id, %error, "could not mark a leftover request expired");
                }
            }
        }
        settled_count
    }
}

impl From<crate::approvals::DecideError> for crate::error::ToolError {
    fn from(error: crate::approvals::DecideError) -> Self {
        match error {
            crate::approvals::DecideError::NotPending => crate::error::ToolError::not_found(
                protocol::ErrorCode::UnknownApproval,
                error.to_string(),
            ),
            crate::approvals::DecideError::NotApprover => {
                crate::error::ToolError::denied(protocol::ErrorCode::NotApprover, error.to_string())
            }
            crate::approvals::DecideError::ConsoleNotAllowed => crate::error::ToolError::denied(
                protocol::ErrorCode::ConsoleApprovalsOff,
                format!("{error}: an approver answers with the buttons on the Discord card"),
            ),
            crate::approvals::DecideError::SelfApproval => crate::error::ToolError::denied(
                protocol::ErrorCode::SelfApproval,
                error.to_string(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_kept_by_an_older_version_still_reads_so_it_can_be_expired() {
        let kept = serde_json::json!({
            "id": "apr_0123456789abcdef", "tool": "surface.messages.send", "sessionId": null,
            "sessionLabel": "#ops", "preview": "text: hi", "requestedBy": "the operator",
            "binding": "abcdef012345", "run": null, "toolCallId": null,
            "state": "pending", "expiresAtMs": 1
        });
        let card: ApprovalCard = serde_json::from_value(kept).expect("reads");
        assert_eq!(card.owner, "");
        assert!(card.state.is_pending());
    }

    #[test]
    fn the_preview_is_every_field_whole_and_the_binding_covers_its_tail() {
        let long = format!("{}@everyone rm -rf /", "x".repeat(5_000));
        let input = serde_json::json!({ "sessionId": "#ops", "text": long });
        let shown = preview(&input);
        assert_eq!(shown, format!("sessionId: #ops\ntext: {long}"));
        let other = serde_json::json!({ "sessionId": "#ops", "text": format!("{}fine", "x".repeat(5_000)) });
        assert_ne!(
            binding("t", &shown, &input, &[], None),
            binding("t", &preview(&other), &other, &[], None)
        );
    }
}
