//! The switchboard store: where every durable fact lives, whatever keeps it.
//!
//! - [`aggregates`]: the storage traits, one per aggregate (messages, search, trigger claims,
//!   workflows, approvals, audit, scopes, idempotency keys, the change feed), with atomic
//!   operations in their signatures, and [`Backend`], all of them together. Backends are peers:
//!   [`MemoryBackend`] here, SQLite in `switchboard-store-sqlite`, PostgreSQL next.
//! - [`Store`]: the read cache in front of any backend (sessions, names, the newest messages
//!   of each channel), kept correct across nodes by the change feed.
//! - [`StoreError`]: the one error, with a [`StoreErrorKind`] to branch on.
//! - [`StoreUrl`]: `store.url` parsed.
//! - [`queue`]: the bounded write queue backends' writers use.
//! - [`write`]: the writes a backend's writer queues (one enum for every backend).
//! - [`events`]: the live feed's events as rows, so their ids are the store's on every node.
//! - [`bot_turns`]: the loop guard's count of bot turns per session, cluster-wide.
//! - [`copy`]: copying every kind of thing from one store into another (`store copy`).
//! - `conformance` (feature `conformance`): the tests every backend runs.
//!
//! `docs/store.md` in the repository has the design: the traits by aggregate, what each
//! replaces, the cache and the feed, and how the rest of switchboard is wired to it.

pub mod aggregates;
pub mod bot_turns;
mod cache;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod copy;
#[cfg(feature = "conformance")]
pub mod corpus;
mod error;
pub mod event_import;
pub mod events;
pub mod feed;
mod memory;
pub mod queue;
mod retention;
pub mod scan;
mod url;
pub mod write;

pub use aggregates::{
    check_capability, AgentBindingStore, ApprovalStore, AuditStore, Backend, CapabilityStore,
    Census, ChangeFeed, Claim, ClusterStore, Decided, Durable, Enqueued, Firing, Heartbeat,
    IdempotencyStore, MemoryStore, MessageStore, NotePut, Reserved, RunStore, ScheduleStore,
    ScopeStore, SearchStore, ShardGrant, Snapshot, StoreFuture, TriggerStore, UsageStore,
    WorkflowStore,
};
pub use bot_turns::{BotMessage, BotTurn, BotTurnStore, BotTurns};
pub use cache::{CacheOptions, Store};
pub use error::{StoreError, StoreErrorKind};
pub use event_import::EventImport;
pub use events::{EventBounds, EventRow, EventStore, KeptEvent};
pub use memory::{
    check_end, count_firing, duplicate_run, lost_firing, set_status, settle, unknown_schedule,
    waiting_runs, MemoryBackend, MemoryOptions,
};
pub use retention::Retention;
pub use switchboard_records as records;
pub use url::{SqliteLocation, StoreUrl, StoreUrlError, DEFAULT_STORE_URL, KNOWN_SCHEMES};
