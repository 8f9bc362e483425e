//! Approvals over a store shared by two nodes (the engine's `Approvals` with the test kit's
//! recording platform).

use std::sync::Arc;
use std::time::Duration;

use entity::Snowflake;
use switchboard_engine::approvals::{
    ApprovalState, Approvals, AskRequest, DecideError, Decider, Outcome,
};
use switchboard_engine::surface::AllowedChannel;

/// A call asking to post "ship it" in #ops.
fn ship_it(ops: AllowedChannel) -> AskRequest {
    AskRequest {
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
    }
}

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
    let request = ship_it(ops);
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

/// A request whose node died before its timeout fired (its waiting call is gone) is expired
/// by whichever node sweeps first, once: the second sweep, on either node, finds nothing.
#[tokio::test]
async fn a_request_whose_node_died_is_expired_once_by_another_node() {
    let store = Arc::new(switchboard_store::MemoryBackend::new(Default::default()));
    let other = Arc::new(store.node());
    let permissions = switchboard_config::Permissions::default();
    let a = Arc::new(Approvals::new(&permissions, store.clone(), store.clone()));
    let b = Approvals::new(&permissions, other.clone(), other.clone());
    let c = Approvals::new(&permissions, store.clone(), store.clone());
    let surface = Arc::new(switchboard_testkit::platform::RecordingPlatform::demo());
    let ops =
        AllowedChannel::assumed_for_tests(Snowflake(switchboard_testkit::platform::demo::OPS));
    let request = ship_it(ops);
    let waiting = {
        let (a, surface) = (Arc::clone(&a), Arc::clone(&surface));
        tokio::spawn(async move { a.ask(surface.as_ref(), request).await })
    };
    let card = loop {
        if let Some(card) = a.pending().first() {
            break card.clone();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let ApprovalState::Pending { expires_at_ms } = card.state else {
        panic!("a new request is pending");
    };
    // Node A dies with the call waiting.
    waiting.abort();
    let grace = u64::try_from(switchboard_engine::approvals::OVERDUE_GRACE.as_millis()).unwrap();
    assert_eq!(
        b.expire_overdue(surface.as_ref(), expires_at_ms).await,
        0,
        "not before its grace passed: its own node may still expire it"
    );
    let overdue = expires_at_ms + grace;
    assert_eq!(b.expire_overdue(surface.as_ref(), overdue).await, 1);
    assert_eq!(
        c.expire_overdue(surface.as_ref(), overdue).await,
        0,
        "settled once: no other node expires it again"
    );
    use switchboard_store::ApprovalStore;
    let kept = other.approval(&card.id).await.unwrap().unwrap();
    assert!(matches!(kept.card.state, ApprovalState::Expired { .. }));
}
