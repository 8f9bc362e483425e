//! The `openai` runner's system message before the conversation: the provider prompt chosen by
//! `agent.model` (`[agent.prompts]`, else `agent.system_prompt`), then the instruction files of
//! the session's workspace (`AGENTS.md`, `CLAUDE.md`, `.switchboard/instructions.md`, from the
//! session's directory up to `workspace.root`, nearest last, `agent.instructions_max_chars` in
//! all), then the session's own `[sessions.NAME] system_prompt` (a thread's parent's when it
//! has none). Instruction files are text in the prompt and nothing more: they never widen a scope
//! or a rule.

use std::path::PathBuf;

use entity::Snowflake;
use switchboard_config::{AgentConfig, OpenAiRunner};
use switchboard_context::instructions::discover;
use switchboard_context::prompts::ProviderPrompts;
use switchboard_context::Block;
use switchboard_engine::Core;

/// The system prompt for `runner.model`: the first `[agent.prompts]` glob that matches, else
/// its `default`, else `agent.system_prompt`.
pub fn system_prompt(config: &AgentConfig, runner: &OpenAiRunner) -> String {
    match ProviderPrompts::new(config.prompts.iter().cloned()) {
        Ok(prompts) => prompts
            .select(&runner.model)
            .map_or_else(|| runner.system_prompt.clone(), str::to_owned),
        Err(error) => {
            // The config check refuses a bad glob; this is only reached by a config built
            // another way.
            tracing::warn!("agent.prompts: {error}; using agent.system_prompt");
            runner.system_prompt.clone()
        }
    }
}

/// The session's `[sessions.NAME]` settings; a thread without its own has its parent's.
pub fn session_settings(
    core: &Core,
    session: Snowflake,
) -> Option<switchboard_config::SessionSettings> {
    let settings = core.settings();
    let sessions = &settings.config().sessions;
    if let Some(own) = switchboard_config::session_settings(sessions, session) {
        return Some(own.clone());
    }
    let parent = core
        .surface()
        .session(session)
        .filter(|info| info.kind == switchboard_engine::surface::SessionKind::Thread)
        .and_then(|info| info.parent_id)?;
    switchboard_config::session_settings(sessions, parent).cloned()
}

/// The session's workspace directory and the root: a thread works in its parent's, a session
/// bound to a directory (`[sessions.NAME] workspace`) in that one. `None` with no `[workspace]`.
fn directories(core: &Core, session: Snowflake) -> Option<(PathBuf, PathBuf)> {
    let settings = core.settings();
    let config = settings.config();
    let workspace = config.workspace.as_ref()?;
    let session = match core.surface().session(session) {
        Some(info) if info.kind == switchboard_engine::surface::SessionKind::Thread => {
            info.parent_id.unwrap_or(session)
        }
        _ => session,
    };
    let root = std::path::absolute(&workspace.root).unwrap_or_else(|_| workspace.root.clone());
    let dir = switchboard_config::session_settings(&config.sessions, session)
        .and_then(|s| s.workspace.clone())
        .unwrap_or_else(|| root.join(session.to_string()));
    Some((root, dir))
}

/// The system blocks every request of a run in `session` starts with: the provider prompt,
/// the instruction files, then the session's own prompt.
pub fn system_blocks(
    core: &Core,
    config: &AgentConfig,
    runner: &OpenAiRunner,
    session: Snowflake,
) -> Vec<Block> {
    let mut blocks = vec![Block::System(system_prompt(config, runner))];
    blocks.extend(instruction_files(core, config, session));
    // `[sessions.NAME] system_prompt`: this session's (or its parent channel's) only.
    if let Some(prompt) = session_settings(core, session).and_then(|s| s.system_prompt) {
        blocks.push(Block::Channel(prompt));
    }
    blocks
}

/// The instruction files of the session's workspace, farthest first.
fn instruction_files(core: &Core, config: &AgentConfig, session: Snowflake) -> Vec<Block> {
    if config.instructions_max_chars == 0 {
        return Vec::new();
    }
    let Some((root, dir)) = directories(core, session) else {
        return Vec::new();
    };
    // The session's directory is made on its first workspace call; until then the files
    // between the root and it are still read.
    let dir = if dir.exists() { dir } else { root.clone() };
    match discover(&root, &dir, config.instructions_max_chars) {
        Ok(found) => {
            for skipped in &found.skipped {
                tracing::warn!(path = %skipped.path, %session, "instruction file not read: {}", skipped.reason);
            }
            found.files.into_iter().map(Block::Instructions).collect()
        }
        Err(error) => {
            tracing::debug!(%session, "no instruction files: {error}");
            Vec::new()
        }
    }
}
