//! `switchboard cluster status`: every node on the running switchboard's store — live or
//! gone, its shards, its last heartbeat — then the queue depth per session, then the shard leases, through the operator
//! callable `admin.cluster.status` (what `GET /v1/cluster` answers).

use std::path::Path;
use std::process::ExitCode;

use serde_json::{json, Value};

use super::{Failed, Remote};
use crate::cli::ReloadArgs;

/// Runs `switchboard cluster status`.
pub fn cluster_status(flag_config: Option<&Path>, args: &ReloadArgs) -> ExitCode {
    let remote = Remote::new(flag_config, args.url.as_deref());
    match remote.call("admin.cluster.status", &json!({})) {
        Ok(value) => {
            if args.json {
                println!("{value}");
            } else {
                for line in lines(&value, switchboard_engine::clock::now_ms()) {
                    println!("{line}");
                }
            }
            ExitCode::SUCCESS
        }
        Err(Failed(message, code)) => {
            eprintln!("error: {message}");
            ExitCode::from(code)
        }
    }
}

/// A time as RFC 3339 and how long ago (or how far ahead) it is from `now_ms`.
fn when(ms: u64, now_ms: u64) -> String {
    let stamp = i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(
            || ms.to_string(),
            |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        );
    if ms <= now_ms {
        format!("{stamp} ({} s ago)", (now_ms - ms) / 1000)
    } else {
        format!("{stamp} (in {} s)", (ms - now_ms).div_ceil(1000))
    }
}

fn shard_list(shards: Option<&Value>) -> String {
    let ids: Vec<String> = shards
        .and_then(Value::as_array)
        .map(|ids| ids.iter().map(Value::to_string).collect())
        .unwrap_or_default();
    if ids.is_empty() {
        "-".to_owned()
    } else {
        ids.join(",")
    }
}

/// The answer as lines: one per node, then `queues:` and one per session with runs waiting or
/// running (cluster-wide), then `leases:` and one per lease.
fn lines(status: &Value, now_ms: u64) -> Vec<String> {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("-").to_owned();
    let ms = |v: &Value, key: &str| v.get(key).and_then(Value::as_u64).unwrap_or(0);
    let answering = text(status, "node");
    let mut out = Vec::new();
    for node in status
        .get("nodes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let id = text(node, "nodeId");
        out.push(format!(
            "{id:<24} {:<5} shards {:<12} last heartbeat {}{}",
            text(node, "state"),
            shard_list(node.get("shards")),
            when(ms(node, "lastHeartbeatMs"), now_ms),
            if id == answering { "  (this node)" } else { "" }
        ));
    }
    let queues: Vec<&Value> = status
        .get("queues")
        .and_then(Value::as_array)
        .map(|q| q.iter().collect())
        .unwrap_or_default();
    if queues.is_empty() {
        out.push("queues: none".to_owned());
    } else {
        out.push("queues:".to_owned());
        for queue in queues {
            let count = |key: &str| queue.get(key).and_then(Value::as_u64).unwrap_or(0);
            out.push(format!(
                "  session {:<22} {} queued, {} running",
                text(queue, "sessionId"),
                count("queued"),
                count("running")
            ));
        }
    }
    let leases: Vec<&Value> = status
        .get("leases")
        .and_then(Value::as_array)
        .map(|l| l.iter().collect())
        .unwrap_or_default();
    if leases.is_empty() {
        out.push("leases: none".to_owned());
    } else {
        out.push("leases:".to_owned());
        for lease in leases {
            let expired = lease
                .get("expired")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            out.push(format!(
                "  shard {:<5} {:<24} {} {}",
                lease.get("shard").and_then(Value::as_u64).unwrap_or(0),
                text(lease, "nodeId"),
                if expired { "expired" } else { "until" },
                when(ms(lease, "untilMs"), now_ms)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_reads_as_a_line_per_node_then_the_leases() {
        let now = 1_800_000_000_000;
        let status = json!({
            "node": "a", "store": "postgres",
            "nodes": [
                {"nodeId": "a", "state": "live", "shards": [0, 1], "lastHeartbeatMs": now - 2_000, "startedMs": 0},
                {"nodeId": "b", "state": "gone", "shards": [], "lastHeartbeatMs": now - 90_000, "startedMs": 0}
            ],
            "queues": [
                {"sessionId": "1000000000000000401", "queued": 3, "running": 1}
            ],
            "leases": [
                {"shard": 0, "nodeId": "a", "untilMs": now + 15_000, "expired": false},
                {"shard": 1, "nodeId": "b", "untilMs": now - 70_000, "expired": true}
            ]
        });
        let lines = lines(&status, now);
        assert_eq!(lines.len(), 7, "{lines:#?}");
        assert!(
            lines[0].starts_with("a ")
                && lines[0].contains("live")
                && lines[0].contains("shards 0,1"),
            "{lines:#?}"
        );
        assert!(
            lines[0].contains("(2 s ago)") && lines[0].ends_with("(this node)"),
            "{lines:#?}"
        );
        assert!(
            lines[1].contains("gone")
                && lines[1].contains("shards -")
                && lines[1].contains("(90 s ago)"),
            "{lines:#?}"
        );
        assert_eq!(lines[2], "queues:");
        assert_eq!(
            lines[3],
            "  session 1000000000000000401    3 queued, 1 running"
        );
        assert_eq!(lines[4], "leases:");
        assert!(
            lines[5].contains("shard 0")
                && lines[5].contains("until")
                && lines[5].contains("(in 15 s)"),
            "{lines:#?}"
        );
        assert!(
            lines[6].contains("expired") && lines[6].contains("(70 s ago)"),
            "{lines:#?}"
        );
        // Garbage reads as placeholders, not a panic.
        assert_eq!(
            super::lines(&json!("garbage"), now),
            vec!["queues: none".to_owned(), "leases: none".to_owned()]
        );
    }
}
