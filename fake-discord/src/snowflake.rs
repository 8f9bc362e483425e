//! Discord snowflake ids, id generation and the timestamps derived from them.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Milliseconds between the Unix epoch and Discord's epoch (2015-01-01T00:00:00Z).
pub const DISCORD_EPOCH_MS: u64 = 1_420_070_400_000;

/// A Discord id. Serialized as a decimal string (as Discord does); deserialized from a string
/// or a number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Snowflake(pub u64);

impl Snowflake {
    /// The creation time encoded in the id, in milliseconds since the Unix epoch.
    pub fn timestamp_ms(self) -> u64 {
        (self.0 >> 22) + DISCORD_EPOCH_MS
    }

    /// Parses a decimal id as it appears in a URL path or a JSON string.
    pub fn parse(text: &str) -> Option<Snowflake> {
        if text.is_empty() || text.len() > 20 || !text.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        text.parse().ok().map(Snowflake)
    }
}

impl fmt::Display for Snowflake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<u64> for Snowflake {
    fn from(value: u64) -> Self {
        Snowflake(value)
    }
}

impl Serialize for Snowflake {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Snowflake {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Number(u64),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Number(n) => Ok(Snowflake(n)),
            Raw::Text(s) => Snowflake::parse(&s).ok_or_else(|| {
                serde::de::Error::custom(format!("`{s}` is not a snowflake (a decimal id)"))
            }),
        }
    }
}

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

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Formats milliseconds since the Unix epoch as Discord does:
/// `2024-05-01T12:34:56.789000+00:00`.
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let millis = ms % 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}000+00:00",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian calendar).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
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
        assert_eq!(Snowflake::parse("123"), Some(Snowflake(123)));
        assert_eq!(Snowflake::parse("@me"), None);
        assert_eq!(Snowflake::parse(""), None);
        assert_eq!(Snowflake::parse("99999999999999999999999"), None);
    }
}
