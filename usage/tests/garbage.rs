//! Garbage amounts and `[budgets]` tables: a value or a located refusal, never a panic.

use proptest::prelude::*;
use serde::Deserialize;
use switchboard_agents::Findings;
use switchboard_usage::{budgets, parse_usd, RawBudgets};

#[derive(Deserialize)]
struct File {
    #[serde(default)]
    budgets: Option<RawBudgets>,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_text_is_an_amount_or_a_refusal(text in prop_oneof!["\\PC{0,30}", "[-+]?[0-9]{0,25}(\\.[0-9]{0,25})?"]) {
        match parse_usd(&text) {
            Ok(micros) => prop_assert!(micros <= 1_000_000_000 * 1_000_000),
            Err(error) => prop_assert!(!error.help().is_empty()),
        }
    }

    #[test]
    fn any_budgets_table_gets_budgets_and_findings_inside_the_file(lines in prop::collection::vec(prop_oneof![
        Just("[budgets]".to_owned()),
        "\\[budgets\\.(user|session|guild|agent|team)\\]",
        "(tokens|usd)_per_(day|month|week) = -?[0-9]{0,22}(\\.[0-9]{0,9})?",
        "tz = \"[A-Za-z/_]{0,20}\"",
        "exempt = \\[\"[a-z:@]{0,10}\"(, \"[a-z:@0-9]{0,10}\")?\\]",
        "\\PC{0,20}",
    ], 0..10)) {
        let text = lines.join("\n");
        if let Ok(File { budgets: Some(raw) }) = toml::from_str::<File>(&text) {
            let mut findings = Findings::new();
            let checked = budgets(&raw, &mut findings);
            for caps in [checked.user, checked.session, checked.guild, checked.agent] {
                for limit in [caps.tokens_per_day, caps.tokens_per_month, caps.usd_per_day, caps.usd_per_month].into_iter().flatten() {
                    prop_assert!(limit > 0);
                }
            }
            for finding in findings.iter() {
                let span = finding.span.clone().expect("every budget problem has a place");
                prop_assert!(span.end <= text.len());
                prop_assert!(finding.key_path.starts_with("budgets."));
            }
        }
    }
}
