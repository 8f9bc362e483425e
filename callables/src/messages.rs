//! `surface.messages.*`: list, read, send, edit, delete.

use async_trait::async_trait;
use entity::Snowflake;
use protocol::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::chunk::{split_message, MESSAGE_LIMIT};
use crate::error::ToolError;
use crate::warnings::{MentionWarning, MentionWarnings};
use std::sync::Arc;

use serde_json::value::RawValue;

use crate::invocation::{parse_id, Invocation, MessageView, PlanContext, SessionView};
use crate::registry::{
    example, output, output_schema, Planned, SessionRequest, Tool, ToolOutput, ToolSpec,
};
use crate::run_files as files;
use crate::surface::{MessageQuery, OutgoingFile, OutgoingMessage, SurfaceError};
use protocol::Effects;
use switchboard_engine::nonce::{PostKey, RunPosts};

const DEFAULT_LIMIT: u32 = 50;
const MAX_LIMIT: u32 = 200;

pub struct ListMessages;

/// `surface.messages.list`'s answer.
#[derive(Serialize, JsonSchema)]
struct MessageList<'a> {
    /// The session they are in.
    session: SessionView<'a>,
    /// Oldest first; each rendered once per revision.
    #[schemars(with = "Vec<MessageView<'static>>")]
    messages: Vec<Arc<RawValue>>,
}

/// `surface.messages.read`'s answer.
#[derive(Serialize, JsonSchema)]
struct OneMessage<'a> {
    /// The session it is in.
    session: SessionView<'a>,
    /// The message.
    #[schemars(with = "MessageView<'static>")]
    message: Arc<RawValue>,
}

/// `surface.messages.send`'s answer.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Sent {
    /// Where it was posted.
    channel_id: String,
    /// One id per part the text was split into, in order.
    message_ids: Vec<String>,
    /// Present (true) when the target was an archived thread that was reopened to post this.
    #[serde(skip_serializing_if = "Option::is_none")]
    unarchived: Option<bool>,
    /// Why `unarchived` is there.
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'static str>,
    /// The `@name`s and `#token`s that were left as plain text (and why), that several people
    /// or channels share, or that link a channel switchboard may not use. Absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<MentionWarning>,
    /// Warnings beyond the listed ones (at most 20 are listed).
    #[serde(skip_serializing_if = "Option::is_none")]
    more_warnings: Option<usize>,
}

/// `surface.messages.edit`'s answer.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Edited {
    /// Always true (a failure is an error, not this).
    ok: bool,
    /// As for a send: the tokens left as text or ambiguous, or linking a channel switchboard
    /// may not use. Absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<MentionWarning>,
    /// Warnings beyond the listed ones (at most 20 are listed).
    #[serde(skip_serializing_if = "Option::is_none")]
    more_warnings: Option<usize>,
}

/// The answer of a call that only acts: `{"ok":true}`.
#[derive(Serialize, JsonSchema)]
pub(crate) struct Done {
    /// Always true (a failure is an error, not this).
    ok: bool,
}

impl Done {
    pub(crate) const OK: Done = Done { ok: true };
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListMessagesInput {
    /// Channel id, <#id>, or configured token; defaults to your context's session.
    pub session_id: Option<String>,
    /// How many messages (1 to 200, default 50): the latest ones before/after the cursors.
    pub limit: Option<u32>,
    /// Only messages older than this message id.
    pub before_message_id: Option<String>,
    /// Only messages newer than this message id.
    pub after_message_id: Option<String>,
}

#[async_trait]
impl Tool for ListMessages {
    type Input = ListMessagesInput;
    type Plan = MessageQuery;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.messages.list",
            description: "Read recent messages of a session from the cache, oldest first.",
            help: "Returns the latest `limit` cached messages (before/after the given message ids), oldest first. `text` is readable: mentions appear as @name and #token. Nothing is fetched from Discord's history.",
            mutating: false,
            primary: Some("sessionId"),
            title: "Read recent messages",
            effects: Effects::READ,
            output_schema: Some(output_schema::<MessageList<'static>>()),
            examples: vec![
                example("The last 20 messages in #ops", "tools surface.messages.list --session-id=#ops --limit=20 --output=text", json!({"sessionId": "#ops", "limit": 20})),
                example("Messages before a given one", "tools surface.messages.list #ops --before-message-id=1000000000000000900", json!({"sessionId": "#ops", "beforeMessageId": "1000000000000000900"})),
            ],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: ListMessagesInput,
    ) -> Result<Planned<MessageQuery>, ToolError> {
        let limit = input.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ToolError::usage(
                ErrorCode::InvalidInput,
                format!("limit must be between 1 and {MAX_LIMIT}, got {limit}"),
            ));
        }
        let before = input
            .before_message_id
            .as_deref()
            .map(|id| parse_id("beforeMessageId", id))
            .transpose()?;
        let after = input
            .after_message_id
            .as_deref()
            .map(|id| parse_id("afterMessageId", id))
            .transpose()?;
        Ok(Planned::in_session(
            MessageQuery {
                limit: limit as usize,
                before,
                after,
            },
            SessionRequest::session_id(input.session_id.as_deref(), 0),
        ))
    }

    async fn run(&self, cx: &Invocation<'_>, query: MessageQuery) -> Result<ToolOutput, ToolError> {
        let target = cx.target()?;
        let messages = cx.messages_json(target.channel, query)?;
        output(&MessageList {
            session: cx.session_json(&target),
            messages,
        })
    }
}

/// One message in a session: what read, delete and `surface.reactions.list` take.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MessageRefInput {
    /// Channel id, <#id>, or configured token; defaults to your context's session.
    pub session_id: Option<String>,
    /// The message's id.
    pub message_id: String,
}

impl MessageRefInput {
    /// The message, in the input's session, spending `spend` of the channel's budget.
    pub(crate) fn plan(self, spend: u32) -> Result<Planned<Snowflake>, ToolError> {
        let message_id = parse_id("messageId", &self.message_id)?;
        Ok(Planned::in_session(
            message_id,
            SessionRequest::session_id(self.session_id.as_deref(), spend),
        ))
    }
}

pub struct SendMessage;

fn too_many_parts(parts: usize, max: usize) -> ToolError {
    ToolError::usage(
        ErrorCode::TooManyParts,
        format!("This text would be posted as {parts} messages; one send posts at most {max} (toolserver.max_parts_per_send). Shorten it, or attach it as a file with paths."),
    )
    .with_details(json!({ "parts": parts, "max": max }))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SendMessageInput {
    /// Channel id, <#id>, or configured token; defaults to your context's session.
    pub session_id: Option<String>,
    /// What to say. @name and #token become mentions; over 2,000 characters is split. May be
    /// empty when `paths` attaches files.
    #[serde(default)]
    pub text: String,
    /// Reply to this message (the first part replies when the text is split).
    pub reply_to_message_id: Option<String>,
    /// Ping nobody.
    pub silent: Option<bool>,
    /// Files to attach, relative to the run's working directory (at most 10, 8 MiB each,
    /// 16 MiB in all). They go on the last message when the text is split.
    pub paths: Option<Vec<String>>,
}

#[async_trait]
impl Tool for SendMessage {
    type Input = SendMessageInput;
    type Plan = SendPlan;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.messages.send",
            description: "Post a message in a session. @name and #token become real mentions.",
            help: "Text over 2,000 characters is split into several messages at paragraph, line, then word boundaries, never inside a mention; a code block open at a split is closed and reopened. Mentions ping users only (roles only when the operator allows it); @everyone and @here never ping. `silent: true` pings nobody. `paths` attaches files from the run's working directory (at most 10 files, 8 MiB each, 16 MiB in all; nothing outside the directory); every path is checked before anything is posted.",
            mutating: true,
            primary: Some("text"),
            title: "Send a message",
            effects: Effects::ADD,
            output_schema: Some(output_schema::<Sent>()),
            examples: vec![
                example("Say something in #release-room", "tools surface.messages.send --session-id=#release-room \"ping @Stanley about #ops\"", json!({"sessionId": "#release-room", "text": "ping @Stanley about #ops"})),
                example("Reply without pinging", "tools surface.messages.send --reply-to-message-id=1000000000000000900 --silent=true \"done\"", json!({"replyToMessageId": "1000000000000000900", "silent": true, "text": "done"})),
                example("Post two files from the working directory", "tools surface.messages.send --paths=report.pdf,logs/build.txt \"the build report\"", json!({"paths": ["report.pdf", "logs/build.txt"], "text": "the build report"})),
            ],
        }
    }

    fn plan(
        &self,
        cx: &PlanContext<'_>,
        input: SendMessageInput,
    ) -> Result<Planned<SendPlan>, ToolError> {
        let paths = input.paths.unwrap_or_default();
        if input.text.trim().is_empty() && paths.is_empty() {
            return Err(ToolError::usage(
                ErrorCode::EmptyText,
                "text is empty; say something, or attach files with paths (Discord refuses empty messages)",
            ));
        }
        let reply_to = input
            .reply_to_message_id
            .as_deref()
            .map(|id| parse_id("replyToMessageId", id))
            .transpose()?;
        let max_parts = cx.max_parts_per_send();
        // A cheap bound before any work: no rewrite shrinks text this much.
        let chars = input.text.chars().count();
        if chars > max_parts * MESSAGE_LIMIT * 2 {
            return Err(too_many_parts(chars.div_ceil(MESSAGE_LIMIT), max_parts));
        }
        let rewritten = cx.mapper().outbound_noted(&input.text);
        let warnings = MentionWarnings::of(cx, &rewritten);
        let content = rewritten.text.into_owned();
        let mut parts = split_message(&content, MESSAGE_LIMIT);
        // Discord refuses a message that is only whitespace; such a part carries nothing.
        parts.retain(|part| !part.trim().is_empty());
        if parts.len() > max_parts {
            return Err(too_many_parts(parts.len(), max_parts));
        }
        if parts.is_empty() {
            parts.push(String::new());
        }
        let spend = u32::try_from(parts.len()).unwrap_or(u32::MAX);
        Ok(Planned::in_session(
            SendPlan {
                parts,
                reply_to,
                silent: input.silent.unwrap_or(false),
                paths,
                warnings,
            },
            SessionRequest::session_id(input.session_id.as_deref(), spend),
        ))
    }

    async fn run(&self, cx: &Invocation<'_>, plan: SendPlan) -> Result<ToolOutput, ToolError> {
        let target = cx.target()?;
        // Files are read only now, once every check has passed.
        let mut files = if plan.paths.is_empty() {
            Vec::new()
        } else {
            let dir = files::run_dir(cx.context.cwd.as_deref())?;
            let paths = plan.paths;
            tokio::task::spawn_blocking(move || files::load_for_send(&dir, &paths))
                .await
                .map_err(|e| ToolError::internal(format!("reading the files failed: {e}")))??
                .into_iter()
                .map(|file| OutgoingFile {
                    filename: file.filename,
                    content: file.content,
                })
                .collect()
        };
        // An archived thread takes no messages: reopen it first (a locked one is refused).
        let mut unarchived = super::threads::reopen_for_send(cx, &target).await?;
        let last = plan.parts.len() - 1;
        let mut message_ids: Vec<String> = Vec::with_capacity(plan.parts.len());
        let run_posts = cx.run_posts();
        for (index, part) in plan.parts.into_iter().enumerate() {
            let reply = if index == 0 { plan.reply_to } else { None };
            let mut message = OutgoingMessage {
                channel_id: target.channel,
                content: part,
                reply_to: reply,
                mentions: cx.mention_policy(reply.is_some(), plan.silent),
                files: if index == last {
                    std::mem::take(&mut files)
                } else {
                    Vec::new()
                },
                nonce: None,
            };
            if let Some(posts) = &run_posts {
                message = with_run_nonce(posts, message).await?;
            }
            // Kept only where a retry can happen: the first part, in a thread not reopened yet.
            let retry = (index == 0
                && !unarchived
                && target.location.kind == crate::surface::SessionKind::Thread)
                .then(|| message.clone());
            let mut sent = cx.surface().send_message(message).await;
            // The cache thought the thread open but the platform found it archived (the
            // surface has refreshed what it knows): reopen it and try once more.
            if let (Err(SurfaceError::Conflict(_)), Some(message)) = (&sent, retry) {
                if super::threads::reopen_for_send(cx, &target).await? {
                    unarchived = true;
                    sent = cx.surface().send_message(message).await;
                }
            }
            match sent {
                Ok(id) => message_ids.push(id.to_string()),
                Err(error) => {
                    let mut error = ToolError::from(error);
                    if !message_ids.is_empty() {
                        error.message = format!(
                            "{} (after {} of the message's parts were posted: {})",
                            error.message,
                            message_ids.len(),
                            message_ids.join(", ")
                        );
                        error.details =
                            json!({ "sentMessageIds": message_ids, "cause": error.details });
                    }
                    return Err(error);
                }
            }
        }
        output(&Sent {
            channel_id: target.channel_id().to_string(),
            message_ids,
            unarchived: unarchived.then_some(true),
            note: unarchived.then_some("the thread was archived; it was reopened to post this"),
            more_warnings: (plan.warnings.more > 0).then_some(plan.warnings.more),
            warnings: plan.warnings.list,
        })
    }
}

/// `message` with the nonce its run gives it (`switchboard_engine::nonce`): the same run run
/// again (`agent.interrupted = "rerun"`) posts the same part under the same nonce, which the
/// platform answers with the message it posted the first time. Files are hashed off the
/// runtime's threads.
async fn with_run_nonce(
    posts: &RunPosts,
    mut message: OutgoingMessage,
) -> Result<OutgoingMessage, ToolError> {
    let key = if message.files.is_empty() {
        PostKey::of(&message)
    } else {
        let (key, kept) = tokio::task::spawn_blocking(move || (PostKey::of(&message), message))
            .await
            .map_err(|e| ToolError::internal(format!("hashing the files failed: {e}")))?;
        message = kept;
        key
    };
    message.nonce = posts.next_nonce(&key);
    Ok(message)
}

/// A checked send: its parts (rewritten and split), what to attach, and what the rewrite
/// warns about.
pub struct SendPlan {
    parts: Vec<String>,
    reply_to: Option<Snowflake>,
    silent: bool,
    paths: Vec<String>,
    warnings: MentionWarnings,
}

pub struct EditMessage;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EditMessageInput {
    /// Channel id, <#id>, or configured token; defaults to your context's session.
    pub session_id: Option<String>,
    /// A message the bot wrote.
    pub message_id: String,
    /// The new text (at most 2,000 characters after mentions are rewritten).
    pub text: String,
}

#[async_trait]
impl Tool for EditMessage {
    type Input = EditMessageInput;
    type Plan = (Snowflake, String, MentionWarnings);

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.messages.edit",
            description: "Change the text of a message the bot wrote.",
            help: "The new text gets the same mention rewrite as send. Edits are not split: over 2,000 characters is a usage error.",
            mutating: true,
            primary: Some("text"),
            title: "Edit a message",
            effects: Effects::OVERWRITE,
            output_schema: Some(output_schema::<Edited>()),
            examples: vec![example("Fix a typo", "tools surface.messages.edit --session-id=#ops --message-id=1000000000000000900 \"deploy done, thanks @Stanley\"", json!({"sessionId": "#ops", "messageId": "1000000000000000900", "text": "deploy done, thanks @Stanley"}))],
        }
    }

    fn plan(
        &self,
        cx: &PlanContext<'_>,
        input: EditMessageInput,
    ) -> Result<Planned<(Snowflake, String, MentionWarnings)>, ToolError> {
        let message_id = parse_id("messageId", &input.message_id)?;
        if input.text.trim().is_empty() {
            return Err(ToolError::usage(
                ErrorCode::EmptyText,
                "text is empty; to remove the message use surface.messages.delete",
            ));
        }
        let rewritten = cx.mapper().outbound_noted(&input.text);
        let warnings = MentionWarnings::of(cx, &rewritten);
        let content = rewritten.text.into_owned();
        let length = content.chars().count();
        if length > MESSAGE_LIMIT {
            return Err(ToolError::usage(
                ErrorCode::TextTooLong,
                format!("The edited text is {length} characters after mentions are rewritten; an edit holds at most {MESSAGE_LIMIT}. Shorten it, or send the rest as a new message."),
            ));
        }
        Ok(Planned::in_session(
            (message_id, content, warnings),
            SessionRequest::session_id(input.session_id.as_deref(), 1),
        ))
    }

    async fn run(
        &self,
        cx: &Invocation<'_>,
        (message_id, content, warnings): (Snowflake, String, MentionWarnings),
    ) -> Result<ToolOutput, ToolError> {
        let target = cx.target()?;
        if let (Some(message), Some(bot)) = (
            cx.surface().message(target.channel, message_id),
            cx.surface().bot_user_id(),
        ) {
            if message.author_id != bot {
                return Err(ToolError::denied(
                    ErrorCode::NotOwnMessage,
                    format!("Message {message_id} was written by {}, not the bot; only the bot's own messages can be edited", message.author_name),
                ));
            }
        }
        cx.surface()
            .edit_message(
                target.channel,
                message_id,
                content,
                cx.mention_policy(false, false),
            )
            .await?;
        output(&Edited {
            ok: true,
            more_warnings: (warnings.more > 0).then_some(warnings.more),
            warnings: warnings.list,
        })
    }
}

/// The callables whose input is one message of a session: `surface.messages.read`,
/// `surface.reactions.list` (read from the cache), `surface.messages.delete`,
/// `surface.pins.add`, `surface.pins.remove` (one change, answered with `{"ok":true}`). One
/// plan and one run for the five.
#[derive(Debug, Clone, Copy)]
pub enum OnMessage {
    Read,
    Reactions,
    Delete,
    Pin,
    Unpin,
}

#[async_trait]
impl Tool for OnMessage {
    type Input = MessageRefInput;
    type Plan = Snowflake;

    fn spec(&self) -> ToolSpec {
        match self {
            OnMessage::Read => {
                ToolSpec {
                    id: "surface.messages.read",
                    description: "Read one cached message.",
                    help: "Answers not_found when the message is not in the cache (too old, deleted, or from another session).",
                    mutating: false,
                    primary: Some("messageId"),
                    title: "Read one message",
                    effects: Effects::READ,
                    output_schema: Some(output_schema::<OneMessage<'static>>()),
                    examples: vec![example("Read a message in #ops", "tools surface.messages.read --session-id=#ops 1000000000000000900", json!({"sessionId": "#ops", "messageId": "1000000000000000900"}))],
                }
            }
            OnMessage::Reactions => crate::reactions::list_spec(),
            OnMessage::Delete => {
                ToolSpec {
                    id: "surface.messages.delete",
                    description: "Delete a message.",
                    help: "Deleting someone else's message needs the Manage Messages permission in that channel; without it Discord refuses (denied).",
                    mutating: true,
                    primary: Some("messageId"),
                    title: "Delete a message",
                    effects: Effects::OVERWRITE,
                    output_schema: Some(output_schema::<Done>()),
                    examples: vec![example("Delete a message in #ops", "tools surface.messages.delete --session-id=#ops 1000000000000000900", json!({"sessionId": "#ops", "messageId": "1000000000000000900"}))],
                }
            }
            OnMessage::Pin => crate::pins::pin_spec(),
            OnMessage::Unpin => crate::pins::unpin_spec(),
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: MessageRefInput,
    ) -> Result<Planned<Snowflake>, ToolError> {
        // Reading the cache spends none of the channel's budget; a change spends one.
        let spend = match self {
            OnMessage::Read | OnMessage::Reactions => 0,
            OnMessage::Delete | OnMessage::Pin | OnMessage::Unpin => 1,
        };
        input.plan(spend)
    }

    async fn run(
        &self,
        cx: &Invocation<'_>,
        message_id: Snowflake,
    ) -> Result<ToolOutput, ToolError> {
        let target = cx.target()?;
        let surface = cx.surface();
        match self {
            OnMessage::Read => {
                let message = cx.cached_message(&target, message_id)?;
                return output(&OneMessage {
                    session: cx.session_json(&target),
                    message: cx.message_json(&message)?,
                });
            }
            OnMessage::Reactions => {
                let message = cx.cached_message(&target, message_id)?;
                return crate::reactions::list_answer(&message);
            }
            OnMessage::Delete => surface.delete_message(target.channel, message_id).await?,
            OnMessage::Pin | OnMessage::Unpin => {
                let pin = matches!(self, OnMessage::Pin);
                surface.set_pinned(target.channel, message_id, pin).await?;
            }
        }
        output(&Done::OK)
    }
}
