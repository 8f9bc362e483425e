//! Search without an index: what the memory backend runs, and the reference the conformance
//! suite holds indexed backends to. Words are tokenized as SQLite's `unicode61` tokenizer with
//! `remove_diacritics 2` does (runs of letters and digits, case-folded, accents dropped), so a
//! query matches the same messages here as under FTS5.

use entity::Mention;
use switchboard_records::{Message, SearchHit, SearchMatch, SearchQuery, SearchTerm};
use unicode_normalization::char::is_combining_mark;
use unicode_normalization::UnicodeNormalization;

/// One token of a text: its folded form and where it stands (byte offsets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// Lowercase, accents dropped.
    pub folded: String,
    /// Its first byte in the text.
    pub start: usize,
    /// One past its last byte.
    pub end: usize,
}

/// The tokens of `text`: runs of letters and digits.
pub fn tokens(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut start = None;
    for (at, c) in text
        .char_indices()
        .chain(std::iter::once((text.len(), ' ')))
    {
        let word_char = c.is_alphanumeric() || (is_combining_mark(c) && start.is_some());
        match (word_char && at < text.len(), start) {
            (true, None) => start = Some(at),
            (false, Some(from)) => {
                let folded = fold(&text[from..at]);
                if !folded.is_empty() {
                    out.push(Token {
                        folded,
                        start: from,
                        end: at,
                    });
                }
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// Lowercase with accents dropped.
pub fn fold(word: &str) -> String {
    word.nfd()
        .filter(|c| !is_combining_mark(*c))
        .flat_map(char::to_lowercase)
        .collect()
}

/// Where one alternative matched: the token range it covers.
fn find(words: &[Token], text: &str, prefix: bool) -> Vec<std::ops::Range<usize>> {
    let wanted: Vec<String> = text
        .split(' ')
        .filter(|w| !w.is_empty())
        .map(fold)
        .collect();
    if wanted.is_empty() || wanted.len() > words.len() {
        return Vec::new();
    }
    (0..=words.len() - wanted.len())
        .filter(|&at| {
            wanted.iter().enumerate().all(|(i, want)| {
                let have = &words[at + i].folded;
                if prefix && i + 1 == wanted.len() {
                    have.starts_with(want.as_str())
                } else {
                    have == want
                }
            })
        })
        .map(|at| at..at + wanted.len())
        .collect()
}

/// What one message matched: the token ranges its words matched, or `None` when a term did not
/// match at all.
fn matched(
    message: &Message,
    words: &[Token],
    mentions: &[Mention],
    terms: &[SearchTerm],
) -> Option<Vec<std::ops::Range<usize>>> {
    let _ = message;
    let mut ranges = Vec::new();
    for term in terms {
        let mut any = false;
        for alternative in &term.any_of {
            match alternative {
                SearchMatch::Words { text, prefix } => {
                    let found = find(words, text, *prefix);
                    any |= !found.is_empty();
                    ranges.extend(found);
                }
                SearchMatch::Mentions(mention) => any |= mentions.contains(mention),
            }
        }
        if !any {
            return None;
        }
    }
    Some(ranges)
}

/// A message that matched: its tokens and the token ranges that matched.
type Candidate<'a> = (&'a Message, Vec<Token>, Vec<std::ops::Range<usize>>);

/// Okapi BM25's constants, as FTS5 uses them.
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Runs `query` over `messages` (every live message of the searched channels, any order): the
/// filters, the newest [`SearchQuery::RANKED_CANDIDATES`] matches, ranked by BM25 over the
/// matched words, snippets cut around the first match.
pub fn search<'a>(
    query: &SearchQuery,
    messages: impl Iterator<Item = &'a Message>,
) -> Vec<SearchHit> {
    if query.channels.is_empty() || query.limit == 0 || query.terms.is_empty() {
        return Vec::new();
    }
    let mut corpus = 0usize;
    let mut total_len = 0usize;
    let mut candidates: Vec<Candidate<'_>> = Vec::new();
    for message in messages {
        if !query.channels.contains(&message.channel_id) {
            continue;
        }
        let words = tokens(&message.text);
        corpus += 1;
        total_len += words.len();
        if query.before.is_some_and(|b| message.id >= b)
            || query.after.is_some_and(|a| message.id <= a)
            || query.author.is_some_and(|a| message.author_id != a)
        {
            continue;
        }
        let mentions = entity::discord_mentions(&message.content);
        if let Some(ranges) = matched(message, &words, &mentions, &query.terms) {
            candidates.push((message, words, ranges));
        }
    }
    candidates.sort_by_key(|c| std::cmp::Reverse(c.0.id));
    candidates.truncate(SearchQuery::RANKED_CANDIDATES);
    let average = total_len as f64 / corpus.max(1) as f64;
    // Document frequency of each matched word, over the candidates (the index's view is over
    // every message; the order within one answer is what counts).
    let mut hits: Vec<SearchHit> = candidates
        .iter()
        .map(|(message, words, ranges)| {
            let matches = ranges.len() as f64;
            let df = candidates.len() as f64;
            let idf = ((corpus as f64 - df + 0.5) / (df + 0.5) + 1.0).ln();
            let len = words.len() as f64;
            let score = idf * (matches * (K1 + 1.0))
                / (matches + K1 * (1.0 - B + B * len / average.max(1.0)));
            SearchHit {
                message: (*message).clone(),
                snippet: snippet(&message.text, words, ranges),
                score,
            }
        })
        .collect();
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.message.id.cmp(&a.message.id))
    });
    hits.truncate(query.limit);
    hits
}

/// The snippet [`search`] cuts for `text` when `terms` matched it: every word alternative of
/// every term marked where it occurs. Indexed backends that do not cut snippets themselves
/// (PostgreSQL's `ts_headline` tokenizes differently) cut the same ones with it.
pub fn snippet_for(text: &str, terms: &[SearchTerm]) -> String {
    let words = tokens(text);
    let ranges: Vec<std::ops::Range<usize>> = terms
        .iter()
        .flat_map(|term| &term.any_of)
        .flat_map(|alternative| match alternative {
            SearchMatch::Words { text, prefix } => find(&words, text, *prefix),
            SearchMatch::Mentions(_) => Vec::new(),
        })
        .collect();
    snippet(text, &words, &ranges)
}

/// Tokens a snippet shows at most (FTS5's `snippet(..., 16)`).
const SNIPPET_TOKENS: usize = 16;

/// An excerpt of `text` around its first match, every matched token between `**`, `…` where
/// the text was cut.
pub fn snippet(text: &str, words: &[Token], ranges: &[std::ops::Range<usize>]) -> String {
    if words.is_empty() {
        return text.to_owned();
    }
    let first = ranges.iter().map(|r| r.start).min().unwrap_or(0);
    let from = first
        .saturating_sub(SNIPPET_TOKENS / 4)
        .min(words.len().saturating_sub(SNIPPET_TOKENS));
    let to = (from + SNIPPET_TOKENS).min(words.len());
    let bold = |i: usize| ranges.iter().any(|r| r.contains(&i));
    let mut out = String::new();
    let start_byte = if from == 0 { 0 } else { words[from].start };
    if from > 0 {
        out.push('…');
    }
    let mut at = start_byte;
    for (i, word) in words.iter().enumerate().take(to).skip(from) {
        out.push_str(&text[at..word.start]);
        if bold(i) {
            out.push_str("**");
            out.push_str(&text[word.start..word.end]);
            out.push_str("**");
        } else {
            out.push_str(&text[word.start..word.end]);
        }
        at = word.end;
    }
    if to == words.len() {
        out.push_str(&text[at..]);
    } else {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_fold_case_and_accents_like_unicode61() {
        let words: Vec<String> = tokens("Déjà-vu: ÉCOLE naïve x2 ok")
            .into_iter()
            .map(|t| t.folded)
            .collect();
        assert_eq!(words, ["deja", "vu", "ecole", "naive", "x2", "ok"]);
    }

    #[test]
    fn snippets_bold_the_matches() {
        let text = "the deploy went fine";
        let words = tokens(text);
        let deploy = 1..2;
        assert_eq!(
            snippet(text, &words, std::slice::from_ref(&deploy)),
            "the **deploy** went fine"
        );
    }
}
