//! Time to first visible text with a streaming model: from the model's first token leaving
//! the fake model server to the fake Discord holding the draft (the reply shown while it is
//! written), and from the trigger to that draft.
//!
//! Run: `cargo bench -p switchboard --bench stream`
//!
//! Setup: fake-discord in-process, the real service (`switchboard::build` and
//! `switchboard::serve`) with `runner = "openai"` and the default `agent.stream = "edit"`,
//! and a fake OpenAI-compatible server on loopback (a plain thread) that answers every
//! request with server-sent events: 100 ms of "thinking", then 5 tokens 100 ms apart.
//! T_token = `SystemTime::now()` just before the first token is written to the socket;
//! T_visible = when the fake holds one more message than the trigger (its counter is polled
//! every ~0.1–0.15 ms); T0 = just before the trigger is posted. Runs are sequential, each
//! waiting for its ✅.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fake_discord::{demo, FakeDiscord};
use support::{median, now_ns, spread};
use switchboard_config::Config;

const RUNS: usize = 30;
const WARMUP: usize = 3;
const POLL: Duration = Duration::from_micros(100);
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
const TARGET_MS: f64 = 300.0;
const THINK: Duration = Duration::from_millis(100);
const TOKEN_GAP: Duration = Duration::from_millis(100);
const TOKENS: [&str; 5] = ["All ", "checks ", "are ", "green ", "today."];
/// The ✅ reaction the bridge puts on a trigger when the run has finished.
const DONE_PATH: &str = "/reactions/%E2%9C%85/@me";

/// When the latest answer's first token was written (ns since the epoch).
static FIRST_TOKEN: Mutex<Option<i128>> = Mutex::new(None);

fn serve_model(listener: TcpListener) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        std::thread::spawn(move || answer(stream));
    }
}

fn answer(mut stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut length = 0usize;
    for _ in 0..100 {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0u8; length.min(4 << 20)];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let _ = stream.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
    );
    let _ = stream.flush();
    std::thread::sleep(THINK);
    for (index, token) in TOKENS.iter().enumerate() {
        if index > 0 {
            std::thread::sleep(TOKEN_GAP);
        }
        let event = serde_json::json!({"choices": [{"index": 0, "delta": {"content": token}}]});
        let line = format!("data: {event}\n\n");
        if index == 0 {
            *FIRST_TOKEN
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(now_ns());
        }
        if stream.write_all(line.as_bytes()).is_err() {
            return;
        }
        let _ = stream.flush();
    }
    let _ = stream.write_all(b"data: [DONE]\n\n");
}

struct Run {
    t0: i128,
    token: i128,
    visible: i128,
}

fn run(fake: &FakeDiscord, n: usize) -> Run {
    *FIRST_TOKEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    let before = fake.state().messages_held;
    let logged_before = fake.requests().len();
    let t0 = now_ns();
    let id = support::mention_in_ops(fake, &format!("status {n}"));
    let deadline = Instant::now() + REPLY_TIMEOUT;
    let mut visible = None;
    loop {
        if visible.is_none() && fake.state().messages_held >= before + 2 {
            visible = Some(now_ns());
        }
        if visible.is_some() {
            let log = fake.requests();
            let done = log[logged_before.min(log.len())..]
                .iter()
                .any(|r| r.method == "PUT" && r.path.contains(&id) && r.path.ends_with(DONE_PATH));
            if done {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        assert!(
            Instant::now() < deadline,
            "run {n}: no draft and ✅ within {REPLY_TIMEOUT:?}"
        );
        std::thread::sleep(POLL);
    }
    let reply = fake
        .channel_messages(demo::OPS.into())
        .expect("#ops")
        .into_iter()
        .rev()
        .find(|m| m["message_reference"]["message_id"] == id.as_str())
        .expect("the reply");
    assert_eq!(
        reply["content"],
        TOKENS.concat(),
        "run {n}: the final answer"
    );
    Run {
        t0,
        token: FIRST_TOKEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .expect("the model streamed"),
        visible: visible.expect("seen"),
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = std::env::temp_dir().join(format!("switchboard-stream-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let model = TcpListener::bind("127.0.0.1:0").expect("bind the model");
    let model_url = format!("http://{}/v1", model.local_addr().expect("addr"));
    std::thread::spawn(move || serve_model(model));
    let fake = support::start_fake(&runtime);
    let config_text = format!(
        r#"[discord]
allowed_channel_ids = ["{ops}"]
api_base_url = "{base}"

[toolserver]
bind = "127.0.0.1:0"

[toolserver.rate_limits]
per_caller_per_minute = 1000000
per_caller_burst = 100000
per_channel_mutating_per_minute = 1000000
per_channel_mutating_burst = 100000

[store]
path = "{store}"

[agent]
runner = "openai"
base_url = "{model_url}"
model = "bench-model"
timeout_s = 30
context_messages = 5
"#,
        ops = demo::OPS,
        base = fake.base_url(),
        store = dir.join("bench.db").display(),
    );
    let config = Config::parse(&config_text, "bench.toml").expect("the bench config is valid");
    let service = support::Running::start(&runtime, config, &fake);
    for n in 0..WARMUP {
        run(&fake, n);
    }
    let runs: Vec<Run> = (0..RUNS).map(|n| run(&fake, WARMUP + n)).collect();
    service.stop(&runtime);
    runtime.block_on(fake.shutdown());
    let _ = std::fs::remove_dir_all(&dir);

    let after_token: Vec<i128> = runs.iter().map(|r| r.visible - r.token).collect();
    let after_trigger: Vec<i128> = runs.iter().map(|r| r.visible - r.t0).collect();
    let first = median(&mut after_token.clone());
    let first_line = spread(&after_token);
    let trigger_line = spread(&after_trigger);
    println!(
        "stream: first visible text, {RUNS} sequential runs (model: {} ms thinking, then {} tokens {} ms apart)",
        THINK.as_millis(),
        TOKENS.len(),
        TOKEN_GAP.as_millis()
    );
    println!(
        "  model's first token → draft held by Discord  {first_line}  (target ≤ {TARGET_MS} ms) {}",
        if first <= TARGET_MS { "ok" } else { "OVER" }
    );
    println!("  trigger → draft held by Discord              {trigger_line}");
}
