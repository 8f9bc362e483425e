//! Counting tokens: the OpenAI tokenizers (`tiktoken-rs`, vocabularies compiled into the
//! binary), a process-wide memo so a text is tokenized once, and a calibrated estimate kept for
//! comparison (its measured error is why the runner does not use it; see the crate docs).

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;

use tiktoken_rs::CoreBPE;

/// Counts the tokens of plain text as a model's tokenizer would.
///
/// Text is always ordinary text: a message that writes `<|endoftext|>` is counted as the
/// characters it is, as the chat API treats user content.
pub trait TokenCounter: Send + Sync {
    /// The tokens of `text`.
    fn count(&self, text: &str) -> usize;
    /// What counts, for logs and events (`"o200k_base"`, `"estimate"`).
    fn name(&self) -> &'static str;
}

impl<T: TokenCounter + ?Sized> TokenCounter for &T {
    fn count(&self, text: &str) -> usize {
        (**self).count(text)
    }
    fn name(&self) -> &'static str {
        (**self).name()
    }
}

impl<T: TokenCounter + ?Sized> TokenCounter for std::sync::Arc<T> {
    fn count(&self, text: &str) -> usize {
        (**self).count(text)
    }
    fn name(&self) -> &'static str {
        (**self).name()
    }
}

/// The byte-pair vocabularies the chat models use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// GPT-4o, GPT-4.1, GPT-4.5, GPT-5, the o-series, gpt-oss (its harmony encoding shares the
    /// ordinary vocabulary), codex-mini.
    O200kBase,
    /// GPT-4 (not 4o/4.1/4.5) and GPT-3.5 Turbo.
    Cl100kBase,
}

/// Which encoding a model name gets, and whether the name was recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodingChoice {
    /// The encoding to count with.
    pub encoding: Encoding,
    /// False when the model is not an OpenAI model `tiktoken` knows: its own tokenizer is not
    /// available offline, so its counts are o200k's, an approximation (see the crate docs).
    pub known: bool,
}

impl Encoding {
    /// The encoding for `model`. A provider prefix (`openai/gpt-4o`, `azure/gpt-4`) is
    /// stripped; a fine-tune (`ft:gpt-4o-mini:org::id`) counts as its base. Names `tiktoken`
    /// does not know — Claude, Llama, Mistral, Qwen, a local model — get o200k_base, marked
    /// `known: false`.
    pub fn for_model(model: &str) -> EncodingChoice {
        let bare = model.trim().rsplit('/').next().unwrap_or(model).trim();
        let lower = bare.to_ascii_lowercase();
        match tiktoken_rs::tokenizer::get_tokenizer(&lower) {
            Some(tiktoken_rs::tokenizer::Tokenizer::Cl100kBase) => EncodingChoice {
                encoding: Encoding::Cl100kBase,
                known: true,
            },
            Some(
                tiktoken_rs::tokenizer::Tokenizer::O200kBase
                | tiktoken_rs::tokenizer::Tokenizer::O200kHarmony,
            ) => EncodingChoice {
                encoding: Encoding::O200kBase,
                known: true,
            },
            // Legacy completion models (p50k, r50k, gpt2) are not chat models: nothing this
            // crate builds is sent to them, so they get the default like any unknown name.
            _ => EncodingChoice {
                encoding: Encoding::O200kBase,
                known: false,
            },
        }
    }

    /// `"o200k_base"` / `"cl100k_base"`.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::O200kBase => "o200k_base",
            Encoding::Cl100kBase => "cl100k_base",
        }
    }
}

/// Texts longer than this are split at token boundaries before they are tokenized: the
/// tokenizer's pre-split regex backtracks on long runs (a megabyte of spaces takes seconds and
/// can exceed the regex's backtrack limit, which panics inside `tiktoken-rs`), and its merge
/// step slows down on long pieces.
pub(crate) const CHUNK_BYTES: usize = 4096;

/// Texts longer than this are not tokenized at all: they count as their length in bytes, a
/// true upper bound (every token is at least one byte). No such text fits a sane budget, so it
/// is pruned or refused either way; tokenizing it would only cost time.
pub const EXACT_MAX_BYTES: usize = 256 * 1024;

/// The real tokenizer of an [`Encoding`].
///
/// The vocabulary is built on first use of an encoding in the process (about a quarter to
/// half a second, once): call [`Tiktoken::new`] at startup, not on a run's path.
#[derive(Clone)]
pub struct Tiktoken {
    encoding: Encoding,
    bpe: &'static CoreBPE,
}

impl std::fmt::Debug for Tiktoken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tiktoken")
            .field("encoding", &self.encoding)
            .finish()
    }
}

impl Tiktoken {
    /// The tokenizer of `encoding` (built once per process, then shared).
    pub fn new(encoding: Encoding) -> Tiktoken {
        let bpe = match encoding {
            Encoding::O200kBase => tiktoken_rs::o200k_base_singleton(),
            Encoding::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
        };
        Tiktoken { encoding, bpe }
    }

    /// The tokenizer for `model` ([`Encoding::for_model`]).
    pub fn for_model(model: &str) -> Tiktoken {
        Tiktoken::new(Encoding::for_model(model).encoding)
    }

    /// Its encoding.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// One piece, tokenized; a panic inside the tokenizer (its regex's backtrack limit) counts
    /// the piece as its bytes, an upper bound, instead of taking the caller down.
    fn count_piece(&self, piece: &str) -> usize {
        std::panic::catch_unwind(AssertUnwindSafe(|| self.bpe.encode_ordinary(piece).len()))
            .unwrap_or(piece.len())
    }

    /// [`TokenCounter::count`] with a chosen chunk size (tests pin exactness with small ones).
    pub(crate) fn count_chunked(&self, text: &str, chunk: usize) -> usize {
        if text.len() > EXACT_MAX_BYTES {
            return text.len();
        }
        Chunks::new(text, chunk)
            .map(|c| self.count_piece(c.text))
            .sum()
    }
}

impl TokenCounter for Tiktoken {
    fn count(&self, text: &str) -> usize {
        self.count_chunked(text, CHUNK_BYTES)
    }

    fn name(&self) -> &'static str {
        self.encoding.name()
    }
}

/// A piece of text cut by [`Chunks`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Chunk<'a> {
    pub(crate) text: &'a str,
    /// Whether it ends at a point that is not a token boundary (no space found in the window):
    /// counts across such a cut may differ from the whole text's by a token or two.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) forced: bool,
}

/// Splits text into pieces of at most `max` bytes (a character longer than that stays whole),
/// each cut made just before a space that follows a non-space character when there is one in
/// the window's second half. Both OpenAI pre-split patterns start a new piece there (a space
/// only ever leads a piece, never ends one), so counting the pieces apart gives the same total.
pub(crate) struct Chunks<'a> {
    rest: &'a str,
    max: usize,
}

impl<'a> Chunks<'a> {
    pub(crate) fn new(text: &'a str, max: usize) -> Chunks<'a> {
        Chunks {
            rest: text,
            max: max.max(8),
        }
    }
}

impl<'a> Iterator for Chunks<'a> {
    type Item = Chunk<'a>;

    fn next(&mut self) -> Option<Chunk<'a>> {
        if self.rest.is_empty() {
            return None;
        }
        if self.rest.len() <= self.max {
            let text = self.rest;
            self.rest = "";
            return Some(Chunk {
                text,
                forced: false,
            });
        }
        let bytes = self.rest.as_bytes();
        let low = self.max / 2;
        let safe = (low.max(1)..=self.max).rev().find(|&i| {
            bytes[i] == b' ' && !bytes[i - 1].is_ascii_whitespace() && {
                // A multi-byte character's continuation bytes are never ASCII, so the byte
                // before is a whole character's last byte; it must not be Unicode whitespace.
                let before = self.rest[..i].chars().next_back();
                before.is_some_and(|c| !c.is_whitespace())
            }
        });
        let (cut, forced) = match safe {
            Some(i) => (i, false),
            None => {
                let mut i = self.max;
                while !self.rest.is_char_boundary(i) {
                    i += 1;
                }
                (i, true)
            }
        };
        let text = &self.rest[..cut];
        self.rest = &self.rest[cut..];
        Some(Chunk { text, forced })
    }
}

/// Remembers counts by text, so that a message or tool result is tokenized once per process
/// however many rounds and runs include it.
///
/// Keys are a keyed hash (std's `RandomState`, SipHash with a per-process random key, so no
/// one can craft a text that collides with another) plus the length. Two generations of at
/// most `capacity` entries each bound the memory: when the current one fills, it becomes the
/// previous one and the oldest is dropped; a hit in the previous one moves forward.
pub struct Memo<C> {
    inner: C,
    hasher: RandomState,
    capacity: usize,
    cache: Mutex<Generations>,
}

#[derive(Default)]
struct Generations {
    current: HashMap<(u64, usize), usize>,
    previous: HashMap<(u64, usize), usize>,
}

/// How many counts a generation of the default [`Memo`] keeps (two generations: at most
/// 131,072 entries, about 5 MiB).
pub const MEMO_CAPACITY: usize = 65_536;

impl<C: TokenCounter> Memo<C> {
    /// A memo in front of `inner` with [`MEMO_CAPACITY`] entries per generation.
    pub fn new(inner: C) -> Memo<C> {
        Memo::with_capacity(inner, MEMO_CAPACITY)
    }

    /// A memo with `capacity` entries per generation (at least one).
    pub fn with_capacity(inner: C, capacity: usize) -> Memo<C> {
        Memo {
            inner,
            hasher: RandomState::new(),
            capacity: capacity.max(1),
            cache: Mutex::new(Generations::default()),
        }
    }

    /// The counter behind the memo.
    pub fn inner(&self) -> &C {
        &self.inner
    }

    /// How many counts it holds now (both generations).
    pub fn len(&self) -> usize {
        let cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        cache.current.len() + cache.previous.len()
    }

    /// Whether it holds no count.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<C: TokenCounter> TokenCounter for Memo<C> {
    fn count(&self, text: &str) -> usize {
        // Below a few bytes the tokenizer is as cheap as the lookup.
        if text.len() < 8 {
            return self.inner.count(text);
        }
        let key = (self.hasher.hash_one(text), text.len());
        {
            let mut cache = self
                .cache
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(&n) = cache.current.get(&key) {
                return n;
            }
            if let Some(n) = cache.previous.remove(&key) {
                insert(&mut cache, key, n, self.capacity);
                return n;
            }
        }
        // Counted outside the lock: concurrent runs do not wait on each other's tokenizing.
        let n = self.inner.count(text);
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        insert(&mut cache, key, n, self.capacity);
        n
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }
}

fn insert(cache: &mut Generations, key: (u64, usize), n: usize, capacity: usize) {
    if cache.current.len() >= capacity {
        cache.previous = std::mem::take(&mut cache.current);
    }
    cache.current.insert(key, n);
}

/// A cheap estimate of o200k_base counts from character classes, calibrated on the test
/// corpus (`tests/corpus/`). Not used by the runner: its error on unusual text (random
/// letters, long numbers) is large where the tokenizer's is zero; see the crate docs for the
/// measured errors and why.
#[derive(Debug, Clone, Copy, Default)]
pub struct Estimate;

impl TokenCounter for Estimate {
    fn count(&self, text: &str) -> usize {
        estimate(text)
    }

    fn name(&self) -> &'static str {
        "estimate"
    }
}

/// Tokens per run of each class, in thousandths, fitted on the corpus (see
/// `tests/tokens.rs::the_estimate_stays_within_its_measured_error`).
mod rate {
    /// A run of ASCII letters: one token, plus one for every this many letters past the first.
    pub const LETTERS_PER_EXTRA: usize = 7;
    /// Digits: the tokenizers cut numbers into groups of three.
    pub const DIGITS_PER_TOKEN: usize = 3;
    /// Han, kana, Hangul: per character, thousandths.
    pub const CJK_MILLI: usize = 750;
    /// Other non-ASCII letters (Cyrillic, Greek, Arabic, Devanagari, accented Latin): per
    /// word, and per character, thousandths.
    pub const WORD_MILLI: usize = 400;
    /// See [`WORD_MILLI`].
    pub const OTHER_LETTER_MILLI: usize = 250;
    /// Emoji and other non-ASCII symbols: per UTF-8 byte, thousandths.
    pub const SYMBOL_BYTE_MILLI: usize = 430;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Letter,
    Digit,
    Space,
    Newline,
    Punct,
    Cjk,
    OtherLetter,
    Symbol,
}

fn class(c: char) -> Class {
    match c {
        'a'..='z' | 'A'..='Z' => Class::Letter,
        '0'..='9' => Class::Digit,
        '\n' | '\r' => Class::Newline,
        c if c.is_whitespace() => Class::Space,
        c if c.is_ascii() => Class::Punct,
        '\u{1100}'..='\u{11FF}'
        | '\u{3040}'..='\u{30FF}'
        | '\u{3400}'..='\u{4DBF}'
        | '\u{4E00}'..='\u{9FFF}'
        | '\u{AC00}'..='\u{D7AF}'
        | '\u{F900}'..='\u{FAFF}' => Class::Cjk,
        c if c.is_alphabetic() => Class::OtherLetter,
        c if c.is_numeric() => Class::Digit,
        _ => Class::Symbol,
    }
}

fn estimate(text: &str) -> usize {
    let mut milli = 0usize;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let kind = class(c);
        let mut run = 1usize;
        let mut bytes = c.len_utf8();
        while let Some(&next) = chars.peek() {
            if class(next) != kind {
                break;
            }
            run += 1;
            bytes += next.len_utf8();
            chars.next();
        }
        let before_letters = chars
            .peek()
            .is_some_and(|&next| matches!(class(next), Class::Letter | Class::OtherLetter));
        milli += match kind {
            Class::Letter => 1000 * (1 + (run - 1) / rate::LETTERS_PER_EXTRA),
            Class::Digit => 1000 * run.div_ceil(rate::DIGITS_PER_TOKEN),
            // A single space joins the word after it; longer runs are a token or two.
            Class::Space => {
                if run == 1 {
                    0
                } else {
                    1000 * (1 + run / 16)
                }
            }
            Class::Newline => 1000 * run.div_ceil(2),
            // One mark before a word joins it (`'s`, `.com`, `/srv`); runs merge by twos.
            Class::Punct if run == 1 && before_letters => 0,
            Class::Punct => 1000 * run.div_ceil(2),
            Class::Cjk => rate::CJK_MILLI * run,
            Class::OtherLetter => rate::WORD_MILLI + rate::OTHER_LETTER_MILLI * run,
            Class::Symbol => rate::SYMBOL_BYTE_MILLI * bytes,
        };
    }
    milli.div_ceil(1000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn model_names_pick_their_encoding() {
        for (model, encoding, known) in [
            ("gpt-4o", Encoding::O200kBase, true),
            ("gpt-4o-mini-2024-07-18", Encoding::O200kBase, true),
            ("gpt-4.1", Encoding::O200kBase, true),
            ("gpt-5-mini", Encoding::O200kBase, true),
            ("o3-mini", Encoding::O200kBase, true),
            ("o1", Encoding::O200kBase, true),
            ("gpt-oss-20b", Encoding::O200kBase, true),
            ("gpt-4", Encoding::Cl100kBase, true),
            ("gpt-4-turbo", Encoding::Cl100kBase, true),
            ("gpt-3.5-turbo", Encoding::Cl100kBase, true),
            ("openai/gpt-4o", Encoding::O200kBase, true),
            ("GPT-4", Encoding::Cl100kBase, true),
            ("ft:gpt-3.5-turbo:acme::abc", Encoding::Cl100kBase, true),
            ("claude-sonnet-4", Encoding::O200kBase, false),
            ("llama3.1:8b", Encoding::O200kBase, false),
            ("", Encoding::O200kBase, false),
            ("davinci", Encoding::O200kBase, false),
        ] {
            assert_eq!(
                Encoding::for_model(model),
                EncodingChoice { encoding, known },
                "{model}"
            );
        }
    }

    #[test]
    fn known_counts_match_the_published_tokenizers() {
        // Values from OpenAI's tokenizer for these encodings.
        let o200k = Tiktoken::new(Encoding::O200kBase);
        let cl100k = Tiktoken::new(Encoding::Cl100kBase);
        assert_eq!(o200k.count("hello world"), 2);
        assert_eq!(cl100k.count("hello world"), 2);
        assert_eq!(o200k.count(""), 0);
        // Special-token text is ordinary text.
        assert!(o200k.count("<|endoftext|>") > 1);
    }

    #[test]
    fn a_megabyte_of_spaces_neither_panics_nor_crawls() {
        // tiktoken-rs panics on this whole (backtrack limit); in chunks it counts.
        let o200k = Tiktoken::new(Encoding::O200kBase);
        let spaces = " ".repeat(200 * 1024);
        let n = o200k.count(&spaces);
        assert!(n > 0 && n <= spaces.len(), "{n}");
        let huge = "a".repeat(EXACT_MAX_BYTES + 1);
        assert_eq!(o200k.count(&huge), huge.len());
    }

    #[test]
    fn chunks_cover_the_text_and_respect_the_bound() {
        let text = "word ".repeat(3000);
        let chunks: Vec<_> = Chunks::new(&text, 100).collect();
        assert_eq!(chunks.iter().map(|c| c.text).collect::<String>(), text);
        assert!(chunks.iter().all(|c| c.text.len() <= 100 && !c.forced));
    }

    #[test]
    fn the_memo_returns_what_the_tokenizer_counts_and_stays_bounded() {
        let memo = Memo::with_capacity(Tiktoken::new(Encoding::O200kBase), 4);
        let texts: Vec<String> = (0..20)
            .map(|i| format!("message number {i} says hello"))
            .collect();
        for text in &texts {
            assert_eq!(memo.count(text), memo.inner().count(text));
            assert_eq!(memo.count(text), memo.inner().count(text));
            assert!(memo.len() <= 8);
        }
    }

    fn text_piece() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(" ".to_owned()),
            Just("  ".to_owned()),
            Just("\n".to_owned()),
            Just("\r\n".to_owned()),
            Just("\t".to_owned()),
            Just("\u{3000}".to_owned()),
            Just("'s".to_owned()),
            Just("--".to_owned()),
            Just("/".to_owned()),
            "[a-zA-Z]{1,12}",
            "[0-9]{1,7}",
            "[!-/:-@]{1,4}",
            "[а-яА-Я]{1,6}",
            "[一-龥]{1,4}",
            Just("👍🏽".to_owned()),
            Just("👨‍👩‍👧".to_owned()),
            Just("é".to_owned()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Counting in chunks cut before a space gives the whole text's count exactly.
        #[test]
        fn chunked_counts_equal_whole_counts(words in prop::collection::vec(prop::collection::vec(text_piece(), 1..3), 0..60), max in 24usize..96) {
            let text = words.into_iter().map(|w| w.concat()).collect::<Vec<_>>().join(" ");
            let o200k = Tiktoken::new(Encoding::O200kBase);
            let cl100k = Tiktoken::new(Encoding::Cl100kBase);
            let forced = Chunks::new(&text, max).any(|c| c.forced);
            prop_assume!(!forced);
            prop_assert_eq!(o200k.count_chunked(&text, max), o200k.bpe.encode_ordinary(&text).len());
            prop_assert_eq!(cl100k.count_chunked(&text, max), cl100k.bpe.encode_ordinary(&text).len());
        }

        /// Whatever the text, chunks put back together are the text, each within the bound
        /// (or one character), and counting never panics.
        #[test]
        fn chunks_always_cover_the_text(text in "\\PC{0,300}", max in 1usize..40) {
            let chunks: Vec<_> = Chunks::new(&text, max).collect();
            prop_assert_eq!(chunks.iter().map(|c| c.text).collect::<String>(), text.clone());
            for chunk in &chunks {
                prop_assert!(chunk.text.len() <= max.max(8) + 3);
            }
            let _ = Tiktoken::new(Encoding::O200kBase).count_chunked(&text, max);
        }
    }
}
