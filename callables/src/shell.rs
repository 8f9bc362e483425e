//! `shell.run`, `shell.output`, `shell.list`, `shell.kill`: the session's shell, every command
//! in the sandbox (`switchboard_sandbox`: bubblewrap, Landlock, limits). A `cd` holds between
//! calls; a background command keeps running after the call and its output is read later; an
//! `/abort` of the run kills its commands.

use async_trait::async_trait;
use protocol::Effects;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use switchboard_sandbox::RunRequest;
use switchboard_workspace::WorkspaceError;

use super::workspace::{in_session, open};
use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext, Target};
use crate::registry::{example, output, output_schema, Planned, Tool, ToolOutput, ToolSpec};
use crate::workspaces::{tool_error, Workspaces};

fn sandbox_error(error: switchboard_sandbox::SandboxError) -> ToolError {
    tool_error(WorkspaceError::from(error))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunInput {
    /// A shell command line (bash), run in the session's working directory.
    pub command: String,
    /// Seconds before the command is killed (default workspace.timeout_s, at most
    /// workspace.max_timeout_s).
    pub timeout_s: Option<u64>,
    /// Keep it running after the call; read its output with shell.output.
    #[serde(default)]
    pub background: bool,
    /// The session whose workspace to use; default: your context's session.
    pub session_id: Option<String>,
}

pub struct RunCommand;

#[async_trait]
impl Tool for RunCommand {
    type Input = RunInput;
    type Plan = RunInput;

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

    fn plan(&self, _: &PlanContext<'_>, input: RunInput) -> Result<Planned<RunInput>, ToolError> {
        Ok(in_session(input))
    }

    async fn ask_note(
        &self,
        cx: &PlanContext<'_>,
        targets: &[Target],
        _: &RunInput,
    ) -> Option<String> {
        let ws = cx
            .core
            .workspaces()
            .for_target(cx.settings, targets.first()?)
            .ok()?;
        let root = ws.workspace.root().path();
        let cwd = ws
            .workspace
            .shell()
            .map(switchboard_sandbox::ShellSession::cwd)
            .unwrap_or_else(|_| root.to_path_buf());
        Some(format!("cwd: {}", cwd.display()))
    }

    async fn run(&self, cx: &Invocation<'_>, input: RunInput) -> Result<ToolOutput, ToolError> {
        let ws = open(cx)?;
        let shell = ws.workspace.shell().map_err(tool_error)?;
        cx.core
            .workspaces()
            .before_change(&cx.context.caller, &ws)
            .await?;
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
                Workspaces::kill_on_abort(&ws, capability, answer.id.clone());
            }
        }
        output(&answer)
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OutputInput {
    /// The background command's id (from shell.run or shell.list).
    pub id: String,
    /// Read from this byte of its output on (the previous answer's `next`); default: the
    /// oldest kept.
    pub since: Option<u64>,
    /// The session whose workspace to use; default: your context's session.
    pub session_id: Option<String>,
}

pub struct CommandOutput;

#[async_trait]
impl Tool for CommandOutput {
    type Input = OutputInput;
    type Plan = OutputInput;

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

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: OutputInput,
    ) -> Result<Planned<OutputInput>, ToolError> {
        Ok(in_session(input))
    }

    async fn run(&self, cx: &Invocation<'_>, input: OutputInput) -> Result<ToolOutput, ToolError> {
        let ws = open(cx)?;
        let shell = ws.workspace.shell().map_err(tool_error)?;
        let answer = shell
            .output(&input.id, input.since)
            .map_err(sandbox_error)?;
        output(&answer)
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListInput {
    /// The session whose workspace to use; default: your context's session.
    pub session_id: Option<String>,
}

pub struct ListCommands;

/// `shell.list`'s answer.
#[derive(serde::Serialize, JsonSchema)]
struct Processes {
    /// The session's background commands, running or ended.
    processes: Vec<switchboard_sandbox::ProcessInfo>,
}

#[async_trait]
impl Tool for ListCommands {
    type Input = ListInput;
    type Plan = ListInput;

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

    fn plan(&self, _: &PlanContext<'_>, input: ListInput) -> Result<Planned<ListInput>, ToolError> {
        Ok(in_session(input))
    }

    async fn run(&self, cx: &Invocation<'_>, _: ListInput) -> Result<ToolOutput, ToolError> {
        let ws = open(cx)?;
        let shell = ws.workspace.shell().map_err(tool_error)?;
        output(&Processes {
            processes: shell.list(),
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KillInput {
    /// The background command's id.
    pub id: String,
    /// The session whose workspace to use; default: your context's session.
    pub session_id: Option<String>,
}

pub struct KillCommand;

#[async_trait]
impl Tool for KillCommand {
    type Input = KillInput;
    type Plan = KillInput;

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

    fn plan(&self, _: &PlanContext<'_>, input: KillInput) -> Result<Planned<KillInput>, ToolError> {
        Ok(in_session(input))
    }

    async fn run(&self, cx: &Invocation<'_>, input: KillInput) -> Result<ToolOutput, ToolError> {
        let ws = open(cx)?;
        let shell = ws.workspace.shell().map_err(tool_error)?;
        let answer = shell.kill(&input.id).await.map_err(sandbox_error)?;
        output(&answer)
    }
}

super::workspace::session_field!(RunInput, OutputInput, ListInput, KillInput);
