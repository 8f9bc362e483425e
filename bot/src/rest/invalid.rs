//! Protects the bot token from Discord's invalid-request ban: 10,000 answers of 401, 403 or
//! 429 (a 429 of scope `shared` excepted) from one IP in 10 minutes get it blocked for an hour.
//! The guard counts them over a sliding 10 minutes; past its budget (a share of those 10,000),
//! the routes that earned them are no longer called until the count falls back under it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// Discord's limit of invalid requests per [`WINDOW`].
pub const DISCORD_INVALID_LIMIT: u32 = 10_000;
/// The window Discord counts invalid requests over.
pub const WINDOW: Duration = Duration::from_secs(600);

/// A route the guard stopped, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// Until the window's count falls back under the budget.
    pub retry_after: Duration,
    /// Invalid answers in the last 10 minutes, all routes.
    pub total: u32,
    /// Of which this route earned.
    pub on_route: u32,
    /// The budget.
    pub budget: u32,
}

#[derive(Debug, Default)]
struct Window {
    /// When each invalid answer came and on which route, oldest first; at most
    /// [`DISCORD_INVALID_LIMIT`] (the budget is never higher, so older ones cannot matter).
    events: VecDeque<(Instant, Arc<str>)>,
    /// Invalid answers per route key among `events`.
    per_route: HashMap<Arc<str>, u32>,
    /// Routes whose stop was logged in this episode (cleared when the count falls under the
    /// budget); a subset of `per_route`'s keys, so bounded by it.
    reported: HashSet<Arc<str>>,
}

impl Window {
    fn pop_front(&mut self) {
        if let Some((_, route)) = self.events.pop_front() {
            if let Some(count) = self.per_route.get_mut(&route) {
                *count -= 1;
                if *count == 0 {
                    self.per_route.remove(&route);
                    self.reported.remove(&route);
                }
            }
        }
    }

    fn expire(&mut self, now: Instant) {
        while self
            .events
            .front()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) >= WINDOW)
        {
            self.pop_front();
        }
    }
}

/// The invalid-request counter; see the module docs.
#[derive(Debug)]
pub struct InvalidGuard {
    /// This node's share of `whole` (all of it on one node).
    budget: std::sync::atomic::AtomicU32,
    /// The budget of the whole cluster.
    whole: u32,
    window: Mutex<Window>,
}

impl InvalidGuard {
    /// A guard that stops offending routes once `budget` invalid answers were seen in 10
    /// minutes (clamped to 1..=10,000).
    pub fn new(budget: u32) -> InvalidGuard {
        let whole = budget.clamp(1, DISCORD_INVALID_LIMIT);
        InvalidGuard {
            budget: std::sync::atomic::AtomicU32::new(whole),
            whole,
            window: Mutex::new(Window::default()),
        }
    }

    /// The budget in force.
    pub fn budget(&self) -> u32 {
        self.budget.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes this node's share of the budget when `nodes` (at least 1) nodes spend it: the
    /// ban Discord counts per IP may be shared by every node.
    pub fn share_among(&self, nodes: u32) {
        let share = (self.whole / nodes.max(1)).max(1);
        self.budget
            .store(share, std::sync::atomic::Ordering::Relaxed);
    }

    fn window(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts one invalid answer on `route_key` at `now`.
    pub fn record(&self, route_key: &str, now: Instant) {
        let mut window = self.window();
        window.expire(now);
        while window.events.len() >= DISCORD_INVALID_LIMIT as usize {
            window.pop_front();
        }
        let route: Arc<str> = match window.per_route.get_key_value(route_key) {
            Some((key, _)) => Arc::clone(key),
            None => Arc::from(route_key),
        };
        *window.per_route.entry(Arc::clone(&route)).or_insert(0) += 1;
        window.events.push_back((now, route));
    }

    /// Invalid answers in the 10 minutes before `now`.
    pub fn count(&self, now: Instant) -> u32 {
        let mut window = self.window();
        window.expire(now);
        window.events.len() as u32
    }

    /// Whether `route_key` may be called at `now`: not when the budget is spent and this route
    /// helped spend it. The first refusal per route and episode logs an error naming `label`.
    pub fn check(&self, route_key: &str, label: &str, now: Instant) -> Result<(), Blocked> {
        let mut window = self.window();
        window.expire(now);
        let total = window.events.len();
        let budget = self.budget();
        if total < budget as usize {
            window.reported.clear();
            return Ok(());
        }
        let Some((route, &on_route)) = window.per_route.get_key_value(route_key) else {
            return Ok(());
        };
        let route = Arc::clone(route);
        // The count falls under the budget when the oldest `total - budget + 1` answers age
        // out of the window.
        let index = total - budget as usize;
        let retry_after = window.events.get(index).map_or(Duration::ZERO, |(at, _)| {
            (*at + WINDOW).saturating_duration_since(now)
        });
        let blocked = Blocked {
            retry_after,
            total: total as u32,
            on_route,
            budget,
        };
        if window.reported.insert(route) {
            tracing::error!(
                route = %label,
                invalid_answers = blocked.total,
                on_this_route = blocked.on_route,
                budget = blocked.budget,
                resumes_in_s = blocked.retry_after.as_secs(),
                "stopped calling a Discord route: Discord answered 401/403/429 {} times in 10 minutes ({} on this route), past this service's budget of {} (discord.invalid_request_percent of Discord's 10,000; at 10,000 Discord bans the IP for an hour); check the bot's token and permissions",
                blocked.total,
                blocked.on_route,
                blocked.budget
            );
        }
        Err(blocked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn offending_routes_stop_past_the_budget_and_resume_as_the_window_slides() {
        let guard = InvalidGuard::new(3);
        let start = Instant::now();
        guard.record("POST a", start);
        guard.record("POST a", start + Duration::from_secs(60));
        assert!(guard.check("POST a", "a", start).is_ok());
        guard.record("GET b", start + Duration::from_secs(120));
        let now = start + Duration::from_secs(130);
        let blocked = guard
            .check("POST a", "a", now)
            .expect_err("past the budget");
        assert_eq!(blocked.total, 3);
        assert_eq!(blocked.on_route, 2);
        assert_eq!(blocked.retry_after, Duration::from_secs(470));
        assert!(guard.check("GET b", "b", now).is_err());
        // A route that earned none goes on.
        assert!(guard.check("GET c", "c", now).is_ok());
        // Once the first answer is ten minutes old, the count is under the budget again.
        assert!(guard
            .check("POST a", "a", start + Duration::from_secs(600))
            .is_ok());
    }

    proptest! {
        /// The window never holds more than Discord's limit, the count never exceeds it, and
        /// every stop ends within the window.
        #[test]
        fn bounded_and_every_stop_ends(
            budget in 1u32..50,
            events in proptest::collection::vec((0u64..1_200_000, 0usize..4), 0..200),
        ) {
            let guard = InvalidGuard::new(budget);
            let start = Instant::now();
            let mut at = 0u64;
            let mut last_stop = None;
            for (step, route) in events {
                at += step / 100;
                let now = start + Duration::from_millis(at);
                let key = format!("route {route}");
                guard.record(&key, now);
                prop_assert!(guard.count(now) <= DISCORD_INVALID_LIMIT);
                last_stop = match guard.check(&key, &key, now) {
                    Ok(()) => None,
                    Err(blocked) => {
                        prop_assert!(blocked.retry_after <= WINDOW);
                        prop_assert!(blocked.total >= budget);
                        Some(now + blocked.retry_after)
                    }
                };
                let window = guard.window();
                prop_assert_eq!(
                    window.per_route.values().map(|&c| c as usize).sum::<usize>(),
                    window.events.len()
                );
            }
            // With no invalid answer after it, the last stop ends when it said it would.
            if let Some(ends) = last_stop {
                prop_assert!(guard.count(ends) < budget);
            }
        }
    }
}
