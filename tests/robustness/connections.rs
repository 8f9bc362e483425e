//! Any local process could once make the tool server unreachable by holding half-sent
//! requests open. 500 of them now leave `/health` and calls prompt, and are closed after the
//! header-read timeout.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Allow, Fake, Switchboard, TempDir};
use crate::Client;

const HALF_OPEN: usize = 500;

/// `count` connections to `addr` that each sent half a request head, and then nothing.
fn half_sent(addr: &str, count: usize) -> Vec<TcpStream> {
    (0..count)
        .map(|_| {
            let mut stream = TcpStream::connect(addr).expect("connect");
            stream
                .write_all(b"POST /v1/call HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appli")
                .expect("a partial head");
            stream
        })
        .collect()
}

#[test]
fn five_hundred_half_open_connections_leave_the_server_answering() {
    let fake = Fake::start();
    let dir = TempDir::new("robust-half-open");
    let sb = Switchboard::start_full(
        &fake,
        dir.path(),
        &Allow::default(),
        "header_read_timeout_ms = 1500",
        "",
    );
    let addr = sb.url.trim_start_matches("http://").to_owned();
    let opened = Instant::now();
    let mut held = half_sent(&addr, HALF_OPEN);
    // The server still answers, promptly, on a fresh connection.
    let client = Client::new(&sb.url, &sb.token);
    let started = Instant::now();
    let answer = client.call("surface.sessions.list", json!({}));
    assert_eq!(answer.status, 200, "{answer:?}");
    let (status, _) = crate::support::http_get(&sb.url, "/health").expect("health");
    assert_eq!(status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "with {HALF_OPEN} half-open connections a call and /health took {:?}",
        started.elapsed()
    );
    // And the half-open ones are closed once the header timeout passes.
    let deadline = opened + Duration::from_millis(1500) + Duration::from_secs(5);
    let mut closed = 0;
    for stream in &mut held {
        let left = deadline.saturating_duration_since(Instant::now());
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .expect("timeout");
        let mut buffer = [0u8; 512];
        loop {
            match stream.read(&mut buffer) {
                Ok(0) => {
                    closed += 1;
                    break;
                }
                Ok(_) => continue,
                Err(error)
                    if matches!(
                        error.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    break
                }
                Err(_) => {
                    closed += 1;
                    break;
                }
            }
        }
    }
    assert_eq!(
        closed, HALF_OPEN,
        "half-open connections still open after the timeout"
    );
    assert!(
        opened.elapsed() >= Duration::from_millis(1400),
        "closed before the timeout"
    );
}

/// More half-sent requests than the server has slots (512 by default): each client that sends
/// its request at once is still served, because at the cap the connection that has waited
/// longest for a request head is closed to make room. The red team's 680 made `/health` fail 8
/// of 20 times and operator calls 6 of 20.
#[test]
fn six_hundred_eighty_half_sent_requests_leave_health_and_calls_answering_every_time() {
    const ATTACK: usize = 680;
    let fake = Fake::start();
    let dir = TempDir::new("robust-slowloris");
    // The default header timeout (10 s) outlasts the whole test: only making room helps.
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let addr = sb.url.trim_start_matches("http://").to_owned();
    let _held = half_sent(&addr, ATTACK);
    let client = Client::new(&sb.url, &sb.token);
    let (mut health_ok, mut calls_ok) = (0, 0);
    for _ in 0..20 {
        let started = Instant::now();
        if matches!(crate::support::http_get(&sb.url, "/health"), Ok((200, _)))
            && started.elapsed() < Duration::from_secs(2)
        {
            health_ok += 1;
        }
        let started = Instant::now();
        if client.call("surface.sessions.list", json!({})).status == 200
            && started.elapsed() < Duration::from_secs(2)
        {
            calls_ok += 1;
        }
    }
    assert_eq!(
        (health_ok, calls_ok),
        (20, 20),
        "answered within 2 s beside {ATTACK} half-sent requests: /health, operator calls"
    );
}
