//! Slash commands registered once per cluster (issue 23 §2). Of the nodes on a shared store,
//! the one that claims a set of commands registers it. The claim is a short lease
//! ([`CLAIM_MS`]), and the mark that says the set is registered ([`DONE_MS`]) is written only
//! after the registration succeeded: a node that wins the claim and dies (or fails) before
//! it finishes blocks the others for one lease, not for the hour the mark lasts. The others
//! look for the mark every quarter lease and claim in turn when the lease is free and no mark
//! is there.

use std::future::Future;
use std::time::Duration;

use switchboard_store::ClusterStore;

/// How long a claim to register holds: one node's registration (its tries and their backoff)
/// fits in it well.
pub const CLAIM_MS: u64 = 60_000;

/// How long the mark of a registered set lasts: nodes starting within it do not PUT the same
/// set again; later ones register again (a PUT of the same set changes nothing).
pub const DONE_MS: u64 = 3_600_000;

/// How a node's part in registering a set of commands ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    /// This node registered it.
    Here,
    /// Another node registered it (its mark is there).
    Elsewhere,
    /// This node tried and failed; the claim ends with its lease and another node tries.
    Failed,
    /// No mark came within [`DONE_MS`] of waiting for other nodes' claims.
    GaveUp,
}

/// Registers with `register` (true: done) once per cluster under `key`, claiming for
/// `claim_ms` at a time; see the module doc. A store that cannot be asked is logged and the
/// registration is made from this node (a PUT of the same set twice changes nothing).
pub async fn once_per_cluster<F, Fut>(
    store: &dyn ClusterStore,
    key: &str,
    claim_ms: u64,
    mut register: F,
) -> Registered
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let claim = format!("{key}:claim");
    let pause = Duration::from_millis((claim_ms / 4).max(10));
    let rounds = (DONE_MS / (claim_ms / 4).max(10)).max(1);
    let here = |done: bool| {
        if done {
            Registered::Here
        } else {
            Registered::Failed
        }
    };
    for _ in 0..rounds {
        let now = switchboard_engine::clock::now_ms();
        match store.once_held(key, now).await {
            Ok(true) => return Registered::Elsewhere,
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(%error, "could not read the slash commands' registration mark in the store; registering them from this node");
                return here(register().await);
            }
        }
        match store.once(&claim, now, claim_ms).await {
            Ok(true) => {
                if !register().await {
                    return Registered::Failed;
                }
                let done_at = switchboard_engine::clock::now_ms();
                if let Err(error) = store.once(key, done_at, DONE_MS).await {
                    tracing::warn!(%error, "the slash commands are registered but the mark could not be kept; another node may register them again");
                }
                return Registered::Here;
            }
            Ok(false) => tracing::debug!(
                "another node claims the slash commands' registration; looking again shortly"
            ),
            Err(error) => {
                tracing::warn!(%error, "could not claim the slash commands' registration in the store; registering them from this node");
                return here(register().await);
            }
        }
        tokio::time::sleep(pause).await;
    }
    Registered::GaveUp
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use switchboard_store::{MemoryBackend, MemoryOptions};

    const KEY: &str = "discord.commands:test";

    fn registrar(
        count: &Arc<AtomicUsize>,
        works: bool,
    ) -> impl FnMut() -> std::future::Ready<bool> {
        let count = Arc::clone(count);
        move || {
            count.fetch_add(1, Ordering::SeqCst);
            std::future::ready(works)
        }
    }

    #[tokio::test]
    async fn a_claim_left_by_a_node_that_died_is_taken_after_its_lease_not_after_the_hour() {
        let store = MemoryBackend::new(MemoryOptions::default());
        let claim_ms = 400;
        // A node claimed and died before registering: its claim, no mark.
        let now = switchboard_engine::clock::now_ms();
        assert!(store
            .once(&format!("{KEY}:claim"), now, claim_ms)
            .await
            .unwrap());
        let puts = Arc::new(AtomicUsize::new(0));
        let started = std::time::Instant::now();
        let outcome = once_per_cluster(&store, KEY, claim_ms, registrar(&puts, true)).await;
        assert_eq!(outcome, Registered::Here);
        assert_eq!(puts.load(Ordering::SeqCst), 1);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        // The mark is there now: later nodes leave it.
        let outcome = once_per_cluster(&store, KEY, claim_ms, registrar(&puts, true)).await;
        assert_eq!(outcome, Registered::Elsewhere);
        assert_eq!(puts.load(Ordering::SeqCst), 1, "registered once");
    }

    #[tokio::test]
    async fn a_failed_registration_leaves_no_mark_and_another_node_registers() {
        let store = MemoryBackend::new(MemoryOptions::default());
        let claim_ms = 400;
        let failed = Arc::new(AtomicUsize::new(0));
        let outcome = once_per_cluster(&store, KEY, claim_ms, registrar(&failed, false)).await;
        assert_eq!(outcome, Registered::Failed);
        let puts = Arc::new(AtomicUsize::new(0));
        let outcome = once_per_cluster(&store, KEY, claim_ms, registrar(&puts, true)).await;
        assert_eq!(
            outcome,
            Registered::Here,
            "once the failed claim's lease ended"
        );
        assert_eq!(
            (failed.load(Ordering::SeqCst), puts.load(Ordering::SeqCst)),
            (1, 1)
        );
    }

    #[tokio::test]
    async fn nodes_racing_register_once() {
        let store = Arc::new(MemoryBackend::new(MemoryOptions::default()));
        let puts = Arc::new(AtomicUsize::new(0));
        let mut nodes = Vec::new();
        for _ in 0..4 {
            let (store, puts) = (Arc::clone(&store), Arc::clone(&puts));
            nodes.push(tokio::spawn(async move {
                once_per_cluster(&*store, KEY, 400, registrar(&puts, true)).await
            }));
        }
        let mut outcomes = Vec::new();
        for node in nodes {
            outcomes.push(node.await.unwrap());
        }
        assert_eq!(puts.load(Ordering::SeqCst), 1, "{outcomes:?}");
        assert_eq!(
            outcomes.iter().filter(|o| **o == Registered::Here).count(),
            1,
            "{outcomes:?}"
        );
    }
}
