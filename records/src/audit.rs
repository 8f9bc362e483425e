//! The audit log: one row per call that reached the pipeline, the filter that reads rows back,
//! and the pages it answers.

use std::borrow::Cow;

use entity::Snowflake;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One row of the audit log: a call that reached the pipeline, and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRow {
    /// When the call started, ms since the Unix epoch.
    pub time_ms: u64,
    /// Who called: `operator`, `cap:<id>` (an agent run), `token:<name>`, `anonymous`, or
    /// `discord:<user id>` (an approver's button, an admin's `/tools`).
    pub caller: Cow<'static, str>,
    /// The agent run (its request id), for a capability.
    pub run: Option<String>,
    /// Who asked for the run (the trigger's author), for a capability; the user, for a Discord
    /// caller.
    pub requested_by: Option<Snowflake>,
    /// The callable.
    pub tool: Cow<'static, str>,
    /// The sessions it acted in, resolved.
    pub sessions: Vec<Snowflake>,
    /// The input, text fields cut to `audit.text_chars` — or `{"sha256": ...}` with
    /// `audit.redact`.
    pub input: Value,
    /// `allow`, `ask`, `deny`, or `-` when the call was refused before the permission stage.
    pub decision: Cow<'static, str>,
    /// What decided: a rule (`permissions.rules[2]`), `permissions.default`, `operator
    /// callable` (no rule names it), an approver (`discord:<user id>`, `console:operator`,
    /// `console:token:NAME`, `api:...`), `expired`, or a hook.
    pub decided_by: Option<Cow<'static, str>>,
    /// `ok`, or the error's kind.
    pub outcome: Cow<'static, str>,
    /// The error's code, when it failed.
    pub code: Option<Cow<'static, str>>,
    /// How long the call took, in ms.
    pub duration_ms: u64,
    /// How many calls the row stands for: 1, or — for a burst of refusals of one caller,
    /// callable and code past the few a window keeps as rows of their own — the first counted
    /// call's row with the number of calls it counts.
    #[serde(default = "one")]
    pub count: u64,
    /// What the call caused in a workspace: its `shell.started` (`id`, `argv`, `cwd`),
    /// `shell.exited` (`id`, `code`, `ms`, `bytes`) and `fs.changed` (`path`, `kind`) events,
    /// each `{"type": ..., ...fields}` as `/v1/events` carries it; at most
    /// [`AuditRow::MAX_EVENTS`], the rest counted in a last `{"type": "events.truncated",
    /// "count": N}` (see [`push_event`]). Empty (and absent on the wire) for most calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Value>,
}

fn one() -> u64 {
    1
}

impl AuditRow {
    /// Most events a row keeps before counting the rest.
    pub const MAX_EVENTS: usize = 32;
}

/// A row's events as a store column holds them: a JSON array, `None` when there are none (so
/// rows without events cost nothing and old rows read the same).
pub fn events_to_column(events: &[Value]) -> Option<String> {
    (!events.is_empty()).then(|| Value::Array(events.to_vec()).to_string())
}

/// A row's events from a store column: a column that does not parse reads as one
/// `events.unreadable` event holding the text rather than failing the whole page.
pub fn events_from_column(text: Option<String>) -> Vec<Value> {
    match text {
        None => Vec::new(),
        Some(text) => match serde_json::from_str(&text) {
            Ok(Value::Array(events)) => events,
            _ => vec![serde_json::json!({"type": "events.unreadable", "text": text})],
        },
    }
}

/// The `type` of the last event of a row that caused more than [`AuditRow::MAX_EVENTS`].
pub const EVENTS_TRUNCATED: &str = "events.truncated";

/// Appends `event` to a row's `events`, bounded: past [`AuditRow::MAX_EVENTS`] events it counts
/// the event in a final `{"type": "events.truncated", "count": N}` instead, so a call that
/// writes a thousand files keeps a row of bounded size that still says how many it dropped.
pub fn push_event(events: &mut Vec<Value>, event: Value) {
    if events.len() < AuditRow::MAX_EVENTS {
        events.push(event);
        return;
    }
    if let Some(Value::Object(last)) = events.get_mut(AuditRow::MAX_EVENTS) {
        if let Some(count) = last.get_mut("count") {
            *count = Value::from(count.as_u64().unwrap_or(0).saturating_add(1));
            return;
        }
    }
    events.truncate(AuditRow::MAX_EVENTS);
    events.push(serde_json::json!({"type": EVENTS_TRUNCATED, "count": 1}));
}

/// An audit row as the log answers it: with its id, which pages continue from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// Increasing with time; `cursor` takes it.
    pub id: u64,
    /// The row.
    #[serde(flatten)]
    pub row: AuditRow,
}

/// Which audit rows to read, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// Only rows at or after this time (ms since the epoch).
    pub since_ms: Option<u64>,
    /// Only rows before this time.
    pub until_ms: Option<u64>,
    /// Only calls of callables matching this glob.
    pub tool: Option<String>,
    /// Only calls that acted in this session.
    pub session: Option<Snowflake>,
    /// Only calls by this caller key (`operator`, `token:ci`, `cap:1a2b3c4d`).
    pub caller: Option<String>,
    /// Only calls with this decision (`allow`, `ask`, `deny`).
    pub decision: Option<String>,
    /// At most this many rows (clamped to 1..=[`AuditFilter::MAX_PAGE`]).
    pub limit: usize,
    /// Only rows older than this id (the previous page's `nextCursor`).
    pub before_id: Option<u64>,
}

/// A page of the audit log.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditPage {
    /// Newest first.
    pub rows: Vec<AuditEntry>,
    /// Pass as `cursor` for the next (older) page; `None` at the end.
    pub next_cursor: Option<u64>,
}

impl AuditFilter {
    /// Most rows a page holds.
    pub const MAX_PAGE: usize = 1_000;

    /// Whether `row` passes every condition (not the paging).
    pub fn matches(&self, row: &AuditRow) -> bool {
        self.since_ms.is_none_or(|since| row.time_ms >= since)
            && self.until_ms.is_none_or(|until| row.time_ms < until)
            && self
                .tool
                .as_deref()
                .is_none_or(|glob| glob_matches(glob, &row.tool))
            && self.session.is_none_or(|s| row.sessions.contains(&s))
            && self.caller.as_deref().is_none_or(|c| row.caller == c)
            && self.decision.as_deref().is_none_or(|d| row.decision == d)
    }

    /// The page size asked for, within bounds.
    pub fn page_size(&self) -> usize {
        self.limit.clamp(1, Self::MAX_PAGE)
    }
}

/// A page of `entries` (in any order; ids increase with time) as `filter` asks, newest first:
/// what a log that holds its rows in memory answers.
pub fn page<'a>(
    entries: impl DoubleEndedIterator<Item = (u64, &'a AuditRow)>,
    filter: &AuditFilter,
) -> AuditPage {
    let limit = filter.page_size();
    let mut out: Vec<AuditEntry> = entries
        .rev()
        .filter(|(id, _)| filter.before_id.is_none_or(|before| *id < before))
        .filter(|(_, row)| filter.matches(row))
        .take(limit + 1)
        .map(|(id, row)| AuditEntry {
            id,
            row: row.clone(),
        })
        .collect();
    let next_cursor = if out.len() > limit {
        out.truncate(limit);
        out.last().map(|entry| entry.id)
    } else {
        None
    };
    AuditPage {
        rows: out,
        next_cursor,
    }
}

/// Builds one page from rows read newest first by a query that applied every condition of the
/// filter but the tool glob: the glob is matched here (with the rules' own function), over at
/// most `max_scanned` rows, so a filter that matches little cannot hold a store long — past that
/// the page ends early with a cursor to go on from.
#[derive(Debug)]
pub struct Pager<'f> {
    filter: &'f AuditFilter,
    limit: usize,
    max_scanned: usize,
    scanned: usize,
    page: Vec<AuditEntry>,
}

impl<'f> Pager<'f> {
    /// A pager for `filter`, giving up after `max_scanned` rows.
    pub fn new(filter: &'f AuditFilter, max_scanned: usize) -> Pager<'f> {
        Pager {
            filter,
            limit: filter.page_size(),
            max_scanned: max_scanned.max(1),
            scanned: 0,
            page: Vec::new(),
        }
    }

    /// Takes the next row read; the page once it is complete (stop reading then).
    pub fn push(&mut self, entry: AuditEntry) -> Option<AuditPage> {
        self.scanned += 1;
        let id = entry.id;
        let tool_matches = self
            .filter
            .tool
            .as_deref()
            .is_none_or(|glob| glob_matches(glob, &entry.row.tool));
        if tool_matches {
            if self.page.len() == self.limit {
                // One more match exists: the page is full and continues after its last row.
                let next_cursor = self.page.last().map(|entry| entry.id);
                return Some(AuditPage {
                    rows: std::mem::take(&mut self.page),
                    next_cursor,
                });
            }
            self.page.push(entry);
        }
        (self.scanned >= self.max_scanned).then(|| AuditPage {
            rows: std::mem::take(&mut self.page),
            next_cursor: Some(id),
        })
    }

    /// The page when the rows ran out.
    pub fn finish(self) -> AuditPage {
        AuditPage {
            rows: self.page,
            next_cursor: None,
        }
    }
}

/// Whether a callable glob (`surface.*`, `*.send`, an exact id) matches `text`: `*` matches any
/// run of characters, everything else itself.
pub fn glob_matches(pattern: &str, text: &str) -> bool {
    let (p, s) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if pi < p.len() && p[pi] == s[si] {
            pi += 1;
            si += 1;
        } else if let Some((star_p, star_s)) = star {
            pi = star_p + 1;
            si = star_s + 1;
            star = Some((star_p, star_s + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(time_ms: u64, tool: &'static str) -> AuditRow {
        AuditRow {
            time_ms,
            caller: Cow::Borrowed("operator"),
            run: None,
            requested_by: Some(Snowflake(1_000_000_000_000_000_401)),
            tool: Cow::Borrowed(tool),
            sessions: vec![Snowflake(1_000_000_000_000_000_402)],
            input: serde_json::json!({"text": "hi"}),
            decision: Cow::Borrowed("allow"),
            decided_by: None,
            outcome: Cow::Borrowed("ok"),
            code: None,
            duration_ms: 3,
            count: 1,
            events: Vec::new(),
        }
    }

    #[test]
    fn an_entry_keeps_the_audit_lists_json_shape() {
        let entry = AuditEntry {
            id: 9,
            row: row(5, "surface.messages.send"),
        };
        assert_eq!(
            serde_json::to_value(&entry).unwrap(),
            serde_json::json!({"id": 9, "timeMs": 5, "caller": "operator", "run": null,
                "requestedBy": "1000000000000000401", "tool": "surface.messages.send",
                "sessions": ["1000000000000000402"], "input": {"text": "hi"}, "decision": "allow",
                "decidedBy": null, "outcome": "ok", "code": null, "durationMs": 3, "count": 1})
        );
    }

    #[test]
    fn a_row_with_events_carries_them_and_old_rows_read_back_without() {
        let mut with = row(5, "shell.run");
        with.events = vec![serde_json::json!({"type": "fs.changed", "path": "a", "kind": "write"})];
        let json = serde_json::to_value(&with).unwrap();
        assert_eq!(json["events"][0]["type"], "fs.changed");
        let back: AuditRow = serde_json::from_value(json).unwrap();
        assert_eq!(back, with);
        let mut old = serde_json::to_value(row(5, "shell.run")).unwrap();
        assert!(old.get("events").is_none());
        old.as_object_mut().unwrap().remove("count");
        let back: AuditRow = serde_json::from_value(old).unwrap();
        assert!(back.events.is_empty());
        assert_eq!(back.count, 1);
    }

    #[test]
    fn events_past_the_bound_are_counted_in_one_last_event() {
        let mut events = Vec::new();
        for n in 0..100 {
            push_event(
                &mut events,
                serde_json::json!({"type": "fs.changed", "n": n}),
            );
        }
        assert_eq!(events.len(), AuditRow::MAX_EVENTS + 1);
        assert_eq!(events[AuditRow::MAX_EVENTS - 1]["n"], 31);
        assert_eq!(
            events[AuditRow::MAX_EVENTS],
            serde_json::json!({"type": EVENTS_TRUNCATED, "count": 68})
        );
    }

    proptest::proptest! {
        #[test]
        fn pushing_events_keeps_every_one_or_counts_it(n in 0usize..200) {
            let mut events = Vec::new();
            for i in 0..n {
                push_event(&mut events, serde_json::json!({"type": "x", "i": i}));
            }
            proptest::prop_assert!(events.len() <= AuditRow::MAX_EVENTS + 1);
            let counted = events
                .get(AuditRow::MAX_EVENTS)
                .map_or(0, |last| last["count"].as_u64().unwrap() as usize);
            proptest::prop_assert_eq!(events.len().min(AuditRow::MAX_EVENTS) + counted, n);
        }
    }

    #[test]
    fn pages_go_newest_first_with_a_cursor() {
        let rows: Vec<AuditRow> = (0..5)
            .map(|i| row(i, if i % 2 == 0 { "a.send" } else { "a.list" }))
            .collect();
        let entries = || rows.iter().enumerate().map(|(i, r)| (i as u64 + 1, r));
        let filter = AuditFilter {
            tool: Some("*.send".into()),
            limit: 2,
            ..AuditFilter::default()
        };
        let first = page(entries(), &filter);
        assert_eq!(first.rows.iter().map(|e| e.id).collect::<Vec<_>>(), [5, 3]);
        assert_eq!(first.next_cursor, Some(3));
        let second = page(
            entries(),
            &AuditFilter {
                before_id: Some(3),
                ..filter
            },
        );
        assert_eq!(second.rows.iter().map(|e| e.id).collect::<Vec<_>>(), [1]);
        assert_eq!(second.next_cursor, None);
    }

    #[test]
    fn globs_match_whole_ids() {
        assert!(glob_matches("surface.*", "surface.messages.send"));
        assert!(glob_matches("*.send", "surface.messages.send"));
        assert!(glob_matches("*", ""));
        assert!(!glob_matches("surface.*", "fs.read"));
        assert!(!glob_matches("surface.messages", "surface.messages.send"));
    }
}
