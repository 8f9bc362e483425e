//! `tools help ID`: a callable's description, fields (from its JSON Schema), and examples.

use protocol::ToolDetail;
use serde_json::{Map, Value};

use crate::args::kebab;

/// The help page for one callable, for humans.
pub fn tool_help(detail: &ToolDetail) -> String {
    let entry = &detail.entry;
    let schema = &entry.input_schema;
    let mut out = format!("{} — {}\n", entry.id, entry.description.trim());
    if entry.mutating {
        out.push_str("(changes state)\n");
    }

    let primary = entry.primary.as_deref();
    let primary_word = primary.map(|p| format!(" [{}...]", kebab(p).to_ascii_uppercase()));
    out.push_str(&format!(
        "\nUsage: tools {} [--field=value ...]{}\n",
        entry.id,
        primary_word.as_deref().unwrap_or("")
    ));

    let fields = fields(schema);
    if !fields.is_empty() {
        out.push_str("\nFields:\n");
        let rows: Vec<[String; 4]> = fields
            .iter()
            .map(|f| {
                let mut about = f.description.clone();
                if primary == Some(f.name.as_str()) {
                    push_note(&mut about, "bare words fill this field");
                }
                if let Some(default) = &f.default {
                    push_note(&mut about, &format!("default: {default}"));
                }
                [
                    format!("--{}", kebab(&f.name)),
                    f.kind.clone(),
                    if f.required { "required" } else { "" }.to_owned(),
                    about,
                ]
            })
            .collect();
        let widths: Vec<usize> = (0..3)
            .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
            .collect();
        for row in &rows {
            let mut line = String::from("  ");
            for (i, width) in widths.iter().enumerate() {
                line.push_str(&row[i]);
                line.push_str(&" ".repeat(width - row[i].chars().count() + 2));
            }
            line.push_str(&row[3]);
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    if let Some(p) = primary {
        out.push_str(&format!(
            "\nBare words after the id become --{} (quote them, or put them after '--').\n",
            kebab(p)
        ));
    }

    let help = detail.help.trim();
    if !help.is_empty() {
        out.push('\n');
        out.push_str(help);
        out.push('\n');
    }

    if !detail.examples.is_empty() {
        out.push_str("\nExamples:\n");
        for ex in &detail.examples {
            if !ex.description.trim().is_empty() {
                out.push_str(&format!("  # {}\n", ex.description.trim()));
            }
            let cli = ex.cli.trim();
            if cli.starts_with("tools ") {
                out.push_str(&format!("  {cli}\n"));
            } else {
                out.push_str(&format!("  tools {cli}\n"));
            }
        }
    }

    out.push_str(
        "\nValues: --field=value (converted by the server using the schema), \
         --field:json=JSON, --input=JSON|@file|@-.\n",
    );
    out
}

fn push_note(about: &mut String, note: &str) {
    if about.is_empty() {
        about.push_str(&format!("({note})"));
    } else {
        about.push_str(&format!(" ({note})"));
    }
}

/// One property of the input schema.
#[derive(Debug, PartialEq)]
struct Field {
    name: String,
    kind: String,
    required: bool,
    description: String,
    default: Option<String>,
}

/// The properties of an object schema, required ones first, each group in schema order.
fn fields(schema: &Value) -> Vec<Field> {
    let root = schema;
    let schema = resolve(root, schema);
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out: Vec<Field> = props
        .iter()
        .map(|(name, prop)| {
            let resolved = resolve(root, prop);
            let description = prop
                .get("description")
                .or_else(|| resolved.get("description"))
                .and_then(Value::as_str)
                .map(|d| d.split_whitespace().collect::<Vec<_>>().join(" "))
                .unwrap_or_default();
            Field {
                name: name.clone(),
                kind: type_name(root, prop, 0),
                required: required.contains(&name.as_str()),
                description,
                default: prop
                    .get("default")
                    .filter(|d| !d.is_null())
                    .map(|d| match d {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    }),
            }
        })
        .collect();
    out.sort_by_key(|f| !f.required);
    out
}

/// Follows a local `$ref` (`#/$defs/X` or `#/definitions/X`), once.
fn resolve<'a>(root: &'a Value, schema: &'a Value) -> &'a Value {
    let Some(r) = schema.get("$ref").and_then(Value::as_str) else {
        return schema;
    };
    let Some(path) = r.strip_prefix("#/") else {
        return schema;
    };
    path.split('/')
        .try_fold(root, |v, part| v.get(part))
        .unwrap_or(schema)
}

/// A short type for a property: `string`, `integer`, `boolean`, `array of string`, `a|b|c`.
fn type_name(root: &Value, schema: &Value, depth: usize) -> String {
    if depth > 4 {
        return "any".to_owned();
    }
    let schema = resolve(root, schema);
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let names: Vec<String> = values
            .iter()
            .filter(|v| !v.is_null())
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        return names.join("|");
    }
    if let Some(c) = schema.get("const") {
        return match c {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(parts) = schema.get(key).and_then(Value::as_array) {
            let names: Vec<String> = parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) != Some("null"))
                .map(|p| type_name(root, p, depth + 1))
                .collect();
            return names.join("|");
        }
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect(),
        _ => Vec::new(),
    };
    let names: Vec<String> = types
        .iter()
        .map(|t| match *t {
            "array" => match schema.get("items") {
                Some(items) => format!("array of {}", type_name(root, items, depth + 1)),
                None => "array".to_owned(),
            },
            other => other.to_owned(),
        })
        .collect();
    if names.is_empty() {
        "any".to_owned()
    } else {
        names.join("|")
    }
}

/// `tools --list` for humans: ids and descriptions, aligned.
pub fn list_text(list: &Value) -> String {
    let empty = Map::new();
    let tools = list
        .get("tools")
        .or(Some(list))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if tools.is_empty() {
        return "(no callables you may call)\n".to_owned();
    }
    let rows: Vec<(&str, String)> = tools
        .iter()
        .map(|t| {
            let t = t.as_object().unwrap_or(&empty);
            let id = t.get("id").and_then(Value::as_str).unwrap_or("?");
            let mut about = t
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .lines()
                .next()
                .unwrap_or("")
                .to_owned();
            if t.get("mutating") == Some(&Value::Bool(true)) {
                about.push_str(" [changes state]");
            }
            (id, about)
        })
        .collect();
    let width = rows
        .iter()
        .map(|(id, _)| id.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (id, about) in rows {
        let line = format!("{id}{}{about}", " ".repeat(width - id.chars().count() + 2));
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.push_str("\nRun 'tools help ID' for a callable's fields and examples.\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::{Example, ToolEntry};
    use serde_json::json;

    fn send_detail() -> ToolDetail {
        ToolDetail {
            entry: ToolEntry {
                id: "surface.messages.send".into(),
                description: "Send a message to a session.".into(),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "silent": {"type": ["boolean", "null"], "description": "No notification.", "default": false},
                        "sessionId": {"type": "string", "description": "Where to send."},
                        "text": {"type": "string", "description": "What to say."},
                        "kind": {"$ref": "#/$defs/Kind"},
                        "ids": {"type": "array", "items": {"type": "integer"}}
                    },
                    "required": ["sessionId", "text"],
                    "$defs": {"Kind": {"type": "string", "enum": ["plain", "embed"], "description": "Form."}}
                }),
                mutating: true,
                primary: Some("text".into()),
                title: "Send a message".into(),
                effects: protocol::Effects::ADD,
                output_schema: None,
            },
            help: "Mentions are rewritten.".into(),
            examples: vec![Example {
                description: "Say hi".into(),
                cli: "tools surface.messages.send --session-id=#ops hi".into(),
                input: json!({"sessionId": "#ops", "text": "hi"}),
            }],
        }
    }

    #[test]
    fn help_lists_fields_as_kebab_flags_required_first() {
        let text = tool_help(&send_detail());
        let expected_fields = "\
Fields:
  --session-id  string            required  Where to send.
  --text        string            required  What to say. (bare words fill this field)
  --ids         array of integer
  --kind        plain|embed                 Form.
  --silent      boolean                     No notification. (default: false)
";
        assert!(text.contains(expected_fields), "{text}");
        assert!(text.starts_with(
            "surface.messages.send — Send a message to a session.\n(changes state)\n"
        ));
        assert!(text.contains("Usage: tools surface.messages.send [--field=value ...] [TEXT...]"));
        assert!(text.contains("Mentions are rewritten."));
        assert!(text.contains("  # Say hi\n  tools surface.messages.send --session-id=#ops hi\n"));
    }

    #[test]
    fn help_survives_a_schema_without_properties() {
        let mut d = send_detail();
        d.entry.input_schema = json!(true);
        d.entry.primary = None;
        let text = tool_help(&d);
        assert!(!text.contains("Fields:"));
    }

    #[test]
    fn list_text_aligns_ids() {
        let list = json!({"tools": [
            {"id": "a.b", "description": "B.", "mutating": false, "inputSchema": {}},
            {"id": "a.long", "description": "L.\nmore", "mutating": true, "inputSchema": {}}
        ]});
        assert!(list_text(&list).starts_with("a.b     B.\na.long  L. [changes state]\n"));
        assert!(list_text(&json!({"tools": []})).starts_with("(no callables"));
    }
}
