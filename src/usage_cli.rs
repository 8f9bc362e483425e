//! `switchboard usage`: the model usage the store keeps, as `usage.report` answers it, read
//! from the store the config names (no running switchboard needed).

use std::path::Path;
use std::process::ExitCode;

use switchboard_usage::{format_usd, group_digits};

use crate::cli::UsageArgs;
use crate::operator::EXIT_USAGE;

/// Prints the report (columns, or JSON with `--json`); exit 2 on a bad config or `--since`.
pub fn usage(flag: Option<&Path>, args: &UsageArgs) -> ExitCode {
    let config = match crate::operator::load(flag) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let now = chrono::Utc::now();
    let since_ms = match args.since.as_deref() {
        None => now.timestamp_millis().saturating_sub(30 * 86_400_000),
        Some(text) => match since(text, now) {
            Some(ms) => ms,
            None => {
                eprintln!("error: --since: '{text}' is neither an RFC 3339 time nor an age such as 15m, 2h, 7d");
                return ExitCode::from(EXIT_USAGE);
            }
        },
    };
    let runtime = match crate::launch::command_runtime(tokio::runtime::Builder::new_current_thread())
    {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    let by = args.by;
    let url = config.store.url.clone();
    let retention = switchboard_store::Retention {
        messages_per_channel: config.store.messages_per_channel,
        audit_retention: config.audit.retention,
    };
    let answer = runtime.block_on(async move {
        let backend =
            tokio::task::spawn_blocking(move || switchboard::store::open_backend(&url, retention))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("the store: {e}"))?;
        let report = switchboard_callables::usage::report(
            backend.as_ref(),
            by,
            u64::try_from(since_ms).unwrap_or(0),
        )
        .await
        .map_err(|e| format!("reading the usage: {e}"));
        let _ = backend.close().await;
        report
    });
    let report = match answer {
        Ok(report) => report,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        }
        return ExitCode::SUCCESS;
    }
    println!(
        "{:<24} {:>14} {:>14} {:>14} {:>12}",
        by.as_str(),
        "prompt",
        "completion",
        "total",
        "usd"
    );
    for row in &report.rows {
        let key = row.key.as_deref().unwrap_or("-");
        println!(
            "{:<24} {:>14} {:>14} {:>14} {:>12}{}",
            key,
            group_digits(row.prompt_tokens),
            group_digits(row.completion_tokens),
            group_digits(row.total_tokens()),
            format_usd(row.micros),
            if row.estimated { "  (estimated)" } else { "" }
        );
    }
    ExitCode::SUCCESS
}

/// An RFC 3339 time or an age (`15m`, `2h`, `7d`), in ms since the epoch.
fn since(text: &str, now: chrono::DateTime<chrono::Utc>) -> Option<i64> {
    let text = text.trim();
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Some(time.timestamp_millis());
    }
    let age = humantime::parse_duration(text).ok()?;
    let age = chrono::Duration::from_std(age).ok()?;
    Some((now - age).timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_a_time_or_an_age_and_refuses_garbage() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-26T12:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        assert_eq!(since("2h", now), Some(now.timestamp_millis() - 7_200_000));
        assert_eq!(
            since("2026-11-26T11:00:00Z", now),
            Some(now.timestamp_millis() - 3_600_000)
        );
        for bad in ["", "soon", "-1h", "99999999999999999d"] {
            assert_eq!(since(bad, now), None, "{bad:?}");
        }
    }
}
