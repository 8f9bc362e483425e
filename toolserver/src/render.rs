//! Rendered messages, cached by id and revision: a list call copies each message's JSON instead
//! of rewriting and escaping its text again.

use std::sync::Arc;

use dashmap::DashMap;
use entity::Snowflake;
use serde_json::value::RawValue;

/// Entries kept before the cache starts over (a bound on memory, not an LRU).
const CAPACITY: usize = 50_000;

#[derive(Clone)]
struct Rendered {
    revision: u64,
    names_revision: u64,
    json: Arc<RawValue>,
}

/// Message id → its JSON as `surface.messages.*` answer it.
#[derive(Default)]
pub struct RenderCache {
    entries: DashMap<Snowflake, Rendered>,
}

impl RenderCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// The cached JSON, or `render()`'s, stored for next time.
    pub fn get_or_render<E>(
        &self,
        message_id: Snowflake,
        revision: u64,
        names_revision: u64,
        render: impl FnOnce() -> Result<Box<RawValue>, E>,
    ) -> Result<Arc<RawValue>, E> {
        if let Some(hit) = self.entries.get(&message_id) {
            if hit.revision == revision && hit.names_revision == names_revision {
                return Ok(Arc::clone(&hit.json));
            }
        }
        let json: Arc<RawValue> = Arc::from(render()?);
        if self.entries.len() >= CAPACITY {
            self.entries.clear();
        }
        self.entries.insert(
            message_id,
            Rendered {
                revision,
                names_revision,
                json: Arc::clone(&json),
            },
        );
        Ok(json)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
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
                .get_or_render(id, 0, 0, || {
                    renders += 1;
                    raw("a")
                })
                .unwrap();
        }
        assert_eq!(renders, 1);
        let edited = cache.get_or_render(id, 1, 0, || raw("b")).unwrap();
        assert_eq!(edited.get(), "\"b\"");
        let renamed = cache.get_or_render(id, 1, 1, || raw("c")).unwrap();
        assert_eq!(renamed.get(), "\"c\"");
    }
}
