//! Run capabilities as a store keeps them (issue 23): one row per minted token, found by the
//! token's digest — never the token itself — so a run's capability works on every node of a
//! cluster, and its end (the run finished or was aborted) reaches every node.

use entity::Snowflake;
use serde::{Deserialize, Serialize};

/// Characters of a digest as kept: SHA-256, lowercase hex.
pub const DIGEST_HEX_LEN: usize = 64;

/// How a kept capability ended before its expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CapabilityEnd {
    /// Its run finished.
    Finished,
    /// Its run was aborted (`/abort`, the console) or stopped before it could act.
    Aborted,
}

impl CapabilityEnd {
    /// The name a row keeps (`finished`, `aborted`).
    pub fn as_str(self) -> &'static str {
        match self {
            CapabilityEnd::Finished => "finished",
            CapabilityEnd::Aborted => "aborted",
        }
    }

    /// The end a row's name names; `None` for anything else.
    pub fn parse(name: &str) -> Option<CapabilityEnd> {
        match name {
            "finished" => Some(CapabilityEnd::Finished),
            "aborted" => Some(CapabilityEnd::Aborted),
            _ => None,
        }
    }
}

/// A minted capability as kept: what it grants, until when, and whether it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeptCapability {
    /// The SHA-256 digest of the token, lowercase hex ([`DIGEST_HEX_LEN`] characters).
    pub digest: String,
    /// The session the run belongs to.
    pub session_id: Snowflake,
    /// The run's id.
    pub request_id: String,
    /// Glob patterns of callable ids.
    pub scope: Vec<String>,
    /// Who is calling (`discord` for agent runs), when the grant names it.
    pub client: Option<String>,
    /// The run's working directory, when it has file access.
    pub cwd: Option<String>,
    /// The message that started the run.
    pub trigger_message_id: Option<Snowflake>,
    /// Who asked for the run.
    pub requested_by: Option<Snowflake>,
    /// When it was minted, ms since the Unix epoch.
    pub minted_ms: u64,
    /// When it stops working, ms since the Unix epoch.
    pub expires_ms: u64,
    /// How it ended before its expiry, if it has.
    pub ended: Option<CapabilityEnd>,
}

/// Whether `digest` is one a store keeps: [`DIGEST_HEX_LEN`] lowercase hex digits.
pub fn is_digest(digest: &str) -> bool {
    digest.len() == DIGEST_HEX_LEN
        && digest
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_read_back_by_name_and_nothing_else_parses() {
        for end in [CapabilityEnd::Finished, CapabilityEnd::Aborted] {
            assert_eq!(CapabilityEnd::parse(end.as_str()), Some(end));
        }
        assert_eq!(CapabilityEnd::parse("expired"), None);
        assert_eq!(CapabilityEnd::parse(""), None);
    }

    #[test]
    fn only_lowercase_sha256_hex_is_a_digest() {
        assert!(is_digest(&"a0".repeat(32)));
        assert!(!is_digest(&"A0".repeat(32)));
        assert!(!is_digest(&"a0".repeat(31)));
        assert!(!is_digest(&"g0".repeat(32)));
        assert!(!is_digest("sbcap_"));
    }
}
