//! Which firings are due now, and which were missed: one decision from (the last firing
//! handled, now, the spec), the same on a normal tick and after the service was down.
//!
//! A schedule keeps a cursor: the latest firing it has handled (run or skipped), or its
//! creation. At a tick, the firings in `(cursor, now]` are the ones not handled yet. The
//! latest of them runs, once, if it is younger than `missed_max_age`; every other one, and
//! that one too when it is older, is recorded as skipped: one record with how many and from
//! when to when, never one per firing. Counting is arithmetic for `every` and `at`, and
//! capped for `cron`, so a service down for a year under `every = "1s"` decides at once.

use std::time::Duration;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::spec::Spec;

/// The most missed cron firings counted one by one; past it the count is a lower bound.
pub const MAX_COUNTED_CRON_FIRINGS: u64 = 1_000;

/// Firings missed and not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Skipped {
    /// The first one.
    #[schemars(with = "String")]
    pub first: DateTime<Utc>,
    /// The last one.
    #[schemars(with = "String")]
    pub last: DateTime<Utc>,
    /// How many (at least this many when `exact` is false).
    pub count: u64,
    /// Whether `count` is exact; a cron schedule counts at most
    /// [`MAX_COUNTED_CRON_FIRINGS`].
    pub exact: bool,
}

/// What to do at one tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// The firing to run now, if any (at most one, whatever was missed).
    pub run: Option<DateTime<Utc>>,
    /// Firings to record as skipped, if any.
    pub skipped: Option<Skipped>,
    /// The cursor once this tick is handled: the latest firing at or before now, or the old
    /// cursor when none came due. Store it in the same write as the claim of `run`, so a
    /// firing is handled once.
    pub cursor: DateTime<Utc>,
    /// The next firing after now (when to wake up next), if any.
    pub next: Option<DateTime<Utc>>,
}

/// The decision at `now` for a schedule whose cursor is `cursor`.
pub fn due(
    spec: &Spec,
    cursor: DateTime<Utc>,
    now: DateTime<Utc>,
    missed_max_age: Duration,
) -> Due {
    let next = spec.next_after(now.max(cursor));
    let Some(latest) = spec
        .latest_at_or_before(now)
        .filter(|latest| *latest > cursor)
    else {
        return Due {
            run: None,
            skipped: None,
            cursor,
            next,
        };
    };
    let age = (now - latest).to_std().unwrap_or_default();
    let run = (age <= missed_max_age).then_some(latest);
    // Every firing in (cursor, latest] is unhandled; latest itself is the one that may run.
    let skip_until = match run {
        Some(_) => latest
            .checked_sub_signed(chrono::TimeDelta::nanoseconds(1))
            .unwrap_or(latest),
        None => latest,
    };
    let (skipped_count, exact) = spec.count_between(cursor, skip_until, MAX_COUNTED_CRON_FIRINGS);
    let skipped = if skipped_count == 0 {
        None
    } else {
        let first = spec.next_after(cursor).unwrap_or(latest);
        let last = if run.is_some() {
            spec.latest_before(latest).unwrap_or(first)
        } else {
            latest
        };
        Some(Skipped {
            first,
            last,
            count: skipped_count,
            exact,
        })
    };
    Due {
        run,
        skipped,
        cursor: latest,
        next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::tests::utc;
    use crate::spec::{Anchor, PastAt, When};

    fn every(text: &str, anchor: &str) -> Spec {
        let when = When {
            every: Some(text.into()),
            ..When::default()
        };
        Spec::parse(&when, utc(anchor), PastAt::Refuse, Anchor::At(utc(anchor))).unwrap()
    }

    const TEN_MINUTES: Duration = Duration::from_secs(600);

    #[test]
    fn a_firing_on_time_runs_and_nothing_is_skipped() {
        let spec = every("2s", "2026-03-01T12:00:00Z");
        let due = due(
            &spec,
            utc("2026-03-01T12:00:00Z"),
            utc("2026-03-01T12:00:02.010Z"),
            TEN_MINUTES,
        );
        assert_eq!(due.run, Some(utc("2026-03-01T12:00:02Z")));
        assert_eq!(due.skipped, None);
        assert_eq!(due.cursor, utc("2026-03-01T12:00:02Z"));
        assert_eq!(due.next, Some(utc("2026-03-01T12:00:04Z")));
    }

    #[test]
    fn before_the_first_firing_nothing_is_due() {
        let spec = every("1h", "2026-03-01T12:00:00Z");
        let due = due(
            &spec,
            utc("2026-03-01T12:00:00Z"),
            utc("2026-03-01T12:30:00Z"),
            TEN_MINUTES,
        );
        assert_eq!(
            due,
            Due {
                run: None,
                skipped: None,
                cursor: utc("2026-03-01T12:00:00Z"),
                next: Some(utc("2026-03-01T13:00:00Z"))
            }
        );
    }

    #[test]
    fn a_firing_missed_while_down_runs_once_on_start_when_young_enough() {
        let spec = every("1h", "2026-03-01T12:00:00Z");
        // Down from 12:30 to 15:05: 13:00, 14:00 and 15:00 were missed; 15:00 is 5 minutes old.
        let due = due(
            &spec,
            utc("2026-03-01T12:00:00Z"),
            utc("2026-03-01T15:05:00Z"),
            TEN_MINUTES,
        );
        assert_eq!(due.run, Some(utc("2026-03-01T15:00:00Z")));
        assert_eq!(
            due.skipped,
            Some(Skipped {
                first: utc("2026-03-01T13:00:00Z"),
                last: utc("2026-03-01T14:00:00Z"),
                count: 2,
                exact: true
            })
        );
        assert_eq!(due.cursor, utc("2026-03-01T15:00:00Z"));
    }

    #[test]
    fn a_firing_older_than_the_max_age_is_skipped_not_run() {
        let spec = every("1h", "2026-03-01T12:00:00Z");
        let due = due(
            &spec,
            utc("2026-03-01T12:00:00Z"),
            utc("2026-03-01T13:30:00Z"),
            TEN_MINUTES,
        );
        assert_eq!(due.run, None);
        assert_eq!(
            due.skipped,
            Some(Skipped {
                first: utc("2026-03-01T13:00:00Z"),
                last: utc("2026-03-01T13:00:00Z"),
                count: 1,
                exact: true
            })
        );
        assert_eq!(due.cursor, utc("2026-03-01T13:00:00Z"));
        assert_eq!(due.next, Some(utc("2026-03-01T14:00:00Z")));
    }

    #[test]
    fn a_year_down_under_every_second_is_decided_at_once() {
        let spec = every("1s", "2025-03-01T12:00:00Z");
        let now = utc("2026-03-01T12:00:00.5Z");
        let due = due(&spec, utc("2025-03-01T12:00:00Z"), now, TEN_MINUTES);
        assert_eq!(due.run, Some(utc("2026-03-01T12:00:00Z")));
        let skipped = due.skipped.unwrap();
        assert_eq!(skipped.count, 365 * 86_400 - 1);
        assert!(skipped.exact);
        assert_eq!(skipped.first, utc("2025-03-01T12:00:01Z"));
        assert_eq!(skipped.last, utc("2026-03-01T11:59:59Z"));
    }

    #[test]
    fn a_missed_cron_run_is_counted_up_to_the_cap() {
        let when = When {
            cron: Some("* * * * *".into()),
            ..When::default()
        };
        let spec = Spec::parse(
            &when,
            utc("2026-03-01T00:00:00Z"),
            PastAt::Refuse,
            Anchor::Epoch,
        )
        .unwrap();
        let due = due(
            &spec,
            utc("2026-03-01T00:00:00Z"),
            utc("2026-03-08T00:00:30Z"),
            TEN_MINUTES,
        );
        assert_eq!(due.run, Some(utc("2026-03-08T00:00:00Z")));
        let skipped = due.skipped.unwrap();
        assert_eq!(
            (skipped.count, skipped.exact),
            (MAX_COUNTED_CRON_FIRINGS, false)
        );
        assert_eq!(skipped.first, utc("2026-03-01T00:01:00Z"));
        assert_eq!(skipped.last, utc("2026-03-07T23:59:00Z"));
    }

    #[test]
    fn an_at_schedule_fires_once_and_then_never() {
        let when = When {
            at: Some("2026-03-01T13:00:00Z".into()),
            ..When::default()
        };
        let spec = Spec::parse(
            &when,
            utc("2026-03-01T12:00:00Z"),
            PastAt::Refuse,
            Anchor::Epoch,
        )
        .unwrap();
        let first = due(
            &spec,
            utc("2026-03-01T12:00:00Z"),
            utc("2026-03-01T13:00:01Z"),
            TEN_MINUTES,
        );
        assert_eq!(first.run, Some(utc("2026-03-01T13:00:00Z")));
        assert_eq!(first.next, None);
        let again = due(
            &spec,
            first.cursor,
            utc("2026-03-01T13:00:05Z"),
            TEN_MINUTES,
        );
        assert_eq!(again.run, None);
        assert_eq!(again.skipped, None);
    }
}
