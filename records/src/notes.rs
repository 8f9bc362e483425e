//! The agent's memory across conversations (issue 25): the summary a compaction wrote for a
//! session, and the short notes the agent keeps per session, per user or for every session.

use std::fmt;
use std::str::FromStr;

use entity::Snowflake;
use serde::{Deserialize, Serialize};

use crate::workflow::id_string;

/// Summaries kept per session: the newest wins, a few older ones stay for the console.
pub const SUMMARIES_KEPT_PER_SESSION: usize = 8;

/// What a compaction wrote for the older part of a session's conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// The session.
    #[serde(with = "id_string")]
    pub session_id: Snowflake,
    /// The summary.
    pub text: String,
    /// The newest message it covers: later prompts start after it.
    #[serde(with = "id_string")]
    pub covers_to: Snowflake,
    /// Its size in tokens, as the runner counted them.
    pub tokens: u32,
    /// When it was written, ms since the Unix epoch.
    pub created_ms: u64,
}

/// Whose note it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NoteScope {
    /// Every session's.
    Global,
    /// One session's.
    Session(Snowflake),
    /// One Discord user's, wherever they talk.
    User(Snowflake),
}

impl fmt::Display for NoteScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoteScope::Global => f.write_str("global"),
            NoteScope::Session(id) => write!(f, "session:{id}"),
            NoteScope::User(id) => write!(f, "user:{id}"),
        }
    }
}

/// A note scope that does not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadNoteScope(pub String);

impl fmt::Display for BadNoteScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a note scope; write `global`, `session:<id>` or `user:<id>`",
            self.0
        )
    }
}

impl std::error::Error for BadNoteScope {}

impl FromStr for NoteScope {
    type Err = BadNoteScope;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || BadNoteScope(text.chars().take(80).collect());
        if text == "global" {
            return Ok(NoteScope::Global);
        }
        let (kind, id) = text.split_once(':').ok_or_else(bad)?;
        let id: Snowflake = id.parse().map_err(|_| bad())?;
        match kind {
            "session" => Ok(NoteScope::Session(id)),
            "user" => Ok(NoteScope::User(id)),
            _ => Err(bad()),
        }
    }
}

impl Serialize for NoteScope {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for NoteScope {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// One note the agent keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Note {
    /// Whose it is.
    pub scope: NoteScope,
    /// Its key within the scope.
    pub key: String,
    /// The note.
    pub text: String,
    /// Written while someone the operator does not trust was speaking: later prompts say so.
    pub untrusted: bool,
    /// When it was last written, ms since the Unix epoch.
    pub updated_ms: u64,
}

/// How much one scope may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoteLimits {
    /// Most notes in one scope.
    pub max_notes: usize,
    /// Most characters of note text in one scope (`agent.memory_max_chars`).
    pub max_chars: usize,
}

impl NoteLimits {
    /// No limit: a copy takes what its source kept within the source's limits.
    pub const NONE: NoteLimits = NoteLimits {
        max_notes: usize::MAX,
        max_chars: usize::MAX,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn note_scopes_read_back_and_garbage_is_refused() {
        for scope in [
            NoteScope::Global,
            NoteScope::Session(Snowflake(1_100_000_000_000_000_042)),
            NoteScope::User(Snowflake(u64::MAX)),
        ] {
            assert_eq!(scope.to_string().parse::<NoteScope>(), Ok(scope));
        }
        for garbage in [
            "",
            "session:",
            "user:x",
            "channel:1",
            "global:1",
            "session:-1",
        ] {
            let err = garbage.parse::<NoteScope>().unwrap_err();
            assert!(err.to_string().contains("global"), "{err}");
        }
    }

    #[test]
    fn a_note_is_camel_case_json_with_its_scope_as_text() {
        let note = Note {
            scope: NoteScope::Session(Snowflake(1_100_000_000_000_000_007)),
            key: "k".into(),
            text: "t".into(),
            untrusted: true,
            updated_ms: 5,
        };
        let json = serde_json::to_value(&note).unwrap();
        assert_eq!(json["scope"], "session:1100000000000000007");
        assert_eq!(json["updatedMs"], 5);
        assert_eq!(serde_json::from_value::<Note>(json).unwrap(), note);
    }
}
