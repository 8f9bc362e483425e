//! Logging refusals without flooding the log: every call is a DEBUG line, and a burst of
//! refusals (rate limits, denials) of one caller with one code is one INFO line per window,
//! with how many there were.

use std::time::{Duration, Instant};

use dashmap::DashMap;

/// One INFO line per caller and code at most this often.
const WINDOW: Duration = Duration::from_secs(10);
/// Most bursts tracked at once; past it, the oldest are forgotten (their counts are lost, never
/// the calls).
const CAPACITY: usize = 4096;

#[derive(Debug)]
struct Burst {
    /// When the last INFO line for this key was written.
    logged_at: Instant,
    /// Refusals since then.
    unlogged: u64,
}

/// Counts refusals per (caller, code) and says when one deserves an INFO line.
#[derive(Debug, Default)]
pub struct RefusalLog {
    bursts: DashMap<(String, String), Burst>,
}

impl RefusalLog {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one refusal; returns how many refusals the INFO line written now should report
    /// (this one included), or `None` when this one is counted for a later line.
    pub fn record(&self, caller: &str, code: &str, now: Instant) -> Option<u64> {
        let key = (caller.to_owned(), code.to_owned());
        if let Some(mut burst) = self.bursts.get_mut(&key) {
            burst.unlogged += 1;
            if now.duration_since(burst.logged_at) < WINDOW {
                return None;
            }
            let count = burst.unlogged;
            burst.unlogged = 0;
            burst.logged_at = now;
            return Some(count);
        }
        if self.bursts.len() >= CAPACITY {
            self.prune(now);
        }
        self.bursts.insert(
            key,
            Burst {
                logged_at: now,
                unlogged: 0,
            },
        );
        Some(1)
    }

    /// Forgets bursts quiet for a whole window (and, when still full, every burst).
    pub fn prune(&self, now: Instant) {
        self.bursts
            .retain(|_, burst| now.duration_since(burst.logged_at) < WINDOW);
        if self.bursts.len() >= CAPACITY {
            self.bursts.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_one_line_then_one_line_per_window_with_its_count() {
        let log = RefusalLog::new();
        let start = Instant::now();
        assert_eq!(log.record("cap:1", "rate_limited", start), Some(1));
        for i in 1..1000 {
            let at = start + Duration::from_millis(i);
            assert_eq!(log.record("cap:1", "rate_limited", at), None);
        }
        // Another caller or code is its own burst.
        assert_eq!(log.record("cap:2", "rate_limited", start), Some(1));
        assert_eq!(log.record("cap:1", "out_of_scope", start), Some(1));
        let later = start + WINDOW + Duration::from_millis(1);
        assert_eq!(log.record("cap:1", "rate_limited", later), Some(1000));
        assert_eq!(log.record("cap:1", "rate_limited", later), None);
    }

    #[test]
    fn bursts_stay_bounded() {
        let log = RefusalLog::new();
        let now = Instant::now();
        for i in 0..(CAPACITY * 3) {
            log.record(&format!("cap:{i}"), "denied", now);
        }
        assert!(log.bursts.len() <= CAPACITY);
    }
}
