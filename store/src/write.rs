//! The durable writes a backend's writer queues, one enum for every backend: what each write
//! is called in an error log, which channel's retention it touches, and what the change feed
//! reports once it is committed. Generic over how a message and an audit row wait in the queue
//! (SQLite keeps a message's strings in one allocation and an audit row's columns written out
//! on the caller's thread, PostgreSQL the records themselves).

use entity::Snowflake;
use switchboard_records::{
    Approval, AuditEntry, AuditRow, Gap, Message, Role, Session, ThreadState, TriggerClaim, User,
    Workflow,
};

use crate::feed::Changed;

/// A message as it waits in a write queue.
pub trait QueuedMessage {
    /// The message's id.
    fn id(&self) -> Snowflake;
    /// Its channel.
    fn channel_id(&self) -> Snowflake;
}

impl QueuedMessage for Box<Message> {
    fn id(&self) -> Snowflake {
        self.id
    }

    fn channel_id(&self) -> Snowflake {
        self.channel_id
    }
}

/// An audit row as it waits in a write queue.
pub trait QueuedAudit {
    /// The callable it records.
    fn tool(&self) -> &str;
}

impl QueuedAudit for Box<AuditRow> {
    fn tool(&self) -> &str {
        &self.tool
    }
}

/// One durable write, queued by a backend method.
#[derive(Debug)]
pub enum Write<M, A = Box<AuditRow>> {
    /// [`MessageStore::upsert_session`](crate::MessageStore::upsert_session).
    UpsertSession(Session),
    /// [`MessageStore::remove_session`](crate::MessageStore::remove_session).
    RemoveSession(Snowflake),
    /// [`MessageStore::save_thread_state`](crate::MessageStore::save_thread_state).
    SaveThread(Snowflake, ThreadState),
    /// [`MessageStore::upsert_user`](crate::MessageStore::upsert_user).
    UpsertUser(User),
    /// [`MessageStore::upsert_role`](crate::MessageStore::upsert_role).
    UpsertRole(Role),
    /// [`MessageStore::remove_role`](crate::MessageStore::remove_role).
    RemoveRole(Snowflake),
    /// [`MessageStore::save_message`](crate::MessageStore::save_message).
    SaveMessage(M),
    /// [`MessageStore::delete_messages`](crate::MessageStore::delete_messages).
    DeleteMessages {
        /// The channel.
        channel_id: Snowflake,
        /// The messages.
        ids: Vec<Snowflake>,
    },
    /// [`MessageStore::forget_channel`](crate::MessageStore::forget_channel).
    ForgetChannel(Snowflake),
    /// [`MessageStore::open_gap`](crate::MessageStore::open_gap).
    OpenGap(Gap),
    /// [`MessageStore::close_gap`](crate::MessageStore::close_gap).
    CloseGap(Snowflake),
    /// A claim decided in memory, written behind (a backend that decides claims in its
    /// database never queues one).
    ClaimTrigger(TriggerClaim),
    /// Forget claims whose message id is below this (older than claims are kept).
    PruneClaims(Snowflake),
    /// [`WorkflowStore::save_workflow`](crate::WorkflowStore::save_workflow).
    SaveWorkflow(Box<Workflow>),
    /// [`AuditStore::record`](crate::AuditStore::record).
    Audit(A),
    /// [`AuditStore::import_audit`](crate::AuditStore::import_audit): rows under the ids they
    /// had in another store.
    ImportAudit(Vec<AuditEntry>),
    /// [`ScopeStore::set_session_scope`](crate::ScopeStore::set_session_scope).
    SessionScope(Snowflake, Option<Vec<String>>),
    /// [`ApprovalStore::save_approval`](crate::ApprovalStore::save_approval).
    SaveApproval(Box<Approval>),
}

impl<M: QueuedMessage, A: QueuedAudit> Write<M, A> {
    /// What the write does, for error logs.
    pub fn describe(&self) -> String {
        match self {
            Write::UpsertSession(s) => format!("store session {}", s.id),
            Write::RemoveSession(id) => format!("remove session {id}"),
            Write::SaveThread(id, _) => format!("store the state of thread {id}"),
            Write::UpsertUser(user) => format!("store user {}", user.id),
            Write::UpsertRole(role) => format!("store role {}", role.id),
            Write::RemoveRole(id) => format!("remove role {id}"),
            Write::SaveMessage(m) => {
                format!("store message {} in channel {}", m.id(), m.channel_id())
            }
            Write::DeleteMessages { channel_id, ids } => format!(
                "mark {} message(s) deleted in channel {channel_id}",
                ids.len()
            ),
            Write::ForgetChannel(id) => format!("forget the messages of channel {id}"),
            Write::OpenGap(gap) => format!(
                "record a backfill gap after {} in channel {}",
                gap.after, gap.channel_id
            ),
            Write::CloseGap(id) => format!("close the backfill gap of channel {id}"),
            Write::ClaimTrigger(claim) => {
                format!("record message {} as answered", claim.message_id)
            }
            Write::PruneClaims(below) => {
                format!("forget answered triggers older than message {below}")
            }
            Write::SaveWorkflow(w) => format!("store workflow {}", w.workflow_id),
            Write::Audit(row) => format!("record an audit row for {}", row.tool()),
            Write::ImportAudit(rows) => format!("import {} audit row(s)", rows.len()),
            Write::SessionScope(session, _) => {
                format!("keep the /tools scope of session {session}")
            }
            Write::SaveApproval(a) => format!("keep approval {}", a.card.id),
        }
    }

    /// The channel whose retention this write may affect.
    pub fn channel(&self) -> Option<Snowflake> {
        match self {
            Write::SaveMessage(m) => Some(m.channel_id()),
            Write::DeleteMessages { channel_id, .. } => Some(*channel_id),
            _ => None,
        }
    }

    /// What the feed reports once it is committed.
    pub fn changed(&self) -> Option<Changed> {
        Some(match self {
            Write::UpsertSession(s) => Changed::Session(s.id),
            Write::RemoveSession(id) => Changed::SessionRemoved(*id),
            Write::SaveThread(id, _) => Changed::Thread(*id),
            Write::UpsertUser(user) => Changed::User(user.id),
            Write::UpsertRole(role) => Changed::Role(role.id),
            Write::RemoveRole(id) => Changed::RoleRemoved(*id),
            Write::SaveMessage(m) => Changed::Message {
                channel_id: m.channel_id(),
                id: m.id(),
            },
            Write::DeleteMessages { channel_id, ids } => Changed::MessagesDeleted {
                channel_id: *channel_id,
                ids: ids.clone(),
            },
            Write::ForgetChannel(id) => Changed::ChannelForgotten(*id),
            Write::OpenGap(gap) => Changed::Gap(gap.channel_id),
            Write::CloseGap(id) => Changed::Gap(*id),
            Write::ClaimTrigger(claim) => Changed::TriggerClaimed(claim.message_id),
            Write::SaveWorkflow(w) => Changed::Workflow(w.workflow_id.clone()),
            Write::SessionScope(session, _) => Changed::Scope(*session),
            Write::SaveApproval(a) => Changed::Approval(a.card.id.clone()),
            Write::PruneClaims(_) | Write::Audit(_) | Write::ImportAudit(_) => return None,
        })
    }
}
