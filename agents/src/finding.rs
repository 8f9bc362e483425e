//! A config problem found outside the config crate, in the shape its collector takes.
//!
//! The config crate owns the file, its line and column numbers and the report; the sections
//! validated here (`[agents]`, `[[schedules]]`, `[scheduler]`, `[budgets]`, prices) only know
//! the byte span serde kept for each value. So every validation here pushes [`Finding`]s; the
//! config crate's collector is a `Findings` too (its own checks add to it the same way) and
//! turns the spans into lines and columns when it makes the report.

use std::ops::Range;

/// One thing wrong with a config value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The value's byte span in the file; `None` (or an empty span at 0) when it has no place
    /// in the file, such as a default.
    pub span: Option<Range<usize>>,
    /// Dotted key path, such as `budgets.user.tokens_per_day` or `schedules[2].cron`.
    pub key_path: String,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub help: String,
}

/// The problems one validation found, all of them (a section reports every problem at once,
/// as the rest of the config does).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Findings(Vec<Finding>);

impl Findings {
    /// No problems yet.
    pub fn new() -> Self {
        Findings::default()
    }

    /// Records a problem.
    pub fn add(
        &mut self,
        span: Option<Range<usize>>,
        key_path: impl Into<String>,
        message: impl Into<String>,
        help: impl Into<String>,
    ) {
        self.0.push(Finding {
            span,
            key_path: key_path.into(),
            message: message.into(),
            help: help.into(),
        });
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many problems were found.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The problems, in the order found.
    pub fn iter(&self) -> std::slice::Iter<'_, Finding> {
        self.0.iter()
    }

    /// The problems, for the config crate's collector.
    pub fn into_vec(self) -> Vec<Finding> {
        self.0
    }
}

impl Extend<Finding> for Findings {
    fn extend<I: IntoIterator<Item = Finding>>(&mut self, findings: I) {
        self.0.extend(findings);
    }
}

impl IntoIterator for Findings {
    type Item = Finding;
    type IntoIter = std::vec::IntoIter<Finding>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// A whole number within `range`, else a finding at its span and the nearest bound: the same
/// rule and wording as the config crate's own bounded numbers.
pub fn bounded(
    value: &toml::Spanned<u64>,
    key: &str,
    range: std::ops::RangeInclusive<u64>,
    because: &str,
    findings: &mut Findings,
) -> u64 {
    let number = *value.get_ref();
    if !range.contains(&number) {
        let mut help = format!(
            "use a whole number from {} to {}",
            range.start(),
            range.end()
        );
        if !because.is_empty() {
            help.push_str(" (");
            help.push_str(because);
            help.push(')');
        }
        findings.add(
            Some(value.span()),
            key,
            format!("{number} is out of range"),
            help,
        );
    }
    number.clamp(*range.start(), *range.end())
}
