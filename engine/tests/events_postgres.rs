//! The live feed's events across two nodes on one real PostgreSQL (issue 23 §3): a
//! `Last-Event-ID` older than what the store keeps — pruned through another node — is
//! announced as `stream.gap` `too_old` and the stream resumes from the oldest kept event; one
//! from the future is `unknown_id`. (The memory twin is `events::stored`'s unit test.)

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use switchboard_engine::events::{Event, EventHub, Filter, Next, Subscription};
use switchboard_store::{ChangeFeed, EventStore};
use switchboard_store_postgres::testing::PgCluster;
use switchboard_store_postgres::PgBackend;

async fn next(subscription: &mut Subscription) -> Next {
    tokio::time::timeout(Duration::from_secs(10), subscription.next())
        .await
        .expect("something within 10 s")
        .expect("the stream goes on")
}

async fn next_event(subscription: &mut Subscription) -> Arc<Event> {
    match next(subscription).await {
        Next::Event(event) => event,
        Next::Notice(kind, data) | Next::End(kind, data) => {
            panic!("expected an event, got {kind}: {data}")
        }
    }
}

/// A node: its own handle on the database and its own hub.
fn node(url: &str) -> (Arc<PgBackend>, Arc<EventHub>) {
    let store = Arc::new(
        tokio::task::block_in_place(|| PgBackend::open(url, Default::default()))
            .expect("the PostgreSQL store opens"),
    );
    let hub = Arc::new(EventHub::new());
    assert!(hub.keep_in(store.clone(), &*store as &dyn ChangeFeed));
    (store, hub)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_last_event_id_pruned_on_another_node_is_too_old_and_resumes_from_the_oldest_kept() {
    let url = tokio::task::block_in_place(|| {
        let cluster = PgCluster::shared();
        cluster.url(&cluster.database().expect("a test database"))
    });
    let (store_a, a) = node(&url);
    let mut live = a.subscribe(Filter::default(), None).unwrap();
    for i in 0..5 {
        a.publish("gateway.state", None, json!({ "i": i }));
    }
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(next_event(&mut live).await.id);
    }
    // Node b, started since (its ring holds none of them), resumes after the first:
    // everything after it, from the store, in order.
    let (_store_b, b) = node(&url);
    let mut resumed = b.subscribe(Filter::default(), Some(ids[0])).unwrap();
    for id in &ids[1..] {
        assert_eq!(next_event(&mut resumed).await.id, *id);
    }
    // Node a forgets all but the newest two; node c, started since, is asked from the first
    // (a client that reconnects through a load balancer to another node).
    store_a.prune_events(2).await.unwrap();
    let (_store_c, c) = node(&url);
    let mut old = c.subscribe(Filter::default(), Some(ids[0])).unwrap();
    match next(&mut old).await {
        Next::Notice("stream.gap", data) => {
            assert_eq!(data["reason"], "too_old", "{data}");
            assert_eq!(data["lastEventId"], ids[0].to_string());
        }
        Next::Event(event) => panic!("expected stream.gap too_old, got event {}", event.id),
        Next::Notice(kind, data) | Next::End(kind, data) => {
            panic!("expected stream.gap too_old, got {kind}: {data}")
        }
    }
    assert_eq!(
        next_event(&mut old).await.id,
        ids[3],
        "from the oldest kept"
    );
    assert_eq!(next_event(&mut old).await.id, ids[4]);
    // What node a publishes next reaches the resumed stream on node c.
    a.publish("gateway.state", None, json!({ "i": 5 }));
    let newer = next_event(&mut old).await.id;
    assert!(newer > ids[4]);
    // From the future: told, nothing replayed, the stream goes on from now.
    let mut future = c.subscribe(Filter::default(), Some(newer + 1_000)).unwrap();
    match next(&mut future).await {
        Next::Notice("stream.gap", data) => assert_eq!(data["reason"], "unknown_id", "{data}"),
        _ => panic!("expected stream.gap unknown_id"),
    }
    b.publish("gateway.state", None, json!({ "i": 6 }));
    // (node b's event, delivered to node c through the store)
    assert!(next_event(&mut future).await.id > newer);
}
