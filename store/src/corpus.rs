//! Messages and searches for the store benchmarks (feature `conformance`): the same corpus for
//! every backend, so their figures compare. Words follow a Zipf-like law over a 5,000-word
//! vocabulary of made-up syllable words (a tenth of messages mention a user), and six kinds of
//! query from rare words to common ones, phrases, prefixes and mentions — the generator of
//! `bot/benches/search.rs`.

use std::time::Duration;

use switchboard_records::{Message, SearchMatch, SearchTerm, Snowflake};

/// Channels the corpus spreads over.
pub const CHANNELS: u64 = 100;
/// The first message id.
pub const BASE_ID: u64 = 1_300_000_000_000_000_000;
/// The first channel id.
pub const CHANNEL_BASE: u64 = 1_100_000_000_000_000_000;
/// The first user id (50 users).
pub const USER_BASE: u64 = 1_200_000_000_000_000_000;

/// The corpus's channels.
pub fn channels() -> Vec<Snowflake> {
    (0..CHANNELS).map(|c| Snowflake(CHANNEL_BASE + c)).collect()
}

/// A small fast generator (xorshift*), seeded.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A word rank, small ones far more often.
    pub fn rank(&mut self) -> usize {
        let u = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        (5_000.0 * u * u * u) as usize
    }
}

/// The word of a rank.
pub fn word(rank: usize) -> String {
    const SYLLABLES: [&str; 20] = [
        "ka", "lo", "mi", "ne", "ru", "sa", "te", "vo", "zi", "pa", "de", "fo", "gu", "ha", "ji",
        "bo", "ce", "wu", "xi", "yo",
    ];
    let mut n = rank;
    let mut out = String::new();
    for _ in 0..2 {
        out.push_str(SYLLABLES[n % 20]);
        n /= 20;
    }
    out.push_str(SYLLABLES[n % 20]);
    n /= 20;
    if n > 0 || rank.is_multiple_of(3) {
        out.push_str(SYLLABLES[n % 20]);
    }
    out
}

/// Message `n` of the corpus (6–18 words; every tenth mentions a user).
pub fn message(n: u64, rng: &mut Rng) -> Message {
    let words = 6 + rng.below(13);
    let mut text: Vec<String> = (0..words).map(|_| word(rng.rank())).collect();
    let mut content = text.clone();
    if n.is_multiple_of(10) {
        let user = rng.below(50);
        content.insert(0, format!("<@{}>", USER_BASE + user));
        text.insert(0, format!("@user{user:02}"));
    }
    Message {
        id: Snowflake(BASE_ID + n),
        channel_id: Snowflake(CHANNEL_BASE + n % CHANNELS),
        author_id: Snowflake(USER_BASE + rng.below(50)),
        author_is_bot: false,
        content: content.join(" "),
        text: text.join(" "),
        timestamp: "2026-11-22T12:00:00.000000+00:00".into(),
        edited_timestamp: None,
        reply_to: None,
        attachments: Vec::new(),
        reactions: Vec::new(),
    }
}

/// The kinds of query, by index.
pub const KINDS: [&str; 6] = [
    "rare word",
    "common word",
    "two words",
    "phrase",
    "prefix",
    "@mention",
];

/// A query of kind `kind` (an index into [`KINDS`]).
pub fn query(kind: usize, rng: &mut Rng) -> Vec<SearchTerm> {
    let words = |text: &str, prefix: bool| SearchMatch::Words {
        text: text.to_owned(),
        prefix,
    };
    let term = |any_of: Vec<SearchMatch>| SearchTerm { any_of };
    match kind {
        0 => vec![term(vec![words(
            &word(1_000 + rng.below(4_000) as usize),
            false,
        )])],
        1 => vec![term(vec![words(&word(rng.below(50) as usize), false)])],
        2 => vec![
            term(vec![words(&word(rng.rank()), false)]),
            term(vec![words(&word(rng.rank()), false)]),
        ],
        3 => vec![term(vec![words(
            &format!("{} {}", word(rng.rank()), word(rng.rank())),
            false,
        )])],
        4 => vec![term(vec![words(
            &word(100 + rng.below(900) as usize)
                .chars()
                .take(4)
                .collect::<String>(),
            true,
        )])],
        _ => {
            let user = rng.below(50);
            vec![term(vec![
                words(&format!("user{user:02}"), false),
                SearchMatch::Mentions(entity::Mention::User(Snowflake(USER_BASE + user))),
            ])]
        }
    }
}

/// The `p` quantile (0..=1) of sorted durations.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(((sorted.len() as f64 - 1.0) * p).round() as usize).min(sorted.len() - 1)]
}

/// The median of some figures.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// The machine's 1-minute load average (other work on it skews a run).
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}
