//! One type per concept switchboard keeps: what a store holds, what its backends read and write,
//! and what the engine, the callables and the Discord side hand each other. No I/O.
//!
//! | module | concept |
//! |---|---|
//! | [`session`] | sessions (a Discord channel, thread, DM, forum or category) and their kind, threads and their state |
//! | [`people`] | users and roles (the names the entity mapper learns) |
//! | [`message`] | messages, their attachments and reactions, and how edits are ordered |
//! | [`gap`] | backfill gaps: where messages may be missing after a fresh identify |
//! | [`search`] | a full-text search as the store runs it, and its hits |
//! | [`workflow`] | workflows and their tasks |
//! | [`audit`] | audit rows, the filter that reads them and the pages it answers |
//! | [`approval`] | approval requests: their card, state, who decided, expiry, the bound hash |
//! | [`trigger`] | trigger claims: the record that a message is being answered |
//! | [`idempotency`] | idempotency keys and the answers kept for them |
//! | [`scope`] | a session's `/tools` scope override |
//! | [`notes`] | the agent's memory: session summaries and notes |
//! | [`run`] | agent runs and their per-session queue |
//! | [`schedule`] | scheduled prompts, their firings and receipts |
//! | [`usage`] | model usage rows, their sums and reports |
//! | [`cluster`] | nodes, shard leases |
//! | [`capability`] | run capabilities kept by digest, so they work on every node |
//!
//! Types that go on the wire or into JSON columns derive serde with exactly the shape the tool
//! server answers today (the tests in each module pin those shapes).

pub mod approval;
pub mod audit;
pub mod capability;
pub mod cluster;
pub mod gap;
pub mod idempotency;
pub mod message;
pub mod notes;
pub mod people;
pub mod run;
pub mod schedule;
pub mod scope;
pub mod search;
pub mod session;
pub mod time;
pub mod trigger;
pub mod usage;
pub mod workflow;

pub use approval::{Approval, ApprovalCard, ApprovalState, Settlement};
pub use audit::{glob_matches, AuditEntry, AuditFilter, AuditPage, AuditRow};
pub use capability::{CapabilityEnd, KeptCapability};
pub use cluster::{Node, NodeBeat, ShardLease};
pub use entity::{Mention, Snowflake};
pub use gap::Gap;
pub use idempotency::{IdempotencyKey, IdempotencyRequest, KeptKey, StoredAnswer};
pub use message::{Attachment, Message, MessageQuery, Reaction};
pub use notes::{Note, NoteLimits, NoteScope, Summary};
pub use people::{Role, User};
pub use run::{Lease, NewRun, Run, RunEnd, RunFilter, RunJoin, RunState, RunUsage};
pub use schedule::{
    AfterFiring, FiringClaim, FiringOutcome, Receipt, Schedule, ScheduleSpec, ScheduleStatus,
};
pub use scope::{AgentBinding, SessionScope};
pub use search::{SearchHit, SearchMatch, SearchQuery, SearchTerm};
pub use session::{Session, SessionKind, Thread, ThreadState};
pub use trigger::TriggerClaim;
pub use usage::{
    KeptUsage, UsageBy, UsageCharge, UsageGroup, UsageQuery, UsageRow, UsageSubject, UsageTotals,
};
pub use workflow::{Answer, Task, Workflow, WorkflowState};
