//! `surface.messages.search`: full-text search over the stored messages of the sessions the
//! caller may read.
//!
//! The query language is small on purpose, so that nothing a user types can become index
//! syntax: words (all must match), `"exact phrases"`, `prefix*`, `OR` between two terms,
//! and `@name` / `#channel`, which also match messages that mention that user, role or channel
//! whatever it was called when the message was stored. The surface gets the parsed terms, never
//! the text.

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate};
use entity::{Mapper, Snowflake};
use protocol::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use serde_json::value::RawValue;
use std::sync::Arc;

use crate::error::ToolError;
use crate::invocation::{parse_id, Invocation, MessageView, PlanContext};
use crate::registry::{
    example, output, output_schema, Planned, SessionRequest, Tool, ToolOutput, ToolSpec,
};
use crate::surface::{SearchMatch, SearchQuery, SearchTerm, SurfaceError};
use protocol::Effects;

/// Longest query accepted, in characters.
pub const MAX_QUERY_CHARS: usize = 256;
/// Longest word kept (longer ones are cut: no real word is this long).
const MAX_WORD_CHARS: usize = 64;
/// Shortest stem a `prefix*` may have: a one-letter prefix matches half the index.
const MIN_PREFIX_CHARS: usize = 2;
const DEFAULT_LIMIT: u32 = 20;
const MAX_LIMIT: u32 = 100;
/// Discord's epoch (2015-01-01T00:00:00Z) in Unix milliseconds: snowflakes count from it.
const DISCORD_EPOCH_MS: i64 = 1_420_070_400_000;

fn invalid(field: &str, message: impl Into<String>) -> ToolError {
    ToolError::usage(ErrorCode::InvalidInput, message).with_details(json!({ "field": field }))
}

/// One piece of the query as typed: a word (maybe `*`-ended, maybe `@`/`#`-led), a quoted
/// phrase, or the `OR` keyword.
#[derive(Debug, PartialEq)]
enum Piece {
    Word(String),
    Phrase(String),
    Or,
}

/// Splits the query into pieces: whitespace separates, `"` opens a phrase that runs to the
/// next `"` (or the end).
fn pieces(query: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut chars = query.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '"' {
            chars.next();
            let phrase: String = chars.by_ref().take_while(|&c| c != '"').collect();
            out.push(Piece::Phrase(phrase));
        } else {
            let mut word = String::new();
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() || c == '"' {
                    break;
                }
                word.push(c);
                chars.next();
            }
            out.push(if word == "OR" {
                Piece::Or
            } else {
                Piece::Word(word)
            });
        }
    }
    out
}

/// The words of a piece of text as the index sees them: runs of letters and digits,
/// lowercased, each cut at [`MAX_WORD_CHARS`].
fn index_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            w.chars()
                .flat_map(char::to_lowercase)
                .filter(|c| c.is_alphanumeric())
                .take(MAX_WORD_CHARS)
                .collect::<String>()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// What one typed piece may match; empty when it has no letters or digits at all.
fn alternatives(piece: &Piece, mapper: &Mapper<'_>) -> Result<Vec<SearchMatch>, ToolError> {
    match piece {
        Piece::Or => Ok(Vec::new()),
        Piece::Phrase(text) => {
            let words = index_words(text);
            Ok(if words.is_empty() {
                Vec::new()
            } else {
                vec![SearchMatch::Words {
                    text: words.join(" "),
                    prefix: false,
                }]
            })
        }
        Piece::Word(word) => {
            let (stem, prefix) = match word.strip_suffix('*') {
                Some(stem) => (stem.trim_end_matches('*'), true),
                None => (word.as_str(), false),
            };
            let words = index_words(stem);
            if words.is_empty() {
                return Ok(Vec::new());
            }
            if prefix
                && words
                    .last()
                    .is_some_and(|w| w.chars().count() < MIN_PREFIX_CHARS)
            {
                return Err(invalid(
                    "query",
                    format!("'{word}': a prefix search needs at least {MIN_PREFIX_CHARS} letters before '*'"),
                ));
            }
            let mut any_of = vec![SearchMatch::Words {
                text: words.join(" "),
                prefix,
            }];
            // `@name` and `#name` also find messages that mention whoever the name is now.
            if !prefix {
                let key = stem
                    .get(1..)
                    .unwrap_or_default()
                    .trim_end_matches(|c: char| !(c.is_alphanumeric() || c == '-' || c == '_'))
                    .to_ascii_lowercase();
                let mention = match stem.as_bytes().first() {
                    Some(b'@') => mapper.resolve_at_key(&key),
                    Some(b'#') => mapper.resolve_hash_key(&key),
                    _ => None,
                };
                if let Some(mention) = mention {
                    any_of.push(SearchMatch::Mentions(mention));
                }
            }
            Ok(any_of)
        }
    }
}

/// Parses a query into terms (all must match), with `OR` joining the terms on either side.
pub fn parse_query(query: &str, mapper: &Mapper<'_>) -> Result<Vec<SearchTerm>, ToolError> {
    let chars = query.chars().count();
    if chars > MAX_QUERY_CHARS {
        return Err(invalid(
            "query",
            format!("query is {chars} characters; at most {MAX_QUERY_CHARS}"),
        ));
    }
    let mut terms: Vec<SearchTerm> = Vec::new();
    let mut join_next = false;
    for piece in pieces(query) {
        if piece == Piece::Or {
            // `OR` joins only when there is a term before it; a leading or doubled one is a
            // plain separator.
            join_next = !terms.is_empty();
            continue;
        }
        let any_of = alternatives(&piece, mapper)?;
        if any_of.is_empty() {
            continue;
        }
        match terms.last_mut() {
            Some(last) if join_next => last.any_of.extend(any_of),
            _ => terms.push(SearchTerm { any_of }),
        }
        join_next = false;
    }
    if terms.is_empty() {
        return Err(invalid(
            "query",
            "the query has no words to search for (letters or digits); try a word from the message",
        ));
    }
    if terms.len() > switchboard_records::SearchQuery::MAX_TERMS {
        return Err(invalid(
            "query",
            format!(
                "the query has {} terms; at most {}",
                terms.len(),
                switchboard_records::SearchQuery::MAX_TERMS
            ),
        ));
    }
    if let Some(term) = terms
        .iter()
        .find(|t| t.any_of.len() > switchboard_records::SearchQuery::MAX_ALTERNATIVES)
    {
        return Err(invalid(
            "query",
            format!(
                "one term has {} alternatives joined by OR; at most {}",
                term.any_of.len(),
                switchboard_records::SearchQuery::MAX_ALTERNATIVES
            ),
        ));
    }
    Ok(terms)
}

/// A cursor: a message id, or a moment (RFC 3339, or a `YYYY-MM-DD` day at midnight UTC) as
/// the first snowflake of that millisecond.
fn parse_cursor(field: &str, value: &str) -> Result<Snowflake, ToolError> {
    let value = value.trim();
    if value.bytes().all(|b| b.is_ascii_digit()) || value.starts_with('<') {
        return parse_id(field, value);
    }
    let ms = DateTime::parse_from_rfc3339(value)
        .map(|t| t.timestamp_millis())
        .or_else(|_| {
            NaiveDate::parse_from_str(value, "%Y-%m-%d").map(|d| {
                d.and_hms_opt(0, 0, 0)
                    .map_or(0, |t| t.and_utc().timestamp_millis())
            })
        })
        .map_err(|_| {
            invalid(
                field,
                format!("{field}: '{value}' is neither a message id nor a date (2026-11-22 or 2026-11-22T12:00:00Z)"),
            )
        })?;
    let since_epoch = u64::try_from(ms - DISCORD_EPOCH_MS).map_err(|_| {
        invalid(
            field,
            format!("{field}: {value} is before Discord existed (2015)"),
        )
    })?;
    if since_epoch >= 1 << 42 {
        return Err(invalid(
            field,
            format!("{field}: {value} is too far in the future"),
        ));
    }
    Ok(Snowflake(since_epoch << 22))
}

pub struct SearchMessages;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SearchMessagesInput {
    /// Words to find (all must match); "an exact phrase"; prefix* (2+ letters); a OR b;
    /// @name and #channel also find mentions of them. At most 256 characters.
    pub query: String,
    /// Only this session (id, <#id>, or token) and, for a channel, its threads; without it,
    /// every session you may read.
    pub session_id: Option<String>,
    /// Only messages by this user (an id, <@id>, or @name).
    pub author_id: Option<String>,
    /// Only messages older than this message id or date (2026-11-22, or RFC 3339).
    pub before: Option<String>,
    /// Only messages newer than this message id or date.
    pub after: Option<String>,
    /// How many results (1 to 100, default 20), best first.
    pub limit: Option<u32>,
}

/// A checked search.
pub struct SearchPlan {
    terms: Vec<SearchTerm>,
    one_session: bool,
    author: Option<Snowflake>,
    before: Option<Snowflake>,
    after: Option<Snowflake>,
    limit: usize,
}

/// One search hit.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Hit {
    /// The session it is in.
    #[schemars(with = "String")]
    channel_id: Snowflake,
    /// The matching part of its text, matches in `**bold**`.
    snippet: String,
    /// Relevance: higher is better.
    score: f64,
    /// The message.
    #[schemars(with = "MessageView<'static>")]
    message: Arc<RawValue>,
}

/// `surface.messages.search`'s answer.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct SearchAnswer {
    /// The hits, best first.
    results: Vec<Hit>,
    /// How many sessions were searched.
    searched_sessions: usize,
}

#[async_trait]
impl Tool for SearchMessages {
    type Input = SearchMessagesInput;
    type Plan = SearchPlan;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "surface.messages.search",
            title: "Search messages",
            effects: Effects::LOCAL_READ,
            output_schema: Some(output_schema::<SearchAnswer>()),
            description: "Full-text search over stored messages of the sessions you may read, best matches first.",
            help: "Searches the readable text of stored messages (mentions as @name and #channel) in every session the allowlist lets you read, or in one session and its threads. All words must match; \"quotes\" match a phrase; word* matches a prefix (2+ letters); a OR b matches either; @name and #channel also match messages that mention them. Each result has a snippet with the matches between ** and **, and the message. Filters: authorId, before and after (message ids or dates), limit (1-100).",
            mutating: false,
            primary: Some("query"),
            examples: vec![
                example("Where was the deploy discussed?", "tools surface.messages.search \"deploy failed\"", json!({"query": "deploy failed"})),
                example("Mentions of Stanley in #ops this month", "tools surface.messages.search --session-id=#ops --after=2026-11-01 @Stanley", json!({"sessionId": "#ops", "after": "2026-11-01", "query": "@Stanley"})),
                example("A phrase, by one author", "tools surface.messages.search --author-id=@Tomas '\"rollback plan\" OR revert'", json!({"authorId": "@Tomas", "query": "\"rollback plan\" OR revert"})),
            ],
        }
    }

    fn plan(
        &self,
        cx: &PlanContext<'_>,
        input: SearchMessagesInput,
    ) -> Result<Planned<SearchPlan>, ToolError> {
        let limit = input.limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(invalid(
                "limit",
                format!("limit must be between 1 and {MAX_LIMIT}, got {limit}"),
            ));
        }
        let terms = parse_query(&input.query, &cx.mapper())?;
        let author = match input.author_id.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(name) if name.starts_with('@') => {
                let key = name[1..].to_ascii_lowercase();
                match cx.mapper().resolve_at_key(&key) {
                    Some(entity::Mention::User(id)) => Some(id),
                    _ => {
                        return Err(ToolError::not_found(
                            ErrorCode::UnknownUser,
                            format!(
                            "authorId: no user is called {name}; give a user id or a known @name"
                        ),
                        )
                        .with_details(json!({ "field": "authorId" })))
                    }
                }
            }
            Some(id) => Some(parse_id("authorId", id)?),
        };
        let before = input
            .before
            .as_deref()
            .map(|v| parse_cursor("before", v))
            .transpose()?;
        let after = input
            .after
            .as_deref()
            .map(|v| parse_cursor("after", v))
            .transpose()?;
        let session = input
            .session_id
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty());
        let plan = SearchPlan {
            terms,
            one_session: session.is_some(),
            author,
            before,
            after,
            limit: limit as usize,
        };
        Ok(match session {
            Some(session) => {
                Planned::in_session(plan, SessionRequest::session_id(Some(session), 0))
            }
            None => Planned::nowhere(plan),
        })
    }

    async fn run(&self, cx: &Invocation<'_>, plan: SearchPlan) -> Result<ToolOutput, ToolError> {
        let channels = cx.searchable(plan.one_session)?;
        if channels.is_empty() {
            return output(&SearchAnswer {
                results: Vec::new(),
                searched_sessions: 0,
            });
        }
        let searched = channels.len();
        let hits = cx
            .surface()
            .search(SearchQuery {
                terms: plan.terms,
                channels,
                author: plan.author,
                before: plan.before,
                after: plan.after,
                limit: plan.limit,
            })
            .await
            .map_err(|error| match error {
                // The index refused or gave up on this query: the query is what to change.
                SurfaceError::InvalidInput { message, .. } => invalid("query", message),
                other => ToolError::from(other),
            })?;
        let results = hits
            .into_iter()
            .map(|hit| {
                Ok(Hit {
                    channel_id: hit.message.channel_id,
                    snippet: hit.snippet,
                    score: hit.score,
                    message: cx.message_json(&hit.message)?,
                })
            })
            .collect::<Result<Vec<_>, ToolError>>()?;
        output(&SearchAnswer {
            results,
            searched_sessions: searched,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use entity::{Aliases, LearnedNames, Mention};
    use proptest::prelude::*;

    fn names() -> (Aliases, LearnedNames) {
        let mut names = LearnedNames::new();
        names.add_user(Snowflake(7), "mira", Some("Mira"));
        names.add_channel(Snowflake(9), "ops");
        (Aliases::new(), names)
    }

    fn parse(query: &str) -> Result<Vec<SearchTerm>, ToolError> {
        let (aliases, names) = names();
        parse_query(query, &Mapper::new(&aliases, &names))
    }

    fn words(text: &str, prefix: bool) -> SearchMatch {
        SearchMatch::Words {
            text: text.to_owned(),
            prefix,
        }
    }

    #[test]
    fn words_phrases_prefixes_and_or() {
        let terms = parse(r#"Deploy "rollback  PLAN" fail* a OR b"#).unwrap();
        let any: Vec<Vec<SearchMatch>> = terms.into_iter().map(|t| t.any_of).collect();
        assert_eq!(
            any,
            vec![
                vec![words("deploy", false)],
                vec![words("rollback plan", false)],
                vec![words("fail", true)],
                vec![words("a", false), words("b", false)],
            ]
        );
    }

    #[test]
    fn mentions_match_the_name_or_the_id() {
        let terms = parse("@Mira #ops @nobody").unwrap();
        assert_eq!(
            terms[0].any_of,
            vec![
                words("mira", false),
                SearchMatch::Mentions(Mention::User(Snowflake(7)))
            ]
        );
        assert_eq!(
            terms[1].any_of,
            vec![
                words("ops", false),
                SearchMatch::Mentions(Mention::Channel(Snowflake(9)))
            ]
        );
        assert_eq!(terms[2].any_of, vec![words("nobody", false)]);
    }

    #[test]
    fn index_syntax_is_just_words() {
        // FTS5 operators and quotes typed by a user are plain text here.
        let terms = parse(r#"NEAR(a b) col:x ^start "unterminated"#).unwrap();
        let flat: Vec<SearchMatch> = terms.into_iter().flat_map(|t| t.any_of).collect();
        assert_eq!(
            flat,
            vec![
                words("near a", false),
                words("b", false),
                words("col x", false),
                words("start", false),
                words("unterminated", false),
            ]
        );
    }

    #[test]
    fn bad_queries_are_typed_errors() {
        for query in ["", "   ", "!!! ?? --", "OR", "a*", &"x".repeat(257)] {
            let error = parse(query).unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidInput, "{query:?}");
        }
        let many = (0..17)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        assert!(parse(&many).is_err());
        let ors = (0..9)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join(" OR ");
        assert!(parse(&ors).is_err());
    }

    #[test]
    fn cursors_are_ids_or_dates() {
        assert_eq!(
            parse_cursor("before", "1000000000000000900").unwrap(),
            Snowflake(1000000000000000900)
        );
        let day = parse_cursor("after", "2015-01-02").unwrap();
        assert_eq!(day.0 >> 22, 86_400_000);
        let moment = parse_cursor("after", "2015-01-01T00:00:01Z").unwrap();
        assert_eq!(moment.0 >> 22, 1000);
        for bad in ["yesterday", "2014-12-31", "2015-13-01", "99999-01-01"] {
            assert!(parse_cursor("after", bad).is_err(), "{bad}");
        }
    }

    proptest! {
        #[test]
        fn any_query_parses_or_fails_cleanly(query in ".{0,300}") {
            match parse(&query) {
                Ok(terms) => {
                    prop_assert!(!terms.is_empty() && terms.len() <= switchboard_records::SearchQuery::MAX_TERMS);
                    for term in terms {
                        prop_assert!(!term.any_of.is_empty());
                        for m in term.any_of {
                            if let SearchMatch::Words { text, .. } = m {
                                prop_assert!(!text.is_empty());
                                prop_assert!(text.split(' ').all(|w| !w.is_empty() && w.chars().all(char::is_alphanumeric)));
                            }
                        }
                    }
                }
                Err(error) => prop_assert_eq!(error.code, ErrorCode::InvalidInput),
            }
        }
    }
}
