//! Bounded output capture: an answer keeps the head or the tail of a stream within a byte and
//! a line budget while the stream is read, never the whole stream; when it is cut, the stream
//! is saved to a file (itself capped).

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::options::OutputLimits;

/// Which end of a stream an answer keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The beginning (file reads).
    Head,
    /// The end (commands: the error is usually last).
    Tail,
}

/// How a stream was cut, when it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Cut {
    /// Bytes the stream had in all.
    pub total_bytes: u64,
    /// Lines the stream had in all.
    pub total_lines: u64,
    /// Where the stream was saved, relative to the workspace (absent if saving failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saved_to: Option<String>,
    /// Bytes saved there; less than `totalBytes` when the stream was larger than the cap on
    /// saved output.
    pub saved_bytes: u64,
}

/// A stream being read: its kept end in memory, its counts, and its spill file once cut.
pub struct Capture {
    keep: Keep,
    limits: OutputLimits,
    kept: VecDeque<u8>,
    total_bytes: u64,
    newlines: u64,
    last_byte: Option<u8>,
    cut: bool,
    spill: Option<Spill>,
    spill_target: Option<(PathBuf, String)>,
}

struct Spill {
    file: Option<std::fs::File>,
    written: u64,
}

impl Capture {
    /// `spill_to`: the file to save the whole stream in once it is cut, and how to name it in
    /// the answer (relative to the workspace). `None` keeps nothing beyond the answer.
    pub fn new(keep: Keep, limits: OutputLimits, spill_to: Option<(PathBuf, String)>) -> Self {
        Self {
            keep,
            limits,
            kept: VecDeque::new(),
            total_bytes: 0,
            newlines: 0,
            last_byte: None,
            cut: false,
            spill: None,
            spill_target: spill_to,
        }
    }

    /// Takes the next chunk of the stream. Memory stays within `max_bytes` (+ one chunk while
    /// trimming).
    pub fn push(&mut self, chunk: &[u8]) {
        if chunk.is_empty() {
            return;
        }
        self.total_bytes += chunk.len() as u64;
        self.newlines += memchr_count(chunk);
        self.last_byte = chunk.last().copied();
        let over = self.kept.len() + chunk.len() > self.limits.max_bytes
            || self.newlines > self.limits.max_lines as u64;
        if over && !self.cut {
            self.cut = true;
            self.start_spill();
        }
        if let Some(spill) = &mut self.spill {
            spill.write(chunk, self.limits.max_saved_bytes);
        }
        match self.keep {
            Keep::Head => {
                let room = self.limits.max_bytes.saturating_sub(self.kept.len());
                self.kept.extend(&chunk[..chunk.len().min(room)]);
            }
            Keep::Tail => {
                let tail = &chunk[chunk.len().saturating_sub(self.limits.max_bytes)..];
                self.kept.extend(tail);
                let excess = self.kept.len().saturating_sub(self.limits.max_bytes);
                self.kept.drain(..excess);
            }
        }
    }

    /// Before anything is dropped, everything so far is in `kept`: it goes to the file first.
    fn start_spill(&mut self) {
        let Some((path, _)) = &self.spill_target else {
            return;
        };
        let file = path
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::File::create(path))
            .map_err(
                |error| tracing::warn!(path = %path.display(), %error, "cannot save cut output"),
            )
            .ok();
        let mut spill = Spill { file, written: 0 };
        let (a, b) = self.kept.as_slices();
        spill.write(a, self.limits.max_saved_bytes);
        spill.write(b, self.limits.max_saved_bytes);
        self.spill = Some(spill);
    }

    /// Bytes read so far.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// The kept text (lossy UTF-8, cut to the line budget at the kept end) and how it was cut.
    pub fn finish(mut self) -> (String, Option<Cut>) {
        if let Some(spill) = &mut self.spill {
            if let Some(file) = &mut spill.file {
                let _ = file.flush();
            }
        }
        let bytes: Vec<u8> = self.kept.iter().copied().collect();
        let text = String::from_utf8_lossy(&bytes);
        let text = trim_lines(&text, self.keep, self.limits.max_lines);
        let text = trim_partial_char(text, self.keep);
        let total_lines = self.newlines + u64::from(self.last_byte.is_some_and(|b| b != b'\n'));
        let cut = self.cut.then(|| Cut {
            total_bytes: self.total_bytes,
            total_lines,
            saved_to: self
                .spill
                .as_ref()
                .filter(|s| s.file.is_some())
                .and(self.spill_target.as_ref().map(|(_, shown)| shown.clone())),
            saved_bytes: self.spill.as_ref().map_or(0, |s| s.written),
        });
        (text, cut)
    }
}

impl Spill {
    fn write(&mut self, bytes: &[u8], cap: u64) {
        let Some(file) = &mut self.file else {
            return;
        };
        let room = cap.saturating_sub(self.written) as usize;
        let part = &bytes[..bytes.len().min(room)];
        if part.is_empty() {
            return;
        }
        if let Err(error) = file.write_all(part) {
            tracing::warn!(%error, "cannot save cut output");
            self.file = None;
            return;
        }
        self.written += part.len() as u64;
    }
}

fn memchr_count(chunk: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', chunk).count() as u64
}

/// Keeps at most `max_lines` lines at the kept end.
fn trim_lines(text: &str, keep: Keep, max_lines: usize) -> String {
    match keep {
        Keep::Head => {
            let mut end = text.len();
            if let Some((index, _)) = text.match_indices('\n').nth(max_lines.saturating_sub(1)) {
                if max_lines > 0 {
                    end = index + 1;
                }
            }
            if max_lines == 0 {
                end = 0;
            }
            text[..end].to_owned()
        }
        Keep::Tail => {
            let body = text.strip_suffix('\n').unwrap_or(text);
            let start = if max_lines == 0 {
                text.len()
            } else {
                body.rmatch_indices('\n')
                    .nth(max_lines - 1)
                    .map_or(0, |(index, _)| index + 1)
            };
            text[start..].to_owned()
        }
    }
}

/// A cut in the middle of a character shows as U+FFFD at the cut end: drop it.
fn trim_partial_char(mut text: String, keep: Keep) -> String {
    match keep {
        Keep::Head => {
            if text.ends_with('\u{FFFD}') {
                text.pop();
            }
            text
        }
        Keep::Tail => text
            .strip_prefix('\u{FFFD}')
            .map(str::to_owned)
            .unwrap_or(text),
    }
}

/// The file a cut stream is saved in: `.switchboard/output/<name>` under the workspace, and
/// how the answer names it.
pub fn spill_path(workspace: &Path, name: &str) -> (PathBuf, String) {
    let shown = format!(".switchboard/output/{name}");
    (workspace.join(&shown), shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(bytes: usize, lines: usize) -> OutputLimits {
        OutputLimits {
            max_bytes: bytes,
            max_lines: lines,
            max_saved_bytes: 100,
        }
    }

    #[test]
    fn the_tail_is_kept_within_bytes_and_lines() {
        let mut c = Capture::new(Keep::Tail, limits(12, 2), None);
        c.push(b"one\ntwo\nthree\nfour\n");
        let (text, cut) = c.finish();
        assert_eq!(text, "three\nfour\n");
        let cut = cut.unwrap();
        assert_eq!((cut.total_bytes, cut.total_lines), (19, 4));
        let mut c = Capture::new(Keep::Tail, limits(4, 100), None);
        for chunk in [b"abc".as_slice(), b"def", b"gh"] {
            c.push(chunk);
        }
        assert_eq!(c.finish().0, "efgh");
    }

    #[test]
    fn the_head_is_kept_within_bytes_and_lines() {
        let mut c = Capture::new(Keep::Head, limits(100, 2), None);
        c.push(b"one\ntwo\nthree\n");
        assert_eq!(c.finish().0, "one\ntwo\n");
        let mut c = Capture::new(Keep::Head, limits(5, 100), None);
        c.push(b"abc");
        c.push(b"defgh");
        let (text, cut) = c.finish();
        assert_eq!(text, "abcde");
        assert_eq!(cut.unwrap().total_bytes, 8);
    }

    #[test]
    fn short_output_is_whole_and_not_cut() {
        let mut c = Capture::new(Keep::Tail, limits(100, 100), None);
        c.push(b"hi\n");
        assert_eq!(c.finish(), ("hi\n".to_owned(), None));
    }

    #[test]
    fn a_cut_stream_is_saved_whole_up_to_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let (path, shown) = spill_path(dir.path(), "x.stdout");
        let mut c = Capture::new(Keep::Tail, limits(8, 100), Some((path.clone(), shown)));
        for _ in 0..30 {
            c.push(b"0123456789");
        }
        let (text, cut) = c.finish();
        assert_eq!(text, "23456789");
        let cut = cut.unwrap();
        assert_eq!(
            cut.saved_to.as_deref(),
            Some(".switchboard/output/x.stdout")
        );
        assert_eq!(cut.saved_bytes, 100);
        assert_eq!(std::fs::read(&path).unwrap(), b"0123456789".repeat(10));
    }

    #[test]
    fn a_character_split_at_the_cut_is_dropped() {
        let mut c = Capture::new(Keep::Tail, limits(3, 100), None);
        c.push("aé€".as_bytes()); // é is 2 bytes, € is 3
        assert_eq!(c.finish().0, "€");
        let mut c = Capture::new(Keep::Head, limits(2, 100), None);
        c.push("aé".as_bytes());
        assert_eq!(c.finish().0, "a");
    }
}
