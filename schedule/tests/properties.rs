//! The properties a scheduler depends on: the next firing is strictly after the time asked,
//! never earlier for a later time, equal to the arithmetic for `every`, and cron in a time
//! zone walks through DST changes without firing a daily job twice or skipping its day.

use std::time::Duration;

use chrono::{DateTime, Datelike, TimeZone, Utc};
use chrono_tz::Tz;
use proptest::prelude::*;
use switchboard_schedule::{due, Anchor, PastAt, Spec, When};

/// Zones with DST rules of every shape: northern and southern, a 30-minute shift
/// (Lord Howe), a change at midnight (Havana), and none (UTC, Kolkata).
const ZONES: [Tz; 9] = [
    Tz::America__New_York,
    Tz::Europe__Paris,
    Tz::Europe__London,
    Tz::Australia__Sydney,
    Tz::Australia__Lord_Howe,
    Tz::America__Havana,
    Tz::America__Santiago,
    Tz::Asia__Kolkata,
    Tz::UTC,
];

fn time() -> impl Strategy<Value = DateTime<Utc>> {
    // 2024-01-01 .. 2028-01-01, to the nanosecond.
    (1_704_067_200i64..1_830_297_600, 0u32..1_000_000_000)
        .prop_map(|(s, n)| Utc.timestamp_opt(s, n).single().unwrap())
}

fn every(interval_s: u64, anchor: DateTime<Utc>) -> Spec {
    let when = When {
        every: Some(format!("{interval_s}s")),
        ..When::default()
    };
    Spec::parse(&when, anchor, PastAt::Refuse, Anchor::At(anchor)).unwrap()
}

fn cron(expr: &str, tz: Tz) -> Spec {
    let when = When {
        cron: Some(expr.to_owned()),
        tz: Some(tz.name().to_owned()),
        ..When::default()
    };
    Spec::parse(&when, Utc::now(), PastAt::Refuse, Anchor::Epoch).unwrap()
}

fn any_spec() -> impl Strategy<Value = Spec> {
    prop_oneof![
        (1u64..=100_000, time()).prop_map(|(i, a)| every(i, a)),
        time().prop_map(Spec::At),
        (0u32..60, 0u32..24, 0..ZONES.len())
            .prop_map(|(m, h, z)| cron(&format!("{m} {h} * * *"), ZONES[z])),
        (1u32..=30, 0..ZONES.len())
            .prop_map(|(step, z)| cron(&format!("*/{step} * * * *"), ZONES[z])),
        (0..ZONES.len()).prop_map(|z| cron("0 9 * * 1-5", ZONES[z])),
        (0..ZONES.len()).prop_map(|z| cron("15 2 L * *", ZONES[z])),
    ]
}

/// The instants in `year` where `tz`'s offset changes (to the hour).
fn offset_changes(tz: Tz, year: i32) -> Vec<DateTime<Utc>> {
    use chrono::Offset;
    let start = Utc.with_ymd_and_hms(year, 1, 1, 0, 0, 0).unwrap();
    let offset = |t: DateTime<Utc>| t.with_timezone(&tz).offset().fix();
    (0..(366 * 24))
        .map(|h| start + chrono::Duration::hours(h))
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|pair| offset(pair[0]) != offset(pair[1]))
        .map(|pair| pair[1])
        .collect()
}

#[test]
fn the_dst_zones_under_test_change_their_offset_twice_a_year() {
    for tz in &ZONES[..7] {
        assert_eq!(offset_changes(*tz, 2025).len(), 2, "{}", tz.name());
    }
    assert!(offset_changes(Tz::UTC, 2025).is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_next_firing_is_strictly_after_the_time_asked(spec in any_spec(), after in time()) {
        if let Some(next) = spec.next_after(after) {
            prop_assert!(next > after, "{spec}: {next} is not after {after}");
        }
    }

    #[test]
    fn a_later_time_never_gets_an_earlier_next_firing(spec in any_spec(), a in time(), b in time()) {
        let (early, late) = if a <= b { (a, b) } else { (b, a) };
        match (spec.next_after(early), spec.next_after(late)) {
            (Some(x), Some(y)) => prop_assert!(x <= y, "{spec}: next({early})={x} > next({late})={y}"),
            (None, Some(y)) => prop_assert!(false, "{spec}: none after {early} but {y} after {late}"),
            _ => {}
        }
    }

    #[test]
    fn no_firing_lies_between_the_latest_and_the_next(spec in any_spec(), t in time()) {
        let next = spec.next_after(t);
        if let Some(latest) = spec.latest_at_or_before(t) {
            prop_assert!(latest <= t);
            prop_assert_eq!(spec.next_after(latest).map(|n| n > t), next.map(|_| true));
            if let Some(next) = next {
                prop_assert_eq!(spec.next_after(latest), Some(next));
            }
        }
    }

    #[test]
    fn every_is_the_anchor_plus_whole_intervals(interval in 1u64..=31_622_400, anchor in time(), after in time()) {
        let spec = every(interval, anchor);
        let anchor_s = anchor.timestamp();
        let since = after.timestamp() - anchor_s;
        let k = (since.div_euclid(interval as i64) + 1).max(1);
        let expected = Utc.timestamp_opt(anchor_s + k * interval as i64, 0).single().unwrap();
        prop_assert_eq!(spec.next_after(after), Some(expected));
        // And the count of firings in any window is the arithmetic too.
        let (count, exact) = spec.count_between(anchor, after, 1);
        prop_assert!(exact);
        prop_assert_eq!(count, if since <= 0 { 0 } else { (since as u64) / interval });
    }

    #[test]
    fn a_daily_cron_fires_once_on_every_local_day_across_dst(
        minute in 0u32..60,
        hour in 0u32..24,
        zone in 0..ZONES.len(),
        start in time(),
    ) {
        let tz = ZONES[zone];
        let spec = cron(&format!("{minute} {hour} * * *"), tz);
        let mut at = start;
        let mut previous: Option<DateTime<Utc>> = None;
        // A bit over a year: every zone passes both of its changes.
        for _ in 0..380 {
            let next = spec.next_after(at).expect("a daily job always fires");
            if let Some(previous) = previous {
                prop_assert!(next > previous);
                let days = next.with_timezone(&tz).date_naive() - previous.with_timezone(&tz).date_naive();
                prop_assert_eq!(days.num_days(), 1, "{} {} then {}", tz.name(), previous.with_timezone(&tz), next.with_timezone(&tz));
            }
            // A nonexistent wall time is never returned: the local time round-trips.
            let local = next.with_timezone(&tz);
            prop_assert!(tz.from_local_datetime(&local.naive_local()).earliest().is_some());
            previous = Some(next);
            at = next;
        }
    }

    #[test]
    fn a_quarter_hourly_cron_stays_900_seconds_apart_through_dst(
        zone in 0..ZONES.len(),
        year in 2024i32..2028,
        which in 0usize..2,
        before_s in 0i64..(36 * 3600),
    ) {
        // Every zone here has offsets and shifts in whole quarter hours, so wall-clock quarter
        // hours are real quarter hours: a skipped hour fires nothing, a repeated one twice.
        let tz = ZONES[zone];
        let changes = offset_changes(tz, year);
        let start = match changes.get(which % changes.len().max(1)) {
            Some(change) => *change - chrono::Duration::seconds(before_s),
            None => tz.with_ymd_and_hms(year, 6, 1, 0, 0, 0).earliest().unwrap().with_timezone(&Utc),
        };
        let spec = cron("*/15 * * * *", tz);
        let mut at = spec.next_after(start).unwrap();
        for _ in 0..(4 * 48) {
            let next = spec.next_after(at).unwrap();
            prop_assert_eq!((next - at).num_seconds(), 900, "{} at {}", tz.name(), at.with_timezone(&tz));
            at = next;
        }
    }

    #[test]
    fn a_tick_runs_at_most_the_latest_firing_and_accounts_for_every_other(
        interval in 1u64..=86_400,
        anchor in time(),
        gap in 0i64..(400 * 86_400),
        max_age in 1u64..=604_800,
    ) {
        let spec = every(interval, anchor);
        let now = anchor + chrono::Duration::seconds(gap);
        let decided = due(&spec, anchor, now, Duration::from_secs(max_age));
        let (in_window, _) = spec.count_between(anchor, now, 1);
        let ran = u64::from(decided.run.is_some());
        let skipped = decided.skipped.map_or(0, |s| s.count);
        prop_assert_eq!(ran + skipped, in_window);
        if let Some(run) = decided.run {
            prop_assert!(run <= now && run > anchor);
            prop_assert!((now - run).num_seconds() as u64 <= max_age);
            prop_assert_eq!(decided.cursor, run);
        }
        if let Some(skipped) = decided.skipped {
            prop_assert!(skipped.first <= skipped.last);
            prop_assert!(skipped.last <= decided.cursor);
        }
        prop_assert!(decided.next.unwrap() > now);
        // Handled firings are not handled again.
        let again = due(&spec, decided.cursor, now, Duration::from_secs(max_age));
        prop_assert_eq!(again.run, None);
        prop_assert_eq!(again.skipped, None);
    }

    #[test]
    fn every_day_of_a_fixed_job_in_a_zone_with_dst_is_a_firing(year in 2024i32..2028, zone in 0..ZONES.len()) {
        // The calendar year, day by day: each local day has exactly one 02:30 firing, the
        // spring-forward day included (after the gap) and the fall-back day once only.
        let tz = ZONES[zone];
        let spec = cron("30 2 * * *", tz);
        let start = tz.with_ymd_and_hms(year, 1, 1, 0, 0, 0).earliest().unwrap().with_timezone(&Utc);
        let mut at = start;
        let mut days = 0;
        loop {
            let next = spec.next_after(at).unwrap();
            if next.with_timezone(&tz).year() != year {
                break;
            }
            days += 1;
            at = next;
        }
        let expected = if chrono::NaiveDate::from_ymd_opt(year, 12, 31).unwrap().ordinal() == 366 { 366 } else { 365 };
        prop_assert_eq!(days, expected);
    }
}
