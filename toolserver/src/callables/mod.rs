//! The built-in callables, written against the [`crate::Surface`] trait: `surface.*`,
//! `attachment.download` and `workflow.*`.

mod attachments;
mod audit;
mod help;
mod messages;
mod pins;
mod reactions;
mod search;
mod sessions;
mod threads;
mod warnings;
mod workflows;

pub(crate) use workflows::workflows_unavailable;

use crate::registry::Registry;

/// Registers every built-in callable.
pub fn register_all(registry: &mut Registry) {
    registry.register(help::Help);
    registry.register(sessions::ListSessions);
    registry.register(messages::ListMessages);
    registry.register(messages::ReadMessage);
    registry.register(messages::SendMessage);
    registry.register(messages::EditMessage);
    registry.register(messages::DeleteMessage);
    registry.register(search::SearchMessages);
    registry.register(reactions::AddReaction);
    registry.register(reactions::RemoveReaction);
    registry.register(reactions::ListReactions);
    registry.register(threads::CreateThread);
    registry.register(threads::ListThreads);
    registry.register(threads::ArchiveThread);
    registry.register(pins::AddPin);
    registry.register(pins::RemovePin);
    registry.register(pins::ListPins);
    registry.register(attachments::DownloadAttachments);
    registry.register(workflows::CreateWorkflow);
    registry.register(workflows::ListWorkflows);
    registry.register(workflows::GetWorkflow);
    registry.register(workflows::CancelWorkflow);
    registry.register(audit::ListAudit);
}
