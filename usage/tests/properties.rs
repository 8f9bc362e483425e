//! The properties budgets and reports depend on: a report loses and invents nothing, a cap
//! refuses exactly at or over its limit and more spending never un-refuses, a run crosses a
//! cap exactly when its usage brings a key there, windows hold `now` in any zone, and money
//! is exact.

use chrono::{DateTime, Datelike, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use proptest::prelude::*;
use switchboard_usage::{
    check, crossed, format_usd, parse_usd, report, windows, Budgets, By, Caps, Decision, Price,
    Scope, Spending, Spent, Usage, UsageRecord,
};

const ZONES: [Tz; 6] = [
    Tz::UTC,
    Tz::Europe__Paris,
    Tz::America__New_York,
    Tz::Australia__Lord_Howe,
    Tz::America__Havana,
    Tz::Asia__Kathmandu,
];

fn time() -> impl Strategy<Value = DateTime<Utc>> {
    (1_704_067_200i64..1_830_297_600).prop_map(|s| Utc.timestamp_opt(s, 0).single().unwrap())
}

fn record() -> impl Strategy<Value = UsageRecord> {
    (
        time(),
        prop::option::of("[a-c]"),
        prop::option::of("[x-z]"),
        prop::option::of("g[12]"),
        "(support|release)",
        0u64..1_000_000,
        0u64..1_000_000,
        0u64..10_000_000,
        any::<bool>(),
    )
        .prop_map(
            |(at, user, session, guild, agent, p, c, micros, estimated)| UsageRecord {
                at,
                run_id: "r".into(),
                user,
                session,
                guild,
                agent,
                usage: Usage {
                    prompt_tokens: p,
                    completion_tokens: c,
                    estimated,
                },
                micros,
            },
        )
}

fn by() -> impl Strategy<Value = By> {
    prop_oneof![
        Just(By::User),
        Just(By::Session),
        Just(By::Guild),
        Just(By::Agent),
        Just(By::Day)
    ]
}

fn caps() -> impl Strategy<Value = Caps> {
    (
        prop::option::of(1u64..1_000_000),
        prop::option::of(1u64..10_000_000),
        prop::option::of(1u64..5_000_000),
        prop::option::of(1u64..50_000_000),
    )
        .prop_map(|(a, b, c, d)| Caps {
            tokens_per_day: a,
            tokens_per_month: b,
            usd_per_day: c,
            usd_per_month: d,
        })
}

fn spent() -> impl Strategy<Value = Spent> {
    (0u64..12_000_000, 0u64..60_000_000).prop_map(|(tokens, micros)| Spent { tokens, micros })
}

fn under_every_cap(caps: &Caps, day: Spent, month: Spent) -> bool {
    caps.tokens_per_day.is_none_or(|l| day.tokens < l)
        && caps.tokens_per_month.is_none_or(|l| month.tokens < l)
        && caps.usd_per_day.is_none_or(|l| day.micros < l)
        && caps.usd_per_month.is_none_or(|l| month.micros < l)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_report_sums_every_row_once_whatever_it_is_by(records in prop::collection::vec(record(), 0..60), by in by(), zone in 0..ZONES.len()) {
        let report = report(&records, by, None, ZONES[zone]);
        let tokens: u64 = report.rows.iter().map(switchboard_usage::ReportRow::total_tokens).sum();
        let micros: u64 = report.rows.iter().map(|r| r.micros).sum();
        prop_assert_eq!(tokens, records.iter().map(|r| r.usage.total()).sum::<u64>());
        prop_assert_eq!(micros, records.iter().map(|r| r.micros).sum::<u64>());
        let mut keys: Vec<_> = report.rows.iter().map(|r| r.key.clone()).collect();
        let before = keys.len();
        keys.dedup();
        prop_assert_eq!(keys.len(), before, "a key appears twice");
        if let Some(pos) = report.rows.iter().position(|r| r.key.is_none()) {
            prop_assert_eq!(pos, report.rows.len() - 1);
        }
        let estimated = records.iter().any(|r| r.usage.estimated);
        prop_assert_eq!(report.rows.iter().any(|r| r.estimated), estimated);
    }

    #[test]
    fn a_cap_refuses_exactly_at_or_over_its_limit(caps in caps(), day in spent(), extra in spent(), scope in 0usize..4) {
        let scope = Scope::ALL[scope];
        let mut budgets = Budgets::default();
        match scope {
            Scope::User => budgets.user = caps,
            Scope::Session => budgets.session = caps,
            Scope::Guild => budgets.guild = caps,
            Scope::Agent => budgets.agent = caps,
        }
        let month = day.plus(extra);
        let windows = windows(Utc.with_ymd_and_hms(2026, 3, 10, 12, 0, 0).unwrap(), Tz::UTC);
        let spending = [Spending { scope, key: "k".into(), day, month }];
        let decision = check(&budgets, &spending, &windows);
        prop_assert_eq!(decision == Decision::Allowed, under_every_cap(&caps, day, month));
        if let Decision::Refused(refusal) = &decision {
            prop_assert!(refusal.spent >= refusal.cap.limit);
            prop_assert!(refusal.resets_at > windows.day.start);
            // More spending never turns a refusal into an allowance.
            let more = [Spending { scope, key: "k".into(), day: day.plus(extra), month: month.plus(extra) }];
            prop_assert!(check(&budgets, &more, &windows) != Decision::Allowed);
        }
        // A run crosses a cap exactly when its usage brings the key to one.
        if decision == Decision::Allowed {
            let crossed = crossed(&budgets, &spending, extra, &windows);
            let reached = !under_every_cap(&caps, day.plus(extra), month.plus(extra));
            prop_assert_eq!(crossed.is_some(), reached);
            if let Some(refusal) = crossed {
                prop_assert!(refusal.during_run);
            }
        }
    }

    #[test]
    fn now_is_inside_its_day_and_month_in_any_zone(now in time(), zone in 0..ZONES.len()) {
        let tz = ZONES[zone];
        let w = windows(now, tz);
        prop_assert!(w.day.start <= now && now < w.day.end);
        prop_assert!(w.month.start <= w.day.start && w.day.end <= w.month.end);
        let hours = (w.day.end - w.day.start).num_minutes();
        prop_assert!((22 * 60..=25 * 60).contains(&hours), "a day of {hours} minutes");
        let first = w.month.start.with_timezone(&tz);
        prop_assert_eq!(first.day(), 1);
        prop_assert!(first.hour() <= 1, "{first}");
        // The next day starts where this one ends.
        prop_assert_eq!(windows(w.day.end, tz).day.start, w.day.end);
    }

    #[test]
    fn money_prints_and_reads_back_exactly(micros in 0u64..=1_000_000_000_000_000) {
        let printed = format_usd(micros);
        let bare: String = printed.trim_start_matches('$').chars().filter(|c| *c != ',').collect();
        prop_assert_eq!(parse_usd(&bare), Ok(micros));
    }

    #[test]
    fn cost_grows_with_tokens_and_never_undercounts(p in 0u64..u32::MAX as u64, c in 0u64..u32::MAX as u64, more in 0u64..1000, pin in 0u64..100_000_000, pout in 0u64..100_000_000) {
        let price = Price { in_micros_per_mtok: pin, out_micros_per_mtok: pout };
        let cost = Usage::reported(p, c).cost_micros(price);
        prop_assert!(Usage::reported(p + more, c).cost_micros(price) >= cost);
        let exact = u128::from(p) * u128::from(pin) + u128::from(c) * u128::from(pout);
        prop_assert!(u128::from(cost) * 1_000_000 >= exact);
        prop_assert!(u128::from(cost) * 1_000_000 < exact + 1_000_000);
    }
}
