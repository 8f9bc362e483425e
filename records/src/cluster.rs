//! Several nodes on one store (issue 23): who is alive, which node holds which gateway shard,
//! when each IDENTIFY bucket may next identify, and timers that fire once cluster-wide.

use serde::{Deserialize, Serialize};

/// Nodes not heard from for a day are forgotten (a node id that changes at every start, the
/// default host name + pid, would otherwise pile up).
pub const NODES_KEPT_MS: u64 = 24 * 3600 * 1000;

/// A node's heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeBeat {
    /// The node (`cluster.node_id`).
    pub node_id: String,
    /// When it started, ms since the Unix epoch.
    pub started_ms: u64,
    /// Where its API listens, for `cluster status`.
    pub address: Option<String>,
    /// Now.
    pub at_ms: u64,
}

/// A node as the store last heard of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// The node.
    pub node_id: String,
    /// When it started.
    pub started_ms: u64,
    /// Where its API listens.
    pub address: Option<String>,
    /// Its last heartbeat.
    pub last_seen_ms: u64,
}

/// A shard's lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardLease {
    /// The shard.
    pub shard: u32,
    /// The node holding it.
    pub node_id: String,
    /// Until when, ms since the Unix epoch.
    pub until_ms: u64,
}
