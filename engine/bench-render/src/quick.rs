//! The render cache on `quick_cache` (bounded in bytes and entries, evicting by CLOCK-Pro
//! instead of starting over): the candidate measured against the engine's own cache. It was
//! slower on the pattern every list call takes (hits on recent messages) and faster only on a
//! scan wider than the cache (`BENCHMARKS.md`), so the engine keeps its cache; this stays so
//! the comparison can be run again.

use std::sync::Arc;

use entity::Snowflake;
use quick_cache::sync::{Cache, DefaultLifecycle};
use quick_cache::Weighter;
use serde_json::value::RawValue;

/// Entries kept at most: every entry weighs at least [`CAPACITY_BYTES`] / this.
const CAPACITY: usize = 20_000;
/// Bytes of rendered JSON kept at most: a 2,000-character message renders to about 2.5 KB, so
/// this holds a few thousand of the longest ones. Past it the entries least likely to be read
/// again go first (quick_cache's CLOCK-Pro), not the whole cache at once.
const CAPACITY_BYTES: u64 = 16 * 1024 * 1024;
/// What the smallest entry weighs, so the byte bound bounds the count too.
const MIN_WEIGHT: u64 = CAPACITY_BYTES.div_ceil(CAPACITY as u64);

#[derive(Clone)]
struct Rendered {
    revision: u64,
    /// The names' revision and the settings' generation it was rendered with: new names or
    /// reloaded aliases render it again.
    names: (u64, u64),
    json: Arc<RawValue>,
}

/// An entry weighs its JSON's bytes (at least [`MIN_WEIGHT`]).
#[derive(Clone, Copy)]
struct ByBytes;

impl Weighter<Snowflake, Rendered> for ByBytes {
    fn weight(&self, _: &Snowflake, rendered: &Rendered) -> u64 {
        (rendered.json.get().len() as u64).max(MIN_WEIGHT)
    }
}

/// Message id → its JSON, bounded in bytes and in entries by `quick_cache`.
pub struct RenderCache {
    /// Keyed by message id: a snowflake is already well spread, so a fast hasher is enough.
    entries: Cache<
        Snowflake,
        Rendered,
        ByBytes,
        rustc_hash::FxBuildHasher,
        DefaultLifecycle<Snowflake, Rendered>,
    >,
}

impl Default for RenderCache {
    fn default() -> Self {
        RenderCache {
            entries: Cache::with(
                CAPACITY,
                CAPACITY_BYTES,
                ByBytes,
                rustc_hash::FxBuildHasher,
                DefaultLifecycle::default(),
            ),
        }
    }
}

impl RenderCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The cached JSON, or `render()`'s, stored for next time.
    pub fn get_or_render<E>(
        &self,
        message_id: Snowflake,
        revision: u64,
        names: (u64, u64),
        render: impl FnOnce() -> Result<Box<RawValue>, E>,
    ) -> Result<Arc<RawValue>, E> {
        if let Some(hit) = self.entries.get(&message_id) {
            if hit.revision == revision && hit.names == names {
                return Ok(hit.json);
            }
        }
        let json: Arc<RawValue> = Arc::from(render()?);
        self.entries.insert(
            message_id,
            Rendered {
                revision,
                names,
                json: Arc::clone(&json),
            },
        );
        Ok(json)
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
        // Three reads of one revision, then a new revision, then new names.
        for (revision, names, text) in [
            (0, (0, 0), "a"),
            (0, (0, 0), "a"),
            (0, (0, 0), "a"),
            (1, (0, 0), "b"),
            (1, (1, 0), "c"),
        ] {
            let json = cache
                .get_or_render(id, revision, names, || {
                    renders += 1;
                    raw(text)
                })
                .unwrap();
            assert_eq!(json.get(), format!("\"{text}\""));
        }
        assert_eq!(renders, 3, "once per revision and names");
        assert_eq!(cache.entries.len(), 1, "a new revision replaces the entry");
        assert_eq!(cache.entries.weight(), MIN_WEIGHT);
    }

    #[test]
    fn the_cache_is_bounded_in_bytes_as_well_as_entries() {
        let cache = RenderCache::new();
        let big = "x".repeat(100_000);
        for i in 0..1_000 {
            cache
                .get_or_render(Snowflake(i), 0, (0, 0), || raw(&big))
                .unwrap();
            assert!(
                cache.entries.weight() <= CAPACITY_BYTES,
                "{} bytes",
                cache.entries.weight()
            );
        }
        for i in 0..(CAPACITY as u64 * 2) {
            cache
                .get_or_render(Snowflake(i), 1, (0, 0), || raw("s"))
                .unwrap();
        }
        assert!(cache.entries.len() <= CAPACITY, "{}", cache.entries.len());
    }

    #[test]
    fn a_full_cache_keeps_what_is_read_often() {
        let cache = RenderCache::new();
        let hot: Vec<Snowflake> = (0..100).map(Snowflake).collect();
        let mut renders = 0;
        for round in 0..(CAPACITY as u64 * 3 / 100) {
            for &id in &hot {
                cache
                    .get_or_render(id, 0, (0, 0), || {
                        renders += 1;
                        raw("hot")
                    })
                    .unwrap();
            }
            // A stream of messages read once each, more than the cache holds in all.
            for i in 0..100 {
                cache
                    .get_or_render(Snowflake(1_000_000 + round * 100 + i), 0, (0, 0), || {
                        raw("c")
                    })
                    .unwrap();
            }
        }
        // The cache it replaced dropped everything when full, rendering the hot set again
        // each time: here it stays.
        assert!(renders < 200, "{renders} renders of 100 hot messages");
    }
}
