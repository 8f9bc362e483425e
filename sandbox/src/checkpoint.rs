//! Checkpoints: before a run's first change to its workspace, a snapshot in a shadow git
//! repository kept outside the workspace (and so outside its own `.git`); an undo puts back
//! what the run changed.
//!
//! The shadow repository uses the workspace as its work tree (`GIT_DIR=shadow`,
//! `GIT_WORK_TREE=workspace`), so it honours the workspace's `.gitignore` (build output is not
//! copied) and never sees `.git` directories. Its git runs in the sandbox like any other, with
//! the shadow directory as a second writable place. Each run's snapshots are refs:
//! `refs/runs/<run>/before` and, once the run ended, `refs/runs/<run>/after`; the order of the
//! runs is a line per run in `<shadow>/runs`.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::capture::Keep;
use crate::error::SandboxError;
use crate::options::OutputLimits;
use crate::process::{RunOutput, RunSpec, Sandbox};

const TIMEOUT: Duration = Duration::from_secs(300);
/// Runs remembered for undo; older ones are forgotten (their refs deleted at the next start).
const MAX_RUNS: usize = 100;

/// The checkpoints of one workspace.
#[derive(Debug, Clone)]
pub struct Checkpoints {
    sandbox: Arc<Sandbox>,
    root: PathBuf,
    shadow: PathBuf,
}

/// What an undo did to one path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Restored {
    pub path: String,
    /// `restored` (changed by the run: old content back), `removed` (created by the run) or
    /// `recreated` (deleted by the run).
    pub action: &'static str,
}

/// `workspace.undo`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UndoAnswer {
    pub run: String,
    pub restored: Vec<Restored>,
}

/// A run name becomes part of a ref: only `[A-Za-z0-9._-]`, at most 100 characters.
fn valid_run(run: &str) -> Result<(), SandboxError> {
    let ok = !run.is_empty()
        && run.len() <= 100
        && !run.starts_with(['.', '-'])
        && !run.contains("..")
        && !run.ends_with(".lock")
        && run
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(SandboxError::BadRequest(format!(
            "{run:?} is not a run id (letters, digits, '.', '_' and '-', at most 100)"
        )))
    }
}

impl Checkpoints {
    /// Checkpoints of the workspace `root` kept in `shadow`, which must be outside it.
    pub fn new(sandbox: Arc<Sandbox>, root: &Path, shadow: &Path) -> Result<Self, SandboxError> {
        let root = root.canonicalize().map_err(SandboxError::io(format!(
            "cannot open the workspace {}",
            root.display()
        )))?;
        std::fs::create_dir_all(shadow).map_err(SandboxError::io(format!(
            "cannot make {}",
            shadow.display()
        )))?;
        let shadow = shadow.canonicalize().map_err(SandboxError::io(format!(
            "cannot open {}",
            shadow.display()
        )))?;
        if shadow.starts_with(&root) || root.starts_with(&shadow) {
            return Err(SandboxError::BadRequest(format!(
                "the checkpoint directory {} must be outside the workspace {}",
                shadow.display(),
                root.display()
            )));
        }
        Ok(Self {
            sandbox,
            root,
            shadow,
        })
    }

    async fn git_script(&self, script: &str, args: &[&str]) -> Result<RunOutput, SandboxError> {
        let mut argv: Vec<OsString> = vec![
            "/bin/sh".into(),
            "-c".into(),
            script.into(),
            "checkpoint".into(),
        ];
        argv.extend(args.iter().map(OsString::from));
        let shadow = self.shadow.display().to_string();
        let spec = RunSpec {
            root: self.root.clone(),
            cwd: self.root.clone(),
            argv,
            env: vec![
                ("GIT_DIR".into(), shadow.clone()),
                ("GIT_WORK_TREE".into(), self.root.display().to_string()),
                ("GIT_AUTHOR_NAME".into(), "switchboard".into()),
                ("GIT_AUTHOR_EMAIL".into(), "switchboard@localhost".into()),
                ("GIT_COMMITTER_NAME".into(), "switchboard".into()),
                ("GIT_COMMITTER_EMAIL".into(), "switchboard@localhost".into()),
                ("SHADOW".into(), shadow),
            ],
            extra_writable: vec![self.shadow.clone()],
            timeout: TIMEOUT,
            output: OutputLimits::default(),
            keep: Keep::Head,
            spill: None,
            report_cwd: false,
            merge_stderr: false,
        };
        let output = self.sandbox.run(&spec).await?;
        if output.timed_out || output.exit_code != Some(0) {
            return Err(SandboxError::Git {
                message: format!(
                    "checkpoint: {}{}",
                    output.stderr.trim(),
                    if output.timed_out { " (timed out)" } else { "" }
                ),
            });
        }
        Ok(output)
    }

    fn runs_file(&self) -> PathBuf {
        self.shadow.join("runs")
    }

    fn runs(&self) -> Vec<String> {
        std::fs::read_to_string(self.runs_file())
            .unwrap_or_default()
            .lines()
            .filter(|l| valid_run(l).is_ok())
            .map(str::to_owned)
            .collect()
    }

    fn write_runs(&self, runs: &[String]) -> Result<(), SandboxError> {
        let mut text = runs.join("\n");
        text.push('\n');
        let temporary = self.shadow.join("runs.new");
        std::fs::write(&temporary, text)
            .and_then(|()| std::fs::rename(&temporary, self.runs_file()))
            .map_err(SandboxError::io("cannot record the checkpoint"))
    }

    /// Snapshots the workspace before `run` changes it. Only the run's first call takes one
    /// (later calls answer `false`); a snapshot of a workspace that changed since the run's
    /// snapshot would lose what the run did.
    pub async fn before_change(&self, run: &str) -> Result<bool, SandboxError> {
        valid_run(run)?;
        if self.runs().iter().any(|r| r == run) {
            return Ok(false);
        }
        self.snapshot(run, "before").await?;
        let mut runs = self.runs();
        runs.push(run.to_owned());
        let forgotten: Vec<String> = runs.drain(..runs.len().saturating_sub(MAX_RUNS)).collect();
        self.write_runs(&runs)?;
        if !forgotten.is_empty() {
            let refs: Vec<String> = forgotten
                .iter()
                .flat_map(|r| {
                    [
                        format!("refs/runs/{r}/before"),
                        format!("refs/runs/{r}/after"),
                    ]
                })
                .collect();
            let refs: Vec<&str> = refs.iter().map(String::as_str).collect();
            let _ = self
                .git_script(
                    "for r in \"$@\"; do git update-ref -d \"$r\" 2>/dev/null; done; exit 0",
                    &refs,
                )
                .await;
        }
        Ok(true)
    }

    /// Snapshots the workspace as `run` left it, so that an undo touches only what the run
    /// changed (not what someone changed after it). Without it, undo compares with the
    /// workspace as it is.
    pub async fn after_run(&self, run: &str) -> Result<(), SandboxError> {
        valid_run(run)?;
        if !self.runs().iter().any(|r| r == run) {
            return Ok(()); // The run changed nothing.
        }
        self.snapshot(run, "after").await
    }

    async fn snapshot(&self, run: &str, which: &str) -> Result<(), SandboxError> {
        const SCRIPT: &str = r#"set -e
if [ ! -f "$SHADOW/HEAD" ]; then
  git init -q
  git config core.autocrlf false
  git config core.quotePath false
  git config gc.auto 0
  mkdir -p "$SHADOW/info"
  printf '.switchboard/\n' > "$SHADOW/info/exclude"
fi
git add -A
tree=$(git write-tree)
commit=$(git commit-tree "$tree" -m "$1 $2")
git update-ref "refs/runs/$1/$2" "$commit"
"#;
        self.git_script(SCRIPT, &[run, which]).await.map(drop)
    }

    /// The run that `undo` without a name undoes: the last one with a checkpoint.
    pub fn last_run(&self) -> Option<String> {
        self.runs().pop()
    }

    /// Puts the workspace back as it was before `run` (the last run when `None`): files it
    /// changed get their old content, files it created are removed, files it deleted come
    /// back. The run is then forgotten (a second undo goes one run further back).
    pub async fn undo(&self, run: Option<&str>) -> Result<UndoAnswer, SandboxError> {
        let run = match run {
            Some(run) => {
                valid_run(run)?;
                if !self.runs().iter().any(|r| r == run) {
                    return Err(SandboxError::NoCheckpoint {
                        run: Some(run.to_owned()),
                    });
                }
                run.to_owned()
            }
            None => self
                .last_run()
                .ok_or(SandboxError::NoCheckpoint { run: None })?,
        };
        // The run's end state: its `after` snapshot, or the workspace now.
        const DIFF: &str = r#"set -e
before="refs/runs/$1/before"
if git rev-parse -q --verify "refs/runs/$1/after" >/dev/null; then
  after="refs/runs/$1/after"
else
  git add -A
  after=$(git commit-tree "$(git write-tree)" -m "$1 now")
fi
git diff --name-status -z --no-renames "$before" "$after"
"#;
        let diff = self.git_script(DIFF, &[&run]).await?;
        if diff.stdout_cut.is_some() {
            return Err(SandboxError::Git {
                message: "the run changed more paths than an undo lists; restore from the shadow repository by hand".into(),
            });
        }
        let mut restored = Vec::new();
        let mut fields = diff.stdout.split('\0').filter(|f| !f.is_empty());
        while let (Some(status), Some(path)) = (fields.next(), fields.next()) {
            let action = match status.chars().next() {
                Some('A') => "removed",
                Some('D') => "recreated",
                _ => "restored",
            };
            restored.push(Restored {
                path: path.to_owned(),
                action,
            });
        }
        // The path lists go through files in the shadow directory (NUL-separated), never
        // through a command line that could be too long or parsed as options.
        let write_list = |name: &str, paths: &mut dyn Iterator<Item = &Restored>| {
            let mut file = std::fs::File::create(self.shadow.join(name))?;
            for entry in paths {
                file.write_all(entry.path.as_bytes())?;
                file.write_all(b"\0")?;
            }
            Ok::<(), std::io::Error>(())
        };
        write_list(
            "undo-checkout",
            &mut restored.iter().filter(|r| r.action != "removed"),
        )
        .and_then(|()| {
            write_list(
                "undo-remove",
                &mut restored.iter().filter(|r| r.action == "removed"),
            )
        })
        .map_err(SandboxError::io("cannot write the undo lists"))?;
        const RESTORE: &str = r#"set -e
if [ -s "$SHADOW/undo-checkout" ]; then
  git checkout "refs/runs/$1/before" --pathspec-from-file="$SHADOW/undo-checkout" --pathspec-file-nul
fi
if [ -s "$SHADOW/undo-remove" ]; then
  xargs -0 rm -f -- < "$SHADOW/undo-remove"
  # Directories the run made and that are empty now go too.
  xargs -0 -n 1 dirname < "$SHADOW/undo-remove" | sort -ru | while IFS= read -r d; do
    [ "$d" = . ] || rmdir -p -- "$d" 2>/dev/null || true
  done
fi
"#;
        self.git_script(RESTORE, &[&run]).await?;
        let mut runs = self.runs();
        runs.retain(|r| *r != run);
        self.write_runs(&runs)?;
        Ok(UndoAnswer { run, restored })
    }
}
