//! The read cache's maps: sessions, names and the newest messages of each channel, in dashmaps
//! so the gateway and the tool server read and write without a global lock.
//!
//! Never call out of this module (into a caller's closure) while holding a dashmap guard.

use std::collections::{BTreeMap, BTreeSet};

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use entity::{normalize_name, Snowflake};

use switchboard_records::{Message, MessageQuery, Session, ThreadState, User};

use super::compact::HotMessage;

/// How many ids of deleted messages a channel remembers, so a late gateway echo of a message
/// the bot already deleted doesn't bring it back.
const TOMBSTONES_PER_CHANNEL: usize = 256;

/// A user's names; `global_name` is the display name when set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UserEntry {
    pub(crate) username: Box<str>,
    pub(crate) global_name: Option<Box<str>>,
    pub(crate) is_bot: bool,
}

impl UserEntry {
    pub(crate) fn from_user(user: &User) -> UserEntry {
        UserEntry {
            username: user.username.as_str().into(),
            global_name: user.global_name.as_deref().map(Into::into),
            is_bot: user.is_bot,
        }
    }

    pub(crate) fn to_user(&self, id: Snowflake) -> User {
        User {
            id,
            username: self.username.to_string(),
            global_name: self.global_name.as_deref().map(str::to_owned),
            is_bot: self.is_bot,
        }
    }

    /// The name to show, as [`User::display_name`] gives it (without building the `User`).
    pub(crate) fn display_name(&self) -> &str {
        self.global_name
            .as_deref()
            .filter(|name| !name.is_empty())
            .unwrap_or(&self.username)
    }

    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(&*self.username)
            .chain(self.global_name.as_deref())
            .filter(|name| !name.is_empty())
    }
}

/// Names → ids. Every id that claims a key is remembered in claim order; the first still
/// holding it answers, so a rename or removal hands the key to the next claimant.
#[derive(Debug, Default)]
pub(crate) struct NameIndex {
    by_key: DashMap<String, Vec<Snowflake>>,
}

impl NameIndex {
    pub(crate) fn claim(&self, name: &str, id: Snowflake) {
        if name.is_empty() {
            return;
        }
        let mut ids = self.by_key.entry(normalize_name(name)).or_default();
        if !ids.contains(&id) {
            ids.push(id);
        }
    }

    pub(crate) fn release(&self, name: &str, id: Snowflake) {
        let key = normalize_name(name);
        let now_empty = match self.by_key.get_mut(&key) {
            Some(mut ids) => {
                ids.retain(|claimant| *claimant != id);
                ids.is_empty()
            }
            None => false,
        };
        if now_empty {
            self.by_key.remove_if(&key, |_, ids| ids.is_empty());
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<Snowflake> {
        self.by_key.get(key).and_then(|ids| ids.first().copied())
    }
}

/// The newest messages of one channel, by id.
#[derive(Debug, Default)]
pub(crate) struct ChannelMessages {
    pub(crate) messages: BTreeMap<u64, HotMessage>,
    deleted: BTreeSet<u64>,
}

impl ChannelMessages {
    fn remember_deleted(&mut self, id: u64) {
        self.deleted.insert(id);
        while self.deleted.len() > TOMBSTONES_PER_CHANNEL {
            self.deleted.pop_first();
        }
    }
}

/// What [`Hot::insert_message`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Inserted {
    /// Stored; `evicted` fell out of the retention window to make room.
    Stored { evicted: Option<u64> },
    /// Already stored (or deleted): nothing changed.
    Known,
    /// Older than every cached message of a full channel: retention would drop it at once.
    TooOld,
}

#[derive(Debug, Default)]
pub(crate) struct Hot {
    pub(crate) sessions: DashMap<Snowflake, Session>,
    pub(crate) users: DashMap<Snowflake, UserEntry>,
    pub(crate) roles: DashMap<Snowflake, Box<str>>,
    pub(crate) user_keys: NameIndex,
    pub(crate) role_keys: NameIndex,
    pub(crate) channel_keys: NameIndex,
    pub(crate) channels: DashMap<Snowflake, ChannelMessages>,
    /// The state of each thread whose state is known (sessions hold the rest).
    pub(crate) threads: DashMap<Snowflake, ThreadState>,
    pub(crate) messages_per_channel: usize,
    /// Bumped whenever a user, role or channel name appears, changes or goes: readable text
    /// depends on them, so what was rendered before is stale.
    pub(crate) names_revision: std::sync::atomic::AtomicU64,
}

impl Hot {
    pub(crate) fn new(messages_per_channel: usize) -> Hot {
        Hot {
            messages_per_channel,
            ..Hot::default()
        }
    }

    /// Called once a name has changed, never before: a reader that sees the new revision
    /// reads the new name (Release here, Acquire in [`Hot::names_revision`]). Bumped first, a
    /// reader could render the old name under the new revision and keep serving it.
    fn names_changed(&self) {
        self.names_revision
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// The names' revision, read before rendering with the names ([`Hot::names_changed`]).
    pub(crate) fn names_revision(&self) -> u64 {
        self.names_revision
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Stores or replaces a session; `then` runs while the session's entry is locked, so
    /// concurrent writers queue their durable writes in the order they changed memory.
    pub(crate) fn upsert_session(&self, session: Session, then: impl FnOnce(&Session)) {
        let id = session.id;
        let renamed = self
            .sessions
            .get(&id)
            .is_none_or(|old| old.name != session.name);
        {
            let mut entry = self.sessions.entry(id).or_insert_with(|| session.clone());
            if entry.name != session.name {
                self.channel_keys.release(&entry.name, id);
            }
            self.channel_keys.claim(&session.name, id);
            *entry = session;
            then(&entry);
        }
        if renamed {
            self.names_changed();
        }
    }

    pub(crate) fn remove_session(&self, id: Snowflake, then: impl FnOnce()) -> bool {
        match self.sessions.entry(id) {
            Entry::Occupied(entry) => {
                self.channel_keys.release(&entry.get().name, id);
                then();
                entry.remove();
                self.names_changed();
                true
            }
            Entry::Vacant(_) => false,
        }
    }

    pub(crate) fn upsert_user(
        &self,
        id: Snowflake,
        user: UserEntry,
        then: impl FnOnce(&UserEntry),
    ) {
        // Every message's author comes through here: only a new or renamed user is news, and
        // only news is written (an unchanged author costs a lookup, not a write per message).
        if self.users.get(&id).is_some_and(|old| *old == user) {
            return;
        }
        {
            let mut entry = self.users.entry(id).or_insert_with(|| user.clone());
            for old in entry.names() {
                if !user.names().any(|name| name == old) {
                    self.user_keys.release(old, id);
                }
            }
            for name in user.names() {
                self.user_keys.claim(name, id);
            }
            *entry = user;
            then(&entry);
        }
        self.names_changed();
    }

    pub(crate) fn upsert_role(&self, id: Snowflake, name: &str, then: impl FnOnce()) {
        let renamed = self.roles.get(&id).is_none_or(|old| &**old != name);
        {
            let mut entry = self.roles.entry(id).or_insert_with(|| name.into());
            if &**entry != name {
                self.role_keys.release(&entry, id);
                *entry = name.into();
            }
            self.role_keys.claim(name, id);
            then();
        }
        if renamed {
            self.names_changed();
        }
    }

    pub(crate) fn remove_role(&self, id: Snowflake, then: impl FnOnce()) -> bool {
        match self.roles.remove(&id) {
            Some((_, name)) => {
                self.role_keys.release(&name, id);
                then();
                self.names_changed();
                true
            }
            None => false,
        }
    }

    /// Inserts a message unless it is known; `then` runs under the channel's lock when it was
    /// stored.
    pub(crate) fn insert_message(&self, message: &Message, then: impl FnOnce()) -> Inserted {
        let cap = self.messages_per_channel;
        let mut channel = self.channels.entry(message.channel_id).or_default();
        let id = message.id.0;
        if channel.messages.contains_key(&id) || channel.deleted.contains(&id) {
            return Inserted::Known;
        }
        if cap == 0 {
            return Inserted::TooOld;
        }
        let mut evicted = None;
        if channel.messages.len() >= cap {
            match channel.messages.first_key_value() {
                Some((&oldest, _)) if oldest > id => return Inserted::TooOld,
                _ => {}
            }
            evicted = channel.messages.pop_first().map(|(oldest, _)| oldest);
        }
        channel.messages.insert(id, HotMessage::new(message));
        then();
        Inserted::Stored { evicted }
    }

    /// Loads a message read back from the backend, replacing a cached copy (no retention check:
    /// a snapshot holds the newest N already).
    pub(crate) fn load_message(&self, message: &Message) {
        self.channels
            .entry(message.channel_id)
            .or_default()
            .messages
            .insert(message.id.0, HotMessage::new(message));
    }

    /// A message another node stored or changed: replaces the cached copy, or is inserted as
    /// [`Hot::insert_message`] would (retention and tombstones apply).
    pub(crate) fn apply_remote(&self, message: &Message) {
        let replaced = self
            .with_message(message.channel_id, message.id, |hot| {
                *hot = HotMessage::new(message);
            })
            .is_some();
        if !replaced {
            self.insert_message(message, || {});
        }
    }

    pub(crate) fn load_deleted(&self, channel_id: Snowflake, id: Snowflake) {
        self.channels
            .entry(channel_id)
            .or_default()
            .remember_deleted(id.0);
    }

    /// Runs `change` on a cached message under its channel's lock; false when it isn't cached.
    pub(crate) fn with_message<R>(
        &self,
        channel_id: Snowflake,
        id: Snowflake,
        change: impl FnOnce(&mut HotMessage) -> R,
    ) -> Option<R> {
        let mut channel = self.channels.get_mut(&channel_id)?;
        channel.messages.get_mut(&id.0).map(change)
    }

    /// Removes cached messages; `then` gets the ids that were cached, under the channel's lock.
    pub(crate) fn delete_messages(
        &self,
        channel_id: Snowflake,
        ids: &[Snowflake],
        then: impl FnOnce(Vec<u64>),
    ) -> usize {
        let Some(mut channel) = self.channels.get_mut(&channel_id) else {
            return 0;
        };
        let mut removed = Vec::new();
        for id in ids {
            if channel.messages.remove(&id.0).is_some() {
                removed.push(id.0);
            }
            channel.remember_deleted(id.0);
        }
        let count = removed.len();
        if count > 0 {
            then(removed);
        }
        count
    }

    /// `read` of one cached message, under its channel's lock.
    pub(crate) fn read_message<T>(
        &self,
        channel_id: Snowflake,
        id: Snowflake,
        read: impl FnOnce(&HotMessage) -> T,
    ) -> Option<T> {
        let channel = self.channels.get(&channel_id)?;
        channel.messages.get(&id.0).map(read)
    }

    /// `read` of the newest `limit` cached messages with `after < id < before`, oldest first,
    /// under the channel's lock.
    pub(crate) fn read_messages<T>(
        &self,
        channel_id: Snowflake,
        query: MessageQuery,
        mut read: impl FnMut(Snowflake, &HotMessage) -> T,
    ) -> Vec<T> {
        let MessageQuery {
            limit,
            before,
            after,
        } = query;
        let Some(channel) = self.channels.get(&channel_id) else {
            return Vec::new();
        };
        let lower = after.map_or(0, |id| id.0.saturating_add(1));
        let upper = before.map_or(u64::MAX, |id| id.0);
        if lower >= upper || limit == 0 {
            return Vec::new();
        }
        let mut newest: Vec<T> = channel
            .messages
            .range(lower..upper)
            .rev()
            .take(limit)
            .map(|(&id, m)| read(Snowflake(id), m))
            .collect();
        newest.reverse();
        newest
    }

    /// The newest cached message id of a channel not written by `not_by`.
    pub(crate) fn newest_message_id(
        &self,
        channel_id: Snowflake,
        not_by: Option<Snowflake>,
    ) -> Option<Snowflake> {
        let channel = self.channels.get(&channel_id)?;
        channel
            .messages
            .iter()
            .rev()
            .find(|(_, m)| not_by.is_none_or(|author| m.author_id() != author.0))
            .map(|(&id, _)| Snowflake(id))
    }

    /// Drops every cached message of a channel; `then` runs when there were any.
    pub(crate) fn forget_channel(&self, channel_id: Snowflake, then: impl FnOnce(usize)) -> usize {
        let count = self
            .channels
            .remove(&channel_id)
            .map_or(0, |(_, channel)| channel.messages.len());
        then(count);
        count
    }

    /// Channels that have cached messages.
    pub(crate) fn channels_with_messages(&self) -> Vec<Snowflake> {
        self.channels
            .iter()
            .filter(|channel| !channel.messages.is_empty())
            .map(|channel| *channel.key())
            .collect()
    }

    pub(crate) fn message_count(&self) -> usize {
        self.channels
            .iter()
            .map(|channel| channel.messages.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Readers render with the names they read after the names' revision: were it bumped
    /// before the new name is in place, a reader could render the old name under the new
    /// revision and serve it until the next rename.
    #[test]
    fn the_names_revision_moves_only_once_the_new_name_is_in_place() {
        let hot = Hot::new(10);
        let user = |name: &str| {
            UserEntry::from_user(&User {
                id: Snowflake(7),
                username: "u".into(),
                global_name: Some(name.into()),
                is_bot: false,
            })
        };
        let session = |name: &str| Session {
            id: Snowflake(8),
            guild_id: None,
            parent_id: None,
            kind: switchboard_records::SessionKind::Channel,
            name: name.into(),
        };
        // `change` runs a write whose `then` calls the check it is given: the new name is in
        // place there, and the revision has not moved yet.
        let moves_after = |change: &dyn Fn(&dyn Fn())| {
            let before = hot.names_revision();
            change(&|| {
                assert_eq!(
                    hot.names_revision(),
                    before,
                    "not yet: the name is being set"
                );
            });
            assert!(hot.names_revision() > before, "a new name is news");
        };
        for rename in ["first", "second"] {
            moves_after(&|during| {
                hot.upsert_user(Snowflake(7), user(rename), |entry| {
                    assert_eq!(entry.global_name.as_deref(), Some(rename));
                    during();
                });
            });
            moves_after(&|during| hot.upsert_session(session(rename), |_| during()));
            moves_after(&|during| hot.upsert_role(Snowflake(9), rename, during));
        }
        let unchanged = hot.names_revision();
        hot.upsert_user(Snowflake(7), user("second"), |_| {});
        hot.upsert_session(session("second"), |_| {});
        hot.upsert_role(Snowflake(9), "second", || {});
        assert_eq!(
            hot.names_revision(),
            unchanged,
            "the same names are no news"
        );
    }

    #[test]
    fn a_released_name_goes_to_the_next_claimant() {
        let index = NameIndex::default();
        index.claim("Ops Room", Snowflake(1));
        index.claim("ops room", Snowflake(2));
        assert_eq!(index.get("ops-room"), Some(Snowflake(1)));
        index.release("Ops Room", Snowflake(1));
        assert_eq!(index.get("ops-room"), Some(Snowflake(2)));
        index.release("ops room", Snowflake(2));
        assert_eq!(index.get("ops-room"), None);
        assert!(index.by_key.is_empty());
    }
}
