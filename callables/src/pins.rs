//! `surface.pins.*`: add, remove, list.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;
use std::sync::Arc;

use crate::error::ToolError;
use crate::invocation::{Invocation, MessageView, PlanContext, SessionView};
use crate::messages::Done;
use crate::registry::{
    example, output, output_schema, Planned, SessionRequest, Tool, ToolOutput, ToolSpec,
};
use protocol::Effects;

/// `surface.pins.add` (run by [`crate::messages::OnMessage::Pin`]).
pub(crate) fn pin_spec() -> ToolSpec {
    ToolSpec {
        id: "surface.pins.add",
        title: "Pin a message",
        effects: Effects::MARK,
        output_schema: Some(output_schema::<Done>()),
        description: "Pin a message in its session.",
        help: "Discord needs the bot to have Manage Messages in a guild channel (denied otherwise) and keeps at most 250 pins per channel. Pinning a pinned message succeeds.",
        mutating: true,
        primary: Some("messageId"),
        examples: vec![example(
            "Pin a message in #ops",
            "tools surface.pins.add --session-id=#ops 1000000000000000900",
            json!({"sessionId": "#ops", "messageId": "1000000000000000900"}),
        )],
    }
}

/// `surface.pins.remove` (run by [`crate::messages::OnMessage::Unpin`]).
pub(crate) fn unpin_spec() -> ToolSpec {
    ToolSpec {
        id: "surface.pins.remove",
        title: "Unpin a message",
        effects: Effects::OVERWRITE,
        output_schema: Some(output_schema::<Done>()),
        description: "Unpin a message.",
        help:
            "Needs the same permission as pinning. Unpinning a message that is not pinned succeeds.",
        mutating: true,
        primary: Some("messageId"),
        examples: vec![example(
            "Unpin a message in #ops",
            "tools surface.pins.remove --session-id=#ops 1000000000000000900",
            json!({"sessionId": "#ops", "messageId": "1000000000000000900"}),
        )],
    }
}

pub struct ListPins;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListPinsInput {
    /// Channel id, <#id>, or configured token; defaults to your context's session.
    pub session_id: Option<String>,
}

/// A pinned message.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct PinView {
    /// When it was pinned (RFC 3339), when Discord said.
    pinned_at: Option<String>,
    /// The message.
    #[schemars(with = "MessageView<'static>")]
    message: Arc<RawValue>,
}

/// `surface.pins.list`'s answer.
#[derive(Serialize, JsonSchema)]
struct PinList<'a> {
    /// The session.
    session: SessionView<'a>,
    /// Its pinned messages, most recently pinned first.
    pins: Vec<PinView>,
}

#[async_trait]
impl Tool for ListPins {
    type Input = ListPinsInput;
    type Plan = ();

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.pins.list",
            title: "List pinned messages",
            effects: Effects::READ,
            output_schema: Some(output_schema::<PinList<'static>>()),
            description: "The pinned messages of a session, most recently pinned first.",
            help: "Asks Discord (pins need not be cached). Each message's text is readable: mentions as @name and #token.",
            mutating: false,
            primary: Some("sessionId"),
            examples: vec![example(
                "Pins in #ops",
                "tools surface.pins.list #ops",
                json!({"sessionId": "#ops"}),
            )],
        }
    }

    fn plan(&self, _: &PlanContext<'_>, input: ListPinsInput) -> Result<Planned<()>, ToolError> {
        Ok(Planned::in_session(
            (),
            SessionRequest::session_id(input.session_id.as_deref(), 0),
        ))
    }

    async fn run(&self, cx: &Invocation<'_>, (): ()) -> Result<ToolOutput, ToolError> {
        let target = cx.target()?;
        let pinned = cx.surface().pinned_messages(target.channel).await?;
        let pins = pinned
            .into_iter()
            .map(|pin| {
                Ok(PinView {
                    pinned_at: pin.pinned_at,
                    message: cx.message_json(&pin.message)?,
                })
            })
            .collect::<Result<Vec<_>, ToolError>>()?;
        output(&PinList {
            session: cx.session_json(&target),
            pins,
        })
    }
}
