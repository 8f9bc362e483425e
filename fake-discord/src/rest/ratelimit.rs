//! Discord's `X-RateLimit-*` headers. The fake reports a per-route bucket with a one-second
//! window but never refuses on its own; 429s come only from injected faults.

use std::collections::HashMap;
use std::sync::Mutex;

use axum::http::{HeaderMap, HeaderValue};

use crate::snowflake::now_ms;

/// Requests allowed per bucket per window, as reported in `X-RateLimit-Limit`.
pub const LIMIT: u32 = 50;
/// The window length in milliseconds.
pub const WINDOW_MS: u64 = 1000;

/// Per-bucket windows. Keys are route templates, so the map stays small.
#[derive(Debug, Default)]
pub struct RateBook {
    windows: Mutex<HashMap<String, (u64, u32)>>,
}

impl RateBook {
    /// Counts one request against `bucket` and writes the headers for it.
    pub fn stamp(&self, bucket: &str, headers: &mut HeaderMap) {
        let now = now_ms();
        let (start, used) = {
            let mut windows = self
                .windows
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if windows.len() > 4096 {
                windows.clear();
            }
            let entry = windows.entry(bucket.to_string()).or_insert((now, 0));
            if now >= entry.0 + WINDOW_MS {
                *entry = (now, 0);
            }
            entry.1 = entry.1.saturating_add(1);
            *entry
        };
        let remaining = LIMIT.saturating_sub(used);
        let reset_ms = start + WINDOW_MS;
        let reset_after = reset_ms.saturating_sub(now) as f64 / 1000.0;
        let pairs = [
            ("x-ratelimit-limit", LIMIT.to_string()),
            ("x-ratelimit-remaining", remaining.to_string()),
            (
                "x-ratelimit-reset",
                format!("{:.3}", reset_ms as f64 / 1000.0),
            ),
            ("x-ratelimit-reset-after", format!("{reset_after:.3}")),
            ("x-ratelimit-bucket", bucket_hash(bucket)),
        ];
        for (name, value) in pairs {
            if let Ok(v) = HeaderValue::from_str(&value) {
                headers.entry(name).or_insert(v);
            }
        }
    }
}

/// A stable opaque bucket id (FNV-1a of the route template), like Discord's hashes.
fn bucket_hash(bucket: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bucket.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remaining_counts_down_within_a_window() {
        let book = RateBook::default();
        let mut first = HeaderMap::new();
        book.stamp("GET /x", &mut first);
        let mut second = HeaderMap::new();
        book.stamp("GET /x", &mut second);
        let remaining = |h: &HeaderMap| {
            h.get("x-ratelimit-remaining")
                .and_then(|v| v.to_str().ok())
                .and_then(|s| s.parse::<u32>().ok())
        };
        let (a, b) = (remaining(&first), remaining(&second));
        assert!(a.is_some() && b.is_some());
        assert!(b <= a);
        assert_eq!(
            first.get("x-ratelimit-bucket"),
            second.get("x-ratelimit-bucket")
        );
    }
}
