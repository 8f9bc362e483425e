//! `cluster.shards = "lease"` (issue 23): the nodes on one PostgreSQL store share the bot's
//! gateway shards through leases in the store. Every third of a lease period each node
//! renews what it runs, works out its fair share — `ceil(total / live nodes)` — takes free or
//! expired shards up to it, and gives back what it holds past it (a node joined), so a
//! stopped node's shards are taken over once its leases end, and a new node gets its share
//! within two lease periods. Before a shard identifies, its IDENTIFY is reserved across nodes
//! in its `max_concurrency` bucket (`shard_id % max_concurrency`, one per 5 s).
//!
//! Each leased shard runs in a gateway client of its own ([`ShardControl`] made by
//! `service::client_per_shard`): a taken shard identifies the moment its slot comes, and one
//! given back (or whose lease was lost) is stopped by closing its socket and dropping its
//! client, bounded by [`crate::shards::STOP_WITHIN`] — never serenity's per-shard shutdown,
//! which waits 5 s and never returns for a runner whose socket Discord closed with 4011. A
//! shard whose client could not be built is given back at the next round, never renewed
//! while nothing runs it.
//!
//! The decisions ([`plan_step`]) are pure, so they are tested apart from the store and
//! serenity; [`run`] applies them through [`ShardControl`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use switchboard_store::{ClusterStore, ShardGrant};

use crate::shards::ShardControl;

/// Discord's spacing of IDENTIFYs within one bucket, plus a margin for clocks and latency.
pub const IDENTIFY_SPACING_MS: u64 = 5_500;

/// The most nodes counted when working out the fair share.
const MAX_NODES: usize = 1_000;

/// What one round should do, from what the store says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Step {
    /// The fair share: how many shards this node should run at most.
    pub share: u32,
    /// Shards to try to take, in order, best first.
    pub take: Vec<u32>,
    /// Shards to give back.
    pub give_back: Vec<u32>,
}

/// Decides a round: `running` is what this node runs, `taken_by_others` the shards with an
/// unexpired lease held by another node, `live_nodes` how many nodes beat within a lease
/// period (this one counted even if its own beat is not in yet).
pub fn plan_step(
    total: u32,
    live_nodes: usize,
    running: &BTreeSet<u32>,
    taken_by_others: &BTreeSet<u32>,
) -> Step {
    let live = u32::try_from(live_nodes.max(1)).unwrap_or(u32::MAX);
    let share = total.div_ceil(live);
    let held = u32::try_from(running.len()).unwrap_or(u32::MAX);
    if held > share {
        // Keep the lowest ids (shard 0 carries the DMs: keep it where it is).
        let give_back = running
            .iter()
            .rev()
            .take((held - share) as usize)
            .copied()
            .collect();
        return Step {
            share,
            take: Vec::new(),
            give_back,
        };
    }
    let take = (0..total)
        .filter(|id| !running.contains(id) && !taken_by_others.contains(id))
        .take((share - held) as usize)
        .collect();
    Step {
        share,
        take,
        give_back: Vec::new(),
    }
}

/// What the loop needs.
pub struct LeaseLoop {
    /// Where leases and heartbeats live.
    pub store: Arc<dyn ClusterStore>,
    /// This node (`cluster.node_id`).
    pub node_id: String,
    /// `cluster.lease_s`.
    pub lease: Duration,
    /// The running client's shards.
    pub control: ShardControl,
    /// `max_concurrency` from `GET /gateway/bot`.
    pub max_concurrency: u32,
}

fn now_ms() -> u64 {
    switchboard_engine::clock::now_ms()
}

impl LeaseLoop {
    /// This node's hold on a shard from `now_ms` for `lease_ms`.
    fn lease(&self, now_ms: u64, lease_ms: u64) -> switchboard_records::Lease {
        switchboard_records::Lease::new(self.node_id.clone(), now_ms, lease_ms)
    }

    fn lease_ms(&self) -> u64 {
        u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX)
    }

    fn period(&self) -> Duration {
        (self.lease / 3).max(Duration::from_millis(500))
    }

    /// Renews every lease in `running`; a shard another node took meanwhile (this node's
    /// lease ended unrenewed) is stopped here and dropped from `running`.
    async fn renew(
        &self,
        running: &mut BTreeSet<u32>,
    ) -> Result<(), switchboard_store::StoreError> {
        let lease_ms = self.lease_ms();
        for id in running.clone() {
            match self
                .store
                .acquire_shard(id, self.lease(now_ms(), lease_ms))
                .await?
            {
                ShardGrant::Held { .. } => {}
                ShardGrant::Taken(lease) => {
                    tracing::warn!(
                        shard = id,
                        holder = %lease.node_id,
                        "another node holds this shard's lease now (ours ended unrenewed); stopping it here"
                    );
                    self.control.stop(id).await;
                    running.remove(&id);
                }
            }
        }
        Ok(())
    }

    /// Gives back the lease of every shard whose start failed (its client could not be
    /// built: no global-limit slot, a failed `GET /gateway`, the build limit): nothing runs it
    /// here, so renewing it would keep it unrun by any node. The shards, so the round does not
    /// take them again at once.
    async fn give_back_failed_starts(
        &self,
        running: &mut BTreeSet<u32>,
    ) -> Result<BTreeSet<u32>, switchboard_store::StoreError> {
        let failed = self.control.take_failed_starts();
        for id in &failed {
            if !running.remove(id) {
                continue;
            }
            tracing::warn!(
                shard = id,
                "the shard's start failed: giving its lease back (another node, or this one after a round, takes it)"
            );
            self.store.release_shard(*id, &self.node_id).await?;
        }
        Ok(failed)
    }

    /// Agrees with the cluster on the shard count: records this node's count (or the one a
    /// 4011 asked for) when the cluster's is lower or unset, and when the cluster's is higher
    /// (another node's 4011, or a node started with more), stops every shard this node runs,
    /// gives their leases back and starts afresh with that count (the leases name shards of
    /// the old count).
    async fn follow_the_shard_count(
        &self,
        running: &mut BTreeSet<u32>,
    ) -> Result<(), switchboard_store::StoreError> {
        let total = self.control.total();
        let mine = total.max(self.control.wanted());
        let agreed = match self.store.shard_count().await? {
            Some(agreed) if agreed >= mine => agreed,
            _ => self.store.raise_shard_count(mine).await?,
        };
        if agreed == total {
            return Ok(());
        }
        tracing::info!(
            node = %self.node_id,
            from = total,
            to = agreed,
            "the cluster's shard count changed: stopping this node's shards, giving their leases back and leasing anew with the new count"
        );
        let held: Vec<u32> = running.iter().copied().collect();
        if !self.control.reshard(agreed, &[]).await {
            // Said in the log; the next round tries again.
            return Ok(());
        }
        running.clear();
        release_all(self.store.as_ref(), &self.node_id, &held).await;
        Ok(())
    }

    /// One round: renew, then give back past the share or take one free shard (one a round,
    /// so renewals never wait behind a row of IDENTIFY slots). Errors (the store away) leave
    /// what runs running until the next round.
    async fn round(
        &self,
        running: &mut BTreeSet<u32>,
    ) -> Result<(), switchboard_store::StoreError> {
        let lease_ms = self.lease_ms();
        let failed = self.give_back_failed_starts(running).await?;
        self.follow_the_shard_count(running).await?;
        self.renew(running).await?;
        let now = now_ms();
        let live = self
            .store
            .nodes(now.saturating_sub(lease_ms), MAX_NODES)
            .await?;
        // This node counts even before its own first beat is in.
        let live_nodes = live.len() + usize::from(!live.iter().any(|n| n.node_id == self.node_id));
        // A shard whose start just failed is not taken again this round (a round's backoff;
        // another node may take it meanwhile).
        let taken_by_others: BTreeSet<u32> = self
            .store
            .shard_leases()
            .await?
            .into_iter()
            .filter(|l| l.node_id != self.node_id && l.until_ms > now)
            .map(|l| l.shard)
            .chain(failed)
            .collect();
        let step = plan_step(self.control.total(), live_nodes, running, &taken_by_others);
        for id in step.give_back {
            tracing::info!(
                shard = id,
                share = step.share,
                live_nodes,
                "giving a shard back: more nodes share the shards now"
            );
            self.control.stop(id).await;
            running.remove(&id);
            self.store.release_shard(id, &self.node_id).await?;
        }
        for id in step.take {
            let now = now_ms();
            if let ShardGrant::Taken(_) = self
                .store
                .acquire_shard(id, self.lease(now, lease_ms))
                .await?
            {
                continue;
            }
            let bucket = id % self.max_concurrency.max(1);
            let slot = self
                .store
                .take_identify_slot(bucket, now, IDENTIFY_SPACING_MS)
                .await?;
            // Wait for the slot a period at a time, renewing what this node holds meanwhile
            // (the new lease too).
            let mut held = running.clone();
            held.insert(id);
            loop {
                let wait = slot.saturating_sub(now_ms());
                if wait == 0 {
                    break;
                }
                tracing::info!(
                    shard = id,
                    bucket,
                    wait_ms = wait,
                    "waiting for this bucket's IDENTIFY slot"
                );
                tokio::time::sleep(Duration::from_millis(wait).min(self.period())).await;
                self.renew(&mut held).await?;
            }
            running.retain(|shard| held.contains(shard));
            if !held.contains(&id) {
                continue;
            }
            tracing::info!(
                shard = id,
                share = step.share,
                live_nodes,
                "took a shard's lease; starting it"
            );
            // The shard's client is built (it asks Discord for the gateway's address) and
            // identifies at once: not here, where renewals wait.
            let control = self.control.clone();
            tokio::spawn(async move { control.start(id).await });
            running.insert(id);
            // One a round.
            break;
        }
        Ok(())
    }
}

/// Runs the lease loop until aborted. On abort nothing is released: the leases end by
/// themselves (a node stopped cleanly releases through [`release_all`]).
pub fn run(lease: LeaseLoop) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let period = lease.period();
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut running = BTreeSet::new();
        let mut failing = false;
        loop {
            ticks.tick().await;
            match lease.round(&mut running).await {
                Ok(()) if failing => {
                    failing = false;
                    tracing::info!("the shard leases are readable again");
                }
                Ok(()) => {}
                Err(error) => {
                    if !failing {
                        tracing::warn!(
                            "cannot renew or take shard leases: {error}; retrying every {} ms",
                            period.as_millis()
                        );
                    }
                    failing = true;
                }
            }
        }
    })
}

/// Gives back every shard `node` holds (a clean stop), so another node may take them at once.
pub async fn release_all(store: &dyn ClusterStore, node: &str, shards: &[u32]) {
    for id in shards {
        if let Err(error) = store.release_shard(*id, node).await {
            tracing::warn!(
                shard = id,
                "cannot release the shard's lease: {error}; it ends by itself"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(ids: &[u32]) -> BTreeSet<u32> {
        ids.iter().copied().collect()
    }

    #[test]
    fn alone_a_node_takes_every_free_shard() {
        let step = plan_step(4, 1, &set(&[]), &set(&[]));
        assert_eq!(step.share, 4);
        assert_eq!(step.take, vec![0, 1, 2, 3]);
    }

    #[test]
    fn when_a_node_joins_the_first_gives_back_its_highest_extras() {
        let step = plan_step(4, 2, &set(&[0, 1, 2, 3]), &set(&[]));
        assert_eq!(step.share, 2);
        assert_eq!(step.give_back, vec![3, 2]);
        assert!(step.take.is_empty());
        // The newcomer takes what is free, never what another holds.
        let step = plan_step(4, 2, &set(&[]), &set(&[0, 1, 3]));
        assert_eq!(step.take, vec![2]);
    }

    #[test]
    fn an_odd_count_gives_the_ceiling() {
        assert_eq!(plan_step(3, 2, &set(&[]), &set(&[])).share, 2);
        assert_eq!(plan_step(1, 5, &set(&[]), &set(&[])).share, 1);
    }

    proptest! {
        /// However the store looks, a round never asks for a shard another node holds or
        /// this node runs, never past the share, and never both takes and gives back.
        #[test]
        fn a_round_stays_within_the_fair_share(
            total in 1u32..64,
            live in 0usize..10,
            running in proptest::collection::btree_set(0u32..64, 0..16),
            others in proptest::collection::btree_set(0u32..64, 0..32),
        ) {
            let running: BTreeSet<u32> = running.into_iter().filter(|id| *id < total).collect();
            let others: BTreeSet<u32> = others.into_iter().filter(|id| *id < total && !running.contains(id)).collect();
            let step = plan_step(total, live, &running, &others);
            prop_assert_eq!(step.share, total.div_ceil(live.max(1) as u32));
            prop_assert!(step.take.is_empty() || step.give_back.is_empty());
            for id in &step.take {
                prop_assert!(!running.contains(id) && !others.contains(id) && *id < total);
            }
            for id in &step.give_back {
                prop_assert!(running.contains(id));
            }
            let after = running.len() + step.take.len() - step.give_back.len();
            prop_assert!(after as u32 <= step.share);
            // A node under its share takes every free shard it can up to it.
            let free = (0..total).filter(|id| !running.contains(id) && !others.contains(id)).count();
            if (running.len() as u32) < step.share {
                prop_assert_eq!(step.take.len(), free.min((step.share as usize) - running.len()));
            }
        }
    }
}
