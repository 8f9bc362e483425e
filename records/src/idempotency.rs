//! Idempotency keys: a client that retries a call sends the same key, and the call runs once.
//! A key is the caller's own (two callers never share answers); a repeated key with the same
//! input within the key's lifetime answers what the first call answered, without running it
//! again; with a different input it is a conflict.

/// How long an idempotency key is kept: 24 hours.
pub const IDEMPOTENCY_KEPT_MS: u64 = 24 * 3600 * 1000;

/// A key as a store files it: the caller's key (`operator`, `token:ci`) and the key it sent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey {
    /// Who called (the caller key the audit log writes).
    pub caller: String,
    /// The `Idempotency-Key` it sent.
    pub key: String,
}

/// A call asking to run under a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRequest {
    /// The key.
    pub key: IdempotencyKey,
    /// A hash of the call's tool and input: the same key with another hash is a conflict.
    pub input_hash: String,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
    /// How long the key is kept from now ([`IDEMPOTENCY_KEPT_MS`] in the service).
    pub ttl_ms: u64,
}

/// The answer kept for a key: what the first call answered, as the HTTP front sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAnswer {
    /// The HTTP status.
    pub status: u16,
    /// The body (JSON), byte for byte.
    pub body: String,
}

/// A key as a store keeps it (what copying a store moves).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptKey {
    /// The key.
    pub key: IdempotencyKey,
    /// The hash of the call it was reserved for.
    pub input_hash: String,
    /// The answer, once the call answered.
    pub answer: Option<StoredAnswer>,
    /// When it expires, ms since the Unix epoch.
    pub expires_ms: u64,
}
