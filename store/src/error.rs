//! The store's one error: a kind callers branch on, a message that says what to do next, and
//! the backend's own error as its source (twilight's shape).

use std::borrow::Cow;
use std::error::Error as StdError;
use std::fmt;

/// What went wrong, as callers branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The thing asked for is not stored (an approval, a workflow).
    NotFound,
    /// The change conflicts with what is stored (an idempotency key reused for another input).
    Conflict,
    /// The backend cannot be reached or cannot write now (disk full, permissions, a lost
    /// connection); retrying later may work.
    Unavailable,
    /// The store was closed; changes made since stay in memory only.
    Closed,
    /// What is stored cannot be read by this build: not a store, damaged, or written by a
    /// newer switchboard.
    Corrupt,
    /// Another process holds the store (a second switchboard on one SQLite file).
    Locked,
    /// The operation ran past its time budget and was stopped (a search over too much).
    TimedOut,
}

impl StoreErrorKind {
    /// The kind's name, for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreErrorKind::NotFound => "not_found",
            StoreErrorKind::Conflict => "conflict",
            StoreErrorKind::Unavailable => "unavailable",
            StoreErrorKind::Closed => "closed",
            StoreErrorKind::Corrupt => "corrupt",
            StoreErrorKind::Locked => "locked",
            StoreErrorKind::TimedOut => "timed_out",
        }
    }
}

/// A store failure: [`StoreError::kind`] to branch on, a message that says what happened and
/// what to do about it, and the backend's error as [`std::error::Error::source`].
#[derive(Debug)]
pub struct StoreError {
    kind: StoreErrorKind,
    message: Cow<'static, str>,
    source: Option<Box<dyn StdError + Send + Sync>>,
}

impl StoreError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: StoreErrorKind, message: impl Into<Cow<'static, str>>) -> StoreError {
        StoreError {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// The same error, caused by `source`.
    #[must_use]
    pub fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> StoreError {
        self.source = Some(Box::new(source));
        self
    }

    /// The store at `location` is closed.
    pub fn closed(location: &str) -> StoreError {
        StoreError::new(
            StoreErrorKind::Closed,
            format!("the store at {location} is closed"),
        )
    }

    /// What went wrong.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// The message, without the source.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The backend's error, taken out.
    pub fn into_source(self) -> Option<Box<dyn StdError + Send + Sync>> {
        self.source
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl StdError for StoreError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_is_kept_and_the_message_says_what_to_do() {
        let io = std::io::Error::other("disk full");
        let err = StoreError::new(
            StoreErrorKind::Unavailable,
            "writes failed; check free disk space",
        )
        .with_source(io);
        assert_eq!(err.kind(), StoreErrorKind::Unavailable);
        assert_eq!(err.to_string(), "writes failed; check free disk space");
        assert_eq!(
            err.source().map(ToString::to_string).as_deref(),
            Some("disk full")
        );
        assert_eq!(StoreError::closed("x.db").kind(), StoreErrorKind::Closed);
    }
}
