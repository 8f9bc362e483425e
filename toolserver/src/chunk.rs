//! Splitting Discord text longer than one message allows.

/// Discord's limit on a message's content, in characters.
pub const MESSAGE_LIMIT: usize = 2000;

const FENCE: &str = "```";
/// Room kept in every part for the `\n```` that closes a fence left open at a split.
const CLOSE_RESERVE: usize = 4;

/// Splits `text` into parts of at most `limit` characters, at paragraph, then line, then word
/// boundaries; never inside a `<...>` mention; a code fence open at a split is closed at the end
/// of the part and reopened (with its language) at the start of the next.
pub fn split_message(text: &str, limit: usize) -> Vec<String> {
    let limit = limit.max(CLOSE_RESERVE + 16);
    if text.chars().count() <= limit {
        return vec![text.to_owned()];
    }
    let mut parts = Vec::new();
    let mut rest = text;
    let mut reopen: Option<String> = None;
    while !rest.is_empty() {
        let prefix = reopen
            .take()
            .map(|opener| format!("{opener}\n"))
            .unwrap_or_default();
        let budget = limit.saturating_sub(prefix.chars().count());
        if rest.chars().count() <= budget {
            parts.push(format!("{prefix}{rest}"));
            break;
        }
        let window_end = byte_offset_of_char(rest, budget.saturating_sub(CLOSE_RESERVE));
        let (piece_end, next_start) = cut_point(rest, window_end);
        let mut part = format!("{prefix}{}", &rest[..piece_end]);
        if let Some(opener) = open_fence(&part) {
            part.push('\n');
            part.push_str(FENCE);
            reopen = Some(opener);
        }
        parts.push(part);
        rest = &rest[next_start..];
    }
    parts
}

fn byte_offset_of_char(text: &str, chars: usize) -> usize {
    text.char_indices()
        .nth(chars)
        .map_or(text.len(), |(i, _)| i)
}

/// Where to end this part within `rest[..window_end]`, and where the next part starts (the
/// separator between them is dropped).
fn cut_point(rest: &str, window_end: usize) -> (usize, usize) {
    let window = &rest[..window_end];
    for separator in ["\n\n", "\n", " "] {
        if let Some(at) = window.rfind(separator).filter(|&at| at > 0) {
            return (at, at + separator.len());
        }
    }
    // One long word: cut at the window's end, but not inside a `<...>` mention.
    let mut cut = window_end;
    if let Some(open) = window.rfind('<') {
        let closed = window[open..].contains('>');
        if !closed && open > 0 {
            cut = open;
        }
    }
    (cut, cut)
}

/// The opening line (such as "```rust") of a fence left open at the end of `part`.
fn open_fence(part: &str) -> Option<String> {
    let mut open: Option<usize> = None;
    let mut search = 0;
    while let Some(found) = part[search..].find(FENCE) {
        let at = search + found;
        let run_end = at + part[at..].bytes().take_while(|&b| b == b'`').count();
        open = match open {
            None => Some(at),
            Some(_) => None,
        };
        search = run_end;
    }
    open.map(|at| {
        let line = part[at..].lines().next().unwrap_or(FENCE);
        line.trim_end().to_owned()
    })
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

    #[test]
    fn exactly_the_limit_is_one_message() {
        let text = "a".repeat(2000);
        assert_eq!(split_message(&text, MESSAGE_LIMIT), vec![text]);
    }

    #[test]
    fn one_over_the_limit_is_two_messages() {
        let text = "a ".repeat(1000) + "b";
        assert_eq!(text.chars().count(), 2001);
        let parts = split_message(&text, MESSAGE_LIMIT);
        assert_eq!(parts.len(), 2);
        all_within(&parts, MESSAGE_LIMIT);
    }

    #[test]
    fn splits_at_paragraphs_before_lines_before_words() {
        let paragraph = "word ".repeat(150);
        let text = format!("{p}\n\n{p}\n{p}", p = paragraph.trim_end());
        let parts = split_message(&text, 1000);
        assert_eq!(parts[0], paragraph.trim_end());
        all_within(&parts, 1000);
    }

    #[test]
    fn never_splits_inside_a_mention() {
        let text = format!(
            "{}<@123456789012345678>{}",
            "x".repeat(1990),
            "y".repeat(100)
        );
        let parts = split_message(&text, MESSAGE_LIMIT);
        assert!(
            parts.iter().any(|p| p.contains("<@123456789012345678>")),
            "{parts:?}"
        );
        all_within(&parts, MESSAGE_LIMIT);
        assert_eq!(parts.concat(), text);
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
        let parts = split_message(&text, MESSAGE_LIMIT);
        assert_eq!(parts.len(), 2);
        all_within(&parts, MESSAGE_LIMIT);
        assert_eq!(parts.concat(), text);
    }
}
