//! `[budgets]` as written in the config file, and its checks.
//!
//! ```toml
//! [budgets]
//! tz = "Europe/Paris"                       # where days and months start; default UTC
//! exempt = ["operator", "admins", "@Mira"]  # never capped
//!
//! [budgets.user]                            # each user who triggers runs
//! tokens_per_day = 200000
//! usd_per_month = 5
//!
//! [budgets.guild]                           # each guild
//! usd_per_day = 2.5
//! ```

use chrono_tz::Tz;
use serde::Deserialize;
use switchboard_agents::Findings;
use toml::Spanned;

use crate::budget::{Budgets, Caps, Exempt};
use crate::money::RawUsd;

/// The largest token cap: far above any real one, far below overflow when sums are added.
pub const MAX_TOKEN_CAP: u64 = 1_000_000_000_000;

/// `[budgets]` as read from the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBudgets {
    /// `budgets.tz`.
    #[serde(default)]
    pub tz: Option<Spanned<String>>,
    /// `budgets.exempt`.
    #[serde(default)]
    pub exempt: Vec<Spanned<String>>,
    /// `[budgets.user]`.
    #[serde(default)]
    pub user: Option<RawCaps>,
    /// `[budgets.session]`.
    #[serde(default)]
    pub session: Option<RawCaps>,
    /// `[budgets.guild]`.
    #[serde(default)]
    pub guild: Option<RawCaps>,
    /// `[budgets.agent]`.
    #[serde(default)]
    pub agent: Option<RawCaps>,
}

/// One scope's caps as read from the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCaps {
    /// `tokens_per_day`.
    #[serde(default)]
    pub tokens_per_day: Option<Spanned<u64>>,
    /// `tokens_per_month`.
    #[serde(default)]
    pub tokens_per_month: Option<Spanned<u64>>,
    /// `usd_per_day`: dollars, at most six decimals.
    #[serde(default)]
    pub usd_per_day: Option<Spanned<RawUsd>>,
    /// `usd_per_month`: dollars, at most six decimals.
    #[serde(default)]
    pub usd_per_month: Option<Spanned<RawUsd>>,
}

fn tokens(value: &Option<Spanned<u64>>, key: &str, findings: &mut Findings) -> Option<u64> {
    let value = value.as_ref()?;
    let tokens = *value.get_ref();
    if !(1..=MAX_TOKEN_CAP).contains(&tokens) {
        findings.add(
            Some(value.span()),
            key,
            format!("{tokens} is out of range"),
            format!("use a whole number of tokens from 1 to {MAX_TOKEN_CAP}, or remove the key for no cap"),
        );
        return None;
    }
    Some(tokens)
}

fn usd(value: &Option<Spanned<RawUsd>>, key: &str, findings: &mut Findings) -> Option<u64> {
    let value = value.as_ref()?;
    match value.get_ref().micros() {
        Ok(0) => {
            findings.add(
                Some(value.span()),
                key,
                "a cap of $0 lets nothing run",
                "set a positive amount, or remove the key for no cap",
            );
            None
        }
        Ok(micros) => Some(micros),
        Err(error) => {
            findings.add(Some(value.span()), key, error.to_string(), error.help());
            None
        }
    }
}

fn caps(raw: &Option<RawCaps>, scope: &str, findings: &mut Findings) -> Caps {
    let Some(raw) = raw else {
        return Caps::default();
    };
    let key = |name: &str| format!("budgets.{scope}.{name}");
    Caps {
        tokens_per_day: tokens(&raw.tokens_per_day, &key("tokens_per_day"), findings),
        tokens_per_month: tokens(&raw.tokens_per_month, &key("tokens_per_month"), findings),
        usd_per_day: usd(&raw.usd_per_day, &key("usd_per_day"), findings),
        usd_per_month: usd(&raw.usd_per_month, &key("usd_per_month"), findings),
    }
}

/// Checks `[budgets]`. `tz` is checked as schedules check theirs (a typo gets the zone it
/// resembles); `exempt` entries other than `operator`, `admins` and `token:NAME` are passed on
/// as [`Exempt::Principal`] for the config crate to resolve (and to check `token:NAME`
/// against its tokens).
pub fn budgets(raw: &RawBudgets, findings: &mut Findings) -> Budgets {
    // Zones are read as schedules read theirs: exact IANA names, a typo gets the zone it
    // resembles.
    let tz = match &raw.tz {
        None => Tz::UTC,
        Some(value) => match switchboard_schedule::parse_tz(value.get_ref()) {
            Ok(tz) => tz,
            Err(error) => {
                findings.add(
                    Some(value.span()),
                    "budgets.tz",
                    format!("'{}' is not an IANA time zone", value.get_ref().trim()),
                    error.help(),
                );
                Tz::UTC
            }
        },
    };
    let mut exempt = Vec::with_capacity(raw.exempt.len());
    for (index, value) in raw.exempt.iter().enumerate() {
        let written = value.get_ref().trim();
        let entry = match written {
            "operator" => Exempt::Operator,
            "admins" => Exempt::Admins,
            _ => match written.strip_prefix("token:") {
                Some(name) if !name.is_empty() => Exempt::Token(name.to_owned()),
                Some(_) => {
                    findings.add(
                        Some(value.span()),
                        format!("budgets.exempt[{index}]"),
                        "'token:' names no token",
                        "write token:NAME with the name of one of [[toolserver.tokens]]",
                    );
                    continue;
                }
                None if written.is_empty() => {
                    findings.add(
                        Some(value.span()),
                        format!("budgets.exempt[{index}]"),
                        "the entry is empty",
                        "write \"operator\", \"admins\", \"token:NAME\", or a user or role (\"@Mira\", an id)",
                    );
                    continue;
                }
                None => Exempt::Principal {
                    written: written.to_owned(),
                    index,
                },
            },
        };
        exempt.push(entry);
    }
    Budgets {
        tz,
        user: caps(&raw.user, "user", findings),
        session: caps(&raw.session, "session", findings),
        guild: caps(&raw.guild, "guild", findings),
        agent: caps(&raw.agent, "agent", findings),
        exempt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Scope;

    #[derive(Deserialize)]
    struct File {
        budgets: RawBudgets,
    }

    fn read(text: &str) -> (Budgets, Vec<switchboard_agents::Finding>) {
        let file: File = toml::from_str(text).unwrap();
        let mut findings = Findings::new();
        let budgets = budgets(&file.budgets, &mut findings);
        (budgets, findings.into_vec())
    }

    #[test]
    fn every_scope_takes_any_of_the_four_caps() {
        let (budgets, findings) = read(
            "[budgets]\ntz = \"Europe/Paris\"\nexempt = [\"operator\", \"admins\", \"token:ci\", \"@Mira\"]\n[budgets.user]\ntokens_per_day = 200000\nusd_per_month = 5\n[budgets.guild]\nusd_per_day = 2.5\n[budgets.agent]\ntokens_per_month = 10000000\n[budgets.session]\n",
        );
        assert!(findings.is_empty(), "{findings:?}");
        assert_eq!(budgets.tz, Tz::Europe__Paris);
        assert_eq!(
            budgets.user,
            Caps {
                tokens_per_day: Some(200_000),
                usd_per_month: Some(5_000_000),
                ..Caps::default()
            }
        );
        assert_eq!(budgets.guild.usd_per_day, Some(2_500_000));
        assert_eq!(budgets.agent.tokens_per_month, Some(10_000_000));
        assert!(budgets.session.is_empty());
        assert_eq!(
            budgets.capped_scopes(),
            [Scope::User, Scope::Guild, Scope::Agent]
        );
        assert_eq!(
            budgets.exempt,
            [
                Exempt::Operator,
                Exempt::Admins,
                Exempt::Token("ci".into()),
                Exempt::Principal {
                    written: "@Mira".into(),
                    index: 3
                }
            ]
        );
    }

    #[test]
    fn bad_caps_zones_and_exemptions_are_each_located() {
        let text = "[budgets]\ntz = \"Europe/Pariss\"\nexempt = [\"\", \"token:\"]\n[budgets.user]\ntokens_per_day = 0\nusd_per_day = 0.0000001\nusd_per_month = 0\n";
        let (budgets, findings) = read(text);
        let keys: Vec<&str> = findings.iter().map(|f| f.key_path.as_str()).collect();
        assert_eq!(
            keys,
            [
                "budgets.tz",
                "budgets.exempt[0]",
                "budgets.exempt[1]",
                "budgets.user.tokens_per_day",
                "budgets.user.usd_per_day",
                "budgets.user.usd_per_month"
            ]
        );
        assert!(findings[0]
            .help
            .starts_with("did you mean \"Europe/Paris\"?"));
        assert_eq!(&text[findings[4].span.clone().unwrap()], "0.0000001");
        assert!(budgets.user.is_empty());
        assert!(!budgets.any());
    }

    #[test]
    fn unknown_keys_are_refused_by_the_structural_pass() {
        assert!(toml::from_str::<File>("[budgets.user]\ntokens_per_week = 5\n").is_err());
        assert!(toml::from_str::<File>("[budgets.team]\ntokens_per_day = 5\n").is_err());
        assert!(toml::from_str::<File>("[budgets.user]\ntokens_per_day = -5\n").is_err());
    }
}
