//! Workflows on Discord: kept in the store, fed every new message by the gateway, resumed
//! through the agent ([`Runs`]). The matching and deadlines are `toolserver::workflow`'s.

use std::sync::Arc;

use entity::Mapper;
use toolserver::live::SharedAliases;
use toolserver::trust::Trust;
use toolserver::workflow::{resume_prompt, Workflow, WorkflowEngine, WorkflowHooks};
use toolserver::Core;

use toolserver::runs::{Runs, Trigger};

use crate::store::{Store, WorkflowRow};

/// Persists workflows in the store and starts their resumed runs.
struct DiscordWorkflows {
    store: Store,
    runs: Arc<dyn Runs>,
    aliases: SharedAliases,
    bot_id: Arc<std::sync::atomic::AtomicU64>,
    observers: toolserver::events::Observers,
    /// Where `agent.trusted_users` is read when a workflow resumes (weak: the core holds the
    /// engine that holds these hooks).
    core: std::sync::Weak<Core>,
}

impl WorkflowHooks for DiscordWorkflows {
    fn persist(&self, workflow: &Workflow) -> Result<(), String> {
        let body = serde_json::to_string(workflow).map_err(|e| e.to_string())?;
        self.store.save_workflow(WorkflowRow {
            id: workflow.workflow_id.clone(),
            state: workflow.state.as_str().to_owned(),
            finished_ms: workflow.finished_ms,
            body,
        });
        // Every change is persisted, so every change is published: `workflow.waiting` when
        // created or partly answered, then `workflow.answered|timed_out|cancelled`.
        let answered = workflow.tasks.iter().filter(|t| t.answer.is_some()).count();
        self.observers.events.publish(
            format!("workflow.{}", workflow.state.as_str()),
            Some(workflow.origin_session_id),
            serde_json::json!({
                "workflowId": workflow.workflow_id,
                "state": workflow.state.as_str(),
                "tasks": workflow.tasks.len(),
                "answered": answered,
                "createdBy": workflow.created_by,
                "deadlineMs": workflow.deadline_ms,
            }),
        );
        Ok(())
    }

    fn resume(&self, workflow: &Workflow) {
        let aliases = self.aliases.load();
        let mapper = Mapper::new(&aliases, &self.store);
        // Answers are marked untrusted as the agent's prompts mark messages: by the
        // configured trusted users' ids, as of now.
        let settings = self.core.upgrade().map(|core| core.settings());
        let trusted = settings
            .as_ref()
            .and_then(|settings| settings.config().agent.as_ref())
            .map_or(&[][..], |agent| agent.trusted_users.as_slice());
        let bot = match self.bot_id.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            id => Some(entity::Snowflake(id)),
        };
        let text = resume_prompt(
            workflow,
            |id| format!("{} ({id})", mapper.session_reference(id)),
            &Trust::new(trusted, bot),
        );
        // The resumed run answers whoever asked for the run that created the workflow.
        let origin = workflow
            .origin_message_id
            .and_then(|id| self.store.message(workflow.origin_session_id, id));
        let (author_id, author_name) = match origin {
            Some(message) => (message.author_id, self.store.author_name(message.author_id)),
            None => (
                match self.bot_id.load(std::sync::atomic::Ordering::Relaxed) {
                    0 => workflow.origin_session_id,
                    id => entity::Snowflake(id),
                },
                "switchboard".to_owned(),
            ),
        };
        self.runs.enqueue(Trigger {
            channel_id: workflow.origin_session_id,
            message_id: workflow.origin_message_id,
            author_id,
            author_name,
            text,
            workflow_id: Some(workflow.workflow_id.clone()),
        });
    }
}

/// The workflows the store kept; a row that no longer parses is logged and left out.
fn restore(store: &Store) -> Vec<Workflow> {
    store
        .workflows_at_open()
        .iter()
        .filter_map(|row| match serde_json::from_str::<Workflow>(&row.body) {
            Ok(workflow) => Some(workflow),
            Err(error) => {
                tracing::warn!(workflow = %row.id, "skipping a stored workflow that does not parse: {error}");
                None
            }
        })
        .collect()
}

/// Restores the kept workflows (resuming those answered while switchboard was away), turns
/// the `workflow.*` callables on, and fires deadlines from a background task (the handle:
/// abort it at shutdown).
pub fn start(
    core: &Arc<Core>,
    store: &Store,
    runs: Arc<dyn Runs>,
    aliases: SharedAliases,
    bot_id: Arc<std::sync::atomic::AtomicU64>,
) -> (Arc<WorkflowEngine>, tokio::task::JoinHandle<()>) {
    let restored = restore(store);
    let waiting = restored.iter().filter(|w| w.is_waiting()).count();
    let hooks = Arc::new(DiscordWorkflows {
        store: store.clone(),
        runs,
        aliases,
        bot_id,
        observers: core.observers(),
        core: Arc::downgrade(core),
    });
    let engine = WorkflowEngine::new(hooks, restored);
    if waiting > 0 {
        tracing::info!(waiting, "restored waiting workflows");
    }
    core.set_workflows(Arc::clone(&engine));
    let deadlines = tokio::spawn(Arc::clone(&engine).run_deadlines());
    (engine, deadlines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreOptions;
    use entity::Snowflake;
    use toolserver::workflow::WorkflowState;

    #[test]
    fn a_stored_workflow_that_does_not_parse_is_skipped_not_fatal() {
        let dir =
            std::env::temp_dir().join(format!("switchboard-wf-restore-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("store.db").to_string_lossy().into_owned();
        let _ = std::fs::remove_file(&path);
        let good = Workflow {
            workflow_id: "wf_good".into(),
            state: WorkflowState::Waiting,
            origin_session_id: Snowflake(1_000_000_000_000_000_401),
            origin_message_id: None,
            created_by: "operator".into(),
            created_ms: 1,
            deadline_ms: 2,
            finished_ms: None,
            resume_prompt: None,
            tasks: Vec::new(),
        };
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        store.save_workflow(WorkflowRow {
            id: "wf_good".into(),
            state: "waiting".into(),
            finished_ms: None,
            body: serde_json::to_string(&good).unwrap(),
        });
        for (id, body) in [
            ("wf_garbage", "not json"),
            ("wf_wrong", "{\"workflowId\":7}"),
        ] {
            store.save_workflow(WorkflowRow {
                id: id.into(),
                state: "waiting".into(),
                finished_ms: None,
                body: body.into(),
            });
        }
        store.close().unwrap();
        let store = Store::open(&path, StoreOptions::default()).unwrap();
        assert_eq!(restore(&store), vec![good]);
        store.close().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
