//! Usage and budgets of one run (issue 26 §4): every model call's tokens (as the model
//! reported them, else estimated and marked so) and their cost at the agent's prices are kept
//! as a usage row charged to the run, the user who triggered it, its session, its guild and
//! its agent; before the run the `[budgets]` caps are checked against what those keys spent
//! today and this month (refused: the model is never called), and before each later model
//! round against that plus what the run has spent since (crossed: the run stops there).

use std::sync::{Arc, Mutex};

use switchboard_config::BudgetsConfig;
use switchboard_records::{UsageCharge, UsageRow, UsageSubject};
use switchboard_store::UsageStore;
use switchboard_usage::{
    check, crossed, windows, Decision, Price, Refusal, Scope, Spending, Spent, Usage, Windows,
};

/// Who a run is charged to, and at what prices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charged {
    /// Who and what each of its model calls is charged to.
    pub to: UsageCharge,
    /// The agent's prices.
    pub price: Price,
}

/// One run's meter.
pub struct Meter {
    store: Arc<dyn UsageStore>,
    charged: Charged,
    /// The caps in force when the run started; `None` when nothing caps it (no caps, or its
    /// caller is exempt).
    caps: Option<Caps>,
    spent: Mutex<Spent>,
    /// Prompt and completion tokens so far (the chat API answers them as `usage`).
    tokens: Mutex<(u64, u64)>,
}

struct Caps {
    budgets: switchboard_usage::Budgets,
    at_start: Vec<Spending>,
    windows: Windows,
}

impl Charged {
    fn key(&self, scope: Scope) -> Option<String> {
        match scope {
            Scope::User => self.to.user.clone(),
            Scope::Session => self.to.session.clone(),
            Scope::Guild => self.to.guild.clone(),
            Scope::Agent => Some(self.to.agent.clone()),
        }
    }
}

fn spent(totals: switchboard_records::UsageTotals) -> Spent {
    Spent {
        tokens: totals.tokens(),
        micros: totals.micro_usd,
    }
}

impl Meter {
    /// Opens the run's meter, checking `budgets` first unless `exempt`: `Err` with the cap
    /// when a key the run is charged to is at or over one (the run must not call the model).
    /// A store that cannot sum refuses too (a cap that cannot be checked is not lifted).
    pub async fn open(
        store: Arc<dyn UsageStore>,
        charged: Charged,
        budgets: &BudgetsConfig,
        exempt: bool,
    ) -> Result<Meter, Refused> {
        let budgets = &budgets.budgets;
        let caps = if exempt || !budgets.any() {
            None
        } else {
            let windows = windows(chrono::Utc::now(), budgets.tz);
            let mut at_start = Vec::new();
            for scope in budgets.capped_scopes() {
                let Some(key) = charged.key(scope) else {
                    continue;
                };
                let subject = match scope {
                    Scope::User => UsageSubject::User(key.clone()),
                    Scope::Session => UsageSubject::Session(key.clone()),
                    Scope::Guild => UsageSubject::Guild(key.clone()),
                    Scope::Agent => UsageSubject::Agent(key.clone()),
                };
                let sum = |window: switchboard_usage::Window| {
                    let store = Arc::clone(&store);
                    let subject = subject.clone();
                    async move {
                        store
                            .usage_sum(
                                subject,
                                switchboard_engine::schedules::millis(window.start),
                                switchboard_engine::schedules::millis(window.end),
                            )
                            .await
                    }
                };
                let day = sum(windows.day)
                    .await
                    .map_err(|e| Refused::Store(e.to_string()))?;
                let month = sum(windows.month)
                    .await
                    .map_err(|e| Refused::Store(e.to_string()))?;
                at_start.push(Spending {
                    scope,
                    key,
                    day: spent(day),
                    month: spent(month),
                });
            }
            if let Decision::Refused(refusal) = check(budgets, &at_start, &windows) {
                return Err(Refused::Cap(refusal));
            }
            Some(Caps {
                budgets: budgets.clone(),
                at_start,
                windows,
            })
        };
        Ok(Meter {
            store,
            charged,
            caps,
            spent: Mutex::new(Spent::default()),
            tokens: Mutex::new((0, 0)),
        })
    }

    /// Keeps one model call's usage (a failure is logged: usage is never a reason to fail a
    /// run that already happened).
    pub async fn record(&self, usage: Usage) {
        let micros = usage.cost_micros(self.charged.price);
        {
            let mut spent = self
                .spent
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *spent = spent.plus(Spent {
                tokens: usage.total(),
                micros,
            });
        }
        {
            let mut tokens = self
                .tokens
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            tokens.0 = tokens.0.saturating_add(usage.prompt_tokens);
            tokens.1 = tokens.1.saturating_add(usage.completion_tokens);
        }
        let charged = &self.charged;
        let row = UsageRow {
            charge: charged.to.clone(),
            tokens_in: usage.prompt_tokens,
            tokens_out: usage.completion_tokens,
            micro_usd: micros,
            estimated: usage.estimated,
            at_ms: switchboard_engine::clock::now_ms(),
        };
        if let Err(error) = self.store.record_usage(row).await {
            tracing::error!(run = %charged.to.run_id, "keeping the run's usage failed: {error}");
        }
    }

    /// The prompt and completion tokens this run's model calls used so far.
    pub fn tokens(&self) -> (u64, u64) {
        *self
            .tokens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What this run's model calls cost so far, in micro-dollars (0 without prices).
    pub fn micros(&self) -> u64 {
        self.spent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .micros
    }

    /// Before a model round after the first: the cap this run's usage so far pushed a key to.
    pub fn crossed(&self) -> Option<Refusal> {
        let caps = self.caps.as_ref()?;
        let run = *self
            .spent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        crossed(&caps.budgets, &caps.at_start, run, &caps.windows)
    }
}

/// Why a run may not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// A cap is reached.
    Cap(Refusal),
    /// The spending could not be summed.
    Store(String),
}

impl Refused {
    /// The in-chat notice.
    pub fn notice(&self) -> String {
        match self {
            Refused::Cap(refusal) => refusal.notice(),
            Refused::Store(error) => format!(
                "⛔ I can't check the usage budgets right now ({error}), so I won't start; please try again shortly."
            ),
        }
    }

    /// The plain reason, for logs and receipts.
    pub fn message(&self) -> String {
        match self {
            Refused::Cap(refusal) => refusal.message(),
            Refused::Store(error) => format!("the usage budgets could not be checked: {error}"),
        }
    }
}
