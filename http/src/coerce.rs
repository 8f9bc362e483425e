//! Turning command-line strings into typed input, guided by the callable's JSON Schema.

use protocol::ErrorCode;
use serde_json::{Map, Value};

use crate::error::ToolError;

/// The JSON types a schema property allows (`"type": "integer"` or `["string","null"]`).
fn property_types(property: &Value) -> Vec<&str> {
    match property.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn convert(field: &str, raw: &str, property: &Value) -> Result<Value, ToolError> {
    let types = property_types(property);
    let wrong = |expected: &str| {
        ToolError::usage(
            ErrorCode::InvalidInput,
            format!("--{field}: expected {expected}, got '{raw}'"),
        )
        .with_details(serde_json::json!({ "field": field, "expected": expected }))
    };
    if types.contains(&"boolean") {
        return match raw {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(wrong("true or false")),
        };
    }
    if types.contains(&"integer") {
        return raw
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| wrong("a whole number"));
    }
    if types.contains(&"number") {
        return raw
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| wrong("a number"));
    }
    if types.contains(&"array") {
        if raw.trim_start().starts_with('[') {
            return serde_json::from_str(raw).map_err(|_| wrong("a JSON array"));
        }
        let item = property.get("items").cloned().unwrap_or(Value::Null);
        return raw
            .split(',')
            .filter(|part| !part.is_empty())
            .map(|part| convert(field, part, &item))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array);
    }
    if types.contains(&"object") {
        return serde_json::from_str(raw).map_err(|_| wrong("a JSON object"));
    }
    Ok(Value::String(raw.to_owned()))
}

/// Merges `args` (strings) and `positional` words into `input`, converting by `schema`.
pub fn merge_cli_input(
    schema: &Value,
    primary: Option<&str>,
    input: Option<Map<String, Value>>,
    args: Map<String, Value>,
    positional: Vec<String>,
) -> Result<Value, ToolError> {
    let mut merged = input.unwrap_or_default();
    let properties = schema.get("properties").and_then(Value::as_object);
    let empty = Map::new();
    let properties = properties.unwrap_or(&empty);
    let known = || properties.keys().map(String::as_str).collect::<Vec<_>>();
    for (field, value) in args {
        let Some(property) = properties.get(&field) else {
            let suggestion = entity::nearest(&field, known());
            let hint = suggestion.map_or(String::new(), |s| format!(" Did you mean --{s}?"));
            return Err(ToolError::usage(
                ErrorCode::UnknownField,
                format!(
                    "Unknown field '{field}'.{hint} Fields: {}",
                    known().join(", ")
                ),
            )
            .with_details(serde_json::json!({ "field": field, "known": known() })));
        };
        if merged.contains_key(&field) {
            return Err(ToolError::usage(
                ErrorCode::DuplicateField,
                format!("Field '{field}' is given twice; pass it once"),
            ));
        }
        let converted = match value {
            Value::String(raw) => convert(&field, &raw, property)?,
            other => other,
        };
        merged.insert(field, converted);
    }
    if !positional.is_empty() {
        let Some(primary) = primary else {
            return Err(ToolError::usage(
                ErrorCode::UnexpectedPositional,
                format!(
                    "This callable takes no bare arguments (got '{}'); pass fields as --name=value",
                    positional.join(" ")
                ),
            ));
        };
        if merged.contains_key(primary) {
            return Err(ToolError::usage(
                ErrorCode::DuplicateField,
                format!("Field '{primary}' is given both as a flag and as a bare argument"),
            ));
        }
        let property = properties.get(primary).cloned().unwrap_or(Value::Null);
        let value = if property_types(&property).contains(&"string") {
            Value::String(positional.join(" "))
        } else if positional.len() == 1 {
            convert(primary, &positional[0], &property)?
        } else {
            return Err(ToolError::usage(
                ErrorCode::UnexpectedPositional,
                format!("'{primary}' takes one value, got {}", positional.len()),
            ));
        };
        merged.insert(primary.to_owned(), value);
    }
    Ok(Value::Object(merged))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type":"object","properties":{
            "text":{"type":"string"},
            "limit":{"type":["integer","null"]},
            "silent":{"type":["boolean","null"]},
            "paths":{"type":"array","items":{"type":"string"}}
        }})
    }

    fn args(pairs: &[(&str, &str)]) -> Map<String, Value> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::String((*v).to_owned())))
            .collect()
    }

    #[test]
    fn converts_by_schema_type() {
        let merged = merge_cli_input(
            &schema(),
            Some("text"),
            None,
            args(&[("limit", "5"), ("silent", "true"), ("paths", "a.txt,b.txt")]),
            vec!["hello".into(), "world".into()],
        )
        .unwrap();
        assert_eq!(
            merged,
            json!({"limit":5,"silent":true,"paths":["a.txt","b.txt"],"text":"hello world"})
        );
    }

    #[test]
    fn a_string_field_keeps_digits_as_text() {
        let merged =
            merge_cli_input(&schema(), None, None, args(&[("text", "42")]), vec![]).unwrap();
        assert_eq!(merged, json!({"text":"42"}));
    }

    #[test]
    fn bad_values_name_the_field_and_the_expectation() {
        let error =
            merge_cli_input(&schema(), None, None, args(&[("limit", "lots")]), vec![]).unwrap_err();
        assert_eq!(
            error.message,
            "--limit: expected a whole number, got 'lots'"
        );
        let error =
            merge_cli_input(&schema(), None, None, args(&[("silent", "yes")]), vec![]).unwrap_err();
        assert!(error.message.contains("true or false"));
    }

    #[test]
    fn unknown_fields_get_a_suggestion() {
        let error =
            merge_cli_input(&schema(), None, None, args(&[("limt", "5")]), vec![]).unwrap_err();
        assert!(
            error.message.contains("Did you mean --limit?"),
            "{}",
            error.message
        );
    }

    #[test]
    fn positional_without_a_primary_field_is_refused() {
        let error =
            merge_cli_input(&schema(), None, None, Map::new(), vec!["x".into()]).unwrap_err();
        assert_eq!(error.code, "unexpected_positional");
    }

    #[test]
    fn a_field_given_twice_is_refused() {
        let input = json!({"text":"a"}).as_object().cloned();
        let error = merge_cli_input(&schema(), Some("text"), input, Map::new(), vec!["b".into()])
            .unwrap_err();
        assert_eq!(error.code, "duplicate_field");
    }
}
