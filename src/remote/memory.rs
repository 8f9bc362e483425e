//! `switchboard memory list|forget`: the operator reads and deletes the agent's notes on a
//! running switchboard, through `memory.read` / `memory.forget` (audited like any call).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use serde_json::{json, Value};

use super::{Failed, Remote};
use crate::cli::{MemoryCommand, NoteScopeArgs};

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

/// The callables' scope fields for `--session` / `--user`.
fn scope_input(scope: &NoteScopeArgs) -> Value {
    match (&scope.session, &scope.user) {
        (Some(session), _) => json!({"scope": "session", "sessionId": session}),
        (None, Some(user)) => json!({"scope": "user", "userId": user}),
        // clap requires one of the two.
        (None, None) => json!({"scope": "session"}),
    }
}

fn list(remote: &Remote, scope: &NoteScopeArgs, as_json: bool) -> Result<(), Failed> {
    let answer = remote.call("memory.read", &scope_input(scope))?;
    let notes = answer
        .get("notes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
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
