//! The operator's alias table: configured names for users, roles and sessions.

use rustc_hash::FxHashMap;

use crate::{Mention, Snowflake};

/// What an alias names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AliasKind {
    /// A Discord user, from `[entity.users]`: `@name` ↔ `<@id>`.
    User,
    /// A Discord role, from `[entity.roles]`: `@name` ↔ `<@&id>`.
    Role,
    /// A channel or thread, from `[entity.sessions]`: `#name` ↔ `<#id>`, and a session
    /// reference (see [`Mapper::resolve_session`](crate::Mapper::resolve_session)).
    Session,
}

impl AliasKind {
    /// The kind in lowercase (`"user"`, `"role"`, `"session"`), as messages write it.
    pub fn as_str(self) -> &'static str {
        match self {
            AliasKind::User => "user",
            AliasKind::Role => "role",
            AliasKind::Session => "session",
        }
    }
}

/// True for names matching `[A-Za-z0-9_][A-Za-z0-9_.-]*`: the characters a mention token may hold.
pub fn is_valid_alias(name: &str) -> bool {
    let bytes = name.as_bytes();
    match bytes.first() {
        Some(&first) if is_word_byte(first) => bytes[1..].iter().all(|&b| is_token_byte(b)),
        _ => false,
    }
}

/// `[A-Za-z0-9_]`: a byte that, right before `@` or `#`, makes it part of a word (`a@b.com`, `C#`).
#[inline]
pub(crate) fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `[A-Za-z0-9_.-]`: a byte that may appear inside a mention token.
#[inline]
pub(crate) fn is_token_byte(b: u8) -> bool {
    is_word_byte(b) || b == b'-' || b == b'.'
}

/// The lookup key for a name: ASCII-lowercased, each space written as `-`, the way a name with
/// spaces is written as a token (`@Release Managers` → `@release-managers`).
pub fn normalize_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c == ' ' {
                '-'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect()
}

#[derive(Clone, Debug, Default)]
struct AliasMap {
    by_key: FxHashMap<String, Snowflake>,
    by_id: FxHashMap<Snowflake, String>,
    in_order: Vec<(String, Snowflake)>,
}

impl AliasMap {
    fn insert(&mut self, alias: &str, id: Snowflake) -> bool {
        let key = normalize_name(alias);
        if self.by_key.contains_key(&key) {
            return false;
        }
        self.by_key.insert(key, id);
        self.by_id.entry(id).or_insert_with(|| alias.to_owned());
        self.in_order.push((alias.to_owned(), id));
        true
    }
}

/// Configured aliases. Lookups by name are case-insensitive; the first alias given for an id is
/// the one written back for it.
#[derive(Clone, Debug, Default)]
pub struct Aliases {
    users: AliasMap,
    roles: AliasMap,
    sessions: AliasMap,
    /// What `@key` means among the configured aliases: a user alias wins over a role alias.
    at_mentions: FxHashMap<String, Mention>,
}

/// Why an alias could not be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AliasError {
    /// The name is not `[A-Za-z0-9_][A-Za-z0-9_.-]*` (see [`is_valid_alias`]); holds it as given.
    #[error("alias '{0}' is not a valid name: use letters, digits, '_', '-' and '.', starting with a letter, digit or '_'")]
    InvalidName(String),
    /// The kind already has an alias with this name, ignoring case.
    #[error("{kind} alias '{name}' is defined twice (names are compared ignoring case)", kind = .kind.as_str())]
    Duplicate {
        /// The kind the alias was added for.
        kind: AliasKind,
        /// The refused alias as given (not the one already configured).
        name: String,
    },
}

impl Aliases {
    /// An empty table: no user, role or session aliases.
    pub fn new() -> Self {
        Self::default()
    }

    fn map(&self, kind: AliasKind) -> &AliasMap {
        match kind {
            AliasKind::User => &self.users,
            AliasKind::Role => &self.roles,
            AliasKind::Session => &self.sessions,
        }
    }

    /// Adds an alias; refuses invalid names and case-insensitive duplicates within a kind.
    pub fn add(&mut self, kind: AliasKind, alias: &str, id: Snowflake) -> Result<(), AliasError> {
        if !is_valid_alias(alias) {
            return Err(AliasError::InvalidName(alias.to_owned()));
        }
        let map = match kind {
            AliasKind::User => &mut self.users,
            AliasKind::Role => &mut self.roles,
            AliasKind::Session => &mut self.sessions,
        };
        if map.insert(alias, id) {
            let key = normalize_name(alias);
            match kind {
                AliasKind::User => {
                    self.at_mentions.insert(key, Mention::User(id));
                }
                AliasKind::Role => {
                    self.at_mentions.entry(key).or_insert(Mention::Role(id));
                }
                AliasKind::Session => {}
            }
            Ok(())
        } else {
            Err(AliasError::Duplicate {
                kind,
                name: alias.to_owned(),
            })
        }
    }

    /// Builder-style [`Aliases::add`] for tests and examples.
    pub fn with(mut self, kind: AliasKind, alias: &str, id: u64) -> Result<Self, AliasError> {
        self.add(kind, alias, Snowflake(id))?;
        Ok(self)
    }

    /// The id an alias names, looked up by its normalized key (see [`normalize_name`]).
    pub fn id_for_key(&self, kind: AliasKind, key: &str) -> Option<Snowflake> {
        self.map(kind).by_key.get(key).copied()
    }

    /// What `@key` names among the configured user and role aliases (`key` normalized).
    pub fn at_mention_for_key(&self, key: &str) -> Option<Mention> {
        self.at_mentions.get(key).copied()
    }

    /// The id an alias names, ignoring case.
    pub fn id_for(&self, kind: AliasKind, alias: &str) -> Option<Snowflake> {
        self.id_for_key(kind, &normalize_name(alias))
    }

    /// The alias written for an id, as the operator spelled it.
    pub fn alias_for(&self, kind: AliasKind, id: Snowflake) -> Option<&str> {
        self.map(kind).by_id.get(&id).map(String::as_str)
    }

    /// Every alias of a kind, in the order they were added.
    pub fn iter(&self, kind: AliasKind) -> impl Iterator<Item = (&str, Snowflake)> {
        self.map(kind)
            .in_order
            .iter()
            .map(|(name, id)| (name.as_str(), *id))
    }

    /// How many aliases of a kind are configured (an id with two aliases counts twice).
    pub fn len(&self, kind: AliasKind) -> usize {
        self.map(kind).in_order.len()
    }

    /// True when no alias of any kind is configured.
    pub fn is_empty(&self) -> bool {
        self.users.in_order.is_empty()
            && self.roles.in_order.is_empty()
            && self.sessions.in_order.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alias_names_follow_the_token_grammar() {
        for good in ["ops", "release-room", "Ops-Bot", "_x", "v1.2", "9lives"] {
            assert!(is_valid_alias(good), "{good}");
        }
        for bad in [
            "",
            "-ops",
            ".ops",
            "release room",
            "ops!",
            "ópera",
            "#ops",
            "@x",
        ] {
            assert!(!is_valid_alias(bad), "{bad}");
        }
    }

    #[test]
    fn lookups_ignore_case_and_keep_the_configured_spelling() {
        let aliases = Aliases::new()
            .with(AliasKind::User, "Stanley", 123456789012345678)
            .unwrap();
        assert_eq!(
            aliases.id_for(AliasKind::User, "STANLEY"),
            Some(Snowflake(123456789012345678))
        );
        assert_eq!(
            aliases.alias_for(AliasKind::User, Snowflake(123456789012345678)),
            Some("Stanley")
        );
        assert_eq!(aliases.id_for(AliasKind::Role, "stanley"), None);
    }

    #[test]
    fn duplicate_alias_differing_by_case_is_refused() {
        let mut aliases = Aliases::new();
        aliases
            .add(AliasKind::Session, "ops", Snowflake(334455667788990011))
            .unwrap();
        assert_eq!(
            aliases.add(AliasKind::Session, "OPS", Snowflake(334455667788990022)),
            Err(AliasError::Duplicate {
                kind: AliasKind::Session,
                name: "OPS".into()
            })
        );
    }

    #[test]
    fn first_alias_for_an_id_is_the_one_written_back() {
        let aliases = Aliases::new()
            .with(AliasKind::Session, "ops", 334455667788990011)
            .unwrap()
            .with(AliasKind::Session, "operations", 334455667788990011)
            .unwrap();
        assert_eq!(
            aliases.alias_for(AliasKind::Session, Snowflake(334455667788990011)),
            Some("ops")
        );
    }
}
