//! `git.status`, `git.diff`, `git.log`, `git.commit`, `git.branch`: git in the session's
//! workspace, run in its sandbox, answers parsed from git's porcelain.

use async_trait::async_trait;
use protocol::Effects;
use serde_json::json;

use std::sync::Arc;

use super::workspace::{checkpoint, workspace_input, WorkspaceTool};
use crate::error::ToolError;
use crate::invocation::Invocation;
use crate::registry::{example, output, output_schema, ToolOutput, ToolSpec};
use crate::workspaces::{tool_error, SessionWorkspace};

const READS: Effects = Effects::LOCAL_READ;

workspace_input! {
    /// An input with only the session.
    pub struct StatusInput {}
}

pub struct Status;

#[async_trait]
impl WorkspaceTool for Status {
    type Input = StatusInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "git.status",
            description: "The git status of the session's workspace: branch and changed files.",
            help: "Runs `git status` in the workspace (in the sandbox) and answers the branch, its upstream and each changed file with its state.",
            mutating: false,
            primary: None,
            title: "Git status",
            effects: READS,
            output_schema: Some(output_schema::<switchboard_sandbox::StatusAnswer>()),
            examples: vec![example("Status", "tools git.status", json!({}))],
        }
    }

    async fn run(
        &self,
        _: &Invocation<'_>,
        ws: &Arc<SessionWorkspace>,
        _: StatusInput,
    ) -> Result<ToolOutput, ToolError> {
        output(&ws.workspace.git_status().await.map_err(tool_error)?)
    }
}

workspace_input! {
    pub struct DiffInput {
        /// The staged changes (the index against HEAD) instead of the work tree's.
        #[serde(default)]
        pub staged: bool,
        /// Only this path of the workspace.
        pub path: Option<String>,
    }
}

pub struct Diff;

#[async_trait]
impl WorkspaceTool for Diff {
    type Input = DiffInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "git.diff",
            description: "The git diff of the session's workspace (work tree, or staged).",
            help: "Answers `git diff` (or `git diff --staged`) of the workspace, optionally of one path, cut to workspace.max_output_bytes.",
            mutating: false,
            primary: Some("path"),
            title: "Git diff",
            effects: READS,
            output_schema: Some(output_schema::<switchboard_sandbox::DiffAnswer>()),
            examples: vec![example("Staged changes", "tools git.diff --staged=true", json!({"staged": true}))],
        }
    }

    async fn run(
        &self,
        _: &Invocation<'_>,
        ws: &Arc<SessionWorkspace>,
        input: DiffInput,
    ) -> Result<ToolOutput, ToolError> {
        let answer = ws
            .workspace
            .git_diff(input.staged, input.path.as_deref())
            .await
            .map_err(tool_error)?;
        output(&answer)
    }
}

workspace_input! {
    pub struct LogInput {
        /// At most this many commits, newest first.
        pub limit: Option<usize>,
    }
}

pub struct Log;

#[async_trait]
impl WorkspaceTool for Log {
    type Input = LogInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "git.log",
            description: "The newest commits of the session's workspace.",
            help: "Answers the newest `limit` commits of the current branch: hash, author, date and subject.",
            mutating: false,
            primary: None,
            title: "Git log",
            effects: READS,
            output_schema: Some(output_schema::<switchboard_sandbox::LogAnswer>()),
            examples: vec![example("The last five", "tools git.log --limit=5", json!({"limit": 5}))],
        }
    }

    async fn run(
        &self,
        _: &Invocation<'_>,
        ws: &Arc<SessionWorkspace>,
        input: LogInput,
    ) -> Result<ToolOutput, ToolError> {
        output(
            &ws.workspace
                .git_log(input.limit)
                .await
                .map_err(tool_error)?,
        )
    }
}

workspace_input! {
    pub struct CommitInput {
        /// The commit message.
        pub message: String,
        /// Commit every change to tracked files (`git commit -a`); new files need `git add`
        /// (shell.run) first.
        #[serde(default)]
        pub all: bool,
    }
}

pub struct Commit;

#[async_trait]
impl WorkspaceTool for Commit {
    type Input = CommitInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "git.commit",
            description: "Commit the staged changes (or every tracked change, with all) of the session's workspace.",
            help: "Runs `git commit -m MESSAGE` in the workspace (`-a` with `all`: every change to tracked files; new files need a `git add` through shell.run first). Answers the new commit's hash and branch; nothing to commit, or no repository, is `git_failed` with what git said.",
            mutating: true,
            primary: Some("message"),
            title: "Git commit",
            effects: Effects::LOCAL_ADD,
            output_schema: Some(output_schema::<switchboard_sandbox::CommitAnswer>()),
            examples: vec![example("Commit everything", "tools git.commit 'Fix the parser' --all=true", json!({"message": "Fix the parser", "all": true}))],
        }
    }

    async fn run(
        &self,
        cx: &Invocation<'_>,
        ws: &Arc<SessionWorkspace>,
        input: CommitInput,
    ) -> Result<ToolOutput, ToolError> {
        checkpoint(cx, ws).await?;
        let answer = ws
            .workspace
            .git_commit(&input.message, input.all)
            .await
            .map_err(tool_error)?;
        output(&answer)
    }
}

workspace_input! {
    pub struct BranchInput {
        /// A branch to create (or, with switch, to switch to); none lists the branches.
        pub name: Option<String>,
        /// Switch to `name` (creating it if needed).
        #[serde(default)]
        pub switch: bool,
    }
}

pub struct Branch;

#[async_trait]
impl WorkspaceTool for Branch {
    type Input = BranchInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "git.branch",
            description: "List, create or switch branches of the session's workspace.",
            help: "No `name`: lists the branches and the current one. `{name}` creates a branch; `{name, switch: true}` switches to it, creating it if needed.",
            mutating: true,
            primary: Some("name"),
            title: "Git branch",
            effects: Effects::LOCAL_ADD,
            output_schema: Some(output_schema::<switchboard_sandbox::BranchAnswer>()),
            examples: vec![
                example("List them", "tools git.branch", json!({})),
                example("Work on a new branch", "tools git.branch fix-parser --switch=true", json!({"name": "fix-parser", "switch": true})),
            ],
        }
    }

    async fn run(
        &self,
        cx: &Invocation<'_>,
        ws: &Arc<SessionWorkspace>,
        input: BranchInput,
    ) -> Result<ToolOutput, ToolError> {
        if input.name.is_some() {
            checkpoint(cx, ws).await?;
        }
        let answer = ws
            .workspace
            .git_branch(input.name.as_deref(), input.switch)
            .await
            .map_err(tool_error)?;
        output(&answer)
    }
}
