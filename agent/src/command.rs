//! The command agent (`runner = "command"`): run by [`process_group`] — its own process group,
//! an empty environment plus what the bridge passes, bounded output, the whole group killed
//! when the run ends — with its `progress: <text>` stderr lines fed to the run's draft.

use std::sync::Arc;

pub use process_group::{
    run_command, run_command_with, CommandSpec, LineSink, Overflow, RunOutcome, RunnerError,
    MAX_OUTPUT,
};

use crate::stream::{progress_line, DraftState};

/// A sink that publishes each `progress: <text>` line of a command's stderr to its draft.
pub fn progress_sink(progress: Arc<tokio::sync::watch::Sender<DraftState>>) -> LineSink {
    LineSink(Arc::new(move |line: &str| {
        if let Some(text) = progress_line(line) {
            let text = text.to_owned();
            progress.send_modify(|state| state.progress = Some(text));
        }
    }))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_commands_progress_lines_reach_the_run_while_it_runs() {
        let (sender, mut receiver) = tokio::sync::watch::channel(DraftState::default());
        let spec = CommandSpec {
            stderr_lines: Some(progress_sink(Arc::new(sender))),
            ..CommandSpec::new(
                "/bin/sh",
                vec![
                    "-c".into(),
                    "echo noise >&2; echo 'progress: step one' >&2; read line; echo done".into(),
                ],
                Duration::from_secs(10),
            )
        };
        let run =
            tokio::spawn(async move { run_command(&spec, "go\n", std::future::pending()).await });
        tokio::time::timeout(Duration::from_secs(10), receiver.changed())
            .await
            .expect("a progress line in time")
            .expect("sender alive");
        assert_eq!(receiver.borrow().progress.as_deref(), Some("step one"));
        let outcome = run.await.expect("joins");
        assert!(matches!(
            outcome,
            Ok(RunOutcome::Exited { code: Some(0), .. })
        ));
    }
}
