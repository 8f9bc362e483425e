//! The sections issue 26 adds, checked by their own crates and located here: `[[schedules]]`
//! and `[scheduler]` (`switchboard-schedule`), `[budgets]` and the agents' prices
//! (`switchboard-usage`). Each crate reports [`switchboard_agents::Finding`]s; the collector
//! turns them into `file:line:col` problems like every other section's.

use entity::{Aliases, Snowflake};
use switchboard_agents::{AgentName, Findings};
use switchboard_schedule::{RawSchedule, RawScheduler, SchedulerSettings, Spec};
use switchboard_usage::{Budgets, Exempt, Price, RawBudgets, RawUsd};
use toml::Spanned;

use crate::report::Collector;
use crate::{NamedToken, Principal};

/// One `[[schedules]]` entry, checked and with its session resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleEntry {
    /// `config:NAME`: the same on every load, so its cursor and receipts survive restarts.
    pub id: String,
    /// The session it posts in.
    pub session_id: Snowflake,
    /// What the agent is asked at each firing.
    pub prompt: String,
    /// The agent named (one of `[agents.NAME]`), if any.
    pub agent: Option<String>,
    /// When it fires (`every` counted from the Unix epoch).
    pub spec: Spec,
}

/// `[budgets]`, checked, with `budgets.exempt`'s users and roles resolved.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BudgetsConfig {
    /// The caps, `budgets.tz` and the exempt entries as the usage crate reads them.
    pub budgets: Budgets,
    /// The users and roles among `budgets.exempt` (`@Mira`, `<@&id>`, an id).
    pub exempt_principals: Vec<Principal>,
}

impl BudgetsConfig {
    /// Whether a Discord user with these roles is exempt from every cap: named in
    /// `budgets.exempt`, or an admin while `"admins"` is listed.
    pub fn exempts_user(&self, user: Snowflake, roles: &[Snowflake], admins: &[Principal]) -> bool {
        self.exempt_principals
            .iter()
            .any(|p| p.matches(user, roles))
            || (self.budgets.exempt.contains(&Exempt::Admins)
                && admins.iter().any(|p| p.matches(user, roles)))
    }
}

/// `[scheduler]` (defaults when absent).
pub(crate) fn scheduler(raw: Option<&RawScheduler>, c: &mut Collector) -> SchedulerSettings {
    let Some(raw) = raw else {
        return SchedulerSettings::default();
    };
    let mut findings = Findings::new();
    let settings = switchboard_schedule::scheduler(raw, &mut findings);
    c.report(findings);
    settings
}

/// Every `[[schedules]]` entry: the schedule crate's checks, then the session as every
/// session reference is resolved.
pub(crate) fn schedules(
    raw: &[RawSchedule],
    agents: &[AgentName],
    aliases: &Aliases,
    c: &mut Collector,
) -> Vec<ScheduleEntry> {
    let mut findings = Findings::new();
    let checked = switchboard_schedule::schedules(raw, agents, chrono::Utc::now(), &mut findings);
    c.report(findings);
    let mut entries = Vec::with_capacity(checked.len());
    for entry in checked {
        let session = &raw[entry.index].session;
        let key = format!("schedules[{}].session", entry.index);
        let Some(session_id) = crate::governance::session_ref(session, &key, aliases, c) else {
            continue;
        };
        entries.push(ScheduleEntry {
            id: entry.id.as_str().to_owned(),
            session_id,
            prompt: entry.prompt,
            agent: entry.agent.map(|a| a.as_str().to_owned()),
            spec: entry.spec,
        });
    }
    entries
}

/// `[budgets]` (no caps when absent): `budgets.exempt`'s users and roles resolved as
/// `discord.admins` are, its `token:NAME` entries checked against `[[toolserver.tokens]]`.
pub(crate) fn budgets(
    raw: Option<&RawBudgets>,
    aliases: &Aliases,
    tokens: &[NamedToken],
    c: &mut Collector,
) -> BudgetsConfig {
    let Some(raw) = raw else {
        return BudgetsConfig::default();
    };
    let mut findings = Findings::new();
    let budgets = switchboard_usage::budgets(raw, &mut findings);
    c.report(findings);
    let mut exempt_principals = Vec::new();
    for entry in &budgets.exempt {
        match entry {
            Exempt::Principal { index, .. } => {
                if let Some(value) = raw.exempt.get(*index) {
                    exempt_principals.extend(crate::validate::principals(
                        std::slice::from_ref(value),
                        &format!("budgets.exempt[{index}]"),
                        aliases,
                        c,
                    ));
                }
            }
            Exempt::Token(name) => {
                if !tokens.iter().any(|t| &t.name == name) {
                    let at = raw
                        .exempt
                        .iter()
                        .position(|v| v.get_ref().trim() == format!("token:{name}"));
                    c.add(
                        at.and_then(|i| raw.exempt.get(i)).map(Spanned::span),
                        format!("budgets.exempt[{}]", at.unwrap_or(0)),
                        format!("no [[toolserver.tokens]] entry is named '{name}'"),
                        "name a configured token (token:NAME), or remove the entry",
                    );
                }
            }
            Exempt::Operator | Exempt::Admins => {}
        }
    }
    BudgetsConfig {
        budgets,
        exempt_principals,
    }
}

/// An agent table's `price_in_per_mtok` / `price_out_per_mtok`.
pub(crate) fn price(
    price_in: Option<&Spanned<RawUsd>>,
    price_out: Option<&Spanned<RawUsd>>,
    table: &str,
    c: &mut Collector,
) -> Price {
    let mut findings = Findings::new();
    let price = switchboard_usage::price(price_in, price_out, table, &mut findings);
    c.report(findings);
    price
}
