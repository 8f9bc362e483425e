//! Discord JSON objects (users, members, roles, channels, guilds, messages, events) built from
//! the world and the store. Shapes follow what serenity 0.12's model types require; the
//! `serenity_parses_everything` test pins them.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::snowflake::{rfc3339, Snowflake};
use crate::state::{Channel, Emoji, Interaction, Store, StoredMessage};
use crate::world::{channel_type, World};

/// Permission bits the fake uses.
pub mod permissions {
    pub const CREATE_INSTANT_INVITE: u64 = 1 << 0;
    pub const ADD_REACTIONS: u64 = 1 << 6;
    pub const VIEW_CHANNEL: u64 = 1 << 10;
    pub const SEND_MESSAGES: u64 = 1 << 11;
    pub const MANAGE_MESSAGES: u64 = 1 << 13;
    pub const EMBED_LINKS: u64 = 1 << 14;
    pub const ATTACH_FILES: u64 = 1 << 15;
    pub const READ_MESSAGE_HISTORY: u64 = 1 << 16;
    pub const USE_EXTERNAL_EMOJIS: u64 = 1 << 18;
    pub const CHANGE_NICKNAME: u64 = 1 << 26;
    pub const USE_APPLICATION_COMMANDS: u64 = 1 << 31;
    pub const CREATE_PUBLIC_THREADS: u64 = 1 << 35;
    pub const SEND_MESSAGES_IN_THREADS: u64 = 1 << 38;

    /// What `@everyone` may do in every fake guild.
    pub const EVERYONE: u64 = CREATE_INSTANT_INVITE
        | ADD_REACTIONS
        | VIEW_CHANNEL
        | SEND_MESSAGES
        | EMBED_LINKS
        | ATTACH_FILES
        | READ_MESSAGE_HISTORY
        | USE_EXTERNAL_EMOJIS
        | CHANGE_NICKNAME
        | USE_APPLICATION_COMMANDS
        | CREATE_PUBLIC_THREADS
        | SEND_MESSAGES_IN_THREADS;
}

#[derive(Clone, Debug)]
struct UserInfo {
    username: String,
    global_name: Option<String>,
    bot: bool,
}

#[derive(Clone, Debug)]
struct MemberInfo {
    roles: Vec<Snowflake>,
    nick: Option<String>,
}

/// Lookups over the (immutable) world: users, members, guild owners.
#[derive(Clone, Debug)]
pub struct Directory {
    pub bot_id: Snowflake,
    pub application_id: Snowflake,
    users: HashMap<Snowflake, UserInfo>,
    members: HashMap<Snowflake, HashMap<Snowflake, MemberInfo>>,
    owners: HashMap<Snowflake, Snowflake>,
    /// Guild creation / member join time, for `joined_at`.
    joined_ms: u64,
}

impl Directory {
    pub fn new(world: &World, joined_ms: u64) -> Directory {
        let mut users = HashMap::new();
        users.insert(
            world.bot.id,
            UserInfo {
                username: world.bot.username.clone(),
                global_name: None,
                bot: true,
            },
        );
        for u in &world.users {
            users.insert(
                u.id,
                UserInfo {
                    username: u.username.clone(),
                    global_name: u.global_name.clone(),
                    bot: u.bot,
                },
            );
        }
        let mut members = HashMap::new();
        let mut owners = HashMap::new();
        for g in &world.guilds {
            let mut m = HashMap::new();
            m.insert(
                world.bot.id,
                MemberInfo {
                    roles: Vec::new(),
                    nick: None,
                },
            );
            match &g.members {
                Some(list) => {
                    for spec in list {
                        m.insert(
                            spec.user_id,
                            MemberInfo {
                                roles: spec.roles.clone(),
                                nick: spec.nick.clone(),
                            },
                        );
                    }
                }
                None => {
                    for u in &world.users {
                        m.insert(
                            u.id,
                            MemberInfo {
                                roles: Vec::new(),
                                nick: None,
                            },
                        );
                    }
                }
            }
            members.insert(g.id, m);
            let owner = g
                .owner_id
                .or_else(|| world.users.first().map(|u| u.id))
                .unwrap_or(world.bot.id);
            owners.insert(g.id, owner);
        }
        Directory {
            bot_id: world.bot.id,
            application_id: world.bot.application_id(),
            users,
            members,
            owners,
            joined_ms,
        }
    }

    /// Whether the user exists (the bot counts).
    pub fn has_user(&self, id: Snowflake) -> bool {
        self.users.contains_key(&id)
    }

    /// Whether the user is a member of the guild.
    pub fn is_member(&self, guild_id: Snowflake, user_id: Snowflake) -> bool {
        self.members
            .get(&guild_id)
            .is_some_and(|m| m.contains_key(&user_id))
    }

    /// A user object. Unknown ids get a placeholder name (they cannot normally occur).
    pub fn user(&self, id: Snowflake) -> Value {
        let info = self.users.get(&id);
        json!({
            "id": id,
            "username": info.map_or("unknown-user", |u| u.username.as_str()),
            "global_name": info.and_then(|u| u.global_name.clone()),
            "discriminator": "0",
            "avatar": null,
            "bot": info.is_some_and(|u| u.bot),
            "public_flags": 0,
            "flags": 0,
            "primary_guild": null,
        })
    }

    /// The bot's own user, as `/users/@me` and READY carry it.
    pub fn current_user(&self) -> Value {
        let mut user = self.user(self.bot_id);
        user["verified"] = json!(true);
        user["mfa_enabled"] = json!(false);
        user["flags"] = json!(0);
        user["email"] = Value::Null;
        user["locale"] = json!("en-US");
        user
    }

    /// A guild member; with `with_user` it carries the user object (GUILD_CREATE,
    /// interactions), without it is the partial member of MESSAGE_CREATE.
    pub fn member(&self, guild_id: Snowflake, user_id: Snowflake, with_user: bool) -> Value {
        let info = self.members.get(&guild_id).and_then(|m| m.get(&user_id));
        let mut member = json!({
            "roles": info.map(|i| i.roles.clone()).unwrap_or_default(),
            "nick": info.and_then(|i| i.nick.clone()),
            "avatar": null,
            "joined_at": rfc3339(self.joined_ms),
            "premium_since": null,
            "deaf": false,
            "mute": false,
            "flags": 0,
            "pending": false,
        });
        if with_user {
            member["user"] = self.user(user_id);
        }
        member
    }

    /// The members of a guild, with users.
    pub fn guild_members(&self, guild_id: Snowflake) -> Vec<Value> {
        let mut ids: Vec<Snowflake> = self
            .members
            .get(&guild_id)
            .map(|m| m.keys().copied().collect())
            .unwrap_or_default();
        ids.sort();
        ids.into_iter()
            .map(|id| self.member(guild_id, id, true))
            .collect()
    }

    /// The guild's owner.
    pub fn owner(&self, guild_id: Snowflake) -> Snowflake {
        self.owners.get(&guild_id).copied().unwrap_or(self.bot_id)
    }

    /// The bot's effective permissions in a channel (as interactions' `app_permissions`).
    pub fn bot_permissions(&self, channel: &Channel) -> u64 {
        if channel.guild_id.is_none() {
            return permissions::EVERYONE;
        }
        let (allow, deny) = bot_overwrite(channel);
        (permissions::EVERYONE & !deny) | allow
    }
}

fn bot_overwrite(channel: &Channel) -> (u64, u64) {
    let mut allow = 0;
    let mut deny = 0;
    if channel.bot_can_manage_messages {
        allow |= permissions::MANAGE_MESSAGES;
    }
    if !channel.bot_can_see {
        deny |= permissions::VIEW_CHANNEL;
    }
    if !channel.bot_can_send {
        deny |= permissions::SEND_MESSAGES | permissions::SEND_MESSAGES_IN_THREADS;
    }
    (allow, deny)
}

/// A role object.
pub fn role(id: Snowflake, name: &str, permissions: u64, position: usize) -> Value {
    json!({
        "id": id,
        "name": name,
        "color": 0,
        "colors": { "primary_color": 0, "secondary_color": null, "tertiary_color": null },
        "hoist": false,
        "icon": null,
        "unicode_emoji": null,
        "managed": false,
        "mentionable": false,
        "permissions": permissions.to_string(),
        "position": position,
        "flags": 0,
    })
}

/// A channel, thread or DM object.
pub fn channel(dir: &Directory, channel: &Channel) -> Value {
    if channel.kind == channel_type::DM {
        let recipient = channel.recipient_id.unwrap_or(dir.bot_id);
        return json!({
            "id": channel.id,
            "type": channel.kind,
            "last_message_id": channel.last_message_id,
            "recipients": [dir.user(recipient)],
            "flags": 0,
        });
    }
    let mut value = json!({
        "id": channel.id,
        "type": channel.kind,
        "guild_id": channel.guild_id,
        "name": channel.name,
        "parent_id": channel.parent_id,
        "last_message_id": channel.last_message_id,
        "flags": 0,
    });
    if channel_type::is_thread(channel.kind) {
        value["owner_id"] = json!(channel
            .owner_id
            .or_else(|| channel.guild_id.map(|g| dir.owner(g))));
        value["rate_limit_per_user"] = json!(0);
        value["message_count"] = json!(channel.message_count);
        value["total_message_sent"] = json!(channel.message_count);
        value["member_count"] = json!(channel.members.len().min(50));
        value["thread_metadata"] = json!({
            "archived": channel.archived,
            "auto_archive_duration": channel.auto_archive_minutes,
            "archive_timestamp": rfc3339(channel.archive_ms),
            "locked": channel.locked,
            "create_timestamp": rfc3339(channel.created_ms),
        });
    } else {
        let (allow, deny) = bot_overwrite(channel);
        let overwrites = if allow == 0 && deny == 0 {
            json!([])
        } else {
            json!([{ "id": dir.bot_id, "type": 1, "allow": allow.to_string(), "deny": deny.to_string() }])
        };
        value["position"] = json!(channel.position);
        value["permission_overwrites"] = overwrites;
        value["topic"] = json!(channel.topic);
        value["nsfw"] = json!(false);
        value["rate_limit_per_user"] = json!(0);
    }
    value
}

/// A thread member object (`ThreadMemberResponse`).
pub fn thread_member(thread: Snowflake, user: Snowflake, joined_ms: u64) -> Value {
    json!({
        "id": thread,
        "user_id": user,
        "join_timestamp": rfc3339(joined_ms),
        "flags": 0,
    })
}

/// The GUILD_CREATE payload for one guild: channels, visible threads, roles, members.
pub fn guild_create(
    world: &World,
    dir: &Directory,
    store: &Store,
    guild_id: Snowflake,
) -> Option<Value> {
    let guild = world.guilds.iter().find(|g| g.id == guild_id)?;
    let mut roles = vec![role(guild.id, "@everyone", permissions::EVERYONE, 0)];
    for (i, r) in guild.roles.iter().enumerate() {
        roles.push(role(r.id, &r.name, r.permissions, i + 1));
    }
    let mut channels = Vec::new();
    let mut threads = Vec::new();
    let mut held: Vec<&Channel> = store
        .channels
        .values()
        .filter(|c| c.guild_id == Some(guild.id))
        .collect();
    held.sort_by_key(|c| (c.position, c.id));
    for c in held {
        if channel_type::is_thread(c.kind) {
            if store.bot_can_see(c) && !c.archived {
                threads.push(channel(dir, c));
            }
        } else {
            channels.push(channel(dir, c));
        }
    }
    let members = dir.guild_members(guild.id);
    Some(json!({
        "id": guild.id,
        "name": guild.name,
        "icon": null,
        "splash": null,
        "discovery_splash": null,
        "owner_id": dir.owner(guild.id),
        "afk_channel_id": null,
        "afk_timeout": 300,
        "verification_level": 0,
        "default_message_notifications": 0,
        "explicit_content_filter": 0,
        "roles": roles,
        "emojis": guild.emojis.iter().map(|e| json!({
            "id": e.id,
            "name": e.name,
            "roles": [],
            "require_colons": true,
            "managed": false,
            "animated": false,
            "available": true,
        })).collect::<Vec<_>>(),
        "features": [],
        "mfa_level": 0,
        "application_id": null,
        "system_channel_id": null,
        "system_channel_flags": 0,
        "rules_channel_id": null,
        "max_members": 500000,
        "vanity_url_code": null,
        "description": null,
        "banner": null,
        "premium_tier": 0,
        "premium_subscription_count": 0,
        "preferred_locale": "en-US",
        "public_updates_channel_id": null,
        "nsfw_level": 0,
        "stickers": [],
        "premium_progress_bar_enabled": false,
        "joined_at": rfc3339(dir.joined_ms),
        "large": false,
        "unavailable": false,
        "member_count": members.len(),
        "voice_states": [],
        "members": members,
        "channels": channels,
        "threads": threads,
        "presences": [],
        "stage_instances": [],
        "guild_scheduled_events": [],
    }))
}

/// The READY payload for a session holding `guild_ids` (announced unavailable; a
/// GUILD_CREATE per guild follows).
pub fn ready(
    dir: &Directory,
    guild_ids: &[Snowflake],
    session_id: &str,
    resume_url: &str,
    shard: Option<[u32; 2]>,
) -> Value {
    let guilds: Vec<Value> = guild_ids
        .iter()
        .map(|id| json!({ "id": id, "unavailable": true }))
        .collect();
    let mut ready = json!({
        "v": 10,
        "user": dir.current_user(),
        "guilds": guilds,
        "session_id": session_id,
        "session_type": "normal",
        "resume_gateway_url": resume_url,
        "private_channels": [],
        "relationships": [],
        "user_settings": {},
        "application": { "id": dir.application_id, "flags": 0 },
    });
    // Discord echoes `shard` only to a bot that sent one.
    if let Some(shard) = shard {
        ready["shard"] = json!(shard);
    }
    ready
}

fn reaction_summary(
    store_reactions: &[crate::state::ReactionEntry],
    bot_id: Snowflake,
) -> Vec<Value> {
    store_reactions
        .iter()
        .filter(|r| !r.users.is_empty())
        .map(|r| {
            json!({
                "count": r.users.len(),
                "count_details": { "burst": 0, "normal": r.users.len() },
                "me": r.users.contains(&bot_id),
                "me_burst": false,
                "burst_colors": [],
                "emoji": emoji(&r.emoji),
            })
        })
        .collect()
}

/// An emoji object.
pub fn emoji(e: &Emoji) -> Value {
    json!({ "id": e.id, "name": e.name })
}

/// A message object. `gateway` adds `guild_id` and the author's partial `member`, which
/// Discord sends on the gateway but not in REST answers.
pub fn message(dir: &Directory, store: &Store, m: &StoredMessage, gateway: bool) -> Value {
    let mut value = message_body(dir, m);
    if let Some(r) = m.reference {
        value["message_reference"] = json!({
            "type": 0,
            "message_id": r.message_id,
            "channel_id": r.channel_id,
            "guild_id": r.guild_id,
        });
        value["referenced_message"] = store
            .message(r.channel_id, r.message_id)
            .map(|parent| message_body(dir, parent))
            .unwrap_or(Value::Null);
    }
    if gateway {
        if let Some(guild_id) = m.guild_id {
            value["guild_id"] = json!(guild_id);
            if m.webhook_id.is_none() {
                value["member"] = dir.member(guild_id, m.author_id, false);
            }
        }
    }
    value
}

fn message_body(dir: &Directory, m: &StoredMessage) -> Value {
    let mentions: Vec<Value> = m.mentions.iter().map(|id| dir.user(*id)).collect();
    let mut value = json!({
        "id": m.id,
        "channel_id": m.channel_id,
        "author": dir.user(m.author_id),
        "content": m.content,
        "timestamp": rfc3339(m.id.timestamp_ms()),
        "edited_timestamp": m.edited_ms.map(rfc3339),
        "tts": m.tts,
        "mention_everyone": m.mention_everyone,
        "mentions": mentions,
        "mention_roles": m.mention_roles,
        "attachments": m.attachments,
        "embeds": m.embeds,
        "components": m.components,
        "pinned": m.pinned,
        "type": m.kind,
        "flags": m.flags,
    });
    let reactions = reaction_summary(&m.reactions, dir.bot_id);
    if !reactions.is_empty() {
        value["reactions"] = json!(reactions);
    }
    if let Some(nonce) = &m.nonce {
        value["nonce"] = nonce.clone();
    }
    if let Some(webhook_id) = m.webhook_id {
        value["webhook_id"] = json!(webhook_id);
    }
    if let Some(application_id) = m.application_id {
        value["application_id"] = json!(application_id);
    }
    if let Some(meta) = &m.interaction {
        value["interaction_metadata"] = json!({
            "id": meta.id,
            "type": 2,
            "name": meta.name,
            "user": dir.user(meta.user_id),
            "authorizing_integration_owners": {},
        });
        value["interaction"] = json!({
            "id": meta.id,
            "type": 2,
            "name": meta.name,
            "user": dir.user(meta.user_id),
        });
    }
    value
}

/// MESSAGE_DELETE.
pub fn message_delete(id: Snowflake, channel: &Channel) -> Value {
    let mut v = json!({ "id": id, "channel_id": channel.id });
    if let Some(g) = channel.guild_id {
        v["guild_id"] = json!(g);
    }
    v
}

/// MESSAGE_DELETE_BULK.
pub fn message_delete_bulk(ids: &[Snowflake], channel: &Channel) -> Value {
    let mut v = json!({ "ids": ids, "channel_id": channel.id });
    if let Some(g) = channel.guild_id {
        v["guild_id"] = json!(g);
    }
    v
}

/// MESSAGE_REACTION_ADD (`add`) or MESSAGE_REACTION_REMOVE.
pub fn reaction_event(
    dir: &Directory,
    channel: &Channel,
    message: &StoredMessage,
    user_id: Snowflake,
    e: &Emoji,
    add: bool,
) -> Value {
    let mut v = json!({
        "user_id": user_id,
        "channel_id": channel.id,
        "message_id": message.id,
        "emoji": emoji(e),
        "burst": false,
        "type": 0,
    });
    if add {
        v["message_author_id"] = json!(message.author_id);
        v["burst_colors"] = json!([]);
    }
    if let Some(g) = channel.guild_id {
        v["guild_id"] = json!(g);
        if add {
            v["member"] = dir.member(g, user_id, true);
        }
    }
    v
}

/// TYPING_START.
pub fn typing_start(
    dir: &Directory,
    channel: &Channel,
    user_id: Snowflake,
    unix_secs: u64,
) -> Value {
    let mut v = json!({
        "channel_id": channel.id,
        "user_id": user_id,
        "timestamp": unix_secs,
    });
    if let Some(g) = channel.guild_id {
        v["guild_id"] = json!(g);
        v["member"] = dir.member(g, user_id, true);
    }
    v
}

/// THREAD_DELETE.
pub fn thread_delete(channel: &Channel) -> Value {
    json!({
        "id": channel.id,
        "guild_id": channel.guild_id,
        "parent_id": channel.parent_id,
        "type": channel.kind,
    })
}

/// INTERACTION_CREATE for a slash command.
pub fn interaction_create(
    dir: &Directory,
    channel: &Channel,
    interaction: &Interaction,
    command_id: &str,
    options: &Value,
) -> Value {
    let mut v = interaction_base(dir, channel, interaction, 2);
    v["data"] = json!({
        "id": command_id,
        "name": interaction.command_name,
        "type": 1,
        "options": options,
    });
    v
}

/// INTERACTION_CREATE for a button click (type 3, MESSAGE_COMPONENT).
pub fn component_interaction_create(
    dir: &Directory,
    channel: &Channel,
    interaction: &Interaction,
    message: Value,
) -> Value {
    let custom_id = interaction
        .component
        .as_ref()
        .map(|(_, custom_id)| custom_id.clone())
        .unwrap_or_default();
    let mut v = interaction_base(dir, channel, interaction, 3);
    v["message"] = message;
    v["data"] = json!({ "custom_id": custom_id, "component_type": 2 });
    v
}

/// What every INTERACTION_CREATE of `kind` carries: the ids, the channel, and who acted (a
/// guild member with their permissions, or in a DM the user).
fn interaction_base(
    dir: &Directory,
    channel: &Channel,
    interaction: &Interaction,
    kind: u8,
) -> Value {
    let mut v = json!({
        "id": interaction.id,
        "application_id": dir.application_id,
        "type": kind,
        "token": interaction.token,
        "version": 1,
        "locale": "en-US",
        "entitlements": [],
        "attachment_size_limit": 26_214_400,
        "authorizing_integration_owners": { "0": interaction.guild_id.unwrap_or(dir.bot_id) },
        "app_permissions": dir.bot_permissions(channel).to_string(),
        "channel_id": channel.id,
        "channel": channel_partial(channel),
    });
    match interaction.guild_id {
        Some(g) => {
            v["guild_id"] = json!(g);
            v["guild_locale"] = json!("en-US");
            v["context"] = json!(0);
            let mut member = dir.member(g, interaction.user_id, true);
            member["permissions"] = json!(permissions::EVERYONE.to_string());
            v["member"] = member;
        }
        None => {
            v["context"] = json!(1);
            v["user"] = dir.user(interaction.user_id);
        }
    }
    v
}

fn channel_partial(channel: &Channel) -> Value {
    let mut v = json!({ "id": channel.id, "type": channel.kind });
    if channel.guild_id.is_some() {
        v["name"] = json!(channel.name);
        v["parent_id"] = json!(channel.parent_id);
    }
    v
}

/// A registered application command as Discord echoes it back.
pub fn command(
    dir: &Directory,
    id: Snowflake,
    guild_id: Option<Snowflake>,
    body: &serde_json::Map<String, Value>,
) -> Value {
    let mut v = json!({
        "id": id,
        "application_id": dir.application_id,
        "version": id,
        "type": body.get("type").cloned().unwrap_or(json!(1)),
        "name": body.get("name").cloned().unwrap_or(json!("")),
        "description": body.get("description").cloned().unwrap_or(json!("")),
        "options": body.get("options").cloned().unwrap_or(json!([])),
        "default_member_permissions": body.get("default_member_permissions").cloned().unwrap_or(Value::Null),
        "nsfw": body.get("nsfw").cloned().unwrap_or(json!(false)),
        "integration_types": body.get("integration_types").cloned().unwrap_or(json!([0])),
        "contexts": body.get("contexts").cloned().unwrap_or(Value::Null),
    });
    for key in ["name_localizations", "description_localizations"] {
        if let Some(x) = body.get(key) {
            v[key] = x.clone();
        }
    }
    if let Some(g) = guild_id {
        v["guild_id"] = json!(g);
    }
    v
}

/// `GET /oauth2/applications/@me`.
pub fn application(dir: &Directory, world: &World) -> Value {
    let owner = world.users.first().map(|u| u.id).unwrap_or(dir.bot_id);
    json!({
        "id": dir.application_id,
        "name": world.bot.username,
        "icon": null,
        "description": "switchboard (fake Discord)",
        "rpc_origins": [],
        "bot_public": false,
        "bot_require_code_grant": false,
        "owner": dir.user(owner),
        "verify_key": "0000000000000000000000000000000000000000000000000000000000000000",
        "team": null,
        "flags": 0,
        "bot": dir.current_user(),
        "integration_types_config": {},
    })
}
