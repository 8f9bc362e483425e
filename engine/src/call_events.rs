//! What a call caused in a workspace (issue 24), noted for its audit row's `events` while the
//! call runs: a task-local sink the pipeline sets around the handler, which the workspace's
//! shell publisher and `Invocation::publish_event` note into without knowing the call.

use std::sync::Mutex;

use serde_json::Value;

use crate::governance::audit_input;
use crate::live::Settings;

/// Where the events a call causes in a workspace go (issue 24): its audit row's `events`. Set
/// for the call's task while the call runs, so the workspace's shell publisher — which knows no
/// call — notes the events its commands cause on the task that ran them; a background command's
/// later `shell.exited` (on a task of its own) reaches `/v1/events` only.
#[derive(Clone)]
pub(crate) struct CallEvents {
    events: std::sync::Arc<Mutex<Vec<Value>>>,
    text_chars: usize,
    redact: bool,
}

tokio::task_local! {
    pub(crate) static CALL_EVENTS: CallEvents;
}

/// The fields of an event that name what the operator's input names (a command, a path): cut
/// or hashed as the input is (`audit.text_chars`, `audit.redact`).
const INPUT_FIELDS: [&str; 3] = ["argv", "cwd", "path"];

impl CallEvents {
    pub(crate) fn new(settings: &Settings) -> Self {
        let audit = &settings.config().audit;
        CallEvents {
            events: std::sync::Arc::default(),
            text_chars: audit.text_chars,
            redact: audit.redact,
        }
    }

    fn note(&self, kind: &str, fields: &Value) {
        let mut event = serde_json::Map::new();
        event.insert("type".to_owned(), Value::String(kind.to_owned()));
        if let Value::Object(fields) = fields {
            for (key, value) in fields {
                let value = if INPUT_FIELDS.contains(&key.as_str()) {
                    audit_input(value, self.text_chars, self.redact)
                } else {
                    value.clone()
                };
                event.insert(key.clone(), value);
            }
        }
        let mut events = self
            .events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        switchboard_records::audit::push_event(&mut events, Value::Object(event));
    }

    pub(crate) fn take(&self) -> Vec<Value> {
        std::mem::take(
            &mut *self
                .events
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// Notes a `kind` event (`shell.started`, `fs.changed`, ...) with `fields` in the audit row of
/// the call running on this task; outside a call, nothing.
pub(crate) fn note_call_event(kind: &str, fields: &Value) {
    let _ = CALL_EVENTS.try_with(|sink| sink.note(kind, fields));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::governance::AuditRow;
    use serde_json::json;

    fn sink(text_chars: usize, redact: bool) -> CallEvents {
        CallEvents {
            events: std::sync::Arc::default(),
            text_chars,
            redact,
        }
    }

    #[tokio::test]
    async fn a_call_notes_its_events_and_nothing_outside_a_call_is_kept() {
        let events = sink(200, false);
        note_call_event(
            "fs.changed",
            &json!({"path": "before.txt", "kind": "created"}),
        );
        CALL_EVENTS
            .scope(events.clone(), async {
                note_call_event(
                    "shell.started",
                    &json!({"id": "sh-1", "argv": ["bash", "-c", "ls"], "cwd": "."}),
                );
                note_call_event("fs.changed", &json!({"path": "a.txt", "kind": "created"}));
            })
            .await;
        assert_eq!(
            events.take(),
            [
                json!({"type": "shell.started", "id": "sh-1", "argv": ["bash", "-c", "ls"],
                    "cwd": "."}),
                json!({"type": "fs.changed", "path": "a.txt", "kind": "created"}),
            ]
        );
    }

    #[test]
    fn event_inputs_are_cut_or_hashed_as_the_input_is() {
        let cut = sink(4, false);
        cut.note(
            "shell.started",
            &json!({"id": "sh-123456", "argv": ["bash", "-c", "echo secret"], "cwd": "deep/dir"}),
        );
        let row = cut.take();
        assert_eq!(row[0]["argv"], json!(["bash", "-c", "echo…"]));
        assert_eq!(row[0]["cwd"], "deep…");
        assert_eq!(row[0]["id"], "sh-123456", "ids are not input");
        let hashed = sink(200, true);
        hashed.note(
            "fs.changed",
            &json!({"path": "secret.txt", "kind": "created"}),
        );
        let row = hashed.take();
        assert_eq!(row[0]["path"]["sha256"].as_str().map(str::len), Some(64));
        assert!(!row[0].to_string().contains("secret"));
        assert_eq!(row[0]["kind"], "created");
    }

    #[test]
    fn a_call_that_writes_many_files_keeps_a_bounded_row() {
        let events = sink(200, false);
        for n in 0..1_000 {
            events.note(
                "fs.changed",
                &json!({"path": format!("{n}.txt"), "kind": "created"}),
            );
        }
        let row = events.take();
        assert_eq!(row.len(), AuditRow::MAX_EVENTS + 1);
        assert_eq!(
            row.last(),
            Some(&json!({"type": "events.truncated", "count": 1_000 - AuditRow::MAX_EVENTS}))
        );
    }
}
