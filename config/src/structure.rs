//! The structural pass: TOML syntax, unknown keys and wrong types, all reported at once.
//!
//! serde stops at the first error, so each error's entry is removed from the parsed document
//! and deserialization runs again, until it succeeds. The document keeps the original spans, so
//! every problem points at the right place in the file.

use serde::Deserialize;
use toml::de::{DeArray, DeTable, DeValue};

use crate::raw::RawConfig;
use crate::report::Collector;

/// More rounds than any hand-written file has mistakes; stops a pathological file from looping.
const MAX_ROUNDS: usize = 200;

pub(crate) fn read(source: &str, collector: &mut Collector) -> Option<RawConfig> {
    let (document, syntax_errors) = DeTable::parse_recoverable(source);
    if !syntax_errors.is_empty() {
        for error in syntax_errors {
            collector.add(
                error.span(),
                "(syntax)",
                error.message().trim().to_owned(),
                "fix the TOML syntax here; see switchboard.example.toml for the expected layout",
            );
        }
        return None;
    }
    let mut document = document;
    for _ in 0..MAX_ROUNDS {
        let attempt = RawConfig::deserialize(toml::de::Deserializer::from(document.clone()));
        let error = match attempt {
            Ok(raw) => return Some(raw),
            Err(error) => error,
        };
        let mut path = Vec::new();
        let removed = error
            .span()
            .is_some_and(|span| remove_at(document.get_mut(), span.start, &mut path));
        let key_path = if removed {
            join_path(&path)
        } else {
            "(document)".to_owned()
        };
        let (message, help) = explain(error.message(), &key_path);
        collector.add(error.span(), key_path, message, help);
        if !removed {
            return None;
        }
    }
    None
}

fn join_path(path: &[String]) -> String {
    let mut joined = String::new();
    for segment in path {
        if !joined.is_empty() && !segment.starts_with('[') {
            joined.push('.');
        }
        joined.push_str(segment);
    }
    joined
}

fn contains(span: &std::ops::Range<usize>, pos: usize) -> bool {
    span.start <= pos && (pos < span.end || span.start == span.end)
}

/// Removes the deepest entry whose key or value covers `pos`, recording its key path.
fn remove_at(table: &mut DeTable<'_>, pos: usize, path: &mut Vec<String>) -> bool {
    for (key, value) in table.iter_mut() {
        path.push(key.get_ref().to_string());
        let removed = match value.get_mut() {
            DeValue::Table(child) => remove_at(child, pos, path),
            DeValue::Array(items) => remove_in_array(items, pos, path),
            _ => false,
        };
        if removed {
            return true;
        }
        path.pop();
    }
    let hit = table
        .iter()
        .find(|(key, value)| contains(&key.span(), pos) || contains(&value.span(), pos))
        .map(|(key, _)| key.clone());
    match hit {
        Some(key) => {
            path.push(key.get_ref().to_string());
            table.remove(&key);
            true
        }
        None => false,
    }
}

fn remove_in_array(items: &mut DeArray<'_>, pos: usize, path: &mut Vec<String>) -> bool {
    for index in 0..items.len() {
        path.push(format!("[{index}]"));
        let item = &mut (**items)[index];
        let covers = contains(&item.span(), pos);
        if let DeValue::Table(child) = item.get_mut() {
            if remove_at(child, pos, path) {
                return true;
            }
        }
        if covers {
            let kept: DeArray<'_> = std::mem::replace(items, DeArray::new())
                .into_iter()
                .enumerate()
                .filter(|(i, _)| *i != index)
                .map(|(_, item)| item)
                .collect();
            *items = kept;
            return true;
        }
        path.pop();
    }
    false
}

/// Whether an integer serde refused at `key_path` was meant as a Discord id: an id's size
/// (17 to 20 digits) or a key named for ids. Other integers (a prompt, a flag) get the help
/// for their own type.
fn an_unquoted_id(message: &str, key_path: &str) -> bool {
    let digits = message.split_once("integer `").map_or(0, |(_, rest)| {
        rest.chars().take_while(char::is_ascii_digit).count()
    });
    let key = key_path
        .rsplit('.')
        .next()
        .unwrap_or_default()
        .split('[')
        .next()
        .unwrap_or_default();
    digits >= 17 || key.ends_with("_id") || key.ends_with("_ids")
}

/// serde's message at `key_path`, and what to do about it.
fn explain(message: &str, key_path: &str) -> (String, String) {
    let message = message.trim().to_owned();
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let (field, expected) = rest.split_once('`').unwrap_or((rest, ""));
        let known: Vec<&str> = expected
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|k| !k.is_empty())
            .collect();
        let mut help = match entity::nearest(field, known.iter().copied()) {
            Some(near) => format!("did you mean `{near}`? Otherwise remove this key"),
            None => "remove this key".to_owned(),
        };
        if !known.is_empty() {
            help.push_str(&format!(
                "; the keys allowed here are: {}",
                known.join(", ")
            ));
        }
        return (format!("unknown key `{field}`"), help);
    }
    if message.starts_with("invalid type") {
        let help = if message.contains("integer `") && an_unquoted_id(&message, key_path) {
            "write Discord ids as quoted strings (\"123456789012345678\"); TOML integers lose precision in many tools"
        } else if message.ends_with("expected a boolean") {
            "write true or false (without quotes)"
        } else {
            "change the value to the type named in the message"
        };
        return (message, help.to_owned());
    }
    if message.starts_with("missing field") {
        return (message, "add the missing key".to_owned());
    }
    (message, "fix this value".to_owned())
}
