//! `git` as a sandboxed program: each operation runs the real `git` under the sandbox (a
//! repository's hooks and config run there too) and parses its porcelain output into an
//! answer. [`Git::in_session`] runs it in the session's sandbox, beside the session's shell
//! commands; [`Git::new`] gives each operation a bubblewrap of its own.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::capture::{Cut, Keep};
use crate::error::SandboxError;
use crate::options::OutputLimits;
use crate::process::{RunOutput, RunSpec, Sandbox};
use crate::zygote::SessionSandbox;

/// Most commits `git.log` lists.
pub const MAX_LOG: usize = 200;
/// The timeout of one git operation.
const GIT_TIMEOUT: Duration = Duration::from_secs(120);

/// Git in one workspace.
#[derive(Debug, Clone)]
pub struct Git {
    sandbox: Arc<Sandbox>,
    /// The session's sandbox, when git runs in it.
    session: Option<Arc<SessionSandbox>>,
    root: PathBuf,
    output: OutputLimits,
}

/// `git.status`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StatusAnswer {
    /// The current branch (`None` when detached or before the first commit has a name).
    pub branch: Option<String>,
    pub upstream: Option<String>,
    pub ahead: u64,
    pub behind: u64,
    pub clean: bool,
    pub entries: Vec<StatusEntry>,
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StatusEntry {
    pub path: String,
    /// The path it was renamed or copied from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orig_path: Option<String>,
    /// The change in the index (`modified`, `added`, `deleted`, `renamed`, `copied`,
    /// `typeChanged`, `unmerged`), or `None`.
    pub staged: Option<&'static str>,
    /// The change in the working tree (same words, plus `untracked`), or `None`.
    pub unstaged: Option<&'static str>,
}

/// `git.diff`'s answer (the head of the diff is kept).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DiffAnswer {
    pub diff: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut: Option<Cut>,
}

/// One commit of `git.log`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Commit {
    pub hash: String,
    pub author: String,
    pub email: String,
    /// ISO 8601 author date.
    pub date: String,
    pub subject: String,
}

/// `git.log`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LogAnswer {
    pub commits: Vec<Commit>,
}

/// `git.commit`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CommitAnswer {
    pub hash: String,
    pub branch: Option<String>,
    /// git's own summary (`[main 1a2b3c4] message` and the file counts).
    pub summary: String,
}

/// `git.branch`'s answer: the branches, and what was done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BranchAnswer {
    pub current: Option<String>,
    pub branches: Vec<String>,
    /// The branch created by this call, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// Whether this call switched branches.
    pub switched: bool,
}

impl Git {
    /// Git whose every operation runs in a bubblewrap of its own.
    pub fn new(sandbox: Arc<Sandbox>, root: &Path, output: OutputLimits) -> Self {
        Self {
            sandbox,
            session: None,
            root: root.to_path_buf(),
            output,
        }
    }

    /// Git in the session's sandbox (the workspace is the session's).
    pub fn in_session(session: Arc<SessionSandbox>, output: OutputLimits) -> Self {
        Self {
            sandbox: Arc::clone(session.sandbox()),
            root: session.root().to_path_buf(),
            session: Some(session),
            output,
        }
    }

    async fn git(&self, args: &[&str], keep: Keep) -> Result<RunOutput, SandboxError> {
        let mut argv: Vec<OsString> = vec!["git".into(), "--no-pager".into()];
        argv.extend(args.iter().map(OsString::from));
        let spec = RunSpec {
            root: self.root.clone(),
            cwd: self.root.clone(),
            argv,
            env: vec![("GIT_OPTIONAL_LOCKS".into(), "0".into())],
            extra_writable: Vec::new(),
            timeout: GIT_TIMEOUT,
            output: self.output,
            keep,
            spill: None,
            report_cwd: false,
            merge_stderr: false,
        };
        let output = match &self.session {
            Some(session) => session.run(&spec).await?,
            None => self.sandbox.run(&spec).await?,
        };
        if output.timed_out {
            return Err(SandboxError::Git {
                message: format!(
                    "git {} ran past {} s",
                    args.join(" "),
                    GIT_TIMEOUT.as_secs()
                ),
            });
        }
        Ok(output)
    }

    /// Runs git and turns a non-zero exit into [`SandboxError::Git`] with what git said.
    async fn ok(&self, args: &[&str], keep: Keep) -> Result<RunOutput, SandboxError> {
        let output = self.git(args, keep).await?;
        if output.exit_code != Some(0) {
            let said = format!("{}\n{}", output.stderr.trim(), output.stdout.trim());
            return Err(SandboxError::Git {
                message: said.trim().to_owned(),
            });
        }
        Ok(output)
    }

    /// `git.status`.
    pub async fn status(&self) -> Result<StatusAnswer, SandboxError> {
        let output = self
            .ok(
                &[
                    "status",
                    "--porcelain=v2",
                    "--branch",
                    "-z",
                    "--untracked-files=all",
                ],
                Keep::Head,
            )
            .await?;
        Ok(parse_status(&output.stdout))
    }

    /// `git.diff {staged?, path?}`: the working tree against the index, or the index against
    /// `HEAD` with `staged`. `path` must already be resolved inside the workspace.
    pub async fn diff(&self, staged: bool, path: Option<&str>) -> Result<DiffAnswer, SandboxError> {
        let mut args = vec!["diff", "--no-color", "--no-ext-diff"];
        if staged {
            args.push("--staged");
        }
        args.push("--");
        if let Some(path) = path {
            args.push(path);
        }
        let output = self.ok(&args, Keep::Head).await?;
        Ok(DiffAnswer {
            diff: output.stdout,
            cut: output.stdout_cut,
        })
    }

    /// `git.log {limit?}` (20 by default, at most [`MAX_LOG`]).
    pub async fn log(&self, limit: Option<usize>) -> Result<LogAnswer, SandboxError> {
        let limit = limit.unwrap_or(20).clamp(1, MAX_LOG).to_string();
        let output = self
            .ok(
                &[
                    "log",
                    "-n",
                    &limit,
                    "--format=%H%x1f%an%x1f%ae%x1f%aI%x1f%s%x1e",
                ],
                Keep::Head,
            )
            .await?;
        let commits = output
            .stdout
            .split('\x1e')
            .filter_map(|record| {
                let mut fields = record.trim_start_matches('\n').split('\x1f');
                Some(Commit {
                    hash: fields.next().filter(|h| !h.is_empty())?.to_owned(),
                    author: fields.next()?.to_owned(),
                    email: fields.next()?.to_owned(),
                    date: fields.next()?.to_owned(),
                    subject: fields.next()?.to_owned(),
                })
            })
            .collect();
        Ok(LogAnswer { commits })
    }

    /// `git.commit {message, all?}`: `all` stages every tracked change first (`git commit -a`).
    pub async fn commit(&self, message: &str, all: bool) -> Result<CommitAnswer, SandboxError> {
        if message.trim().is_empty() {
            return Err(SandboxError::BadRequest(
                "message is empty; say what the commit does".into(),
            ));
        }
        if message.contains('\0') {
            return Err(SandboxError::BadRequest(
                "message contains a NUL byte".into(),
            ));
        }
        let mut args = vec!["commit", "--no-edit", "-m", message];
        if all {
            args.push("-a");
        }
        let output = self.ok(&args, Keep::Head).await?;
        let hash = self
            .ok(&["rev-parse", "HEAD"], Keep::Head)
            .await?
            .stdout
            .trim()
            .to_owned();
        Ok(CommitAnswer {
            hash,
            branch: self.current().await?,
            summary: output.stdout.trim().to_owned(),
        })
    }

    async fn current(&self) -> Result<Option<String>, SandboxError> {
        let output = self
            .git(&["symbolic-ref", "--short", "-q", "HEAD"], Keep::Head)
            .await?;
        Ok(Some(output.stdout.trim().to_owned())
            .filter(|b| output.exit_code == Some(0) && !b.is_empty()))
    }

    /// `git.branch {name?, switch?}`: no name lists the branches; a name creates it; with
    /// `switch` it switches to it, creating it when it does not exist.
    pub async fn branch(
        &self,
        name: Option<&str>,
        switch: bool,
    ) -> Result<BranchAnswer, SandboxError> {
        let mut created = None;
        let mut switched = false;
        if let Some(name) = name {
            if name.is_empty() || name.starts_with('-') || name.contains('\0') {
                return Err(SandboxError::BadRequest(format!(
                    "{name:?} is not a branch name (it may not be empty or start with '-')"
                )));
            }
            self.ok(&["check-ref-format", "--branch", name], Keep::Head)
                .await?;
            let exists = self
                .git(
                    &["rev-parse", "--verify", "-q", &format!("refs/heads/{name}")],
                    Keep::Head,
                )
                .await?
                .exit_code
                == Some(0);
            if switch {
                if exists {
                    self.ok(&["switch", name], Keep::Head).await?;
                } else {
                    self.ok(&["switch", "-c", name], Keep::Head).await?;
                    created = Some(name.to_owned());
                }
                switched = true;
            } else {
                if exists {
                    return Err(SandboxError::Git {
                        message: format!("a branch named '{name}' already exists"),
                    });
                }
                self.ok(&["branch", "--", name], Keep::Head).await?;
                created = Some(name.to_owned());
            }
        }
        let output = self
            .ok(
                &["branch", "--list", "--format=%(refname:short)"],
                Keep::Head,
            )
            .await?;
        Ok(BranchAnswer {
            current: self.current().await?,
            branches: output.stdout.lines().map(str::to_owned).collect(),
            created,
            switched,
        })
    }
}

fn change(code: char) -> Option<&'static str> {
    Some(match code {
        'M' => "modified",
        'A' => "added",
        'D' => "deleted",
        'R' => "renamed",
        'C' => "copied",
        'T' => "typeChanged",
        'U' => "unmerged",
        _ => return None,
    })
}

/// Parses `git status --porcelain=v2 --branch -z`.
pub fn parse_status(text: &str) -> StatusAnswer {
    let mut answer = StatusAnswer {
        branch: None,
        upstream: None,
        ahead: 0,
        behind: 0,
        clean: true,
        entries: Vec::new(),
    };
    let mut records = text.split('\0').filter(|r| !r.is_empty());
    while let Some(record) = records.next() {
        if let Some(header) = record.strip_prefix("# ") {
            let (key, value) = header.split_once(' ').unwrap_or((header, ""));
            match key {
                "branch.head" if value != "(detached)" => answer.branch = Some(value.to_owned()),
                "branch.upstream" => answer.upstream = Some(value.to_owned()),
                "branch.ab" => {
                    for part in value.split(' ') {
                        if let Some(n) = part.strip_prefix('+') {
                            answer.ahead = n.parse().unwrap_or(0);
                        } else if let Some(n) = part.strip_prefix('-') {
                            answer.behind = n.parse().unwrap_or(0);
                        }
                    }
                }
                _ => {}
            }
            continue;
        }
        let (kind, rest) = record.split_at(1.min(record.len()));
        let rest = rest.trim_start();
        let entry = match kind {
            "?" => Some(StatusEntry {
                path: rest.to_owned(),
                orig_path: None,
                staged: None,
                unstaged: Some("untracked"),
            }),
            "1" | "2" | "u" => {
                // Fields before the path: XY sub mH mI mW hH hI (1), + Xscore (2), + m1 m2 m3 mW h1 h2 h3 (u).
                let before = match kind {
                    "1" => 7,
                    "2" => 8,
                    _ => 9,
                };
                let mut fields = rest.splitn(before + 1, ' ');
                let xy: Vec<char> = fields.next().unwrap_or("..").chars().collect();
                let path = fields.nth(before - 1).unwrap_or("").to_owned();
                let orig_path = (kind == "2").then(|| records.next().unwrap_or("").to_owned());
                Some(StatusEntry {
                    path,
                    orig_path,
                    staged: xy.first().copied().and_then(change),
                    unstaged: xy.get(1).copied().and_then(change),
                })
            }
            _ => None,
        };
        if let Some(entry) = entry {
            answer.entries.push(entry);
        }
    }
    answer.clean = answer.entries.is_empty();
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn porcelain_v2_parses_into_entries() {
        let text = "# branch.oid abc\0# branch.head main\0# branch.upstream origin/main\0# branch.ab +2 -1\0\
1 .M N... 100644 100644 100644 aaa aaa src/a b.rs\0\
2 R. N... 100644 100644 100644 aaa aaa R100 new.rs\0old.rs\0\
? untracked.txt\0";
        let status = parse_status(text);
        assert_eq!(status.branch.as_deref(), Some("main"));
        assert_eq!(status.upstream.as_deref(), Some("origin/main"));
        assert_eq!((status.ahead, status.behind), (2, 1));
        assert!(!status.clean);
        assert_eq!(
            status.entries,
            [
                StatusEntry {
                    path: "src/a b.rs".into(),
                    orig_path: None,
                    staged: None,
                    unstaged: Some("modified")
                },
                StatusEntry {
                    path: "new.rs".into(),
                    orig_path: Some("old.rs".into()),
                    staged: Some("renamed"),
                    unstaged: None
                },
                StatusEntry {
                    path: "untracked.txt".into(),
                    orig_path: None,
                    staged: None,
                    unstaged: Some("untracked")
                },
            ]
        );
    }

    #[test]
    fn garbage_status_text_does_not_panic() {
        for text in ["", "\0\0", "1", "2 R.", "# ", "u", "? ", "1 \0 2 \0"] {
            let _ = parse_status(text);
        }
    }
}
