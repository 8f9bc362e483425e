//! The memory backend's idempotency keys: bounded, and pruned by expiry order, so a reservation
//! costs a lookup (plus the keys that expired since the last one), never a scan of every key.

use std::collections::{BTreeSet, HashMap};

use switchboard_records::{IdempotencyKey, IdempotencyRequest, KeptKey, StoredAnswer};

use crate::aggregates::Reserved;
use crate::error::{StoreError, StoreErrorKind};

#[derive(Debug)]
struct Kept {
    input_hash: String,
    answer: Option<StoredAnswer>,
    expires_ms: u64,
}

/// The kept keys, with their expiries in order.
#[derive(Debug, Default)]
pub(super) struct Keys {
    by_key: HashMap<IdempotencyKey, Kept>,
    by_expiry: BTreeSet<(u64, IdempotencyKey)>,
}

impl Keys {
    pub(super) fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Forgets the keys expired at `now_ms`.
    fn prune(&mut self, now_ms: u64) {
        while let Some(first) = self.by_expiry.first() {
            if first.0 > now_ms {
                break;
            }
            if let Some((_, key)) = self.by_expiry.pop_first() {
                self.by_key.remove(&key);
            }
        }
    }

    fn forget(&mut self, key: &IdempotencyKey) {
        if let Some(kept) = self.by_key.remove(key) {
            self.by_expiry.remove(&(kept.expires_ms, key.clone()));
        }
    }

    /// Makes room for one more key under `cap`: forgets the answered keys that would expire
    /// first. A key still running is never forgotten early (its retry must not run the call
    /// again); when every kept key is running, the reservation is refused.
    fn make_room(&mut self, cap: usize) -> Result<(), StoreError> {
        while self.by_key.len() >= cap {
            self.forget_oldest_answered(cap)?;
        }
        Ok(())
    }

    fn forget_oldest_answered(&mut self, cap: usize) -> Result<(), StoreError> {
        let answered = self
            .by_expiry
            .iter()
            .find(|(_, key)| {
                self.by_key
                    .get(key)
                    .is_some_and(|kept| kept.answer.is_some())
            })
            .map(|(_, key)| key.clone());
        match answered {
            Some(key) => {
                tracing::warn!(
                    cap,
                    "the memory store holds its most idempotency keys: the oldest answered one is forgotten early"
                );
                self.forget(&key);
                Ok(())
            }
            None => Err(StoreError::new(
                StoreErrorKind::Unavailable,
                format!(
                    "the memory store holds {cap} idempotency keys whose calls are all still running; retry once some have answered"
                ),
            )),
        }
    }

    /// Reserves `request.key` (see `IdempotencyStore::reserve_idempotency`), keeping at most
    /// `cap` keys.
    pub(super) fn reserve(
        &mut self,
        request: IdempotencyRequest,
        cap: usize,
    ) -> Result<Reserved, StoreError> {
        self.prune(request.now_ms);
        Ok(match self.by_key.get(&request.key) {
            Some(kept) if kept.input_hash != request.input_hash => Reserved::Mismatch,
            Some(Kept {
                answer: Some(answer),
                ..
            }) => Reserved::Replay(answer.clone()),
            Some(_) => Reserved::Running,
            None => {
                self.make_room(cap.max(1))?;
                let expires_ms = request.now_ms.saturating_add(request.ttl_ms);
                self.by_expiry.insert((expires_ms, request.key.clone()));
                self.by_key.insert(
                    request.key,
                    Kept {
                        input_hash: request.input_hash,
                        answer: None,
                        expires_ms,
                    },
                );
                Reserved::Fresh
            }
        })
    }

    /// Keeps a reserved key's answer; `false` when the key is not kept.
    pub(super) fn complete(&mut self, key: &IdempotencyKey, answer: StoredAnswer) -> bool {
        match self.by_key.get_mut(key) {
            Some(kept) => {
                kept.answer = Some(answer);
                true
            }
            None => false,
        }
    }

    /// Forgets a key whose call never ran (one with an answer stays).
    pub(super) fn release(&mut self, key: &IdempotencyKey) {
        if self
            .by_key
            .get(key)
            .is_some_and(|kept| kept.answer.is_none())
        {
            self.forget(key);
        }
    }

    /// The kept keys above `after`, by key, at most `limit`.
    pub(super) fn after(&self, after: Option<&IdempotencyKey>, limit: usize) -> Vec<KeptKey> {
        let mut out: Vec<KeptKey> = self
            .by_key
            .iter()
            .filter(|(key, _)| after.is_none_or(|after| *key > after))
            .map(|(key, kept)| KeptKey {
                key: key.clone(),
                input_hash: kept.input_hash.clone(),
                answer: kept.answer.clone(),
                expires_ms: kept.expires_ms,
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out.truncate(limit);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(key: &str, now_ms: u64) -> IdempotencyRequest {
        IdempotencyRequest {
            key: IdempotencyKey {
                caller: "operator".into(),
                key: key.into(),
            },
            input_hash: "h".into(),
            now_ms,
            ttl_ms: 1_000,
        }
    }

    fn answer() -> StoredAnswer {
        StoredAnswer {
            status: 200,
            body: "{}".into(),
        }
    }

    #[test]
    fn expired_keys_are_forgotten_in_expiry_order_without_a_scan() {
        let mut keys = Keys::default();
        for n in 0..100u64 {
            assert_eq!(
                keys.reserve(request(&format!("k{n}"), n * 10), 1_000)
                    .unwrap(),
                Reserved::Fresh
            );
        }
        // At 1,495 ms the keys reserved before 495 ms (k0..=k49) have expired.
        keys.reserve(request("late", 1_495), 1_000).unwrap();
        assert_eq!(keys.len(), 51);
        assert_eq!(keys.by_expiry.len(), 51, "both indexes agree");
        assert_eq!(
            keys.reserve(request("k49", 1_495), 1_000).unwrap(),
            Reserved::Fresh,
            "an expired key is fresh again"
        );
        assert_eq!(
            keys.reserve(request("k50", 1_495), 1_000).unwrap(),
            Reserved::Running
        );
    }

    #[test]
    fn at_the_cap_the_oldest_answered_key_goes_and_running_ones_stay() {
        let mut keys = Keys::default();
        keys.reserve(request("running", 0), 3).unwrap();
        keys.reserve(request("answered-old", 1), 3).unwrap();
        keys.reserve(request("answered-new", 2), 3).unwrap();
        assert!(keys.complete(&request("answered-old", 0).key, answer()));
        assert!(keys.complete(&request("answered-new", 0).key, answer()));
        assert_eq!(
            keys.reserve(request("fourth", 3), 3).unwrap(),
            Reserved::Fresh
        );
        assert_eq!(keys.len(), 3, "the cap holds");
        assert_eq!(keys.by_expiry.len(), 3);
        let kept: Vec<String> = keys
            .after(None, 10)
            .into_iter()
            .map(|k| k.key.key)
            .collect();
        assert_eq!(kept, ["answered-new", "fourth", "running"]);
        // Only running keys left to forget: a new one is refused, typed, and nothing goes.
        keys.reserve(request("fifth", 4), 2).unwrap_err();
        let mut full = Keys::default();
        full.reserve(request("a", 0), 2).unwrap();
        full.reserve(request("b", 0), 2).unwrap();
        let err = full.reserve(request("c", 0), 2).unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
        assert_eq!(
            full.reserve(request("a", 0), 2).unwrap(),
            Reserved::Running,
            "the running keys are all still kept"
        );
    }

    #[test]
    fn a_released_key_leaves_both_indexes() {
        let mut keys = Keys::default();
        keys.reserve(request("k", 0), 10).unwrap();
        keys.release(&request("k", 0).key);
        assert_eq!((keys.len(), keys.by_expiry.len()), (0, 0));
        keys.reserve(request("k", 0), 10).unwrap();
        assert!(keys.complete(&request("k", 0).key, answer()));
        keys.release(&request("k", 0).key);
        assert_eq!(keys.len(), 1, "an answered key is not released");
    }
}
