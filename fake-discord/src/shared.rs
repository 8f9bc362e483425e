//! The state every handler shares, and the operations REST and the control API both use
//! (create/edit/delete messages, reactions, typing, channel changes), each of which updates
//! the store and publishes the matching gateway dispatch.

use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{json, Value};

use crate::api_error::{ApiError, FormErrors};
use crate::attachments;
use crate::hub::{intents, Dispatch, Hub};
use crate::payloads::{self, Directory};
use crate::shards::Route;
use crate::snowflake::{now_ms, IdGenerator, Snowflake};
use crate::state::{
    Channel, Emoji, InteractionMeta, ReactionEntry, Reference, Store, StoredFile, StoredMessage,
};
use crate::validation::{AllowedMentions, EditDraft, MessageDraft};
use crate::world::{channel_type, World};

/// Everything the handlers share.
#[derive(Debug)]
pub struct Shared {
    pub world: Arc<World>,
    pub dir: Directory,
    pub store: Mutex<Store>,
    pub hub: Hub,
    pub ids: IdGenerator,
    pub base_url: String,
    pub gateway_url: String,
    pub heartbeat_interval_ms: u64,
    pub rates: crate::rest::ratelimit::RateBook,
    /// Largest file accepted per attachment (413 40005 beyond).
    pub max_upload_bytes: usize,
    /// Largest REST request body read (413 40005 beyond).
    pub max_request_bytes: usize,
}

/// Who a new message comes from and how it was made.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub author_id: Snowflake,
    pub channel_id: Snowflake,
    pub draft: MessageDraft,
    /// Enforce the bot's channel permissions (REST sends); control-API messages skip this.
    pub as_bot_over_rest: bool,
    pub webhook_id: Option<Snowflake>,
    pub interaction: Option<InteractionMeta>,
}

/// The mentions a message makes.
struct Mentions {
    users: Vec<Snowflake>,
    roles: Vec<Snowflake>,
    everyone: bool,
}

/// Finds `<@id>`, `<@!id>`, `<@&id>`, `@everyone` and `@here` in message text.
fn scan_mentions(content: &str) -> Mentions {
    let mut users = Vec::new();
    let mut roles = Vec::new();
    let mut rest = content;
    while let Some(start) = rest.find("<@") {
        rest = &rest[start + 2..];
        let (is_role, body) = match rest.as_bytes().first() {
            Some(b'&') => (true, &rest[1..]),
            Some(b'!') => (false, &rest[1..]),
            _ => (false, rest),
        };
        let Some(end) = body.find('>') else { break };
        if let Some(id) = Snowflake::from_digits(&body[..end]) {
            let list = if is_role { &mut roles } else { &mut users };
            if !list.contains(&id) {
                list.push(id);
            }
        }
    }
    Mentions {
        users,
        roles,
        everyone: content.contains("@everyone") || content.contains("@here"),
    }
}

fn resolve_mentions(
    dir: &Directory,
    content: &str,
    allowed: Option<&AllowedMentions>,
    replied_author: Option<Snowflake>,
) -> Mentions {
    let scanned = scan_mentions(content);
    let mut users: Vec<Snowflake> = scanned
        .users
        .into_iter()
        .filter(|id| dir.has_user(*id))
        .filter(|id| allowed.is_none_or(|a| a.parse_users || a.users.contains(id)))
        .collect();
    let roles = scanned
        .roles
        .into_iter()
        .filter(|id| allowed.is_none_or(|a| a.parse_roles || a.roles.contains(id)))
        .collect();
    if let Some(author) = replied_author {
        if allowed.is_none_or(|a| a.replied_user) && !users.contains(&author) {
            users.push(author);
        }
    }
    Mentions {
        users,
        roles,
        everyone: scanned.everyone && allowed.is_none_or(|a| a.parse_everyone),
    }
}

fn message_intent(channel: &Channel) -> u64 {
    if channel.guild_id.is_some() {
        intents::GUILD_MESSAGES
    } else {
        intents::DIRECT_MESSAGES
    }
}

impl Shared {
    /// Locks the store (recovering from poisoning: the store holds no invariants a panic
    /// elsewhere could half-break in a way that matters to tests).
    pub fn lock(&self) -> MutexGuard<'_, Store> {
        self.store
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Publishes a dispatch built from `d` about something in a channel of `guild` (`None`:
    /// a DM), so it reaches the sessions of that guild's shard (shard 0 for DMs). Call with
    /// the store lock held so dispatch order matches state order (lock order: store, then
    /// hub).
    pub fn publish(
        &self,
        name: &'static str,
        d: &Value,
        intent: Option<u64>,
        guild: Option<Snowflake>,
    ) {
        let data: Arc<str> = Arc::from(d.to_string());
        self.hub.publish(&Dispatch {
            name: name.into(),
            data,
            intent,
            without_content: None,
            route: Route::of_channel(guild),
        });
    }

    /// Publishes a dispatch exactly as given (any name, any `d` text, even one that is not
    /// JSON) to every session, whatever its shard: for tests that feed a client garbage.
    /// Returns how many sessions got it.
    pub fn publish_raw(&self, name: String, data: String) -> usize {
        self.hub.publish(&Dispatch {
            name: name.into(),
            data: Arc::from(data),
            intent: None,
            without_content: None,
            route: Route::Everyone,
        })
    }

    /// Publishes MESSAGE_CREATE / MESSAGE_UPDATE, with a content-free variant for sessions
    /// lacking MESSAGE_CONTENT when Discord would blank it (guild message, not by the bot,
    /// not mentioning it).
    fn publish_message(
        &self,
        name: &'static str,
        channel: &Channel,
        msg: &StoredMessage,
        d: &Value,
    ) {
        let exempt = channel.guild_id.is_none()
            || msg.author_id == self.dir.bot_id
            || msg.mentions.contains(&self.dir.bot_id);
        let without_content = if !exempt && self.hub.needs_content_free_variant() {
            let mut blank = d.clone();
            blank["content"] = json!("");
            blank["embeds"] = json!([]);
            blank["attachments"] = json!([]);
            blank["components"] = json!([]);
            Some(Arc::from(blank.to_string()))
        } else {
            None
        };
        self.hub.publish(&Dispatch {
            name: name.into(),
            data: Arc::from(d.to_string()),
            intent: Some(message_intent(channel)),
            without_content,
            route: Route::of_channel(channel.guild_id),
        });
    }

    /// Creates a message; returns its REST JSON. With `enforce_nonce` and a nonce seen before
    /// in this channel, returns the earlier message and creates nothing.
    pub fn create_message(&self, new: NewMessage) -> Result<Value, ApiError> {
        let mut store = self.lock();
        let channel = if new.as_bot_over_rest {
            store.sendable_channel(new.channel_id)?.clone()
        } else {
            store.channel(new.channel_id)?.clone()
        };
        if !channel_type::holds_messages(channel.kind) {
            return Err(ApiError::cannot_send_in_non_text());
        }
        let draft = new.draft;
        if draft.enforce_nonce {
            if let Some(key) = draft.nonce_key() {
                if let Some(existing) = store.message_for_nonce(channel.id, &key) {
                    return Ok(payloads::message(&self.dir, &store, existing, false));
                }
            }
        }
        let mut replied_author = None;
        let reference = match &draft.reference {
            None => None,
            Some(r) => {
                let target = store
                    .message(channel.id, r.message_id)
                    .ok()
                    .filter(|_| r.channel_id.is_none_or(|c| c == channel.id));
                match target {
                    Some(parent) => {
                        if parent.author_id != new.author_id {
                            replied_author = Some(parent.author_id);
                        }
                        Some(Reference {
                            message_id: parent.id,
                            channel_id: channel.id,
                            guild_id: channel.guild_id,
                        })
                    }
                    None if r.fail_if_not_exists => {
                        let mut errors = FormErrors::new();
                        errors.add(
                            &["message_reference"],
                            "MESSAGE_REFERENCE_UNKNOWN_MESSAGE",
                            "Unknown message",
                        );
                        return Err(ApiError::invalid_form(errors));
                    }
                    None => None,
                }
            }
        };
        let mentions = resolve_mentions(
            &self.dir,
            &draft.content,
            draft.allowed_mentions.as_ref(),
            replied_author,
        );
        let kind = if new.interaction.is_some() {
            20
        } else if reference.is_some() {
            19
        } else {
            0
        };
        let id = self.ids.next();
        let mut attachments = Vec::with_capacity(draft.files.len());
        let mut files = Vec::with_capacity(draft.files.len());
        for file in draft.files {
            let attachment_id = self.ids.next();
            attachments.push(attachments::attachment_json(
                &self.base_url,
                channel.id,
                attachment_id,
                &file.filename,
                file.description.as_deref(),
                &file.content_type,
                file.content.len(),
            ));
            files.push((
                attachment_id,
                StoredFile {
                    filename: file.filename,
                    content_type: file.content_type,
                    content: file.content,
                },
            ));
        }
        let message = StoredMessage {
            id,
            channel_id: channel.id,
            guild_id: channel.guild_id,
            author_id: new.author_id,
            content: draft.content,
            edited_ms: None,
            tts: draft.tts,
            mention_everyone: mentions.everyone,
            mentions: mentions.users,
            mention_roles: mentions.roles,
            embeds: draft.embeds,
            components: draft.components,
            attachments,
            reference,
            nonce: draft.nonce,
            kind,
            reactions: Vec::new(),
            pinned: false,
            pinned_ms: None,
            flags: draft.flags,
            webhook_id: new.webhook_id,
            application_id: new.webhook_id.map(|_| self.dir.application_id),
            interaction: new.interaction,
        };
        let gateway = payloads::message(&self.dir, &store, &message, true);
        let rest = rest_view(&gateway);
        store.insert_message(message.clone());
        for (attachment_id, file) in files {
            store.insert_file(channel.id, attachment_id, file);
        }
        // Ephemeral interaction answers (flag 64) are never dispatched.
        if store.bot_can_see(&channel) && message.flags & 64 == 0 {
            self.publish_message("MESSAGE_CREATE", &channel, &message, &gateway);
        }
        Ok(rest)
    }

    /// Applies an edit. `by_bot` enforces that the bot authored the message (50005).
    pub fn edit_message(
        &self,
        channel_id: Snowflake,
        message_id: Snowflake,
        edit: EditDraft,
        by_bot: bool,
    ) -> Result<Value, ApiError> {
        let mut store = self.lock();
        let channel = if by_bot {
            store.readable_channel(channel_id)?.clone()
        } else {
            store.channel(channel_id)?.clone()
        };
        let replied_author = {
            let message = store.message(channel_id, message_id)?;
            if by_bot && message.author_id != self.dir.bot_id {
                return Err(ApiError::cannot_edit_others_message());
            }
            message
                .reference
                .and_then(|r| store.message(r.channel_id, r.message_id).ok())
                .map(|p| p.author_id)
                .filter(|a| *a != message.author_id)
        };
        let dir = &self.dir;
        let message = store.message_mut(channel_id, message_id)?;
        let mut updated = message.clone();
        if let Some(content) = edit.content {
            updated.content = content;
        }
        if let Some(embeds) = edit.embeds {
            updated.embeds = embeds;
        }
        if let Some(components) = edit.components {
            updated.components = components;
        }
        if let Some(flags) = edit.flags {
            updated.flags = flags;
        }
        if updated.content.is_empty()
            && updated.embeds.is_empty()
            && updated.components.is_empty()
            && updated.attachments.is_empty()
        {
            return Err(ApiError::cannot_send_empty_message());
        }
        let mentions = resolve_mentions(
            dir,
            &updated.content,
            edit.allowed_mentions.as_ref(),
            replied_author,
        );
        updated.mentions = mentions.users;
        updated.mention_roles = mentions.roles;
        updated.mention_everyone = mentions.everyone;
        updated.edited_ms = Some(now_ms());
        *message = updated.clone();
        let gateway = payloads::message(dir, &store, &updated, true);
        if store.bot_can_see(&channel) {
            self.publish_message("MESSAGE_UPDATE", &channel, &updated, &gateway);
        }
        Ok(rest_view(&gateway))
    }

    /// Deletes a message. `by_bot` enforces Discord's rules: others' messages need
    /// MANAGE_MESSAGES (50013) and cannot be deleted in DMs (50003).
    pub fn delete_message(
        &self,
        channel_id: Snowflake,
        message_id: Snowflake,
        by_bot: bool,
    ) -> Result<(), ApiError> {
        let mut store = self.lock();
        let channel = if by_bot {
            store.readable_channel(channel_id)?.clone()
        } else {
            store.channel(channel_id)?.clone()
        };
        let author = store.message(channel_id, message_id)?.author_id;
        if by_bot && author != self.dir.bot_id {
            if channel.guild_id.is_none() {
                return Err(ApiError::cannot_act_on_dm());
            }
            if !channel.bot_can_manage_messages {
                return Err(ApiError::missing_permissions());
            }
        }
        store.remove_message(channel_id, message_id)?;
        if store.bot_can_see(&channel) {
            let d = payloads::message_delete(message_id, &channel);
            self.publish(
                "MESSAGE_DELETE",
                &d,
                Some(message_intent(&channel)),
                channel.guild_id,
            );
        }
        Ok(())
    }

    /// Bulk-deletes messages (the bot needs MANAGE_MESSAGES; not in DMs).
    pub fn bulk_delete(&self, channel_id: Snowflake, ids: &[Snowflake]) -> Result<(), ApiError> {
        let mut store = self.lock();
        let channel = store.readable_channel(channel_id)?.clone();
        if channel.guild_id.is_none() {
            return Err(ApiError::cannot_act_on_dm());
        }
        if !channel.bot_can_manage_messages {
            return Err(ApiError::missing_permissions());
        }
        let removed: Vec<Snowflake> = ids
            .iter()
            .filter(|id| store.remove_message(channel_id, **id).is_ok())
            .copied()
            .collect();
        if !removed.is_empty() {
            let d = payloads::message_delete_bulk(&removed, &channel);
            self.publish(
                "MESSAGE_DELETE_BULK",
                &d,
                Some(message_intent(&channel)),
                channel.guild_id,
            );
        }
        Ok(())
    }

    /// Adds (`add`) or removes a user's reaction. `by_bot` applies the bot's channel access.
    pub fn react(
        &self,
        channel_id: Snowflake,
        message_id: Snowflake,
        user_id: Snowflake,
        emoji: &Emoji,
        add: bool,
    ) -> Result<(), ApiError> {
        // A custom emoji must be one of the world's; it is known by its id, under its own name.
        let known;
        let emoji = match emoji.id {
            None => emoji,
            Some(id) => {
                let spec = self
                    .world
                    .guilds
                    .iter()
                    .flat_map(|g| &g.emojis)
                    .find(|e| e.id == id)
                    .ok_or_else(ApiError::unknown_emoji)?;
                known = Emoji {
                    name: spec.name.clone(),
                    id: Some(id),
                };
                &known
            }
        };
        let mut store = self.lock();
        let channel = if user_id == self.dir.bot_id {
            store.readable_channel(channel_id)?.clone()
        } else {
            store.channel(channel_id)?.clone()
        };
        let message = store.message_mut(channel_id, message_id)?;
        let changed = match message.reactions.iter_mut().find(|r| &r.emoji == emoji) {
            Some(entry) if add => {
                if entry.users.contains(&user_id) {
                    false
                } else {
                    entry.users.push(user_id);
                    true
                }
            }
            Some(entry) => {
                let before = entry.users.len();
                entry.users.retain(|u| *u != user_id);
                entry.users.len() != before
            }
            None if add => {
                if message.reactions.len() >= 20 {
                    return Err(ApiError::max_reactions());
                }
                message.reactions.push(ReactionEntry {
                    emoji: emoji.clone(),
                    users: vec![user_id],
                });
                true
            }
            None => false,
        };
        message.reactions.retain(|r| !r.users.is_empty());
        if changed {
            let snapshot = message.clone();
            if store.bot_can_see(&channel) {
                let d =
                    payloads::reaction_event(&self.dir, &channel, &snapshot, user_id, emoji, add);
                let intent = if channel.guild_id.is_some() {
                    intents::GUILD_MESSAGE_REACTIONS
                } else {
                    intents::DIRECT_MESSAGE_REACTIONS
                };
                let name = if add {
                    "MESSAGE_REACTION_ADD"
                } else {
                    "MESSAGE_REACTION_REMOVE"
                };
                self.publish(name, &d, Some(intent), channel.guild_id);
            }
        }
        Ok(())
    }

    /// Publishes TYPING_START for a user in a channel.
    pub fn typing(
        &self,
        channel_id: Snowflake,
        user_id: Snowflake,
        as_bot: bool,
    ) -> Result<(), ApiError> {
        let store = self.lock();
        let channel = if as_bot {
            store.sendable_channel(channel_id)?.clone()
        } else {
            store.channel(channel_id)?.clone()
        };
        if store.bot_can_see(&channel) {
            let d = payloads::typing_start(&self.dir, &channel, user_id, now_ms() / 1000);
            let intent = if channel.guild_id.is_some() {
                intents::GUILD_MESSAGE_TYPING
            } else {
                intents::DIRECT_MESSAGE_TYPING
            };
            self.publish("TYPING_START", &d, Some(intent), channel.guild_id);
        }
        Ok(())
    }

    /// Publishes CHANNEL_* or THREAD_* for a channel change (`created`/`deleted`/neither).
    pub fn publish_channel_event(
        &self,
        store: &Store,
        channel: &Channel,
        change: ChannelChange,
        was_visible: bool,
    ) {
        if !(store.bot_can_see(channel) || was_visible) || channel.guild_id.is_none() {
            return;
        }
        let thread = channel_type::is_thread(channel.kind);
        let (name, d) = match (change, thread) {
            (ChannelChange::Created, false) => {
                ("CHANNEL_CREATE", payloads::channel(&self.dir, channel))
            }
            (ChannelChange::Updated, false) => {
                ("CHANNEL_UPDATE", payloads::channel(&self.dir, channel))
            }
            (ChannelChange::Deleted, false) => {
                ("CHANNEL_DELETE", payloads::channel(&self.dir, channel))
            }
            (ChannelChange::Created, true) => {
                let mut d = payloads::channel(&self.dir, channel);
                d["newly_created"] = json!(true);
                ("THREAD_CREATE", d)
            }
            (ChannelChange::Updated, true) => {
                ("THREAD_UPDATE", payloads::channel(&self.dir, channel))
            }
            (ChannelChange::Deleted, true) => ("THREAD_DELETE", payloads::thread_delete(channel)),
        };
        self.publish(name, &d, Some(intents::GUILDS), channel.guild_id);
    }
}

/// Which channel event to publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelChange {
    Created,
    Updated,
    Deleted,
}

/// The REST form of a message: the gateway form without `guild_id` and `member`.
fn rest_view(gateway: &Value) -> Value {
    let mut rest = gateway.clone();
    if let Some(map) = rest.as_object_mut() {
        map.remove("guild_id");
        map.remove("member");
    }
    rest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_user_role_and_everyone_mentions() {
        let m = scan_mentions("hi <@123> and <@!456>, <@&789> @everyone <@x> <@");
        assert_eq!(m.users, vec![Snowflake(123), Snowflake(456)]);
        assert_eq!(m.roles, vec![Snowflake(789)]);
        assert!(m.everyone);
    }
}
