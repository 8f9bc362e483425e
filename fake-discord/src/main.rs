//! `fake-discord [--port PORT] [--world FILE] [--max-upload-bytes N] [--shards N]
//! [--max-concurrency M]`: runs the fake Discord on
//! 127.0.0.1, prints its base URL as the first line of stdout, then logs to stderr until
//! Ctrl-C / SIGTERM. It serves REST under `/api/v10`, the gateway at `/`, attachments at
//! `/attachments/{channel_id}/{attachment_id}/{filename}` and the control API under `/_fake/`.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use fake_discord::{
    FakeDiscord, FakeOptions, World, DEFAULT_MAX_UPLOAD_BYTES, MAX_CONCURRENCY_LIMIT, MAX_SHARDS,
};

/// A small fake Discord (REST API v10 + gateway) for tests and the offline playground.
#[derive(Debug, Parser)]
#[command(name = "fake-discord", version)]
struct Cli {
    /// Port to listen on (127.0.0.1 only); 0 picks a free port.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// World file (JSON); without it the built-in demo world is served.
    #[arg(long, value_name = "FILE")]
    world: Option<PathBuf>,
    /// Heartbeat interval sent to gateway clients, in milliseconds.
    #[arg(long, default_value_t = 41_250)]
    heartbeat_ms: u64,
    /// Largest file accepted per attachment, in bytes (413, code 40005, beyond).
    #[arg(long, default_value_t = DEFAULT_MAX_UPLOAD_BYTES)]
    max_upload_bytes: usize,
    /// The shard count `GET /api/v10/gateway/bot` recommends.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_SHARDS)))]
    shards: u32,
    /// `session_start_limit.max_concurrency`: shard i identifies in bucket i % M, one
    /// IDENTIFY per bucket per 5 s (op 9 for the later one).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CONCURRENCY_LIMIT)))]
    max_concurrency: u32,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    let world = match &cli.world {
        Some(path) => {
            World::load(path).with_context(|| format!("loading world {}", path.display()))?
        }
        None => World::demo(),
    };
    let options = FakeOptions {
        heartbeat_interval_ms: cli.heartbeat_ms,
        max_upload_bytes: cli.max_upload_bytes,
        shards: cli.shards,
        max_concurrency: cli.max_concurrency,
        ..FakeOptions::default()
    };
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, cli.port));
    let fake = FakeDiscord::start_with(world, addr, options)
        .await
        .context("starting fake-discord")?;
    {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{}", fake.base_url()).context("writing the base URL to stdout")?;
        stdout.flush().context("flushing stdout")?;
    }
    wait_for_signal().await;
    tracing::info!("shutting down");
    fake.shutdown().await;
    Ok(())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
