//! Gateway sessions and dispatch fan-out. Each dispatch's `d` is serialized once; each
//! session wraps it with its own sequence number, keeps a bounded backlog for RESUME, and
//! forwards it to its live connection (if any) through a bounded queue.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::mpsc;

use crate::shards::{
    self, ConnectionInfo, ConnectionState, GatewaySettings, GatewaySettingsPatch, IdentifyBook,
    IdentifyRecord, IdentifyRefusal, Route,
};
use crate::snowflake::now_ms;

/// Gateway intent bits the fake filters on.
pub mod intents {
    /// CHANNEL_* and THREAD_* create, update and delete events. READY and GUILD_CREATE come
    /// whatever the intents.
    pub const GUILDS: u64 = 1 << 0;
    /// MESSAGE_CREATE, MESSAGE_UPDATE, MESSAGE_DELETE and MESSAGE_DELETE_BULK in guild channels and
    /// threads.
    pub const GUILD_MESSAGES: u64 = 1 << 9;
    /// MESSAGE_REACTION_ADD and MESSAGE_REACTION_REMOVE in guild channels and threads.
    pub const GUILD_MESSAGE_REACTIONS: u64 = 1 << 10;
    /// TYPING_START in guild channels and threads.
    pub const GUILD_MESSAGE_TYPING: u64 = 1 << 11;
    /// MESSAGE_CREATE, MESSAGE_UPDATE, MESSAGE_DELETE and MESSAGE_DELETE_BULK in DMs.
    pub const DIRECT_MESSAGES: u64 = 1 << 12;
    /// MESSAGE_REACTION_ADD and MESSAGE_REACTION_REMOVE in DMs.
    pub const DIRECT_MESSAGE_REACTIONS: u64 = 1 << 13;
    /// TYPING_START in DMs.
    pub const DIRECT_MESSAGE_TYPING: u64 = 1 << 14;
    /// Message content (privileged). Without it, a guild message's MESSAGE_CREATE and
    /// MESSAGE_UPDATE arrive with `content`, `embeds`, `attachments` and `components` emptied,
    /// unless the bot wrote the message or is mentioned in it; DMs keep their content.
    pub const MESSAGE_CONTENT: u64 = 1 << 15;
}

/// A dispatch ready to send: event name and serialized `d`.
#[derive(Debug, Clone)]
pub struct Dispatch {
    pub name: std::borrow::Cow<'static, str>,
    pub data: Arc<str>,
    /// The intent a session needs to receive it (None: always sent).
    pub intent: Option<u64>,
    /// `d` with message content blanked, for sessions without MESSAGE_CONTENT (None: same
    /// as `data`).
    pub without_content: Option<Arc<str>>,
    /// Which shards' sessions get it.
    pub route: Route,
}

/// What a connection task is told to do.
#[derive(Debug)]
pub enum Outbound {
    /// Send this text frame.
    Frame(Arc<str>),
    /// Close the socket without a close frame.
    Drop,
    /// Send op 7 RECONNECT.
    Reconnect,
    /// Send op 9 INVALID_SESSION (not resumable) and forget the session.
    InvalidSession,
    /// Close the socket with this close code (and Discord's reason for it).
    Close(u16),
}

/// A gateway fault injected through the control API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatewayFault {
    Drop,
    Reconnect,
    InvalidSession,
    Close(u16),
}

#[derive(Debug)]
struct Session {
    intents: u64,
    /// `[shard_id, shard_count]` as identified (`[0, 1]` for an unsharded bot).
    shard: [u32; 2],
    seq: u64,
    backlog: VecDeque<(u64, Arc<str>)>,
    connection: Option<u64>,
    created: u64,
}

#[derive(Debug)]
struct Connection {
    tx: mpsc::Sender<Outbound>,
    opened_at_ms: u64,
    /// How its current session (if any) was attached.
    state: ConnectionState,
}

#[derive(Debug)]
struct Inner {
    sessions: HashMap<String, Session>,
    connections: HashMap<u64, Connection>,
    next_connection: u64,
    next_session: u64,
    book: IdentifyBook,
}

/// Counters reported by `GET /_fake/state`.
#[derive(Debug, Default)]
pub struct Counters {
    pub connections: AtomicU64,
    pub identified: AtomicU64,
    pub resumed: AtomicU64,
    pub dispatches: AtomicU64,
}

/// Limits of the hub.
#[derive(Debug, Clone, Copy)]
pub struct HubLimits {
    /// Frames kept per session for RESUME.
    pub backlog: usize,
    /// Frames queued per connection before it is dropped as too slow.
    pub queue: usize,
    /// Sessions kept (oldest disconnected ones are forgotten first).
    pub sessions: usize,
    /// IDENTIFYs kept in the log `GET /_fake/gateway/identifies` reads (oldest forgotten
    /// first).
    pub identifies: usize,
}

impl Default for HubLimits {
    fn default() -> Self {
        HubLimits {
            backlog: 10_000,
            queue: 8_192,
            sessions: 64,
            identifies: 10_000,
        }
    }
}

/// An IDENTIFY that passed the token, intents and `shard` checks, for [`Hub::identify`].
#[derive(Debug, Clone, Copy)]
pub struct IdentifyRequest {
    pub connection: u64,
    pub intents: u64,
    /// The `shard` field as sent (`None`: absent).
    pub shard: Option<[u32; 2]>,
    /// How many of the world's guilds the shard holds.
    pub guilds_on_shard: usize,
}

/// What a connection is told to close it: a close frame with `code`, or a drop.
fn closing(code: Option<u16>) -> Outbound {
    code.map_or(Outbound::Drop, Outbound::Close)
}

/// Why a RESUME was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum ResumeRefused {
    UnknownSession,
    SequenceGone,
}

/// All gateway sessions and connections.
#[derive(Debug)]
pub struct Hub {
    inner: Mutex<Inner>,
    limits: HubLimits,
    pub counters: Counters,
    any_without_content: AtomicBool,
}

fn frame(seq: u64, name: &str, data: &str) -> Arc<str> {
    Arc::from(format!(
        "{{\"op\":0,\"s\":{seq},\"t\":\"{name}\",\"d\":{data}}}"
    ))
}

impl Hub {
    pub fn new(limits: HubLimits, settings: GatewaySettings) -> Hub {
        Hub {
            inner: Mutex::new(Inner {
                sessions: HashMap::new(),
                connections: HashMap::new(),
                next_connection: 0,
                next_session: 0,
                book: IdentifyBook::new(settings, limits.identifies),
            }),
            limits,
            counters: Counters::default(),
            any_without_content: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave the maps inconsistent in a way that
        // matters to a test fake, so recover from poisoning.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a new socket; returns its id and the queue to drain.
    pub fn connect(&self) -> (u64, mpsc::Receiver<Outbound>) {
        let (tx, rx) = mpsc::channel(self.limits.queue);
        let mut inner = self.lock();
        inner.next_connection += 1;
        let id = inner.next_connection;
        inner.connections.insert(
            id,
            Connection {
                tx,
                opened_at_ms: now_ms(),
                state: ConnectionState::Handshaking,
            },
        );
        self.counters.connections.fetch_add(1, Ordering::Relaxed);
        (id, rx)
    }

    /// Forgets a socket; its session (if any) stays resumable.
    pub fn disconnect(&self, connection: u64) {
        let mut inner = self.lock();
        inner.connections.remove(&connection);
        for session in inner.sessions.values_mut() {
            if session.connection == Some(connection) {
                session.connection = None;
            }
        }
    }

    /// Whether some session lacks the MESSAGE_CONTENT intent (so publishers should also
    /// build the content-less variant).
    pub fn needs_content_free_variant(&self) -> bool {
        self.any_without_content.load(Ordering::Relaxed)
    }

    fn refresh_content_flag(&self, inner: &Inner) {
        let any = inner
            .sessions
            .values()
            .any(|s| s.intents & intents::MESSAGE_CONTENT == 0);
        self.any_without_content.store(any, Ordering::Relaxed);
    }

    /// Decides an IDENTIFY under the hub's lock (so the bucket rule holds across every
    /// connection) and logs it. Accepted: creates a session for the connection and returns its
    /// id and the initial frames (READY, GUILD_CREATE...) built by `initial`, which the caller
    /// sends before draining its queue; sequence numbers start at 1. Refused: the refusal, and
    /// nothing changes but the log.
    pub fn identify(
        &self,
        request: IdentifyRequest,
        initial: impl FnOnce(&str) -> Vec<(&'static str, String)>,
    ) -> Result<(String, Vec<Arc<str>>), IdentifyRefusal> {
        let mut inner = self.lock();
        let shard = request.shard.unwrap_or([0, 1]);
        let sharded = shard[1] > 1;
        let at_ms = now_ms();
        let admitted = inner.book.admit(
            shard,
            sharded,
            request.guilds_on_shard,
            Instant::now(),
            at_ms,
        );
        if let Err(refusal) = admitted {
            let (reason, close_code) = match &refusal {
                IdentifyRefusal::Close(code, reason) => (reason.clone(), Some(*code)),
                IdentifyRefusal::InvalidSession(reason) => (reason.clone(), None),
            };
            inner.book.record(IdentifyRecord {
                at_ms,
                connection: request.connection,
                shard: Some(shard),
                session_id: None,
                accepted: false,
                reason: Some(reason),
                close_code,
            });
            return Err(refusal);
        }
        inner.next_session += 1;
        let session_id = format!("{:016x}{:016x}", at_ms, inner.next_session);
        let mut session = Session {
            intents: request.intents,
            shard,
            seq: 0,
            backlog: VecDeque::new(),
            connection: Some(request.connection),
            created: inner.next_session,
        };
        let mut frames = Vec::new();
        for (name, data) in initial(&session_id) {
            session.seq += 1;
            let f = frame(session.seq, name, &data);
            session.backlog.push_back((session.seq, f.clone()));
            frames.push(f);
        }
        self.counters
            .dispatches
            .fetch_add(frames.len() as u64, Ordering::Relaxed);
        // A connection that re-identifies leaves its old session behind.
        for s in inner.sessions.values_mut() {
            if s.connection == Some(request.connection) {
                s.connection = None;
            }
        }
        if let Some(conn) = inner.connections.get_mut(&request.connection) {
            conn.state = ConnectionState::Identified;
        }
        inner.sessions.insert(session_id.clone(), session);
        inner.book.record(IdentifyRecord {
            at_ms,
            connection: request.connection,
            shard: Some(shard),
            session_id: Some(session_id.clone()),
            accepted: true,
            reason: None,
            close_code: None,
        });
        self.evict_sessions(&mut inner);
        self.refresh_content_flag(&inner);
        self.counters.identified.fetch_add(1, Ordering::Relaxed);
        Ok((session_id, frames))
    }

    /// Logs an IDENTIFY refused before the sharding rules were asked (bad token, intents or
    /// `shard`, an injected fault...): it closed the socket with `close_code`.
    pub fn refuse_identify(
        &self,
        connection: u64,
        shard: Option<[u32; 2]>,
        close_code: u16,
        reason: String,
    ) {
        self.lock().book.record(IdentifyRecord {
            at_ms: now_ms(),
            connection,
            shard,
            session_id: None,
            accepted: false,
            reason: Some(reason),
            close_code: Some(close_code),
        });
    }

    /// The IDENTIFY log, oldest first.
    pub fn identifies(&self) -> Vec<IdentifyRecord> {
        self.lock().book.records()
    }

    /// The sharding settings now.
    pub fn settings(&self) -> GatewaySettings {
        self.lock().book.settings(now_ms())
    }

    /// Changes the sharding settings (all or nothing); the error names what is out of range.
    pub fn change_settings(&self, patch: &GatewaySettingsPatch) -> Result<GatewaySettings, String> {
        self.lock().book.apply(patch, now_ms())
    }

    /// `GET /gateway/bot`'s `shards` and `session_start_limit` (total, remaining,
    /// reset_after, max_concurrency).
    pub fn gateway_bot(&self) -> (u32, (u32, u32, u64, u32)) {
        let mut inner = self.lock();
        let shards = inner.book.settings(now_ms()).shards;
        (shards, inner.book.session_start_limit(now_ms()))
    }

    /// Every open connection with its session and shard, by id.
    pub fn connections(&self) -> Vec<ConnectionInfo> {
        let inner = self.lock();
        let mut attached: HashMap<u64, (&String, &Session)> = HashMap::new();
        for (id, session) in &inner.sessions {
            if let Some(conn) = session.connection {
                attached.insert(conn, (id, session));
            }
        }
        let mut list: Vec<ConnectionInfo> = inner
            .connections
            .iter()
            .map(|(id, conn)| {
                let session = attached.get(id);
                ConnectionInfo {
                    connection: *id,
                    opened_at_ms: conn.opened_at_ms,
                    shard: session.map(|(_, s)| s.shard),
                    session_id: session.map(|(sid, _)| (*sid).clone()),
                    state: if session.is_some() {
                        conn.state
                    } else {
                        ConnectionState::Handshaking
                    },
                }
            })
            .collect();
        list.sort_by_key(|c| c.connection);
        list
    }

    /// Closes one connection with a close code (`None`: drops it without a close frame).
    /// Returns whether it was open.
    pub fn close_connection(&self, connection: u64, code: Option<u16>) -> bool {
        let inner = self.lock();
        inner
            .connections
            .get(&connection)
            .is_some_and(|conn| conn.tx.try_send(closing(code)).is_ok())
    }

    /// Closes every connection whose session is on shard `shard_id` (of any count; an
    /// unsharded session is shard 0). Returns how many.
    pub fn close_shard(&self, shard_id: u32, code: Option<u16>) -> usize {
        let inner = self.lock();
        inner
            .sessions
            .values()
            .filter(|s| s.shard[0] == shard_id)
            .filter_map(|s| s.connection)
            .filter_map(|conn| inner.connections.get(&conn))
            .filter(|conn| conn.tx.try_send(closing(code)).is_ok())
            .count()
    }

    fn evict_sessions(&self, inner: &mut Inner) {
        while inner.sessions.len() > self.limits.sessions {
            let oldest = inner
                .sessions
                .iter()
                .filter(|(_, s)| s.connection.is_none())
                .min_by_key(|(_, s)| s.created)
                .or_else(|| inner.sessions.iter().min_by_key(|(_, s)| s.created))
                .map(|(id, _)| id.clone());
            match oldest {
                Some(id) => {
                    inner.sessions.remove(&id);
                }
                None => break,
            }
        }
    }

    /// Attaches `connection` to an existing session and returns every frame after `seq`
    /// followed by RESUMED.
    pub fn resume(
        &self,
        connection: u64,
        session_id: &str,
        seq: u64,
    ) -> Result<Vec<Arc<str>>, ResumeRefused> {
        let mut inner = self.lock();
        let previous = {
            let session = inner
                .sessions
                .get_mut(session_id)
                .ok_or(ResumeRefused::UnknownSession)?;
            let oldest_kept = session.backlog.front().map_or(session.seq + 1, |(s, _)| *s);
            if seq > session.seq || (seq + 1 < oldest_kept) {
                return Err(ResumeRefused::SequenceGone);
            }
            let mut frames: Vec<Arc<str>> = session
                .backlog
                .iter()
                .filter(|(s, _)| *s > seq)
                .map(|(_, f)| f.clone())
                .collect();
            session.seq += 1;
            let resumed = frame(session.seq, "RESUMED", "{}");
            session.backlog.push_back((session.seq, resumed.clone()));
            frames.push(resumed);
            let previous = session.connection.replace(connection);
            (previous, frames)
        };
        let (previous, frames) = previous;
        // The connection leaves any session it had for this one.
        for (id, s) in &mut inner.sessions {
            if s.connection == Some(connection) && id != session_id {
                s.connection = None;
            }
        }
        if let Some(conn) = inner.connections.get_mut(&connection) {
            conn.state = ConnectionState::Resumed;
        }
        if let Some(old) = previous.filter(|old| *old != connection) {
            // Discord closes the old socket of a resumed session.
            if let Some(conn) = inner.connections.remove(&old) {
                let _ = conn.tx.try_send(Outbound::Drop);
            }
        }
        self.counters.resumed.fetch_add(1, Ordering::Relaxed);
        self.counters
            .dispatches
            .fetch_add(frames.len() as u64, Ordering::Relaxed);
        Ok(frames)
    }

    /// Forgets a session (after op 9).
    pub fn invalidate(&self, session_id: &str) {
        let mut inner = self.lock();
        inner.sessions.remove(session_id);
        self.refresh_content_flag(&inner);
    }

    /// The session a connection is attached to.
    pub fn session_of(&self, connection: u64) -> Option<String> {
        let inner = self.lock();
        inner
            .sessions
            .iter()
            .find(|(_, s)| s.connection == Some(connection))
            .map(|(id, _)| id.clone())
    }

    /// Sends a dispatch to every session whose intents admit it. Returns how many sessions
    /// got it.
    pub fn publish(&self, dispatch: &Dispatch) -> usize {
        let mut inner = self.lock();
        let Inner {
            sessions,
            connections,
            ..
        } = &mut *inner;
        let mut delivered = 0;
        let mut slow = Vec::new();
        for session in sessions.values_mut() {
            if !shards::receives(dispatch.route, session.shard) {
                continue;
            }
            if let Some(needed) = dispatch.intent {
                if session.intents & needed == 0 {
                    continue;
                }
            }
            let data = match &dispatch.without_content {
                Some(blank) if session.intents & intents::MESSAGE_CONTENT == 0 => blank,
                _ => &dispatch.data,
            };
            session.seq += 1;
            let f = frame(session.seq, &dispatch.name, data);
            session.backlog.push_back((session.seq, f.clone()));
            while session.backlog.len() > self.limits.backlog {
                session.backlog.pop_front();
            }
            if let Some(conn) = session.connection {
                if let Some(c) = connections.get(&conn) {
                    if c.tx.try_send(Outbound::Frame(f)).is_err() {
                        // Too slow (or gone): drop it; the client resumes from the backlog.
                        slow.push(conn);
                        session.connection = None;
                    }
                }
            }
            delivered += 1;
        }
        for conn in slow {
            tracing::warn!(
                connection = conn,
                "gateway connection too slow; dropping it"
            );
            connections.remove(&conn);
        }
        self.counters
            .dispatches
            .fetch_add(delivered as u64, Ordering::Relaxed);
        delivered
    }

    /// Applies a gateway fault to every open connection; returns how many.
    pub fn inject(&self, fault: GatewayFault) -> usize {
        let inner = self.lock();
        let mut count = 0;
        for conn in inner.connections.values() {
            let msg = match fault {
                GatewayFault::Drop => Outbound::Drop,
                GatewayFault::Reconnect => Outbound::Reconnect,
                GatewayFault::InvalidSession => Outbound::InvalidSession,
                GatewayFault::Close(code) => Outbound::Close(code),
            };
            if conn.tx.try_send(msg).is_ok() {
                count += 1;
            }
        }
        count
    }

    /// Closes every connection (shutdown).
    pub fn close_all(&self) {
        let mut inner = self.lock();
        for (_, conn) in inner.connections.drain() {
            let _ = conn.tx.try_send(Outbound::Drop);
        }
    }

    /// Open connections and live sessions.
    pub fn sizes(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.connections.len(), inner.sessions.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snowflake::Snowflake;

    fn dispatch(name: &'static str) -> Dispatch {
        Dispatch {
            name: name.into(),
            data: Arc::from("{}"),
            intent: None,
            without_content: None,
            route: Route::Everyone,
        }
    }

    fn hub() -> Hub {
        Hub::new(HubLimits::default(), GatewaySettings::default())
    }

    fn request(connection: u64, intents: u64, shard: Option<[u32; 2]>) -> IdentifyRequest {
        IdentifyRequest {
            connection,
            intents,
            shard,
            guilds_on_shard: 1,
        }
    }

    #[test]
    fn resume_replays_after_sequence() {
        let hub = hub();
        let (conn, _rx) = hub.connect();
        let (session, frames) = hub
            .identify(request(conn, u64::MAX, None), |_| {
                vec![("READY", "{}".into())]
            })
            .expect("identified");
        assert_eq!(frames.len(), 1);
        hub.disconnect(conn);
        hub.publish(&dispatch("MESSAGE_CREATE"));
        hub.publish(&dispatch("MESSAGE_UPDATE"));
        let (conn2, _rx2) = hub.connect();
        let replay = hub.resume(conn2, &session, 1).expect("resumes");
        assert_eq!(replay.len(), 3);
        assert!(replay[0].contains("\"s\":2,\"t\":\"MESSAGE_CREATE\""));
        assert!(replay[2].contains("RESUMED"));
        assert_eq!(
            hub.resume(conn2, "nope", 0),
            Err(ResumeRefused::UnknownSession)
        );
        assert_eq!(
            hub.resume(conn2, &session, 99),
            Err(ResumeRefused::SequenceGone)
        );
    }

    #[test]
    fn intents_filter_dispatches() {
        let hub = hub();
        let (conn, mut rx) = hub.connect();
        hub.identify(request(conn, intents::GUILDS, None), |_| Vec::new())
            .expect("identified");
        let mut d = dispatch("MESSAGE_CREATE");
        d.intent = Some(intents::GUILD_MESSAGES);
        assert_eq!(hub.publish(&d), 0);
        assert_eq!(hub.publish(&dispatch("INTERACTION_CREATE")), 1);
        assert!(
            matches!(rx.try_recv(), Ok(Outbound::Frame(f)) if f.contains("INTERACTION_CREATE"))
        );
    }

    #[test]
    fn a_resumed_session_keeps_its_shard() {
        let hub = Hub::new(
            HubLimits::default(),
            GatewaySettings {
                max_concurrency: 2,
                ..GatewaySettings::default()
            },
        );
        let (conn, _rx) = hub.connect();
        let (session, _) = hub
            .identify(request(conn, u64::MAX, Some([1, 2])), |_| Vec::new())
            .expect("identified");
        hub.disconnect(conn);
        let (conn2, mut rx2) = hub.connect();
        hub.resume(conn2, &session, 0).expect("resumes");
        let listed = hub.connections();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].shard, Some([1, 2]));
        assert_eq!(listed[0].state, ConnectionState::Resumed);
        // Guild 1 << 22 is on shard 1 of 2; guild 2 << 22 on shard 0.
        let mut on_one = dispatch("MESSAGE_CREATE");
        on_one.route = Route::Guild(Snowflake(1 << 22));
        let mut on_zero = dispatch("MESSAGE_CREATE");
        on_zero.route = Route::Guild(Snowflake(2 << 22));
        let mut dm = dispatch("MESSAGE_CREATE");
        dm.route = Route::DirectMessages;
        assert_eq!(hub.publish(&on_one), 1);
        assert_eq!(hub.publish(&on_zero), 0);
        assert_eq!(hub.publish(&dm), 0);
        assert!(matches!(rx2.try_recv(), Ok(Outbound::Frame(f)) if f.contains("MESSAGE_CREATE")));
        assert!(rx2.try_recv().is_err(), "nothing for other shards or DMs");
    }
}
