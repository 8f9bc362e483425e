//! The conformance tests of run capabilities: found by digest through any node, ended once
//! for every node, expired ones pruned, garbage refused with a typed error.

use futures_executor::block_on;
use switchboard_records::{CapabilityEnd, KeptCapability};

use super::agents::race;
use super::{Fixture, MakePlace, CHANNEL, MIRA};
use crate::{Backend, StoreErrorKind};

fn capability(n: u8, expires_ms: u64) -> KeptCapability {
    KeptCapability {
        digest: format!("{n:02x}").repeat(32),
        session_id: CHANNEL,
        request_id: format!("run-{n:04x}"),
        scope: vec!["surface.*".into(), "workspace.files.read".into()],
        client: Some("discord".into()),
        cwd: Some("/srv/runs/«ünïcode» 🧵".into()),
        trigger_message_id: Some(super::id(u64::from(n))),
        requested_by: Some(MIRA),
        minted_ms: 1_000,
        expires_ms,
        ended: None,
    }
}

/// The handle a second node would use, or the first one again.
pub(super) fn other_node(f: &Fixture) -> std::sync::Arc<dyn Backend> {
    f.place
        .second_node()
        .unwrap_or_else(|| std::sync::Arc::clone(&f.backend))
}

/// A capability kept through one node reads back whole through another; a save of a digest
/// already kept changes nothing; an unknown digest (or garbage) is not found; it survives a
/// reopen when the store is durable.
pub fn a_capability_kept_on_one_node_is_found_on_another(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    // Expiring in 2100: a durable backend's own prune at reopen keeps it.
    let kept = capability(1, 4_102_444_800_000);
    block_on(f.backend.save_capability(kept.clone())).unwrap();
    let other = other_node(&f);
    assert_eq!(
        block_on(other.capability(&kept.digest)).unwrap(),
        Some(kept.clone())
    );
    let mut changed = kept.clone();
    changed.scope = vec!["*".into()];
    changed.expires_ms = u64::MAX / 2;
    block_on(other.save_capability(changed)).unwrap();
    assert_eq!(
        block_on(f.backend.capability(&kept.digest)).unwrap(),
        Some(kept.clone()),
        "a second save of one digest does not widen it"
    );
    for unknown in [
        capability(2, 1).digest,
        String::new(),
        "sbcap_' OR 1=1 --".into(),
    ] {
        assert_eq!(block_on(other.capability(&unknown)).unwrap(), None);
    }
    drop(other);
    f.reopen();
    let after = block_on(f.backend.capability(&kept.digest)).unwrap();
    if f.place.durable() {
        assert_eq!(after, Some(kept));
    } else {
        assert_eq!(after, None);
    }
}

/// Ending a capability on one node is seen on the other; of many nodes and threads ending it
/// at once, exactly one ends it; it is never revived by a save.
pub fn a_capability_ended_on_one_node_is_ended_on_every_node(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    let kept = capability(3, 90_000);
    block_on(f.backend.save_capability(kept.clone())).unwrap();
    let ends = race(&f, 6, |backend, i| {
        let how = if i % 2 == 0 {
            CapabilityEnd::Aborted
        } else {
            CapabilityEnd::Finished
        };
        block_on(backend.end_capability(&kept.digest, how)).unwrap()
    });
    assert_eq!(ends.iter().filter(|ended| **ended).count(), 1, "{ends:?}");
    let other = other_node(&f);
    for backend in [&f.backend, &other] {
        let seen = block_on(backend.capability(&kept.digest)).unwrap().unwrap();
        assert!(seen.ended.is_some(), "ended on every node");
        assert_eq!(
            KeptCapability {
                ended: None,
                ..seen
            },
            kept
        );
    }
    block_on(other.save_capability(kept.clone())).unwrap();
    assert!(block_on(f.backend.capability(&kept.digest))
        .unwrap()
        .unwrap()
        .ended
        .is_some());
    assert!(!block_on(
        f.backend
            .end_capability(&capability(4, 1).digest, CapabilityEnd::Finished)
    )
    .unwrap());
    assert!(!block_on(
        f.backend
            .end_capability("not a digest", CapabilityEnd::Aborted)
    )
    .unwrap());
}

/// A prune forgets exactly the capabilities expired by then, ended or not.
pub fn expired_capabilities_are_pruned(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    let (early, ended, late) = (
        capability(5, 2_000),
        capability(6, 2_000),
        capability(7, 9_000),
    );
    for kept in [&early, &ended, &late] {
        block_on(f.backend.save_capability(kept.clone())).unwrap();
    }
    assert!(block_on(
        f.backend
            .end_capability(&ended.digest, CapabilityEnd::Finished)
    )
    .unwrap());
    assert_eq!(block_on(f.backend.prune_capabilities(1_999)).unwrap(), 0);
    assert_eq!(
        block_on(other_node(&f).prune_capabilities(2_000)).unwrap(),
        2
    );
    assert_eq!(block_on(f.backend.capability(&early.digest)).unwrap(), None);
    assert_eq!(block_on(f.backend.capability(&ended.digest)).unwrap(), None);
    assert_eq!(
        block_on(f.backend.capability(&late.digest)).unwrap(),
        Some(late)
    );
}

/// A capability whose digest is not a SHA-256 digest in lowercase hex (the token itself, say)
/// is refused with a typed error and nothing is kept.
pub fn a_capability_without_a_digest_is_refused(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    for digest in [
        format!("sbcap_{}", "ab".repeat(32)),
        "AB".repeat(32),
        String::new(),
        "'; DROP TABLE capabilities; --".into(),
    ] {
        let mut bad = capability(8, 90_000);
        bad.digest = digest.clone();
        let err = block_on(f.backend.save_capability(bad)).unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::Conflict, "{digest}");
        assert_eq!(block_on(f.backend.capability(&digest)).unwrap(), None);
    }
}
