//! The change feed: what changed in a store, by id only, for other parts to watch (the read
//! cache keeps itself correct with it when other nodes write; the engine can wake a call
//! waiting on an approval decided elsewhere).

use std::sync::atomic::{AtomicU64, Ordering};

use entity::Snowflake;
use tokio::sync::broadcast;

/// Which handle made a change: each backend handle (a node) has its own, so a reader can skip
/// the changes it made itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Origin(pub u64);

impl Origin {
    /// A new origin, unique in this process.
    pub fn next() -> Origin {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Origin(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// One change, published once it is durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Who made it.
    pub origin: Origin,
    /// What changed.
    pub what: Changed,
}

/// What changed: ids only; read the thing itself from the store.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Changed {
    /// A session was stored or replaced.
    Session(Snowflake),
    /// A session was removed.
    SessionRemoved(Snowflake),
    /// A thread's state was kept.
    Thread(Snowflake),
    /// A user was stored or renamed.
    User(Snowflake),
    /// A role was stored or renamed.
    Role(Snowflake),
    /// A role was removed.
    RoleRemoved(Snowflake),
    /// A message was stored, edited, or its reactions changed.
    Message {
        /// Its channel.
        channel_id: Snowflake,
        /// The message.
        id: Snowflake,
    },
    /// Messages were deleted.
    MessagesDeleted {
        /// Their channel.
        channel_id: Snowflake,
        /// The messages.
        ids: Vec<Snowflake>,
    },
    /// Every message of a channel was forgotten.
    ChannelForgotten(Snowflake),
    /// A channel's backfill gap opened or closed.
    Gap(Snowflake),
    /// A trigger was claimed.
    TriggerClaimed(Snowflake),
    /// A workflow was kept.
    Workflow(String),
    /// An approval was kept or decided.
    Approval(String),
    /// A session's `/tools` scope changed.
    Scope(Snowflake),
    /// Events were appended, up to this id (one per batch: `crate::events`).
    Events(u64),
}

/// How many changes a slow watcher may fall behind before it is told it missed some.
pub const FEED_CAPACITY: usize = 4_096;

/// Where a backend publishes its changes.
#[derive(Debug, Clone)]
pub struct FeedSender {
    origin: Origin,
    sender: broadcast::Sender<Change>,
}

impl FeedSender {
    /// A feed for the handle `origin`.
    pub fn new(origin: Origin) -> FeedSender {
        FeedSender {
            origin,
            sender: broadcast::channel(FEED_CAPACITY).0,
        }
    }

    /// The same feed, published to by another handle (a second node over one backend).
    pub fn for_origin(&self, origin: Origin) -> FeedSender {
        FeedSender {
            origin,
            sender: self.sender.clone(),
        }
    }

    /// Who publishes through it.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// Whether anybody watches (so a publisher can skip building changes nobody reads).
    pub fn watched(&self) -> bool {
        self.sender.receiver_count() > 0
    }

    /// Publishes a change (nothing happens when nobody watches).
    pub fn publish(&self, what: Changed) {
        if self.sender.receiver_count() > 0 {
            let _ = self.sender.send(Change {
                origin: self.origin,
                what,
            });
        }
    }

    /// A new watcher: it sees what is published from now on.
    pub fn subscribe(&self) -> Changes {
        Changes(self.sender.subscribe())
    }
}

/// What a watcher reads next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// A change.
    Change(Change),
    /// The watcher fell behind and missed this many changes: re-read what it keeps.
    Missed(u64),
    /// The store is gone.
    Closed,
}

/// A watcher of a store's changes.
#[derive(Debug)]
pub struct Changes(broadcast::Receiver<Change>);

impl Changes {
    /// Waits for the next change.
    pub async fn next(&mut self) -> Next {
        match self.0.recv().await {
            Ok(change) => Next::Change(change),
            Err(broadcast::error::RecvError::Lagged(missed)) => Next::Missed(missed),
            Err(broadcast::error::RecvError::Closed) => Next::Closed,
        }
    }

    /// Waits for the next change, blocking the thread (not from async code).
    pub fn next_blocking(&mut self) -> Next {
        match self.0.blocking_recv() {
            Ok(change) => Next::Change(change),
            Err(broadcast::error::RecvError::Lagged(missed)) => Next::Missed(missed),
            Err(broadcast::error::RecvError::Closed) => Next::Closed,
        }
    }

    /// The next change if one is waiting.
    pub fn try_next(&mut self) -> Option<Next> {
        match self.0.try_recv() {
            Ok(change) => Some(Next::Change(change)),
            Err(broadcast::error::TryRecvError::Lagged(missed)) => Some(Next::Missed(missed)),
            Err(broadcast::error::TryRecvError::Closed) => Some(Next::Closed),
            Err(broadcast::error::TryRecvError::Empty) => None,
        }
    }
}
