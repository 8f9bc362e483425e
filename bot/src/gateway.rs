//! Gateway events → the store. Every event serenity hands us is applied here; one it could not
//! parse is logged at WARN with its name (serenity itself drops it silently).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use entity::{Aliases, Mapper, Snowflake};
use serenity::gateway::ConnectionStage;
use serenity::model::channel::{Channel, GuildChannel, Reaction};
use serenity::model::event::Event;
use serenity::model::user::User;
use serenity::prelude::{Context, EventHandler, RawEventHandler};
use toolserver::allowlist::Allowlist;
use toolserver::events::Observers;
use toolserver::surface::{ChannelLocation, ConnectionState};
use toolserver::workflow::{Observed, WorkflowEngine};

use crate::payload::stored_message_from_model;
use crate::store::{SessionKind, Store, StoredSession};
use crate::surface::{session_kind, Connection};
use toolserver::runs::{Arrival, Runs};

/// Applies gateway events to the store.
pub struct Ingest {
    store: Store,
    aliases: Aliases,
    /// Messages of channels it refuses are never stored (nor do they trigger anything).
    allowlist: Arc<Allowlist>,
    connection: Arc<Connection>,
    bot_id: Arc<AtomicU64>,
    /// Guilds READY announced whose GUILD_CREATE has not arrived yet: until then the cache is
    /// incomplete and `/health` says `connecting`.
    pending_guilds: AtomicUsize,
    runs: Option<Arc<dyn Runs>>,
    workflows: Option<Arc<WorkflowEngine>>,
    observers: Option<Observers>,
}

fn sid(id: u64) -> Snowflake {
    Snowflake(id)
}

/// The name people see: the display (global) name, else the username — as the store answers.
fn display_name(user: &User) -> &str {
    user.global_name
        .as_deref()
        .filter(|name| !name.is_empty())
        .unwrap_or(&user.name)
}

impl Ingest {
    /// An ingest that writes to `store`. `allowlist` decides which channels' messages are kept and
    /// `aliases` turn content into canonical text; `connection` and `bot_id`, which READY and
    /// GUILD_CREATE set, are shared with the [`DiscordSurface`](crate::DiscordSurface). Nothing
    /// starts runs or answers workflows until [`Ingest::with_runs`] and [`Ingest::with_workflows`].
    pub fn new(
        store: Store,
        aliases: Aliases,
        allowlist: Arc<Allowlist>,
        connection: Arc<Connection>,
        bot_id: Arc<AtomicU64>,
    ) -> Self {
        Ingest {
            store,
            aliases,
            allowlist,
            connection,
            bot_id,
            pending_guilds: AtomicUsize::new(0),
            runs: None,
            workflows: None,
            observers: None,
        }
    }

    /// Publishes stored, edited and deleted messages (`message.*`) and counts every event.
    pub fn with_observers(mut self, observers: Observers) -> Self {
        self.observers = Some(observers);
        self
    }

    /// Tells the agent about every stored message, so it can start runs.
    pub fn with_runs(mut self, runs: Arc<dyn Runs>) -> Self {
        self.runs = Some(runs);
        self
    }

    /// Feeds new messages to the workflows, which may be waiting for them.
    pub fn with_workflows(mut self, workflows: Arc<WorkflowEngine>) -> Self {
        self.workflows = Some(workflows);
        self
    }

    /// True when the message answered a workflow's task. `reply_to`, `text` and `timestamp`
    /// are the stored message's.
    fn answer_workflows(
        &self,
        message: &serenity::model::channel::Message,
        reply_to: Option<Snowflake>,
        text: &str,
        timestamp: &str,
    ) -> bool {
        let Some(workflows) = &self.workflows else {
            return false;
        };
        workflows.observe(&Observed {
            channel_id: sid(message.channel_id.get()),
            message_id: sid(message.id.get()),
            author_id: sid(message.author.id.get()),
            author_is_bot: message.author.bot,
            author_name: display_name(&message.author),
            reply_to,
            text,
            timestamp,
        })
    }

    fn consider_run(&self, message: &serenity::model::channel::Message, text: &str) {
        let Some(runs) = &self.runs else {
            return;
        };
        let channel = sid(message.channel_id.get());
        let bot = self.bot_id.load(Ordering::Relaxed);
        let replies_to_bot = bot != 0
            && message
                .referenced_message
                .as_ref()
                .map(|m| m.author.id.get() == bot)
                .or_else(|| {
                    let target = message.message_reference.as_ref()?.message_id?;
                    let stored = self.store.message(channel, sid(target.get()))?;
                    Some(stored.author_id == sid(bot))
                })
                .unwrap_or(false);
        let parent = self.store.session(channel).and_then(|s| s.parent_id);
        runs.arrived(&Arrival {
            channel_id: channel,
            message_id: sid(message.id.get()),
            author_id: sid(message.author.id.get()),
            author_name: display_name(&message.author),
            author_is_bot: message.author.bot,
            in_guild: message.guild_id.is_some(),
            parent_id: parent,
            content: &message.content,
            text,
            replies_to_bot,
        });
    }

    /// Whether messages of `channel` may be stored: the allowlist, over the sessions the store
    /// knows. A channel the gateway never described is judged as a plain channel of the
    /// message's guild (or a DM without one).
    fn storable(&self, channel: Snowflake, guild: Option<Snowflake>) -> bool {
        let fallback = ChannelLocation {
            guild_id: guild,
            parent_channel_id: None,
            kind: if guild.is_some() {
                toolserver::surface::SessionKind::Channel
            } else {
                toolserver::surface::SessionKind::Dm
            },
        };
        self.allowlist
            .allows_cached(channel, |id| match self.store.session(id) {
                Some(session) => Some(crate::surface::location(&session)),
                None => (id == channel).then_some(fallback),
            })
    }

    fn mapper(&self) -> Mapper<'_> {
        Mapper::new(&self.aliases, &self.store)
    }

    fn user(&self, user: &User) {
        self.store.upsert_user(
            sid(user.id.get()),
            &user.name,
            user.global_name.as_deref(),
            user.bot,
        );
    }

    fn guild_channel(&self, channel: &GuildChannel) {
        let kind = session_kind(u64::from(u8::from(channel.kind)));
        if kind == SessionKind::Category && self.allowlist.lists_channel(sid(channel.id.get())) {
            tracing::warn!(
                category = %channel.id,
                name = %channel.name,
                "discord.allowed_channel_ids lists a category, which allows nothing: a listed channel allows itself and its threads only. To allow every channel in it, move the id to discord.allowed_category_ids"
            );
        }
        self.store.upsert_session(StoredSession {
            id: sid(channel.id.get()),
            guild_id: Some(sid(channel.guild_id.get())),
            parent_id: channel.parent_id.map(|p| sid(p.get())),
            kind,
            name: channel.name.clone(),
        });
    }

    fn reaction(&self, reaction: &Reaction, added: bool) {
        let me = reaction.user_id.map(poise::serenity_prelude::UserId::get)
            == Some(self.bot_id.load(Ordering::Relaxed));
        let emoji = reaction.emoji.as_data();
        let (channel, message) = (
            sid(reaction.channel_id.get()),
            sid(reaction.message_id.get()),
        );
        if added {
            self.store.add_reaction(channel, message, &emoji, me);
        } else {
            self.store.remove_reaction(channel, message, &emoji, me);
        }
    }

    /// Applies one event. Public so tests and benchmarks can drive ingest without a socket.
    pub fn apply(&self, event: &Event) {
        if let Some(observers) = &self.observers {
            observers
                .metrics
                .gateway_event(event.name().as_deref().unwrap_or("OTHER"));
        }
        match event {
            Event::Ready(ready) => {
                let me = &ready.ready.user;
                self.bot_id.store(me.id.get(), Ordering::Relaxed);
                self.store
                    .upsert_user(sid(me.id.get()), &me.name, me.global_name.as_deref(), true);
                let guilds = ready.ready.guilds.len();
                self.pending_guilds.store(guilds, Ordering::Relaxed);
                self.connection.set(if guilds == 0 {
                    ConnectionState::Ready
                } else {
                    ConnectionState::Connecting
                });
                tracing::info!(bot = %me.name, guilds, "gateway ready; waiting for the guilds");
            }
            Event::Resumed(_) => {
                self.connection.set(ConnectionState::Ready);
                tracing::info!("gateway resumed");
            }
            Event::GuildCreate(create) => {
                let guild = &create.guild;
                for channel in guild.channels.values().chain(guild.threads.iter()) {
                    self.guild_channel(channel);
                }
                for role in guild.roles.values() {
                    self.store.upsert_role(sid(role.id.get()), &role.name);
                }
                for member in guild.members.values() {
                    self.user(&member.user);
                }
                tracing::info!(guild = %guild.name, channels = guild.channels.len(), threads = guild.threads.len(), "guild cached");
                let before = self
                    .pending_guilds
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .unwrap_or(0);
                if before <= 1 {
                    self.connection.set(ConnectionState::Ready);
                }
            }
            Event::GuildRoleCreate(e) => self.store.upsert_role(sid(e.role.id.get()), &e.role.name),
            Event::GuildRoleUpdate(e) => self.store.upsert_role(sid(e.role.id.get()), &e.role.name),
            Event::GuildRoleDelete(e) => self.store.remove_role(sid(e.role_id.get())),
            Event::GuildMemberAdd(e) => self.user(&e.member.user),
            Event::GuildMemberUpdate(e) => self.user(&e.user),
            Event::ChannelCreate(e) => self.guild_channel(&e.channel),
            Event::ChannelUpdate(e) => self.guild_channel(&e.channel),
            Event::ChannelDelete(e) => self.store.remove_session(sid(e.channel.id.get())),
            Event::ThreadCreate(e) => self.guild_channel(&e.thread),
            Event::ThreadUpdate(e) => self.guild_channel(&e.thread),
            Event::ThreadDelete(e) => self.store.remove_session(sid(e.thread.id.get())),
            Event::ThreadListSync(e) => {
                for thread in &e.threads {
                    self.guild_channel(thread);
                }
            }
            Event::MessageCreate(e) => {
                let message = &e.message;
                let channel = sid(message.channel_id.get());
                if message.guild_id.is_none() && self.store.session(channel).is_none() {
                    self.store.upsert_session(StoredSession {
                        id: channel,
                        guild_id: None,
                        parent_id: None,
                        kind: SessionKind::Dm,
                        name: message.author.name.clone(),
                    });
                }
                if !self.storable(channel, message.guild_id.map(|g| sid(g.get()))) {
                    tracing::debug!(%channel, "message in a channel the allowlist refuses: not stored");
                    return;
                }
                self.user(&message.author);
                let stored = stored_message_from_model(message, &self.mapper());
                let text = stored.text.clone();
                let timestamp = stored.timestamp.clone();
                let reply_to = stored.reply_to;
                let event = self.observers.as_ref().map(|o| (o, stored.clone()));
                // A replayed or already-stored message never starts a second run, nor answers
                // a workflow twice. An answer to a workflow belongs to the run it resumes:
                // replying to the bot's question does not also start a run of its own.
                if self.store.insert_message(stored) {
                    if let Some((observers, stored)) = event {
                        let name = display_name(&message.author);
                        crate::observe::message_created(observers, &stored, name);
                    }
                    if !self.answer_workflows(message, reply_to, &text, &timestamp) {
                        self.consider_run(message, &text);
                    }
                }
            }
            Event::MessageUpdate(e) => {
                if let Some(content) = &e.content {
                    let text = self.mapper().inbound(content).into_owned();
                    let edited = e.edited_timestamp.map(|t| t.to_string());
                    let (channel, id) = (sid(e.channel_id.get()), sid(e.id.get()));
                    let event = self.observers.as_ref().map(|o| (o, text.clone()));
                    if self
                        .store
                        .update_message(channel, id, content.clone(), text, edited)
                    {
                        if let Some((observers, text)) = event {
                            crate::observe::message_edited(observers, channel, id, &text);
                        }
                    }
                }
            }
            Event::MessageDelete(e) => {
                let (channel, id) = (sid(e.channel_id.get()), sid(e.message_id.get()));
                if self.store.delete_message(channel, id) {
                    if let Some(observers) = &self.observers {
                        crate::observe::message_deleted(observers, channel, id);
                    }
                }
            }
            Event::MessageDeleteBulk(e) => {
                let channel = sid(e.channel_id.get());
                let ids: Vec<Snowflake> = e.ids.iter().map(|id| sid(id.get())).collect();
                // Only the messages the store held were in an allowed session: announce those.
                let held: Vec<Snowflake> = match &self.observers {
                    Some(_) => ids
                        .iter()
                        .copied()
                        .filter(|id| self.store.message(channel, *id).is_some())
                        .collect(),
                    None => Vec::new(),
                };
                self.store.delete_messages(channel, &ids);
                if let Some(observers) = &self.observers {
                    for id in held {
                        crate::observe::message_deleted(observers, channel, id);
                    }
                }
            }
            Event::ReactionAdd(e) => self.reaction(&e.reaction, true),
            Event::ReactionRemove(e) => self.reaction(&e.reaction, false),
            Event::ReactionRemoveAll(e) => self
                .store
                .remove_all_reactions(sid(e.channel_id.get()), sid(e.message_id.get())),
            Event::ReactionRemoveEmoji(e) => self.store.remove_emoji_reactions(
                sid(e.reaction.channel_id.get()),
                sid(e.reaction.message_id.get()),
                &e.reaction.emoji.as_data(),
            ),
            Event::Unknown(unknown) => {
                tracing::warn!(event = %unknown.kind, "gateway event could not be parsed; it was dropped");
            }
            _ => {}
        }
    }
}

/// Keeps a DM channel the bot learns of through a full channel object.
pub fn private_channel_session(channel: &Channel) -> Option<StoredSession> {
    match channel {
        Channel::Private(dm) => Some(StoredSession {
            id: sid(dm.id.get()),
            guild_id: None,
            parent_id: None,
            kind: SessionKind::Dm,
            name: dm.recipient.name.clone(),
        }),
        _ => None,
    }
}

#[async_trait]
impl RawEventHandler for Ingest {
    async fn raw_event(&self, _: Context, event: Event) {
        self.apply(&event);
    }
}

/// Tracks the shard's connection stage for `/health`.
pub struct StageWatcher {
    /// The state `/health` reports, shared with the ingest: down when the shard disconnects,
    /// connecting while it connects or resumes (the ingest sets ready once the guilds have
    /// arrived).
    pub connection: Arc<Connection>,
}

#[async_trait]
impl EventHandler for StageWatcher {
    async fn shard_stage_update(
        &self,
        _: Context,
        update: serenity::gateway::ShardStageUpdateEvent,
    ) {
        // `ready` is set by the ingest once READY and every GUILD_CREATE are applied.
        match update.new {
            ConnectionStage::Connected => {}
            ConnectionStage::Disconnected => self.connection.set(ConnectionState::Down),
            _ => self.connection.set(ConnectionState::Connecting),
        }
    }
}
