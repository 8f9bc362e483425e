//! Approval requests in Discord: a card is a message with Approve and Deny buttons, redrawn
//! with the decision (buttons disabled) once it is decided or expires. The card never pings
//! anyone, whatever the call's input says, and shows the whole input: inline when it fits,
//! else as an attached text file (never cut). A click is the operator callable
//! `approvals.decide`, called as the clicking user through the pipeline.

use entity::Snowflake;
use protocol::ErrorCode;
use serde_json::{json, Value};
use switchboard_engine::approvals::{ApprovalCard, ApprovalState};
use switchboard_engine::auth::DiscordUser;
use switchboard_engine::surface::OutgoingFile;
use switchboard_engine::ToolError;
use switchboard_engine::{CallContext, Core};

/// `custom_id` prefix of the Approve button; the approval's id follows.
pub const APPROVE: &str = "sb:approve:";
/// `custom_id` prefix of the Deny button; the approval's id follows.
pub const DENY: &str = "sb:deny:";

/// Most characters of the input shown inline on a card (a message holds 2,000 in all); a
/// longer input is attached whole as a file instead.
const PREVIEW_CHARS: usize = 1_200;

/// `<t:SECONDS:STYLE>`: a time every reader sees in their own timezone.
fn when(ms: u64, style: char) -> String {
    format!("<t:{}:{style}>", ms / 1000)
}

/// Whether `card`'s input is too long to show inline, so it is attached instead.
fn attached(card: &ApprovalCard) -> bool {
    card.preview.chars().count() > PREVIEW_CHARS
}

/// The name of the file holding `card`'s whole input.
pub fn attachment_name(card: &ApprovalCard) -> String {
    format!("{}-input.txt", card.id)
}

/// The whole input as a file, for a card whose input does not fit inline; `None` when it
/// does. Its content is exactly the preview the approval's binding hashes.
pub fn attachment(card: &ApprovalCard) -> Option<OutgoingFile> {
    attached(card).then(|| OutgoingFile {
        filename: attachment_name(card),
        content: card.preview.as_bytes().to_vec(),
    })
}

/// The input inside a code block it cannot close, or where to read it when it is attached.
fn preview_block(card: &ApprovalCard) -> String {
    if attached(card) {
        return format!(
            "The input is {} characters, too long to show here: it is whole in the attached `{}` (and in the console). Read all of it before you decide.",
            card.preview.chars().count(),
            attachment_name(card)
        );
    }
    // A zero-width space keeps a ``` in the input from ending the block early.
    format!("```\n{}\n```", card.preview.replace("```", "`\u{200b}``"))
}

/// Who decided, as the card says it: the user (a mention, silent), or the console's caller.
fn decider(by: &str) -> String {
    if let Some(id) = by.strip_prefix("discord:") {
        return format!("<@{id}>");
    }
    let (front, who) = by.split_once(':').unwrap_or(("", by));
    let who = match who.strip_prefix("token:") {
        Some(name) => format!("token {name}"),
        None if who == "operator" => "the operator".to_owned(),
        None => who.to_owned(),
    };
    match front {
        "console" => format!("{who} in the console"),
        "api" => format!("{who} over the API"),
        _ => who,
    }
}

/// The message body (`content`, `components`, `allowed_mentions`) that shows `card`. Its file,
/// when the input is attached, is [`attachment`]: a redraw keeps the file already posted.
pub fn message(card: &ApprovalCard) -> Value {
    let state = match &card.state {
        ApprovalState::Pending { expires_at_ms } => {
            format!(
                "⏳ Waiting for an approver — denied {} if nobody decides",
                when(*expires_at_ms, 'R')
            )
        }
        ApprovalState::Approved { by, at_ms } => {
            format!("✅ Approved by {} {}", decider(by), when(*at_ms, 'f'))
        }
        ApprovalState::Denied { by, at_ms } => {
            format!("❌ Denied by {} {}", decider(by), when(*at_ms, 'f'))
        }
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
        preview_block(card),
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

/// How switchboard answers a click on one of its approval buttons: the redrawn card, or a
/// private note saying why nothing happened.
pub fn click_answer(outcome: &Result<ApprovalCard, ToolError>, approvers_named: &str) -> Value {
    let private = |content: String| {
        json!({
            "type": CHANNEL_MESSAGE_WITH_SOURCE,
            "data": {
                "content": content,
                "flags": EPHEMERAL,
                "allowed_mentions": { "parse": [] },
            }
        })
    };
    match outcome {
        Ok(card) => json!({ "type": UPDATE_MESSAGE, "data": message(card) }),
        Err(error) if error.code == ErrorCode::NotApprover => private(format!(
            "You can't approve this: only {approvers_named} can. The request is still waiting."
        )),
        Err(error) if error.code == ErrorCode::SelfApproval => private(
            "You can't decide this: it is your own request (your message started the run). Another approver must; it is still waiting.".to_owned(),
        ),
        Err(error) => private(format!("Nothing happened: {}", error.message)),
    }
}

/// Handles a button click: when it is one of switchboard's approval buttons, calls
/// `approvals.decide` as the clicking user (only an approver's click counts, never on their
/// own request) and answers the interaction at once — the card redrawn in place, or a private
/// note to someone who may not decide. Other components are not switchboard's and are left
/// alone.
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
    let context = discord_context(DiscordUser::caller(user, roles, name));
    // The card is redrawn by the interaction's answer, not by a separate edit.
    let outcome = core
        .call(
            &context,
            "approvals.decide",
            json!({ "approvalId": id, "approve": approve }),
        )
        .await
        .and_then(|output| {
            let mut answer: Value = serde_json::from_str(output.get())
                .map_err(|e| ToolError::internal(format!("approvals.decide answered: {e}")))?;
            serde_json::from_value::<ApprovalCard>(answer["approval"].take())
                .map_err(|e| ToolError::internal(format!("approvals.decide answered: {e}")))
        });
    if let Err(error) = &outcome {
        tracing::info!(approval = %id, %user, code = %error.code, "approval click refused");
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

/// The context of a call a Discord user makes through a button or a slash command.
pub(crate) fn discord_context(caller: switchboard_engine::auth::Caller) -> CallContext {
    CallContext {
        caller,
        request_id: None,
        session_ref: None,
        client: Some("discord".to_owned()),
        cwd: None,
        tool_call_id: None,
        trigger_message_id: None,
        front: switchboard_engine::Front::Api,
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

    fn card(preview: String, state: ApprovalState) -> ApprovalCard {
        ApprovalCard {
            id: "apr_0123456789abcdef0123456789abcdef".into(),
            tool: "surface.messages.send".into(),
            session_id: None,
            session_label: "#release-room".into(),
            preview,
            requested_by: "agent run run-1 for @Stanley".into(),
            caller: "cap:0a1b2c3d".into(),
            owner: "discord:1000000000000000101".into(),
            binding: "abcdef012345".into(),
            run: Some("run-1".into()),
            tool_call_id: None,
            state,
        }
    }

    const PENDING: ApprovalState = ApprovalState::Pending {
        expires_at_ms: 1_800_000_000_000,
    };

    #[test]
    fn a_pending_card_has_live_buttons_and_pings_nobody() {
        let short = card("text: @everyone ```rm -rf``` now".into(), PENDING);
        let body = message(&short);
        let content = body["content"].as_str().unwrap();
        assert!(content.contains("<t:1800000000:R>"));
        assert!(content.contains("@everyone"), "shown whole: {content}");
        assert_eq!(body["allowed_mentions"]["parse"], json!([]));
        let buttons = &body["components"][0]["components"];
        assert_eq!(
            buttons[0]["custom_id"],
            "sb:approve:apr_0123456789abcdef0123456789abcdef"
        );
        assert_eq!(buttons[0]["disabled"], false);
        assert_eq!(
            content.matches("```").count(),
            2,
            "the input cannot close the block: {content}"
        );
        assert!(attachment(&short).is_none(), "it fits: nothing attached");
    }

    #[test]
    fn a_long_input_is_attached_whole_and_never_shown_cut() {
        let tail = " @everyone rm -rf /";
        let long = card(format!("text: {}{tail}", "x".repeat(1_250)), PENDING);
        let body = message(&long);
        let content = body["content"].as_str().unwrap();
        assert!(
            content.chars().count() <= 2000,
            "{}",
            content.chars().count()
        );
        assert!(
            !content.contains("xxxx"),
            "no cut beginning to approve by: {content}"
        );
        assert!(content.contains(&attachment_name(&long)), "{content}");
        let file = attachment(&long).expect("attached");
        assert_eq!(
            String::from_utf8(file.content).unwrap(),
            long.preview,
            "the file holds exactly the preview the binding hashes"
        );
        assert!(long.preview.ends_with(tail));
    }

    #[test]
    fn a_decided_card_shows_who_and_disables_its_buttons() {
        let by_user = message(&card(
            "text: hi".into(),
            ApprovalState::Denied {
                by: "discord:1000000000000000101".into(),
                at_ms: 1_800_000_000_000,
            },
        ));
        assert!(by_user["content"]
            .as_str()
            .unwrap()
            .contains("❌ Denied by <@1000000000000000101>"));
        assert_eq!(by_user["components"][0]["components"][0]["disabled"], true);
        let by_console = message(&card(
            "text: hi".into(),
            ApprovalState::Approved {
                by: "console:token:ops".into(),
                at_ms: 1_800_000_000_000,
            },
        ));
        assert!(by_console["content"]
            .as_str()
            .unwrap()
            .contains("✅ Approved by token ops in the console"));
        assert_eq!(parse_custom_id("sb:approve:apr_1"), Some(("apr_1", true)));
        assert_eq!(parse_custom_id("sb:deny:apr_1"), Some(("apr_1", false)));
        assert_eq!(parse_custom_id("other"), None);
    }
}
