//! The `surface.*` callables, written against the [`crate::Surface`] trait.

mod help;
mod messages;
mod reactions;
mod sessions;

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
    registry.register(reactions::AddReaction);
    registry.register(reactions::RemoveReaction);
    registry.register(reactions::ListReactions);
}
