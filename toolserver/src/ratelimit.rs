//! Rate limits (GCRA, via governor): per caller per callable, and per channel for mutations.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota as GovernorQuota, RateLimiter};
use switchboard_config::{Quota, RateLimits};

use crate::error::ToolError;

type Keyed = DefaultKeyedRateLimiter<String>;

/// The server's limiters. Keys are pruned by [`Limits::prune`], which the server runs on an
/// interval so memory stays bounded.
pub struct Limits {
    per_caller: Keyed,
    per_channel: Keyed,
    clock: DefaultClock,
}

fn governor_quota(quota: Quota) -> GovernorQuota {
    let per_minute = NonZeroU32::new(quota.per_minute).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(quota.burst).unwrap_or(NonZeroU32::MIN);
    GovernorQuota::per_minute(per_minute).allow_burst(burst)
}

impl Limits {
    pub fn new(config: &RateLimits) -> Self {
        Limits {
            per_caller: RateLimiter::keyed(governor_quota(config.per_caller)),
            per_channel: RateLimiter::keyed(governor_quota(config.per_channel_mutating)),
            clock: DefaultClock::default(),
        }
    }

    fn check(&self, limiter: &Keyed, key: String) -> Result<(), Duration> {
        limiter
            .check_key(&key)
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    pub fn check_caller(&self, caller: &str, tool_id: &str) -> Result<(), ToolError> {
        self.check(&self.per_caller, format!("{caller}|{tool_id}"))
            .map_err(|wait| {
                ToolError::rate_limited(
                    "rate_limited",
                    format!(
                        "Too many {tool_id} calls from this caller; retry after {} ms",
                        wait.as_millis()
                    ),
                    wait,
                )
            })
    }

    pub fn check_channel(&self, channel_id: u64) -> Result<(), ToolError> {
        self.check(&self.per_channel, channel_id.to_string())
            .map_err(|wait| {
                ToolError::rate_limited(
                    "channel_rate_limited",
                    format!(
                        "Too many changes to channel {channel_id}; retry after {} ms",
                        wait.as_millis()
                    ),
                    wait,
                )
            })
    }

    /// Forgets keys whose state has fully recovered; returns the keys left.
    pub fn prune(&self) -> usize {
        self.per_caller.retain_recent();
        self.per_channel.retain_recent();
        self.per_caller.shrink_to_fit();
        self.per_channel.shrink_to_fit();
        self.per_caller.len() + self.per_channel.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(burst: u32) -> Limits {
        Limits::new(&RateLimits {
            per_caller: Quota {
                per_minute: 60,
                burst,
            },
            per_channel_mutating: Quota {
                per_minute: 60,
                burst,
            },
        })
    }

    #[test]
    fn burst_is_allowed_then_refused_with_a_wait() {
        let limits = limits(2);
        assert!(limits.check_caller("op", "surface.help").is_ok());
        assert!(limits.check_caller("op", "surface.help").is_ok());
        let error = limits.check_caller("op", "surface.help").unwrap_err();
        assert_eq!(error.status().as_u16(), 429);
        assert!(error.retry_after.is_some_and(|w| w > Duration::ZERO));
        // Another callable and another caller have their own budgets.
        assert!(limits.check_caller("op", "surface.sessions.list").is_ok());
        assert!(limits.check_caller("cap:1", "surface.help").is_ok());
    }

    #[test]
    fn pruning_keeps_memory_bounded() {
        let limits = limits(5);
        for i in 0..1000 {
            let _ = limits.check_channel(i);
        }
        assert_eq!(limits.prune(), 1000, "keys still recovering are kept");
    }
}
