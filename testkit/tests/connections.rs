//! The HTTP front under connection pressure: half-open and trickling clients, the connection
//! cap, idle connections, failing accepts, and shutdown. Raw sockets on 127.0.0.1; every wait
//! is bounded.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use switchboard_testkit::testing::{TestServer, DEMO_CONFIG};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A request head cut off before its blank line.
const PARTIAL_HEAD: &[u8] = b"POST /v1/call HTTP/1.1\r\nHost: 127.0.0.1\r\n";
const HEALTH: &[u8] = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
/// Set in the child process of `accept_failures_back_off_and_warn_once`.
const CHILD_ENV: &str = "TOOLSERVER_ACCEPT_BACKOFF_CHILD";

fn config(extra: &str) -> String {
    // DEMO_CONFIG ends in [toolserver], so these keys land there.
    format!("{DEMO_CONFIG}{extra}\n")
}

/// Raises this process's soft open-file limit towards `want` (never past the hard limit);
/// returns the soft limit now.
#[allow(unsafe_code)] // FFI calls, see SAFETY below
fn raise_descriptor_limit(want: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write only the struct passed.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < want {
            let raised = libc::rlimit {
                rlim_cur: want.min(limit.rlim_max),
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    limit.rlim_cur
}

#[allow(unsafe_code)] // FFI calls, see SAFETY below
fn set_descriptor_limit(soft: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: as above.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        limit.rlim_cur = soft.min(limit.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
    }
}

/// An answer read off a raw socket.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: String,
}

/// Reads one response (its body by `content-length`); `None` when none came within `within`.
async fn read_answer(stream: &mut TcpStream, within: Duration) -> Option<Answer> {
    let deadline = tokio::time::Instant::now() + within;
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if buffer.len() >= end + 4 + length {
                let status = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                let body = String::from_utf8_lossy(&buffer[end + 4..end + 4 + length]).into_owned();
                return Some(Answer { status, head, body });
            }
        }
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buffer.extend_from_slice(&chunk[..n]),
            _ => return None,
        }
    }
}

/// Waits until the server closes `stream` (end of file or reset), reading and dropping
/// anything it sends first; the instant it was seen closed, or `None` if still open at
/// `deadline`.
async fn closed_by(stream: &mut TcpStream, deadline: tokio::time::Instant) -> Option<Instant> {
    let mut chunk = [0u8; 4096];
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(0) | Err(_)) => return Some(Instant::now()),
            Ok(Ok(_)) => continue,
            Err(_) => return None,
        }
    }
}

/// A fresh connection's `GET /health`, answered within `within`.
async fn health(addr: SocketAddr, within: Duration) -> Option<Answer> {
    let started = tokio::time::Instant::now();
    let mut stream = tokio::time::timeout(within, TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    stream.write_all(HEALTH).await.ok()?;
    read_answer(&mut stream, within.saturating_sub(started.elapsed())).await
}

/// An authenticated `POST /v1/call` on a fresh connection, answered within `within`.
async fn call(server: &TestServer, body: &str, within: Duration) -> Option<Answer> {
    let started = tokio::time::Instant::now();
    let mut stream = tokio::time::timeout(within, TcpStream::connect(server.addr()))
        .await
        .ok()?
        .ok()?;
    let request = format!(
        "POST /v1/call HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.operator_token(),
        body.len()
    );
    stream.write_all(request.as_bytes()).await.ok()?;
    read_answer(&mut stream, within.saturating_sub(started.elapsed())).await
}

const LIST_OPS: &str =
    r##"{"tool": "surface.messages.list", "input": {"sessionId": "#ops", "limit": 5}}"##;

/// `count` connections that each sent [`PARTIAL_HEAD`], with when each was opened.
async fn half_open(addr: SocketAddr, count: usize) -> Vec<(TcpStream, Instant)> {
    let mut open = Vec::with_capacity(count);
    for i in 0..count {
        let opened = Instant::now();
        let mut stream = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
            .await
            .unwrap_or_else(|_| panic!("connection {i} timed out"))
            .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        stream.write_all(PARTIAL_HEAD).await.expect("partial head");
        open.push((stream, opened));
    }
    open
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_open_connections_do_not_starve_health() {
    let started = Instant::now();
    let limit = raise_descriptor_limit(4096);
    // Both ends of every connection live in this process, beside other tests' sockets.
    let count = usize::try_from(limit.saturating_sub(256) / 2)
        .unwrap_or(500)
        .min(500);
    assert!(
        count >= 100,
        "the open-file limit ({limit}) is too low for this test"
    );

    // Default limits: the half-open sockets take slots, /health and calls still get theirs.
    let server = TestServer::start(&DEMO_CONFIG).await.unwrap();
    let stuck = half_open(server.addr(), count).await;
    let answer = health(server.addr(), Duration::from_secs(2))
        .await
        .expect("/health answers within 2 s beside the half-open connections");
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(answer.body.contains("\"status\":\"ok\""), "{answer:?}");
    let answer = call(&server, LIST_OPS, Duration::from_secs(2))
        .await
        .expect("a call answers within 2 s beside the half-open connections");
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(answer.body.starts_with("{\"ok\":true"), "{answer:?}");
    drop(stuck);
    server.stop().await;

    // A short header timeout: every half-open socket is closed by the server, none early.
    let timeout = Duration::from_millis(500);
    let server = TestServer::start(&config("header_read_timeout_ms = 500"))
        .await
        .unwrap();
    let mut stuck = half_open(server.addr(), count).await;
    let answer = health(server.addr(), Duration::from_secs(2))
        .await
        .expect("/health answers within 2 s");
    assert_eq!(answer.status, 200, "{answer:?}");
    for (i, (stream, opened)) in stuck.iter_mut().enumerate() {
        let deadline = tokio::time::Instant::from_std(*opened + timeout + Duration::from_secs(2));
        let closed = closed_by(stream, deadline).await.unwrap_or_else(|| {
            panic!("half-open connection {i} still open 2.5 s after it was opened")
        });
        let after = closed.duration_since(*opened);
        assert!(
            after >= timeout - Duration::from_millis(50),
            "connection {i} was closed {after:?} after it opened, before the header timeout"
        );
    }
    let answer = call(&server, LIST_OPS, Duration::from_secs(2))
        .await
        .expect("calls still answer");
    assert_eq!(answer.status, 200, "{answer:?}");
    server.stop().await;
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[tokio::test]
async fn a_trickled_body_is_cut_off_at_the_body_deadline() {
    let server = TestServer::start(&config("body_read_timeout_ms = 600"))
        .await
        .unwrap();
    let stream = TcpStream::connect(server.addr()).await.unwrap();
    let (reader, mut writer) = stream.into_split();
    let head = format!(
        "POST /v1/call HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"tool\": \"",
        server.operator_token()
    );
    writer.write_all(head.as_bytes()).await.unwrap();
    let sent = Instant::now();
    // A byte every 100 ms: a per-chunk timeout would never fire; the body still never ends.
    let trickle = tokio::spawn(async move {
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if writer.write_all(b" ").await.is_err() {
                break;
            }
        }
    });
    let mut stream = reader;
    let mut buffer = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(600 + 2000);
    let mut chunk = [0u8; 4096];
    let mut closed = false;
    while !closed {
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(0) | Err(_)) => closed = true,
            Ok(Ok(n)) => buffer.extend_from_slice(&chunk[..n]),
            Err(_) => panic!(
                "no answer and no close 2.6 s after the head; got {:?}",
                String::from_utf8_lossy(&buffer)
            ),
        }
    }
    let elapsed = sent.elapsed();
    let text = String::from_utf8_lossy(&buffer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("\"body_timeout\""), "{text}");
    assert!(text.contains("600 ms"), "{text}");
    assert!(
        elapsed >= Duration::from_millis(550),
        "answered after {elapsed:?}, before the deadline"
    );
    trickle.abort();
    let answer = health(server.addr(), Duration::from_secs(2)).await.unwrap();
    assert_eq!(answer.status, 200);
    server.stop().await;
}

#[tokio::test]
async fn a_body_that_arrives_in_time_is_served() {
    let server = TestServer::start(&config("body_read_timeout_ms = 2000"))
        .await
        .unwrap();
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    let head = format!(
        "POST /v1/call HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        server.operator_token(),
        LIST_OPS.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let (first, rest) = LIST_OPS.split_at(10);
    stream.write_all(first.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stream.write_all(rest.as_bytes()).await.unwrap();
    let answer = read_answer(&mut stream, Duration::from_secs(3))
        .await
        .expect("answered");
    assert_eq!(answer.status, 200, "{answer:?}");
    server.stop().await;
}

/// `count` event streams held open (each connection serves its request for as long as it
/// lasts), with their heads read.
async fn streams(server: &TestServer, count: usize) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(count);
    for i in 0..count {
        let mut stream = TcpStream::connect(server.addr()).await.unwrap();
        let request = format!(
            "GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n\r\n",
            server.operator_token()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let read = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut byte))
                .await
                .unwrap_or_else(|_| panic!("stream {i} of {count} is served"))
                .unwrap();
            assert_eq!(read, 1, "stream {i} closed");
            head.push(byte[0]);
        }
        assert!(
            head.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&head)
        );
        held.push(stream);
    }
    held
}

#[tokio::test]
async fn when_every_slot_serves_a_request_new_connections_wait_for_one() {
    let server = TestServer::start(&config("max_connections = 8"))
        .await
        .unwrap();
    let mut held = streams(&server, 8).await;
    // The ninth waits (in the kernel's accept queue, or for a slot): no stream is closed for it.
    let mut ninth = TcpStream::connect(server.addr()).await.unwrap();
    ninth.write_all(HEALTH).await.unwrap();
    let early = read_answer(&mut ninth, Duration::from_millis(500)).await;
    assert!(early.is_none(), "served past the cap: {early:?}");
    assert_eq!(server.core().events().subscribers(), 8);
    drop(held.pop());
    let answer = read_answer(&mut ninth, Duration::from_secs(2))
        .await
        .expect("the ninth is served once a slot frees");
    assert_eq!(answer.status, 200);
    // Every slot comes back when its client leaves.
    drop(held);
    drop(ninth);
    for round in 0..20 {
        let answer = health(server.addr(), Duration::from_secs(2))
            .await
            .unwrap_or_else(|| panic!("/health round {round} answers"));
        assert_eq!(answer.status, 200);
    }
    let stopping = Instant::now();
    server.stop().await;
    assert!(stopping.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn at_the_cap_the_oldest_connection_without_a_request_head_makes_room() {
    // A long header timeout: only making room can free a slot here.
    let server = TestServer::start(&config(
        "max_connections = 8\nheader_read_timeout_ms = 60000",
    ))
    .await
    .unwrap();
    // Two slots run event streams, six hold half-sent heads: every slot is taken.
    let streams_held = streams(&server, 2).await;
    let stuck = half_open(server.addr(), 6).await;
    // Each new client that sends its request at once is served promptly: /health and calls,
    // twenty of each.
    for round in 0..20 {
        let answer = health(server.addr(), Duration::from_secs(2))
            .await
            .unwrap_or_else(|| panic!("/health round {round} answers at the cap"));
        assert_eq!(answer.status, 200, "{answer:?}");
        let answer = call(&server, LIST_OPS, Duration::from_secs(2))
            .await
            .unwrap_or_else(|| panic!("call round {round} answers at the cap"));
        assert_eq!(answer.status, 200, "{answer:?}");
    }
    // The event streams were never touched.
    assert_eq!(
        server.core().events().subscribers(),
        2,
        "a stream was closed"
    );
    drop((streams_held, stuck));
    server.stop().await;

    // Oldest first: an idle keep-alive connection that has waited longest for its next
    // request goes first, then the half-sent heads in the order they came; never the newest.
    let server = TestServer::start(&config(
        "max_connections = 8\nheader_read_timeout_ms = 60000",
    ))
    .await
    .unwrap();
    let mut idle = TcpStream::connect(server.addr()).await.unwrap();
    idle.write_all(HEALTH).await.unwrap();
    let answer = read_answer(&mut idle, Duration::from_secs(2))
        .await
        .expect("served");
    assert_eq!(answer.status, 200);
    assert!(
        !answer.head.contains("connection: close"),
        "kept alive: {answer:?}"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut stuck = half_open(server.addr(), 7).await;
    let mut clients = Vec::new();
    for (round, closes) in [(0, None), (1, Some(0)), (2, Some(1))] {
        let mut client = TcpStream::connect(server.addr()).await.unwrap();
        client.write_all(HEALTH).await.unwrap();
        let answer = read_answer(&mut client, Duration::from_secs(2))
            .await
            .unwrap_or_else(|| panic!("round {round} is served at the cap"));
        assert_eq!(answer.status, 200);
        let soon = tokio::time::Instant::now() + Duration::from_millis(500);
        match closes {
            None => assert!(
                closed_by(&mut idle, soon).await.is_some(),
                "the idle keep-alive connection, oldest, was closed first"
            ),
            Some(i) => assert!(
                closed_by(&mut stuck[i].0, soon).await.is_some(),
                "half-sent head {i} was closed in round {round}"
            ),
        }
        // The client stays: its slot is taken until the end.
        clients.push(client);
    }
    let soon = tokio::time::Instant::now() + Duration::from_millis(300);
    assert!(
        closed_by(&mut stuck[6].0, soon).await.is_none(),
        "the newest half-sent head is still open"
    );
    server.stop().await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    let server = TestServer::start(&config("header_read_timeout_ms = 700"))
        .await
        .unwrap();
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    stream.write_all(HEALTH).await.unwrap();
    let answer = read_answer(&mut stream, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(answer.status, 200);
    let answered = Instant::now();
    let closed = closed_by(
        &mut stream,
        tokio::time::Instant::now() + Duration::from_millis(700 + 1500),
    )
    .await
    .expect("an idle keep-alive connection is closed");
    assert!(closed.duration_since(answered) >= Duration::from_millis(600));
    server.stop().await;
}

#[tokio::test]
async fn idle_timeout_closes_a_silent_connection_but_spares_a_running_call() {
    let server = TestServer::start(&config(
        "idle_timeout_s = 1\nheader_read_timeout_ms = 30000",
    ))
    .await
    .unwrap();
    server
        .surface()
        .set_delay(Some(Duration::from_millis(1600)));
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    let body =
        r##"{"tool": "surface.messages.send", "input": {"sessionId": "#ops", "text": "slow"}}"##;
    let request = format!(
        "POST /v1/call HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.operator_token(),
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let answer = read_answer(&mut stream, Duration::from_secs(4))
        .await
        .expect("a call longer than the idle timeout still answers");
    assert_eq!(answer.status, 200, "{answer:?}");
    let answered = Instant::now();
    // Silent after that: closed by the idle timeout (1 s), long before the header timeout.
    let closed = closed_by(
        &mut stream,
        tokio::time::Instant::now() + Duration::from_millis(1000 + 1500),
    )
    .await
    .expect("closed after a second of silence");
    assert!(closed.duration_since(answered) >= Duration::from_millis(900));
    server.stop().await;
}

#[tokio::test]
async fn shutdown_lets_a_running_call_finish_and_closes_the_rest() {
    let server = TestServer::start(&DEMO_CONFIG).await.unwrap();
    let addr = server.addr();
    server.surface().set_delay(Some(Duration::from_millis(800)));
    let mut stuck = half_open(addr, 3).await;
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(HEALTH).await.unwrap();
    assert_eq!(
        read_answer(&mut idle, Duration::from_secs(2))
            .await
            .map(|a| a.status),
        Some(200)
    );
    let body = r##"{"tool": "surface.messages.send", "input": {"sessionId": "#ops", "text": "finishing"}}"##;
    let request = format!(
        "POST /v1/call HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.operator_token(),
        body.len()
    );
    let mut running = TcpStream::connect(addr).await.unwrap();
    running.write_all(request.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let stopping = Instant::now();
    let (answer, ()) = tokio::join!(
        read_answer(&mut running, Duration::from_secs(4)),
        server.stop()
    );
    let stopped = stopping.elapsed();
    let answer = answer.expect("the running call finishes");
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(
        stopped < Duration::from_secs(3),
        "shutdown took {stopped:?}"
    );
    let soon = tokio::time::Instant::now() + Duration::from_secs(1);
    assert!(
        closed_by(&mut idle, soon).await.is_some(),
        "idle connection closed"
    );
    for (stream, _) in &mut stuck {
        assert!(
            closed_by(stream, soon).await.is_some(),
            "half-open connection closed"
        );
    }
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "no longer listening"
    );
}

/// Parent side: a child process serves with its descriptors used up, so `accept` fails with
/// EMFILE until the parent lets it free them.
#[test]
fn accept_failures_back_off_and_warn_once() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "accept_backoff_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child");
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        drive_backoff_child(&mut child);
    }));
    let _ = child.kill();
    let _ = child.wait();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

fn drive_backoff_child(child: &mut std::process::Child) {
    let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut stderr = child.stderr.take().expect("stderr");
    let logs = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    // The marker may share a line with libtest's "test accept_backoff_child ... ".
    let wait_for = |marker: &str| -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(at) = line.find(marker) {
                        return line[at + marker.len()..].to_owned();
                    }
                }
                Err(_) => panic!("the child never printed {marker}"),
            }
        }
    };
    let port: u16 = wait_for("PORT ").trim().parse().expect("port");
    wait_for("EXHAUSTED");

    let mut client =
        std::net::TcpStream::connect(("127.0.0.1", port)).expect("the kernel queues it");
    client
        .set_read_timeout(Some(Duration::from_millis(800)))
        .unwrap();
    client.write_all(HEALTH).unwrap();
    let mut first = [0u8; 1];
    assert!(
        client.read(&mut first).is_err(),
        "served while the child had no descriptors"
    );

    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"FREE\n").unwrap();
    stdin.flush().unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let mut answer = Vec::new();
    let mut chunk = [0u8; 1024];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = client
            .read(&mut chunk)
            .expect("served within 3 s of descriptors coming back");
        assert!(n > 0, "closed without an answer");
        answer.extend_from_slice(&chunk[..n]);
    }
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    drop(stdin);
    wait_for("DONE");

    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let logs = logs.join().expect("stderr reader");
    let warnings: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("cannot accept connections"))
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "one warning per run of failures:\n{logs}"
    );
    let recovered = logs
        .lines()
        .find(|l| l.contains("accepting connections again"))
        .unwrap_or_else(|| panic!("no recovery line:\n{logs}"));
    let failed: u64 = recovered
        .split("failed_accepts=")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {recovered}"));
    // About 800 ms of failures at one try per 100 ms; a spinning loop makes thousands.
    assert!(
        (2..=40).contains(&failed),
        "{failed} failed accepts in about 800 ms:\n{logs}"
    );
}

/// Child side of `accept_failures_back_off_and_warn_once`; does nothing in a normal run.
#[test]
fn accept_backoff_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let server = TestServer::start(&DEMO_CONFIG).await.expect("server");
        println!("PORT {}", server.addr().port());
        // Use up every descriptor the (lowered) limit allows; accept now fails with EMFILE.
        set_descriptor_limit(256);
        let mut hoard = Vec::new();
        while let Ok(file) = std::fs::File::open("/dev/null") {
            hoard.push(file);
            if hoard.len() > 100_000 {
                break;
            }
        }
        println!("EXHAUSTED");
        let (freed_tx, freed) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let mut line = String::new();
            let stdin = std::io::stdin();
            let _ = stdin.lock().read_line(&mut line);
            let _ = freed_tx.send(());
            while stdin.lock().read_line(&mut line).is_ok_and(|n| n > 0) {}
            let _ = done_tx.send(());
        });
        let _ = tokio::time::timeout(Duration::from_secs(20), freed).await;
        drop(hoard);
        let _ = tokio::time::timeout(Duration::from_secs(20), done).await;
        server.stop().await;
        println!("DONE");
    });
}
