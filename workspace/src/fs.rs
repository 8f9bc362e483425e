//! `fs.read`, `fs.write` and `fs.list`.

use std::io::{BufRead, BufReader, Read};

use serde::{Deserialize, Serialize};

use crate::error::WorkspaceError;
use crate::paths::Root;
use switchboard_sandbox::OutputLimits;

/// Bytes looked at to tell a binary file from text.
const SNIFF_BYTES: usize = 8192;

/// `fs.read`'s request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadRequest {
    pub path: String,
    /// The first line to return, 1-based (1 by default).
    #[serde(default)]
    pub offset: Option<usize>,
    /// At most this many lines (and never more than `max_output_lines`).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `fs.read`'s answer: the head of the file from `offset`, or a description of a binary file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ReadAnswer {
    pub path: String,
    /// The text read (empty for a binary file).
    pub content: String,
    /// The line `content` starts at (1-based).
    pub start_line: usize,
    /// Lines in `content`.
    pub lines: usize,
    /// Bytes in the file.
    pub size: u64,
    /// Whether the file goes on after `content` (then `nextOffset` reads on).
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<usize>,
    /// Set for a file that is not text: what it seems to be, instead of its bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binary: Option<Binary>,
}

/// A binary file, described.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Binary {
    /// The media type its name suggests (`application/octet-stream` when unknown).
    pub mime: String,
    /// Why it is taken for binary.
    pub reason: &'static str,
}

/// `fs.write`'s request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteRequest {
    pub path: String,
    pub content: String,
}

/// How a path changed (`fs.changed {path, kind}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ChangeKind {
    Created,
    Modified,
}

/// `fs.write`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WriteAnswer {
    pub path: String,
    pub bytes: u64,
    pub kind: ChangeKind,
}

/// `fs.list`'s request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListRequest {
    #[serde(default)]
    pub path: Option<String>,
    /// How deep to go below `path` (1: its entries only; at most 10).
    #[serde(default)]
    pub depth: Option<usize>,
}

/// One entry of `fs.list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Entry {
    /// Relative to the workspace root.
    pub path: String,
    /// `file`, `dir` or `symlink`.
    pub kind: &'static str,
    pub size: u64,
}

/// `fs.list`'s answer (`.gitignore`d entries left out, like `fs.glob` and `fs.grep`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ListAnswer {
    pub path: String,
    pub entries: Vec<Entry>,
    /// Whether more entries exist than the answer carries.
    pub truncated: bool,
}

/// Opens a file that must exist and not be a directory (`hint` says where to look instead).
pub(crate) fn open_file(
    root: &Root,
    path: &str,
    hint: &'static str,
) -> Result<(crate::paths::Resolved, std::fs::File, u64), WorkspaceError> {
    let resolved = root.existing(path)?;
    let file = root.open_read(&resolved)?;
    let meta = file.metadata().map_err(WorkspaceError::io("cannot read"))?;
    if meta.is_dir() {
        return Err(WorkspaceError::WrongType {
            path: resolved.relative,
            what: hint,
        });
    }
    Ok((resolved, file, meta.len()))
}

/// `fs.read`.
pub fn read(
    root: &Root,
    limits: &OutputLimits,
    request: &ReadRequest,
) -> Result<ReadAnswer, WorkspaceError> {
    let (resolved, file, size) = open_file(
        root,
        &request.path,
        "a directory (fs.list shows what is in it)",
    )?;
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let sniff = reader
        .fill_buf()
        .map_err(WorkspaceError::io("cannot read"))?;
    let sniff = &sniff[..sniff.len().min(SNIFF_BYTES)];
    let reason = if sniff.contains(&0) {
        Some("it contains NUL bytes")
    } else if std::str::from_utf8(sniff).is_err_and(|e| e.error_len().is_some()) {
        Some("it is not UTF-8 text")
    } else {
        None
    };
    if let Some(reason) = reason {
        return Ok(ReadAnswer {
            content: String::new(),
            start_line: 1,
            lines: 0,
            size,
            truncated: false,
            next_offset: None,
            binary: Some(Binary {
                mime: mime_guess::from_path(&resolved.path)
                    .first_or_octet_stream()
                    .essence_str()
                    .to_owned(),
                reason,
            }),
            path: resolved.relative,
        });
    }
    let start = request.offset.unwrap_or(1).max(1);
    let max_lines = request
        .limit
        .unwrap_or(limits.max_lines)
        .clamp(1, limits.max_lines.max(1));
    let mut content = Vec::new();
    let mut line = Vec::new();
    let mut number = 0usize;
    let mut lines = 0usize;
    let mut truncated = false;
    // Line by line, each read bounded: a file of one huge line costs at most max_bytes + 1.
    let per_line = limits.max_bytes as u64 + 1;
    loop {
        line.clear();
        let n = (&mut reader)
            .take(per_line)
            .read_until(b'\n', &mut line)
            .map_err(WorkspaceError::io("cannot read"))?;
        if n == 0 {
            break;
        }
        let long = !line.ends_with(b"\n") && n as u64 == per_line;
        number += 1;
        if number < start {
            if long {
                skip_line(&mut reader)?;
            }
            continue;
        }
        if lines == max_lines || content.len() + line.len() > limits.max_bytes {
            truncated = true;
            if lines == 0 {
                // One line longer than the budget: its head.
                content.extend_from_slice(&line[..line.len().min(limits.max_bytes)]);
                lines = 1;
            }
            break;
        }
        content.extend_from_slice(&line);
        lines += 1;
    }
    let mut text = String::from_utf8_lossy(&content).into_owned();
    if truncated && text.ends_with('\u{FFFD}') {
        text.pop();
    }
    Ok(ReadAnswer {
        path: resolved.relative,
        content: text,
        start_line: start,
        lines,
        size,
        truncated,
        next_offset: truncated.then_some(start + lines),
        binary: None,
    })
}

fn skip_line(reader: &mut impl BufRead) -> Result<(), WorkspaceError> {
    loop {
        let buffer = reader
            .fill_buf()
            .map_err(WorkspaceError::io("cannot read"))?;
        if buffer.is_empty() {
            return Ok(());
        }
        match buffer.iter().position(|&b| b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = buffer.len();
                reader.consume(n);
            }
        }
    }
}

/// `fs.write`.
pub fn write(root: &Root, request: &WriteRequest) -> Result<WriteAnswer, WorkspaceError> {
    if request.path.trim().is_empty() {
        return Err(WorkspaceError::BadRequest(
            "path is empty; name the file to write".into(),
        ));
    }
    let resolved = root.resolve(&request.path)?;
    let created = root.write(&resolved, request.content.as_bytes())?;
    Ok(WriteAnswer {
        path: resolved.relative,
        bytes: request.content.len() as u64,
        kind: if created {
            ChangeKind::Created
        } else {
            ChangeKind::Modified
        },
    })
}

/// Most entries `fs.list` returns.
pub const MAX_LIST: usize = 2000;

/// `fs.list`.
pub fn list(root: &Root, request: &ListRequest) -> Result<ListAnswer, WorkspaceError> {
    let resolved = root.existing(request.path.as_deref().unwrap_or(""))?;
    if !resolved.path.is_dir() {
        return Err(WorkspaceError::WrongType {
            path: resolved.relative,
            what: "not a directory",
        });
    }
    let depth = request.depth.unwrap_or(1).clamp(1, 10);
    let walker = crate::search::walker(&resolved.path)
        .max_depth(Some(depth))
        .sort_by_file_path(std::cmp::Ord::cmp)
        .build();
    let mut entries = Vec::new();
    let mut truncated = false;
    for entry in walker.flatten() {
        if entry.depth() == 0 {
            continue;
        }
        if entries.len() == MAX_LIST {
            truncated = true;
            break;
        }
        let meta = entry.path().symlink_metadata().ok();
        let kind = match &meta {
            Some(m) if m.file_type().is_symlink() => "symlink",
            Some(m) if m.is_dir() => "dir",
            _ => "file",
        };
        entries.push(Entry {
            path: root.relative(entry.path()),
            kind,
            size: meta.map_or(0, |m| if m.is_dir() { 0 } else { m.len() }),
        });
    }
    Ok(ListAnswer {
        path: resolved.relative,
        entries,
        truncated,
    })
}
