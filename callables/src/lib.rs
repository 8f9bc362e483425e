//! The built-in callables, above the engine and written against its
//! [`Surface`](switchboard_engine::Surface) trait: `surface.*`, `attachment.download`,
//! `workflow.*`, `audit.list`, the operator callables (`approvals.list`, `approvals.decide`,
//! `admin.tools.set`, `admin.reload`, `runs.list`, `runs.abort`), and the agent's workspace
//! (`fs.*`, `shell.*`, `git.*`, `workspace.undo`, over the engine's `workspaces`). The engine
//! knows none of them: the composition root hands [`registry`] to `Core::new`.

// The engine's modules, at the paths these files name them by.
use switchboard_engine::{
    approvals, auth, chunk, clock, error, invocation, live, registry, scopes, server, surface,
    workflow, workspaces,
};

pub(crate) mod agents;
mod attachments;
mod audit;
mod channels;
mod cluster;
mod files;
mod git;
mod governance;
mod help;
mod memory_notes;
mod messages;
mod pins;
mod reactions;
mod run_files;
mod runs;
mod schedules;
mod search;
mod sessions;
mod shell;
mod threads;
mod typing;
pub mod usage;
mod warnings;
mod workflows;
mod workspace;

use protocol::ErrorCode;
use serde_json::json;

use crate::error::ToolError;
use crate::registry::Registry;
use crate::workspace::InWorkspace;

/// Discord's limit for channel and thread names, in characters.
const MAX_NAME_CHARS: usize = 100;

/// A channel's or thread's `name`: trimmed, 1 to 100 characters.
fn channel_name(name: &str) -> Result<String, ToolError> {
    let name = name.trim();
    let chars = name.chars().count();
    if chars == 0 || chars > MAX_NAME_CHARS {
        return Err(ToolError::usage(
            ErrorCode::InvalidInput,
            format!("name must be 1 to {MAX_NAME_CHARS} characters, got {chars}"),
        )
        .with_details(json!({ "field": "name" })));
    }
    Ok(name.to_owned())
}

/// Whether `id` is `prefix` and 1 or more hex digits, at most `max` bytes in all: the shape
/// of the ids switchboard makes up (`apr_…`, `run-…`).
fn prefixed_hex(id: &str, prefix: &str, max: usize) -> bool {
    id.len() <= max
        && id
            .strip_prefix(prefix)
            .is_some_and(|hex| !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Registers every built-in callable.
pub fn register_all(registry: &mut Registry) {
    registry.register(help::Help);
    memory_notes::register(registry);
    registry.register(sessions::ListSessions);
    registry.register(messages::ListMessages);
    registry.register(messages::OnMessage::Read);
    registry.register(messages::SendMessage);
    registry.register(messages::EditMessage);
    registry.register(messages::OnMessage::Delete);
    registry.register(search::SearchMessages);
    registry.register(reactions::ChangeReaction::Add);
    registry.register(reactions::ChangeReaction::Remove);
    registry.register(messages::OnMessage::Reactions);
    registry.register(typing::ShowTyping);
    registry.register(threads::CreateThread);
    registry.register(threads::ListThreads);
    registry.register(threads::ArchiveThread);
    registry.register(messages::OnMessage::Pin);
    registry.register(messages::OnMessage::Unpin);
    registry.register(pins::ListPins);
    registry.register(channels::CreateChannel);
    registry.register(channels::EditChannel);
    registry.register(channels::DeleteChannel);
    registry.register(attachments::DownloadAttachments);
    registry.register(workflows::CreateWorkflow);
    registry.register(workflows::ListWorkflows);
    registry.register(workflows::OnWorkflow::Get);
    registry.register(workflows::OnWorkflow::Cancel);
    registry.register(audit::ListAudit);
    registry.register(governance::DecideApproval);
    registry.register(governance::SetSessionTools);
    registry.register(governance::ListApprovals);
    registry.register(governance::ReloadConfig);
    registry.register(cluster::Status);
    registry.register(runs::ListRuns);
    registry.register(runs::AbortRun);
    registry.register(schedules::CreateSchedule);
    registry.register(schedules::ListSchedules);
    registry.register(schedules::OnSchedule::Get);
    registry.register(schedules::OnSchedule::Cancel);
    registry.register(schedules::OnSchedule::Resume);
    registry.register(usage::ReportUsage);
    registry.register(agents::Handoff);
    registry.register(agents::SetSessionAgent);
    registry.register(InWorkspace(files::ReadFile));
    registry.register(InWorkspace(files::WriteFile));
    registry.register(InWorkspace(files::EditFile));
    registry.register(InWorkspace(files::GlobFiles));
    registry.register(InWorkspace(files::GrepFiles));
    registry.register(InWorkspace(files::ListFiles));
    registry.register(InWorkspace(shell::RunCommand));
    registry.register(InWorkspace(shell::CommandOutput));
    registry.register(InWorkspace(shell::ListCommands));
    registry.register(InWorkspace(shell::KillCommand));
    registry.register(InWorkspace(git::Status));
    registry.register(InWorkspace(git::Diff));
    registry.register(InWorkspace(git::Log));
    registry.register(InWorkspace(git::Commit));
    registry.register(InWorkspace(git::Branch));
    registry.register(InWorkspace(workspace::Undo));
}

/// Every built-in callable, registered: what the composition root hands `Core::new`.
pub fn registry() -> Registry {
    let mut registry = Registry::new();
    register_all(&mut registry);
    registry
}

/// The id of every built-in callable, for config validation (rules, scopes and hooks must name
/// real callables).
pub fn callable_ids() -> Vec<String> {
    registry().ids().map(str::to_owned).collect()
}
