//! Instruction files: `AGENTS.md`, `CLAUDE.md` and `.switchboard/instructions.md` in every
//! directory from the session's workspace up to and including the workspace root, read
//! farthest first (the root's), nearest last, so the most specific words come last.
//!
//! - A file whose real path (symlinks resolved) leaves the root is not read: a workspace
//!   cannot pull `/etc/passwd` or another session's files into the prompt by a link.
//! - Files are opened without following a final symlink and without blocking (a FIFO put in
//!   place of a file is refused, not waited on), then checked to be regular files.
//! - A file that is not UTF-8 text, holds NUL bytes, or cannot be read is skipped, with the
//!   reason, for the runner's log.
//! - All files together are capped at `max_chars` (`agent.instructions_max_chars`): when
//!   they are longer, each file longer than a fair share is cut to its head and tail with a
//!   marker between, the shorter files staying whole (the share is the largest that makes
//!   the total fit).
//!
//! Instructions are only text in the system prompt: they never widen the run's scope or its
//! rules, which the call engine enforces whatever the prompt says.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The file names read in each directory, in this order.
pub const FILE_NAMES: [&str; 3] = ["AGENTS.md", "CLAUDE.md", ".switchboard/instructions.md"];

/// The default of `agent.instructions_max_chars`.
pub const DEFAULT_MAX_CHARS: usize = 20_000;

/// What a file may hold at most to be read whole; longer files are read head and tail only.
const READ_MAX_BYTES: u64 = 1024 * 1024;

/// One instruction file, as it goes into the system prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstructionFile {
    /// Its path relative to the root (`AGENTS.md`, `team/app/CLAUDE.md`).
    pub path: String,
    /// Its text, cut to its share.
    pub text: String,
    /// How many characters were cut from its middle (0 when whole).
    pub cut_chars: usize,
}

impl InstructionFile {
    /// The block in the system prompt: the path, then the text.
    pub fn render(&self) -> String {
        if self.text.is_empty() && self.cut_chars > 0 {
            return format!(
                "Instructions from {}: ({} characters, cut: over agent.instructions_max_chars)",
                self.path, self.cut_chars
            );
        }
        format!("Instructions from {}:\n{}", self.path, self.text)
    }
}

/// Why a file was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// Its real path is outside the root (a symlink out of it).
    LeavesRoot,
    /// It is not a regular file (a directory, FIFO, socket, device).
    NotAFile,
    /// It holds NUL bytes.
    Binary,
    /// It is not UTF-8.
    NotUtf8,
    /// It could not be opened or read.
    Unreadable(String),
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SkipReason::LeavesRoot => f.write_str("it leads out of the workspace root"),
            SkipReason::NotAFile => f.write_str("it is not a regular file"),
            SkipReason::Binary => f.write_str("it is binary (holds NUL bytes)"),
            SkipReason::NotUtf8 => f.write_str("it is not UTF-8 text"),
            SkipReason::Unreadable(why) => write!(f, "it cannot be read: {why}"),
        }
    }
}

/// A file that exists but was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Its path relative to the root.
    pub path: String,
    /// Why.
    pub reason: SkipReason,
}

/// What discovery found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Instructions {
    /// The files read, farthest first, nearest last.
    pub files: Vec<InstructionFile>,
    /// The files skipped, with why.
    pub skipped: Vec<Skipped>,
}

/// Why discovery could not start.
#[derive(Debug, thiserror::Error)]
pub enum InstructionsError {
    /// The root or the workspace does not exist or cannot be resolved.
    #[error("cannot resolve {path}: {source}")]
    Resolve {
        /// The path as given.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The workspace is not inside the root.
    #[error("the workspace {workspace} is not inside the workspace root {root}")]
    OutsideRoot {
        /// The workspace, resolved.
        workspace: PathBuf,
        /// The root, resolved.
        root: PathBuf,
    },
}

/// Reads the instruction files from `workspace` up to and including `root` (see the module
/// docs), capped at `max_chars` in all.
pub fn discover(
    root: &Path,
    workspace: &Path,
    max_chars: usize,
) -> Result<Instructions, InstructionsError> {
    let resolve = |path: &Path| {
        path.canonicalize()
            .map_err(|source| InstructionsError::Resolve {
                path: path.to_owned(),
                source,
            })
    };
    let root = resolve(root)?;
    let workspace = resolve(workspace)?;
    let Ok(below) = workspace.strip_prefix(&root) else {
        return Err(InstructionsError::OutsideRoot { workspace, root });
    };
    // The root first, then each directory down to the workspace.
    let mut dirs = vec![root.clone()];
    let mut dir = root.clone();
    for part in below.components() {
        dir.push(part);
        dirs.push(dir.clone());
    }

    let mut found = Instructions::default();
    let mut texts = Vec::new();
    for dir in &dirs {
        for name in FILE_NAMES {
            let path = dir.join(name);
            let shown = path
                .strip_prefix(&root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            // symlink_metadata: a dangling link is still "there" (and skipped below).
            if path.symlink_metadata().is_err() {
                continue;
            }
            match read(&root, &path, max_chars) {
                Ok(text) => texts.push((shown, text)),
                Err(reason) => found.skipped.push(Skipped {
                    path: shown,
                    reason,
                }),
            }
        }
    }
    found.files = cap(texts, max_chars);
    Ok(found)
}

/// One file's text, if it may be read: inside the root once resolved, a regular file, UTF-8
/// without NUL. Files over [`READ_MAX_BYTES`] are read head and tail only (the cap keeps no
/// more than that anyway).
fn read(root: &Path, path: &Path, max_chars: usize) -> Result<String, SkipReason> {
    let real = path
        .canonicalize()
        .map_err(|e| SkipReason::Unreadable(e.to_string()))?;
    if !real.starts_with(root) {
        return Err(SkipReason::LeavesRoot);
    }
    let mut file = open_no_follow(&real).map_err(|e| SkipReason::Unreadable(e.to_string()))?;
    let meta = file
        .metadata()
        .map_err(|e| SkipReason::Unreadable(e.to_string()))?;
    if !meta.is_file() {
        return Err(SkipReason::NotAFile);
    }
    let bytes = if meta.len() <= READ_MAX_BYTES {
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        (&mut file)
            .take(READ_MAX_BYTES)
            .read_to_end(&mut bytes)
            .map_err(|e| SkipReason::Unreadable(e.to_string()))?;
        bytes
    } else {
        // A character is at most 4 bytes: this much of each end holds more than the cap keeps.
        let end = (max_chars as u64 * 4 + 4).min(READ_MAX_BYTES / 2);
        let mut head = Vec::new();
        (&mut file)
            .take(end)
            .read_to_end(&mut head)
            .map_err(|e| SkipReason::Unreadable(e.to_string()))?;
        let mut tail = Vec::new();
        file.seek(SeekFrom::End(-(end as i64)))
            .and_then(|_| (&mut file).take(end).read_to_end(&mut tail))
            .map_err(|e| SkipReason::Unreadable(e.to_string()))?;
        let head = cut_to_char(&head, false);
        let tail = cut_to_char(&tail, true);
        let mut bytes = head.to_vec();
        bytes.extend_from_slice(
            format!("\n[… {} bytes not read …]\n", meta.len() - 2 * end).as_bytes(),
        );
        bytes.extend_from_slice(tail);
        bytes
    };
    if bytes.contains(&0) {
        return Err(SkipReason::Binary);
    }
    String::from_utf8(bytes).map_err(|_| SkipReason::NotUtf8)
}

/// The bytes without a character cut in two at the cut end (`at_start`: the tail's start).
fn cut_to_char(bytes: &[u8], at_start: bool) -> &[u8] {
    if at_start {
        let skip = bytes
            .iter()
            .take(4)
            .take_while(|b| (**b & 0xC0) == 0x80)
            .count();
        &bytes[skip..]
    } else {
        let mut end = bytes.len();
        for back in 1..=4.min(bytes.len()) {
            let b = bytes[bytes.len() - back];
            if b & 0xC0 != 0x80 {
                // The start of the last character: keep it only if it is complete.
                let width = match b {
                    0x00..=0x7F => 1,
                    0xC0..=0xDF => 2,
                    0xE0..=0xEF => 3,
                    _ => 4,
                };
                if width > back {
                    end = bytes.len() - back;
                }
                break;
            }
        }
        &bytes[..end]
    }
}

#[cfg(unix)]
fn open_no_follow(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
}

#[cfg(not(unix))]
fn open_no_follow(path: &Path) -> std::io::Result<File> {
    File::open(path)
}

/// The files cut so that all their characters together stay within `max_chars`.
fn cap(texts: Vec<(String, String)>, max_chars: usize) -> Vec<InstructionFile> {
    let lengths: Vec<usize> = texts.iter().map(|(_, t)| t.chars().count()).collect();
    let total: usize = lengths.iter().sum();
    let share = if total <= max_chars {
        usize::MAX
    } else {
        fair_share(&lengths, max_chars)
    };
    texts
        .into_iter()
        .zip(lengths)
        .map(|((path, text), len)| {
            if len <= share {
                InstructionFile {
                    path,
                    text,
                    cut_chars: 0,
                }
            } else {
                let (text, cut_chars) = head_and_tail(&text, len, share);
                InstructionFile {
                    path,
                    text,
                    cut_chars,
                }
            }
        })
        .collect()
}

/// The largest per-file share `s` with `Σ min(len, s) ≤ max` (each cut file also spends
/// [`MARKER_ALLOWANCE`] of its share on the marker).
fn fair_share(lengths: &[usize], max: usize) -> usize {
    let mut sorted = lengths.to_vec();
    sorted.sort_unstable();
    let mut left = max;
    let mut remaining = sorted.len();
    for &len in &sorted {
        let share = left / remaining.max(1);
        if len <= share {
            left -= len;
            remaining -= 1;
        } else {
            return share;
        }
    }
    usize::MAX
}

/// Room a cut file's share keeps for the marker between head and tail.
const MARKER_ALLOWANCE: usize = 40;

/// `text` (of `len` chars) cut to at most `share` chars: its head and tail, the marker between.
fn head_and_tail(text: &str, len: usize, share: usize) -> (String, usize) {
    if share <= MARKER_ALLOWANCE {
        // No room for text and a marker: nothing of it (its path still shows it was there).
        return (String::new(), len);
    }
    let keep = share - MARKER_ALLOWANCE;
    let head = keep / 2;
    let tail = keep - head;
    let cut = len - head - tail;
    let head_end = text.char_indices().nth(head).map_or(text.len(), |(i, _)| i);
    let tail_start = text
        .char_indices()
        .nth(len - tail)
        .map_or(text.len(), |(i, _)| i);
    let marker = format!("\n[… {cut} characters cut …]\n");
    let mut out = String::with_capacity(head_end + marker.len() + text.len() - tail_start);
    out.push_str(&text[..head_end]);
    out.push_str(&marker);
    out.push_str(&text[tail_start..]);
    (out, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fair_share_leaves_short_files_whole() {
        assert_eq!(fair_share(&[100, 100], 1000), usize::MAX);
        // 100 fits, the other two share 900.
        assert_eq!(fair_share(&[100, 5000, 5000], 1000), 450);
        assert_eq!(fair_share(&[5000], 1000), 1000);
    }

    #[test]
    fn head_and_tail_keep_both_ends_and_say_how_much_was_cut() {
        let text: String = ('a'..='z').cycle().take(1000).collect();
        let (cut, n) = head_and_tail(&text, 1000, 140);
        assert!(cut.starts_with("abcdefghij"));
        assert!(cut.ends_with(&text[950..]));
        assert_eq!(n, 900);
        assert!(cut.contains("[… 900 characters cut …]"));
        assert!(cut.chars().count() <= 140);
    }

    #[test]
    fn utf8_ends_are_not_split() {
        let bytes = "aé".as_bytes();
        assert_eq!(cut_to_char(&bytes[..2], false), b"a");
        assert_eq!(cut_to_char(&bytes[2..], true), b"");
        assert_eq!(cut_to_char(bytes, false), bytes);
    }
}
