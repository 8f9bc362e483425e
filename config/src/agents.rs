//! `[agent]` and `[agents]`: the configured agents, which one answers where no session binds
//! one, and how deep handoffs go.
//!
//! `[agent]` alone is the one default agent, named [`LEGACY_AGENT_NAME`]; `[agents.NAME]`
//! tables (exactly the keys `[agent]` has) name several. The rules on names, `agents.default`
//! and `agents.max_handoff_depth` are `switchboard-agents`'; this module checks each table as
//! `[agent]` is checked and hands every finding to the collector.

use switchboard_agents::{AgentName, Findings};
use toml::Spanned;

use crate::raw::RawConfig;
use crate::report::Collector;
use crate::{AgentConfig, Aliases, Known};

/// The name `[agent]` alone answers to (`model = "switchboard:agent"`, `agent:agent` in a
/// token's scope, `/agent`).
pub const LEGACY_AGENT_NAME: &str = "agent";

/// One configured agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedAgent {
    /// `[agents.NAME]`'s name, or [`LEGACY_AGENT_NAME`] for `[agent]`.
    pub name: AgentName,
    /// Its settings.
    pub config: AgentConfig,
}

/// Every configured agent and what `[agents]` says about them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AgentsConfig {
    /// In file order; empty when no agent is configured.
    pub agents: Vec<NamedAgent>,
    /// The agent that answers in sessions no `[sessions.X] agent` binds (`agents.default`, or
    /// the only one); `None` only when none is configured.
    pub default: Option<AgentName>,
    /// `agents.max_handoff_depth` (default 2, 0 turns `agent.handoff` off).
    pub max_handoff_depth: u32,
}

/// `agents.answer_label` … per agent: how an answer says which agent wrote it when more than
/// one agent is configured (`answer_label`, default `prefix`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AnswerLabel {
    /// `**NAME:** ` before the answer's first line (the default).
    #[default]
    Prefix,
    /// `-# NAME` (Discord's small text) on a line of its own after the answer.
    Footer,
    /// No label.
    Off,
}

impl AgentsConfig {
    /// The configured agents' names, in file order.
    pub fn names(&self) -> Vec<AgentName> {
        self.agents.iter().map(|a| a.name.clone()).collect()
    }

    /// The agent called `name`.
    pub fn get(&self, name: &str) -> Option<&NamedAgent> {
        self.agents.iter().find(|a| a.name.as_str() == name)
    }

    /// The default agent.
    pub fn default_agent(&self) -> Option<&NamedAgent> {
        self.default
            .as_ref()
            .and_then(|name| self.get(name.as_str()))
    }

    /// Whether answers say which agent wrote them: when more than one is configured.
    pub fn labelled(&self) -> bool {
        self.agents.len() > 1
    }
}

/// Reads `[agent]` / `[agents]` (every problem to `c`).
pub(crate) fn agents(
    raw: &RawConfig,
    known: &Known,
    aliases: &Aliases,
    c: &mut Collector,
) -> AgentsConfig {
    let mut findings = Findings::new();
    let mut config = AgentsConfig {
        max_handoff_depth: switchboard_agents::DEFAULT_MAX_HANDOFF_DEPTH,
        ..AgentsConfig::default()
    };
    if let Some(table) = &raw.agents {
        let settings = switchboard_agents::settings(table, raw.agent.is_some(), &mut findings);
        for (written, agent) in &table.agents {
            let Some(name) = settings
                .names
                .iter()
                .find(|n| n.as_str() == written.get_ref())
            else {
                continue;
            };
            let prefix = format!("agents.{name}");
            if let Some(checked) = crate::validate::agent_config(agent, &prefix, known, aliases, c)
            {
                config.agents.push(NamedAgent {
                    name: name.clone(),
                    config: checked,
                });
            }
        }
        config.default = settings.default;
        config.max_handoff_depth = settings.max_handoff_depth;
    }
    if let Some(agent) = &raw.agent {
        if raw.agents.as_ref().is_none_or(|t| t.agents.is_empty()) {
            let name = AgentName::parse(LEGACY_AGENT_NAME).expect("a valid agent name");
            if let Some(checked) = crate::validate::agent_config(agent, "agent", known, aliases, c)
            {
                config.agents.push(NamedAgent {
                    name: name.clone(),
                    config: checked,
                });
                config.default = Some(name);
            }
        }
    }
    c.report(findings);
    config
}

/// `[sessions.X] agent = "NAME"`: the agent it names, with a did-you-mean when none.
pub(crate) fn session_agent(
    value: &Spanned<String>,
    key: &str,
    configured: &[AgentName],
    c: &mut Collector,
) -> Option<AgentName> {
    let mut findings = Findings::new();
    let found = switchboard_agents::agent_ref(value, key, configured, &mut findings);
    c.report(findings);
    found
}

/// A named token's scope entry `agent:NAME` / `agent:*`, checked against the configured
/// agents; `None` when the entry is not an agent entry.
pub(crate) fn token_agent_entry(
    value: &Spanned<String>,
    key: &str,
    configured: &[AgentName],
    c: &mut Collector,
) -> Option<String> {
    if !switchboard_agents::is_agent_entry(value.get_ref()) {
        return None;
    }
    let mut findings = Findings::new();
    switchboard_agents::scope_entry(value, key, configured, &mut findings);
    c.report(findings);
    Some(value.get_ref().trim().to_owned())
}

impl crate::Config {
    /// The agent `[sessions.X] agent` binds to `session`, else the default agent; `None` when
    /// no agent is configured. (A thread follows its channel: the caller passes the parent.)
    pub fn agent_for(&self, session: entity::Snowflake) -> Option<&NamedAgent> {
        crate::session_settings(&self.sessions, session)
            .and_then(|settings| settings.agent.as_ref())
            .and_then(|name| self.agents.get(name.as_str()))
            .or_else(|| self.agents.default_agent())
    }
}
