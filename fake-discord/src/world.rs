//! The world file: who the bot is, which users, guilds, channels and DMs exist, and what the bot
//! may see and send in each channel.

use std::collections::HashSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::snowflake::Snowflake;

/// Why a world could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum WorldError {
    /// The world file could not be read.
    #[error("cannot read world file {path}: {source}")]
    Read {
        /// The path as given.
        path: String,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// The text is not JSON of the world format.
    #[error("world is not valid JSON of the expected shape: {0} (see the fake_discord crate docs for the format)")]
    Parse(#[from] serde_json::Error),
    /// The JSON parsed but describes an inconsistent world.
    #[error("world is inconsistent: {0}")]
    Invalid(String),
}

/// The whole world the fake serves. Deserialized from the JSON world format.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct World {
    /// The bot user the fake's gateway and REST API act as.
    pub bot: BotSpec,
    /// Human (or other bot) users.
    #[serde(default)]
    pub users: Vec<UserSpec>,
    /// Guilds with their roles, channels and threads.
    #[serde(default)]
    pub guilds: Vec<GuildSpec>,
    /// Direct-message channels between the bot and one user.
    #[serde(default)]
    pub dms: Vec<DmSpec>,
    /// The most guilds one gateway shard may hold (default 2,500, Discord's): an IDENTIFY
    /// whose shard would hold more of this world's guilds is closed with 4011 (sharding
    /// required). At least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guilds_per_shard_max: Option<u32>,
}

/// The bot's own user.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BotSpec {
    /// The bot's user id: the author of what it sends. No user of the world may share it.
    pub id: Snowflake,
    /// The bot's username, as READY and `GET /users/@me` give it.
    pub username: String,
    /// The application id; defaults to the bot's user id (as for most real bots).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application_id: Option<Snowflake>,
    /// The only token the fake accepts (REST `Authorization: Bot <token>` and the gateway's
    /// IDENTIFY), to test a rejected token; by default any non-empty token is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl BotSpec {
    /// Whether `presented` (with or without the `Bot ` prefix) is a token this bot accepts.
    pub fn accepts_token(&self, presented: &str) -> bool {
        let presented = presented.trim_start();
        let bare = presented.strip_prefix("Bot ").unwrap_or(presented).trim();
        match &self.token {
            Some(expected) => bare == expected,
            None => !bare.is_empty(),
        }
    }

    /// The application id slash commands and interactions use.
    pub fn application_id(&self) -> Snowflake {
        self.application_id.unwrap_or(self.id)
    }
}

/// A user other than the bot.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UserSpec {
    /// The user's id, unique among the world's users and the bot.
    pub id: Snowflake,
    /// The username; must not be empty.
    pub username: String,
    /// The display name (Discord's `global_name`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_name: Option<String>,
    /// Whether this user is itself a bot (its messages carry `author.bot: true`).
    #[serde(default)]
    pub bot: bool,
}

/// A guild.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GuildSpec {
    /// The guild's id, which is also its `@everyone` role's.
    pub id: Snowflake,
    /// The guild's name.
    pub name: String,
    /// The owner; defaults to the first user of the world (never the bot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<Snowflake>,
    /// Roles besides `@everyone` (which always exists, with the guild's id).
    #[serde(default)]
    pub roles: Vec<RoleSpec>,
    /// Channels and threads. Threads name their parent with `parent_id`.
    #[serde(default)]
    pub channels: Vec<ChannelSpec>,
    /// Members besides the bot; defaults to every user of the world, with no roles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<MemberSpec>>,
    /// Whether the bot has MANAGE_CHANNELS here (default true): creating, changing and
    /// deleting the guild's channels over REST answers 50013 without it.
    #[serde(default = "yes")]
    pub bot_can_manage_channels: bool,
    /// The guild's custom emoji (the bot may react with any of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub emojis: Vec<EmojiSpec>,
}

/// A guild's custom emoji.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EmojiSpec {
    /// The emoji's id, unique in the world.
    pub id: Snowflake,
    /// Its name: 2 to 32 letters, digits or underscores.
    pub name: String,
}

/// A guild role.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RoleSpec {
    /// The role's id: unique within the guild, and not the guild's own id (`@everyone` has that).
    pub id: Snowflake,
    /// The role's name.
    pub name: String,
    /// Permission bits; defaults to none beyond `@everyone`'s.
    #[serde(default)]
    pub permissions: u64,
}

/// A guild member.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MemberSpec {
    /// Who the member is: a user of the world, not the bot (which is always a member).
    pub user_id: Snowflake,
    /// The ids of the member's roles, each a role of this guild (default none).
    #[serde(default)]
    pub roles: Vec<Snowflake>,
    /// The member's nickname in this guild, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nick: Option<String>,
}

/// A guild channel or thread.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ChannelSpec {
    /// The channel's id, unique among every channel and DM of the world.
    pub id: Snowflake,
    /// The channel's name, without `#`.
    pub name: String,
    /// Discord's channel type: 0 text, 2 voice, 4 category, 5 announcement, 10/11/12
    /// announcement/public/private thread, 15 forum.
    #[serde(rename = "type")]
    pub kind: u8,
    /// The category of a channel, or the channel a thread lives in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<Snowflake>,
    /// The channel's topic, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// Whether the bot has VIEW_CHANNEL here (a thread also needs it on its parent).
    #[serde(default = "yes")]
    pub bot_can_see: bool,
    /// Whether the bot has SEND_MESSAGES (SEND_MESSAGES_IN_THREADS for threads) here.
    #[serde(default = "yes")]
    pub bot_can_send: bool,
    /// Whether the bot has MANAGE_MESSAGES here (needed to delete others' messages and to
    /// bulk-delete). Defaults to false, as for a freshly invited bot.
    #[serde(default)]
    pub bot_can_manage_messages: bool,
    /// For threads: whether the thread is archived.
    #[serde(default)]
    pub archived: bool,
}

fn yes() -> bool {
    true
}

/// A DM channel between the bot and one user.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DmSpec {
    /// The DM channel's id, unique among every channel and DM of the world.
    pub id: Snowflake,
    /// The user on the other side: a user of the world.
    pub recipient_id: Snowflake,
}

/// Channel types, as Discord numbers them.
pub mod channel_type {
    pub const GUILD_TEXT: u8 = 0;
    pub const DM: u8 = 1;
    pub const GUILD_VOICE: u8 = 2;
    pub const GUILD_CATEGORY: u8 = 4;
    pub const GUILD_ANNOUNCEMENT: u8 = 5;
    pub const ANNOUNCEMENT_THREAD: u8 = 10;
    pub const PUBLIC_THREAD: u8 = 11;
    pub const PRIVATE_THREAD: u8 = 12;
    pub const GUILD_STAGE_VOICE: u8 = 13;
    pub const GUILD_FORUM: u8 = 15;

    /// Whether `kind` is one of the thread types.
    pub fn is_thread(kind: u8) -> bool {
        matches!(kind, ANNOUNCEMENT_THREAD | PUBLIC_THREAD | PRIVATE_THREAD)
    }

    /// Whether `kind` is a guild channel or thread type the fake knows.
    pub fn is_guild_kind(kind: u8) -> bool {
        matches!(
            kind,
            GUILD_TEXT
                | GUILD_VOICE
                | GUILD_CATEGORY
                | GUILD_ANNOUNCEMENT
                | ANNOUNCEMENT_THREAD
                | PUBLIC_THREAD
                | PRIVATE_THREAD
                | GUILD_STAGE_VOICE
                | GUILD_FORUM
        )
    }

    /// Whether messages can be posted directly in a channel of this type.
    pub fn holds_messages(kind: u8) -> bool {
        !matches!(kind, GUILD_CATEGORY | GUILD_FORUM)
    }
}

impl World {
    /// Parses and checks a world from its JSON text.
    pub fn from_json_str(text: &str) -> Result<World, WorldError> {
        let world: World = serde_json::from_str(text)?;
        world.validate()?;
        Ok(world)
    }

    /// Reads, parses and checks a world file.
    pub fn load(path: impl AsRef<Path>) -> Result<World, WorldError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| WorldError::Read {
            path: path.display().to_string(),
            source,
        })?;
        World::from_json_str(&text)
    }

    /// The built-in demo world, built from the `demo_world` crate (see its docs for the ids).
    pub fn demo() -> World {
        let channel = |c: &demo_world::Channel| ChannelSpec {
            id: Snowflake(c.id),
            name: c.name.to_owned(),
            kind: match c.kind {
                demo_world::ChannelKind::Text => channel_type::GUILD_TEXT,
                demo_world::ChannelKind::Thread => channel_type::PUBLIC_THREAD,
            },
            parent_id: c.parent.map(Snowflake),
            topic: c.topic.map(str::to_owned),
            bot_can_see: true,
            bot_can_send: c.bot_can_send,
            bot_can_manage_messages: c.bot_can_manage_messages,
            archived: false,
        };
        let users = demo_world::USERS;
        World {
            bot: BotSpec {
                id: Snowflake(demo_world::BOT),
                username: demo_world::BOT_USERNAME.to_owned(),
                application_id: None,
                token: None,
            },
            users: users
                .iter()
                .map(|u| UserSpec {
                    id: Snowflake(u.id),
                    username: u.username.to_owned(),
                    global_name: u.global_name.map(str::to_owned),
                    bot: false,
                })
                .collect(),
            guilds: vec![GuildSpec {
                id: Snowflake(demo_world::GUILD),
                name: demo_world::GUILD_NAME.to_owned(),
                owner_id: None,
                roles: demo_world::ROLES
                    .iter()
                    .map(|r| RoleSpec {
                        id: Snowflake(r.id),
                        name: r.name.to_owned(),
                        permissions: 0,
                    })
                    .collect(),
                channels: demo_world::CHANNELS.iter().map(channel).collect(),
                bot_can_manage_channels: true,
                members: Some(
                    users
                        .iter()
                        .map(|u| MemberSpec {
                            user_id: Snowflake(u.id),
                            roles: u.roles.iter().copied().map(Snowflake).collect(),
                            nick: None,
                        })
                        .collect(),
                ),
                emojis: demo_world::EMOJIS
                    .iter()
                    .map(|e| EmojiSpec {
                        id: Snowflake(e.id),
                        name: e.name.to_owned(),
                    })
                    .collect(),
            }],
            dms: demo_world::DMS
                .iter()
                .map(|dm| DmSpec {
                    id: Snowflake(dm.id),
                    recipient_id: Snowflake(dm.recipient),
                })
                .collect(),
            guilds_per_shard_max: None,
        }
    }

    /// Checks that ids are unique and every reference points at something that exists.
    pub fn validate(&self) -> Result<(), WorldError> {
        let invalid = |msg: String| Err(WorldError::Invalid(msg));
        if self.guilds_per_shard_max == Some(0) {
            return invalid("guilds_per_shard_max must be at least 1".to_string());
        }
        let mut user_ids = HashSet::new();
        user_ids.insert(self.bot.id);
        for user in &self.users {
            if !user_ids.insert(user.id) {
                return invalid(format!("user id {} is used twice", user.id));
            }
            if user.username.is_empty() {
                return invalid(format!("user {} has an empty username", user.id));
            }
        }
        let mut channel_ids = HashSet::new();
        let mut guild_ids = HashSet::new();
        let mut emoji_ids = HashSet::new();
        for guild in &self.guilds {
            if !guild_ids.insert(guild.id) {
                return invalid(format!("guild id {} is used twice", guild.id));
            }
            for emoji in &guild.emojis {
                if !emoji_ids.insert(emoji.id) {
                    return invalid(format!("emoji id {} is used twice", emoji.id));
                }
                let name_ok = (2..=32).contains(&emoji.name.len())
                    && emoji
                        .name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if !name_ok {
                    return invalid(format!(
                        "guild {}: emoji name {:?} is not 2 to 32 letters, digits or underscores",
                        guild.id, emoji.name
                    ));
                }
            }
            if let Some(owner) = guild.owner_id {
                if !user_ids.contains(&owner) {
                    return invalid(format!("guild {}: owner {owner} is not a user", guild.id));
                }
            }
            let mut role_ids = HashSet::new();
            role_ids.insert(guild.id);
            for role in &guild.roles {
                if !role_ids.insert(role.id) {
                    return invalid(format!(
                        "guild {}: role id {} is used twice (the guild id is @everyone's)",
                        guild.id, role.id
                    ));
                }
            }
            for member in guild.members.iter().flatten() {
                if !user_ids.contains(&member.user_id) || member.user_id == self.bot.id {
                    return invalid(format!(
                        "guild {}: member {} is not a user of the world (the bot is always a member)",
                        guild.id, member.user_id
                    ));
                }
                if let Some(role) = member.roles.iter().find(|r| !role_ids.contains(r)) {
                    return invalid(format!(
                        "guild {}: member {} has unknown role {role}",
                        guild.id, member.user_id
                    ));
                }
            }
            for channel in &guild.channels {
                if !channel_ids.insert(channel.id) {
                    return invalid(format!("channel id {} is used twice", channel.id));
                }
                if !channel_type::is_guild_kind(channel.kind) {
                    return invalid(format!(
                        "channel {}: type {} is not a guild channel type (0, 2, 4, 5, 10, 11, 12, 13, 15)",
                        channel.id, channel.kind
                    ));
                }
            }
            for channel in &guild.channels {
                let parent = channel
                    .parent_id
                    .and_then(|p| guild.channels.iter().find(|c| c.id == p));
                if channel_type::is_thread(channel.kind) {
                    match parent {
                        Some(p) if matches!(p.kind, 0 | 5 | 15) => {}
                        Some(p) => {
                            return invalid(format!(
                                "thread {}: parent {} has type {}, which cannot hold threads",
                                channel.id, p.id, p.kind
                            ))
                        }
                        None => {
                            return invalid(format!(
                                "thread {} needs a parent_id naming a channel of the same guild",
                                channel.id
                            ))
                        }
                    }
                } else if let Some(parent_id) = channel.parent_id {
                    match parent {
                        Some(p) if p.kind == channel_type::GUILD_CATEGORY => {}
                        _ => {
                            return invalid(format!(
                            "channel {}: parent {parent_id} is not a category of the same guild",
                            channel.id
                        ))
                        }
                    }
                }
            }
        }
        for dm in &self.dms {
            if !channel_ids.insert(dm.id) {
                return invalid(format!("channel id {} is used twice", dm.id));
            }
            if !self.users.iter().any(|u| u.id == dm.recipient_id) {
                return invalid(format!(
                    "dm {}: recipient {} is not a user of the world",
                    dm.id, dm.recipient_id
                ));
            }
        }
        Ok(())
    }

    /// The largest id appearing in the world (new ids are generated above it).
    pub fn max_id(&self) -> u64 {
        let mut max = self.bot.id.0.max(self.bot.application_id().0);
        for u in &self.users {
            max = max.max(u.id.0);
        }
        for g in &self.guilds {
            max = max.max(g.id.0);
            for r in &g.roles {
                max = max.max(r.id.0);
            }
            for c in &g.channels {
                max = max.max(c.id.0);
            }
        }
        for d in &self.dms {
            max = max.max(d.id.0);
        }
        max
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_configured_token_is_the_only_one_accepted() {
        let mut bot = World::demo().bot;
        assert!(bot.accepts_token("Bot anything"));
        assert!(!bot.accepts_token("Bot "));
        bot.token = Some("right".into());
        assert!(bot.accepts_token("Bot right"));
        assert!(bot.accepts_token("right"));
        assert!(!bot.accepts_token("Bot wrong"));
    }

    use super::*;

    const EXAMPLE: &str = r#"{
      "bot":   {"id": "1000000000000000001", "username": "switchboard"},
      "users": [{"id": "1000000000000000101", "username": "stanley", "global_name": "Stanley"}],
      "guilds": [{
        "id": "1000000000000000200", "name": "Lab",
        "roles": [{"id": "1000000000000000301", "name": "oncall"}],
        "channels": [
          {"id": "1000000000000000401", "name": "ops", "type": 0},
          {"id": "1000000000000000402", "name": "release-room", "type": 0},
          {"id": "1000000000000000403", "name": "secret", "type": 0, "bot_can_send": false},
          {"id": "1000000000000000411", "name": "incident-42", "type": 11, "parent_id": "1000000000000000401"}
        ]
      }],
      "dms": [{"id": "1000000000000000501", "recipient_id": "1000000000000000101"}]
    }"#;

    #[test]
    fn parses_the_documented_example() {
        let world = World::from_json_str(EXAMPLE).expect("example parses");
        let guild = &world.guilds[0];
        assert_eq!(guild.channels.len(), 4);
        assert!(!guild.channels[2].bot_can_send);
        assert!(guild.channels[2].bot_can_see);
        assert_eq!(
            guild.channels[3].parent_id,
            Some(Snowflake(1000000000000000401))
        );
    }

    #[test]
    fn guilds_per_shard_max_is_read_and_must_be_positive() {
        let bot = r#""bot": {"id": "1", "username": "b"}"#;
        let world = World::from_json_str(&format!("{{{bot}, \"guilds_per_shard_max\": 3}}"))
            .expect("parses");
        assert_eq!(world.guilds_per_shard_max, Some(3));
        assert_eq!(World::demo().guilds_per_shard_max, None);
        assert!(matches!(
            World::from_json_str(&format!("{{{bot}, \"guilds_per_shard_max\": 0}}")),
            Err(WorldError::Invalid(_))
        ));
        assert!(matches!(
            World::from_json_str(&format!("{{{bot}, \"guilds_per_shard_max\": -1}}")),
            Err(WorldError::Parse(_))
        ));
    }

    #[test]
    fn demo_world_is_valid_and_round_trips() {
        let demo = World::demo();
        demo.validate().expect("demo valid");
        let text = serde_json::to_string(&demo).expect("serializes");
        assert_eq!(World::from_json_str(&text).expect("parses"), demo);
    }

    #[test]
    fn garbage_is_a_parse_error() {
        assert!(matches!(
            World::from_json_str("{not json"),
            Err(WorldError::Parse(_))
        ));
        assert!(matches!(
            World::from_json_str(r#"{"bot":{"id":"x","username":"b"}}"#),
            Err(WorldError::Parse(_))
        ));
        assert!(matches!(
            World::from_json_str(r#"{"bot":{"id":"1","username":"b"},"userz":[]}"#),
            Err(WorldError::Parse(_))
        ));
    }

    #[test]
    fn thread_without_parent_is_invalid() {
        let text = EXAMPLE.replace(r#", "parent_id": "1000000000000000401""#, "");
        let err = World::from_json_str(&text).expect_err("must fail");
        assert!(err.to_string().contains("parent_id"), "{err}");
    }

    #[test]
    fn dm_with_unknown_recipient_is_invalid() {
        let text = EXAMPLE.replace(
            r#""recipient_id": "1000000000000000101""#,
            r#""recipient_id": "42""#,
        );
        assert!(matches!(
            World::from_json_str(&text),
            Err(WorldError::Invalid(_))
        ));
    }

    #[test]
    fn missing_file_is_a_read_error() {
        assert!(matches!(
            World::load("/nonexistent/world.json"),
            Err(WorldError::Read { .. })
        ));
    }
}
