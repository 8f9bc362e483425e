//! Gateway events → the store. Every event serenity hands us is applied here; one it could not
//! parse is logged at WARN with its name (serenity itself drops it silently).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use entity::{Aliases, Mapper, Snowflake};
use serenity::gateway::ConnectionStage;
use serenity::model::channel::{Channel, GuildChannel, Reaction};
use serenity::model::event::{Event, GuildRoleCreateEvent, GuildRoleUpdateEvent};
use serenity::model::user::User;
use serenity::prelude::{Context, EventHandler, RawEventHandler};
use switchboard_engine::allowlist::Allowlist;
use switchboard_engine::events::Observers;
use switchboard_engine::live::{Live, SharedAliases};
use switchboard_engine::surface::{ChannelLocation, ConnectionState};
use switchboard_engine::workflow::{Observed, WorkflowEngine};

use crate::backfill::{Backfill, BackfillOptions, BackfillReport};
use crate::payload::stored_message_from_model;
use crate::rest::DiscordRest;
use crate::surface::Connection;
use switchboard_engine::runs::{Arrival, Runs};
use switchboard_records as records;
use switchboard_records::{SessionKind, ThreadState};
use switchboard_store::Store;

/// Applies gateway events to the store. Clones share everything (a backfill pass runs on a
/// clone).
#[derive(Clone)]
pub struct Ingest {
    store: Store,
    aliases: SharedAliases,
    /// Messages of channels it refuses are never stored (nor do they trigger anything).
    allowlist: Arc<Allowlist>,
    connection: Arc<Connection>,
    bot_id: Arc<AtomicU64>,
    /// Guilds READY announced whose GUILD_CREATE has not arrived yet: until then the cache is
    /// incomplete and `/health` says `connecting`.
    pending_guilds: Arc<AtomicUsize>,
    runs: Option<Arc<dyn Runs>>,
    workflows: Option<Arc<WorkflowEngine>>,
    observers: Option<Observers>,
    backfill: Option<Arc<Backfill>>,
}

/// Where a message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// A MESSAGE_CREATE.
    Live,
    /// Fetched after a fresh identify: it was missed live.
    Backfill,
    /// A MESSAGE_CREATE held back until its channel's gap was in (see [`crate::backfill`]).
    Released,
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
            aliases: Arc::new(Live::new(aliases)),
            allowlist,
            connection,
            bot_id,
            pending_guilds: Arc::new(AtomicUsize::new(0)),
            runs: None,
            workflows: None,
            observers: None,
            backfill: None,
        }
    }

    /// After every READY that is not a RESUME, fetches what was posted while the gateway was
    /// away (see [`crate::backfill`]); `/health` says `backfilling` until it caught up. Off
    /// when `options.max_messages` is 0.
    pub fn with_backfill(mut self, rest: DiscordRest, options: BackfillOptions) -> Self {
        self.backfill = (options.max_messages > 0).then(|| Arc::new(Backfill::new(rest, options)));
        self
    }

    /// What the last finished backfill pass did; `None` before one finished.
    pub fn last_backfill(&self) -> Option<BackfillReport> {
        self.backfill.as_ref().and_then(|b| b.last_report())
    }

    /// Reads the aliases from `aliases`, which a config reload swaps, instead of its own copy.
    pub fn sharing_aliases(mut self, aliases: SharedAliases) -> Self {
        self.aliases = aliases;
        self
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

    /// Hands the newly stored message to whoever has it: the engine decides
    /// ([`switchboard_engine::workflow::dispatch`]: a waiting workflow first, else the agent,
    /// which is handed the facts that decide whether it starts a run). `reply_to`, `text` and
    /// `timestamp` are the stored message's.
    fn deliver(
        &self,
        message: &serenity::model::channel::Message,
        reply_to: Option<Snowflake>,
        text: &str,
        timestamp: &str,
        missed: bool,
    ) {
        let channel = sid(message.channel_id.get());
        let author_name = display_name(&message.author);
        // The roles are read only for the agent (an allocation per guild message otherwise).
        let roles: Vec<Snowflake> = match (&self.runs, &message.member) {
            (Some(_), Some(member)) => member.roles.iter().map(|r| sid(r.get())).collect(),
            _ => Vec::new(),
        };
        switchboard_engine::workflow::dispatch(
            self.workflows.as_deref(),
            self.runs.as_deref(),
            &Observed {
                channel_id: channel,
                message_id: sid(message.id.get()),
                author_id: sid(message.author.id.get()),
                author_is_bot: message.author.bot,
                author_name,
                reply_to,
                text,
                timestamp,
            },
            || {
                tracing::trace!("message stored");
                Arrival {
                    channel_id: channel,
                    message_id: sid(message.id.get()),
                    author_id: sid(message.author.id.get()),
                    author_name,
                    author_roles: &roles,
                    author_is_bot: message.author.bot,
                    in_guild: message.guild_id.is_some(),
                    parent_id: self.store.session(channel).and_then(|s| s.parent_id),
                    content: &message.content,
                    text,
                    replies_to_bot: self.replies_to_bot(message, channel),
                    missed,
                }
            },
        );
    }

    /// Whether `message` replies to one of the bot's messages (the one it quotes, else the
    /// stored one it references).
    fn replies_to_bot(
        &self,
        message: &serenity::model::channel::Message,
        channel: Snowflake,
    ) -> bool {
        let bot = self.bot_id.load(Ordering::Relaxed);
        bot != 0
            && message
                .referenced_message
                .as_ref()
                .map(|m| m.author.id.get() == bot)
                .or_else(|| {
                    let target = message.message_reference.as_ref()?.message_id?;
                    let stored = self.store.message(channel, sid(target.get()))?;
                    Some(stored.author_id == sid(bot))
                })
                .unwrap_or(false)
    }

    /// Whether messages of `channel` may be stored: the allowlist, over the sessions the store
    /// knows. A channel the gateway never described is judged as a plain channel of the
    /// message's guild (or a DM without one).
    fn storable(&self, channel: Snowflake, guild: Option<Snowflake>) -> bool {
        let fallback = ChannelLocation {
            guild_id: guild,
            parent_channel_id: None,
            kind: if guild.is_some() {
                switchboard_engine::surface::SessionKind::Channel
            } else {
                switchboard_engine::surface::SessionKind::Dm
            },
        };
        self.allowlist
            .allows_cached(channel, |id| match self.store.session(id) {
                Some(session) => Some(crate::surface::location(&session)),
                None => (id == channel).then_some(fallback),
            })
    }

    /// The aliases in force now, for one event.
    fn aliases(&self) -> Arc<Aliases> {
        self.aliases.load()
    }

    fn user(&self, user: &User) {
        self.store.upsert_user(records::User {
            id: sid(user.id.get()),
            username: user.name.clone(),
            global_name: user.global_name.clone(),
            is_bot: user.bot,
        });
    }

    fn guild_channel(&self, channel: &GuildChannel) {
        let kind = SessionKind::from_channel_type(u64::from(u8::from(channel.kind)));
        if kind == SessionKind::Category && self.allowlist.lists_channel(sid(channel.id.get())) {
            tracing::warn!(
                category = %channel.id,
                name = %channel.name,
                "discord.allowed_channel_ids lists a category, which allows nothing: a listed channel allows itself and its threads only. To allow every channel in it, move the id to discord.allowed_category_ids"
            );
        }
        self.store.upsert_session(records::Session {
            id: sid(channel.id.get()),
            guild_id: Some(sid(channel.guild_id.get())),
            parent_id: channel.parent_id.map(|p| sid(p.get())),
            kind,
            name: channel.name.clone(),
        });
        if let Some(meta) = &channel.thread_metadata {
            self.store.set_thread_state(
                sid(channel.id.get()),
                ThreadState {
                    archived: meta.archived,
                    locked: meta.locked,
                    auto_archive_minutes: u32::from(u16::from(meta.auto_archive_duration)),
                    owner_id: channel.owner_id.map(|owner| sid(owner.get())),
                },
            );
        }
    }

    fn reaction(&self, reaction: &Reaction, added: bool) {
        let me = reaction.user_id.map(serenity::model::id::UserId::get)
            == Some(self.bot_id.load(Ordering::Relaxed));
        let emoji = crate::payload::emoji_text(&reaction.emoji);
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

    /// Stores a message (live or backfilled) and lets workflows and the agent see it. True when
    /// the store did not hold it yet.
    fn message(&self, message: &serenity::model::channel::Message, origin: Origin) -> bool {
        tracing::trace!("message parsed");
        let channel = sid(message.channel_id.get());
        if message.guild_id.is_none() && self.store.session(channel).is_none() {
            self.store.upsert_session(records::Session {
                id: channel,
                guild_id: None,
                parent_id: None,
                kind: SessionKind::Dm,
                name: message.author.name.clone(),
            });
        }
        if !self.storable(channel, message.guild_id.map(|g| sid(g.get()))) {
            tracing::debug!(%channel, "message in a channel the allowlist refuses: not stored");
            return false;
        }
        if origin == Origin::Live
            && self
                .backfill
                .as_ref()
                .is_some_and(|backfill| backfill.hold(channel, message))
        {
            tracing::debug!(%channel, "live message held until the channel's missed ones are in");
            return false;
        }
        self.user(&message.author);
        let aliases = self.aliases();
        let stored = stored_message_from_model(message, &Mapper::new(&aliases, &self.store));
        let text = stored.text.clone();
        let timestamp = stored.timestamp.clone();
        let reply_to = stored.reply_to;
        let event = self.observers.as_ref().map(|o| (o, stored.clone()));
        // A replayed or already-stored message never starts a second run, nor answers
        // a workflow twice. Who a new one goes to is the engine's rule (`dispatch`).
        if self.store.insert_message(stored) {
            if let Some((observers, stored)) = event {
                let name = display_name(&message.author);
                crate::observe::message_created(observers, &stored, name);
            }
            self.deliver(
                message,
                reply_to,
                &text,
                &timestamp,
                origin == Origin::Backfill,
            );
            return true;
        }
        if origin == Origin::Backfill {
            // A copy of a message the store holds: it may have been edited meanwhile, and the
            // later edit wins whichever way it arrives.
            let edited = message.edited_timestamp.map(|t| t.to_string());
            let id = sid(message.id.get());
            let changed = self
                .store
                .message(channel, id)
                .is_some_and(|held| held.edited_timestamp != edited && edited.is_some());
            if changed {
                let aliases = self.aliases();
                let text = Mapper::new(&aliases, &self.store)
                    .inbound(&message.content)
                    .into_owned();
                self.store
                    .update_message(channel, id, message.content.clone(), text, edited);
            }
        }
        false
    }

    /// The guilds READY announced have all arrived: the cache is complete. Without backfill
    /// the connection is ready; with it, a pass starts and the connection is `backfilling`
    /// until it caught up.
    fn guilds_complete(&self) {
        let Some(backfill) = &self.backfill else {
            self.connection.set(ConnectionState::Ready);
            return;
        };
        let generation = backfill.current();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("no async runtime to backfill on; missed messages are not fetched");
            self.hand_on(backfill.begin_holding(generation, []));
            self.connection.set(ConnectionState::Ready);
            return;
        };
        // The targets are decided here, and their live messages held from here, so none
        // arrives between the decision and the pass's first step.
        let targets: Vec<records::Session> = self
            .store
            .sessions()
            .into_iter()
            .filter(crate::backfill::holds_messages)
            .filter(|session| self.storable(session.id, session.guild_id))
            .collect();
        // Running first: holding starts with it (the live path looks at it before the lock).
        backfill.set_running(true);
        self.hand_on(backfill.begin_holding(generation, targets.iter().map(|t| t.id)));
        self.connection.set(ConnectionState::Backfilling);
        let ingest = self.clone();
        runtime.spawn(async move { ingest.backfill_pass(generation, targets).await });
    }

    /// Stores and hands on held live messages, each channel's oldest first.
    fn hand_on(&self, held: impl IntoIterator<Item = crate::backfill::Held>) {
        for channel in held {
            for message in channel.values() {
                self.message(message, Origin::Released);
            }
        }
    }

    /// Ingests a channel's fetched gap merged by id with the live messages held for it, then
    /// lets the channel's live messages go straight on. Returns how many fetched messages were
    /// new to the store.
    fn ingest_gap(
        &self,
        backfill: &Backfill,
        generation: u64,
        channel: Snowflake,
        fetched: &[serenity::model::channel::Message],
    ) -> usize {
        let mut held = backfill.take_held(generation, channel);
        let mut stored = 0;
        for message in fetched {
            let id = sid(message.id.get());
            while let Some(older) = held.first_entry().filter(|entry| *entry.key() < id) {
                self.message(&older.remove(), Origin::Released);
            }
            // Seen live and listed too: the live copy (it carries the author's roles).
            if let Some(live) = held.remove(&id) {
                self.message(&live, Origin::Released);
                continue;
            }
            stored += usize::from(self.message(message, Origin::Backfill));
        }
        // What arrived while this ran is newer than all of the above; a few rounds catch up
        // with it, and the release takes whatever came after the last.
        for _ in 0..RELEASE_ROUNDS {
            if held.is_empty() {
                break;
            }
            self.hand_on([held]);
            held = backfill.take_held(generation, channel);
        }
        self.hand_on([held]);
        self.hand_on([backfill.release(generation, channel)]);
        stored
    }

    /// One backfill pass for the READY of `generation` over `targets` (see
    /// [`crate::backfill`]).
    async fn backfill_pass(self, generation: u64, targets: Vec<records::Session>) {
        let Some(backfill) = self.backfill.clone() else {
            return;
        };
        let started = Instant::now();
        let plan = backfill.plan();
        let floor = backfill.floor();
        let mut report = BackfillReport {
            channels: targets.len(),
            ..BackfillReport::default()
        };
        tracing::info!(
            channels = targets.len(),
            max_messages = backfill.options().max_messages,
            "fetching what was posted while the gateway was away"
        );
        // Channels are fetched a few at a time, each in its own task, while the pass ingests
        // the ones already fetched as they come in: a channel's pages depend on each other,
        // channels do not, and the one REST client keeps every request within its bucket and
        // the global limit. A channel caught up is ingested (and its waiting live messages go
        // on) without waiting for a slower one fetched beside it. The next fetch starts only
        // when one is taken for ingest, so at most `BACKFILL_CHANNELS_AT_ONCE` channels'
        // messages are held at once.
        let mut fetches = tokio::task::JoinSet::new();
        let mut fetching: HashMap<tokio::task::Id, records::Session> = HashMap::new();
        let fetch = |fetches: &mut tokio::task::JoinSet<_>,
                     fetching: &mut HashMap<tokio::task::Id, records::Session>,
                     session: &records::Session| {
            let after = plan.get(&session.id).copied().unwrap_or(floor).max(floor);
            let (backfill, target) = (Arc::clone(&backfill), session.clone());
            let task = fetches.spawn(async move { backfill.fetch(&target, after).await });
            fetching.insert(task.id(), session.clone());
        };
        let mut waiting: VecDeque<&records::Session> = targets.iter().collect();
        for session in (0..BACKFILL_CHANNELS_AT_ONCE).map_while(|_| waiting.pop_front()) {
            fetch(&mut fetches, &mut fetching, session);
        }
        while let Some(joined) = fetches.join_next_with_id().await {
            if !backfill.is_current(generation) {
                tracing::info!(
                    "the gateway identified again; this backfill pass gives way to the next"
                );
                fetches.abort_all();
                return;
            }
            // A channel whose live messages wait for it is fetched next.
            let holding = backfill.held_channels();
            let next = waiting
                .iter()
                .position(|s| holding.contains(&s.id))
                .and_then(|at| waiting.remove(at))
                .or_else(|| waiting.pop_front());
            if let Some(next) = next {
                fetch(&mut fetches, &mut fetching, next);
            }
            let (id, fetched) = match joined {
                Ok((id, fetched)) => (id, fetched),
                Err(error) => (
                    error.id(),
                    Err(switchboard_engine::surface::SurfaceError::Unavailable(
                        format!("the fetch task stopped: {error}"),
                    )),
                ),
            };
            let Some(session) = fetching.remove(&id) else {
                continue;
            };
            let fetched = match fetched {
                Ok(fetched) => fetched,
                Err(error) => {
                    report.failed += 1;
                    tracing::warn!(channel = %session.id, name = %session.name, %error, "could not fetch this channel's missed messages; the next fresh identify tries again");
                    self.ingest_gap(&backfill, generation, session.id, &[]);
                    continue;
                }
            };
            report.requests += fetched.requests;
            report.fetched += fetched.messages.len();
            report.truncated += usize::from(fetched.truncated);
            report.stored += self.ingest_gap(&backfill, generation, session.id, &fetched.messages);
            if backfill.is_current(generation) {
                self.store.close_gap(session.id);
            }
        }
        if !backfill.is_current(generation) {
            return;
        }
        // Gaps of channels no longer fetched (gone, or refused by the allowlist) are closed.
        for channel in self.store.gaps().into_keys() {
            if !targets.iter().any(|t| t.id == channel) {
                self.store.close_gap(channel);
            }
        }
        report.elapsed = started.elapsed();
        tracing::info!(
            channels = report.channels,
            requests = report.requests,
            fetched = report.fetched,
            stored = report.stored,
            failed = report.failed,
            ms = report.elapsed.as_millis() as u64,
            "backfill caught up"
        );
        backfill.finished(report);
        self.hand_on(backfill.release_all(generation));
        backfill.set_running(false);
        self.connection
            .replace(ConnectionState::Backfilling, ConnectionState::Ready);
    }

    /// A MESSAGE_UPDATE: a new content replaces the stored one (or the held copy's).
    fn message_edited(&self, e: &serenity::model::event::MessageUpdateEvent) {
        let Some(content) = &e.content else {
            return;
        };
        let (channel, id) = (sid(e.channel_id.get()), sid(e.id.get()));
        if self
            .backfill
            .as_ref()
            .is_some_and(|backfill| backfill.edit_held(channel, id, content, e.edited_timestamp))
        {
            return;
        }
        let aliases = self.aliases();
        let text = Mapper::new(&aliases, &self.store)
            .inbound(content)
            .into_owned();
        let edited = e.edited_timestamp.map(|t| t.to_string());
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

    /// Applies one event. Public so tests and benchmarks can drive ingest without a socket.
    pub fn apply(&self, event: &Event) {
        if let Some(observers) = &self.observers {
            observers.metrics.gateway_event(event_name(event));
        }
        match event {
            Event::Ready(ready) => {
                let me = &ready.ready.user;
                self.bot_id.store(me.id.get(), Ordering::Relaxed);
                self.store.upsert_user(records::User {
                    id: sid(me.id.get()),
                    username: me.name.clone(),
                    global_name: me.global_name.clone(),
                    is_bot: true,
                });
                let guilds = ready.ready.guilds.len();
                self.pending_guilds.store(guilds, Ordering::Relaxed);
                // Before any event of this session is applied: where each gap starts.
                if let Some(backfill) = &self.backfill {
                    backfill.prepare(&self.store, Some(sid(me.id.get())));
                }
                tracing::info!(bot = %me.name, guilds, "gateway ready; waiting for the guilds");
                if guilds == 0 {
                    self.guilds_complete();
                } else {
                    self.connection.set(ConnectionState::Connecting);
                }
            }
            Event::Resumed(_) => {
                // Discord replayed what was missed; a pass still going keeps going.
                let backfilling = self.backfill.as_ref().is_some_and(|b| b.is_running());
                self.connection.set(if backfilling {
                    ConnectionState::Backfilling
                } else {
                    ConnectionState::Ready
                });
                tracing::info!("gateway resumed");
            }
            Event::GuildCreate(create) => {
                let guild = &create.guild;
                for channel in guild.channels.values().chain(guild.threads.iter()) {
                    self.guild_channel(channel);
                }
                for role in guild.roles.values() {
                    self.store.upsert_role(records::Role {
                        id: sid(role.id.get()),
                        name: role.name.clone(),
                    });
                }
                for member in guild.members.values() {
                    self.user(&member.user);
                }
                tracing::info!(guild = %guild.name, channels = guild.channels.len(), threads = guild.threads.len(), "guild cached");
                // The last guild READY announced completes the cache; a guild joined later
                // changes nothing about the connection.
                let before =
                    self.pending_guilds
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
                if before == Ok(1) {
                    self.guilds_complete();
                }
            }
            Event::GuildRoleCreate(GuildRoleCreateEvent { role, .. })
            | Event::GuildRoleUpdate(GuildRoleUpdateEvent { role, .. }) => {
                self.store.upsert_role(records::Role {
                    id: sid(role.id.get()),
                    name: role.name.clone(),
                });
            }
            Event::GuildRoleDelete(e) => self.store.remove_role(sid(e.role_id.get())),
            Event::GuildMemberAdd(e) => self.user(&e.member.user),
            Event::GuildMemberUpdate(e) => self.user(&e.user),
            Event::ChannelCreate(e) => self.guild_channel(&e.channel),
            Event::ChannelUpdate(e) => self.guild_channel(&e.channel),
            Event::ChannelDelete(e) => self.store.remove_channel(sid(e.channel.id.get())),
            Event::ThreadCreate(e) => self.guild_channel(&e.thread),
            Event::ThreadUpdate(e) => self.guild_channel(&e.thread),
            Event::ThreadDelete(e) => self.store.remove_session(sid(e.thread.id.get())),
            Event::ThreadListSync(e) => {
                for thread in &e.threads {
                    self.guild_channel(thread);
                }
            }
            Event::MessageCreate(e) => {
                self.message(&e.message, Origin::Live);
            }
            Event::MessageUpdate(e) => self.message_edited(e),
            Event::MessageDelete(e) => {
                let (channel, id) = (sid(e.channel_id.get()), sid(e.message_id.get()));
                if let Some(backfill) = &self.backfill {
                    backfill.forget_held(channel, &[id]);
                }
                if self.store.delete_message(channel, id) {
                    if let Some(observers) = &self.observers {
                        crate::observe::message_deleted(observers, channel, id);
                    }
                }
            }
            Event::MessageDeleteBulk(e) => {
                let channel = sid(e.channel_id.get());
                let ids: Vec<Snowflake> = e.ids.iter().map(|id| sid(id.get())).collect();
                if let Some(backfill) = &self.backfill {
                    backfill.forget_held(channel, &ids);
                }
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
                &crate::payload::emoji_text(&e.reaction.emoji),
            ),
            Event::Unknown(unknown) => {
                tracing::warn!(event = %unknown.kind, "gateway event could not be parsed; it was dropped");
            }
            _ => {}
        }
    }
}

/// Keeps a DM channel the bot learns of through a full channel object.
pub fn private_channel_session(channel: &Channel) -> Option<records::Session> {
    match channel {
        Channel::Private(dm) => Some(records::Session {
            id: sid(dm.id.get()),
            guild_id: None,
            parent_id: None,
            kind: SessionKind::Dm,
            name: dm.recipient.name.clone(),
        }),
        _ => None,
    }
}

/// An event's gateway name (`MESSAGE_CREATE`), for the metrics; `OTHER` for one serenity does
/// not know. Not serenity's `Event::name`, which serializes the whole event to read it back.
pub fn event_name(event: &Event) -> &'static str {
    match event {
        Event::CommandPermissionsUpdate(_) => "APPLICATION_COMMAND_PERMISSIONS_UPDATE",
        Event::AutoModRuleCreate(_) => "AUTO_MODERATION_RULE_CREATE",
        Event::AutoModRuleUpdate(_) => "AUTO_MODERATION_RULE_UPDATE",
        Event::AutoModRuleDelete(_) => "AUTO_MODERATION_RULE_DELETE",
        Event::AutoModActionExecution(_) => "AUTO_MODERATION_ACTION_EXECUTION",
        Event::ChannelCreate(_) => "CHANNEL_CREATE",
        Event::ChannelDelete(_) => "CHANNEL_DELETE",
        Event::ChannelPinsUpdate(_) => "CHANNEL_PINS_UPDATE",
        Event::ChannelUpdate(_) => "CHANNEL_UPDATE",
        Event::GuildAuditLogEntryCreate(_) => "GUILD_AUDIT_LOG_ENTRY_CREATE",
        Event::GuildBanAdd(_) => "GUILD_BAN_ADD",
        Event::GuildBanRemove(_) => "GUILD_BAN_REMOVE",
        Event::GuildCreate(_) => "GUILD_CREATE",
        Event::GuildDelete(_) => "GUILD_DELETE",
        Event::GuildEmojisUpdate(_) => "GUILD_EMOJIS_UPDATE",
        Event::GuildIntegrationsUpdate(_) => "GUILD_INTEGRATIONS_UPDATE",
        Event::GuildMemberAdd(_) => "GUILD_MEMBER_ADD",
        Event::GuildMemberRemove(_) => "GUILD_MEMBER_REMOVE",
        Event::GuildMemberUpdate(_) => "GUILD_MEMBER_UPDATE",
        Event::GuildMembersChunk(_) => "GUILD_MEMBERS_CHUNK",
        Event::GuildRoleCreate(_) => "GUILD_ROLE_CREATE",
        Event::GuildRoleDelete(_) => "GUILD_ROLE_DELETE",
        Event::GuildRoleUpdate(_) => "GUILD_ROLE_UPDATE",
        Event::GuildStickersUpdate(_) => "GUILD_STICKERS_UPDATE",
        Event::GuildUpdate(_) => "GUILD_UPDATE",
        Event::InviteCreate(_) => "INVITE_CREATE",
        Event::InviteDelete(_) => "INVITE_DELETE",
        Event::MessageCreate(_) => "MESSAGE_CREATE",
        Event::MessageDelete(_) => "MESSAGE_DELETE",
        Event::MessageDeleteBulk(_) => "MESSAGE_DELETE_BULK",
        Event::MessageUpdate(_) => "MESSAGE_UPDATE",
        Event::PresenceUpdate(_) => "PRESENCE_UPDATE",
        Event::ReactionAdd(_) => "MESSAGE_REACTION_ADD",
        Event::ReactionRemove(_) => "MESSAGE_REACTION_REMOVE",
        Event::ReactionRemoveAll(_) => "MESSAGE_REACTION_REMOVE_ALL",
        Event::ReactionRemoveEmoji(_) => "MESSAGE_REACTION_REMOVE_EMOJI",
        Event::Ready(_) => "READY",
        Event::Resumed(_) => "RESUMED",
        Event::SoundboardSounds(_) => "SOUNDBOARD_SOUNDS",
        Event::SoundboardSoundCreate(_) => "GUILD_SOUNDBOARD_SOUND_CREATE",
        Event::SoundboardSoundUpdate(_) => "GUILD_SOUNDBOARD_SOUND_UPDATE",
        Event::SoundboardSoundsUpdate(_) => "GUILD_SOUNDBOARD_SOUNDS_UPDATE",
        Event::SoundboardSoundDelete(_) => "GUILD_SOUNDBOARD_SOUND_DELETE",
        Event::TypingStart(_) => "TYPING_START",
        Event::UserUpdate(_) => "USER_UPDATE",
        Event::VoiceStateUpdate(_) => "VOICE_STATE_UPDATE",
        Event::VoiceServerUpdate(_) => "VOICE_SERVER_UPDATE",
        Event::VoiceChannelStatusUpdate(_) => "VOICE_CHANNEL_STATUS_UPDATE",
        Event::WebhookUpdate(_) => "WEBHOOKS_UPDATE",
        Event::InteractionCreate(_) => "INTERACTION_CREATE",
        Event::IntegrationCreate(_) => "INTEGRATION_CREATE",
        Event::IntegrationUpdate(_) => "INTEGRATION_UPDATE",
        Event::IntegrationDelete(_) => "INTEGRATION_DELETE",
        Event::StageInstanceCreate(_) => "STAGE_INSTANCE_CREATE",
        Event::StageInstanceUpdate(_) => "STAGE_INSTANCE_UPDATE",
        Event::StageInstanceDelete(_) => "STAGE_INSTANCE_DELETE",
        Event::ThreadCreate(_) => "THREAD_CREATE",
        Event::ThreadUpdate(_) => "THREAD_UPDATE",
        Event::ThreadDelete(_) => "THREAD_DELETE",
        Event::ThreadListSync(_) => "THREAD_LIST_SYNC",
        Event::ThreadMemberUpdate(_) => "THREAD_MEMBER_UPDATE",
        Event::ThreadMembersUpdate(_) => "THREAD_MEMBERS_UPDATE",
        Event::GuildScheduledEventCreate(_) => "GUILD_SCHEDULED_EVENT_CREATE",
        Event::GuildScheduledEventUpdate(_) => "GUILD_SCHEDULED_EVENT_UPDATE",
        Event::GuildScheduledEventDelete(_) => "GUILD_SCHEDULED_EVENT_DELETE",
        Event::GuildScheduledEventUserAdd(_) => "GUILD_SCHEDULED_EVENT_USER_ADD",
        Event::GuildScheduledEventUserRemove(_) => "GUILD_SCHEDULED_EVENT_USER_REMOVE",
        Event::EntitlementCreate(_) => "ENTITLEMENT_CREATE",
        Event::EntitlementUpdate(_) => "ENTITLEMENT_UPDATE",
        Event::EntitlementDelete(_) => "ENTITLEMENT_DELETE",
        Event::MessagePollVoteAdd(_) => "MESSAGE_POLL_VOTE_ADD",
        Event::MessagePollVoteRemove(_) => "MESSAGE_POLL_VOTE_REMOVE",

        _ => "OTHER",
    }
}

#[async_trait]
impl RawEventHandler for Ingest {
    async fn raw_event(&self, _: Context, event: Event) {
        self.apply(&event);
    }
}

/// Rounds a channel's release takes to catch up with live messages held while it ingested
/// (each round hands on what arrived during the one before; the release takes the rest).
const RELEASE_ROUNDS: usize = 4;

/// Channels a backfill pass fetches at the same time (their requests still share one rate
/// limiter: this overlaps waiting for answers with ingesting, it does not raise the rate).
const BACKFILL_CHANNELS_AT_ONCE: usize = 4;

/// How long the gateway may go without a ready session before the log explains the close codes
/// serenity keeps reconnecting through. A count of attempts would not do: serenity resumes in a
/// loop within one stage (Resuming), so it reports no stage change per attempt.
const STALL_EXPLAINED_AFTER: Duration = Duration::from_secs(30);

/// Tracks the shard's connection stage for `/health`, and explains a gateway that stays
/// without a ready session.
pub struct StageWatcher {
    state: Arc<StageState>,
}

struct StageState {
    connection: Arc<Connection>,
    /// A session has been ready once: later connections are resumes or re-identifies.
    was_ready: AtomicBool,
    /// Bumped whenever the session becomes ready or stops being ready; a stall timer only
    /// speaks when it is unchanged since the timer started.
    outage: AtomicU64,
    /// Whether the session is ready now.
    ready: AtomicBool,
    /// Explanations logged (for tests).
    explained: AtomicU32,
    /// How long without a ready session before the close codes are explained.
    stall_after: Duration,
}

impl crate::session_lost::SessionLost for StageState {
    /// serenity gives the session up (an op 9, a failed resume): not ready until the next
    /// session is, whatever the old one's stage still says.
    fn session_lost(self: Arc<Self>) {
        if !self.ready.load(Ordering::Relaxed) {
            return;
        }
        tracing::info!("the gateway session was given up; identifying afresh");
        stage_changed(&self, ConnectionStage::Resuming);
    }
}

impl StageWatcher {
    /// A watcher setting `connection`, the state `/health` reports and the ingest shares: down
    /// when the shard disconnects, connecting while it first connects, resuming while it comes
    /// back (the ingest sets backfilling and ready).
    pub fn new(connection: Arc<Connection>) -> StageWatcher {
        StageWatcher::with_stall(connection, STALL_EXPLAINED_AFTER)
    }

    /// [`StageWatcher::new`], explaining a stall after `stall_after`.
    pub fn with_stall(connection: Arc<Connection>, stall_after: Duration) -> StageWatcher {
        let state = Arc::new(StageState {
            connection,
            was_ready: AtomicBool::new(false),
            outage: AtomicU64::new(0),
            ready: AtomicBool::new(false),
            explained: AtomicU32::new(0),
            stall_after,
        });
        // serenity tells no handler when it gives a session up to identify afresh (an op 9):
        // its log does, and `session_lost` reads it.
        let lost: Arc<dyn crate::session_lost::SessionLost> = state.clone();
        crate::session_lost::register(Arc::downgrade(&lost));
        StageWatcher { state }
    }

    /// How many times a stall was explained.
    pub fn explained(&self) -> u32 {
        self.state.explained.load(Ordering::Relaxed)
    }

    /// The shard moved to `stage`. The stall timer runs on the current tokio runtime, if any.
    pub fn stage_changed(&self, stage: ConnectionStage) {
        stage_changed(&self.state, stage);
    }
}

/// `state`'s shard moved to `stage` (see [`StageWatcher::stage_changed`]).
fn stage_changed(state: &Arc<StageState>, stage: ConnectionStage) {
    if stage == ConnectionStage::Connected {
        state.was_ready.store(true, Ordering::Relaxed);
        if !state.ready.swap(true, Ordering::Relaxed) {
            state.outage.fetch_add(1, Ordering::Relaxed);
        }
        // `ready` and `backfilling` are set by the ingest once READY and every GUILD_CREATE
        // are applied.
        return;
    }
    state.connection.set(match stage {
        ConnectionStage::Disconnected => ConnectionState::Down,
        _ if state.was_ready.load(Ordering::Relaxed) => ConnectionState::Resuming,
        _ => ConnectionState::Connecting,
    });
    let first_change =
        state.ready.swap(false, Ordering::Relaxed) || state.outage.load(Ordering::Relaxed) == 0;
    if !first_change {
        return;
    }
    let outage = state.outage.fetch_add(1, Ordering::Relaxed) + 1;
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let state = Arc::clone(state);
    runtime.spawn(async move {
        let stall_after = state.stall_after;
        tokio::time::sleep(stall_after).await;
        if state.outage.load(Ordering::Relaxed) != outage {
            return;
        }
        state.explained.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            seconds = stall_after.as_secs(),
            "the gateway has had no ready session for a while; serenity's warnings above name the close code: 4012 means Discord no longer accepts this build's gateway version (upgrade switchboard), 4008 that it sends too fast, 4000 an error on Discord's side (it usually passes); no close code means Discord cannot be reached"
        );
    });
}

#[async_trait]
impl EventHandler for StageWatcher {
    async fn shard_stage_update(
        &self,
        _: Context,
        update: serenity::gateway::ShardStageUpdateEvent,
    ) {
        self.stage_changed(update.new);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    /// A gateway that stays without a ready session is explained once per outage, after the
    /// stall time, however many attempts serenity makes meanwhile; one that comes back in time
    /// is not.
    #[tokio::test(start_paused = true)]
    async fn a_stall_is_explained_once_and_a_quick_return_is_not() {
        let stall = Duration::from_secs(30);
        let watcher = StageWatcher::with_stall(Arc::new(Connection::default()), stall);
        // Start-up: connected well within the stall time.
        watcher.stage_changed(ConnectionStage::Connecting);
        watcher.stage_changed(ConnectionStage::Handshake);
        settle().await;
        tokio::time::advance(Duration::from_secs(1)).await;
        watcher.stage_changed(ConnectionStage::Connected);
        tokio::time::advance(stall * 2).await;
        settle().await;
        assert_eq!(watcher.explained(), 0, "a quick start is not a stall");

        // Closed, then resuming in a loop that never becomes ready.
        watcher.stage_changed(ConnectionStage::Resuming);
        for _ in 0..100 {
            watcher.stage_changed(ConnectionStage::Connecting);
            watcher.stage_changed(ConnectionStage::Resuming);
        }
        // The stall timer starts counting once its task first runs.
        settle().await;
        tokio::time::advance(stall - Duration::from_secs(1)).await;
        settle().await;
        assert_eq!(watcher.explained(), 0, "not before the stall time");
        tokio::time::advance(Duration::from_secs(2)).await;
        settle().await;
        assert_eq!(
            watcher.explained(),
            1,
            "explained once the stall time passed"
        );
        tokio::time::advance(stall * 3).await;
        settle().await;
        assert_eq!(watcher.explained(), 1, "once per outage");

        // Back, and gone again: a new outage, explained again.
        watcher.stage_changed(ConnectionStage::Connected);
        watcher.stage_changed(ConnectionStage::Disconnected);
        settle().await;
        tokio::time::advance(stall + Duration::from_secs(1)).await;
        settle().await;
        assert_eq!(watcher.explained(), 2);

        // Back within the stall time: nothing more.
        watcher.stage_changed(ConnectionStage::Connected);
        watcher.stage_changed(ConnectionStage::Resuming);
        settle().await;
        tokio::time::advance(Duration::from_secs(5)).await;
        watcher.stage_changed(ConnectionStage::Connected);
        tokio::time::advance(stall * 2).await;
        settle().await;
        assert_eq!(watcher.explained(), 2);
    }

    /// The names agree with serenity's own (slow) `Event::name` for the events the ingest
    /// meets most, and an event serenity does not know is `OTHER`.
    #[test]
    fn event_names_are_the_gateway_names() {
        let frames = [
            r#"{"op":0,"s":1,"t":"TYPING_START","d":{"channel_id":"1","user_id":"2","timestamp":1700000000}}"#,
            r#"{"op":0,"s":2,"t":"MESSAGE_REACTION_REMOVE_ALL","d":{"channel_id":"1","message_id":"3"}}"#,
            r#"{"op":0,"s":3,"t":"MESSAGE_DELETE","d":{"channel_id":"1","id":"3"}}"#,
            r#"{"op":0,"s":4,"t":"CHANNEL_PINS_UPDATE","d":{"channel_id":"1"}}"#,
            r#"{"op":0,"s":5,"t":"SOMETHING_NEW","d":{}}"#,
        ];
        for frame in frames {
            let serenity::model::event::GatewayEvent::Dispatch(_, event) =
                serde_json::from_str(frame).expect("a dispatch")
            else {
                panic!("not a dispatch: {frame}");
            };
            let expected = event.name().unwrap_or_else(|| "OTHER".to_owned());
            assert_eq!(event_name(&event), expected, "{frame}");
        }
    }
}
