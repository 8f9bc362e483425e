//! The command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "switchboard",
    version,
    about = "Puts an AI agent into Discord and lets it act there through a governed tool server.",
    after_help = "The config file is --config PATH, else $SWITCHBOARD_CONFIG, else ./switchboard.toml."
)]
pub struct Cli {
    /// Config file (default: $SWITCHBOARD_CONFIG, else ./switchboard.toml).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,

    /// What to do (default: run).
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run switchboard: the gateway, the store and the tool server (the default).
    Run,
    /// Run against a built-in fake Discord with a demo guild: no token, no setup.
    #[cfg(feature = "playground")]
    Playground(PlaygroundArgs),
    /// Validate the config file: a summary and exit 0, or every problem and exit 2.
    CheckConfig,
    /// Serve MCP on standard input and output, forwarding to the running switchboard at
    /// $SWITCHBOARD_URL with $SWITCHBOARD_TOKEN (for MCP hosts that launch a command).
    Mcp,
    /// Rewrite text the way switchboard does (TEXT, or standard input).
    Rewrite(RewriteArgs),
    /// Show the audit log of a running switchboard (newest rows, oldest first; --follow for
    /// new ones as they come).
    Audit(AuditArgs),
    /// Have a running switchboard read its config file again: prints what changed (and what
    /// needs a restart), or every problem and exits 2, the config in force kept.
    Reload(ReloadArgs),
    /// Read and forget the agent's notes (memory.*) on a running switchboard.
    #[command(subcommand)]
    Memory(MemoryCommand),
    /// Look at the cluster of nodes a running switchboard belongs to.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Work on a store directly (no config file, no running switchboard needed).
    #[command(subcommand)]
    Store(StoreCommand),
    /// Show the model usage the store keeps (tokens and cost), by user, session, guild, agent
    /// or day (reads the store the config names; no running switchboard needed).
    Usage(UsageArgs),
    /// Print the channel id a session reference (id, <#id>, token, #token) resolves to.
    ResolveSession {
        /// The reference to resolve, such as `#ops`.
        #[arg(value_name = "REF")]
        reference: String,
    },
}

/// `switchboard playground`: the agent is the built-in demo unless a model is named.
#[cfg(feature = "playground")]
#[derive(Debug, Args)]
pub struct PlaygroundArgs {
    /// Tool server port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 7311)]
    pub port: u16,
    /// An OpenAI-compatible server's base URL, ending in /v1 (Ollama: http://127.0.0.1:11434/v1);
    /// with --model, the playground's agent is that model instead of the built-in demo.
    #[arg(long, value_name = "URL", env = "OPENAI_BASE_URL", requires = "model")]
    pub agent_url: Option<String>,
    /// The model's name on that server (needs --agent-url). An API key, when the server needs
    /// one, is read from OPENAI_API_KEY.
    #[arg(
        long,
        value_name = "NAME",
        env = "OPENAI_MODEL",
        requires = "agent_url"
    )]
    pub model: Option<String>,
    /// Keep the store in this directory between runs (default: a temporary directory removed
    /// at exit).
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// Lay this TOML file over the playground's own config: its tables merge key by key, a key
    /// it sets replaces the playground's, and its [[...]] entries (permissions.rules, hooks,
    /// tokens) come after the playground's. For trying your [agent], [permissions] or hooks
    /// in the demo guild; the fake's URL, the port, the store and the console stay the
    /// playground's. (--config runs a whole config of yours instead.)
    // Not with --config; checked where both are known (`conflicts_with` misses the global
    // --config when it stands before `playground`).
    #[arg(long, value_name = "FILE")]
    pub extra_config: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct Direction {
    /// Agent text to Discord markup: @name → <@id>, #token → <#id>.
    #[arg(long)]
    pub outbound: bool,
    /// Discord markup to agent text: <@id> → @name, <#id> → #token.
    #[arg(long)]
    pub inbound: bool,
}

#[derive(Debug, Args)]
pub struct RewriteArgs {
    #[command(flatten)]
    pub direction: Direction,
    /// Text to rewrite; read from standard input when absent.
    pub text: Option<String>,
}

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Keep printing new rows as they are written, until interrupted.
    #[arg(long, short)]
    pub follow: bool,
    /// Only calls at or after this time: RFC 3339, or an age such as 15m, 2h, 7d.
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Only calls before this time (same forms as --since).
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Only calls of this callable or glob (surface.messages.*).
    #[arg(long, value_name = "GLOB")]
    pub tool: Option<String>,
    /// Only calls that acted in this session (#ops or an id).
    #[arg(long, value_name = "REF")]
    pub session: Option<String>,
    /// Only calls by this caller: operator, token:NAME, cap:ID, discord:USER_ID.
    #[arg(long, value_name = "CALLER")]
    pub caller: Option<String>,
    /// Only calls with this decision.
    #[arg(long, value_parser = ["allow", "ask", "deny", "-"])]
    pub decision: Option<String>,
    /// How many of the newest rows to show first.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub limit: u32,
    /// One JSON object per line instead of columns.
    #[arg(long)]
    pub json: bool,
    /// The running switchboard (default: $SWITCHBOARD_URL, else the config's toolserver.bind).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
}

#[derive(Debug, Args)]
pub struct ReloadArgs {
    /// The running switchboard (default: $SWITCHBOARD_URL, else the config's toolserver.bind).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// The answer as JSON instead of lines.
    #[arg(long)]
    pub json: bool,
}

/// `switchboard cluster ...`
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// One line per node (id, live or gone, its shards, last heartbeat), then the shard leases.
    Status(ReloadArgs),
}

/// `switchboard memory ...`
#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// Print the agent's notes, one a line: scope, key (marked untrusted when so), text.
    ///
    /// Without --session or --user, every note of every session and user (admin.memory.list,
    /// an operator callable); with one, that scope's (memory.read).
    List {
        #[command(flatten)]
        scope: ListScopeArgs,
        /// One JSON object per line instead of columns.
        #[arg(long)]
        json: bool,
    },
    /// Forget one note (exit 1 when there is none with that key).
    Forget {
        #[command(flatten)]
        scope: NoteScopeArgs,
        /// The note's key.
        #[arg(long)]
        key: String,
    },
}

/// Whose notes to list: a session's, a user's, or (neither) everyone's.
#[derive(Debug, Args)]
pub struct ListScopeArgs {
    /// Only a session's notes (#ops or an id).
    #[arg(long, value_name = "REF", conflicts_with = "user")]
    pub session: Option<String>,
    /// Only a Discord user's notes (their id).
    #[arg(long, value_name = "USER_ID")]
    pub user: Option<String>,
    /// The running switchboard (default: $SWITCHBOARD_URL, else the config's toolserver.bind).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
}

/// Whose notes: a session's or a user's.
#[derive(Debug, Args)]
pub struct NoteScopeArgs {
    /// A session's notes (#ops or an id).
    #[arg(
        long,
        value_name = "REF",
        conflicts_with = "user",
        required_unless_present = "user"
    )]
    pub session: Option<String>,
    /// A Discord user's notes (their id).
    #[arg(long, value_name = "USER_ID")]
    pub user: Option<String>,
    /// The running switchboard (default: $SWITCHBOARD_URL, else the config's toolserver.bind).
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
}

/// `switchboard store ...`
#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Copy everything one store keeps into another (merged by key: a second run writes
    /// nothing, a run stopped half-way — Ctrl-C — is finished by the next). Prints each kind's
    /// count on both sides; exits 1 when the target holds fewer of some kind than the source.
    Copy(CopyArgs),
}

/// `switchboard store copy --from URL --to URL`
#[derive(Debug, Args)]
pub struct CopyArgs {
    /// The store to read, as `store.url` spells it: sqlite://PATH, sqlite:///ABS, memory:,
    /// postgres://…
    #[arg(long, value_name = "URL")]
    pub from: String,
    /// The store to write into (created when it does not exist).
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// Newest messages each side keeps per channel (as `store.messages_per_channel`).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub messages_per_channel: usize,
}

/// `switchboard usage`.
#[derive(Debug, clap::Args)]
pub struct UsageArgs {
    /// How to group: user, session, guild, agent or day.
    #[arg(long, default_value = "day", value_parser = parse_by)]
    pub by: switchboard_usage::By,
    /// Only usage at or after this time: RFC 3339, or an age such as 15m, 2h, 7d (default 30d).
    #[arg(long)]
    pub since: Option<String>,
    /// Print usage.report's JSON instead of columns.
    #[arg(long)]
    pub json: bool,
}

/// `--by`'s values.
fn parse_by(text: &str) -> Result<switchboard_usage::By, String> {
    use switchboard_usage::By;
    match text {
        "user" => Ok(By::User),
        "session" => Ok(By::Session),
        "guild" => Ok(By::Guild),
        "agent" => Ok(By::Agent),
        "day" => Ok(By::Day),
        other => Err(format!(
            "'{other}' is not a grouping: use user, session, guild, agent or day"
        )),
    }
}
