//! How untrusted words are quoted: every line starts with [`UNTRUSTED_MARK`], whatever line
//! breaks the text holds, so no line of an untrusted message can pass for a trusted one. Trust
//! is decided by the caller, by user id (names prove nothing); this module only marks.
//!
//! The same contract as the agent's prompts (`(untrusted)` at the start of every line, names
//! on one line, authors shown with their ids), so a transcript, a batched turn and a summary
//! read alike.

pub use entity::quoting::{is_line_break, one_line, quote, quoted, UNTRUSTED_MARK};

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
