//! How much every backend keeps: one set of retention knobs, the same for each backend.

use std::time::Duration;

/// What a backend keeps and for how long; each backend's options embed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Newest live messages kept per channel (`store.messages_per_channel`).
    pub messages_per_channel: usize,
    /// Audit rows older than this are pruned by the backend on its own (`audit.retention_days`).
    pub audit_retention: Duration,
}

impl Retention {
    /// `audit_retention` in milliseconds (saturating), as the backends compare row times.
    pub fn audit_retention_ms(&self) -> u64 {
        u64::try_from(self.audit_retention.as_millis()).unwrap_or(u64::MAX)
    }
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            messages_per_channel: 1_000,
            audit_retention: Duration::from_secs(90 * 24 * 3600),
        }
    }
}
