//! Approvals: a call the rules answer with "ask" waits while a person decides.
//!
//! The pipeline posts an approval card (through the [`Surface`](crate::Surface): in Discord, a
//! message with Approve and Deny buttons) and waits. Only an approver's decision counts; no
//! decision within `permissions.ask_timeout_s` is a denial. Each approval belongs to exactly one
//! waiting call — bound to a hash of its tool, resolved input and run — and is used once: a new
//! call, even with the same tool and other text, asks again. An approval left pending when the
//! service stops is settled as expired when it starts again, never as granted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use entity::Snowflake;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use switchboard_config::{any_principal_matches, Principal};
use tokio::sync::oneshot;

use crate::governance::{ApprovalRecord, Ledger};
use crate::surface::{AllowedChannel, Surface};

/// Where an approval stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "state",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum ApprovalState {
    /// Waiting for a decision until `expires_at_ms` (ms since the epoch).
    Pending {
        /// When it is denied if nobody decided.
        expires_at_ms: u64,
    },
    /// An approver said yes.
    Approved {
        /// Who (`@name`, or `console`).
        by: String,
        /// When, ms since the epoch.
        at_ms: u64,
    },
    /// An approver said no.
    Denied {
        /// Who (`@name`, or `console`).
        by: String,
        /// When, ms since the epoch.
        at_ms: u64,
    },
    /// Nobody decided in time (or the service restarted while it waited).
    Expired {
        /// When, ms since the epoch.
        at_ms: u64,
    },
    /// Withdrawn: the run whose call waited ended (finished or aborted) before anyone decided.
    Cancelled {
        /// When, ms since the epoch.
        at_ms: u64,
    },
}

impl ApprovalState {
    /// Whether a decision is still possible.
    pub fn is_pending(&self) -> bool {
        matches!(self, ApprovalState::Pending { .. })
    }
}

/// What an approval request shows a person: enough to decide, readable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalCard {
    /// Its id (`apr_` and 16 hex digits); buttons carry it.
    pub id: String,
    /// The callable that waits.
    pub tool: String,
    /// The session the call acts in.
    pub session_id: Option<Snowflake>,
    /// That session as people read it (`#release-room`).
    pub session_label: String,
    /// The input, readable (mentions as names), long text cut.
    pub preview: String,
    /// Who asked: the run and the person who started it, or the token.
    pub requested_by: String,
    /// The first hex digits of the hash the approval is bound to.
    pub binding: String,
    /// The agent run's request id, when the call belongs to one.
    pub run: Option<String>,
    /// The `x-switchboard-tool-call-id` of the waiting call, so its caller can find it.
    pub tool_call_id: Option<String>,
    /// Where it stands.
    #[serde(flatten)]
    pub state: ApprovalState,
}

/// Who decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decider {
    /// A Discord user clicking a button.
    Discord {
        /// The user.
        user: Snowflake,
        /// Their roles in the guild where they clicked.
        roles: Vec<Snowflake>,
        /// Their name, for the card.
        name: String,
    },
    /// The operator, in the console.
    Console,
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
    /// The input after every check (for the binding hash).
    pub input: Value,
    /// The input as people read it.
    pub preview: String,
    /// The sessions it acts in.
    pub targets: Vec<Snowflake>,
    /// The first target as people read it.
    pub session_label: String,
    /// Who asked.
    pub requested_by: String,
    /// The run's request id, for a capability.
    pub run: Option<String>,
    /// The waiting call's tool-call id.
    pub tool_call_id: Option<String>,
    /// Where the card is posted.
    pub channel: AllowedChannel,
}

/// Every approval in progress.
pub struct Approvals {
    pending: Mutex<HashMap<String, Pending>>,
    /// Who decides, and how long an ask waits: a reload swaps it (an ask already waiting keeps
    /// its deadline; a click is judged by the approvers in force when it comes).
    policy: crate::live::Live<ApprovalPolicy>,
    ledger: Arc<dyn Ledger>,
}

/// `permissions.approvers`, `permissions.console_approves`, `permissions.ask_timeout_s`.
#[derive(Debug)]
struct ApprovalPolicy {
    approvers: Vec<Principal>,
    console_approves: bool,
    timeout: Duration,
}

fn now_ms() -> u64 {
    crate::clock::now_ms()
}

/// The hash an approval is bound to: the tool, the resolved input and targets, and the run.
pub fn binding(tool: &str, input: &Value, targets: &[Snowflake], run: Option<&str>) -> String {
    let mut hasher = Sha256::new();
    hasher.update(tool.as_bytes());
    hasher.update([0]);
    hasher.update(serde_json::to_vec(input).unwrap_or_default());
    hasher.update([0]);
    for target in targets {
        hasher.update(target.0.to_be_bytes());
    }
    hasher.update([0]);
    hasher.update(run.unwrap_or("").as_bytes());
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Approvals {
    /// Approvals decided by `approvers`, denied after `timeout`, kept in `ledger`.
    pub fn new(
        approvers: Vec<Principal>,
        console_approves: bool,
        timeout: Duration,
        ledger: Arc<dyn Ledger>,
    ) -> Self {
        Approvals {
            pending: Mutex::new(HashMap::new()),
            policy: crate::live::Live::new(ApprovalPolicy {
                approvers,
                console_approves,
                timeout,
            }),
            ledger,
        }
    }

    /// Puts reloaded `[permissions]` in force for the next ask and the next decision.
    pub(crate) fn set_policy(&self, permissions: &switchboard_config::Permissions) {
        self.policy.store(Arc::new(ApprovalPolicy {
            approvers: permissions.approvers.clone(),
            console_approves: permissions.console_approves,
            timeout: permissions.ask_timeout,
        }));
    }

    /// The same approvals, kept in `ledger`.
    #[must_use]
    pub fn with_ledger(self, ledger: Arc<dyn Ledger>) -> Approvals {
        Approvals { ledger, ..self }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn keep(&self, card: &ApprovalCard, channel: AllowedChannel, message_id: Option<Snowflake>) {
        self.ledger.save_approval(ApprovalRecord {
            id: card.id.clone(),
            channel_id: channel.id(),
            message_id,
            pending: card.state.is_pending(),
            card: serde_json::to_value(card).unwrap_or(Value::Null),
        });
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
        let id = match crate::auth::random_hex(8) {
            Ok(hex) => format!("apr_{hex}"),
            Err(_) => return Ok(Outcome::Expired),
        };
        let timeout = self.policy.load().timeout;
        let hash = binding(
            &request.tool,
            &request.input,
            &request.targets,
            request.run.as_deref(),
        );
        let card = ApprovalCard {
            id: id.clone(),
            tool: request.tool,
            session_id: request.targets.first().copied(),
            session_label: request.session_label,
            preview: request.preview,
            requested_by: request.requested_by,
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
        self.keep(&card, request.channel, None);
        let posted = surface.post_approval(request.channel, &card).await;
        match posted {
            Ok(message_id) => {
                if let Some(pending) = self.lock().get_mut(&id) {
                    pending.message_id = Some(message_id);
                }
                self.keep(&card, request.channel, Some(message_id));
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
            ended = until => {
                self.settle(surface, &id, ApprovalState::Cancelled { at_ms: now_ms() })
                    .await;
                return Err(ended);
            }
        };
        if outcome == Outcome::Expired {
            self.settle(surface, &id, ApprovalState::Expired { at_ms: now_ms() })
                .await;
        }
        Ok(outcome)
    }

    /// Settles a request nobody decided (still pending) as `state`, and redraws its card.
    async fn settle(&self, surface: &dyn Surface, id: &str, state: ApprovalState) {
        let settled = self.lock().remove(id);
        if let Some(pending) = settled {
            let mut card = pending.card;
            card.state = state;
            self.keep(&card, pending.channel, pending.message_id);
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
    /// edited here (the console), else the caller redraws it (a Discord click answers with the
    /// new card).
    pub async fn decide(
        &self,
        surface: &dyn Surface,
        id: &str,
        decider: Decider,
        approve: bool,
        redraw: bool,
    ) -> Result<ApprovalCard, DecideError> {
        let policy = self.policy.load();
        let by = match &decider {
            Decider::Discord { user, roles, name } => {
                if !any_principal_matches(&policy.approvers, *user, roles) {
                    return Err(DecideError::NotApprover);
                }
                format!("@{name}")
            }
            Decider::Console => {
                if !policy.console_approves {
                    return Err(DecideError::ConsoleNotAllowed);
                }
                "console".to_owned()
            }
        };
        let removed = self.lock().remove(id);
        let mut pending = removed.ok_or(DecideError::NotPending)?;
        let at_ms = now_ms();
        let (state, outcome) = if approve {
            (
                ApprovalState::Approved {
                    by: by.clone(),
                    at_ms,
                },
                Outcome::Approved(by),
            )
        } else {
            (
                ApprovalState::Denied {
                    by: by.clone(),
                    at_ms,
                },
                Outcome::Denied(by),
            )
        };
        pending.card.state = state;
        self.keep(&pending.card, pending.channel, pending.message_id);
        if let Some(decided) = pending.decided.take() {
            // The waiting call may be gone (its client hung up): the decision is still kept.
            let _ = decided.send(outcome);
        }
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

    /// Every pending approval's card, oldest first.
    pub fn pending(&self) -> Vec<ApprovalCard> {
        let mut cards: Vec<ApprovalCard> = self.lock().values().map(|p| p.card.clone()).collect();
        cards.sort_by(|a, b| a.id.cmp(&b.id));
        cards
    }

    /// Settles approvals left pending by an earlier run as expired, redrawing their messages.
    pub async fn expire_leftovers(&self, surface: &dyn Surface, records: Vec<ApprovalRecord>) {
        for record in records.into_iter().filter(|r| r.pending) {
            let Ok(mut card) = serde_json::from_value::<ApprovalCard>(record.card.clone()) else {
                continue;
            };
            card.state = ApprovalState::Expired { at_ms: now_ms() };
            let channel = AllowedChannel::checked(record.channel_id);
            self.keep(&card, channel, record.message_id);
            if let Some(message_id) = record.message_id {
                if let Err(error) = surface.update_approval(channel, message_id, &card).await {
                    tracing::debug!(approval = %card.id, %error, "could not mark a leftover request expired");
                }
            }
        }
    }
}
