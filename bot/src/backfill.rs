//! Backfill: fetching what the gateway did not deliver.
//!
//! Discord replays missed events only when a session RESUMEs. After a fresh identify (start-up,
//! an INVALID_SESSION, an outage too long to resume) every message posted while the gateway was
//! away is simply gone from the gateway's point of view, so the bot fetches the gap itself over
//! REST, for every channel, thread and DM it knows and the allowlist permits.
//!
//! Where a channel's gap starts is decided at READY, before any event of the new session is
//! applied: an open gap the store recorded earlier (a pass that never finished, even in an
//! earlier process), else the channel's newest stored message not written by the bot (the bot's
//! own messages are stored from REST answers, gateway or not). The gap is recorded in the store
//! at READY and closed when the channel caught up, so a restart in between fetches it again.
//!
//! A channel's gap is fetched with `GET /channels/{id}/messages?after=<gap start>&limit=100`;
//! a gap larger than that page is walked back from the newest message (`before=`) to it, at
//! most [`BackfillOptions::max_messages`] messages and none older than
//! [`BackfillOptions::max_age`]; then its messages are ingested oldest first through the same
//! path as live ones (canonical text, workflows, triggers marked as missed). The walk goes
//! newest first because the bound then keeps what the store's retention keeps, and what a
//! missed trigger can be: the most recent messages. Requests wait for the bucket's refill when
//! `X-RateLimit-Remaining` reaches 0, instead of running into 429s. A pass fetches a few
//! channels at once while it ingests those already fetched, in order
//! (`Ingest::backfill_pass`).
//!
//! While a pass has a channel still to ingest, that channel's live messages are held back
//! ([`Backfill::hold`]) and handed on once its gap is in, merged with the fetched ones by id:
//! a channel's messages are stored, and its triggers answered, in Discord's order even when a
//! live message arrives before the older ones the pass fetches (a node that takes over a
//! shard, a fresh identify after an outage). The hold is bounded ([`HOLD_MAX`]), and a held
//! message is not stored yet, so a process that dies while holding it loses nothing: the gap,
//! still open, is fetched again, and it with it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use entity::Snowflake;
use serde_json::Value;
use serenity::model::channel::Message;
use serenity::model::id::GuildId;

use crate::rest::DiscordRest;
use switchboard_records as records;
use switchboard_records::trigger::first_id_at;
use switchboard_records::SessionKind;
use switchboard_store::Store;

/// Messages per request: Discord's maximum.
const PAGE: u8 = 100;

/// The most live messages held back at once, all channels together: past it a live message
/// is stored and handed on at once (its channel's order is then not kept; the log says so).
pub(crate) const HOLD_MAX: usize = 1_000;

/// A channel's held live messages, by id.
pub(crate) type Held = BTreeMap<Snowflake, Message>;

/// Live messages held back until their channel's gap is in.
#[derive(Default)]
struct Holding {
    /// The READY whose pass the channels below belong to.
    generation: u64,
    /// Channels that pass has not ingested yet: their live messages wait.
    channels: HashSet<Snowflake>,
    /// Never an empty map: a channel is here only while something of it waits.
    held: HashMap<Snowflake, Held>,
    /// The bound was reached during this pass (said once).
    overflowed: bool,
}

impl Holding {
    fn take(&mut self, channel: Snowflake) -> Held {
        self.held.remove(&channel).unwrap_or_default()
    }

    /// How many messages wait, all channels together.
    fn count(&self) -> usize {
        self.held.values().map(BTreeMap::len).sum()
    }
}

/// How much a backfill fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackfillOptions {
    /// Most messages fetched per channel (`store.backfill_max_messages`); the newest are kept.
    pub max_messages: usize,
    /// Messages older than this are not fetched (`store.backfill_max_age_s`).
    pub max_age: Duration,
}

impl Default for BackfillOptions {
    fn default() -> Self {
        BackfillOptions {
            max_messages: 1_000,
            max_age: Duration::from_secs(24 * 3600),
        }
    }
}

/// What one backfill pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackfillReport {
    /// Channels, threads and DMs looked at.
    pub channels: usize,
    /// Channels whose gap could not be fetched (their gap stays open for the next pass).
    pub failed: usize,
    /// Channels whose gap held more than `max_messages`: the older rest was left out.
    pub truncated: usize,
    /// Requests made.
    pub requests: usize,
    /// Messages fetched inside the gaps.
    pub fetched: usize,
    /// Fetched messages the store did not hold yet.
    pub stored: usize,
    /// How long the pass took.
    pub elapsed: Duration,
}

/// The backfill state an [`Ingest`](crate::gateway::Ingest) keeps.
pub(crate) struct Backfill {
    rest: DiscordRest,
    options: BackfillOptions,
    /// Bumped at every READY: a pass started for an older READY stops between channels.
    generation: AtomicU64,
    /// Where each channel's gap starts, decided at the latest READY.
    plan: Mutex<HashMap<Snowflake, Snowflake>>,
    /// A pass is going.
    running: AtomicBool,
    last: Mutex<Option<BackfillReport>>,
    holding: Mutex<Holding>,
    /// [`HOLD_MAX`] (smaller in tests).
    hold_max: usize,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A channel's fetched gap, oldest first.
pub(crate) struct Fetched {
    pub(crate) messages: Vec<Message>,
    pub(crate) requests: usize,
    pub(crate) truncated: bool,
}

impl Backfill {
    pub(crate) fn new(rest: DiscordRest, options: BackfillOptions) -> Backfill {
        Backfill {
            rest,
            options,
            generation: AtomicU64::new(0),
            plan: Mutex::new(HashMap::new()),
            running: AtomicBool::new(false),
            last: Mutex::new(None),
            holding: Mutex::new(Holding::default()),
            hold_max: HOLD_MAX,
        }
    }

    /// A pass for the READY of `generation` begins: the live messages of `channels` wait until
    /// it ingested them. Returns what an earlier pass held for channels this one does not fetch
    /// (to be handed on now), by channel, oldest first.
    pub(crate) fn begin_holding(
        &self,
        generation: u64,
        channels: impl IntoIterator<Item = Snowflake>,
    ) -> Vec<Held> {
        let mut holding = lock(&self.holding);
        holding.generation = generation;
        holding.channels = channels.into_iter().collect();
        holding.overflowed = false;
        let orphans: Vec<Snowflake> = holding
            .held
            .keys()
            .filter(|channel| !holding.channels.contains(channel))
            .copied()
            .collect();
        orphans
            .into_iter()
            .map(|channel| holding.take(channel))
            .collect()
    }

    /// Holds `message`, live in `channel`, if the current pass has not ingested that channel
    /// yet (and the bound allows): true when held.
    pub(crate) fn hold(&self, channel: Snowflake, message: &Message) -> bool {
        // No pass, no lock: the live path pays one atomic load.
        if !self.is_running() {
            return false;
        }
        let mut holding = lock(&self.holding);
        if !holding.channels.contains(&channel) {
            return false;
        }
        let id = Snowflake(message.id.get());
        // A replayed copy of a held message: the one held (maybe edited since) stays.
        if holding
            .held
            .get(&channel)
            .is_some_and(|held| held.contains_key(&id))
        {
            return true;
        }
        if holding.count() >= self.hold_max {
            if !holding.overflowed {
                holding.overflowed = true;
                tracing::warn!(
                    held = self.hold_max,
                    "too many live messages wait for the backfill; later ones are stored at once, ahead of older missed ones"
                );
            }
            return false;
        }
        holding
            .held
            .entry(channel)
            .or_default()
            .insert(id, message.clone());
        true
    }

    /// The channels with live messages waiting.
    pub(crate) fn held_channels(&self) -> HashSet<Snowflake> {
        if !self.is_running() {
            return HashSet::new();
        }
        lock(&self.holding).held.keys().copied().collect()
    }

    /// Takes what is held for `channel`, which keeps waiting (the pass of `generation` is
    /// ingesting it); nothing when a newer pass holds it now.
    pub(crate) fn take_held(&self, generation: u64, channel: Snowflake) -> Held {
        let mut holding = lock(&self.holding);
        if holding.generation != generation {
            return Held::new();
        }
        holding.take(channel)
    }

    /// The pass of `generation` is done with `channel`: its live messages go straight on from
    /// now. Returns what was still held for it.
    pub(crate) fn release(&self, generation: u64, channel: Snowflake) -> Held {
        let mut holding = lock(&self.holding);
        if holding.generation != generation {
            return Held::new();
        }
        holding.channels.remove(&channel);
        holding.take(channel)
    }

    /// The pass of `generation` ended: nothing waits any more. Returns what was still held, by
    /// channel.
    pub(crate) fn release_all(&self, generation: u64) -> Vec<Held> {
        let mut holding = lock(&self.holding);
        if holding.generation != generation {
            return Vec::new();
        }
        holding.channels.clear();
        holding.held.drain().map(|(_, held)| held).collect()
    }

    /// A held message was edited: the copy handed on later carries the edit. True when held.
    pub(crate) fn edit_held(
        &self,
        channel: Snowflake,
        id: Snowflake,
        content: &str,
        edited: Option<serenity::model::Timestamp>,
    ) -> bool {
        if !self.is_running() {
            return false;
        }
        let mut holding = lock(&self.holding);
        match holding
            .held
            .get_mut(&channel)
            .and_then(|held| held.get_mut(&id))
        {
            Some(message) => {
                message.content = content.to_owned();
                message.edited_timestamp = edited;
                true
            }
            None => false,
        }
    }

    /// Held messages were deleted: they are never stored nor handed on.
    pub(crate) fn forget_held(&self, channel: Snowflake, ids: &[Snowflake]) {
        if !self.is_running() {
            return;
        }
        let mut holding = lock(&self.holding);
        let Some(held) = holding.held.get_mut(&channel) else {
            return;
        };
        for id in ids {
            held.remove(id);
        }
        if held.is_empty() {
            holding.held.remove(&channel);
        }
    }

    /// At READY, before any event of the new session: decides and records where each known
    /// channel's gap starts. Returns the READY's generation.
    pub(crate) fn prepare(&self, store: &Store, bot: Option<Snowflake>) -> u64 {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let mut plan = store.gaps();
        for channel in store.channels_with_messages() {
            if plan.contains_key(&channel) {
                continue;
            }
            if let Some(newest) = store.newest_message_id(channel, bot) {
                plan.insert(channel, newest);
            }
        }
        for (&channel, &after) in &plan {
            store.open_gap(channel, after);
        }
        *lock(&self.plan) = plan;
        generation
    }

    /// The latest READY's generation.
    pub(crate) fn current(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    pub(crate) fn is_current(&self, generation: u64) -> bool {
        self.generation.load(Ordering::SeqCst) == generation
    }

    pub(crate) fn set_running(&self, running: bool) {
        self.running.store(running, Ordering::SeqCst);
    }

    pub(crate) fn is_running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    pub(crate) fn plan(&self) -> HashMap<Snowflake, Snowflake> {
        lock(&self.plan).clone()
    }

    pub(crate) fn options(&self) -> BackfillOptions {
        self.options
    }

    pub(crate) fn finished(&self, report: BackfillReport) {
        *lock(&self.last) = Some(report);
    }

    pub(crate) fn last_report(&self) -> Option<BackfillReport> {
        lock(&self.last).clone()
    }

    /// The oldest id a pass starting now fetches after.
    pub(crate) fn floor(&self) -> Snowflake {
        let max_age = u64::try_from(self.options.max_age.as_millis()).unwrap_or(u64::MAX);
        first_id_at(switchboard_engine::clock::now_ms().saturating_sub(max_age))
    }

    /// Fetches one channel's messages after `after`, oldest first, at most `max_messages`
    /// (the newest). Messages that do not parse are logged and skipped.
    ///
    /// The first request asks for the page right after the gap's start (`after=`); a gap that
    /// fits it — the usual case — is done in one request. A larger gap is walked back from the
    /// newest message (`before=`) down to that first page, so the bound keeps the newest
    /// messages rather than the oldest.
    pub(crate) async fn fetch(
        &self,
        session: &records::Session,
        after: Snowflake,
    ) -> Result<Fetched, switchboard_engine::surface::SurfaceError> {
        let channel = session.id;
        let guild = session.guild_id.map(|g| GuildId::new(g.0.max(1)));
        let max = self.options.max_messages;
        let read = |value: Value, id: Snowflake| match serde_json::from_value::<Message>(value) {
            Ok(mut message) => {
                // REST messages carry no guild id; the session knows it.
                if message.guild_id.is_none() {
                    message.guild_id = guild;
                }
                Some(message)
            }
            Err(error) => {
                tracing::warn!(%channel, message = %id, %error, "a listed message could not be read; skipped");
                None
            }
        };
        let first = self
            .rest
            .list_messages(channel, None, Some(after), PAGE)
            .await?;
        let mut requests = 1;
        let first_full = first.messages.len() >= usize::from(PAGE);
        let mut oldest_page: Vec<(Snowflake, Value)> = Vec::new();
        for value in first.messages {
            match value_id(&value) {
                Some(id) if id > after => oldest_page.push((id, value)),
                Some(_) => {}
                None => tracing::warn!(%channel, "a listed message has no id; skipped"),
            }
        }
        let mut walked: Vec<(Snowflake, Value)> = Vec::new();
        let mut truncated = false;
        if first_full {
            // Everything up to the first page's newest message is in that page.
            let top_of_first = oldest_page.iter().map(|(id, _)| *id).max().unwrap_or(after);
            let mut before: Option<Snowflake> = None;
            loop {
                let page = self.rest.list_messages(channel, before, None, PAGE).await?;
                requests += 1;
                let full = page.messages.len() >= usize::from(PAGE);
                let mut reached_first = false;
                let mut oldest: Option<Snowflake> = None;
                for value in page.messages {
                    let Some(id) = value_id(&value) else {
                        tracing::warn!(%channel, "a listed message has no id; skipped");
                        continue;
                    };
                    oldest = Some(oldest.map_or(id, |o: Snowflake| o.min(id)));
                    if id <= top_of_first {
                        reached_first = true;
                    } else if walked.len() >= max {
                        truncated = true;
                    } else {
                        walked.push((id, value));
                    }
                }
                let next = match oldest {
                    Some(oldest) if full && !reached_first && !truncated => oldest,
                    _ => break,
                };
                // Every step moves `before` down, so the walk ends.
                if before.is_some_and(|b| next >= b) {
                    tracing::warn!(%channel, "Discord listed no older messages than before; stopping this channel's backfill");
                    break;
                }
                before = Some(next);
            }
        }
        let mut listed = walked;
        if !truncated {
            listed.extend(oldest_page);
        }
        // Discord lists newest first; ingest goes in posting order, as the gateway would have.
        listed.sort_by_key(|(id, _)| *id);
        listed.dedup_by_key(|(id, _)| *id);
        if listed.len() > max {
            truncated = true;
            listed.drain(..listed.len() - max);
        }
        if truncated {
            tracing::warn!(%channel, kept = listed.len(), "more messages were missed in this channel than store.backfill_max_messages; the newest were fetched, the older rest left out");
        }
        let messages = listed
            .into_iter()
            .filter_map(|(id, value)| read(value, id))
            .collect();
        Ok(Fetched {
            messages,
            requests,
            truncated,
        })
    }
}

fn value_id(value: &Value) -> Option<Snowflake> {
    value
        .get("id")
        .and_then(Value::as_str)
        .and_then(Snowflake::from_digits)
}

/// Whether a backfill fetches a session's messages: channels, threads and DMs hold messages;
/// forums and categories do not.
pub(crate) fn holds_messages(session: &records::Session) -> bool {
    matches!(
        session.kind,
        SessionKind::Channel | SessionKind::Thread | SessionKind::Dm
    )
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use proptest::prelude::*;

    use super::*;

    const CHANNELS: [u64; 3] = [11, 12, 13];

    fn message(channel: u64, id: u64) -> Message {
        serde_json::from_value(serde_json::json!({
            "id": id.to_string(), "channel_id": channel.to_string(), "content": format!("m{id}"),
            "author": {"id": "5", "username": "u", "discriminator": "0", "avatar": null},
            "timestamp": "2026-11-27T08:00:00.000000+00:00", "edited_timestamp": null,
            "tts": false, "mention_everyone": false, "mentions": [], "mention_roles": [],
            "attachments": [], "embeds": [], "pinned": false, "type": 0
        }))
        .expect("a message")
    }

    fn backfill(hold_max: usize) -> Backfill {
        let rest = DiscordRest::new("http://127.0.0.1:9", "holding-test").expect("a client");
        Backfill {
            hold_max,
            ..Backfill::new(rest, BackfillOptions::default())
        }
    }

    #[derive(Debug, Clone)]
    enum Step {
        Begin(u64, Vec<usize>),
        Hold(usize, u64),
        Take(u64, usize),
        Release(u64, usize),
        ReleaseAll(u64),
        Edit(usize, u64),
        Forget(usize, Vec<u64>),
    }

    fn step() -> impl Strategy<Value = Step> {
        let channel = 0..CHANNELS.len();
        let id = 1..40u64;
        let generation = 1..3u64;
        prop_oneof![
            1 => (generation.clone(), proptest::collection::vec(0..3usize, 0..4))
                .prop_map(|(g, c)| Step::Begin(g, c)),
            6 => (channel.clone(), id.clone()).prop_map(|(c, i)| Step::Hold(c, i)),
            1 => (generation.clone(), channel.clone()).prop_map(|(g, c)| Step::Take(g, c)),
            1 => (generation.clone(), channel.clone()).prop_map(|(g, c)| Step::Release(g, c)),
            1 => generation.prop_map(Step::ReleaseAll),
            1 => (channel.clone(), id.clone()).prop_map(|(c, i)| Step::Edit(c, i)),
            1 => (channel, proptest::collection::vec(id, 0..3)).prop_map(|(c, i)| Step::Forget(c, i)),
        ]
    }

    proptest! {
        /// Whatever the order of passes, holds, edits and deletes: a message is held only for
        /// a channel the current pass still fetches and under the bound; every held message
        /// comes out exactly once (unless deleted), with its latest edit, each channel's
        /// oldest first; and the count is what is held.
        #[test]
        fn every_held_message_comes_out_once_in_order(steps in proptest::collection::vec(step(), 1..80)) {
            let backfill = backfill(5);
            backfill.set_running(true);
            let mut generation = 0u64;
            let mut pending: BTreeSet<u64> = BTreeSet::new();
            // The model: what is held, by channel, with the content it must come out with.
            let mut model: HashMap<u64, BTreeMap<u64, String>> = HashMap::new();
            let mut out: Vec<Held> = Vec::new();
            let mut expected_out: Vec<BTreeMap<u64, String>> = Vec::new();
            for step in steps {
                match step {
                    Step::Begin(g, channels) => {
                        generation += g;
                        pending = channels.iter().map(|&c| CHANNELS[c]).collect();
                        let orphans: Vec<u64> = model.keys().copied().filter(|c| !pending.contains(c)).collect();
                        for c in orphans {
                            expected_out.push(model.remove(&c).unwrap_or_default());
                        }
                        out.extend(backfill.begin_holding(generation, pending.iter().map(|&c| Snowflake(c))));
                    }
                    Step::Hold(c, id) => {
                        let channel = CHANNELS[c];
                        let count: usize = model.values().map(BTreeMap::len).sum();
                        let already = model.get(&channel).is_some_and(|m| m.contains_key(&id));
                        let want = pending.contains(&channel) && (already || count < 5);
                        let held = backfill.hold(Snowflake(channel), &message(channel, id));
                        prop_assert_eq!(held, want);
                        if held {
                            model.entry(channel).or_default().entry(id).or_insert_with(|| format!("m{id}"));
                        }
                    }
                    Step::Take(g, c) => {
                        let channel = CHANNELS[c];
                        let taken = backfill.take_held(generation + g - 1, Snowflake(channel));
                        if g == 1 {
                            expected_out.push(model.remove(&channel).unwrap_or_default());
                        }
                        out.push(taken);
                    }
                    Step::Release(g, c) => {
                        let channel = CHANNELS[c];
                        let released = backfill.release(generation + g - 1, Snowflake(channel));
                        if g == 1 {
                            pending.remove(&channel);
                            expected_out.push(model.remove(&channel).unwrap_or_default());
                        }
                        out.push(released);
                    }
                    Step::ReleaseAll(g) => {
                        let released = backfill.release_all(generation + g - 1);
                        if g == 1 {
                            pending.clear();
                            expected_out.extend(model.drain().map(|(_, m)| m));
                        }
                        out.extend(released);
                    }
                    Step::Edit(c, id) => {
                        let channel = CHANNELS[c];
                        let text = format!("edited {id}");
                        let edited = backfill.edit_held(Snowflake(channel), Snowflake(id), &text, None);
                        let entry = model.get_mut(&channel).and_then(|m| m.get_mut(&id));
                        prop_assert_eq!(edited, entry.is_some());
                        if let Some(content) = entry {
                            *content = text;
                        }
                    }
                    Step::Forget(c, ids) => {
                        let channel = CHANNELS[c];
                        let ids: Vec<Snowflake> = ids.into_iter().map(Snowflake).collect();
                        backfill.forget_held(Snowflake(channel), &ids);
                        if let Some(m) = model.get_mut(&channel) {
                            for id in &ids {
                                m.remove(&id.0);
                            }
                            if m.is_empty() {
                                model.remove(&channel);
                            }
                        }
                    }
                }
                let count: usize = model.values().map(BTreeMap::len).sum();
                prop_assert!(count <= 5);
                prop_assert_eq!(lock(&backfill.holding).count(), count);
                prop_assert!(lock(&backfill.holding).held.values().all(|held| !held.is_empty()));
            }
            expected_out.extend(model.drain().map(|(_, m)| m));
            out.extend(backfill.release_all(generation));
            // Each handed-out batch is one channel's, oldest first; together they are exactly
            // what the model says came out, each message once, with its latest content.
            let mut got: Vec<(u64, u64, String)> = Vec::new();
            for batch in &out {
                let channels: BTreeSet<u64> = batch.values().map(|m| m.channel_id.get()).collect();
                prop_assert!(channels.len() <= 1, "one channel per batch: {:?}", channels);
                for (id, message) in batch {
                    prop_assert_eq!(id.0, message.id.get());
                    got.push((message.channel_id.get(), id.0, message.content.clone()));
                }
            }
            let mut want: Vec<(u64, u64, String)> = expected_out
                .iter()
                .flat_map(|batch| batch.iter().map(|(id, content)| (*id, content.clone())))
                .map(|(id, content)| (0, id, content))
                .collect();
            // Batches are maps by id, so each is oldest first; across batches compare as sets
            // (the channel is checked above, by the message itself).
            let mut got: Vec<(u64, String)> = got.into_iter().map(|(_, id, c)| (id, c)).collect();
            let mut want: Vec<(u64, String)> = want.drain(..).map(|(_, id, c)| (id, c)).collect();
            got.sort();
            want.sort();
            prop_assert_eq!(got, want);
        }
    }
}
