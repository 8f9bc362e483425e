//! Full-text search on a `tsvector` column with a GIN index.
//!
//! Tokens are made here, not by PostgreSQL's parser: its `simple` configuration drops `@` and
//! `#`, splits hyphenated words into three tokens, and reads URLs and file names its own way,
//! so results would differ from SQLite's FTS5 and from the reference search. Instead the writer
//! stores a `tsvector` literal built from [`switchboard_store::scan::tokens`] (runs of letters
//! and digits, case-folded, accents dropped: FTS5's `unicode61 remove_diacritics 2`) with weight
//! `A`, followed by one token per mention in the Discord text (`u<id>`, `r<id>`, `c<id>`) with
//! weight `B`; and a search is written as a `tsquery` literal over the same tokens (words
//! restricted to `A`, mentions to `B`). No text anyone typed ever reaches either parser: every
//! lexeme is letters and digits, quoted anyway. Nothing needs `unaccent` (whose function is not
//! IMMUTABLE) or `pg_trgm`: prefixes are `tsquery` prefixes (`'deplo':*A`).
//!
//! A search ranks (`ts_rank_cd`, normalised by the log of the length) the newest
//! [`SearchQuery::RANKED_CANDIDATES`] matches that pass its filters, and cuts snippets here with
//! the reference's own function, so they read as the other backends' do. Its time budget is the
//! statement's `statement_timeout`: past it PostgreSQL cancels it and the search answers
//! [`StoreErrorKind::TimedOut`](switchboard_store::StoreErrorKind::TimedOut).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use entity::Mention;
use switchboard_records::{SearchMatch, SearchQuery, SearchTerm};
use switchboard_store::scan;

/// The highest position a `tsvector` holds (later tokens share it).
const MAX_POSITION: usize = 16_383;
/// Most positions one lexeme keeps (PostgreSQL's own limit).
const MAX_POSITIONS_PER_LEXEME: usize = 256;
/// The longest lexeme PostgreSQL indexes, in bytes; longer tokens are left out.
const MAX_LEXEME_BYTES: usize = 2_046;
/// The most lexeme text one document holds (PostgreSQL's limit is 1 MiB).
const MAX_DOCUMENT_BYTES: usize = 512 * 1024;

/// The mention token of `mention`, as documents and queries write it.
pub(crate) fn mention_token(mention: Mention) -> String {
    match mention {
        Mention::User(id) => format!("u{id}"),
        Mention::Role(id) => format!("r{id}"),
        Mention::Channel(id) => format!("c{id}"),
    }
}

fn quote(lexeme: &str, out: &mut String) {
    out.push('\'');
    for c in lexeme.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
}

/// The `tsvector` literal of a message: the words of its readable `text` (weight A), then the
/// mentions of its Discord `content` (weight B).
pub(crate) fn document(text: &str, content: &str) -> String {
    let mut lexemes: BTreeMap<String, Vec<(usize, char)>> = BTreeMap::new();
    let mut bytes = 0usize;
    let mut position = 0usize;
    let mut add =
        |lexeme: String, weight: char, lexemes: &mut BTreeMap<String, Vec<(usize, char)>>| {
            position = (position + 1).min(MAX_POSITION);
            if lexeme.len() > MAX_LEXEME_BYTES {
                return;
            }
            let at = position;
            match lexemes.get_mut(&lexeme) {
                Some(positions)
                    if positions.len() < MAX_POSITIONS_PER_LEXEME
                        && positions.last().is_none_or(|(p, _)| *p < at) =>
                {
                    positions.push((at, weight));
                }
                Some(_) => {}
                None if bytes + lexeme.len() <= MAX_DOCUMENT_BYTES => {
                    bytes += lexeme.len();
                    lexemes.insert(lexeme, vec![(at, weight)]);
                }
                None => {}
            }
        };
    for token in scan::tokens(text) {
        add(token.folded, 'A', &mut lexemes);
    }
    for mention in entity::discord_mentions(content) {
        add(mention_token(mention), 'B', &mut lexemes);
    }
    let mut out = String::with_capacity(bytes + lexemes.len() * 8);
    for (lexeme, positions) in &lexemes {
        if !out.is_empty() {
            out.push(' ');
        }
        quote(lexeme, &mut out);
        for (i, (at, weight)) in positions.iter().enumerate() {
            out.push(if i == 0 { ':' } else { ',' });
            let _ = write!(out, "{at}{weight}");
        }
    }
    out
}

/// The `tsquery` literal of a search's terms: `(alternative | ...) & ...`, a phrase as
/// `'a':A <-> 'b':A`, a prefix as `'b':*A`, a mention as `'u1':B`. `None` when a term has
/// nothing indexable left (no letters or digits): nothing can match.
pub(crate) fn query(terms: &[SearchTerm]) -> Option<String> {
    let mut out = String::new();
    for term in terms {
        let mut alternatives = Vec::new();
        for alternative in &term.any_of {
            let mut text = String::new();
            match alternative {
                SearchMatch::Words {
                    text: words,
                    prefix,
                } => {
                    let tokens = scan::tokens(words);
                    let last = tokens.len().saturating_sub(1);
                    for (i, token) in tokens.iter().enumerate() {
                        if token.folded.len() > MAX_LEXEME_BYTES {
                            continue;
                        }
                        if !text.is_empty() {
                            text.push_str(" <-> ");
                        }
                        quote(&token.folded, &mut text);
                        text.push_str(if *prefix && i == last { ":*A" } else { ":A" });
                    }
                }
                SearchMatch::Mentions(mention) => {
                    quote(&mention_token(*mention), &mut text);
                    text.push_str(":B");
                }
            }
            if !text.is_empty() {
                alternatives.push(text);
            }
        }
        if alternatives.is_empty() {
            return None;
        }
        if !out.is_empty() {
            out.push_str(" & ");
        }
        out.push_str("( ");
        out.push_str(&alternatives.join(" | "));
        out.push_str(" )");
    }
    (!out.is_empty()).then_some(out)
}

/// The search: the newest candidates first, then rank those. It runs with custom plans
/// (`plan_cache_mode = force_custom_plan`), so the planner sees the query's own words and
/// bounds: for a common word it walks the primary key backwards and stops at the 400th match,
/// for a rare one it asks the GIN index; a bound that was not given is folded away rather than
/// turned into a scan of the whole id range.
pub(crate) const SEARCH: &str = concat!(
    "
WITH candidates AS MATERIALIZED (
    SELECT id FROM messages
    WHERE search @@ $1::text::tsquery AND NOT deleted
      AND channel_id = ANY($2::bigint[])
      AND ($3::bigint IS NULL OR id < $3) AND ($4::bigint IS NULL OR id > $4)
      AND ($5::bigint IS NULL OR author_id = $5)
    ORDER BY id DESC
    LIMIT $6)
SELECT ",
    crate::rows::message_columns!(),
    ",
       ts_rank_cd(search, $1::text::tsquery, 1)::float8 AS rank
FROM candidates JOIN messages USING (id)
ORDER BY rank DESC, id DESC
LIMIT $7"
);

/// How many candidates a search ranks.
pub(crate) fn ranked_candidates() -> i64 {
    i64::try_from(SearchQuery::RANKED_CANDIDATES).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use entity::Snowflake;

    #[test]
    fn documents_hold_folded_words_then_mentions() {
        assert_eq!(
            document("Déjà vu, the deploy: the end", "<@7> hi <#9>"),
            "'c9':8B 'deja':1A 'deploy':4A 'end':6A 'the':3A,5A 'u7':7B 'vu':2A"
        );
        assert_eq!(document("", ""), "");
        assert_eq!(
            document("it's a \\ test", ""),
            "'a':3A 'it':1A 's':2A 'test':4A"
        );
    }

    #[test]
    fn queries_are_phrases_prefixes_and_mentions() {
        let terms = vec![
            SearchTerm {
                any_of: vec![
                    SearchMatch::Words {
                        text: "Deja vu".into(),
                        prefix: false,
                    },
                    SearchMatch::Mentions(Mention::User(Snowflake(7))),
                ],
            },
            SearchTerm {
                any_of: vec![SearchMatch::Words {
                    text: "deplo".into(),
                    prefix: true,
                }],
            },
        ];
        assert_eq!(
            query(&terms).as_deref(),
            Some("( 'deja':A <-> 'vu':A | 'u7':B ) & ( 'deplo':*A )")
        );
        let nothing = vec![SearchTerm {
            any_of: vec![SearchMatch::Words {
                text: "\"*^".into(),
                prefix: true,
            }],
        }];
        assert_eq!(query(&nothing), None);
    }
}
