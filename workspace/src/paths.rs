//! Paths confined to the workspace.
//!
//! The same rule as the attachment sandbox (`toolserver/src/files.rs`): a path is joined to
//! the root and canonicalised, and must stay under it; for a path that does not exist yet,
//! every part that exists must resolve inside the root before anything is created, and the
//! rest may not contain `..`. On top of that, files are opened so that a symlink swapped in
//! after the check cannot redirect them: the directory is opened and its real path read back
//! from `/proc/self/fd`, and the file is opened through that descriptor (`O_NOFOLLOW` on the
//! last part).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::WorkspaceError;

/// A workspace root (canonical).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    path: PathBuf,
}

/// A path checked to be inside the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Absolute, inside the root; canonical for what exists.
    pub path: PathBuf,
    /// Relative to the root, `/`-separated, `.` for the root itself.
    pub relative: String,
}

impl Root {
    /// The root, which must exist.
    pub fn new(path: &Path) -> Result<Self, WorkspaceError> {
        let path = path.canonicalize().map_err(WorkspaceError::io(format!(
            "cannot open the workspace {}",
            path.display()
        )))?;
        if !path.is_dir() {
            return Err(WorkspaceError::WrongType {
                path: path.display().to_string(),
                what: "not a directory",
            });
        }
        Ok(Self { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `path` relative to the root (`.` for the root).
    pub fn relative(&self, path: &Path) -> String {
        match path.strip_prefix(&self.path) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => path.display().to_string(),
        }
    }

    fn outside(path: &str) -> WorkspaceError {
        WorkspaceError::OutsideWorkspace {
            path: path.to_owned(),
        }
    }

    /// Resolves `path` (relative to the root, or absolute inside it) whether or not it exists.
    pub fn resolve(&self, path: &str) -> Result<Resolved, WorkspaceError> {
        if path.contains('\0') {
            return Err(WorkspaceError::BadRequest(
                "the path contains a NUL byte".into(),
            ));
        }
        let given = Path::new(if path.is_empty() { "." } else { path });
        let joined = self.path.join(given);
        // The longest prefix that exists (a dangling symlink counts: it exists as a link).
        let mut existing = joined.clone();
        let mut rest = Vec::new();
        while std::fs::symlink_metadata(&existing).is_err() {
            match (existing.file_name(), existing.parent()) {
                (Some(name), Some(parent)) => {
                    rest.push(name.to_owned());
                    existing = parent.to_path_buf();
                }
                _ => {
                    // `..` at the end of a missing prefix, or nothing exists at all.
                    return Err(Self::outside(path));
                }
            }
        }
        let real = existing.canonicalize().map_err(|_| {
            // A dangling symlink: where it leads cannot be checked.
            Self::outside(path)
        })?;
        if !real.starts_with(&self.path) {
            return Err(Self::outside(path));
        }
        // The missing parts are plain names: `file_name` never yields `..`, and a `..` in the
        // missing part ended the loop above as outside.
        let mut resolved = real;
        for name in rest.iter().rev() {
            resolved.push(name);
        }
        let relative = self.relative(&resolved);
        Ok(Resolved {
            path: resolved,
            relative,
        })
    }

    /// Resolves a path that must exist.
    pub fn existing(&self, path: &str) -> Result<Resolved, WorkspaceError> {
        let resolved = self.resolve(path)?;
        if std::fs::symlink_metadata(&resolved.path).is_err() {
            return Err(WorkspaceError::NotFound {
                path: path.to_owned(),
            });
        }
        Ok(resolved)
    }

    /// Whether an open descriptor's real path is inside the root.
    fn verify(&self, file: &File, path: &str) -> Result<(), WorkspaceError> {
        let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .map_err(WorkspaceError::io("cannot check an opened file"))?;
        if real.starts_with(&self.path) {
            Ok(())
        } else {
            Err(Self::outside(path))
        }
    }

    /// Opens an existing file for reading; refused if, once open, it is not inside the root.
    pub fn open_read(&self, resolved: &Resolved) -> Result<File, WorkspaceError> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&resolved.path)
            .map_err(|e| open_error(e, &resolved.relative))?;
        self.verify(&file, &resolved.relative)?;
        Ok(file)
    }

    /// Makes the parent directories of `resolved` (each checked inside the root) and opens the
    /// parent, checked.
    fn parent_dir(&self, resolved: &Resolved) -> Result<File, WorkspaceError> {
        let parent = resolved
            .path
            .parent()
            .ok_or_else(|| Self::outside(&resolved.relative))?;
        let relative_parent = parent
            .strip_prefix(&self.path)
            .map_err(|_| Self::outside(&resolved.relative))?;
        let mut dir = self.path.clone();
        for component in relative_parent.components() {
            dir.push(component);
            match std::fs::create_dir(&dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    return Err(WorkspaceError::io(format!(
                        "cannot create {}",
                        self.relative(&dir)
                    ))(e))
                }
            }
        }
        let file = File::open(parent).map_err(|e| open_error(e, &self.relative(parent)))?;
        if !file
            .metadata()
            .map_err(WorkspaceError::io("cannot check a directory"))?
            .is_dir()
        {
            return Err(WorkspaceError::WrongType {
                path: self.relative(parent),
                what: "not a directory",
            });
        }
        self.verify(&file, &resolved.relative)?;
        Ok(file)
    }

    /// Writes `content` to `resolved` atomically (a temporary file renamed over it), through
    /// the checked parent directory; a symlink at the name is replaced, never followed.
    /// Answers whether the file was created.
    pub fn write(&self, resolved: &Resolved, content: &[u8]) -> Result<bool, WorkspaceError> {
        use std::io::Write;
        let name = resolved.path.file_name().ok_or_else(|| {
            WorkspaceError::BadRequest(format!("{} names no file", resolved.relative))
        })?;
        let dir = self.parent_dir(resolved)?;
        let through = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        let target = through.join(name);
        let existed = match std::fs::symlink_metadata(&target) {
            Ok(meta) if meta.is_dir() => {
                return Err(WorkspaceError::WrongType {
                    path: resolved.relative.clone(),
                    what: "a directory",
                })
            }
            Ok(_) => true,
            Err(_) => false,
        };
        let temporary = through.join(format!(
            ".{}.switchboard-{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&temporary)
            .map_err(WorkspaceError::io(format!(
                "cannot write {}",
                resolved.relative
            )))?;
        let written = file.write_all(content).and_then(|()| file.sync_data());
        if let Err(error) = written {
            let _ = std::fs::remove_file(&temporary);
            return Err(WorkspaceError::io(format!(
                "cannot write {}",
                resolved.relative
            ))(error));
        }
        // Keep the permissions of the file replaced.
        if let Ok(meta) = std::fs::metadata(&target) {
            let _ = file.set_permissions(meta.permissions());
        }
        drop(file);
        std::fs::rename(&temporary, &target).map_err(|e| {
            let _ = std::fs::remove_file(&temporary);
            WorkspaceError::io(format!("cannot write {}", resolved.relative))(e)
        })?;
        Ok(!existed)
    }
}

fn open_error(error: std::io::Error, path: &str) -> WorkspaceError {
    match error.raw_os_error() {
        Some(libc::ENOENT) => WorkspaceError::NotFound {
            path: path.to_owned(),
        },
        // O_NOFOLLOW on a symlink: a link swapped in after the check.
        Some(libc::ELOOP) => WorkspaceError::OutsideWorkspace {
            path: path.to_owned(),
        },
        _ => WorkspaceError::io(format!("cannot open {path}"))(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::WorkspaceErrorKind;

    fn root() -> (tempfile::TempDir, Root) {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::new(dir.path()).unwrap();
        (dir, root)
    }

    #[test]
    fn paths_inside_resolve_and_paths_outside_are_refused() {
        let (_dir, root) = root();
        std::fs::create_dir(root.path().join("src")).unwrap();
        std::fs::write(root.path().join("src/a.rs"), "a").unwrap();
        assert_eq!(root.resolve("src/a.rs").unwrap().relative, "src/a.rs");
        assert_eq!(
            root.resolve("src/../src/a.rs").unwrap().relative,
            "src/a.rs"
        );
        assert_eq!(root.resolve("").unwrap().relative, ".");
        assert_eq!(
            root.resolve("new/dir/file").unwrap().relative,
            "new/dir/file"
        );
        let absolute = root.path().join("src/a.rs").display().to_string();
        assert_eq!(root.resolve(&absolute).unwrap().relative, "src/a.rs");
        for outside in [
            "/etc/passwd",
            "..",
            "../x",
            "src/../../x",
            "new/../../x",
            "/",
            "/nonexistent/x",
        ] {
            let error = root.resolve(outside).unwrap_err();
            assert_eq!(
                error.kind(),
                WorkspaceErrorKind::OutsideWorkspace,
                "{outside}"
            );
        }
        assert_eq!(
            root.resolve("a\0b").unwrap_err().kind(),
            WorkspaceErrorKind::BadRequest
        );
    }

    #[test]
    fn symlinks_leading_out_are_refused_even_dangling_ones() {
        let (_dir, root) = root();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("out")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/far", root.path().join("dangling")).unwrap();
        std::os::unix::fs::symlink("src", root.path().join("inner")).unwrap();
        std::fs::create_dir(root.path().join("src")).unwrap();
        for path in ["out", "out/x", "out/new/deeper", "dangling", "dangling/x"] {
            assert_eq!(
                root.resolve(path).unwrap_err().kind(),
                WorkspaceErrorKind::OutsideWorkspace,
                "{path}"
            );
        }
        assert_eq!(root.resolve("inner/x").unwrap().relative, "src/x");
        // Nothing was created at the far end.
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[test]
    fn writes_replace_a_symlink_instead_of_following_it() {
        let (_dir, root) = root();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("victim");
        std::fs::write(&target, "safe").unwrap();
        let resolved = root.resolve("file").unwrap();
        // A link swapped in after the check.
        std::os::unix::fs::symlink(&target, root.path().join("file")).unwrap();
        assert!(!root.write(&resolved, b"new").unwrap());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "safe");
        assert_eq!(
            std::fs::read_to_string(root.path().join("file")).unwrap(),
            "new"
        );
        assert!(std::fs::symlink_metadata(root.path().join("file"))
            .unwrap()
            .is_file());
        // And a read refuses a link swapped in.
        let read = root.resolve("readme").unwrap();
        std::os::unix::fs::symlink(&target, root.path().join("readme")).unwrap();
        assert_eq!(
            root.open_read(&read).unwrap_err().kind(),
            WorkspaceErrorKind::OutsideWorkspace
        );
    }
}
