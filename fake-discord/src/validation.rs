//! Validation of message bodies the way Discord does it: field types, length limits,
//! `allowed_mentions` shape, `nonce` limits, bulk-delete bounds. Field errors come back as one
//! 50035 "Invalid Form Body" answer listing every bad field.

use axum::body::Bytes;
use serde_json::{Map, Value};

use crate::api_error::{ApiError, FormErrors};
use crate::attachments::{self, Upload, MAX_FILENAME_BYTES, MAX_FILES};
use crate::snowflake::Snowflake;

/// Most characters a bot's message `content` may have.
pub const MAX_CONTENT_CHARS: usize = 2000;
/// Most characters a string `nonce` may have.
pub const MAX_NONCE_CHARS: usize = 25;
/// Most embeds per message.
pub const MAX_EMBEDS: usize = 10;
/// Bounds of a bulk delete.
pub const BULK_DELETE_MIN: usize = 2;
pub const BULK_DELETE_MAX: usize = 100;

/// A checked `allowed_mentions` object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AllowedMentions {
    pub parse_users: bool,
    pub parse_roles: bool,
    pub parse_everyone: bool,
    pub users: Vec<Snowflake>,
    pub roles: Vec<Snowflake>,
    pub replied_user: bool,
}

/// A checked `message_reference`.
#[derive(Clone, Debug, PartialEq)]
pub struct ReferenceDraft {
    pub message_id: Snowflake,
    pub channel_id: Option<Snowflake>,
    pub fail_if_not_exists: bool,
}

/// A checked message-create body.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MessageDraft {
    pub content: String,
    pub tts: bool,
    pub embeds: Vec<Value>,
    pub components: Vec<Value>,
    pub has_stickers: bool,
    pub has_poll: bool,
    /// The files to attach, in `files[n]` order, named and described as
    /// `attachments` asked.
    pub files: Vec<DraftFile>,
    pub flags: u64,
    /// The nonce as sent (integer or string).
    pub nonce: Option<Value>,
    pub enforce_nonce: bool,
    pub allowed_mentions: Option<AllowedMentions>,
    pub reference: Option<ReferenceDraft>,
}

impl MessageDraft {
    /// Whether the message would have nothing to show (Discord answers 50006).
    pub fn is_empty(&self) -> bool {
        self.content.is_empty()
            && self.embeds.is_empty()
            && self.components.is_empty()
            && !self.has_stickers
            && !self.has_poll
            && self.files.is_empty()
    }

    /// The nonce as a lookup key.
    pub fn nonce_key(&self) -> Option<String> {
        match &self.nonce {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        }
    }
}

/// A file to attach to a new message.
#[derive(Clone, Debug, PartialEq)]
pub struct DraftFile {
    pub filename: String,
    pub description: Option<String>,
    pub content_type: String,
    pub content: Bytes,
}

/// A checked message-edit body; `None` fields are left as they are.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EditDraft {
    pub content: Option<String>,
    pub embeds: Option<Vec<Value>>,
    pub components: Option<Vec<Value>>,
    pub flags: Option<u64>,
    pub allowed_mentions: Option<AllowedMentions>,
}

fn as_object<'a>(body: &'a Value, errors: &mut FormErrors) -> Option<&'a Map<String, Value>> {
    match body {
        Value::Object(map) => Some(map),
        _ => {
            errors.add(
                &[],
                "DICT_TYPE_CONVERT",
                "Only dictionaries may be used in a DictType",
            );
            None
        }
    }
}

/// A field that is present and not null.
fn field<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    map.get(key).filter(|v| !v.is_null())
}

fn string_field(
    map: &Map<String, Value>,
    key: &str,
    max: usize,
    errors: &mut FormErrors,
) -> Option<String> {
    match field(map, key)? {
        Value::String(s) => {
            if s.chars().count() > max {
                errors.add(
                    &[key],
                    "BASE_TYPE_MAX_LENGTH",
                    format!("Must be {max} or fewer in length."),
                );
            }
            Some(s.clone())
        }
        _ => {
            errors.add(&[key], "BASE_TYPE_STRING", "Must be a string.");
            None
        }
    }
}

fn bool_field(map: &Map<String, Value>, key: &str, errors: &mut FormErrors) -> Option<bool> {
    match field(map, key)? {
        Value::Bool(b) => Some(*b),
        _ => {
            errors.add(&[key], "BASE_TYPE_BOOLEAN", "Must be either true or false.");
            None
        }
    }
}

fn int_field(map: &Map<String, Value>, key: &str, errors: &mut FormErrors) -> Option<u64> {
    let value = field(map, key)?;
    match value.as_u64() {
        Some(n) => Some(n),
        None => {
            errors.add(
                &[key],
                "NUMBER_TYPE_COERCE",
                format!("Value \"{value}\" is not int."),
            );
            None
        }
    }
}

fn array_field(
    map: &Map<String, Value>,
    key: &str,
    max: usize,
    errors: &mut FormErrors,
) -> Option<Vec<Value>> {
    match field(map, key)? {
        Value::Array(items) => {
            if items.len() > max {
                errors.add(
                    &[key],
                    "BASE_TYPE_MAX_LENGTH",
                    format!("Must be {max} or fewer in length."),
                );
            }
            Some(items.clone())
        }
        _ => {
            errors.add(&[key], "BASE_TYPE_LIST", "Must be a list.");
            None
        }
    }
}

fn snowflake_value(value: &Value) -> Option<Snowflake> {
    match value {
        Value::String(s) => Snowflake::from_digits(s),
        Value::Number(n) => n.as_u64().map(Snowflake),
        _ => None,
    }
}

fn check_embeds(embeds: &[Value], errors: &mut FormErrors) {
    for (i, embed) in embeds.iter().enumerate() {
        let index = i.to_string();
        let Some(map) = embed.as_object() else {
            errors.add(
                &["embeds", &index],
                "DICT_TYPE_CONVERT",
                "Only dictionaries may be used in a DictType",
            );
            continue;
        };
        for (key, max) in [("title", 256), ("description", 4096)] {
            if let Some(v) = field(map, key) {
                match v.as_str() {
                    Some(s) if s.chars().count() > max => errors.add(
                        &["embeds", &index, key],
                        "BASE_TYPE_MAX_LENGTH",
                        format!("Must be {max} or fewer in length."),
                    ),
                    Some(_) => {}
                    None => errors.add(
                        &["embeds", &index, key],
                        "BASE_TYPE_STRING",
                        "Must be a string.",
                    ),
                }
            }
        }
    }
}

fn allowed_mentions(value: &Value, errors: &mut FormErrors) -> Option<AllowedMentions> {
    let Some(map) = value.as_object() else {
        errors.add(
            &["allowed_mentions"],
            "DICT_TYPE_CONVERT",
            "Only dictionaries may be used in a DictType",
        );
        return None;
    };
    let mut out = AllowedMentions::default();
    let mut parse_given_users = false;
    let mut parse_given_roles = false;
    if let Some(parse) = field(map, "parse") {
        match parse.as_array() {
            Some(items) => {
                for (i, item) in items.iter().enumerate() {
                    match item.as_str() {
                        Some("users") => {
                            out.parse_users = true;
                            parse_given_users = true;
                        }
                        Some("roles") => {
                            out.parse_roles = true;
                            parse_given_roles = true;
                        }
                        Some("everyone") => out.parse_everyone = true,
                        _ => errors.add(
                            &["allowed_mentions", "parse", &i.to_string()],
                            "BASE_TYPE_CHOICES",
                            "Value must be one of {'everyone', 'roles', 'users'}.",
                        ),
                    }
                }
            }
            None => errors.add(
                &["allowed_mentions", "parse"],
                "BASE_TYPE_LIST",
                "Must be a list.",
            ),
        }
    }
    for (key, parsed, target) in [
        ("users", parse_given_users, &mut out.users),
        ("roles", parse_given_roles, &mut out.roles),
    ] {
        let Some(list) = field(map, key) else {
            continue;
        };
        let Some(items) = list.as_array() else {
            errors.add(
                &["allowed_mentions", key],
                "BASE_TYPE_LIST",
                "Must be a list.",
            );
            continue;
        };
        if items.len() > 100 {
            errors.add(
                &["allowed_mentions", key],
                "BASE_TYPE_MAX_LENGTH",
                "Must be 100 or fewer in length.",
            );
        }
        for (i, item) in items.iter().enumerate() {
            match snowflake_value(item) {
                Some(id) => target.push(id),
                None => errors.add(
                    &["allowed_mentions", key, &i.to_string()],
                    "NUMBER_TYPE_COERCE",
                    format!("Value \"{item}\" is not snowflake."),
                ),
            }
        }
        if parsed && !items.is_empty() {
            errors.add(
                &["allowed_mentions"],
                "MESSAGE_ALLOWED_MENTIONS_PARSE_EXCLUSIVE",
                format!("parse:[\"{key}\"] and {key}: [ids...] are mutually exclusive."),
            );
        }
    }
    if let Some(v) = field(map, "replied_user") {
        match v.as_bool() {
            Some(b) => out.replied_user = b,
            None => errors.add(
                &["allowed_mentions", "replied_user"],
                "BASE_TYPE_BOOLEAN",
                "Must be either true or false.",
            ),
        }
    }
    Some(out)
}

fn nonce(value: &Value, errors: &mut FormErrors) -> Option<Value> {
    match value {
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(value.clone()),
        Value::String(s) => {
            if s.chars().count() > MAX_NONCE_CHARS {
                errors.add(
                    &["nonce"],
                    "BASE_TYPE_MAX_LENGTH",
                    format!("Must be {MAX_NONCE_CHARS} or fewer in length."),
                );
            }
            Some(value.clone())
        }
        _ => {
            errors.add(
                &["nonce"],
                "NONCE_TYPE_INVALID",
                "Nonce must be an integer or string.",
            );
            None
        }
    }
}

fn reference(value: &Value, errors: &mut FormErrors) -> Option<ReferenceDraft> {
    let Some(map) = value.as_object() else {
        errors.add(
            &["message_reference"],
            "DICT_TYPE_CONVERT",
            "Only dictionaries may be used in a DictType",
        );
        return None;
    };
    let message_id = match field(map, "message_id") {
        None => {
            errors.add(
                &["message_reference", "message_id"],
                "BASE_TYPE_REQUIRED",
                "This field is required",
            );
            None
        }
        Some(v) => match snowflake_value(v) {
            Some(id) => Some(id),
            None => {
                errors.add(
                    &["message_reference", "message_id"],
                    "NUMBER_TYPE_COERCE",
                    format!("Value \"{v}\" is not snowflake."),
                );
                None
            }
        },
    };
    let channel_id = match field(map, "channel_id") {
        None => None,
        Some(v) => match snowflake_value(v) {
            Some(id) => Some(id),
            None => {
                errors.add(
                    &["message_reference", "channel_id"],
                    "NUMBER_TYPE_COERCE",
                    format!("Value \"{v}\" is not snowflake."),
                );
                None
            }
        },
    };
    let fail_if_not_exists = field(map, "fail_if_not_exists")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    message_id.map(|message_id| ReferenceDraft {
        message_id,
        channel_id,
        fail_if_not_exists,
    })
}

/// Checks `attachments` entries (`{"id", "filename"?, "description"?}`) against the uploaded
/// files and resolves each file's name, description and media type.
fn resolve_files(
    entries: &[Value],
    uploads: Vec<Upload>,
    errors: &mut FormErrors,
) -> Vec<DraftFile> {
    let mut meta: Vec<(usize, Option<String>, Option<String>)> = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let index = i.to_string();
        let Some(map) = entry.as_object() else {
            errors.add(
                &["attachments", &index],
                "DICT_TYPE_CONVERT",
                "Only dictionaries may be used in a DictType",
            );
            continue;
        };
        let id = match field(map, "id") {
            None => {
                errors.add(
                    &["attachments", &index, "id"],
                    "BASE_TYPE_REQUIRED",
                    "This field is required",
                );
                continue;
            }
            Some(v) => snowflake_value(v).map(|s| s.0),
        };
        let upload = id.and_then(|id| {
            uploads
                .iter()
                .find(|u| u.index as u64 == id)
                .map(|u| u.index)
        });
        let Some(upload) = upload else {
            errors.add(
                &["attachments", &index, "id"],
                "ATTACHMENT_NOT_FOUND",
                format!(
                    "Value \"{}\" is not the n of an uploaded files[n].",
                    map.get("id").map(Value::to_string).unwrap_or_default()
                ),
            );
            continue;
        };
        if meta.iter().any(|(u, _, _)| *u == upload) {
            errors.add(
                &["attachments", &index, "id"],
                "ATTACHMENT_DUPLICATE",
                format!("files[{upload}] is described more than once."),
            );
            continue;
        }
        let filename = match field(map, "filename") {
            None => None,
            Some(Value::String(f)) if attachments::filename_ok(f) => Some(f.clone()),
            Some(Value::String(_)) => {
                errors.add(
                    &["attachments", &index, "filename"],
                    "BASE_TYPE_BAD_LENGTH",
                    format!("Must be between 1 and {MAX_FILENAME_BYTES} in length."),
                );
                None
            }
            Some(_) => {
                errors.add(
                    &["attachments", &index, "filename"],
                    "BASE_TYPE_STRING",
                    "Must be a string.",
                );
                None
            }
        };
        let description = match field(map, "description") {
            None => None,
            Some(Value::String(d)) => {
                if d.chars().count() > 1024 {
                    errors.add(
                        &["attachments", &index, "description"],
                        "BASE_TYPE_MAX_LENGTH",
                        "Must be 1024 or fewer in length.",
                    );
                }
                Some(d.clone())
            }
            Some(_) => {
                errors.add(
                    &["attachments", &index, "description"],
                    "BASE_TYPE_STRING",
                    "Must be a string.",
                );
                None
            }
        };
        meta.push((upload, filename, description));
    }
    uploads
        .into_iter()
        .map(|u| {
            let (filename, description) = meta
                .iter()
                .find(|(i, _, _)| *i == u.index)
                .map(|(_, f, d)| (f.clone(), d.clone()))
                .unwrap_or_default();
            let filename = filename.unwrap_or(u.filename);
            DraftFile {
                content_type: attachments::content_type(u.content_type.as_deref(), &filename),
                filename,
                description,
                content: u.content,
            }
        })
        .collect()
}

/// Checks a `POST /channels/{id}/messages` JSON body (also used for interaction responses and
/// webhook follow-ups, which share its fields).
pub fn message_create(body: &Value) -> Result<MessageDraft, ApiError> {
    message_create_with_files(body, Vec::new())
}

/// Checks a message-create body sent with files (`uploads`, in `files[n]` order); content may
/// then be empty. `attachments` entries must name uploaded files.
pub fn message_create_with_files(
    body: &Value,
    uploads: Vec<Upload>,
) -> Result<MessageDraft, ApiError> {
    let mut errors = FormErrors::new();
    let Some(map) = as_object(body, &mut errors) else {
        return Err(ApiError::invalid_form(errors));
    };
    let mut draft = MessageDraft {
        content: string_field(map, "content", MAX_CONTENT_CHARS, &mut errors).unwrap_or_default(),
        tts: bool_field(map, "tts", &mut errors).unwrap_or(false),
        enforce_nonce: bool_field(map, "enforce_nonce", &mut errors).unwrap_or(false),
        flags: int_field(map, "flags", &mut errors).unwrap_or(0),
        embeds: array_field(map, "embeds", MAX_EMBEDS, &mut errors).unwrap_or_default(),
        components: array_field(map, "components", MAX_ACTION_ROWS, &mut errors)
            .unwrap_or_default(),
        has_stickers: array_field(map, "sticker_ids", 3, &mut errors)
            .is_some_and(|s| !s.is_empty()),
        has_poll: field(map, "poll").is_some(),
        ..MessageDraft::default()
    };
    check_embeds(&draft.embeds, &mut errors);
    check_components(&draft.components, &mut errors);
    if uploads.len() > MAX_FILES {
        errors.add(
            &["files"],
            "BASE_TYPE_MAX_LENGTH",
            format!("Must be {MAX_FILES} or fewer in length."),
        );
    }
    let entries = array_field(map, "attachments", MAX_FILES, &mut errors).unwrap_or_default();
    draft.files = resolve_files(&entries, uploads, &mut errors);
    if let Some(v) = field(map, "allowed_mentions") {
        draft.allowed_mentions = allowed_mentions(v, &mut errors);
    }
    if let Some(v) = field(map, "nonce") {
        draft.nonce = nonce(v, &mut errors);
    }
    if draft.enforce_nonce && draft.nonce.is_none() {
        errors.add(
            &["nonce"],
            "BASE_TYPE_REQUIRED",
            "This field is required when enforce_nonce is set",
        );
    }
    if let Some(v) = field(map, "message_reference") {
        draft.reference = reference(v, &mut errors);
    }
    errors.into_result()?;
    if draft.is_empty() {
        return Err(ApiError::cannot_send_empty_message());
    }
    Ok(draft)
}

/// Checks a `PATCH /channels/{id}/messages/{id}` body.
pub fn message_edit(body: &Value) -> Result<EditDraft, ApiError> {
    let mut errors = FormErrors::new();
    let Some(map) = as_object(body, &mut errors) else {
        return Err(ApiError::invalid_form(errors));
    };
    let draft = EditDraft {
        content: string_field(map, "content", MAX_CONTENT_CHARS, &mut errors),
        embeds: array_field(map, "embeds", MAX_EMBEDS, &mut errors),
        components: array_field(map, "components", MAX_ACTION_ROWS, &mut errors),
        flags: int_field(map, "flags", &mut errors),
        allowed_mentions: field(map, "allowed_mentions")
            .and_then(|v| allowed_mentions(v, &mut errors)),
    };
    if let Some(embeds) = &draft.embeds {
        check_embeds(embeds, &mut errors);
    }
    if let Some(components) = &draft.components {
        check_components(components, &mut errors);
    }
    errors.into_result()?;
    Ok(draft)
}

/// Most action rows on a message (legacy components).
const MAX_ACTION_ROWS: usize = 5;
/// Most buttons in one action row.
const MAX_BUTTONS_PER_ROW: usize = 5;
/// Longest `custom_id`.
const MAX_CUSTOM_ID_CHARS: usize = 100;
/// Longest button label.
const MAX_BUTTON_LABEL_CHARS: usize = 80;

/// Component types (the message components the fake understands).
const ACTION_ROW: u64 = 1;
const BUTTON: u64 = 2;
/// Button styles: primary, secondary, success, danger, link, premium.
const LINK_STYLE: u64 = 5;
const PREMIUM_STYLE: u64 = 6;

/// Checks legacy message components as Discord does: top-level action rows, each holding one
/// to five buttons; a button has a style 1–6, a label of at most 80 characters, a
/// `custom_id` of at most 100 characters unique in the message (link buttons: a `url`
/// instead). Select menus and other kinds are not supported by the fake and are refused.
pub fn check_components(components: &[Value], errors: &mut FormErrors) {
    let mut custom_ids: Vec<String> = Vec::new();
    for (r, row) in components.iter().enumerate() {
        let r = r.to_string();
        let Some(row) = row.as_object() else {
            errors.add(
                &["components", &r],
                "DICT_TYPE_CONVERT",
                "Only dictionaries may be used in a DictType",
            );
            continue;
        };
        if row.get("type").and_then(Value::as_u64) != Some(ACTION_ROW) {
            errors.add(
                &["components", &r, "type"],
                "UNION_TYPE_CHOICES",
                "Value of field \"type\" must be one of (1,).",
            );
            continue;
        }
        let Some(children) = row.get("components").and_then(Value::as_array) else {
            errors.add(
                &["components", &r, "components"],
                "BASE_TYPE_REQUIRED",
                "This field is required",
            );
            continue;
        };
        if children.is_empty() || children.len() > MAX_BUTTONS_PER_ROW {
            errors.add(
                &["components", &r, "components"],
                if children.is_empty() {
                    "BASE_TYPE_MIN_LENGTH"
                } else {
                    "BASE_TYPE_MAX_LENGTH"
                },
                format!("Must be between 1 and {MAX_BUTTONS_PER_ROW} in length."),
            );
        }
        for (c, child) in children.iter().enumerate() {
            let c = c.to_string();
            let at = |field: &'static str| -> Vec<&str> {
                vec!["components", &r, "components", &c, field]
            };
            let Some(child) = child.as_object() else {
                errors.add(
                    &["components", &r, "components", &c],
                    "DICT_TYPE_CONVERT",
                    "Only dictionaries may be used in a DictType",
                );
                continue;
            };
            if child.get("type").and_then(Value::as_u64) != Some(BUTTON) {
                errors.add(
                    &at("type"),
                    "UNION_TYPE_CHOICES",
                    "Value of field \"type\" must be one of (2,): the fake supports buttons only.",
                );
                continue;
            }
            let style = child.get("style").and_then(Value::as_u64);
            if !matches!(style, Some(1..=6)) {
                errors.add(
                    &at("style"),
                    "BUTTON_COMPONENT_INVALID_STYLE",
                    "Value must be one of {1, 2, 3, 4, 5, 6}.",
                );
            }
            if let Some(label) = child.get("label") {
                match label.as_str() {
                    Some(text) if text.chars().count() > MAX_BUTTON_LABEL_CHARS => errors.add(
                        &at("label"),
                        "BASE_TYPE_MAX_LENGTH",
                        format!("Must be {MAX_BUTTON_LABEL_CHARS} or fewer in length."),
                    ),
                    Some(_) => {}
                    None => errors.add(&at("label"), "BASE_TYPE_STRING", "Must be a string."),
                }
            }
            if let Some(disabled) = child.get("disabled") {
                if !disabled.is_boolean() {
                    errors.add(
                        &at("disabled"),
                        "BASE_TYPE_BOOLEAN",
                        "Must be either true or false.",
                    );
                }
            }
            match style {
                Some(LINK_STYLE) => {
                    if !child.get("url").is_some_and(Value::is_string) {
                        errors.add(
                            &at("url"),
                            "BUTTON_COMPONENT_URL_REQUIRED",
                            "A URL is required",
                        );
                    }
                    if child.contains_key("custom_id") {
                        errors.add(
                            &at("custom_id"),
                            "BUTTON_COMPONENT_CUSTOM_ID_NOT_ALLOWED",
                            "A custom id cannot be set for a link button",
                        );
                    }
                }
                Some(PREMIUM_STYLE) => {}
                _ => match child.get("custom_id").map(Value::as_str) {
                    None => errors.add(
                        &at("custom_id"),
                        "BUTTON_COMPONENT_CUSTOM_ID_REQUIRED",
                        "A custom id is required",
                    ),
                    Some(None) => {
                        errors.add(&at("custom_id"), "BASE_TYPE_STRING", "Must be a string.");
                    }
                    Some(Some(id)) if id.is_empty() || id.chars().count() > MAX_CUSTOM_ID_CHARS => {
                        errors.add(
                            &at("custom_id"),
                            "BASE_TYPE_BAD_LENGTH",
                            format!("Must be between 1 and {MAX_CUSTOM_ID_CHARS} in length."),
                        );
                    }
                    Some(Some(id)) => {
                        if custom_ids.iter().any(|seen| seen == id) {
                            errors.add(
                                &at("custom_id"),
                                "COMPONENT_CUSTOM_ID_DUPLICATED",
                                "Component custom id cannot be duplicated",
                            );
                        } else {
                            custom_ids.push(id.to_owned());
                        }
                    }
                },
            }
        }
    }
}

/// Checks a bulk-delete body and returns the message ids.
pub fn bulk_delete(body: &Value) -> Result<Vec<Snowflake>, ApiError> {
    let mut errors = FormErrors::new();
    let Some(map) = as_object(body, &mut errors) else {
        return Err(ApiError::invalid_form(errors));
    };
    let mut ids = Vec::new();
    match field(map, "messages").map(Value::as_array) {
        None => errors.add(
            &["messages"],
            "BASE_TYPE_REQUIRED",
            "This field is required",
        ),
        Some(None) => errors.add(&["messages"], "BASE_TYPE_LIST", "Must be a list."),
        Some(Some(items)) => {
            if !(BULK_DELETE_MIN..=BULK_DELETE_MAX).contains(&items.len()) {
                errors.add(
                    &["messages"],
                    "BASE_TYPE_BAD_LENGTH",
                    format!("Must be between {BULK_DELETE_MIN} and {BULK_DELETE_MAX} in length."),
                );
            }
            for (i, item) in items.iter().enumerate() {
                match snowflake_value(item) {
                    Some(id) => ids.push(id),
                    None => errors.add(
                        &["messages", &i.to_string()],
                        "NUMBER_TYPE_COERCE",
                        format!("Value \"{item}\" is not snowflake."),
                    ),
                }
            }
        }
    }
    errors.into_result()?;
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_over_2000_chars_is_50035() {
        let err = message_create(&json!({ "content": "x".repeat(2001) })).expect_err("too long");
        assert_eq!(err.code, 50035);
        assert_eq!(
            err.body()["errors"]["content"]["_errors"][0]["code"],
            "BASE_TYPE_MAX_LENGTH"
        );
        assert!(message_create(&json!({ "content": "é".repeat(2000) })).is_ok());
    }

    #[test]
    fn empty_message_is_50006() {
        assert_eq!(message_create(&json!({})).expect_err("empty").code, 50006);
        assert_eq!(
            message_create(&json!({ "content": "" }))
                .expect_err("empty")
                .code,
            50006
        );
        assert!(message_create(&json!({ "embeds": [{ "title": "t" }] })).is_ok());
    }

    #[test]
    fn allowed_mentions_shape_is_checked() {
        let err = message_create(&json!({
            "content": "hi",
            "allowed_mentions": { "parse": ["users", "bogus"], "users": ["1"] }
        }))
        .expect_err("bad");
        let body = err.body();
        assert_eq!(
            body["errors"]["allowed_mentions"]["parse"]["1"]["_errors"][0]["code"],
            "BASE_TYPE_CHOICES"
        );
        assert_eq!(
            body["errors"]["allowed_mentions"]["_errors"][0]["code"],
            "MESSAGE_ALLOWED_MENTIONS_PARSE_EXCLUSIVE"
        );
        let ok = message_create(&json!({
            "content": "hi", "allowed_mentions": { "parse": [], "users": ["12"], "replied_user": false }
        }))
        .expect("valid");
        assert_eq!(
            ok.allowed_mentions.expect("present").users,
            vec![Snowflake(12)]
        );
    }

    #[test]
    fn nonce_is_limited_to_25_chars() {
        let err = message_create(&json!({ "content": "hi", "nonce": "n".repeat(26) }))
            .expect_err("long nonce");
        assert_eq!(
            err.body()["errors"]["nonce"]["_errors"][0]["code"],
            "BASE_TYPE_MAX_LENGTH"
        );
        let ok = message_create(&json!({ "content": "hi", "nonce": 42, "enforce_nonce": true }))
            .expect("int nonce");
        assert_eq!(ok.nonce_key().as_deref(), Some("42"));
    }

    #[test]
    fn wrong_types_are_reported_per_field() {
        let err = message_create(&json!({ "content": 5, "tts": "yes" })).expect_err("types");
        let body = err.body();
        assert_eq!(
            body["errors"]["content"]["_errors"][0]["code"],
            "BASE_TYPE_STRING"
        );
        assert_eq!(
            body["errors"]["tts"]["_errors"][0]["code"],
            "BASE_TYPE_BOOLEAN"
        );
        assert_eq!(
            message_create(&json!([1, 2])).expect_err("array").code,
            50035
        );
    }

    #[test]
    fn bulk_delete_bounds() {
        assert!(bulk_delete(&json!({ "messages": ["1"] })).is_err());
        assert_eq!(
            bulk_delete(&json!({ "messages": ["1", 2] })).expect("ok"),
            vec![Snowflake(1), Snowflake(2)]
        );
        assert!(bulk_delete(&json!({})).is_err());
    }
}
