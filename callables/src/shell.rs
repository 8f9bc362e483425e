//! `shell.run`, `shell.output`, `shell.list`, `shell.kill`: the session's shell, every command
//! in the sandbox (`switchboard_sandbox`: bubblewrap, Landlock, limits). A `cd` holds between
//! calls; a background command keeps running after the call and its output is read later; an
//! `/abort` of the run kills its commands.

use async_trait::async_trait;
use protocol::Effects;
use schemars::JsonSchema;
use serde_json::json;
use switchboard_sandbox::RunRequest;
use switchboard_workspace::WorkspaceError;

use std::sync::Arc;

use super::workspace::{checkpoint, note_workspace, workspace_input, WorkspaceTool};
use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext, Target};
use crate::registry::{example, output, output_schema, ToolOutput, ToolSpec};
use crate::workspaces::{tool_error, SessionWorkspace, Workspaces};

fn sandbox_error(error: switchboard_sandbox::SandboxError) -> ToolError {
    tool_error(WorkspaceError::from(error))
}

workspace_input! {
    pub struct RunInput {
        /// A shell command line (bash), run in the session's working directory.
        pub command: String,
        /// Seconds before the command is killed (default workspace.timeout_s, at most
        /// workspace.max_timeout_s).
        pub timeout_s: Option<u64>,
        /// Keep it running after the call; read its output with shell.output.
        #[serde(default)]
        pub background: bool,
    }
}

pub struct RunCommand;

#[async_trait]
impl WorkspaceTool for RunCommand {
    type Input = RunInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "shell.run",
            description: "Run a shell command in the session's workspace, inside the sandbox.",
            help: "Runs `command` with bash in the session's workspace, inside the sandbox: the host read-only, the workspace the only writable place, no network unless workspace.network, the environment cleared to workspace.env_passthrough, limits on memory, CPU, processes and file size. The working directory persists between calls (a `cd` holds). A command that exits non-zero is an ordinary answer with its `exitCode`, `stdout` and `stderr`; one killed at its timeout answers `timeout` (exit 7) with its output so far in the details. The answer keeps the tail of each stream (workspace.max_output_bytes / max_output_lines); when cut it says where the whole output was saved (under `.switchboard/`). `background: true` keeps it running after the call: read it with shell.output, stop it with shell.kill. Rules can match the command (`command = \"git status*\"`), each pipeline segment on its own.",
            mutating: true,
            primary: Some("command"),
            title: "Run a command",
            effects: Effects {
                destructive: true,
                idempotent: false,
                open_world: true,
            },
            output_schema: Some(output_schema::<switchboard_sandbox::ShellAnswer>()),
            examples: vec![
                example("Run the tests", "tools shell.run 'cargo test'", json!({"command": "cargo test"})),
                example("Start a server in the background", "tools shell.run 'python3 -m http.server' --background=true", json!({"command": "python3 -m http.server", "background": true})),
            ],
        }
    }

    async fn ask_note(
        &self,
        cx: &PlanContext<'_>,
        targets: &[Target],
        _: &RunInput,
    ) -> Option<String> {
        let ws = note_workspace(cx, targets)?;
        let root = ws.workspace.root().path();
        let cwd = ws
            .workspace
            .shell()
            .map(switchboard_sandbox::ShellSession::cwd)
            .unwrap_or_else(|_| root.to_path_buf());
        Some(format!("cwd: {}", cwd.display()))
    }

    async fn run(
        &self,
        cx: &Invocation<'_>,
        ws: &Arc<SessionWorkspace>,
        input: RunInput,
    ) -> Result<ToolOutput, ToolError> {
        let shell = ws.workspace.shell().map_err(tool_error)?;
        checkpoint(cx, ws).await?;
        // A foreground command ends by its own timeout a second before the call's
        // (`toolserver.call_timeout_s`), so that it answers `timeout` with its output so far
        // rather than the call being cut without it.
        let config = cx.settings().config();
        let timeout_s = if input.background || input.timeout_s == Some(0) {
            input.timeout_s
        } else {
            let call_limit = config
                .toolserver
                .call_timeout
                .as_secs()
                .saturating_sub(1)
                .max(1);
            let asked = input.timeout_s.or_else(|| {
                config
                    .workspace
                    .as_ref()
                    .map(|workspace| workspace.timeout.as_secs())
            });
            asked.map(|seconds| seconds.min(call_limit))
        };
        let request = RunRequest {
            command: input.command,
            timeout_s,
            background: input.background,
        };
        let capability = cx.context.caller.capability();
        let answer = match capability {
            // An /abort of the run stops its command at once (dropping the run kills the
            // command's whole tree).
            Some(capability) if !request.background => {
                tokio::select! {
                    answer = shell.run(request) => answer.map_err(sandbox_error)?,
                    how = capability.ended() => return Err(crate::server::run_ended(how)),
                }
            }
            _ => shell.run(request).await.map_err(sandbox_error)?,
        };
        if answer.background {
            if let Some(capability) = capability {
                Workspaces::kill_on_abort(ws, capability, answer.id.clone());
            }
        }
        output(&answer)
    }
}

workspace_input! {
    pub struct OutputInput {
        /// The background command's id (from shell.run or shell.list).
        pub id: String,
        /// Read from this byte of its output on (the previous answer's `next`); default: the
        /// oldest kept.
        pub since: Option<u64>,
    }
}

pub struct CommandOutput;

#[async_trait]
impl WorkspaceTool for CommandOutput {
    type Input = OutputInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "shell.output",
            description: "Read a background command's output so far.",
            help: "Answers the background command's output (standard output and error, interleaved) from byte `since` on, whether it still runs and its exit code; pass the answer's `next` as `since` to read on.",
            mutating: false,
            primary: Some("id"),
            title: "Read a command's output",
            effects: Effects::LOCAL_READ,
            output_schema: Some(output_schema::<switchboard_sandbox::OutputAnswer>()),
            examples: vec![example("Read on", "tools shell.output sh-3 --since=1024", json!({"id": "sh-3", "since": 1024}))],
        }
    }

    async fn run(
        &self,
        _: &Invocation<'_>,
        ws: &Arc<SessionWorkspace>,
        input: OutputInput,
    ) -> Result<ToolOutput, ToolError> {
        let shell = ws.workspace.shell().map_err(tool_error)?;
        let answer = shell
            .output(&input.id, input.since)
            .map_err(sandbox_error)?;
        output(&answer)
    }
}

workspace_input! {
    pub struct ListInput {}
}

pub struct ListCommands;

/// `shell.list`'s answer.
#[derive(serde::Serialize, JsonSchema)]
struct Processes {
    /// The session's background commands, running or ended.
    processes: Vec<switchboard_sandbox::ProcessInfo>,
}

#[async_trait]
impl WorkspaceTool for ListCommands {
    type Input = ListInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "shell.list",
            description: "List the session's background commands.",
            help: "Lists the session's background commands: id, command, whether it runs, exit code, bytes of output and age.",
            mutating: false,
            primary: None,
            title: "List background commands",
            effects: Effects::LOCAL_READ,
            output_schema: Some(output_schema::<Processes>()),
            examples: vec![example("List them", "tools shell.list", json!({}))],
        }
    }

    async fn run(
        &self,
        _: &Invocation<'_>,
        ws: &Arc<SessionWorkspace>,
        _: ListInput,
    ) -> Result<ToolOutput, ToolError> {
        let shell = ws.workspace.shell().map_err(tool_error)?;
        output(&Processes {
            processes: shell.list(),
        })
    }
}

workspace_input! {
    pub struct KillInput {
        /// The background command's id.
        pub id: String,
    }
}

pub struct KillCommand;

#[async_trait]
impl WorkspaceTool for KillCommand {
    type Input = KillInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "shell.kill",
            description: "Stop a background command (its whole process tree).",
            help: "Kills the background command and every process it started; answers whether it was still running.",
            mutating: true,
            primary: Some("id"),
            title: "Stop a command",
            effects: Effects::LOCAL_OVERWRITE,
            output_schema: Some(output_schema::<switchboard_sandbox::KillAnswer>()),
            examples: vec![example("Stop it", "tools shell.kill sh-3", json!({"id": "sh-3"}))],
        }
    }

    async fn run(
        &self,
        _: &Invocation<'_>,
        ws: &Arc<SessionWorkspace>,
        input: KillInput,
    ) -> Result<ToolOutput, ToolError> {
        let shell = ws.workspace.shell().map_err(tool_error)?;
        let answer = shell.kill(&input.id).await.map_err(sandbox_error)?;
        output(&answer)
    }
}
