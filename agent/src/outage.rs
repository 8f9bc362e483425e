//! A node that loses its store (issue 23 §4: PostgreSQL restarting, a network cut) says
//! `degraded` on `/health`, keeps its gateway, and starts no run until the store is back;
//! nothing acknowledged is lost. On the bridge's side: the claim loop neither claims nor
//! sweeps while the node's store is in trouble (what `/health` reads) nor sweeps for a lease
//! after it is back (the live nodes' leases ran out meanwhile; they renew them, and record
//! the ends of runs that finished during the outage, within that lease), and a trigger that
//! arrives meanwhile waits in admission — its claim and its row are tried again until the
//! store answers — so it is answered once the store is back, in arrival order, and at most
//! once (its claim is the store's).

use std::future::Future;
use std::time::{Duration, Instant};

use switchboard_store::{StoreError, StoreErrorKind};

use crate::Bridge;

/// How long one trigger waits for an unreachable store before it is given up (logged, not
/// answered: at most once wins over an answer whose claim cannot be recorded). Long enough for
/// a PostgreSQL restart or a failover; triggers behind it wait in the bounded admission queue.
pub(crate) const OUTAGE_WAIT: Duration = Duration::from_secs(300);

/// The first pause between tries; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

impl Bridge {
    /// Whether this node's store is unreachable now, as `/health` says it (`degraded`); never
    /// on a node that reports no health.
    pub(crate) fn store_degraded(&self) -> bool {
        self.inner
            .core
            .node()
            .is_some_and(|node| node.store_trouble().is_some())
    }

    /// `attempt`, tried again while the store is unreachable (an
    /// [`StoreErrorKind::Unavailable`] answer), for at most [`OUTAGE_WAIT`] and not past the
    /// node's shutdown; any other answer is returned as it is.
    pub(crate) async fn through_outage<T, F>(
        &self,
        what: &str,
        mut attempt: impl FnMut() -> F,
    ) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        let started = Instant::now();
        let mut pause = RETRY_FIRST;
        let mut told = false;
        loop {
            let error = match attempt().await {
                Err(error) if error.kind() == StoreErrorKind::Unavailable => error,
                answer => {
                    if told {
                        tracing::info!(
                            "the store answers again; could {what} after {} ms",
                            started.elapsed().as_millis()
                        );
                    }
                    return answer;
                }
            };
            let stopping = self
                .inner
                .queue
                .stopping
                .load(std::sync::atomic::Ordering::Acquire);
            if stopping || started.elapsed() + pause > OUTAGE_WAIT {
                return Err(error);
            }
            if !told {
                told = true;
                tracing::warn!(
                    "cannot {what}: {error}; trying again until the store is back (up to {} s)",
                    OUTAGE_WAIT.as_secs()
                );
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_MAX);
        }
    }
}
