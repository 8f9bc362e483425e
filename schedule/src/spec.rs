//! When a schedule fires: exactly one of `at` (an RFC 3339 time), `every` (a duration such as
//! `"2s"`, `"15m"`, `"1h30m"`) or `cron` (five fields, in the time zone `tz`), and the
//! arithmetic of its firings.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The shortest `every`: one second.
pub const MIN_EVERY_S: u64 = 1;
/// The longest `every`: a leap year (a longer wait is an `at`).
pub const MAX_EVERY_S: u64 = 366 * 86_400;
/// The most characters `at`, `every`, `cron` or `tz` may hold; more is not a schedule.
pub const MAX_SPEC_CHARS: usize = 200;

/// The longest text a time zone suggestion is looked for (the longest IANA name has 32).
const MAX_TZ_TYPO_LEN: usize = 40;

/// The five cron fields, in order.
pub const CRON_FIELDS: [CronField; 5] = [
    CronField::Minute,
    CronField::Hour,
    CronField::DayOfMonth,
    CronField::Month,
    CronField::DayOfWeek,
];

/// The words of a schedule as a person or the config gave them (`schedule.create`'s fields,
/// a `[[schedules]]` entry); [`Spec::parse`] checks them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct When {
    /// Once, at this RFC 3339 time (`2026-11-23T09:00:00+01:00`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// Repeatedly, this long apart: `2s`, `15m`, `1h30m`, `1d` (whole seconds, 1 s to 366 d).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    /// Five cron fields, `minute hour day-of-month month day-of-week` (`30 9 * * 1-5`), or
    /// `@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The IANA time zone the cron fields are read in (`Europe/Paris`); default UTC. Only
    /// with `cron`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
}

/// One of the five cron fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CronField {
    /// The first field, 0–59.
    Minute,
    /// The second field, 0–23.
    Hour,
    /// The third field, 1–31 (`L` for the last day, `15W` for the weekday nearest the 15th).
    DayOfMonth,
    /// The fourth field, 1–12 or JAN–DEC.
    Month,
    /// The fifth field, 0–7 (0 and 7 are Sunday) or SUN–SAT (`5#2` the second Friday, `5L`
    /// the last).
    DayOfWeek,
}

impl CronField {
    /// The field's name as a person says it.
    pub fn name(self) -> &'static str {
        match self {
            CronField::Minute => "minute",
            CronField::Hour => "hour",
            CronField::DayOfMonth => "day of month",
            CronField::Month => "month",
            CronField::DayOfWeek => "day of week",
        }
    }

    /// What the field accepts.
    pub fn accepts(self) -> &'static str {
        match self {
            CronField::Minute => "0-59",
            CronField::Hour => "0-23",
            CronField::DayOfMonth => "1-31, L (the last day) or nW (the weekday nearest day n)",
            CronField::Month => "1-12 or JAN-DEC",
            CronField::DayOfWeek => "0-7 (0 and 7 are Sunday) or SUN-SAT, n#k (the k-th weekday n of the month) or nL (the last)",
        }
    }
}

/// Which of [`When`]'s fields a problem is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WhenField {
    /// `at`.
    At,
    /// `every`.
    Every,
    /// `cron`.
    Cron,
    /// `tz`.
    Tz,
}

impl WhenField {
    /// The field's key, as in the input and the TOML.
    pub fn key(self) -> &'static str {
        match self {
            WhenField::At => "at",
            WhenField::Every => "every",
            WhenField::Cron => "cron",
            WhenField::Tz => "tz",
        }
    }
}

/// Why the words do not make a schedule. Each says which field, and [`SpecError::help`] what
/// to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// None of `at`, `every`, `cron`.
    #[error("the schedule says neither at, every nor cron")]
    NoneGiven,
    /// More than one of them.
    #[error("the schedule gives {}; give exactly one", .0.iter().map(|f| f.key()).collect::<Vec<_>>().join(" and "))]
    Several(Vec<WhenField>),
    /// A field longer than [`MAX_SPEC_CHARS`].
    #[error("{} is {len} characters long; at most {MAX_SPEC_CHARS} are allowed", .field.key())]
    TooLong {
        /// The field.
        field: WhenField,
        /// Its length in characters.
        len: usize,
    },
    /// `at` is not an RFC 3339 time.
    #[error("at: '{text}' is not an RFC 3339 time ({reason})")]
    BadTime {
        /// The text given.
        text: String,
        /// The parser's reason.
        reason: String,
    },
    /// `at` is not after the present (only where a past time cannot be meant: `schedule.create`).
    #[error("at: {at} is not in the future (it is {now} now)")]
    AtInPast {
        /// The time given, in UTC.
        at: DateTime<Utc>,
        /// The present, in UTC.
        now: DateTime<Utc>,
    },
    /// `every` is not a duration.
    #[error("every: '{text}' is not a duration ({reason})")]
    BadDuration {
        /// The text given.
        text: String,
        /// The parser's reason.
        reason: String,
    },
    /// `every` is a duration with a fraction of a second.
    #[error("every: '{text}' is not a whole number of seconds")]
    EveryNotWhole {
        /// The text given.
        text: String,
    },
    /// `every` is shorter than [`MIN_EVERY_S`] or longer than [`MAX_EVERY_S`].
    #[error("every: '{text}' is {seconds} s; it must be from {MIN_EVERY_S} s to {MAX_EVERY_S} s (366 days)")]
    EveryOutOfRange {
        /// The text given.
        text: String,
        /// The duration it means, in whole seconds (saturated).
        seconds: u64,
    },
    /// `cron` does not have five fields.
    #[error("cron: '{text}' has {count} fields; it needs five (minute hour day-of-month month day-of-week)")]
    CronFieldCount {
        /// The text given.
        text: String,
        /// How many whitespace-separated fields it has.
        count: usize,
    },
    /// One cron field is wrong.
    #[error("cron: the {} field '{value}' is not valid ({reason})", .field.name())]
    CronField {
        /// Which field.
        field: CronField,
        /// The field as written.
        value: String,
        /// The cron parser's reason.
        reason: String,
    },
    /// The fields are each valid but not together, or the expression is not one croner reads.
    #[error("cron: '{text}' is not valid ({reason})")]
    CronPattern {
        /// The text given.
        text: String,
        /// The cron parser's reason.
        reason: String,
    },
    /// The expression is valid but matches no time, such as `0 0 31 2 *`.
    #[error("cron: '{text}' never fires")]
    CronNeverFires {
        /// The text given.
        text: String,
    },
    /// `tz` is not an IANA time zone name.
    #[error("tz: '{tz}' is not an IANA time zone")]
    BadTz {
        /// The text given.
        tz: String,
        /// The zone it is probably a typo of.
        suggestion: Option<&'static str>,
    },
    /// `tz` given with `at` or `every`, where it means nothing.
    #[error("tz applies to cron only, not to {}", .with.key())]
    TzWithoutCron {
        /// The field given instead of cron.
        with: WhenField,
    },
}

impl SpecError {
    /// The field the problem is in (`None` when it is about the set of fields).
    pub fn field(&self) -> Option<WhenField> {
        match self {
            SpecError::NoneGiven | SpecError::Several(_) => None,
            SpecError::TooLong { field, .. } => Some(*field),
            SpecError::BadTime { .. } | SpecError::AtInPast { .. } => Some(WhenField::At),
            SpecError::BadDuration { .. }
            | SpecError::EveryNotWhole { .. }
            | SpecError::EveryOutOfRange { .. } => Some(WhenField::Every),
            SpecError::CronFieldCount { .. }
            | SpecError::CronField { .. }
            | SpecError::CronPattern { .. }
            | SpecError::CronNeverFires { .. } => Some(WhenField::Cron),
            SpecError::BadTz { .. } | SpecError::TzWithoutCron { .. } => Some(WhenField::Tz),
        }
    }

    /// The machine-readable code.
    pub fn code(&self) -> &'static str {
        "invalid_schedule"
    }

    /// What to write instead.
    pub fn help(&self) -> String {
        match self {
            SpecError::NoneGiven | SpecError::Several(_) => {
                "give exactly one of at = \"2026-11-23T09:00:00+01:00\" (once), every = \"15m\" (repeatedly) or cron = \"30 9 * * 1-5\" (with tz = \"Europe/Paris\")".to_owned()
            }
            SpecError::TooLong { .. } => "shorten it; a schedule's fields are a few words".to_owned(),
            SpecError::BadTime { .. } => {
                "write a date, a time and an offset: \"2026-11-23T09:00:00Z\" or \"2026-11-23T09:00:00+01:00\"".to_owned()
            }
            SpecError::AtInPast { .. } => "give a later time, or use every / cron for a repeating schedule".to_owned(),
            SpecError::BadDuration { .. } | SpecError::EveryNotWhole { .. } => {
                "write a whole number of seconds with units: \"2s\", \"15m\", \"1h30m\", \"1d\"".to_owned()
            }
            SpecError::EveryOutOfRange { .. } => {
                "use at least \"1s\" and at most \"366d\"; for a single later run use at".to_owned()
            }
            SpecError::CronFieldCount { count, .. } if *count == 6 || *count == 7 => {
                "seconds and years are not supported: write five fields, minute hour day-of-month month day-of-week, such as \"30 9 * * 1-5\"".to_owned()
            }
            SpecError::CronFieldCount { .. } => {
                "write five fields, minute hour day-of-month month day-of-week, such as \"30 9 * * 1-5\" (09:30 on weekdays), or @hourly / @daily / @weekly / @monthly / @yearly".to_owned()
            }
            SpecError::CronField { field, .. } => format!(
                "the {} field takes {}, with lists (1,15), ranges (1-5) and steps (*/10)",
                field.name(),
                field.accepts()
            ),
            SpecError::CronPattern { .. } => {
                "check the fields: minute hour day-of-month month day-of-week, such as \"30 9 * * 1-5\"".to_owned()
            }
            SpecError::CronNeverFires { .. } => {
                "the day and month never meet (such as February 30th); pick a day that exists in that month".to_owned()
            }
            SpecError::BadTz { suggestion: Some(near), .. } => {
                format!("did you mean \"{near}\"? Write an IANA zone name such as \"Europe/Paris\" or \"America/New_York\", or \"UTC\"")
            }
            SpecError::BadTz { suggestion: None, .. } => {
                "write an IANA zone name such as \"Europe/Paris\" or \"America/New_York\", or \"UTC\"".to_owned()
            }
            SpecError::TzWithoutCron { with: WhenField::At, .. } => {
                "an at time carries its own offset (\"2026-11-23T09:00:00+01:00\"); remove tz".to_owned()
            }
            SpecError::TzWithoutCron { .. } => "every counts real time, which has no zone; remove tz".to_owned(),
        }
    }
}

/// Whether an `at` in the past is accepted: `schedule.create` refuses it (nobody means it);
/// a `[[schedules]]` entry keeps it (the config outlives the moment, and the firing is then
/// missed or done, which the scheduler records).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PastAt {
    /// Refuse an `at` at or before now.
    Refuse,
    /// Accept it.
    Accept,
}

/// Where an `every` schedule counts its intervals from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Anchor {
    /// From this time (`schedule.create`: its creation, so `every = "1h"` first fires an hour
    /// after it was made).
    At(DateTime<Utc>),
    /// From the Unix epoch (`[[schedules]]`: the same firings however often the config is
    /// loaded, `every = "15m"` on the quarter hours).
    Epoch,
}

/// A checked schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    /// Once.
    At(DateTime<Utc>),
    /// Every `interval_s` seconds after `anchor` (never at the anchor itself).
    Every {
        /// Whole seconds, [`MIN_EVERY_S`] to [`MAX_EVERY_S`].
        interval_s: u64,
        /// Whole seconds; the first firing is one interval after it.
        anchor: DateTime<Utc>,
        /// `every` as written.
        written: String,
    },
    /// At the times the expression matches in `tz`.
    Cron(Box<CronSpec>),
}

/// A cron expression and its time zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronSpec {
    cron: Cron,
    written: String,
    tz: Tz,
}

impl CronSpec {
    /// The expression as written.
    pub fn written(&self) -> &str {
        &self.written
    }

    /// The time zone its fields are read in.
    pub fn tz(&self) -> Tz {
        self.tz
    }
}

fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
}

const NICKNAMES: [&str; 6] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@hourly",
];

/// Parses five cron fields, naming the field at fault.
pub fn parse_cron(text: &str) -> Result<Cron, SpecError> {
    let trimmed = text.trim();
    if trimmed.starts_with('@') {
        if NICKNAMES.iter().any(|n| n.eq_ignore_ascii_case(trimmed)) {
            return parser().parse(trimmed).map_err(|e| SpecError::CronPattern {
                text: text.to_owned(),
                reason: e.to_string(),
            });
        }
        return Err(SpecError::CronPattern {
            text: text.to_owned(),
            reason:
                "the only @ words are @hourly, @daily, @weekly, @monthly, @yearly and @annually"
                    .to_owned(),
        });
    }
    let fields: Vec<&str> = trimmed.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(SpecError::CronFieldCount {
            text: text.to_owned(),
            count: fields.len(),
        });
    }
    match parser().parse(trimmed) {
        Ok(cron) => Ok(cron),
        Err(whole) => {
            // Each field alone, the others `*`: the first that fails alone is the one to fix.
            for (index, field) in CRON_FIELDS.iter().enumerate() {
                let mut alone = ["*"; 5];
                alone[index] = fields[index];
                if let Err(error) = parser().parse(&alone.join(" ")) {
                    return Err(SpecError::CronField {
                        field: *field,
                        value: fields[index].to_owned(),
                        reason: error.to_string(),
                    });
                }
            }
            Err(SpecError::CronPattern {
                text: text.to_owned(),
                reason: whole.to_string(),
            })
        }
    }
}

/// The IANA zone named `text` (exactly as spelled), or a refusal with the zone it most
/// resembles.
pub fn parse_tz(text: &str) -> Result<Tz, SpecError> {
    let written = text.trim();
    if let Ok(tz) = Tz::from_str(written) {
        return Ok(tz);
    }
    let same_but_case = chrono_tz::TZ_VARIANTS
        .iter()
        .map(|tz| tz.name())
        .find(|name| name.eq_ignore_ascii_case(written));
    // No zone name is longer than 32 characters; a longer text is no typo of one, and the
    // edit distance to ~600 names is not worth computing for it.
    let suggestion = same_but_case.or_else(|| {
        (written.len() <= MAX_TZ_TYPO_LEN)
            .then(|| entity::nearest(written, chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name())))
            .flatten()
    });
    Err(SpecError::BadTz {
        tz: text.to_owned(),
        suggestion,
    })
}

fn parse_every(text: &str) -> Result<u64, SpecError> {
    let duration = humantime::parse_duration(text.trim()).map_err(|e| SpecError::BadDuration {
        text: text.to_owned(),
        reason: e.to_string(),
    })?;
    if duration.subsec_nanos() != 0 {
        return Err(SpecError::EveryNotWhole {
            text: text.to_owned(),
        });
    }
    let seconds = duration.as_secs();
    if !(MIN_EVERY_S..=MAX_EVERY_S).contains(&seconds) {
        return Err(SpecError::EveryOutOfRange {
            text: text.to_owned(),
            seconds,
        });
    }
    Ok(seconds)
}

fn whole_seconds(time: DateTime<Utc>) -> DateTime<Utc> {
    Utc.timestamp_opt(time.timestamp(), 0)
        .single()
        .unwrap_or(time)
}

impl Spec {
    /// Checks the words. `now` decides whether an `at` is past (with [`PastAt::Refuse`]) and
    /// is not otherwise used; `anchor` is where an `every` counts from.
    pub fn parse(
        when: &When,
        now: DateTime<Utc>,
        past_at: PastAt,
        anchor: Anchor,
    ) -> Result<Spec, SpecError> {
        let fields = [
            (WhenField::At, &when.at),
            (WhenField::Every, &when.every),
            (WhenField::Cron, &when.cron),
            (WhenField::Tz, &when.tz),
        ];
        for (field, value) in fields {
            if let Some(value) = value {
                let len = value.chars().count();
                if len > MAX_SPEC_CHARS {
                    return Err(SpecError::TooLong { field, len });
                }
            }
        }
        let given: Vec<WhenField> = fields[..3]
            .iter()
            .filter(|(_, value)| value.is_some())
            .map(|(field, _)| *field)
            .collect();
        match given.as_slice() {
            [] => return Err(SpecError::NoneGiven),
            [_] => {}
            _ => return Err(SpecError::Several(given)),
        }
        if when.tz.is_some() && given[0] != WhenField::Cron {
            return Err(SpecError::TzWithoutCron { with: given[0] });
        }
        if let Some(text) = &when.at {
            let at = DateTime::parse_from_rfc3339(text.trim())
                .map_err(|e| SpecError::BadTime {
                    text: text.clone(),
                    reason: e.to_string(),
                })?
                .with_timezone(&Utc);
            if past_at == PastAt::Refuse && at <= now {
                return Err(SpecError::AtInPast { at, now });
            }
            return Ok(Spec::At(at));
        }
        if let Some(text) = &when.every {
            let interval_s = parse_every(text)?;
            let anchor = match anchor {
                Anchor::At(time) => whole_seconds(time),
                Anchor::Epoch => DateTime::UNIX_EPOCH,
            };
            return Ok(Spec::Every {
                interval_s,
                anchor,
                written: text.trim().to_owned(),
            });
        }
        let text = when.cron.as_deref().unwrap_or_default();
        let cron = parse_cron(text)?;
        let tz = match &when.tz {
            Some(tz) => parse_tz(tz)?,
            None => Tz::UTC,
        };
        let spec = Spec::Cron(Box::new(CronSpec {
            cron,
            written: text.trim().to_owned(),
            tz,
        }));
        if spec.next_after(now).is_none() {
            return Err(SpecError::CronNeverFires {
                text: text.to_owned(),
            });
        }
        Ok(spec)
    }

    /// The words that make this spec again (what `schedule.get` shows and the store keeps;
    /// an `every`'s anchor is kept beside it).
    pub fn when(&self) -> When {
        match self {
            Spec::At(at) => When {
                at: Some(at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
                ..When::default()
            },
            Spec::Every { written, .. } => When {
                every: Some(written.clone()),
                ..When::default()
            },
            Spec::Cron(cron) => When {
                cron: Some(cron.written.clone()),
                tz: Some(cron.tz.name().to_owned()),
                ..When::default()
            },
        }
    }

    /// Whether the schedule fires once only.
    pub fn is_one_shot(&self) -> bool {
        matches!(self, Spec::At(_))
    }

    /// The first firing strictly after `after`, or `None` when there is none (an `at` that
    /// has passed, a time past what the calendar arithmetic reaches).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Spec::At(at) => (*at > after).then_some(*at),
            Spec::Every {
                interval_s, anchor, ..
            } => {
                let interval = i64::try_from(*interval_s).ok()?;
                let since = after.timestamp().checked_sub(anchor.timestamp())?;
                let k = since.div_euclid(interval).checked_add(1)?.max(1);
                firing(*anchor, k, interval)
            }
            Spec::Cron(spec) => spec
                .cron
                .find_next_occurrence(&after.with_timezone(&spec.tz), false)
                .ok()
                .map(|next| next.with_timezone(&Utc)),
        }
    }

    /// The last firing at or before `time`, if any.
    pub fn latest_at_or_before(&self, time: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Spec::At(at) => (*at <= time).then_some(*at),
            Spec::Every {
                interval_s, anchor, ..
            } => {
                let interval = i64::try_from(*interval_s).ok()?;
                let k = self.firings_up_to(time)?;
                if k == 0 {
                    return None;
                }
                firing(*anchor, i64::try_from(k).ok()?, interval)
            }
            Spec::Cron(spec) => spec
                .cron
                .find_previous_occurrence(&time.with_timezone(&spec.tz), true)
                .ok()
                .map(|previous| previous.with_timezone(&Utc)),
        }
    }

    /// The last firing strictly before `time`, if any.
    pub fn latest_before(&self, time: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Spec::Cron(spec) => spec
                .cron
                .find_previous_occurrence(&time.with_timezone(&spec.tz), false)
                .ok()
                .map(|previous| previous.with_timezone(&Utc)),
            _ => self
                .latest_at_or_before(time.checked_sub_signed(chrono::TimeDelta::nanoseconds(1))?),
        }
    }

    /// For `every`: how many firings happened at or before `time` (arithmetic, any gap).
    fn firings_up_to(&self, time: DateTime<Utc>) -> Option<u64> {
        let Spec::Every {
            interval_s, anchor, ..
        } = self
        else {
            return None;
        };
        let interval = i64::try_from(*interval_s).ok()?;
        let since = time.timestamp().checked_sub(anchor.timestamp())?;
        Some(u64::try_from(since.div_euclid(interval).max(0)).unwrap_or(0))
    }

    /// How many firings fall in `(after, until]`, counting at most `cap` for a cron
    /// expression (which has no closed form); `every` and `at` are counted exactly whatever
    /// the gap. The flag says whether the count is exact.
    pub fn count_between(
        &self,
        after: DateTime<Utc>,
        until: DateTime<Utc>,
        cap: u64,
    ) -> (u64, bool) {
        if until <= after {
            return (0, true);
        }
        match self {
            Spec::At(at) => (u64::from(after < *at && *at <= until), true),
            Spec::Every { .. } => {
                let high = self.firings_up_to(until).unwrap_or(0);
                let low = self.firings_up_to(after).unwrap_or(0);
                (high.saturating_sub(low), true)
            }
            Spec::Cron(_) => {
                let mut count = 0;
                let mut cursor = after;
                while count < cap {
                    match self.next_after(cursor) {
                        Some(next) if next <= until => {
                            count += 1;
                            cursor = next;
                        }
                        _ => return (count, true),
                    }
                }
                let more = self.next_after(cursor).is_some_and(|next| next <= until);
                (count, !more)
            }
        }
    }
}

/// `anchor + k * interval`, or `None` past chrono's range.
fn firing(anchor: DateTime<Utc>, k: i64, interval: i64) -> Option<DateTime<Utc>> {
    let offset = k.checked_mul(interval)?;
    anchor.checked_add_signed(chrono::TimeDelta::try_seconds(offset)?)
}

impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spec::At(at) => write!(
                f,
                "at {}",
                at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
            ),
            Spec::Every { written, .. } => write!(f, "every {written}"),
            Spec::Cron(spec) => write!(f, "cron {} ({})", spec.written, spec.tz.name()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A time written in RFC 3339, for the crate's tests.
    pub(crate) fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    fn when(at: Option<&str>, every: Option<&str>, cron: Option<&str>, tz: Option<&str>) -> When {
        When {
            at: at.map(str::to_owned),
            every: every.map(str::to_owned),
            cron: cron.map(str::to_owned),
            tz: tz.map(str::to_owned),
        }
    }

    fn parse(w: &When) -> Result<Spec, SpecError> {
        Spec::parse(
            w,
            utc("2026-03-01T12:00:00Z"),
            PastAt::Refuse,
            Anchor::At(utc("2026-03-01T12:00:00.750Z")),
        )
    }

    #[test]
    fn durations_people_write_are_every_intervals() {
        for (text, seconds) in [
            ("2s", 2),
            ("15m", 900),
            ("1h", 3600),
            ("1h30m", 5400),
            ("1h 30m", 5400),
            ("1d", 86_400),
        ] {
            match parse(&when(None, Some(text), None, None)).unwrap() {
                Spec::Every {
                    interval_s, anchor, ..
                } => {
                    assert_eq!(interval_s, seconds, "{text}");
                    assert_eq!(
                        anchor,
                        utc("2026-03-01T12:00:00Z"),
                        "the anchor drops the fraction"
                    );
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn every_refuses_fractions_zero_and_more_than_a_leap_year() {
        assert!(matches!(
            parse(&when(None, Some("1500ms"), None, None)),
            Err(SpecError::EveryNotWhole { .. })
        ));
        assert!(matches!(
            parse(&when(None, Some("0s"), None, None)),
            Err(SpecError::EveryOutOfRange { seconds: 0, .. })
        ));
        assert!(matches!(
            parse(&when(None, Some("367d"), None, None)),
            Err(SpecError::EveryOutOfRange { .. })
        ));
        assert!(matches!(
            parse(&when(None, Some("soon"), None, None)),
            Err(SpecError::BadDuration { .. })
        ));
        assert!(matches!(
            parse(&when(None, Some("9999999999999999999999h"), None, None)),
            Err(SpecError::BadDuration { .. })
        ));
    }

    #[test]
    fn exactly_one_of_at_every_cron_is_required() {
        assert_eq!(parse(&When::default()), Err(SpecError::NoneGiven));
        let both = parse(&when(Some("2027-01-01T00:00:00Z"), Some("1h"), None, None)).unwrap_err();
        assert_eq!(
            both,
            SpecError::Several(vec![WhenField::At, WhenField::Every])
        );
        assert_eq!(
            both.to_string(),
            "the schedule gives at and every; give exactly one"
        );
        assert_eq!(
            parse(&when(None, Some("1h"), None, Some("Europe/Paris"))),
            Err(SpecError::TzWithoutCron {
                with: WhenField::Every
            })
        );
    }

    #[test]
    fn at_takes_rfc3339_in_the_future_only_for_create() {
        assert_eq!(
            parse(&when(Some("2026-03-01T14:00:00+01:00"), None, None, None)).unwrap(),
            Spec::At(utc("2026-03-01T13:00:00Z"))
        );
        assert!(matches!(
            parse(&when(Some("2026-03-01T12:00:00Z"), None, None, None)),
            Err(SpecError::AtInPast { .. })
        ));
        assert!(matches!(
            parse(&when(Some("tomorrow 9am"), None, None, None)),
            Err(SpecError::BadTime { .. })
        ));
        let kept = Spec::parse(
            &when(Some("2020-01-01T00:00:00Z"), None, None, None),
            utc("2026-03-01T12:00:00Z"),
            PastAt::Accept,
            Anchor::Epoch,
        );
        assert_eq!(kept, Ok(Spec::At(utc("2020-01-01T00:00:00Z"))));
    }

    #[test]
    fn a_bad_cron_field_is_named() {
        let error = parse(&when(None, None, Some("61 9 * * *"), None)).unwrap_err();
        assert!(
            matches!(&error, SpecError::CronField { field: CronField::Minute, value, .. } if value == "61"),
            "{error:?}"
        );
        assert!(
            error
                .to_string()
                .starts_with("cron: the minute field '61' is not valid"),
            "{error}"
        );
        assert!(error.help().contains("0-59"));
        let error = parse(&when(None, None, Some("0 9 * 13 *"), None)).unwrap_err();
        assert!(
            matches!(
                error,
                SpecError::CronField {
                    field: CronField::Month,
                    ..
                }
            ),
            "{error:?}"
        );
        let error = parse(&when(None, None, Some("0 9 * * MONDAY"), None)).unwrap_err();
        assert!(
            matches!(
                error,
                SpecError::CronField {
                    field: CronField::DayOfWeek,
                    ..
                }
            ),
            "{error:?}"
        );
        let error = parse(&when(None, None, Some("0 25 * * *"), None)).unwrap_err();
        assert!(
            matches!(
                error,
                SpecError::CronField {
                    field: CronField::Hour,
                    ..
                }
            ),
            "{error:?}"
        );
    }

    #[test]
    fn cron_needs_five_fields_and_says_seconds_are_not_supported() {
        let six = parse(&when(None, None, Some("0 30 9 * * *"), None)).unwrap_err();
        assert_eq!(
            six,
            SpecError::CronFieldCount {
                text: "0 30 9 * * *".into(),
                count: 6
            }
        );
        assert!(six
            .help()
            .starts_with("seconds and years are not supported"));
        assert!(matches!(
            parse(&when(None, None, Some("* *"), None)),
            Err(SpecError::CronFieldCount { count: 2, .. })
        ));
        assert!(matches!(
            parse(&when(None, None, Some("@reboot"), None)),
            Err(SpecError::CronPattern { .. })
        ));
        assert!(parse(&when(None, None, Some("@daily"), None)).is_ok());
    }

    #[test]
    fn a_cron_that_never_fires_is_refused() {
        assert!(matches!(
            parse(&when(None, None, Some("0 0 30 2 *"), None)),
            Err(SpecError::CronNeverFires { .. })
        ));
    }

    #[test]
    fn a_bad_tz_suggests_the_zone_it_resembles() {
        let error = parse(&when(None, None, Some("0 9 * * *"), Some("Europe/Pari"))).unwrap_err();
        assert_eq!(
            error,
            SpecError::BadTz {
                tz: "Europe/Pari".into(),
                suggestion: Some("Europe/Paris")
            }
        );
        assert!(error.help().starts_with("did you mean \"Europe/Paris\"?"));
        let error = parse(&when(
            None,
            None,
            Some("0 9 * * *"),
            Some("america/new_york"),
        ))
        .unwrap_err();
        assert!(matches!(
            error,
            SpecError::BadTz {
                suggestion: Some("America/New_York"),
                ..
            }
        ));
        let error = parse(&when(
            None,
            None,
            Some("0 9 * * *"),
            Some("Mars/Olympus_Mons_Base"),
        ))
        .unwrap_err();
        assert!(matches!(
            error,
            SpecError::BadTz {
                suggestion: None,
                ..
            }
        ));
    }

    #[test]
    fn cron_fires_in_its_zone() {
        let spec = parse(&when(
            None,
            None,
            Some("30 9 * * 1-5"),
            Some("Europe/Paris"),
        ))
        .unwrap();
        // 2026-03-01 is a Sunday; Monday 09:30 in Paris (CET, +01:00) is 08:30 UTC.
        assert_eq!(
            spec.next_after(utc("2026-03-01T12:00:00Z")),
            Some(utc("2026-03-02T08:30:00Z"))
        );
        assert_eq!(
            spec.latest_at_or_before(utc("2026-03-02T08:30:00Z")),
            Some(utc("2026-03-02T08:30:00Z"))
        );
        assert_eq!(
            spec.latest_before(utc("2026-03-02T08:30:00Z")),
            Some(utc("2026-02-27T08:30:00Z"))
        );
        assert_eq!(spec.when().tz.as_deref(), Some("Europe/Paris"));
        assert_eq!(spec.to_string(), "cron 30 9 * * 1-5 (Europe/Paris)");
    }

    #[test]
    fn a_daily_job_in_new_york_fires_after_the_spring_gap_and_once_in_the_autumn_overlap() {
        let in_gap = parse(&when(
            None,
            None,
            Some("30 2 * * *"),
            Some("America/New_York"),
        ))
        .unwrap();
        // 2026-03-08 02:00 EST jumps to 03:00 EDT: 02:30 does not exist; it fires at 03:00 EDT.
        assert_eq!(
            in_gap.next_after(utc("2026-03-07T08:00:00Z")),
            Some(utc("2026-03-08T07:00:00Z"))
        );
        assert_eq!(
            in_gap.next_after(utc("2026-03-08T07:00:00Z")),
            Some(utc("2026-03-09T06:30:00Z"))
        );
        let in_overlap = parse(&when(
            None,
            None,
            Some("30 1 * * *"),
            Some("America/New_York"),
        ))
        .unwrap();
        // 2026-11-01 01:30 happens twice (EDT, then EST): it fires at the first only.
        assert_eq!(
            in_overlap.next_after(utc("2026-11-01T04:00:00Z")),
            Some(utc("2026-11-01T05:30:00Z"))
        );
        assert_eq!(
            in_overlap.next_after(utc("2026-11-01T05:30:00Z")),
            Some(utc("2026-11-02T06:30:00Z"))
        );
    }

    #[test]
    fn every_counts_missed_firings_arithmetically_whatever_the_gap() {
        let spec = parse(&when(None, Some("1s"), None, None)).unwrap();
        let start = utc("2026-03-01T12:00:00Z");
        let a_century_later = utc("2126-03-01T12:00:00Z");
        let (count, exact) = spec.count_between(start, a_century_later, 10);
        assert!(exact);
        assert_eq!(count, (a_century_later - start).num_seconds() as u64);
    }

    #[test]
    fn too_long_fields_are_refused_before_parsing() {
        let long = "1".repeat(MAX_SPEC_CHARS + 1);
        assert_eq!(
            parse(&when(None, Some(&long), None, None)),
            Err(SpecError::TooLong {
                field: WhenField::Every,
                len: MAX_SPEC_CHARS + 1
            })
        );
    }
}
