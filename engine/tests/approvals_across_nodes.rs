//! Approvals over a store shared by two nodes (the engine's `Approvals` with the test kit's
//! recording platform).

use std::sync::Arc;
use std::time::Duration;

use entity::Snowflake;
use switchboard_engine::approvals::{
    ApprovalState, Approvals, AskRequest, DecideError, Decider, Outcome,
};
use switchboard_engine::surface::AllowedChannel;

/// Two nodes over one shared store: a call waits on node A, an approver decides on node B
/// (no call waits there); A's call learns the decision from the store's change feed, and a
/// second decision, on either node, finds it no longer pending.
#[tokio::test]
async fn a_decision_made_on_another_node_wakes_the_waiting_call_once() {
    let store = Arc::new(switchboard_store::MemoryBackend::new(Default::default()));
    let other = Arc::new(store.node());
    let permissions = switchboard_config::Permissions::default();
    let a = Arc::new(Approvals::new(&permissions, store.clone(), store.clone()));
    let b = Approvals::new(&permissions, other.clone(), other);
    let surface = Arc::new(switchboard_testkit::platform::RecordingPlatform::demo());
    let ops =
        AllowedChannel::assumed_for_tests(Snowflake(switchboard_testkit::platform::demo::OPS));
    let request = AskRequest {
        tool: "surface.messages.send".into(),
        input: serde_json::json!({"text": "ship it"}),
        audit_input: serde_json::json!({"text": "ship it"}),
        targets: vec![ops.id()],
        session_label: "#ops".into(),
        requested_by: "token:ci".into(),
        caller: "token:ci".into(),
        owner: "token:ci".into(),
        run: None,
        tool_call_id: None,
        note: None,
        channel: ops,
    };
    let waiting = {
        let (a, surface) = (Arc::clone(&a), Arc::clone(&surface));
        tokio::spawn(async move { a.ask(surface.as_ref(), request).await })
    };
    let id = loop {
        if let Some(card) = a.pending().first() {
            break card.id.clone();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let decider = Decider::Caller {
        principal: "operator".into(),
        front: "console",
    };
    let card = b
        .decide(surface.as_ref(), &id, &decider, true, false)
        .await
        .expect("node B decides what node A waits on");
    assert!(matches!(card.state, ApprovalState::Approved { .. }));
    let outcome = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiting call wakes")
        .expect("the call's task");
    assert_eq!(outcome, Outcome::Approved("console:operator".into()));
    for node in [a.as_ref(), &b] {
        assert_eq!(
            node.decide(surface.as_ref(), &id, &decider, false, false)
                .await
                .unwrap_err(),
            DecideError::NotPending
        );
    }
}
