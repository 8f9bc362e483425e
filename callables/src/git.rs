//! `git.status`, `git.diff`, `git.log`, `git.commit`, `git.branch`: git in the session's
//! workspace, run in its sandbox, answers parsed from git's porcelain.

use async_trait::async_trait;
use protocol::Effects;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::workspace::{in_session, open};
use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext};
use crate::registry::{example, output, output_schema, Planned, Tool, ToolOutput, ToolSpec};
use crate::workspaces::tool_error;

const READS: Effects = Effects::LOCAL_READ;

/// An input with only the session.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StatusInput {
    /// The session whose workspace to use; default: your context's session.
    pub session_id: Option<String>,
}

pub struct Status;

#[async_trait]
impl Tool for Status {
    type Input = StatusInput;
    type Plan = StatusInput;

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

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: StatusInput,
    ) -> Result<Planned<StatusInput>, ToolError> {
        Ok(in_session(input))
    }

    async fn run(&self, cx: &Invocation<'_>, _: StatusInput) -> Result<ToolOutput, ToolError> {
        let ws = open(cx)?;
        output(&ws.workspace.git_status().await.map_err(tool_error)?)
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DiffInput {
    /// The staged changes (the index against HEAD) instead of the work tree's.
    #[serde(default)]
    pub staged: bool,
    /// Only this path of the workspace.
    pub path: Option<String>,
    /// The session whose workspace to use; default: your context's session.
    pub session_id: Option<String>,
}

pub struct Diff;

#[async_trait]
impl Tool for Diff {
    type Input = DiffInput;
    type Plan = DiffInput;

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

    fn plan(&self, _: &PlanContext<'_>, input: DiffInput) -> Result<Planned<DiffInput>, ToolError> {
        Ok(in_session(input))
    }

    async fn run(&self, cx: &Invocation<'_>, input: DiffInput) -> Result<ToolOutput, ToolError> {
        let ws = open(cx)?;
        let answer = ws
            .workspace
            .git_diff(input.staged, input.path.as_deref())
            .await
            .map_err(tool_error)?;
        output(&answer)
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LogInput {
    /// At most this many commits, newest first.
    pub limit: Option<usize>,
    /// The session whose workspace to use; default: your context's session.
    pub session_id: Option<String>,
}

pub struct Log;

#[async_trait]
impl Tool for Log {
    type Input = LogInput;
    type Plan = LogInput;

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

    fn plan(&self, _: &PlanContext<'_>, input: LogInput) -> Result<Planned<LogInput>, ToolError> {
        Ok(in_session(input))
    }

    async fn run(&self, cx: &Invocation<'_>, input: LogInput) -> Result<ToolOutput, ToolError> {
        let ws = open(cx)?;
        output(
            &ws.workspace
                .git_log(input.limit)
                .await
                .map_err(tool_error)?,
        )
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CommitInput {
    /// The commit message.
    pub message: String,
    /// Commit every change to tracked files (`git commit -a`); new files need `git add`
    /// (shell.run) first.
    #[serde(default)]
    pub all: bool,
    /// The session whose workspace to use; default: your context's session.
    pub session_id: Option<String>,
}

pub struct Commit;

#[async_trait]
impl Tool for Commit {
    type Input = CommitInput;
    type Plan = CommitInput;

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

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: CommitInput,
    ) -> Result<Planned<CommitInput>, ToolError> {
        Ok(in_session(input))
    }

    async fn run(&self, cx: &Invocation<'_>, input: CommitInput) -> Result<ToolOutput, ToolError> {
        let ws = open(cx)?;
        cx.core
            .workspaces()
            .before_change(&cx.context.caller, &ws)
            .await?;
        let answer = ws
            .workspace
            .git_commit(&input.message, input.all)
            .await
            .map_err(tool_error)?;
        output(&answer)
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BranchInput {
    /// A branch to create (or, with switch, to switch to); none lists the branches.
    pub name: Option<String>,
    /// Switch to `name` (creating it if needed).
    #[serde(default)]
    pub switch: bool,
    /// The session whose workspace to use; default: your context's session.
    pub session_id: Option<String>,
}

pub struct Branch;

#[async_trait]
impl Tool for Branch {
    type Input = BranchInput;
    type Plan = BranchInput;

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

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: BranchInput,
    ) -> Result<Planned<BranchInput>, ToolError> {
        Ok(in_session(input))
    }

    async fn run(&self, cx: &Invocation<'_>, input: BranchInput) -> Result<ToolOutput, ToolError> {
        let ws = open(cx)?;
        if input.name.is_some() {
            cx.core
                .workspaces()
                .before_change(&cx.context.caller, &ws)
                .await?;
        }
        let answer = ws
            .workspace
            .git_branch(input.name.as_deref(), input.switch)
            .await
            .map_err(tool_error)?;
        output(&answer)
    }
}

super::workspace::session_field!(StatusInput, DiffInput, LogInput, CommitInput, BranchInput);
