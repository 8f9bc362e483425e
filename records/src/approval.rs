//! Approval requests: a call the rules answer with "ask" waits while a person decides. The
//! card is what people see (and what the console lists); the record adds where its message is
//! and the full hash the approval is bound to.

use entity::Snowflake;
use serde::{Deserialize, Serialize};

/// Where an approval stands. On the wire it is flattened into the card: `"state": "pending",
/// "expiresAtMs": ...`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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
        /// Who: `discord:<user id>`, `console:operator`, `console:token:NAME`, or
        /// `api:operator` / `api:token:NAME` for `approvals.decide` called over the API.
        by: String,
        /// When, ms since the epoch.
        at_ms: u64,
    },
    /// An approver said no.
    Denied {
        /// Who, as for [`ApprovalState::Approved`].
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalCard {
    /// Its id (`apr_` and 32 hex digits: 128 random bits); buttons carry it.
    pub id: String,
    /// The callable that waits.
    pub tool: String,
    /// The session the call acts in.
    #[schemars(with = "Option<String>")]
    pub session_id: Option<Snowflake>,
    /// That session as people read it (`#release-room`).
    pub session_label: String,
    /// The whole input as the call will run it, one `field: value` line per field: nothing
    /// is cut, whatever `[audit]` says. (The copy kept in the store is the audit log's.)
    pub preview: String,
    /// Who asked: the run and the person who started it, or the token.
    pub requested_by: String,
    /// The waiting call's caller key: `operator`, `token:NAME`, `cap:ID`, `anonymous`. (Empty
    /// on a card an older version kept.)
    #[serde(default)]
    pub caller: String,
    /// Who the ask belongs to, who may not decide it (unless
    /// `permissions.allow_self_approval`): `operator`, `token:NAME`, or for an agent run the
    /// `discord:<user id>` whose message started it.
    #[serde(default)]
    pub owner: String,
    /// The first hex digits of the hash the approval is bound to: the tool, the preview as
    /// shown, the input, the targets and the run.
    pub binding: String,
    /// The agent run's request id, when the call belongs to one.
    pub run: Option<String>,
    /// The `x-switchboard-tool-call-id` of the waiting call, so its caller can find it.
    pub tool_call_id: Option<String>,
    /// Where it stands.
    #[serde(flatten)]
    pub state: ApprovalState,
}

/// An approval request as a store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// The card: id, what waits, who waits (`run`, `tool_call_id`), state, who decided, expiry.
    pub card: ApprovalCard,
    /// The session its message is posted in.
    pub channel_id: Snowflake,
    /// Its message, once posted.
    pub message_id: Option<Snowflake>,
    /// The whole hash the approval is bound to (tool, resolved input, targets, run); the card
    /// shows its first digits. Records kept before the hash was stored whole hold the card's
    /// digits.
    pub binding: String,
}

impl Approval {
    /// Its id.
    pub fn id(&self) -> &str {
        &self.card.id
    }

    /// Whether it still waits for a decision.
    pub fn is_pending(&self) -> bool {
        self.card.state.is_pending()
    }
}

/// How a pending approval is settled: the one change [`ApprovalState::Pending`] may undergo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// An approver said yes.
    Approve {
        /// Who (`@name`, or `console`).
        by: String,
    },
    /// An approver said no.
    Deny {
        /// Who (`@name`, or `console`).
        by: String,
    },
    /// Nobody decided in time.
    Expire,
    /// The run whose call waited ended before anyone decided.
    Cancel,
}

impl Settlement {
    /// The state it settles an approval in, at `at_ms`.
    pub fn state(&self, at_ms: u64) -> ApprovalState {
        match self {
            Settlement::Approve { by } => ApprovalState::Approved {
                by: by.clone(),
                at_ms,
            },
            Settlement::Deny { by } => ApprovalState::Denied {
                by: by.clone(),
                at_ms,
            },
            Settlement::Expire => ApprovalState::Expired { at_ms },
            Settlement::Cancel => ApprovalState::Cancelled { at_ms },
        }
    }
}

/// Settled approvals are kept at least this long (for the record), then may be pruned.
pub const SETTLED_APPROVALS_KEPT_MS: u64 = 7 * 24 * 3600 * 1000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_keeps_the_consoles_json_shape() {
        let card = ApprovalCard {
            id: "apr_0123456789abcdef".into(),
            tool: "surface.messages.send".into(),
            session_id: Some(Snowflake(1_000_000_000_000_000_401)),
            session_label: "#ops".into(),
            preview: "hi".into(),
            requested_by: "operator".into(),
            caller: "operator".into(),
            owner: "operator".into(),
            binding: "0123456789ab".into(),
            run: None,
            tool_call_id: Some("t1".into()),
            state: ApprovalState::Pending { expires_at_ms: 9 },
        };
        let json = serde_json::to_value(&card).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"id": "apr_0123456789abcdef", "tool": "surface.messages.send",
                "sessionId": "1000000000000000401", "sessionLabel": "#ops", "preview": "hi",
                "requestedBy": "operator", "caller": "operator", "owner": "operator", "binding": "0123456789ab", "run": null,
                "toolCallId": "t1", "state": "pending", "expiresAtMs": 9})
        );
        assert_eq!(serde_json::from_value::<ApprovalCard>(json).unwrap(), card);
        let decided = ApprovalState::Approved {
            by: "@mira".into(),
            at_ms: 4,
        };
        assert_eq!(
            serde_json::to_value(&decided).unwrap(),
            serde_json::json!({"state": "approved", "by": "@mira", "atMs": 4})
        );
    }
}
