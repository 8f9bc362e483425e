//! `fs.read`, `fs.write`, `fs.edit`, `fs.glob`, `fs.grep`, `fs.list`: the files of the
//! session's workspace (`switchboard_workspace`), every path confined to it. The service reads
//! and writes them itself (no sandbox needed); a write or edit by a run takes the run's
//! checkpoint first and publishes `fs.changed`.

use async_trait::async_trait;
use protocol::Effects;
use serde_json::json;
use switchboard_workspace::{
    EditRequest, GlobRequest, GrepRequest, ListRequest, ReadRequest, WriteRequest,
};

use std::sync::Arc;

use super::workspace::{checkpoint, note_workspace, read_small, workspace_input, WorkspaceTool};
use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext, Target};
use crate::registry::{example, output, output_schema, ToolOutput, ToolSpec};
use crate::workspaces::{tool_error, SessionWorkspace};

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
    let ws = note_workspace(cx, targets)?;
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

workspace_input! {
    pub struct ReadInput {
        /// The file, relative to the workspace (or absolute inside it).
        pub path: String,
        /// The first line to return, 1-based (default 1).
        pub offset: Option<usize>,
        /// At most this many lines (never more than workspace.max_output_lines).
        pub limit: Option<usize>,
    }
}

pub struct ReadFile;

#[async_trait]
impl WorkspaceTool for ReadFile {
    type Input = ReadInput;

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

    async fn run(
        &self,
        _: &Invocation<'_>,
        ws: &Arc<SessionWorkspace>,
        input: ReadInput,
    ) -> Result<ToolOutput, ToolError> {
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

workspace_input! {
    pub struct WriteInput {
        /// The file, relative to the workspace; its directories are made when missing.
        pub path: String,
        /// The whole new content.
        pub content: String,
    }
}

pub struct WriteFile;

#[async_trait]
impl WorkspaceTool for WriteFile {
    type Input = WriteInput;

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

    async fn ask_note(
        &self,
        cx: &PlanContext<'_>,
        targets: &[Target],
        input: &WriteInput,
    ) -> Option<String> {
        diff_note(cx, targets, &input.path, |_| Ok(input.content.clone())).await
    }

    async fn run(
        &self,
        cx: &Invocation<'_>,
        ws: &Arc<SessionWorkspace>,
        input: WriteInput,
    ) -> Result<ToolOutput, ToolError> {
        checkpoint(cx, ws).await?;
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

workspace_input! {
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
    }
}

pub struct EditFile;

#[async_trait]
impl WorkspaceTool for EditFile {
    type Input = EditInput;

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

    async fn run(
        &self,
        cx: &Invocation<'_>,
        ws: &Arc<SessionWorkspace>,
        input: EditInput,
    ) -> Result<ToolOutput, ToolError> {
        checkpoint(cx, ws).await?;
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

workspace_input! {
    pub struct GlobInput {
        /// Relative to the workspace: `*` stays within a directory, `**` crosses them.
        pub pattern: String,
    }
}

pub struct GlobFiles;

#[async_trait]
impl WorkspaceTool for GlobFiles {
    type Input = GlobInput;

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

    async fn run(
        &self,
        _: &Invocation<'_>,
        ws: &Arc<SessionWorkspace>,
        input: GlobInput,
    ) -> Result<ToolOutput, ToolError> {
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

workspace_input! {
    pub struct GrepInput {
        /// A regular expression (ripgrep's syntax).
        pub pattern: String,
        /// Only files whose path matches this glob.
        pub glob: Option<String>,
        /// At most this many matching lines.
        pub limit: Option<usize>,
    }
}

pub struct GrepFiles;

#[async_trait]
impl WorkspaceTool for GrepFiles {
    type Input = GrepInput;

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

    async fn run(
        &self,
        _: &Invocation<'_>,
        ws: &Arc<SessionWorkspace>,
        input: GrepInput,
    ) -> Result<ToolOutput, ToolError> {
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

workspace_input! {
    pub struct ListInput {
        /// A directory of the workspace (default: its root).
        pub path: Option<String>,
        /// How deep to go (1: its entries only; at most 10).
        pub depth: Option<usize>,
    }
}

pub struct ListFiles;

#[async_trait]
impl WorkspaceTool for ListFiles {
    type Input = ListInput;

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

    async fn run(
        &self,
        _: &Invocation<'_>,
        ws: &Arc<SessionWorkspace>,
        input: ListInput,
    ) -> Result<ToolOutput, ToolError> {
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
