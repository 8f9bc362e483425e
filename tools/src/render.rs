//! Printing a result: compact JSON, indented JSON, or text for humans.
//!
//! The text form is generic (objects as `key: value` lines, arrays as `- ` items) with nicer
//! layouts for shapes we know: `messages`, `sessions` and `tools` lists.

use serde_json::{Map, Value};

use crate::cli::OutputFormat;

/// The whole output for `value`, ending in a newline.
pub fn render(value: &Value, format: OutputFormat) -> String {
    let mut out = match format {
        OutputFormat::Json => value.to_string(),
        OutputFormat::Pretty => {
            serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
        }
        OutputFormat::Text => text(value),
    };
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// A human rendering of any value.
pub fn text(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) => object(&mut out, map, 0),
        Value::Array(items) if items.is_empty() => out.push_str("(none)\n"),
        Value::Array(items) => array(&mut out, items, 0),
        scalar => {
            out.push_str(&scalar_text(scalar));
            out.push('\n');
        }
    }
    out
}

/// An object: known lists first in their own layout, then the other keys generically.
fn object(out: &mut String, map: &Map<String, Value>, indent: usize) {
    let mut rest: Vec<(&String, &Value)> = Vec::new();
    if indent == 0 {
        if let Some(session) = map.get("session").filter(|s| s.is_object()) {
            out.push_str(&format!("session: {}\n", session_line(session)));
        }
    }
    for (key, value) in map {
        if indent == 0 && key == "session" && value.is_object() {
            continue;
        }
        let rows = match value {
            Value::Array(items) if items.iter().all(Value::is_object) => Some(items),
            _ => None,
        };
        match (key.as_str(), rows) {
            ("messages", Some(rows)) if indent == 0 => messages(out, rows),
            ("sessions", Some(rows)) if indent == 0 => sessions(out, rows),
            ("tools", Some(rows)) if indent == 0 => tools(out, rows),
            ("warnings", Some(rows)) if indent == 0 => warnings(out, rows),
            _ => rest.push((key, value)),
        }
    }
    for (key, value) in rest {
        field(out, key, value, indent);
    }
}

fn field(out: &mut String, key: &str, value: &Value, indent: usize) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) if map.is_empty() => out.push_str(&format!("{pad}{key}: {{}}\n")),
        Value::Array(items) if items.is_empty() => out.push_str(&format!("{pad}{key}: []\n")),
        Value::Object(map) => {
            out.push_str(&format!("{pad}{key}:\n"));
            object(out, map, indent + 2);
        }
        Value::Array(items) => {
            out.push_str(&format!("{pad}{key}:\n"));
            array(out, items, indent + 2);
        }
        Value::String(s) if s.contains('\n') => {
            out.push_str(&format!("{pad}{key}:\n"));
            for line in s.lines() {
                out.push_str(&format!("{pad}  {line}\n"));
            }
        }
        scalar => out.push_str(&format!("{pad}{key}: {}\n", scalar_text(scalar))),
    }
}

fn array(out: &mut String, items: &[Value], indent: usize) {
    let pad = " ".repeat(indent);
    for item in items {
        let mut inner = String::new();
        match item {
            Value::Object(map) if !map.is_empty() => object(&mut inner, map, 0),
            Value::Array(items) if !items.is_empty() => array(&mut inner, items, 0),
            other => {
                inner.push_str(&scalar_text(other));
                inner.push('\n');
            }
        }
        for (i, line) in inner.lines().enumerate() {
            let lead = if i == 0 { "- " } else { "  " };
            out.push_str(&format!("{pad}{lead}{line}\n"));
        }
    }
}

fn scalar_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Object(m) if m.is_empty() => "{}".to_owned(),
        Value::Array(a) if a.is_empty() => "[]".to_owned(),
        other => other.to_string(),
    }
}

/// The first string found under any of `keys` (a key may be a dotted path like `author.name`).
fn pick<'a>(row: &'a Value, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| {
        k.split('.')
            .try_fold(row, |v, part| v.get(part))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    })
}

/// How a session is named where it is shown: its `reference` (`#release-checklist`, what
/// `--session-id` takes), else `#token` from a server that sends no reference.
fn session_reference(session: &Value) -> Option<String> {
    pick(session, &["reference"])
        .map(str::to_owned)
        .or_else(|| pick(session, &["token"]).map(|token| format!("#{token}")))
}

/// `#release-checklist (release checklist, thread 1000000000000000411)`: who a result is about,
/// on one line; the name as Discord shows it only when it differs from the reference.
fn session_line(session: &Value) -> String {
    let reference = session_reference(session);
    let title = pick(session, &["title"])
        .filter(|title| reference.as_deref().and_then(|r| r.strip_prefix('#')) != Some(*title));
    let kind = pick(session, &["kind"]).unwrap_or("session");
    let id = pick(session, &["channelId"]).unwrap_or("?");
    match (reference, title) {
        (Some(reference), Some(title)) => format!("{reference} ({title}, {kind} {id})"),
        (None, Some(title)) => format!("{title} ({kind} {id})"),
        (Some(reference), None) => format!("{reference} ({kind} {id})"),
        (None, None) => format!("{kind} {id}"),
    }
}

/// `[ts] authorName: text`, one message per line (continuation lines indented).
fn messages(out: &mut String, rows: &[Value]) {
    if rows.is_empty() {
        out.push_str("(no messages)\n");
    }
    for row in rows {
        let ts = pick(row, &["ts", "timestamp", "createdAt", "time"]).map(short_time);
        let author = pick(
            row,
            &[
                "authorName",
                "author.displayName",
                "author.name",
                "author.username",
                "author",
                "authorId",
            ],
        )
        .unwrap_or("?");
        let body = pick(row, &["text", "content"]).unwrap_or("");
        let mut line = String::new();
        if let Some(ts) = ts {
            line.push_str(&format!("[{ts}] "));
        }
        line.push_str(&format!("{author}: "));
        let mut lines = body.lines();
        line.push_str(lines.next().unwrap_or(""));
        out.push_str(line.trim_end());
        out.push('\n');
        for more in lines {
            out.push_str(&format!("    {more}\n"));
        }
        let files: Vec<&str> = row
            .get("attachments")
            .and_then(Value::as_array)
            .map(|files| {
                files
                    .iter()
                    .filter_map(|f| f.get("filename").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        if !files.is_empty() {
            out.push_str(&format!("    [attached: {}]\n", files.join(", ")));
        }
    }
}

/// `2024-05-01T12:34:56.789Z` → `2024-05-01 12:34:56`; anything else as given.
fn short_time(ts: &str) -> String {
    let b = ts.as_bytes();
    if b.len() >= 19 && b[10] == b'T' && ts.is_char_boundary(19) {
        format!("{} {}", &ts[..10], &ts[11..19])
    } else {
        ts.to_owned()
    }
}

/// A small table: the reference to type (`#release-checklist`), the name as Discord shows it
/// (`release checklist`), kind, channelId.
fn sessions(out: &mut String, rows: &[Value]) {
    if rows.is_empty() {
        out.push_str("(no sessions)\n");
        return;
    }
    let cells: Vec<[String; 4]> = rows
        .iter()
        .map(|row| {
            [
                session_reference(row).unwrap_or_else(|| "-".to_owned()),
                pick(row, &["title", "name"]).unwrap_or("").to_owned(),
                pick(row, &["kind"]).unwrap_or("").to_owned(),
                pick(row, &["channelId"]).unwrap_or("").to_owned(),
            ]
        })
        .collect();
    table(out, &cells);
}

/// `id  description`, aligned.
/// A send's or an edit's mention warnings: one `warning:` line each, its reason and what to do.
fn warnings(out: &mut String, rows: &[Value]) {
    for row in rows {
        let reason = pick(row, &["reason"]).unwrap_or("warning");
        let message = pick(row, &["message"])
            .or_else(|| pick(row, &["token"]))
            .unwrap_or_default();
        out.push_str(&format!("warning ({reason}): {message}\n"));
        if let Some(candidates) = row["candidates"].as_array().filter(|c| !c.is_empty()) {
            let ids: Vec<String> = candidates.iter().map(scalar_text).collect();
            out.push_str(&format!("  candidates: {}\n", ids.join(", ")));
        }
    }
}

fn tools(out: &mut String, rows: &[Value]) {
    if rows.is_empty() {
        out.push_str("(no callables)\n");
        return;
    }
    let cells: Vec<[String; 2]> = rows
        .iter()
        .map(|row| {
            [
                pick(row, &["id"]).unwrap_or("?").to_owned(),
                pick(row, &["description"]).unwrap_or("").to_owned(),
            ]
        })
        .collect();
    table(out, &cells);
}

/// Left-aligned columns two spaces apart; trailing empty cells leave no spaces.
fn table<const N: usize>(out: &mut String, rows: &[[String; N]]) {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < N {
                let fill = widths[i].saturating_sub(cell.chars().count()) + 2;
                line.push_str(&" ".repeat(fill));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_is_one_line_and_pretty_is_indented() {
        let v = json!({"a": [1, 2], "b": "x"});
        assert_eq!(
            render(&v, OutputFormat::Json),
            "{\"a\":[1,2],\"b\":\"x\"}\n"
        );
        assert!(render(&v, OutputFormat::Pretty).contains("\n  \"a\": [\n"));
    }

    #[test]
    fn generic_text_nests_objects_and_lists() {
        let v = json!({"a": "1", "b": {"silent": true}, "c": ["x", {"j": 1, "k": 2}], "d": []});
        assert_eq!(
            text(&v),
            "a: 1\nb:\n  silent: true\nc:\n  - x\n  - j: 1\n    k: 2\nd: []\n"
        );
    }

    #[test]
    fn a_sends_warnings_print_one_line_each() {
        let v = json!({
            "channelId": "1",
            "messageIds": ["2"],
            "warnings": [
                {"token": "@Nobody", "reason": "unknown_name", "message": "@Nobody is no user: sent as text"},
                {"token": "@alex", "reason": "ambiguous_name", "message": "@alex is two users", "candidates": ["7", "8"]}
            ]
        });
        let out = text(&v);
        assert!(
            out.contains("warning (unknown_name): @Nobody is no user: sent as text\nwarning (ambiguous_name): @alex is two users\n  candidates: 7, 8\n"),
            "{out}"
        );
        assert!(out.contains("channelId: 1\n"), "{out}");
    }

    #[test]
    fn scalars_print_bare() {
        assert_eq!(text(&json!("hello")), "hello\n");
        assert_eq!(text(&json!(3)), "3\n");
        assert_eq!(text(&json!(null)), "null\n");
        assert_eq!(text(&json!([])), "(none)\n");
    }

    #[test]
    fn messages_print_as_chat_lines() {
        let v = json!({"messages": [
            {"id": "1", "ts": "2024-05-01T12:34:56.789Z", "authorName": "stanley", "text": "ping\nsecond"},
            {"id": "2", "author": {"name": "bot"}, "content": "pong", "attachments": [{"filename": "a.txt"}, {"filename": "b.png"}]}
        ], "nextCursor": "2"});
        assert_eq!(
            text(&v),
            "[2024-05-01 12:34:56] stanley: ping\n    second\nbot: pong\n    [attached: a.txt, b.png]\nnextCursor: 2\n"
        );
    }

    #[test]
    fn the_session_of_a_result_comes_first_on_one_line() {
        let v = json!({"messages": [{"authorName": "a", "text": "hi"}],
                       "session": {"token": "ops", "title": "ops", "kind": "channel", "channelId": "7", "reference": "#ops"}});
        assert_eq!(text(&v), "session: #ops (channel 7)\na: hi\n");
        let v = json!({"session": {"token": null, "title": "release checklist", "kind": "thread",
                                   "channelId": "8", "reference": "#release-checklist"}});
        assert_eq!(
            text(&v),
            "session: #release-checklist (release checklist, thread 8)\n"
        );
    }

    #[test]
    fn sessions_print_as_a_table() {
        let v = json!({"sessions": [
            {"token": "ops", "title": "ops", "kind": "channel", "channelId": "100", "reference": "#ops"},
            {"token": "dm-stanley", "title": "stanley", "kind": "dm", "channelId": "20000", "reference": "#dm-stanley"},
            {"token": null, "title": "release checklist", "kind": "thread", "channelId": "3", "reference": "#release-checklist"},
            {"token": "old", "title": "server", "kind": "channel", "channelId": "4"}
        ]});
        assert_eq!(
            text(&v),
            "#ops                ops                channel  100\n\
             #dm-stanley         stanley            dm       20000\n\
             #release-checklist  release checklist  thread   3\n\
             #old                server             channel  4\n"
        );
    }

    #[test]
    fn tools_print_ids_and_descriptions() {
        let v = json!({"tools": [{"id": "a.b", "description": "Does b."}, {"id": "a.long", "description": "L."}]});
        assert_eq!(text(&v), "a.b     Does b.\na.long  L.\n");
    }
}
