//! The `switchboard` binary: parses the command line, loads `.env`, and hands off to a command
//! (the service, the offline playground, or an operator check).

#[cfg(feature = "playground")]
mod banner;
mod cli;
#[cfg(feature = "playground")]
mod compose;
mod copy;
mod launch;
mod operator;
mod remote;
mod usage_cli;

use std::process::ExitCode;

use clap::Parser;

/// mimalloc rather than glibc's malloc: the gateway thread frees what serde and serenity
/// allocate by the thousand per second, and glibc spent about half that thread's time keeping
/// its free lists (`unlink_chunk`, `malloc_consolidate`); see BENCHMARKS.md, gateway ingest.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Inside the sandbox, before anything else (no .env, no logging, no runtime).
    let mut args = std::env::args_os();
    if args
        .nth(1)
        .is_some_and(|first| first == switchboard::SANDBOX_EXEC)
    {
        std::process::exit(switchboard_engine::workspaces::sandbox_exec_main(args));
    }
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
        cli::Command::Memory(command) => remote::memory(cli.config.as_deref(), &command),
        cli::Command::Reload(args) => remote::reload(cli.config.as_deref(), &args),
        cli::Command::Cluster(cli::ClusterCommand::Status(args)) => {
            remote::cluster_status(cli.config.as_deref(), &args)
        }
        cli::Command::Store(cli::StoreCommand::Copy(args)) => copy::store_copy(&args),
        cli::Command::Usage(args) => usage_cli::usage(cli.config.as_deref(), &args),
        cli::Command::ResolveSession { reference } => {
            operator::resolve_session(cli.config.as_deref(), &reference)
        }
    }
}

fn init_logging() {
    use std::io::IsTerminal;
    use tracing_subscriber::filter::{filter_fn, FilterExt};
    use tracing_subscriber::prelude::*;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rmcp=warn"));
    // serenity opens an INFO span per function per gateway event, and one of them records the
    // whole event with `Debug` (a message; a guild with all its members) on the gateway's
    // thread. Its spans are kept only when RUST_LOG names serenity; its log lines stay.
    let serenity_spans =
        std::env::var("RUST_LOG").is_ok_and(|rust_log| rust_log.contains("serenity"));
    let not_serenity_spans = filter_fn(move |meta| {
        serenity_spans || !(meta.is_span() && meta.target().starts_with("serenity"))
    });
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(std::io::stderr().is_terminal())
                .with_writer(std::io::stderr)
                .with_filter(filter.and(not_serenity_spans)),
        )
        // Not a log output: how `/health` learns that serenity gave a gateway session up
        // (an op 9) before anything else says so. It reads two of serenity's lines whatever
        // RUST_LOG keeps.
        .with(bot::session_lost::layer())
        .init();
}
