//! Events across the nodes of a cluster (issue 23 §3): two nodes — two cores, each with its
//! HTTP front on 127.0.0.1:0 — over one real PostgreSQL (a throwaway cluster of Debian's
//! binaries). An event published on node A is seen on node B's `/v1/events`, with the same
//! id on both; a client that reconnects to B with the `Last-Event-ID` it got from A resumes
//! with nothing missed and nothing repeated; garbage ids get a clear answer.

mod common;

use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchboard_config::Config;
use switchboard_engine::server::Core;
use switchboard_engine::Secrets;
use switchboard_store_postgres::testing::PgCluster;
use switchboard_store_postgres::{PgBackend, PgOptions};
use switchboard_testkit::platform::RecordingPlatform;
use switchboard_testkit::testing::DEMO_CONFIG;
use tokio::sync::oneshot;

const OPERATOR: &str = "operator-token-for-events-across-nodes";

type Stream = mpsc::Receiver<Option<common::sse::Event<String>>>;

/// One node: a core over `store`, served on 127.0.0.1:0.
struct Node {
    url: String,
    core: Arc<Core>,
    stop: Option<oneshot::Sender<()>>,
}

async fn node(store: Arc<PgBackend>) -> Node {
    let config = Config::parse(&DEMO_CONFIG, "test.toml").expect("the demo config");
    let secrets = Secrets {
        operator: Some(OPERATOR.into()),
        tokens: Vec::new(),
    };
    let core = Arc::new(
        Core::new(
            &config,
            Arc::new(RecordingPlatform::demo()),
            secrets,
            switchboard_callables::registry(),
        )
        .expect("a core")
        .with_store(store, Vec::new()),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("a port");
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(switchboard_http::serve_front(
        switchboard_http::Front::new(Arc::clone(&core)),
        axum::Router::new(),
        listener,
        async {
            let _ = stopped.await;
        },
    ));
    Node {
        url,
        core,
        stop: Some(stop),
    }
}

fn subscribe(node: &Node, last_event_id: Option<&str>) -> Stream {
    let mut headers = vec![("authorization", format!("Bearer {OPERATOR}"))];
    if let Some(id) = last_event_id {
        headers.push(("last-event-id", id.to_owned()));
    }
    common::sse::subscribe(
        format!("{}/v1/events", node.url),
        headers,
        Duration::from_secs(60),
        |data| data,
    )
}

/// The next event of `stream` (type, data, id), within 10 s.
fn next_event(stream: &Stream) -> (String, Value, Option<String>) {
    match stream.recv_timeout(Duration::from_secs(10)) {
        Ok(Some((kind, data, id))) => {
            let value = serde_json::from_str(&data).unwrap_or(Value::String(data));
            (kind, value, id)
        }
        other => panic!("no event within 10 s: {other:?}"),
    }
}

/// Waits (at most 10 s) until `node` serves `n` streams.
fn wait_for_subscribers(node: &Node, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while node.core.events().subscribers() < n {
        assert!(Instant::now() < deadline, "{n} streams never opened");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A `/v1/call` on `node` that sends `text` to #ops: its `call.finished` is published there.
fn send(node: &Node, text: &str) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into();
    let answer = agent
        .post(&format!("{}/v1/call", node.url))
        .header("authorization", &format!("Bearer {OPERATOR}"))
        .header("content-type", "application/json")
        .send(
            json!({"tool": "surface.messages.send", "input": {"sessionId": "#ops", "text": text}})
                .to_string(),
        )
        .expect("the call is answered");
    assert_eq!(answer.status(), 200);
}

/// A `gateway.state` marker published on `node` (what the bot publishes).
fn mark(node: &Node, n: u64) {
    node.core
        .events()
        .publish("gateway.state", None, json!({ "marker": n }));
}

#[test]
fn events_of_one_node_are_seen_and_resumed_on_another() {
    let cluster = PgCluster::shared();
    let database = cluster.database().expect("a test database");
    let url = cluster.url(&database);
    let options = PgOptions {
        pool_size: 4,
        ..PgOptions::default()
    };
    let store_a = Arc::new(PgBackend::open(&url, options.clone()).expect("node A's store"));
    let store_b = Arc::new(PgBackend::open(&url, options).expect("node B's store"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (mut a, mut b) = runtime.block_on(async {
        (
            node(Arc::clone(&store_a)).await,
            node(Arc::clone(&store_b)).await,
        )
    });

    // A client on each node; a call on A.
    let on_a = subscribe(&a, None);
    let on_b = subscribe(&b, None);
    wait_for_subscribers(&a, 1);
    wait_for_subscribers(&b, 1);
    send(&a, "published on A");
    let (kind, seen_on_b, id_on_b) = next_event(&on_b);
    assert_eq!(kind, "call.finished", "{seen_on_b}");
    assert_eq!(seen_on_b["tool"], "surface.messages.send");
    let (_, seen_on_a, id_on_a) = next_event(&on_a);
    assert_eq!(seen_on_a, seen_on_b, "one event, the same on both nodes");
    assert_eq!(id_on_a, id_on_b, "one id on every node");
    let first = id_on_a.expect("the event has an id");
    assert_eq!(seen_on_a["id"], first.as_str());

    // The client on B goes away; A and B publish while it is gone.
    drop(on_b);
    for n in 0..5 {
        mark(&a, n);
    }
    send(&b, "published on B");
    send(&a, "published on A again");
    mark(&a, 99);
    // What a client that stayed on A saw after `first`: the truth to compare with. The two
    // nodes' events interleave in the order the store committed them (B's call may land after
    // A's marker), so read until all eight are in.
    let mut stayed: Vec<(String, String, Value)> = Vec::new();
    let calls = |seen: &[(String, String, Value)]| {
        seen.iter()
            .filter(|(kind, ..)| kind == "call.finished")
            .count()
    };
    while stayed.len() < 8 {
        let (kind, data, id) = next_event(&on_a);
        stayed.push((kind, id.expect("an id"), data));
    }
    assert_eq!(calls(&stayed), 2, "{stayed:?}");
    assert!(stayed.iter().any(|(_, _, data)| data["marker"] == 99));
    let ids: Vec<u64> = stayed
        .iter()
        .map(|(_, id, _)| id.parse().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "in id order: {ids:?}");

    // Reconnecting to B with the id from A: exactly what followed, in order, once.
    let resumed = subscribe(&b, Some(&first));
    let mut replayed = Vec::new();
    for _ in 0..stayed.len() {
        let (kind, data, id) = next_event(&resumed);
        replayed.push((kind, id.expect("an id"), data));
    }
    assert_eq!(replayed, stayed, "nothing missed, nothing repeated");
    // And it goes on live, with events of either node.
    mark(&a, 100);
    assert_eq!(next_event(&resumed).1["marker"], 100);
    mark(&b, 101);
    assert_eq!(next_event(&resumed).1["marker"], 101);
    assert!(
        resumed.recv_timeout(Duration::from_millis(1500)).is_err(),
        "nothing else, nothing twice"
    );

    // Garbage: not a number is a typed 400; an id the store never gave is said to be unknown.
    let garbage = subscribe(&b, Some("soon"));
    assert_eq!(next_event(&garbage).0, "http");
    let unknown = subscribe(&b, Some("99999999999"));
    let (kind, notice, id) = next_event(&unknown);
    assert_eq!(
        (kind.as_str(), notice["reason"].as_str(), id),
        ("stream.gap", Some("unknown_id"), None),
        "{notice}"
    );
    assert!(notice["message"].as_str().unwrap().contains("99999999999"));
    mark(&a, 102);
    assert_eq!(next_event(&unknown).1["marker"], 102);
    assert_eq!(a.core.events().lost() + b.core.events().lost(), 0);

    for node in [&mut a, &mut b] {
        node.core.events().close();
        let _ = node.stop.take().map(|stop| stop.send(()));
    }
    drop(runtime);
    for store in [store_a, store_b] {
        let _ = futures_executor::block_on(switchboard_store::Backend::close(&*store));
    }
}
