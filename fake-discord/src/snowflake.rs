//! Id generation, the fake's own clock and the timestamps Discord writes. The id type is the
//! workspace's one, [`protocol::Snowflake`].

use std::sync::atomic::{AtomicU64, Ordering};

use chrono::{DateTime, SecondsFormat, Utc};

pub use protocol::{Snowflake, DISCORD_EPOCH_MS};

/// Hands out fresh, strictly increasing snowflakes based on the wall clock.
#[derive(Debug, Default)]
pub struct IdGenerator {
    last: AtomicU64,
}

impl IdGenerator {
    /// A generator whose ids are all greater than `floor`.
    pub fn above(floor: u64) -> Self {
        IdGenerator {
            last: AtomicU64::new(floor),
        }
    }

    /// The next id: the current time in snowflake form, or one more than the previous id.
    pub fn next(&self) -> Snowflake {
        let candidate = (now_ms().saturating_sub(DISCORD_EPOCH_MS)) << 22;
        let mut prev = self.last.load(Ordering::Relaxed);
        loop {
            let next = candidate.max(prev + 1);
            match self
                .last
                .compare_exchange_weak(prev, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Snowflake(next),
                Err(actual) => prev = actual,
            }
        }
    }
}

/// Milliseconds since the Unix epoch, by the fake's own clock: it models Discord, a system
/// independent of the service under test.
pub fn now_ms() -> u64 {
    u64::try_from(Utc::now().timestamp_millis()).unwrap_or(0)
}

/// Formats milliseconds since the Unix epoch as Discord does:
/// `2024-05-01T12:34:56.789000+00:00`. (Every instant an id or the clock gives is far inside
/// chrono's range; beyond it, in the year 262143, this saturates.)
pub fn rfc3339(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(DateTime::from_timestamp_millis)
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
        .to_rfc3339_opts(SecondsFormat::Micros, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000+00:00");
        assert_eq!(
            rfc3339(DISCORD_EPOCH_MS),
            "2015-01-01T00:00:00.000000+00:00"
        );
        assert_eq!(
            rfc3339(1_709_251_199_123),
            "2024-02-29T23:59:59.123000+00:00"
        );
    }

    #[test]
    fn ids_increase_strictly() {
        let gen = IdGenerator::above(0);
        let a = gen.next();
        let b = gen.next();
        assert!(b > a);
        assert!(a.timestamp_ms() >= DISCORD_EPOCH_MS);
    }

    #[test]
    fn parses_only_decimal_ids() {
        assert_eq!(Snowflake::from_digits("123"), Some(Snowflake(123)));
        assert_eq!(Snowflake::from_digits("@me"), None);
        assert_eq!(Snowflake::from_digits(""), None);
        assert_eq!(Snowflake::from_digits("99999999999999999999999"), None);
    }
}
