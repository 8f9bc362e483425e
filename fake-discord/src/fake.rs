//! The operations behind the control API, shared by its HTTP routes and the in-process
//! methods of [`crate::FakeDiscord`]: acting as users, changing channels, invoking slash
//! commands, faults and counters.

use std::sync::atomic::Ordering;

use axum::body::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::attachments::{self, Upload, MAX_FILENAME_BYTES, MAX_FILES};
use crate::control::ControlError;
use crate::hub::GatewayFault;
use crate::payloads;
use crate::shared::{ChannelChange, NewMessage, Shared};
use crate::snowflake::{now_ms, Snowflake};
use crate::state::{Channel, Emoji, Interaction, RestFaultState};
use crate::validation;
use crate::world::channel_type;

/// A message posted as a user (`POST /_fake/messages`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UserMessage {
    /// Where to post: any channel, thread or DM of the world, the bot's hidden ones included (the
    /// bot then gets no event, as on Discord).
    pub channel_id: Snowflake,
    /// Who posts it: a member of the channel's guild, or the DM's recipient (409 for anyone else,
    /// 404 for an id that is not a user of the world).
    pub author_id: Snowflake,
    /// May be empty (or absent in JSON) when the message has attachments.
    #[serde(default)]
    pub content: String,
    /// The message this one replies to (same channel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<Snowflake>,
    /// Files attached to the message (at most 10, each within the upload limit); they appear
    /// in the message's `attachments` and are served at their `url`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<NewAttachment>,
}

/// A file a user attaches to a message. In JSON:
/// `{"filename": "...", "content_base64": "...", "content_type"?: "..."}`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NewAttachment {
    /// Stored verbatim, odd names included (`../../etc/passwd`); 1 to 1024 bytes.
    pub filename: String,
    /// The bytes (standard base64 in JSON).
    #[serde(rename = "content_base64", with = "crate::attachments::base64_serde")]
    pub content: Vec<u8>,
    /// The media type; guessed from the filename's extension when absent
    /// (`application/octet-stream` if that fails too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
}

impl NewAttachment {
    /// An attachment whose media type is guessed from `filename`.
    pub fn new(filename: impl Into<String>, content: impl Into<Vec<u8>>) -> NewAttachment {
        NewAttachment {
            filename: filename.into(),
            content: content.into(),
            content_type: None,
        }
    }
}

/// A channel or thread to create (`POST /_fake/channels`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NewChannel {
    /// The guild to create it in; it must be in the world (404 otherwise).
    pub guild_id: Snowflake,
    /// Its name, 1 to 100 characters.
    pub name: String,
    /// Discord's channel type (JSON `type`, default 0: text), one a world file may use. A thread
    /// type (10, 11, 12) needs `parent_id`.
    #[serde(rename = "type", default)]
    pub kind: u8,
    /// For a thread, the text, announcement or forum channel it lives in (required); for a channel,
    /// its category.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<Snowflake>,
    /// Its topic, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// Whether the bot has VIEW_CHANNEL here (default true); a hidden channel sends the bot no
    /// events and answers its REST calls 50001.
    #[serde(default = "yes")]
    pub bot_can_see: bool,
    /// Whether the bot may post here (default true); if not, its sends answer 50013.
    #[serde(default = "yes")]
    pub bot_can_send: bool,
    /// Whether the bot has MANAGE_MESSAGES here (default false), needed to delete others' messages
    /// and to bulk-delete.
    #[serde(default)]
    pub bot_can_manage_messages: bool,
}

fn yes() -> bool {
    true
}

/// Changes to a channel or thread (`PATCH /_fake/channels/{id}`); absent fields stay.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ChannelPatch {
    /// A new name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A new topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// Archives (true) or unarchives a thread; the bot's sends to an archived one answer 50083.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived: Option<bool>,
    /// Locks (true) or unlocks a thread, as a moderator would: the bot cannot unarchive a
    /// locked thread (50013), and its sends answer 50083 while it is archived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked: Option<bool>,
    /// Shows the channel to the bot, or hides it: a channel being hidden sends one last
    /// CHANNEL_UPDATE (or THREAD_UPDATE), then no events, and the bot's REST calls answer 50001.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot_can_see: Option<bool>,
    /// Grants or revokes the bot's right to post here (without it, sends answer 50013).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot_can_send: Option<bool>,
    /// Grants or revokes the bot's MANAGE_MESSAGES here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot_can_manage_messages: Option<bool>,
}

/// A slash-command invocation (`POST /_fake/interactions`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SlashCommand {
    /// The channel, thread or DM the command is invoked in.
    pub channel_id: Snowflake,
    /// Who invokes it: a member of the channel's guild, or the DM's recipient (409 for anyone else,
    /// 404 for an id that is not a user of the world).
    pub user_id: Snowflake,
    /// The command name; it must have been registered by the bot.
    pub name: String,
    /// Discord's `data.options` array, e.g. `[{"name":"text","type":3,"value":"hi"}]`.
    #[serde(default = "empty_array")]
    pub options: Value,
}

/// A button click (`POST /_fake/components`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ComponentClick {
    /// The message the button is on.
    pub message_id: Snowflake,
    /// Who clicks: a member of the channel's guild, or the DM's recipient.
    pub user_id: Snowflake,
    /// The button's `custom_id`; it must be on the message and not disabled.
    pub custom_id: String,
}

fn empty_array() -> Value {
    json!([])
}

/// A fault to inject (`POST /_fake/faults`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// A REST fault, queued for the next matching requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rest: Option<RestFault>,
    /// A gateway fault, applied at once to every open connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<GatewayFaultKind>,
    /// Closes the next handshakes (IDENTIFY or RESUME) instead of answering them, as Discord
    /// does to a client it refuses on every attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshakes: Option<HandshakeFault>,
}

/// The next `count` IDENTIFYs or RESUMEs are answered by closing the socket with `close`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HandshakeFault {
    /// The gateway close code, 4000 to 4999.
    pub close: u16,
    /// How many handshakes in a row: 1 to 1,000 (default 1).
    #[serde(default = "one")]
    pub count: u32,
}

/// The next `count` REST requests (optionally only those whose path contains
/// `path_contains`) answer `status`; a 429 carries `retry_after` seconds.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RestFault {
    /// The HTTP status to answer, 400 to 599. A 429 comes with Discord's rate-limit body and
    /// headers; any other status with a plain `{"code": 0}` body. Faults are answered before the
    /// token is checked.
    pub status: u16,
    /// How many matching requests get the fault: 1 to 100,000 (default 1).
    #[serde(default = "one")]
    pub count: u32,
    /// Seconds a 429 tells the client to wait: 0 to 3,600 (default 1). Other statuses ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<f64>,
    /// Only requests whose path contains this text (such as `/messages`; paths start with
    /// `/api/v10`) get the fault; absent, every REST request does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_contains: Option<String>,
}

fn one() -> u32 {
    1
}

/// A gateway fault applied to every open connection.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum GatewayFaultKind {
    /// Close the socket without a close frame.
    Drop,
    /// Send op 7 RECONNECT.
    Reconnect,
    /// Send op 9 INVALID_SESSION (not resumable).
    InvalidSession,
    /// Close the socket with a gateway close code, 4000 to 4999 (`{"close": 4014}`), with
    /// Discord's reason for it: 4004 authentication failed, 4012 invalid API version, 4013
    /// invalid intents, 4014 disallowed intents, ...
    Close(u16),
}

/// Counters (`GET /_fake/state`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FakeState {
    /// Gateway connections ever opened.
    pub connections: u64,
    /// Gateway connections open now.
    pub connections_open: u64,
    /// IDENTIFYs answered with READY.
    pub sessions_identified: u64,
    /// RESUMEs answered with RESUMED.
    pub sessions_resumed: u64,
    /// Dispatch frames sent or queued (READY and GUILD_CREATE included).
    pub dispatches_sent: u64,
    /// Messages held, all channels.
    pub messages_held: u64,
    /// REST requests in the log.
    pub requests_logged: u64,
}

pub(crate) fn check_user(s: &Shared, user_id: Snowflake) -> Result<(), ControlError> {
    if s.dir.has_user(user_id) {
        Ok(())
    } else {
        Err(ControlError::NotFound(format!(
            "user {user_id} is not in the world"
        )))
    }
}

fn known_channel(s: &Shared, channel_id: Snowflake) -> Result<Channel, ControlError> {
    s.lock()
        .channels
        .get(&channel_id)
        .cloned()
        .ok_or_else(|| ControlError::NotFound(format!("channel {channel_id} does not exist")))
}

/// Whether `user_id` may act in `channel` (a guild member, or a DM's recipient).
fn check_presence(s: &Shared, channel: &Channel, user_id: Snowflake) -> Result<(), ControlError> {
    check_user(s, user_id)?;
    let ok = match channel.guild_id {
        Some(g) => s.dir.is_member(g, user_id),
        None => channel.recipient_id == Some(user_id) || user_id == s.dir.bot_id,
    };
    if ok {
        Ok(())
    } else {
        Err(ControlError::Conflict(format!(
            "user {user_id} cannot post in channel {} (not a member of its guild or DM)",
            channel.id
        )))
    }
}

/// Checks control-API attachments as Discord checks uploads.
fn uploads(s: &Shared, attachments: Vec<NewAttachment>) -> Result<Vec<Upload>, ControlError> {
    if attachments.len() > MAX_FILES {
        return Err(ControlError::BadBody(format!(
            "attachments: at most {MAX_FILES} per message, got {}",
            attachments.len()
        )));
    }
    let mut uploads = Vec::with_capacity(attachments.len());
    for (index, a) in attachments.into_iter().enumerate() {
        if !attachments::filename_ok(&a.filename) {
            return Err(ControlError::BadBody(format!(
                "attachments[{index}].filename must be 1 to {MAX_FILENAME_BYTES} bytes"
            )));
        }
        if let Some(ct) = a.content_type.as_deref() {
            if !attachments::is_media_type(ct) {
                return Err(ControlError::BadBody(format!(
                    "attachments[{index}].content_type `{ct}` is not a media type (like text/plain)"
                )));
            }
        }
        uploads.push(Upload {
            index,
            filename: a.filename,
            content_type: a.content_type,
            content: Bytes::from(a.content),
        });
    }
    attachments::check_sizes(&uploads, s.max_upload_bytes)?;
    Ok(uploads)
}

pub(crate) fn post_message(s: &Shared, m: UserMessage) -> Result<Value, ControlError> {
    let channel = known_channel(s, m.channel_id)?;
    check_presence(s, &channel, m.author_id)?;
    let uploads = uploads(s, m.attachments)?;
    let mut body = json!({ "content": m.content });
    if let Some(reply_to) = m.reply_to {
        body["message_reference"] = json!({ "message_id": reply_to });
    }
    let draft = validation::message_create_with_files(&body, uploads)?;
    Ok(s.create_message(NewMessage {
        author_id: m.author_id,
        channel_id: m.channel_id,
        draft,
        as_bot_over_rest: false,
        webhook_id: None,
        interaction: None,
    })?)
}

pub(crate) fn edit_message(
    s: &Shared,
    channel_id: Snowflake,
    message_id: Snowflake,
    content: String,
) -> Result<Value, ControlError> {
    let draft = validation::message_edit(&json!({ "content": content }))?;
    Ok(s.edit_message(channel_id, message_id, draft, false)?)
}

pub(crate) fn react(
    s: &Shared,
    channel_id: Snowflake,
    message_id: Snowflake,
    user_id: Snowflake,
    emoji: &str,
    add: bool,
) -> Result<(), ControlError> {
    check_user(s, user_id)?;
    let emoji = Emoji::parse(emoji)?;
    Ok(s.react(channel_id, message_id, user_id, &emoji, add)?)
}

pub(crate) fn create_channel(s: &Shared, c: NewChannel) -> Result<Value, ControlError> {
    if !s.world.guilds.iter().any(|g| g.id == c.guild_id) {
        return Err(ControlError::NotFound(format!(
            "guild {} does not exist",
            c.guild_id
        )));
    }
    if !channel_type::is_guild_kind(c.kind) {
        return Err(ControlError::BadBody(format!(
            "type {} is not a guild channel type",
            c.kind
        )));
    }
    if c.name.is_empty() || c.name.chars().count() > 100 {
        return Err(ControlError::BadBody(
            "name must be 1 to 100 characters".to_string(),
        ));
    }
    let mut store = s.lock();
    let parent = match c.parent_id {
        Some(p) => Some(
            store
                .channels
                .get(&p)
                .filter(|ch| ch.guild_id == Some(c.guild_id))
                .cloned()
                .ok_or_else(|| {
                    ControlError::NotFound(format!(
                        "parent {p} is not a channel of guild {}",
                        c.guild_id
                    ))
                })?,
        ),
        None => None,
    };
    let thread = channel_type::is_thread(c.kind);
    match (&parent, thread) {
        (None, true) => {
            return Err(ControlError::BadBody(
                "a thread needs parent_id".to_string(),
            ))
        }
        (Some(p), true) if !matches!(p.kind, 0 | 5 | 15) => {
            return Err(ControlError::BadBody(format!(
                "channel {} cannot hold threads",
                p.id
            )))
        }
        (Some(p), false) if p.kind != channel_type::GUILD_CATEGORY => {
            return Err(ControlError::BadBody(format!(
                "parent {} is not a category",
                p.id
            )))
        }
        _ => {}
    }
    let id = s.ids.next();
    let position = store
        .channels
        .values()
        .filter(|ch| ch.guild_id == Some(c.guild_id))
        .count() as u16;
    let channel = Channel {
        topic: c.topic,
        bot_can_see: c.bot_can_see,
        bot_can_send: c.bot_can_send,
        bot_can_manage_messages: c.bot_can_manage_messages,
        ..crate::state::guild_channel(
            id,
            c.guild_id,
            c.name,
            c.kind,
            c.parent_id,
            position,
            now_ms(),
        )
    };
    store.channels.insert(id, channel.clone());
    s.publish_channel_event(&store, &channel, ChannelChange::Created, false);
    Ok(payloads::channel(&s.dir, &channel))
}

pub(crate) fn update_channel(
    s: &Shared,
    channel_id: Snowflake,
    p: ChannelPatch,
) -> Result<Value, ControlError> {
    let mut store = s.lock();
    let Some(before) = store.channels.get(&channel_id).cloned() else {
        return Err(ControlError::NotFound(format!(
            "channel {channel_id} does not exist"
        )));
    };
    if before.guild_id.is_none() {
        return Err(ControlError::Conflict(
            "DM channels cannot be changed".to_string(),
        ));
    }
    let was_visible = store.bot_can_see(&before);
    let mut after = before;
    if let Some(name) = p.name {
        after.name = name;
    }
    if let Some(topic) = p.topic {
        after.topic = Some(topic);
    }
    if let Some(archived) = p.archived {
        if archived != after.archived {
            after.archive_ms = now_ms();
        }
        after.archived = archived;
    }
    if let Some(locked) = p.locked {
        after.locked = locked;
    }
    if let Some(v) = p.bot_can_see {
        after.bot_can_see = v;
    }
    if let Some(v) = p.bot_can_send {
        after.bot_can_send = v;
    }
    if let Some(v) = p.bot_can_manage_messages {
        after.bot_can_manage_messages = v;
    }
    store.channels.insert(channel_id, after.clone());
    s.publish_channel_event(&store, &after, ChannelChange::Updated, was_visible);
    Ok(payloads::channel(&s.dir, &after))
}

pub(crate) fn delete_channel(s: &Shared, channel_id: Snowflake) -> Result<(), ControlError> {
    let mut store = s.lock();
    let Some(channel) = store.channels.get(&channel_id).cloned() else {
        return Err(ControlError::NotFound(format!(
            "channel {channel_id} does not exist"
        )));
    };
    if channel.guild_id.is_none() {
        return Err(ControlError::Conflict(
            "DM channels cannot be deleted".to_string(),
        ));
    }
    crate::rest::channels::remove_channel(s, &mut store, &channel);
    Ok(())
}

pub(crate) fn channel_messages(
    s: &Shared,
    channel_id: Snowflake,
) -> Result<Vec<Value>, ControlError> {
    let store = s.lock();
    if !store.channels.contains_key(&channel_id) {
        return Err(ControlError::NotFound(format!(
            "channel {channel_id} does not exist"
        )));
    }
    Ok(store
        .channel_messages(channel_id)
        .map(|m| payloads::message(&s.dir, &store, m, false))
        .collect())
}

pub(crate) fn invoke_command(s: &Shared, c: SlashCommand) -> Result<Value, ControlError> {
    let channel = known_channel(s, c.channel_id)?;
    check_presence(s, &channel, c.user_id)?;
    if !c.options.is_array() {
        return Err(ControlError::BadBody(
            "options must be an array".to_string(),
        ));
    }
    let store = s.lock();
    if !store.command_registered(&c.name, channel.guild_id) {
        return Err(ControlError::Conflict(format!(
            "command `/{}` is not registered globally or for this guild; the bot must register it first (PUT /applications/{}/commands)",
            c.name, s.dir.application_id
        )));
    }
    let command_id = store
        .command_id(&c.name, channel.guild_id)
        .unwrap_or_default();
    drop(store);
    Ok(create_interaction(
        s,
        &channel,
        c.user_id,
        c.name,
        None,
        |interaction| {
            payloads::interaction_create(&s.dir, &channel, interaction, &command_id, &c.options)
        },
    ))
}

/// Holds a new interaction by `user_id` in `channel` (a slash command's `command_name`, or a
/// button's `component`), dispatches INTERACTION_CREATE with the payload `payload` makes of
/// it, and answers its id and token, as Discord does.
fn create_interaction(
    s: &Shared,
    channel: &Channel,
    user_id: Snowflake,
    command_name: String,
    component: Option<(Snowflake, String)>,
    payload: impl FnOnce(&Interaction) -> Value,
) -> Value {
    let id = s.ids.next();
    let interaction = Interaction {
        id,
        token: format!("fake-interaction-token-{id}"),
        channel_id: channel.id,
        guild_id: channel.guild_id,
        user_id,
        command_name,
        component,
        response: None,
        original_message: None,
        followups: Vec::new(),
    };
    let d = payload(&interaction);
    let answer = json!({
        "id": id,
        "token": interaction.token,
        "application_id": s.dir.application_id,
    });
    let mut store = s.lock();
    store.insert_interaction(interaction);
    s.publish("INTERACTION_CREATE", &d, None, channel.guild_id);
    answer
}

/// Whether the message's components hold an enabled button with `custom_id`.
fn has_enabled_button(components: &[Value], custom_id: &str) -> Option<bool> {
    components
        .iter()
        .filter_map(|row| row.get("components").and_then(Value::as_array))
        .flatten()
        .find(|button| button.get("custom_id").and_then(Value::as_str) == Some(custom_id))
        .map(|button| {
            !button
                .get("disabled")
                .and_then(Value::as_bool)
                .unwrap_or(false)
        })
}

/// Clicks a button: dispatches INTERACTION_CREATE (type 3, MESSAGE_COMPONENT) to the bot and
/// answers the interaction's id and token, as Discord does when a user clicks.
pub(crate) fn click_component(s: &Shared, c: ComponentClick) -> Result<Value, ControlError> {
    let (channel, message) = {
        let store = s.lock();
        let found = store.messages.iter().find_map(|(channel_id, messages)| {
            messages
                .get(&c.message_id)
                .map(|m| (*channel_id, m.clone()))
        });
        let Some((channel_id, message)) = found else {
            return Err(ControlError::NotFound(format!(
                "message {} does not exist",
                c.message_id
            )));
        };
        let channel = store.channels.get(&channel_id).cloned().ok_or_else(|| {
            ControlError::NotFound(format!("channel {channel_id} does not exist"))
        })?;
        (channel, message)
    };
    check_presence(s, &channel, c.user_id)?;
    match has_enabled_button(&message.components, &c.custom_id) {
        Some(true) => {}
        Some(false) => {
            return Err(ControlError::Conflict(format!(
                "the button `{}` is disabled; Discord does not let anyone click it",
                c.custom_id
            )))
        }
        None => {
            return Err(ControlError::NotFound(format!(
                "message {} has no button with custom_id `{}`",
                c.message_id, c.custom_id
            )))
        }
    }
    let component = Some((c.message_id, c.custom_id));
    Ok(create_interaction(
        s,
        &channel,
        c.user_id,
        String::new(),
        component,
        |interaction| {
            let store = s.lock();
            let message = payloads::message(&s.dir, &store, &message, false);
            payloads::component_interaction_create(&s.dir, &channel, interaction, message)
        },
    ))
}

pub(crate) fn interaction(s: &Shared, interaction_id: Snowflake) -> Result<Value, ControlError> {
    let store = s.lock();
    let i = store.interactions.get(&interaction_id).ok_or_else(|| {
        ControlError::NotFound(format!("interaction {interaction_id} is not held"))
    })?;
    let message = |id: Snowflake| {
        store
            .message(i.channel_id, id)
            .map(|m| payloads::message(&s.dir, &store, m, false))
            .unwrap_or(Value::Null)
    };
    Ok(json!({
        "id": i.id,
        "token": i.token,
        "name": i.command_name,
        "type": if i.component.is_some() { 3 } else { 2 },
        "message_id": i.component.as_ref().map(|(message, _)| *message),
        "custom_id": i.component.as_ref().map(|(_, custom_id)| custom_id.clone()),
        "channel_id": i.channel_id,
        "user_id": i.user_id,
        "response": i.response,
        "original_message": i.original_message.map(message),
        "followups": i.followups.iter().map(|id| message(*id)).collect::<Vec<_>>(),
    }))
}

pub(crate) fn commands(s: &Shared) -> Value {
    let store = s.lock();
    let guilds: serde_json::Map<String, Value> = store
        .guild_commands
        .iter()
        .map(|(g, cmds)| (g.to_string(), Value::Array(cmds.clone())))
        .collect();
    json!({ "global": store.global_commands, "guilds": guilds })
}

pub(crate) fn inject_fault(s: &Shared, fault: Fault) -> Result<usize, ControlError> {
    if fault.rest.is_none() && fault.gateway.is_none() && fault.handshakes.is_none() {
        return Err(ControlError::BadBody(
            "give `rest` ({\"status\",\"count\",\"retry_after\"}), `gateway` (\"drop\", \"reconnect\", \"invalid_session\", {\"close\": 4000..4999}) or `handshakes` ({\"close\": 4000..4999, \"count\"})"
                .to_string(),
        ));
    }
    if let Some(handshakes) = fault.handshakes {
        if !(4000..=4999).contains(&handshakes.close) {
            return Err(ControlError::BadBody(format!(
                "handshakes.close must be a gateway close code from 4000 to 4999, not {}",
                handshakes.close
            )));
        }
        if !(1..=1_000).contains(&handshakes.count) {
            return Err(ControlError::BadBody(
                "handshakes.count must be 1..=1000".to_string(),
            ));
        }
    }
    // Checked before anything is queued, so a refused fault leaves no half behind.
    let gateway = match fault.gateway {
        None => None,
        Some(GatewayFaultKind::Drop) => Some(GatewayFault::Drop),
        Some(GatewayFaultKind::Reconnect) => Some(GatewayFault::Reconnect),
        Some(GatewayFaultKind::InvalidSession) => Some(GatewayFault::InvalidSession),
        Some(GatewayFaultKind::Close(code)) if (4000..=4999).contains(&code) => {
            Some(GatewayFault::Close(code))
        }
        Some(GatewayFaultKind::Close(code)) => {
            return Err(ControlError::BadBody(format!(
                "gateway.close must be a gateway close code from 4000 to 4999, not {code}"
            )))
        }
    };
    if let Some(rest) = fault.rest {
        if !(400..=599).contains(&rest.status) {
            return Err(ControlError::BadBody(
                "rest.status must be 400..=599".to_string(),
            ));
        }
        if !(1..=100_000).contains(&rest.count) {
            return Err(ControlError::BadBody(
                "rest.count must be 1..=100000".to_string(),
            ));
        }
        let retry_after = rest.retry_after.unwrap_or(1.0);
        if !retry_after.is_finite() || !(0.0..=3600.0).contains(&retry_after) {
            return Err(ControlError::BadBody(
                "rest.retry_after must be 0..=3600 seconds".to_string(),
            ));
        }
        s.lock().rest_faults.push_back(RestFaultState {
            status: rest.status,
            remaining: rest.count,
            retry_after,
            path_contains: rest.path_contains,
        });
    }
    if let Some(handshakes) = fault.handshakes {
        s.lock().handshake_fault = Some((handshakes.close, handshakes.count));
    }
    let mut affected = 0;
    if let Some(fault) = gateway {
        affected = s.hub.inject(fault);
    }
    Ok(affected)
}

pub(crate) fn state(s: &Shared) -> FakeState {
    let (open, _) = s.hub.sizes();
    let store = s.lock();
    let c = &s.hub.counters;
    FakeState {
        connections: c.connections.load(Ordering::Relaxed),
        connections_open: open as u64,
        sessions_identified: c.identified.load(Ordering::Relaxed),
        sessions_resumed: c.resumed.load(Ordering::Relaxed),
        dispatches_sent: c.dispatches.load(Ordering::Relaxed),
        messages_held: store.message_total() as u64,
        requests_logged: store.requests.len() as u64,
    }
}

/// Which gateway connections to close.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CloseTarget {
    /// One connection, by id.
    Connection(u64),
    /// Every connection whose session is on this shard id.
    Shard(u32),
}

/// Closes gateway connections with a close code (4000 to 4999), or drops them without a
/// close frame (`None`); returns how many. An unknown connection is a 404.
pub(crate) fn close_connections(
    s: &Shared,
    target: CloseTarget,
    code: Option<u16>,
) -> Result<usize, ControlError> {
    if let Some(code) = code.filter(|c| !(4000..=4999).contains(c)) {
        return Err(ControlError::BadBody(format!(
            "code must be a gateway close code from 4000 to 4999, not {code} (leave it out to drop the connection without a close frame)"
        )));
    }
    match target {
        CloseTarget::Connection(id) => {
            if s.hub.close_connection(id, code) {
                Ok(1)
            } else {
                Err(ControlError::NotFound(format!(
                    "gateway connection {id} is not open (GET /_fake/gateway/connections lists them)"
                )))
            }
        }
        CloseTarget::Shard(shard_id) => Ok(s.hub.close_shard(shard_id, code)),
    }
}
