//! This node in its cluster (issue 23): what `/health` and `admin.cluster.status` read
//! ([`NodeFacts`], the engine's `NodeView`), and the node's heartbeat in the store, beaten on
//! every node whatever `cluster.shards` says, so `switchboard cluster status` lists each one.
//! A heartbeat that fails marks the node's store as unreachable: `/health` says `degraded`
//! with the reason until a beat is recorded again.

use std::sync::Arc;
use std::time::Duration;

use bot::shards::ShardStates;
use switchboard_engine::cluster::NodeView;
use switchboard_store::Backend;

/// This node, as the front and the status callable see it.
pub struct NodeFacts {
    /// `cluster.node_id`.
    pub node_id: String,
    /// The store (its backend's kind; where nodes beat and shards are leased).
    pub store: Arc<dyn Backend>,
    /// The state of each shard this node runs.
    pub shards: ShardStates,
    /// `cluster.lease_s`.
    pub lease: Duration,
    /// `cluster.shards = "lease"`: the node runs the shards it leases (none, as a spare).
    pub leases_shards: bool,
    /// Why the last heartbeat could not be recorded (the store is unreachable); `None` while
    /// it can.
    pub store_trouble: std::sync::Mutex<Option<String>>,
    /// The REST client whose global limit and invalid-request budget are split between the
    /// live nodes (on a shared store).
    pub rest: bot::rest::DiscordRest,
}

impl NodeFacts {
    fn set_store_trouble(&self, trouble: Option<String>) {
        *self
            .store_trouble
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = trouble;
    }
}

impl NodeView for NodeFacts {
    fn node_id(&self) -> &str {
        &self.node_id
    }

    fn store_kind(&self) -> &'static str {
        self.store.kind()
    }

    fn shards(&self) -> Vec<protocol::ShardHealth> {
        self.shards
            .snapshot()
            .into_iter()
            .map(|(id, state)| protocol::ShardHealth {
                id,
                state: state.to_owned(),
            })
            .collect()
    }

    fn cluster_store(&self) -> Arc<dyn switchboard_store::ClusterStore> {
        Arc::clone(&self.store) as _
    }

    fn lease_ms(&self) -> u64 {
        u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX)
    }

    fn run_store(&self) -> Option<Arc<dyn switchboard_store::RunStore>> {
        Some(Arc::clone(&self.store) as _)
    }

    fn standby(&self) -> bool {
        self.leases_shards && self.shards.snapshot().is_empty()
    }

    fn store_trouble(&self) -> Option<String> {
        self.store_trouble
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn shard_trouble(&self) -> Option<String> {
        self.shards.trouble()
    }
}

/// Beats `node`'s heartbeat every third of a lease period until aborted. A failed beat is
/// logged (once per outage) and tried again at the next period.
pub fn heartbeat(node: Arc<NodeFacts>, address: String) -> tokio::task::JoinHandle<()> {
    let started_ms = switchboard_engine::clock::now_ms();
    let period = (node.lease / 3).max(Duration::from_secs(1));
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            ticks.tick().await;
            let beat = switchboard_records::NodeBeat {
                node_id: node.node_id.clone(),
                started_ms,
                address: Some(address.clone()),
                at_ms: switchboard_engine::clock::now_ms(),
            };
            let beaten = node.store.node_heartbeat(beat).await;
            if beaten.is_ok() && node.store.shared() {
                share_limits(&node).await;
            }
            match beaten {
                Ok(()) if failing => {
                    failing = false;
                    node.set_store_trouble(None);
                    tracing::info!(node = %node.node_id, "the node's heartbeat is recorded again");
                }
                Ok(()) => {}
                Err(error) => {
                    node.set_store_trouble(Some(format!(
                        "the store ({}) is unreachable: {error}",
                        node.store.kind()
                    )));
                    if !failing {
                        failing = true;
                        tracing::warn!(node = %node.node_id, "cannot record the node's heartbeat in the store: {error}; retrying every {} s", period.as_secs());
                    }
                }
            }
        }
    })
}

/// Splits Discord's global limit (50 requests/s per bot) and the invalid-request budget
/// equally between the nodes live now, so that together they stay within them. A node that
/// cannot count them keeps its share.
async fn share_limits(node: &NodeFacts) {
    let lease = u64::try_from(node.lease.as_millis()).unwrap_or(u64::MAX);
    let since = switchboard_engine::clock::now_ms().saturating_sub(lease);
    if let Ok(nodes) = node.store.nodes(since, MAX_NODES_COUNTED).await {
        let live = u32::try_from(nodes.len()).unwrap_or(u32::MAX).max(1);
        node.rest.share_limits_among(live);
    }
}

/// Most nodes counted when splitting the limits (a cluster this large gets one request a
/// second per node anyway).
const MAX_NODES_COUNTED: usize = 64;
