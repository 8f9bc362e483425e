//! Callables as MCP tools, answers as MCP tool results: shared by both fronts.

use std::sync::Arc;

use protocol::{ErrorInfo, ToolEntry};
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, InitializeResult, JsonObject, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use serde_json::Value;

/// What this server says of itself in `initialize` and `server/discover`.
pub fn server_config() -> ServerConfig {
    InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
        .with_server_info(
            Implementation::new("switchboard", env!("CARGO_PKG_VERSION"))
                .with_title("switchboard"),
        )
        .with_instructions(
            "Tools that act in a chat platform (Discord) through switchboard's governed tool server. \
             Call surface.help first: it says your context, how to name sessions (a channel id, \
             <#id>, or a configured token such as #ops) and what you may call. Write @name and \
             #token in text; they become real mentions. A refused call is a result with isError \
             and structured content {kind, code, message, retryable, details}.",
        )
}

/// A callable as an MCP tool: its id as the name, its title, description, input schema,
/// output schema, and annotations from its declared effects (`readOnlyHint` is
/// `!mutating`; `destructiveHint` only for mutating callables, where MCP reads it).
pub fn tool(entry: &ToolEntry) -> Tool {
    let mut annotations = ToolAnnotations::new()
        .read_only(!entry.mutating)
        .idempotent(entry.effects.idempotent)
        .open_world(entry.effects.open_world);
    if entry.mutating {
        annotations = annotations.destructive(entry.effects.destructive);
    }
    if !entry.title.is_empty() {
        annotations.title = Some(entry.title.clone());
    }
    let mut tool = Tool::new(
        entry.id.clone(),
        entry.description.clone(),
        Arc::new(object(&entry.input_schema)),
    )
    .annotate(annotations);
    if !entry.title.is_empty() {
        tool = tool.with_title(entry.title.clone());
    }
    if let Some(schema) = entry.output_schema.as_ref().filter(|s| s.is_object()) {
        tool = tool.with_raw_output_schema(Arc::new(object(schema)));
    }
    tool
}

/// A schema as the object MCP wants; anything else (never generated) as `{"type":"object"}`.
fn object(schema: &Value) -> JsonObject {
    match schema {
        Value::Object(map) => map.clone(),
        _ => {
            let mut map = JsonObject::new();
            map.insert("type".to_owned(), Value::String("object".to_owned()));
            map
        }
    }
}

/// A callable's answer (the JSON text the pipeline produced) as a tool result: the parsed
/// object as structured content, and the text itself for clients that read only content.
pub fn success_result(json: &str) -> CallToolResult {
    let structured = serde_json::from_str::<Value>(json).unwrap_or(Value::Null);
    let mut result = CallToolResult::success(vec![ContentBlock::text(json.to_owned())]);
    // MCP wants an object; every callable answers one (the registry's output schemas say so).
    if structured.is_object() {
        result.structured_content = Some(structured);
    }
    result
}

/// A refusal or failure as a tool result with `isError`: the typed error as structured
/// content, and `code: message` as text for people.
pub fn error_result(error: &ErrorInfo) -> CallToolResult {
    let text = format!("{}: {}", error.code, error.message);
    let structured = serde_json::to_value(error).unwrap_or(Value::Null);
    let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
    result.structured_content = Some(structured);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::{Effects, ErrorCode, ErrorKind};
    use serde_json::json;

    fn entry(mutating: bool, effects: Effects) -> ToolEntry {
        ToolEntry {
            id: "surface.messages.delete".into(),
            description: "Delete a message.".into(),
            input_schema: json!({"type": "object", "properties": {}}),
            mutating,
            primary: None,
            title: "Delete a message".into(),
            effects,
            output_schema: Some(json!({"type": "object"})),
        }
    }

    #[test]
    fn a_destructive_callable_says_so_and_a_read_says_read_only() {
        let delete = serde_json::to_value(tool(&entry(true, Effects::OVERWRITE))).unwrap();
        assert_eq!(delete["annotations"]["readOnlyHint"], false);
        assert_eq!(delete["annotations"]["destructiveHint"], true);
        assert_eq!(delete["annotations"]["idempotentHint"], true);
        assert_eq!(delete["annotations"]["openWorldHint"], true);
        assert_eq!(delete["title"], "Delete a message");
        assert_eq!(delete["outputSchema"], json!({"type": "object"}));
        let read = serde_json::to_value(tool(&entry(false, Effects::READ))).unwrap();
        assert_eq!(read["annotations"]["readOnlyHint"], true);
        assert!(read["annotations"].get("destructiveHint").is_none());
    }

    #[test]
    fn an_error_keeps_its_kind_code_and_message() {
        let info = ErrorInfo {
            kind: ErrorKind::Denied,
            code: ErrorCode::OutOfScope,
            message: "no".into(),
            retryable: false,
            details: Value::Null,
        };
        let result = serde_json::to_value(error_result(&info)).unwrap();
        assert_eq!(result["isError"], true);
        assert_eq!(result["structuredContent"]["kind"], "denied");
        assert_eq!(result["structuredContent"]["code"], "out_of_scope");
        assert_eq!(result["structuredContent"]["message"], "no");
        assert_eq!(result["content"][0]["text"], "out_of_scope: no");
    }

    #[test]
    fn a_success_is_structured_and_text() {
        let result = serde_json::to_value(success_result(r#"{"ok":true}"#)).unwrap();
        assert_eq!(result["structuredContent"], json!({"ok": true}));
        assert_eq!(result["content"][0]["text"], r#"{"ok":true}"#);
        assert_eq!(result["isError"], false);
    }
}
