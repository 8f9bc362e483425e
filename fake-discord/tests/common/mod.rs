//! Test helpers: a minimal HTTP/1.1 client and a raw gateway client, both bounded by timeouts.
#![allow(dead_code)]

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use fake_discord::{
    demo, shard_of, ChannelSpec, FakeDiscord, FakeOptions, GuildSpec, Snowflake, UserMessage, World,
};

pub const STEP: Duration = Duration::from_secs(5);

/// Awaits `fut` or panics after [`STEP`].
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(STEP, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out: {what}"),
    }
}

/// One HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Value,
    pub text: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one request to `base` (`http://127.0.0.1:PORT`) with `Connection: close`.
pub async fn http(base: &str, method: &str, path: &str, body: Option<&str>, auth: bool) -> Answer {
    within(&format!("{method} {path}"), async {
        let host = base.trim_start_matches("http://");
        let mut stream = TcpStream::connect(host).await.expect("connect");
        let body = body.unwrap_or("");
        let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
        if !body.is_empty() {
            request.push_str("Content-Type: application/json\r\n");
        }
        if auth {
            request.push_str("Authorization: Bot fake-token\r\n");
        }
        request.push_str("\r\n");
        request.push_str(body);
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.expect("read");
        let raw = String::from_utf8_lossy(&raw).to_string();
        let (head, text) = raw.split_once("\r\n\r\n").unwrap_or((raw.as_str(), ""));
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .expect("status line");
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        let body = serde_json::from_str(text).unwrap_or(Value::Null);
        Answer { status, headers, body, text: text.to_string() }
    })
    .await
}

/// One HTTP answer with its body as raw bytes.
#[derive(Debug)]
pub struct RawAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawAnswer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (Null if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// Sends one request with a binary body (and optional `Content-Type`) with
/// `Connection: close`; the answer's body stays bytes.
pub async fn http_bytes(
    base: &str,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
    auth: bool,
) -> RawAnswer {
    within(&format!("{method} {path}"), async {
        let host = base.trim_start_matches("http://");
        let mut stream = TcpStream::connect(host).await.expect("connect");
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        if let Some(ct) = content_type {
            head.push_str(&format!("Content-Type: {ct}\r\n"));
        }
        if auth {
            head.push_str("Authorization: Bot fake-token\r\n");
        }
        head.push_str("\r\n");
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        stream.write_all(&request).await.expect("write");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.expect("read");
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a header block");
        let head = String::from_utf8_lossy(&raw[..split]).to_string();
        let body = raw[split + 4..].to_vec();
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .expect("status line");
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        RawAnswer { status, headers, body }
    })
    .await
}

/// One multipart part: (name, filename, content type, bytes).
pub type Part<'a> = (&'a str, Option<&'a str>, Option<&'a str>, &'a [u8]);

/// A `multipart/form-data` body: (Content-Type header value, body bytes).
pub fn multipart(parts: &[Part<'_>]) -> (String, Vec<u8>) {
    let boundary = "fake-discord-test-boundary-7MA4YWxkTrZu0gW";
    let mut body = Vec::new();
    for (name, filename, content_type, content) in parts {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        let mut disposition = format!("Content-Disposition: form-data; name=\"{name}\"");
        if let Some(f) = filename {
            disposition.push_str(&format!("; filename=\"{f}\""));
        }
        body.extend_from_slice(disposition.as_bytes());
        body.extend_from_slice(b"\r\n");
        if let Some(ct) = content_type {
            body.extend_from_slice(format!("Content-Type: {ct}\r\n").as_bytes());
        }
        body.extend_from_slice(b"\r\n");
        body.extend_from_slice(content);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

pub async fn get(base: &str, path: &str) -> Answer {
    http(base, "GET", path, None, true).await
}

pub async fn post(base: &str, path: &str, body: &Value) -> Answer {
    http(base, "POST", path, Some(&body.to_string()), true).await
}

pub type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

/// A raw gateway client.
pub struct Gateway {
    pub ws: Ws,
    pub seq: u64,
    pub session_id: String,
    /// Every text frame received, in order.
    pub frames: Vec<Value>,
}

pub const ALL_INTENTS: u64 = (1 << 26) - 1;

impl Gateway {
    /// Connects and reads HELLO.
    pub async fn connect(gateway_url: &str) -> Gateway {
        let (ws, _) = within(
            "ws connect",
            tokio_tungstenite::connect_async(format!("{gateway_url}/?v=10&encoding=json")),
        )
        .await
        .expect("ws connect");
        let mut gw = Gateway {
            ws,
            seq: 0,
            session_id: String::new(),
            frames: Vec::new(),
        };
        let hello = gw.next_frame().await.expect("hello");
        assert_eq!(hello["op"], 10, "{hello}");
        gw
    }

    pub async fn send(&mut self, v: Value) {
        within("ws send", self.ws.send(Message::Text(v.to_string().into())))
            .await
            .expect("send");
    }

    /// The next text frame (None when the socket closed or failed).
    pub async fn next_frame(&mut self) -> Option<Value> {
        loop {
            let msg = within("ws frame", self.ws.next()).await?;
            match msg {
                Ok(Message::Text(t)) => {
                    let v: Value = serde_json::from_str(t.as_str()).expect("fake sends JSON");
                    if let Some(s) = v["s"].as_u64() {
                        self.seq = s;
                    }
                    self.frames.push(v.clone());
                    return Some(v);
                }
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => continue,
            }
        }
    }

    /// The close frame's code, reading past other frames.
    pub async fn close_code(&mut self) -> Option<u16> {
        loop {
            match within("ws close", self.ws.next()).await {
                Some(Ok(Message::Close(Some(frame)))) => return Some(u16::from(frame.code)),
                Some(Ok(Message::Close(None)) | Err(_)) | None => return None,
                Some(Ok(_)) => continue,
            }
        }
    }

    /// IDENTIFY, then read READY and `guilds` GUILD_CREATEs.
    pub async fn identify(&mut self, intents: u64, guilds: usize) -> (Value, Vec<Value>) {
        self.send(json!({"op": 2, "d": {"token": "fake-token", "intents": intents, "properties": {"os": "linux", "browser": "t", "device": "t"}}})).await;
        let ready = self.next_frame().await.expect("ready");
        assert_eq!(ready["t"], "READY", "{ready}");
        self.session_id = ready["d"]["session_id"]
            .as_str()
            .expect("session id")
            .to_string();
        let mut created = Vec::new();
        for _ in 0..guilds {
            let g = self.next_frame().await.expect("guild create");
            assert_eq!(g["t"], "GUILD_CREATE", "{g}");
            created.push(g);
        }
        (ready, created)
    }

    /// RESUME (op 6) of `session_id` from `seq`.
    pub async fn resume(&mut self, session_id: &str, seq: u64) {
        self.send(
            json!({"op": 6, "d": {"token": "fake-token", "session_id": session_id, "seq": seq}}),
        )
        .await;
    }

    /// The next dispatch named `name`, skipping others.
    pub async fn dispatch(&mut self, name: &str) -> Value {
        loop {
            let f = self
                .next_frame()
                .await
                .unwrap_or_else(|| panic!("socket closed waiting for {name}"));
            if f["t"] == name {
                return f;
            }
        }
    }
}

/// A guild on shard 0 of 2 (the demo guild `Lab` is on shard 1 of 2).
pub const ANNEX: u64 = demo::GUILD + (1 << 22);
/// `#annex-general`, a text channel of [`ANNEX`].
pub const ANNEX_GENERAL: u64 = ANNEX + 1;

/// The guild Annex with one text channel, [`ANNEX_GENERAL`].
pub fn annex() -> GuildSpec {
    GuildSpec {
        id: Snowflake(ANNEX),
        name: "Annex".into(),
        owner_id: None,
        roles: Vec::new(),
        channels: vec![text_channel(ANNEX_GENERAL, "annex-general")],
        members: None,
        bot_can_manage_channels: true,
        emojis: Vec::new(),
    }
}

/// A text channel where the bot may see, send and manage messages.
pub fn text_channel(id: u64, name: &str) -> ChannelSpec {
    ChannelSpec {
        id: Snowflake(id),
        name: name.into(),
        kind: 0,
        parent_id: None,
        topic: None,
        bot_can_see: true,
        bot_can_send: true,
        bot_can_manage_messages: true,
        archived: false,
    }
}

/// The demo world plus [`annex`]: a guild on each of two shards.
pub fn two_shard_world() -> World {
    let mut world = World::demo();
    world.guilds.push(annex());
    assert_eq!(shard_of(Snowflake(ANNEX), 2), 0);
    assert_eq!(shard_of(Snowflake(demo::GUILD), 2), 1);
    world
}

/// Starts the fake on a free loopback port with `--shards` and `--max-concurrency`.
pub async fn start_sharded(world: World, shards: u32, max_concurrency: u32) -> FakeDiscord {
    FakeDiscord::start_with(
        world,
        "127.0.0.1:0".parse().expect("addr"),
        FakeOptions {
            shards,
            max_concurrency,
            ..FakeOptions::default()
        },
    )
    .await
    .expect("start")
}

/// A message stanley posts in `channel`.
pub fn say(channel: u64, content: &str) -> UserMessage {
    UserMessage {
        channel_id: channel.into(),
        author_id: demo::STANLEY.into(),
        content: content.into(),
        ..Default::default()
    }
}
