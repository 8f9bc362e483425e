//! The service's one wall clock: workflows (created, finished, deadlines), the store's prune of
//! finished workflows and the bot's message nonces all read it here. (Elapsed time is measured
//! with `Instant`; the fake Discord keeps a clock of its own, as the independent system it
//! models.)

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, in milliseconds since the Unix epoch (0 if the system clock is set before it).
pub fn now_ms() -> u64 {
    u64::try_from(since_epoch().as_millis()).unwrap_or(u64::MAX)
}

/// Now, in microseconds since the Unix epoch (0 if the system clock is set before it), where
/// milliseconds are too coarse (nonces that must differ across quick restarts).
pub fn now_micros() -> u64 {
    u64::try_from(since_epoch().as_micros()).unwrap_or(u64::MAX)
}

fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_resolutions_read_the_same_clock() {
        let ms = now_ms();
        let micros = now_micros();
        assert!(ms > 1_700_000_000_000, "{ms}");
        assert!((micros / 1000).abs_diff(ms) < 60_000, "{micros} {ms}");
    }
}
