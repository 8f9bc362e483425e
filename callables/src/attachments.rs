//! `attachment.download`: the files people posted, saved into the run's working directory.

use protocol::ErrorCode;
use std::io::Write;
use std::path::Path;

use async_trait::async_trait;
use entity::Snowflake;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::ToolError;
use crate::invocation::{parse_id, Invocation, PlanContext};
use crate::registry::{
    example, output, output_schema, Planned, SessionRequest, Tool, ToolOutput, ToolSpec,
};
use crate::run_files as files;
use crate::surface::Fetched;
use protocol::Effects;

pub struct DownloadAttachments;

/// A checked download: which message, into which directory.
pub struct DownloadPlan {
    message_id: Snowflake,
    dir: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DownloadInput {
    /// A directory inside the run's working directory to save into (created when missing);
    /// default: the working directory itself.
    pub dir: Option<String>,
    /// The message whose attachments to save; default: the message that started this run.
    pub message_id: Option<String>,
    /// Channel id, <#id>, or configured token of that message; defaults to your context's
    /// session.
    pub session_id: Option<String>,
}

/// A saved file.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Saved {
    filename: String,
    /// Relative to the working directory.
    path: String,
    size: u64,
}

/// A file over the size cap.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Skipped {
    filename: String,
    size: u64,
    reason: String,
}

/// An attachment that could not be fetched or saved; the others still were.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Failed {
    filename: String,
    #[schemars(with = "String")]
    code: ErrorCode,
    reason: String,
}

impl Failed {
    fn from_error(filename: &str, error: &ToolError) -> Failed {
        Failed {
            filename: filename.to_owned(),
            code: error.code.clone(),
            reason: error.message.clone(),
        }
    }
}

/// Writes `content` to a new file named after `filename` in `dir`; never overwrites.
fn save(dir: &Path, filename: &str, content: &[u8]) -> std::io::Result<std::path::PathBuf> {
    let name = files::sanitize_filename(filename);
    let mut attempts = 0;
    loop {
        let path = files::unique_path(dir, &name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut file) => {
                file.write_all(content)?;
                file.sync_all()?;
                return Ok(path);
            }
            // Someone took the name between the check and the open: pick the next one.
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists && attempts < 8 => {
                attempts += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

#[async_trait]
impl Tool for DownloadAttachments {
    type Input = DownloadInput;
    type Plan = DownloadPlan;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "attachment.download",
            description: "Save the attachments of the message that started this run into the working directory.",
            help: "Saves every attachment of the trigger message (or of `messageId`) into the run's working directory, or `dir` inside it. File names are reduced to one safe component (`../../etc/passwd` is saved as `passwd`) and never overwrite: a taken name (even a dangling symlink) gets ` (2)`. A file larger than the server's cap (toolserver.download_max_bytes) is not saved and is listed under `skipped`; one that could not be fetched or saved is listed under `failed` while the others are still saved. Returns the saved files' paths relative to the working directory.",
            // It writes files (into the run's directory only, never overwriting).
            mutating: true,
            primary: Some("dir"),
            title: "Download attachments",
            // Adds files, and reaches the platform's file host.
            effects: Effects::ADD,
            output_schema: Some(output_schema::<Downloaded<'static>>()),
            examples: vec![
                example("Save the trigger's attachments", "tools attachment.download", json!({})),
                example("Save into inbox/", "tools attachment.download inbox", json!({"dir": "inbox"})),
            ],
        }
    }

    fn plan(
        &self,
        cx: &PlanContext<'_>,
        input: DownloadInput,
    ) -> Result<Planned<DownloadPlan>, ToolError> {
        let message_id = match input.message_id.as_deref() {
            Some(id) => parse_id("messageId", id)?,
            None => cx.context.trigger_message_id.ok_or_else(|| {
                ToolError::usage(
                    ErrorCode::NoMessage,
                    "This call was not started by a message, so there is no trigger to read. Pass messageId (and sessionId when it is elsewhere).",
                )
            })?,
        };
        Ok(Planned::in_session(
            DownloadPlan {
                message_id,
                dir: input.dir,
            },
            SessionRequest::session_id(input.session_id.as_deref(), 0),
        ))
    }

    async fn run(&self, cx: &Invocation<'_>, plan: DownloadPlan) -> Result<ToolOutput, ToolError> {
        let target = cx.target()?;
        let cwd = files::run_dir(cx.context.cwd.as_deref())?;
        let message_id = plan.message_id;
        let message = cx.cached_message(&target, message_id)?;
        let dir = files::download_dir(&cwd, plan.dir.as_deref())?;
        let cap = cx.settings().config().toolserver.download_max_bytes;
        let mut saved = Vec::new();
        let mut skipped = Vec::new();
        let mut failed = Vec::new();
        for attachment in &message.attachments {
            let too_large = |size: u64| Skipped {
                filename: attachment.filename.clone(),
                size,
                reason: format!("larger than the {cap}-byte cap (toolserver.download_max_bytes)"),
            };
            if attachment.size > cap {
                skipped.push(too_large(attachment.size));
                continue;
            }
            let fetched = match cx.surface().fetch_attachment(attachment, cap).await {
                Ok(fetched) => fetched,
                Err(error) => {
                    failed.push(Failed::from_error(&attachment.filename, &error.into()));
                    continue;
                }
            };
            let content = match fetched {
                Fetched::Bytes(content) => content,
                Fetched::OverLimit => {
                    skipped.push(too_large(attachment.size.max(cap + 1)));
                    continue;
                }
            };
            let (dir, filename) = (dir.clone(), attachment.filename.clone());
            let size = content.len() as u64;
            let written = tokio::task::spawn_blocking(move || save(&dir, &filename, &content))
                .await
                .map_err(|e| ToolError::internal(format!("saving the file failed: {e}")))?;
            let path = match written {
                Ok(path) => path,
                Err(error) => {
                    failed.push(Failed {
                        filename: attachment.filename.clone(),
                        code: ErrorCode::SaveFailed,
                        reason: format!("cannot save it: {error}"),
                    });
                    continue;
                }
            };
            let relative = path.strip_prefix(&cwd).unwrap_or(&path);
            saved.push(Saved {
                filename: attachment.filename.clone(),
                path: relative.to_string_lossy().into_owned(),
                size,
            });
        }
        // Nothing saved and something failed: the call failed, and says what was tried.
        if saved.is_empty() {
            if let Some(first) = failed.first() {
                return Err(ToolError::new(
                    if first.code == ErrorCode::SaveFailed {
                        protocol::ErrorKind::Internal
                    } else {
                        protocol::ErrorKind::Unavailable
                    },
                    first.code.clone(),
                    format!(
                        "No attachment was saved: {} {}",
                        first.filename, first.reason
                    ),
                )
                .with_details(json!({ "failed": failed, "skipped": skipped })));
            }
        }
        output(&Downloaded {
            message_id: message_id.to_string(),
            dir: dir.to_string_lossy(),
            files: saved,
            skipped,
            failed,
        })
    }
}

/// `attachment.download`'s answer.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Downloaded<'a> {
    /// The message whose files these are.
    message_id: String,
    /// The directory they were saved into.
    dir: std::borrow::Cow<'a, str>,
    /// What was saved.
    files: Vec<Saved>,
    /// What was over the size cap.
    skipped: Vec<Skipped>,
    /// What could not be fetched or saved.
    failed: Vec<Failed>,
}
