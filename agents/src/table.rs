//! The `[agents]` table: `[agents.NAME]` agent tables beside its own keys `default` and
//! `max_handoff_depth`, and references to agents from elsewhere in the config
//! (`[sessions.X] agent`, `[[schedules]] agent`).
//!
//! The agent tables' contents are the config crate's (`[agents.NAME]` has exactly the keys
//! `[agent]` has), so [`RawAgents`] is generic over them: the config crate reads
//! `agents: Option<RawAgents<RawAgent>>` and checks each table as it checks `[agent]`, and
//! [`settings`] checks the rest.

use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use crate::finding::{bounded, Findings};
use crate::name::AgentName;
use crate::scope::nearest_agent;

/// `agents.max_handoff_depth` when not set: a run started by a person may hand off, and that
/// sub-run may hand off once more.
pub const DEFAULT_MAX_HANDOFF_DEPTH: u32 = 2;
/// The largest `agents.max_handoff_depth`.
pub const MAX_HANDOFF_DEPTH_LIMIT: u64 = 8;

/// `[agents]` as read from the file: its own two keys and every `[agents.NAME]` table in file
/// order, each with its name's span.
#[derive(Debug)]
pub struct RawAgents<A> {
    /// `agents.default`, kept as any TOML value so that a table named `default` gets a clear
    /// problem instead of a type error.
    pub default: Option<Spanned<toml::Value>>,
    /// `agents.max_handoff_depth`, kept as any TOML value for the same reason.
    pub max_handoff_depth: Option<Spanned<toml::Value>>,
    /// `[agents.NAME]` tables: the name as written, and its table.
    pub agents: Vec<(Spanned<String>, A)>,
}

impl<A> Default for RawAgents<A> {
    fn default() -> Self {
        RawAgents {
            default: None,
            max_handoff_depth: None,
            agents: Vec::new(),
        }
    }
}

impl<'de, A: Deserialize<'de>> Deserialize<'de> for RawAgents<A> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct AgentsVisitor<A>(PhantomData<A>);

        impl<'de, A: Deserialize<'de>> Visitor<'de> for AgentsVisitor<A> {
            type Value = RawAgents<A>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "the [agents] table: default, max_handoff_depth and [agents.NAME] tables",
                )
            }

            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut raw = RawAgents::default();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    match key.get_ref().as_str() {
                        "default" => {
                            if raw.default.is_some() {
                                return Err(de::Error::duplicate_field("default"));
                            }
                            raw.default = Some(map.next_value()?);
                        }
                        "max_handoff_depth" => {
                            if raw.max_handoff_depth.is_some() {
                                return Err(de::Error::duplicate_field("max_handoff_depth"));
                            }
                            raw.max_handoff_depth = Some(map.next_value()?);
                        }
                        _ => {
                            let table = map.next_value::<A>()?;
                            raw.agents.push((key, table));
                        }
                    }
                }
                // TOML tables arrive sorted by key; problems read best in file order.
                raw.agents.sort_by_key(|(name, _)| name.span().start);
                Ok(raw)
            }
        }

        deserializer.deserialize_map(AgentsVisitor(PhantomData))
    }
}

/// What `[agents]` says beside the agent tables themselves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentsSettings {
    /// The configured agents' names, in file order; only the valid ones.
    pub names: Vec<AgentName>,
    /// The agent that answers in sessions no `[sessions.X] agent` binds: `agents.default`, or
    /// the only agent when there is one. `None` only when no agent is configured.
    pub default: Option<AgentName>,
    /// `agents.max_handoff_depth` (default 2, 0 to 8; 0 turns handoff off).
    pub max_handoff_depth: u32,
}

/// Checks `[agents]`: every name, names that differ only by case, `default` naming a
/// configured agent (with a did-you-mean), `max_handoff_depth`'s range, and `[agent]`
/// beside `[agents.NAME]` tables (`legacy_agent`: whether the file has an `[agent]` table).
/// Every problem is pushed to `findings`; the answer holds what was valid.
pub fn settings<A>(
    raw: &RawAgents<A>,
    legacy_agent: bool,
    findings: &mut Findings,
) -> AgentsSettings {
    let mut names: Vec<AgentName> = Vec::with_capacity(raw.agents.len());
    let mut seen: HashMap<String, String> = HashMap::new();
    for (written, _) in &raw.agents {
        let key_path = format!("agents.{}", written.get_ref());
        match AgentName::parse(written.get_ref()) {
            Ok(name) => {
                let folded = name.as_str().to_ascii_lowercase();
                if let Some(first) = seen.get(&folded) {
                    findings.add(
                        Some(written.span()),
                        &key_path,
                        format!("agent '{name}' differs from '{first}' only by case"),
                        "agent names are told apart ignoring case (model = \"switchboard:NAME\" is typed by people): rename or remove one of them",
                    );
                    continue;
                }
                seen.insert(folded, name.to_string());
                names.push(name);
            }
            Err(error) => findings.add(
                Some(written.span()),
                &key_path,
                error.to_string(),
                error.help(),
            ),
        }
    }
    if legacy_agent && !raw.agents.is_empty() {
        let span = raw.agents.first().map(|(name, _)| name.span());
        findings.add(
            span,
            "agent",
            "the file has both [agent] and [agents.NAME] tables",
            "[agent] alone is the one default agent; with named agents, move its keys into an [agents.NAME] table and set agents.default = \"NAME\"",
        );
    }
    let default = match &raw.default {
        Some(value) => default_agent(value, &names, findings),
        None if names.len() > 1 => {
            let span = raw.agents.get(1).map(|(name, _)| name.span());
            findings.add(
                span,
                "agents.default",
                format!("{} agents are configured and none is the default", names.len()),
                format!(
                    "set agents.default to the agent that answers where no [sessions.X] agent is set, one of: {}",
                    join(&names)
                ),
            );
            None
        }
        None => names.first().cloned(),
    };
    let max_handoff_depth = match &raw.max_handoff_depth {
        None => DEFAULT_MAX_HANDOFF_DEPTH,
        Some(value) => match value.get_ref() {
            toml::Value::Integer(depth) if *depth >= 0 => bounded(
                &Spanned::new(value.span(), *depth as u64),
                "agents.max_handoff_depth",
                0..=MAX_HANDOFF_DEPTH_LIMIT,
                "how many handoffs deep a chain may go; 0 turns agent.handoff off",
                findings,
            ) as u32,
            toml::Value::Table(_) => {
                findings.add(
                    Some(value.span()),
                    "agents.max_handoff_depth",
                    "'max_handoff_depth' is a key of the [agents] table itself, so no agent can be named that",
                    "rename this agent table; agents.max_handoff_depth = N caps how deep handoffs go",
                );
                DEFAULT_MAX_HANDOFF_DEPTH
            }
            other => {
                findings.add(
                    Some(value.span()),
                    "agents.max_handoff_depth",
                    format!("expected a whole number, found {}", other.type_str()),
                    format!(
                        "write max_handoff_depth = N with N from 0 to {MAX_HANDOFF_DEPTH_LIMIT} (default {DEFAULT_MAX_HANDOFF_DEPTH})"
                    ),
                );
                DEFAULT_MAX_HANDOFF_DEPTH
            }
        },
    };
    AgentsSettings {
        names,
        default,
        max_handoff_depth,
    }
}

fn join(names: &[AgentName]) -> String {
    names
        .iter()
        .map(AgentName::as_str)
        .collect::<Vec<_>>()
        .join(", ")
}

fn default_agent(
    value: &Spanned<toml::Value>,
    names: &[AgentName],
    findings: &mut Findings,
) -> Option<AgentName> {
    match value.get_ref() {
        toml::Value::String(written) => agent_ref(
            &Spanned::new(value.span(), written.clone()),
            "agents.default",
            names,
            findings,
        ),
        toml::Value::Table(_) => {
            findings.add(
                Some(value.span()),
                "agents.default",
                "'default' is a key of the [agents] table itself, so no agent can be named that",
                "rename this agent table, then point agents.default = \"NAME\" at the agent that answers where no [sessions.X] agent is set",
            );
            None
        }
        other => {
            findings.add(
                Some(value.span()),
                "agents.default",
                format!("expected an agent's name, found {}", other.type_str()),
                "write default = \"NAME\", naming one of the [agents.NAME] tables",
            );
            None
        }
    }
}

/// A reference to a configured agent from elsewhere in the config (`agents.default`,
/// `[sessions.X] agent`, `[[schedules]] agent`): a finding with a did-you-mean when it names
/// none.
pub fn agent_ref(
    value: &Spanned<String>,
    key: &str,
    configured: &[AgentName],
    findings: &mut Findings,
) -> Option<AgentName> {
    let written = value.get_ref().trim();
    if let Some(found) = configured.iter().find(|a| a.as_str() == written) {
        return Some(found.clone());
    }
    let help = match nearest_agent(written, configured) {
        Some(near) => format!(
            "did you mean \"{near}\"? Name one of the [agents.NAME] tables: {}",
            join(configured)
        ),
        None if configured.is_empty() => {
            "no named agents are configured: add an [agents.NAME] table first".to_owned()
        }
        None => format!("name one of the [agents.NAME] tables: {}", join(configured)),
    };
    findings.add(
        Some(value.span()),
        key,
        format!("'{written}' is not a configured agent"),
        help,
    );
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Table {
        model: String,
    }

    #[derive(Debug, Deserialize)]
    struct File {
        #[serde(default)]
        agents: Option<RawAgents<Table>>,
    }

    fn read(text: &str) -> (AgentsSettings, Vec<crate::Finding>) {
        let file: File = toml::from_str(text).unwrap();
        let mut findings = Findings::new();
        let settings = settings(&file.agents.unwrap_or_default(), false, &mut findings);
        (settings, findings.into_vec())
    }

    #[test]
    fn agent_tables_are_read_beside_the_tables_own_keys_in_file_order() {
        let text = "[agents]\ndefault = \"support\"\nmax_handoff_depth = 1\n\n[agents.support]\nmodel = \"a\"\n\n[agents.release]\nmodel = \"b\"\n";
        let file: File = toml::from_str(text).unwrap();
        let raw = file.agents.unwrap();
        let names: Vec<&str> = raw
            .agents
            .iter()
            .map(|(n, _)| n.get_ref().as_str())
            .collect();
        assert_eq!(names, ["support", "release"]);
        assert_eq!(raw.agents[1].1.model, "b");
        let span = raw.agents[0].0.span();
        assert_eq!(&text[span], "support");
        let (settings, findings) = read(text);
        assert!(findings.is_empty(), "{findings:?}");
        assert_eq!(settings.default.unwrap().as_str(), "support");
        assert_eq!(settings.max_handoff_depth, 1);
    }

    #[test]
    fn one_agent_is_the_default_and_several_need_one_named() {
        let (one, findings) = read("[agents.support]\nmodel = \"a\"\n");
        assert!(findings.is_empty());
        assert_eq!(one.default.unwrap().as_str(), "support");
        assert_eq!(one.max_handoff_depth, DEFAULT_MAX_HANDOFF_DEPTH);
        let (several, findings) = read("[agents.a]\nmodel = \"a\"\n[agents.b]\nmodel = \"b\"\n");
        assert_eq!(several.default, None);
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].key_path, "agents.default");
        assert!(
            findings[0].help.contains("one of: a, b"),
            "{}",
            findings[0].help
        );
    }

    #[test]
    fn an_agent_table_named_after_a_reserved_key_is_a_clear_problem() {
        let (_, findings) =
            read("[agents.default]\nmodel = \"a\"\n[agents.max_handoff_depth]\nmodel = \"b\"\n");
        assert_eq!(findings.len(), 2, "{findings:?}");
        assert!(findings
            .iter()
            .all(|f| f.message.contains("key of the [agents] table itself")));
        let (_, findings) = read("[agents.Default]\nmodel = \"a\"\n");
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].key_path, "agents.Default");
    }

    #[test]
    fn default_names_a_configured_agent_with_a_did_you_mean() {
        let text = "[agents]\ndefault = \"suport\"\n[agents.support]\nmodel = \"a\"\n[agents.ops]\nmodel = \"b\"\n";
        let (settings, findings) = read(text);
        assert_eq!(settings.default, None);
        assert_eq!(findings.len(), 1);
        assert!(findings[0].help.starts_with("did you mean \"support\"?"));
        assert_eq!(&text[findings[0].span.clone().unwrap()], "\"suport\"");
    }

    #[test]
    fn bad_names_case_twins_and_bad_depths_are_each_reported() {
        let text = "[agents]\nmax_handoff_depth = 99\n[agents.\"two words\"]\nmodel = \"a\"\n[agents.Ops]\nmodel = \"b\"\n[agents.ops]\nmodel = \"c\"\n";
        let (settings, findings) = read(text);
        let keys: Vec<&str> = findings.iter().map(|f| f.key_path.as_str()).collect();
        assert_eq!(
            keys,
            ["agents.two words", "agents.ops", "agents.max_handoff_depth"]
        );
        assert_eq!(settings.names.len(), 1);
        assert_eq!(settings.max_handoff_depth, MAX_HANDOFF_DEPTH_LIMIT as u32);
        let (_, findings) =
            read("[agents]\nmax_handoff_depth = \"2\"\n[agents.a]\nmodel = \"a\"\n");
        assert!(findings[0].message.contains("expected a whole number"));
        let (_, findings) = read("[agents]\nmax_handoff_depth = -1\n[agents.a]\nmodel = \"a\"\n");
        assert!(findings[0].message.contains("expected a whole number"));
    }

    #[test]
    fn agent_and_agents_together_are_refused() {
        let file: File = toml::from_str("[agents.a]\nmodel = \"a\"\n").unwrap();
        let mut findings = Findings::new();
        settings(&file.agents.unwrap(), true, &mut findings);
        let found = findings.into_vec();
        assert_eq!(found.len(), 1);
        assert!(found[0]
            .help
            .contains("move its keys into an [agents.NAME] table"));
    }

    #[test]
    fn the_config_crates_structural_reader_reads_it_with_spans() {
        // The config crate deserializes from a parsed `DeTable` (to retry after removing a bad
        // entry); names and their spans must come through that path too.
        let text = "[agents]\ndefault = \"b\"\n[agents.b]\nmodel = \"x\"\n";
        let (document, errors) = toml::de::DeTable::parse_recoverable(text);
        assert!(errors.is_empty());
        let file = File::deserialize(toml::de::Deserializer::from(document)).unwrap();
        let raw = file.agents.unwrap();
        assert_eq!(&text[raw.agents[0].0.span()], "b");
        assert_eq!(&text[raw.default.unwrap().span()], "\"b\"");
    }

    #[test]
    fn a_wrong_key_inside_an_agent_table_fails_at_that_key() {
        let error = toml::from_str::<File>("[agents.a]\nmodle = \"a\"\n").unwrap_err();
        assert!(error.message().contains("unknown field `modle`"), "{error}");
        assert!(error.span().is_some());
    }
}
