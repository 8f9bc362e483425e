//! Finding inline code spans and fenced blocks, which neither rewrite touches.

use memchr::memchr;

/// Byte ranges of `text` split into prose and code, in order, covering all of it.
pub(crate) struct Segments<'a> {
    bytes: &'a [u8],
    pos: usize,
    pending_code: Option<(usize, usize)>,
}

/// One stretch of text: prose (rewritten) or code (copied as is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment {
    pub start: usize,
    pub end: usize,
    pub code: bool,
}

pub(crate) fn segments(text: &str) -> Segments<'_> {
    Segments {
        bytes: text.as_bytes(),
        pos: 0,
        pending_code: None,
    }
}

fn backtick_run(bytes: &[u8], at: usize) -> usize {
    bytes[at..].iter().take_while(|&&b| b == b'`').count()
}

/// End of a fence whose body starts at `from`: just past the next run of three or more
/// backticks, or the end of the text when the fence is never closed.
fn fence_end(bytes: &[u8], from: usize) -> usize {
    let mut look = from;
    while let Some(offset) = memchr(b'`', &bytes[look..]) {
        let close_at = look + offset;
        let run = backtick_run(bytes, close_at);
        if run >= 3 {
            return close_at + run;
        }
        look = close_at + run;
    }
    bytes.len()
}

/// The next code span at or after `from`: `(start, end)` of the span including its backticks.
/// A run of three or more backticks opens a fence that runs to the next run of three or more,
/// or to the end of the text; a shorter run opens inline code closed by a run of the same length,
/// and is plain text when no such run follows.
fn next_code_span(bytes: &[u8], from: usize) -> Option<(usize, usize)> {
    let mut search = from;
    while let Some(offset) = memchr(b'`', &bytes[search..]) {
        let start = search + offset;
        let run = backtick_run(bytes, start);
        let after_open = start + run;
        if run >= 3 {
            return Some((start, fence_end(bytes, after_open)));
        }
        let mut look = after_open;
        while let Some(offset) = memchr(b'`', &bytes[look..]) {
            let close_at = look + offset;
            let close_run = backtick_run(bytes, close_at);
            if close_run == run {
                return Some((start, close_at + close_run));
            }
            look = close_at + close_run;
        }
        search = after_open;
    }
    None
}

impl Iterator for Segments<'_> {
    type Item = Segment;

    fn next(&mut self) -> Option<Segment> {
        if let Some((start, end)) = self.pending_code.take() {
            self.pos = end;
            return Some(Segment {
                start,
                end,
                code: true,
            });
        }
        if self.pos >= self.bytes.len() {
            return None;
        }
        match next_code_span(self.bytes, self.pos) {
            Some((start, end)) if start == self.pos => {
                self.pos = end;
                Some(Segment {
                    start,
                    end,
                    code: true,
                })
            }
            Some(span) => {
                let prose = Segment {
                    start: self.pos,
                    end: span.0,
                    code: false,
                };
                self.pending_code = Some(span);
                Some(prose)
            }
            None => {
                let prose = Segment {
                    start: self.pos,
                    end: self.bytes.len(),
                    code: false,
                };
                self.pos = self.bytes.len();
                Some(prose)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(text: &str) -> Vec<(&str, bool)> {
        segments(text)
            .map(|s| (&text[s.start..s.end], s.code))
            .collect()
    }

    #[test]
    fn inline_code_is_its_own_segment() {
        assert_eq!(
            spans("a `b` c"),
            vec![("a ", false), ("`b`", true), (" c", false)]
        );
    }

    #[test]
    fn double_backtick_span_may_hold_a_single_backtick() {
        assert_eq!(spans("``a`b``"), vec![("``a`b``", true)]);
    }

    #[test]
    fn unmatched_backtick_is_plain_text() {
        assert_eq!(spans("it`s @x"), vec![("it`s @x", false)]);
    }

    #[test]
    fn unclosed_fence_runs_to_the_end() {
        assert_eq!(
            spans("hi ```rust\n@x"),
            vec![("hi ", false), ("```rust\n@x", true)]
        );
    }

    #[test]
    fn fence_closes_at_next_triple_backtick() {
        assert_eq!(
            spans("```\n@x\n``` @y"),
            vec![("```\n@x\n```", true), (" @y", false)]
        );
    }
}
