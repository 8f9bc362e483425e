//! Timers over a store shared by two nodes: every workflow finish (its deadline, or its last
//! answer) resumes exactly once cluster-wide, whichever node's clock or ingest saw it first,
//! and a workflow created on a node that then died still fires on the other.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use entity::Snowflake;
use switchboard_engine::workflow::{
    Cluster, NewTask, NewWorkflow, Observed, Workflow, WorkflowEngine, WorkflowHooks, WorkflowState,
};
use switchboard_store::MemoryBackend;

const OPS: Snowflake = Snowflake(1_000_000_000_000_000_100);
const ROOM: Snowflake = Snowflake(1_000_000_000_000_000_200);
const TOMAS: Snowflake = Snowflake(1_000_000_000_000_000_300);

/// Counts the runs each node resumes.
#[derive(Default)]
struct Resumed(Mutex<Vec<(String, WorkflowState)>>);

impl WorkflowHooks for Resumed {
    fn resume(&self, workflow: &Workflow) {
        self.0
            .lock()
            .unwrap()
            .push((workflow.workflow_id.clone(), workflow.state));
    }
}

impl Resumed {
    fn all(&self) -> Vec<(String, WorkflowState)> {
        self.0.lock().unwrap().clone()
    }
}

struct Node {
    engine: Arc<WorkflowEngine>,
    resumed: Arc<Resumed>,
    deadlines: tokio::task::JoinHandle<()>,
}

async fn node(store: Arc<MemoryBackend>) -> Node {
    let resumed = Arc::new(Resumed::default());
    let cluster = Cluster {
        once: store.clone(),
        feed: store.clone(),
    };
    let engine = WorkflowEngine::open(resumed.clone(), store, None, Some(cluster))
        .await
        .unwrap();
    let deadlines = tokio::spawn(Arc::clone(&engine).run_deadlines());
    Node {
        engine,
        resumed,
        deadlines,
    }
}

/// Two nodes over one memory store (the second a `node()` of the first).
async fn two_nodes() -> (Node, Node) {
    let store = Arc::new(MemoryBackend::new(Default::default()));
    let other = Arc::new(store.node());
    (node(store).await, node(other).await)
}

fn waiting_for_room(timeout: Duration) -> NewWorkflow {
    NewWorkflow {
        origin_session_id: OPS,
        origin_message_id: None,
        created_by: "operator".into(),
        timeout,
        resume_prompt: None,
        tasks: vec![NewTask {
            session_id: ROOM,
            message_id: None,
            from_user_id: None,
            summary: "is the build signed?".into(),
            description: None,
        }],
    }
}

/// Waits (bounded) until `done` holds.
async fn until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting until {what}");
}

/// A workflow node A creates with a deadline `timeout_ms` away, once node B has read it in.
async fn created_on_a_known_to_b(a: &Node, b: &Node, timeout_ms: u64) -> Workflow {
    let created = a
        .engine
        .create(waiting_for_room(Duration::from_millis(timeout_ms)))
        .unwrap();
    until("node B reads the workflow in", || {
        b.engine.get(&created.workflow_id).is_some()
    })
    .await;
    created
}

fn resumes(nodes: [&Node; 2]) -> Vec<(String, WorkflowState)> {
    nodes.iter().flat_map(|n| n.resumed.all()).collect()
}

#[tokio::test]
async fn a_deadline_both_nodes_know_resumes_once() {
    let (a, b) = two_nodes().await;
    let created = created_on_a_known_to_b(&a, &b, 300).await;
    until("the deadline fires", || !resumes([&a, &b]).is_empty()).await;
    // Both clocks passed the deadline; give the loser time to (wrongly) resume too.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        resumes([&a, &b]),
        vec![(created.workflow_id.clone(), WorkflowState::TimedOut)]
    );
    for node in [&a, &b] {
        assert_eq!(
            node.engine.get(&created.workflow_id).unwrap().state,
            WorkflowState::TimedOut,
            "both nodes show it finished"
        );
    }
}

#[tokio::test]
async fn a_workflow_whose_node_died_still_fires_on_the_other_node() {
    let (a, b) = two_nodes().await;
    let created = created_on_a_known_to_b(&a, &b, 300).await;
    a.deadlines.abort();
    until("node B fires the deadline", || !b.resumed.all().is_empty()).await;
    assert_eq!(
        b.resumed.all(),
        vec![(created.workflow_id, WorkflowState::TimedOut)]
    );
    assert!(a.resumed.all().is_empty());
}

#[tokio::test]
async fn an_answer_on_one_node_and_the_deadline_on_the_other_resume_once() {
    let (a, b) = two_nodes().await;
    // The deadline is due as the answer comes: both nodes race to finish it.
    let created = created_on_a_known_to_b(&a, &b, 150).await;
    tokio::time::sleep(Duration::from_millis(140)).await;
    a.engine.observe(&Observed {
        channel_id: ROOM,
        message_id: Snowflake(1_000_000_000_000_001_000),
        author_id: TOMAS,
        author_is_bot: false,
        author_name: "tomas",
        reply_to: None,
        text: "yes, signed",
        timestamp: "2026-11-22T10:00:00Z",
    });
    until("the workflow resumes", || !resumes([&a, &b]).is_empty()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let all = resumes([&a, &b]);
    assert_eq!(all.len(), 1, "resumed once across both nodes: {all:?}");
    assert_eq!(all[0].0, created.workflow_id);
}
