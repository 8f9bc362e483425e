//! Discord ids.

use std::fmt;
use std::str::FromStr;

/// A Discord id: 17 to 20 ASCII digits that fit in a `u64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Snowflake(pub u64);

/// Why a string is not a [`Snowflake`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnowflakeError {
    #[error("'{0}' is not a Discord id: expected 17 to 20 ASCII digits")]
    NotDigits(String),
    #[error("'{value}' is not a Discord id: it has {len} digits, expected 17 to 20")]
    WrongLength { value: String, len: usize },
    #[error("'{0}' is not a Discord id: it is larger than 18446744073709551615")]
    TooLarge(String),
}

impl Snowflake {
    pub const MIN_DIGITS: usize = 17;
    pub const MAX_DIGITS: usize = 20;

    pub fn get(self) -> u64 {
        self.0
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
pub(crate) fn parse_digits(digits: &[u8]) -> Option<u64> {
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
    fn digit_parser_refuses_overflow_and_non_digits() {
        assert_eq!(parse_digits(b"42"), Some(42));
        assert_eq!(parse_digits(b""), None);
        assert_eq!(parse_digits(b"4a"), None);
        assert_eq!(parse_digits(b"99999999999999999999"), None);
    }
}
