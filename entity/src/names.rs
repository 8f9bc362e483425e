//! Names learned at run time (usernames, display names, role and channel names).

use std::collections::HashMap;

use crate::{normalize_name, Snowflake};

/// Names the chat platform knows, beyond the configured aliases. The bot implements this over its
/// store; lookups by name take the key produced by [`normalize_name`].
pub trait NameDirectory {
    fn user_by_key(&self, key: &str) -> Option<Snowflake>;
    fn role_by_key(&self, key: &str) -> Option<Snowflake>;
    fn channel_by_key(&self, key: &str) -> Option<Snowflake>;
    /// Candidate names for a user, best first (username, then global name).
    fn user_names(&self, id: Snowflake) -> Vec<String>;
    fn role_name(&self, id: Snowflake) -> Option<String>;
    fn channel_name(&self, id: Snowflake) -> Option<String>;
}

/// A directory that knows no names: only the configured aliases and fallback forms apply.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoNames;

impl NameDirectory for NoNames {
    fn user_by_key(&self, _: &str) -> Option<Snowflake> {
        None
    }
    fn role_by_key(&self, _: &str) -> Option<Snowflake> {
        None
    }
    fn channel_by_key(&self, _: &str) -> Option<Snowflake> {
        None
    }
    fn user_names(&self, _: Snowflake) -> Vec<String> {
        Vec::new()
    }
    fn role_name(&self, _: Snowflake) -> Option<String> {
        None
    }
    fn channel_name(&self, _: Snowflake) -> Option<String> {
        None
    }
}

/// A plain in-memory [`NameDirectory`]. The first id to claim a name keeps it.
#[derive(Clone, Debug, Default)]
pub struct LearnedNames {
    users_by_key: HashMap<String, Snowflake>,
    roles_by_key: HashMap<String, Snowflake>,
    channels_by_key: HashMap<String, Snowflake>,
    user_names: HashMap<Snowflake, Vec<String>>,
    role_names: HashMap<Snowflake, String>,
    channel_names: HashMap<Snowflake, String>,
}

impl LearnedNames {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a user's username and optional global (display) name.
    pub fn add_user(&mut self, id: Snowflake, username: &str, global_name: Option<&str>) {
        let names = self.user_names.entry(id).or_default();
        for name in std::iter::once(username).chain(global_name) {
            if name.is_empty() || names.iter().any(|n| n == name) {
                continue;
            }
            names.push(name.to_owned());
            self.users_by_key.entry(normalize_name(name)).or_insert(id);
        }
    }

    pub fn add_role(&mut self, id: Snowflake, name: &str) {
        self.role_names.insert(id, name.to_owned());
        self.roles_by_key.entry(normalize_name(name)).or_insert(id);
    }

    pub fn add_channel(&mut self, id: Snowflake, name: &str) {
        self.channel_names.insert(id, name.to_owned());
        self.channels_by_key.entry(normalize_name(name)).or_insert(id);
    }
}

impl NameDirectory for LearnedNames {
    fn user_by_key(&self, key: &str) -> Option<Snowflake> {
        self.users_by_key.get(key).copied()
    }
    fn role_by_key(&self, key: &str) -> Option<Snowflake> {
        self.roles_by_key.get(key).copied()
    }
    fn channel_by_key(&self, key: &str) -> Option<Snowflake> {
        self.channels_by_key.get(key).copied()
    }
    fn user_names(&self, id: Snowflake) -> Vec<String> {
        self.user_names.get(&id).cloned().unwrap_or_default()
    }
    fn role_name(&self, id: Snowflake) -> Option<String> {
        self.role_names.get(&id).cloned()
    }
    fn channel_name(&self, id: Snowflake) -> Option<String> {
        self.channel_names.get(&id).cloned()
    }
}
