//! Rate limits (GCRA, via governor): per caller per callable, and per channel for mutations.

use protocol::ErrorCode;
use std::num::NonZeroU32;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota as GovernorQuota, RateLimiter};
use switchboard_config::{Quota, RateLimits};

use crate::auth::CallerKey;
use crate::error::ToolError;

type Keyed<K> = DefaultKeyedRateLimiter<K>;

/// The budget key of every name a caller may not call (unknown, or out of its scope): one per
/// caller, whatever names it tries.
pub(crate) const NOT_CALLABLE: &str = "-";

/// The server's limiters. Keys are pruned by [`RateLimiters::prune`], which the server runs on an
/// interval so memory stays bounded.
pub struct RateLimiters {
    per_caller: Keyed<(CallerKey, &'static str)>,
    per_channel: Keyed<u64>,
    clock: DefaultClock,
}

fn governor_quota(quota: Quota) -> GovernorQuota {
    let per_minute = NonZeroU32::new(quota.per_minute).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(quota.burst).unwrap_or(NonZeroU32::MIN);
    GovernorQuota::per_minute(per_minute).allow_burst(burst)
}

impl RateLimiters {
    /// Empty limiters with the configured quotas (`toolserver.rate_limits`).
    pub fn new(config: &RateLimits) -> Self {
        RateLimiters {
            per_caller: RateLimiter::keyed(governor_quota(config.per_caller)),
            per_channel: RateLimiter::keyed(governor_quota(config.per_channel_mutating)),
            clock: DefaultClock::default(),
        }
    }

    /// One call of `tool_id` by `caller`.
    pub fn check_caller(&self, caller: CallerKey, tool_id: &'static str) -> Result<(), ToolError> {
        self.per_caller
            .check_key(&(caller, tool_id))
            .map_err(|not_until| not_until.wait_time_from(self.clock.now()))
            .map_err(|wait| {
                let message = if tool_id == NOT_CALLABLE {
                    format!(
                        "Too many calls from this caller of callables it may not call (unknown, or outside its scope); check the name with `tools --list` and retry after {} ms",
                        wait.as_millis()
                    )
                } else {
                    format!(
                        "Too many {tool_id} calls from this caller; retry after {} ms",
                        wait.as_millis()
                    )
                };
                ToolError::rate_limited(ErrorCode::RateLimited, message, wait)
            })
    }

    /// Spends `messages` of a channel's budget at once (a send split into k parts spends k):
    /// all or nothing. More than the burst can never pass and is a usage error.
    pub fn check_channel_n(&self, channel_id: u64, messages: u32) -> Result<(), ToolError> {
        let n = NonZeroU32::new(messages).unwrap_or(NonZeroU32::MIN);
        match self.per_channel.check_key_n(&channel_id, n) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => {
                let wait = not_until.wait_time_from(self.clock.now());
                Err(ToolError::rate_limited(
                    ErrorCode::ChannelRateLimited,
                    format!(
                        "Too many changes to channel {channel_id} ({messages} message{} needed); retry after {} ms",
                        if messages == 1 { "" } else { "s" },
                        wait.as_millis()
                    ),
                    wait,
                ))
            }
            Err(capacity) => Err(ToolError::usage(
                ErrorCode::OverChannelBurst,
                format!(
                    "This needs {messages} messages in channel {channel_id}, more than its limit allows at once ({}); send less, or raise toolserver.rate_limits.per_channel_mutating_burst",
                    capacity.0
                ),
            )),
        }
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
    use std::time::Duration;

    fn limits(burst: u32) -> RateLimiters {
        RateLimiters::new(&RateLimits {
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
        let op = || CallerKey::Operator;
        assert!(limits.check_caller(op(), "surface.help").is_ok());
        assert!(limits.check_caller(op(), "surface.help").is_ok());
        let error = limits.check_caller(op(), "surface.help").unwrap_err();
        assert_eq!(error.status().as_u16(), 429);
        assert!(error.retry_after.is_some_and(|w| w > Duration::ZERO));
        // Another callable and another caller have their own budgets.
        assert!(limits.check_caller(op(), "surface.sessions.list").is_ok());
        assert!(limits
            .check_caller(CallerKey::Named("cap:1".into()), "surface.help")
            .is_ok());
    }

    #[test]
    fn a_split_send_spends_one_unit_per_part() {
        let limits = limits(5);
        assert!(limits.check_channel_n(7, 3).is_ok());
        let error = limits.check_channel_n(7, 3).unwrap_err();
        assert_eq!(error.status().as_u16(), 429, "only 2 left of 5: {error:?}");
        assert!(
            limits.check_channel_n(7, 2).is_ok(),
            "all or nothing: the refusal spent nothing"
        );
        assert_eq!(
            limits.check_channel_n(8, 6).unwrap_err().code,
            "over_channel_burst"
        );
    }

    #[test]
    fn pruning_keeps_memory_bounded() {
        let limits = limits(5);
        for i in 0..1000 {
            let _ = limits.check_channel_n(i, 1);
        }
        assert_eq!(limits.prune(), 1000, "keys still recovering are kept");
    }
}
