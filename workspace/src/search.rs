//! `fs.glob` and `fs.grep` on ripgrep's own crates: `ignore` walks the workspace in parallel,
//! honouring `.gitignore` (and `.ignore`, and the global git excludes); `grep-regex` and
//! `grep-searcher` search each file, skipping binary ones.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use grep_regex::RegexMatcherBuilder;
use grep_searcher::{sinks, BinaryDetection, SearcherBuilder};
use ignore::{WalkBuilder, WalkState};
use serde::{Deserialize, Serialize};

use crate::error::WorkspaceError;
use crate::paths::Root;

/// Most paths `fs.glob` returns.
pub const MAX_GLOB: usize = 1000;
/// Most matches `fs.grep` returns (its `limit` defaults to 100).
pub const MAX_GREP: usize = 1000;
/// A matched line is cut to this many characters.
const MAX_LINE_CHARS: usize = 500;

/// `fs.glob`'s request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GlobRequest {
    /// Relative to the workspace root: `*` stays within a directory, `**` crosses them.
    pub pattern: String,
}

/// `fs.glob`'s answer: matching files, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GlobAnswer {
    pub paths: Vec<String>,
    pub truncated: bool,
    /// The search stopped at its deadline; `paths` is what it found by then.
    pub timed_out: bool,
}

/// `fs.grep`'s request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GrepRequest {
    /// A regular expression (Rust `regex` syntax, as ripgrep's).
    pub pattern: String,
    /// Only files whose path (relative to the root) matches this glob.
    #[serde(default)]
    pub glob: Option<String>,
    #[serde(default)]
    pub limit: Option<usize>,
}

/// One matching line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GrepMatch {
    pub path: String,
    /// 1-based.
    pub line: u64,
    pub text: String,
}

/// `fs.grep`'s answer, ordered by path and line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GrepAnswer {
    pub matches: Vec<GrepMatch>,
    /// More lines matched than `limit`.
    pub truncated: bool,
    pub timed_out: bool,
}

fn path_glob(pattern: &str, field: &str) -> Result<globset::GlobMatcher, WorkspaceError> {
    if pattern.trim().is_empty() {
        return Err(WorkspaceError::BadRequest(format!("{field} is empty")));
    }
    if pattern.starts_with('/') || pattern.split('/').any(|part| part == "..") {
        return Err(WorkspaceError::BadRequest(format!(
            "{field} {pattern:?} must be relative to the workspace root, without '..'"
        )));
    }
    globset::GlobBuilder::new(pattern.trim_start_matches("./"))
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| {
            WorkspaceError::BadRequest(format!("{field} {pattern:?} is not a valid glob: {e}"))
        })
}

/// The walk every search and listing makes: `.gitignore` honoured, hidden files shown,
/// `.git` and the workspace's own `.switchboard/` left out.
pub(crate) fn walker(start: &std::path::Path) -> WalkBuilder {
    let mut builder = WalkBuilder::new(start);
    builder
        .hidden(false)
        // The workspace's `.gitignore` counts even where it is not (yet) a git repository.
        .require_git(false)
        .filter_entry(|e| e.file_name() != ".git" && e.file_name() != ".switchboard");
    builder
}

/// What each walker thread does first with an entry: stop at the deadline, skip what is not
/// a regular file. `Ok(entry)` to look at it, `Err(state)` to answer the walker with.
fn regular_file(
    entry: Result<ignore::DirEntry, ignore::Error>,
    started: Instant,
    deadline: Duration,
    timed_out: &AtomicBool,
) -> Result<ignore::DirEntry, WalkState> {
    if started.elapsed() > deadline {
        timed_out.store(true, Ordering::Relaxed);
        return Err(WalkState::Quit);
    }
    match entry {
        Ok(entry) if entry.file_type().is_some_and(|t| t.is_file()) => Ok(entry),
        _ => Err(WalkState::Continue),
    }
}

/// `fs.glob`, stopping at `deadline`.
pub fn glob(
    root: &Root,
    request: &GlobRequest,
    deadline: Duration,
) -> Result<GlobAnswer, WorkspaceError> {
    let matcher = path_glob(&request.pattern, "pattern")?;
    let started = Instant::now();
    let found: Mutex<Vec<(SystemTime, String)>> = Mutex::new(Vec::new());
    let timed_out = AtomicBool::new(false);
    walker(root.path()).build_parallel().run(|| {
        Box::new(|entry| {
            let entry = match regular_file(entry, started, deadline, &timed_out) {
                Ok(entry) => entry,
                Err(state) => return state,
            };
            let relative = root.relative(entry.path());
            if matcher.is_match(&relative) {
                let modified = entry
                    .metadata()
                    .ok()
                    .and_then(|m| m.modified().ok())
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                found
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((modified, relative));
            }
            WalkState::Continue
        })
    });
    let mut found = found
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let truncated = found.len() > MAX_GLOB;
    found.truncate(MAX_GLOB);
    Ok(GlobAnswer {
        paths: found.into_iter().map(|(_, p)| p).collect(),
        truncated,
        timed_out: timed_out.into_inner(),
    })
}

/// `fs.grep`, stopping at `deadline`.
pub fn grep(
    root: &Root,
    request: &GrepRequest,
    deadline: Duration,
) -> Result<GrepAnswer, WorkspaceError> {
    if request.pattern.is_empty() {
        return Err(WorkspaceError::BadRequest("pattern is empty".into()));
    }
    let matcher = RegexMatcherBuilder::new()
        .line_terminator(Some(b'\n'))
        .build(&request.pattern)
        .map_err(|e| {
            WorkspaceError::BadRequest(format!("pattern is not a valid regular expression: {e}"))
        })?;
    let only = request
        .glob
        .as_deref()
        .map(|g| path_glob(g, "glob"))
        .transpose()?;
    let limit = request.limit.unwrap_or(100).clamp(1, MAX_GREP);
    let started = Instant::now();
    let found: Arc<Mutex<Vec<GrepMatch>>> = Arc::new(Mutex::new(Vec::new()));
    let count = AtomicUsize::new(0);
    let timed_out = AtomicBool::new(false);
    walker(root.path()).build_parallel().run(|| {
        let matcher = matcher.clone();
        let mut searcher = SearcherBuilder::new()
            .binary_detection(BinaryDetection::quit(0))
            .line_number(true)
            .build();
        let found = Arc::clone(&found);
        let only = only.clone();
        let count = &count;
        let timed_out = &timed_out;
        Box::new(move |entry| {
            if count.load(Ordering::Relaxed) > limit {
                return WalkState::Quit;
            }
            let entry = match regular_file(entry, started, deadline, timed_out) {
                Ok(entry) => entry,
                Err(state) => return state,
            };
            let relative = root.relative(entry.path());
            if only.as_ref().is_some_and(|g| !g.is_match(&relative)) {
                return WalkState::Continue;
            }
            let mut local = Vec::new();
            let _ = searcher.search_path(
                &matcher,
                entry.path(),
                sinks::Lossy(|line, text| {
                    local.push(GrepMatch {
                        path: relative.clone(),
                        line,
                        text: text
                            .trim_end_matches(['\n', '\r'])
                            .chars()
                            .take(MAX_LINE_CHARS)
                            .collect(),
                    });
                    // A file with a million matching lines stops at the limit too.
                    Ok(count.fetch_add(1, Ordering::Relaxed) <= limit)
                }),
            );
            if !local.is_empty() {
                found
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .extend(local);
            }
            WalkState::Continue
        })
    });
    let mut matches = std::mem::take(
        &mut *found
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    matches.sort_by(|a, b| a.path.cmp(&b.path).then(a.line.cmp(&b.line)));
    let truncated = matches.len() > limit;
    matches.truncate(limit);
    Ok(GrepAnswer {
        matches,
        truncated,
        timed_out: timed_out.into_inner(),
    })
}
