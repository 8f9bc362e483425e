//! `fs.edit`: replace a piece of text, falling back to looser matches when the exact text is
//! not in the file.
//!
//! The fallbacks, in order (the first that finds anything decides):
//!
//! 1. **exact**: the text as given.
//! 2. **line-trimmed**: whole lines equal once trailing whitespace (and `\r`) is trimmed from
//!    each.
//! 3. **whitespace-normalised**: whole lines equal once runs of spaces and tabs inside them
//!    are collapsed to one space (their indentation must still be the same).
//! 4. **indentation-flexible**: whole lines equal once the block's common indentation is
//!    removed from both sides (the block was indented differently); the replacement is
//!    re-indented to where the block stands.
//! 5. **block-anchor**: the first and last lines equal (trimmed), the lines between similar
//!    by edit distance (at least [`BLOCK_SIMILARITY`]); needs three lines or more.
//!
//! Each level tolerates a difference the ones before it do not, so each one is reached only
//! when the earlier ones found nothing. A match that is not unique is refused with where it
//! matched, unless `replaceAll` is set.

use serde::{Deserialize, Serialize};

use crate::error::{Location, WorkspaceError};
use crate::paths::Root;

/// The least similarity (0..1, normalised Levenshtein) of the lines between the anchors.
pub const BLOCK_SIMILARITY: f64 = 0.5;
/// Files larger than this are not edited in memory.
pub const MAX_EDIT_BYTES: u64 = 8 << 20;

/// `fs.edit`'s request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EditRequest {
    pub path: String,
    pub old: String,
    pub new: String,
    #[serde(default)]
    pub replace_all: bool,
}

/// Which fallback found the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Strategy {
    Exact,
    LineTrimmed,
    WhitespaceNormalised,
    IndentationFlexible,
    BlockAnchor,
}

/// `fs.edit`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EditAnswer {
    pub path: String,
    pub replacements: usize,
    pub strategy: Strategy,
    /// The change as a unified diff.
    pub diff: String,
}

/// A match: a byte range of the file and the text that replaces it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Found {
    start: usize,
    end: usize,
    replacement: String,
}

/// The file's lines with their byte ranges (without the `\n`).
fn lines_of(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        out.push((start, line.strip_suffix('\n').unwrap_or(line)));
        start += line.len();
    }
    out
}

fn indentation(line: &str) -> &str {
    &line[..line.len() - line.trim_start_matches([' ', '\t']).len()]
}

fn collapse(line: &str) -> String {
    let body = line.trim_start_matches([' ', '\t']);
    let mut out = String::from(indentation(line));
    out.push_str(
        &body
            .split([' ', '\t'])
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
    );
    out.trim_end_matches('\r').to_owned()
}

/// The smallest indentation of the non-blank lines.
fn common_indent<'a>(lines: impl Iterator<Item = &'a str>) -> &'a str {
    lines
        .filter(|l| !l.trim().is_empty())
        .map(indentation)
        .min_by_key(|i| i.len())
        .unwrap_or("")
}

fn dedent<'a>(line: &'a str, indent: &str) -> &'a str {
    line.strip_prefix(indent)
        .unwrap_or_else(|| line.trim_start_matches([' ', '\t']))
}

/// `old` as lines, without a final empty line from a trailing newline.
fn old_lines(old: &str) -> Vec<&str> {
    let old = old.strip_suffix('\n').unwrap_or(old);
    old.split('\n').collect()
}

/// Line windows of the file where `equal(file line, old line)` holds for every line.
fn line_windows(
    text: &str,
    old: &str,
    new: &str,
    equal: impl Fn(&str, &str) -> bool,
) -> Vec<Found> {
    let file = lines_of(text);
    let wanted = old_lines(old);
    if wanted.is_empty() || wanted.len() > file.len() || wanted.iter().all(|l| l.trim().is_empty())
    {
        return Vec::new();
    }
    let mut found = Vec::new();
    let mut i = 0;
    while i + wanted.len() <= file.len() {
        let window = &file[i..i + wanted.len()];
        if window.iter().zip(&wanted).all(|((_, a), b)| equal(a, b)) {
            let start = window[0].0;
            let (last_start, last) = window[window.len() - 1];
            let end = last_start + last.len();
            let replacement = strip_final_newline(old, new).to_owned();
            found.push(Found {
                start,
                end,
                replacement,
            });
            i += wanted.len();
        } else {
            i += 1;
        }
    }
    found
}

/// A line match replaces the lines without their last newline, so a newline that ends both
/// `old` and `new` is not doubled.
fn strip_final_newline<'a>(old: &str, new: &'a str) -> &'a str {
    if old.ends_with('\n') {
        new.strip_suffix('\n').unwrap_or(new)
    } else {
        new
    }
}

/// Moves `text` from indentation `from` to `to`, keeping each line's indentation relative to
/// it.
fn reindent_text(text: &str, from: &str, to: &str) -> String {
    text.split('\n')
        .map(|line| {
            if line.trim().is_empty() {
                line.to_owned()
            } else if let Some(rest) = line.strip_prefix(from) {
                format!("{to}{rest}")
            } else {
                format!("{to}{}", line.trim_start_matches([' ', '\t']))
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn block_anchor(text: &str, old: &str, new: &str) -> Vec<Found> {
    let wanted = old_lines(old);
    if wanted.len() < 3 {
        return Vec::new();
    }
    let file = lines_of(text);
    let (first, last) = (wanted[0].trim(), wanted[wanted.len() - 1].trim());
    if first.is_empty() || last.is_empty() {
        return Vec::new();
    }
    let middle = wanted[1..wanted.len() - 1].join("\n");
    let (shortest, longest) = ((wanted.len() / 2).max(3), wanted.len() * 2);
    let mut found = Vec::new();
    for (i, (start, line)) in file.iter().enumerate() {
        if line.trim() != first {
            continue;
        }
        let candidates =
            (i + shortest - 1..(i + longest).min(file.len())).filter(|&j| file[j].1.trim() == last);
        let best = candidates
            .map(|j| {
                let between: Vec<&str> = file[i + 1..j].iter().map(|(_, l)| *l).collect();
                (
                    j,
                    strsim::normalized_levenshtein(&between.join("\n"), &middle),
                )
            })
            .filter(|(_, similarity)| *similarity >= BLOCK_SIMILARITY)
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((j, _)) = best {
            let (last_start, last_line) = file[j];
            found.push(Found {
                start: *start,
                end: last_start + last_line.len(),
                replacement: strip_final_newline(old, new).to_owned(),
            });
        }
    }
    // Overlapping blocks are one place, the first.
    found.dedup_by(|b, a| b.start < a.end);
    found
}

fn exact(text: &str, old: &str, new: &str) -> Vec<Found> {
    text.match_indices(old)
        .map(|(start, _)| Found {
            start,
            end: start + old.len(),
            replacement: new.to_owned(),
        })
        .collect()
}

/// Blocks indented differently: dedented lines equal, the replacement re-indented.
fn indentation_flexible(text: &str, old: &str, new: &str) -> Vec<Found> {
    let wanted = old_lines(old);
    if wanted.iter().all(|l| l.trim().is_empty()) {
        return Vec::new();
    }
    let from = common_indent(wanted.iter().copied());
    let file = lines_of(text);
    let n = wanted.len();
    let mut found = Vec::new();
    let mut i = 0;
    while i + n <= file.len() {
        // Each window's own indentation: compare the dedented lines.
        let window: Vec<&str> = file[i..i + n].iter().map(|(_, l)| *l).collect();
        let to = common_indent(window.iter().copied());
        let same = window
            .iter()
            .zip(&wanted)
            .all(|(a, b)| dedent(a, to).trim_end() == dedent(b, from).trim_end());
        if same {
            let (last_start, last) = file[i + n - 1];
            found.push(Found {
                start: file[i].0,
                end: last_start + last.len(),
                replacement: reindent_text(strip_final_newline(old, new), from, to),
            });
            i += n;
        } else {
            i += 1;
        }
    }
    found
}

/// The fallbacks, in the order they are tried.
const ORDER: [Strategy; 5] = [
    Strategy::Exact,
    Strategy::LineTrimmed,
    Strategy::WhitespaceNormalised,
    Strategy::IndentationFlexible,
    Strategy::BlockAnchor,
];

fn search(strategy: Strategy, text: &str, old: &str, new: &str) -> Vec<Found> {
    match strategy {
        Strategy::Exact => exact(text, old, new),
        Strategy::LineTrimmed => line_windows(text, old, new, |a, b| a.trim_end() == b.trim_end()),
        Strategy::WhitespaceNormalised => {
            line_windows(text, old, new, |a, b| collapse(a) == collapse(b))
        }
        Strategy::IndentationFlexible => indentation_flexible(text, old, new),
        Strategy::BlockAnchor => block_anchor(text, old, new),
    }
}

/// Finds `old` in `text` by the first fallback that finds it.
fn find(text: &str, old: &str, new: &str) -> Option<(Strategy, Vec<Found>)> {
    ORDER.into_iter().find_map(|strategy| {
        let found = search(strategy, text, old, new);
        (!found.is_empty()).then_some((strategy, found))
    })
}

/// The 1-based line of a byte offset.
fn line_at(text: &str, offset: usize) -> usize {
    text[..offset].bytes().filter(|&b| b == b'\n').count() + 1
}

/// Applies an edit to `text`: the new text and how it was matched.
pub fn apply(
    path: &str,
    text: &str,
    request: &EditRequest,
) -> Result<(String, Strategy, usize), WorkspaceError> {
    if request.old.is_empty() {
        return Err(WorkspaceError::BadRequest(
            "old is empty; give the text to replace (use fs.write to write a whole file)".into(),
        ));
    }
    if request.old == request.new {
        return Err(WorkspaceError::BadRequest(
            "old and new are the same: nothing would change".into(),
        ));
    }
    let (strategy, found) =
        find(text, &request.old, &request.new).ok_or_else(|| WorkspaceError::NoMatch {
            path: path.to_owned(),
        })?;
    if found.len() > 1 && !request.replace_all {
        return Err(WorkspaceError::NotUnique {
            path: path.to_owned(),
            locations: found
                .iter()
                .map(|f| Location {
                    line: line_at(text, f.start),
                    preview: text[f.start..f.end]
                        .lines()
                        .next()
                        .unwrap_or("")
                        .trim()
                        .chars()
                        .take(120)
                        .collect(),
                })
                .collect(),
        });
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for f in &found {
        out.push_str(&text[at..f.start]);
        out.push_str(&f.replacement);
        at = f.end;
    }
    out.push_str(&text[at..]);
    Ok((out, strategy, found.len()))
}

/// A unified diff of a change to `path`.
pub fn unified_diff(path: &str, before: &str, after: &str) -> String {
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{path}"), &format!("b/{path}"))
        .to_string()
}

/// `fs.edit`.
pub fn edit(root: &Root, request: &EditRequest) -> Result<EditAnswer, WorkspaceError> {
    use std::io::Read;
    let (resolved, file, size) = crate::fs::open_file(root, &request.path, "a directory")?;
    if size > MAX_EDIT_BYTES {
        return Err(WorkspaceError::Unsupported(format!(
            "{} is {} bytes; fs.edit edits files up to {MAX_EDIT_BYTES} bytes (use shell.run with sed for larger ones)",
            resolved.relative, size
        )));
    }
    let mut bytes = Vec::new();
    file.take(MAX_EDIT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(WorkspaceError::io("cannot read"))?;
    let before = String::from_utf8(bytes).map_err(|_| {
        WorkspaceError::Unsupported(format!(
            "{} is not UTF-8 text; fs.edit edits text files",
            resolved.relative
        ))
    })?;
    let (after, strategy, replacements) = apply(&resolved.relative, &before, request)?;
    root.write(&resolved, after.as_bytes())?;
    Ok(EditAnswer {
        diff: unified_diff(&resolved.relative, &before, &after),
        path: resolved.relative,
        replacements,
        strategy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::WorkspaceErrorKind;

    fn edit_text(text: &str, old: &str, new: &str) -> Result<(String, Strategy), WorkspaceError> {
        let request = EditRequest {
            path: "f".into(),
            old: old.into(),
            new: new.into(),
            replace_all: false,
        };
        apply("f", text, &request).map(|(t, s, _)| (t, s))
    }

    #[test]
    fn exact_text_is_replaced_first() {
        let (out, strategy) =
            edit_text("fn a() {}\nfn b() {}\n", "fn b() {}", "fn c() {}").unwrap();
        assert_eq!(
            (out.as_str(), strategy),
            ("fn a() {}\nfn c() {}\n", Strategy::Exact)
        );
    }

    #[test]
    fn trailing_whitespace_falls_back_to_line_trimmed() {
        let text = "let a = 1;   \nlet b = 2;\r\nlet c = 3;\n";
        let (out, strategy) = edit_text(
            text,
            "let a = 1;\nlet b = 2;\n",
            "let a = 10;\nlet b = 20;\n",
        )
        .unwrap();
        assert_eq!(strategy, Strategy::LineTrimmed);
        assert_eq!(out, "let a = 10;\nlet b = 20;\nlet c = 3;\n");
    }

    #[test]
    fn inner_spacing_falls_back_to_whitespace_normalised() {
        let text = "    call(a,\tb)\n    other()\n";
        let (out, strategy) = edit_text(text, "    call(a,  b)", "    call(a, b, c)").unwrap();
        assert_eq!(strategy, Strategy::WhitespaceNormalised);
        assert_eq!(out, "    call(a, b, c)\n    other()\n");
    }

    #[test]
    fn a_block_indented_differently_falls_back_to_indentation_flexible_and_is_reindented() {
        let text = "impl A {\n        fn f() {\n            x();\n        }\n}\n";
        let old = "fn f() {\n    x();\n}";
        let new = "fn f() {\n    y();\n    z();\n}";
        let (out, strategy) = edit_text(text, old, new).unwrap();
        assert_eq!(strategy, Strategy::IndentationFlexible);
        assert_eq!(
            out,
            "impl A {\n        fn f() {\n            y();\n            z();\n        }\n}\n"
        );
    }

    #[test]
    fn a_block_with_a_changed_middle_falls_back_to_block_anchor() {
        let text = "fn f() {\n    let total = compute(1);\n    print(total);\n}\nfn g() {}\n";
        let old = "fn f() {\n    let total = compute(2);\n    print(total)\n}\n";
        let (out, strategy) = edit_text(text, old, "fn f() {}\n").unwrap();
        assert_eq!(strategy, Strategy::BlockAnchor);
        assert_eq!(out, "fn f() {}\nfn g() {}\n");
        // Too different a middle is no match.
        let far = "fn f() {\n    something else entirely here\n    and more of it\n}\n";
        assert_eq!(
            edit_text(text, far, "x").unwrap_err().kind(),
            WorkspaceErrorKind::NoMatch
        );
    }

    #[test]
    fn a_match_in_two_places_is_refused_with_where_unless_replace_all() {
        let text = "a = 1\nb = 2\na = 1\n";
        let error = edit_text(text, "a = 1", "a = 3").unwrap_err();
        let WorkspaceError::NotUnique { locations, .. } = &error else {
            panic!("{error}")
        };
        assert_eq!(locations.iter().map(|l| l.line).collect::<Vec<_>>(), [1, 3]);
        assert!(error.to_string().contains("lines 1, 3"), "{error}");
        let request = EditRequest {
            path: "f".into(),
            old: "a = 1".into(),
            new: "a = 3".into(),
            replace_all: true,
        };
        let (out, _, n) = apply("f", text, &request).unwrap();
        assert_eq!((out.as_str(), n), ("a = 3\nb = 2\na = 3\n", 2));
        // Fuzzy matches are counted the same way.
        let text = "x = 1 \ny\nx = 1\t\n";
        let error = edit_text(text, "x = 1\n", "x = 2\n").unwrap_err();
        assert_eq!(error.kind(), WorkspaceErrorKind::NotUnique);
    }

    #[test]
    fn empty_or_identical_edits_are_refused() {
        assert_eq!(
            edit_text("a", "", "b").unwrap_err().kind(),
            WorkspaceErrorKind::BadRequest
        );
        assert_eq!(
            edit_text("a", "a", "a").unwrap_err().kind(),
            WorkspaceErrorKind::BadRequest
        );
        assert_eq!(
            edit_text("a", "zzz", "b").unwrap_err().kind(),
            WorkspaceErrorKind::NoMatch
        );
    }

    #[test]
    fn the_diff_is_unified() {
        let diff = unified_diff("src/a.rs", "one\ntwo\n", "one\nthree\n");
        assert!(
            diff.starts_with("--- a/src/a.rs\n+++ b/src/a.rs\n@@"),
            "{diff}"
        );
        assert!(diff.contains("-two\n+three\n"), "{diff}");
    }

    proptest::proptest! {
        #[test]
        fn no_edit_panics(text in "[ a-c\\t\\n\\r]{0,60}", old in "[ a-c\\t\\n]{1,20}", new in "[ a-d\\n]{0,10}") {
            let request = EditRequest { path: "f".into(), old, new, replace_all: true };
            let _ = apply("f", &text, &request);
        }
    }
}
