//! `agent:NAME` entries in a named token's scope: which agents the token may talk to through
//! the chat API (`POST /v1/chat/completions`, `GET /v1/models`).
//!
//! An entry names one configured agent or `agent:*` (every agent). Callable globs never grant
//! an agent: a scope of `*` reaches every callable and no agent, so access to an agent is
//! always written down.

use std::collections::BTreeSet;

use toml::Spanned;

use crate::finding::Findings;
use crate::name::{AgentName, AgentNameError};

/// The prefix of an agent entry in a scope.
pub const AGENT_SCOPE_PREFIX: &str = "agent:";

/// What one `agent:` scope entry grants.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AgentGrant {
    /// `agent:*`: every configured agent.
    All,
    /// `agent:NAME`: that agent.
    One(AgentName),
}

/// Why an `agent:` scope entry was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AgentScopeError {
    /// The part after `agent:` is not a valid name.
    #[error("'{entry}' does not name an agent: {source}")]
    BadName {
        /// The entry as written.
        entry: String,
        /// Why the name is not valid.
        source: AgentNameError,
    },
    /// A glob other than `*` (`agent:sup*`).
    #[error("'{entry}' is a glob; agent entries name one agent or every agent")]
    Glob {
        /// The entry as written.
        entry: String,
    },
    /// A valid name that no `[agents.NAME]` table configures.
    #[error("'{entry}' names no configured agent")]
    Unknown {
        /// The entry as written.
        entry: String,
        /// The configured agent it is probably a typo of.
        suggestion: Option<AgentName>,
    },
}

impl AgentScopeError {
    /// What to do about it.
    pub fn help(&self, configured: &[AgentName]) -> String {
        match self {
            AgentScopeError::BadName { source, .. } => source.help().to_owned(),
            AgentScopeError::Glob { .. } => {
                "write agent:NAME for one agent (one entry each) or agent:* for every agent"
                    .to_owned()
            }
            AgentScopeError::Unknown { suggestion, .. } => {
                let listed = listing(configured);
                match suggestion {
                    Some(near) => format!("did you mean \"agent:{near}\"? The configured agents are: {listed}"),
                    None if configured.is_empty() => "no agents are configured: add an [agents.NAME] table first, or remove this entry".to_owned(),
                    None => format!("name one of the configured agents: {listed}"),
                }
            }
        }
    }
}

fn listing(configured: &[AgentName]) -> String {
    configured
        .iter()
        .map(AgentName::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The configured agent nearest to `wanted`, when close enough to be a typo (the project's
/// one did-you-mean rule, `entity::nearest`).
pub fn nearest_agent(wanted: &str, configured: &[AgentName]) -> Option<AgentName> {
    entity::nearest(wanted, configured.iter().map(AgentName::as_str))
        .and_then(|near| configured.iter().find(|a| a.as_str() == near).cloned())
}

/// `None` when `entry` is not an agent entry (it is a callable glob, for the config crate's
/// own check); else what it grants, checked against the configured agents.
pub fn parse_scope_entry(
    entry: &str,
    configured: &[AgentName],
) -> Option<Result<AgentGrant, AgentScopeError>> {
    let written = entry.trim();
    let rest = written.strip_prefix(AGENT_SCOPE_PREFIX)?;
    Some(if rest == "*" {
        Ok(AgentGrant::All)
    } else if rest.contains('*') {
        Err(AgentScopeError::Glob {
            entry: written.to_owned(),
        })
    } else {
        match AgentName::parse(rest) {
            Ok(name) if configured.contains(&name) => Ok(AgentGrant::One(name)),
            Ok(_) => Err(AgentScopeError::Unknown {
                entry: written.to_owned(),
                suggestion: nearest_agent(rest, configured),
            }),
            Err(source) => Err(AgentScopeError::BadName {
                entry: written.to_owned(),
                source,
            }),
        }
    })
}

/// [`parse_scope_entry`] for a config value: a refusal becomes a finding at its span. `None`
/// both for "not an agent entry" and for a refused one; tell them apart with
/// [`is_agent_entry`].
pub fn scope_entry(
    value: &Spanned<String>,
    key: &str,
    configured: &[AgentName],
    findings: &mut Findings,
) -> Option<AgentGrant> {
    match parse_scope_entry(value.get_ref(), configured)? {
        Ok(grant) => Some(grant),
        Err(error) => {
            findings.add(
                Some(value.span()),
                key,
                error.to_string(),
                error.help(configured),
            );
            None
        }
    }
}

/// Whether a scope entry is an `agent:` entry (and so not a callable glob).
pub fn is_agent_entry(entry: &str) -> bool {
    entry.trim().starts_with(AGENT_SCOPE_PREFIX)
}

/// The agents one token may use, from its scope's `agent:` entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentGrants {
    all: bool,
    names: BTreeSet<AgentName>,
}

impl AgentGrants {
    /// The grants of a scope's entries, ignoring every entry that is not an `agent:` entry or
    /// that names no configured agent (check-config has refused those already; a reload that
    /// removed an agent leaves its entries granting nothing).
    pub fn from_scope<'a>(
        entries: impl IntoIterator<Item = &'a str>,
        configured: &[AgentName],
    ) -> Self {
        let mut grants = AgentGrants::default();
        for entry in entries {
            match parse_scope_entry(entry, configured) {
                Some(Ok(AgentGrant::All)) => grants.all = true,
                Some(Ok(AgentGrant::One(name))) => {
                    grants.names.insert(name);
                }
                _ => {}
            }
        }
        grants
    }

    /// Every agent (the operator's grants).
    pub fn all() -> Self {
        AgentGrants {
            all: true,
            names: BTreeSet::new(),
        }
    }

    /// Whether this agent may be used.
    pub fn allows(&self, agent: &AgentName) -> bool {
        self.all || self.names.contains(agent)
    }

    /// The configured agents that may be used, in the order given (for `GET /v1/models`).
    pub fn visible<'a>(&self, configured: &'a [AgentName]) -> Vec<&'a AgentName> {
        configured.iter().filter(|a| self.allows(a)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agents(names: &[&str]) -> Vec<AgentName> {
        names.iter().map(|n| AgentName::parse(n).unwrap()).collect()
    }

    #[test]
    fn agent_entries_name_a_configured_agent_or_every_agent() {
        let configured = agents(&["support", "release"]);
        assert_eq!(
            parse_scope_entry("agent:support", &configured),
            Some(Ok(AgentGrant::One(configured[0].clone())))
        );
        assert_eq!(
            parse_scope_entry("agent:*", &configured),
            Some(Ok(AgentGrant::All))
        );
        assert_eq!(parse_scope_entry("surface.*", &configured), None);
        assert_eq!(parse_scope_entry("*", &configured), None);
    }

    #[test]
    fn an_unknown_agent_entry_suggests_the_configured_one_it_resembles() {
        let configured = agents(&["support", "release"]);
        let error = parse_scope_entry("agent:suport", &configured)
            .unwrap()
            .unwrap_err();
        assert_eq!(
            error,
            AgentScopeError::Unknown {
                entry: "agent:suport".into(),
                suggestion: Some(configured[0].clone())
            }
        );
        assert!(error
            .help(&configured)
            .starts_with("did you mean \"agent:support\"?"));
        let far = parse_scope_entry("agent:zzzzzzzz", &configured)
            .unwrap()
            .unwrap_err();
        assert_eq!(
            far.help(&configured),
            "name one of the configured agents: support, release"
        );
        assert!(far.help(&[]).starts_with("no agents are configured"));
    }

    #[test]
    fn globs_and_bad_names_are_refused_with_what_to_write() {
        let configured = agents(&["support"]);
        assert!(matches!(
            parse_scope_entry("agent:sup*", &configured),
            Some(Err(AgentScopeError::Glob { .. }))
        ));
        assert!(matches!(
            parse_scope_entry("agent:", &configured),
            Some(Err(AgentScopeError::BadName { .. }))
        ));
        assert!(matches!(
            parse_scope_entry("agent:default", &configured),
            Some(Err(AgentScopeError::BadName { .. }))
        ));
    }

    #[test]
    fn a_refused_entry_is_a_finding_at_its_span() {
        let configured = agents(&["support"]);
        let value = Spanned::new(10..25, "agent:suport".to_owned());
        let mut findings = Findings::new();
        assert_eq!(
            scope_entry(
                &value,
                "toolserver.tokens[0].scope[1]",
                &configured,
                &mut findings
            ),
            None
        );
        let found: Vec<_> = findings.into_vec();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].span, Some(10..25));
        assert_eq!(found[0].key_path, "toolserver.tokens[0].scope[1]");
        assert!(found[0].help.contains("agent:support"));
    }

    #[test]
    fn grants_allow_only_what_the_scope_names_and_never_from_a_callable_glob() {
        let configured = agents(&["support", "release", "ops"]);
        let grants = AgentGrants::from_scope(["*", "surface.*", "agent:release"], &configured);
        assert!(grants.allows(&configured[1]));
        assert!(!grants.allows(&configured[0]));
        assert_eq!(grants.visible(&configured), vec![&configured[1]]);
        let every = AgentGrants::from_scope(["agent:*"], &configured);
        assert_eq!(every.visible(&configured).len(), 3);
        assert!(AgentGrants::from_scope(Vec::<&str>::new(), &configured)
            .visible(&configured)
            .is_empty());
        // An entry for an agent a reload removed grants nothing.
        let stale = AgentGrants::from_scope(["agent:gone"], &configured);
        assert!(stale.visible(&configured).is_empty());
    }
}
