//! Counting messages' tokens when they arrive, off the run's path (issue 25: a prompt for a
//! 300-message session within 2 ms, the first one included).
//!
//! Tokenizing a long session costs milliseconds; the `openai` runner counts through the
//! process's [`Memo`](switchboard_context::Memo) ([`crate::openai::counter`]), so what was
//! counted once is a lookup afterwards. The warmer makes "once" happen before a run needs it:
//!
//! - every newly stored message ([`Runs::arrived`](switchboard_engine::runs::Runs::arrived),
//!   the bridge's ingest hook) is offered to it; a session's recent messages are offered at
//!   start ([`crate::Bridge::warm_recent_sessions`]), when the bot knows its own id;
//! - its one thread, at a lower CPU priority than the gateway's, renders each message exactly
//!   as the run's transcript will ([`crate::prompt::transcript_message`]: same author header,
//!   same trust marks, for the agent that answers in the session) and counts it with that
//!   agent's model's counter — the same encoding, the same memo;
//! - it is bounded and never blocks ingest: offers go into a queue of [`WARM_QUEUE`] jobs and
//!   are dropped when it is full (or its thread is gone). A dropped job, or a message the warmer
//!   rendered differently (a name or the trust list changed since), costs only a count when
//!   the run builds its prompt, as without a warmer; the count itself is never wrong.
//!
//! Sessions whose agent is not an `openai` runner are not counted (nothing reads the counts).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Weak};
use std::time::Duration;

use entity::Snowflake;
use switchboard_config::Runner;
use switchboard_context::TokenCounter;
use switchboard_engine::surface::MessageQuery;
use switchboard_engine::trust::Trust;

use crate::{Bridge, Inner};

/// How many jobs may wait for the warmer; past it, offers are dropped.
pub const WARM_QUEUE: usize = 4_096;
/// Jobs taken together (one lookup of the session's agent and channel for all of a session's).
const BATCH: usize = 256;
/// How long the warmer waits for a session's agent binding or allowlist lookup.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// The warmer's thread's nice value: below the gateway's thread, which stores the messages.
const NICE: i32 = 10;
/// At most this many sessions are warmed at start, the most recently active first.
pub const WARM_SESSIONS_AT_START: usize = 32;
/// At most this many cached sessions are looked at to find them.
const SESSIONS_LOOKED_AT: usize = 2_000;

/// What the warmer is asked to count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Job {
    /// One newly stored message.
    Message {
        /// Its session.
        session: Snowflake,
        /// The message.
        message: Snowflake,
    },
    /// The session's newest `agent.context_messages` messages (at start).
    Recent {
        /// The session.
        session: Snowflake,
    },
}

impl Job {
    fn session(self) -> Snowflake {
        match self {
            Job::Message { session, .. } | Job::Recent { session } => session,
        }
    }
}

/// What the warmer did since the bridge started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WarmStats {
    /// Jobs queued.
    pub queued: u64,
    /// Jobs dropped: the queue was full, or the warmer's thread is gone.
    pub dropped: u64,
    /// Jobs done (counted, or skipped: no `openai` agent, a channel not allowed, a message
    /// no longer cached).
    pub done: u64,
    /// Messages counted (through the memo: a message counted before is a lookup).
    pub counted: u64,
}

#[derive(Debug, Default)]
struct Counters {
    queued: AtomicU64,
    dropped: AtomicU64,
    done: AtomicU64,
    counted: AtomicU64,
}

/// The bounded queue in front of the warmer's thread.
pub(crate) struct Warmer {
    jobs: SyncSender<Job>,
    counters: Arc<Counters>,
}

impl Warmer {
    /// A warmer with room for `capacity` waiting jobs, and the end its thread reads.
    fn bounded(capacity: usize) -> (Warmer, Receiver<Job>) {
        let (jobs, receiver) = sync_channel(capacity);
        let warmer = Warmer {
            jobs,
            counters: Arc::default(),
        };
        (warmer, receiver)
    }

    /// The bridge's warmer, its thread started (see the module docs). When no thread can be
    /// started, every offer is dropped: runs count at build time, as without a warmer.
    pub(crate) fn start(bridge: Weak<Inner>, runtime: tokio::runtime::Handle) -> Warmer {
        let (warmer, receiver) = Warmer::bounded(WARM_QUEUE);
        let counters = Arc::clone(&warmer.counters);
        let spawned = std::thread::Builder::new()
            .name("switchboard-warm".into())
            .spawn(move || work(&bridge, &runtime, &receiver, &counters));
        if let Err(error) = spawned {
            tracing::warn!(%error, "the token-count warmer could not start; prompts count at build time");
        }
        warmer
    }

    /// Queues `job` if there is room; never waits. False when it was dropped.
    pub(crate) fn offer(&self, job: Job) -> bool {
        match self.jobs.try_send(job) {
            Ok(()) => {
                self.counters.queued.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// What it did so far.
    pub(crate) fn stats(&self) -> WarmStats {
        WarmStats {
            queued: self.counters.queued.load(Ordering::Relaxed),
            dropped: self.counters.dropped.load(Ordering::Relaxed),
            done: self.counters.done.load(Ordering::Relaxed),
            counted: self.counters.counted.load(Ordering::Relaxed),
        }
    }
}

/// The warmer's thread: takes jobs in batches until the bridge is gone.
fn work(
    bridge: &Weak<Inner>,
    runtime: &tokio::runtime::Handle,
    jobs: &Receiver<Job>,
    counters: &Counters,
) {
    lower_priority();
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let Some(inner) = bridge.upgrade() else {
            return;
        };
        let bridge = Bridge { inner };
        // A panic here must not end the warmer (nor reach anything else): the batch is lost,
        // its messages are counted when a run needs them.
        let counted =
            std::panic::catch_unwind(AssertUnwindSafe(|| runtime.block_on(bridge.warm(&batch))));
        match counted {
            Ok(n) => {
                counters.counted.fetch_add(n, Ordering::Relaxed);
            }
            Err(_) => tracing::warn!(jobs = batch.len(), "the token-count warmer failed a batch"),
        }
        counters
            .done
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
    }
}

/// Lowers this thread's CPU priority (Linux keeps a nice value per thread): on a busy node
/// the gateway storing messages goes first, the warmer takes what is left.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    if let Err(error) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), NICE) {
        tracing::debug!(%error, "the token-count warmer keeps the default priority");
    }
}

impl Bridge {
    /// Counts `batch`'s messages, a session at a time; how many were counted.
    async fn warm(&self, batch: &[Job]) -> u64 {
        let mut sessions: Vec<Snowflake> = batch.iter().map(|job| job.session()).collect();
        sessions.sort_unstable();
        sessions.dedup();
        let mut counted = 0;
        for session in sessions {
            let jobs = batch.iter().filter(|job| job.session() == session);
            counted += self.warm_session(session, jobs).await;
        }
        counted
    }

    async fn warm_session<'a>(
        &self,
        session: Snowflake,
        jobs: impl Iterator<Item = &'a Job>,
    ) -> u64 {
        let core = &self.inner.core;
        let Ok(agent) = tokio::time::timeout(LOOKUP_TIMEOUT, self.agent_for(session)).await else {
            return 0;
        };
        let Runner::OpenAi(runner) = &agent.config.runner else {
            return 0;
        };
        let Ok(Ok(channel)) = tokio::time::timeout(LOOKUP_TIMEOUT, core.allowed(session)).await
        else {
            return 0;
        };
        let counter = crate::openai::counter(&runner.model);
        let bot_id = self.bot_id();
        let trust = Trust::new(&agent.config.trusted_users, bot_id);
        let surface = core.surface();
        let mut counted = 0;
        for job in jobs {
            let messages = match *job {
                Job::Message { message, .. } => {
                    surface.message(channel, message).into_iter().collect()
                }
                Job::Recent { .. } => surface.messages(
                    channel,
                    MessageQuery {
                        limit: agent.config.context_messages.max(1),
                        before: None,
                        after: None,
                    },
                ),
            };
            for message in &messages {
                let entry = crate::prompt::transcript_message(core, message, bot_id, &trust);
                counter.count(entry.content());
                counted += 1;
            }
        }
        counted
    }

    /// Offers a newly stored message to the warmer when an agent may count tokens for it.
    pub(crate) fn warm_arrived(&self, session: Snowflake, message: Snowflake) {
        if self.counts_tokens() {
            self.warmer().offer(Job::Message { session, message });
        }
    }

    /// Whether any configured agent is an `openai` runner (the only one that counts tokens).
    fn counts_tokens(&self) -> bool {
        matches!(self.config().runner, Runner::OpenAi(_))
            || self
                .inner
                .core
                .settings()
                .config()
                .agents
                .agents
                .iter()
                .any(|agent| matches!(agent.config.runner, Runner::OpenAi(_)))
    }

    fn warmer(&self) -> &Warmer {
        self.inner
            .warmer
            .get_or_init(|| Warmer::start(Arc::downgrade(&self.inner), self.inner.runtime.clone()))
    }

    /// What the token-count warmer did so far (see [`crate::warm`]).
    pub fn warm_stats(&self) -> WarmStats {
        self.inner
            .warmer
            .get()
            .map(Warmer::stats)
            .unwrap_or_default()
    }

    /// Counts, in the background, the recent messages of the sessions most recently active
    /// ([`WARM_SESSIONS_AT_START`] of them), so that the first prompt after a restart finds
    /// their counts. Waits (up to a minute) for the platform to know the bot's own id: the
    /// bot's messages are the assistant's turns, rendered without a header. Call once at start.
    pub fn warm_recent_sessions(&self) {
        if !self.counts_tokens() {
            return;
        }
        let bridge = self.clone();
        self.inner.runtime.spawn(async move {
            for _ in 0..60 {
                if bridge.bot_id().is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            if bridge.bot_id().is_none() {
                return;
            }
            for session in bridge.recent_sessions().await {
                bridge.warmer().offer(Job::Recent { session });
            }
        });
    }

    /// The allowed sessions whose newest cached message is newest, most recent first.
    async fn recent_sessions(&self) -> Vec<Snowflake> {
        let core = &self.inner.core;
        let mut newest = Vec::new();
        for session in core
            .surface()
            .sessions()
            .into_iter()
            .take(SESSIONS_LOOKED_AT)
        {
            let Ok(Ok(channel)) =
                tokio::time::timeout(LOOKUP_TIMEOUT, core.allowed(session.id)).await
            else {
                continue;
            };
            let last = core.surface().messages(
                channel,
                MessageQuery {
                    limit: 1,
                    before: None,
                    after: None,
                },
            );
            if let Some(message) = last.first() {
                newest.push((message.message_id, session.id));
            }
        }
        newest.sort_unstable_by(|a, b| b.cmp(a));
        newest
            .into_iter()
            .take(WARM_SESSIONS_AT_START)
            .map(|(_, session)| session)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_offers_at_once_and_counts_them() {
        // Nobody reads the queue: an offer that waited for room would hang this test.
        let (warmer, receiver) = Warmer::bounded(4);
        let accepted = (0..1_000u64)
            .filter(|&i| {
                warmer.offer(Job::Message {
                    session: Snowflake(1),
                    message: Snowflake(i),
                })
            })
            .count();
        assert_eq!(accepted, 4);
        let stats = warmer.stats();
        assert_eq!((stats.queued, stats.dropped), (4, 996));
        // The first four are what the thread gets, in order.
        let waiting: Vec<Job> = receiver.try_iter().collect();
        assert_eq!(
            waiting.last(),
            Some(&Job::Message {
                session: Snowflake(1),
                message: Snowflake(3)
            })
        );
        // A warmer whose thread is gone drops too, without waiting.
        drop(receiver);
        assert!(!warmer.offer(Job::Recent {
            session: Snowflake(1)
        }));
        assert_eq!(warmer.stats().dropped, 997);
    }
}
