//! This node in a cluster of switchboard nodes (issue 23), as the HTTP front and the operator
//! callable `admin.cluster.status` see it: its id, its store's backend, the gateway shards it
//! runs, and the store's view of every node and shard lease. The composition root implements
//! [`NodeView`] (it knows the gateway); the engine knows no serenity.

use std::sync::Arc;

use protocol::ShardHealth;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What the host tells the front about this node.
pub trait NodeView: Send + Sync {
    /// `cluster.node_id`.
    fn node_id(&self) -> &str;
    /// The store's backend: `sqlite`, `postgres` or `memory`.
    fn store_kind(&self) -> &'static str;
    /// The shards this node runs, by id, with their states.
    fn shards(&self) -> Vec<ShardHealth>;
    /// Where nodes beat and shards are leased.
    fn cluster_store(&self) -> Arc<dyn switchboard_store::ClusterStore>;
    /// How long a heartbeat or a lease lasts (`cluster.lease_s`): a node not heard from for
    /// longer is `gone`.
    fn lease_ms(&self) -> u64;
    /// Where the agent's runs are queued (every node's), when there is an agent.
    fn run_store(&self) -> Option<Arc<dyn switchboard_store::RunStore>> {
        None
    }
    /// Whether this node leases its shards (`cluster.shards = "lease"`) and holds none now —
    /// a spare, every shard taken by other nodes: it runs no gateway, and that is no fault
    /// (`/health` says `ok`, `discord: "standby"`); it takes a shard when one is free.
    fn standby(&self) -> bool {
        false
    }
    /// Why this node cannot reach its store now (its last heartbeat failed), or `None` while
    /// it can: `/health` then says `degraded` with this reason.
    fn store_trouble(&self) -> Option<String> {
        None
    }
    /// Why this node cannot run its gateway shards (a static `cluster.shards` list Discord
    /// refused with 4011), or `None`: `/health` then says `degraded` with this reason.
    fn shard_trouble(&self) -> Option<String> {
        None
    }
}

/// `admin.cluster.status`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// The node that answered.
    pub node: String,
    /// Its store's backend.
    pub store: String,
    /// Every node heard from in the last day, by id.
    pub nodes: Vec<NodeStatus>,
    /// Every shard lease, by shard (expired ones too).
    pub leases: Vec<LeaseStatus>,
    /// The agent's queue per session, cluster-wide: the sessions with runs waiting or running,
    /// by session.
    #[serde(default)]
    pub queues: Vec<QueueStatus>,
}

/// A session's runs in [`ClusterStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    /// The session (a channel id, or an API session).
    pub session_id: String,
    /// Runs waiting for the session's running one (on any node).
    pub queued: usize,
    /// Runs running (one, or a run and the burst it answers together).
    pub running: usize,
}

/// The queue depth per session from the run rows (at most
/// [`RunFilter::MAX_LIMIT`](switchboard_records::RunFilter::MAX_LIMIT) of each state).
async fn queues(
    store: &dyn switchboard_store::RunStore,
) -> Result<Vec<QueueStatus>, switchboard_store::StoreError> {
    let mut by_session: std::collections::BTreeMap<String, QueueStatus> = Default::default();
    for state in [
        switchboard_records::RunState::Queued,
        switchboard_records::RunState::Running,
    ] {
        let rows = store
            .runs(switchboard_records::RunFilter {
                state: Some(state),
                limit: switchboard_records::RunFilter::MAX_LIMIT,
                ..Default::default()
            })
            .await?;
        for row in rows {
            let entry = by_session
                .entry(row.session.clone())
                .or_insert_with(|| QueueStatus {
                    session_id: row.session,
                    queued: 0,
                    running: 0,
                });
            if state == switchboard_records::RunState::Queued {
                entry.queued += 1;
            } else {
                entry.running += 1;
            }
        }
    }
    Ok(by_session.into_values().collect())
}

/// A node in [`ClusterStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// The node.
    pub node_id: String,
    /// `live` (heard from within a lease period) or `gone`.
    pub state: String,
    /// The shards it holds an unexpired lease on; for the answering node, the shards it runs.
    pub shards: Vec<u32>,
    /// Its last heartbeat, ms since the Unix epoch.
    pub last_heartbeat_ms: u64,
    /// When it started, ms since the Unix epoch.
    pub started_ms: u64,
    /// Where its API listens, if it said.
    pub address: Option<String>,
}

/// A shard lease in [`ClusterStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeaseStatus {
    /// The shard.
    pub shard: u32,
    /// The node holding (or last holding) it.
    pub node_id: String,
    /// Until when, ms since the Unix epoch.
    pub until_ms: u64,
    /// Whether the lease has ended.
    pub expired: bool,
}

/// Reads the cluster's state through `view` at `now_ms`.
pub async fn status(
    view: &dyn NodeView,
    now_ms: u64,
) -> Result<ClusterStatus, switchboard_store::StoreError> {
    let store = view.cluster_store();
    let lease_ms = view.lease_ms();
    let since = now_ms.saturating_sub(switchboard_records::cluster::NODES_KEPT_MS);
    let nodes = store.nodes(since, 1_000).await?;
    let leases = store.shard_leases().await?;
    let own: Vec<u32> = view.shards().iter().map(|s| s.id).collect();
    let nodes = nodes
        .into_iter()
        .map(|node| {
            let shards = if node.node_id == view.node_id() {
                own.clone()
            } else {
                leases
                    .iter()
                    .filter(|l| l.node_id == node.node_id && l.until_ms > now_ms)
                    .map(|l| l.shard)
                    .collect()
            };
            NodeStatus {
                state: if node.last_seen_ms.saturating_add(lease_ms) >= now_ms {
                    "live"
                } else {
                    "gone"
                }
                .to_owned(),
                shards,
                last_heartbeat_ms: node.last_seen_ms,
                started_ms: node.started_ms,
                address: node.address,
                node_id: node.node_id,
            }
        })
        .collect();
    let leases = leases
        .into_iter()
        .map(|lease| LeaseStatus {
            expired: lease.until_ms <= now_ms,
            shard: lease.shard,
            node_id: lease.node_id,
            until_ms: lease.until_ms,
        })
        .collect();
    let queues = match view.run_store() {
        Some(runs) => queues(runs.as_ref()).await?,
        None => Vec::new(),
    };
    Ok(ClusterStatus {
        node: view.node_id().to_owned(),
        store: view.store_kind().to_owned(),
        nodes,
        leases,
        queues,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_records::NodeBeat;
    use switchboard_store::{ClusterStore, MemoryBackend, MemoryOptions};

    struct View(Arc<MemoryBackend>);

    impl NodeView for View {
        fn node_id(&self) -> &str {
            "a"
        }
        fn store_kind(&self) -> &'static str {
            "memory"
        }
        fn shards(&self) -> Vec<ShardHealth> {
            vec![ShardHealth {
                id: 0,
                state: "ready".into(),
            }]
        }
        fn cluster_store(&self) -> Arc<dyn ClusterStore> {
            Arc::clone(&self.0) as _
        }
        fn lease_ms(&self) -> u64 {
            20_000
        }
        fn run_store(&self) -> Option<Arc<dyn switchboard_store::RunStore>> {
            Some(Arc::clone(&self.0) as _)
        }
    }

    fn lease(node: &str, now_ms: u64) -> switchboard_records::Lease {
        switchboard_records::Lease::new(node, now_ms, 20_000)
    }

    #[tokio::test]
    async fn a_node_not_heard_from_for_a_lease_is_gone_and_its_leases_expired() {
        let store = Arc::new(MemoryBackend::new(MemoryOptions::default()));
        let now = 1_800_000_000_000;
        for (node, at_ms) in [("a", now - 1_000), ("b", now - 30_000)] {
            store
                .node_heartbeat(NodeBeat {
                    node_id: node.into(),
                    started_ms: now - 60_000,
                    address: None,
                    at_ms,
                })
                .await
                .unwrap();
        }
        store
            .acquire_shard(0, lease("a", now - 1_000))
            .await
            .unwrap();
        store
            .acquire_shard(1, lease("b", now - 30_000))
            .await
            .unwrap();
        let status = status(&View(store), now).await.unwrap();
        let states: Vec<(&str, &str, Vec<u32>)> = status
            .nodes
            .iter()
            .map(|n| (n.node_id.as_str(), n.state.as_str(), n.shards.clone()))
            .collect();
        // The answering node lists what it runs; another node its unexpired leases (none).
        assert_eq!(states, vec![("a", "live", vec![0]), ("b", "gone", vec![])]);
        let leases: Vec<(u32, bool)> = status.leases.iter().map(|l| (l.shard, l.expired)).collect();
        assert_eq!(leases, vec![(0, false), (1, true)]);
        assert_eq!(status.store, "memory");
    }

    #[tokio::test]
    async fn the_queue_depth_per_session_counts_every_nodes_runs() {
        use switchboard_store::RunStore;
        let store = Arc::new(MemoryBackend::new(MemoryOptions::default()));
        for (id, session) in [("r1", "7"), ("r2", "7"), ("r3", "7"), ("r4", "9")] {
            store
                .enqueue_run(
                    switchboard_records::NewRun {
                        id: id.into(),
                        session: session.into(),
                        agent: "default".into(),
                        trigger: "{}".into(),
                        requested_by: None,
                        parent_run: None,
                        enqueued_ms: 1,
                    },
                    10,
                )
                .await
                .unwrap();
        }
        // One node runs session 7's first run, another session 9's.
        store.claim_next_run(lease("a", 2)).await.unwrap();
        store.claim_next_run(lease("b", 2)).await.unwrap();
        let status = status(&View(store), 3).await.unwrap();
        let queues: Vec<(&str, usize, usize)> = status
            .queues
            .iter()
            .map(|q| (q.session_id.as_str(), q.queued, q.running))
            .collect();
        assert_eq!(queues, vec![("7", 2, 1), ("9", 0, 1)]);
    }
}
