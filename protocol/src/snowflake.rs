//! Discord ids.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Milliseconds between the Unix epoch and Discord's epoch (2015-01-01T00:00:00Z).
pub const DISCORD_EPOCH_MS: u64 = 1_420_070_400_000;

/// A Discord id. Written by people (config, tool input) it is 17 to 20 ASCII digits that fit
/// in a `u64` ([`FromStr`]); on the wire it is a decimal string, because ids exceed what JSON
/// numbers carry exactly (serialized as a string; deserialized from a string or a number).
///
/// ```
/// use protocol::Snowflake;
/// let id: Snowflake = "1000000000000000401".parse().unwrap();
/// assert_eq!(serde_json::to_string(&id).unwrap(), "\"1000000000000000401\"");
/// assert_eq!(serde_json::from_str::<Snowflake>("\"1000000000000000401\"").unwrap(), id);
/// assert!("12".parse::<Snowflake>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Snowflake(pub u64);

/// Why a string is not a [`Snowflake`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnowflakeError {
    /// Something other than ASCII digits.
    #[error("'{0}' is not a Discord id: expected 17 to 20 ASCII digits")]
    NotDigits(String),
    /// Too few or too many digits.
    #[error("'{value}' is not a Discord id: it has {len} digits, expected 17 to 20")]
    WrongLength {
        /// What was given.
        value: String,
        /// How many digits it has.
        len: usize,
    },
    /// More than a `u64` holds.
    #[error("'{0}' is not a Discord id: it is larger than 18446744073709551615")]
    TooLarge(String),
}

impl Snowflake {
    /// Fewest digits a written id has.
    pub const MIN_DIGITS: usize = 17;
    /// Most digits a written id has.
    pub const MAX_DIGITS: usize = 20;

    /// The id as a number.
    pub fn get(self) -> u64 {
        self.0
    }

    /// Any decimal id that fits in a `u64`, without the length rule: for ids Discord itself
    /// produced (in a URL path, in markup such as `<@id>`, in a payload).
    pub fn from_digits(text: &str) -> Option<Snowflake> {
        parse_digits(text.as_bytes()).map(Snowflake)
    }

    /// The creation time encoded in the id, in milliseconds since the Unix epoch.
    pub fn timestamp_ms(self) -> u64 {
        (self.0 >> 22) + DISCORD_EPOCH_MS
    }
}

impl Serialize for Snowflake {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Snowflake {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;

        impl serde::de::Visitor<'_> for Visitor {
            type Value = Snowflake;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Discord id as a decimal string")
            }

            fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Snowflake, E> {
                Ok(Snowflake(value))
            }

            fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<Snowflake, E> {
                Snowflake::from_digits(value).ok_or_else(|| {
                    E::custom(format!("`{value}` is not a Discord id (a decimal string)"))
                })
            }
        }

        deserializer.deserialize_any(Visitor)
    }
}

impl FromStr for Snowflake {
    type Err = SnowflakeError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
            return Err(SnowflakeError::NotDigits(value.to_owned()));
        }
        if !(Self::MIN_DIGITS..=Self::MAX_DIGITS).contains(&value.len()) {
            return Err(SnowflakeError::WrongLength {
                value: value.to_owned(),
                len: value.len(),
            });
        }
        value
            .parse::<u64>()
            .map(Snowflake)
            .map_err(|_| SnowflakeError::TooLarge(value.to_owned()))
    }
}

impl fmt::Display for Snowflake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<u64> for Snowflake {
    fn from(id: u64) -> Self {
        Snowflake(id)
    }
}

/// Parses a run of ASCII digits as an id without the length rule; used for ids found inside
/// Discord markup (`<@id>`), where Discord itself vouches for the value.
pub fn parse_digits(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > Snowflake::MAX_DIGITS {
        return None;
    }
    let mut value: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_seventeen_to_twenty_digits() {
        assert_eq!(
            "12345678901234567".parse(),
            Ok(Snowflake(12345678901234567))
        );
        assert_eq!(
            "18446744073709551615".parse(),
            Ok(Snowflake(18446744073709551615))
        );
    }

    #[test]
    fn rejects_short_long_signed_and_overflowing_ids() {
        assert!(matches!(
            "1234".parse::<Snowflake>(),
            Err(SnowflakeError::WrongLength { len: 4, .. })
        ));
        assert!(matches!(
            "123456789012345678901".parse::<Snowflake>(),
            Err(SnowflakeError::WrongLength { len: 21, .. })
        ));
        assert!(matches!(
            "+1234567890123456789".parse::<Snowflake>(),
            Err(SnowflakeError::NotDigits(_))
        ));
        assert!(matches!(
            "99999999999999999999".parse::<Snowflake>(),
            Err(SnowflakeError::TooLarge(_))
        ));
        assert!(matches!(
            "".parse::<Snowflake>(),
            Err(SnowflakeError::NotDigits(_))
        ));
        assert!(matches!(
            "１２３４５６７８９０１２３４５６７８".parse::<Snowflake>(),
            Err(SnowflakeError::NotDigits(_))
        ));
    }

    #[test]
    fn serializes_as_a_string_and_reads_strings_or_numbers() {
        let id = Snowflake(1000000000000000401);
        assert_eq!(
            serde_json::to_string(&id).unwrap(),
            "\"1000000000000000401\""
        );
        assert_eq!(
            serde_json::from_str::<Snowflake>("1000000000000000401").unwrap(),
            id
        );
        assert_eq!(
            serde_json::from_str::<Snowflake>("\"42\"").unwrap(),
            Snowflake(42)
        );
        assert!(serde_json::from_str::<Snowflake>("\"-1\"").is_err());
        assert!(serde_json::from_str::<Snowflake>("\"99999999999999999999\"").is_err());
        assert!(serde_json::from_str::<Snowflake>("1.5").is_err());
    }

    #[test]
    fn timestamps_come_from_the_high_bits() {
        assert_eq!(Snowflake(0).timestamp_ms(), DISCORD_EPOCH_MS);
        assert_eq!(Snowflake(1 << 22).timestamp_ms(), DISCORD_EPOCH_MS + 1);
    }

    #[test]
    fn digit_parser_refuses_overflow_and_non_digits() {
        assert_eq!(parse_digits(b"42"), Some(42));
        assert_eq!(parse_digits(b""), None);
        assert_eq!(parse_digits(b"4a"), None);
        assert_eq!(parse_digits(b"99999999999999999999"), None);
    }
}
