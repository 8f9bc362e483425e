//! `switchboard memory list|forget`: the operator reads and deletes the agent's notes on a
//! running switchboard, through `memory.read` / `memory.forget` and, for every note at once,
//! the operator callable `admin.memory.list` (audited like any call).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use serde_json::{json, Value};

use super::{Failed, Remote};
use crate::cli::{ListScopeArgs, MemoryCommand, NoteScopeArgs};

/// Runs one `switchboard memory ...` command.
pub fn memory(flag_config: Option<&Path>, command: &MemoryCommand) -> ExitCode {
    let result = match command {
        MemoryCommand::List { scope, json } => list(
            &Remote::new(flag_config, scope.url.as_deref()),
            scope,
            *json,
        ),
        MemoryCommand::Forget { scope, key } => {
            forget(&Remote::new(flag_config, scope.url.as_deref()), scope, key)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failed(message, code)) => {
            eprintln!("error: {message}");
            ExitCode::from(code)
        }
    }
}

/// The callables' scope fields for `--session` / `--user`; `None` for neither.
fn scope_fields(session: Option<&String>, user: Option<&String>) -> Option<Value> {
    match (session, user) {
        (Some(session), _) => Some(json!({"scope": "session", "sessionId": session})),
        (None, Some(user)) => Some(json!({"scope": "user", "userId": user})),
        (None, None) => None,
    }
}

/// The callables' scope fields for a note to forget (clap requires one of the two).
fn scope_input(scope: &NoteScopeArgs) -> Value {
    scope_fields(scope.session.as_ref(), scope.user.as_ref())
        .unwrap_or_else(|| json!({"scope": "session"}))
}

/// The most pages `list` reads (1,000 notes each): a bound, far above what 50 notes per
/// scope make in practice.
const MAX_PAGES: usize = 1_000;

/// Every note: `admin.memory.list` page after page.
fn all_notes(remote: &Remote) -> Result<Vec<Value>, Failed> {
    let mut notes = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let mut input = json!({});
        if let Some(after) = &after {
            input["after"] = json!(after);
        }
        let page = remote.call("admin.memory.list", &input)?;
        notes.extend(page["notes"].as_array().cloned().unwrap_or_default());
        match page["next"].as_str() {
            Some(next) if after.as_deref() != Some(next) => after = Some(next.to_owned()),
            _ => break,
        }
    }
    Ok(notes)
}

fn list(remote: &Remote, scope: &ListScopeArgs, as_json: bool) -> Result<(), Failed> {
    let notes = match scope_fields(scope.session.as_ref(), scope.user.as_ref()) {
        Some(input) => remote
            .call("memory.read", &input)?
            .get("notes")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
        None => all_notes(remote)?,
    };
    let mut out = std::io::stdout().lock();
    for note in &notes {
        let line = if as_json {
            note.to_string()
        } else {
            let text = note["text"]
                .as_str()
                .unwrap_or_default()
                .replace('\n', " ⏎ ");
            format!(
                "{}\t{}{}\t{}",
                note["scope"].as_str().unwrap_or_default(),
                note["key"].as_str().unwrap_or_default(),
                if note["untrusted"] == true {
                    " (untrusted)"
                } else {
                    ""
                },
                text
            )
        };
        if writeln!(out, "{line}").is_err() {
            return Ok(());
        }
    }
    if notes.is_empty() && !as_json {
        let _ = writeln!(out, "no notes");
    }
    Ok(())
}

fn forget(remote: &Remote, scope: &NoteScopeArgs, key: &str) -> Result<(), Failed> {
    let mut input = scope_input(scope);
    input["key"] = json!(key);
    let answer = remote.call("memory.forget", &input)?;
    if answer["forgotten"] == true {
        println!("forgotten: {key}");
        Ok(())
    } else {
        Err(Failed(
            format!("no note with the key {key} in that scope"),
            1,
        ))
    }
}
