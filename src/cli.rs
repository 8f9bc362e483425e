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
    Playground {
        /// Tool server port on 127.0.0.1 (0 picks a free one).
        #[arg(long, default_value_t = 7311)]
        port: u16,
    },
    /// Validate the config file: a summary and exit 0, or every problem and exit 2.
    CheckConfig,
    /// Serve MCP on standard input and output, forwarding to the running switchboard at
    /// $SWITCHBOARD_URL with $SWITCHBOARD_TOKEN (for MCP hosts that launch a command).
    Mcp,
    /// Rewrite text the way switchboard does (TEXT, or standard input).
    Rewrite(RewriteArgs),
    /// Print the channel id a session reference (id, <#id>, token, #token) resolves to.
    ResolveSession {
        /// The reference to resolve, such as `#ops`.
        #[arg(value_name = "REF")]
        reference: String,
    },
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
