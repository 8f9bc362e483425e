//! Settings that change while the service runs: a swappable snapshot ([`Live`]), the
//! config-derived [`Settings`] every call reads, and the [`Reloader`] seam the composition root
//! implements (`POST /v1/admin/reload` calls it).
//!
//! A call takes one [`Settings`] when it starts and keeps it to the end, so it never sees half of
//! one config and half of another; the next call sees the new one.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use entity::Aliases;
use serde::Serialize;
use switchboard_config::Config;

use crate::allowlist::AllowRules;
use crate::governance::GovernanceRules;
use crate::ratelimit::RateLimiters;

pub use crate::cell::Live;

/// The configured aliases, shared by the parts that render text outside a call (the bot's
/// ingest, its surface, its workflows) and swapped by a reload.
pub type SharedAliases = Arc<Live<Aliases>>;

/// Everything a call reads from the config, as of one config file: the config itself and what
/// is built from it (the allowlist's sets, the permission rules, the rate limiters).
pub struct Settings {
    config: Arc<Config>,
    /// Counts reloads: cached renderings made with an older one are not reused.
    pub(crate) generation: u64,
    /// The allowlist's rules.
    pub allow: Arc<AllowRules>,
    pub(crate) governance: Arc<GovernanceRules>,
    pub(crate) limits: Arc<RateLimiters>,
}

impl Settings {
    /// Settings from `config`, with fresh rate limiters.
    pub(crate) fn new(config: Config) -> Settings {
        Settings {
            allow: Arc::new(AllowRules::new(&config.discord)),
            governance: Arc::new(GovernanceRules::from_config(&config)),
            limits: Arc::new(RateLimiters::new(&config.toolserver.rate_limits)),
            generation: 0,
            config: Arc::new(config),
        }
    }

    /// Settings from `config` following `self`: the rate limiters (and the budgets spent in
    /// them) carry over unless the quotas changed.
    pub(crate) fn next(&self, config: Config) -> Settings {
        let limits = if config.toolserver.rate_limits == self.config.toolserver.rate_limits {
            Arc::clone(&self.limits)
        } else {
            Arc::new(RateLimiters::new(&config.toolserver.rate_limits))
        };
        Settings {
            allow: Arc::new(AllowRules::new(&config.discord)),
            governance: Arc::new(GovernanceRules::from_config(&config)),
            limits,
            generation: self.generation + 1,
            config: Arc::new(config),
        }
    }

    /// The config in force. Settings a reload cannot change keep the values the service
    /// started with.
    pub fn config(&self) -> &Arc<Config> {
        &self.config
    }

    /// The configured aliases.
    pub fn aliases(&self) -> &Aliases {
        &self.config.aliases
    }

    /// The permission rules and session scopes.
    pub fn governance(&self) -> &Arc<GovernanceRules> {
        &self.governance
    }

    /// How many reloads came before this one (0: the config the service started with).
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

/// What set off a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReloadTrigger {
    /// `POST /v1/admin/reload` (`switchboard reload`).
    Request,
    /// SIGHUP.
    Signal,
    /// The config file changed on disk.
    FileChanged,
}

impl ReloadTrigger {
    /// As logs name it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReloadTrigger::Request => "request",
            ReloadTrigger::Signal => "SIGHUP",
            ReloadTrigger::FileChanged => "file change",
        }
    }
}

/// A reload that took effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reloaded {
    /// The config file read.
    pub file: String,
    /// One line: `aliases: 2 added, 1 removed; restart needed for: toolserver.bind`.
    pub summary: String,
    /// What took effect, one line per part.
    pub changes: Vec<String>,
    /// Settings the file changed that keep their running value until a restart.
    pub restart_needed: Vec<String>,
}

/// A reload that was refused: the config in force did not change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReloadRefused {
    /// The config file read.
    pub file: String,
    /// Each problem as `switchboard check-config` prints it.
    pub problems: Vec<String>,
}

/// A boxed reload in progress.
pub type ReloadFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Reloaded, ReloadRefused>> + Send + 'a>>;

/// Reads the config file again and applies it: what `POST /v1/admin/reload` runs. The binary
/// implements it (it knows the file, and the parts outside the tool server).
pub trait Reloader: Send + Sync {
    /// Validates the file and, when it has no problem, puts it in force.
    fn reload(&self, trigger: ReloadTrigger) -> ReloadFuture<'_>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_keeps_its_value_across_a_store() {
        let live = Live::new(1);
        let held = live.load();
        let old = live.store(Arc::new(2));
        assert_eq!((*held, *old, *live.load()), (1, 1, 2));
    }
}
