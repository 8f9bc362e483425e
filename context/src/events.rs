//! The events the runner publishes (through the core's event hub) when the context changes:
//! `context.pruned` when a fit pruned or dropped anything, `context.compacted` when a
//! compaction replaced older turns with a summary; both with the tokens before and after.

use serde::Serialize;

use crate::compact::Outcome;
use crate::fit::FitReport;

/// The event's name when a fit pruned results or dropped entries.
pub const PRUNED: &str = "context.pruned";
/// The event's name when a compaction replaced older turns with a summary.
pub const COMPACTED: &str = "context.compacted";

/// `context.pruned`'s payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pruned {
    /// Tokens of everything read.
    pub before_tokens: usize,
    /// Tokens of the request sent.
    pub after_tokens: usize,
    /// Tool results replaced by the pruned marker.
    pub pruned_results: usize,
    /// Their characters.
    pub pruned_chars: usize,
    /// Entries dropped (a compaction is then asked for).
    pub dropped_entries: usize,
}

impl Pruned {
    /// The event for a fit, when it pruned or dropped anything.
    pub fn from_report(report: &FitReport) -> Option<Pruned> {
        (report.pruned_results > 0 || report.dropped_entries > 0).then_some(Pruned {
            before_tokens: report.before_tokens,
            after_tokens: report.after_tokens,
            pruned_results: report.pruned_results,
            pruned_chars: report.pruned_chars,
            dropped_entries: report.dropped_entries,
        })
    }
}

/// `context.compacted`'s payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Compacted {
    /// Tokens of the request before the compaction (everything read).
    pub before_tokens: usize,
    /// Tokens of the request fitted with the summary.
    pub after_tokens: usize,
    /// Entries the summary replaced.
    pub summarised_entries: usize,
    /// Entries too old to summarise within `max_chunks`.
    pub skipped_entries: usize,
    /// Model calls made.
    pub calls: usize,
    /// Retries the guard asked for.
    pub retries: usize,
    /// Identifiers the guard appended to the summary.
    pub kept_by_guard: usize,
}

impl Compacted {
    /// The event for a compaction's outcome, with the fits before and after it.
    pub fn new(
        before: &FitReport,
        after: &FitReport,
        outcome: &Outcome,
        summarised_entries: usize,
        skipped_entries: usize,
    ) -> Compacted {
        Compacted {
            before_tokens: before.before_tokens,
            after_tokens: after.after_tokens,
            summarised_entries,
            skipped_entries,
            calls: outcome.calls,
            retries: outcome.retries,
            kept_by_guard: outcome.kept_by_guard.len(),
        }
    }
}
