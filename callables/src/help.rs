//! `surface.help`: what an agent needs to know to use the other callables.

use async_trait::async_trait;
use entity::AliasKind;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::auth::Caller;
use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext};
use crate::registry::{example, output, output_schema, Planned, Tool, ToolOutput, ToolSpec};
use protocol::Effects;

pub struct Help;

/// No input.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HelpInput {}

#[async_trait]
impl Tool for Help {
    type Input = HelpInput;
    type Plan = ();

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.help",
            description: "Your context (session, token), how to name sessions, the configured session tokens, and the callables you may use.",
            help: "Call this first. `sessionId` in every other callable defaults to the session in your context; it accepts a channel id, a <#id> mention, or a configured token with or without '#'.",
            mutating: false,
            primary: None,
            title: "Your context and how to call",
            effects: Effects::LOCAL_READ,
            output_schema: Some(output_schema::<HelpAnswer<'static>>()),
            examples: vec![example("Show your context", "tools surface.help --output=text", json!({}))],
        }
    }

    fn plan(&self, _: &PlanContext<'_>, _: HelpInput) -> Result<Planned<()>, ToolError> {
        Ok(Planned::nowhere(()))
    }

    async fn run(&self, cx: &Invocation<'_>, (): ()) -> Result<ToolOutput, ToolError> {
        let core = cx.core;
        let (caller, scope) = match &cx.context.caller {
            Caller::Operator => ("operator", None),
            Caller::Unauthenticated => ("unauthenticated", None),
            Caller::Capability(c) => ("capability", Some(c.grant.scope.clone())),
            Caller::Token(t) => ("token", Some(t.scope.clone())),
            Caller::Discord(_) => (
                "discord",
                Some(
                    crate::auth::DISCORD_CALLABLES
                        .iter()
                        .map(|id| (*id).to_owned())
                        .collect(),
                ),
            ),
        };
        let session = cx.context.session_ref.as_deref().map(|reference| {
            match cx.mapper().resolve_session(reference) {
                Ok(id) => ContextSession::Resolved {
                    channel_id: id.to_string(),
                    token: cx.settings().aliases().alias_for(AliasKind::Session, id),
                    title: cx.surface().session(id).map(|s| s.name),
                    reference: cx.mapper().session_reference(id),
                },
                Err(error) => ContextSession::Unresolved {
                    reference,
                    error: error.to_string(),
                },
            }
        });
        let config = cx.settings().config();
        let sessions: Vec<SessionToken<'_>> = config
            .aliases
            .iter(AliasKind::Session)
            .map(|(token, id)| SessionToken {
                token,
                channel_id: id.to_string(),
                comment: config
                    .alias_comments
                    .get(&(AliasKind::Session, token.to_owned()))
                    .map(String::as_str),
            })
            .collect();
        let callables: Vec<CallableLine> = core
            .tools_for(&cx.context.caller)
            .into_iter()
            .map(|t| CallableLine {
                id: t.id,
                description: t.description,
                mutating: t.mutating,
            })
            .collect();
        output(&HelpAnswer {
            context: HelpContext {
                caller,
                scope,
                session,
                request_id: cx.context.request_id.as_deref(),
                client: cx.context.client.as_deref(),
                cwd: cx.context.cwd.as_deref(),
                message_id: cx.context.trigger_message_id.map(|id| id.to_string()),
            },
            session_formats: [
                "a channel or thread id: 334455667788990011",
                "a mention: <#334455667788990011>",
                "a configured token: ops or #ops (any case)",
            ],
            sessions,
            mentions: "Write @name for people and roles and #token for channels; they become real mentions. @everyone and @here never ping.",
            callables,
        })
    }
}

/// `surface.help`'s answer.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct HelpAnswer<'a> {
    /// Who is calling, and where.
    context: HelpContext<'a>,
    /// The ways to name a session.
    session_formats: [&'static str; 3],
    /// The configured session tokens.
    sessions: Vec<SessionToken<'a>>,
    /// How to write mentions.
    mentions: &'static str,
    /// The callables this caller may call.
    callables: Vec<CallableLine>,
}

/// The caller's context.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct HelpContext<'a> {
    /// `operator`, `token`, `capability` or `unauthenticated`.
    caller: &'static str,
    /// The token's tool scope (glob patterns); `None` for the operator.
    scope: Option<Vec<String>>,
    /// The context's default session.
    session: Option<ContextSession<'a>>,
    /// The agent run the call belongs to.
    request_id: Option<&'a str>,
    /// Who is calling (an agent host's name).
    client: Option<&'a str>,
    /// The directory files are read from and saved to.
    cwd: Option<&'a str>,
    /// The message that started the run.
    message_id: Option<String>,
}

/// The context's session: resolved, or why not.
#[derive(Serialize, JsonSchema)]
#[serde(untagged)]
enum ContextSession<'a> {
    /// It names a session.
    #[serde(rename_all = "camelCase")]
    Resolved {
        /// The channel.
        channel_id: String,
        /// Its configured token.
        token: Option<&'a str>,
        /// Its name.
        title: Option<String>,
        /// How to name it as `sessionId` and in text (`#ops`, `#release-checklist`).
        reference: String,
    },
    /// It names nothing known.
    Unresolved {
        /// The reference as given.
        reference: &'a str,
        /// Why it does not resolve.
        error: String,
    },
}

/// A configured session token.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct SessionToken<'a> {
    /// The token (`ops`).
    token: &'a str,
    /// The channel it names.
    channel_id: String,
    /// The comment beside it in the config.
    comment: Option<&'a str>,
}

/// A callable the caller may call.
#[derive(Serialize, JsonSchema)]
struct CallableLine {
    /// Its id.
    id: String,
    /// What it does.
    description: String,
    /// Whether it changes anything.
    mutating: bool,
}
