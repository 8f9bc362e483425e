//! A full-text search as a store runs it. The callable parses what a person typed into
//! [`SearchTerm`]s, so nothing typed ever becomes index syntax; each backend turns the terms
//! into its own query (FTS5, `tsvector`, a scan).

use entity::{Mention, Snowflake};

use crate::message::Message;

/// What one search term may match: a phrase of words, or a mention of someone or something.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchMatch {
    /// These words in this order (lowercase letters and digits, separated by single spaces;
    /// `prefix`: the last word may continue).
    Words {
        /// The words, separated by single spaces.
        text: String,
        /// Whether the last word matches as a prefix (`deplo*`).
        prefix: bool,
    },
    /// A message whose Discord text mentions this user, role or channel (whatever it was
    /// called then).
    Mentions(Mention),
}

/// One term of a search: a message matches when it matches any of the alternatives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchTerm {
    /// At least one must match.
    pub any_of: Vec<SearchMatch>,
}

/// A search over the stored messages of some channels. Words match a message's readable
/// `text` (as made at ingest); mentions match its Discord `content`. A store takes the
/// channels as ids (`C = Snowflake`); the engine's surface hands them over as channels the
/// allowlist let through (`switchboard_engine::surface::SearchQuery`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchQuery<C = Snowflake> {
    /// Every term must match (at least one, at most [`SearchQuery::MAX_TERMS`]).
    pub terms: Vec<SearchTerm>,
    /// Only messages of these channels (the caller checked each); none: no hits.
    pub channels: Vec<C>,
    /// Only messages by this user.
    pub author: Option<Snowflake>,
    /// Only messages older than this id.
    pub before: Option<Snowflake>,
    /// Only messages newer than this id.
    pub after: Option<Snowflake>,
    /// At most this many hits, best first.
    pub limit: usize,
}

impl<C> SearchQuery<C> {
    /// The same query with each channel as `to` makes it (an allowed channel → its id).
    pub fn map_channels<D>(self, to: impl FnMut(C) -> D) -> SearchQuery<D> {
        SearchQuery {
            terms: self.terms,
            channels: self.channels.into_iter().map(to).collect(),
            author: self.author,
            before: self.before,
            after: self.after,
            limit: self.limit,
        }
    }
}

impl SearchQuery {
    /// Most terms a query may have.
    pub const MAX_TERMS: usize = 16;
    /// Most alternatives one term may have.
    pub const MAX_ALTERNATIVES: usize = 8;
    /// A search ranks the newest this-many matches that pass its filters, not every match:
    /// chat search wants recent messages first, and ranking every match of a common word in a
    /// large store costs hundreds of milliseconds.
    pub const RANKED_CANDIDATES: usize = 400;
}

/// One hit.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// The message (it may be older than what the read cache holds).
    pub message: Message,
    /// An excerpt of its text, the matched words between `**` and `**`.
    pub snippet: String,
    /// How well it matches: higher is better (comparable within one answer only).
    pub score: f64,
}
