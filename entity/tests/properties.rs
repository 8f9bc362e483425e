//! Properties that hold for any text: no panics, code is never touched, and the round trip.

use entity::{AliasKind, Aliases, LearnedNames, Mapper, NoNames, Snowflake};
use proptest::prelude::*;

fn fixture() -> (Aliases, LearnedNames) {
    let aliases = Aliases::new()
        .with(AliasKind::User, "Stanley", 123456789012345678)
        .and_then(|a| a.with(AliasKind::Role, "oncall", 445566778899001122))
        .and_then(|a| a.with(AliasKind::Session, "ops", 334455667788990011))
        .and_then(|a| a.with(AliasKind::Session, "release-room", 334455667788990022))
        .expect("valid");
    let mut names = LearnedNames::new();
    names.add_user(Snowflake(523456789012345678), "tomas", Some("Tomas N"));
    names.add_role(Snowflake(645566778899001122), "Design Team");
    names.add_channel(Snowflake(734455667788990011), "general");
    (aliases, names)
}

fn code_spans(text: &str) -> Vec<String> {
    // Independent, slow reference: collect the code spans with a char-by-char scanner.
    let b = text.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'`' {
            i += 1;
            continue;
        }
        let run = b[i..].iter().take_while(|&&c| c == b'`').count();
        if run >= 3 {
            let rest = &text[i + run..];
            let end = match rest.find("```") {
                Some(p) => {
                    let close = i + run + p;
                    close + b[close..].iter().take_while(|&&c| c == b'`').count()
                }
                None => b.len(),
            };
            spans.push(text[i..end].to_owned());
            i = end;
            continue;
        }
        let mut j = i + run;
        let mut closed = None;
        while j < b.len() {
            if b[j] == b'`' {
                let r = b[j..].iter().take_while(|&&c| c == b'`').count();
                if r == run {
                    closed = Some(j + r);
                    break;
                }
                j += r;
            } else {
                j += 1;
            }
        }
        match closed {
            Some(end) => {
                spans.push(text[i..end].to_owned());
                i = end;
            }
            None => i += run,
        }
    }
    spans
}

fn chatty_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[a-zA-Z0-9 ,.!?:;()\n]{0,12}",
        Just("@Stanley".to_owned()),
        Just("@everyone".to_owned()),
        Just("#release-room.".to_owned()),
        Just("#ops".to_owned()),
        Just("`".to_owned()),
        Just("```".to_owned()),
        Just("<@123456789012345678>".to_owned()),
        Just("<#334455667788990011>".to_owned()),
        Just("<@&445566778899001122>".to_owned()),
        Just("a@b.com".to_owned()),
        ".{0,6}",
    ];
    proptest::collection::vec(piece, 0..24).prop_map(|v| v.concat())
}

/// Discord text whose only `@`/`#` words are real mentions, each standing alone.
fn discord_text() -> impl Strategy<Value = String> {
    let mention = prop_oneof![
        Just("<@123456789012345678>".to_owned()),
        Just("<@!123456789012345678>".to_owned()),
        Just("<@523456789012345678>".to_owned()),
        Just("<@111111111111111111>".to_owned()),
        Just("<@&445566778899001122>".to_owned()),
        Just("<@&645566778899001122>".to_owned()),
        Just("<@&222222222222222222>".to_owned()),
        Just("<#334455667788990011>".to_owned()),
        Just("<#334455667788990022>".to_owned()),
        Just("<#734455667788990011>".to_owned()),
        Just("<#333333333333333333>".to_owned()),
    ];
    let prose = "[a-zA-Z0-9 ,!?\n]{0,16}".prop_map(|s| s);
    let code = prop_oneof![
        "[a-z <>@#&0-9]{1,10}".prop_map(|s| format!("`{s}`")),
        "[a-z <>@#&0-9\n]{0,20}".prop_map(|s| format!("```\n{s}\n```")),
    ];
    let piece = prop_oneof![
        3 => prose,
        3 => (mention, prop_oneof![Just(" "), Just(". "), Just(", "), Just("!\n"), Just(")")])
            .prop_map(|(m, p)| format!(" {m}{p}")),
        1 => code.prop_map(|c| format!(" {c} ")),
    ];
    proptest::collection::vec(piece, 0..20).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn neither_direction_panics_on_any_text(text in any::<String>()) {
        let (a, n) = fixture();
        let mapper = Mapper::new(&a, &n);
        let _ = mapper.outbound(&text);
        let _ = mapper.inbound(&text);
        let _ = mapper.resolve_session(&text);
    }

    /// Noting changes nothing in the text; every note names a token that is in the text, and
    /// none a mention that was written.
    #[test]
    fn noted_outbound_rewrites_the_same_and_notes_only_what_is_there(text in chatty_text()) {
        let (a, n) = fixture();
        let mapper = Mapper::new(&a, &n);
        let report = mapper.outbound_noted(&text);
        prop_assert_eq!(&report.text, &mapper.outbound(&text));
        prop_assert!(report.notes.len() + report.channels.len() <= entity::MAX_NOTES);
        for note in &report.notes {
            prop_assert!(text.contains(&note.token), "{:?} not in {:?}", note, text);
            if note.kind != entity::NoteKind::Ambiguous {
                prop_assert!(report.text.contains(&note.token), "{:?} was rewritten", note);
            }
        }
    }

    #[test]
    fn neither_direction_panics_on_chatty_text(text in chatty_text()) {
        let (a, n) = fixture();
        let mapper = Mapper::new(&a, &n);
        let _ = mapper.outbound(&text);
        let _ = mapper.inbound(&text);
    }

    #[test]
    fn discord_mentions_are_what_inbound_renders(text in discord_text()) {
        // With no names at all, inbound writes every mention it renders in its fallback form
        // (`@user_<id>`, `@role_<id>`, `#channel_<id>`), and nothing else in this text has an
        // underscore: the fallback tokens are exactly the mentions.
        let found = entity::discord_mentions(&text);
        let aliases = Aliases::new();
        let mapper = Mapper::new(&aliases, &NoNames);
        let rendered = mapper.inbound(&text).into_owned();
        let mut tokens: Vec<String> = Vec::new();
        for prefix in ["@user_", "@role_", "#channel_"] {
            let mut rest = rendered.as_str();
            while let Some(at) = rest.find(prefix) {
                let digits: String = rest[at + prefix.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                tokens.push(format!("{prefix}{digits}"));
                rest = &rest[at + prefix.len()..];
            }
        }
        tokens.sort();
        tokens.dedup();
        let mut expected: Vec<String> = found.iter().map(|m| mapper.readable(*m)).collect();
        let count = expected.len();
        expected.sort();
        expected.dedup();
        prop_assert_eq!(count, expected.len(), "a mention was listed twice");
        prop_assert_eq!(tokens, expected);
    }

    #[test]
    fn code_spans_come_out_byte_identical(text in chatty_text()) {
        let (a, n) = fixture();
        let mapper = Mapper::new(&a, &n);
        let before = code_spans(&text);
        prop_assert_eq!(code_spans(&mapper.outbound(&text)), before.clone());
        prop_assert_eq!(code_spans(&mapper.inbound(&text)), before);
    }

    #[test]
    fn outbound_of_inbound_restores_discord_text(text in discord_text()) {
        let (a, n) = fixture();
        let mapper = Mapper::new(&a, &n);
        let readable = mapper.inbound(&text);
        let expected = text.replace("<@!", "<@");
        prop_assert_eq!(mapper.outbound(&readable).into_owned(), expected);
    }

    #[test]
    fn every_session_reference_resolves_back_to_its_session(
        names in proptest::collection::vec(session_name(), 1..12),
    ) {
        // Names as Discord allows them (spaces, case, punctuation, other scripts, digits only,
        // the same name twice, an alias's or a fallback's spelling), beside configured aliases.
        let (aliases, mut learned) = fixture();
        let ids: Vec<Snowflake> = (0..names.len() as u64)
            .map(|i| Snowflake(900000000000000000 + i))
            .collect();
        for (id, name) in ids.iter().zip(&names) {
            learned.add_channel(*id, name);
        }
        let mapper = Mapper::new(&aliases, &learned);
        for id in ids.iter().copied().chain([Snowflake(334455667788990011), Snowflake(1)]) {
            let reference = mapper.session_reference(id);
            prop_assert!(reference.starts_with('#'), "{}", reference);
            prop_assert_eq!(mapper.resolve_session(&reference), Ok(id), "{}", reference);
        }
    }
}

/// A channel or thread name as people type them in Discord.
fn session_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9 ]{0,20}",
        "[A-Za-z0-9 _.,!?'#@-]{1,24}",
        "\\PC{1,16}",
        "[0-9]{17,19}",
        Just("release checklist".to_owned()),
        Just("Release Checklist".to_owned()),
        Just("ops".to_owned()),
        Just("channel_1".to_owned()),
        Just("general".to_owned()),
        Just("trailing.".to_owned()),
    ]
}
