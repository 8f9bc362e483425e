//! Splitting Discord text longer than one message allows.
//!
//! [`split_message`] cuts a text into messages of at most `limit` characters; [`split_parts`]
//! returns the same split as [`Part`]s, which say what the splitter added to each slice of the
//! input.
//!
//! # Contract
//!
//! For every input (and `limit >= 20`; smaller limits are treated as 20):
//!
//! * a text of at most `limit` characters is one part, identical to the input; an empty text is
//!   one empty part;
//! * otherwise every part has 1 to `limit` characters, counting the fence markers the splitter
//!   adds, and there are at most [`part_count_bound`] parts (for Discord's limit of 2,000,
//!   `ceil(n / 1,900) + 1` parts for an `n`-character text);
//! * the bodies of the parts (a part minus the markers the splitter added) concatenate back to the
//!   input exactly: the separator at a cut (a newline, a space) stays at the end of the earlier
//!   part;
//! * a code fence open at a cut is closed at the end of that part (`"\n```"`) and reopened at the
//!   start of the next (`"```tag\n"`, with the fence's language tag when one is kept);
//! * the work is linear in the length of the input: every character is scanned once, and every
//!   part costs a pass over at most `limit` characters.
//!
//! # Where a cut goes
//!
//! A part is filled with up to `limit` characters, less the fence markers it needs. Within that
//! window the cut goes at the last paragraph boundary (after a line break that ends a blank line),
//! else at the last line boundary (after `\n`), else at the last word boundary (after whitespace),
//! each only in the second half of the window so that parts stay reasonably full; failing all
//! three, the window is hard-cut at its last character boundary that is not inside an "atom": a
//! `<...>` token such as `<@123>`, `<@!123>`, `<@&123>`, `<#123>` or `<:name:123>` (at most 100
//! bytes, no whitespace), a run of backticks, a fence opener with its language tag, a CRLF pair,
//! a regional-indicator pair (a flag), or a character followed by a combining mark, an emoji
//! modifier, a variation selector or a zero-width joiner. Only when there is no such position is
//! a cut made inside an atom (always at a character boundary).
//!
//! A cut is also kept out of places where it would leave an empty code block (right after a
//! fence's opening line, or right before its closing run) and, above all, where it would leave a
//! part whose text is only whitespace (Discord refuses those), when another cut is possible.
//!
//! The count bound comes first: a cut is only taken when the rest of the text can still be sent
//! within [`part_count_bound`] parts, assuming every later part carries [`Budget::payload`]
//! characters of the input (which a hard cut always achieves). Ordinary prose never feels this;
//! adversarial text (say, a blank line every 1,050 characters) gets hard cuts instead of parts
//! half full.
//!
//! # What counts as a fence
//!
//! Discord's rendering, simplified: every run of three or more backticks toggles a code block,
//! wherever it stands (at the start of a line or in the middle of one: unlike CommonMark, whose
//! fences are lines starting with the backticks, Discord also opens and closes blocks on inline
//! triple backticks), and toggles it once, however long the run. The toggle takes effect at the run's third backtick. A run that opens
//! a block carries a language tag when the rest of its line, up to the `\n`, is 1 to
//! [`Budget::max_tag`] characters (92 for Discord's limit) of `[A-Za-z0-9_+\-.#]` — what
//! Discord's code-block syntax accepts as a language. Anything else on the opening line (spaces,
//! a `\r` of a CRLF, a longer word, or no newline at all) is content, and the block is reopened
//! without a tag. A reopened block always uses three backticks, whatever the length of the run
//! that opened it.
//!
//! # Whitespace-only parts
//!
//! The splitter prefers cuts that leave visible text on both sides. A part whose body is only
//! whitespace is returned only when no cut within the rules avoids it: when the input is only
//! whitespace; when it holds a whitespace run about as long as a part or longer (some part lies
//! inside the run, or a lone visible character cannot go with both runs around it); or, in
//! degenerate text, when every cut that would avoid it falls inside an atom (say, a backtick run
//! longer than a part). A text without whitespace runs longer than a quarter of a part never
//! gets one (the property tests check this). Such a part carries no fence markers unless a fence
//! is open around it. Callers must skip parts whose text is empty after trimming: Discord
//! refuses them, and all they would carry is whitespace.
//!
//! Memory is the parts plus a window of `limit` scanned positions.

use std::collections::VecDeque;
use std::fmt;
use std::str::CharIndices;

use unicode_properties::emoji;
use unicode_properties::general_category::{GeneralCategoryGroup, UnicodeGeneralCategory};

/// Discord's limit on a message's content, in characters.
pub const MESSAGE_LIMIT: usize = 2000;

/// The smallest limit the splitter honours; a smaller `limit` is treated as this one.
pub const MIN_LIMIT: usize = 20;

const FENCE: &str = "```";
const FENCE_CHARS: usize = 3;
/// Appended to a part that ends inside a code block.
const CLOSE: &str = "\n```";
const CLOSE_CHARS: usize = 4;
/// The longest `<...>` token (in bytes, brackets included) that a cut avoids.
const MAX_TOKEN: usize = 100;
/// Characters scanned past the end of a part's window, to know how the text goes on.
const LOOKAHEAD: usize = 4;

/// How the characters of a part are spent, for one `limit`.
///
/// Every part but the last carries at least `payload` characters of the input, except where a
/// cut at a nicer boundary still leaves the count within [`Budget::part_count_bound`]. The rest
/// of the limit, the slack (`limit / 20`, at least 8: 100 for Discord), holds the markers of a
/// fence open across a cut: `"```tag\n"` in front and `"\n```"` behind, which is why a kept tag
/// is at most `slack - 8` characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Characters per part, markers included (at least [`MIN_LIMIT`]).
    pub limit: usize,
    /// Characters of the input a full part carries.
    pub payload: usize,
    /// The longest language tag kept when a fence is reopened.
    pub max_tag: usize,
}

impl Budget {
    /// The budget for `limit` characters per part (raised to [`MIN_LIMIT`]).
    pub fn new(limit: usize) -> Self {
        let limit = limit.max(MIN_LIMIT);
        let slack = (limit / 20).max(2 * CLOSE_CHARS);
        Self {
            limit,
            payload: limit - slack,
            max_tag: slack - 2 * CLOSE_CHARS,
        }
    }

    /// The most parts a text of `chars` characters is split into.
    pub fn part_count_bound(&self, chars: usize) -> usize {
        if chars <= self.limit {
            1
        } else {
            chars.div_ceil(self.payload) + 1
        }
    }
}

/// The most parts [`split_message`] makes of a text of `chars` characters: one when it fits,
/// else `ceil(chars / payload) + 1`, where the payload is 1,900 for Discord's limit of 2,000.
pub fn part_count_bound(chars: usize, limit: usize) -> usize {
    Budget::new(limit).part_count_bound(chars)
}

/// One message of a split: a slice of the input, with the fence markers the splitter added
/// around it. Its text is `"```{tag}\n"` when it [`reopens`](Part::reopens) a fence, then the
/// body, then `"\n```"` when it [`closes`](Part::closes) one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part<'a> {
    /// `Some(tag)` when the part starts by reopening a code block left open by the previous part
    /// (`tag` is `""` when no tag is kept); `None` for the first part and after a cut outside
    /// code.
    pub reopens: Option<&'a str>,
    /// The slice of the input this part carries; never empty (unless the input is).
    pub body: &'a str,
    /// Whether the part ends by closing the code block open at its cut.
    pub closes: bool,
}

impl Part<'_> {
    /// What the splitter put in front of the body.
    pub fn prefix(&self) -> String {
        self.reopens
            .map(|tag| format!("{FENCE}{tag}\n"))
            .unwrap_or_default()
    }

    /// What the splitter put behind the body.
    pub fn suffix(&self) -> &'static str {
        if self.closes {
            CLOSE
        } else {
            ""
        }
    }

    /// The length of the message, in characters.
    pub fn char_count(&self) -> usize {
        let prefix = self
            .reopens
            .map_or(0, |tag| FENCE_CHARS + tag.chars().count() + 1);
        let suffix = if self.closes { CLOSE_CHARS } else { 0 };
        prefix + self.body.chars().count() + suffix
    }

    /// The message's text.
    pub fn message(&self) -> String {
        let mut message = String::with_capacity(self.body.len() + 2 * CLOSE_CHARS + 8);
        if let Some(tag) = self.reopens {
            message.push_str(FENCE);
            message.push_str(tag);
            message.push('\n');
        }
        message.push_str(self.body);
        if self.closes {
            message.push_str(CLOSE);
        }
        message
    }
}

impl fmt::Display for Part<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.prefix())?;
        f.write_str(self.body)?;
        f.write_str(self.suffix())
    }
}

/// Splits `text` into messages of at most `limit` characters (see the [module](self) for the
/// contract). A text that fits is returned as one part, unchanged. A part may be whitespace-only
/// when the input has a whitespace run about as long as a part: callers must skip those.
pub fn split_message(text: &str, limit: usize) -> Vec<String> {
    split_parts(text, limit).iter().map(Part::message).collect()
}

/// The split [`split_message`] makes, with the markers added to each part kept apart from the
/// slice of the input it carries. The bodies concatenate to `text`.
pub fn split_parts(text: &str, limit: usize) -> Vec<Part<'_>> {
    let budget = Budget::new(limit);
    let total = text.chars().count();
    if total <= budget.limit {
        return vec![Part {
            reopens: None,
            body: text,
            closes: false,
        }];
    }
    Splitter::new(text, total, budget).run()
}

/// What the scan knows about the position just before one character: a possible cut.
#[derive(Debug, Clone, Copy)]
struct Pos {
    byte: usize,
    ch: char,
    /// A code block is open here.
    open: bool,
    /// The byte range of that block's kept tag (empty when none is kept).
    tag: (usize, usize),
    /// That block already holds visible content.
    has_content: bool,
    /// A cut here would split an atom (a token, a backtick run, a CRLF pair, a grapheme...).
    bad: bool,
    /// Here a blank line has just ended: a paragraph boundary.
    para: bool,
    /// `ch` starts the backtick run that closes the open block.
    closes: bool,
}

impl Pos {
    fn reopen_chars(&self) -> usize {
        if self.open {
            FENCE_CHARS + (self.tag.1 - self.tag.0) + 1
        } else {
            0
        }
    }
}

/// One pass over the text, character by character, tracking code blocks, lines and atoms.
struct Scanner<'a> {
    bytes: &'a [u8],
    max_tag: usize,
    prev: char,
    /// Backticks in the current run.
    run: usize,
    /// Regional indicators in the current run (flags are pairs of them).
    indicators: usize,
    open: bool,
    tag: (usize, usize),
    /// Where the open block's content starts (after its opening line when it has a tag).
    content_from: usize,
    has_content: bool,
    /// Cuts strictly between these byte offsets are inside an atom.
    atom: (usize, usize),
    /// The current line has been whitespace so far.
    line_blank: bool,
    /// The line the last `\n` ended was blank.
    blank_line_ended: bool,
}

impl<'a> Scanner<'a> {
    fn new(text: &'a str, max_tag: usize) -> Self {
        Self {
            bytes: text.as_bytes(),
            max_tag,
            prev: '\0',
            run: 0,
            indicators: 0,
            open: false,
            tag: (0, 0),
            content_from: 0,
            has_content: false,
            atom: (0, 0),
            line_blank: true,
            blank_line_ended: false,
        }
    }

    /// The position before `ch` (at `byte`); then takes `ch` in. `window` holds the positions
    /// before it, so that the start of a closing run can be marked.
    fn step(&mut self, byte: usize, ch: char, window: &mut VecDeque<Pos>) -> Pos {
        let prev = self.prev;
        let indicator = emoji::is_regional_indicator(ch);
        let pos = Pos {
            byte,
            ch,
            open: self.open,
            tag: self.tag,
            has_content: self.has_content,
            bad: (byte > self.atom.0 && byte < self.atom.1)
                || (ch == '`' && prev == '`')
                || (ch == '\n' && prev == '\r')
                || (indicator && self.indicators % 2 == 1)
                || joins_previous(ch)
                || emoji::is_zwj(prev),
            para: prev == '\n' && self.blank_line_ended,
            closes: false,
        };

        self.indicators = if indicator { self.indicators + 1 } else { 0 };
        if ch == '\n' {
            self.blank_line_ended = self.line_blank;
            self.line_blank = true;
        } else if !ch.is_whitespace() {
            self.line_blank = false;
        }
        if ch == '<' {
            if let Some(end) = token_end(self.bytes, byte) {
                self.extend_atom(byte, end);
            }
        }
        if ch == '`' {
            self.run = if prev == '`' { self.run + 1 } else { 1 };
            if self.run == 3 {
                let run_start = byte - 2;
                if self.open {
                    self.open = false;
                    self.tag = (0, 0);
                    if let Some(start) = window.iter_mut().rev().nth(1) {
                        if start.byte == run_start {
                            start.closes = true;
                        }
                    }
                } else {
                    self.open_block(run_start, byte + 1);
                }
            }
        } else {
            self.run = 0;
        }
        if self.open && byte >= self.content_from && !ch.is_whitespace() {
            self.has_content = true;
        }
        self.prev = ch;
        pos
    }

    /// A run starting at `run_start` opens a block at its third backtick, which ends at `from`.
    fn open_block(&mut self, run_start: usize, from: usize) {
        let bytes = self.bytes;
        let mut run_end = from;
        while bytes.get(run_end) == Some(&b'`') {
            run_end += 1;
        }
        let mut end = run_end;
        while end - run_end <= self.max_tag && bytes.get(end).is_some_and(|&b| is_tag_byte(b)) {
            end += 1;
        }
        let tagged =
            end > run_end && end - run_end <= self.max_tag && bytes.get(end) == Some(&b'\n');
        self.open = true;
        self.has_content = false;
        if tagged {
            self.tag = (run_end, end);
            self.content_from = end + 1;
            self.extend_atom(run_start, end + 1);
        } else {
            self.tag = (run_end, run_end);
            self.content_from = run_end;
        }
    }

    fn extend_atom(&mut self, start: usize, end: usize) {
        if start < self.atom.1 {
            self.atom.1 = self.atom.1.max(end);
        } else {
            self.atom = (start, end);
        }
    }
}

/// Where a `<...>` token starting at `at` ends (the byte after its `>`).
fn token_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut k = at + 1;
    while k < bytes.len() && k - at < MAX_TOKEN {
        match bytes[k] {
            b'>' => return (k > at + 1).then_some(k + 1),
            b'<' => return None,
            b if b.is_ascii_whitespace() => return None,
            _ => k += 1,
        }
    }
    None
}

fn is_tag_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'+' | b'-' | b'.' | b'#')
}

/// Characters that belong with the one before them: combining marks of every script
/// (variation selectors among them), the zero-width joiner, emoji skin-tone modifiers and
/// tag characters.
fn joins_previous(ch: char) -> bool {
    !ch.is_ascii()
        && (ch.general_category_group() == GeneralCategoryGroup::Mark
            || emoji::is_zwj(ch)
            || emoji::is_tag_character(ch)
            || matches!(ch, '\u{1F3FB}'..='\u{1F3FF}'))
}

/// How strict a search for a cut is: `Strict` also avoids empty code blocks, `Visible` keeps
/// visible text on both sides of the cut, `Any` only honours the hard rules (size and count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Strict,
    Visible,
    Any,
}

struct Splitter<'a> {
    text: &'a str,
    budget: Budget,
    total: usize,
    bound: usize,
    /// The byte offset of the last visible character, when the whitespace after it fits in a
    /// part: cuts stay before it, so that the last part is not only whitespace.
    keep_visible: Option<usize>,
    chars: CharIndices<'a>,
    scanner: Scanner<'a>,
    /// The scanned positions from the start of the current part on.
    window: VecDeque<Pos>,
}

impl<'a> Splitter<'a> {
    fn new(text: &'a str, total: usize, budget: Budget) -> Self {
        let keep_visible = text
            .char_indices()
            .rev()
            .find(|(_, ch)| !ch.is_whitespace())
            .filter(|&(byte, ch)| text[byte + ch.len_utf8()..].chars().count() < budget.payload)
            .map(|(byte, _)| byte);
        Self {
            text,
            budget,
            total,
            bound: budget.part_count_bound(total),
            keep_visible,
            chars: text.char_indices(),
            scanner: Scanner::new(text, budget.max_tag),
            window: VecDeque::with_capacity((budget.limit + LOOKAHEAD + 1).min(1 << 16)),
        }
    }

    fn run(mut self) -> Vec<Part<'a>> {
        let text = self.text;
        let limit = self.budget.limit;
        let mut parts = Vec::with_capacity(self.bound);
        let mut start = 0;
        let mut consumed = 0;
        let mut reopen: Option<(usize, usize)> = None;
        loop {
            let reopens = reopen.map(|(from, to)| &text[from..to]);
            let header = reopens.map_or(0, |tag| FENCE_CHARS + tag.len() + 1);
            let remaining = self.total - consumed;
            if remaining + header <= limit {
                parts.push(Part {
                    reopens,
                    body: &text[start..],
                    closes: false,
                });
                return parts;
            }
            let room = limit - header;
            self.fill(room + LOOKAHEAD);
            let cut = self.choose(room, header, remaining, parts.len() + 1);
            let Some(&at) = self.window.get(cut) else {
                // Not reachable: `choose` picks a position inside the window. Send the rest.
                parts.push(Part {
                    reopens,
                    body: &text[start..],
                    closes: false,
                });
                return parts;
            };
            parts.push(Part {
                reopens,
                body: &text[start..at.byte],
                closes: at.open,
            });
            reopen = at.open.then_some(at.tag);
            start = at.byte;
            consumed += cut;
            self.window.drain(..cut);
        }
    }

    /// Scans until the window holds `wanted` positions or the text ends.
    fn fill(&mut self, wanted: usize) {
        while self.window.len() < wanted {
            let Some((byte, ch)) = self.chars.next() else {
                break;
            };
            let pos = self.scanner.step(byte, ch, &mut self.window);
            self.window.push_back(pos);
        }
    }

    /// The cut for part number `part` (from 1): an index into the window, at least 1. The part
    /// starts with `header` characters of markers; `remaining` characters of the input are
    /// left, more than fit.
    fn choose(&self, room: usize, header: usize, remaining: usize, part: usize) -> usize {
        let window = &self.window;
        let Budget { limit, payload, .. } = self.budget;
        let top = room.min(window.len().saturating_sub(1));
        let half = room / 2;
        // The part fits, and the rest can still be sent within the bound.
        let hard = |c: usize, pos: &Pos| {
            let close = if pos.open { CLOSE_CHARS } else { 0 };
            if header + c + close > limit {
                return false;
            }
            let rest = remaining - c;
            let need = if rest + pos.reopen_chars() <= limit {
                1
            } else {
                rest.div_ceil(payload)
            };
            part + need <= self.bound
        };
        let first_visible = window.iter().position(|pos| !pos.ch.is_whitespace());
        for level in [Level::Strict, Level::Visible, Level::Any] {
            // Best cut so far for a paragraph, a line, a word boundary, and any other place.
            let mut best: [Option<usize>; 4] = [None; 4];
            let mut next_closes = window
                .iter()
                .skip(top + 1)
                .find(|pos| !pos.ch.is_whitespace())
                .is_some_and(|pos| pos.closes);
            for c in (1..=top).rev() {
                let pos = &window[c];
                if !pos.ch.is_whitespace() {
                    next_closes = pos.closes;
                }
                if c < half && best.iter().any(Option::is_some) {
                    break;
                }
                if pos.bad || !hard(c, pos) {
                    continue;
                }
                if level <= Level::Visible {
                    let body_visible = first_visible.is_some_and(|first| c > first);
                    let rest_visible = self.keep_visible.is_none_or(|last| pos.byte <= last);
                    if !body_visible || !rest_visible {
                        continue;
                    }
                }
                if level == Level::Strict && pos.open && (!pos.has_content || next_closes) {
                    continue;
                }
                let before = window[c - 1].ch;
                let tier = if c < half {
                    3
                } else if pos.para {
                    0
                } else if before == '\n' {
                    1
                } else if before.is_whitespace() {
                    2
                } else {
                    3
                };
                if best[tier].is_none() {
                    best[tier] = Some(c);
                    if tier == 0 {
                        break;
                    }
                }
            }
            if let Some(c) = best.into_iter().flatten().next() {
                return c;
            }
        }
        // Every position is inside an atom: cut at the last one the rules allow.
        (1..=top)
            .rev()
            .find(|&c| hard(c, &window[c]))
            .unwrap_or(top.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_within(parts: &[String], limit: usize) {
        for part in parts {
            assert!(
                part.chars().count() <= limit,
                "{} chars",
                part.chars().count()
            );
        }
    }

    /// Splits `text` and checks that every part fits and that nothing was added or lost.
    fn split_losslessly(text: &str, limit: usize) -> Vec<String> {
        let parts = split_message(text, limit);
        all_within(&parts, limit);
        assert_eq!(parts.concat(), text);
        parts
    }

    #[test]
    fn exactly_the_limit_is_one_message() {
        let text = "a".repeat(2000);
        assert_eq!(split_message(&text, MESSAGE_LIMIT), vec![text]);
    }

    #[test]
    fn one_over_the_limit_is_two_messages() {
        let text = "a ".repeat(1000) + "b";
        assert_eq!(text.chars().count(), 2001);
        let parts = split_losslessly(&text, MESSAGE_LIMIT);
        assert_eq!(parts.len(), 2);
    }

    #[test]
    fn splits_at_paragraphs_before_lines_before_words() {
        let paragraph = "word ".repeat(150);
        let p = paragraph.trim_end();
        let text = format!("{p}\n\n{p}\n{p}");
        let parts = split_message(&text, 1000);
        // The separator stays with the earlier part: first the paragraph break, then the line
        // break, never a space between words.
        assert_eq!(
            parts,
            vec![format!("{p}\n\n"), format!("{p}\n"), p.to_owned()]
        );
        all_within(&parts, 1000);
    }

    #[test]
    fn never_splits_inside_a_mention() {
        let text = format!(
            "{}<@123456789012345678>{}",
            "x".repeat(1990),
            "y".repeat(100)
        );
        let parts = split_losslessly(&text, MESSAGE_LIMIT);
        assert!(
            parts.iter().any(|p| p.contains("<@123456789012345678>")),
            "{parts:?}"
        );
    }

    #[test]
    fn fence_open_at_a_split_is_closed_and_reopened() {
        let code: String = (0..200).map(|i| format!("let x{i} = {i};\n")).collect();
        let text = format!("intro\n```rust\n{code}```\nafter");
        let parts = split_message(&text, 1000);
        assert!(parts.len() > 2);
        all_within(&parts, 1000);
        assert!(parts[0].ends_with("\n```"), "{}", parts[0]);
        assert!(parts[1].starts_with("```rust\n"), "{}", parts[1]);
        for part in &parts {
            assert_eq!(part.matches("```").count() % 2, 0, "unbalanced: {part}");
        }
    }

    #[test]
    fn multibyte_text_is_counted_in_characters() {
        let text = "é".repeat(2500);
        let parts = split_losslessly(&text, MESSAGE_LIMIT);
        assert_eq!(parts.len(), 2);
    }

    #[test]
    fn the_last_boundary_in_the_window_wins_not_the_first() {
        // A newline at position 3 must not produce a 4-character part.
        let text = format!("abc\n{}", "word ".repeat(500));
        let parts = split_parts(&text, MESSAGE_LIMIT);
        assert_eq!(parts.len(), 2);
        assert!(parts[0].body.chars().count() >= 1900, "{parts:?}");
        assert!(parts[0].body.ends_with(' '));
    }

    #[test]
    fn a_line_boundary_beats_a_later_word_boundary() {
        let text = format!("{}\n{}", "word ".repeat(300), "word ".repeat(300));
        let parts = split_parts(&text, MESSAGE_LIMIT);
        assert_eq!(parts[0].body, format!("{}\n", "word ".repeat(300)));
    }

    #[test]
    fn a_boundary_in_the_first_half_is_passed_over_for_a_hard_cut() {
        let text = format!("{} {}", "a".repeat(500), "b".repeat(3000));
        let parts = split_parts(&text, MESSAGE_LIMIT);
        assert_eq!(parts[0].body.chars().count(), MESSAGE_LIMIT);
    }

    #[test]
    fn a_crlf_pair_is_not_split() {
        let text = format!("{}\r\n{}", "a".repeat(1999), "b".repeat(100));
        let parts = split_parts(&text, MESSAGE_LIMIT);
        assert!(parts.iter().all(|p| !p.body.ends_with('\r')), "{parts:?}");
        assert_eq!(parts.iter().map(|p| p.body).collect::<String>(), text);
    }

    #[test]
    fn a_combining_mark_stays_with_its_letter() {
        let text = "e\u{301}".repeat(1500);
        let parts = split_parts(&text, MESSAGE_LIMIT);
        assert!(parts.iter().skip(1).all(|p| p.body.starts_with('e')));
    }

    #[test]
    fn a_mark_of_any_script_stays_with_its_letter() {
        // Thai's MAI HAN-AKAT (a nonspacing mark) and Tamil's vowel sign AA (a spacing one).
        for (letter, mark) in [('\u{E01}', '\u{E31}'), ('\u{B95}', '\u{BBE}')] {
            // One character ahead, so that the window's last character is a letter.
            let text = format!("x{}", format!("{letter}{mark}").repeat(1500));
            let parts = split_parts(&text, MESSAGE_LIMIT);
            assert!(parts.len() >= 2);
            assert!(parts.iter().skip(1).all(|p| p.body.starts_with(letter)));
        }
    }

    #[test]
    fn a_long_language_tag_is_not_reopened() {
        let tag = "x".repeat(200);
        let text = format!("```{tag}\n{}```", "code line\n".repeat(300));
        let parts = split_parts(&text, MESSAGE_LIMIT);
        assert!(parts.len() >= 2);
        assert_eq!(parts[1].reopens, Some(""));
        let short = format!("```rust\n{}```", "code line\n".repeat(300));
        let parts = split_parts(&short, MESSAGE_LIMIT);
        assert_eq!(parts[1].reopens, Some("rust"));
    }

    #[test]
    fn a_cut_right_before_a_closing_run_is_avoided() {
        // The block closes at 1,994 and no line break follows: cutting there would send the
        // next part an empty block, "```\n```xxx".
        let text = format!("```\n{}```{}", "abcd\n".repeat(398), "x".repeat(3000));
        let parts = split_parts(&text, MESSAGE_LIMIT);
        assert!(parts[0].closes);
        assert!(parts[1].body.starts_with("abcd\n```"), "{:?}", parts[1]);
    }

    #[test]
    fn tiny_limits_are_raised_to_the_minimum() {
        let text = "```rust\nfn main() {}\n```\n".repeat(10);
        for limit in 0..=MIN_LIMIT {
            let parts = split_parts(&text, limit);
            assert!(
                parts.iter().all(|p| p.char_count() <= MIN_LIMIT),
                "{parts:?}"
            );
            assert_eq!(parts.iter().map(|p| p.body).collect::<String>(), text);
        }
    }
}
