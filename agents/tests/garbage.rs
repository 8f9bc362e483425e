//! Garbage names, scope entries and `[agents]` tables: every answer is a value or a typed
//! refusal, never a panic; a refusal in the file points inside the file.

use proptest::prelude::*;
use serde::Deserialize;
use switchboard_agents::{
    parse_scope_entry, settings, AgentGrant, AgentName, AgentNameError, Findings, RawAgents,
};

fn matches_the_rule(text: &str) -> bool {
    let len = text.chars().count();
    (1..=64).contains(&len)
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !["default", "max_handoff_depth"]
            .iter()
            .any(|r| r.eq_ignore_ascii_case(text))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    #[serde(default)]
    #[allow(dead_code)]
    model: Option<String>,
}

#[derive(Debug, Deserialize)]
struct File {
    #[serde(default)]
    agents: Option<RawAgents<Table>>,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_name_is_accepted_exactly_when_it_matches_the_rule(text in prop_oneof![
        "\\PC{0,70}",
        "[A-Za-z0-9_-]{0,70}",
        Just("default".to_owned()),
        Just("MAX_handoff_DEPTH".to_owned()),
    ]) {
        match AgentName::parse(&text) {
            Ok(name) => {
                prop_assert!(matches_the_rule(&text), "accepted {text:?}");
                prop_assert_eq!(name.as_str(), text.as_str());
            }
            Err(error) => {
                prop_assert!(!matches_the_rule(&text), "refused {text:?}: {error}");
                prop_assert!(!error.help().is_empty());
                if let AgentNameError::BadCharacter { at, found, .. } = &error {
                    prop_assert_eq!(text.chars().nth(at - 1), Some(*found));
                }
            }
        }
    }

    #[test]
    fn scope_entries_grant_only_configured_agents(entry in prop_oneof![
        "agent:\\PC{0,20}",
        "agent:[a-z]{1,8}",
        "\\PC{0,20}",
    ], configured in prop::collection::vec("[a-z]{1,8}", 0..5)) {
        let configured: Vec<AgentName> =
            configured.iter().filter_map(|n| AgentName::parse(n).ok()).collect();
        match parse_scope_entry(&entry, &configured) {
            None => prop_assert!(!entry.trim().starts_with("agent:")),
            Some(Ok(AgentGrant::One(name))) => prop_assert!(configured.contains(&name)),
            Some(Ok(AgentGrant::All)) => prop_assert_eq!(entry.trim(), "agent:*"),
            Some(Err(error)) => prop_assert!(!error.help(&configured).is_empty()),
        }
    }

    #[test]
    fn any_agents_table_gets_settings_and_findings_inside_the_file(lines in prop::collection::vec(prop_oneof![
        Just("[agents]".to_owned()),
        "\\[agents\\.[a-zA-Z_ -]{0,10}\\]",
        "\\[agents\\.\"\\PC{0,10}\"\\]",
        Just("[agents.default]".to_owned()),
        Just("[agents.max_handoff_depth]".to_owned()),
        "default = \"[a-z]{0,8}\"",
        "max_handoff_depth = -?[0-9]{1,22}",
        Just("default = 3".to_owned()),
        "model = \"[a-z]{0,5}\"",
        "\\PC{0,30}",
    ], 0..12), legacy in any::<bool>()) {
        let text = lines.join("\n");
        // Syntax and shape errors are the config crate's structural pass; the rest is ours.
        if let Ok(file) = toml::from_str::<File>(&text) {
            let raw = file.agents.unwrap_or_default();
            let mut findings = Findings::new();
            let settings = settings(&raw, legacy, &mut findings);
            prop_assert!(settings.max_handoff_depth <= 8);
            if let Some(default) = &settings.default {
                prop_assert!(settings.names.contains(default));
            }
            for finding in findings.iter() {
                if let Some(span) = &finding.span {
                    prop_assert!(span.end <= text.len(), "{finding:?}");
                }
                prop_assert!(!finding.help.is_empty());
            }
        }
    }
}
