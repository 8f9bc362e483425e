//! The durable writes a backend's writer queues, one enum for every backend: what each write
//! is called in an error log, which channel's retention it touches, and what the change feed
//! reports once it is committed. Generic over how a message and an audit row wait in the queue
//! (SQLite keeps a message's strings in one allocation and an audit row's columns written out
//! on the caller's thread, PostgreSQL the records themselves).

use std::collections::HashSet;
use std::time::{Duration, Instant};

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

/// How a flush is answered: the first write failure since the last answer, or `Ok`.
pub type FlushReply = tokio::sync::oneshot::Sender<Result<(), String>>;

/// What a backend's writer thread keeps between batches, alike in every backend: the first
/// write failure not answered yet, and the channels written since the last prune of old
/// messages with when the next one is due.
#[derive(Debug)]
pub struct WriterBook {
    failure: Option<String>,
    touched: HashSet<Snowflake>,
    batches_since_prune: u32,
    last_prune: Instant,
}

impl Default for WriterBook {
    fn default() -> Self {
        WriterBook {
            failure: None,
            touched: HashSet::new(),
            batches_since_prune: 0,
            last_prune: Instant::now(),
        }
    }
}

impl WriterBook {
    /// A prune is due after this many batches...
    pub const PRUNE_EVERY_BATCHES: u32 = 64;
    /// ...or this long after the last one, whichever comes first (and the longest a writer
    /// waits for a write before it looks).
    pub const PRUNE_INTERVAL: Duration = Duration::from_secs(30);

    /// Keeps `what` to answer the next flush or close with, unless an earlier failure waits.
    pub fn fail(&mut self, what: String) {
        self.failure.get_or_insert(what);
    }

    /// Notes a channel a write added to or deleted from (its retention is due at the next
    /// prune).
    pub fn touch(&mut self, channel: Snowflake) {
        self.touched.insert(channel);
    }

    /// Answers every waiting flush with the failure kept since the last answer, or `Ok`. A
    /// failure is kept until a flush or close answers it: a batch committed before the flush
    /// arrived must not swallow it.
    pub fn answer(&mut self, replies: &mut Vec<FlushReply>) {
        if replies.is_empty() {
            return;
        }
        let answer = self.failure.take().map_or(Ok(()), Err);
        for reply in replies.drain(..) {
            let _ = reply.send(answer.clone());
        }
    }

    /// What a close is answered with: the failure not answered yet, or `Ok`.
    pub fn close_answer(&mut self) -> Result<(), String> {
        self.failure.take().map_or(Ok(()), Err)
    }

    /// Counts a committed batch.
    pub fn batch_done(&mut self) {
        self.batches_since_prune += 1;
    }

    /// Whether a channel waits for its prune.
    pub fn touched_any(&self) -> bool {
        !self.touched.is_empty()
    }

    /// Whether a prune is due: a channel waits, and enough batches or time have passed.
    pub fn prune_due(&self) -> bool {
        self.touched_any()
            && (self.batches_since_prune >= Self::PRUNE_EVERY_BATCHES
                || self.last_prune.elapsed() >= Self::PRUNE_INTERVAL)
    }

    /// Takes the channels to prune and starts counting to the next prune.
    pub fn take_touched(&mut self) -> Vec<Snowflake> {
        self.batches_since_prune = 0;
        self.last_prune = Instant::now();
        self.touched.drain().collect()
    }

    /// Gives back channels a failed prune did not reach (the next one retries them).
    pub fn retouch(&mut self, channels: impl IntoIterator<Item = Snowflake>) {
        self.touched.extend(channels);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_failure_waits_for_the_next_flush_and_is_answered_once() {
        let mut book = WriterBook::default();
        book.fail("first".to_owned());
        book.fail("second".to_owned());
        // No flush waits: the failure is kept.
        book.answer(&mut Vec::new());
        let (one, one_answer) = tokio::sync::oneshot::channel();
        let (two, two_answer) = tokio::sync::oneshot::channel();
        book.answer(&mut vec![one, two]);
        assert_eq!(one_answer.blocking_recv(), Ok(Err("first".to_owned())));
        assert_eq!(two_answer.blocking_recv(), Ok(Err("first".to_owned())));
        assert_eq!(book.close_answer(), Ok(()));
    }

    #[test]
    fn a_prune_is_due_after_enough_batches_and_only_with_channels_written() {
        let mut book = WriterBook::default();
        for _ in 0..WriterBook::PRUNE_EVERY_BATCHES {
            book.batch_done();
        }
        assert!(!book.prune_due(), "nothing written, nothing to prune");
        book.touch(Snowflake(7));
        assert!(book.prune_due());
        assert_eq!(book.take_touched(), vec![Snowflake(7)]);
        assert!(!book.prune_due());
        book.retouch([Snowflake(7)]);
        assert!(book.touched_any());
        assert!(!book.prune_due(), "the count starts again after a prune");
    }
}
