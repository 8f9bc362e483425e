//! The demo world, written once: the guild, users, role, channels, threads and DM that the
//! fake Discord serves (`fake_discord::World::demo`), that the test kit seeds a memory store
//! with (`switchboard_testkit::platform::seed_demo_world`), and that
//! the configs of the tool server's tests (`switchboard_testkit::testing::DEMO_CONFIG`), of
//! `switchboard playground` and of the end-to-end tests name.
//!
//! Plain data with no dependencies: ids as constants, the world as `&'static` slices of small
//! structs, and the alias sections every demo config shares ([`alias_sections`]). Each user
//! builds its own representation from it.
//!
//! | what | id | notes |
//! |---|---|---|
//! | bot `switchboard` | 1000000000000000001 | also the application id |
//! | user `stanley` ("Stanley") | 1000000000000000101 | member of Lab with role `oncall`; guild owner (the fake's default: the first user) |
//! | user `tomas` ("Tomas") | 1000000000000000102 | member of Lab |
//! | guild `Lab` | 1000000000000000200 | `@everyone` role has the guild's id |
//! | role `oncall` | 1000000000000000301 | |
//! | `#ops` (text) | 1000000000000000401 | topic "Operations chatter"; bot may also manage messages here |
//! | `#release-room` (text) | 1000000000000000402 | |
//! | `#secret` (text) | 1000000000000000403 | the bot may not send here |
//! | `#random` (text) | 1000000000000000404 | |
//! | thread `incident-42` (public) | 1000000000000000411 | under `#ops` |
//! | thread `off-topic-thread` (public) | 1000000000000000412 | under `#random` |
//! | DM with stanley | 1000000000000000501 | |
//!
//! ```
//! let ops = demo_world::channel(demo_world::OPS).unwrap();
//! assert_eq!((ops.name, ops.topic), ("ops", Some("Operations chatter")));
//! assert!(demo_world::alias_sections().contains("ops = \"1000000000000000401\""));
//! ```

#![warn(missing_docs)]

/// The bot user, `switchboard`; also its application id.
pub const BOT: u64 = 1000000000000000001;
/// The user `stanley` ("Stanley"), with role `oncall`.
pub const STANLEY: u64 = 1000000000000000101;
/// The user `tomas` ("Tomas").
pub const TOMAS: u64 = 1000000000000000102;
/// The guild `Lab` (also its `@everyone` role's id).
pub const GUILD: u64 = 1000000000000000200;
/// The role `oncall`.
pub const ONCALL_ROLE: u64 = 1000000000000000301;
/// `#ops`, a text channel with a topic, where the bot may also manage messages.
pub const OPS: u64 = 1000000000000000401;
/// `#release-room`, a text channel.
pub const RELEASE_ROOM: u64 = 1000000000000000402;
/// `#secret`, a text channel the bot may see but not send in.
pub const SECRET: u64 = 1000000000000000403;
/// `#random`, a text channel.
pub const RANDOM: u64 = 1000000000000000404;
/// The public thread `incident-42` under `#ops`.
pub const INCIDENT_THREAD: u64 = 1000000000000000411;
/// The public thread `off-topic-thread` under `#random`.
pub const RANDOM_THREAD: u64 = 1000000000000000412;
/// The DM channel between the bot and stanley.
pub const STANLEY_DM: u64 = 1000000000000000501;

/// The guild's custom emoji `:shipit:`.
pub const SHIPIT_EMOJI: u64 = 1000000000000000701;
/// The bot's username.
pub const BOT_USERNAME: &str = "switchboard";
/// The guild's name.
pub const GUILD_NAME: &str = "Lab";

/// A user other than the bot; every one is a member of the guild.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct User {
    /// The user id.
    pub id: u64,
    /// The unique username (`stanley`).
    pub username: &'static str,
    /// The display name (`Stanley`).
    pub global_name: Option<&'static str>,
    /// The guild roles the user has.
    pub roles: &'static [u64],
}

/// A guild role besides `@everyone`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Role {
    /// The role id.
    pub id: u64,
    /// The role name, without `@`.
    pub name: &'static str,
}

/// What a guild channel is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelKind {
    /// A text channel.
    Text,
    /// A public thread; its parent is a text channel.
    Thread,
}

/// A guild channel or thread. The bot sees every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Channel {
    /// The channel id.
    pub id: u64,
    /// The name, without `#`.
    pub name: &'static str,
    /// Text channel or thread.
    pub kind: ChannelKind,
    /// For a thread, the channel it lives in.
    pub parent: Option<u64>,
    /// The channel topic.
    pub topic: Option<&'static str>,
    /// Whether the bot may send messages here.
    pub bot_can_send: bool,
    /// Whether the bot may manage (delete others', bulk-delete) messages here.
    pub bot_can_manage_messages: bool,
}

/// A DM channel between the bot and one user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dm {
    /// The channel id.
    pub id: u64,
    /// The user at the other end.
    pub recipient: u64,
}

/// The users besides the bot, in order (the first is the guild's owner in the fake).
pub const USERS: &[User] = &[
    User {
        id: STANLEY,
        username: "stanley",
        global_name: Some("Stanley"),
        roles: &[ONCALL_ROLE],
    },
    User {
        id: TOMAS,
        username: "tomas",
        global_name: Some("Tomas"),
        roles: &[],
    },
];

/// A custom emoji of the guild.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CustomEmoji {
    /// The emoji id.
    pub id: u64,
    /// Its name, without colons.
    pub name: &'static str,
}

/// The guild's custom emoji.
pub const EMOJIS: &[CustomEmoji] = &[CustomEmoji {
    id: SHIPIT_EMOJI,
    name: "shipit",
}];

/// The guild's roles besides `@everyone`.
pub const ROLES: &[Role] = &[Role {
    id: ONCALL_ROLE,
    name: "oncall",
}];

/// A text channel the bot may send in and not manage, with no topic.
const fn text(id: u64, name: &'static str) -> Channel {
    Channel {
        id,
        name,
        kind: ChannelKind::Text,
        parent: None,
        topic: None,
        bot_can_send: true,
        bot_can_manage_messages: false,
    }
}

/// A public thread under `parent` the bot may send in.
const fn thread(id: u64, name: &'static str, parent: u64) -> Channel {
    Channel {
        kind: ChannelKind::Thread,
        parent: Some(parent),
        ..text(id, name)
    }
}

/// The guild's channels and threads, in order.
pub const CHANNELS: &[Channel] = &[
    Channel {
        topic: Some("Operations chatter"),
        bot_can_manage_messages: true,
        ..text(OPS, "ops")
    },
    text(RELEASE_ROOM, "release-room"),
    Channel {
        bot_can_send: false,
        ..text(SECRET, "secret")
    },
    text(RANDOM, "random"),
    thread(INCIDENT_THREAD, "incident-42", OPS),
    thread(RANDOM_THREAD, "off-topic-thread", RANDOM),
];

/// The bot's DM channels.
pub const DMS: &[Dm] = &[Dm {
    id: STANLEY_DM,
    recipient: STANLEY,
}];

/// The user with this id (not the bot).
pub fn user(id: u64) -> Option<&'static User> {
    USERS.iter().find(|user| user.id == id)
}

/// The channel or thread with this id (not a DM).
pub fn channel(id: u64) -> Option<&'static Channel> {
    CHANNELS.iter().find(|channel| channel.id == id)
}

/// The `[entity.users]`, `[entity.sessions]` and `[entity.roles]` sections every demo config
/// shares: users `Stanley` and `Tomas`, sessions `ops`, `release-room` (commented "release
/// coordination") and `incident-42`, role `oncall`. Ends with a newline; a config goes on
/// with its next section.
pub fn alias_sections() -> String {
    format!(
        r#"[entity.users]
Stanley = "{STANLEY}"
Tomas = "{TOMAS}"

[entity.sessions]
ops = "{OPS}"
release-room = {{ discord = "{RELEASE_ROOM}", comment = "release coordination" }}
incident-42 = "{INCIDENT_THREAD}"

[entity.roles]
oncall = "{ONCALL_ROLE}"
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_references_resolve() {
        let mut ids: Vec<u64> = [BOT, GUILD]
            .into_iter()
            .chain(USERS.iter().map(|u| u.id))
            .chain(ROLES.iter().map(|r| r.id))
            .chain(CHANNELS.iter().map(|c| c.id))
            .chain(DMS.iter().map(|d| d.id))
            .collect();
        let count = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), count);
        for user in USERS {
            assert!(user
                .roles
                .iter()
                .all(|r| ROLES.iter().any(|role| role.id == *r)));
        }
        for channel in CHANNELS {
            match channel.kind {
                ChannelKind::Text => assert_eq!(channel.parent, None),
                ChannelKind::Thread => {
                    let parent = channel.parent.and_then(self::channel).unwrap();
                    assert_eq!(parent.kind, ChannelKind::Text);
                }
            }
        }
        assert!(DMS.iter().all(|dm| user(dm.recipient).is_some()));
    }
}
