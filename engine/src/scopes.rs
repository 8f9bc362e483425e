//! A session's tool scope as `/tools` (and the console) show and change it: what a run started
//! there may call, the rules that apply there, and admin changes kept through the ledger. A
//! change is the operator callable `admin.tools.set` (`callables/governance.rs`), audited like any
//! call.
//!
//! An override is always a list of explicit callable ids, so a glob typed in Discord is
//! expanded once, against the callables that exist, and an override never widens by itself
//! when a new callable appears.

use std::collections::BTreeSet;

use entity::{AliasKind, Snowflake};
use serde::Serialize;
use switchboard_config::{glob_matches, CallerMatch, SessionMatch};

use crate::auth::scope_allows;
use crate::server::Core;

/// A change to a session's scope, as `/tools` takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScopeChange {
    /// Add the callables matching the glob.
    Enable(String),
    /// Remove the callables matching the glob.
    Disable(String),
    /// Exactly the callables matching these globs (`all`: every callable, `none`: nothing).
    Set(Vec<String>),
    /// Drop the override: back to the config's `[sessions.*]` scope.
    Reset,
}

impl ScopeChange {
    /// Reads `/tools ACTION [TOOLS]`: `enable GLOB`, `disable GLOB`, `set all|none|GLOBS`
    /// (GLOBS separated by commas or spaces), `reset`.
    pub fn parse(action: &str, tools: Option<&str>) -> Result<ScopeChange, ScopeError> {
        let globs = || -> Vec<String> {
            tools
                .unwrap_or_default()
                .split([',', ' '])
                .map(str::trim)
                .filter(|glob| !glob.is_empty())
                .map(str::to_owned)
                .collect()
        };
        let one = |action: &str| -> Result<String, ScopeError> {
            match globs().as_slice() {
                [glob] => Ok(glob.clone()),
                _ => Err(ScopeError::Usage(format!(
                    "`{action}` takes one callable name or glob, e.g. `surface.messages.send` or `surface.pins.*`"
                ))),
            }
        };
        match action.trim() {
            "enable" => Ok(ScopeChange::Enable(one("enable")?)),
            "disable" => Ok(ScopeChange::Disable(one("disable")?)),
            "set" => {
                let globs = globs();
                match globs.as_slice() {
                    [] => Err(ScopeError::Usage(
                        "`set` takes `all`, `none`, or callable names and globs separated by commas"
                            .to_owned(),
                    )),
                    [word] if word == "all" => Ok(ScopeChange::Set(vec!["*".to_owned()])),
                    [word] if word == "none" => Ok(ScopeChange::Set(Vec::new())),
                    _ => Ok(ScopeChange::Set(globs)),
                }
            }
            "reset" => Ok(ScopeChange::Reset),
            other => Err(ScopeError::Usage(format!(
                "unknown action `{other}`: use show, enable, disable, set or reset"
            ))),
        }
    }
}

/// Why a scope change was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    /// The change is written wrong.
    #[error("{0}")]
    Usage(String),
    /// A glob names no callable; nothing changed.
    #[error("`{glob}` matches no callable{}", near.as_ref().map(|n| format!(" — did you mean `{n}`?")).unwrap_or_default())]
    NoMatch {
        /// The glob as given.
        glob: String,
        /// The nearest callable id.
        near: Option<String>,
    },
}

/// A permission rule as `/tools` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuleView {
    /// Where it is written (`permissions.rules[2]`).
    pub name: String,
    /// The tool glob.
    pub tool: String,
    /// `allow`, `ask` or `deny`.
    pub policy: &'static str,
    /// The sessions the call acts in that it applies to (`#release-room`, `#release-*`);
    /// `None`: any.
    pub session: Option<String>,
    /// The sessions a run must have started in for it to apply; `None`: any.
    pub origin: Option<String>,
    /// Whose calls it governs: `run`, `operator`, or `token:NAME`.
    pub caller: String,
}

/// What `/tools` shows for a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionTools {
    /// The session.
    #[schemars(with = "String")]
    pub session_id: Snowflake,
    /// What a run started here may call now: the agent's scope ∩ the session's, sorted.
    pub effective: Vec<String>,
    /// Whether a `/tools` override is in force (else the config's scope, if any).
    pub overridden: bool,
    /// The session's own scope (override or config); `None`: no limit beyond the agent's.
    pub session_scope: Option<Vec<String>>,
    /// The rules that can apply to calls acting here, in order (the last match wins).
    pub rules: Vec<RuleView>,
    /// `permissions.default`.
    pub default_policy: &'static str,
}

fn policy_name(policy: switchboard_config::Policy) -> &'static str {
    match policy {
        switchboard_config::Policy::Allow => "allow",
        switchboard_config::Policy::Ask => "ask",
        switchboard_config::Policy::Deny => "deny",
    }
}

/// A rule's session (or origin) as people read it: `#alias`, the id, or `#glob`.
fn session_label(aliases: &entity::Aliases, session: &SessionMatch) -> String {
    match session {
        SessionMatch::Id(id) => aliases
            .alias_for(AliasKind::Session, *id)
            .map_or_else(|| id.to_string(), |alias| format!("#{alias}")),
        SessionMatch::AliasGlob(glob) => format!("#{glob}"),
    }
}

fn caller_label(caller: &CallerMatch) -> String {
    match caller {
        CallerMatch::Run => "run".to_owned(),
        CallerMatch::Operator => "operator".to_owned(),
        CallerMatch::Token(name) => format!("token:{name}"),
    }
}

impl Core {
    /// Every callable an agent run could ever be given (never `audit.*`, never an operator
    /// callable), sorted.
    fn run_callables(&self) -> BTreeSet<&'static str> {
        self.registry
            .ids()
            .filter(|id| !id.starts_with("audit.") && !crate::auth::is_operator_callable(id))
            .collect()
    }

    /// The callables matching `glob`; an error with the nearest id when none does.
    fn expand(&self, glob: &str) -> Result<BTreeSet<&'static str>, ScopeError> {
        let matched: BTreeSet<&'static str> = self
            .run_callables()
            .into_iter()
            .filter(|id| glob_matches(glob, id))
            .collect();
        if matched.is_empty() {
            let near =
                entity::nearest(&glob.replace('*', ""), self.run_callables()).map(str::to_owned);
            return Err(ScopeError::NoMatch {
                glob: glob.to_owned(),
                near,
            });
        }
        Ok(matched)
    }

    /// What `/tools` shows for `session`: the scope of the agent that answers there (as the
    /// bridge decides it: an `/agent set` binding, `[sessions.X] agent`, else the default —
    /// the scope its runs are minted with), narrowed by the session's own scope.
    pub async fn session_tools(&self, session: Snowflake) -> SessionTools {
        let bound = match self.runs() {
            Some(runs) => runs.session_agent(session).await.agent,
            None => None,
        };
        let governance = self.governance();
        let settings = self.settings();
        let config = settings.config();
        let agent_scope = bound
            .as_deref()
            .and_then(|name| config.agents.get(name))
            .or_else(|| config.agent_for(session))
            .map(|agent| agent.config.tool_scope.as_slice());
        let session_scope = governance.session_scope(session);
        let effective = self
            .run_callables()
            .into_iter()
            .filter(|id| agent_scope.is_none_or(|scope| scope_allows(scope, id)))
            .filter(|id| {
                session_scope
                    .as_deref()
                    .is_none_or(|scope| scope_allows(scope, id))
            })
            .map(str::to_owned)
            .collect();
        SessionTools {
            session_id: session,
            effective,
            overridden: governance.is_overridden(session),
            session_scope,
            rules: settings
                .governance()
                .rules_for(session)
                .into_iter()
                .map(|rule| RuleView {
                    name: rule.name.clone(),
                    tool: rule.tool.clone(),
                    policy: policy_name(rule.policy),
                    session: rule
                        .session
                        .as_ref()
                        .map(|s| session_label(settings.aliases(), s)),
                    origin: rule
                        .origin
                        .as_ref()
                        .map(|s| session_label(settings.aliases(), s)),
                    caller: caller_label(&rule.caller),
                })
                .collect(),
            default_policy: policy_name(settings.governance().permissions().default),
        }
    }

    /// Applies an admin's change to `session`'s scope, effective for the next call (a run in
    /// progress included) and kept in the ledger. Only `admin.tools.set` calls this, so the
    /// change passes the pipeline and its audit row is the call's.
    pub async fn set_session_tools(
        &self,
        session: Snowflake,
        change: &ScopeChange,
    ) -> Result<SessionTools, ScopeError> {
        self.change_session_scope(session, change)?;
        Ok(self.session_tools(session).await)
    }

    fn change_session_scope(
        &self,
        session: Snowflake,
        change: &ScopeChange,
    ) -> Result<(), ScopeError> {
        let governance = self.governance();
        let current = || -> BTreeSet<&'static str> {
            let scope = governance.session_scope(session);
            self.run_callables()
                .into_iter()
                .filter(|id| scope.as_deref().is_none_or(|scope| scope_allows(scope, id)))
                .collect()
        };
        let next: Option<BTreeSet<&'static str>> = match change {
            ScopeChange::Enable(glob) => {
                let mut ids = current();
                ids.extend(self.expand(glob)?);
                Some(ids)
            }
            ScopeChange::Disable(glob) => {
                let remove = self.expand(glob)?;
                Some(current().difference(&remove).copied().collect())
            }
            ScopeChange::Set(globs) => {
                let mut ids = BTreeSet::new();
                for glob in globs {
                    ids.extend(self.expand(glob)?);
                }
                Some(ids)
            }
            ScopeChange::Reset => None,
        };
        governance.set_session_scope(
            session,
            next.map(|ids| ids.into_iter().map(str::to_owned).collect()),
        );
        Ok(())
    }

    /// Callable ids starting with or containing `partial`, for autocompletion (at most 25, as
    /// Discord shows).
    pub fn callable_suggestions(&self, partial: &str) -> Vec<String> {
        let partial = partial.trim().to_lowercase();
        let ids = self.run_callables();
        let mut starts: Vec<String> = Vec::new();
        let mut contains: Vec<String> = Vec::new();
        for id in ids {
            if id.starts_with(&partial) {
                starts.push(id.to_owned());
            } else if id.contains(&partial) {
                contains.push(id.to_owned());
            }
        }
        starts.extend(contains);
        starts.truncate(25);
        starts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_reads_each_action_and_refuses_the_rest() {
        assert_eq!(
            ScopeChange::parse("enable", Some("surface.pins.*")),
            Ok(ScopeChange::Enable("surface.pins.*".into()))
        );
        assert_eq!(
            ScopeChange::parse("set", Some("none")),
            Ok(ScopeChange::Set(vec![]))
        );
        assert_eq!(
            ScopeChange::parse("set", Some("all")),
            Ok(ScopeChange::Set(vec!["*".into()]))
        );
        assert_eq!(
            ScopeChange::parse("set", Some("surface.messages.list, surface.messages.read")),
            Ok(ScopeChange::Set(vec![
                "surface.messages.list".into(),
                "surface.messages.read".into()
            ]))
        );
        assert_eq!(ScopeChange::parse("reset", None), Ok(ScopeChange::Reset));
        assert!(ScopeChange::parse("enable", None).is_err());
        assert!(ScopeChange::parse("enable", Some("a b")).is_err());
        assert!(ScopeChange::parse("set", Some(" , ")).is_err());
        assert!(ScopeChange::parse("drop", Some("x")).is_err());
    }
}
