//! The engine's render cache (a map that starts over when full) against `quick_cache`, on two
//! read patterns:
//!
//! - `list_window`: one message arrives, then a list call reads the newest 50 (almost all
//!   hits; the ids keep growing, so the start-over cache empties itself every 20,000 messages
//!   and renders the window again);
//! - `scattered`: reads walking 30,000 messages over and over, more than either cache holds
//!   (mostly misses, with evictions).
//!
//! `cargo bench -p switchboard-bench-render --bench render_cache`; each round runs the two
//! caches one after the other, so run it several times and compare medians round by round
//! (`BENCHMARKS.md`).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use entity::Snowflake;
use serde_json::value::RawValue;
use switchboard_bench_render::{
    quick::RenderCache as QuickCache, render::RenderCache as StartOver,
};

/// What rendering a message costs here: its view serialized, as `surface.messages.*` do.
fn render(id: u64) -> Result<Box<RawValue>, serde_json::Error> {
    serde_json::value::to_raw_value(&serde_json::json!({
        "messageId": id.to_string(),
        "channelId": "1000000000000000401",
        "author": {"id": "1000000000000000101", "name": "Stanley"},
        "text": "the deploy of keystone 4.2 went out at 14:02; @Tomas please check #release-room",
        "timestamp": "2026-11-26T14:02:11.000Z",
        "attachments": [],
        "reactions": [{"emoji": "✅", "count": 1, "me": true}],
    }))
}

/// The two caches behind one call, so each pattern is written once.
trait Cached {
    fn read(&self, id: u64) -> Arc<RawValue>;
}

impl Cached for QuickCache {
    fn read(&self, id: u64) -> Arc<RawValue> {
        self.get_or_render(Snowflake(id), 0, (0, 0), || render(id))
            .expect("renders")
    }
}

impl Cached for StartOver {
    fn read(&self, id: u64) -> Arc<RawValue> {
        self.get_or_render(Snowflake(id), 0, (0, 0), || render(id))
            .expect("renders")
    }
}

/// One arrival and one list call of the newest 50.
fn list_window(cache: &impl Cached, newest: &mut u64) {
    *newest += 1;
    for id in newest.saturating_sub(49)..=*newest {
        black_box(cache.read(id));
    }
}

/// 50 reads walking all of 30,000 messages in a fixed scattered order (a stride prime to
/// 30,000), the same for both caches.
fn scattered(cache: &impl Cached, at: &mut u64) {
    for _ in 0..50 {
        *at = (*at + 7_919) % 30_000;
        black_box(cache.read(*at));
    }
}

fn benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("render_cache/list_window");
    let (cache, mut newest) = (StartOver::new(), 0);
    group.bench_function("start_over", |b| {
        b.iter(|| list_window(&cache, &mut newest));
    });
    let (cache, mut newest) = (QuickCache::new(), 0);
    group.bench_function("quick_cache", |b| {
        b.iter(|| list_window(&cache, &mut newest));
    });
    group.finish();

    let mut group = c.benchmark_group("render_cache/scattered");
    let (cache, mut at) = (StartOver::new(), 1);
    group.bench_function("start_over", |b| b.iter(|| scattered(&cache, &mut at)));
    let (cache, mut at) = (QuickCache::new(), 1);
    group.bench_function("quick_cache", |b| b.iter(|| scattered(&cache, &mut at)));
    group.finish();
}

criterion_group!(render_cache, benches);
criterion_main!(render_cache);
