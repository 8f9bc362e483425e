//! Issue 26's sections in the file: `[[schedules]]`, `[scheduler]`, `[budgets]` and the
//! agent's prices — read into the typed config, every bad value located at its place, and
//! garbage refused with a report instead of a panic.

use std::time::Duration;

use proptest::prelude::*;
use switchboard_config::{Config, Principal, Snowflake};

const BASE: &str = r#"
[discord]
allowed_channel_ids = ["334455667788990011"]
admins = ["@Mira"]

[entity.sessions]
ops = "334455667788990011"

[entity.users]
Mira = "111111111111111111"
Stanley = "222222222222222222"
"#;

fn parse(extra: &str) -> Result<Config, Vec<String>> {
    Config::parse(&format!("{BASE}{extra}"), "test.toml").map_err(|report| {
        report
            .problems
            .iter()
            .map(|p| {
                format!(
                    "{}:{} {} | {} | {}",
                    p.line, p.column, p.key_path, p.message, p.help
                )
            })
            .collect()
    })
}

#[test]
fn a_schedule_in_the_file_is_read_with_its_session_resolved_and_a_stable_id() {
    let config = parse(
        "[scheduler]\nmissed_max_age_s = 120\n\n[[schedules]]\nname = \"digest\"\nsession = \"#ops\"\nprompt = \"Post the digest\"\nevery = \"15m\"\n",
    )
    .unwrap();
    assert_eq!(config.schedules.len(), 1);
    let entry = &config.schedules[0];
    assert_eq!(entry.id, "config:digest");
    assert_eq!(entry.session_id, Snowflake(334_455_667_788_990_011));
    assert_eq!(entry.prompt, "Post the digest");
    assert!(!entry.spec.is_one_shot());
    assert_eq!(config.scheduler.missed_max_age, Duration::from_secs(120));
}

#[test]
fn without_the_sections_there_are_no_schedules_and_no_caps() {
    let config = parse("").unwrap();
    assert!(config.schedules.is_empty());
    assert_eq!(config.scheduler.missed_max_age, Duration::from_secs(600));
    assert!(!config.budgets.budgets.any());
}

#[test]
fn each_bad_schedule_value_is_located_with_what_to_do() {
    let problems = parse(
        "[[schedules]]\nname = \"x\"\nsession = \"#opz\"\nprompt = \"p\"\ncron = \"61 * * * *\"\n\n[[schedules]]\nname = \"y\"\nsession = \"#ops\"\nprompt = \"p\"\nevery = \"2s\"\nagent = \"support\"\n",
    )
    .unwrap_err();
    let joined = problems.join("\n");
    assert!(joined.contains("schedules[0].cron"), "{joined}");
    // The cron entry is refused before its session is looked at; the agent is refused
    // because this config has no agent at all.
    assert!(joined.contains("schedules[1].agent"), "{joined}");
    assert!(
        joined.contains("no named agents are configured"),
        "{joined}"
    );
    // Line and column point into the file (BASE has 12 lines).
    assert!(problems.iter().all(|p| !p.starts_with("0:")), "{joined}");
}

#[test]
fn a_schedule_naming_an_unknown_session_gets_a_did_you_mean() {
    let problems =
        parse("[[schedules]]\nname = \"x\"\nsession = \"#opz\"\nprompt = \"p\"\nevery = \"1h\"\n")
            .unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("schedules[0].session"));
    assert!(
        problems[0].contains("did you mean \"#ops\"?"),
        "{problems:?}"
    );
}

#[test]
fn schedules_and_scheduler_refuse_unknown_keys() {
    let problems = parse("[scheduler]\nmissed_max_age = 3\n").unwrap_err();
    assert!(
        problems[0].contains("unknown key `missed_max_age`"),
        "{problems:?}"
    );
    assert!(
        problems[0].contains("did you mean `missed_max_age_s`"),
        "{problems:?}"
    );
    let problems =
        parse("[[schedules]]\nname = \"x\"\nsession = \"#ops\"\nprompt = \"p\"\nevry = \"1h\"\n")
            .unwrap_err();
    assert!(
        problems.iter().any(|p| p.contains("unknown key `evry`")),
        "{problems:?}"
    );
}

#[test]
fn budgets_are_read_per_scope_with_exempt_users_resolved() {
    let config = parse(
        "[budgets]\nexempt = [\"admins\", \"@Stanley\"]\n\n[budgets.user]\ntokens_per_day = 1000\nusd_per_month = 2.5\n",
    )
    .unwrap();
    let budgets = &config.budgets;
    assert_eq!(budgets.budgets.user.tokens_per_day, Some(1000));
    assert_eq!(budgets.budgets.user.usd_per_month, Some(2_500_000));
    assert_eq!(
        budgets.exempt_principals,
        [Principal::User(Snowflake(222_222_222_222_222_222))]
    );
    let admins = &config.discord.admins;
    assert!(budgets.exempts_user(Snowflake(111_111_111_111_111_111), &[], admins));
    assert!(budgets.exempts_user(Snowflake(222_222_222_222_222_222), &[], admins));
    assert!(!budgets.exempts_user(Snowflake(333_333_333_333_333_333), &[], admins));
}

#[test]
fn bad_budget_values_are_located() {
    let problems = parse(
        "[budgets]\ntz = \"Europe/Pari\"\nexempt = [\"@Nobody\", \"token:ghost\"]\n\n[budgets.user]\ntokens_per_day = 0\nusd_per_day = 0.0000001\n\n[budgets.team]\ntokens_per_day = 5\n",
    )
    .unwrap_err();
    let joined = problems.join("\n");
    for key in [
        "budgets.team",
        "budgets.tz",
        "budgets.user.tokens_per_day",
        "budgets.user.usd_per_day",
        "budgets.exempt[0]",
        "budgets.exempt[1]",
    ] {
        assert!(joined.contains(key), "{key} missing in:\n{joined}");
    }
}

#[test]
fn an_agent_has_prices_in_dollars_per_million_tokens() {
    let config =
        parse("[agent]\nrunner = \"demo\"\nprice_in_per_mtok = 3\nprice_out_per_mtok = 15.5\n")
            .unwrap();
    let price = config.agent.unwrap().price;
    assert_eq!(price.in_micros_per_mtok, 3_000_000);
    assert_eq!(price.out_micros_per_mtok, 15_500_000);
    let problems = parse("[agent]\nrunner = \"demo\"\nprice_in_per_mtok = -1\n").unwrap_err();
    assert!(
        problems[0].contains("agent.price_in_per_mtok"),
        "{problems:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Whatever is written in the new sections, the config answers a value or a report.
    #[test]
    fn garbage_in_the_new_sections_never_panics(
        name in "\\PC{0,12}",
        when in prop_oneof![Just("every"), Just("cron"), Just("at"), Just("tz")],
        words in "\\PC{0,40}",
        cap in any::<i64>(),
        usd in "[-0-9.e]{0,12}",
    ) {
        let text = format!(
            "[[schedules]]\nname = {name:?}\nsession = \"#ops\"\nprompt = \"p\"\n{when} = {words:?}\n\n[budgets.guild]\ntokens_per_day = {cap}\nusd_per_day = {usd}\n",
        );
        let _ = parse(&text);
    }
}
