//! Session references: the ways an agent or operator names a channel or thread.

use crate::mapper::Mapper;
use crate::{AliasKind, Mention, Snowflake};
use protocol::SnowflakeError;

/// Why a session reference did not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionRefError {
    #[error("Empty session reference. Expected a channel id, a <#id> mention, or one of: {known}", known = known_list(.known))]
    /// The reference is empty or only whitespace.
    Empty {
        /// The configured session tokens, in config order, for the message to list.
        known: Vec<String>,
    },
    #[error("Session reference '{reference}' is not a valid channel id: {source}")]
    /// The reference is all digits or a `<#…>` mention, but what it holds is not a Discord id.
    BadId {
        /// The reference as given, trimmed.
        reference: String,
        /// Why its digits are not an id (wrong length, too large, not digits).
        source: SnowflakeError,
    },
    #[error("Unknown session '{reference}'.{hint} Expected a channel id, a <#id> mention, or one of: {known}",
        hint = suggestion_hint(.suggestion), known = known_list(.known))]
    /// The reference is a name, but neither a configured session token nor a learned channel
    /// name.
    Unknown {
        /// The reference as given, trimmed (a leading `#` kept).
        reference: String,
        /// The configured token it is probably a typo of (see [`nearest`]), if any.
        suggestion: Option<String>,
        /// The configured session tokens, in config order, for the message to list.
        known: Vec<String>,
    },
}

fn known_list(known: &[String]) -> String {
    if known.is_empty() {
        "(no session tokens are configured: add them under [entity.sessions])".to_owned()
    } else {
        known.join(", ")
    }
}

fn suggestion_hint(suggestion: &Option<String>) -> String {
    match suggestion {
        Some(s) => format!(" Did you mean '{s}'?"),
        None => String::new(),
    }
}

/// Edit distance between two short strings, ignoring ASCII case.
fn edit_distance(a: &str, b: &str) -> usize {
    strsim::levenshtein(&a.to_ascii_lowercase(), &b.to_ascii_lowercase())
}

/// The candidate nearest to `wanted`, if it is close enough to be a plausible typo.
pub fn nearest<'c>(wanted: &str, candidates: impl IntoIterator<Item = &'c str>) -> Option<&'c str> {
    let limit = (wanted.chars().count() / 3).max(2);
    candidates
        .into_iter()
        .map(|c| (edit_distance(wanted, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

impl Mapper<'_> {
    /// Resolves `1234…`, `<#1234…>`, `ops`, `#ops`, `#OPS` (surrounding whitespace ignored) to a
    /// channel id. Configured session tokens win over learned channel names.
    pub fn resolve_session(&self, reference: &str) -> Result<Snowflake, SessionRefError> {
        let trimmed = reference.trim();
        let known = || -> Vec<String> {
            self.aliases
                .iter(AliasKind::Session)
                .map(|(name, _)| name.to_owned())
                .collect()
        };
        if trimmed.is_empty() {
            return Err(SessionRefError::Empty { known: known() });
        }
        if let Some(inner) = trimmed
            .strip_prefix("<#")
            .and_then(|rest| rest.strip_suffix('>'))
        {
            return parse_id(reference, inner);
        }
        if trimmed.bytes().all(|b| b.is_ascii_digit()) {
            return parse_id(reference, trimmed);
        }
        let token = trimmed.strip_prefix('#').unwrap_or(trimmed);
        if let Some(Mention::Channel(id)) = self.resolve_hash_key(&token.to_ascii_lowercase()) {
            return Ok(id);
        }
        let known = known();
        let suggestion = nearest(token, known.iter().map(String::as_str)).map(str::to_owned);
        Err(SessionRefError::Unknown {
            reference: trimmed.to_owned(),
            suggestion,
            known,
        })
    }

    /// How a session is shown wherever people read its name, as a reference they can type
    /// back: `#alias` when one is configured, else its name as a token (spaces as `-`: the
    /// thread `release checklist` is `#release-checklist`), else `#channel_<id>` when the name
    /// is no token or names another session first. [`Mapper::resolve_session`] always resolves
    /// it to `id`.
    pub fn session_reference(&self, id: Snowflake) -> String {
        self.readable(Mention::Channel(id))
    }

    /// The configured token for a session id, if any.
    pub fn session_token(&self, id: Snowflake) -> Option<&str> {
        self.aliases.alias_for(AliasKind::Session, id)
    }
}

fn parse_id(reference: &str, digits: &str) -> Result<Snowflake, SessionRefError> {
    digits
        .parse::<Snowflake>()
        .map_err(|source| SessionRefError::BadId {
            reference: reference.trim().to_owned(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_counts_single_edits() {
        assert_eq!(edit_distance("ops", "ops"), 0);
        assert_eq!(edit_distance("opps", "ops"), 1);
        assert_eq!(edit_distance("release-rom", "release-room"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn nearest_ignores_far_candidates() {
        assert_eq!(nearest("opps", ["ops", "release-room"]), Some("ops"));
        assert_eq!(nearest("zzzzzz", ["ops", "release-room"]), None);
    }
}
