//! The console's logins: a random login id in an HttpOnly, SameSite=Strict cookie, the
//! caller it stands for and its CSRF token kept here, in a map with a fixed size and expiry.
//! ("Session" is a Discord channel, thread or DM everywhere else; a console login is a login.)

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::auth::Caller;

/// The cookie's name.
pub const COOKIE: &str = "sb_console";
/// The header every state change carries the login's CSRF token in.
pub const CSRF_HEADER: &str = "x-switchboard-csrf";
/// Logins kept at once; a new one past it pushes out the one idle longest.
pub const MAX_LOGINS: usize = 64;
/// Event streams one login may hold open at once (a few tabs); more are refused with `busy`.
pub const MAX_STREAMS_PER_LOGIN: usize = 4;
/// A login unused this long is forgotten (an open tab's event stream or polling keeps it).
pub const IDLE: Duration = Duration::from_secs(60 * 60);
/// No login lives longer than this from when it was made.
pub const LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);

/// A logged-in console.
#[derive(Debug, Clone)]
pub struct Login {
    /// Who logged in (the operator, or a named token with `console` in its scope).
    pub caller: Caller,
    /// The token the page sends in [`CSRF_HEADER`] with every change.
    pub csrf: String,
    created: Instant,
    last_seen: Instant,
    /// Event streams open for this login (shared by its clones).
    streams: Arc<AtomicUsize>,
}

/// One of a login's [`MAX_STREAMS_PER_LOGIN`] event streams, given back when dropped.
#[derive(Debug)]
pub struct StreamSlot(Arc<AtomicUsize>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Login {
    /// Takes one of this login's stream slots, or `None` when all are taken.
    pub fn stream_slot(&self) -> Option<StreamSlot> {
        let taken = self.streams.fetch_add(1, Ordering::AcqRel);
        let slot = StreamSlot(Arc::clone(&self.streams));
        (taken < MAX_STREAMS_PER_LOGIN).then_some(slot)
    }

    /// Whether `presented` is this login's CSRF token (compared in constant time).
    pub fn csrf_matches(&self, presented: &str) -> bool {
        presented.len() == self.csrf.len()
            && bool::from(presented.as_bytes().ct_eq(self.csrf.as_bytes()))
    }
}

/// The logins, by the digest of their id (the id itself is only in the browser's cookie).
#[derive(Debug)]
pub struct Logins {
    by_digest: Mutex<HashMap<[u8; 32], Login>>,
    /// Bumped whenever a login ends early (logout, pushed out), so open event streams look
    /// at once whether theirs is still live.
    ended: tokio::sync::watch::Sender<u64>,
}

impl Default for Logins {
    fn default() -> Self {
        Logins {
            by_digest: Mutex::default(),
            ended: tokio::sync::watch::Sender::new(0),
        }
    }
}

fn digest(id: &str) -> [u8; 32] {
    Sha256::digest(id.as_bytes()).into()
}

fn alive(login: &Login, now: Instant) -> bool {
    now.duration_since(login.last_seen) < IDLE && now.duration_since(login.created) < LIFETIME
}

impl Logins {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Login>> {
        self.by_digest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a login for `caller`: its id (for the cookie) and its CSRF token.
    pub fn start(&self, caller: Caller) -> Result<(String, String), getrandom::Error> {
        let id = crate::auth::random_hex(32)?;
        let csrf = crate::auth::random_hex(16)?;
        let now = Instant::now();
        let mut logins = self.lock();
        logins.retain(|_, login| alive(login, now));
        while logins.len() >= MAX_LOGINS {
            let oldest = logins
                .iter()
                .min_by_key(|(_, login)| login.last_seen)
                .map(|(key, _)| *key);
            match oldest {
                Some(key) => logins.remove(&key),
                None => break,
            };
            self.ended.send_modify(|n| *n = n.wrapping_add(1));
        }
        logins.insert(
            digest(&id),
            Login {
                caller,
                csrf: csrf.clone(),
                created: now,
                last_seen: now,
                streams: Arc::default(),
            },
        );
        Ok((id, csrf))
    }

    /// The live login `id` names (its idle clock restarted), or `None`; an expired one is
    /// forgotten.
    pub fn get(&self, id: &str) -> Option<Login> {
        let key = digest(id);
        let now = Instant::now();
        let mut logins = self.lock();
        let login = logins.get_mut(&key)?;
        if !alive(login, now) {
            logins.remove(&key);
            return None;
        }
        login.last_seen = now;
        Some(login.clone())
    }

    /// Ends login `id`; true when it was live. Its open event streams close.
    pub fn end(&self, id: &str) -> bool {
        let ended = self.lock().remove(&digest(id)).is_some();
        if ended {
            self.ended.send_modify(|n| *n = n.wrapping_add(1));
        }
        ended
    }

    /// Changes whenever a login ends before its time (logout, pushed out by a newer login).
    pub fn endings(&self) -> tokio::sync::watch::Receiver<u64> {
        self.ended.subscribe()
    }

    /// Logins held (expired ones not yet dropped included).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The login id in a `Cookie` header, if any.
pub fn cookie_value(header: &str) -> Option<&str> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim())
        .filter(|value| !value.is_empty() && value.len() <= 128)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logins_are_bounded_and_ended() {
        let logins = Logins::default();
        let mut ids = Vec::new();
        for _ in 0..MAX_LOGINS + 10 {
            ids.push(logins.start(Caller::Operator).unwrap().0);
        }
        assert_eq!(logins.len(), MAX_LOGINS);
        assert!(logins.get(&ids[0]).is_none(), "the oldest was pushed out");
        let last = ids.last().unwrap();
        let login = logins.get(last).unwrap();
        assert!(login.csrf_matches(&login.csrf.clone()));
        assert!(!login.csrf_matches("nope"));
        assert!(logins.end(last));
        assert!(logins.get(last).is_none());
        assert!(!logins.end(last));
    }

    proptest::proptest! {
        #[test]
        fn any_cookie_header_reads_as_a_bounded_value_or_nothing(header in ".{0,300}") {
            if let Some(value) = cookie_value(&header) {
                proptest::prop_assert!(!value.is_empty() && value.len() <= 128);
                proptest::prop_assert!(!value.contains(';'));
            }
        }
    }

    #[test]
    fn a_login_holds_a_bounded_number_of_streams_and_endings_are_announced() {
        let logins = Logins::default();
        let endings = logins.endings();
        let (id, _) = logins.start(Caller::Operator).unwrap();
        let login = logins.get(&id).unwrap();
        let slots: Vec<StreamSlot> = (0..MAX_STREAMS_PER_LOGIN)
            .map(|_| login.stream_slot().expect("a slot"))
            .collect();
        // Clones of the login share its count.
        assert!(logins.get(&id).unwrap().stream_slot().is_none());
        drop(slots);
        assert!(
            login.stream_slot().is_some(),
            "slots come back when dropped"
        );
        assert!(!endings.has_changed().unwrap());
        assert!(logins.end(&id));
        assert!(endings.has_changed().unwrap(), "a logout is announced");
    }

    #[test]
    fn cookies_are_read_from_any_position() {
        assert_eq!(cookie_value("a=1; sb_console=abc; b=2"), Some("abc"));
        assert_eq!(cookie_value("sb_console="), None);
        assert_eq!(cookie_value("other=1"), None);
        assert_eq!(cookie_value("sb_consolex=1"), None);
    }
}
