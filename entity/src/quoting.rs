//! How untrusted words are quoted in a prompt: every line starts with [`UNTRUSTED_MARK`],
//! whatever line breaks the text holds, so no line of an untrusted message can pass for a
//! trusted one; names stand on one line. Trust itself is decided elsewhere, by user id; this
//! module only marks. One copy for the tool server's trust, the agent's prompts and the
//! context crate.

use std::borrow::Cow;

/// What starts every line that came from someone untrusted.
pub const UNTRUSTED_MARK: &str = "(untrusted)";

/// What ends a line for some reader of a prompt: line feed, carriage return, vertical tab,
/// form feed, NEL, and Unicode's line and paragraph separators (`\r\n` is one break).
pub const LINE_BREAKS: [char; 7] = [
    '\n', '\r', '\u{0B}', '\u{0C}', '\u{85}', '\u{2028}', '\u{2029}',
];

/// Whether `c` ends a line for some reader of the prompt.
pub fn is_line_break(c: char) -> bool {
    LINE_BREAKS.contains(&c)
}

/// A name as it may stand in a header: on one line, without control characters.
pub fn one_line(name: &str) -> Cow<'_, str> {
    if name.chars().any(char::is_control) || name.contains(['\u{2028}', '\u{2029}']) {
        Cow::Owned(
            name.chars()
                .map(|c| {
                    if c.is_control() || is_line_break(c) {
                        ' '
                    } else {
                        c
                    }
                })
                .collect(),
        )
    } else {
        Cow::Borrowed(name)
    }
}

/// Appends `block` to `out`, one line per line of `block` (`\r\n` counts as one break), each
/// ended by `\n`; when `trusted` is false, every line starts with [`UNTRUSTED_MARK`]. A trusted
/// block is appended as it is written.
pub fn quote(out: &mut String, block: &str, trusted: bool) {
    if trusted {
        out.push_str(block);
        out.push('\n');
        return;
    }
    let mut rest = block;
    loop {
        let (line, next) = match rest.char_indices().find(|&(_, c)| is_line_break(c)) {
            Some((at, c)) => {
                let mut after = at + c.len_utf8();
                if c == '\r' && rest[after..].starts_with('\n') {
                    after += 1;
                }
                (&rest[..at], Some(&rest[after..]))
            }
            None => (rest, None),
        };
        out.push_str(UNTRUSTED_MARK);
        if !line.is_empty() {
            out.push(' ');
            out.push_str(line);
        }
        out.push('\n');
        match next {
            Some(next) => rest = next,
            None => return,
        }
    }
}

/// [`quote`] into a new string, without the last line's `\n` (a chat turn's content).
pub fn quoted(block: &str, trusted: bool) -> String {
    let mut out = String::with_capacity(block.len() + 16);
    quote(&mut out, block, trusted);
    out.pop();
    out
}
