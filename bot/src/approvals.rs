//! Approval requests in Discord: a card is a message with Approve and Deny buttons, redrawn
//! with the decision (buttons disabled) once it is decided or expires. The card never pings
//! anyone, whatever the call's input says.

use entity::Snowflake;
use serde_json::{json, Value};
use toolserver::approvals::{ApprovalCard, ApprovalState, DecideError, Decider};
use toolserver::Core;

/// `custom_id` prefix of the Approve button; the approval's id follows.
pub const APPROVE: &str = "sb:approve:";
/// `custom_id` prefix of the Deny button; the approval's id follows.
pub const DENY: &str = "sb:deny:";

/// Most characters of the input shown on a card (a message holds 2,000 in all).
const PREVIEW_CHARS: usize = 1_200;

/// `<t:SECONDS:STYLE>`: a time every reader sees in their own timezone.
fn when(ms: u64, style: char) -> String {
    format!("<t:{}:{style}>", ms / 1000)
}

/// The input preview, cut, inside a code block it cannot close.
fn preview_block(preview: &str) -> String {
    let mut text: String = preview.chars().take(PREVIEW_CHARS).collect();
    if preview.chars().count() > PREVIEW_CHARS {
        text.push('…');
    }
    // A zero-width space keeps a ``` in the input from ending the block early.
    format!("```\n{}\n```", text.replace("```", "`\u{200b}``"))
}

/// The message body (`content`, `components`, `allowed_mentions`) that shows `card`.
pub fn message(card: &ApprovalCard) -> Value {
    let state = match &card.state {
        ApprovalState::Pending { expires_at_ms } => {
            format!(
                "⏳ Waiting for an approver — denied {} if nobody decides",
                when(*expires_at_ms, 'R')
            )
        }
        ApprovalState::Approved { by, at_ms } => {
            format!("✅ Approved by {by} {}", when(*at_ms, 'f'))
        }
        ApprovalState::Denied { by, at_ms } => format!("❌ Denied by {by} {}", when(*at_ms, 'f')),
        ApprovalState::Expired { at_ms } => {
            format!("⌛ Expired {}: nobody decided in time", when(*at_ms, 'f'))
        }
        ApprovalState::Cancelled { at_ms } => format!(
            "⏹ Withdrawn {}: the run that asked ended before anyone decided",
            when(*at_ms, 'f')
        ),
    };
    let content = format!(
        "**Approval needed**: `{}` in {}\nAsked by {} · binding `{}`\n{}\n{}",
        card.tool,
        card.session_label,
        card.requested_by,
        card.binding,
        preview_block(&card.preview),
        state
    );
    let pending = card.state.is_pending();
    json!({
        "content": content,
        "allowed_mentions": { "parse": [] },
        "components": [{
            "type": 1,
            "components": [
                {"type": 2, "style": 3, "label": "Approve", "custom_id": format!("{APPROVE}{}", card.id), "disabled": !pending},
                {"type": 2, "style": 4, "label": "Deny", "custom_id": format!("{DENY}{}", card.id), "disabled": !pending}
            ]
        }]
    })
}

/// The approval a button's `custom_id` names, and whether it approves.
pub fn parse_custom_id(custom_id: &str) -> Option<(&str, bool)> {
    if let Some(id) = custom_id.strip_prefix(APPROVE) {
        return Some((id, true));
    }
    custom_id.strip_prefix(DENY).map(|id| (id, false))
}

/// Interaction callback: a message only the clicking user sees.
const CHANNEL_MESSAGE_WITH_SOURCE: u64 = 4;
/// Interaction callback: edit the message the button is on.
const UPDATE_MESSAGE: u64 = 7;
/// Message flag: only the user who clicked sees it.
const EPHEMERAL: u64 = 1 << 6;

/// How switchboard answers a click on one of its approval buttons.
pub fn click_answer(outcome: &Result<ApprovalCard, DecideError>, approvers_named: &str) -> Value {
    match outcome {
        Ok(card) => json!({ "type": UPDATE_MESSAGE, "data": message(card) }),
        Err(DecideError::NotApprover) => json!({
            "type": CHANNEL_MESSAGE_WITH_SOURCE,
            "data": {
                "content": format!("You can't approve this: only {approvers_named} can. The request is still waiting."),
                "flags": EPHEMERAL,
                "allowed_mentions": { "parse": [] },
            }
        }),
        Err(error) => json!({
            "type": CHANNEL_MESSAGE_WITH_SOURCE,
            "data": {
                "content": format!("Nothing happened: {error}."),
                "flags": EPHEMERAL,
                "allowed_mentions": { "parse": [] },
            }
        }),
    }
}

/// Handles a button click: when it is one of switchboard's approval buttons, decides the
/// request (only an approver's click counts) and answers the interaction at once — the card
/// redrawn in place, or a private note to someone who may not decide. Other components are
/// not switchboard's and are left alone.
pub async fn on_component(
    rest: &crate::rest::DiscordRest,
    interaction: &serenity::model::application::ComponentInteraction,
    core: &Core,
) {
    let Some((id, approve)) = parse_custom_id(&interaction.data.custom_id) else {
        return;
    };
    let user = Snowflake(interaction.user.id.get());
    let (roles, name) = match &interaction.member {
        Some(member) => (
            member
                .roles
                .iter()
                .map(|role| Snowflake(role.get()))
                .collect(),
            member.display_name().to_owned(),
        ),
        None => (Vec::new(), interaction.user.display_name().to_owned()),
    };
    let decider = Decider::Discord { user, roles, name };
    // The card is redrawn by the interaction's answer, not by a separate edit.
    let outcome = core
        .approvals()
        .decide(core.surface().as_ref(), id, decider, approve, false)
        .await;
    match &outcome {
        Ok(card) => {
            tracing::info!(approval = %card.id, %user, approve, "approval decided in Discord");
        }
        Err(error) => tracing::info!(approval = %id, %user, %error, "approval click refused"),
    }
    let approvers = approvers_named(core);
    let answer = click_answer(&outcome, &approvers);
    if let Err(error) = rest
        .interaction_response(Snowflake(interaction.id.get()), &interaction.token, answer)
        .await
    {
        tracing::warn!(approval = %id, %error, "could not answer an approval click");
    }
}

/// `permissions.approvers` as people read them.
fn approvers_named(core: &Core) -> String {
    let settings = core.settings();
    let approvers = &settings.config().permissions.approvers;
    if approvers.is_empty() {
        return "nobody (permissions.approvers is empty)".to_owned();
    }
    // Mentions render as names in Discord; the answer's allowed_mentions keeps them silent.
    approvers
        .iter()
        .map(|principal| match principal {
            switchboard_config::Principal::User(id) | switchboard_config::Principal::Id(id) => {
                format!("<@{id}>")
            }
            switchboard_config::Principal::Role(id) => format!("<@&{id}>"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(state: ApprovalState) -> ApprovalCard {
        ApprovalCard {
            id: "apr_0123456789abcdef".into(),
            tool: "surface.messages.send".into(),
            session_id: None,
            session_label: "#release-room".into(),
            preview: format!("text: @everyone ```rm -rf``` {}", "x".repeat(3000)),
            requested_by: "agent run run-1 for @Stanley".into(),
            binding: "abcdef012345".into(),
            run: Some("run-1".into()),
            tool_call_id: None,
            state,
        }
    }

    #[test]
    fn a_pending_card_has_live_buttons_and_pings_nobody() {
        let body = message(&card(ApprovalState::Pending {
            expires_at_ms: 1_800_000_000_000,
        }));
        let content = body["content"].as_str().unwrap();
        assert!(
            content.chars().count() <= 2000,
            "{}",
            content.chars().count()
        );
        assert!(content.contains("<t:1800000000:R>"));
        assert_eq!(body["allowed_mentions"]["parse"], json!([]));
        let buttons = &body["components"][0]["components"];
        assert_eq!(buttons[0]["custom_id"], "sb:approve:apr_0123456789abcdef");
        assert_eq!(buttons[1]["custom_id"], "sb:deny:apr_0123456789abcdef");
        assert_eq!(buttons[0]["disabled"], false);
        assert_eq!(
            content.matches("```").count(),
            2,
            "the input cannot close the block: {content}"
        );
    }

    #[test]
    fn a_decided_card_shows_who_and_disables_its_buttons() {
        let body = message(&card(ApprovalState::Denied {
            by: "@Mira".into(),
            at_ms: 1_800_000_000_000,
        }));
        assert!(body["content"]
            .as_str()
            .unwrap()
            .contains("❌ Denied by @Mira"));
        assert_eq!(body["components"][0]["components"][0]["disabled"], true);
        assert_eq!(parse_custom_id("sb:approve:apr_1"), Some(("apr_1", true)));
        assert_eq!(parse_custom_id("sb:deny:apr_1"), Some(("apr_1", false)));
        assert_eq!(parse_custom_id("other"), None);
    }
}
