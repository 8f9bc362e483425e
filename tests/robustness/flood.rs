//! A flood of sends from one caller: throttled with a retry-after, nothing posted twice,
//! nothing accepted and lost, memory steady.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use fake_discord::demo;
use serde_json::json;

use crate::support::{bot_posts, poll, Allow, Fake, Switchboard, TempDir};
use crate::{rss_kib, Client};

const SENDS: usize = 1_000;
const THREADS: usize = 8;

#[test]
fn a_flood_of_sends_is_throttled_without_duplicates_or_loss() {
    // switchboard's quotas are under test, not Discord's buckets (which would pace the
    // accepted sends to 1/s and hold every worker).
    let fake = Fake::start_unthrottled();
    let dir = TempDir::new("robust-flood");
    // switchboard's defaults: 600/min per caller (burst 60), 60/min per channel (burst 10).
    let sb = Switchboard::start(&fake, dir.path(), &Allow::default());
    let rss_before = rss_kib(sb.pid());
    let client = Arc::new(Client::new(&sb.url, &sb.token));
    let workers: Vec<_> = (0..THREADS)
        .map(|worker| {
            let client = Arc::clone(&client);
            std::thread::spawn(move || {
                (worker..SENDS)
                    .step_by(THREADS)
                    .map(|i| {
                        let text = format!("flood message {i}");
                        let answer = client.call(
                            "surface.messages.send",
                            json!({ "sessionId": "#ops", "text": text }),
                        );
                        (text, answer)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let answers: Vec<_> = workers
        .into_iter()
        .flat_map(|w| w.join().expect("worker"))
        .collect();
    assert_eq!(answers.len(), SENDS);

    let mut accepted = HashSet::new();
    for (text, answer) in &answers {
        match answer.status {
            200 => {
                assert!(answer.body["ok"] == true, "{answer:?}");
                accepted.insert(text.clone());
            }
            429 => {
                let wait: u64 = answer
                    .retry_after
                    .as_deref()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| panic!("a 429 without Retry-After: {answer:?}"));
                assert!(wait >= 1, "{answer:?}");
                assert_eq!(answer.body["error"]["retryable"], true, "{answer:?}");
            }
            other => panic!("a send answered {other}: {answer:?}"),
        }
    }
    assert!(
        !accepted.is_empty() && accepted.len() < SENDS,
        "{} of {SENDS} accepted: the channel budget should let some through and refuse most",
        accepted.len()
    );
    // Every accepted send is in Discord exactly once; nothing refused got through.
    let posted = poll(
        "every accepted send posted",
        Duration::from_secs(10),
        || {
            let posts: Vec<String> = bot_posts(&fake, demo::OPS)
                .iter()
                .filter_map(|m| m["content"].as_str().map(str::to_owned))
                .filter(|text| text.starts_with("flood message "))
                .collect();
            (posts.len() >= accepted.len()).then_some(posts)
        },
    );
    let unique: HashSet<&String> = posted.iter().collect();
    assert_eq!(unique.len(), posted.len(), "a message was posted twice");
    assert_eq!(
        posted.iter().cloned().collect::<HashSet<_>>(),
        accepted,
        "what Discord holds is exactly what was accepted"
    );
    let rss_after = rss_kib(sb.pid());
    assert!(
        rss_after < rss_before + 16 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB over a flood of {SENDS} sends"
    );
    let health = client.call("surface.help", json!({}));
    assert_eq!(health.status, 200, "the server still answers: {health:?}");
}
