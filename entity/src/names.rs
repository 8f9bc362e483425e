//! Names learned at run time (usernames, display names, role and channel names).

use rustc_hash::FxHashMap;

use crate::{normalize_name, Snowflake};

/// Names the chat platform knows, beyond the configured aliases. The bot implements this over its
/// store; lookups by name take the key produced by [`normalize_name`].
pub trait NameDirectory {
    /// The user whose username or global (display) name has this key.
    fn user_by_key(&self, key: &str) -> Option<Snowflake>;
    /// The role whose name has this key.
    fn role_by_key(&self, key: &str) -> Option<Snowflake>;
    /// The channel or thread whose name has this key.
    fn channel_by_key(&self, key: &str) -> Option<Snowflake>;
    /// Every user whose username or display name has this key, the one
    /// [`NameDirectory::user_by_key`] answers first (several: the name is ambiguous).
    fn users_by_key(&self, key: &str) -> Vec<Snowflake> {
        self.user_by_key(key).into_iter().collect()
    }
    /// Every channel or thread whose name has this key, the one
    /// [`NameDirectory::channel_by_key`] answers first.
    fn channels_by_key(&self, key: &str) -> Vec<Snowflake> {
        self.channel_by_key(key).into_iter().collect()
    }
    /// Offers a user's names, best first (username, then global name), to `accept` until it
    /// returns true.
    fn find_user_name(&self, id: Snowflake, accept: &mut dyn FnMut(&str) -> bool);
    /// A role's name as Discord shows it (case and spaces kept), if known.
    fn role_name(&self, id: Snowflake) -> Option<String>;
    /// A channel's or thread's name as Discord shows it, if known.
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
    fn find_user_name(&self, _: Snowflake, _: &mut dyn FnMut(&str) -> bool) {}
    fn role_name(&self, _: Snowflake) -> Option<String> {
        None
    }
    fn channel_name(&self, _: Snowflake) -> Option<String> {
        None
    }
}

/// A plain in-memory [`NameDirectory`]. The first id to claim a name keeps it; the others that
/// claim it too are remembered (the name is ambiguous).
#[derive(Clone, Debug, Default)]
pub struct LearnedNames {
    users_by_key: FxHashMap<String, Vec<Snowflake>>,
    roles_by_key: FxHashMap<String, Snowflake>,
    channels_by_key: FxHashMap<String, Vec<Snowflake>>,
    user_names: FxHashMap<Snowflake, Vec<String>>,
    role_names: FxHashMap<Snowflake, String>,
    channel_names: FxHashMap<Snowflake, String>,
}

impl LearnedNames {
    /// An empty directory.
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
            claim(&mut self.users_by_key, name, id);
        }
    }

    /// Records a role's name, replacing the one [`NameDirectory::role_name`] gives for the id.
    pub fn add_role(&mut self, id: Snowflake, name: &str) {
        self.role_names.insert(id, name.to_owned());
        self.roles_by_key.entry(normalize_name(name)).or_insert(id);
    }

    /// Records a channel's or thread's name, replacing the one
    /// [`NameDirectory::channel_name`] gives for the id.
    pub fn add_channel(&mut self, id: Snowflake, name: &str) {
        self.channel_names.insert(id, name.to_owned());
        claim(&mut self.channels_by_key, name, id);
    }
}

/// Adds `id` to the claimants of `name`'s key (once).
fn claim(keys: &mut FxHashMap<String, Vec<Snowflake>>, name: &str, id: Snowflake) {
    let ids = keys.entry(normalize_name(name)).or_default();
    if !ids.contains(&id) {
        ids.push(id);
    }
}

impl NameDirectory for LearnedNames {
    fn user_by_key(&self, key: &str) -> Option<Snowflake> {
        self.users_by_key
            .get(key)
            .and_then(|ids| ids.first().copied())
    }
    fn role_by_key(&self, key: &str) -> Option<Snowflake> {
        self.roles_by_key.get(key).copied()
    }
    fn channel_by_key(&self, key: &str) -> Option<Snowflake> {
        self.channels_by_key
            .get(key)
            .and_then(|ids| ids.first().copied())
    }
    fn users_by_key(&self, key: &str) -> Vec<Snowflake> {
        self.users_by_key.get(key).cloned().unwrap_or_default()
    }
    fn channels_by_key(&self, key: &str) -> Vec<Snowflake> {
        self.channels_by_key.get(key).cloned().unwrap_or_default()
    }
    fn find_user_name(&self, id: Snowflake, accept: &mut dyn FnMut(&str) -> bool) {
        if let Some(names) = self.user_names.get(&id) {
            for name in names {
                if accept(name) {
                    return;
                }
            }
        }
    }
    fn role_name(&self, id: Snowflake) -> Option<String> {
        self.role_names.get(&id).cloned()
    }
    fn channel_name(&self, id: Snowflake) -> Option<String> {
        self.channel_names.get(&id).cloned()
    }
}
