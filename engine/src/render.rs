//! Rendered messages, cached by id and revision: a list call copies each message's JSON instead
//! of rewriting and escaping its text again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use entity::Snowflake;
use serde_json::value::RawValue;

/// Entries kept before the cache starts over (a bound on memory, not an LRU). A bounded-cache
/// crate (`quick_cache`) measured slower on both read patterns of `engine/bench-render`
/// (`BENCHMARKS.md`), so this stays.
const CAPACITY: usize = 20_000;
/// Bytes of rendered JSON kept before the cache starts over: a 2,000-character message renders
/// to about 2.5 KB, so this holds a few thousand of the longest ones.
const CAPACITY_BYTES: usize = 16 * 1024 * 1024;

#[derive(Clone)]
struct Rendered {
    revision: u64,
    /// The names' revision and the settings' generation it was rendered with: new names or
    /// reloaded aliases render it again.
    names: (u64, u64),
    json: Arc<RawValue>,
}

/// Message id → its JSON as `surface.messages.*` answer it.
#[derive(Default)]
pub struct RenderCache {
    /// Keyed by message id: a snowflake is already well spread, so a fast hasher is enough.
    entries: DashMap<Snowflake, Rendered, rustc_hash::FxBuildHasher>,
    /// Bytes of JSON held (approximate under concurrent inserts; reset with the entries).
    bytes: AtomicUsize,
}

impl RenderCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The cached JSON of this revision of a message rendered with these names, if held.
    pub fn get(
        &self,
        message_id: Snowflake,
        revision: u64,
        names: (u64, u64),
    ) -> Option<Arc<RawValue>> {
        let hit = self.entries.get(&message_id)?;
        (hit.revision == revision && hit.names == names).then(|| Arc::clone(&hit.json))
    }

    /// The cached JSON, or `render()`'s, stored for next time.
    pub fn get_or_render<E>(
        &self,
        message_id: Snowflake,
        revision: u64,
        names: (u64, u64),
        render: impl FnOnce() -> Result<Box<RawValue>, E>,
    ) -> Result<Arc<RawValue>, E> {
        if let Some(hit) = self.get(message_id, revision, names) {
            return Ok(hit);
        }
        let json: Arc<RawValue> = Arc::from(render()?);
        let size = json.get().len();
        if self.entries.len() >= CAPACITY
            || self.bytes.load(Ordering::Relaxed) + size > CAPACITY_BYTES
        {
            self.entries.clear();
            self.bytes.store(0, Ordering::Relaxed);
        }
        let replaced = self.entries.insert(
            message_id,
            Rendered {
                revision,
                names,
                json: Arc::clone(&json),
            },
        );
        let freed = replaced.map_or(0, |old| old.json.get().len());
        self.bytes.fetch_add(size, Ordering::Relaxed);
        // Saturating: a clear between the add above and this sub leaves the count at zero.
        let _ = self
            .bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some(b.saturating_sub(freed))
            });
        Ok(json)
    }

    /// Bytes of JSON held.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Result<Box<RawValue>, ()> {
        Ok(RawValue::from_string(format!("\"{text}\"")).unwrap())
    }

    #[test]
    fn renders_once_per_revision() {
        let cache = RenderCache::new();
        let id = Snowflake(1);
        let mut renders = 0;
        for _ in 0..3 {
            cache
                .get_or_render(id, 0, (0, 0), || {
                    renders += 1;
                    raw("a")
                })
                .unwrap();
        }
        assert_eq!(renders, 1);
        let edited = cache.get_or_render(id, 1, (0, 0), || raw("b")).unwrap();
        assert_eq!(edited.get(), "\"b\"");
        let renamed = cache.get_or_render(id, 1, (1, 0), || raw("c")).unwrap();
        assert_eq!(renamed.get(), "\"c\"");
        assert_eq!(cache.entries.len(), 1);
        assert_eq!(cache.bytes(), 3, "a replaced entry's bytes are given back");
    }

    #[test]
    fn the_cache_is_bounded_in_bytes_as_well_as_entries() {
        let cache = RenderCache::new();
        let big = "x".repeat(100_000);
        for i in 0..1_000 {
            cache
                .get_or_render(Snowflake(i), 0, (0, 0), || raw(&big))
                .unwrap();
            assert!(cache.bytes() <= CAPACITY_BYTES, "{} bytes", cache.bytes());
        }
        for i in 0..(CAPACITY as u64 * 2) {
            cache
                .get_or_render(Snowflake(i), 1, (0, 0), || raw("s"))
                .unwrap();
        }
        assert!(cache.entries.len() <= CAPACITY);
    }
}
