//! Discord's timestamps: parsed fast when they are in Discord's own form, and ordered so the
//! latest edit of a message wins whatever order its copies arrive in.

use chrono::{DateTime, NaiveDate, NaiveTime, SecondsFormat};

/// Parses Discord's timestamp form `2026-11-22T12:00:00.000000+00:00` into microseconds since
/// the Unix epoch, only when formatting the result gives back exactly the same string.
pub fn parse_micros(value: &str) -> Option<i64> {
    let b = value.as_bytes();
    if b.len() != 32
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'.'
        || &b[26..] != b"+00:00"
    {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<u32> {
        let digits = b.get(range)?;
        if !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(
            digits
                .iter()
                .fold(0u32, |n, d| n * 10 + u32::from(d - b'0')),
        )
    };
    let year = i32::try_from(num(0..4)?).ok()?;
    let date = NaiveDate::from_ymd_opt(year, num(5..7)?, num(8..10)?)?;
    // Six digits of microseconds stay under a second: no leap-second form.
    let time =
        NaiveTime::from_hms_micro_opt(num(11..13)?, num(14..16)?, num(17..19)?, num(20..26)?)?;
    let total = date.and_time(time).and_utc().timestamp_micros();
    (format_micros(total).as_deref() == Some(value)).then_some(total)
}

/// Any RFC 3339 timestamp as microseconds since the Unix epoch (Discord's form the fast way),
/// to order edits; `None` when it does not parse.
pub fn instant_micros(value: &str) -> Option<i64> {
    parse_micros(value).or_else(|| {
        DateTime::parse_from_rfc3339(value)
            .ok()
            .map(|instant| instant.timestamp_micros())
    })
}

/// Formats microseconds since the Unix epoch the way Discord does; `None` outside chrono's
/// range (about the years -262144 to 262143), which [`parse_micros`] never gives.
pub fn format_micros(total: i64) -> Option<String> {
    DateTime::from_timestamp_micros(total)
        .map(|instant| instant.to_rfc3339_opts(SecondsFormat::Micros, false))
}

/// Whether an edit stamped `edited` may replace a message whose latest known edit is `held`
/// (microseconds; `None`: never edited, or a stamp that does not parse). Not when the message
/// holds a later edit (edits seen out of order), nor when an unedited copy arrives after an
/// edit. A stamp that does not parse cannot be ordered: then the later arrival wins.
pub fn edit_wins(held: Option<i64>, edited: Option<&str>) -> bool {
    let Some(held) = held else {
        return true;
    };
    match edited {
        None => false,
        Some(edited) => instant_micros(edited).is_none_or(|new| new >= held),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discord_timestamps_round_trip_through_micros() {
        for ts in [
            "2026-11-22T12:00:00.000000+00:00",
            "2015-01-01T00:00:00.123000+00:00",
            "2000-02-29T23:59:59.999999+00:00",
            "1970-01-01T00:00:00.000000+00:00",
        ] {
            let micros = parse_micros(ts).unwrap();
            assert_eq!(format_micros(micros).as_deref(), Some(ts));
        }
        for ts in [
            "2026-11-22T12:00:00Z",
            "2026-02-30T12:00:00.000000+00:00",
            "not a time",
            "",
        ] {
            assert_eq!(parse_micros(ts), None, "{ts}");
        }
    }

    #[test]
    fn a_later_edit_wins_and_an_unedited_copy_never_replaces_an_edit() {
        let held = parse_micros("2026-11-22T12:00:05.000000+00:00");
        assert!(edit_wins(None, None));
        assert!(edit_wins(held, Some("2026-11-22T12:00:06.000000+00:00")));
        assert!(edit_wins(held, Some("2026-11-22T12:00:05Z")));
        assert!(!edit_wins(held, Some("2026-11-22T12:00:04.000000+00:00")));
        assert!(!edit_wins(held, None));
        assert!(edit_wins(held, Some("garbage")));
    }
}
