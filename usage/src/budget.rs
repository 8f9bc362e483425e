//! Hard budgets: caps per user, session, guild and agent, each per day and per month, in
//! tokens and dollars; whether a run may start, whether a running one crossed a cap, and the
//! notice that says which cap and when it resets.

use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use crate::money::{format_usd, group_digits};

/// Whose spending a cap counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// The person who triggered the run (`[budgets.user]`).
    User,
    /// The session the run is in (`[budgets.session]`).
    Session,
    /// The guild the session is in (`[budgets.guild]`).
    Guild,
    /// The agent that runs (`[budgets.agent]`).
    Agent,
}

impl Scope {
    /// Every scope, in the order checked.
    pub const ALL: [Scope; 4] = [Scope::User, Scope::Session, Scope::Guild, Scope::Agent];

    /// `user`, `session`, `guild` or `agent`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Session => "session",
            Scope::Guild => "guild",
            Scope::Agent => "agent",
        }
    }
}

/// The window a cap counts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    /// From midnight to midnight in `budgets.tz`.
    Day,
    /// From the first of the month to the first of the next, in `budgets.tz`.
    Month,
}

/// What a cap counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Prompt and completion tokens together.
    Tokens,
    /// Their cost, in micro-dollars.
    Usd,
}

/// One cap: a limit on what one scope's key spends in a period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cap {
    /// Whose spending.
    pub scope: Scope,
    /// Per day or per month.
    pub period: Period,
    /// Tokens or dollars.
    pub unit: Unit,
    /// The limit: tokens, or micro-dollars.
    pub limit: u64,
}

impl Cap {
    /// The config key that sets it, such as `budgets.user.tokens_per_day`.
    pub fn config_key(&self) -> String {
        let unit = match self.unit {
            Unit::Tokens => "tokens",
            Unit::Usd => "usd",
        };
        let period = match self.period {
            Period::Day => "day",
            Period::Month => "month",
        };
        format!("budgets.{}.{unit}_per_{period}", self.scope.as_str())
    }

    fn amount(&self, value: u64) -> String {
        match self.unit {
            Unit::Tokens => format!("{} tokens", group_digits(value)),
            Unit::Usd => format_usd(value),
        }
    }
}

/// The caps one scope has (`[budgets.user]`, …), each optional.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caps {
    /// `tokens_per_day`.
    pub tokens_per_day: Option<u64>,
    /// `tokens_per_month`.
    pub tokens_per_month: Option<u64>,
    /// `usd_per_day`, in micro-dollars.
    pub usd_per_day: Option<u64>,
    /// `usd_per_month`, in micro-dollars.
    pub usd_per_month: Option<u64>,
}

impl Caps {
    /// Whether no cap is set.
    pub fn is_empty(&self) -> bool {
        *self == Caps::default()
    }

    fn each(&self, scope: Scope) -> impl Iterator<Item = Cap> {
        [
            (Period::Day, Unit::Tokens, self.tokens_per_day),
            (Period::Month, Unit::Tokens, self.tokens_per_month),
            (Period::Day, Unit::Usd, self.usd_per_day),
            (Period::Month, Unit::Usd, self.usd_per_month),
        ]
        .into_iter()
        .filter_map(move |(period, unit, limit)| {
            limit.map(|limit| Cap {
                scope,
                period,
                unit,
                limit,
            })
        })
    }
}

/// Who is exempt from every cap (`budgets.exempt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exempt {
    /// `"operator"`: calls with the operator token (its chat API runs).
    Operator,
    /// `"admins"`: `discord.admins`.
    Admins,
    /// `"token:NAME"`: a named token's chat API runs.
    Token(String),
    /// Anything else: a user or role as `discord.admins` takes them (`"@Mira"`, an id); the
    /// config crate resolves it with its principal rules. `index` is its place in the list.
    Principal {
        /// As written.
        written: String,
        /// Its index in `budgets.exempt`.
        index: usize,
    },
}

/// `[budgets]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budgets {
    /// `budgets.tz` (default UTC): where days and months start.
    pub tz: Tz,
    /// `[budgets.user]`.
    pub user: Caps,
    /// `[budgets.session]`.
    pub session: Caps,
    /// `[budgets.guild]`.
    pub guild: Caps,
    /// `[budgets.agent]`.
    pub agent: Caps,
    /// `budgets.exempt`.
    pub exempt: Vec<Exempt>,
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets {
            tz: Tz::UTC,
            user: Caps::default(),
            session: Caps::default(),
            guild: Caps::default(),
            agent: Caps::default(),
            exempt: Vec::new(),
        }
    }
}

impl Budgets {
    /// The caps of one scope.
    pub fn caps(&self, scope: Scope) -> Caps {
        match scope {
            Scope::User => self.user,
            Scope::Session => self.session,
            Scope::Guild => self.guild,
            Scope::Agent => self.agent,
        }
    }

    /// Whether any cap is set (with none, nothing needs summing before a run).
    pub fn any(&self) -> bool {
        Scope::ALL.iter().any(|scope| !self.caps(*scope).is_empty())
    }

    /// The scopes that have caps: the ones whose spending the store must sum.
    pub fn capped_scopes(&self) -> Vec<Scope> {
        Scope::ALL
            .into_iter()
            .filter(|scope| !self.caps(*scope).is_empty())
            .collect()
    }
}

/// A span of time `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Its first instant.
    pub start: DateTime<Utc>,
    /// The first instant after it: when a cap counted in it resets.
    pub end: DateTime<Utc>,
}

/// The day and the month `now` is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
    /// Today, in `budgets.tz`.
    pub day: Window,
    /// This month, in `budgets.tz`.
    pub month: Window,
}

impl Windows {
    /// The window of a period.
    pub fn of(&self, period: Period) -> Window {
        match period {
            Period::Day => self.day,
            Period::Month => self.month,
        }
    }
}

/// The first instant of a local date: its midnight, or, where a DST change skips midnight,
/// the first local time that exists that day.
fn start_of(date: NaiveDate, tz: Tz) -> DateTime<Utc> {
    let midnight = date.and_hms_opt(0, 0, 0).unwrap_or_default();
    // No zone skips more than a few hours; quarter-hour steps find the first existing time.
    for quarter in 0..(4 * 24) {
        let local = midnight + Duration::minutes(15 * quarter);
        if let Some(start) = tz.from_local_datetime(&local).earliest() {
            return start.with_timezone(&Utc);
        }
    }
    Utc.from_utc_datetime(&midnight)
}

/// The day and month windows `now` falls in, in the zone `tz`.
pub fn windows(now: DateTime<Utc>, tz: Tz) -> Windows {
    let today = now.with_timezone(&tz).date_naive();
    let tomorrow = today.succ_opt().unwrap_or(today);
    let first = today.with_day(1).unwrap_or(today);
    let next_first = if first.month() == 12 {
        NaiveDate::from_ymd_opt(first.year() + 1, 1, 1)
    } else {
        NaiveDate::from_ymd_opt(first.year(), first.month() + 1, 1)
    }
    .unwrap_or(first);
    Windows {
        day: Window {
            start: start_of(today, tz),
            end: start_of(tomorrow, tz),
        },
        month: Window {
            start: start_of(first, tz),
            end: start_of(next_first, tz),
        },
    }
}

/// What was spent: tokens and micro-dollars.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Spent {
    /// Prompt and completion tokens together.
    pub tokens: u64,
    /// Their cost, in micro-dollars.
    pub micros: u64,
}

impl Spent {
    /// This and `other` together.
    pub fn plus(self, other: Spent) -> Spent {
        Spent {
            tokens: self.tokens.saturating_add(other.tokens),
            micros: self.micros.saturating_add(other.micros),
        }
    }

    fn of(&self, unit: Unit) -> u64 {
        match unit {
            Unit::Tokens => self.tokens,
            Unit::Usd => self.micros,
        }
    }
}

/// What one key of one scope (this user, this session, …) spent in the current windows, as
/// the store sums its usage rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spending {
    /// The scope.
    pub scope: Scope,
    /// The key: a user, session or guild id, an agent's name, or the API's own keys.
    pub key: String,
    /// Spent today ([`Windows::day`]).
    pub day: Spent,
    /// Spent this month ([`Windows::month`]).
    pub month: Spent,
}

impl Spending {
    fn in_period(&self, period: Period) -> Spent {
        match period {
            Period::Day => self.day,
            Period::Month => self.month,
        }
    }
}

/// A run refused (or stopped) by a cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The cap reached (of those reached, the one that resets last: until then nothing
    /// runs).
    pub cap: Cap,
    /// Whose: the key of the cap's scope.
    pub key: String,
    /// What was spent in the cap's window.
    pub spent: u64,
    /// When the cap's window ends and the spending counts from zero again.
    pub resets_at: DateTime<Utc>,
    /// Whether a running run crossed it (it stops at its next model round), rather than a
    /// run refused before it started.
    pub during_run: bool,
}

/// Whether a run may start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Under every cap.
    Allowed,
    /// At or over a cap: the model is not called.
    Refused(Refusal),
}

fn reached(budgets: &Budgets, spending: &[Spending], windows: &Windows) -> Option<Refusal> {
    spending
        .iter()
        .flat_map(|spent| {
            budgets
                .caps(spent.scope)
                .each(spent.scope)
                .filter_map(move |cap| {
                    let used = spent.in_period(cap.period).of(cap.unit);
                    (used >= cap.limit).then(|| Refusal {
                        cap,
                        key: spent.key.clone(),
                        spent: used,
                        resets_at: windows.of(cap.period).end,
                        during_run: false,
                    })
                })
        })
        .max_by_key(|refusal| (refusal.resets_at, refusal.cap.period))
}

/// Before a run: refused when any key's spending is at or over one of its scope's caps.
/// `spending` holds one entry per scope the run has a key in (a DM has no guild; a
/// schedule's run has no user), summed over [`windows`] of now. Exemptions
/// (`budgets.exempt`) are decided before, by whoever knows the caller.
pub fn check(budgets: &Budgets, spending: &[Spending], windows: &Windows) -> Decision {
    match reached(budgets, spending, windows) {
        Some(refusal) => Decision::Refused(refusal),
        None => Decision::Allowed,
    }
}

/// During a run, before each model round after the first: the cap this run's own usage so
/// far (`run`) pushed a key to, if any. `at_start` is the spending [`check`] allowed.
pub fn crossed(
    budgets: &Budgets,
    at_start: &[Spending],
    run: Spent,
    windows: &Windows,
) -> Option<Refusal> {
    let now: Vec<Spending> = at_start
        .iter()
        .map(|spent| Spending {
            scope: spent.scope,
            key: spent.key.clone(),
            day: spent.day.plus(run),
            month: spent.month.plus(run),
        })
        .collect();
    reached(budgets, &now, windows).map(|refusal| Refusal {
        during_run: true,
        ..refusal
    })
}

impl Refusal {
    fn whose(&self, agent_style: bool) -> String {
        match self.cap.scope {
            Scope::User => "your".to_owned(),
            Scope::Session => "this channel's".to_owned(),
            Scope::Guild => "this server's".to_owned(),
            Scope::Agent if agent_style => format!("the `{}` agent's", self.key),
            Scope::Agent => format!("the {} agent's", self.key),
        }
    }

    fn what(&self, agent_style: bool) -> String {
        let period = match self.cap.period {
            Period::Day => "daily",
            Period::Month => "monthly",
        };
        let unit = match self.cap.unit {
            Unit::Tokens => "token",
            Unit::Usd => "spending",
        };
        format!(
            "{} {period} {unit} budget is used up ({} of {}; {})",
            self.whose(agent_style),
            match self.cap.unit {
                Unit::Tokens => group_digits(self.spent),
                Unit::Usd => format_usd(self.spent),
            },
            self.cap.amount(self.cap.limit),
            self.cap.config_key()
        )
    }

    /// The line posted in Discord: which cap, how much, and when it resets (a Discord
    /// timestamp, shown in each reader's own time zone). It mentions nobody.
    pub fn notice(&self) -> String {
        let at = self.resets_at.timestamp();
        let what = self.what(true);
        if self.during_run {
            format!("⛔ I stopped here: {what}. It resets <t:{at}:R> (<t:{at}:f>).")
        } else {
            format!(
                "⛔ {}. It resets <t:{at}:R> (<t:{at}:f>).",
                capitalize(&what)
            )
        }
    }

    /// The same in plain text with an RFC 3339 time, for the chat API's error and the logs.
    pub fn message(&self) -> String {
        let at = self
            .resets_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let what = self.what(false);
        if self.during_run {
            format!("the run stopped: {what}; it resets at {at}")
        } else {
            format!("{what}; it resets at {at}")
        }
    }

    /// The machine-readable code.
    pub fn code(&self) -> &'static str {
        "budget_exceeded"
    }
}

fn capitalize(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    fn user_caps() -> Budgets {
        Budgets {
            user: Caps {
                tokens_per_day: Some(100_000),
                usd_per_month: Some(5_000_000),
                ..Caps::default()
            },
            ..Budgets::default()
        }
    }

    fn spending(day_tokens: u64, month_micros: u64) -> Vec<Spending> {
        vec![Spending {
            scope: Scope::User,
            key: "1000000000000000401".into(),
            day: Spent {
                tokens: day_tokens,
                micros: 0,
            },
            month: Spent {
                tokens: day_tokens,
                micros: month_micros,
            },
        }]
    }

    #[test]
    fn a_run_under_every_cap_may_start() {
        let windows = windows(utc("2026-03-10T15:00:00Z"), Tz::UTC);
        assert_eq!(
            check(&user_caps(), &spending(99_999, 4_999_999), &windows),
            Decision::Allowed
        );
        assert_eq!(
            check(&Budgets::default(), &spending(u64::MAX, u64::MAX), &windows),
            Decision::Allowed
        );
    }

    #[test]
    fn a_run_at_a_cap_is_refused_with_the_cap_and_its_reset() {
        let windows = windows(utc("2026-03-10T15:00:00Z"), Tz::UTC);
        let Decision::Refused(refusal) = check(&user_caps(), &spending(100_000, 0), &windows)
        else {
            panic!("not refused");
        };
        assert_eq!(refusal.cap.config_key(), "budgets.user.tokens_per_day");
        assert_eq!(refusal.resets_at, utc("2026-03-11T00:00:00Z"));
        assert_eq!(
            refusal.notice(),
            "⛔ Your daily token budget is used up (100,000 of 100,000 tokens; budgets.user.tokens_per_day). It resets <t:1773187200:R> (<t:1773187200:f>)."
        );
        assert_eq!(
            refusal.message(),
            "your daily token budget is used up (100,000 of 100,000 tokens; budgets.user.tokens_per_day); it resets at 2026-03-11T00:00:00Z"
        );
        assert_eq!(refusal.code(), "budget_exceeded");
    }

    #[test]
    fn of_several_caps_reached_the_one_that_resets_last_is_named() {
        let windows = windows(utc("2026-03-10T15:00:00Z"), Tz::UTC);
        let Decision::Refused(refusal) =
            check(&user_caps(), &spending(200_000, 5_000_000), &windows)
        else {
            panic!("not refused");
        };
        assert_eq!(refusal.cap.config_key(), "budgets.user.usd_per_month");
        assert_eq!(refusal.resets_at, utc("2026-04-01T00:00:00Z"));
        assert!(refusal
            .notice()
            .contains("monthly spending budget is used up ($5.00 of $5.00;"));
    }

    #[test]
    fn a_run_that_crosses_a_cap_is_stopped_and_says_so() {
        let windows = windows(utc("2026-03-10T15:00:00Z"), Tz::UTC);
        let at_start = spending(90_000, 0);
        assert_eq!(check(&user_caps(), &at_start, &windows), Decision::Allowed);
        assert_eq!(
            crossed(
                &user_caps(),
                &at_start,
                Spent {
                    tokens: 9_999,
                    micros: 0
                },
                &windows
            ),
            None
        );
        let stopped = crossed(
            &user_caps(),
            &at_start,
            Spent {
                tokens: 10_000,
                micros: 0,
            },
            &windows,
        )
        .unwrap();
        assert!(stopped.during_run);
        assert!(stopped.notice().starts_with(
            "⛔ I stopped here: your daily token budget is used up (100,000 of 100,000 tokens;"
        ));
        assert!(stopped.message().starts_with("the run stopped: "));
    }

    #[test]
    fn notices_name_the_scope_without_mentioning_anyone() {
        let windows = windows(utc("2026-03-10T15:00:00Z"), Tz::UTC);
        for (scope, words) in [
            (Scope::Session, "this channel's daily token budget"),
            (Scope::Guild, "this server's daily token budget"),
            (Scope::Agent, "the `support` agent's daily token budget"),
        ] {
            let budgets = Budgets {
                session: Caps {
                    tokens_per_day: Some(1),
                    ..Caps::default()
                },
                guild: Caps {
                    tokens_per_day: Some(1),
                    ..Caps::default()
                },
                agent: Caps {
                    tokens_per_day: Some(1),
                    ..Caps::default()
                },
                ..Budgets::default()
            };
            let spent = [Spending {
                scope,
                key: "support".into(),
                day: Spent {
                    tokens: 1,
                    micros: 0,
                },
                month: Spent::default(),
            }];
            let Decision::Refused(refusal) = check(&budgets, &spent, &windows) else {
                panic!()
            };
            assert!(
                refusal.notice().to_lowercase().contains(words),
                "{}",
                refusal.notice()
            );
            assert!(!refusal.notice().contains("<@"));
        }
    }

    #[test]
    fn days_and_months_start_at_local_midnight_in_the_budget_zone() {
        let paris = Tz::Europe__Paris;
        let w = windows(utc("2026-03-10T23:30:00Z"), paris);
        // 00:30 on the 11th in Paris (CET, +01:00).
        assert_eq!(w.day.start, utc("2026-03-10T23:00:00Z"));
        assert_eq!(w.day.end, utc("2026-03-11T23:00:00Z"));
        assert_eq!(w.month.start, utc("2026-02-28T23:00:00Z"));
        // The month ends after the spring change: April starts at +02:00.
        assert_eq!(w.month.end, utc("2026-03-31T22:00:00Z"));
        let december = windows(utc("2026-12-31T12:00:00Z"), Tz::UTC);
        assert_eq!(december.month.end, utc("2027-01-01T00:00:00Z"));
    }

    #[test]
    fn a_day_whose_midnight_does_not_exist_starts_at_its_first_existing_time() {
        // Havana springs forward at midnight: 2026-03-08 00:00 does not exist, 01:00 does.
        let havana = Tz::America__Havana;
        let w = windows(utc("2026-03-08T12:00:00Z"), havana);
        assert_eq!(
            w.day
                .start
                .with_timezone(&havana)
                .format("%F %T")
                .to_string(),
            "2026-03-08 01:00:00"
        );
        assert_eq!((w.day.end - w.day.start).num_hours(), 23);
    }
}
