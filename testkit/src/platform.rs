//! [`RecordingPlatform`]: the stand-in for Discord in tests, benchmarks and examples. It keeps
//! nothing of its own that the store keeps: sessions, users, roles, messages, threads and search
//! are the store's (a [`Store`] over a [`MemoryBackend`], read as the Discord platform reads its
//! store). It records every action asked of it ([`SurfaceCall`]) and applies the action's effect
//! to the store the way Discord's answer and the gateway's echo would (a sent message is stored,
//! so later reads and searches see it). What only Discord knows — attachment bodies, pins,
//! channels it would describe but the cache lacks, the connection — it keeps itself.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use entity::{Aliases, Mapper, NameDirectory, Snowflake};
use switchboard_records as records;
use switchboard_store::{MemoryBackend, MemoryOptions, SearchStore as _, Store};

use crate::approvals::ApprovalCard;
use crate::surface::{
    AllowedChannel, Attachment, ChannelEdit, ChannelLocation, ConnectionState, Fetched,
    MentionPolicy, MessageInfo, NewChannel, NewChannelKind, NewThread, OutgoingMessage,
    PinnedMessage, SearchHit, SearchQuery, Session, SessionKind, Surface, SurfaceError, Thread,
    ThreadState,
};

/// One action the platform was asked to take; recorded before it runs, so an action a queued
/// failure refused is recorded too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SurfaceCall {
    /// [`Surface::channel_info`] for this channel.
    ChannelInfo(Snowflake),
    /// [`Surface::send_message`] with this message, exactly as the tool server built it.
    Send(OutgoingMessage),
    /// [`Surface::edit_message`]: replace a message's text.
    Edit {
        /// The message's channel.
        channel_id: Snowflake,
        /// The message to edit.
        message_id: Snowflake,
        /// The new Discord text.
        content: String,
        /// Who the edited text may ping.
        mentions: MentionPolicy,
    },
    /// [`Surface::delete_message`]: delete a message.
    Delete {
        /// The message's channel.
        channel_id: Snowflake,
        /// The message to delete.
        message_id: Snowflake,
    },
    /// [`Surface::set_reaction`] (`true`): the bot's reaction on a message.
    AddReaction {
        /// The message's channel.
        channel_id: Snowflake,
        /// The message to react to.
        message_id: Snowflake,
        /// The emoji, as the tool server passed it.
        emoji: String,
    },
    /// [`Surface::set_reaction`] (`false`): take the bot's reaction off a message.
    RemoveReaction {
        /// The message's channel.
        channel_id: Snowflake,
        /// The message the reaction is on.
        message_id: Snowflake,
        /// The emoji, as the tool server passed it.
        emoji: String,
    },
    /// [`Surface::typing`] in this channel.
    Typing(Snowflake),
    /// [`Surface::fetch_attachment`] for the attachment at this URL.
    FetchAttachment(String),
    /// An approval request posted (the card as posted).
    PostApproval {
        /// Where.
        channel_id: Snowflake,
        /// The card as posted.
        card: ApprovalCard,
    },
    /// [`Surface::list_threads`] of this channel.
    ListThreads {
        /// The channel whose threads were listed.
        parent: Snowflake,
        /// Whether archived ones were asked for.
        include_archived: bool,
    },
    /// [`Surface::create_thread`], as the tool server asked.
    CreateThread(NewThread),
    /// [`Surface::set_thread_archived`].
    SetThreadArchived {
        /// The thread.
        channel_id: Snowflake,
        /// Archive (true) or reopen.
        archived: bool,
    },
    /// [`Surface::set_pinned`] (`true`).
    Pin {
        /// The message's channel.
        channel_id: Snowflake,
        /// The message.
        message_id: Snowflake,
    },
    /// [`Surface::set_pinned`] (`false`).
    Unpin {
        /// The message's channel.
        channel_id: Snowflake,
        /// The message.
        message_id: Snowflake,
    },
    /// [`Surface::pinned_messages`] of this channel.
    ListPins(Snowflake),
    /// [`Surface::search`], as the tool server asked.
    Search(SearchQuery),
    /// [`Surface::create_channel`], as the tool server asked.
    CreateChannel(NewChannel),
    /// [`Surface::edit_channel`].
    EditChannel {
        /// The channel.
        channel_id: Snowflake,
        /// What to change.
        edit: ChannelEdit,
    },
    /// [`Surface::delete_channel`] of this channel.
    DeleteChannel(Snowflake),
    /// An approval request redrawn (the card as redrawn).
    UpdateApproval {
        /// Where.
        channel_id: Snowflake,
        /// The card's message.
        message_id: Snowflake,
        /// The card as redrawn.
        card: ApprovalCard,
    },
}

/// What only the platform knows (Discord's side of things), and the recorder's controls.
struct Recorder {
    bot_id: Snowflake,
    connection: ConnectionState,
    /// Channels only `channel_info` knows (not in the store).
    uncached: BTreeMap<Snowflake, ChannelLocation>,
    calls: Vec<SurfaceCall>,
    next_id: u64,
    failures: VecDeque<SurfaceError>,
    delay: Option<Duration>,
    /// Attachment bodies by url (Discord's CDN).
    files: BTreeMap<String, Vec<u8>>,
    /// Pinned messages per channel, oldest pin first, with when they were pinned (pins are
    /// asked of Discord, never stored).
    pins: BTreeMap<Snowflake, Vec<(Snowflake, String)>>,
}

/// Most pins a channel holds, as on Discord.
const MAX_PINS: usize = 250;

/// How long a search may run (as the Discord platform allows it).
const SEARCH_BUDGET: Duration = Duration::from_millis(500);

/// The ids of [`RecordingPlatform::demo`]: the shared demo world (the `demo_world` crate, which
/// fake-discord's demo world is built from too), plus a few extras only this platform has.
pub mod demo {
    pub use demo_world::*;

    // Extras beyond the shared world, for the tool server's own tests.

    /// A guild the demo config does not list.
    pub const OTHER_GUILD: u64 = 1000000000000000600;
    /// A channel in the unlisted guild.
    pub const OTHER_CHANNEL: u64 = 1000000000000000601;
    /// A channel of the listed guild that is not cached: only `channel_info` knows it.
    pub const UNCACHED: u64 = 1000000000000000405;
}

/// Stores the shared demo world ([`demo_world`]) in `store`, as the gateway would on READY:
/// guild Lab's channels and threads, the DM with stanley, the bot and the users, the role;
/// plus [`demo::OTHER_CHANNEL`] ("elsewhere", in a guild the demo config does not list).
pub fn seed_demo_world(store: &Store) {
    use demo::*;
    let guild = Some(Snowflake(GUILD));
    for channel in CHANNELS {
        store.upsert_session(Session {
            id: Snowflake(channel.id),
            guild_id: guild,
            parent_id: channel.parent.map(Snowflake),
            kind: match channel.kind {
                ChannelKind::Text => SessionKind::Channel,
                ChannelKind::Thread => SessionKind::Thread,
            },
            name: channel.name.to_owned(),
        });
    }
    for dm in DMS {
        store.upsert_session(Session {
            id: Snowflake(dm.id),
            guild_id: None,
            parent_id: None,
            kind: SessionKind::Dm,
            name: user(dm.recipient).map_or("", |u| u.username).to_owned(),
        });
    }
    store.upsert_session(Session {
        id: Snowflake(OTHER_CHANNEL),
        guild_id: Some(Snowflake(OTHER_GUILD)),
        parent_id: None,
        kind: SessionKind::Channel,
        name: "elsewhere".to_owned(),
    });
    store.upsert_user(records::User {
        id: Snowflake(BOT),
        username: BOT_USERNAME.to_owned(),
        global_name: None,
        is_bot: true,
    });
    for user in USERS {
        store.upsert_user(records::User {
            id: Snowflake(user.id),
            username: user.username.to_owned(),
            global_name: user.global_name.map(str::to_owned),
            is_bot: false,
        });
    }
    for role in ROLES {
        store.upsert_role(records::Role {
            id: Snowflake(role.id),
            name: role.name.to_owned(),
        });
    }
}

/// A chat platform over a memory store that records every action.
pub struct RecordingPlatform {
    store: Store,
    backend: Arc<MemoryBackend>,
    aliases: Aliases,
    recorder: Mutex<Recorder>,
}

fn timestamp(seq: u64) -> String {
    let seconds = seq % 86_400;
    format!(
        "2026-11-22T{:02}:{:02}:{:02}.000Z",
        seconds / 3600,
        (seconds / 60) % 60,
        seconds % 60
    )
}

impl RecordingPlatform {
    /// An empty platform whose bot is `bot_id`, over a fresh memory store: no sessions, users
    /// or messages, connection [`ConnectionState::None`], and message ids counting up from
    /// 1000000000000000901.
    pub fn new(bot_id: Snowflake) -> Self {
        let backend = Arc::new(MemoryBackend::new(MemoryOptions::default()));
        let store = Store::open(backend.clone(), switchboard_store::CacheOptions::default())
            .expect("a memory store opens");
        RecordingPlatform {
            store,
            backend,
            aliases: Aliases::default(),
            recorder: Mutex::new(Recorder {
                bot_id,
                connection: ConnectionState::None,
                uncached: BTreeMap::new(),
                calls: Vec::new(),
                next_id: 1000000000000000900,
                failures: VecDeque::new(),
                delay: None,
                files: BTreeMap::new(),
                pins: BTreeMap::new(),
            }),
        }
    }

    /// The shared demo world ([`seed_demo_world`]: guild Lab with #ops, #release-room,
    /// #secret, #random, threads incident-42 (under #ops) and off-topic-thread (under #random),
    /// a DM with stanley, users stanley and tomas, role oncall, and "elsewhere" in an unlisted
    /// guild), plus a channel of Lab only `channel_info` knows ([`demo::UNCACHED`]).
    pub fn demo() -> Self {
        let platform = RecordingPlatform::new(Snowflake(demo::BOT));
        seed_demo_world(&platform.store);
        platform.add_uncached_channel(
            Snowflake(demo::UNCACHED),
            ChannelLocation {
                guild_id: Some(Snowflake(demo::GUILD)),
                parent_channel_id: None,
                kind: SessionKind::Channel,
            },
        );
        platform
    }

    /// The store the platform reads from and applies actions to.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The memory backend behind [`RecordingPlatform::store`]: hand it to the engine, so
    /// audit rows, approvals and scopes live beside the messages.
    pub fn backend(&self) -> &Arc<MemoryBackend> {
        &self.backend
    }

    fn lock(&self) -> MutexGuard<'_, Recorder> {
        // A panic while holding the lock leaves plain data behind; keep serving it.
        self.recorder
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stores a session (channel, thread or DM); its title becomes a channel name.
    pub fn add_session(&self, info: Session) {
        self.store.upsert_session(info);
    }

    /// Sets what is known of a thread: archived, and locked (only a moderator reopens a locked
    /// thread). A thread never set is open and unlocked.
    pub fn set_thread_state(&self, id: Snowflake, archived: bool, locked: bool) {
        let known = self.store.thread_state(id).unwrap_or_default();
        self.store.set_thread_state(
            id,
            ThreadState {
                archived,
                locked,
                ..known
            },
        );
    }

    /// A channel only [`Surface::channel_info`] knows: not in the store.
    pub fn add_uncached_channel(&self, id: Snowflake, location: ChannelLocation) {
        self.lock().uncached.insert(id, location);
    }

    /// Stores a user; their messages show `global_name` if given, else `username`.
    pub fn add_user(&self, id: Snowflake, username: &str, global_name: Option<&str>) {
        self.store.upsert_user(records::User {
            id,
            username: username.to_owned(),
            global_name: global_name.map(str::to_owned),
            is_bot: false,
        });
    }

    /// Stores a message as if `author` posted it (the gateway's MESSAGE_CREATE); returns its
    /// id.
    pub fn post(&self, channel_id: Snowflake, author: Snowflake, content: &str) -> Snowflake {
        self.store_message(channel_id, author, content, None, &[])
    }

    /// [`RecordingPlatform::post`] with attachments (`(filename, bytes)`); the files are served
    /// by [`Surface::fetch_attachment`].
    pub fn post_with_files(
        &self,
        channel_id: Snowflake,
        author: Snowflake,
        content: &str,
        files: &[(&str, &[u8])],
    ) -> Snowflake {
        self.store_message(channel_id, author, content, None, files)
    }

    /// The next id and its timestamp.
    fn next_id(&self) -> (Snowflake, String) {
        let mut recorder = self.lock();
        recorder.next_id += 1;
        (Snowflake(recorder.next_id), timestamp(recorder.next_id))
    }

    fn store_message(
        &self,
        channel_id: Snowflake,
        author: Snowflake,
        content: &str,
        reply_to: Option<Snowflake>,
        files: &[(&str, &[u8])],
    ) -> Snowflake {
        let (id, timestamp) = self.next_id();
        let attachments = {
            let mut recorder = self.lock();
            files
                .iter()
                .enumerate()
                .map(|(index, (filename, bytes))| {
                    let url = format!("memory://attachments/{id}/{index}/{filename}");
                    recorder.files.insert(url.clone(), bytes.to_vec());
                    Attachment {
                        filename: (*filename).to_owned(),
                        url,
                        size: bytes.len() as u64,
                        content_type: None,
                    }
                })
                .collect()
        };
        let text = self.readable(content);
        self.store.insert_message(records::Message {
            id,
            channel_id,
            author_id: author,
            author_is_bot: self.store.user_is_bot(author).unwrap_or(false),
            content: content.to_owned(),
            text,
            timestamp,
            edited_timestamp: None,
            reply_to,
            attachments,
            reactions: Vec::new(),
        });
        id
    }

    /// Discord text as the gateway stores it for search (mentions as `@name`).
    fn readable(&self, content: &str) -> String {
        Mapper::new(&self.aliases, &self.store)
            .inbound(content)
            .into_owned()
    }

    /// Every action taken so far, in order.
    pub fn calls(&self) -> Vec<SurfaceCall> {
        self.lock().calls.clone()
    }

    /// Forgets the actions recorded so far (what they did to the store stays).
    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// The next action fails with `error` (queued; one failure per action).
    pub fn fail_next(&self, error: SurfaceError) {
        self.lock().failures.push_back(error);
    }

    /// Every action waits this long first (for timeout tests).
    pub fn set_delay(&self, delay: Option<Duration>) {
        self.lock().delay = delay;
    }

    /// What [`Surface::connection`] reports from now on (and so what `/health` says).
    pub fn set_connection(&self, connection: ConnectionState) {
        self.lock().connection = connection;
    }

    /// Records an action and returns the failure queued for it, if any.
    async fn begin(&self, call: SurfaceCall) -> Result<(), SurfaceError> {
        let delay = {
            let mut recorder = self.lock();
            recorder.calls.push(call);
            recorder.delay
        };
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        match self.lock().failures.pop_front() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn bot(&self) -> Snowflake {
        self.lock().bot_id
    }

    /// The stored message, or Discord's "Unknown message".
    fn stored(
        &self,
        channel_id: Snowflake,
        message_id: Snowflake,
    ) -> Result<records::Message, SurfaceError> {
        self.store
            .message(channel_id, message_id)
            .ok_or_else(|| SurfaceError::NotFound(format!("Unknown message {message_id}")))
    }

    fn info(&self, message: records::Message) -> Arc<MessageInfo> {
        let author = self.store.author_name(message.author_id);
        Arc::new(MessageInfo::from_stored(message, author))
    }

    /// The bot's reaction put on (`add`) or taken off a stored message, as the gateway's
    /// MESSAGE_REACTION_ADD / _REMOVE echo stores it.
    async fn react(
        &self,
        channel_id: Snowflake,
        message_id: Snowflake,
        emoji: String,
        add: bool,
    ) -> Result<(), SurfaceError> {
        let call = if add {
            SurfaceCall::AddReaction {
                channel_id,
                message_id,
                emoji: emoji.clone(),
            }
        } else {
            SurfaceCall::RemoveReaction {
                channel_id,
                message_id,
                emoji: emoji.clone(),
            }
        };
        self.begin(call).await?;
        self.stored(channel_id, message_id)?;
        if add {
            self.store
                .add_reaction(channel_id, message_id, &emoji, true);
        } else {
            self.store
                .remove_reaction(channel_id, message_id, &emoji, true);
        }
        Ok(())
    }

    /// A thread the platform shows: known, and under a known parent.
    fn shown_thread(&self, id: Snowflake) -> Option<Thread> {
        self.store.thread(id).filter(|t| t.parent_id().is_some())
    }
}

impl NameDirectory for RecordingPlatform {
    fn user_by_key(&self, key: &str) -> Option<Snowflake> {
        self.store.user_by_key(key)
    }
    fn role_by_key(&self, key: &str) -> Option<Snowflake> {
        self.store.role_by_key(key)
    }
    fn channel_by_key(&self, key: &str) -> Option<Snowflake> {
        self.store.channel_by_key(key)
    }
    fn users_by_key(&self, key: &str) -> Vec<Snowflake> {
        self.store.users_by_key(key)
    }
    fn channels_by_key(&self, key: &str) -> Vec<Snowflake> {
        self.store.channels_by_key(key)
    }
    fn find_user_name(&self, id: Snowflake, accept: &mut dyn FnMut(&str) -> bool) {
        self.store.find_user_name(id, accept);
    }
    fn role_name(&self, id: Snowflake) -> Option<String> {
        self.store.role_name(id)
    }
    fn channel_name(&self, id: Snowflake) -> Option<String> {
        self.store.channel_name(id)
    }
}

#[async_trait]
impl Surface for RecordingPlatform {
    fn connection(&self) -> ConnectionState {
        self.lock().connection
    }

    fn bot_user_id(&self) -> Option<Snowflake> {
        Some(self.bot())
    }

    fn cache(&self) -> &Store {
        &self.store
    }

    async fn channel_info(&self, channel_id: Snowflake) -> Result<ChannelLocation, SurfaceError> {
        self.begin(SurfaceCall::ChannelInfo(channel_id)).await?;
        self.store
            .session(channel_id)
            .map(|s| ChannelLocation::from(&s))
            .or_else(|| self.lock().uncached.get(&channel_id).copied())
            .ok_or_else(|| SurfaceError::NotFound(format!("Unknown channel {channel_id}")))
    }

    async fn send_message(&self, message: OutgoingMessage) -> Result<Snowflake, SurfaceError> {
        self.begin(SurfaceCall::Send(message.clone())).await?;
        let channel_id = message.channel_id.id();
        if self
            .store
            .thread_state(channel_id)
            .is_some_and(|t| t.archived)
        {
            return Err(SurfaceError::Conflict("Thread is archived".into()));
        }
        if let Some(reply_to) = message.reply_to {
            if self.store.message(channel_id, reply_to).is_none() {
                return Err(SurfaceError::InvalidInput {
                    message: format!("Reply target {reply_to} is not a message in this channel"),
                    details: serde_json::json!({"message_reference": "unknown message"}),
                });
            }
        }
        let files: Vec<(&str, &[u8])> = message
            .files
            .iter()
            .map(|f| (f.filename.as_str(), f.content.as_slice()))
            .collect();
        Ok(self.store_message(
            channel_id,
            self.bot(),
            &message.content,
            message.reply_to,
            &files,
        ))
    }

    async fn edit_message(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        content: String,
        mentions: MentionPolicy,
    ) -> Result<(), SurfaceError> {
        let channel_id = channel.id();
        self.begin(SurfaceCall::Edit {
            channel_id,
            message_id,
            content: content.clone(),
            mentions,
        })
        .await?;
        let message = self.stored(channel_id, message_id)?;
        if message.author_id != self.bot() {
            return Err(SurfaceError::Denied(
                "Cannot edit a message authored by another user".into(),
            ));
        }
        let (_, edited) = self.next_id();
        let text = self.readable(&content);
        self.store
            .update_message(channel_id, message_id, content, text, Some(edited));
        Ok(())
    }

    async fn delete_message(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
    ) -> Result<(), SurfaceError> {
        let channel_id = channel.id();
        self.begin(SurfaceCall::Delete {
            channel_id,
            message_id,
        })
        .await?;
        if self.store.delete_message(channel_id, message_id) {
            Ok(())
        } else {
            Err(SurfaceError::NotFound(format!(
                "Unknown message {message_id}"
            )))
        }
    }

    async fn set_reaction(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        emoji: String,
        present: bool,
    ) -> Result<(), SurfaceError> {
        self.react(channel.id(), message_id, emoji, present).await
    }

    async fn typing(&self, channel: AllowedChannel) -> Result<(), SurfaceError> {
        self.begin(SurfaceCall::Typing(channel.id())).await
    }

    async fn post_approval(
        &self,
        channel: AllowedChannel,
        card: &ApprovalCard,
    ) -> Result<Snowflake, SurfaceError> {
        self.begin(SurfaceCall::PostApproval {
            channel_id: channel.id(),
            card: card.clone(),
        })
        .await?;
        let text = format!("Approval needed: {} in {}", card.tool, card.session_label);
        Ok(self.store_message(channel.id(), self.bot(), &text, None, &[]))
    }

    async fn update_approval(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        card: &ApprovalCard,
    ) -> Result<(), SurfaceError> {
        self.begin(SurfaceCall::UpdateApproval {
            channel_id: channel.id(),
            message_id,
            card: card.clone(),
        })
        .await
    }

    async fn fetch_attachment(
        &self,
        attachment: &Attachment,
        limit: u64,
    ) -> Result<Fetched, SurfaceError> {
        self.begin(SurfaceCall::FetchAttachment(attachment.url.clone()))
            .await?;
        let recorder = self.lock();
        let bytes = recorder
            .files
            .get(&attachment.url)
            .ok_or_else(|| SurfaceError::NotFound(format!("no file at {}", attachment.url)))?;
        if bytes.len() as u64 > limit {
            return Ok(Fetched::OverLimit);
        }
        Ok(Fetched::Bytes(bytes.clone()))
    }

    fn thread(&self, channel_id: Snowflake) -> Option<Thread> {
        self.shown_thread(channel_id)
    }

    fn threads(&self, parent: Option<Snowflake>) -> Vec<Thread> {
        self.store
            .threads(parent)
            .into_iter()
            .filter(|t| t.parent_id().is_some())
            .collect()
    }

    async fn list_threads(
        &self,
        parent: AllowedChannel,
        include_archived: bool,
    ) -> Result<Vec<Thread>, SurfaceError> {
        self.begin(SurfaceCall::ListThreads {
            parent: parent.id(),
            include_archived,
        })
        .await?;
        Ok(self
            .store
            .threads(Some(parent.id()))
            .into_iter()
            .filter(|t| include_archived || !t.state.archived)
            .collect())
    }

    async fn create_thread(&self, thread: NewThread) -> Result<Thread, SurfaceError> {
        self.begin(SurfaceCall::CreateThread(thread.clone()))
            .await?;
        let parent = thread.parent.id();
        let guild_id = self.store.session(parent).and_then(|s| s.guild_id);
        // A thread started from a message takes the message's id, as on Discord.
        let id = match thread.from_message {
            Some(message_id) => {
                self.stored(parent, message_id)?;
                if self.store.session(message_id).is_some() {
                    return Err(SurfaceError::InvalidInput {
                        message: "A thread has already been created for this message".into(),
                        details: serde_json::Value::Null,
                    });
                }
                message_id
            }
            None => self.next_id().0,
        };
        self.store.upsert_session(Session {
            id,
            guild_id,
            parent_id: Some(parent),
            kind: SessionKind::Thread,
            name: thread.name.clone(),
        });
        self.store.set_thread_state(
            id,
            ThreadState {
                auto_archive_minutes: thread.auto_archive_minutes.unwrap_or(1440),
                owner_id: Some(self.bot()),
                ..ThreadState::default()
            },
        );
        self.shown_thread(id)
            .ok_or_else(|| SurfaceError::Unavailable("the new thread vanished".into()))
    }

    async fn set_thread_archived(
        &self,
        thread: AllowedChannel,
        archived: bool,
    ) -> Result<Thread, SurfaceError> {
        let id = thread.id();
        self.begin(SurfaceCall::SetThreadArchived {
            channel_id: id,
            archived,
        })
        .await?;
        let known = self
            .shown_thread(id)
            .ok_or_else(|| SurfaceError::NotFound(format!("Unknown thread {id}")))?;
        if known.state.locked && !archived {
            return Err(SurfaceError::Denied(
                "Missing Permissions: the thread is locked (Manage Threads reopens it)".into(),
            ));
        }
        self.store.set_thread_state(
            id,
            ThreadState {
                archived,
                ..known.state
            },
        );
        self.shown_thread(id)
            .ok_or_else(|| SurfaceError::NotFound(format!("Unknown thread {id}")))
    }

    async fn set_pinned(
        &self,
        channel: AllowedChannel,
        message_id: Snowflake,
        pinned: bool,
    ) -> Result<(), SurfaceError> {
        let channel_id = channel.id();
        if !pinned {
            self.begin(SurfaceCall::Unpin {
                channel_id,
                message_id,
            })
            .await?;
            if let Some(pins) = self.lock().pins.get_mut(&channel_id) {
                pins.retain(|(id, _)| *id != message_id);
            }
            return Ok(());
        }
        let call = SurfaceCall::Pin {
            channel_id,
            message_id,
        };
        self.begin(call).await?;
        self.stored(channel_id, message_id)?;
        let mut recorder = self.lock();
        let at = timestamp(recorder.next_id);
        let pins = recorder.pins.entry(channel_id).or_default();
        if pins.iter().any(|(id, _)| *id == message_id) {
            return Ok(());
        }
        if pins.len() >= MAX_PINS {
            return Err(SurfaceError::InvalidInput {
                message: format!("Maximum number of pins reached ({MAX_PINS})"),
                details: serde_json::Value::Null,
            });
        }
        pins.push((message_id, at));
        Ok(())
    }

    async fn pinned_messages(
        &self,
        channel: AllowedChannel,
    ) -> Result<Vec<PinnedMessage>, SurfaceError> {
        let channel_id = channel.id();
        self.begin(SurfaceCall::ListPins(channel_id)).await?;
        let pins = self
            .lock()
            .pins
            .get(&channel_id)
            .cloned()
            .unwrap_or_default();
        Ok(pins
            .into_iter()
            .rev()
            .filter_map(|(id, at)| {
                let message = self.store.message(channel_id, id)?;
                Some(PinnedMessage {
                    message: self.info(message),
                    pinned_at: Some(at),
                })
            })
            .collect())
    }

    /// The store's search, as the Discord platform runs it.
    async fn search(&self, query: SearchQuery) -> Result<Vec<SearchHit>, SurfaceError> {
        self.begin(SurfaceCall::Search(query.clone())).await?;
        let hits = self
            .backend
            .search(query.map_channels(AllowedChannel::id), SEARCH_BUDGET)
            .await
            .map_err(|e| {
                SurfaceError::Unavailable(format!("the message store cannot search: {e}"))
            })?;
        Ok(hits
            .into_iter()
            .map(|hit| SearchHit {
                message: self.info(hit.message),
                snippet: hit.snippet,
                score: hit.score,
            })
            .collect())
    }

    async fn create_channel(&self, channel: NewChannel) -> Result<Session, SurfaceError> {
        self.begin(SurfaceCall::CreateChannel(channel.clone()))
            .await?;
        let info = Session {
            id: self.next_id().0,
            guild_id: Some(channel.place.guild()),
            parent_id: channel.place.category(),
            kind: match channel.kind {
                NewChannelKind::Forum => SessionKind::Forum,
                NewChannelKind::Text | NewChannelKind::Voice => SessionKind::Channel,
            },
            name: channel.name,
        };
        self.store.upsert_session(info.clone());
        Ok(info)
    }

    async fn edit_channel(
        &self,
        channel: AllowedChannel,
        edit: ChannelEdit,
    ) -> Result<Session, SurfaceError> {
        let id = channel.id();
        self.begin(SurfaceCall::EditChannel {
            channel_id: id,
            edit: edit.clone(),
        })
        .await?;
        let Some(mut info) = self.store.session(id) else {
            return Err(SurfaceError::NotFound(format!("Unknown Channel {id}")));
        };
        if let Some(name) = edit.name {
            info.name = name;
        }
        self.store.upsert_session(info.clone());
        Ok(info)
    }

    /// Discord deletes the channel with its threads; the store drops their sessions, as on the
    /// gateway's CHANNEL_DELETE.
    async fn delete_channel(&self, channel: AllowedChannel) -> Result<(), SurfaceError> {
        let id = channel.id();
        self.begin(SurfaceCall::DeleteChannel(id)).await?;
        if self.store.session(id).is_none() {
            return Err(SurfaceError::NotFound(format!("Unknown Channel {id}")));
        }
        self.store.remove_channel(id);
        Ok(())
    }
}
