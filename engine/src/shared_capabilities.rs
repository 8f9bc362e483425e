//! Run capabilities across the nodes of a cluster (issue 23): a capability minted on one node
//! works on every node, and its end (the run finished or was aborted) reaches every node
//! within a second.
//!
//! The minting node keeps the token's digest in memory as before ([`crate::auth`]) and, when
//! the store is shared by several nodes, also writes a row by digest — never the token — once
//! the run's gate opens (its trigger's answered-record is durable), so no node lets the run
//! act before its own node would. Another node that is shown the token reads the row, then
//! serves it from a small, bounded cache for at most [`RECHECK`]; after that the next call
//! reads the row again, so an end written on any node is refused everywhere within
//! [`RECHECK`] plus a store read. What waits on a cached token's end here (an approval, an
//! event stream) is told by a sweep every [`RECHECK`] that reads only those tokens' rows.
//!
//! On one node (a store that is not [`shared`](switchboard_store::ChangeFeed::shared), such as
//! a SQLite file) nothing is written or read: the path stays in memory as before.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dashmap::DashMap;
use switchboard_records::{CapabilityEnd, KeptCapability};
use switchboard_store::Backend;

use crate::auth::{Capability, CapabilityGrant, CapabilityRefusal, TokenEnd};

/// How long a token read from the store is served from the cache before it is read again:
/// the bound on how stale a positive answer may be on a node that did not mint it.
pub const RECHECK: Duration = Duration::from_millis(500);

/// Tokens minted elsewhere that one node caches at once.
const CACHED_MOST: usize = 4_096;

/// How long one read of a row may take before the call is refused as the store unavailable.
const READ_BUDGET: Duration = Duration::from_secs(2);

/// Waits before reading a row again that was not there: a run's calls may reach another node
/// a moment before the minting node has written its row (its gate just opened).
const NOT_YET_WRITTEN: [Duration; 3] = [
    Duration::from_millis(100),
    Duration::from_millis(200),
    Duration::from_millis(400),
];

/// Most cached tokens one sweep reads.
const SWEPT_MOST: usize = 256;

/// Why a token could not be resolved through the store.
#[derive(Debug)]
pub(crate) enum Unresolved {
    /// The row says no (unknown, expired, ended): the same refusals as one node gives.
    Refused(CapabilityRefusal),
    /// The store could not answer.
    Unavailable(String),
}

struct Cached {
    capability: Arc<Capability>,
    checked: Instant,
}

/// The cluster side of the capabilities: the shared store and the cache of tokens minted
/// elsewhere.
pub(crate) struct SharedCapabilities {
    store: Arc<dyn Backend>,
    cached: DashMap<[u8; 32], Cached>,
}

fn hex(digest: &[u8; 32]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

fn end_kept(how: TokenEnd) -> CapabilityEnd {
    match how {
        TokenEnd::Aborted => CapabilityEnd::Aborted,
        TokenEnd::Finished | TokenEnd::Expired => CapabilityEnd::Finished,
    }
}

fn end_read(how: CapabilityEnd) -> TokenEnd {
    match how {
        CapabilityEnd::Finished => TokenEnd::Finished,
        CapabilityEnd::Aborted => TokenEnd::Aborted,
    }
}

/// The row a capability is kept as; `ended` when it is written at its end.
fn row(digest: &[u8; 32], capability: &Capability, ended: Option<TokenEnd>) -> KeptCapability {
    let now = now_ms();
    let left = capability
        .expires_at
        .saturating_duration_since(Instant::now());
    let grant = &capability.grant;
    KeptCapability {
        digest: hex(digest),
        session_id: grant.session_id,
        request_id: grant.request_id.clone(),
        scope: grant.scope.clone(),
        client: grant.client.clone(),
        cwd: grant.cwd.clone(),
        trigger_message_id: grant.trigger_message_id,
        requested_by: grant.requested_by,
        minted_ms: now,
        expires_ms: now.saturating_add(u64::try_from(left.as_millis()).unwrap_or(u64::MAX)),
        ended: ended.map(end_kept),
    }
}

/// The grant a row holds. Its gate is open: the row is written only once the minting node's
/// gate opened.
fn grant(row: &KeptCapability, left: Duration) -> CapabilityGrant {
    CapabilityGrant {
        session_id: row.session_id,
        request_id: row.request_id.clone(),
        scope: row.scope.clone(),
        ttl: left,
        client: row.client.clone(),
        cwd: row.cwd.clone(),
        trigger_message_id: row.trigger_message_id,
        requested_by: row.requested_by,
        gate: None,
    }
}

/// Runs `work` on the current runtime, when there is one (the service always has one); a
/// core used without a runtime stays one node.
fn spawn(what: &'static str, work: impl std::future::Future<Output = ()> + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn(work)),
        Err(_) => tracing::warn!(
            what,
            "no async runtime: this capability change stays on this node"
        ),
    }
}

impl SharedCapabilities {
    pub(crate) fn new(store: Arc<dyn Backend>) -> Arc<SharedCapabilities> {
        Arc::new(SharedCapabilities {
            store,
            cached: DashMap::new(),
        })
    }

    /// Whether other nodes share the store, so that capabilities are kept there.
    pub(crate) fn active(&self) -> bool {
        self.store.shared()
    }

    /// The cached token `digest` names, when it was read from the store less than
    /// [`RECHECK`] ago and has not expired.
    pub(crate) fn fresh(&self, digest: &[u8; 32]) -> Option<Arc<Capability>> {
        let entry = self.cached.get(digest)?;
        let now = Instant::now();
        (now.duration_since(entry.checked) < RECHECK && entry.capability.expires_at > now)
            .then(|| Arc::clone(&entry.capability))
    }

    /// Keeps a capability minted here, once its gate opens (never, if it is shut).
    pub(crate) fn keep(self: &Arc<Self>, digest: [u8; 32], capability: Arc<Capability>) {
        if !self.active() {
            return;
        }
        let shared = Arc::clone(self);
        spawn("keep a capability", async move {
            let left = capability
                .expires_at
                .saturating_duration_since(Instant::now());
            if let Some(gate) = &capability.grant.gate {
                match tokio::time::timeout(left, gate.opened()).await {
                    Ok(true) => {}
                    // Shut or never opened: the run never acts, on any node.
                    Ok(false) | Err(_) => return,
                }
            }
            // Ended meanwhile: `end` writes the row as ended, whichever comes first.
            let ended = capability.end();
            if let Err(err) = shared
                .store
                .save_capability(row(&digest, &capability, ended))
                .await
            {
                tracing::warn!(capability = %capability.id, %err, "cannot keep a run's capability in the store; it works on this node only");
            }
        });
    }

    /// Ends a capability on every node: its row is written as ended (kept first, so an end
    /// that overtakes the keeping still wins), and this node's cached copy ends now; the
    /// cached copy, if there was one.
    pub(crate) fn end(
        self: &Arc<Self>,
        digest: [u8; 32],
        minted_here: Option<Arc<Capability>>,
        how: TokenEnd,
    ) -> Option<Arc<Capability>> {
        let cached = self.cached.remove(&digest).map(|(_, cached)| {
            cached.capability.finish(how);
            cached.capability
        });
        if !self.active() {
            return cached;
        }
        let shared = Arc::clone(self);
        spawn("end a capability", async move {
            let kept = match &minted_here {
                Some(capability) => shared
                    .store
                    .save_capability(row(&digest, capability, Some(how)))
                    .await
                    .map(drop),
                None => Ok(()),
            };
            let ended = match kept {
                Ok(()) => shared
                    .store
                    .end_capability(&hex(&digest), end_kept(how))
                    .await
                    .map(drop),
                Err(err) => Err(err),
            };
            if let Err(err) = ended {
                tracing::warn!(%err, "cannot end a run's capability in the store; other nodes refuse it once it expires");
            }
        });
        cached
    }

    /// Resolves a token this node did not mint (or whose cached copy is stale) from its row.
    pub(crate) async fn resolve(&self, digest: [u8; 32]) -> Result<Arc<Capability>, Unresolved> {
        let key = hex(&digest);
        let mut waits = NOT_YET_WRITTEN.iter();
        loop {
            let read = tokio::time::timeout(READ_BUDGET, self.store.capability(&key)).await;
            match read {
                Err(_) => {
                    return Err(Unresolved::Unavailable(format!(
                        "the store did not answer within {} s",
                        READ_BUDGET.as_secs()
                    )))
                }
                Ok(Err(err)) => return Err(Unresolved::Unavailable(err.to_string())),
                Ok(Ok(Some(row))) => return self.adopt(digest, &row),
                Ok(Ok(None)) => match waits.next() {
                    Some(wait) => tokio::time::sleep(*wait).await,
                    None => {
                        self.forget(&digest, TokenEnd::Finished);
                        return Err(Unresolved::Refused(CapabilityRefusal::Unknown));
                    }
                },
            }
        }
    }

    /// Drops the cached copy of `digest`, telling what waits on it.
    fn forget(&self, digest: &[u8; 32], how: TokenEnd) {
        if let Some((_, cached)) = self.cached.remove(digest) {
            cached.capability.finish(how);
        }
    }

    /// What a row says of its token: live (cached from now), ended or expired.
    fn adopt(&self, digest: [u8; 32], row: &KeptCapability) -> Result<Arc<Capability>, Unresolved> {
        if let Some(how) = row.ended {
            let how = end_read(how);
            self.forget(&digest, how);
            return Err(Unresolved::Refused(CapabilityRefusal::Ended(how)));
        }
        let now = now_ms();
        if row.expires_ms <= now {
            self.forget(&digest, TokenEnd::Expired);
            return Err(Unresolved::Refused(CapabilityRefusal::Expired));
        }
        let left = Duration::from_millis(row.expires_ms - now);
        let checked = Instant::now();
        if let Some(mut cached) = self.cached.get_mut(&digest) {
            cached.checked = checked;
            return Ok(Arc::clone(&cached.capability));
        }
        if self.cached.len() >= CACHED_MOST {
            self.make_room(checked);
        }
        let capability = Arc::new(Capability::new(&digest, grant(row, left), checked + left));
        self.cached.insert(
            digest,
            Cached {
                capability: Arc::clone(&capability),
                checked,
            },
        );
        Ok(capability)
    }

    /// Keeps the cache within its bound: expired copies go, then copies nothing waits on;
    /// when every copy is awaited, all go (what waited is then stopped by the token's expiry).
    fn make_room(&self, now: Instant) {
        self.cached.retain(|_, cached| {
            let live = cached.capability.expires_at > now;
            if !live {
                cached.capability.finish(TokenEnd::Expired);
            }
            live && cached.capability.awaited()
        });
        if self.cached.len() >= CACHED_MOST {
            self.cached.clear();
        }
    }

    /// Reads the rows of the cached tokens something waits on, so that an end written
    /// elsewhere stops them here too; the rest are read again when next shown.
    pub(crate) async fn sweep(&self) {
        let awaited: Vec<[u8; 32]> = self
            .cached
            .iter()
            .filter(|entry| entry.capability.awaited())
            .map(|entry| *entry.key())
            .take(SWEPT_MOST)
            .collect();
        for digest in awaited {
            let read =
                tokio::time::timeout(READ_BUDGET, self.store.capability(&hex(&digest))).await;
            match read {
                Ok(Ok(Some(row))) => drop(self.adopt(digest, &row)),
                Ok(Ok(None)) => self.forget(&digest, TokenEnd::Finished),
                // The store is away: keep the copy until it answers (or the token expires).
                Ok(Err(_)) | Err(_) => {}
            }
        }
    }

    /// Sweeps every [`RECHECK`] while the core lives.
    pub(crate) fn sweep_while_alive(shared: Weak<SharedCapabilities>) {
        spawn("sweep capabilities", async move {
            let mut every = tokio::time::interval(RECHECK);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                if shared.active() {
                    shared.sweep().await;
                }
            }
        });
    }

    /// Forgets expired cached copies.
    pub(crate) fn prune(&self) {
        let now = Instant::now();
        self.cached.retain(|_, cached| {
            let live = cached.capability.expires_at > now;
            if !live {
                cached.capability.finish(TokenEnd::Expired);
            }
            live
        });
    }
}

/// Whether `token` has the shape of a capability token (the prefix, then 64 hex digits), so a
/// garbage token is refused without a store read.
pub(crate) fn well_formed(token: &str) -> bool {
    token
        .strip_prefix(crate::auth::CAPABILITY_PREFIX)
        .is_some_and(|rest| rest.len() == 64 && rest.bytes().all(|b| b.is_ascii_hexdigit()))
}
