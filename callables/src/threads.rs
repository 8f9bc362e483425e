//! `surface.threads.*`: create, list, archive; and reopening an archived thread before a send.

use async_trait::async_trait;
use entity::Snowflake;
use protocol::{ErrorCode, ErrorKind};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::ToolError;
use crate::invocation::{parse_id, Invocation, PlanContext, Target};
use crate::registry::{
    example, output, output_schema, Planned, SessionRequest, Tool, ToolOutput, ToolSpec,
};
use crate::surface::{ChannelLocation, NewThread, SessionKind, Thread};
use protocol::Effects;

/// The inactivity periods Discord accepts, in minutes.
const AUTO_ARCHIVE_MINUTES: [u32; 4] = [60, 1440, 4320, 10080];
/// Most threads one listing answers.
const MAX_LIST: u32 = 500;

/// A thread as the callables answer it.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThreadView {
    /// The thread's own channel id: use it (or `token`) as `sessionId`.
    #[schemars(with = "String")]
    pub channel_id: Snowflake,
    /// A reference to the thread usable as `sessionId` (`#name`, or `#channel_<id>`).
    pub token: String,
    /// The channel the thread lives in.
    #[schemars(with = "String")]
    pub parent_channel_id: Snowflake,
    /// Its name.
    pub name: String,
    /// Whether it is archived (a send reopens it unless it is locked).
    pub archived: bool,
    /// Whether it is locked (only a moderator can reopen it).
    pub locked: bool,
    /// Minutes of inactivity before Discord archives it.
    pub auto_archive_minutes: u32,
}

/// `surface.threads.list`'s answer.
#[derive(Serialize, JsonSchema)]
struct ThreadList {
    /// The threads, newest first.
    threads: Vec<ThreadView>,
}

fn thread_view(cx: &Invocation<'_>, thread: Thread) -> ThreadView {
    let Thread { session, state } = thread;
    ThreadView {
        token: cx.mapper().session_reference(session.id),
        channel_id: session.id,
        // Listings skip threads whose parent is unknown; a thread just created or changed
        // came from Discord with its parent.
        parent_channel_id: session.parent_id.unwrap_or(session.id),
        name: session.name,
        archived: state.archived,
        locked: state.locked,
        auto_archive_minutes: state.auto_archive_minutes,
    }
}

fn kind_name(kind: SessionKind) -> &'static str {
    match kind {
        SessionKind::Channel => "a channel",
        SessionKind::Thread => "a thread",
        SessionKind::Dm => "a direct message",
        SessionKind::Forum => "a forum",
        SessionKind::Category => "a category",
        SessionKind::Api => "an API-only session",
    }
}

/// Threads live in text channels: refuses any other session, saying what it is.
fn require_channel(target: &Target, what: &str) -> Result<(), ToolError> {
    if target.location.kind == SessionKind::Channel {
        return Ok(());
    }
    let hint = match target.location.kind {
        SessionKind::Thread => match target.location.parent_channel_id {
            Some(parent) => format!(" name its channel ({parent}) instead"),
            None => " name its channel instead".to_owned(),
        },
        _ => " name a text channel".to_owned(),
    };
    Err(ToolError::usage(
        ErrorCode::InvalidInput,
        format!(
            "Session {} is {}, which has no threads to {what};{hint}",
            target.channel,
            kind_name(target.location.kind)
        ),
    )
    .with_details(json!({ "field": "sessionId" })))
}

pub struct CreateThread;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CreateThreadInput {
    /// The channel to open the thread in (id, <#id>, or configured token); defaults to your
    /// context's session. The channel's allowlist applies.
    pub session_id: Option<String>,
    /// The thread's name (1 to 100 characters).
    pub name: String,
    /// Start the thread from this message of the channel; without it the thread stands alone.
    pub message_id: Option<String>,
    /// Minutes of inactivity before Discord archives it: 60, 1440, 4320 or 10080.
    pub auto_archive_minutes: Option<u32>,
}

/// A checked thread creation.
pub struct CreatePlan {
    name: String,
    message_id: Option<Snowflake>,
    auto_archive_minutes: Option<u32>,
}

#[async_trait]
impl Tool for CreateThread {
    type Input = CreateThreadInput;
    type Plan = CreatePlan;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.threads.create",
            title: "Start a thread",
            effects: Effects::ADD,
            output_schema: Some(output_schema::<ThreadView>()),
            description: "Open a thread in a channel, from one of its messages or standalone.",
            help: "Creates a public thread under the session's channel (which the allowlist must allow) and joins it. With messageId the thread starts from that message (its id becomes the thread's). Answers the thread's channelId and a token usable as sessionId.",
            mutating: true,
            primary: Some("name"),
            examples: vec![
                example("A thread about a message in #ops", "tools surface.threads.create --session-id=#ops --message-id=1000000000000000900 \"deploy follow-up\"", json!({"sessionId": "#ops", "messageId": "1000000000000000900", "name": "deploy follow-up"})),
                example("A standalone thread that archives after an hour", "tools surface.threads.create --session-id=#ops --auto-archive-minutes=60 \"standup\"", json!({"sessionId": "#ops", "autoArchiveMinutes": 60, "name": "standup"})),
            ],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: CreateThreadInput,
    ) -> Result<Planned<CreatePlan>, ToolError> {
        let name = super::channel_name(&input.name)?;
        if let Some(minutes) = input.auto_archive_minutes {
            if !AUTO_ARCHIVE_MINUTES.contains(&minutes) {
                return Err(ToolError::usage(
                    ErrorCode::InvalidInput,
                    format!(
                        "autoArchiveMinutes must be one of 60, 1440, 4320 or 10080, got {minutes}"
                    ),
                )
                .with_details(json!({ "field": "autoArchiveMinutes" })));
            }
        }
        let message_id = input
            .message_id
            .as_deref()
            .map(|id| parse_id("messageId", id))
            .transpose()?;
        Ok(Planned::in_session(
            CreatePlan {
                name,
                message_id,
                auto_archive_minutes: input.auto_archive_minutes,
            },
            SessionRequest::session_id(input.session_id.as_deref(), 1),
        ))
    }

    async fn run(&self, cx: &Invocation<'_>, plan: CreatePlan) -> Result<ToolOutput, ToolError> {
        let target = cx.target()?;
        require_channel(&target, "open")?;
        let thread = cx
            .surface()
            .create_thread(NewThread {
                parent: target.channel,
                name: plan.name,
                from_message: plan.message_id,
                auto_archive_minutes: plan.auto_archive_minutes,
            })
            .await?;
        output(&thread_view(cx, thread))
    }
}

pub struct ListThreads;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListThreadsInput {
    /// Only the threads of this channel (id, <#id>, or configured token), asked of Discord;
    /// without it, the cached threads of every channel you may use.
    pub session_id: Option<String>,
    /// Archived threads too (default false).
    pub include_archived: Option<bool>,
    /// At most this many threads (1 to 500, default 100).
    pub limit: Option<u32>,
}

/// A checked listing.
pub struct ListPlan {
    one_channel: bool,
    include_archived: bool,
    limit: usize,
}

#[async_trait]
impl Tool for ListThreads {
    type Input = ListThreadsInput;
    type Plan = ListPlan;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.threads.list",
            title: "List threads",
            effects: Effects::READ,
            output_schema: Some(output_schema::<ThreadList>()),
            description: "List threads: of one channel, or of every channel you may use.",
            help: "With sessionId, asks Discord for the channel's active threads (and its archived public ones with includeArchived). Without it, lists the cached threads of every allowed channel. Each thread's token is usable as sessionId.",
            mutating: false,
            primary: Some("sessionId"),
            examples: vec![
                example("Threads of #ops, archived ones too", "tools surface.threads.list #ops --include-archived=true", json!({"sessionId": "#ops", "includeArchived": true})),
                example("Every active thread you may use", "tools surface.threads.list", json!({})),
            ],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: ListThreadsInput,
    ) -> Result<Planned<ListPlan>, ToolError> {
        let limit = input.limit.unwrap_or(100);
        if !(1..=MAX_LIST).contains(&limit) {
            return Err(ToolError::usage(
                ErrorCode::InvalidInput,
                format!("limit must be between 1 and {MAX_LIST}, got {limit}"),
            ));
        }
        let session = input
            .session_id
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty());
        let plan = ListPlan {
            one_channel: session.is_some(),
            include_archived: input.include_archived.unwrap_or(false),
            limit: limit as usize,
        };
        Ok(match session {
            Some(session) => {
                Planned::in_session(plan, SessionRequest::session_id(Some(session), 0))
            }
            None => Planned::nowhere(plan),
        })
    }

    async fn run(&self, cx: &Invocation<'_>, plan: ListPlan) -> Result<ToolOutput, ToolError> {
        let mut threads = if plan.one_channel {
            let target = cx.target()?;
            require_channel(&target, "list")?;
            cx.surface()
                .list_threads(target.channel, plan.include_archived)
                .await?
        } else {
            let allowlist = &cx.core.allowlist();
            cx.surface()
                .threads(None)
                .into_iter()
                .filter(|thread| plan.include_archived || !thread.state.archived)
                .filter(|thread| {
                    let Some(parent) = thread.parent_id() else {
                        return false;
                    };
                    allowlist.allows_cached(thread.session.id, |id| {
                        if id == thread.session.id {
                            return Some(ChannelLocation {
                                guild_id: thread.session.guild_id,
                                parent_channel_id: Some(parent),
                                kind: SessionKind::Thread,
                            });
                        }
                        cx.surface().session(id).map(|s| ChannelLocation::from(&s))
                    })
                })
                .collect()
        };
        threads.truncate(plan.limit);
        let views: Vec<ThreadView> = threads.into_iter().map(|t| thread_view(cx, t)).collect();
        output(&ThreadList { threads: views })
    }
}

pub struct ArchiveThread;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ArchiveThreadInput {
    /// The thread (id, <#id>, or token); defaults to your context's session.
    pub session_id: Option<String>,
    /// true archives it, false reopens it.
    pub archived: bool,
}

#[async_trait]
impl Tool for ArchiveThread {
    type Input = ArchiveThreadInput;
    type Plan = bool;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.threads.archive",
            title: "Archive or reopen a thread",
            effects: Effects::MARK,
            output_schema: Some(output_schema::<ThreadView>()),
            description: "Archive a thread, or reopen an archived one.",
            help: "archived=true archives the thread; archived=false reopens it and the bot joins it again. A locked thread can only be reopened by a moderator (Manage Threads): Discord refuses otherwise.",
            mutating: true,
            primary: Some("archived"),
            examples: vec![
                example("Archive incident-42", "tools surface.threads.archive --session-id=#incident-42 true", json!({"sessionId": "#incident-42", "archived": true})),
                example("Reopen it", "tools surface.threads.archive --session-id=#incident-42 false", json!({"sessionId": "#incident-42", "archived": false})),
            ],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: ArchiveThreadInput,
    ) -> Result<Planned<bool>, ToolError> {
        Ok(Planned::in_session(
            input.archived,
            SessionRequest::session_id(input.session_id.as_deref(), 1),
        ))
    }

    async fn run(&self, cx: &Invocation<'_>, archived: bool) -> Result<ToolOutput, ToolError> {
        let target = cx.target()?;
        if target.location.kind != SessionKind::Thread {
            return Err(ToolError::usage(
                ErrorCode::InvalidInput,
                format!(
                    "Session {} is {}, not a thread; only threads are archived",
                    target.channel,
                    kind_name(target.location.kind)
                ),
            )
            .with_details(json!({ "field": "sessionId" })));
        }
        let thread = cx
            .surface()
            .set_thread_archived(target.channel, archived)
            .await?;
        output(&thread_view(cx, thread))
    }
}

/// Before a post in a thread: reopens it when it is archived and not locked (true when it did),
/// and refuses with `thread_locked` when it is archived and locked.
pub(crate) async fn reopen_for_send(
    cx: &Invocation<'_>,
    target: &Target,
) -> Result<bool, ToolError> {
    if target.location.kind != SessionKind::Thread {
        return Ok(false);
    }
    let Some(thread) = cx.surface().thread(target.channel_id()) else {
        return Ok(false);
    };
    if !thread.state.archived {
        return Ok(false);
    }
    if thread.state.locked {
        return Err(ToolError::new(
            ErrorKind::Conflict,
            ErrorCode::ThreadLocked,
            format!(
                "Thread {} ({}) is archived and locked, so nothing can be posted in it; a moderator (Manage Threads) must unlock it first",
                thread.session.id, thread.session.name
            ),
        )
        .with_details(json!({ "channelId": thread.session.id.to_string() })));
    }
    cx.surface()
        .set_thread_archived(target.channel, false)
        .await?;
    Ok(true)
}
