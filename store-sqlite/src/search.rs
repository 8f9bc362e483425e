//! Full-text search over the stored messages: an SQLite FTS5 index of each live message's
//! readable text, beside the ids it mentions.
//!
//! What is indexed, and why: `text` is the readable text made at ingest (`@Mira`, `#ops`), so
//! a search reads like the messages do, and its snippets show names rather than `<@id>`
//! markup. Names change, though, and the text keeps the name a user had when the message
//! arrived; so each message also indexes `refs`, one token per mention in its Discord text
//! (`u<id>`, `r<id>`, `c<id>`). A term `@Mira` matches either the word `mira` in the text or
//! `u<Mira's id>` in the refs, so it finds every mention of her, under any name.
//!
//! The index is an external-content FTS5 table over `messages` (the text is stored once) kept
//! by the one writer, a batch at a time in the batch's transaction (`rows::IndexBatch`), so
//! every insert, edit, deletion mark, forgotten channel and prune keeps it exact: it holds
//! precisely the rows with `deleted = 0`.
//!
//! A search ranks by bm25 among the newest [`SearchQuery::RANKED_CANDIDATES`] matches that
//! pass its filters, then reads and cuts snippets for the answered ones only. Queries never
//! carry text a user typed as FTS5 syntax: the callable parses the query into terms, and
//! [`fts_expression`] writes each word as a quoted string.

use std::borrow::Cow;
use std::collections::HashMap;
use std::time::Instant;

use entity::Mention;
use rusqlite::{params, Connection};
use switchboard_records::{SearchHit, SearchMatch, SearchQuery, SearchTerm};
use switchboard_store::{StoreError, StoreErrorKind};

/// The mention tokens of Discord text, as the `refs` column indexes them: `u<id>` for users,
/// `r<id>` for roles, `c<id>` for channels, separated by spaces.
pub(crate) fn refs_of(content: &str) -> String {
    let mut out = String::new();
    for mention in entity::discord_mentions(content) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&mention_token(mention));
    }
    out
}

fn mention_token(mention: Mention) -> String {
    match mention {
        Mention::User(id) => format!("u{id}"),
        Mention::Role(id) => format!("r{id}"),
        Mention::Channel(id) => format!("c{id}"),
    }
}

/// The FTS5 expression for parsed terms: each term is `( alternative OR ... )`, terms joined by
/// `AND`; a word phrase is a quoted string in the `text` column (`*` after it for a prefix), a
/// mention a quoted token in `refs`. Words hold letters and digits only, so quoting cannot be
/// broken; a `"` is doubled anyway.
pub(crate) fn fts_expression(terms: &[SearchTerm]) -> String {
    let quoted = |text: &str| format!("\"{}\"", text.replace('"', "\"\""));
    terms
        .iter()
        .map(|term| {
            let alternatives: Vec<String> = term
                .any_of
                .iter()
                .map(|alternative| match alternative {
                    SearchMatch::Words { text, prefix } => {
                        format!("text : {}{}", quoted(text), if *prefix { " *" } else { "" })
                    }
                    SearchMatch::Mentions(mention) => {
                        format!("refs : {}", quoted(&mention_token(*mention)))
                    }
                })
                .collect();
            format!("( {} )", alternatives.join(" OR "))
        })
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// Percent-decodes an emoji a store before schema 4 kept in its route form (`%E2%9C%85` →
/// ✅); anything else (`name:id`, a character, text that is not a whole encoding of UTF-8) is
/// returned as it was.
pub(crate) fn decode_emoji(emoji: &str) -> Cow<'_, str> {
    if !emoji.contains('%') {
        return Cow::Borrowed(emoji);
    }
    let bytes = emoji.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let hex = bytes
                .get(at + 1..at + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(byte) => {
                    out.push(byte);
                    at += 3;
                }
                None => return Cow::Borrowed(emoji),
            }
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    match String::from_utf8(out) {
        Ok(decoded) => Cow::Owned(decoded),
        Err(_) => Cow::Borrowed(emoji),
    }
}

/// How many SQLite virtual-machine steps pass between checks of the deadline.
const STEPS_PER_CHECK: i32 = 4_000;

/// Runs a search on the writer's connection, stopping it at `deadline`.
pub(crate) fn run(
    conn: &Connection,
    search: &SearchQuery,
    deadline: Instant,
    path: &str,
) -> Result<Vec<SearchHit>, StoreError> {
    if search.channels.is_empty() || search.limit == 0 || search.terms.is_empty() {
        return Ok(Vec::new());
    }
    conn.progress_handler(STEPS_PER_CHECK, Some(move || Instant::now() >= deadline));
    let result = query(conn, search);
    conn.progress_handler(0, None::<fn() -> bool>);
    result.map_err(|error| match error {
        rusqlite::Error::SqliteFailure(e, _)
            if e.code == rusqlite::ErrorCode::OperationInterrupted =>
        {
            StoreError::new(
                StoreErrorKind::TimedOut,
                "the search took too long and was stopped; search one session, or use rarer words",
            )
            .with_source(error)
        }
        other => crate::error::cannot_read(path, "search results", other),
    })
}

/// The newest matches a search ranks: bm25 orders these, not every match. A common word can
/// match a tenth of a large store, and scoring (bm25 reads each match's size) and the checks on
/// each message row cost microseconds a match, so ranking them all took hundreds of
/// milliseconds; chat search wants recent messages first anyway. Rarer words have fewer matches
/// than this, and all of them are ranked.
const RANKED_CANDIDATES: usize = SearchQuery::RANKED_CANDIDATES;

/// The conditions every stage of a search applies: the expression, the id bounds (FTS5 filters
/// rowid ranges as it scans), and the channel, author and deletion checks on the message row,
/// found by its primary key.
const MATCHING: &str = "messages_fts MATCH ?1
           AND messages_fts.rowid < ?2 AND messages_fts.rowid > ?3
           AND m.deleted = 0
           AND m.channel_id IN (SELECT value FROM json_each(?4))
           AND (?5 IS NULL OR m.author_id = ?5)";

/// The terms with each phrase written as the index tokenizes it (letters and digits, folded):
/// an alternative with no token left cannot match and goes; `None` when a whole term went
/// (nothing can match).
fn indexable(terms: &[SearchTerm]) -> Option<Vec<SearchTerm>> {
    terms
        .iter()
        .map(|term| {
            let any_of: Vec<SearchMatch> = term
                .any_of
                .iter()
                .filter_map(|alternative| match alternative {
                    SearchMatch::Words { text, prefix } => {
                        let words: Vec<String> = switchboard_store::scan::tokens(text)
                            .into_iter()
                            .map(|t| t.folded)
                            .collect();
                        (!words.is_empty()).then(|| SearchMatch::Words {
                            text: words.join(" "),
                            prefix: *prefix,
                        })
                    }
                    SearchMatch::Mentions(_) => Some(alternative.clone()),
                })
                .collect();
            (!any_of.is_empty()).then_some(SearchTerm { any_of })
        })
        .collect()
}

fn query(conn: &Connection, search: &SearchQuery) -> rusqlite::Result<Vec<SearchHit>> {
    let Some(terms) = indexable(&search.terms) else {
        return Ok(Vec::new());
    };
    let expression = fts_expression(&terms);
    let channels = serde_json::to_string(
        &search
            .channels
            .iter()
            .map(|c| c.0 as i64)
            .collect::<Vec<i64>>(),
    )
    .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    let before = search.before.map_or(i64::MAX, |id| id.0 as i64);
    let after = search.after.map_or(i64::MIN, |id| id.0 as i64);
    let limit = i64::try_from(search.limit).unwrap_or(i64::MAX);
    let author = search.author.map(|a| a.0 as i64);
    // 1. The oldest of the newest candidates: FTS5 walks the matches newest first and stops
    //    once enough pass the filters.
    let floor: Option<i64> = conn
        .prepare_cached(&format!(
            "SELECT MIN(id) FROM (
                 SELECT messages_fts.rowid AS id
                 FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid
                 WHERE {MATCHING}
                 ORDER BY messages_fts.rowid DESC
                 LIMIT ?6)"
        ))?
        .query_row(
            params![
                expression,
                before,
                after,
                channels,
                author,
                RANKED_CANDIDATES as i64
            ],
            |row| row.get(0),
        )?;
    let Some(floor) = floor else {
        return Ok(Vec::new());
    };
    // 2. Rank those candidates (every match at or above the floor that passes the filters).
    let ranked: Vec<(i64, f64)> = conn
        .prepare_cached(&format!(
            "SELECT messages_fts.rowid, bm25(messages_fts)
             FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid
             WHERE {MATCHING} AND messages_fts.rowid >= ?7
             ORDER BY bm25(messages_fts), messages_fts.rowid DESC
             LIMIT ?6"
        ))?
        .query_map(
            params![expression, before, after, channels, author, limit, floor],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?
        .collect::<rusqlite::Result<_>>()?;
    // 3. Read the winners and cut their snippets (a snippet re-reads and tokenizes the text,
    //    so only for what is answered). One scan of the winners' id range: `+rowid` keeps the
    //    id list a filter, not one index lookup per id (which would set up the expression
    //    again for each, costly for a prefix).
    let (Some(low), Some(high)) = (
        ranked.iter().map(|(id, _)| *id).min(),
        ranked.iter().map(|(id, _)| *id).max(),
    ) else {
        return Ok(Vec::new());
    };
    let ids = serde_json::to_string(&ranked.iter().map(|(id, _)| *id).collect::<Vec<i64>>())
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    let mut read: HashMap<i64, SearchHit> = conn
        .prepare_cached(
            "SELECT m.id, m.channel_id, m.author_id, m.author_is_bot, m.content, m.text,
                    m.timestamp, m.edited_timestamp, m.reply_to, m.attachments, m.reactions,
                    snippet(messages_fts, 0, '**', '**', '…', 16)
             FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid
             WHERE messages_fts MATCH ?1
               AND messages_fts.rowid >= ?2 AND messages_fts.rowid <= ?3
               AND +messages_fts.rowid IN (SELECT value FROM json_each(?4))",
        )?
        .query_map(params![expression, low, high, ids], |row| {
            Ok(SearchHit {
                message: crate::rows::message_from_row(row)?,
                snippet: row.get(11)?,
                score: 0.0,
            })
        })?
        .map(|hit| hit.map(|hit| (hit.message.id.0 as i64, hit)))
        .collect::<rusqlite::Result<_>>()?;
    // In rank order; every winner is there (the writer's connection runs one thing at a time).
    Ok(ranked
        .into_iter()
        .filter_map(|(id, bm25)| {
            read.remove(&id).map(|hit| SearchHit {
                score: -bm25,
                ..hit
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use entity::Snowflake;

    #[test]
    fn refs_name_each_mention_once() {
        assert_eq!(refs_of("hi <@7> <@!7> <@&8> in <#9> `<@10>`"), "u7 r8 c9");
        assert_eq!(refs_of("no mentions"), "");
    }

    #[test]
    fn expressions_quote_every_word() {
        let terms = vec![
            SearchTerm {
                any_of: vec![
                    SearchMatch::Words {
                        text: "mira".into(),
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
            fts_expression(&terms),
            "( text : \"mira\" OR refs : \"u7\" ) AND ( text : \"deplo\" * )"
        );
    }

    #[test]
    fn percent_encoded_emoji_are_decoded_and_the_rest_kept() {
        assert_eq!(decode_emoji("%F0%9F%91%8D"), "👍");
        assert_eq!(decode_emoji("%E2%9C%85"), "✅");
        assert_eq!(decode_emoji("blob:123"), "blob:123");
        assert_eq!(decode_emoji("👍"), "👍");
        assert_eq!(decode_emoji("%F0%9F"), "%F0%9F");
        assert_eq!(decode_emoji("100%"), "100%");
        assert_eq!(decode_emoji("%zz"), "%zz");
    }
}
