//! The `switchboard` binary: parses the command line, loads `.env`, and hands off to a command
//! (the service, the offline playground, or an operator check).

mod cli;
#[cfg(feature = "playground")]
mod compose;
mod launch;
mod operator;
mod remote;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    // A missing .env is normal; a malformed one is worth saying.
    if let Err(error) = dotenvy::dotenv() {
        if !error.not_found() {
            eprintln!("warning: ignoring .env: {error}");
        }
    }
    init_logging();
    match cli.command.unwrap_or(cli::Command::Run) {
        cli::Command::Run => launch::run(cli.config.as_deref()),
        #[cfg(feature = "playground")]
        cli::Command::Playground(args) => launch::playground(cli.config.as_deref(), &args),
        cli::Command::CheckConfig => operator::check_config(cli.config.as_deref()),
        cli::Command::Mcp => launch::mcp(),
        cli::Command::Rewrite(args) => operator::rewrite(cli.config.as_deref(), &args),
        cli::Command::Audit(args) => remote::audit(cli.config.as_deref(), &args),
        cli::Command::Reload(args) => remote::reload(cli.config.as_deref(), &args),
        cli::Command::ResolveSession { reference } => {
            operator::resolve_session(cli.config.as_deref(), &reference)
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=warn"));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}
