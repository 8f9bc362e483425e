//! Shared pieces of the end-to-end tests: a fake Discord in-process, the real `switchboard`
//! binary as a child process, and the real `tools` CLI. Every wait is bounded and every child
//! is killed on drop.

#![allow(dead_code)]

pub mod approvals;
pub mod console;
pub mod shards;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fake_discord::{
    demo, FakeDiscord, FakeOptions, RateLimits, RecordedRequest, SlashCommand, Snowflake,
    UserMessage, World,
};
use serde_json::Value;

/// How long switchboard may take to log its ready line.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the gateway may take to be ready (and the guild cached) after that.
const GATEWAY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one `tools` call may take.
const TOOLS_TIMEOUT: Duration = Duration::from_secs(30);
/// Poll interval: well under the tool server's per-caller quota (600/min, burst 60).
pub const POLL: Duration = Duration::from_millis(200);

static COUNTER: AtomicU64 = AtomicU64::new(0);

fn unique() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!(
        "{}-{:x}-{}",
        std::process::id(),
        nanos,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A random-enough token, different for every test.
pub fn random_token() -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    std::hash::Hash::hash(&unique(), &mut hasher);
    let a = std::hash::Hasher::finish(&hasher);
    let b = std::collections::hash_map::RandomState::new();
    let b = std::hash::BuildHasher::hash_one(&b, a);
    format!("e2e-{a:016x}{b:016x}")
}

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!("switchboard-e2e-{name}-{}", unique()));
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The `tools` binary: beside the switchboard binary, else built once with cargo.
pub fn tools_bin() -> &'static Path {
    static TOOLS: OnceLock<PathBuf> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let beside = Path::new(env!("CARGO_BIN_EXE_switchboard")).with_file_name("tools");
        if beside.is_file() {
            return beside;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let status = Command::new(cargo)
            .args(["build", "-q", "-p", "tools"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::null())
            .status()
            .expect("run cargo build for the tools binary");
        assert!(status.success(), "building the tools binary failed");
        assert!(
            beside.is_file(),
            "cargo built tools but it is not at {}",
            beside.display()
        );
        beside
    })
}

/// The demo world in which Tomas's display name is `name` (his id stays his).
pub fn world_where_tomas_goes_by(name: &str) -> World {
    let mut world = World::demo();
    for user in &mut world.users {
        if user.id.0 == demo::TOMAS {
            user.global_name = Some(name.to_owned());
        }
    }
    world
}

/// A fake Discord with the demo world, on its own runtime (so the test thread may block).
pub struct Fake {
    // Field order matters: the fake drops before the runtime that runs it.
    pub fake: FakeDiscord,
    runtime: tokio::runtime::Runtime,
}

impl Fake {
    pub fn start() -> Fake {
        Fake::start_world(World::demo())
    }

    /// A fake whose bot accepts only `token`.
    pub fn start_accepting(token: &str) -> Fake {
        let mut world = World::demo();
        world.bot.token = Some(token.to_owned());
        Fake::start_world(world)
    }

    pub fn start_world(world: World) -> Fake {
        Fake::start_with(world, FakeOptions::default())
    }

    /// The demo world with every rate-limit bucket widened out of the way (1,000 per second):
    /// for tests about switchboard's own throttling, not Discord's.
    pub fn start_unthrottled() -> Fake {
        Fake::start_with(
            World::demo(),
            FakeOptions {
                rate_limits: RateLimits::unthrottled(),
                ..FakeOptions::default()
            },
        )
    }

    pub fn start_with(world: World, options: FakeOptions) -> Fake {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let addr = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, 0));
        let fake = runtime
            .block_on(FakeDiscord::start_with(world, addr, options))
            .expect("start the fake Discord");
        Fake { fake, runtime }
    }

    pub fn base_url(&self) -> String {
        self.fake.base_url()
    }

    /// Posts `content` in `channel` as `author`, replying to `reply_to`; returns the id.
    pub fn reply(&self, channel: u64, author: u64, reply_to: &str, content: &str) -> String {
        let reply_to = reply_to.parse::<u64>().expect("a message id");
        self.post_message(channel, author, content, Some(reply_to))
    }

    fn post_message(
        &self,
        channel: u64,
        author: u64,
        content: &str,
        reply_to: Option<u64>,
    ) -> String {
        let message = self
            .fake
            .post_message(UserMessage {
                channel_id: channel.into(),
                author_id: author.into(),
                content: content.to_owned(),
                reply_to: reply_to.map(Into::into),
                attachments: Vec::new(),
            })
            .expect("the fake accepts the message");
        message["id"].as_str().expect("id").to_owned()
    }

    /// Posts `content` in `channel` as `author`; returns the new message's id.
    pub fn post(&self, channel: u64, author: u64, content: &str) -> String {
        self.post_message(channel, author, content, None)
    }

    /// Requests whose path mentions `id`.
    pub fn requests_mentioning(&self, id: u64) -> Vec<RecordedRequest> {
        let id = id.to_string();
        self.fake
            .requests()
            .into_iter()
            .filter(|r| r.path.contains(&id))
            .collect()
    }

    /// Requests with this method and exact path.
    pub fn requests_to(&self, method: &str, path: &str) -> Vec<RecordedRequest> {
        self.fake
            .requests()
            .into_iter()
            .filter(|r| r.method == method && r.path == path)
            .collect()
    }
}

/// What the config allows.
#[derive(Clone, Debug)]
pub struct Allow {
    pub channels: Vec<u64>,
    pub dms: bool,
}

impl Default for Allow {
    /// The playground's allowlist: `#ops`, `#release-room`, DMs.
    fn default() -> Self {
        Allow {
            channels: vec![demo::OPS, demo::RELEASE_ROOM],
            dms: true,
        }
    }
}

/// A config like the playground's, on a free port, with a store in `store`.
pub fn config_text(api_base_url: &str, store: &Path, allow: &Allow) -> String {
    config_text_with(api_base_url, store, allow, "")
}

/// [`config_text`] with more keys in `[toolserver]` (one `key = value` per line).
pub fn config_text_with(
    api_base_url: &str,
    store: &Path,
    allow: &Allow,
    toolserver: &str,
) -> String {
    config_text_sections(api_base_url, store, allow, "", toolserver)
}

/// [`config_text`] with more keys in `[discord]` and in `[toolserver]`.
pub fn config_text_sections(
    api_base_url: &str,
    store: &Path,
    allow: &Allow,
    discord: &str,
    toolserver: &str,
) -> String {
    let channels: Vec<String> = allow.channels.iter().map(|c| format!("\"{c}\"")).collect();
    format!(
        r#"[discord]
allowed_channel_ids = [{channels}]
allow_dms = {dms}
api_base_url = "{api_base_url}"
{discord}

{aliases}
[toolserver]
bind = "127.0.0.1:0"
{toolserver}

[store]
path = "{store}"
"#,
        channels = channels.join(", "),
        dms = allow.dms,
        aliases = demo_world::alias_sections(),
        store = store.display()
    )
}

/// What a `tools` call did.
#[derive(Debug)]
pub struct ToolsOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl ToolsOutput {
    /// The stdout as JSON, asserting exit 0.
    pub fn json(&self) -> Value {
        assert_eq!(self.code, Some(0), "tools failed: {self:?}");
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("tools printed no JSON ({e}): {self:?}"))
    }
}

/// Waits for a child at most `timeout`; kills it when it overruns.
pub fn wait_bounded(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Reads a pipe to the end on a thread.
fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Runs the `tools` CLI against `url` with `token`.
pub fn tools_at(url: &str, token: &str, args: &[&str]) -> ToolsOutput {
    tools_in(url, token, Path::new(env!("CARGO_MANIFEST_DIR")), args)
}

/// Runs the `tools` CLI in `cwd` (where relative `--paths` and downloads resolve).
pub fn tools_in(url: &str, token: &str, cwd: &Path, args: &[&str]) -> ToolsOutput {
    tools_in_within(url, token, cwd, args, TOOLS_TIMEOUT)
}

/// [`tools_in`] for a call that may take up to `bound` (a command given a longer timeout).
pub fn tools_in_within(
    url: &str,
    token: &str,
    cwd: &Path,
    args: &[&str],
    bound: Duration,
) -> ToolsOutput {
    let mut child = Command::new(tools_bin())
        .args(args)
        .current_dir(cwd)
        .env("SWITCHBOARD_URL", url)
        .env("SWITCHBOARD_TOKEN", token)
        .env_remove("SWITCHBOARD_SESSION_ID")
        .env_remove("SWITCHBOARD_REQUEST_ID")
        .env_remove("SWITCHBOARD_CWD")
        .env_remove("SWITCHBOARD_MESSAGE_ID")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tools");
    let stdout = drain(child.stdout.take().expect("stdout"));
    let stderr = drain(child.stderr.take().expect("stderr"));
    let status = wait_bounded(&mut child, bound);
    let out = ToolsOutput {
        code: status.and_then(|s| s.code()),
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    assert!(
        status.is_some(),
        "tools {args:?} overran {bound:?}: {out:?}"
    );
    out
}

/// A minimal HTTP GET over loopback: (status, body).
pub fn http_get(base: &str, path: &str) -> std::io::Result<(u16, String)> {
    let host = base.trim_start_matches("http://").trim_end_matches('/');
    http_send(base, "GET", path, &[("Host", host)], "")
}

/// One HTTP/1.1 request over loopback with exactly `headers` (a test forges `Host`, `Origin`,
/// `Content-Type` as a browser or an attacker would; `Content-Length` and `Connection: close`
/// are added): (status, body).
pub fn http_send(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<(u16, String)> {
    http_send_within(base, method, path, headers, body, Duration::from_secs(5))
}

/// [`http_send`], waiting up to `timeout` for the answer (an agent's run takes a while).
pub fn http_send_within(
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    timeout: Duration,
) -> std::io::Result<(u16, String)> {
    let addr = base.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut request = format!("{method} {path} HTTP/1.1\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    stream.write_all(request.as_bytes())?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw)?;
    let status = raw
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((status, body))
}

/// One HTTP/1.1 request's JSON body read off `stream` (a scripted model server's side; the head
/// at most 100 lines, the body at most 4 MiB, every read bounded by a 10 s timeout); `None`
/// when the client went away first. A body that is no JSON is `Value::Null`.
pub fn read_json_request(stream: &TcpStream) -> Option<Value> {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut length = 0usize;
    for _ in 0..100 {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0u8; length.min(4 << 20)];
    reader.read_exact(&mut body).ok()?;
    Some(serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// Polls `probe` every 50 ms until it answers `Some`; panics naming `what` after `timeout`.
pub fn poll<T>(what: &str, timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An `[agent]` section running the command agent `program` in `cwd`, with `extra` lines.
pub fn command_agent(program: &Path, cwd: &Path, timeout_s: u64, extra: &str) -> String {
    format!(
        "[agent]\nrunner = \"command\"\ncommand = [\"{}\"]\ncwd = \"{}\"\ntimeout_s = {timeout_s}\nenv_passthrough = [\"PATH\"]\ncontext_messages = 5\nerror_reply = \"agent failed: {{reason}}\"\n{extra}\n",
        program.display(),
        cwd.display()
    )
}

/// Writes an executable `sh` script (a scripted agent) and returns its path.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write script");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// The lines a scripted agent appended to `dir/log` so far (none before it wrote any).
pub fn agent_log(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Whether a process exists (a zombie counts until reaped).
pub fn pid_alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// The live processes (zombies left out) whose process group is `pgid`, from `/proc`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            // After the command name in parentheses: state, ppid, pgrp.
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                let mut fields = stat
                    .rsplit_once(')')
                    .map_or("", |(_, rest)| rest)
                    .split_whitespace();
                let state = fields.next().unwrap_or("");
                let pgrp = fields.nth(1).and_then(|g| g.parse::<i32>().ok());
                !matches!(state, "Z" | "X") && pgrp == Some(pgid)
            })
        })
        .collect()
}

/// Whether a process is alive and not a zombie.
pub fn pid_running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !matches!(
            stat.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().chars().next()),
            Some(Some('Z' | 'X'))
        )
    })
}

/// The emoji the bot left on a message of `channel`, by name (a custom emoji's name, not its
/// id), as the fake holds them.
pub fn own_reactions(fake: &Fake, channel: u64, message: &str) -> Vec<String> {
    fake.fake
        .channel_messages(channel.into())
        .expect("channel")
        .into_iter()
        .find(|m| m["id"] == message)
        .and_then(|m| m["reactions"].as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r["me"] == true)
        .filter_map(|r| r["emoji"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// The bot's replies in `channel`, counted per message they answer.
pub fn replies_per_trigger(fake: &Fake, channel: u64) -> std::collections::HashMap<String, usize> {
    let mut counts = std::collections::HashMap::new();
    for post in bot_posts(fake, channel) {
        if let Some(trigger) = post["message_reference"]["message_id"].as_str() {
            *counts.entry(trigger.to_owned()).or_insert(0) += 1;
        }
    }
    counts
}

/// A store over SQLite at `path` (":memory:": SQLite's private in-memory database).
pub fn sqlite_store(path: &str) -> switchboard_store::Store {
    let backend = switchboard_store_sqlite::SqliteBackend::open(path, Default::default())
        .expect("the store opens");
    switchboard_store::Store::open(std::sync::Arc::new(backend), Default::default())
        .expect("the cache loads")
}

/// Messages the bot posted (not the injected ones) in `channel`, as the fake holds them.
pub fn bot_posts(fake: &Fake, channel: u64) -> Vec<Value> {
    let bot = demo::BOT.to_string();
    fake.fake
        .channel_messages(channel.into())
        .expect("channel exists")
        .into_iter()
        .filter(|m| m["author"]["id"].as_str() == Some(bot.as_str()))
        .collect()
}

/// Config lines added to the test config: keys in `[discord]`, keys in `[toolserver]`, and
/// whole tables after them (`[agent]`, ...).
#[derive(Debug, Clone, Copy, Default)]
pub struct Sections<'a> {
    pub discord: &'a str,
    pub toolserver: &'a str,
    pub extra: &'a str,
    /// More environment for the service (named tokens' variables).
    pub env: &'a [(&'a str, &'a str)],
    /// Serve without an operator token (`toolserver.insecure_no_auth`): the handle's `token`
    /// is empty, and `tools` calls send none.
    pub no_auth: bool,
    /// `store.url` instead of the store file `dir/switchboard.db`.
    pub store_url: Option<&'a str>,
    /// Start switchboard as the leader of its own process group, so that
    /// [`Switchboard::kill_group`] kills it and everything it started, as a machine's death
    /// would.
    pub own_process_group: bool,
    /// Return once the tool server listens, without waiting for the gateway (a node that
    /// will never be ready).
    pub no_gateway_wait: bool,
}

/// A running `switchboard run`, killed on drop.
pub struct Switchboard {
    child: Child,
    pub url: String,
    pub token: String,
    pub config: PathBuf,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// The base `switchboard run` command, with a clean environment for the secrets. A benchmark
/// comparing against an older build names that build's binary in `SWITCHBOARD_BASELINE_BIN`
/// while it runs the baseline's side.
pub fn switchboard_command(config: &Path, cwd: &Path) -> Command {
    let binary = std::env::var_os("SWITCHBOARD_BASELINE_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_switchboard")),
        PathBuf::from,
    );
    let mut command = Command::new(binary);
    command
        .arg("run")
        .arg("--config")
        .arg(config)
        .current_dir(cwd)
        .env_remove("SWITCHBOARD_CONFIG")
        .env_remove("DISCORD_TOKEN")
        .env_remove("SWITCHBOARD_OPERATOR_TOKEN")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null());
    command
}

impl Switchboard {
    /// Writes a config into `dir` (store `dir/switchboard.db`), starts switchboard, waits for
    /// its ready line, then for the gateway and the demo guild.
    pub fn start(fake: &Fake, dir: &Path, allow: &Allow) -> Switchboard {
        Switchboard::start_with(fake, dir, allow, "")
    }

    /// Like [`Switchboard::start`], with `extra` TOML appended to the config (an `[agent]`).
    pub fn start_with(fake: &Fake, dir: &Path, allow: &Allow, extra: &str) -> Switchboard {
        Switchboard::start_full(fake, dir, allow, "", extra)
    }

    /// Like [`Switchboard::start_with`], with `toolserver` lines added to `[toolserver]`.
    pub fn start_full(
        fake: &Fake,
        dir: &Path,
        allow: &Allow,
        toolserver: &str,
        extra: &str,
    ) -> Switchboard {
        Switchboard::start_sections(
            fake,
            dir,
            allow,
            Sections {
                toolserver,
                extra,
                ..Sections::default()
            },
        )
    }

    /// Starts switchboard with `sections` added to the playground-like config.
    pub fn start_sections(
        fake: &Fake,
        dir: &Path,
        allow: &Allow,
        sections: Sections<'_>,
    ) -> Switchboard {
        // Build (or find) the CLI before any clock starts.
        tools_bin();
        let store = dir.join("switchboard.db");
        let config = dir.join("switchboard.toml");
        let toolserver = if sections.no_auth {
            // The token's variable is one nobody sets.
            format!(
                "insecure_no_auth = true\noperator_token_env = \"SWITCHBOARD_TEST_NO_TOKEN\"\n{}",
                sections.toolserver
            )
        } else {
            sections.toolserver.to_owned()
        };
        let text = format!(
            "{}
{}",
            config_text_sections(
                &fake.base_url(),
                &store,
                allow,
                sections.discord,
                &toolserver
            ),
            sections.extra
        );
        let text = match sections.store_url {
            Some(url) => text.replace(
                &format!("path = \"{}\"", store.display()),
                &format!("url = \"{url}\""),
            ),
            None => text,
        };
        std::fs::write(&config, text).expect("write the config");
        let token = if sections.no_auth {
            String::new()
        } else {
            random_token()
        };
        let mut command = switchboard_command(&config, dir);
        if sections.own_process_group {
            std::os::unix::process::CommandExt::process_group(&mut command, 0);
        }
        let mut child = command
            .env("DISCORD_TOKEN", "e2e-token")
            .env("SWITCHBOARD_OPERATOR_TOKEN", &token)
            .env_remove("SWITCHBOARD_TEST_NO_TOKEN")
            .envs(sections.env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn switchboard");
        let stderr = child.stderr.take().expect("stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel::<String>();
        let kept = Arc::clone(&lines);
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                kept.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(line.clone());
                let _ = tx.send(line);
            }
        });
        let mut sb = Switchboard {
            child,
            url: String::new(),
            token,
            config,
            lines,
            reader: Some(reader),
        };
        sb.url = sb.wait_for_ready_line(&rx);
        if !sections.no_gateway_wait {
            sb.wait_for_gateway();
        }
        sb
    }

    fn wait_for_ready_line(&mut self, rx: &Receiver<String>) -> String {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line.contains("switchboard ready") => {
                    let url = line
                        .split_whitespace()
                        .find_map(|w| w.strip_prefix("tool_server="))
                        .unwrap_or_else(|| panic!("no tool_server= in the ready line: {line}"));
                    return url.trim_matches('"').to_owned();
                }
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "switchboard did not log its ready line in {READY_TIMEOUT:?}:\n{}",
                        self.stderr()
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = wait_bounded(&mut self.child, Duration::from_secs(5));
                    panic!(
                        "switchboard exited ({status:?}) before its ready line:\n{}",
                        self.stderr()
                    )
                }
            }
        }
    }

    /// `/health` says `discord: ready`, and the demo guild's channels are cached (the thread
    /// `incident-42` under `#ops` is listed, so GUILD_CREATE has been applied).
    fn wait_for_gateway(&self) {
        let deadline = Instant::now() + GATEWAY_TIMEOUT;
        loop {
            let ready = http_get(&self.url, "/health")
                .ok()
                .and_then(|(_, body)| serde_json::from_str::<Value>(&body).ok())
                .is_some_and(|h| h["discord"] == "ready");
            if ready {
                let listed = self.tools(&["surface.sessions.list"]);
                if listed.code == Some(0)
                    && listed.stdout.contains(&demo::INCIDENT_THREAD.to_string())
                {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the gateway was not ready in {GATEWAY_TIMEOUT:?}:\n{}",
                self.stderr()
            );
            std::thread::sleep(POLL);
        }
    }

    /// Runs `tools` against this switchboard with the operator token.
    pub fn tools(&self, args: &[&str]) -> ToolsOutput {
        tools_at(&self.url, &self.token, args)
    }

    /// `surface.messages.list` for a session: the messages array.
    pub fn list(&self, session: &str) -> Vec<Value> {
        let arg = format!("--session-id={session}");
        let out = self.tools(&[
            "surface.messages.list",
            &arg,
            "--limit=100",
            "--output=json",
        ]);
        out.json()["messages"]
            .as_array()
            .unwrap_or_else(|| panic!("no messages array: {out:?}"))
            .clone()
    }

    /// Polls the list of `session` until every id in `ids` is there; returns the last list.
    pub fn wait_listed(&self, session: &str, ids: &[String], timeout: Duration) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let last = self.list(session);
            let missing: Vec<&String> = ids
                .iter()
                .filter(|id| !last.iter().any(|m| m["messageId"] == id.as_str()))
                .collect();
            if missing.is_empty() {
                return last;
            }
            assert!(
                Instant::now() < deadline,
                "after {timeout:?}, {} of {} messages are not listed in {session}: {missing:?}\nlisted: {last:?}\nstderr:\n{}",
                missing.len(),
                ids.len(),
                self.stderr()
            );
            std::thread::sleep(POLL);
        }
    }

    /// Everything switchboard logged so far.
    pub fn stderr(&self) -> String {
        self.lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .join("\n")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (bounded) for switchboard to exit by itself; returns the status and the whole log.
    pub fn wait_exit(mut self, timeout: Duration) -> (Option<ExitStatus>, String) {
        let status = wait_bounded(&mut self.child, timeout);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        (status, self.stderr())
    }

    /// SIGKILL, then reap.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = wait_bounded(&mut self.child, Duration::from_secs(5));
    }

    /// SIGKILL to its whole process group (started with [`Sections::own_process_group`]), then
    /// reap; returns the whole log.
    pub fn kill_group(mut self) -> String {
        let group = format!("-{}", self.child.id());
        let sent = Command::new("kill")
            .args(["-KILL", "--", &group])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -KILL -- {group} failed");
        let _ = wait_bounded(&mut self.child, Duration::from_secs(5));
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.stderr()
    }

    /// Sends SIGTERM and waits (bounded) for the exit; returns the status and the whole log.
    pub fn terminate(mut self, timeout: Duration) -> (Option<ExitStatus>, String) {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM failed");
        let status = wait_bounded(&mut self.child, timeout);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        (status, self.stderr())
    }
}

impl Drop for Switchboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = wait_bounded(&mut self.child, Duration::from_secs(5));
    }
}

/// The bot's reply to `trigger` in `channel` (a post referencing it), waited for up to 20 s.
pub fn reply_to(fake: &Fake, sb: &Switchboard, channel: u64, trigger: &str) -> Value {
    reply_to_within(fake, sb, channel, trigger, Duration::from_secs(20))
}

/// The bot's reply to `trigger` in `channel`, waited for up to `timeout`.
pub fn reply_to_within(
    fake: &Fake,
    sb: &Switchboard,
    channel: u64,
    trigger: &str,
    timeout: Duration,
) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(reply) = bot_posts(fake, channel)
            .into_iter()
            .find(|m| m["message_reference"]["message_id"] == trigger)
        {
            return reply;
        }
        assert!(
            Instant::now() < deadline,
            "no reply to {trigger} in {channel} within {timeout:?}; the bot posted {:?}\nswitchboard log:\n{}",
            bot_posts(fake, channel),
            sb.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `switchboard check-config --config FILE`: (exit code, stdout + stderr).
pub fn check_config(file: &Path) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .arg("check-config")
        .arg("--config")
        .arg(file)
        .env_remove("SWITCHBOARD_CONFIG")
        .current_dir(file.parent().expect("config dir"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn switchboard check-config");
    let status = wait_bounded(&mut child, Duration::from_secs(10));
    let mut text = String::new();
    if let Some(mut pipe) = child.stdout.take() {
        let _ = pipe.read_to_string(&mut text);
    }
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut text);
    }
    assert!(status.is_some(), "check-config overran 10 s: {text}");
    (status.and_then(|s| s.code()), text)
}

/// Invokes the slash command `/name` as `user` in `channel` with Discord's `data.options`
/// array, and waits (20 s at most) for the answer's text.
pub fn slash(fake: &Fake, channel: u64, user: u64, name: &str, options: Value) -> String {
    let invoked = fake
        .fake
        .invoke_command(SlashCommand {
            channel_id: channel.into(),
            user_id: user.into(),
            name: name.to_owned(),
            options,
        })
        .unwrap_or_else(|e| panic!("invoke /{name}: {e}"));
    let id = Snowflake::from_digits(invoked["id"].as_str().expect("id")).expect("snowflake");
    let answered = poll(
        &format!("the answer to /{name}"),
        Duration::from_secs(20),
        || {
            let i = fake.fake.interaction(id).ok()?;
            (!i["response"].is_null()).then_some(i)
        },
    );
    answered["response"]["data"]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The test venv's python (`tests/setup-python.sh`, with the official MCP and OpenAI
/// clients), or a failure saying how to make it: a test that needs it fails, never skips.
pub fn venv_python() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("target/py-venv/bin/python");
    let made_from = std::fs::read(root.join("target/py-venv/.requirements")).ok();
    let wanted = std::fs::read(root.join("tests/python-requirements.txt"))
        .expect("tests/python-requirements.txt");
    assert!(
        python.is_file() && made_from.as_deref() == Some(wanted.as_slice()),
        "the Python venv for the client tests is missing or out of date: run `bash tests/setup-python.sh` \
         (./test.sh does), which installs tests/python-requirements.txt into target/py-venv"
    );
    python
}
