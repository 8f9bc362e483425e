//! Dollars as whole micro-dollars (millionths), so sums and caps never round.
//!
//! A price or cap is written in the config as a TOML number (`3`, `0.15`); it is read from its
//! decimal text, never multiplied as a float, and more than six decimals are refused rather
//! than rounded.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer};

/// Micro-dollars in a dollar.
pub const MICROS_PER_USD: u64 = 1_000_000;

/// The largest amount written anywhere: a billion dollars (prices per million tokens and caps
/// alike), far above any real one, far below what a `u64` of micro-dollars holds.
pub const MAX_USD: u64 = 1_000_000_000;

/// Why a written amount is not a dollar amount.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MoneyError {
    /// Below zero.
    #[error("{0} is negative")]
    Negative(String),
    /// NaN or infinite.
    #[error("{0} is not a number of dollars")]
    NotFinite(String),
    /// More than six decimals that are not zeros.
    #[error("{0} has more than six decimals")]
    TooPrecise(String),
    /// Over [`MAX_USD`].
    #[error("{0} is over {MAX_USD} dollars")]
    TooLarge(String),
    /// Not a decimal number.
    #[error("'{0}' is not a decimal number")]
    NotDecimal(String),
}

impl MoneyError {
    /// What to write instead.
    pub fn help(&self) -> &'static str {
        "write dollars as a number with at most six decimals (a millionth of a dollar), such as 5, 0.5 or 0.000150"
    }
}

/// Micro-dollars from a decimal text such as `"0.15"` or `"12"`.
pub fn parse_usd(text: &str) -> Result<u64, MoneyError> {
    let text = text.trim();
    if let Some(rest) = text.strip_prefix('-') {
        if rest.bytes().any(|b| b != b'0' && b != b'.') {
            return Err(MoneyError::Negative(text.to_owned()));
        }
    }
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits(whole) || !digits(fraction) {
        return Err(MoneyError::NotDecimal(text.chars().take(40).collect()));
    }
    let significant = fraction.trim_end_matches('0');
    if significant.len() > 6 {
        return Err(MoneyError::TooPrecise(text.to_owned()));
    }
    let whole = whole.trim_start_matches('0');
    if whole.len() > 10 {
        return Err(MoneyError::TooLarge(text.to_owned()));
    }
    let dollars: u64 = if whole.is_empty() {
        0
    } else {
        whole
            .parse()
            .map_err(|_| MoneyError::NotDecimal(text.to_owned()))?
    };
    if dollars > MAX_USD {
        return Err(MoneyError::TooLarge(text.to_owned()));
    }
    let mut micros_text = significant.to_owned();
    while micros_text.len() < 6 {
        micros_text.push('0');
    }
    let micros: u64 = micros_text
        .parse()
        .map_err(|_| MoneyError::NotDecimal(text.to_owned()))?;
    let total = dollars * MICROS_PER_USD + micros;
    if total > MAX_USD * MICROS_PER_USD {
        return Err(MoneyError::TooLarge(text.to_owned()));
    }
    Ok(total)
}

/// `$12.50`, `$0.00015`: at least two decimals, at most six, no trailing zeros past two.
pub fn format_usd(micros: u64) -> String {
    let dollars = micros / MICROS_PER_USD;
    let fraction = format!("{:06}", micros % MICROS_PER_USD);
    let mut fraction = fraction.trim_end_matches('0').to_owned();
    while fraction.len() < 2 {
        fraction.push('0');
    }
    format!("${}.{fraction}", group_digits(dollars))
}

/// `1234567` → `1,234,567`.
pub fn group_digits(number: u64) -> String {
    let digits = number.to_string();
    let mut grouped = String::with_capacity(digits.len() + digits.len() / 3);
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    grouped
}

/// Micro-dollars as a JSON number of dollars (exact for every amount below 2^53 micros: a
/// division of a whole number by 10^6 is the double nearest the decimal).
pub fn usd_number(micros: u64) -> f64 {
    micros as f64 / MICROS_PER_USD as f64
}

/// A dollar amount as written in the TOML file: an integer or a float, kept as its decimal
/// text for [`parse_usd`].
#[derive(Debug, Clone, PartialEq)]
pub struct RawUsd(pub String);

impl<'de> Deserialize<'de> for RawUsd {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct UsdVisitor;

        impl Visitor<'_> for UsdVisitor {
            type Value = RawUsd;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of dollars, such as 5 or 0.15")
            }

            fn visit_i64<E: de::Error>(self, value: i64) -> Result<RawUsd, E> {
                Ok(RawUsd(value.to_string()))
            }

            fn visit_u64<E: de::Error>(self, value: u64) -> Result<RawUsd, E> {
                Ok(RawUsd(value.to_string()))
            }

            fn visit_f64<E: de::Error>(self, value: f64) -> Result<RawUsd, E> {
                // Display is the shortest text that reads back as the same double, without an
                // exponent: `0.15`, not `0.1499999…`.
                Ok(RawUsd(if value.is_finite() {
                    format!("{value}")
                } else {
                    "NaN".to_owned()
                }))
            }
        }

        deserializer.deserialize_any(UsdVisitor)
    }
}

impl RawUsd {
    /// The amount in micro-dollars.
    pub fn micros(&self) -> Result<u64, MoneyError> {
        if self.0 == "NaN" {
            return Err(MoneyError::NotFinite(self.0.clone()));
        }
        parse_usd(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_become_exact_micro_dollars() {
        assert_eq!(parse_usd("0.15"), Ok(150_000));
        assert_eq!(parse_usd("3"), Ok(3_000_000));
        assert_eq!(parse_usd("0.000001"), Ok(1));
        assert_eq!(parse_usd("12.5000000"), Ok(12_500_000));
        assert_eq!(parse_usd(".5"), Ok(500_000));
        assert_eq!(parse_usd("-0"), Ok(0));
    }

    #[test]
    fn amounts_that_would_round_or_overflow_are_refused() {
        assert!(matches!(
            parse_usd("0.0000001"),
            Err(MoneyError::TooPrecise(_))
        ));
        assert!(matches!(parse_usd("-1"), Err(MoneyError::Negative(_))));
        assert!(matches!(
            parse_usd("1000000000.000001"),
            Err(MoneyError::TooLarge(_))
        ));
        assert!(matches!(
            parse_usd("99999999999999999999"),
            Err(MoneyError::TooLarge(_))
        ));
        assert!(matches!(parse_usd("1e3"), Err(MoneyError::NotDecimal(_))));
        assert!(matches!(parse_usd(""), Err(MoneyError::NotDecimal(_))));
        assert!(matches!(parse_usd("."), Err(MoneyError::NotDecimal(_))));
    }

    #[test]
    fn toml_floats_are_read_from_their_decimal_text() {
        #[derive(Deserialize)]
        struct T {
            a: RawUsd,
            b: RawUsd,
            c: RawUsd,
            d: RawUsd,
        }
        let t: T = toml::from_str("a = 0.15\nb = 3\nc = 0.1\nd = nan").unwrap();
        assert_eq!(t.a.micros(), Ok(150_000));
        assert_eq!(t.b.micros(), Ok(3_000_000));
        // 0.1 is not a double, but its shortest text is "0.1": exactly 100,000 micros.
        assert_eq!(t.c.micros(), Ok(100_000));
        assert!(matches!(t.d.micros(), Err(MoneyError::NotFinite(_))));
    }

    #[test]
    fn amounts_print_with_two_to_six_decimals_and_grouped_dollars() {
        assert_eq!(format_usd(0), "$0.00");
        assert_eq!(format_usd(5_000_000), "$5.00");
        assert_eq!(format_usd(4_999_000), "$4.999");
        assert_eq!(format_usd(150), "$0.00015");
        assert_eq!(format_usd(1_234_567_890_000), "$1,234,567.89");
        assert_eq!(group_digits(100_000), "100,000");
        assert_eq!(group_digits(7), "7");
        assert_eq!(usd_number(150_000), 0.15);
    }
}
