//! Workflows as the service runs them: restored from the store at start, their deadlines fired,
//! and an answered workflow resumed as an agent run ([`Runs`]). The matching and keeping them
//! are [`crate::workflow`]'s; the platform only stores messages and asks
//! [`crate::workflow::dispatch`] who has a new one. Above [`Core`], which holds the engine.

use std::sync::Arc;

use crate::live::SharedAliases;
use crate::runs::{Runs, Trigger};
use crate::server::Core;
use crate::trust::Trust;
use crate::workflow::{resume_prompt, Workflow, WorkflowEngine, WorkflowHooks};
use entity::Mapper;

use switchboard_store::Store;

/// Starts workflows' resumed runs.
struct ResumeAsRuns {
    store: Store,
    runs: Arc<dyn Runs>,
    aliases: SharedAliases,
    bot_id: Arc<std::sync::atomic::AtomicU64>,
    /// Where `agent.trusted_users` is read when a workflow resumes (weak: the core holds the
    /// engine that holds these hooks).
    core: std::sync::Weak<Core>,
}

impl WorkflowHooks for ResumeAsRuns {
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
            author_roles: Vec::new(),
            text,
            workflow_id: Some(workflow.workflow_id.clone()),
            agent: None,
        });
    }
}

/// Restores the kept workflows (resuming those answered while switchboard was away), turns
/// the `workflow.*` callables on, and fires deadlines from a background task (the handle:
/// abort it at shutdown).
pub async fn start(
    core: &Arc<Core>,
    store: &Store,
    kept_in: Arc<dyn switchboard_store::Backend>,
    runs: Arc<dyn Runs>,
    aliases: SharedAliases,
    bot_id: Arc<std::sync::atomic::AtomicU64>,
) -> Result<(Arc<WorkflowEngine>, tokio::task::JoinHandle<()>), switchboard_store::StoreError> {
    let hooks = Arc::new(ResumeAsRuns {
        store: store.clone(),
        runs,
        aliases,
        bot_id,
        core: Arc::downgrade(core),
    });
    // Several nodes over one store: each finish resumes once, wherever it happens.
    let cluster = kept_in.shared().then(|| crate::workflow::Cluster {
        once: Arc::clone(&kept_in) as _,
        feed: Arc::clone(&kept_in) as _,
    });
    let engine =
        WorkflowEngine::open(hooks, kept_in, Some(Arc::clone(core.events())), cluster).await?;
    let waiting = engine.list().iter().filter(|w| w.is_waiting()).count();
    if waiting > 0 {
        tracing::info!(waiting, "restored waiting workflows");
    }
    core.set_workflows(Arc::clone(&engine));
    let deadlines = tokio::spawn(Arc::clone(&engine).run_deadlines());
    Ok((engine, deadlines))
}
