//! The switchboard config file: its schema, loading, and validation that reports every problem
//! at once, each with `file:line:column`, the key path and what to do.
//!
//! Secrets never live in the file: it names the environment variables that hold them.

#![warn(missing_docs)]

mod agents;
mod cluster;
mod governance;
mod plans;
mod raw;
mod reload;
mod report;
mod structure;
mod validate;
mod workspace;

pub use governance::{
    glob_matches, path_matcher, session_settings, AuditConfig, CallerMatch, Hook, HookFailure,
    Hooks, NamedToken, Permissions, Policy, PromptHook, Rule, SessionMatch, SessionSettings,
    CONSOLE_SCOPE,
};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub use agents::{AgentsConfig, AnswerLabel, NamedAgent, LEGACY_AGENT_NAME};
pub use cluster::{
    default_node_id, is_valid_node_id, ClusterConfig, ShardCount, ShardSelection, DEFAULT_LEASE,
    MAX_NODE_ID_CHARS, MAX_SHARD_COUNT,
};
pub use entity::{AliasKind, Aliases, Snowflake};
pub use plans::{BudgetsConfig, ScheduleEntry};
pub use reload::{plan_reload, ReloadPlan, RESTART_ONLY};
pub use report::{Problem, Report};
pub use switchboard_agents::AgentName;
pub use switchboard_store::{SqliteLocation, StoreUrl, KNOWN_SCHEMES};
pub use workspace::WorkspaceConfig;

/// The config file read when neither `--config` nor `SWITCHBOARD_CONFIG` names one.
pub const DEFAULT_CONFIG_PATH: &str = "switchboard.toml";
/// The environment variable that names the config file.
pub const CONFIG_PATH_ENV: &str = "SWITCHBOARD_CONFIG";
/// Where the tool server listens unless `toolserver.bind` says otherwise.
pub const DEFAULT_BIND: &str = "127.0.0.1:7311";
/// The largest config file read: a bigger one (or anything that is not a regular file, such as
/// a FIFO that would never end) is refused before it is read.
pub const MAX_CONFIG_BYTES: u64 = 4 * 1024 * 1024;

/// Comments the operator wrote on aliases (`ops = { discord = "…", comment = "…" }`).
pub type AliasComments = std::collections::HashMap<(AliasKind, String), String>;

/// A validated config.
#[derive(Debug, Clone)]
pub struct Config {
    /// `[discord]`: the bot token's variable, where the bot may act, admins and mention policy.
    pub discord: DiscordConfig,
    /// `[entity.users]`, `[entity.roles]` and `[entity.sessions]`: the names the mention
    /// rewrites and session references map to ids.
    pub aliases: Aliases,
    /// The operator's `comment` for an alias, keyed by kind and alias as written.
    pub alias_comments: AliasComments,
    /// `[toolserver]`: where the tool server listens, its operator token, limits and timeouts.
    pub toolserver: ToolserverConfig,
    /// `[store]`: the SQLite file and how many messages it keeps.
    pub store: StoreConfig,
    /// `[cluster]`: this node's id and which gateway shards it runs.
    pub cluster: ClusterConfig,
    /// The default agent's settings (`[agent]`, or the `[agents.NAME]` that `agents.default`
    /// names); `None` when no agent is configured: messages are stored, no agent runs.
    pub agent: Option<AgentConfig>,
    /// Every configured agent (`[agent]` alone is one, named `agent`), the default, and
    /// `agents.max_handoff_depth`.
    pub agents: AgentsConfig,
    /// `[permissions]`: allow / ask / deny rules and who approves.
    pub permissions: Permissions,
    /// `[sessions.*]`: per-session settings (tool scopes).
    pub sessions: Vec<SessionSettings>,
    /// `[hooks]`: commands run before and after calls.
    pub hooks: Hooks,
    /// `[audit]`: what the audit log keeps, and for how long.
    pub audit: AuditConfig,
    /// `[workspace]`: the agent's files, shell and git; `None` (no table): off.
    pub workspace: Option<WorkspaceConfig>,
    /// `[[schedules]]`: scheduled prompts kept in the file (ids `config:NAME`).
    pub schedules: Vec<ScheduleEntry>,
    /// `[scheduler]`: how missed firings are handled and how many schedules may exist.
    pub scheduler: switchboard_schedule::SchedulerSettings,
    /// `[budgets]`: token and dollar caps per user, session, guild and agent.
    pub budgets: BudgetsConfig,
}

/// `[agent]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentConfig {
    /// How the agent is started: `agent.runner` and the keys that go with it.
    pub runner: Runner,
    /// How long a run may take before its process group is killed.
    pub timeout: std::time::Duration,
    /// Names of switchboard's environment variables the agent may see; nothing else leaks.
    pub env_passthrough: Vec<String>,
    /// Messages of the session given to the agent as context: for the built-in `openai`
    /// runner an upper bound on the messages read, `context_tokens` deciding how many fit.
    pub context_messages: usize,
    /// `agent.context_tokens` (default 32,000, 1,000 to 2,000,000): the most one request of
    /// the built-in `openai` runner may carry — system prompt, tool schemas, transcript, tool
    /// calls and results, and the answer's reserve.
    pub context_tokens: usize,
    /// `agent.answer_tokens` (default 4,000, less than `context_tokens`): the reserve kept for
    /// the model's answer; a request carries at most `context_tokens − answer_tokens`.
    pub answer_tokens: usize,
    /// `agent.protected_tools` (callable globs, default none): callables whose results are
    /// never pruned from the built-in runner's requests.
    pub protected_tools: Vec<String>,
    /// `agent.memory_max_chars` (default 4,000, 100 to 100,000): the most characters of notes
    /// one memory scope (a session's, a user's) may hold; the notes listed in a prompt take at
    /// most this per scope.
    pub memory_max_chars: usize,
    /// `agent.instructions_max_chars` (default 20,000, 0 to 1,000,000; 0: none read): the
    /// most characters of instruction files (`AGENTS.md`, `CLAUDE.md`,
    /// `.switchboard/instructions.md`, from the session's workspace directory up to
    /// `workspace.root`) the `openai` runner puts in its system message, head and tail kept.
    pub instructions_max_chars: usize,
    /// `[agent.prompts]`: model-name globs (case-insensitive) and their system prompts, the
    /// most specific (longest) glob first, `default` among them for models no glob matches;
    /// chosen by `agent.model` in place of `agent.system_prompt`.
    pub prompts: Vec<(String, String)>,
    /// Triggers waiting per session, beyond the running one.
    pub queue_per_session: usize,
    /// `agent.batch` (default `turn`): whether the messages that queued while a session's
    /// run was busy are answered together by its next run.
    pub batch: BatchMode,
    /// `agent.batch_max` (default 10, 1 to 100): the most queued messages one run answers
    /// together; the rest start their own runs, in order.
    pub batch_max: usize,
    /// Runs going at once across all sessions (`agent.max_concurrent_runs`, default 4, 1 to
    /// 256); past that, a session's next run waits for another to finish.
    pub max_concurrent_runs: usize,
    /// Channels where every message starts a run (not only mentions and replies).
    pub active_channel_ids: Vec<Snowflake>,
    /// Bot accounts whose messages may start runs.
    pub allow_bots: Vec<Snowflake>,
    /// Glob patterns of the callables a run's capability token may call.
    pub tool_scope: Vec<String>,
    /// The line posted when a run fails or times out.
    pub error_reply: String,
    /// `agent.max_bot_turns` (default 3, 1 to 100): consecutive replies to other bots (those in
    /// `allow_bots`) per session before the agent stops answering them, saying why once.
    pub max_bot_turns: u32,
    /// `agent.trusted_users` (users and roles): when not empty, prompt lines from anyone else
    /// are marked untrusted.
    pub trusted_users: Vec<Principal>,
    /// `agent.stream`: how a streaming runner shows its answer while it is written.
    pub stream: StreamMode,
    /// `agent.stream_interval_ms` (default 1,500, 250 to 60,000): the least time between two
    /// edits of a streamed draft.
    pub stream_interval: std::time::Duration,
    /// `agent.reply_in_thread`: whether an answer to a message in a channel goes into a thread
    /// started from that message (the thread is then the conversation's session).
    pub reply_in_thread: ReplyInThread,
    /// What to do with a message that would have started a run but was missed live and
    /// fetched afterwards (`agent.missed_triggers`, default `reply`).
    pub missed_triggers: MissedTriggers,
    /// What becomes of a run whose node died or restarted before it ended, once a live node
    /// finds its lease expired (`agent.interrupted`, default `notify`).
    pub interrupted: Interrupted,
    /// A missed trigger older than this is not answered even with `reply`
    /// (`agent.missed_max_age_s`, default 600, 1 to 604,800).
    pub missed_max_age: std::time::Duration,
    /// `agent.price_in_per_mtok` / `agent.price_out_per_mtok` (dollars per million tokens,
    /// default 0): what the agent's usage costs, recorded per model call.
    pub price: switchboard_usage::Price,
    /// `answer_label` (default `prefix`): how this agent's answers say it wrote them when
    /// more than one agent is configured.
    pub answer_label: AnswerLabel,
}

/// `agent.missed_triggers`: what becomes of triggers missed while the gateway was away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissedTriggers {
    /// Answer them, when younger than `agent.missed_max_age_s` (each at most once).
    #[default]
    Reply,
    /// Store them, never answer them.
    Ignore,
}

/// `agent.interrupted`: what becomes of a run whose node stopped renewing its lease (died,
/// restarted, lost the store) — on another node, or on the same one when it comes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Interrupted {
    /// The ⏳ becomes ⚠️ and the bot says, in reply to the question, that the answer was
    /// interrupted and to ask again.
    #[default]
    Notify,
    /// The run starts again with the same trigger.
    Rerun,
}

/// `agent.batch`: what a session's next run answers when several messages queued while its
/// run was busy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BatchMode {
    /// All of them (up to `agent.batch_max`) in one turn, each quoted with its author.
    #[default]
    Turn,
    /// One run per message, in order.
    Off,
}

/// `agent.reply_in_thread`: where the agent answers a message posted in a text channel.
/// Messages in threads and DMs are always answered where they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplyInThread {
    /// In the channel, as a reply to the message (the default).
    #[default]
    Never,
    /// In a thread started from the message, created before the run; the run's session is
    /// the thread.
    Always,
    /// In the channel when the answer fits one message; else in a thread started from the
    /// message, where all its parts go.
    Long,
}

impl ReplyInThread {
    /// Whether threads the bot started are conversations: messages in them start runs
    /// without a mention.
    pub fn threads_are_conversations(self) -> bool {
        self != ReplyInThread::Never
    }
}

/// `agent.stream`: whether a runner that can stream shows a draft while it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamMode {
    /// Post a draft after the first text and edit it as text arrives (the default).
    #[default]
    Edit,
    /// Post the answer once, when it is complete.
    Off,
}

/// How the agent runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runner {
    /// A command-line agent: the prompt on stdin, the reply on stdout.
    Command {
        /// The first word of `agent.command`: a path, or a bare name looked up only in
        /// `/bin:/usr/bin` unless `PATH` is in `agent.env_passthrough`.
        program: String,
        /// The rest of `agent.command`, passed as they are (no shell).
        args: Vec<String>,
        /// `agent.cwd` (default `.`, relative to switchboard's working directory): where the
        /// agent runs, and the only directory its tool calls may read or write files in.
        cwd: PathBuf,
    },
    /// An OpenAI-compatible chat endpoint driven by a built-in tool-calling loop.
    OpenAi(OpenAiRunner),
    /// `runner = "demo"`: a built-in agent that understands a few phrases, with no model and
    /// no network; its tool calls go through the pipeline like any run's (the playground's).
    Demo,
}

/// `runner = "openai"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenAiRunner {
    /// Such as `http://127.0.0.1:8080/v1` (the chat completions route is `{base_url}/chat/completions`).
    pub base_url: String,
    /// `agent.model`: the model's name on that server, sent with every request.
    pub model: String,
    /// Name of the environment variable holding the API key; none for local servers.
    pub api_key_env: Option<String>,
    /// `agent.system_prompt`: the system message that opens every conversation; unset, a
    /// short built-in one telling the model it assists in a Discord server.
    pub system_prompt: String,
    /// Model turns that may call tools before a final answer is required.
    pub max_tool_rounds: usize,
}

/// `[discord]`: where the bot token comes from, where the bot may act, who administers it, and
/// what its output may ping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscordConfig {
    /// Name of the environment variable holding the bot token.
    pub token_env: String,
    /// Guilds whose every channel (and its threads) the agent may use
    /// (`discord.allowed_guild_ids`); with all three allow lists empty, every channel is denied.
    pub allowed_guild_ids: Vec<Snowflake>,
    /// Channels allowed with their threads (never the channels of a listed category).
    pub allowed_channel_ids: Vec<Snowflake>,
    /// Categories whose every channel (and its threads) is allowed.
    pub allowed_category_ids: Vec<Snowflake>,
    /// Who may run admin commands (`/abort` on anyone's run, ...): users and roles.
    pub admins: Vec<Principal>,
    /// Whether direct messages are allowed (`discord.allow_dms`, default `false`); with an
    /// `[agent]`, every message in an allowed DM starts a run.
    pub allow_dms: bool,
    /// Lets agent output ping roles; `@everyone` and `@here` never ping.
    pub allow_role_mentions: bool,
    /// A fake Discord or a REST proxy, without a trailing slash.
    pub api_base_url: Option<String>,
    /// `discord.invalid_request_percent` (default 50, 1 to 100): the share of Discord's
    /// 10,000 invalid requests (401, 403, 429) per 10 minutes after which the REST client stops
    /// calling the routes that earned them, so the token's IP is never banned.
    pub invalid_request_percent: u8,
    /// `discord.shard_count` (default `"auto"`: what `GET /gateway/bot` recommends).
    pub shard_count: ShardCount,
}

/// `[toolserver]`: the HTTP tool server's address, authentication, limits and timeouts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolserverConfig {
    /// The address the tool server listens on (`toolserver.bind`, default [`DEFAULT_BIND`]):
    /// an IP and port, never a host name.
    pub bind: SocketAddr,
    /// Name of the environment variable holding the operator token.
    pub operator_token_env: String,
    /// Serve without an operator token (loopback binds only).
    pub insecure_no_auth: bool,
    /// Serve the operator console (a web page) at `/` (`toolserver.console`, default off).
    pub console: bool,
    /// `GET /metrics` without a token (loopback binds only); else the operator token reads it.
    pub metrics_public: bool,
    /// Host names requests may name in `Host` besides the bind address and the loopback names
    /// (`toolserver.allowed_hosts`: a reverse proxy's or the machine's name), lowercase, no
    /// port. Every other `Host` is refused, so a web page cannot reach the server through DNS
    /// rebinding.
    pub allowed_hosts: Vec<String>,
    /// A call running longer than this answers `timeout` (HTTP 504).
    pub call_timeout: std::time::Duration,
    /// Calls served at once; past it, calls answer `unavailable` (HTTP 503).
    pub max_concurrent_calls: usize,
    /// `attachment.download` saves no file larger than this.
    pub download_max_bytes: u64,
    /// A send that would need more messages than this is refused before anything is posted.
    pub max_parts_per_send: usize,
    /// HTTP connections served at once; more wait in the kernel's accept queue. The server
    /// lowers it further when the process's open-file limit leaves less room.
    pub max_connections: usize,
    /// A client must send a complete request head within this; it is also how long a
    /// keep-alive connection may wait for its next request.
    pub header_read_timeout: std::time::Duration,
    /// A connection that moves no bytes for this long, with no call running on it, is closed
    /// (such as a client that stopped reading its answer).
    pub idle_timeout: std::time::Duration,
    /// A request's whole body must arrive within this of its head; else `body_timeout` (408).
    pub body_read_timeout: std::time::Duration,
    /// `[toolserver.rate_limits]`: how often a caller may call, and a channel be changed.
    pub rate_limits: RateLimits,
    /// `[[toolserver.tokens]]`: named service tokens, each with its own scope.
    pub tokens: Vec<NamedToken>,
}

/// A user or a role named in the config (`discord.admins`), by alias or id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Principal {
    /// A user, written as a user alias (`"@Mira"`) or `<@id>`: matches that user only.
    User(Snowflake),
    /// A role, written as a role alias (`"@oncall"`) or `<@&id>`: matches every member with it.
    Role(Snowflake),
    /// A bare id: Discord ids are unique across kinds, so it matches a user or a role.
    Id(Snowflake),
}

impl Principal {
    /// Whether a member with this user id and these roles is this principal.
    pub fn matches(&self, user: Snowflake, roles: &[Snowflake]) -> bool {
        match *self {
            Principal::User(id) => id == user,
            Principal::Role(id) => roles.contains(&id),
            Principal::Id(id) => id == user || roles.contains(&id),
        }
    }
}

/// Whether anyone in `principals` is this member.
pub fn any_principal_matches(
    principals: &[Principal],
    user: Snowflake,
    roles: &[Snowflake],
) -> bool {
    principals.iter().any(|p| p.matches(user, roles))
}

/// `toolserver.download_max_bytes` when not set: 25 MiB.
pub const DEFAULT_DOWNLOAD_MAX_BYTES: u64 = 25 * 1024 * 1024;

/// `agent.tool_scope` when not set: everything an agent run needs to talk, read, react, thread
/// and wait on people — and not `surface.channels.*` (creating, renaming and deleting
/// channels), which a run gets only when the operator names it.
pub const DEFAULT_TOOL_SCOPE: [&str; 9] = [
    "surface.help",
    "memory.*",
    "surface.sessions.*",
    "surface.messages.*",
    "surface.reactions.*",
    "surface.threads.*",
    "surface.pins.*",
    "workflow.*",
    "attachment.*",
];

/// GCRA quotas: a sustained rate per minute and a burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// The sustained rate, refilled evenly over the minute (`…_per_minute`, 1 to 1,000,000):
    /// calls for the per-caller quota, messages for the per-channel one.
    pub per_minute: u32,
    /// How many may go at once after a quiet spell (`…_burst`, 1 to 100,000); a send split into
    /// more messages than a channel's burst is refused outright.
    pub burst: u32,
}

/// `[toolserver.rate_limits]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimits {
    /// Per caller, per callable.
    pub per_caller: Quota,
    /// Per channel, for mutating callables.
    pub per_channel_mutating: Quota,
}

/// `[store]`: which backend keeps the data and where, and how many messages it keeps per
/// session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// `store.url` (default `sqlite://switchboard.db`); `store.path = "PATH"` is read as
    /// `sqlite://PATH`.
    pub url: switchboard_store::StoreUrl,
    /// When the file named the store with `store.path`: the `store.url` line to write instead
    /// (check-config prints it as a note).
    pub path_note: Option<String>,
    /// Newest messages kept per session; older ones are pruned.
    pub messages_per_channel: usize,
    /// `store.backfill_max_messages` (default 1,000, 0 to 10,000; 0 turns backfill off): after
    /// the gateway identifies afresh (start-up, an invalid session, a long outage), at most this
    /// many missed messages are fetched per channel, the newest first.
    pub backfill_max_messages: usize,
    /// `store.backfill_max_age_s` (default 86,400: a day; 60 to 2,592,000): missed messages older
    /// than this are not fetched.
    pub backfill_max_age: std::time::Duration,
}

/// What validation can check names against beyond the file itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Known {
    /// Category ids and their names (from the store of an earlier run), to catch a category
    /// put in `discord.allowed_channel_ids`.
    pub categories: std::collections::HashMap<Snowflake, String>,
    /// Every callable id the tool server registers, to check tool names and globs (rules,
    /// scopes, hooks). `None`: not checked.
    pub callables: Option<Vec<String>>,
}

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read: it is missing, unreadable or not a file.
    #[error("cannot read config file {path}: {source}. Create it (see switchboard.example.toml), or point --config / SWITCHBOARD_CONFIG at yours")]
    Read {
        /// The path as given.
        path: PathBuf,
        /// The error reading it.
        source: std::io::Error,
    },
    /// The path is not a regular file, or the file is over [`MAX_CONFIG_BYTES`].
    #[error("cannot read config file {path}: {why}")]
    Unusable {
        /// The path as given.
        path: PathBuf,
        /// What is wrong with it, and what to do.
        why: String,
    },
    /// The file was read but is not UTF-8 or not a valid config; the report lists every problem.
    #[error("{0}")]
    Invalid(Report),
}

/// The config file's bytes, refusing what is not a regular file or is over
/// [`MAX_CONFIG_BYTES`] (checked again while reading: the file may grow in between).
///
/// The check is made on the file that was opened, never on the path before opening it: the
/// path may be swapped in between (a FIFO renamed over the config would block `open` until a
/// writer came, and a reload's thread with it). So the file is opened without blocking
/// (`O_NONBLOCK`, which reads of a regular file ignore; `O_NOCTTY`, so a terminal never becomes
/// ours) and then checked with `fstat`.
pub fn read_config_file(path: &Path) -> Result<Vec<u8>, ConfigError> {
    use std::io::Read;
    let read_error = |source| ConfigError::Read {
        path: path.to_owned(),
        source,
    };
    let unusable = |why: String| ConfigError::Unusable {
        path: path.to_owned(),
        why,
    };
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    }
    let file = options.open(path).map_err(read_error)?;
    let metadata = file.metadata().map_err(read_error)?;
    if !metadata.is_file() {
        return Err(unusable(
            "it is not a regular file; point --config / SWITCHBOARD_CONFIG at the TOML file"
                .to_owned(),
        ));
    }
    let too_large = || {
        unusable(format!(
            "it is over {MAX_CONFIG_BYTES} bytes, far more than any config needs; is it the right file?"
        ))
    };
    if metadata.len() > MAX_CONFIG_BYTES {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(too_large());
    }
    Ok(bytes)
}

impl Config {
    /// Reads and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_with(path, &Known::default())
    }

    /// [`Config::load`], also checking ids against what is known of the channels.
    pub fn load_with(path: &Path, known: &Known) -> Result<Config, ConfigError> {
        let source = Config::read_source(path)?;
        Config::parse_with(&source, &path.display().to_string(), known)
            .map_err(ConfigError::Invalid)
    }

    /// The text of a config file, read as [`Config::load`] reads it (a regular file, at most
    /// [`MAX_CONFIG_BYTES`], UTF-8), not validated.
    pub fn read_source(path: &Path) -> Result<String, ConfigError> {
        let bytes = read_config_file(path)?;
        report::utf8_source(&bytes, &path.display().to_string())
            .map(str::to_owned)
            .map_err(ConfigError::Invalid)
    }

    /// Validates config text; `file` names it in the report.
    pub fn parse(source: &str, file: &str) -> Result<Config, Report> {
        Config::parse_with(source, file, &Known::default())
    }

    /// [`Config::parse`], also checking ids against what is known of the channels.
    pub fn parse_with(source: &str, file: &str, known: &Known) -> Result<Config, Report> {
        let mut collector = report::Collector::new(source);
        let raw = structure::read(source, &mut collector);
        let config = raw.and_then(|raw| validate::validate(raw, known, &mut collector));
        match config {
            Some(config) if collector.problems.is_empty() => Ok(config),
            _ => Err(collector.finish(file)),
        }
    }

    /// The config path to use: the flag, else `SWITCHBOARD_CONFIG`, else `./switchboard.toml`.
    pub fn resolve_path(flag: Option<&Path>, env_value: Option<&str>) -> PathBuf {
        flag.map(Path::to_owned)
            .or_else(|| env_value.filter(|v| !v.is_empty()).map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG_PATH))
    }
}
