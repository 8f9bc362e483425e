//! A burst becomes one turn (issue 25 §5): the messages that queued in a session while its run
//! was busy are answered together by the next run, each quoted with its author, instead of one
//! run each. `agent.batch = "turn"` (the default) gathers at most `agent.batch_max` of them; the
//! rest start their own runs, in order. Only plain messages join a batch: a resumed workflow,
//! a schedule's firing (someone waits for its own report) or a trigger that names its agent
//! runs alone.
//!
//! With runs in the store (`queue.rs`), each message is a run row of its own; the run that
//! answers a burst is its head's row, and the rows of the messages it answers together join
//! it (`RunStore::join_runs`): they run on its node under its lease and end — or are
//! interrupted — with it.
//!
//! Every message of a batch was claimed in the store when it was queued, so none is answered
//! twice or lost to a restart between two of them.

use entity::Snowflake;
use switchboard_config::{AgentConfig, BatchMode};
use switchboard_context::{batch, Entry};
use switchboard_engine::runs::Trigger;
use switchboard_engine::surface::AllowedChannel;
use switchboard_engine::trust::{self, Trust};
use switchboard_engine::Core;

use crate::prompt::Transcript;

/// Whether a queued trigger may be answered together with others: a plain message (a
/// schedule's firing has none).
pub(crate) fn joins(trigger: &Trigger) -> bool {
    trigger.workflow_id.is_none() && trigger.agent.is_none() && trigger.message_id.is_some()
}

/// Which of the runs queued right behind a session's head (in queue order) the head's run
/// answers together: when the head waited behind an earlier run of the session
/// (`after_a_run`: they queued while it was busy), batching is on and the head may join a
/// batch (`reported`: someone waits for the head's own report — never), the plain messages
/// right behind it, up to `agent.batch_max` in all. The first message to an idle session runs
/// alone, as it would have started at once.
pub(crate) fn gather<'a, T>(
    head: &Trigger,
    reported: bool,
    behind: &'a [(T, Trigger)],
    config: &AgentConfig,
    after_a_run: bool,
) -> Vec<&'a (T, Trigger)> {
    if !(after_a_run && config.batch == BatchMode::Turn && !reported && joins(head)) {
        return Vec::new();
    }
    behind
        .iter()
        .take_while(|(_, trigger)| joins(trigger))
        .take(config.batch_max.saturating_sub(1))
        .collect()
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

    fn trigger(id: u64, workflow: bool) -> Trigger {
        Trigger {
            channel_id: Snowflake(7),
            message_id: Some(Snowflake(100 + id)),
            author_id: Snowflake(id),
            author_name: format!("user{id}"),
            author_roles: Vec::new(),
            text: format!("question {id}"),
            workflow_id: workflow.then(|| "wf".to_owned()),
            agent: None,
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

    fn behind(ids: impl IntoIterator<Item = (u64, bool)>) -> Vec<(u64, Trigger)> {
        ids.into_iter()
            .map(|(id, workflow)| (id, trigger(id, workflow)))
            .collect()
    }

    fn ids(taken: &[&(u64, Trigger)]) -> Vec<u64> {
        taken.iter().map(|(id, _)| *id).collect()
    }

    #[test]
    fn a_burst_is_taken_as_one_run_up_to_batch_max_and_the_rest_wait_in_order() {
        let waiting = behind((2..=13).map(|i| (i, false)));
        let config = config(BatchMode::Turn, 10);
        let taken = gather(&trigger(1, false), false, &waiting, &config, true);
        assert_eq!(ids(&taken), (2..=10).collect::<Vec<_>>());
    }

    #[test]
    fn the_first_message_to_an_idle_session_runs_alone() {
        let waiting = behind([(2, false), (3, false)]);
        let config = config(BatchMode::Turn, 10);
        assert!(gather(&trigger(1, false), false, &waiting, &config, false).is_empty());
    }

    #[test]
    fn with_batch_off_every_message_is_its_own_run() {
        let waiting = behind([(2, false), (3, false)]);
        let config = config(BatchMode::Off, 10);
        assert!(gather(&trigger(1, false), false, &waiting, &config, true).is_empty());
    }

    #[test]
    fn workflows_and_reported_firings_run_alone_and_stop_a_batch() {
        let config = config(BatchMode::Turn, 10);
        let waiting = behind([(2, false), (3, true), (4, false)]);
        assert_eq!(
            ids(&gather(&trigger(1, false), false, &waiting, &config, true)),
            [2]
        );
        assert!(gather(&trigger(1, true), false, &waiting, &config, true).is_empty());
        assert!(gather(&trigger(1, false), true, &waiting, &config, true).is_empty());
    }
}
