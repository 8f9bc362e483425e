//! Properties of `switchboard_engine::chunk::split_message` / `split_parts`, checked on generated text
//! (proptest) and on a committed corpus (`tests/splitter_corpus.json`).
//!
//! The properties (see `check`), for every input and limit:
//! 1. a text that fits is one part, identical to the input;
//! 2. otherwise every part has 1..=limit characters, markers included, and a non-empty body;
//! 3. at most `ceil(n / payload) + 1` parts (payload 1,900 for Discord's 2,000);
//! 4. every message is `prefix + body + suffix`, where the prefix is empty or "```tag\n" and the
//!    suffix empty or "\n```", and the bodies concatenate back to the input;
//! 5. a code block open at a cut (per an independent model of the fence rule) is closed at the
//!    end of that part and reopened, with its tag when the tag is short enough, at the start of
//!    the next; a cut outside code adds no markers;
//! 6. no cut inside a `<@id>`, `<@!id>`, `<@&id>` or `<#id>` token (Discord's limit, fence tags
//!    of at most 40 characters: then there is always room to move the cut);
//! 7. no part's body is whitespace-only when the input has no whitespace run over a quarter of a
//!    part (475 chars for Discord);
//! 8. `split_message` is `split_parts` formatted.
//!
//! Regenerate the corpus (after changing the generators; the texts depend on proptest's RNG):
//! `SPLITTER_WRITE_CORPUS=1 cargo test -p switchboard-testkit --test splitter -- --ignored write_corpus`

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{json, Value};
use switchboard_engine::chunk::{split_message, split_parts, Budget, Part, MESSAGE_LIMIT};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/splitter_corpus.json");

// ---------------------------------------------------------------------------------------------
// An independent model of the fence rule, and of mention tokens.

/// Whether a code block is open at each of `cuts` (ascending byte offsets), and with which kept
/// tag: a run of 3+ backticks toggles at its third backtick; an opening run keeps the rest of its
/// line as the tag when that is 1..=max_tag chars of [A-Za-z0-9_+-.#] followed by '\n'.
///
/// Also returns the kept tag of every block that opens.
fn fences_at(text: &str, cuts: &[usize], max_tag: usize) -> (Vec<Option<String>>, Vec<String>) {
    let bytes = text.as_bytes();
    let mut open: Option<String> = None;
    let mut run = 0;
    let mut states = Vec::with_capacity(cuts.len());
    let mut opened = Vec::new();
    let mut next = cuts.iter().peekable();
    for i in 0..=bytes.len() {
        while next.peek().is_some_and(|&&cut| cut == i) {
            states.push(open.clone());
            next.next();
        }
        if i == bytes.len() {
            break;
        }
        if bytes[i] != b'`' {
            run = 0;
            continue;
        }
        run += 1;
        if run != 3 {
            continue;
        }
        if open.is_some() {
            open = None;
            continue;
        }
        let after_run = i + 1 + bytes[i + 1..].iter().take_while(|&&b| b == b'`').count();
        let line = match text[after_run..].find('\n') {
            Some(end) => &text[after_run..after_run + end],
            None => "",
        };
        let kept = !line.is_empty()
            && line.len() <= max_tag
            && line
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_+-.#".contains(&b));
        let tag = if kept { line.to_owned() } else { String::new() };
        opened.push(tag.clone());
        open = Some(tag);
    }
    (states, opened)
}

/// Byte spans of `<@digits>`, `<@!digits>`, `<@&digits>` and `<#digits>` tokens.
fn mention_spans(text: &str) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut spans = Vec::new();
    for (start, _) in text.match_indices('<') {
        let mut i = start + 1;
        match (bytes.get(i), bytes.get(i + 1)) {
            (Some(b'@'), Some(b'!' | b'&')) => i += 2,
            (Some(b'@' | b'#'), _) => i += 1,
            _ => continue,
        }
        let digits = bytes[i..].iter().take_while(|b| b.is_ascii_digit()).count();
        if digits > 0 && bytes.get(i + digits) == Some(&b'>') {
            spans.push((start, i + digits + 1));
        }
    }
    spans
}

fn longest_whitespace_run(text: &str) -> usize {
    let (mut longest, mut run) = (0, 0);
    for ch in text.chars() {
        run = if ch.is_whitespace() { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    longest
}

// ---------------------------------------------------------------------------------------------
// The properties.

fn check(text: &str, limit: usize) -> Vec<Part<'_>> {
    let budget = Budget::new(limit);
    let parts = split_parts(text, limit);
    let messages = split_message(text, limit);
    let formatted: Vec<String> = parts.iter().map(Part::message).collect();
    assert_eq!(
        messages, formatted,
        "split_message is split_parts formatted"
    );
    let n = text.chars().count();

    if n <= budget.limit {
        assert_eq!(
            messages,
            vec![text.to_owned()],
            "a text that fits is one part"
        );
        return parts;
    }

    let bound = n.div_ceil(budget.payload) + 1;
    assert!(
        parts.len() <= bound,
        "{} parts for {n} chars, bound {bound}",
        parts.len()
    );
    if limit == MESSAGE_LIMIT {
        assert!(parts.len() <= n.div_ceil(1900) + 1);
    }

    for (part, message) in parts.iter().zip(&messages) {
        let chars = message.chars().count();
        assert!(
            (1..=budget.limit).contains(&chars),
            "a part of {chars} chars: {message:?}"
        );
        assert_eq!(chars, part.char_count());
        assert!(!part.body.is_empty(), "empty body: {parts:?}");
        let prefix = part.prefix();
        assert!(prefix.is_empty() || (prefix.starts_with("```") && prefix.ends_with('\n')));
        assert!(part.suffix().is_empty() || part.suffix() == "\n```");
        assert_eq!(*message, format!("{prefix}{}{}", part.body, part.suffix()));
    }
    let rebuilt: String = parts.iter().map(|part| part.body).collect();
    assert_eq!(rebuilt, text, "the bodies concatenate back to the input");

    let mut cuts = Vec::with_capacity(parts.len());
    let mut at = 0;
    for part in &parts[..parts.len() - 1] {
        at += part.body.len();
        cuts.push(at);
    }
    let (fences, opened) = fences_at(text, &cuts, budget.max_tag);
    assert_eq!(parts[0].reopens, None, "the first part reopens nothing");
    assert!(
        !parts[parts.len() - 1].closes,
        "the last part closes nothing"
    );
    for (i, fence) in fences.iter().enumerate() {
        match fence {
            Some(tag) => {
                assert!(parts[i].closes, "part {i} ends in code but is not closed");
                assert_eq!(
                    parts[i + 1].reopens,
                    Some(tag.as_str()),
                    "part {} does not reopen the block",
                    i + 1
                );
            }
            None => {
                assert!(!parts[i].closes, "part {i} closes a block that is not open");
                assert_eq!(parts[i + 1].reopens, None, "part {} reopens", i + 1);
            }
        }
    }

    // With short tags there is always room to move a cut out of a token.
    if budget.limit == MESSAGE_LIMIT && opened.iter().all(|tag| tag.len() <= 40) {
        for (start, end) in mention_spans(text) {
            for &cut in &cuts {
                assert!(
                    !(start < cut && cut < end),
                    "cut at {cut} inside the token {:?}",
                    &text[start..end]
                );
            }
        }
    }

    if longest_whitespace_run(text) <= budget.payload / 4 {
        for part in &parts {
            assert!(
                !part.body.trim().is_empty(),
                "a whitespace-only body {:?} from a text without long whitespace runs",
                part.body
            );
        }
    }
    parts
}

// ---------------------------------------------------------------------------------------------
// Generators.

/// `unit` repeated, cut to `chars` characters.
fn repeat_to(unit: &str, chars: usize) -> String {
    let per_unit = unit.chars().count().max(1);
    let mut text = unit.repeat(chars / per_unit);
    text.extend(unit.chars().take(chars % per_unit));
    text
}

/// The first `chars` characters of `text`.
fn truncated(text: String, chars: usize) -> String {
    if text.len() <= chars {
        return text;
    }
    match text.char_indices().nth(chars) {
        Some((end, _)) => text[..end].to_owned(),
        None => text,
    }
}

/// `len` characters drawn from `alphabet` (ASCII) by a seed: much cheaper to generate than a
/// regex strategy, which matters at thousands of cases.
fn drawn(
    alphabet: &'static [u8],
    len: std::ops::RangeInclusive<usize>,
) -> impl Strategy<Value = String> {
    (any::<u64>(), len).prop_map(move |(mut seed, len)| {
        (0..len)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                char::from(alphabet[(seed >> 33) as usize % alphabet.len()])
            })
            .collect()
    })
}

/// Letters and spaces: words of about five letters.
const WORDS: &[u8] = b"abcdefghijklmnopqrstuvwxyz     ";

fn fence_opener() -> impl Strategy<Value = String> {
    let tag = prop_oneof![
        3 => Just(String::new()),
        4 => drawn(b"abcdefghijklmnopqrstuvwxyz+#", 1..=10),
        2 => drawn(b"abcdefghijklmnopqrstuvwxyz0123456789", 30..=100),
        1 => (100usize..3000).prop_map(|n| repeat_to("rust", n)),
    ];
    let ticks = prop_oneof![8 => Just("```"), 1 => Just("````"), 1 => Just("      ```")];
    let end = prop::sample::select(vec!["\n", "\n", "\r\n", "", " "]);
    (ticks, tag, end).prop_map(|(ticks, tag, end)| format!("{ticks}{tag}{end}"))
}

fn mention() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec!["<@", "<@!", "<@&", "<#"]),
        drawn(b"0123456789", 1..=20),
    )
        .prop_map(|(open, id)| format!("{open}{id}>"))
}

fn multibyte() -> impl Strategy<Value = String> {
    let unit = prop::sample::select(vec![
        "é",
        "日本",
        "👍🏽",
        "e\u{301}",
        "🇫🇷",
        "👨\u{200d}👩\u{200d}👧",
        "ß",
        "𝔘",
        "\u{fe0f}",
    ]);
    (unit, 1usize..40).prop_map(|(unit, n)| unit.repeat(n))
}

fn long_line() -> impl Strategy<Value = String> {
    let unit = prop::sample::select(vec!["a", "xyz", "日", "é", "<@1>", "ab<#22>", "-_-"]);
    (unit, 100usize..3000).prop_map(|(unit, n)| repeat_to(unit, n))
}

fn whitespace_run() -> impl Strategy<Value = String> {
    let unit = prop::sample::select(vec![" ", "\n", "\t", "\r\n", " \n"]);
    prop_oneof![
        4 => (unit.clone(), 2usize..400).prop_map(|(unit, n)| repeat_to(unit, n)),
        1 => (unit, 400usize..5000).prop_map(|(unit, n)| repeat_to(unit, n)),
    ]
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        12 => drawn(WORDS, 1..=60),
        8 => prop::sample::select(vec![" ", " ", " ", "\n", "\n\n", "\r\n", "\r", "\t", "\r\n\r\n"])
            .prop_map(String::from),
        3 => fence_opener(),
        2 => prop::sample::select(vec!["```", "`", "``", "````", "\n```\n", "``````"])
            .prop_map(String::from),
        3 => mention(),
        2 => multibyte(),
        1 => long_line(),
        1 => whitespace_run(),
        1 => prop::sample::select(vec!["<", ">", "<@", "<#1", "<:e:123>", "@everyone"])
            .prop_map(String::from),
    ]
}

/// Mixed text of 0..=10,000 characters.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(segment(), 0..60)
        .prop_map(|segments| truncated(segments.concat(), 10_000))
}

/// Words, spaces, line and paragraph breaks: ordinary prose.
fn prose() -> impl Strategy<Value = String> {
    let separator = prop::sample::select(vec![" ", " ", " ", " ", "\n", "\n\n", ", "]);
    let words = drawn(
        b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ      ",
        1..=80,
    );
    prop::collection::vec((words, separator), 0..200)
        .prop_map(|words| words.into_iter().map(|(w, s)| w + s).collect())
}

fn limit() -> impl Strategy<Value = usize> {
    prop_oneof![2 => Just(MESSAGE_LIMIT), 1 => 0usize..3000]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn every_split_keeps_the_contract(text in text()) {
        check(&text, MESSAGE_LIMIT);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn every_split_keeps_the_contract_at_any_limit(text in text(), limit in limit()) {
        check(&text, limit);
    }

    #[test]
    fn prose_parts_are_at_least_half_full(text in prose()) {
        let parts = check(&text, MESSAGE_LIMIT);
        for part in &parts[..parts.len() - 1] {
            prop_assert!(part.char_count() >= MESSAGE_LIMIT / 2, "{part:?}");
            prop_assert!(part.body.ends_with(char::is_whitespace), "cut inside a word: {part:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Named regressions.

#[test]
fn fence_opened_on_a_long_line_terminates_and_reopens() {
    let text = format!("```{}", "a".repeat(2500));
    let parts = check(&text, MESSAGE_LIMIT);
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert!(parts[0].closes);
    assert_eq!(parts[1].reopens, Some(""));
    let messages = split_message(&text, MESSAGE_LIMIT);
    assert!(messages[0].starts_with("```aaa") && messages[0].ends_with("a\n```"));
    assert!(messages[1].starts_with("```\naaa"));
}

#[test]
fn a_fence_opener_line_of_3000_chars_terminates() {
    let text = format!("intro\n```{}\ncode\n```", "rust".repeat(750));
    let parts = check(&text, MESSAGE_LIMIT);
    assert!(parts.len() <= 3, "{parts:?}");
    assert!(parts[1..]
        .iter()
        .all(|p| p.reopens.is_none_or(str::is_empty)));
}

#[test]
fn word_salad_in_a_fence_is_not_amplified() {
    let text = format!("```{}", "word ".repeat(600));
    assert_eq!(text.chars().count(), 3003);
    let messages = split_message(&text, MESSAGE_LIMIT);
    assert_eq!(messages.len(), 2, "{} parts", messages.len());
    let total: usize = messages.iter().map(|m| m.chars().count()).sum();
    assert!(total <= 3003 + 8, "{total} chars sent for 3,003");
    check(&text, MESSAGE_LIMIT);
}

#[test]
fn mentions_expanded_past_the_limit_terminate_and_stay_whole() {
    // 2,043 characters after the outbound rewrite turned @aliases into tokens. The old splitter
    // made 7 parts of the first and looped forever on the second.
    let text = format!("```{}abc", "<@123456789012345678>".repeat(97));
    assert_eq!(text.chars().count(), 2043);
    let parts = check(&text, MESSAGE_LIMIT);
    assert_eq!(parts.len(), 2);
    assert!(parts[0].body.ends_with('>'), "{:?}", parts[0].body);

    let text = format!(
        "```{}{}",
        "<@123456789012345678>".repeat(20),
        "a".repeat(1620)
    );
    assert_eq!(text.chars().count(), 2043);
    let parts = check(&text, MESSAGE_LIMIT);
    assert_eq!(parts.len(), 2);
}

#[test]
fn a_part_displays_as_its_message() {
    let text = format!("```rust\n{}```", "let x = 1;\n".repeat(300));
    let parts = split_parts(&text, MESSAGE_LIMIT);
    assert!(parts.len() >= 2);
    for part in &parts {
        assert_eq!(part.to_string(), part.message());
    }
    assert_eq!(parts[1].prefix(), "```rust\n");
    assert_eq!(parts[0].suffix(), "\n```");
}

#[test]
fn the_separator_at_a_cut_stays_with_the_earlier_part() {
    let text = format!("{}\n\n{}", "word ".repeat(300), "word ".repeat(300));
    let messages = split_message(&text, MESSAGE_LIMIT);
    assert_eq!(messages.concat(), text);
    assert!(messages[0].ends_with("\n\n"));
}

#[test]
fn a_whitespace_run_longer_than_a_part_yields_whitespace_parts_only_inside_it() {
    let text = format!("before {}after", " ".repeat(5000));
    let parts = check(&text, MESSAGE_LIMIT);
    assert!(parts[0].body.starts_with("before"));
    assert!(parts[parts.len() - 1].body.ends_with("after"));
    // The run is longer than a part: one part inside it is unavoidable, and documented.
    let blank = parts.iter().filter(|p| p.body.trim().is_empty()).count();
    assert!(blank <= 1, "{blank} whitespace-only parts");
}

#[test]
fn trailing_whitespace_does_not_become_its_own_part() {
    let text = format!("{}\n   ", "x".repeat(1999));
    let parts = check(&text, MESSAGE_LIMIT);
    assert!(parts.iter().all(|p| !p.body.trim().is_empty()), "{parts:?}");
}

#[test]
fn an_empty_code_block_is_not_left_at_a_cut() {
    // The block's opening line ends near the window's end: the cut goes before the block
    // rather than right after its opening line.
    let code = format!("let value = 1; // {}\n", "x".repeat(60)).repeat(30);
    let text = format!("{}\n```rust\n{code}```", "word ".repeat(390));
    let parts = check(&text, MESSAGE_LIMIT);
    assert!(!parts[0].closes, "{:?}", parts[0]);
}

#[test]
fn emoji_are_cut_at_character_boundaries() {
    let text = "👍🏽".repeat(1000);
    let parts = check(&text, MESSAGE_LIMIT);
    assert!(
        parts.iter().all(|p| p.body.starts_with('👍')),
        "a modifier lost its emoji"
    );
}

#[test]
fn crlf_text_keeps_its_pairs() {
    let text = "a line of text\r\n".repeat(400);
    let parts = check(&text, MESSAGE_LIMIT);
    assert!(parts.iter().all(|p| p.body.ends_with("\r\n")));
}

#[test]
fn a_mebibyte_of_mixed_text_is_split_within_the_bound() {
    let unit = "word <@123456789012345678> é日本👍🏽 ```rust\nlet x = 1;\n``` \r\n\n";
    let text = repeat_to(unit, 1 << 20);
    check(&text, MESSAGE_LIMIT);
    let fenced = format!("```{}", "a".repeat(1 << 20));
    check(&fenced, MESSAGE_LIMIT);
}

// ---------------------------------------------------------------------------------------------
// The corpus.

fn corpus() -> Vec<(String, String)> {
    let raw = std::fs::read_to_string(CORPUS).expect("the corpus file");
    let entries: Vec<Value> = serde_json::from_str(&raw).expect("the corpus is JSON");
    entries
        .iter()
        .map(|entry| {
            (
                entry["name"].as_str().expect("a name").to_owned(),
                entry["text"].as_str().expect("a text").to_owned(),
            )
        })
        .collect()
}

#[test]
fn every_corpus_text_keeps_the_contract() {
    let corpus = corpus();
    let named = named_texts();
    assert_eq!(
        corpus.len(),
        named.len() + 20,
        "the corpus has the named texts and 20 more"
    );
    for (name, text) in named {
        assert!(
            corpus.iter().any(|(n, t)| n == name && *t == text),
            "the corpus is stale: {name} differs; regenerate it"
        );
    }
    for (name, text) in &corpus {
        for limit in [MESSAGE_LIMIT, 1000, 333, 20] {
            let result = std::panic::catch_unwind(|| {
                check(text, limit);
            });
            assert!(result.is_ok(), "corpus text {name:?} at limit {limit}");
        }
    }
}

/// The hand-made texts of the corpus: every input that once broke the splitter, and neighbours.
fn named_texts() -> Vec<(&'static str, String)> {
    let mention = "<@123456789012345678>";
    vec![
        ("fence-then-2500-a", format!("```{}", "a".repeat(2500))),
        (
            "fence-then-word-salad",
            format!("```{}", "word ".repeat(600)),
        ),
        (
            "2043-chars-of-expanded-mentions-in-a-fence",
            format!("```{}abc", mention.repeat(97)),
        ),
        (
            "2043-chars-of-mentions-then-a-long-word-in-a-fence",
            format!("```{}{}", mention.repeat(20), "a".repeat(1620)),
        ),
        (
            "2043-chars-of-spaced-mentions",
            repeat_to(&format!("hi {mention} "), 2043),
        ),
        (
            "fence-opener-line-of-3000-chars",
            format!("```{}\nfn main() {{}}\n```\n", "rust".repeat(749)),
        ),
        ("2000-emoji", "👍".repeat(2000)),
        ("2001-emoji", "👍".repeat(2001)),
        ("2000-emoji-with-skin-tones", "👍🏽".repeat(2000)),
        ("1500-flags", "🇫🇷".repeat(1500)),
        ("3000-combining-sequences", "e\u{301}".repeat(3000)),
        ("crlf-lines", "a line of text\r\n".repeat(400)),
        (
            "crlf-paragraphs-in-a-fence",
            format!("```rust\r\n{}```", "let x = 1;\r\n\r\n".repeat(300)),
        ),
        ("lone-cr", "text\r".repeat(900)),
        (
            "5000-spaces-between-words",
            format!("before {}after", " ".repeat(5000)),
        ),
        (
            "paragraph-every-1050-chars",
            repeat_to(&format!("{}\n\n", "x".repeat(1048)), 9000),
        ),
        (
            "fence-with-92-char-tag",
            format!("```{}\n{}```", "t".repeat(92), "code\n".repeat(900)),
        ),
        (
            "fence-with-93-char-tag",
            format!("```{}\n{}```", "t".repeat(93), "code\n".repeat(900)),
        ),
        ("backtick-run-of-3000", "`".repeat(3000)),
        (
            "inline-fences-mid-line",
            "say ```x``` and ```rust\ny``` ".repeat(200),
        ),
    ]
}

/// Writes the corpus: the named texts and 20 random ones from a fixed seed.
#[test]
#[ignore = "writes tests/splitter_corpus.json; run with SPLITTER_WRITE_CORPUS=1"]
fn write_corpus() {
    if std::env::var_os("SPLITTER_WRITE_CORPUS").is_none() {
        return;
    }
    let mut entries: Vec<Value> = named_texts()
        .into_iter()
        .map(|(name, text)| json!({ "name": name, "text": text }))
        .collect();
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[0x5b; 32]),
    );
    let strategy = text();
    let mut made = 0;
    while made < 20 {
        let text = strategy.new_tree(&mut runner).expect("a text").current();
        if text.chars().count() <= MESSAGE_LIMIT {
            continue;
        }
        made += 1;
        entries.push(json!({ "name": format!("random-{made:02}"), "text": text }));
    }
    let written = serde_json::to_string_pretty(&entries).expect("JSON") + "\n";
    std::fs::write(CORPUS, written).expect("writing the corpus");
}
