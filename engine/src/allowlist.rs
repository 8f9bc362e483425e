//! Where the agent may act: the operator's allowlist, applied to every callable.
//!
//! A listed channel allows itself and its threads, never the channels of a category: listing
//! a category id in `allowed_channel_ids` allows nothing (an admin moving a channel into the
//! category must not widen the agent's reach). Categories are their own key,
//! `allowed_category_ids`. A listed guild allows every channel in it.

use protocol::ErrorCode;
use std::collections::HashSet;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use entity::Snowflake;
use serde_json::json;
use switchboard_config::DiscordConfig;

use crate::error::ToolError;
use crate::surface::{ChannelLocation, SessionKind, Surface, SurfaceError};

/// Channels looked up on a cache miss are remembered for this long.
const LOOKUP_TTL: Duration = Duration::from_secs(300);
/// A channel Discord does not show the bot is not asked about again for this long, so a loop
/// of bad ids cannot become a flood of invalid requests (Discord bans a bot after 10,000
/// invalid requests in 10 minutes).
const MISS_TTL: Duration = Duration::from_secs(60);
/// Most remembered lookups (hits and misses together); past it the oldest half is dropped.
const MEMO_CAPACITY: usize = 4096;

/// What one lookup found.
#[derive(Debug, Clone, Copy)]
enum Looked {
    Found(ChannelLocation),
    /// Discord answered "no such channel" (`true`) or "no access" (`false`).
    Missing {
        not_found: bool,
    },
}

/// What `[discord]` allows, as one config file says it: a reload swaps it whole.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AllowRules {
    guilds: HashSet<Snowflake>,
    channels: HashSet<Snowflake>,
    categories: HashSet<Snowflake>,
    allow_dms: bool,
}

/// The allowlist from `[discord]` (the rules in force, swapped by a reload), plus a bounded memo
/// of channels looked up on a cache miss (where channels are does not change with the config,
/// so it outlives a reload).
#[derive(Debug, Default)]
pub struct Allowlist {
    rules: crate::cell::Live<AllowRules>,
    memo: DashMap<Snowflake, (Looked, Instant)>,
}

/// Why a channel is refused, with the config key that would allow it. It names only the
/// channel the caller gave, never its guild or parent.
fn refusal(channel_id: Snowflake, location: &ChannelLocation) -> ToolError {
    let (why, fix) = match location.kind {
        SessionKind::Dm => (
            "it is a direct message and DMs are not allowed",
            "set discord.allow_dms = true".to_owned(),
        ),
        SessionKind::Thread => (
            "it is a thread of a channel that is not allowlisted",
            "add the thread's parent channel to discord.allowed_channel_ids".to_owned(),
        ),
        SessionKind::Category => (
            "it is a category, which holds no messages",
            "name one of its channels instead".to_owned(),
        ),
        SessionKind::Api => (
            "it is an API-only session, which has no Discord channel",
            "name a Discord channel instead".to_owned(),
        ),
        SessionKind::Channel | SessionKind::Forum => (
            "it is not in the allowlist",
            format!("add \"{channel_id}\" to discord.allowed_channel_ids (or its category to discord.allowed_category_ids)"),
        ),
    };
    ToolError::denied(
        ErrorCode::ChannelNotAllowed,
        format!("Channel {channel_id} is not allowed: {why}. To allow it, {fix}."),
    )
    .with_details(json!({ "channelId": channel_id.to_string() }))
}

/// Why a call may use a channel but not change it.
pub(crate) fn not_managed(channel_id: Snowflake, location: &ChannelLocation) -> ToolError {
    let message = match location.kind {
        SessionKind::Channel | SessionKind::Forum => format!(
            "Channel {channel_id} may be used but not changed: channels are renamed and deleted only where the allowlist names their guild (discord.allowed_guild_ids) or category (discord.allowed_category_ids); discord.allowed_channel_ids lets the agent use a channel, not change it"
        ),
        SessionKind::Thread => format!(
            "Session {channel_id} is a thread: surface.channels.* changes guild channels; archive a thread with surface.threads.archive"
        ),
        SessionKind::Dm => format!("Session {channel_id} is a direct message, which is no guild channel"),
        SessionKind::Category => format!("Session {channel_id} is a category: name one of its channels"),
        SessionKind::Api => format!("Session {channel_id} is an API-only session, which has no Discord channel"),
    };
    let error = if matches!(location.kind, SessionKind::Channel | SessionKind::Forum) {
        ToolError::denied(ErrorCode::ChannelNotAllowed, message)
    } else {
        ToolError::usage(ErrorCode::InvalidInput, message)
    };
    error.with_details(json!({ "channelId": channel_id.to_string(), "field": "sessionId" }))
}

/// Why a channel may not be created where a call asked.
pub(crate) fn not_creatable(guild: Snowflake, category: Option<Snowflake>) -> ToolError {
    let place = match category {
        Some(category) => format!("under category {category} of guild {guild}"),
        None => format!("in guild {guild}"),
    };
    ToolError::denied(
        ErrorCode::ChannelNotAllowed,
        format!(
            "Creating a channel {place} is not allowed: channels are created only in a guild listed in discord.allowed_guild_ids or under a category listed in discord.allowed_category_ids (discord.allowed_channel_ids lets the agent use channels, not make them)"
        ),
    )
    .with_details(json!({
        "guildId": guild.to_string(),
        "parentId": category.map(|c| c.to_string()),
    }))
}

fn unknown_channel(channel_id: Snowflake) -> ToolError {
    ToolError::not_found(
        ErrorCode::UnknownChannel,
        format!(
            "Channel {channel_id} is unknown: Discord has no such channel, or the bot cannot see it"
        ),
    )
    .with_details(json!({ "channelId": channel_id.to_string() }))
}

/// A lookup's answer as the caller sees it: the location, or why there is none.
fn found_or_missing(channel_id: Snowflake, looked: Looked) -> Result<ChannelLocation, ToolError> {
    match looked {
        Looked::Found(location) => Ok(location),
        Looked::Missing { not_found: true } => Err(unknown_channel(channel_id)),
        Looked::Missing { not_found: false } => Err(ToolError::denied(
            ErrorCode::ChannelNotAllowed,
            format!("Channel {channel_id} is not allowed: the bot cannot see it."),
        )
        .with_details(json!({ "channelId": channel_id.to_string() }))),
    }
}

impl AllowRules {
    /// The rules `[discord]` configures (`allowed_guild_ids`, `allowed_channel_ids`,
    /// `allowed_category_ids`, `allow_dms`).
    pub fn new(config: &DiscordConfig) -> Self {
        AllowRules {
            guilds: config.allowed_guild_ids.iter().copied().collect(),
            channels: config.allowed_channel_ids.iter().copied().collect(),
            categories: config.allowed_category_ids.iter().copied().collect(),
            allow_dms: config.allow_dms,
        }
    }

    /// Whether a channel at `location` is allowed: a DM with `allow_dms`; a channel listed
    /// itself, in a listed category, or in a listed guild; a thread listed itself, of an
    /// allowed channel, or in a listed guild. `category` is the category the channel (for a
    /// thread: its parent channel) sits in, when known. A category itself is never a session.
    pub fn allows(
        &self,
        channel_id: Snowflake,
        location: &ChannelLocation,
        category: Option<Snowflake>,
    ) -> bool {
        let in_guild = location.guild_id.is_some_and(|g| self.guilds.contains(&g));
        let in_category = category.is_some_and(|c| self.categories.contains(&c));
        match location.kind {
            SessionKind::Dm => self.allow_dms,
            SessionKind::Category | SessionKind::Api => false,
            SessionKind::Thread => {
                self.channels.contains(&channel_id)
                    || location
                        .parent_channel_id
                        .is_some_and(|parent| self.channels.contains(&parent))
                    || in_category
                    || in_guild
            }
            SessionKind::Channel | SessionKind::Forum => {
                self.channels.contains(&channel_id) || in_category || in_guild
            }
        }
    }

    /// [`AllowRules::allows`] from what a session cache knows (no lookups): `session` answers
    /// a channel's location when the cache has it. Unknown channels are not allowed.
    pub fn allows_cached(
        &self,
        channel_id: Snowflake,
        session: impl Fn(Snowflake) -> Option<ChannelLocation>,
    ) -> bool {
        match session(channel_id) {
            Some(location) => {
                let category = self.category_of(&location, &session);
                self.allows(channel_id, &location, category)
            }
            None => false,
        }
    }

    /// The category a channel sits in (for a thread: its parent's), when categories matter.
    fn category_of(
        &self,
        location: &ChannelLocation,
        session: impl Fn(Snowflake) -> Option<ChannelLocation>,
    ) -> Option<Snowflake> {
        if self.categories.is_empty() {
            return None;
        }
        match location.kind {
            SessionKind::Thread => location
                .parent_channel_id
                .and_then(&session)
                .and_then(|parent| parent.parent_channel_id),
            SessionKind::Channel | SessionKind::Forum => location.parent_channel_id,
            SessionKind::Dm | SessionKind::Category | SessionKind::Api => None,
        }
    }

    /// Whether a call may change a channel itself (rename it, delete it): a guild channel (not
    /// a thread, DM or category) in a listed guild or a listed category. Listing the channel in
    /// `allowed_channel_ids` lets the agent use it, not change it.
    pub fn manages(&self, location: &ChannelLocation) -> bool {
        matches!(location.kind, SessionKind::Channel | SessionKind::Forum)
            && (location.guild_id.is_some_and(|g| self.guilds.contains(&g))
                || location
                    .parent_channel_id
                    .is_some_and(|c| self.categories.contains(&c)))
    }

    /// Whether a channel may be created in `guild`, under `category` when given: the guild is
    /// listed, or the category is.
    pub fn allows_creating(&self, guild: Snowflake, category: Option<Snowflake>) -> bool {
        self.guilds.contains(&guild) || category.is_some_and(|c| self.categories.contains(&c))
    }

    /// Every listed channel, category and guild is empty and DMs are off: nothing is allowed.
    pub fn is_empty(&self) -> bool {
        self.guilds.is_empty()
            && self.channels.is_empty()
            && self.categories.is_empty()
            && !self.allow_dms
    }

    /// Whether `id` is written in `allowed_channel_ids` (to warn when it names a category).
    pub fn lists_channel(&self, id: Snowflake) -> bool {
        self.channels.contains(&id)
    }
}

impl Allowlist {
    /// The allowlist `[discord]` configures, with nothing looked up yet.
    pub fn new(config: &DiscordConfig) -> Self {
        Allowlist::with_rules(AllowRules::new(config))
    }

    /// An allowlist applying `rules`, with nothing looked up yet.
    pub fn with_rules(rules: AllowRules) -> Self {
        Allowlist {
            rules: crate::cell::Live::new(rules),
            memo: DashMap::new(),
        }
    }

    /// The rules in force now.
    pub fn rules(&self) -> std::sync::Arc<AllowRules> {
        self.rules.load()
    }

    /// Puts reloaded rules in force for the next check.
    pub(crate) fn set_rules(&self, rules: std::sync::Arc<AllowRules>) {
        self.rules.store(rules);
    }

    /// [`AllowRules::allows_cached`] with the rules in force now.
    pub fn allows_cached(
        &self,
        channel_id: Snowflake,
        session: impl Fn(Snowflake) -> Option<ChannelLocation>,
    ) -> bool {
        self.rules.load().allows_cached(channel_id, session)
    }

    /// Where a channel is: the surface's cache, else the memo, else one `channel_info` lookup
    /// (remembered, including "no such channel", for a while).
    pub async fn locate(
        &self,
        surface: &dyn Surface,
        channel_id: Snowflake,
    ) -> Result<ChannelLocation, ToolError> {
        if let Some(info) = surface.session(channel_id) {
            return Ok(ChannelLocation::from(&info));
        }
        let now = Instant::now();
        if let Some(entry) = self.memo.get(&channel_id) {
            let (looked, at) = *entry.value();
            let ttl = match looked {
                Looked::Found(_) => LOOKUP_TTL,
                Looked::Missing { .. } => MISS_TTL,
            };
            if now.duration_since(at) < ttl {
                return found_or_missing(channel_id, looked);
            }
        }
        let looked = match surface.channel_info(channel_id).await {
            Ok(location) => Looked::Found(location),
            Err(SurfaceError::NotFound(_)) => Looked::Missing { not_found: true },
            Err(SurfaceError::Denied(_)) => Looked::Missing { not_found: false },
            Err(other) => return Err(ToolError::from(other)),
        };
        self.remember(channel_id, looked, now);
        found_or_missing(channel_id, looked)
    }

    fn remember(&self, channel_id: Snowflake, looked: Looked, now: Instant) {
        if self.memo.len() >= MEMO_CAPACITY {
            self.memo.retain(|_, (looked, at)| {
                let ttl = match looked {
                    Looked::Found(_) => LOOKUP_TTL,
                    Looked::Missing { .. } => MISS_TTL,
                };
                now.duration_since(*at) < ttl
            });
            if self.memo.len() >= MEMO_CAPACITY {
                // Still full of fresh entries: forget the older half.
                let mut ages: Vec<Instant> = self.memo.iter().map(|e| e.value().1).collect();
                ages.sort_unstable();
                let cutoff = ages[ages.len() / 2];
                self.memo.retain(|_, (_, at)| *at > cutoff);
            }
        }
        self.memo.insert(channel_id, (looked, now));
    }

    /// Refuses a channel that is not allowed; the refusal names the key that would allow it.
    pub async fn check(
        &self,
        surface: &dyn Surface,
        channel_id: Snowflake,
    ) -> Result<ChannelLocation, ToolError> {
        self.check_with(&self.rules.load(), surface, channel_id)
            .await
    }

    /// [`Allowlist::check`] with `rules`: the ones a call started with.
    pub async fn check_with(
        &self,
        rules: &AllowRules,
        surface: &dyn Surface,
        channel_id: Snowflake,
    ) -> Result<ChannelLocation, ToolError> {
        if rules.is_empty() {
            return Err(ToolError::denied(
                ErrorCode::AllowlistEmpty,
                format!("Channel {channel_id} is not allowed: the allowlist is empty, so every channel is denied. Add ids to discord.allowed_channel_ids or discord.allowed_guild_ids."),
            ));
        }
        let location = self.locate(surface, channel_id).await?;
        let category = if rules.categories.is_empty() {
            None
        } else {
            match location.kind {
                SessionKind::Thread => match location.parent_channel_id {
                    Some(parent) => self
                        .locate(surface, parent)
                        .await
                        .ok()
                        .and_then(|p| p.parent_channel_id),
                    None => None,
                },
                _ => rules.category_of(&location, |_| None),
            }
        };
        if rules.allows(channel_id, &location, category) {
            Ok(location)
        } else {
            Err(refusal(channel_id, &location))
        }
    }

    /// Whether nothing is allowed under the rules in force now.
    pub fn is_empty(&self) -> bool {
        self.rules.load().is_empty()
    }

    /// Whether `id` is written in `allowed_channel_ids` under the rules in force now.
    pub fn lists_channel(&self, id: Snowflake) -> bool {
        self.rules.load().lists_channel(id)
    }

    /// How many lookups are remembered (for tests and metrics).
    pub fn remembered(&self) -> usize {
        self.memo.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUILD: Snowflake = Snowflake(1000000000000000200);
    const CATEGORY: Snowflake = Snowflake(1000000000000000600);
    const IN_CATEGORY: Snowflake = Snowflake(1000000000000000601);
    const THREAD_IN_CATEGORY: Snowflake = Snowflake(1000000000000000602);

    fn allowlist(channels: &[Snowflake], categories: &[Snowflake]) -> Allowlist {
        Allowlist::with_rules(AllowRules {
            channels: channels.iter().copied().collect(),
            categories: categories.iter().copied().collect(),
            ..AllowRules::default()
        })
    }

    fn location(kind: SessionKind, parent: Option<Snowflake>) -> ChannelLocation {
        ChannelLocation {
            guild_id: Some(GUILD),
            parent_channel_id: parent,
            kind,
        }
    }

    fn cache(id: Snowflake) -> Option<ChannelLocation> {
        match id {
            CATEGORY => Some(location(SessionKind::Category, None)),
            IN_CATEGORY => Some(location(SessionKind::Channel, Some(CATEGORY))),
            THREAD_IN_CATEGORY => Some(location(SessionKind::Thread, Some(IN_CATEGORY))),
            _ => None,
        }
    }

    #[test]
    fn a_category_in_the_channel_list_allows_none_of_its_channels() {
        let list = allowlist(&[CATEGORY], &[]);
        assert!(!list.allows_cached(IN_CATEGORY, cache));
        assert!(!list.allows_cached(THREAD_IN_CATEGORY, cache));
        assert!(!list.allows_cached(CATEGORY, cache));
    }

    #[test]
    fn an_allowed_category_allows_its_channels_and_their_threads() {
        let list = allowlist(&[], &[CATEGORY]);
        assert!(list.allows_cached(IN_CATEGORY, cache));
        assert!(list.allows_cached(THREAD_IN_CATEGORY, cache));
        assert!(!list.allows_cached(CATEGORY, cache));
    }

    #[test]
    fn a_listed_channel_allows_itself_and_its_threads_only() {
        let list = allowlist(&[IN_CATEGORY], &[]);
        assert!(list.allows_cached(IN_CATEGORY, cache));
        assert!(list.allows_cached(THREAD_IN_CATEGORY, cache));
        assert!(!list.allows_cached(Snowflake(1000000000000000699), cache));
    }

    #[test]
    fn refusals_name_only_the_channel_given() {
        for (channel, kind, parent, hidden) in [
            (
                THREAD_IN_CATEGORY,
                SessionKind::Thread,
                IN_CATEGORY,
                [IN_CATEGORY, GUILD],
            ),
            (
                IN_CATEGORY,
                SessionKind::Channel,
                CATEGORY,
                [CATEGORY, GUILD],
            ),
        ] {
            let error = refusal(channel, &location(kind, Some(parent)));
            for hidden in hidden {
                assert!(
                    !error.message.contains(&hidden.to_string()),
                    "{}",
                    error.message
                );
            }
            assert!(
                error.message.contains(&channel.to_string()),
                "{}",
                error.message
            );
        }
    }

    #[test]
    fn the_memo_stays_bounded() {
        let list = allowlist(&[IN_CATEGORY], &[]);
        let now = Instant::now();
        for i in 0..(MEMO_CAPACITY as u64 * 3) {
            list.remember(
                Snowflake(1000000000000000000 + i),
                Looked::Missing { not_found: true },
                now + Duration::from_micros(i),
            );
        }
        assert!(list.remembered() <= MEMO_CAPACITY, "{}", list.remembered());
    }
}
