//! A burst becomes one turn (issue 25 §5): the messages that queued in a session while its run
//! was busy are answered together by the next run, each quoted with its author, instead of one
//! run each. `agent.batch = "turn"` (the default) gathers at most `agent.batch_max` of them; the
//! rest start their own runs, in order. Only plain messages join a batch: a resumed workflow,
//! a schedule's firing (someone waits for its own report) or a trigger that names its agent
//! runs alone.
//!
//! Every message of a batch is claimed in the store before the run acts (the bridge's
//! `take_all`), so none is answered twice or lost to a restart between two of them.

use std::collections::VecDeque;

use entity::Snowflake;
use switchboard_config::{AgentConfig, BatchMode};
use switchboard_context::{batch, Entry};
use switchboard_engine::runs::Trigger;
use switchboard_engine::surface::AllowedChannel;
use switchboard_engine::trust::{self, Trust};
use switchboard_engine::Core;

use crate::prompt::Transcript;
use crate::Queued;

/// Whether a queued trigger may be answered together with others.
fn joins(queued: &Queued) -> bool {
    let trigger = &queued.trigger;
    queued.report.is_none()
        && trigger.workflow_id.is_none()
        && trigger.agent.is_none()
        && trigger.message_id.is_some()
}

/// Takes the next run's share of `waiting`: its head and — when a run of the session just
/// ended (`after_a_run`: they waited while it was busy), batching is on and the head may join
/// a batch — the plain messages right behind it, up to `agent.batch_max` in all. The first
/// message to an idle session runs alone, as it would have started at once. `None` when
/// nothing waits. The returned queued entry carries the head's report, if any.
pub(crate) fn next(
    waiting: &mut VecDeque<Queued>,
    config: &AgentConfig,
    after_a_run: bool,
) -> Option<NextRun> {
    let head = waiting.pop_front()?;
    let gathers = after_a_run && config.batch == BatchMode::Turn && joins(&head);
    let Queued { trigger, report } = head;
    let mut triggers = vec![trigger];
    if gathers {
        while triggers.len() < config.batch_max && waiting.front().is_some_and(joins) {
            if let Some(queued) = waiting.pop_front() {
                triggers.push(queued.trigger);
            }
        }
    }
    Some(NextRun { triggers, report })
}

/// What the session's worker runs next.
pub(crate) struct NextRun {
    /// The messages the run answers, in arrival order (one unless a burst was gathered).
    pub triggers: Vec<Trigger>,
    /// Who waits for the run's report (a schedule's firing; never part of a batch).
    pub report: Option<tokio::sync::oneshot::Sender<switchboard_schedule::RunReport>>,
}

/// The prompt's head for a command agent answering several messages: each quoted with its
/// author and message id, every line of an untrusted author marked.
pub(crate) fn quoted_for_command(triggers: &[Trigger], trust: &Trust) -> String {
    let mut block = format!(
        "{} messages arrived in session {} while you were busy; answer them together, in one reply:\n",
        triggers.len(),
        triggers.first().map_or(Snowflake(0), |t| t.channel_id)
    );
    for trigger in triggers {
        block.push('\n');
        trust::quote(
            &mut block,
            &format!(
                "{author} (user id {author_id}, message {message}):\n{text}",
                author = trust::one_line(&trigger.author_name),
                author_id = trigger.author_id,
                message = trigger.message_id.unwrap_or(Snowflake(0)),
                text = trigger.text,
            ),
            trust.trusts(trigger.author_id),
        );
    }
    block
}

/// Puts the batch in the chat transcript: the messages it answers leave the transcript (they
/// are in the batched turn), and the batched turn, quoting each with its author, is last.
/// A single trigger leaves the transcript as it is.
pub(crate) fn answer_together(
    transcript: &mut Transcript,
    core: &Core,
    channel: AllowedChannel,
    triggers: &[Trigger],
    trust: &Trust,
) {
    if triggers.len() < 2 {
        return;
    }
    let pending: Vec<batch::Pending> = triggers
        .iter()
        .map(|trigger| batch::Pending {
            message_id: trigger.message_id.unwrap_or(Snowflake(0)),
            author_id: trigger.author_id,
            author_name: trigger.author_name.clone(),
            trusted: trust.trusts(trigger.author_id),
            timestamp: trigger
                .message_id
                .and_then(|id| core.surface().message(channel, id))
                .map(|m| m.timestamp.clone())
                .unwrap_or_default(),
            text: trigger.text.clone(),
        })
        .collect();
    let together = batch::batch(pending, triggers.len());
    transcript.entries.retain(|entry| match entry {
        Entry::Message(message) => {
            !message.is_trigger() && !message.id().is_some_and(|id| together.answers(id))
        }
        Entry::Round(_) => true,
    });
    if let Some(turn) = together.turn {
        transcript.entries.push(Entry::Message(turn));
    }
    if together.any_untrusted && transcript.untrusted_note.is_none() {
        transcript.untrusted_note = Some(trust::untrusted_note(trust));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(id: u64, workflow: bool, report: bool) -> Queued {
        Queued {
            trigger: Trigger {
                channel_id: Snowflake(7),
                message_id: Some(Snowflake(100 + id)),
                author_id: Snowflake(id),
                author_name: format!("user{id}"),
                author_roles: Vec::new(),
                text: format!("question {id}"),
                workflow_id: workflow.then(|| "wf".to_owned()),
                agent: None,
            },
            report: report.then(|| tokio::sync::oneshot::channel().0),
        }
    }

    fn config(batch: BatchMode, batch_max: usize) -> AgentConfig {
        let mut config = switchboard_config::Config::parse("[agent]\nrunner = \"demo\"\n", "t")
            .expect("config")
            .agent
            .expect("agent");
        config.batch = batch;
        config.batch_max = batch_max;
        config
    }

    fn ids(run: &NextRun) -> Vec<u64> {
        run.triggers.iter().map(|t| t.author_id.0).collect()
    }

    #[test]
    fn a_burst_is_taken_as_one_run_up_to_batch_max_and_the_rest_wait_in_order() {
        let mut waiting: VecDeque<Queued> = (1..=13).map(|i| queued(i, false, false)).collect();
        let config = config(BatchMode::Turn, 10);
        let first = next(&mut waiting, &config, true).expect("a run");
        assert_eq!(ids(&first), (1..=10).collect::<Vec<_>>());
        let second = next(&mut waiting, &config, true).expect("a run");
        assert_eq!(ids(&second), vec![11, 12, 13]);
        assert!(next(&mut waiting, &config, true).is_none());
    }

    #[test]
    fn the_first_message_to_an_idle_session_runs_alone() {
        let mut waiting: VecDeque<Queued> = (1..=3).map(|i| queued(i, false, false)).collect();
        let config = config(BatchMode::Turn, 10);
        assert_eq!(
            ids(&next(&mut waiting, &config, false).expect("a run")),
            vec![1]
        );
        assert_eq!(
            ids(&next(&mut waiting, &config, true).expect("a run")),
            vec![2, 3]
        );
    }

    #[test]
    fn with_batch_off_every_message_is_its_own_run() {
        let mut waiting: VecDeque<Queued> = (1..=3).map(|i| queued(i, false, false)).collect();
        let config = config(BatchMode::Off, 10);
        for i in 1..=3 {
            assert_eq!(
                ids(&next(&mut waiting, &config, true).expect("a run")),
                vec![i]
            );
        }
    }

    #[test]
    fn workflows_and_reported_firings_run_alone_and_stop_a_batch() {
        let mut waiting: VecDeque<Queued> = VecDeque::from(vec![
            queued(1, false, false),
            queued(2, false, false),
            queued(3, true, false),
            queued(4, false, true),
            queued(5, false, false),
            queued(6, false, false),
        ]);
        let config = config(BatchMode::Turn, 10);
        let runs: Vec<Vec<u64>> = std::iter::from_fn(|| next(&mut waiting, &config, true))
            .map(|run| ids(&run))
            .collect();
        assert_eq!(runs, vec![vec![1, 2], vec![3], vec![4], vec![5, 6]]);
    }
}
