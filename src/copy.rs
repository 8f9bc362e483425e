//! `switchboard store copy --from URL --to URL`: every kind one store keeps, into another, with
//! a progress bar; Ctrl-C stops it between pages, keeping what was copied (the next run
//! finishes it).

use std::ops::ControlFlow;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use switchboard_config::StoreUrl;
use switchboard_store::copy::{copy_all, CopyError, Progress};
use switchboard_store::{Backend, Retention, StoreErrorKind};

use crate::cli::CopyArgs;
use crate::operator::EXIT_USAGE;

/// Exits 0 when the target holds all of it, 1 when not (or stopped), 2 for a bad URL or a
/// store that cannot be opened.
pub fn store_copy(args: &CopyArgs) -> ExitCode {
    let parse = |flag: &str, url: &str| {
        StoreUrl::parse(url).map_err(|error| {
            eprintln!("error: --{flag}: {error}");
            ExitCode::from(EXIT_USAGE)
        })
    };
    let (from, to) = match (parse("from", &args.from), parse("to", &args.to)) {
        (Ok(from), Ok(to)) => (from, to),
        (Err(code), _) | (_, Err(code)) => return code,
    };
    if from == to && from != StoreUrl::Memory {
        eprintln!(
            "error: --from and --to name the same store ({}); name another target",
            from.spelling()
        );
        return ExitCode::from(EXIT_USAGE);
    }
    // Opening a file that is not there would make an empty store and "copy" nothing: a
    // mistyped source path is an error, not an empty success.
    if let StoreUrl::Sqlite(switchboard_config::SqliteLocation::File(path)) = &from {
        if !path.exists() {
            eprintln!(
                "error: --from: there is no store at {} (nothing was created); check the path",
                path.display()
            );
            return ExitCode::from(EXIT_USAGE);
        }
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.worker_threads(1);
    let runtime = match crate::launch::command_runtime(builder) {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    runtime.block_on(run(from, to, args.messages_per_channel))
}

async fn run(from: StoreUrl, to: StoreUrl, keep: usize) -> ExitCode {
    let opened = tokio::task::spawn_blocking(move || {
        let open = |side: &str, url: &StoreUrl| {
            // Audit rows older than `audit.retention_days`' default are pruned by either side
            // while it is open: a copy keeps what its target's retention keeps.
            let retention = Retention {
                messages_per_channel: keep,
                ..Retention::default()
            };
            switchboard::store::open_backend(url, retention)
                .map_err(|error| format!("{side} {}: {error}", url.spelling()))
        };
        Ok::<_, String>((open("source", &from)?, open("target", &to)?))
    })
    .await;
    let (source, target) = match opened {
        Ok(Ok(both)) => both,
        Ok(Err(error)) => {
            eprintln!("error: {error}");
            return ExitCode::from(EXIT_USAGE);
        }
        Err(join) => {
            eprintln!("error: opening the stores failed: {join}");
            return ExitCode::FAILURE;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                stop.store(true, Ordering::Relaxed);
            }
        });
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{msg:>16} [{bar:30}] {pos}/{len}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let copying = {
        let (source, target, bar, stop) = (
            Arc::clone(&source),
            Arc::clone(&target),
            bar.clone(),
            Arc::clone(&stop),
        );
        tokio::task::spawn_blocking(move || {
            let mut progress = |at: &Progress| {
                bar.set_message(at.kind.name());
                bar.set_length(at.total);
                bar.set_position(at.done.min(at.total));
                if stop.load(Ordering::Relaxed) {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            };
            copy_all(source.as_ref(), target.as_ref(), &mut progress)
        })
    };
    let copied = copying.await;
    bar.finish_and_clear();
    let code = match copied {
        Ok(Ok(report)) => {
            print!("{report}");
            if report.complete() {
                println!("complete: {} written", report.written());
                ExitCode::SUCCESS
            } else {
                println!(
                    "incomplete: the target holds fewer of some kind than the source (its retention, --messages-per-channel, may keep fewer)"
                );
                ExitCode::FAILURE
            }
        }
        Ok(Err(CopyError::Interrupted)) => {
            println!(
                "stopped: what was copied so far is kept; run the same command again to finish it"
            );
            ExitCode::FAILURE
        }
        Ok(Err(error)) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
        Err(join) => {
            eprintln!("error: the copy failed: {join}");
            ExitCode::FAILURE
        }
    };
    for (side, backend) in [("source", source), ("target", target)] {
        if let Err(error) = close(backend).await {
            eprintln!("error: closing the {side}: {error}");
            return ExitCode::FAILURE;
        }
    }
    code
}

/// Flushes and closes a backend off the runtime's threads.
async fn close(backend: Arc<dyn Backend>) -> Result<(), String> {
    tokio::task::spawn_blocking(move || futures_executor::block_on(backend.close()))
        .await
        .map_err(|join| join.to_string())?
        .or_else(|error| match error.kind() {
            StoreErrorKind::Closed => Ok(()),
            _ => Err(error.to_string()),
        })
}
