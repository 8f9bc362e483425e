//! What the workspace callables share (the session they act in, the open workspace), and
//! `workspace.undo`.

use std::sync::Arc;

use async_trait::async_trait;
use protocol::{Effects, ErrorCode};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use serde::de::DeserializeOwned;

use crate::auth::Caller;
use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext, Target};
use crate::registry::{
    example, output, output_schema, Planned, SessionRequest, Tool, ToolOutput, ToolSpec,
};
use crate::workspaces::{tool_error, SessionWorkspace};

/// An input naming the session whose workspace it acts in (`sessionId`).
pub(super) trait SessionField {
    fn session(&self) -> Option<&str>;
}

/// Declares a workspace callable's input: the fields given, then `sessionId` (the session
/// whose workspace to use), unknown fields refused; and its [`SessionField`].
macro_rules! workspace_input {
    ($(#[$meta:meta])* pub struct $input:ident { $($fields:tt)* }) => {
        $(#[$meta])*
        #[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        pub struct $input {
            $($fields)*
            /// The session whose workspace to use; default: your context's session.
            pub session_id: Option<String>,
        }

        impl $crate::workspace::SessionField for $input {
            fn session(&self) -> Option<&str> {
                self.session_id.as_deref()
            }
        }
    };
}
pub(super) use workspace_input;

/// A callable that acts in one session's workspace (`fs.*`, `shell.*`, `git.*`,
/// `workspace.undo`): its input names the session (`sessionId`, default: the context's) and
/// it runs with that session's workspace open. [`InWorkspace`] makes it a [`Tool`].
#[async_trait]
pub(super) trait WorkspaceTool: Send + Sync + 'static {
    /// The input, as its JSON Schema describes it; it names the session.
    type Input: SessionField + DeserializeOwned + JsonSchema + Send + Sync;

    /// What the callable says about itself.
    fn spec(&self) -> ToolSpec;

    /// Runs once every check passed, in the workspace of the session the call acts in.
    async fn run(
        &self,
        cx: &Invocation<'_>,
        ws: &Arc<SessionWorkspace>,
        input: Self::Input,
    ) -> Result<ToolOutput, ToolError>;

    /// What an approval card shows beside the input ([`Tool::ask_note`]).
    async fn ask_note(
        &self,
        _cx: &PlanContext<'_>,
        _targets: &[Target],
        _input: &Self::Input,
    ) -> Option<String> {
        None
    }
}

/// A [`WorkspaceTool`] as a [`Tool`]: its plan acts in the session its input names, and its
/// handler gets that session's workspace.
pub(super) struct InWorkspace<T>(pub T);

#[async_trait]
impl<T: WorkspaceTool> Tool for InWorkspace<T> {
    type Input = T::Input;
    type Plan = T::Input;

    fn spec(&self) -> ToolSpec {
        self.0.spec()
    }

    fn plan(&self, _: &PlanContext<'_>, input: T::Input) -> Result<Planned<T::Input>, ToolError> {
        let session = SessionRequest::session_id(input.session(), 0);
        Ok(Planned::in_session(input, session))
    }

    async fn ask_note(
        &self,
        cx: &PlanContext<'_>,
        targets: &[Target],
        input: &T::Input,
    ) -> Option<String> {
        self.0.ask_note(cx, targets, input).await
    }

    async fn run(&self, cx: &Invocation<'_>, input: T::Input) -> Result<ToolOutput, ToolError> {
        let target = cx.target()?;
        let ws = cx.core.workspaces().for_target(cx.settings(), &target)?;
        self.0.run(cx, &ws, input).await
    }
}

/// The workspace an approval card's note speaks of: the first target's (`None`: there is
/// none, or no workspace).
pub(super) fn note_workspace(
    cx: &PlanContext<'_>,
    targets: &[Target],
) -> Option<Arc<SessionWorkspace>> {
    cx.core
        .workspaces()
        .for_target(cx.settings, targets.first()?)
        .ok()
}

/// Before a change to the workspace: a run's first change takes its checkpoint
/// ([`Workspaces::before_change`](crate::workspaces::Workspaces::before_change)).
pub(super) async fn checkpoint(
    cx: &Invocation<'_>,
    ws: &Arc<SessionWorkspace>,
) -> Result<(), ToolError> {
    cx.core
        .workspaces()
        .before_change(&cx.context.caller, ws)
        .await
}

/// A file's text for an approval card's diff: `Ok(None)` when it does not exist, `Err` with
/// why there is no diff (too large, not text, outside the workspace).
pub(super) async fn read_small(
    ws: &Arc<SessionWorkspace>,
    path: &str,
    max: u64,
) -> Result<Option<String>, String> {
    use std::io::Read;
    let root = ws.workspace.root().clone();
    let path = path.to_owned();
    let read = tokio::task::spawn_blocking(move || {
        let resolved = match root.existing(&path) {
            Ok(resolved) => resolved,
            Err(error) => {
                return match error.kind() {
                    switchboard_workspace::WorkspaceErrorKind::NotFound => Ok(None),
                    _ => Err(format!("(no diff: {error})")),
                }
            }
        };
        let file = root
            .open_read(&resolved)
            .map_err(|e| format!("(no diff: {e})"))?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        if size > max {
            return Err(format!("(no diff: the file has {size} bytes)"));
        }
        let mut bytes = Vec::new();
        file.take(max)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("(no diff: {e})"))?;
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| "(no diff: the file is not UTF-8 text)".to_owned())
    })
    .await;
    read.unwrap_or_else(|_| Err("(no diff)".to_owned()))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UndoInput {
    /// The run to undo (its request id, `run-…`); default: the last run that changed the
    /// workspace.
    pub run: Option<String>,
    /// The session whose workspace to put back; default: your context's session.
    pub session_id: Option<String>,
}

pub struct Undo;

#[async_trait]
impl WorkspaceTool for Undo {
    type Input = UndoInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "workspace.undo",
            description: "Put the session's workspace back as it was before the last run (or a named run) changed it.",
            help: "Before a run's first change to its workspace a checkpoint is taken in a shadow git repository outside the workspace. This puts the workspace back as it was before that run: files it changed get their old content, files it created are removed, files it deleted come back; later changes by others are kept. The answer lists each path restored. Changes the operator or a token made outside a run take no checkpoint. From Discord: `/undo`, for admins and the person who started the run.",
            mutating: true,
            primary: Some("run"),
            title: "Undo a run's changes",
            effects: Effects {
                destructive: true,
                idempotent: false,
                open_world: false,
            },
            output_schema: Some(output_schema::<switchboard_sandbox::UndoAnswer>()),
            examples: vec![
                example("Undo the last run", "tools workspace.undo --session-id=#ops", json!({"sessionId": "#ops"})),
                example("Undo one run", "tools workspace.undo run-1a2b3c", json!({"run": "run-1a2b3c"})),
            ],
        }
    }

    async fn run(
        &self,
        cx: &Invocation<'_>,
        ws: &Arc<SessionWorkspace>,
        input: UndoInput,
    ) -> Result<ToolOutput, ToolError> {
        if let Caller::Discord(user) = &cx.context.caller {
            // `/undo`: admins, and the person whose message started the run.
            let admins = &cx.settings().config().discord.admins;
            let admin = switchboard_config::any_principal_matches(admins, user.id, &user.roles);
            let starter = ws.started_by(input.run.as_deref()).flatten() == Some(user.id);
            if !admin && !starter {
                return Err(ToolError::denied(
                    ErrorCode::NotAdmin,
                    "Only admins (discord.admins) and the person who started the run can undo it.",
                ));
            }
        }
        let answer = ws
            .workspace
            .undo(input.run.as_deref())
            .await
            .map_err(tool_error)?;
        for restored in &answer.restored {
            cx.publish_event(
                "fs.changed",
                ws.session,
                json!({ "path": restored.path, "kind": restored.action }),
            );
        }
        output(&answer)
    }
}

impl SessionField for UndoInput {
    fn session(&self) -> Option<&str> {
        self.session_id.as_deref()
    }
}
