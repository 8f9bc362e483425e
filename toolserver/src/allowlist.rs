//! Where the agent may act: the operator's allowlist, applied to every callable.

use std::collections::HashSet;

use dashmap::DashMap;
use entity::Snowflake;
use serde_json::json;
use switchboard_config::DiscordConfig;

use crate::error::ToolError;
use crate::surface::{ChannelLocation, SessionKind, Surface, SurfaceError};

/// The allowlist from `[discord]`, plus a memo of channel locations looked up on a cache miss.
#[derive(Debug, Default)]
pub struct Allowlist {
    guilds: HashSet<Snowflake>,
    channels: HashSet<Snowflake>,
    allow_dms: bool,
    looked_up: DashMap<Snowflake, ChannelLocation>,
}

/// Why a location is refused, with the config key that would allow it.
fn refusal(channel_id: Snowflake, location: &ChannelLocation) -> ToolError {
    let (why, fix) = match (location.kind, location.parent_channel_id, location.guild_id) {
        (SessionKind::Dm, _, _) => (
            "it is a direct message and DMs are not allowed".to_owned(),
            "set discord.allow_dms = true".to_owned(),
        ),
        (SessionKind::Thread, Some(parent), Some(guild)) => (
            format!("it is a thread of channel {parent}, which is not allowlisted"),
            format!("add \"{parent}\" (the parent channel) to discord.allowed_channel_ids, or \"{guild}\" to discord.allowed_guild_ids"),
        ),
        (_, _, Some(guild)) => (
            "it is not in the allowlist".to_owned(),
            format!("add \"{channel_id}\" to discord.allowed_channel_ids, or \"{guild}\" to discord.allowed_guild_ids"),
        ),
        _ => (
            "it is not in the allowlist".to_owned(),
            format!("add \"{channel_id}\" to discord.allowed_channel_ids"),
        ),
    };
    ToolError::denied(
        "channel_not_allowed",
        format!("Channel {channel_id} is not allowed: {why}. To allow it, {fix}."),
    )
    .with_details(json!({ "channelId": channel_id.to_string() }))
}

impl Allowlist {
    pub fn new(config: &DiscordConfig) -> Self {
        Allowlist {
            guilds: config.allowed_guild_ids.iter().copied().collect(),
            channels: config.allowed_channel_ids.iter().copied().collect(),
            allow_dms: config.allow_dms,
            looked_up: DashMap::new(),
        }
    }

    /// Whether a channel at `location` is allowed: listed itself, a thread of a listed channel,
    /// in a listed guild, or a DM with `allow_dms`.
    pub fn allows(&self, channel_id: Snowflake, location: &ChannelLocation) -> bool {
        if location.kind == SessionKind::Dm {
            return self.allow_dms;
        }
        self.channels.contains(&channel_id)
            || location
                .parent_channel_id
                .is_some_and(|parent| self.channels.contains(&parent))
            || location.guild_id.is_some_and(|g| self.guilds.contains(&g))
    }

    /// Where a channel is: the surface's cache, else the memo, else one `channel_info` lookup.
    pub async fn locate(
        &self,
        surface: &dyn Surface,
        channel_id: Snowflake,
    ) -> Result<ChannelLocation, ToolError> {
        if let Some(info) = surface.session(channel_id) {
            return Ok(ChannelLocation::from(&info));
        }
        if let Some(known) = self.looked_up.get(&channel_id) {
            return Ok(*known);
        }
        let location = surface
            .channel_info(channel_id)
            .await
            .map_err(|error| match error {
                SurfaceError::NotFound(_) => ToolError::not_found(
                    "unknown_channel",
                    format!(
                        "Channel {channel_id} is unknown: Discord has no such channel, or the bot cannot see it"
                    ),
                ),
                other => ToolError::from(other),
            })?;
        self.looked_up.insert(channel_id, location);
        Ok(location)
    }

    /// Refuses a channel that is not allowed; the refusal names the key that would allow it.
    pub async fn check(
        &self,
        surface: &dyn Surface,
        channel_id: Snowflake,
    ) -> Result<ChannelLocation, ToolError> {
        if self.guilds.is_empty() && self.channels.is_empty() && !self.allow_dms {
            return Err(ToolError::denied(
                "allowlist_empty",
                format!("Channel {channel_id} is not allowed: the allowlist is empty, so every channel is denied. Add ids to discord.allowed_channel_ids or discord.allowed_guild_ids."),
            ));
        }
        let location = self.locate(surface, channel_id).await?;
        if self.allows(channel_id, &location) {
            Ok(location)
        } else {
            Err(refusal(channel_id, &location))
        }
    }

    /// Every listed channel and guild is empty and DMs are off: nothing is allowed.
    pub fn is_empty(&self) -> bool {
        self.guilds.is_empty() && self.channels.is_empty() && !self.allow_dms
    }
}
