//! What the scheduler and `schedule.create` spend: checking a cron schedule (the worst case is
//! one that never fires, searched to croner's limit), the next firing, and a tick after a
//! long outage, against one next-firing lookup as the baseline.
//!
//! Run: `cargo bench -p switchboard-schedule --bench schedule`

use std::hint::black_box;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use criterion::{criterion_group, criterion_main, Criterion};
use switchboard_schedule::{due, Anchor, PastAt, Spec, When};

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
}

fn cron(expr: &str, tz: &str) -> When {
    When {
        cron: Some(expr.to_owned()),
        tz: Some(tz.to_owned()),
        ..When::default()
    }
}

fn parse(when: &When) -> Result<Spec, switchboard_schedule::SpecError> {
    Spec::parse(when, now(), PastAt::Refuse, Anchor::At(now()))
}

fn benches(c: &mut Criterion) {
    let weekdays = cron("30 9 * * 1-5", "Europe/Paris");
    let never = cron("0 0 30 2 *", "UTC");
    let bad_tz = cron("0 9 * * *", "Europe/Pariss");
    c.bench_function("parse cron 30 9 * * 1-5 Europe/Paris", |b| {
        b.iter(|| parse(black_box(&weekdays)));
    });
    c.bench_function("parse cron that never fires (0 0 30 2 *)", |b| {
        b.iter(|| parse(black_box(&never)));
    });
    c.bench_function("parse cron with a mistyped tz (did-you-mean)", |b| {
        b.iter(|| parse(black_box(&bad_tz)));
    });
    let spec = parse(&weekdays).unwrap();
    c.bench_function("next_after cron (baseline)", |b| {
        b.iter(|| spec.next_after(black_box(now())));
    });
    let every = parse(&When {
        every: Some("1s".into()),
        ..When::default()
    })
    .unwrap();
    let a_year_later = now() + chrono::Duration::days(365);
    c.bench_function("due every 1s after a year down", |b| {
        b.iter(|| {
            due(
                &every,
                now(),
                black_box(a_year_later),
                Duration::from_secs(600),
            )
        });
    });
    let minutely = parse(&cron("* * * * *", "UTC")).unwrap();
    c.bench_function(
        "due cron * * * * * after a week down (1,000 counted)",
        |b| {
            b.iter(|| {
                due(
                    &minutely,
                    now(),
                    black_box(now() + chrono::Duration::days(7)),
                    Duration::from_secs(600),
                )
            });
        },
    );
}

criterion_group!(group, benches);
criterion_main!(group);
