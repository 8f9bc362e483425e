//! The gateway websocket: HELLO, IDENTIFY → READY + GUILD_CREATE per guild of the session's
//! shard, heartbeat ACK, RESUME → replay + RESUMED, injected op 7 / op 9 / drops, and
//! Discord's close codes for garbage (4002 decode error, 4001 unknown opcode, 4003 not
//! authenticated, ...) and for sharding (4010 invalid shard, 4011 sharding required, op 9 for
//! an IDENTIFY over its bucket's rate).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::hub::{IdentifyRequest, Outbound, ResumeRefused};
use crate::payloads;
use crate::shards::{self, IdentifyRefusal};
use crate::shared::Shared;

/// Largest frame a client may send (Discord's limit is 4096 bytes; a little slack here).
const MAX_CLIENT_FRAME: usize = 16 * 1024;

/// Every intent bit Discord defines (anything above is rejected with 4013).
const KNOWN_INTENTS: u64 = (1 << 26) - 1;

/// The gateway router: the websocket lives at `/` (serenity connects to `{url}?v=10`).
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new().route("/", get(upgrade)).with_state(shared)
}

async fn upgrade(State(shared): State<Arc<Shared>>, ws: WebSocketUpgrade) -> Response {
    ws.max_message_size(MAX_CLIENT_FRAME)
        .max_frame_size(MAX_CLIENT_FRAME)
        .on_upgrade(move |socket| run(shared, socket))
}

/// How a connection ends.
enum End {
    /// The client went away.
    ClientGone,
    /// Close the TCP connection without a close frame.
    Drop,
    /// Send a close frame with this code and reason.
    Close(u16, &'static str),
}

async fn run(shared: Arc<Shared>, mut socket: WebSocket) {
    let (connection, mut rx) = shared.hub.connect();
    tracing::debug!(connection, "gateway connection opened");
    let end = serve(&shared, &mut socket, connection, &mut rx).await;
    shared.hub.disconnect(connection);
    match end {
        End::ClientGone => tracing::debug!(connection, "gateway client closed"),
        End::Drop => tracing::info!(connection, "gateway connection dropped without close frame"),
        End::Close(code, reason) => {
            tracing::info!(connection, code, reason, "closing gateway connection");
            let frame = CloseFrame {
                code,
                reason: reason.into(),
            };
            let _ = socket.send(Message::Close(Some(frame))).await;
        }
    }
}

async fn send(socket: &mut WebSocket, text: &str) -> Result<(), End> {
    socket
        .send(Message::Text(text.into()))
        .await
        .map_err(|_| End::ClientGone)
}

async fn serve(
    shared: &Shared,
    socket: &mut WebSocket,
    connection: u64,
    rx: &mut mpsc::Receiver<Outbound>,
) -> End {
    let hello = json!({ "op": 10, "s": null, "t": null, "d": { "heartbeat_interval": shared.heartbeat_interval_ms } });
    if let Err(end) = send(socket, &hello.to_string()).await {
        return end;
    }
    // A client that stays silent for this long is a zombie; Discord drops those too.
    let silence_limit =
        Duration::from_millis(shared.heartbeat_interval_ms.saturating_mul(3).max(1000));
    let mut identified = false;
    loop {
        let step = tokio::select! {
            incoming = tokio::time::timeout(silence_limit, socket.recv()) => match incoming {
                Err(_) => Err(End::Close(4009, "Session timed out.")),
                Ok(None | Some(Err(_) | Ok(Message::Close(_)))) => Err(End::ClientGone),
                Ok(Some(Ok(Message::Text(text)))) => {
                    handle(shared, socket, connection, &mut identified, text.as_str()).await
                }
                Ok(Some(Ok(Message::Binary(bytes)))) => match std::str::from_utf8(&bytes) {
                    Ok(text) => handle(shared, socket, connection, &mut identified, text).await,
                    Err(_) => Err(End::Close(4002, "Error while decoding payload.")),
                },
                Ok(Some(Ok(_))) => Ok(()),
            },
            outbound = rx.recv() => match outbound {
                None | Some(Outbound::Drop) => Err(End::Drop),
                Some(Outbound::Frame(frame)) => {
                    let sent = send(socket, &frame).await;
                    // Benchmarks time the client from here: the frame is on the socket.
                    tracing::trace!("dispatch written");
                    sent
                }
                Some(Outbound::Reconnect) => send(socket, r#"{"op":7,"s":null,"t":null,"d":null}"#).await,
                Some(Outbound::Close(code)) => Err(End::Close(code, close_reason(code))),
                Some(Outbound::InvalidSession) => {
                    if let Some(session) = shared.hub.session_of(connection) {
                        shared.hub.invalidate(&session);
                    }
                    identified = false;
                    send(socket, r#"{"op":9,"s":null,"t":null,"d":false}"#).await
                }
            },
        };
        if let Err(end) = step {
            return end;
        }
    }
}

/// Discord's reason text for a gateway close code.
fn close_reason(code: u16) -> &'static str {
    match code {
        4000 => "Unknown error.",
        4001 => "Unknown opcode.",
        4002 => "Error while decoding payload.",
        4003 => "Not authenticated.",
        4004 => "Authentication failed.",
        4005 => "Already authenticated.",
        4007 => "Invalid seq.",
        4008 => "Rate limited.",
        4009 => "Session timed out.",
        4010 => "Invalid shard.",
        4011 => "Sharding required.",
        4012 => "Invalid API version.",
        4013 => "Invalid intent(s).",
        4014 => "Disallowed intent(s).",
        _ => "Closed.",
    }
}

/// IDENTIFY (op 2): checks it as Discord does — in order an injected refusal, 4005 already
/// authenticated, 4004 bad token, 4013 bad intents, 4010 a malformed `shard`, then the
/// hub's sharding rules (4004 session starts spent, 4011 sharding required, op 9 over the
/// bucket's rate) — logs it, and on success sends READY and one GUILD_CREATE per guild of the
/// session's shard.
async fn identify(
    shared: &Shared,
    socket: &mut WebSocket,
    connection: u64,
    identified: &mut bool,
    d: &Value,
) -> Result<(), End> {
    let shard = shards::parse_shard(d);
    let logged_shard = shard.as_ref().ok().map(|s| s.unwrap_or([0, 1]));
    let refuse = |code: u16, reason: String| {
        tracing::info!(connection, code, reason, "IDENTIFY refused");
        shared
            .hub
            .refuse_identify(connection, logged_shard, code, reason);
        Err(End::Close(code, close_reason(code)))
    };
    if let Some(code) = refused_handshake(shared) {
        return refuse(code, format!("injected handshake fault (close {code})"));
    }
    if *identified {
        return refuse(4005, "this connection already identified".into());
    }
    let token = d.get("token").and_then(Value::as_str).unwrap_or("");
    if !shared.world.bot.accepts_token(token) {
        return refuse(4004, "the token is not the bot's".into());
    }
    let Some(intents) = d.get("intents").and_then(Value::as_u64) else {
        return refuse(4013, "`intents` is missing or not a number".into());
    };
    if intents & !KNOWN_INTENTS != 0 {
        return refuse(4013, format!("unknown intent bits in {intents}"));
    }
    let shard = match shard {
        Ok(shard) => shard,
        Err(reason) => return refuse(4010, reason),
    };
    let [shard_id, shard_count] = shard.unwrap_or([0, 1]);
    let guild_ids: Vec<_> = shared
        .world
        .guilds
        .iter()
        .map(|g| g.id)
        .filter(|id| shards::shard_of(*id, shard_count) == shard_id)
        .collect();
    let request = IdentifyRequest {
        connection,
        intents,
        shard,
        guilds_on_shard: guild_ids.len(),
    };
    let decided = {
        let store = shared.lock();
        shared.hub.identify(request, |session_id| {
            let ready = payloads::ready(
                &shared.dir,
                &guild_ids,
                session_id,
                &shared.gateway_url,
                shard,
            );
            let mut initial = vec![("READY", ready.to_string())];
            for id in &guild_ids {
                if let Some(g) = payloads::guild_create(&shared.world, &shared.dir, &store, *id) {
                    initial.push(("GUILD_CREATE", g.to_string()));
                }
            }
            initial
        })
    };
    match decided {
        Ok((_, frames)) => {
            *identified = true;
            tracing::info!(connection, intents, ?shard, "gateway session identified");
            for frame in frames {
                send(socket, &frame).await?;
            }
            Ok(())
        }
        Err(IdentifyRefusal::Close(code, reason)) => {
            tracing::info!(connection, code, reason, "IDENTIFY refused");
            Err(End::Close(code, close_reason(code)))
        }
        Err(IdentifyRefusal::InvalidSession(reason)) => {
            tracing::info!(connection, reason, "IDENTIFY answered with op 9");
            send(socket, r#"{"op":9,"s":null,"t":null,"d":false}"#).await
        }
    }
}

/// Spends one injected handshake refusal, if any are left: its close code.
fn refused_handshake(shared: &Shared) -> Option<u16> {
    let mut store = shared.lock();
    let (code, left) = store.handshake_fault.as_mut()?;
    let code = *code;
    *left -= 1;
    if *left == 0 {
        store.handshake_fault = None;
    }
    Some(code)
}

async fn handle(
    shared: &Shared,
    socket: &mut WebSocket,
    connection: u64,
    identified: &mut bool,
    text: &str,
) -> Result<(), End> {
    let Ok(payload) = serde_json::from_str::<Value>(text) else {
        tracing::warn!(connection, "gateway frame is not JSON; closing with 4002");
        return Err(End::Close(4002, "Error while decoding payload."));
    };
    let Some(op) = payload.get("op").and_then(Value::as_u64) else {
        tracing::warn!(
            connection,
            "gateway frame has no numeric op; closing with 4002"
        );
        return Err(End::Close(4002, "Error while decoding payload."));
    };
    let d = payload.get("d").unwrap_or(&Value::Null);
    if op == 2 {
        return identify(shared, socket, connection, identified, d).await;
    }
    if op == 6 {
        if let Some(code) = refused_handshake(shared) {
            tracing::info!(connection, code, "handshake refused (injected fault)");
            return Err(End::Close(code, close_reason(code)));
        }
    }
    match op {
        1 => send(socket, r#"{"op":11,"s":null,"t":null,"d":null}"#).await,
        6 => {
            let session_id = d.get("session_id").and_then(Value::as_str).unwrap_or("");
            let seq = d.get("seq").and_then(Value::as_u64).unwrap_or(0);
            let token = d.get("token").and_then(Value::as_str).unwrap_or("");
            if !shared.world.bot.accepts_token(token) {
                return Err(End::Close(4004, "Authentication failed."));
            }
            match shared.hub.resume(connection, session_id, seq) {
                Ok(frames) => {
                    *identified = true;
                    tracing::info!(
                        connection,
                        seq,
                        replayed = frames.len() - 1,
                        "gateway session resumed"
                    );
                    for frame in frames {
                        send(socket, &frame).await?;
                    }
                    Ok(())
                }
                Err(why) => {
                    let reason = match why {
                        ResumeRefused::UnknownSession => "unknown session",
                        ResumeRefused::SequenceGone => "sequence no longer held",
                    };
                    tracing::info!(connection, reason, "refusing RESUME with op 9");
                    send(socket, r#"{"op":9,"s":null,"t":null,"d":false}"#).await
                }
            }
        }
        3 | 4 | 8 | 31 => {
            if !*identified {
                return Err(End::Close(4003, "Not authenticated."));
            }
            tracing::debug!(
                connection,
                op,
                "ignoring gateway op the fake does not model"
            );
            Ok(())
        }
        _ => {
            tracing::warn!(connection, op, "unknown gateway opcode; closing with 4001");
            Err(End::Close(4001, "Unknown opcode."))
        }
    }
}
