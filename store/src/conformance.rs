//! The conformance suite: one set of tests every backend runs, through the traits and through
//! the read cache. A backend's test file stamps them out:
//!
//! ```ignore
//! switchboard_store::conformance_tests!(my_backend_place);
//! // where `fn my_backend_place(options: &Options) -> Box<dyn Place>`
//! ```
//!
//! A [`Place`] is where one test's data lives: it opens a backend there, again after a close
//! for a durable backend (the reopen tests then check everything survived; for a backend that
//! is not durable, that a reopened one starts empty), and, for a backend several nodes share, a
//! second node over the same data.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use entity::{Mention, NameDirectory, Snowflake};
use futures_executor::block_on;
use switchboard_records::approval::ApprovalState;
use switchboard_records::{
    Approval, ApprovalCard, Attachment, AuditFilter, AuditRow, IdempotencyKey, IdempotencyRequest,
    Message, MessageQuery, Reaction, Role, SearchMatch, SearchQuery, SearchTerm, Session,
    SessionKind, Settlement, StoredAnswer, Task, ThreadState, TriggerClaim, User, Workflow,
    WorkflowState,
};

use crate::feed::{Changed, Next};
use crate::{Backend, CacheOptions, Census, Claim, Decided, Reserved, Store, StoreErrorKind};

mod agents;
mod bot_turns;
mod capabilities;
mod events;
pub use agents::*;
pub use bot_turns::*;
pub use capabilities::*;
pub use events::*;

/// What a test asks of the backend it opens: its retention.
pub use crate::Retention as Options;

/// Where one test's data lives.
pub trait Place {
    /// Opens a backend here (again after the previous one was closed).
    fn open(&self) -> Arc<dyn Backend>;
    /// Whether what one backend wrote is there when the place is opened again.
    fn durable(&self) -> bool;
    /// A second node over the data of the backend opened last (a backend several nodes
    /// share), if there can be one. The backend opened last must already report itself
    /// [`shared`](crate::ChangeFeed::shared) when it has one.
    fn second_node(&self) -> Option<Arc<dyn Backend>>;
}

/// A factory of places, one per test.
pub type MakePlace<'a> = &'a dyn Fn(&Options) -> Box<dyn Place>;

/// Stamps out every conformance test for a backend, given `fn(&Options) -> Box<dyn Place>`.
#[macro_export]
macro_rules! conformance_tests {
    ($make:path) => {
        $crate::conformance_tests!(@tests $make;
            a_message_reads_back_exactly_as_stored,
            a_copy_of_a_stored_or_deleted_message_is_not_stored_again,
            the_latest_edit_wins_and_is_durable,
            deletes_hide_messages_and_are_durable,
            reactions_count_the_bot_once_and_are_durable,
            sessions_users_and_roles_are_found_by_name,
            threads_keep_their_state_but_not_their_owner,
            gaps_keep_the_oldest_start_until_closed,
            forgetting_a_channel_drops_its_messages,
            retention_keeps_exactly_the_newest_per_channel,
            search_finds_words_phrases_prefixes_and_alternatives,
            search_finds_mentions_by_id_whatever_the_name,
            search_applies_its_filters,
            search_ranks_and_cuts_snippets,
            only_the_newest_matches_are_ranked,
            search_sees_writes_not_yet_flushed,
            search_never_returns_a_message_without_its_terms,
            garbage_search_input_is_answered_not_fatal,
            two_claimers_racing_for_one_trigger_one_wins,
            a_claimed_trigger_stays_taken,
            an_approval_decided_twice_is_decided_once,
            approvals_raced_from_many_threads_are_decided_once,
            an_approval_expires_and_a_late_decision_is_refused,
            a_settled_approval_is_not_reopened_by_a_save,
            idempotency_keys_replay_conflict_and_expire,
            idempotency_keys_raced_are_reserved_once,
            workflows_round_trip,
            finished_workflows_are_forgotten_after_a_week,
            audit_pages_filter_like_the_reference,
            audit_rows_keep_what_the_call_caused,
            audit_retention_prunes_old_rows,
            scopes_are_set_replaced_and_removed,
            agent_bindings_are_set_replaced_reset_and_shared,
            everything_survives_a_reopen_when_durable,
            the_change_feed_reports_each_change,
            two_caches_over_one_shared_backend_converge,
            every_change_a_reader_sees_gives_a_message_a_new_revision,
            a_closed_store_refuses_writes,
            everything_kept_can_be_listed_for_a_copy,
            summaries_latest_wins_and_history_is_bounded,
            notes_are_kept_per_scope_replaced_and_bounded,
            notes_raced_never_exceed_their_scope_limits,
            runs_queue_per_session_in_order,
            a_run_started_at_once_runs_beside_its_session_and_keeps_its_usage,
            an_interrupted_run_reruns_in_its_own_place,
            queued_runs_join_the_run_that_answers_them,
            runs_raced_are_claimed_once_and_never_two_per_session,
            aborts_and_expired_leases_end_runs_once,
            runs_list_by_filter_newest_first_and_prune,
            schedules_round_trip_list_and_delete,
            a_firing_raced_from_many_threads_fires_once,
            receipts_count_failures_and_pause_the_schedule,
            usage_sums_and_reports_match_the_reference,
            nodes_heartbeat_and_silent_ones_are_forgotten,
            a_shard_raced_for_has_one_holder,
            identify_slots_raced_are_spaced_apart,
            the_shard_count_is_raised_to_the_highest_and_never_lowered,
            once_is_won_by_one_caller_until_it_expires,
            agent_kinds_can_be_listed_and_imported_for_a_copy,
            garbage_into_the_agent_aggregates_is_answered_not_fatal,
            run_decisions_raced_end_one_way,
            receipts_raced_are_all_counted,
            a_capability_kept_on_one_node_is_found_on_another,
            a_capability_ended_on_one_node_is_ended_on_every_node,
            expired_capabilities_are_pruned,
            a_capability_without_a_digest_is_refused,
            events_are_appended_in_order_and_read_after_an_id,
            pruning_events_keeps_the_newest,
            events_raced_from_many_threads_are_ordered,
            an_event_batch_is_announced_once,
            garbage_events_are_refused_not_fatal,
            bot_turns_counted_on_two_nodes_add_up_until_a_person_writes,
            bot_turns_raced_answer_the_limit_and_say_why_once,
        );
    };
    (@tests $make:path; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::conformance::$name(&$make);
            }
        )*
    };
}

const GUILD: Snowflake = Snowflake(1_000_000_000_000_000_200);
const CHANNEL: Snowflake = Snowflake(1_100_000_000_000_000_001);
const OTHER: Snowflake = Snowflake(1_100_000_000_000_000_002);
const AUTHOR: Snowflake = Snowflake(1_200_000_000_000_000_001);
const MIRA: Snowflake = Snowflake(1_200_000_000_000_000_002);
const ROLE: Snowflake = Snowflake(1_250_000_000_000_000_001);

fn id(n: u64) -> Snowflake {
    Snowflake(1_300_000_000_000_000_000 + n)
}

fn message(channel_id: Snowflake, n: u64, text: &str) -> Message {
    Message {
        id: id(n),
        channel_id,
        author_id: AUTHOR,
        author_is_bot: false,
        content: text.to_owned(),
        text: text.to_owned(),
        timestamp: "2026-11-22T12:00:00.000000+00:00".into(),
        edited_timestamp: None,
        reply_to: None,
        attachments: Vec::new(),
        reactions: Vec::new(),
    }
}

fn session(id: Snowflake, name: &str, kind: SessionKind) -> Session {
    Session {
        id,
        guild_id: (kind != SessionKind::Dm).then_some(GUILD),
        parent_id: None,
        kind,
        name: name.to_owned(),
    }
}

fn cache(backend: &Arc<dyn Backend>, options: &Options) -> Store {
    Store::open(
        Arc::clone(backend),
        CacheOptions {
            messages_per_channel: options.messages_per_channel,
        },
    )
    .expect("the cache opens over the backend")
}

/// One test's backend and cache, and how to open them again.
struct Fixture {
    place: Box<dyn Place>,
    options: Options,
    backend: Arc<dyn Backend>,
    store: Store,
}

impl Fixture {
    fn new(make: MakePlace<'_>, options: Options) -> Fixture {
        let place = make(&options);
        let backend = place.open();
        let store = cache(&backend, &options);
        Fixture {
            place,
            options,
            backend,
            store,
        }
    }

    fn default(make: MakePlace<'_>) -> Fixture {
        Fixture::new(make, Options::default())
    }

    fn flush(&self) {
        self.store.flush_blocking().expect("flush");
    }

    /// Closes the store and opens the place again.
    fn reopen(&mut self) {
        self.store.close().expect("close");
        self.backend = self.place.open();
        self.store = cache(&self.backend, &self.options);
    }

    /// Reads a message from the backend itself, after everything is durable.
    fn stored(&self, channel: Snowflake, n: u64) -> Option<Message> {
        self.flush();
        block_on(self.backend.message(channel, id(n))).expect("read a message")
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.store.close();
    }
}

/// Messages round-trip exactly, through the cache and the backend, odd timestamps included.
pub fn a_message_reads_back_exactly_as_stored(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    let mut m = message(CHANNEL, 1, "hi <@1200000000000000002>");
    m.text = "hi @mira".into();
    m.author_is_bot = true;
    m.reply_to = Some(id(0));
    m.edited_timestamp = Some("2026-11-22T12:00:01Z".into());
    m.timestamp = "not a discord timestamp".into();
    m.attachments = vec![Attachment {
        filename: "a b.png".into(),
        url: "https://cdn.example/a.png".into(),
        size: 7,
        content_type: Some("image/png".into()),
    }];
    m.reactions = vec![Reaction {
        emoji: "✅".into(),
        count: 2,
        me: true,
    }];
    assert!(f.store.insert_message(m.clone()));
    assert_eq!(f.store.message(CHANNEL, m.id), Some(m.clone()));
    assert_eq!(f.stored(CHANNEL, 1), Some(m.clone()));
    let listed = block_on(f.backend.messages(CHANNEL, MessageQuery::newest(10))).unwrap();
    assert_eq!(listed, vec![m]);
}

/// The gateway echo of a message the bot stored from REST is not stored twice, and a late copy
/// of a deleted message does not bring it back.
pub fn a_copy_of_a_stored_or_deleted_message_is_not_stored_again(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    assert!(f.store.insert_message(message(CHANNEL, 1, "one")));
    assert!(!f.store.insert_message(message(CHANNEL, 1, "one again")));
    assert_eq!(f.store.message(CHANNEL, id(1)).unwrap().text, "one");
    assert!(f.store.insert_message(message(CHANNEL, 2, "two")));
    assert!(f.store.delete_message(CHANNEL, id(2)));
    assert!(!f.store.insert_message(message(CHANNEL, 2, "two")));
    assert_eq!(f.store.message(CHANNEL, id(2)), None);
    // Deleted ids are remembered until the backend prunes them (a durable backend may at
    // close), so no reopen here: a late copy after a restart is not a case Discord makes (a
    // fresh identify replays nothing, and backfill reads only what Discord still has).
    assert_eq!(f.stored(CHANNEL, 2), None);
    assert_eq!(f.stored(CHANNEL, 1).unwrap().text, "one");
}

/// Edits seen out of order: the latest wins in the cache and in the backend.
pub fn the_latest_edit_wins_and_is_durable(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    f.store.insert_message(message(CHANNEL, 1, "v0"));
    let edit = |text: &str, at: Option<&str>| {
        f.store.update_message(
            CHANNEL,
            id(1),
            text.into(),
            text.into(),
            at.map(str::to_owned),
        )
    };
    assert!(edit("v2", Some("2026-11-22T12:00:02.000000+00:00")));
    assert!(!edit("v1", Some("2026-11-22T12:00:01.000000+00:00")));
    assert!(!edit("v0 again", None));
    assert!(edit("v3", Some("2026-11-22T12:00:03Z")));
    assert!(!f
        .store
        .update_message(OTHER, id(1), "x".into(), "x".into(), None));
    let stored = f.stored(CHANNEL, 1).unwrap();
    assert_eq!(stored.text, "v3");
    assert_eq!(
        stored.edited_timestamp.as_deref(),
        Some("2026-11-22T12:00:03Z")
    );
    assert_eq!(f.store.message(CHANNEL, id(1)), Some(stored));
}

/// A delete hides a message from lists, reads and the backend; bulk deletes count what was
/// cached.
pub fn deletes_hide_messages_and_are_durable(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    for n in 1..=5 {
        f.store.insert_message(message(CHANNEL, n, "m"));
    }
    assert_eq!(f.store.delete_messages(CHANNEL, &[id(2), id(4), id(99)]), 2);
    assert!(!f.store.delete_message(CHANNEL, id(2)));
    let ids: Vec<Snowflake> = f
        .store
        .messages(CHANNEL, 10, None, None)
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ids, [id(1), id(3), id(5)]);
    assert_eq!(f.stored(CHANNEL, 2), None);
    let durable: Vec<Snowflake> = block_on(f.backend.messages(CHANNEL, MessageQuery::newest(10)))
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(durable, ids);
}

/// Reactions: the bot counts once, removal of the bot's own needs the bot's, clear and
/// per-emoji removal; the backend ends where the cache is.
pub fn reactions_count_the_bot_once_and_are_durable(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    f.store.insert_message(message(CHANNEL, 1, "m"));
    f.store.add_reaction(CHANNEL, id(1), "👍", false);
    f.store.add_reaction(CHANNEL, id(1), "👍", true);
    f.store.add_reaction(CHANNEL, id(1), "👍", true);
    f.store.add_reaction(CHANNEL, id(1), "blob:123", false);
    f.store.remove_reaction(CHANNEL, id(1), "blob:123", true);
    let want = vec![
        Reaction {
            emoji: "👍".into(),
            count: 2,
            me: true,
        },
        Reaction {
            emoji: "blob:123".into(),
            count: 1,
            me: false,
        },
    ];
    assert_eq!(f.stored(CHANNEL, 1).unwrap().reactions, want);
    f.store.remove_emoji_reactions(CHANNEL, id(1), "👍");
    assert_eq!(f.stored(CHANNEL, 1).unwrap().reactions, want[1..]);
    f.store.remove_all_reactions(CHANNEL, id(1));
    assert!(f.stored(CHANNEL, 1).unwrap().reactions.is_empty());
    assert_eq!(f.store.message(CHANNEL, id(1)).unwrap().reactions, []);
}

/// Names resolve to ids (normalized), renames give up old names, removals forget.
pub fn sessions_users_and_roles_are_found_by_name(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    f.store
        .upsert_session(session(CHANNEL, "Release Room", SessionKind::Channel));
    f.store
        .upsert_session(session(OTHER, "ops", SessionKind::Channel));
    f.store.upsert_user(User {
        id: MIRA,
        username: "mira".into(),
        global_name: Some("Mira K".into()),
        is_bot: false,
    });
    f.store.upsert_role(Role {
        id: ROLE,
        name: "On Call".into(),
    });
    assert_eq!(f.store.channel_by_key("release-room"), Some(CHANNEL));
    assert_eq!(f.store.user_by_key("mira-k"), Some(MIRA));
    assert_eq!(f.store.user_by_key("mira"), Some(MIRA));
    assert_eq!(f.store.role_by_key("on-call"), Some(ROLE));
    assert_eq!(f.store.author_name(MIRA), "Mira K");
    assert_eq!(f.store.author_name(AUTHOR), format!("user_{AUTHOR}"));
    let revision = f.store.names_revision();
    f.store
        .upsert_session(session(CHANNEL, "launch", SessionKind::Channel));
    assert_ne!(f.store.names_revision(), revision);
    assert_eq!(f.store.channel_by_key("release-room"), None);
    f.store.remove_session(OTHER);
    f.store.remove_role(ROLE);
    assert_eq!(f.store.role_by_key("on-call"), None);
    assert_eq!(
        f.store.sessions().iter().map(|s| s.id).collect::<Vec<_>>(),
        [CHANNEL]
    );
    f.flush();
    assert_eq!(block_on(f.backend.session(OTHER)).unwrap(), None);
    assert_eq!(block_on(f.backend.role(ROLE)).unwrap(), None);
    assert_eq!(
        block_on(f.backend.user(MIRA))
            .unwrap()
            .unwrap()
            .display_name(),
        "Mira K"
    );
    if f.place.durable() {
        f.reopen();
        assert_eq!(f.store.channel_by_key("launch"), Some(CHANNEL));
        assert_eq!(f.store.user_by_key("mira-k"), Some(MIRA));
        assert_eq!(f.store.role_by_key("on-call"), None);
        assert_eq!(f.store.session(OTHER), None);
    }
}

/// A thread's archive state is kept; its owner only in the cache.
pub fn threads_keep_their_state_but_not_their_owner(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    let thread = Snowflake(1_100_000_000_000_000_010);
    f.store
        .upsert_session(session(CHANNEL, "ops", SessionKind::Channel));
    f.store.upsert_session(Session {
        parent_id: Some(CHANNEL),
        ..session(thread, "incident", SessionKind::Thread)
    });
    assert_eq!(
        f.store.thread(thread).unwrap().state,
        ThreadState::default()
    );
    let state = ThreadState {
        archived: true,
        locked: true,
        auto_archive_minutes: 60,
        owner_id: Some(MIRA),
    };
    f.store.set_thread_state(thread, state);
    f.store.set_thread_state(
        thread,
        ThreadState {
            owner_id: None,
            ..state
        },
    );
    assert_eq!(
        f.store.thread_state(thread),
        Some(state),
        "an unknown owner keeps the known one"
    );
    assert!(f.store.active_threads(Some(CHANNEL)).is_empty());
    assert_eq!(f.store.threads(Some(CHANNEL)).len(), 1);
    f.flush();
    assert_eq!(
        block_on(f.backend.thread_state(thread)).unwrap(),
        Some(ThreadState {
            owner_id: None,
            ..state
        })
    );
    if f.place.durable() {
        f.reopen();
        assert_eq!(
            f.store.thread_state(thread),
            Some(ThreadState {
                owner_id: None,
                ..state
            })
        );
    }
}

/// Backfill gaps keep their oldest start until the channel caught up.
pub fn gaps_keep_the_oldest_start_until_closed(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    f.store.open_gap(CHANNEL, id(10));
    f.store.open_gap(CHANNEL, id(20));
    f.store.open_gap(OTHER, id(5));
    f.store.close_gap(OTHER);
    assert_eq!(f.store.gaps(), [(CHANNEL, id(10))].into_iter().collect());
    f.flush();
    assert_eq!(
        block_on(f.backend.gap(CHANNEL)).unwrap().map(|g| g.after),
        Some(id(10))
    );
    assert_eq!(block_on(f.backend.gap(OTHER)).unwrap(), None);
    if f.place.durable() {
        f.reopen();
        assert_eq!(f.store.gaps(), [(CHANNEL, id(10))].into_iter().collect());
    }
}

/// A channel the allowlist no longer allows loses every message, stored ones too.
pub fn forgetting_a_channel_drops_its_messages(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    for n in 1..=3 {
        f.store.insert_message(message(CHANNEL, n, "a"));
        f.store.insert_message(message(OTHER, 10 + n, "b"));
    }
    assert_eq!(f.store.forget_channel_messages(CHANNEL), 3);
    assert!(f.store.messages(CHANNEL, 10, None, None).is_empty());
    assert_eq!(f.stored(CHANNEL, 1), None);
    assert_eq!(
        block_on(f.backend.messages(OTHER, MessageQuery::newest(10)))
            .unwrap()
            .len(),
        3
    );
    assert_eq!(f.store.channels_with_messages(), [OTHER]);
}

/// Retention keeps exactly the newest N of each channel, whatever order messages arrive in:
/// in the cache at once, in the backend after a reopen (its prune).
pub fn retention_keeps_exactly_the_newest_per_channel(make: MakePlace<'_>) {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config {
        cases: 24,
        ..Config::default()
    });
    let strategy = (
        1usize..6,
        prop::collection::vec((0u64..40, 0usize..2), 1..60),
    );
    runner
        .run(&strategy, |(keep, arrivals)| {
            let options = Options {
                messages_per_channel: keep,
                ..Options::default()
            };
            let mut f = Fixture::new(make, options);
            let mut seen: BTreeMap<Snowflake, BTreeSet<u64>> = BTreeMap::new();
            for (n, channel) in arrivals {
                // Message ids are unique across channels.
                let n = n * 2 + channel as u64;
                let channel = [CHANNEL, OTHER][channel];
                f.store.insert_message(message(channel, n, "x"));
                seen.entry(channel).or_default().insert(n);
            }
            let newest = |channel: Snowflake| -> Vec<Snowflake> {
                // What retention keeps is the newest N of what was stored; an arrival older
                // than a full channel's oldest is refused, so it is never among them.
                let all = seen.get(&channel).cloned().unwrap_or_default();
                let mut kept: Vec<u64> = all.into_iter().rev().take(keep).collect();
                kept.reverse();
                kept.into_iter().map(id).collect()
            };
            for channel in [CHANNEL, OTHER] {
                let cached: Vec<Snowflake> = f
                    .store
                    .messages(channel, 1_000, None, None)
                    .iter()
                    .map(|m| m.id)
                    .collect();
                let want = newest(channel);
                // Arrivals in any order: the cache holds the newest of what it accepted, which
                // may miss an old one refused while the channel was full; never more than N,
                // and always the newest id stored.
                prop_assert!(cached.len() <= keep);
                prop_assert_eq!(cached.last(), want.last());
                prop_assert!(
                    cached.iter().all(|id| want.contains(id)),
                    "{:?} vs {:?}",
                    cached,
                    want
                );
            }
            f.flush();
            if f.place.durable() {
                let before: Vec<Vec<Snowflake>> = [CHANNEL, OTHER]
                    .iter()
                    .map(|c| {
                        f.store
                            .messages(*c, 1_000, None, None)
                            .iter()
                            .map(|m| m.id)
                            .collect()
                    })
                    .collect();
                f.reopen();
                let after: Vec<Vec<Snowflake>> = [CHANNEL, OTHER]
                    .iter()
                    .map(|c| {
                        f.store
                            .messages(*c, 1_000, None, None)
                            .iter()
                            .map(|m| m.id)
                            .collect()
                    })
                    .collect();
                prop_assert_eq!(&before, &after);
                for (channel, kept) in [CHANNEL, OTHER].iter().zip(&after) {
                    let durable: Vec<Snowflake> =
                        block_on(f.backend.messages(*channel, MessageQuery::newest(1_000)))
                            .unwrap()
                            .iter()
                            .map(|m| m.id)
                            .collect();
                    prop_assert_eq!(
                        &durable,
                        kept,
                        "the backend keeps exactly what the cache does"
                    );
                }
            }
            Ok(())
        })
        .unwrap();
}

fn words(text: &str, prefix: bool) -> SearchMatch {
    SearchMatch::Words {
        text: text.into(),
        prefix,
    }
}

fn term(any_of: Vec<SearchMatch>) -> SearchTerm {
    SearchTerm { any_of }
}

fn query(terms: Vec<SearchTerm>) -> SearchQuery {
    SearchQuery {
        terms,
        channels: vec![CHANNEL, OTHER],
        author: None,
        before: None,
        after: None,
        limit: 50,
    }
}

fn hit_ids(f: &Fixture, query: SearchQuery) -> BTreeSet<u64> {
    block_on(f.backend.search(query, Duration::from_secs(5)))
        .expect("search")
        .iter()
        .map(|hit| hit.message.id.0 - id(0).0)
        .collect()
}

fn corpus(f: &Fixture) {
    for (n, text) in [
        (1, "the deploy went fine"),
        (2, "Deployment of the canary failed"),
        (3, "rollback the deploy now"),
        (4, "lunch anyone"),
        (5, "the canary deploy is green"),
        (6, "Déjà vu: the école deploy"),
    ] {
        f.store.insert_message(message(CHANNEL, n, text));
    }
}

/// Words (all must match, any case, accents folded), "phrases", prefix*, and a OR b.
pub fn search_finds_words_phrases_prefixes_and_alternatives(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    corpus(&f);
    let set = |ns: &[u64]| ns.iter().copied().collect::<BTreeSet<u64>>();
    assert_eq!(
        hit_ids(&f, query(vec![term(vec![words("deploy", false)])])),
        set(&[1, 3, 5, 6])
    );
    assert_eq!(
        hit_ids(
            &f,
            query(vec![
                term(vec![words("deploy", false)]),
                term(vec![words("canary", false)])
            ])
        ),
        set(&[5])
    );
    assert_eq!(
        hit_ids(&f, query(vec![term(vec![words("the deploy", false)])])),
        set(&[1, 3])
    );
    assert_eq!(
        hit_ids(&f, query(vec![term(vec![words("deplo", true)])])),
        set(&[1, 2, 3, 5, 6])
    );
    assert_eq!(
        hit_ids(
            &f,
            query(vec![term(vec![
                words("lunch", false),
                words("rollback", false)
            ])])
        ),
        set(&[3, 4])
    );
    assert_eq!(
        hit_ids(&f, query(vec![term(vec![words("ecole", false)])])),
        set(&[6])
    );
    assert_eq!(
        hit_ids(&f, query(vec![term(vec![words("deja vu", false)])])),
        set(&[6])
    );
    assert!(hit_ids(&f, query(vec![term(vec![words("nothing", false)])])).is_empty());
}

/// `@name` matches the word or any mention of the id, under whatever name it had.
pub fn search_finds_mentions_by_id_whatever_the_name(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    let mut old_name = message(CHANNEL, 1, "");
    old_name.content = format!("ping <@{MIRA}> please");
    old_name.text = "ping @mirabel please".into();
    f.store.insert_message(old_name);
    f.store.insert_message(message(CHANNEL, 2, "mira said so"));
    let mut role = message(CHANNEL, 3, "");
    role.content = format!("<@&{ROLE}> and <#{OTHER}>");
    role.text = "@on-call and #ops".into();
    f.store.insert_message(role);
    f.store.insert_message(message(CHANNEL, 4, "nobody"));
    let set = |ns: &[u64]| ns.iter().copied().collect::<BTreeSet<u64>>();
    assert_eq!(
        hit_ids(
            &f,
            query(vec![term(vec![
                words("mira", false),
                SearchMatch::Mentions(Mention::User(MIRA))
            ])])
        ),
        set(&[1, 2])
    );
    assert_eq!(
        hit_ids(
            &f,
            query(vec![term(vec![SearchMatch::Mentions(Mention::Role(ROLE))])])
        ),
        set(&[3])
    );
    assert_eq!(
        hit_ids(
            &f,
            query(vec![term(vec![SearchMatch::Mentions(Mention::Channel(
                OTHER
            ))])])
        ),
        set(&[3])
    );
}

/// Channels, author, before and after, and the limit.
pub fn search_applies_its_filters(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    for n in 1..=6 {
        let mut m = message(if n % 2 == 0 { OTHER } else { CHANNEL }, n, "status report");
        if n == 3 {
            m.author_id = MIRA;
        }
        f.store.insert_message(m);
    }
    f.store.delete_message(CHANNEL, id(5));
    let base = query(vec![term(vec![words("status", false)])]);
    let set = |ns: &[u64]| ns.iter().copied().collect::<BTreeSet<u64>>();
    assert_eq!(
        hit_ids(&f, base.clone()),
        set(&[1, 2, 3, 4, 6]),
        "a deleted message is not found"
    );
    assert_eq!(
        hit_ids(
            &f,
            SearchQuery {
                channels: vec![CHANNEL],
                ..base.clone()
            }
        ),
        set(&[1, 3])
    );
    assert_eq!(
        hit_ids(
            &f,
            SearchQuery {
                author: Some(MIRA),
                ..base.clone()
            }
        ),
        set(&[3])
    );
    assert_eq!(
        hit_ids(
            &f,
            SearchQuery {
                before: Some(id(4)),
                after: Some(id(1)),
                ..base.clone()
            }
        ),
        set(&[2, 3])
    );
    assert_eq!(
        hit_ids(
            &f,
            SearchQuery {
                limit: 2,
                ..base.clone()
            }
        )
        .len(),
        2
    );
    assert!(hit_ids(
        &f,
        SearchQuery {
            channels: vec![],
            ..base
        }
    )
    .is_empty());
}

/// More occurrences in a message of equal length rank higher; a snippet shows the match
/// between `**`.
pub fn search_ranks_and_cuts_snippets(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    f.store
        .insert_message(message(CHANNEL, 1, "canary alpha bravo charlie delta"));
    f.store
        .insert_message(message(CHANNEL, 2, "canary canary canary bravo delta"));
    f.store
        .insert_message(message(CHANNEL, 3, "nothing alpha bravo charlie delta"));
    let long = format!("canary {}", "filler ".repeat(40));
    f.store.insert_message(message(CHANNEL, 4, long.trim()));
    let hits = block_on(f.backend.search(
        query(vec![term(vec![words("canary", false)])]),
        Duration::from_secs(5),
    ))
    .unwrap();
    let order: Vec<u64> = hits.iter().map(|h| h.message.id.0 - id(0).0).collect();
    assert_eq!(order.len(), 3);
    assert_eq!(order[0], 2, "three matches beat one: {order:?}");
    assert_eq!(
        order[2], 4,
        "a long message with one match ranks last: {order:?}"
    );
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
    for hit in &hits {
        assert!(hit.snippet.contains("**canary**"), "{}", hit.snippet);
    }
    let long_hit = hits.iter().find(|h| h.message.id == id(4)).unwrap();
    assert!(
        long_hit.snippet.len() < long.len(),
        "a long text is cut: {}",
        long_hit.snippet
    );
    assert!(long_hit.snippet.contains('…'), "{}", long_hit.snippet);
}

/// A search ranks only the newest [`SearchQuery::RANKED_CANDIDATES`] matches: a perfect match
/// older than those is not answered however well it would score (ranking every match of a
/// common word is what made searches slow); a narrower search that has it among its newest
/// ranks it first.
pub fn only_the_newest_matches_are_ranked(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    // The best possible match for "alpha" (the word alone), and the oldest.
    f.store.insert_message(message(OTHER, 1, "alpha"));
    let window = SearchQuery::RANKED_CANDIDATES as u64;
    for n in 2..=window + 1 {
        f.store
            .insert_message(message(CHANNEL, n, "alpha bravo charlie delta echo"));
    }
    f.store
        .insert_message(message(CHANNEL, window + 2, "alpha charlie"));
    f.flush();
    let alpha = || term(vec![words("alpha", false)]);
    let hits = block_on(f.backend.search(
        SearchQuery {
            limit: 5,
            ..query(vec![alpha()])
        },
        Duration::from_secs(5),
    ))
    .unwrap();
    let order: Vec<u64> = hits.iter().map(|h| h.message.id.0 - id(0).0).collect();
    assert_eq!(order.len(), 5, "{order:?}");
    assert_eq!(
        order[0],
        window + 2,
        "the best of the newest comes first: {order:?}"
    );
    assert!(
        !order.contains(&1),
        "the oldest match is not ranked: {order:?}"
    );
    let narrow = block_on(f.backend.search(
        SearchQuery {
            limit: 5,
            channels: vec![OTHER],
            ..query(vec![alpha()])
        },
        Duration::from_secs(5),
    ))
    .unwrap();
    assert_eq!(narrow.len(), 1);
    assert_eq!(
        narrow[0].message.id,
        id(1),
        "among a narrower search's newest it is found"
    );
}

/// A search right after a write, without a flush, sees it (and does not see a delete's
/// victim).
pub fn search_sees_writes_not_yet_flushed(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    f.store
        .insert_message(message(CHANNEL, 1, "freshly written"));
    f.store
        .insert_message(message(CHANNEL, 2, "freshly deleted"));
    f.store.delete_message(CHANNEL, id(2));
    f.store.update_message(
        CHANNEL,
        id(1),
        "freshly edited".into(),
        "freshly edited".into(),
        Some("2026-11-22T12:00:01.000000+00:00".into()),
    );
    assert_eq!(
        hit_ids(&f, query(vec![term(vec![words("freshly", false)])])),
        [1].into_iter().collect()
    );
    assert!(hit_ids(&f, query(vec![term(vec![words("written", false)])])).is_empty());
}

const VOCABULARY: [&str; 8] = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
];

/// Property: whatever is stored, edited and deleted, a search answers exactly the live
/// messages holding every term (words from a small vocabulary, one or two terms, prefixes).
pub fn search_never_returns_a_message_without_its_terms(make: MakePlace<'_>) {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let mut runner = TestRunner::new(Config {
        cases: 16,
        ..Config::default()
    });
    let text = prop::collection::vec(0..VOCABULARY.len(), 0..6);
    let strategy = (
        prop::collection::vec((1u64..40, text.clone()), 1..40),
        prop::collection::vec(1u64..40, 0..8),
        prop::collection::vec((0..VOCABULARY.len(), any::<bool>()), 1..3),
    );
    runner
        .run(&strategy, |(messages, deletes, terms)| {
            let f = Fixture::default(make);
            for (n, text) in &messages {
                let text: Vec<&str> = text.iter().map(|w| VOCABULARY[*w]).collect();
                f.store
                    .insert_message(message(CHANNEL, *n, &text.join(" ")));
            }
            for n in &deletes {
                f.store.delete_message(CHANNEL, id(*n));
            }
            let terms: Vec<SearchTerm> = terms
                .iter()
                .map(|(w, prefix)| {
                    let word = VOCABULARY[*w];
                    let text = if *prefix { &word[..3] } else { word };
                    term(vec![words(text, *prefix)])
                })
                .collect();
            let live = f.store.messages(CHANNEL, 1_000, None, None);
            let expected: BTreeSet<u64> = live
                .iter()
                .filter(|m| {
                    terms.iter().all(|t| match &t.any_of[0] {
                        SearchMatch::Words { text, prefix: true } => {
                            m.text.split(' ').any(|w| w.starts_with(text.as_str()))
                        }
                        SearchMatch::Words {
                            text,
                            prefix: false,
                        } => m.text.split(' ').any(|w| w == text),
                        SearchMatch::Mentions(_) => false,
                    })
                })
                .map(|m| m.id.0 - id(0).0)
                .collect();
            let got = hit_ids(
                &f,
                SearchQuery {
                    limit: 1_000,
                    ..query(terms)
                },
            );
            prop_assert_eq!(got, expected);
            Ok(())
        })
        .unwrap();
}

/// Punctuation, quotes, FTS operators and odd Unicode as search words or stored text are
/// answered (hits or none), never an error or a panic.
pub fn garbage_search_input_is_answered_not_fatal(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    f.store.insert_message(message(
        CHANNEL,
        1,
        "NEAR(a b) \"quoted\" AND OR NOT * ^col: 🦀 \u{202e}rtl",
    ));
    for garbage in [
        "\"",
        "NEAR",
        "a*b",
        "^",
        "col:",
        "🦀",
        "\u{0}",
        "\u{202e}",
        "AND OR NOT",
        "*",
    ] {
        for prefix in [false, true] {
            let result = block_on(f.backend.search(
                query(vec![term(vec![words(garbage, prefix)])]),
                Duration::from_secs(5),
            ));
            assert!(result.is_ok(), "{garbage:?}: {result:?}");
        }
    }
    assert_eq!(
        hit_ids(&f, query(vec![term(vec![words("quoted", false)])])).len(),
        1
    );
}

/// A message id of about now (the same all through one test run) plus `n`: claims are kept by
/// their message's time, so a claimed trigger must be recent to be remembered across a reopen.
fn recent(n: u64) -> Snowflake {
    static BASE: std::sync::OnceLock<Snowflake> = std::sync::OnceLock::new();
    Snowflake(
        BASE.get_or_init(|| switchboard_records::trigger::first_id_at(now_ms()))
            .0
            + n,
    )
}

fn claim(n: u64) -> TriggerClaim {
    TriggerClaim {
        channel_id: CHANNEL,
        message_id: recent(n),
        claimed_ms: now_ms(),
    }
}

/// Many threads claim the same trigger at once, many times: exactly one wins each, and its
/// claim becomes durable.
pub fn two_claimers_racing_for_one_trigger_one_wins(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    const CLAIMERS: usize = 4;
    const ROUNDS: u64 = 100;
    for round in 0..ROUNDS {
        let start = Arc::new(Barrier::new(CLAIMERS));
        let winners: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..CLAIMERS)
                .map(|_| {
                    let start = Arc::clone(&start);
                    let backend = Arc::clone(&f.backend);
                    scope.spawn(move || {
                        start.wait();
                        match block_on(backend.claim_trigger(claim(round))).expect("claim") {
                            Claim::Won(durable) => {
                                block_on(durable).expect("the won claim becomes durable");
                                1
                            }
                            Claim::Taken => 0,
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(winners, 1, "round {round}");
    }
}

/// A claimed trigger stays taken: for a later claimer, after a reopen (durable backends), and
/// `is_claimed` says so.
pub fn a_claimed_trigger_stays_taken(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    match block_on(f.backend.claim_trigger(claim(1))).unwrap() {
        Claim::Won(durable) => block_on(durable).unwrap(),
        Claim::Taken => panic!("a fresh trigger is taken"),
    }
    assert!(matches!(
        block_on(f.backend.claim_trigger(claim(1))).unwrap(),
        Claim::Taken
    ));
    assert!(block_on(f.backend.is_claimed(recent(1))).unwrap());
    assert!(!block_on(f.backend.is_claimed(recent(2))).unwrap());
    if f.place.durable() {
        f.reopen();
        assert!(matches!(
            block_on(f.backend.claim_trigger(claim(1))).unwrap(),
            Claim::Taken
        ));
        assert!(block_on(f.backend.is_claimed(recent(1))).unwrap());
    }
}

fn approval(n: u64, expires_at_ms: u64) -> Approval {
    Approval {
        card: ApprovalCard {
            id: format!("apr_{n:016x}"),
            tool: "surface.messages.send".into(),
            session_id: Some(CHANNEL),
            session_label: "#ops".into(),
            preview: "ship it".into(),
            requested_by: "operator".into(),
            caller: "operator".into(),
            owner: "operator".into(),
            binding: "0123456789ab".into(),
            run: Some("run-1".into()),
            tool_call_id: Some("call-1".into()),
            state: ApprovalState::Pending { expires_at_ms },
        },
        channel_id: CHANNEL,
        message_id: None,
        binding: "0123456789ab".repeat(5),
    }
}

/// Two decisions of one approval: one `Decided`, the other `AlreadyDecided` with the first's
/// settlement; an unknown id is not found.
pub fn an_approval_decided_twice_is_decided_once(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    f.backend.save_approval(approval(1, 10_000)).unwrap();
    let mut posted = approval(1, 10_000);
    posted.message_id = Some(id(7));
    f.backend.save_approval(posted.clone()).unwrap();
    assert_eq!(
        block_on(f.backend.pending_approvals()).unwrap(),
        vec![posted.clone()]
    );
    let first = block_on(f.backend.decide_approval(
        posted.id(),
        Settlement::Approve { by: "@mira".into() },
        500,
    ))
    .unwrap();
    let Decided::Decided(decided) = first else {
        panic!("the first decision takes: {first:?}")
    };
    assert_eq!(
        decided.card.state,
        ApprovalState::Approved {
            by: "@mira".into(),
            at_ms: 500
        }
    );
    assert_eq!(decided.message_id, Some(id(7)));
    let second = block_on(f.backend.decide_approval(
        posted.id(),
        Settlement::Deny {
            by: "@tomas".into(),
        },
        600,
    ))
    .unwrap();
    assert_eq!(second, Decided::AlreadyDecided(decided.clone()));
    assert!(block_on(f.backend.pending_approvals()).unwrap().is_empty());
    let missing =
        block_on(f.backend.decide_approval("apr_nope", Settlement::Expire, 1)).unwrap_err();
    assert_eq!(missing.kind(), StoreErrorKind::NotFound);
    if f.place.durable() {
        f.reopen();
        assert_eq!(
            block_on(f.backend.approval(posted.id())).unwrap(),
            Some(decided)
        );
    }
}

/// Many threads decide one approval at once (approve, deny, expire): exactly one takes.
pub fn approvals_raced_from_many_threads_are_decided_once(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    const DECIDERS: usize = 4;
    for round in 0..50 {
        f.backend.save_approval(approval(round, u64::MAX)).unwrap();
        let start = Arc::new(Barrier::new(DECIDERS));
        let decided: Vec<Decided> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..DECIDERS)
                .map(|i| {
                    let start = Arc::clone(&start);
                    let backend = Arc::clone(&f.backend);
                    let id = approval(round, 0).card.id;
                    scope.spawn(move || {
                        let settlement = match i % 3 {
                            0 => Settlement::Approve {
                                by: format!("@a{i}"),
                            },
                            1 => Settlement::Deny {
                                by: format!("@d{i}"),
                            },
                            _ => Settlement::Expire,
                        };
                        start.wait();
                        block_on(backend.decide_approval(&id, settlement, 100)).expect("decide")
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let winners: Vec<&Approval> = decided
            .iter()
            .filter_map(|d| match d {
                Decided::Decided(a) => Some(a),
                Decided::AlreadyDecided(_) => None,
            })
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {decided:?}");
        for d in &decided {
            let (Decided::Decided(a) | Decided::AlreadyDecided(a)) = d;
            assert_eq!(
                a.card.state, winners[0].card.state,
                "everyone sees the one decision"
            );
        }
    }
}

/// An approval past its expiry cannot be approved: the late decision finds it expired.
pub fn an_approval_expires_and_a_late_decision_is_refused(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    f.backend.save_approval(approval(1, 1_000)).unwrap();
    let late = block_on(f.backend.decide_approval(
        &approval(1, 0).card.id,
        Settlement::Approve { by: "@mira".into() },
        1_000,
    ))
    .unwrap();
    let Decided::AlreadyDecided(expired) = late else {
        panic!("approved past its expiry: {late:?}")
    };
    assert_eq!(expired.card.state, ApprovalState::Expired { at_ms: 1_000 });
    f.backend.save_approval(approval(2, 1_000)).unwrap();
    let timer = block_on(f.backend.decide_approval(
        &approval(2, 0).card.id,
        Settlement::Expire,
        1_200,
    ))
    .unwrap();
    assert!(
        matches!(timer, Decided::Decided(ref a) if a.card.state == ApprovalState::Expired { at_ms: 1_200 }),
        "{timer:?}"
    );
}

/// A save that arrives after the decision (the card's message id, posted late) does not make
/// the approval pending again.
pub fn a_settled_approval_is_not_reopened_by_a_save(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    f.backend.save_approval(approval(1, 10_000)).unwrap();
    block_on(f.backend.decide_approval(
        &approval(1, 0).card.id,
        Settlement::Deny {
            by: "console".into(),
        },
        5,
    ))
    .unwrap();
    let mut late = approval(1, 10_000);
    late.message_id = Some(id(3));
    f.backend.save_approval(late).unwrap();
    f.flush();
    let kept = block_on(f.backend.approval(&approval(1, 0).card.id))
        .unwrap()
        .unwrap();
    assert_eq!(
        kept.card.state,
        ApprovalState::Denied {
            by: "console".into(),
            at_ms: 5
        }
    );
    assert!(block_on(f.backend.pending_approvals()).unwrap().is_empty());
}

fn key(caller: &str, key: &str) -> IdempotencyKey {
    IdempotencyKey {
        caller: caller.into(),
        key: key.into(),
    }
}

fn reserve(f: &Fixture, k: &IdempotencyKey, hash: &str, now_ms: u64) -> Reserved {
    block_on(f.backend.reserve_idempotency(IdempotencyRequest {
        key: k.clone(),
        input_hash: hash.into(),
        now_ms,
        ttl_ms: 1_000,
    }))
    .expect("reserve")
}

/// The same key and input replays the stored answer; another input is a mismatch; a running
/// one is running; a released one runs again; an expired one is fresh; callers do not share.
pub fn idempotency_keys_replay_conflict_and_expire(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    // Real times: a durable backend drops expired keys when it opens.
    let t = now_ms();
    let k = key("token:ci", "k1");
    let answer = StoredAnswer {
        status: 200,
        body: "{\"ok\":true,\"value\":1}".into(),
    };
    assert_eq!(reserve(&f, &k, "h1", t), Reserved::Fresh);
    assert_eq!(reserve(&f, &k, "h1", t + 1), Reserved::Running);
    assert_eq!(reserve(&f, &k, "h2", t + 2), Reserved::Mismatch);
    assert_eq!(
        reserve(&f, &key("operator", "k1"), "h2", t + 2),
        Reserved::Fresh,
        "another caller's key is its own"
    );
    block_on(f.backend.complete_idempotency(&k, answer.clone())).unwrap();
    assert_eq!(
        reserve(&f, &k, "h1", t + 400),
        Reserved::Replay(answer.clone())
    );
    assert_eq!(reserve(&f, &k, "h2", t + 400), Reserved::Mismatch);
    let released = key("token:ci", "k2");
    assert_eq!(reserve(&f, &released, "h1", t), Reserved::Fresh);
    block_on(f.backend.release_idempotency(&released)).unwrap();
    assert_eq!(reserve(&f, &released, "h9", t + 1), Reserved::Fresh);
    if f.place.durable() {
        f.reopen();
        assert_eq!(reserve(&f, &k, "h1", t + 500), Reserved::Replay(answer));
    }
    assert_eq!(
        reserve(&f, &k, "h2", t + 60_000),
        Reserved::Fresh,
        "an expired key is fresh, whatever its input"
    );
    let missing = block_on(f.backend.complete_idempotency(
        &key("x", "never"),
        StoredAnswer {
            status: 200,
            body: String::new(),
        },
    ))
    .unwrap_err();
    assert_eq!(missing.kind(), StoreErrorKind::NotFound);
}

/// Many threads reserve one key at once: exactly one runs.
pub fn idempotency_keys_raced_are_reserved_once(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    const CALLERS: usize = 4;
    for round in 0..50 {
        let start = Arc::new(Barrier::new(CALLERS));
        let fresh: usize = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..CALLERS)
                .map(|_| {
                    let start = Arc::clone(&start);
                    let backend = Arc::clone(&f.backend);
                    scope.spawn(move || {
                        start.wait();
                        let request = IdempotencyRequest {
                            key: key("operator", &format!("race-{round}")),
                            input_hash: "h".into(),
                            now_ms: 10,
                            ttl_ms: 1_000,
                        };
                        usize::from(
                            block_on(backend.reserve_idempotency(request)).expect("reserve")
                                == Reserved::Fresh,
                        )
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(fresh, 1, "round {round}");
    }
}

fn workflow(n: u64, state: WorkflowState) -> Workflow {
    Workflow {
        workflow_id: format!("wf_{n:016x}"),
        state,
        origin_session_id: CHANNEL,
        origin_message_id: Some(id(n)),
        created_by: "operator".into(),
        created_ms: 1,
        deadline_ms: 2,
        finished_ms: (state != WorkflowState::Waiting).then_some(crate::conformance::now_ms()),
        resume_prompt: Some("carry on".into()),
        tasks: vec![Task {
            session_id: OTHER,
            message_id: None,
            from_user_id: Some(MIRA),
            summary: "ship?".into(),
            description: None,
            answer: None,
        }],
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Workflows are kept whole, replaced by id, listed by id.
pub fn workflows_round_trip(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    f.backend
        .save_workflow(&workflow(2, WorkflowState::Waiting))
        .unwrap();
    f.backend
        .save_workflow(&workflow(1, WorkflowState::Waiting))
        .unwrap();
    let answered = workflow(2, WorkflowState::Answered);
    f.backend.save_workflow(&answered).unwrap();
    let all = block_on(f.backend.workflows()).unwrap();
    assert_eq!(
        all,
        vec![workflow(1, WorkflowState::Waiting), answered.clone()]
    );
    assert_eq!(
        block_on(f.backend.workflow(&answered.workflow_id)).unwrap(),
        Some(answered.clone())
    );
    assert_eq!(block_on(f.backend.workflow("wf_nope")).unwrap(), None);
    if f.place.durable() {
        f.reopen();
        assert_eq!(block_on(f.backend.workflows()).unwrap(), all);
    }
}

/// A workflow finished longer ago than
/// [`FINISHED_WORKFLOWS_KEPT_MS`](switchboard_records::workflow::FINISHED_WORKFLOWS_KEPT_MS) is
/// forgotten by a durable backend (by the next open at the latest); a waiting one, and one
/// finished within the week, are kept.
pub fn finished_workflows_are_forgotten_after_a_week(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    let kept = switchboard_records::workflow::FINISHED_WORKFLOWS_KEPT_MS;
    let waiting = workflow(1, WorkflowState::Waiting);
    let recent = workflow(2, WorkflowState::Answered);
    let old = Workflow {
        finished_ms: Some(now_ms() - kept - 24 * 3600 * 1000),
        ..workflow(3, WorkflowState::Cancelled)
    };
    let almost = Workflow {
        finished_ms: Some(now_ms() - kept + 3600 * 1000),
        ..workflow(4, WorkflowState::TimedOut)
    };
    for w in [&waiting, &recent, &old, &almost] {
        f.backend.save_workflow(w).unwrap();
    }
    if !f.place.durable() {
        return;
    }
    f.reopen();
    assert_eq!(
        block_on(f.backend.workflows()).unwrap(),
        vec![waiting, recent, almost],
        "the workflow finished eight days ago is gone, the rest kept"
    );
}

fn audit_row(i: u64) -> AuditRow {
    AuditRow {
        time_ms: 1_000 + i,
        caller: if i.is_multiple_of(4) {
            "token:ci".into()
        } else {
            "operator".into()
        },
        run: i.is_multiple_of(3).then(|| format!("run-{i}")),
        requested_by: i.is_multiple_of(3).then_some(MIRA),
        tool: if i.is_multiple_of(3) {
            "surface.messages.send".into()
        } else {
            "surface.messages.list".into()
        },
        sessions: vec![if i.is_multiple_of(2) { CHANNEL } else { OTHER }, GUILD],
        input: serde_json::json!({"text": format!("call {i}"), "n": i}),
        decision: if i.is_multiple_of(5) {
            "deny".into()
        } else {
            "allow".into()
        },
        decided_by: i.is_multiple_of(5).then(|| "permissions.rules[0]".into()),
        outcome: "ok".into(),
        code: None,
        duration_ms: i % 7,
        // Some rows count a burst of refusals: the count is kept.
        count: 1 + i % 3,
        // Some rows hold what the call caused in a workspace: the events are kept.
        events: if i % 4 == 1 {
            vec![
                serde_json::json!({"type": "shell.started", "id": format!("sh-{i}"),
                    "argv": ["echo", "hi"], "cwd": "/work"}),
                serde_json::json!({"type": "shell.exited", "id": format!("sh-{i}"),
                    "code": 0, "ms": i, "bytes": 3}),
            ]
        } else {
            Vec::new()
        },
    }
}

/// An audit row's workspace events (issue 24) read back as recorded, through a page and the
/// copy's `audit_after`, across a reopen when durable, and through `import_audit`; a row
/// without events reads back with none.
pub fn audit_rows_keep_what_the_call_caused(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    let mut events = Vec::new();
    for n in 0..40 {
        switchboard_records::audit::push_event(
            &mut events,
            serde_json::json!({"type": "fs.changed", "path": format!("src/{n}.rs"),
                "kind": "created"}),
        );
    }
    let with = AuditRow {
        tool: "shell.run".into(),
        events: [
            vec![
                serde_json::json!({"type": "shell.started", "id": "sh-1",
                    "argv": ["/bin/bash", "-c", "echo \u{0} ünï"], "cwd": ".",
                    "background": false}),
                serde_json::json!({"type": "shell.exited", "id": "sh-1", "code": null,
                    "ms": 12, "bytes": 4}),
            ],
            events,
        ]
        .concat(),
        time_ms: now_ms(),
        ..audit_row(2)
    };
    let without = AuditRow {
        events: Vec::new(),
        time_ms: now_ms(),
        ..audit_row(3)
    };
    f.backend.record(with.clone()).unwrap();
    f.backend.record(without.clone()).unwrap();
    f.flush();
    let check = |backend: &dyn crate::Backend| {
        let page = block_on(backend.audit_page(AuditFilter {
            limit: 10,
            ..AuditFilter::default()
        }))
        .unwrap();
        let rows: Vec<&AuditRow> = page.rows.iter().map(|e| &e.row).collect();
        assert_eq!(rows, [&without, &with], "newest first, events as recorded");
        let after = block_on(backend.audit_after(0, 10)).unwrap();
        assert_eq!(after.len(), 2);
        assert_eq!(after[0].row, with);
        assert!(after[1].row.events.is_empty());
        after
    };
    let entries = check(f.backend.as_ref());
    if f.place.durable() {
        f.reopen();
        check(f.backend.as_ref());
    }
    let g = Fixture::default(make);
    g.backend.import_audit(entries.clone()).unwrap();
    g.flush();
    assert_eq!(block_on(g.backend.audit_after(0, 10)).unwrap(), entries);
}

/// Audit pages: every filter, paged to the end, answers what the reference (records'
/// in-memory paging) answers.
pub fn audit_pages_filter_like_the_reference(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    let rows: Vec<AuditRow> = (0..57).map(audit_row).collect();
    for row in &rows {
        f.backend.record(row.clone()).unwrap();
    }
    let filters = [
        AuditFilter {
            limit: 10,
            ..AuditFilter::default()
        },
        AuditFilter {
            tool: Some("surface.*.send".into()),
            limit: 4,
            ..AuditFilter::default()
        },
        AuditFilter {
            session: Some(OTHER),
            decision: Some("deny".into()),
            limit: 100,
            ..AuditFilter::default()
        },
        AuditFilter {
            since_ms: Some(1_010),
            until_ms: Some(1_020),
            limit: 3,
            ..AuditFilter::default()
        },
        AuditFilter {
            caller: Some("token:ci".into()),
            limit: 0,
            ..AuditFilter::default()
        },
    ];
    for filter in filters {
        let mut seen = Vec::new();
        let mut page_filter = filter.clone();
        loop {
            let page = block_on(f.backend.audit_page(page_filter.clone())).unwrap();
            assert!(page.rows.len() <= filter.page_size());
            assert!(
                page.rows.windows(2).all(|w| w[0].id > w[1].id),
                "newest first"
            );
            seen.extend(page.rows.iter().map(|e| e.row.clone()));
            match page.next_cursor {
                Some(cursor) => page_filter.before_id = Some(cursor),
                None => break,
            }
        }
        let expected: Vec<AuditRow> = rows
            .iter()
            .rev()
            .filter(|r| filter.matches(r))
            .cloned()
            .collect();
        assert_eq!(seen, expected, "{filter:?}");
    }
}

/// Rows older than asked go; newer stay.
pub fn audit_retention_prunes_old_rows(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    for i in 0..10 {
        f.backend.record(audit_row(i)).unwrap();
    }
    assert_eq!(block_on(f.backend.prune_audit(1_004)).unwrap(), 4);
    let page = block_on(f.backend.audit_page(AuditFilter {
        limit: 100,
        ..AuditFilter::default()
    }))
    .unwrap();
    assert_eq!(page.rows.iter().map(|e| e.row.time_ms).min(), Some(1_004));
    assert_eq!(page.rows.len(), 6);
}

/// `/tools` overrides: set, replaced, removed; an empty scope is a scope.
pub fn scopes_are_set_replaced_and_removed(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    f.backend
        .set_session_scope(CHANNEL, Some(vec!["surface.messages.list".into()]))
        .unwrap();
    f.backend
        .set_session_scope(
            CHANNEL,
            Some(vec!["surface.*".into(), "workflow.create".into()]),
        )
        .unwrap();
    f.backend.set_session_scope(OTHER, Some(vec![])).unwrap();
    f.backend
        .set_session_scope(GUILD, Some(vec!["x".into()]))
        .unwrap();
    f.backend.set_session_scope(GUILD, None).unwrap();
    let want = vec![
        switchboard_records::SessionScope {
            session_id: CHANNEL,
            scope: vec!["surface.*".into(), "workflow.create".into()],
        },
        switchboard_records::SessionScope {
            session_id: OTHER,
            scope: vec![],
        },
    ];
    assert_eq!(block_on(f.backend.session_scopes()).unwrap(), want);
    if f.place.durable() {
        f.reopen();
        assert_eq!(block_on(f.backend.session_scopes()).unwrap(), want);
    }
}

/// `/agent set` bindings: set, replaced, reset; durable once answered, read the same by a
/// second node, and counted by the census.
pub fn agent_bindings_are_set_replaced_reset_and_shared(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    let bind = |session, agent: Option<&str>| {
        block_on(f.backend.bind_agent(session, agent.map(str::to_owned))).expect("bind");
    };
    assert_eq!(block_on(f.backend.bound_agent(CHANNEL)).unwrap(), None);
    bind(CHANNEL, Some("support"));
    bind(CHANNEL, Some("release"));
    bind(OTHER, Some("hélp-bot"));
    bind(GUILD, Some("x"));
    bind(GUILD, None);
    // Unbinding what is not bound is not an error.
    bind(GUILD, None);
    let want = vec![
        switchboard_records::AgentBinding {
            session_id: CHANNEL,
            agent: "release".into(),
        },
        switchboard_records::AgentBinding {
            session_id: OTHER,
            agent: "hélp-bot".into(),
        },
    ];
    assert_eq!(block_on(f.backend.agent_bindings()).unwrap(), want);
    assert_eq!(
        block_on(f.backend.bound_agent(CHANNEL)).unwrap().as_deref(),
        Some("release")
    );
    assert_eq!(block_on(f.backend.bound_agent(GUILD)).unwrap(), None);
    assert_eq!(block_on(f.backend.census()).unwrap().agent_bindings, 2);
    if let Some(second) = f.place.second_node() {
        assert_eq!(
            block_on(second.bound_agent(OTHER)).unwrap().as_deref(),
            Some("hélp-bot"),
            "a binding made on one node holds on the other"
        );
        block_on(second.bind_agent(CHANNEL, None)).unwrap();
        assert_eq!(
            block_on(f.backend.bound_agent(CHANNEL)).unwrap(),
            None,
            "a reset on the other node holds here"
        );
        block_on(f.backend.bind_agent(CHANNEL, Some("release".into()))).unwrap();
    }
    if f.place.durable() {
        f.reopen();
        assert_eq!(block_on(f.backend.agent_bindings()).unwrap(), want);
    }
}

/// After close and open, a durable backend has every kind of data; one that is not durable
/// starts empty.
pub fn everything_survives_a_reopen_when_durable(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    f.store
        .upsert_session(session(CHANNEL, "ops", SessionKind::Channel));
    f.store.upsert_user(User {
        id: MIRA,
        username: "mira".into(),
        global_name: None,
        is_bot: false,
    });
    f.store.insert_message(message(CHANNEL, 1, "kept"));
    f.store.open_gap(CHANNEL, id(1));
    f.backend
        .save_workflow(&workflow(1, WorkflowState::Waiting))
        .unwrap();
    f.backend.save_approval(approval(1, u64::MAX)).unwrap();
    // Recent: audit rows past the retention are pruned at open.
    f.backend
        .record(AuditRow {
            time_ms: now_ms(),
            ..audit_row(1)
        })
        .unwrap();
    f.backend
        .set_session_scope(CHANNEL, Some(vec!["a".into()]))
        .unwrap();
    let claimed = claim(1);
    if let Claim::Won(durable) = block_on(f.backend.claim_trigger(claimed.clone())).unwrap() {
        block_on(durable).unwrap();
    }
    f.reopen();
    let durable = f.place.durable();
    assert_eq!(f.store.session(CHANNEL).is_some(), durable);
    assert_eq!(f.store.user(MIRA).is_some(), durable);
    assert_eq!(f.store.message(CHANNEL, id(1)).is_some(), durable);
    assert_eq!(f.store.gaps().len(), usize::from(durable));
    assert_eq!(
        block_on(f.backend.workflows()).unwrap().len(),
        usize::from(durable)
    );
    assert_eq!(
        block_on(f.backend.pending_approvals()).unwrap().len(),
        usize::from(durable)
    );
    assert_eq!(
        block_on(f.backend.audit_page(AuditFilter {
            limit: 10,
            ..AuditFilter::default()
        }))
        .unwrap()
        .rows
        .len(),
        usize::from(durable)
    );
    assert_eq!(
        block_on(f.backend.session_scopes()).unwrap().len(),
        usize::from(durable)
    );
    assert_eq!(
        block_on(f.backend.is_claimed(claimed.message_id)).unwrap(),
        durable
    );
}

/// Every kind of change is published once durable, with the writer's origin.
pub fn the_change_feed_reports_each_change(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    let mut changes = f.backend.subscribe();
    f.store
        .upsert_session(session(CHANNEL, "ops", SessionKind::Channel));
    f.store.insert_message(message(CHANNEL, 1, "a"));
    f.store.delete_message(CHANNEL, id(1));
    f.backend
        .save_workflow(&workflow(1, WorkflowState::Waiting))
        .unwrap();
    f.backend.set_session_scope(CHANNEL, None).unwrap();
    f.backend.save_approval(approval(1, u64::MAX)).unwrap();
    f.flush();
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while seen.len() < 6 && std::time::Instant::now() < deadline {
        match changes.try_next() {
            Some(Next::Change(change)) => {
                assert_eq!(change.origin, f.backend.origin());
                seen.push(change.what);
            }
            Some(other) => panic!("{other:?}"),
            None => std::thread::sleep(Duration::from_millis(2)),
        }
    }
    assert_eq!(
        seen,
        vec![
            Changed::Session(CHANNEL),
            Changed::Message {
                channel_id: CHANNEL,
                id: id(1)
            },
            Changed::MessagesDeleted {
                channel_id: CHANNEL,
                ids: vec![id(1)]
            },
            Changed::Workflow(workflow(1, WorkflowState::Waiting).workflow_id),
            Changed::Scope(CHANNEL),
            Changed::Approval(approval(1, 0).card.id),
        ]
    );
}

/// Two nodes' caches over one shared backend: what one writes, the other reads soon after
/// (its feed watcher applies it). Backends one node owns skip this (there is no second node).
pub fn two_caches_over_one_shared_backend_converge(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    let Some(second) = f.place.second_node() else {
        assert!(
            !f.backend.shared(),
            "a backend without a second node is not shared"
        );
        return;
    };
    let other = cache(&second, &f.options);
    f.store
        .upsert_session(session(CHANNEL, "ops", SessionKind::Channel));
    f.store
        .insert_message(message(CHANNEL, 1, "from the first node"));
    f.store
        .insert_message(message(CHANNEL, 2, "deleted on the first node"));
    f.store.delete_message(CHANNEL, id(2));
    f.store.upsert_user(User {
        id: MIRA,
        username: "mira".into(),
        global_name: None,
        is_bot: false,
    });
    other.insert_message(message(CHANNEL, 3, "from the second node"));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let converged = |a: &Store, b: &Store| {
        a.messages(CHANNEL, 10, None, None) == b.messages(CHANNEL, 10, None, None)
            && a.session(CHANNEL) == b.session(CHANNEL)
            && a.user(MIRA) == b.user(MIRA)
    };
    while !converged(&f.store, &other) {
        assert!(
            std::time::Instant::now() < deadline,
            "the caches never converged"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let ids: Vec<Snowflake> = other
        .messages(CHANNEL, 10, None, None)
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ids, [id(1), id(3)]);
    assert_eq!(other.channel_by_key("ops"), Some(CHANNEL));
    other.close().unwrap();
}

/// Readers cache what they render from a message under its id and revision, and the names'
/// revision ([`Store::message_revisions`], [`Store::names_revision`]): each change a reader
/// sees must give a new number, or a list would keep serving what the message was. An edit,
/// a reaction, another node's copy with other files, and a rename of its author; an edit the
/// store refuses (older than what it holds) changes nothing.
pub fn every_change_a_reader_sees_gives_a_message_a_new_revision(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    let revision = |store: &Store| {
        let revisions = store.message_revisions(CHANNEL, MessageQuery::newest(10));
        assert_eq!(revisions.len(), 1, "{revisions:?}");
        assert_eq!(
            store.message_with_revision(CHANNEL, id(1)).map(|(_, r)| r),
            Some(revisions[0].1),
            "a message read alone carries the listed revision"
        );
        revisions[0].1
    };
    f.store.insert_message(message(CHANNEL, 1, "draft"));
    let mut seen = vec![revision(&f.store)];
    let mut changed = |what: &str, now: u64| {
        assert!(
            !seen.contains(&now),
            "{what}: revision {now} was seen before ({seen:?})"
        );
        seen.push(now);
    };
    assert!(f.store.update_message(
        CHANNEL,
        id(1),
        "final".into(),
        "final".into(),
        Some("2026-11-22T12:05:00.000000+00:00".into()),
    ));
    changed("an edit", revision(&f.store));
    let edited = revision(&f.store);
    assert!(!f.store.update_message(
        CHANNEL,
        id(1),
        "stale".into(),
        "stale".into(),
        Some("2026-11-22T12:01:00.000000+00:00".into()),
    ));
    assert_eq!(revision(&f.store), edited, "a refused edit changes nothing");
    f.store.add_reaction(CHANNEL, id(1), "👍", false);
    changed("a reaction", revision(&f.store));
    f.store.remove_reaction(CHANNEL, id(1), "👍", false);
    changed("a reaction taken back", revision(&f.store));

    let names = f.store.names_revision();
    f.store.upsert_user(User {
        id: AUTHOR,
        username: "author".into(),
        global_name: Some("The Author".into()),
        is_bot: false,
    });
    let named = f.store.names_revision();
    assert_ne!(
        named, names,
        "the author's name is what a rendered message shows"
    );
    f.store.upsert_user(User {
        id: AUTHOR,
        username: "author".into(),
        global_name: Some("The Author, renamed".into()),
        is_bot: false,
    });
    assert_ne!(f.store.names_revision(), named, "a rename is news too");
    assert_eq!(
        f.store.author_name(AUTHOR),
        "The Author, renamed",
        "the name read after the new revision is the new name"
    );

    // Files change only in a copy another node stored: the watcher replaces the cached one.
    let Some(second) = f.place.second_node() else {
        return;
    };
    let before = revision(&f.store);
    let mut with_files = f.store.message(CHANNEL, id(1)).expect("cached");
    with_files.attachments.push(Attachment {
        filename: "report.pdf".into(),
        url: "https://cdn.example/report.pdf".into(),
        size: 3,
        content_type: Some("application/pdf".into()),
    });
    second
        .save_message(with_files.clone())
        .expect("the other node stores its copy");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while f.store.message(CHANNEL, id(1)).as_ref() != Some(&with_files) {
        assert!(
            std::time::Instant::now() < deadline,
            "the other node's copy never reached this cache"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    changed("other files", revision(&f.store));
    assert_ne!(revision(&f.store), before);
}

/// After close, writes are refused with `Closed` (the cache keeps them in memory and logs).
pub fn a_closed_store_refuses_writes(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    f.store.close().unwrap();
    assert!(f.store.close().is_ok(), "closing twice is fine");
    let err = f
        .backend
        .save_message(message(CHANNEL, 1, "late"))
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Closed);
    assert_eq!(
        f.backend.record(audit_row(1)).unwrap_err().kind(),
        StoreErrorKind::Closed
    );
    assert_eq!(
        block_on(f.backend.flush()).unwrap_err().kind(),
        StoreErrorKind::Closed
    );
    assert!(
        f.store.insert_message(message(CHANNEL, 2, "memory only")),
        "the cache keeps it"
    );
}

/// Every kind of thing a store keeps can be listed a page at a time (what `store copy` reads),
/// audit rows can be imported under their ids without doubling, and the census counts each.
pub fn everything_kept_can_be_listed_for_a_copy(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    for n in 1..=5 {
        f.store.insert_message(message(CHANNEL, n, "a"));
        f.store.insert_message(message(OTHER, 10 + n, "b"));
    }
    f.store.delete_message(CHANNEL, id(3));
    f.store
        .upsert_session(session(CHANNEL, "ops", SessionKind::Channel));
    f.store.upsert_user(User {
        id: MIRA,
        username: "mira".into(),
        global_name: None,
        is_bot: false,
    });
    f.store.upsert_role(Role {
        id: ROLE,
        name: "On Call".into(),
    });
    f.store.set_thread_state(OTHER, ThreadState::default());
    f.store.open_gap(CHANNEL, id(1));
    f.backend
        .save_workflow(&workflow(1, WorkflowState::Waiting))
        .unwrap();
    f.backend.save_approval(approval(1, u64::MAX)).unwrap();
    f.backend.save_approval(approval(2, u64::MAX)).unwrap();
    block_on(f.backend.decide_approval(
        &approval(2, 0).card.id,
        Settlement::Deny { by: "@t".into() },
        5,
    ))
    .unwrap();
    let t = now_ms();
    let rows: Vec<AuditRow> = (0..3)
        .map(|i| AuditRow {
            time_ms: t,
            ..audit_row(i)
        })
        .collect();
    for row in &rows {
        f.backend.record(row.clone()).unwrap();
    }
    f.backend
        .set_session_scope(CHANNEL, Some(vec!["a".into()]))
        .unwrap();
    for n in [3, 1, 2] {
        assert!(matches!(
            block_on(f.backend.claim_trigger(claim(n))).unwrap(),
            Claim::Won(_)
        ));
    }
    let hour = 3_600_000;
    for (k, answered) in [("k2", true), ("k1", false)] {
        let request = IdempotencyRequest {
            key: key("operator", k),
            input_hash: "h".into(),
            now_ms: t,
            ttl_ms: hour,
        };
        assert_eq!(
            block_on(f.backend.reserve_idempotency(request)).unwrap(),
            Reserved::Fresh
        );
        if answered {
            block_on(f.backend.complete_idempotency(
                &key("operator", k),
                StoredAnswer {
                    status: 201,
                    body: "{}".into(),
                },
            ))
            .unwrap();
        }
    }
    f.flush();

    let page = |after: Option<Snowflake>, limit| -> Vec<u64> {
        block_on(f.backend.messages_after(after, limit))
            .unwrap()
            .iter()
            .map(|m| m.id.0 - id(0).0)
            .collect()
    };
    assert_eq!(
        page(None, 4),
        [1, 2, 4, 5],
        "live messages, by id, across channels"
    );
    assert_eq!(page(Some(id(5)), 100), [11, 12, 13, 14, 15]);
    assert!(page(Some(id(15)), 100).is_empty());

    let claims = block_on(f.backend.claims_after(None, 2)).unwrap();
    assert_eq!(
        claims.iter().map(|c| c.message_id).collect::<Vec<_>>(),
        [recent(1), recent(2)]
    );
    assert_eq!(claims[0].channel_id, CHANNEL);
    let rest = block_on(f.backend.claims_after(Some(recent(2)), 10)).unwrap();
    assert_eq!(
        rest.iter().map(|c| c.message_id).collect::<Vec<_>>(),
        [recent(3)]
    );

    let approvals = block_on(f.backend.approvals()).unwrap();
    assert_eq!(approvals.len(), 2);
    assert!(approvals[0].is_pending() && !approvals[1].is_pending());

    let first = block_on(f.backend.audit_after(0, 2)).unwrap();
    let last = first.last().unwrap().id;
    let second = block_on(f.backend.audit_after(last, 10)).unwrap();
    let listed: Vec<AuditRow> = first.iter().chain(&second).map(|e| e.row.clone()).collect();
    assert_eq!(listed, rows, "oldest first, every row");
    // Importing rows already kept adds nothing; a new id is kept under that id, and rows
    // recorded after it get higher ones.
    let mut imported = first.clone();
    let newest = second.last().unwrap().id;
    imported.push(switchboard_records::AuditEntry {
        id: newest + 100,
        row: rows[0].clone(),
    });
    f.backend.import_audit(imported).unwrap();
    f.backend.record(rows[1].clone()).unwrap();
    f.flush();
    let all = block_on(f.backend.audit_after(0, 100)).unwrap();
    assert_eq!(all.len(), 5, "{all:?}");
    assert_eq!(all[3].id, newest + 100);
    assert!(all[4].id > newest + 100);

    let keys = block_on(f.backend.idempotency_keys_after(None, 10)).unwrap();
    assert_eq!(
        keys.iter().map(|k| k.key.key.as_str()).collect::<Vec<_>>(),
        ["k1", "k2"]
    );
    assert_eq!(keys[0].answer, None);
    assert_eq!(keys[1].answer.as_ref().map(|a| a.status), Some(201));
    assert_eq!(keys[1].expires_ms, t + hour);
    let after = block_on(
        f.backend
            .idempotency_keys_after(Some(key("operator", "k1")), 10),
    )
    .unwrap();
    assert_eq!(after.len(), 1);

    assert_eq!(
        block_on(f.backend.census()).unwrap(),
        Census {
            messages: 9,
            sessions: 1,
            users: 1,
            roles: 1,
            threads: 1,
            gaps: 1,
            claims: 3,
            workflows: 1,
            approvals: 2,
            audit: 5,
            scopes: 1,
            agent_bindings: 0,
            idempotency_keys: 2,
            notes: 0,
            summaries: 0,
            runs: 0,
            schedules: 0,
            usage: 0,
            events: 0,
        }
    );
}

/// Fills `backend` with `messages` messages over three channels (one edited, one with
/// reactions and an attachment, one deleted) and some of every other kind: what the copy tests
/// of each backend pair move.
pub fn fill_every_kind(backend: &dyn Backend, messages: u64) {
    let channels = [CHANNEL, OTHER, Snowflake(CHANNEL.0 + 7)];
    for (i, channel) in channels.iter().enumerate() {
        backend
            .upsert_session(session(
                *channel,
                &format!("room-{i}"),
                SessionKind::Channel,
            ))
            .unwrap();
    }
    backend
        .upsert_user(User {
            id: MIRA,
            username: "mira".into(),
            global_name: Some("Mira K".into()),
            is_bot: false,
        })
        .unwrap();
    backend
        .upsert_role(Role {
            id: ROLE,
            name: "On Call".into(),
        })
        .unwrap();
    backend
        .save_thread_state(
            OTHER,
            ThreadState {
                archived: true,
                locked: false,
                auto_archive_minutes: 60,
                owner_id: None,
            },
        )
        .unwrap();
    for n in 1..=messages {
        let channel = channels[usize::try_from(n % 3).unwrap_or(0)];
        let mut m = message(channel, n, &format!("message {n} about the deploy"));
        if n == 2 {
            m.edited_timestamp = Some("2026-11-22T12:00:05Z".into());
            m.reactions = vec![Reaction {
                emoji: "✅".into(),
                count: 2,
                me: true,
            }];
            m.attachments = vec![Attachment {
                filename: "a.png".into(),
                url: "https://cdn.example/a.png".into(),
                size: 7,
                content_type: Some("image/png".into()),
            }];
        }
        backend.save_message(m).unwrap();
    }
    backend.delete_messages(channels[1], vec![id(1)]).unwrap();
    backend
        .open_gap(switchboard_records::Gap {
            channel_id: CHANNEL,
            after: id(3),
        })
        .unwrap();
    backend
        .save_workflow(&workflow(1, WorkflowState::Waiting))
        .unwrap();
    backend.save_approval(approval(1, u64::MAX)).unwrap();
    backend.save_approval(approval(2, u64::MAX)).unwrap();
    let t = now_ms();
    for i in 0..25 {
        backend
            .record(AuditRow {
                time_ms: t,
                ..audit_row(i)
            })
            .unwrap();
    }
    backend
        .set_session_scope(CHANNEL, Some(vec!["surface.*".into()]))
        .unwrap();
    block_on(backend.bind_agent(CHANNEL, Some("release".into()))).unwrap();
    block_on(backend.bind_agent(OTHER, Some("support".into()))).unwrap();
    block_on(backend.flush()).unwrap();
    block_on(backend.decide_approval(
        &approval(2, 0).card.id,
        Settlement::Approve { by: "@mira".into() },
        9,
    ))
    .unwrap();
    for n in 1..=3 {
        block_on(backend.claim_trigger(claim(100 + n))).unwrap();
    }
    for (k, answered) in [("a", true), ("b", false)] {
        block_on(backend.reserve_idempotency(IdempotencyRequest {
            key: key("token:ci", k),
            input_hash: "h".into(),
            now_ms: t,
            ttl_ms: 3_600_000,
        }))
        .unwrap();
        if answered {
            block_on(backend.complete_idempotency(
                &key("token:ci", k),
                StoredAnswer {
                    status: 200,
                    body: "{\"ok\":true}".into(),
                },
            ))
            .unwrap();
        }
    }
    agents::fill_agent_kinds(backend);
    fill_events(backend);
    block_on(backend.flush()).unwrap();
}

/// Events kept in a copy's source: more than a page, the oldest pruned (so ids start past 1).
pub const EVENTS_KEPT: u64 = 1_100;

fn fill_events(backend: &dyn Backend) {
    for batch in 0..2u64 {
        let rows = (0..600u64)
            .map(|i| crate::EventRow {
                kind: "call.finished".into(),
                session: (i % 2 == 0).then_some(CHANNEL),
                caller: (i % 3 == 0).then(|| format!("token:ci-{batch}")),
                time_ms: 1_000 + batch * 600 + i,
                body: format!("{{\"n\":{}}}", batch * 600 + i),
            })
            .collect();
        block_on(backend.append_events(rows)).unwrap();
    }
    block_on(backend.prune_events(EVENTS_KEPT as usize)).unwrap();
}

/// Every kept event, oldest first.
fn all_events(backend: &dyn Backend) -> Vec<crate::KeptEvent> {
    let mut out: Vec<crate::KeptEvent> = Vec::new();
    loop {
        let page = block_on(backend.events_after(out.last().map_or(0, |e| e.id), 500)).unwrap();
        if page.is_empty() {
            return out;
        }
        out.extend(page);
    }
}

/// Asserts that `to` holds everything `from` holds, kind by kind, as listed.
pub fn assert_holds_everything(from: &dyn Backend, to: &dyn Backend) {
    let all_messages = |b: &dyn Backend| {
        let mut out = Vec::new();
        loop {
            let page = block_on(b.messages_after(out.last().map(|m: &Message| m.id), 700)).unwrap();
            if page.is_empty() {
                return out;
            }
            out.extend(page);
        }
    };
    assert_eq!(all_messages(to), all_messages(from), "messages");
    let (a, b) = (
        block_on(from.snapshot(0)).unwrap(),
        block_on(to.snapshot(0)).unwrap(),
    );
    assert_eq!(b.sessions, a.sessions, "sessions");
    assert_eq!(b.users, a.users, "users");
    assert_eq!(b.roles, a.roles, "roles");
    assert_eq!(b.threads, a.threads, "threads");
    assert_eq!(b.gaps, a.gaps, "gaps");
    assert_eq!(
        block_on(to.claims_after(None, 1_000)).unwrap(),
        block_on(from.claims_after(None, 1_000)).unwrap(),
        "claims"
    );
    assert_eq!(
        block_on(to.workflows()).unwrap(),
        block_on(from.workflows()).unwrap()
    );
    assert_eq!(
        block_on(to.approvals()).unwrap(),
        block_on(from.approvals()).unwrap()
    );
    assert_eq!(
        block_on(to.audit_after(0, 1_000)).unwrap(),
        block_on(from.audit_after(0, 1_000)).unwrap(),
        "audit rows, under their ids"
    );
    assert_eq!(
        block_on(to.session_scopes()).unwrap(),
        block_on(from.session_scopes()).unwrap()
    );
    let bindings = block_on(from.agent_bindings()).unwrap();
    assert_eq!(bindings.len(), 2, "the source has /agent set bindings");
    assert_eq!(
        block_on(to.agent_bindings()).unwrap(),
        bindings,
        "/agent set bindings"
    );
    assert_eq!(
        block_on(to.idempotency_keys_after(None, 100)).unwrap(),
        block_on(from.idempotency_keys_after(None, 100)).unwrap(),
        "idempotency keys"
    );
    agents::assert_holds_agent_kinds(from, to);
    assert_eq!(all_events(to), all_events(from), "events, under their ids");
}

/// The copy tests for a pair of backends: `from` is filled; `whole` gets a copy, then the
/// copy again (which writes nothing); `halted` gets a copy stopped in the middle of the
/// messages, then the copy again (which writes only the rest). Both end holding everything,
/// and the report's lines say so.
pub fn copy_is_complete_idempotent_and_resumable(
    from: &dyn Backend,
    whole: &dyn Backend,
    halted: &dyn Backend,
) {
    use crate::copy::{copy_all, CopyError, Kind};
    use std::ops::ControlFlow;
    const MESSAGES: u64 = 2_500;
    fill_every_kind(from, MESSAGES);
    let mut seen = Vec::new();
    let report = copy_all(from, whole, &mut |p| {
        seen.push(*p);
        ControlFlow::Continue(())
    })
    .expect("the copy");
    assert!(report.complete(), "{report}");
    let text = report.to_string();
    assert!(
        text.contains("messages: 2499 in source, 2499 in target"),
        "{text}"
    );
    assert!(
        text.contains("audit rows: 25 in source, 25 in target"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "events: {EVENTS_KEPT} in source, {EVENTS_KEPT} in target"
        )),
        "{text}"
    );
    assert_eq!(text.lines().count(), Kind::ALL.len(), "{text}");
    assert!(
        seen.iter()
            .any(|p| p.kind == Kind::Messages && p.done == 1_000 && p.total == 2_499),
        "progress came a page at a time"
    );
    assert_holds_everything(from, whole);

    let again = copy_all(from, whole, &mut |_| ControlFlow::Continue(())).expect("again");
    assert_eq!(
        again.written(),
        0,
        "a second copy writes nothing: {again:?}"
    );
    assert_eq!(
        again.counts,
        report
            .counts
            .iter()
            .map(|c| crate::copy::Counted { written: 0, ..*c })
            .collect::<Vec<_>>()
    );

    // A copy into `halted` stopped once `kind`'s first 1,000 are looked at: what each kind
    // wrote.
    let stopped_in = |kind: Kind| {
        let mut written = BTreeMap::new();
        let stopped = copy_all(from, halted, &mut |p| {
            written.insert(p.kind, p.written);
            if p.kind == kind && p.done >= 1_000 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        assert!(
            matches!(stopped, Err(CopyError::Interrupted)),
            "{stopped:?}"
        );
        written
    };
    stopped_in(Kind::Messages);
    let partial = block_on(halted.census()).unwrap();
    assert_eq!(
        partial.messages, 1_000,
        "what was copied before the stop is kept"
    );
    assert_eq!(partial.audit, 0);
    // Resumed, and stopped again half-way through the events (a page of them is kept).
    let written = stopped_in(Kind::Events);
    assert_eq!(written[&Kind::Messages], 1_499, "only the rest is written");
    assert_eq!(all_events(halted).len(), 1_000, "a page of events is kept");
    let resumed = copy_all(from, halted, &mut |_| ControlFlow::Continue(())).expect("resumed");
    let events = resumed
        .counts
        .iter()
        .find(|c| c.kind == Kind::Events)
        .unwrap();
    assert_eq!(
        events.written,
        EVENTS_KEPT - 1_000,
        "only the rest is written"
    );
    assert_eq!(resumed.written(), events.written, "{resumed:?}");
    assert!(resumed.complete(), "{resumed}");
    assert_holds_everything(from, halted);

    // Events appended in the target after a copy get ids above every copied one.
    let newest = all_events(from).last().map(|e| e.id).unwrap();
    let appended = block_on(whole.append_events(vec![crate::EventRow {
        kind: "gateway.state".into(),
        session: None,
        caller: None,
        time_ms: 9,
        body: "{}".into(),
    }]))
    .unwrap();
    assert!(appended[0] > newest, "{appended:?} after {newest}");
}
