//! Files an agent sends and receives, confined to its run's working directory.
//!
//! A run's cwd is the only part of the file system a callable touches on its behalf: a path
//! that leaves it (`..`, an absolute path elsewhere, a symlink pointing out) is refused, and a
//! downloaded file's name is reduced to one safe component before it is joined to the cwd.

use protocol::ErrorCode;
use std::path::{Component, Path, PathBuf};

use serde_json::json;

use crate::error::ToolError;

/// At most this many files on one message (Discord's limit).
pub const MAX_FILES: usize = 10;
/// At most this many bytes per file sent.
pub const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;
/// At most this many bytes for all the files of one send.
pub const MAX_TOTAL_BYTES: u64 = 16 * 1024 * 1024;

/// A file read for sending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedFile {
    pub filename: String,
    pub content: Vec<u8>,
}

fn mib(bytes: u64) -> String {
    if bytes.is_multiple_of(1024 * 1024) {
        format!("{} MiB", bytes / (1024 * 1024))
    } else {
        format!("{bytes} bytes")
    }
}

/// The call's working directory, canonical, or a usage error saying how to give one.
pub fn run_dir(cwd: Option<&str>) -> Result<PathBuf, ToolError> {
    let cwd = cwd.filter(|c| !c.trim().is_empty()).ok_or_else(|| {
        ToolError::usage(
            ErrorCode::NoCwd,
            "This call has no working directory, so it cannot read or save files. The tools CLI sends SWITCHBOARD_CWD or its current directory; over HTTP, send the x-switchboard-cwd header. A capability token has the directory it was minted with (agent runs: the runner's cwd), or none.",
        )
    })?;
    Path::new(cwd).canonicalize().map_err(|error| {
        ToolError::usage(
            ErrorCode::BadCwd,
            format!("The working directory {cwd} cannot be used: {error}"),
        )
    })
}

/// Resolves `path` (relative to `dir`, or absolute) to a canonical path inside `dir`.
fn confined(dir: &Path, path: &str) -> Result<PathBuf, ToolError> {
    let joined = dir.join(path);
    let resolved = joined.canonicalize().map_err(|error| {
        ToolError::usage(
            ErrorCode::BadPath,
            format!("paths: cannot read {path}: {error}"),
        )
        .with_details(json!({ "field": "paths", "path": path }))
    })?;
    if !resolved.starts_with(dir) {
        return Err(ToolError::usage(
            ErrorCode::PathOutsideCwd,
            format!(
                "paths: {path} is outside the run's working directory {}; only files under it can be sent",
                dir.display()
            ),
        )
        .with_details(json!({ "field": "paths", "path": path })));
    }
    Ok(resolved)
}

/// Checks every path and the limits, then reads the files. Nothing is read until all paths
/// and sizes pass, so a refused send reads (and posts) nothing.
pub fn load_for_send(dir: &Path, paths: &[String]) -> Result<Vec<LoadedFile>, ToolError> {
    if paths.len() > MAX_FILES {
        return Err(ToolError::usage(
            ErrorCode::TooManyFiles,
            format!(
                "paths: {} files given; a message carries at most {MAX_FILES}. Send the rest in another message.",
                paths.len()
            ),
        )
        .with_details(json!({ "field": "paths", "count": paths.len(), "max": MAX_FILES })));
    }
    let mut checked = Vec::with_capacity(paths.len());
    let mut total = 0u64;
    for path in paths {
        let resolved = confined(dir, path)?;
        let metadata = std::fs::metadata(&resolved).map_err(|error| {
            ToolError::usage(
                ErrorCode::BadPath,
                format!("paths: cannot read {path}: {error}"),
            )
        })?;
        if !metadata.is_file() {
            return Err(ToolError::usage(
                ErrorCode::NotAFile,
                format!("paths: {path} is not a regular file"),
            )
            .with_details(json!({ "field": "paths", "path": path })));
        }
        let size = metadata.len();
        if size > MAX_FILE_BYTES {
            return Err(ToolError::usage(
                ErrorCode::FileTooLarge,
                format!(
                    "paths: {path} is {size} bytes; each file may be at most {}",
                    mib(MAX_FILE_BYTES)
                ),
            )
            .with_details(
                json!({ "field": "paths", "path": path, "size": size, "max": MAX_FILE_BYTES }),
            ));
        }
        total += size;
        if total > MAX_TOTAL_BYTES {
            return Err(ToolError::usage(
                ErrorCode::FilesTooLarge,
                format!(
                    "paths: the files add up to more than {}; send fewer or smaller files",
                    mib(MAX_TOTAL_BYTES)
                ),
            )
            .with_details(json!({ "field": "paths", "max": MAX_TOTAL_BYTES })));
        }
        checked.push((path, resolved));
    }
    checked
        .into_iter()
        .map(|(path, resolved)| {
            let content = read_capped(&resolved, MAX_FILE_BYTES).map_err(|error| {
                ToolError::usage(
                    ErrorCode::BadPath,
                    format!("paths: cannot read {path}: {error}"),
                )
            })?;
            let filename = resolved
                .file_name()
                .map(|n| sanitize_filename(&n.to_string_lossy()))
                .unwrap_or_else(|| "file".to_owned());
            Ok(LoadedFile { filename, content })
        })
        .collect()
}

/// Reads at most `cap` bytes (a file that grew past its checked size is refused, not cut).
fn read_capped(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut content = Vec::new();
    std::fs::File::open(path)?
        .take(cap + 1)
        .read_to_end(&mut content)?;
    if content.len() as u64 > cap {
        return Err(std::io::Error::other(format!(
            "it grew past {} while being read",
            mib(cap)
        )));
    }
    Ok(content)
}

/// One safe file name from whatever a person called their upload: the last path component,
/// without control characters, separators, leading dots or Windows-reserved characters, at
/// most 128 bytes. Never empty, never `.` or `..`.
pub fn sanitize_filename(name: &str) -> String {
    let last = name
        .rsplit(['/', '\\'])
        .find(|part| !part.is_empty() && *part != "." && *part != "..")
        .unwrap_or("");
    let mut clean: String = last
        .chars()
        .map(|c| match c {
            c if c.is_control() => '_',
            '<' | '>' | ':' | '"' | '|' | '?' | '*' => '_',
            c => c,
        })
        .collect();
    let trimmed = clean
        .trim_start_matches(['.', ' '])
        .trim_end_matches([' ', '.']);
    clean = trimmed.to_owned();
    if clean.len() > 128 {
        // Keep the extension when cutting.
        let extension = Path::new(&clean)
            .extension()
            .map(|e| e.to_string_lossy().into_owned())
            .filter(|e| e.len() <= 16)
            .unwrap_or_default();
        let mut cut = 128 - extension.len().min(127) - usize::from(!extension.is_empty());
        while !clean.is_char_boundary(cut) {
            cut -= 1;
        }
        clean.truncate(cut);
        if !extension.is_empty() {
            clean.push('.');
            clean.push_str(&extension);
        }
    }
    if clean.is_empty() {
        "attachment".to_owned()
    } else {
        clean
    }
}

/// A directory under `cwd` to save into (created when missing), or a usage error when `dir`
/// leaves the cwd.
pub fn download_dir(cwd: &Path, dir: Option<&str>) -> Result<PathBuf, ToolError> {
    let Some(dir) = dir.filter(|d| !d.trim().is_empty()) else {
        return Ok(cwd.to_path_buf());
    };
    let relative = Path::new(dir);
    let escapes = relative.is_absolute()
        || relative
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::Prefix(_)));
    if escapes {
        return Err(ToolError::usage(
            ErrorCode::PathOutsideCwd,
            format!("dir: {dir} must be a relative path inside the run's working directory, without '..'"),
        )
        .with_details(json!({ "field": "dir" })));
    }
    let target = cwd.join(relative);
    // Every part that already exists must resolve inside the cwd before anything is created:
    // a symlink pointing out must not get directories made at its far end.
    let mut prefix = cwd.to_path_buf();
    for component in relative.components() {
        prefix.push(component);
        if std::fs::symlink_metadata(&prefix).is_err() {
            break;
        }
        resolved_inside(&prefix, cwd, dir)?;
    }
    std::fs::create_dir_all(&target).map_err(|error| {
        ToolError::usage(
            ErrorCode::BadPath,
            format!("dir: cannot create {dir}: {error}"),
        )
    })?;
    // A symlink inside the cwd could still point out of it.
    resolved_inside(&target, cwd, dir)
}

/// `path` with every link resolved, refused when that leads outside `cwd` (`dir` is what the
/// caller wrote, for the message).
fn resolved_inside(path: &Path, cwd: &Path, dir: &str) -> Result<PathBuf, ToolError> {
    let resolved = path.canonicalize().map_err(|error| {
        ToolError::usage(
            ErrorCode::BadPath,
            format!("dir: cannot use {dir}: {error}"),
        )
    })?;
    if !resolved.starts_with(cwd) {
        return Err(ToolError::usage(
            ErrorCode::PathOutsideCwd,
            format!("dir: {dir} leads outside the run's working directory"),
        )
        .with_details(json!({ "field": "dir" })));
    }
    Ok(resolved)
}

/// Whether anything, even a dangling symlink, has this name.
fn taken(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// `name` in `dir`, made unique with ` (2)`, ` (3)`, ... when taken (by anything, a dangling
/// symlink included).
pub fn unique_path(dir: &Path, name: &str) -> PathBuf {
    let first = dir.join(name);
    if !taken(&first) {
        return first;
    }
    let path = Path::new(name);
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| name.to_owned());
    let extension = path.extension().map(|e| e.to_string_lossy().into_owned());
    (2..)
        .map(|n| {
            let candidate = match &extension {
                Some(ext) => format!("{stem} ({n}).{ext}"),
                None => format!("{stem} ({n})"),
            };
            dir.join(candidate)
        })
        .find(|p| !taken(p))
        .unwrap_or(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitizing_keeps_one_harmless_component() {
        assert_eq!(sanitize_filename("../../etc/passwd"), "passwd");
        assert_eq!(sanitize_filename("..\\..\\boot.ini"), "boot.ini");
        assert_eq!(sanitize_filename("/abs/path/report.pdf"), "report.pdf");
        assert_eq!(sanitize_filename(".."), "attachment");
        assert_eq!(sanitize_filename(""), "attachment");
        assert_eq!(sanitize_filename(".bashrc"), "bashrc");
        assert_eq!(sanitize_filename("a\nb\u{0}c.txt"), "a_b_c.txt");
        assert_eq!(sanitize_filename("what?.txt"), "what_.txt");
        assert_eq!(sanitize_filename("dir/"), "dir");
        let long = format!("{}.txt", "é".repeat(200));
        let cut = sanitize_filename(&long);
        assert!(cut.len() <= 128 && cut.ends_with(".txt"), "{cut}");
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("switchboard-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.canonicalize().unwrap()
    }

    #[test]
    fn paths_must_stay_in_the_cwd_and_within_the_caps() {
        let dir = temp_dir("send");
        std::fs::write(dir.join("a.txt"), b"hello").unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/b.txt"), b"world").unwrap();
        let files = load_for_send(&dir, &["a.txt".into(), "sub/b.txt".into()]).unwrap();
        assert_eq!(files[0].filename, "a.txt");
        assert_eq!(files[1].content, b"world");

        let outside = load_for_send(&dir, &["../".to_owned() + "x"]).unwrap_err();
        assert_eq!(outside.kind, protocol::ErrorKind::Usage);
        let etc = load_for_send(&dir, &["/etc/hostname".into()]).unwrap_err();
        assert!(
            etc.code == "path_outside_cwd" || etc.code == "bad_path",
            "{etc:?}"
        );
        std::os::unix::fs::symlink("/etc", dir.join("link")).unwrap();
        let linked = load_for_send(&dir, &["link/hostname".into()]).unwrap_err();
        assert!(
            linked.code == "path_outside_cwd" || linked.code == "bad_path",
            "{linked:?}"
        );

        let eleven: Vec<String> = (0..11).map(|_| "a.txt".to_owned()).collect();
        assert_eq!(
            load_for_send(&dir, &eleven).unwrap_err().code,
            "too_many_files"
        );
        let big = std::fs::File::create(dir.join("big.bin")).unwrap();
        big.set_len(MAX_FILE_BYTES + 1).unwrap();
        assert_eq!(
            load_for_send(&dir, &["big.bin".into()]).unwrap_err().code,
            "file_too_large"
        );
        for name in ["c1.bin", "c2.bin", "c3.bin"] {
            let f = std::fs::File::create(dir.join(name)).unwrap();
            f.set_len(MAX_FILE_BYTES - 1).unwrap();
        }
        let total =
            load_for_send(&dir, &["c1.bin".into(), "c2.bin".into(), "c3.bin".into()]).unwrap_err();
        assert_eq!(total.code, "files_too_large");
        assert_eq!(
            load_for_send(&dir, &["sub".into()]).unwrap_err().code,
            "not_a_file"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn download_dirs_stay_in_the_cwd_and_names_do_not_clash() {
        let dir = temp_dir("download");
        assert_eq!(download_dir(&dir, None).unwrap(), dir);
        let inbox = download_dir(&dir, Some("inbox/today")).unwrap();
        assert!(inbox.is_dir() && inbox.starts_with(&dir));
        assert!(download_dir(&dir, Some("../out")).is_err());
        assert!(download_dir(&dir, Some("/tmp")).is_err());
        std::os::unix::fs::symlink("/tmp", dir.join("escape")).unwrap();
        assert!(download_dir(&dir, Some("escape")).is_err());
        // Refused before anything is made at the far end of the link.
        let far = format!("switchboard-files-far-{}", std::process::id());
        let refused = download_dir(&dir, Some(&format!("escape/{far}/deeper"))).unwrap_err();
        assert_eq!(refused.code, "path_outside_cwd");
        assert!(
            !Path::new("/tmp").join(&far).exists(),
            "a directory was created outside the cwd"
        );
        std::fs::write(dir.join("a.txt"), b"1").unwrap();
        assert_eq!(unique_path(&dir, "a.txt"), dir.join("a (2).txt"));
        std::os::unix::fs::symlink(dir.join("nowhere"), dir.join("dangling")).unwrap();
        assert_eq!(unique_path(&dir, "dangling"), dir.join("dangling (2)"));
        assert_eq!(unique_path(&dir, "b.txt"), dir.join("b.txt"));
        assert!(run_dir(None).is_err());
        assert!(run_dir(Some("/definitely/not/here")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
