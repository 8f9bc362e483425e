//! What the console's health panel shows beyond the gateway's state: the Discord REST
//! client's rate-limit headroom (through [`HeadroomSource`], which the composition root plugs
//! in from the bot, so this crate needs no Discord client) and a few rates sampled from the
//! metrics into a bounded ring ([`Series`]) for the sparklines.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

/// Points kept per sparkline.
pub const SERIES_POINTS: usize = 60;
/// How often the server samples the rates (60 points: the last five minutes).
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// The REST client's rate-limit headroom: the platform's facts, in the engine
/// (`switchboard_engine::headroom`) so the Discord crate reports them without this front.
pub use switchboard_engine::headroom::{
    BucketHeadroom, GlobalHeadroom, HeadroomSource, InvalidHeadroom, RateHeadroom,
    MAX_BUCKETS_SHOWN,
};

/// Running totals the rates are taken from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Calls finished.
    pub calls: u64,
    /// Of which failed.
    pub failed_calls: u64,
    /// Events published into the live feed.
    pub events: u64,
    /// Agent runs finished.
    pub runs: u64,
}

/// One sparkline point: the rates over the interval before `at_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Point {
    /// When it was taken (ms since the epoch).
    pub at_ms: u64,
    /// Calls per second.
    pub calls_per_s: f64,
    /// Failed calls per second.
    pub errors_per_s: f64,
    /// Live-feed events per second.
    pub events_per_s: f64,
    /// Agent runs finished per minute.
    pub runs_per_min: f64,
}

/// The last [`SERIES_POINTS`] points, and the totals the next one is measured from.
#[derive(Debug, Default)]
pub struct Series {
    last: Option<(u64, Counters)>,
    points: VecDeque<Point>,
}

impl Series {
    /// Takes a sample of `totals` at `at_ms`: a new point (the rates since the previous
    /// sample), or `None` for the first sample and for a clock that did not move forward
    /// (which restart the baseline).
    pub fn record(&mut self, at_ms: u64, totals: Counters) -> Option<Point> {
        let previous = self.last.replace((at_ms, totals));
        let (then_ms, then) = previous?;
        if at_ms <= then_ms {
            return None;
        }
        let seconds = (at_ms - then_ms) as f64 / 1000.0;
        let rate = |now: u64, before: u64| now.saturating_sub(before) as f64 / seconds;
        let point = Point {
            at_ms,
            calls_per_s: rate(totals.calls, then.calls),
            errors_per_s: rate(totals.failed_calls, then.failed_calls),
            events_per_s: rate(totals.events, then.events),
            runs_per_min: rate(totals.runs, then.runs) * 60.0,
        };
        if self.points.len() == SERIES_POINTS {
            self.points.pop_front();
        }
        self.points.push_back(point);
        Some(point)
    }

    /// The points, oldest first.
    pub fn points(&self) -> Vec<Point> {
        self.points.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rates_are_taken_between_samples() {
        let mut series = Series::default();
        assert!(series.record(10_000, Counters::default()).is_none());
        let point = series
            .record(
                15_000,
                Counters {
                    calls: 50,
                    failed_calls: 5,
                    events: 100,
                    runs: 1,
                },
            )
            .expect("a point");
        assert_eq!(point.calls_per_s, 10.0);
        assert_eq!(point.errors_per_s, 1.0);
        assert_eq!(point.events_per_s, 20.0);
        assert_eq!(point.runs_per_min, 12.0);
        // A clock that went back restarts the baseline rather than dividing by nothing.
        assert!(series.record(14_000, Counters::default()).is_none());
        assert_eq!(series.points().len(), 1);
    }

    proptest! {
        /// However samples come, the ring holds at most SERIES_POINTS finite, non-negative
        /// rates, oldest first.
        #[test]
        fn the_ring_is_bounded_and_its_rates_finite(
            samples in proptest::collection::vec((0u64..20_000, 0u64..1_000_000, 0u64..1_000_000), 0..300),
        ) {
            let mut series = Series::default();
            let mut at = 0u64;
            for (step, calls, events) in samples {
                at = at.saturating_add(step);
                series.record(at, Counters { calls, failed_calls: calls / 2, events, runs: 0 });
                let points = series.points();
                prop_assert!(points.len() <= SERIES_POINTS);
                for pair in points.windows(2) {
                    prop_assert!(pair[0].at_ms < pair[1].at_ms);
                }
                for point in points {
                    for rate in [point.calls_per_s, point.errors_per_s, point.events_per_s, point.runs_per_min] {
                        prop_assert!(rate.is_finite() && rate >= 0.0);
                    }
                }
            }
        }
    }
}
