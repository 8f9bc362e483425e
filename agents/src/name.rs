//! An agent's name: `[A-Za-z0-9_-]{1,64}`, never one of the `[agents]` table's own keys.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The most characters an agent name has.
pub const MAX_NAME_LEN: usize = 64;

/// Keys of the `[agents]` table itself: no agent may take these names (compared ignoring
/// case, so `[agents.Default]` cannot be confused with `agents.default`).
pub const RESERVED_NAMES: [&str; 2] = ["default", "max_handoff_depth"];

/// A valid agent name, as in `[agents.NAME]`, `agent:NAME` scope entries, `model =
/// "switchboard:NAME"`, `[sessions.X] agent = "NAME"` and usage rows.
///
/// ```
/// use switchboard_agents::AgentName;
/// assert_eq!(AgentName::parse("release-bot").unwrap().as_str(), "release-bot");
/// assert!(AgentName::parse("default").is_err());
/// assert!(AgentName::parse("two words").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AgentName(String);

/// Why a string is not an [`AgentName`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AgentNameError {
    /// The name is empty.
    #[error("the agent name is empty")]
    Empty,
    /// Longer than [`MAX_NAME_LEN`] characters.
    #[error("the agent name is {len} characters long; at most {MAX_NAME_LEN} are allowed")]
    TooLong {
        /// Its length in characters.
        len: usize,
    },
    /// A character outside `[A-Za-z0-9_-]`.
    #[error("the agent name '{name}' holds {found:?} at character {at}; only letters, digits, '_' and '-' are allowed")]
    BadCharacter {
        /// The name as given.
        name: String,
        /// The first character that is not allowed.
        found: char,
        /// Its 1-based position, in characters.
        at: usize,
    },
    /// One of [`RESERVED_NAMES`].
    #[error("'{0}' is a key of the [agents] table itself, so no agent can be named that")]
    Reserved(String),
}

impl AgentNameError {
    /// What to do about it.
    pub fn help(&self) -> &'static str {
        match self {
            AgentNameError::Reserved(_) => {
                "rename the agent: `agents.default` names the default agent and `agents.max_handoff_depth` caps handoffs"
            }
            _ => "name agents with 1 to 64 letters, digits, '_' or '-', such as \"support\" or \"release-bot\"",
        }
    }

    /// The machine-readable code, for APIs that answer with one.
    pub fn code(&self) -> &'static str {
        "invalid_agent_name"
    }
}

impl AgentName {
    /// Checks `text` (taken as it is: surrounding spaces are an error, not trimmed).
    pub fn parse(text: &str) -> Result<AgentName, AgentNameError> {
        if text.is_empty() {
            return Err(AgentNameError::Empty);
        }
        let mut len = 0;
        for (index, ch) in text.chars().enumerate() {
            len = index + 1;
            if len > MAX_NAME_LEN {
                return Err(AgentNameError::TooLong {
                    len: text.chars().count(),
                });
            }
            if !(ch.is_ascii_alphanumeric() || ch == '_' || ch == '-') {
                return Err(AgentNameError::BadCharacter {
                    name: text.to_owned(),
                    found: ch,
                    at: len,
                });
            }
        }
        debug_assert!(len >= 1);
        if RESERVED_NAMES
            .iter()
            .any(|reserved| reserved.eq_ignore_ascii_case(text))
        {
            return Err(AgentNameError::Reserved(text.to_owned()));
        }
        Ok(AgentName(text.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AgentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for AgentName {
    type Err = AgentNameError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        AgentName::parse(text)
    }
}

impl AsRef<str> for AgentName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Serialize for AgentName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for AgentName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        AgentName::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for AgentName {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "AgentName".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^[A-Za-z0-9_-]{1,64}$",
            "description": "An agent's name, as in [agents.NAME]."
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_the_allowed_alphabet_up_to_64_characters_are_agent_names() {
        for good in ["a", "support", "release-bot", "A_1-b", &"x".repeat(64)] {
            assert_eq!(AgentName::parse(good).unwrap().as_str(), good);
        }
    }

    #[test]
    fn the_agents_tables_own_keys_are_refused_in_any_case() {
        for reserved in [
            "default",
            "Default",
            "MAX_HANDOFF_DEPTH",
            "max_handoff_depth",
        ] {
            let error = AgentName::parse(reserved).unwrap_err();
            assert!(matches!(error, AgentNameError::Reserved(_)), "{reserved}");
            assert!(error.help().contains("agents.default"));
        }
        // Only the exact words are reserved.
        assert!(AgentName::parse("default-bot").is_ok());
    }

    #[test]
    fn a_bad_name_says_which_character_and_where() {
        let error = AgentName::parse("ops bot").unwrap_err();
        assert_eq!(
            error,
            AgentNameError::BadCharacter {
                name: "ops bot".into(),
                found: ' ',
                at: 4
            }
        );
        assert_eq!(AgentName::parse(""), Err(AgentNameError::Empty));
        assert_eq!(
            AgentName::parse(&"y".repeat(65)),
            Err(AgentNameError::TooLong { len: 65 })
        );
        assert!(matches!(
            AgentName::parse("café"),
            Err(AgentNameError::BadCharacter { found: 'é', .. })
        ));
    }

    #[test]
    fn names_deserialize_only_when_valid() {
        let ok: AgentName = serde_json::from_str("\"support\"").unwrap();
        assert_eq!(ok.as_str(), "support");
        assert!(serde_json::from_str::<AgentName>("\"max_handoff_depth\"").is_err());
    }
}
