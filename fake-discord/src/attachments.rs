//! Attachments: files uploaded with a message (a `multipart/form-data` create with a
//! `payload_json` part and `files[n]` parts, or control-API attachments), the attachment
//! objects messages carry, and the CDN route that serves the bytes
//! (`GET /attachments/{channel_id}/{attachment_id}/{filename}`, no auth, like Discord's CDN).

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, Multipart, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};

use crate::api_error::{ApiError, FormErrors};
use crate::shared::Shared;
use crate::snowflake::Snowflake;
use crate::state::RecordedPart;

/// Discord's default upload limit per file: 10 MiB.
pub const DEFAULT_MAX_UPLOAD_BYTES: usize = 10 * 1024 * 1024;
/// Most files one message may carry.
pub const MAX_FILES: usize = 10;
/// Longest filename accepted, in bytes.
pub const MAX_FILENAME_BYTES: usize = 1024;
/// Most parts a multipart body may have; parsing stops with an error beyond it.
const MAX_PARTS: usize = 64;
/// The media type of anything the fake cannot name better.
const OCTET_STREAM: &str = "application/octet-stream";

/// One part of a `multipart/form-data` body, as sent.
#[derive(Clone, Debug)]
pub struct FormPart {
    pub name: Option<String>,
    pub filename: Option<String>,
    pub content_type: Option<String>,
    pub content: Bytes,
}

/// A parsed `multipart/form-data` body: its parts in order.
#[derive(Clone, Debug, Default)]
pub struct MultipartForm {
    pub parts: Vec<FormPart>,
}

impl MultipartForm {
    fn payload_json(&self) -> Option<&FormPart> {
        self.parts
            .iter()
            .find(|p| p.name.as_deref() == Some("payload_json"))
    }

    /// The `payload_json` part as JSON, for the request log (None if absent or not JSON).
    pub fn payload_value(&self) -> Option<Value> {
        self.payload_json()
            .and_then(|p| serde_json::from_slice(&p.content).ok())
    }

    /// The parts as the request log records them.
    pub fn recorded_parts(&self) -> Vec<RecordedPart> {
        self.parts
            .iter()
            .map(|p| RecordedPart {
                name: p.name.clone().unwrap_or_default(),
                filename: p.filename.clone(),
                content_type: p.content_type.clone(),
                size: p.content.len(),
                content: p.content.clone(),
            })
            .collect()
    }
}

/// Whether the request says its body is `multipart/form-data`.
pub fn is_multipart(parts: &Parts) -> bool {
    parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("multipart/form-data")
        })
}

/// Parses an already buffered multipart body with axum's parser. The request's extensions
/// must disable axum's default body limit (the REST router does): the caller bounded the
/// body already.
pub async fn parse_multipart(parts: &Parts, body: Bytes) -> Result<MultipartForm, String> {
    let request = Request::from_parts(parts.clone(), Body::from(body));
    let mut multipart = Multipart::from_request(request, &())
        .await
        .map_err(|e| e.body_text())?;
    let mut form = MultipartForm::default();
    while let Some(field) = multipart.next_field().await.map_err(|e| e.body_text())? {
        if form.parts.len() >= MAX_PARTS {
            return Err(format!("more than {MAX_PARTS} parts"));
        }
        let name = field.name().map(str::to_string);
        let filename = field.file_name().map(str::to_string);
        let content_type = field.content_type().map(str::to_string);
        let content = field.bytes().await.map_err(|e| e.body_text())?;
        form.parts.push(FormPart {
            name,
            filename,
            content_type,
            content,
        });
    }
    Ok(form)
}

/// A file sent with a message (a `files[n]` part or a control-API attachment), before
/// `payload_json.attachments` may rename or describe it.
#[derive(Clone, Debug, PartialEq)]
pub struct Upload {
    /// The `n` of `files[n]`, which `attachments[].id` refers to.
    pub index: usize,
    pub filename: String,
    pub content_type: Option<String>,
    pub content: Bytes,
}

/// The `n` of a `files[n]` part name (0..=9), or None.
fn file_index(name: &str) -> Option<usize> {
    let digits = name.strip_prefix("files[")?.strip_suffix(']')?;
    match digits.as_bytes() {
        [d] if d.is_ascii_digit() => Some(usize::from(d - b'0')),
        _ => None,
    }
}

/// Whether a filename is acceptable: 1 to 1024 bytes. Anything else goes, verbatim (path
/// separators included); whoever saves the file must sanitize it.
pub fn filename_ok(filename: &str) -> bool {
    !filename.is_empty() && filename.len() <= MAX_FILENAME_BYTES
}

/// Splits a message-create multipart form into its `payload_json` (parsed) and its files,
/// the way Discord checks it: at most 10 files, only `payload_json` and `files[0]`..`files[9]`
/// parts, each file with a filename (50035 naming the part); a file over `max_upload_bytes`
/// answers 413 40005; `payload_json` must be JSON (50109).
pub fn message_form(
    form: &MultipartForm,
    max_upload_bytes: usize,
) -> Result<(Value, Vec<Upload>), ApiError> {
    let mut errors = FormErrors::new();
    let file_parts = form
        .parts
        .iter()
        .filter(|p| p.name.as_deref() != Some("payload_json"))
        .filter(|p| {
            p.filename.is_some() || p.name.as_deref().is_some_and(|n| n.starts_with("files["))
        })
        .count();
    if file_parts > MAX_FILES {
        errors.add(
            &["files"],
            "BASE_TYPE_MAX_LENGTH",
            format!("Must be {MAX_FILES} or fewer in length."),
        );
        return Err(ApiError::invalid_form(errors));
    }
    let mut payload: Option<&FormPart> = None;
    let mut uploads: Vec<Upload> = Vec::new();
    for part in &form.parts {
        let Some(name) = part.name.as_deref() else {
            errors.add(
                &["multipart"],
                "MULTIPART_PART_UNNAMED",
                "A part has no name; expected payload_json or files[0] to files[9].",
            );
            continue;
        };
        if name == "payload_json" {
            if payload.is_some() {
                errors.add(
                    &[name],
                    "MULTIPART_DUPLICATE_PART",
                    "payload_json is given more than once.",
                );
            }
            payload = Some(part);
            continue;
        }
        let Some(index) = file_index(name) else {
            errors.add(
                &[name],
                "MULTIPART_UNKNOWN_PART",
                format!("Unknown part `{name}`; expected payload_json or files[0] to files[9]."),
            );
            continue;
        };
        if uploads.iter().any(|u| u.index == index) {
            errors.add(
                &[name],
                "MULTIPART_DUPLICATE_PART",
                format!("{name} is given more than once."),
            );
            continue;
        }
        match part.filename.as_deref() {
            None | Some("") => errors.add(
                &[name],
                "BASE_TYPE_REQUIRED",
                format!("{name} needs a filename."),
            ),
            Some(filename) if !filename_ok(filename) => errors.add(
                &[name],
                "BASE_TYPE_MAX_LENGTH",
                format!("The filename must be {MAX_FILENAME_BYTES} or fewer bytes."),
            ),
            Some(filename) => uploads.push(Upload {
                index,
                filename: filename.to_string(),
                content_type: part.content_type.clone(),
                content: part.content.clone(),
            }),
        }
    }
    if payload.is_none() {
        errors.add(
            &["payload_json"],
            "BASE_TYPE_REQUIRED",
            "This field is required",
        );
    }
    errors.into_result()?;
    check_sizes(&uploads, max_upload_bytes)?;
    let payload = payload.ok_or_else(ApiError::invalid_json)?;
    let value = serde_json::from_slice(&payload.content).map_err(|_| ApiError::invalid_json())?;
    uploads.sort_by_key(|u| u.index);
    Ok((value, uploads))
}

/// 413 40005 if any file is over the limit.
pub fn check_sizes(uploads: &[Upload], max_upload_bytes: usize) -> Result<(), ApiError> {
    match uploads.iter().find(|u| u.content.len() > max_upload_bytes) {
        Some(u) => {
            tracing::debug!(
                filename = %u.filename,
                size = u.content.len(),
                limit = max_upload_bytes,
                "upload over the limit; answering 413"
            );
            Err(ApiError::entity_too_large())
        }
        None => Ok(()),
    }
}

/// The media type of an attachment: the one it was sent with (when it is a valid header
/// value), else one guessed from the filename's extension, else `application/octet-stream`.
pub fn content_type(sent: Option<&str>, filename: &str) -> String {
    if let Some(sent) = sent.map(str::trim).filter(|s| !s.is_empty()) {
        if HeaderValue::from_str(sent).is_ok() {
            return sent.to_string();
        }
    }
    mime_guess::from_path(filename)
        .first()
        .map(|m| m.essence_str().to_string())
        .unwrap_or_else(|| OCTET_STREAM.to_string())
}

/// Whether `text` is a media type (`type/subtype`, parameters allowed).
pub fn is_media_type(text: &str) -> bool {
    text.parse::<mime_guess::mime::Mime>().is_ok() && HeaderValue::from_str(text).is_ok()
}

/// Percent-encodes one URL path segment: everything but ASCII letters, digits and `-._~`.
pub fn encode_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `{base}/attachments/{channel_id}/{attachment_id}/{filename, percent-encoded}`.
pub fn url(base: &str, channel_id: Snowflake, attachment_id: Snowflake, filename: &str) -> String {
    format!(
        "{base}/attachments/{channel_id}/{attachment_id}/{}",
        encode_segment(filename)
    )
}

/// An attachment object as messages carry it (what serenity's `Attachment` requires:
/// `id`, `filename`, `size`, `url`, `proxy_url`; plus `content_type` and `description`).
pub fn attachment_json(
    base: &str,
    channel_id: Snowflake,
    attachment_id: Snowflake,
    filename: &str,
    description: Option<&str>,
    content_type: &str,
    size: usize,
) -> Value {
    let url = url(base, channel_id, attachment_id, filename);
    let mut value = json!({
        "id": attachment_id,
        "filename": filename,
        "size": size,
        "url": url,
        "proxy_url": url,
        "content_type": content_type,
    });
    if let Some(description) = description {
        value["description"] = json!(description);
    }
    value
}

/// Serde for bytes as a base64 string (`content_base64` fields).
pub(crate) mod base64_serde {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer, T: AsRef<[u8]>>(bytes: &T, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes.as_ref()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>, T: From<Vec<u8>>>(d: D) -> Result<T, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map(T::from)
            .map_err(|e| {
                serde::de::Error::custom(format!(
                    "content_base64 is not valid base64 (standard alphabet, padded): {e}"
                ))
            })
    }
}

/// The CDN router: `GET /attachments/{channel_id}/{attachment_id}/{filename}`.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(
            "/attachments/{channel_id}/{attachment_id}/{filename}",
            get(serve),
        )
        .with_state(shared)
}

/// Answers the bytes with their `Content-Type` (axum adds `Content-Length`); 404 for an
/// unknown (or evicted) attachment or a filename that is not the attachment's.
async fn serve(
    State(s): State<Arc<Shared>>,
    path: Result<Path<(String, String, String)>, PathRejection>,
) -> Response {
    let Ok(Path((channel_id, attachment_id, filename))) = path else {
        return ApiError::not_found().into_response();
    };
    let (Some(channel_id), Some(attachment_id)) = (
        Snowflake::from_digits(&channel_id),
        Snowflake::from_digits(&attachment_id),
    ) else {
        return ApiError::not_found().into_response();
    };
    let file = s
        .lock()
        .file(channel_id, attachment_id)
        .filter(|f| f.filename == filename)
        .cloned();
    match file {
        Some(file) => {
            let content_type = HeaderValue::from_str(&file.content_type)
                .unwrap_or_else(|_| HeaderValue::from_static(OCTET_STREAM));
            ([(header::CONTENT_TYPE, content_type)], file.content).into_response()
        }
        None => {
            tracing::debug!(%channel_id, %attachment_id, %filename, "no such attachment; answering 404");
            ApiError::not_found().into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(name: &str, filename: Option<&str>, content: &[u8]) -> FormPart {
        FormPart {
            name: Some(name.to_string()),
            filename: filename.map(str::to_string),
            content_type: None,
            content: Bytes::copy_from_slice(content),
        }
    }

    #[test]
    fn file_indexes_are_0_to_9() {
        assert_eq!(file_index("files[0]"), Some(0));
        assert_eq!(file_index("files[9]"), Some(9));
        assert_eq!(file_index("files[10]"), None);
        assert_eq!(file_index("files[]"), None);
        assert_eq!(file_index("file"), None);
        assert_eq!(file_index("files[a]"), None);
    }

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(encode_segment("a b.txt"), "a%20b.txt");
        assert_eq!(encode_segment("../../etc/passwd"), "..%2F..%2Fetc%2Fpasswd");
        assert_eq!(encode_segment("é"), "%C3%A9");
        assert_eq!(encode_segment("x?y#z%"), "x%3Fy%23z%25");
    }

    #[test]
    fn content_types_are_sent_guessed_or_octet_stream() {
        assert_eq!(content_type(Some("text/x-log"), "a.png"), "text/x-log");
        assert_eq!(content_type(None, "a.png"), "image/png");
        assert_eq!(content_type(Some(" "), "notes.txt"), "text/plain");
        assert_eq!(content_type(None, "blob"), OCTET_STREAM);
        assert_eq!(content_type(Some("bad\nvalue"), "blob"), OCTET_STREAM);
    }

    #[test]
    fn forms_are_checked_part_by_part() {
        let payload = part("payload_json", None, br#"{"content":"hi"}"#);
        let ok = MultipartForm {
            parts: vec![
                payload.clone(),
                part("files[1]", Some("b.txt"), b"b"),
                part("files[0]", Some("a.txt"), b"a"),
            ],
        };
        let (value, uploads) = message_form(&ok, 10).expect("valid form");
        assert_eq!(value["content"], "hi");
        assert_eq!(
            uploads.iter().map(|u| u.index).collect::<Vec<_>>(),
            vec![0, 1]
        );

        let unknown = MultipartForm {
            parts: vec![payload.clone(), part("file", Some("a.txt"), b"a")],
        };
        let err = message_form(&unknown, 10).expect_err("unknown part");
        assert_eq!(err.code, 50035);
        assert!(err.body()["errors"]["file"].is_object(), "{}", err.body());

        let nameless = MultipartForm {
            parts: vec![payload.clone(), part("files[0]", None, b"a")],
        };
        let err = message_form(&nameless, 10).expect_err("no filename");
        assert!(
            err.body()["errors"]["files[0]"].is_object(),
            "{}",
            err.body()
        );

        let big = MultipartForm {
            parts: vec![payload.clone(), part("files[0]", Some("a"), b"12345678901")],
        };
        assert_eq!(message_form(&big, 10).expect_err("too big").code, 40005);

        let missing = MultipartForm {
            parts: vec![part("files[0]", Some("a"), b"a")],
        };
        let err = message_form(&missing, 10).expect_err("no payload_json");
        assert!(err.body()["errors"]["payload_json"].is_object());

        let not_json = MultipartForm {
            parts: vec![part("payload_json", None, b"{nope")],
        };
        assert_eq!(message_form(&not_json, 10).expect_err("bad").code, 50109);
    }
}
