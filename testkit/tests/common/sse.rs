//! A server-sent-events reader for the tests that watch an event stream.
// Not every test file that shares `common` watches a stream.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::sync::mpsc;
use std::time::Duration;

/// One event as the reader saw it: its type, its data (as `data` made it), its id.
pub type Event<T> = (String, T, Option<String>);

/// Reads `url` with `headers` on its own thread, the whole request bounded by `timeout`,
/// sending each event (`None` when the stream ends). A refused request is one `("http",
/// data(status))` event; a 200 that is not `text/event-stream`, one `("content-type",
/// data(its type))` event.
pub fn subscribe<T: Send + 'static>(
    url: String,
    headers: Vec<(&'static str, String)>,
    timeout: Duration,
    data: fn(String) -> T,
) -> mpsc::Receiver<Option<Event<T>>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .build()
            .into();
        let mut request = agent.get(&url);
        for (name, value) in &headers {
            request = request.header(*name, value);
        }
        let Ok(response) = request.call() else {
            let _ = tx.send(None);
            return;
        };
        if response.status() != 200 {
            let status = response.status().as_u16().to_string();
            let _ = tx.send(Some(("http".into(), data(status), None)));
            let _ = tx.send(None);
            return;
        }
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        if !content_type.starts_with("text/event-stream") {
            let _ = tx.send(Some(("content-type".into(), data(content_type), None)));
            let _ = tx.send(None);
            return;
        }
        let reader = BufReader::new(response.into_body().into_reader());
        let (mut kind, mut text, mut id) = (String::new(), String::new(), None);
        for line in reader.lines() {
            let Ok(line) = line else { break };
            if line.is_empty() {
                if !kind.is_empty() || !text.is_empty() {
                    let event = (
                        std::mem::take(&mut kind),
                        data(std::mem::take(&mut text)),
                        id.take(),
                    );
                    if tx.send(Some(event)).is_err() {
                        return;
                    }
                }
            } else if let Some(rest) = line.strip_prefix("event:") {
                kind = rest.trim().to_owned();
            } else if let Some(rest) = line.strip_prefix("data:") {
                text = rest.trim().to_owned();
            } else if let Some(rest) = line.strip_prefix("id:") {
                id = Some(rest.trim().to_owned());
            }
        }
        let _ = tx.send(None);
    });
    rx
}
