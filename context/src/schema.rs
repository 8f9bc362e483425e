//! Tool schemas as the model reads them, for counting.
//!
//! The chat API does not put the `tools` JSON in front of the model: it renders the functions
//! as a TypeScript-like namespace in the system message. OpenAI documents that rendering for
//! its open-weight models (the "harmony" format: `namespace functions {`, each function's
//! description as `//` comments, `type name = (_: { field?: type, ... }) => any;`, field
//! descriptions as comments above the field); its cookbook's formula for counting the hosted
//! models' tools charges the same pieces (name, description, each field's name, type and
//! description). [`namespace`] writes that text; the tools cost its tokens plus one message's
//! overhead.
//!
//! There is no offline ground truth for what the hosted API charges. What is measured
//! (`tests/tokens.rs`) on switchboard's own 23 callables: the rendering is 2,177 o200k tokens,
//! OpenAI's published formula ([`cookbook_tokens`]) 2,213 (the rendering is 1.6% below it),
//! their compact JSON 3,217 (×1.48). A request is charged the larger of the rendering and the
//! formula (plus one message's overhead): the formula misses nested fields, the rendering may
//! miss what the formula's constants stand for. Counting the JSON would be safe but would
//! charge about 1,000 tokens more than the schemas take, room the conversation then lacks.

use serde_json::Value;

use crate::tokens::TokenCounter;

/// One function the model may call: what the runner puts in the request's `tools`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSchema {
    /// The function's name as the model sees it (`surface__messages__send`).
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its input's JSON Schema (an object schema).
    pub parameters: Value,
}

impl ToolSchema {
    /// The entry of a chat request's `tools` array.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            }
        })
    }
}

/// OpenAI's published formula for what tools cost gpt-4o (the cookbook's
/// `num_tokens_for_tools`): 7 per function and the tokens of `name:description` (a final
/// period dropped); for a function with properties 3, then per top-level property 3 and the
/// tokens of `key:type:description` (a list type written as Python prints a list); an enum
/// −3, then 3 and the value's tokens per value; 12 at the end. It reads top-level properties
/// only, so it undercounts nested schemas, which [`namespace`] renders whole.
pub fn cookbook_tokens(tools: &[ToolSchema], counter: &dyn TokenCounter) -> usize {
    if tools.is_empty() {
        return 0;
    }
    let mut total: usize = 12;
    for tool in tools {
        total += 7;
        let description = tool.description.trim_end_matches('.');
        total += counter.count(&format!("{}:{description}", tool.name));
        let Some(properties) = tool.parameters.get("properties").and_then(Value::as_object) else {
            continue;
        };
        if properties.is_empty() {
            continue;
        }
        total += 3;
        for (key, property) in properties {
            total += 3;
            let kind = match property.get("type") {
                Some(Value::String(kind)) => kind.clone(),
                Some(Value::Array(kinds)) => format!(
                    "[{}]",
                    kinds
                        .iter()
                        .map(|k| format!("'{}'", k.as_str().unwrap_or("")))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                _ => String::new(),
            };
            if let Some(values) = property.get("enum").and_then(Value::as_array) {
                // The formula's −3 for an enum, kept from going below zero.
                total = total.saturating_sub(3);
                for value in values {
                    total += 3 + counter.count(value.as_str().unwrap_or(""));
                }
            }
            let description = property
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .trim_end_matches('.');
            total += counter.count(&format!("{key}:{kind}:{description}"));
        }
    }
    total
}

/// Nesting deeper than this renders as `any` (the schemas are switchboard's own, but a loop
/// over a value must still provably end).
const MAX_DEPTH: usize = 16;

/// The tools as the model reads them (empty when there are none).
pub fn namespace(tools: &[ToolSchema]) -> String {
    if tools.is_empty() {
        return String::new();
    }
    let mut out = String::from("# Tools\n\n## functions\n\nnamespace functions {\n\n");
    for tool in tools {
        for line in tool.description.lines() {
            out.push_str("// ");
            out.push_str(line);
            out.push('\n');
        }
        out.push_str("type ");
        out.push_str(&tool.name);
        let has_fields = tool
            .parameters
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|p| !p.is_empty());
        if has_fields {
            out.push_str(" = (_: ");
            render_type(&mut out, &tool.parameters, 0);
            out.push_str(") => any;\n\n");
        } else {
            out.push_str(" = () => any;\n\n");
        }
    }
    out.push_str("} // namespace functions");
    out
}

fn render_type(out: &mut String, schema: &Value, depth: usize) {
    if depth > MAX_DEPTH {
        out.push_str("any");
        return;
    }
    if let Some(constant) = schema.get("const") {
        out.push_str(&constant.to_string());
        return;
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        if !values.is_empty() {
            let literals: Vec<String> = values.iter().map(Value::to_string).collect();
            out.push_str(&literals.join(" | "));
            return;
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(variants) = schema.get(key).and_then(Value::as_array) {
            for (i, variant) in variants.iter().enumerate() {
                if i > 0 {
                    out.push_str(" | ");
                }
                render_type(out, variant, depth + 1);
            }
            return;
        }
    }
    match schema.get("type") {
        Some(Value::Array(types)) => {
            for (i, ty) in types.iter().enumerate() {
                if i > 0 {
                    out.push_str(" | ");
                }
                render_named(out, schema, ty.as_str().unwrap_or("any"), depth);
            }
        }
        Some(Value::String(ty)) => render_named(out, schema, ty, depth),
        _ if schema.get("properties").is_some() => render_named(out, schema, "object", depth),
        _ => out.push_str("any"),
    }
}

fn render_named(out: &mut String, schema: &Value, ty: &str, depth: usize) {
    match ty {
        "string" => out.push_str("string"),
        "integer" | "number" => out.push_str("number"),
        "boolean" => out.push_str("boolean"),
        "null" => out.push_str("null"),
        "array" => match schema.get("items") {
            Some(items) => {
                let simple = items.get("properties").is_none()
                    && items.get("anyOf").is_none()
                    && items.get("oneOf").is_none();
                if !simple {
                    out.push_str("Array<");
                }
                render_type(out, items, depth + 1);
                out.push_str(if simple { "[]" } else { ">" });
            }
            None => out.push_str("any[]"),
        },
        "object" => render_object(out, schema, depth),
        _ => out.push_str("any"),
    }
}

fn render_object(out: &mut String, schema: &Value, depth: usize) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        out.push_str("object");
        return;
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let indent = "  ".repeat(depth);
    out.push_str("{\n");
    for (name, property) in properties {
        if let Some(description) = property.get("description").and_then(Value::as_str) {
            for line in description.lines() {
                out.push_str(&indent);
                out.push_str("// ");
                out.push_str(line);
                out.push('\n');
            }
        }
        out.push_str(&indent);
        out.push_str(name);
        if !required.contains(&name.as_str()) {
            out.push('?');
        }
        out.push_str(": ");
        render_type(out, property, depth + 1);
        out.push(',');
        if let Some(default) = property.get("default") {
            out.push_str(" // default: ");
            out.push_str(&default.to_string());
        }
        out.push('\n');
    }
    out.push_str(&indent);
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_function_renders_as_a_typescript_signature() {
        let tool = ToolSchema {
            name: "surface__messages__send".into(),
            description: "Send a message.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "sessionId": {"type": ["string", "null"], "description": "Where."},
                    "text": {"type": "string", "description": "What."},
                    "mode": {"enum": ["plain", "embed"], "default": "plain"},
                    "files": {"type": "array", "items": {"type": "string"}},
                    "reply": {"type": "object", "properties": {"to": {"type": "integer"}}, "required": ["to"]}
                },
                "required": ["text"]
            }),
        };
        let text = namespace(std::slice::from_ref(&tool));
        assert!(text.starts_with("# Tools\n\n## functions\n\nnamespace functions {\n\n// Send a message.\ntype surface__messages__send = (_: {\n"), "{text}");
        assert!(
            text.contains("// Where.\nsessionId?: string | null,\n"),
            "{text}"
        );
        assert!(text.contains("text: string,\n"), "{text}");
        assert!(
            text.contains("mode?: \"plain\" | \"embed\", // default: \"plain\"\n"),
            "{text}"
        );
        assert!(text.contains("files?: string[],\n"), "{text}");
        assert!(text.contains("reply?: {\n  to: number,\n  },\n"), "{text}");
        assert!(
            text.ends_with("}) => any;\n\n} // namespace functions"),
            "{text}"
        );
    }

    #[test]
    fn no_tools_render_nothing_and_no_fields_render_an_empty_signature() {
        assert_eq!(namespace(&[]), "");
        let tool = ToolSchema {
            name: "surface__help".into(),
            description: String::new(),
            parameters: json!({"type": "object"}),
        };
        assert!(namespace(&[tool]).contains("type surface__help = () => any;"));
    }

    #[test]
    fn deep_or_odd_schemas_still_render() {
        let mut schema = json!({"type": "string"});
        for _ in 0..100 {
            schema = json!({"type": "object", "properties": {"x": schema}});
        }
        let tool = ToolSchema {
            name: "deep".into(),
            description: "d".into(),
            parameters: schema,
        };
        assert!(namespace(&[tool]).contains("any"));
        let odd = ToolSchema {
            name: "odd".into(),
            description: "d".into(),
            parameters: json!({"properties": {"a": {"type": 5}, "b": true, "c": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}),
        };
        let text = namespace(&[odd]);
        assert!(
            text.contains("a?: any,")
                && text.contains("b?: any,")
                && text.contains("c?: string | null,"),
            "{text}"
        );
    }
}
