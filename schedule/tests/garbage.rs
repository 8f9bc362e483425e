//! Garbage schedules: whatever the words, `Spec::parse`, `schedule.create`'s input and a
//! `[[schedules]]` entry answer with a schedule or a typed refusal naming its field and what
//! to do — never a panic.

use chrono::{DateTime, TimeZone, Utc};
use proptest::prelude::*;
use serde::Deserialize;
use switchboard_agents::{AgentName, Findings};
use switchboard_schedule::{
    parse_cron, parse_tz, schedules, Anchor, CreateInput, PastAt, RawSchedule, Spec, When,
    MAX_SPEC_CHARS,
};

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0).unwrap()
}

fn words() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop_oneof![
        "\\PC{0,30}",
        "[0-9*/,LW#?-]{0,6}( [0-9*/,LW#?A-Z-]{0,6}){0,7}",
        "[0-9]{0,22}(ns|us|ms|s|m|h|d|w|M|y|min|sec){0,2}",
        "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(Z|[+-][0-9]{2}:[0-9]{2})?",
        "[A-Za-z_/+-]{0,30}",
        Just("@daily".to_owned()),
        Just("@reboot".to_owned()),
        Just("1".repeat(MAX_SPEC_CHARS + 1)),
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_words_make_a_schedule_or_a_refusal_that_says_what_to_write(
        at in words(), every in words(), cron in words(), tz in words(), accept_past in any::<bool>(),
    ) {
        let when = When { at, every, cron, tz };
        let past = if accept_past { PastAt::Accept } else { PastAt::Refuse };
        match Spec::parse(&when, now(), past, Anchor::At(now())) {
            Ok(spec) => {
                // A schedule made from the words gives the same words back.
                let again = Spec::parse(&spec.when(), now(), PastAt::Accept, Anchor::At(now()));
                prop_assert!(again.is_ok(), "{spec:?} -> {:?}", spec.when());
                if let Some(next) = spec.next_after(now()) {
                    prop_assert!(next > now());
                }
            }
            Err(error) => {
                prop_assert!(!error.help().is_empty());
                prop_assert!(!error.to_string().is_empty());
            }
        }
    }

}

proptest! {
    // Each case looks for a did-you-mean among ~600 zone names: fewer cases.
    #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn cron_text_and_zone_names_are_parsed_or_refused(text in "\\PC{0,60}") {
        let _ = parse_cron(&text);
        if let Err(error) = parse_tz(&text) {
            prop_assert!(error.help().contains("IANA"));
        }
    }

    #[test]
    fn any_create_input_is_checked_or_refused(body in prop_oneof![
        "\\PC{0,80}",
        (words(), words(), words(), "\\PC{0,20}").prop_map(|(every, cron, tz, prompt)| {
            serde_json::json!({"sessionId": "#ops", "prompt": prompt, "every": every, "cron": cron, "tz": tz}).to_string()
        }),
    ]) {
        if let Ok(input) = serde_json::from_str::<CreateInput>(&body) {
            let agents = vec![AgentName::parse("support").unwrap()];
            if let Err(error) = input.check(&agents, now()) {
                prop_assert!(!error.help().is_empty());
                prop_assert!(!error.field().is_empty());
            }
        }
    }

    #[test]
    fn any_schedules_table_is_checked_with_findings_inside_the_file(
        entries in prop::collection::vec((words(), words(), words(), words(), "\\PC{0,12}", prop::option::of("[a-z]{0,8}")), 0..5)
    ) {
        #[derive(Deserialize)]
        struct File {
            #[serde(default)]
            schedules: Vec<RawSchedule>,
        }
        let mut text = String::new();
        for (at, every, cron, tz, name, agent) in &entries {
            text.push_str("[[schedules]]\n");
            text.push_str(&format!("name = {}\nsession = \"#ops\"\nprompt = \"p\"\n", toml_string(name)));
            for (key, value) in [("at", at), ("every", every), ("cron", cron), ("tz", tz)] {
                if let Some(value) = value {
                    text.push_str(&format!("{key} = {}\n", toml_string(value)));
                }
            }
            if let Some(agent) = agent {
                text.push_str(&format!("agent = {}\n", toml_string(agent)));
            }
        }
        let file: File = toml::from_str(&text).expect("the generator writes valid TOML");
        let mut findings = Findings::new();
        let checked = schedules(&file.schedules, &[AgentName::parse("support").unwrap()], now(), &mut findings);
        prop_assert!(checked.len() + findings.len() >= entries.len());
        for finding in findings.iter() {
            let span = finding.span.clone().expect("every schedule problem has a place");
            prop_assert!(span.end <= text.len());
            prop_assert!(finding.key_path.starts_with("schedules["));
        }
    }
}

fn toml_string(value: &str) -> String {
    toml::Value::String(value.to_owned()).to_string()
}
