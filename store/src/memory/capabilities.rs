//! The memory backend's run capabilities, by digest. Expired ones go at a prune, and at a save
//! once many are kept, so the map stays bounded by the capabilities alive at once.

use std::collections::HashMap;

use switchboard_records::{CapabilityEnd, KeptCapability};

use super::MemoryBackend;
use crate::aggregates::{check_capability, ready, CapabilityStore, StoreFuture};

/// Kept capabilities past which a save first forgets the expired ones.
const PRUNE_AT: usize = 4_096;

/// Capabilities by digest.
pub(super) type Capabilities = HashMap<String, KeptCapability>;

fn forget_expired(kept: &mut Capabilities, now_ms: u64) -> usize {
    let before = kept.len();
    kept.retain(|_, capability| capability.expires_ms > now_ms);
    before - kept.len()
}

impl CapabilityStore for MemoryBackend {
    fn save_capability(&self, capability: KeptCapability) -> StoreFuture<'_, ()> {
        ready(
            self.open()
                .and_then(|()| check_capability(&capability))
                .map(|()| {
                    let kept = &mut self.data().capabilities;
                    if kept.len() >= PRUNE_AT {
                        forget_expired(kept, capability.minted_ms);
                    }
                    kept.entry(capability.digest.clone()).or_insert(capability);
                }),
        )
    }

    fn capability(&self, digest: &str) -> StoreFuture<'_, Option<KeptCapability>> {
        self.read(|data| data.capabilities.get(digest).cloned())
    }

    fn end_capability(&self, digest: &str, how: CapabilityEnd) -> StoreFuture<'_, bool> {
        ready(
            self.open()
                .map(|()| match self.data().capabilities.get_mut(digest) {
                    Some(capability) if capability.ended.is_none() => {
                        capability.ended = Some(how);
                        true
                    }
                    _ => false,
                }),
        )
    }

    fn prune_capabilities(&self, now_ms: u64) -> StoreFuture<'_, usize> {
        ready(
            self.open()
                .map(|()| forget_expired(&mut self.data().capabilities, now_ms)),
        )
    }
}
