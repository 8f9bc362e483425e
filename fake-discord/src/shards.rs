//! Sharding as Discord enforces it: which shard a guild's events go to, IDENTIFY's `shard`
//! array, the rules an IDENTIFY must pass (guilds per shard, `max_concurrency` buckets, the
//! daily session-start budget), the settings a test may change at run time, and the records
//! the control API reports (`/_fake/gateway/identifies`, `/_fake/gateway/connections`).
//!
//! Pure bookkeeping: the hub calls [`IdentifyBook::admit`] under its lock, so the bucket rule
//! holds across every connection at once.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::snowflake::Snowflake;

/// One IDENTIFY per `max_concurrency` bucket per this long (Discord's rule).
pub const IDENTIFY_INTERVAL: Duration = Duration::from_secs(5);

/// The most guilds one shard may hold before Discord closes an IDENTIFY with 4011.
pub const DEFAULT_GUILDS_PER_SHARD_MAX: u32 = 2_500;

/// IDENTIFYs a bot may make per 24 hours (`session_start_limit.total`).
pub const DEFAULT_SESSION_START_TOTAL: u32 = 1_000;

/// How long the session-start budget lasts once its first IDENTIFY is spent.
pub const SESSION_START_WINDOW_MS: u64 = 24 * 60 * 60 * 1000;

/// The largest shard count the fake takes (in options, settings and IDENTIFY's `shard`).
pub const MAX_SHARDS: u32 = 1 << 16;

/// The largest `max_concurrency` the fake takes (Discord's largest bots get a few hundred).
pub const MAX_CONCURRENCY_LIMIT: u32 = 1_024;

/// The largest session-start budget the fake takes.
pub const MAX_SESSION_START_TOTAL: u32 = 1_000_000;

/// The shard that receives a guild's events: `(guild_id >> 22) % shard_count`. DMs go to
/// shard 0.
pub fn shard_of(guild_id: Snowflake, shard_count: u32) -> u32 {
    // The remainder of a division by a u32 fits a u32.
    ((guild_id.0 >> 22) % u64::from(shard_count.max(1))) as u32
}

/// Reads IDENTIFY's `shard` field: absent or `null` → `None` (an unsharded bot: shard 0 of 1);
/// `[shard_id, shard_count]` with `shard_id < shard_count` → that pair. Anything else (not an
/// array of two whole numbers, a count of 0 or above [`MAX_SHARDS`], an id not below the
/// count) is what Discord closes with 4010; the error says why.
pub fn parse_shard(identify: &Value) -> Result<Option<[u32; 2]>, String> {
    let shard = match identify.get("shard") {
        None | Some(Value::Null) => return Ok(None),
        Some(shard) => shard,
    };
    let pair = shard
        .as_array()
        .filter(|items| items.len() == 2)
        .and_then(|items| Some([items[0].as_u64()?, items[1].as_u64()?]))
        .ok_or_else(|| format!("`shard` must be [shard_id, shard_count], not {shard}"))?;
    let [id, count] = pair;
    if count == 0 || count > u64::from(MAX_SHARDS) {
        return Err(format!(
            "shard_count {count} is not 1 to {MAX_SHARDS} (shard {shard})"
        ));
    }
    if id >= count {
        return Err(format!(
            "shard_id {id} is not below shard_count {count} (shard {shard})"
        ));
    }
    // Both fit: count <= MAX_SHARDS and id < count.
    Ok(Some([id as u32, count as u32]))
}

/// Whether a session on `shard` (`[shard_id, shard_count]`) receives a dispatch routed so.
pub fn receives(route: Route, shard: [u32; 2]) -> bool {
    let [id, count] = shard;
    match route {
        Route::Everyone => true,
        Route::DirectMessages => id == 0,
        Route::Guild(guild) => shard_of(guild, count) == id,
    }
}

/// Which sessions a dispatch goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Every session (raw dispatches sent through the control API).
    Everyone,
    /// Sessions on shard 0 (DMs and their reactions, typing, pins, interactions).
    DirectMessages,
    /// Sessions on the guild's shard.
    Guild(Snowflake),
}

impl Route {
    /// The route of an event in a channel of `guild` (`None`: a DM).
    pub fn of_channel(guild: Option<Snowflake>) -> Route {
        guild.map_or(Route::DirectMessages, Route::Guild)
    }
}

/// The gateway's sharding settings: what `GET /api/v10/gateway/bot` reports and what IDENTIFY
/// is held to. `GET /_fake/gateway` reads them; `PATCH /_fake/gateway` (a
/// [`GatewaySettingsPatch`]) changes them while the fake runs.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct GatewaySettings {
    /// The shard count `GET /gateway/bot` recommends (`shards`). A bot may identify with any
    /// count; events are routed by the count each session identified with.
    pub shards: u32,
    /// `session_start_limit.max_concurrency`: IDENTIFYs of shard `i` share bucket
    /// `i % max_concurrency`, and each bucket takes one IDENTIFY per 5 s (op 9 for the later
    /// one).
    pub max_concurrency: u32,
    /// The most guilds one shard may hold: an IDENTIFY whose shard would hold more is closed
    /// with 4011 (sharding required). Starts as the world's `guilds_per_shard_max`.
    pub guilds_per_shard_max: u32,
    /// `session_start_limit.total`: IDENTIFYs allowed per 24 h.
    pub session_start_total: u32,
    /// `session_start_limit.remaining`: accepted IDENTIFYs left in this 24-h window (RESUMEs
    /// are free). At 0, IDENTIFY is closed with 4004: Discord resets the token of a bot that
    /// runs out.
    pub session_start_remaining: u32,
    /// Whether unsharded IDENTIFYs (no `shard`, or a shard count of 1) are held to the bucket
    /// rule too. Discord holds them; the fake does not by default, so single-shard tests that
    /// restart a bot or re-identify within 5 s behave as they always did.
    pub limit_unsharded_identifies: bool,
}

impl Default for GatewaySettings {
    /// One shard, `max_concurrency` 1, Discord's 2,500 guilds per shard and 1,000 session
    /// starts a day.
    fn default() -> Self {
        GatewaySettings {
            shards: 1,
            max_concurrency: 1,
            guilds_per_shard_max: DEFAULT_GUILDS_PER_SHARD_MAX,
            session_start_total: DEFAULT_SESSION_START_TOTAL,
            session_start_remaining: DEFAULT_SESSION_START_TOTAL,
            limit_unsharded_identifies: false,
        }
    }
}

impl GatewaySettings {
    /// Checks the bounds; the error names the setting and its range.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=MAX_SHARDS).contains(&self.shards) {
            return Err(format!(
                "shards must be 1 to {MAX_SHARDS}, not {}",
                self.shards
            ));
        }
        if !(1..=MAX_CONCURRENCY_LIMIT).contains(&self.max_concurrency) {
            return Err(format!(
                "max_concurrency must be 1 to {MAX_CONCURRENCY_LIMIT}, not {}",
                self.max_concurrency
            ));
        }
        if self.guilds_per_shard_max == 0 {
            return Err("guilds_per_shard_max must be at least 1".to_string());
        }
        if !(1..=MAX_SESSION_START_TOTAL).contains(&self.session_start_total) {
            return Err(format!(
                "session_start_total must be 1 to {MAX_SESSION_START_TOTAL}, not {}",
                self.session_start_total
            ));
        }
        if self.session_start_remaining > self.session_start_total {
            return Err(format!(
                "session_start_remaining ({}) cannot exceed session_start_total ({})",
                self.session_start_remaining, self.session_start_total
            ));
        }
        Ok(())
    }
}

/// Changes to [`GatewaySettings`] (`PATCH /_fake/gateway`); absent fields stay. Lowering
/// `session_start_total` below what remains lowers `session_start_remaining` with it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct GatewaySettingsPatch {
    /// A new recommended shard count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    /// A new `max_concurrency`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    /// A new guild limit per shard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guilds_per_shard_max: Option<u32>,
    /// A new daily IDENTIFY budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_start_total: Option<u32>,
    /// IDENTIFYs left now (refill, or run the budget down to test exhaustion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_start_remaining: Option<u32>,
    /// Hold unsharded IDENTIFYs to the bucket rule too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_unsharded_identifies: Option<bool>,
}

/// One IDENTIFY as `GET /_fake/gateway/identifies` reports it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct IdentifyRecord {
    /// When it arrived, in milliseconds since the Unix epoch by the fake's clock.
    pub at_ms: u64,
    /// The gateway connection it came on (as in `/_fake/gateway/connections`).
    pub connection: u64,
    /// `[shard_id, shard_count]` as sent (`[0, 1]` when the IDENTIFY had no `shard`); `null`
    /// when `shard` was malformed.
    pub shard: Option<[u32; 2]>,
    /// The session READY started; `null` when refused.
    pub session_id: Option<String>,
    /// Whether it was answered with READY.
    pub accepted: bool,
    /// Why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The close code a refusal closed the socket with (4004, 4010, 4011, ...); absent for an
    /// op 9 refusal, which leaves the socket open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close_code: Option<u16>,
}

/// What a gateway connection is doing.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionState {
    /// Open, no session attached (before IDENTIFY or RESUME, or after op 9).
    Handshaking,
    /// A session started by IDENTIFY (READY sent).
    Identified,
    /// A session taken over by RESUME (RESUMED sent).
    Resumed,
}

/// One open gateway connection as `GET /_fake/gateway/connections` reports it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ConnectionInfo {
    /// The connection's id (`POST /_fake/gateway/close {"connection": id}` closes it).
    pub connection: u64,
    /// When the socket opened, in milliseconds since the Unix epoch.
    pub opened_at_ms: u64,
    /// The shard of its session (`[0, 1]` for an unsharded one); `null` without a session.
    pub shard: Option<[u32; 2]>,
    /// Its session, if one is attached.
    pub session_id: Option<String>,
    /// What it is doing.
    pub state: ConnectionState,
}

/// Why an IDENTIFY that passed the token, intents and `shard` checks was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IdentifyRefusal {
    /// Close the socket with this code.
    Close(u16, String),
    /// Answer op 9 (d: false) and keep the socket.
    InvalidSession(String),
}

/// The IDENTIFY rules' state: settings, the last accepted IDENTIFY per bucket, the
/// session-start window and the bounded IDENTIFY log.
#[derive(Debug)]
pub struct IdentifyBook {
    settings: GatewaySettings,
    /// When the current 24-h session-start window began (its first accepted IDENTIFY).
    window_started_ms: Option<u64>,
    last_by_bucket: HashMap<u32, Instant>,
    log: VecDeque<IdentifyRecord>,
    log_limit: usize,
}

impl IdentifyBook {
    /// A book with checked `settings`, keeping the last `log_limit` IDENTIFYs.
    pub fn new(settings: GatewaySettings, log_limit: usize) -> IdentifyBook {
        IdentifyBook {
            settings,
            window_started_ms: None,
            last_by_bucket: HashMap::new(),
            log: VecDeque::new(),
            log_limit: log_limit.max(1),
        }
    }

    /// The settings now (the session-start window refreshed first).
    pub fn settings(&mut self, now_ms: u64) -> GatewaySettings {
        self.refresh_window(now_ms);
        self.settings.clone()
    }

    /// `session_start_limit` for `GET /gateway/bot`: (total, remaining, reset_after ms,
    /// max_concurrency). `reset_after` is 0 while the budget is untouched.
    pub fn session_start_limit(&mut self, now_ms: u64) -> (u32, u32, u64, u32) {
        self.refresh_window(now_ms);
        let reset_after = self.window_started_ms.map_or(0, |started| {
            (started + SESSION_START_WINDOW_MS).saturating_sub(now_ms)
        });
        let s = &self.settings;
        (
            s.session_start_total,
            s.session_start_remaining,
            reset_after,
            s.max_concurrency,
        )
    }

    fn refresh_window(&mut self, now_ms: u64) {
        if let Some(started) = self.window_started_ms {
            if now_ms >= started.saturating_add(SESSION_START_WINDOW_MS) {
                self.window_started_ms = None;
                self.settings.session_start_remaining = self.settings.session_start_total;
            }
        }
    }

    /// Applies a patch; nothing changes when any part of it is out of range.
    pub fn apply(
        &mut self,
        patch: &GatewaySettingsPatch,
        now_ms: u64,
    ) -> Result<GatewaySettings, String> {
        self.refresh_window(now_ms);
        let mut next = self.settings.clone();
        if let Some(v) = patch.shards {
            next.shards = v;
        }
        if let Some(v) = patch.max_concurrency {
            next.max_concurrency = v;
        }
        if let Some(v) = patch.guilds_per_shard_max {
            next.guilds_per_shard_max = v;
        }
        if let Some(v) = patch.session_start_total {
            next.session_start_total = v;
            next.session_start_remaining = next.session_start_remaining.min(v);
        }
        if let Some(v) = patch.session_start_remaining {
            next.session_start_remaining = v;
        }
        if let Some(v) = patch.limit_unsharded_identifies {
            next.limit_unsharded_identifies = v;
        }
        next.check()?;
        let buckets = next.max_concurrency;
        self.last_by_bucket.retain(|bucket, _| *bucket < buckets);
        self.settings = next;
        Ok(self.settings.clone())
    }

    /// Decides an IDENTIFY for `shard` (`sharded`: it named a shard count above 1) whose
    /// shard holds `guilds_on_shard` guilds. On acceptance it spends one session start and
    /// takes the bucket for 5 s; a refusal spends nothing.
    pub fn admit(
        &mut self,
        shard: [u32; 2],
        sharded: bool,
        guilds_on_shard: usize,
        now: Instant,
        now_ms: u64,
    ) -> Result<(), IdentifyRefusal> {
        self.refresh_window(now_ms);
        let s = &self.settings;
        if s.session_start_remaining == 0 {
            return Err(IdentifyRefusal::Close(
                4004,
                format!(
                    "session_start_limit exhausted ({} IDENTIFYs per 24 h): Discord resets the token",
                    s.session_start_total
                ),
            ));
        }
        if guilds_on_shard > s.guilds_per_shard_max as usize {
            return Err(IdentifyRefusal::Close(
                4011,
                format!(
                    "shard {shard:?} would hold {guilds_on_shard} guilds, more than the {} one shard may hold: sharding required",
                    s.guilds_per_shard_max
                ),
            ));
        }
        let bucket = shard[0] % s.max_concurrency;
        if sharded || s.limit_unsharded_identifies {
            if let Some(last) = self.last_by_bucket.get(&bucket) {
                let since = now.saturating_duration_since(*last);
                if since < IDENTIFY_INTERVAL {
                    return Err(IdentifyRefusal::InvalidSession(format!(
                        "bucket {bucket} (shard {} % max_concurrency {}) identified {} ms ago; one IDENTIFY per bucket per 5 s",
                        shard[0],
                        s.max_concurrency,
                        since.as_millis()
                    )));
                }
            }
        }
        self.settings.session_start_remaining -= 1;
        self.window_started_ms.get_or_insert(now_ms);
        self.last_by_bucket.insert(bucket, now);
        Ok(())
    }

    /// Adds an IDENTIFY to the log, forgetting the oldest beyond the limit.
    pub fn record(&mut self, record: IdentifyRecord) {
        self.log.push_back(record);
        while self.log.len() > self.log_limit {
            self.log.pop_front();
        }
    }

    /// The IDENTIFY log, oldest first.
    pub fn records(&self) -> Vec<IdentifyRecord> {
        self.log.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn settings() -> GatewaySettings {
        GatewaySettings {
            shards: 2,
            ..GatewaySettings::default()
        }
    }

    #[test]
    fn shard_field_is_parsed_like_discord() {
        assert_eq!(parse_shard(&json!({})), Ok(None));
        assert_eq!(parse_shard(&json!({"shard": null})), Ok(None));
        assert_eq!(parse_shard(&json!({"shard": [1, 2]})), Ok(Some([1, 2])));
        for bad in [
            json!([2, 2]),
            json!([0, 0]),
            json!([0]),
            json!([0, 1, 2]),
            json!(["0", "1"]),
            json!([-1, 2]),
            json!([0.5, 2]),
            json!({"id": 0}),
            json!("0,1"),
            json!([0, u64::from(MAX_SHARDS) + 1]),
            json!([u64::MAX, 2]),
        ] {
            assert!(parse_shard(&json!({ "shard": bad })).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_bucket_takes_one_identify_per_five_seconds() {
        let mut book = IdentifyBook::new(settings(), 10);
        let t0 = Instant::now();
        assert_eq!(book.admit([0, 2], true, 1, t0, 0), Ok(()));
        let second = book.admit([1, 2], true, 1, t0 + Duration::from_millis(4_999), 0);
        assert!(matches!(second, Err(IdentifyRefusal::InvalidSession(_))));
        assert_eq!(
            book.admit([1, 2], true, 1, t0 + Duration::from_secs(5), 0),
            Ok(())
        );
        // max_concurrency 2: shards 0 and 1 are different buckets.
        book.apply(
            &GatewaySettingsPatch {
                max_concurrency: Some(2),
                ..Default::default()
            },
            0,
        )
        .expect("patch");
        let t1 = t0 + Duration::from_secs(20);
        assert_eq!(book.admit([0, 2], true, 1, t1, 0), Ok(()));
        assert_eq!(book.admit([1, 2], true, 1, t1, 0), Ok(()));
        assert!(
            book.admit([2, 4], true, 1, t1, 0).is_err(),
            "2 % 2 = bucket 0"
        );
    }

    #[test]
    fn unsharded_identifies_skip_the_bucket_rule_unless_asked() {
        let mut book = IdentifyBook::new(settings(), 10);
        let t0 = Instant::now();
        assert_eq!(book.admit([0, 1], false, 1, t0, 0), Ok(()));
        assert_eq!(book.admit([0, 1], false, 1, t0, 0), Ok(()));
        // ...but they still take the bucket a sharded IDENTIFY then waits for.
        assert!(book.admit([0, 2], true, 1, t0, 0).is_err());
        book.apply(
            &GatewaySettingsPatch {
                limit_unsharded_identifies: Some(true),
                ..Default::default()
            },
            0,
        )
        .expect("patch");
        assert!(book.admit([0, 1], false, 1, t0, 0).is_err());
    }

    #[test]
    fn too_many_guilds_on_a_shard_is_4011() {
        let mut book = IdentifyBook::new(
            GatewaySettings {
                guilds_per_shard_max: 2,
                ..settings()
            },
            10,
        );
        let t0 = Instant::now();
        assert!(matches!(
            book.admit([0, 1], false, 3, t0, 0),
            Err(IdentifyRefusal::Close(4011, _))
        ));
        assert_eq!(book.admit([0, 2], true, 2, t0, 0), Ok(()));
    }

    #[test]
    fn session_starts_run_out_then_refill_after_a_day() {
        let mut book = IdentifyBook::new(
            GatewaySettings {
                session_start_total: 2,
                session_start_remaining: 2,
                ..settings()
            },
            10,
        );
        let t0 = Instant::now();
        let start = 1_000;
        assert_eq!(book.session_start_limit(start), (2, 2, 0, 1));
        assert_eq!(book.admit([0, 1], false, 1, t0, start), Ok(()));
        assert_eq!(
            book.session_start_limit(start + 1_000),
            (2, 1, SESSION_START_WINDOW_MS - 1_000, 1)
        );
        // A refusal spends nothing.
        assert!(book.admit([0, 1], false, 9_999, t0, start).is_err());
        assert_eq!(book.admit([0, 1], false, 1, t0, start), Ok(()));
        assert!(matches!(
            book.admit([0, 1], false, 1, t0, start),
            Err(IdentifyRefusal::Close(4004, _))
        ));
        let later = start + SESSION_START_WINDOW_MS;
        assert_eq!(book.session_start_limit(later), (2, 2, 0, 1));
        assert_eq!(book.admit([0, 1], false, 1, t0, later), Ok(()));
    }

    #[test]
    fn a_bad_patch_changes_nothing() {
        let mut book = IdentifyBook::new(settings(), 10);
        for patch in [
            GatewaySettingsPatch {
                shards: Some(0),
                max_concurrency: Some(4),
                ..Default::default()
            },
            GatewaySettingsPatch {
                max_concurrency: Some(MAX_CONCURRENCY_LIMIT + 1),
                ..Default::default()
            },
            GatewaySettingsPatch {
                guilds_per_shard_max: Some(0),
                ..Default::default()
            },
            GatewaySettingsPatch {
                session_start_remaining: Some(DEFAULT_SESSION_START_TOTAL + 1),
                ..Default::default()
            },
            GatewaySettingsPatch {
                session_start_total: Some(0),
                ..Default::default()
            },
        ] {
            assert!(book.apply(&patch, 0).is_err(), "{patch:?}");
            assert_eq!(book.settings(0), settings());
        }
        let lowered = book
            .apply(
                &GatewaySettingsPatch {
                    session_start_total: Some(5),
                    ..Default::default()
                },
                0,
            )
            .expect("patch");
        assert_eq!(lowered.session_start_remaining, 5);
    }

    #[test]
    fn the_log_is_bounded() {
        let mut book = IdentifyBook::new(settings(), 3);
        for at_ms in 0..10 {
            book.record(IdentifyRecord {
                at_ms,
                connection: 1,
                shard: None,
                session_id: None,
                accepted: false,
                reason: None,
                close_code: None,
            });
        }
        let kept: Vec<u64> = book.records().iter().map(|r| r.at_ms).collect();
        assert_eq!(kept, vec![7, 8, 9]);
    }

    proptest! {
        /// Every guild event reaches exactly one shard of a complete set, and it is the
        /// guild's; DMs reach shard 0 only.
        #[test]
        fn each_guild_routes_to_exactly_one_shard(guild in any::<u64>(), count in 1u32..64) {
            let receivers: Vec<u32> = (0..count)
                .filter(|id| receives(Route::Guild(Snowflake(guild)), [*id, count]))
                .collect();
            prop_assert_eq!(receivers, vec![shard_of(Snowflake(guild), count)]);
            let dm: Vec<u32> = (0..count)
                .filter(|id| receives(Route::DirectMessages, [*id, count]))
                .collect();
            prop_assert_eq!(dm, vec![0]);
        }

        /// Whatever the `shard` field holds, parsing answers (never panics) and only ever
        /// accepts an id below a count within bounds.
        #[test]
        fn garbage_shard_fields_never_pass(a in any::<i64>(), b in any::<i64>(), extra in proptest::option::of(any::<u8>())) {
            let mut items = vec![json!(a), json!(b)];
            if let Some(x) = extra { items.push(json!(x)); }
            if let Ok(Some([id, count])) = parse_shard(&json!({ "shard": items })) {
                prop_assert!(extra.is_none());
                prop_assert!(id < count && count <= MAX_SHARDS);
            }
        }
    }
}
