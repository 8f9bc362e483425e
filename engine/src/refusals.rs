//! Refusals without filling the disk or the log.
//!
//! Every refused call spends its caller's rate budget before any work (the pipeline's first
//! stage after scope), so refusals past the budget answer `rate_limited` at once. Each is still
//! audited, but a flood must not become a flood of rows: per caller, callable and code, the
//! first [`ROWS_PER_WINDOW`] refusals of a [`WINDOW`] are rows of their own, and the rest are
//! counted into one row — the first counted call's, with the count — written when the window
//! ends (by the next refusal of that key, or [`RefusalLog::flush`], which the server runs every
//! second and at shutdown). So the log grows by at most `ROWS_PER_WINDOW + 1` rows per key and
//! window, however many calls are refused; a call that was not refused always has its own row.
//! One INFO line (target `audit`) goes with a burst's first refusal and one with its count.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use dashmap::DashMap;

use crate::governance::AuditRow;

/// How long a burst's window lasts.
pub const WINDOW: Duration = Duration::from_secs(10);
/// Refusals of one caller, callable and code kept as rows of their own per window.
pub const ROWS_PER_WINDOW: u32 = 10;
/// Most bursts tracked at once; past it every pending count is written and the table starts
/// afresh (counts are never dropped).
const CAPACITY: usize = 4096;

/// (caller, callable, code).
type Key = (Cow<'static, str>, Cow<'static, str>, Cow<'static, str>);

#[derive(Debug)]
struct Burst {
    started: Instant,
    rows: u32,
    /// The first counted refusal's row, its `count` the number counted so far.
    counted: Option<AuditRow>,
}

/// What to do with one refusal.
#[derive(Debug, Default)]
pub struct Recorded {
    /// Rows to keep now: this refusal's own, and a finished window's count row before it.
    pub rows: Vec<AuditRow>,
    /// It opens a burst (the first of its key in a window): worth an INFO line.
    pub opens_burst: bool,
}

/// The bursts of refusals being counted.
#[derive(Debug, Default)]
pub struct RefusalLog {
    bursts: DashMap<Key, Burst>,
}

impl RefusalLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one refusal, its audit row being `row` (its `code` set): what to keep now.
    pub fn record(&self, row: AuditRow, now: Instant) -> Recorded {
        let key: Key = (
            row.caller.clone(),
            row.tool.clone(),
            row.code.clone().unwrap_or(Cow::Borrowed("-")),
        );
        let mut recorded = Recorded::default();
        if let Some(mut burst) = self.bursts.get_mut(&key) {
            if now.saturating_duration_since(burst.started) >= WINDOW {
                recorded.rows.extend(burst.counted.take());
                burst.started = now;
                burst.rows = 1;
                recorded.rows.push(row);
                recorded.opens_burst = true;
            } else if burst.rows < ROWS_PER_WINDOW {
                burst.rows += 1;
                recorded.rows.push(row);
            } else {
                match &mut burst.counted {
                    Some(counted) => counted.count = counted.count.saturating_add(1),
                    None => burst.counted = Some(row),
                }
            }
            return recorded;
        }
        if self.bursts.len() >= CAPACITY {
            recorded.rows.extend(self.flush(now, true));
        }
        self.bursts.insert(
            key,
            Burst {
                started: now,
                rows: 1,
                counted: None,
            },
        );
        recorded.rows.push(row);
        recorded.opens_burst = true;
        recorded
    }

    /// The count rows of windows that have ended (`all`: of every window, ended or not), and
    /// the bursts forgotten with them.
    pub fn flush(&self, now: Instant, all: bool) -> Vec<AuditRow> {
        let mut rows = Vec::new();
        self.bursts.retain(|_, burst| {
            let ended = all || now.saturating_duration_since(burst.started) >= WINDOW;
            if ended {
                rows.extend(burst.counted.take());
            }
            !ended
        });
        rows.sort_by_key(|row| row.time_ms);
        rows
    }

    /// Bursts being tracked.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.bursts.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(caller: &str, tool: &'static str, code: &'static str, time_ms: u64) -> AuditRow {
        AuditRow {
            time_ms,
            caller: Cow::Owned(caller.to_owned()),
            run: None,
            requested_by: None,
            tool: Cow::Borrowed(tool),
            sessions: Vec::new(),
            input: serde_json::Value::Null,
            decision: Cow::Borrowed("-"),
            decided_by: None,
            outcome: Cow::Borrowed("unavailable"),
            code: Some(Cow::Borrowed(code)),
            duration_ms: 0,
            count: 1,
            events: Vec::new(),
        }
    }

    #[test]
    fn a_burst_keeps_a_few_rows_then_one_counted_row_per_window() {
        let log = RefusalLog::new();
        let start = Instant::now();
        let mut kept = Vec::new();
        for i in 0..100_000u64 {
            let at = start + Duration::from_micros(i * 10);
            let recorded = log.record(refusal("cap:1", "-", "rate_limited", i), at);
            assert_eq!(recorded.opens_burst, i == 0);
            kept.extend(recorded.rows);
        }
        assert_eq!(kept.len(), ROWS_PER_WINDOW as usize);
        assert!(kept.iter().all(|row| row.count == 1));
        // Another caller, callable or code is its own burst.
        assert_eq!(
            log.record(refusal("cap:2", "-", "rate_limited", 0), start)
                .rows
                .len(),
            1
        );
        assert_eq!(
            log.record(refusal("cap:1", "surface.help", "rate_limited", 0), start)
                .rows
                .len(),
            1
        );
        assert_eq!(
            log.record(refusal("cap:1", "-", "unknown_tool", 0), start)
                .rows
                .len(),
            1
        );
        assert!(
            log.flush(start + Duration::from_secs(1), false).is_empty(),
            "the window is open"
        );
        // The window ends: one row counts the rest, the first counted call's.
        let counted = log.flush(start + WINDOW, false);
        assert_eq!(counted.len(), 1);
        assert_eq!(counted[0].count, 100_000 - u64::from(ROWS_PER_WINDOW));
        assert_eq!(counted[0].time_ms, u64::from(ROWS_PER_WINDOW));
        assert_eq!(log.len(), 0, "ended windows are forgotten");
    }

    #[test]
    fn the_next_refusal_after_a_window_writes_its_count_first() {
        let log = RefusalLog::new();
        let start = Instant::now();
        for i in 0..25 {
            log.record(refusal("token:ci", "-", "unknown_tool", i), start);
        }
        let later = log.record(refusal("token:ci", "-", "unknown_tool", 99), start + WINDOW);
        let counts: Vec<u64> = later.rows.iter().map(|row| row.count).collect();
        assert_eq!(counts, [15, 1]);
        assert!(later.opens_burst);
        // At shutdown every pending count is written, ended or not.
        for i in 0..30 {
            log.record(
                refusal("token:ci", "-", "unknown_tool", 100 + i),
                start + WINDOW,
            );
        }
        let flushed = log.flush(start + WINDOW, true);
        assert_eq!(flushed.iter().map(|row| row.count).sum::<u64>(), 21);
    }

    #[test]
    fn bursts_stay_bounded_without_losing_counts() {
        let log = RefusalLog::new();
        let now = Instant::now();
        let mut counted = 0;
        let mut rows = 0u64;
        for round in 0..(ROWS_PER_WINDOW as usize + 3) {
            for i in 0..CAPACITY * 2 {
                let recorded = log.record(
                    refusal(&format!("cap:{i}"), "-", "denied", round as u64),
                    now,
                );
                rows += recorded.rows.iter().map(|row| row.count).sum::<u64>();
                counted += 1;
                assert!(log.len() <= CAPACITY);
            }
        }
        rows += log
            .flush(now, true)
            .iter()
            .map(|row| row.count)
            .sum::<u64>();
        assert_eq!(rows, counted, "every refusal is in some row's count");
    }
}
