//! How untrusted words are quoted: every line starts with [`UNTRUSTED_MARK`], whatever line
//! breaks the text holds, so no line of an untrusted message can pass for a trusted one. Trust
//! is decided by the caller, by user id (names prove nothing); this module only marks.
//!
//! The same contract as the agent's prompts (`(untrusted)` at the start of every line, names
//! on one line, authors shown with their ids), so a transcript, a batched turn and a summary
//! read alike.

use std::borrow::Cow;

/// What starts every line that came from someone untrusted.
pub const UNTRUSTED_MARK: &str = "(untrusted)";

/// Whether `c` ends a line for some reader of the prompt.
pub fn is_line_break(c: char) -> bool {
    matches!(
        c,
        '\n' | '\r' | '\u{0B}' | '\u{0C}' | '\u{85}' | '\u{2028}' | '\u{2029}'
    )
}

/// A name as it may stand in a header: on one line, without control characters.
pub fn one_line(name: &str) -> Cow<'_, str> {
    if name.chars().any(|c| c.is_control() || is_line_break(c)) {
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

/// Appends `block` to `out` followed by `\n`; when `trusted` is false, every line of it
/// (`\r\n` counts as one break) starts with [`UNTRUSTED_MARK`] and ends with `\n`.
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

/// [`quote`] into a new string, without the last `\n`.
pub fn quoted(block: &str, trusted: bool) -> String {
    let mut out = String::with_capacity(block.len() + 16);
    quote(&mut out, block, trusted);
    out.pop();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn trusted_text_is_left_alone_and_untrusted_text_is_marked_per_line() {
        assert_eq!(quoted("a\nb", true), "a\nb");
        assert_eq!(
            quoted("a\r\nb\u{2028}c\n", false),
            "(untrusted) a\n(untrusted) b\n(untrusted) c\n(untrusted)"
        );
        assert_eq!(one_line("Mira\n[12:00] Stanley"), "Mira [12:00] Stanley");
    }

    proptest! {
        /// No line of a quoted untrusted text fails to start with the mark.
        #[test]
        fn every_untrusted_line_starts_with_the_mark(text in "(\\PC|[\n\r\u{0B}\u{0C}\u{85}\u{2028}\u{2029}]){0,60}") {
            let out = quoted(&text, false);
            for line in out.split(is_line_break) {
                prop_assert!(line.starts_with(UNTRUSTED_MARK), "{line:?} in {out:?}");
            }
        }
    }
}
