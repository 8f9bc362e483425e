//! What workflows cost the gateway: `WorkflowEngine::observe` runs for every new message.
//!
//! Run: `cargo bench -p switchboard-testkit --bench workflow`

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use entity::Snowflake;
use switchboard_engine::workflow::{
    NewTask, NewWorkflow, Observed, Workflow, WorkflowEngine, WorkflowHooks, MAX_PENDING,
};

struct Nothing;

impl WorkflowHooks for Nothing {
    fn resume(&self, _: &Workflow) {}
}

const FIRST_CHANNEL: u64 = 1_000_000_000_000_000_400;
const WAITED_ON: u64 = 1_000_000_000_000_000_101;

/// An engine with `count` waiting workflows of two tasks each, spread over 50 channels, each
/// waiting for one person.
fn engine_with(count: usize) -> Arc<WorkflowEngine> {
    let store = Arc::new(switchboard_store::MemoryBackend::new(Default::default()));
    let engine = WorkflowEngine::new(Arc::new(Nothing), store, None, Vec::new());
    for n in 0..count as u64 {
        let task = |offset: u64| NewTask {
            session_id: Snowflake(FIRST_CHANNEL + (n + offset) % 50),
            message_id: None,
            from_user_id: Some(Snowflake(WAITED_ON)),
            summary: "is the build signed?".into(),
            description: None,
        };
        engine
            .create(NewWorkflow {
                origin_session_id: Snowflake(FIRST_CHANNEL),
                origin_message_id: None,
                created_by: "operator".into(),
                timeout: Duration::from_secs(3600),
                resume_prompt: None,
                tasks: vec![task(0), task(1)],
            })
            .expect("created");
    }
    engine
}

fn chatter() -> Observed<'static> {
    Observed {
        channel_id: Snowflake(FIRST_CHANNEL + 7),
        message_id: Snowflake(1_000_000_000_000_009_999),
        author_id: Snowflake(1_000_000_000_000_000_102),
        author_is_bot: false,
        author_name: "tomas",
        reply_to: None,
        text: "unrelated chatter",
        timestamp: "2026-11-22T10:00:00Z",
    }
}

fn observe(c: &mut Criterion) {
    let mut group = c.benchmark_group("workflow_observe");
    let message = chatter();
    let idle = engine_with(0);
    group.bench_function("nothing_waits", |b| {
        b.iter(|| black_box(idle.observe(black_box(&message))));
    });
    for count in [10, MAX_PENDING] {
        let engine = engine_with(count);
        group.bench_function(format!("{count}_waiting_none_answered"), |b| {
            b.iter(|| black_box(engine.observe(black_box(&message))));
        });
    }
    group.finish();
}

criterion_group!(benches, observe);
criterion_main!(benches);
