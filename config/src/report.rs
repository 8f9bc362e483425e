//! Located problems: every one names `file:line:column`, the key path, and what to do.

use std::fmt;
use switchboard_agents::Findings;

/// One thing wrong with the config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line; 0 when the problem has no place in the file (a default value).
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// Dotted key path, such as `discord.allowed_guild_ids[1]`.
    pub key_path: String,
    /// What is wrong, such as `'ops!' is not a valid alias name`.
    pub message: String,
    /// What to do about it.
    pub help: String,
}

/// Every problem found in one config file, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The file as named to [`Config::load`](crate::Config::load) (its path) or
    /// [`Config::parse`](crate::Config::parse) (its `file`).
    pub file: String,
    /// Sorted by place in the file; a problem with no place (line 0) sorts as if at its start.
    pub problems: Vec<Problem>,
}

impl Report {
    /// The first line `check-config` prints: `FILE: N problems found`.
    pub fn headline(&self) -> String {
        let count = self.problems.len();
        format!(
            "{}: {} problem{} found",
            self.file,
            count,
            if count == 1 { "" } else { "s" }
        )
    }

    /// Each problem as `check-config` prints it: `FILE:LINE:COL: KEY: MESSAGE`, then
    /// `  help: …` on the next line.
    pub fn problem_texts(&self) -> Vec<String> {
        self.problems
            .iter()
            .map(|p| {
                let place = if p.line == 0 {
                    self.file.clone()
                } else {
                    format!("{}:{}:{}", self.file, p.line, p.column)
                };
                format!("{place}: {}: {}\n  help: {}", p.key_path, p.message, p.help)
            })
            .collect()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.headline())?;
        for text in self.problem_texts() {
            writeln!(f, "{text}")?;
        }
        Ok(())
    }
}

/// Collects problems as [`Findings`] (the shape other crates' validations report in too) and
/// turns their byte spans into line and column numbers when the report is made. It derefs to
/// its findings: `collector.add(span, key_path, message, help)` records one.
pub(crate) struct Collector<'a> {
    source: &'a str,
    line_starts: Vec<usize>,
    findings: Findings,
}

impl<'a> Collector<'a> {
    pub fn new(source: &'a str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(source.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Collector {
            source,
            line_starts,
            findings: Findings::new(),
        }
    }

    fn locate(&self, offset: usize) -> (usize, usize) {
        let line = self.line_starts.partition_point(|&start| start <= offset);
        let line_start = self.line_starts[line - 1];
        let end = offset.min(self.source.len());
        let column = self
            .source
            .get(line_start..end)
            .map_or(1, |s| s.chars().count() + 1);
        (line, column)
    }

    /// Records every finding another crate's validation made (`switchboard_agents::Findings`).
    pub fn report(&mut self, findings: Findings) {
        self.findings.extend(findings);
    }

    /// The report, problems in file order; an empty span at 0 means "not in the file" (a
    /// default) and sorts first.
    pub fn finish(mut self, file: &str) -> Report {
        let mut problems: Vec<(usize, Problem)> = std::mem::take(&mut self.findings)
            .into_iter()
            .map(|finding| {
                let (offset, (line, column)) = match finding.span {
                    Some(span) if !(span.start == 0 && span.end == 0) => {
                        (span.start, self.locate(span.start))
                    }
                    _ => (0, (0, 0)),
                };
                let problem = Problem {
                    line,
                    column,
                    key_path: finding.key_path,
                    message: finding.message,
                    help: finding.help,
                };
                (offset, problem)
            })
            .collect();
        problems.sort_by_key(|(offset, _)| *offset);
        Report {
            file: file.to_owned(),
            problems: problems.into_iter().map(|(_, p)| p).collect(),
        }
    }
}

impl std::ops::Deref for Collector<'_> {
    type Target = Findings;

    fn deref(&self) -> &Findings {
        &self.findings
    }
}

impl std::ops::DerefMut for Collector<'_> {
    fn deref_mut(&mut self) -> &mut Findings {
        &mut self.findings
    }
}

/// The file as text, or a located problem at its first byte that is not UTF-8.
pub(crate) fn utf8_source<'a>(bytes: &'a [u8], file: &str) -> Result<&'a str, Report> {
    std::str::from_utf8(bytes).map_err(|error| {
        let valid = &bytes[..error.valid_up_to()];
        // The valid prefix is UTF-8 by definition.
        let prefix = std::str::from_utf8(valid).unwrap_or_default();
        let line = prefix.matches('\n').count() + 1;
        let column = prefix
            .rsplit('\n')
            .next()
            .map_or(1, |last| last.chars().count() + 1);
        Report {
            file: file.to_owned(),
            problems: vec![Problem {
                line,
                column,
                key_path: "(encoding)".to_owned(),
                message: format!(
                    "the file is not UTF-8 text (byte 0x{:02x} at offset {})",
                    bytes[error.valid_up_to()],
                    error.valid_up_to()
                ),
                help: "save the config as UTF-8 (TOML files must be UTF-8); check the editor's encoding setting".to_owned(),
            }],
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_offsets_as_one_based_lines_and_char_columns() {
        let c = Collector::new("ab\nçd = 1\n");
        assert_eq!(c.locate(0), (1, 1));
        assert_eq!(c.locate(3), (2, 1));
        assert_eq!(c.locate(6), (2, 3));
    }

    #[test]
    fn a_file_that_is_not_utf8_is_located_at_its_first_bad_byte() {
        let report = utf8_source(b"[discord]\nallow_dms = \xff\n", "x.toml").unwrap_err();
        assert_eq!(report.problems.len(), 1);
        let problem = &report.problems[0];
        assert_eq!((problem.line, problem.column), (2, 13));
        assert!(problem.message.contains("not UTF-8"), "{}", problem.message);
        assert!(report
            .to_string()
            .starts_with("x.toml: 1 problem found\nx.toml:2:13: (encoding)"));
    }
}
