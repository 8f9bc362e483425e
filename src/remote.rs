//! Operator commands that talk to a running switchboard over its HTTP API, with the operator
//! token: `switchboard audit`, `switchboard reload`, `switchboard memory` and
//! `switchboard cluster status`.
//!
//! Where: `--url`, else `SWITCHBOARD_URL`, else the config's `toolserver.bind`. The token:
//! `SWITCHBOARD_TOKEN`, else the variable the config names in `toolserver.operator_token_env`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use protocol::context::{DEFAULT_URL, ENV_TOKEN, ENV_URL};
use protocol::{ErrorBody, ErrorKind};
use serde_json::{json, Value};
use switchboard_config::Config;

use crate::cli::{AuditArgs, ReloadArgs};

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How often `--follow` asks for new rows.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);
/// Pages one `--follow` round reads at most before printing (a burst larger than this many
/// pages in one second is reported as skipped rather than read forever).
const FOLLOW_MAX_PAGES: usize = 20;

/// A running switchboard, and how to reach it.
mod cluster;
mod memory;
pub use cluster::cluster_status;
pub use memory::memory;

struct Remote {
    agent: ureq::Agent,
    url: String,
    token: Option<String>,
}

/// Why a remote command failed: the message, and the exit code (the `tools` CLI's codes).
struct Failed(String, u8);

impl Remote {
    fn new(flag_config: Option<&Path>, url: Option<&str>) -> Remote {
        let config = Config::load_with(
            &crate::operator::config_path(flag_config),
            &crate::operator::known(),
        )
        .ok();
        let url = url
            .map(str::to_owned)
            .or_else(|| std::env::var(ENV_URL).ok().filter(|u| !u.trim().is_empty()))
            .or_else(|| {
                config
                    .as_ref()
                    .map(|c| format!("http://{}", c.toolserver.bind))
            })
            .unwrap_or_else(|| DEFAULT_URL.to_owned());
        let token = std::env::var(ENV_TOKEN)
            .ok()
            .or_else(|| {
                config
                    .as_ref()
                    .and_then(|c| std::env::var(&c.toolserver.operator_token_env).ok())
            })
            .filter(|t| !t.trim().is_empty());
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .timeout_global(Some(REQUEST_TIMEOUT))
            .build()
            .new_agent();
        Remote {
            agent,
            url: url.trim_end_matches('/').to_owned(),
            token,
        }
    }

    /// One call through `/v1/call`: its value, or the server's error.
    fn call(&self, tool: &str, input: &Value) -> Result<Value, Failed> {
        self.post("/v1/call", &json!({"tool": tool, "input": input}))
    }

    /// One `POST` to `route`: the answer's value, or the server's error (with any problems it
    /// lists, one per line).
    fn post(&self, route: &str, body: &Value) -> Result<Value, Failed> {
        let mut request = self.agent.post(format!("{}{route}", self.url));
        if let Some(token) = &self.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let body = body.to_string();
        let mut reply = request
            .content_type("application/json")
            .send(body.as_bytes())
            .map_err(|error| {
                Failed(
                    format!(
                        "cannot reach switchboard at {} ({error}); is it running? (--url or SWITCHBOARD_URL)",
                        self.url
                    ),
                    ErrorKind::Unavailable.exit_code(),
                )
            })?;
        let text = reply
            .body_mut()
            .with_config()
            .limit(64 * 1024 * 1024)
            .read_to_string()
            .map_err(|error| Failed(format!("reading the answer: {error}"), 1))?;
        let value: Value = serde_json::from_str(&text).map_err(|_| {
            Failed(
                format!("{} answered something that is not JSON", self.url),
                1,
            )
        })?;
        if value.get("ok") == Some(&Value::Bool(true)) {
            return Ok(value.get("value").cloned().unwrap_or(Value::Null));
        }
        match serde_json::from_value::<ErrorBody>(value.clone()) {
            Ok(error) => {
                let hint = if matches!(
                    error.error.code,
                    protocol::ErrorCode::MissingToken | protocol::ErrorCode::InvalidToken
                ) {
                    " (set SWITCHBOARD_TOKEN, or the operator token variable the config names)"
                } else {
                    ""
                };
                let mut message = format!(
                    "{}: {}{hint}",
                    error.error.code.as_str(),
                    error.error.message
                );
                let problems = error
                    .error
                    .details
                    .get("problems")
                    .and_then(Value::as_array);
                for problem in problems.into_iter().flatten().filter_map(Value::as_str) {
                    message.push('\n');
                    message.push_str(problem);
                }
                Err(Failed(message, error.error.kind.exit_code()))
            }
            Err(_) => Err(Failed(format!("unexpected answer: {value}"), 1)),
        }
    }
}

fn filter_input(args: &AuditArgs) -> Value {
    let mut input = serde_json::Map::new();
    let mut put = |key: &str, value: &Option<String>| {
        if let Some(value) = value {
            input.insert(key.to_owned(), json!(value));
        }
    };
    put("since", &args.since);
    put("until", &args.until);
    put("tool", &args.tool);
    put("sessionId", &args.session);
    put("caller", &args.caller);
    put("decision", &args.decision);
    input.insert("limit".into(), json!(args.limit));
    Value::Object(input)
}

/// One row as a line: time, decision, outcome, tool, sessions, caller, duration, who decided,
/// and how many calls a counted row stands for.
fn line(row: &Value) -> String {
    let text = |key: &str| row.get(key).and_then(Value::as_str).unwrap_or("-");
    let sessions: Vec<&str> = row
        .get("sessionLabels")
        .and_then(Value::as_array)
        .map(|labels| labels.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let outcome = match row.get("code").and_then(Value::as_str) {
        Some(code) => format!("{}:{code}", text("outcome")),
        None => text("outcome").to_owned(),
    };
    let mut line = format!(
        "{}  {:<5} {:<22} {:<28} {:<16} {:<16} {:>6}ms",
        text("time"),
        text("decision"),
        outcome,
        text("tool"),
        if sessions.is_empty() {
            "-".to_owned()
        } else {
            sessions.join(",")
        },
        text("caller"),
        row.get("durationMs").and_then(Value::as_u64).unwrap_or(0),
    );
    if let Some(by) = row.get("decidedBy").and_then(Value::as_str) {
        line.push_str(&format!("  by {by}"));
    }
    // A burst of refusals counted in one row.
    if let Some(count) = row.get("count").and_then(Value::as_u64).filter(|n| *n > 1) {
        line.push_str(&format!("  ×{count} calls"));
    }
    line
}

fn print_rows(rows: &[Value], as_json: bool) -> bool {
    let mut out = std::io::stdout().lock();
    for row in rows {
        let text = if as_json { row.to_string() } else { line(row) };
        if writeln!(out, "{text}").is_err() {
            return false;
        }
    }
    out.flush().is_ok()
}

fn rows_of(page: &Value) -> Vec<Value> {
    page.get("audit")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn id_of(row: &Value) -> u64 {
    row.get("id").and_then(Value::as_u64).unwrap_or(0)
}

/// `switchboard audit`: the newest rows matching the filters, oldest first; with `--follow`,
/// then every new row as it is written, until interrupted.
pub fn audit(flag_config: Option<&Path>, args: &AuditArgs) -> ExitCode {
    let remote = Remote::new(flag_config, args.url.as_deref());
    match audit_with(&remote, args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failed(message, code)) => {
            eprintln!("error: {message}");
            ExitCode::from(code)
        }
    }
}

fn audit_with(remote: &Remote, args: &AuditArgs) -> Result<(), Failed> {
    let input = filter_input(args);
    let page = remote.call("audit.list", &input)?;
    let mut rows = rows_of(&page);
    rows.reverse();
    let mut newest = rows.iter().map(id_of).max().unwrap_or(0);
    if !print_rows(&rows, args.json) || !args.follow {
        return Ok(());
    }
    loop {
        std::thread::sleep(FOLLOW_EVERY);
        // Newer rows, newest first, page by page until one reaches what was printed.
        let mut fresh: Vec<Value> = Vec::new();
        let mut input = input.clone();
        let mut reached = false;
        for _ in 0..FOLLOW_MAX_PAGES {
            let page = remote.call("audit.list", &input)?;
            let rows = rows_of(&page);
            for row in rows {
                if id_of(&row) <= newest {
                    reached = true;
                    break;
                }
                fresh.push(row);
            }
            match page.get("nextCursor").and_then(Value::as_u64) {
                Some(cursor) if !reached => {
                    input["cursor"] = json!(cursor);
                }
                _ => break,
            }
        }
        if !reached && newest > 0 && !fresh.is_empty() {
            eprintln!("note: more rows arrived than --follow reads in one round; older ones were skipped (use audit.list with a cursor to read them)");
        }
        fresh.reverse();
        if let Some(max) = fresh.iter().map(id_of).max() {
            newest = newest.max(max);
        }
        if !print_rows(&fresh, args.json) {
            return Ok(());
        }
    }
}

/// `switchboard reload`: the running switchboard reads its config file again. Prints what
/// changed and what waits for a restart; with problems, prints each (as check-config does) and
/// exits 2 — the config in force is kept.
pub fn reload(flag_config: Option<&Path>, args: &ReloadArgs) -> ExitCode {
    let remote = Remote::new(flag_config, args.url.as_deref());
    match remote.post("/v1/admin/reload", &json!({})) {
        Ok(value) => {
            let text = if args.json {
                value.to_string()
            } else {
                let field = |key: &str| value.get(key).and_then(Value::as_str).unwrap_or("-");
                format!("reloaded {}: {}", field("file"), field("summary"))
            };
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(Failed(message, code)) => {
            eprintln!("error: {message}");
            ExitCode::from(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_reads_as_one_line() {
        let row = json!({"id": 3, "time": "2026-11-23T10:00:00.000Z", "decision": "deny", "outcome": "denied", "code": "permission_denied", "tool": "surface.messages.delete", "sessionLabels": ["#ops"], "caller": "operator", "durationMs": 2, "decidedBy": "permissions.rules[0]"});
        let text = line(&row);
        assert!(
            text.starts_with("2026-11-23T10:00:00.000Z  deny  denied:permission_denied"),
            "{text}"
        );
        assert!(
            text.contains("#ops") && text.ends_with("by permissions.rules[0]"),
            "{text}"
        );
        assert!(line(&json!("garbage")).contains('-'));
    }
}
