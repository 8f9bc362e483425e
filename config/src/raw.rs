//! The file's shape, as serde reads it: every table denies unknown keys, and values that need
//! checking after parsing keep their span so a problem can point at them.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use toml::Spanned;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    #[serde(default)]
    pub discord: RawDiscord,
    #[serde(default)]
    pub entity: RawEntity,
    #[serde(default)]
    pub toolserver: RawToolserver,
    #[serde(default)]
    pub store: RawStore,
    #[serde(default)]
    pub cluster: crate::cluster::RawCluster,
    #[serde(default)]
    pub agent: Option<RawAgent>,
    /// `[agents]`: named agents (`[agents.NAME]`, each with exactly the keys `[agent]` has),
    /// `agents.default` and `agents.max_handoff_depth`.
    #[serde(default)]
    pub agents: Option<switchboard_agents::RawAgents<RawAgent>>,
    #[serde(default)]
    pub permissions: crate::governance::RawPermissions,
    #[serde(default)]
    pub sessions: crate::governance::RawSessions,
    #[serde(default)]
    pub hooks: crate::governance::RawHooks,
    #[serde(default)]
    pub audit: crate::governance::RawAudit,
    #[serde(default)]
    pub workspace: Option<crate::workspace::RawWorkspace>,
    #[serde(default)]
    pub schedules: Vec<switchboard_schedule::RawSchedule>,
    #[serde(default)]
    pub scheduler: Option<switchboard_schedule::RawScheduler>,
    #[serde(default)]
    pub budgets: Option<switchboard_usage::RawBudgets>,
}

/// `[agent]`: which agent answers, and when.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAgent {
    pub runner: Spanned<String>,
    #[serde(default)]
    pub command: Option<Spanned<Vec<String>>>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default = "default_agent_timeout_s")]
    pub timeout_s: Spanned<u64>,
    #[serde(default)]
    pub env_passthrough: Vec<Spanned<String>>,
    #[serde(default = "default_context_messages")]
    pub context_messages: Spanned<u64>,
    #[serde(default = "default_context_tokens")]
    pub context_tokens: Spanned<u64>,
    #[serde(default = "default_answer_tokens")]
    pub answer_tokens: Spanned<u64>,
    #[serde(default)]
    pub protected_tools: Vec<Spanned<String>>,
    #[serde(default = "default_memory_max_chars")]
    pub memory_max_chars: Spanned<u64>,
    #[serde(default = "default_instructions_max_chars")]
    pub instructions_max_chars: Spanned<u64>,
    #[serde(default)]
    pub prompts: Option<Spanned<RawPrompts>>,
    #[serde(default = "default_queue_per_session")]
    pub queue_per_session: Spanned<u64>,
    #[serde(default)]
    pub batch: Option<Spanned<String>>,
    #[serde(default = "default_batch_max")]
    pub batch_max: Spanned<u64>,
    #[serde(default = "default_max_concurrent_runs")]
    pub max_concurrent_runs: Spanned<u64>,
    #[serde(default)]
    pub active_channel_ids: Vec<Spanned<String>>,
    #[serde(default)]
    pub allow_bots: Vec<Spanned<String>>,
    #[serde(default)]
    pub tool_scope: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub error_reply: Option<String>,
    #[serde(default)]
    pub base_url: Option<Spanned<String>>,
    #[serde(default)]
    pub model: Option<Spanned<String>>,
    #[serde(default)]
    pub api_key_env: Option<Spanned<String>>,
    #[serde(default)]
    pub system_prompt: Option<String>,
    #[serde(default = "default_max_tool_rounds")]
    pub max_tool_rounds: Spanned<u64>,
    #[serde(default = "default_max_bot_turns")]
    pub max_bot_turns: Spanned<u64>,
    #[serde(default)]
    pub trusted_users: Vec<Spanned<String>>,
    #[serde(default)]
    pub stream: Option<Spanned<String>>,
    #[serde(default = "default_stream_interval_ms")]
    pub stream_interval_ms: Spanned<u64>,
    #[serde(default)]
    pub reply_in_thread: Option<Spanned<String>>,
    #[serde(default)]
    pub missed_triggers: Option<Spanned<String>>,
    #[serde(default)]
    pub interrupted: Option<Spanned<String>>,
    #[serde(default = "default_missed_max_age_s")]
    pub missed_max_age_s: Spanned<u64>,
    #[serde(default)]
    pub price_in_per_mtok: Option<Spanned<switchboard_usage::RawUsd>>,
    #[serde(default)]
    pub price_out_per_mtok: Option<Spanned<switchboard_usage::RawUsd>>,
    pub answer_label: Option<Spanned<String>>,
}

fn default_missed_max_age_s() -> Spanned<u64> {
    Spanned::new(0..0, 600)
}

fn default_max_bot_turns() -> Spanned<u64> {
    Spanned::new(0..0, 3)
}

fn default_stream_interval_ms() -> Spanned<u64> {
    Spanned::new(0..0, 1_500)
}

fn default_max_tool_rounds() -> Spanned<u64> {
    Spanned::new(0..0, 8)
}

fn default_agent_timeout_s() -> Spanned<u64> {
    Spanned::new(0..0, 600)
}

fn default_context_messages() -> Spanned<u64> {
    Spanned::new(0..0, 20)
}

fn default_context_tokens() -> Spanned<u64> {
    Spanned::new(0..0, 32_000)
}

fn default_answer_tokens() -> Spanned<u64> {
    Spanned::new(0..0, 4_000)
}

fn default_instructions_max_chars() -> Spanned<u64> {
    Spanned::new(0..0, 20_000)
}

/// `[agent.prompts]`: model-name globs to system prompts.
#[derive(Debug, Default)]
pub(crate) struct RawPrompts(pub Vec<(String, String)>);

impl<'de> Deserialize<'de> for RawPrompts {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PromptsVisitor;

        impl<'de> Visitor<'de> for PromptsVisitor {
            type Value = RawPrompts;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a table of model-name globs to prompts, such as \"gpt-*\" = \"...\"")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawPrompts, A::Error> {
                let mut entries = Vec::new();
                while let Some((key, prompt)) = map.next_entry::<String, String>()? {
                    entries.push((key, prompt));
                }
                Ok(RawPrompts(entries))
            }
        }

        deserializer.deserialize_map(PromptsVisitor)
    }
}

fn default_memory_max_chars() -> Spanned<u64> {
    Spanned::new(0..0, 4_000)
}

fn default_batch_max() -> Spanned<u64> {
    Spanned::new(0..0, 10)
}

fn default_queue_per_session() -> Spanned<u64> {
    Spanned::new(0..0, 8)
}

fn default_max_concurrent_runs() -> Spanned<u64> {
    Spanned::new(0..0, 4)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDiscord {
    #[serde(default = "default_token_env")]
    pub token_env: Spanned<String>,
    #[serde(default)]
    pub allowed_guild_ids: Vec<Spanned<String>>,
    #[serde(default)]
    pub allowed_channel_ids: Vec<Spanned<String>>,
    #[serde(default)]
    pub allowed_category_ids: Vec<Spanned<String>>,
    #[serde(default)]
    pub admins: Vec<Spanned<String>>,
    #[serde(default)]
    pub allow_dms: bool,
    #[serde(default)]
    pub allow_role_mentions: bool,
    #[serde(default)]
    pub api_base_url: Option<Spanned<String>>,
    #[serde(default = "default_invalid_request_percent")]
    pub invalid_request_percent: Spanned<u64>,
    #[serde(default)]
    pub shard_count: Option<Spanned<crate::cluster::RawShardCount>>,
}

impl Default for RawDiscord {
    fn default() -> Self {
        RawDiscord {
            token_env: default_token_env(),
            allowed_guild_ids: Vec::new(),
            allowed_channel_ids: Vec::new(),
            allowed_category_ids: Vec::new(),
            admins: Vec::new(),
            allow_dms: false,
            allow_role_mentions: false,
            api_base_url: None,
            invalid_request_percent: default_invalid_request_percent(),
            shard_count: None,
        }
    }
}

fn default_invalid_request_percent() -> Spanned<u64> {
    Spanned::new(0..0, 50)
}

fn default_token_env() -> Spanned<String> {
    Spanned::new(0..0, "DISCORD_TOKEN".to_owned())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEntity {
    #[serde(default)]
    pub users: BTreeMap<Spanned<String>, Spanned<RawAlias>>,
    #[serde(default)]
    pub sessions: BTreeMap<Spanned<String>, Spanned<RawAlias>>,
    #[serde(default)]
    pub roles: BTreeMap<Spanned<String>, Spanned<RawAlias>>,
}

/// `alias = "id"` or `alias = { discord = "id", comment = "..." }`.
#[derive(Debug)]
pub(crate) struct RawAlias {
    pub discord: String,
    pub comment: Option<String>,
}

impl<'de> Deserialize<'de> for RawAlias {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct AliasVisitor;

        impl<'de> Visitor<'de> for AliasVisitor {
            type Value = RawAlias;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"a Discord id as a string ("123456789012345678") or a table { discord = "123456789012345678", comment = "..." }"#)
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<RawAlias, E> {
                Ok(RawAlias {
                    discord: value.to_owned(),
                    comment: None,
                })
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawAlias, A::Error> {
                const FIELDS: &[&str] = &["discord", "comment"];
                let mut discord = None;
                let mut comment = None;
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "discord" => discord = Some(map.next_value::<String>()?),
                        "comment" => comment = Some(map.next_value::<String>()?),
                        other => return Err(de::Error::unknown_field(other, FIELDS)),
                    }
                }
                let discord = discord.ok_or_else(|| de::Error::missing_field("discord"))?;
                Ok(RawAlias { discord, comment })
            }
        }

        deserializer.deserialize_any(AliasVisitor)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawToolserver {
    #[serde(default = "default_bind")]
    pub bind: Spanned<String>,
    #[serde(default = "default_operator_token_env")]
    pub operator_token_env: Spanned<String>,
    #[serde(default)]
    pub insecure_no_auth: bool,
    #[serde(default)]
    pub console: bool,
    #[serde(default = "default_metrics_public")]
    pub metrics_public: Spanned<bool>,
    #[serde(default)]
    pub allowed_hosts: Vec<Spanned<String>>,
    #[serde(default = "default_call_timeout_s")]
    pub call_timeout_s: Spanned<u64>,
    #[serde(default = "default_max_concurrent_calls")]
    pub max_concurrent_calls: Spanned<u64>,
    #[serde(default = "default_download_max_bytes")]
    pub download_max_bytes: Spanned<u64>,
    #[serde(default = "default_max_parts_per_send")]
    pub max_parts_per_send: Spanned<u64>,
    #[serde(default = "default_max_connections")]
    pub max_connections: Spanned<u64>,
    #[serde(default = "default_header_read_timeout_ms")]
    pub header_read_timeout_ms: Spanned<u64>,
    #[serde(default = "default_idle_timeout_s")]
    pub idle_timeout_s: Spanned<u64>,
    #[serde(default = "default_body_read_timeout_ms")]
    pub body_read_timeout_ms: Spanned<u64>,
    #[serde(default)]
    pub rate_limits: RawRateLimits,
    #[serde(default)]
    pub tokens: Vec<crate::governance::RawToken>,
}

impl Default for RawToolserver {
    fn default() -> Self {
        RawToolserver {
            bind: default_bind(),
            operator_token_env: default_operator_token_env(),
            insecure_no_auth: false,
            console: false,
            metrics_public: default_metrics_public(),
            allowed_hosts: Vec::new(),
            call_timeout_s: default_call_timeout_s(),
            max_concurrent_calls: default_max_concurrent_calls(),
            download_max_bytes: default_download_max_bytes(),
            max_parts_per_send: default_max_parts_per_send(),
            max_connections: default_max_connections(),
            header_read_timeout_ms: default_header_read_timeout_ms(),
            idle_timeout_s: default_idle_timeout_s(),
            body_read_timeout_ms: default_body_read_timeout_ms(),
            rate_limits: RawRateLimits::default(),
            tokens: Vec::new(),
        }
    }
}

fn default_metrics_public() -> Spanned<bool> {
    Spanned::new(0..0, false)
}

fn default_call_timeout_s() -> Spanned<u64> {
    Spanned::new(0..0, 30)
}

fn default_max_concurrent_calls() -> Spanned<u64> {
    Spanned::new(0..0, 64)
}

fn default_max_parts_per_send() -> Spanned<u64> {
    Spanned::new(0..0, 10)
}

fn default_download_max_bytes() -> Spanned<u64> {
    Spanned::new(0..0, crate::DEFAULT_DOWNLOAD_MAX_BYTES)
}

fn default_max_connections() -> Spanned<u64> {
    Spanned::new(0..0, 512)
}

fn default_header_read_timeout_ms() -> Spanned<u64> {
    Spanned::new(0..0, 10_000)
}

fn default_idle_timeout_s() -> Spanned<u64> {
    Spanned::new(0..0, 60)
}

fn default_body_read_timeout_ms() -> Spanned<u64> {
    Spanned::new(0..0, 15_000)
}

/// `[toolserver.rate_limits]`: GCRA quotas, as a sustained rate per minute plus a burst.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRateLimits {
    #[serde(default = "default_caller_per_minute")]
    pub per_caller_per_minute: Spanned<u64>,
    #[serde(default = "default_caller_burst")]
    pub per_caller_burst: Spanned<u64>,
    #[serde(default = "default_channel_per_minute")]
    pub per_channel_mutating_per_minute: Spanned<u64>,
    #[serde(default = "default_channel_burst")]
    pub per_channel_mutating_burst: Spanned<u64>,
}

impl Default for RawRateLimits {
    fn default() -> Self {
        RawRateLimits {
            per_caller_per_minute: default_caller_per_minute(),
            per_caller_burst: default_caller_burst(),
            per_channel_mutating_per_minute: default_channel_per_minute(),
            per_channel_mutating_burst: default_channel_burst(),
        }
    }
}

fn default_caller_per_minute() -> Spanned<u64> {
    Spanned::new(0..0, 600)
}

fn default_caller_burst() -> Spanned<u64> {
    Spanned::new(0..0, 60)
}

fn default_channel_per_minute() -> Spanned<u64> {
    Spanned::new(0..0, 60)
}

fn default_channel_burst() -> Spanned<u64> {
    Spanned::new(0..0, 10)
}

fn default_bind() -> Spanned<String> {
    Spanned::new(0..0, crate::DEFAULT_BIND.to_owned())
}

fn default_operator_token_env() -> Spanned<String> {
    Spanned::new(0..0, "SWITCHBOARD_OPERATOR_TOKEN".to_owned())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStore {
    /// `store.url`: which backend, and where.
    #[serde(default)]
    pub url: Option<Spanned<String>>,
    /// `store.path`: the older spelling of `store.url = "sqlite://PATH"`.
    #[serde(default)]
    pub path: Option<Spanned<String>>,
    #[serde(default = "default_messages_per_channel")]
    pub messages_per_channel: Spanned<u64>,
    #[serde(default = "default_backfill_max_messages")]
    pub backfill_max_messages: Spanned<u64>,
    #[serde(default = "default_backfill_max_age_s")]
    pub backfill_max_age_s: Spanned<u64>,
}

impl Default for RawStore {
    fn default() -> Self {
        RawStore {
            url: None,
            path: None,
            messages_per_channel: default_messages_per_channel(),
            backfill_max_messages: default_backfill_max_messages(),
            backfill_max_age_s: default_backfill_max_age_s(),
        }
    }
}

fn default_backfill_max_messages() -> Spanned<u64> {
    Spanned::new(0..0, 1000)
}

fn default_backfill_max_age_s() -> Spanned<u64> {
    Spanned::new(0..0, 86_400)
}

fn default_messages_per_channel() -> Spanned<u64> {
    Spanned::new(0..0, 1000)
}
