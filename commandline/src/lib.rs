//! Parses a shell command into what permission rules can judge: its pipeline segments, each
//! with its argv, and the constructs that no parser can see into.
//!
//! A rule such as `command = "git status*"` must not allow `git status; rm -rf .`, so a
//! command is never matched as one string: [`parse`] splits it at `;`, `&&`, `||`, `|`, `|&`,
//! `&` and newlines (outside quotes), and each [`Segment`] is matched on its own; the strictest
//! decision of all segments wins ([`decide`]).
//!
//! Some commands build the command they run at run time: command substitution (`$(…)`,
//! backticks), process substitution, `eval`, `source`, `sh -c` (also behind `env`, `nohup`,
//! `timeout`, …), a shell reading its script from a pipe, `xargs`, `find -exec`, compound
//! commands (`if`, `for`, subshells, functions) and a program named by a variable. They are
//! reported as [`Opaque`]: the rule engine must give such a command the strictest decision any
//! rule for `shell.run` could give it. A command that does not parse (an unclosed quote) or is
//! longer than [`MAX_COMMAND_BYTES`] is opaque too. [`parse`] never fails and never panics.
//!
//! Words are unquoted with the `shell-words` crate; this crate only finds where words,
//! operators and redirections begin and end, which `shell-words` does not know about.
//!
//! ```
//! use switchboard_commandline::{parse, CommandGlob};
//!
//! let parsed = parse("git status; rm -rf .");
//! let argv: Vec<_> = parsed.segments.iter().map(|s| s.argv.join(" ")).collect();
//! assert_eq!(argv, ["git status", "rm -rf ."]);
//! let status = CommandGlob::new("git status*").unwrap();
//! assert!(status.matches(&parsed.segments[0]));
//! assert!(!status.matches(&parsed.segments[1]));
//! assert!(parse("echo $(rm x)").is_opaque());
//! ```

use serde::Serialize;

/// Longer commands are not parsed (and so are opaque): the work stays bounded.
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;

/// A command split for rule matching.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParsedCommand {
    /// The simple commands, in order, whatever joined them.
    pub segments: Vec<Segment>,
    /// What the parser cannot see into; empty for a command every rule can judge.
    pub opaque: Vec<Opaque>,
}

impl ParsedCommand {
    /// Whether any part of the command is decided only at run time.
    pub fn is_opaque(&self) -> bool {
        !self.opaque.is_empty()
    }

    /// Every file a redirection writes to (`>`, `>>`, `&>`, `<>`, …), in order.
    pub fn written_files(&self) -> impl Iterator<Item = &str> {
        self.segments
            .iter()
            .flat_map(|s| s.redirects.iter())
            .filter(|r| r.writes)
            .map(|r| r.target.as_str())
    }
}

/// One simple command of a pipeline or list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Segment {
    /// The words as the shell passes them (quotes removed), without leading `NAME=value`
    /// assignments and redirections.
    pub argv: Vec<String>,
    /// `argv` past wrappers that run their arguments as a command (`env`, `nohup`, `nice`,
    /// `timeout`, `command`, `exec`, `stdbuf`, `setsid`, `time`): what actually runs.
    pub program: Vec<String>,
    /// Leading `NAME=value` assignments.
    pub assignments: Vec<String>,
    /// Redirections, in order.
    pub redirects: Vec<Redirect>,
    /// What joined this segment to the next one (`None` for the last).
    pub separator: Option<Separator>,
}

impl Segment {
    /// `argv` quoted back into one line, the form a `command` glob is matched against.
    pub fn text(&self) -> String {
        shell_words::join(&self.argv)
    }

    /// `program` quoted back into one line.
    pub fn program_text(&self) -> String {
        shell_words::join(&self.program)
    }
}

/// What ends a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Separator {
    /// `;`
    Semicolon,
    /// a newline
    Newline,
    /// `&&`
    And,
    /// `||`
    Or,
    /// `|` or `|&`
    Pipe,
    /// `&` (the segment runs in the background)
    Background,
}

/// A redirection of one segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Redirect {
    /// The operator as written, with its descriptor number (`2>`, `>>`, `<`, `&>`, …).
    pub operator: String,
    /// The file (or descriptor, for `>&2`) it names.
    pub target: String,
    /// Whether it opens a file for writing (not a descriptor copy like `2>&1`).
    pub writes: bool,
}

/// A construct whose effect is decided at run time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Opaque {
    pub kind: OpaqueKind,
    /// Byte offset in the command where it starts (0 for what concerns a whole segment's
    /// program, like `sh -c` or `xargs`).
    pub at: usize,
}

/// Why part of a command is opaque.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum OpaqueKind {
    /// `$(…)` or `$((…))`
    CommandSubstitution,
    /// `` `…` ``
    Backticks,
    /// `<(…)` or `>(…)`
    ProcessSubstitution,
    /// `eval`, `source` or `.`
    Eval,
    /// A shell given a command string (`sh -c`, `bash -c`, also behind `env` and the like) or
    /// reading its script from standard input (`curl … | sh`).
    ShellString,
    /// `xargs`, `find -exec` and others that build commands from their input.
    CommandBuilder,
    /// A subshell, a group, a function or a compound command (`if`, `for`, `while`, `case`).
    Compound,
    /// The program itself comes from an expansion (`$CMD args`).
    ExpandedProgram,
    /// `sudo`, `doas`, `su`, `pkexec`: a command run as someone else.
    Privilege,
    /// Here-document text the shell expands (it may run commands).
    HereDocument,
    /// It does not parse (an unclosed quote or substitution).
    Unparseable,
    /// Longer than [`MAX_COMMAND_BYTES`].
    TooLong,
}

/// A `command = "GLOB"` matcher. `*` matches anything (spaces and `/` too), `?` one
/// character, `[…]` a class, `{a,b}` alternatives, `\` escapes.
#[derive(Debug, Clone)]
pub struct CommandGlob {
    source: String,
    matcher: globset::GlobMatcher,
}

/// A glob that does not compile.
#[derive(Debug, thiserror::Error)]
#[error("command glob {glob:?} is not valid: {source}")]
pub struct GlobError {
    pub glob: String,
    #[source]
    pub source: globset::Error,
}

impl CommandGlob {
    pub fn new(glob: &str) -> Result<Self, GlobError> {
        let matcher = globset::GlobBuilder::new(glob)
            .literal_separator(false)
            .backslash_escape(true)
            .build()
            .map_err(|source| GlobError {
                glob: glob.to_owned(),
                source,
            })?
            .compile_matcher();
        Ok(Self {
            source: glob.to_owned(),
            matcher,
        })
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the segment as written, or the program it runs past wrappers, matches.
    pub fn matches(&self, segment: &Segment) -> bool {
        self.matches_text(&segment.text())
            || (segment.program != segment.argv && self.matches_text(&segment.program_text()))
    }

    /// Whether one line of text matches.
    pub fn matches_text(&self, text: &str) -> bool {
        self.matcher.is_match(text)
    }
}

/// The decision for a whole command: `per_segment` decides each segment on its own and the
/// strictest (greatest) wins; an opaque command (or one without any segment) gets `strictest`,
/// the strictest decision any rule could give. `D` orders from loosest to strictest (e.g.
/// allow < ask < deny).
pub fn decide<D: Ord + Clone>(
    parsed: &ParsedCommand,
    strictest: D,
    mut per_segment: impl FnMut(&Segment) -> D,
) -> D {
    if parsed.is_opaque() || parsed.segments.is_empty() {
        return strictest;
    }
    parsed
        .segments
        .iter()
        .map(&mut per_segment)
        .max()
        .unwrap_or(strictest)
}

/// Splits `command` into segments and finds its opaque parts. Never fails: what cannot be
/// parsed is reported as [`OpaqueKind::Unparseable`].
pub fn parse(command: &str) -> ParsedCommand {
    if command.len() > MAX_COMMAND_BYTES {
        return ParsedCommand {
            segments: Vec::new(),
            opaque: vec![Opaque {
                kind: OpaqueKind::TooLong,
                at: 0,
            }],
        };
    }
    let mut lexer = Lexer::new(command);
    lexer.run();
    let Lexer {
        segments, opaque, ..
    } = lexer;
    let mut parsed = ParsedCommand { segments, opaque };
    for index in 0..parsed.segments.len() {
        inspect(&mut parsed, index);
    }
    parsed
}

/// A word as written: its raw text (quotes kept, for `shell-words`), where it began, and what
/// the lexer saw in it.
#[derive(Default)]
struct Word {
    raw: String,
    at: usize,
    expands: bool,
    quoted: bool,
}

#[derive(Default)]
struct Pending {
    words: Vec<Word>,
    redirects: Vec<(String, Word, bool)>,
}

struct Lexer<'a> {
    text: &'a str,
    chars: Vec<(usize, char)>,
    pos: usize,
    word: Option<Word>,
    pending: Pending,
    /// A redirection operator waiting for its target word.
    redirect: Option<(String, bool)>,
    heredocs: Vec<(String, bool, bool)>,
    segments: Vec<Segment>,
    opaque: Vec<Opaque>,
}

impl<'a> Lexer<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            text,
            chars: text.char_indices().collect(),
            pos: 0,
            word: None,
            pending: Pending::default(),
            redirect: None,
            heredocs: Vec::new(),
            segments: Vec::new(),
            opaque: Vec::new(),
        }
    }

    fn peek(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).map(|&(_, c)| c)
    }

    fn offset(&self) -> usize {
        self.chars
            .get(self.pos)
            .map_or(self.text.len(), |&(i, _)| i)
    }

    fn mark(&mut self, kind: OpaqueKind, at: usize) {
        // One broken quote is reported once, not again for the word it leaves unquotable.
        if kind == OpaqueKind::Unparseable && self.opaque.iter().any(|o| o.kind == kind) {
            return;
        }
        self.opaque.push(Opaque { kind, at });
    }

    fn word(&mut self) -> &mut Word {
        let at = self.offset();
        self.word.get_or_insert_with(|| Word {
            at,
            ..Word::default()
        })
    }

    fn push(&mut self, c: char) {
        self.word().raw.push(c);
    }

    /// Every iteration consumes at least one character, so the loop ends.
    fn run(&mut self) {
        while let Some(c) = self.peek(0) {
            let at = self.offset();
            match c {
                ' ' | '\t' | '\r' => {
                    self.end_word();
                    self.pos += 1;
                }
                '\n' => {
                    self.pos += 1;
                    self.end_segment(Some(Separator::Newline));
                    self.skip_heredocs();
                }
                '#' if self.word.is_none() => {
                    while self.peek(0).is_some_and(|c| c != '\n') {
                        self.pos += 1;
                    }
                }
                '\\' => {
                    self.pos += 1;
                    match self.peek(0) {
                        Some('\n') => self.pos += 1,
                        Some(next) => {
                            self.push('\\');
                            self.push(next);
                            self.word().quoted = true;
                            self.pos += 1;
                        }
                        None => self.push('\\'),
                    }
                }
                '\'' => self.single_quoted(at),
                '"' => self.double_quoted(at),
                '$' => self.dollar(at),
                '`' => self.backticks(at),
                ';' => {
                    self.pos += 1;
                    if self.peek(0) == Some(';') {
                        self.pos += 1;
                        self.mark(OpaqueKind::Compound, at);
                    }
                    self.end_segment(Some(Separator::Semicolon));
                }
                '&' => {
                    self.pos += 1;
                    match self.peek(0) {
                        Some('&') => {
                            self.pos += 1;
                            self.end_segment(Some(Separator::And));
                        }
                        Some('>') => {
                            self.pos += 1;
                            let append = self.peek(0) == Some('>');
                            if append {
                                self.pos += 1;
                            }
                            self.end_word();
                            let op = if append { "&>>" } else { "&>" };
                            self.redirect = Some((op.to_owned(), true));
                        }
                        _ => self.end_segment(Some(Separator::Background)),
                    }
                }
                '|' => {
                    self.pos += 1;
                    match self.peek(0) {
                        Some('|') => {
                            self.pos += 1;
                            self.end_segment(Some(Separator::Or));
                        }
                        Some('&') => {
                            self.pos += 1;
                            self.end_segment(Some(Separator::Pipe));
                        }
                        _ => self.end_segment(Some(Separator::Pipe)),
                    }
                }
                '<' | '>' => self.redirection(at),
                '(' | ')' => {
                    self.mark(OpaqueKind::Compound, at);
                    self.end_word();
                    self.pos += 1;
                }
                _ => {
                    self.push(c);
                    self.pos += 1;
                }
            }
        }
        self.end_segment(None);
        if !self.heredocs.is_empty() {
            // A here-document whose body never came.
            self.mark(OpaqueKind::Unparseable, self.text.len());
        }
    }

    fn single_quoted(&mut self, at: usize) {
        self.push('\'');
        self.word().quoted = true;
        self.pos += 1;
        loop {
            match self.peek(0) {
                None => return self.mark(OpaqueKind::Unparseable, at),
                Some('\'') => {
                    self.push('\'');
                    self.pos += 1;
                    return;
                }
                Some(c) => {
                    self.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    fn double_quoted(&mut self, at: usize) {
        self.push('"');
        self.word().quoted = true;
        self.pos += 1;
        loop {
            let here = self.offset();
            match self.peek(0) {
                None => return self.mark(OpaqueKind::Unparseable, at),
                Some('"') => {
                    self.push('"');
                    self.pos += 1;
                    return;
                }
                Some('\\') => {
                    self.push('\\');
                    self.pos += 1;
                    if let Some(next) = self.peek(0) {
                        self.push(next);
                        self.pos += 1;
                    }
                }
                Some('$') => self.dollar(here),
                Some('`') => self.backticks(here),
                Some(c) => {
                    self.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// `$(…)`, `$((…))`, `${…}` or `$name`, starting at the `$`.
    fn dollar(&mut self, at: usize) {
        self.push('$');
        self.pos += 1;
        match self.peek(0) {
            Some('(') => {
                self.mark(OpaqueKind::CommandSubstitution, at);
                self.balanced('(', ')', at);
            }
            Some('{') => {
                self.word().expands = true;
                let start = self.pos;
                self.balanced('{', '}', at);
                let inner: String = self.chars[start..self.pos]
                    .iter()
                    .map(|&(_, c)| c)
                    .collect();
                if inner.contains("$(") || inner.contains('`') {
                    self.mark(OpaqueKind::CommandSubstitution, at);
                }
            }
            Some(c) if c.is_ascii_alphanumeric() || "_?@*#$!-".contains(c) => {
                self.word().expands = true;
            }
            _ => {}
        }
    }

    /// Copies an opening bracket through its matching close into the word; unclosed is
    /// unparseable.
    fn balanced(&mut self, open: char, close: char, at: usize) {
        let mut depth = 0usize;
        while let Some(c) = self.peek(0) {
            self.push(c);
            self.pos += 1;
            if c == open {
                depth += 1;
            } else if c == close {
                depth -= 1;
                if depth == 0 {
                    return;
                }
            }
        }
        self.mark(OpaqueKind::Unparseable, at);
    }

    fn backticks(&mut self, at: usize) {
        self.mark(OpaqueKind::Backticks, at);
        self.push('`');
        self.pos += 1;
        while let Some(c) = self.peek(0) {
            self.push(c);
            self.pos += 1;
            if c == '\\' {
                if let Some(next) = self.peek(0) {
                    self.push(next);
                    self.pos += 1;
                }
            } else if c == '`' {
                return;
            }
        }
        self.mark(OpaqueKind::Unparseable, at);
    }

    fn redirection(&mut self, at: usize) {
        // A word of digits right before the operator is its descriptor (`2>`).
        let descriptor = match &self.word {
            Some(w)
                if !w.quoted && !w.raw.is_empty() && w.raw.bytes().all(|b| b.is_ascii_digit()) =>
            {
                self.word.take().map(|w| w.raw)
            }
            _ => None,
        };
        self.end_word();
        let first = self.peek(0).unwrap_or('>');
        self.pos += 1;
        let second = self.peek(0);
        if second == Some('(') {
            self.mark(OpaqueKind::ProcessSubstitution, at);
            self.push(first);
            self.balanced('(', ')', at);
            return;
        }
        let mut op = String::from(first);
        let mut writes = first == '>';
        let mut heredoc = false;
        match (first, second) {
            ('>', Some(c @ ('>' | '|'))) | ('<', Some(c @ '>')) => {
                op.push(c);
                self.pos += 1;
                writes = true;
            }
            ('>' | '<', Some('&')) => {
                op.push('&');
                self.pos += 1;
                writes = false;
            }
            ('<', Some('<')) => {
                op.push('<');
                self.pos += 1;
                match self.peek(0) {
                    Some('<') => {
                        op.push('<');
                        self.pos += 1;
                    }
                    Some('-') => {
                        op.push('-');
                        self.pos += 1;
                        heredoc = true;
                    }
                    _ => heredoc = true,
                }
            }
            _ => {}
        }
        if let Some(fd) = descriptor {
            op.insert_str(0, &fd);
        }
        if heredoc {
            op.push('\u{0}');
        }
        self.redirect = Some((op, writes));
    }

    /// After a newline, skips the bodies of the here-documents opened on the line before.
    fn skip_heredocs(&mut self) {
        let heredocs = std::mem::take(&mut self.heredocs);
        for (delimiter, strip_tabs, expands) in heredocs {
            let start = self.offset();
            let mut body_runs_commands = false;
            loop {
                let line_start = self.pos;
                while self.peek(0).is_some_and(|c| c != '\n') {
                    self.pos += 1;
                }
                let line: String = self.chars[line_start..self.pos]
                    .iter()
                    .map(|&(_, c)| c)
                    .collect();
                let at_end = self.peek(0).is_none();
                self.pos += usize::from(!at_end);
                let candidate = if strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    &line
                };
                if candidate == delimiter {
                    break;
                }
                body_runs_commands |= line.contains("$(") || line.contains('`');
                if at_end {
                    self.mark(OpaqueKind::Unparseable, start);
                    break;
                }
            }
            if expands && body_runs_commands {
                self.mark(OpaqueKind::HereDocument, start);
            }
        }
    }

    fn end_word(&mut self) {
        let Some(word) = self.word.take() else {
            return;
        };
        if let Some((op, writes)) = self.redirect.take() {
            if let Some(op) = op.strip_suffix('\u{0}') {
                let delimiter = unquote(&word.raw).unwrap_or_else(|| word.raw.clone());
                self.heredocs
                    .push((delimiter, op.ends_with('-'), !word.quoted));
                self.pending.redirects.push((op.to_owned(), word, false));
            } else {
                // `>&2` copies a descriptor; `>&file` (no digits) is bash for `&>file`.
                let writes = writes
                    || (op.ends_with(">&")
                        && !word.raw.bytes().all(|b| b.is_ascii_digit() || b == b'-'));
                self.pending.redirects.push((op, word, writes));
            }
            return;
        }
        self.pending.words.push(word);
    }

    fn end_segment(&mut self, separator: Option<Separator>) {
        self.end_word();
        if self.redirect.take().is_some() {
            self.mark(OpaqueKind::Unparseable, self.offset());
        }
        let pending = std::mem::take(&mut self.pending);
        if pending.words.is_empty() && pending.redirects.is_empty() {
            // `;;`, a leading `|` or an empty line: nothing to run here. A dangling operator
            // (`a &&` at the end, `| b`) is a syntax error for the shell; it runs nothing.
            if let Some(last) = self.segments.last_mut() {
                if separator.is_some() && last.separator.is_none() {
                    last.separator = separator;
                }
            }
            return;
        }
        let mut assignments = Vec::new();
        let mut argv = Vec::new();
        let mut words = pending.words.into_iter().peekable();
        while let Some(word) = words.next_if(|w| argv.is_empty() && is_assignment(&w.raw)) {
            assignments.push(self.value(&word));
        }
        for (index, word) in words.enumerate() {
            if index == 0 && word.expands {
                self.mark(OpaqueKind::ExpandedProgram, word.at);
            }
            argv.push(self.value(&word));
        }
        let redirects = pending
            .redirects
            .into_iter()
            .map(|(operator, word, writes)| Redirect {
                operator,
                target: self.value(&word),
                writes,
            })
            .collect();
        self.segments.push(Segment {
            program: argv.clone(),
            argv,
            assignments,
            redirects,
            separator,
        });
    }

    /// The word as the shell would pass it (expansions left as written).
    fn value(&mut self, word: &Word) -> String {
        match unquote(&word.raw) {
            Some(value) => value,
            None => {
                self.mark(OpaqueKind::Unparseable, word.at);
                word.raw.clone()
            }
        }
    }
}

fn unquote(raw: &str) -> Option<String> {
    let mut words = shell_words::split(raw).ok()?;
    match words.len() {
        1 => words.pop(),
        0 => Some(String::new()),
        _ => Some(words.join(" ")),
    }
}

fn is_assignment(raw: &str) -> bool {
    let Some((name, _)) = raw.split_once('=') else {
        return false;
    };
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn basename(program: &str) -> &str {
    program.rsplit('/').next().unwrap_or(program)
}

/// Programs that run their arguments as a command: matching sees through them.
const WRAPPERS: &[&str] = &[
    "!", "time", "nohup", "setsid", "command", "exec", "nice", "stdbuf", "timeout", "env",
];
const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "busybox",
];
const COMPOUND: &[&str] = &[
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac",
    "function", "select", "{", "}", "[[", "]]", "((", "coproc",
];

/// Unwraps `segment.program` past wrappers and marks what makes it opaque.
fn inspect(parsed: &mut ParsedCommand, index: usize) {
    let segment = &mut parsed.segments[index];
    let at = 0;
    let mut mark = Vec::new();
    let mut program: &[String] = &segment.argv;
    // Each pass drops at least one word, so this ends.
    while let Some(first) = program.first() {
        let name = basename(first);
        let rest = &program[1..];
        let (skip, opaque) = match name {
            "!" => (0, None),
            "time" => (options(rest, &[]), None),
            "nohup" | "setsid" => (options(rest, &[]), None),
            "command" => {
                if rest.first().is_some_and(|a| a == "-v" || a == "-V") {
                    program = &[];
                    break;
                }
                (options(rest, &[]), None)
            }
            "exec" => (options(rest, &["-a"]), None),
            "nice" => (options(rest, &["-n", "--adjustment"]), None),
            "stdbuf" => (options(rest, &["-i", "-o", "-e"]), None),
            "timeout" => {
                let skip = options(rest, &["-s", "--signal", "-k", "--kill-after"]);
                (skip + usize::from(skip < rest.len()), None)
            }
            "env" => {
                if rest.iter().any(|a| {
                    a == "-S"
                        || a.starts_with("--split-string")
                        || (a.starts_with("-S") && !a.starts_with("--"))
                }) {
                    (0, Some(OpaqueKind::ShellString))
                } else {
                    let mut skip = options(rest, &["-u", "--unset", "-C", "--chdir"]);
                    while rest.get(skip).is_some_and(|a| is_assignment(a)) {
                        skip += 1;
                    }
                    (skip, None)
                }
            }
            "eval" | "source" | "." => (0, Some(OpaqueKind::Eval)),
            "xargs" | "parallel" => (0, Some(OpaqueKind::CommandBuilder)),
            "find"
                if rest
                    .iter()
                    .any(|a| matches!(a.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir")) =>
            {
                (0, Some(OpaqueKind::CommandBuilder))
            }
            "sudo" | "doas" | "su" | "pkexec" | "runuser" => (0, Some(OpaqueKind::Privilege)),
            _ if SHELLS.contains(&name) => {
                let runs_string = rest
                    .iter()
                    .take_while(|a| a.starts_with('-') || a.starts_with('+'))
                    .any(|a| !a.starts_with("--") && a[1..].contains('c'));
                let has_script = rest
                    .iter()
                    .any(|a| !a.starts_with('-') && !a.starts_with('+'));
                if runs_string || !has_script {
                    (0, Some(OpaqueKind::ShellString))
                } else {
                    (0, None)
                }
            }
            _ if COMPOUND.contains(&name) => (0, Some(OpaqueKind::Compound)),
            _ => break,
        };
        if let Some(kind) = opaque {
            mark.push(kind);
            break;
        }
        if WRAPPERS.contains(&name) {
            program = &rest[skip.min(rest.len())..];
            if program.first().is_some_and(|p| p.contains('$')) {
                mark.push(OpaqueKind::ExpandedProgram);
            }
            continue;
        }
        break;
    }
    segment.program = program.to_vec();
    parsed
        .opaque
        .extend(mark.into_iter().map(|kind| Opaque { kind, at }));
}

/// How many leading words of `args` are options (those in `with_value` take the next word
/// as their value unless written `-oVALUE` or `--opt=value`). `--` ends them.
fn options(args: &[String], with_value: &[&str]) -> usize {
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        if arg == "--" {
            return i + 1;
        }
        if !arg.starts_with('-') || arg == "-" {
            break;
        }
        i += 1;
        if with_value.contains(&arg.as_str()) {
            i += 1;
        }
    }
    i.min(args.len())
}

#[cfg(test)]
mod tests;
