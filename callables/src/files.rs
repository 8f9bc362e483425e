//! `fs.read`, `fs.write`, `fs.edit`, `fs.glob`, `fs.grep`, `fs.list`: the files of the
//! session's workspace (`switchboard_workspace`), every path confined to it. The service reads
//! and writes them itself (no sandbox needed); a write or edit by a run takes the run's
//! checkpoint first and publishes `fs.changed`.

use async_trait::async_trait;
use protocol::Effects;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use switchboard_workspace::{
    EditRequest, GlobRequest, GrepRequest, ListRequest, ReadRequest, WriteRequest,
};

use super::workspace::{in_session, open, read_small};
use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext, Target};
use crate::registry::{example, output, output_schema, Planned, Tool, ToolOutput, ToolSpec};
use crate::workspaces::tool_error;

/// Reading only.
const READS: Effects = Effects::LOCAL_READ;

/// At most this much of a file is read to show an approver the diff of a write.
const NOTE_DIFF_BYTES: u64 = 256 * 1024;
/// At most this much diff on an approval card.
const NOTE_MAX_CHARS: usize = 16_000;

/// An approval card's note for a change of `path`: the workspace and the diff from the file
/// as it is (`None`: it does not exist) to what `after` makes of it (or why there is none).
async fn diff_note(
    cx: &PlanContext<'_>,
    targets: &[Target],
    path: &str,
    after: impl FnOnce(Option<&str>) -> Result<String, String>,
) -> Option<String> {
    let ws = cx
        .core
        .workspaces()
        .for_target(cx.settings, targets.first()?)
        .ok()?;
    let diff = match read_small(&ws, path, NOTE_DIFF_BYTES).await {
        Ok(before) => match after(before.as_deref()) {
            Ok(after) => {
                switchboard_workspace::unified_diff(path, before.as_deref().unwrap_or(""), &after)
            }
            Err(why) => why,
        },
        Err(why) => why,
    };
    Some(cut_note(format!(
        "workspace: {}\ndiff:\n{diff}",
        ws.workspace.root().path().display()
    )))
}

fn cut_note(mut text: String) -> String {
    if text.len() > NOTE_MAX_CHARS {
        let mut end = NOTE_MAX_CHARS;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("\n… (diff cut)");
    }
    text
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReadInput {
    /// The file, relative to the workspace (or absolute inside it).
    pub path: String,
    /// The first line to return, 1-based (default 1).
    pub offset: Option<usize>,
    /// At most this many lines (never more than workspace.max_output_lines).
    pub limit: Option<usize>,
    /// The session whose workspace to use; default: your context's session.
    pub session_id: Option<String>,
}

pub struct ReadFile;

#[async_trait]
impl Tool for ReadFile {
    type Input = ReadInput;
    type Plan = ReadInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "fs.read",
            description: "Read a text file of the session's workspace (its head, from a line on).",
            help: "Reads a file of the session's workspace from line `offset` (1-based), at most `limit` lines and workspace.max_output_bytes / max_output_lines; the answer says when the file goes on (`truncated`, `nextOffset`). A binary file is described (`binary`: its media type), not dumped. Paths are relative to the workspace; absolute paths outside it, `..` past its root and symlinks leading out are refused (`outside_workspace`).",
            mutating: false,
            primary: Some("path"),
            title: "Read a file",
            effects: READS,
            output_schema: Some(output_schema::<switchboard_workspace::ReadAnswer>()),
            examples: vec![
                example("Read a file", "tools fs.read src/main.rs", json!({"path": "src/main.rs"})),
                example("Read from line 200", "tools fs.read src/main.rs --offset=200 --limit=50", json!({"path": "src/main.rs", "offset": 200, "limit": 50})),
            ],
        }
    }

    fn plan(&self, _: &PlanContext<'_>, input: ReadInput) -> Result<Planned<ReadInput>, ToolError> {
        Ok(in_session(input))
    }

    async fn run(&self, cx: &Invocation<'_>, input: ReadInput) -> Result<ToolOutput, ToolError> {
        let ws = open(cx)?;
        let answer = ws
            .workspace
            .read(ReadRequest {
                path: input.path,
                offset: input.offset,
                limit: input.limit,
            })
            .await
            .map_err(tool_error)?;
        output(&answer)
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WriteInput {
    /// The file, relative to the workspace; its directories are made when missing.
    pub path: String,
    /// The whole new content.
    pub content: String,
    /// The session whose workspace to use; default: your context's session.
    pub session_id: Option<String>,
}

pub struct WriteFile;

#[async_trait]
impl Tool for WriteFile {
    type Input = WriteInput;
    type Plan = WriteInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "fs.write",
            description: "Write a whole file in the session's workspace (created or replaced).",
            help: "Writes `content` as the whole file at `path` in the session's workspace, making its directories. In a run, the first change takes a checkpoint that workspace.undo and /undo go back to. An approval card for it shows the path and the diff against the file as it is.",
            mutating: true,
            primary: Some("path"),
            title: "Write a file",
            effects: Effects::LOCAL_OVERWRITE,
            output_schema: Some(output_schema::<switchboard_workspace::WriteAnswer>()),
            examples: vec![example(
                "Write a file",
                "tools fs.write notes.md --content='# Notes'",
                json!({"path": "notes.md", "content": "# Notes"}),
            )],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: WriteInput,
    ) -> Result<Planned<WriteInput>, ToolError> {
        Ok(in_session(input))
    }

    async fn ask_note(
        &self,
        cx: &PlanContext<'_>,
        targets: &[Target],
        input: &WriteInput,
    ) -> Option<String> {
        diff_note(cx, targets, &input.path, |_| Ok(input.content.clone())).await
    }

    async fn run(&self, cx: &Invocation<'_>, input: WriteInput) -> Result<ToolOutput, ToolError> {
        let ws = open(cx)?;
        cx.core
            .workspaces()
            .before_change(&cx.context.caller, &ws)
            .await?;
        let answer = ws
            .workspace
            .write(WriteRequest {
                path: input.path,
                content: input.content,
            })
            .await
            .map_err(tool_error)?;
        cx.publish_event(
            "fs.changed",
            ws.session,
            json!({ "path": answer.path, "kind": answer.kind }),
        );
        output(&answer)
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EditInput {
    /// The file, relative to the workspace.
    pub path: String,
    /// The text to replace: exact, or matched line-trimmed, whitespace-normalised,
    /// indentation-flexible, or by its first and last lines.
    pub old: String,
    /// The text to put in its place.
    pub new: String,
    /// Replace every occurrence (else the text must occur once).
    #[serde(default)]
    pub replace_all: bool,
    /// The session whose workspace to use; default: your context's session.
    pub session_id: Option<String>,
}

pub struct EditFile;

#[async_trait]
impl Tool for EditFile {
    type Input = EditInput;
    type Plan = EditInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "fs.edit",
            description: "Replace a piece of text in a file of the session's workspace; answers a unified diff.",
            help: "Replaces `old` by `new` in the file. When the exact text is not found it falls back in order: line-trimmed, whitespace-normalised, indentation-flexible, then block-anchor (first and last line fixed, the middle by similarity). Text that matches more than once is refused (`not_unique`, with the lines in `details.locations`) unless `replaceAll`; text found nowhere is `no_match`. The answer carries the strategy that matched and a unified diff.",
            mutating: true,
            primary: Some("path"),
            title: "Edit a file",
            effects: Effects {
                destructive: true,
                idempotent: false,
                open_world: false,
            },
            output_schema: Some(output_schema::<switchboard_workspace::EditAnswer>()),
            examples: vec![example(
                "Rename a function",
                "tools fs.edit src/lib.rs --old='fn a()' --new='fn b()'",
                json!({"path": "src/lib.rs", "old": "fn a()", "new": "fn b()"}),
            )],
        }
    }

    fn plan(&self, _: &PlanContext<'_>, input: EditInput) -> Result<Planned<EditInput>, ToolError> {
        Ok(in_session(input))
    }

    async fn ask_note(
        &self,
        cx: &PlanContext<'_>,
        targets: &[Target],
        input: &EditInput,
    ) -> Option<String> {
        let request = EditRequest {
            path: input.path.clone(),
            old: input.old.clone(),
            new: input.new.clone(),
            replace_all: input.replace_all,
        };
        diff_note(cx, targets, &input.path, |before| {
            let before = before.ok_or("(the file does not exist: the edit would fail)")?;
            switchboard_workspace::apply_edit(&input.path, before, &request)
                .map(|(after, _, _)| after)
                .map_err(|error| format!("(the edit would fail: {error})"))
        })
        .await
    }

    async fn run(&self, cx: &Invocation<'_>, input: EditInput) -> Result<ToolOutput, ToolError> {
        let ws = open(cx)?;
        cx.core
            .workspaces()
            .before_change(&cx.context.caller, &ws)
            .await?;
        let answer = ws
            .workspace
            .edit(EditRequest {
                path: input.path,
                old: input.old,
                new: input.new,
                replace_all: input.replace_all,
            })
            .await
            .map_err(tool_error)?;
        cx.publish_event(
            "fs.changed",
            ws.session,
            json!({ "path": answer.path, "kind": "modified" }),
        );
        output(&answer)
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GlobInput {
    /// Relative to the workspace: `*` stays within a directory, `**` crosses them.
    pub pattern: String,
    /// The session whose workspace to use; default: your context's session.
    pub session_id: Option<String>,
}

pub struct GlobFiles;

#[async_trait]
impl Tool for GlobFiles {
    type Input = GlobInput;
    type Plan = GlobInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "fs.glob",
            description: "Find files of the session's workspace by a glob, newest first.",
            help: "Lists the files whose path (relative to the workspace) matches `pattern`, newest first, honouring .gitignore (ripgrep's `ignore` crate).",
            mutating: false,
            primary: Some("pattern"),
            title: "Find files",
            effects: READS,
            output_schema: Some(output_schema::<switchboard_workspace::GlobAnswer>()),
            examples: vec![example(
                "Every Rust file",
                "tools fs.glob '**/*.rs'",
                json!({"pattern": "**/*.rs"}),
            )],
        }
    }

    fn plan(&self, _: &PlanContext<'_>, input: GlobInput) -> Result<Planned<GlobInput>, ToolError> {
        Ok(in_session(input))
    }

    async fn run(&self, cx: &Invocation<'_>, input: GlobInput) -> Result<ToolOutput, ToolError> {
        let ws = open(cx)?;
        let answer = ws
            .workspace
            .glob(GlobRequest {
                pattern: input.pattern,
            })
            .await
            .map_err(tool_error)?;
        output(&answer)
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GrepInput {
    /// A regular expression (ripgrep's syntax).
    pub pattern: String,
    /// Only files whose path matches this glob.
    pub glob: Option<String>,
    /// At most this many matching lines.
    pub limit: Option<usize>,
    /// The session whose workspace to use; default: your context's session.
    pub session_id: Option<String>,
}

pub struct GrepFiles;

#[async_trait]
impl Tool for GrepFiles {
    type Input = GrepInput;
    type Plan = GrepInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "fs.grep",
            description: "Search the files of the session's workspace for a regular expression.",
            help: "Searches the workspace's files (honouring .gitignore; ripgrep's own crates) for `pattern`, optionally only in files matching `glob`; answers the matching lines by path and line number, at most `limit`.",
            mutating: false,
            primary: Some("pattern"),
            title: "Search files",
            effects: READS,
            output_schema: Some(output_schema::<switchboard_workspace::GrepAnswer>()),
            examples: vec![example(
                "Find TODOs in Rust files",
                "tools fs.grep TODO --glob='**/*.rs'",
                json!({"pattern": "TODO", "glob": "**/*.rs"}),
            )],
        }
    }

    fn plan(&self, _: &PlanContext<'_>, input: GrepInput) -> Result<Planned<GrepInput>, ToolError> {
        Ok(in_session(input))
    }

    async fn run(&self, cx: &Invocation<'_>, input: GrepInput) -> Result<ToolOutput, ToolError> {
        let ws = open(cx)?;
        let answer = ws
            .workspace
            .grep(GrepRequest {
                pattern: input.pattern,
                glob: input.glob,
                limit: input.limit,
            })
            .await
            .map_err(tool_error)?;
        output(&answer)
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListInput {
    /// A directory of the workspace (default: its root).
    pub path: Option<String>,
    /// How deep to go (1: its entries only; at most 10).
    pub depth: Option<usize>,
    /// The session whose workspace to use; default: your context's session.
    pub session_id: Option<String>,
}

pub struct ListFiles;

#[async_trait]
impl Tool for ListFiles {
    type Input = ListInput;
    type Plan = ListInput;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "fs.list",
            description: "List a directory of the session's workspace.",
            help: "Lists the entries of `path` (default: the workspace's root) down to `depth` levels, .gitignored entries left out.",
            mutating: false,
            primary: Some("path"),
            title: "List files",
            effects: READS,
            output_schema: Some(output_schema::<switchboard_workspace::ListAnswer>()),
            examples: vec![example("The workspace's root", "tools fs.list", json!({}))],
        }
    }

    fn plan(&self, _: &PlanContext<'_>, input: ListInput) -> Result<Planned<ListInput>, ToolError> {
        Ok(in_session(input))
    }

    async fn run(&self, cx: &Invocation<'_>, input: ListInput) -> Result<ToolOutput, ToolError> {
        let ws = open(cx)?;
        let answer = ws
            .workspace
            .list(ListRequest {
                path: input.path,
                depth: input.depth,
            })
            .await
            .map_err(tool_error)?;
        output(&answer)
    }
}

super::workspace::session_field!(ReadInput, WriteInput, EditInput, GlobInput, GrepInput, ListInput);
