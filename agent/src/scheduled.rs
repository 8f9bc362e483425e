//! Runs whose caller waits for an account of what they did: a schedule's firing (issue 26
//! §3). The run is queued like any trigger (per-session order, the concurrency bound); while
//! it executes, a task-local ledger collects the ids of every message it posts — its reply,
//! its draft turned answer, its own `surface.messages.send` calls — its final text and its
//! error, and the caller gets them as a [`RunReport`] when the run ends. The schedule crate
//! judges delivery from that report, never from the run's exit.

use std::sync::{Arc, Mutex};

use entity::Snowflake;
use switchboard_schedule::RunReport;

/// What one run did, as it went.
#[derive(Debug, Default)]
struct Ledger {
    posted: Vec<Snowflake>,
    final_text: Option<String>,
    error: Option<String>,
}

/// The most message ids one report keeps (a run posts at most a few dozen).
const MAX_POSTED: usize = 1_000;

tokio::task_local! {
    static LEDGER: Arc<Mutex<Ledger>>;
}

fn with(f: impl FnOnce(&mut Ledger)) {
    let _ = LEDGER.try_with(|ledger| {
        let mut ledger = ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut ledger);
    });
}

/// The run posted `id` (outside a reported run: nothing happens).
pub(crate) fn posted(id: Snowflake) {
    with(|ledger| {
        if ledger.posted.len() < MAX_POSTED && !ledger.posted.contains(&id) {
            ledger.posted.push(id);
        }
    });
}

/// A callable's answer: when it is a send's (`{channelId, messageIds}`), the ids it posted.
pub(crate) fn answered(output: &switchboard_engine::ToolOutput) {
    if LEDGER.try_with(|_| ()).is_err() {
        return;
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Sent {
        #[allow(dead_code)]
        channel_id: String,
        message_ids: Vec<String>,
    }
    if let Ok(sent) = serde_json::from_str::<Sent>(output.get()) {
        for id in sent.message_ids {
            if let Ok(id) = id.parse() {
                posted(id);
            }
        }
    }
}

/// The agent's final text.
pub(crate) fn final_text(text: &str) {
    with(|ledger| ledger.final_text = Some(text.to_owned()));
}

/// Why the run failed.
pub(crate) fn failed(reason: &str) {
    with(|ledger| {
        ledger.error.get_or_insert_with(|| reason.to_owned());
    });
}

/// Runs `run` with a ledger and answers what it recorded; `run_id` is the run's id. A run
/// that ended with neither a final text nor an error did not get to start its agent.
pub(crate) async fn reported(
    run_id: &str,
    run: impl std::future::Future<Output = ()>,
) -> RunReport {
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    LEDGER.scope(Arc::clone(&ledger), run).await;
    let ledger = std::mem::take(
        &mut *ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let error = match (&ledger.final_text, ledger.error) {
        (_, Some(error)) => Some(error),
        (None, None) => Some(
            "the run did not start (the session is not allowed, or the agent could not be started; see the log)"
                .to_owned(),
        ),
        (Some(_), None) => None,
    };
    RunReport {
        run_id: Some(run_id.to_owned()),
        posted: ledger.posted,
        final_text: ledger.final_text.unwrap_or_default(),
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_report_holds_what_the_run_posted_and_its_text() {
        let report = reported("run-1", async {
            posted(Snowflake(5));
            posted(Snowflake(5));
            let output = serde_json::value::to_raw_value(
                &serde_json::json!({"channelId": "1000000000000000401", "messageIds": ["1000000000000000907", "1000000000000000908"]}),
            )
            .unwrap();
            answered(&output);
            final_text("done");
        })
        .await;
        assert_eq!(
            report.posted,
            [
                Snowflake(5),
                Snowflake(1_000_000_000_000_000_907),
                Snowflake(1_000_000_000_000_000_908)
            ]
        );
        assert_eq!(report.final_text, "done");
        assert_eq!(report.error, None);
        assert_eq!(report.run_id.as_deref(), Some("run-1"));
    }

    #[tokio::test]
    async fn a_run_that_never_started_reports_an_error_and_outside_a_report_nothing_is_kept() {
        posted(Snowflake(1));
        let report = reported("run-2", async {}).await;
        assert!(report.posted.is_empty());
        assert!(report.error.unwrap().contains("did not start"));
    }
}
