//! The mention rewrite rules, one behaviour per test.

use entity::{
    AliasKind, Aliases, LearnedNames, Mapper, Mention, NoNames, NoteKind, SessionRefError,
    Snowflake,
};

const STANLEY: u64 = 123456789012345678;
const OPS_BOT: u64 = 223456789012345678;
const OPS: u64 = 334455667788990011;
const RELEASE_ROOM: u64 = 334455667788990022;
const ONCALL: u64 = 445566778899001122;
const TOMAS: u64 = 523456789012345678;
const DESIGN: u64 = 645566778899001122;
const GENERAL: u64 = 734455667788990011;

fn aliases() -> Aliases {
    Aliases::new()
        .with(AliasKind::User, "Stanley", STANLEY)
        .and_then(|a| a.with(AliasKind::User, "Ops-Bot", OPS_BOT))
        .and_then(|a| a.with(AliasKind::Session, "ops", OPS))
        .and_then(|a| a.with(AliasKind::Session, "release-room", RELEASE_ROOM))
        .and_then(|a| a.with(AliasKind::Role, "oncall", ONCALL))
        .expect("test aliases are valid")
}

fn learned() -> LearnedNames {
    let mut names = LearnedNames::new();
    names.add_user(Snowflake(TOMAS), "tomas", Some("Tomas Novak"));
    names.add_role(Snowflake(DESIGN), "Design Team");
    names.add_channel(Snowflake(GENERAL), "general");
    names
}

fn out(text: &str) -> String {
    let (a, n) = (aliases(), learned());
    Mapper::new(&a, &n).outbound(text).into_owned()
}

fn inb(text: &str) -> String {
    let (a, n) = (aliases(), learned());
    Mapper::new(&a, &n).inbound(text).into_owned()
}

#[test]
fn rewrites_configured_user_case_insensitively() {
    assert_eq!(out("ping @Stanley"), format!("ping <@{STANLEY}>"));
    assert_eq!(out("ping @stanley"), format!("ping <@{STANLEY}>"));
    assert_eq!(out("ping @STANLEY!"), format!("ping <@{STANLEY}>!"));
}

#[test]
fn rewrites_hyphenated_user_alias() {
    assert_eq!(out("@ops-bot deploy"), format!("<@{OPS_BOT}> deploy"));
}

#[test]
fn rewrites_learned_username_and_display_name_with_spaces_as_hyphens() {
    assert_eq!(out("hi @tomas"), format!("hi <@{TOMAS}>"));
    assert_eq!(out("hi @Tomas-Novak"), format!("hi <@{TOMAS}>"));
}

#[test]
fn configured_alias_wins_over_learned_name() {
    let a = aliases();
    let mut n = learned();
    n.add_user(Snowflake(TOMAS + 1), "stanley", None);
    assert_eq!(
        Mapper::new(&a, &n).outbound("@stanley"),
        format!("<@{STANLEY}>")
    );
}

#[test]
fn rewrites_role_alias_and_learned_role_name() {
    assert_eq!(out("@oncall look"), format!("<@&{ONCALL}> look"));
    assert_eq!(out("@design-team look"), format!("<@&{DESIGN}> look"));
}

#[test]
fn rewrites_hyphenated_channel_token() {
    assert_eq!(out("see #release-room"), format!("see <#{RELEASE_ROOM}>"));
    assert_eq!(out("see #general"), format!("see <#{GENERAL}>"));
}

#[test]
fn trailing_punctuation_is_not_part_of_a_token() {
    for p in [".", ",", "!", "?", ":", ";", ")", "..."] {
        assert_eq!(
            out(&format!("in #release-room{p}")),
            format!("in <#{RELEASE_ROOM}>{p}"),
            "punctuation {p:?}"
        );
    }
    assert_eq!(out("(@Stanley)"), format!("(<@{STANLEY}>)"));
}

#[test]
fn sigil_inside_a_word_is_not_a_mention() {
    assert_eq!(out("mail stanley@ops.example"), "mail stanley@ops.example");
    assert_eq!(out("written in C#ops"), "written in C#ops");
    assert_eq!(out("snake_@Stanley"), "snake_@Stanley");
}

#[test]
fn unknown_names_stay_exactly_as_written() {
    assert_eq!(out("@Nobody in #nowhere, @"), "@Nobody in #nowhere, @");
    assert_eq!(out("# Heading"), "# Heading");
    assert_eq!(out("issue #42"), "issue #42");
}

#[test]
fn everyone_and_here_are_never_rewritten() {
    let mut n = learned();
    n.add_user(Snowflake(TOMAS + 7), "everyone", None);
    n.add_user(Snowflake(TOMAS + 8), "here", None);
    let a = aliases();
    let mapper = Mapper::new(&a, &n);
    assert_eq!(
        mapper.outbound("@everyone @here @Everyone"),
        "@everyone @here @Everyone"
    );
}

#[test]
fn existing_discord_markup_passes_through_outbound() {
    let text = format!("<@{STANLEY}> <#{OPS}> <@&{ONCALL}>");
    assert_eq!(out(&text), text);
}

#[test]
fn outbound_skips_inline_code_and_fences() {
    assert_eq!(
        out("`@Stanley` @Stanley"),
        format!("`@Stanley` <@{STANLEY}>")
    );
    let fenced = "```\n@Stanley #ops\n```\n@Stanley";
    assert_eq!(
        out(fenced),
        format!("```\n@Stanley #ops\n```\n<@{STANLEY}>")
    );
}

#[test]
fn unclosed_fence_makes_the_rest_code() {
    assert_eq!(
        out("@Stanley ```sh\n@Stanley #ops"),
        format!("<@{STANLEY}> ```sh\n@Stanley #ops")
    );
    let raw = format!("<@{STANLEY}> ```\n<@{STANLEY}>");
    assert_eq!(inb(&raw), format!("@Stanley ```\n<@{STANLEY}>"));
}

#[test]
fn fallback_forms_rewrite_back_to_ids() {
    assert_eq!(out("@user_42 @role_43 #channel_44"), "<@42> <@&43> <#44>");
}

#[test]
fn inbound_uses_aliases_then_learned_names_then_fallbacks() {
    let text = format!(
        "<@{STANLEY}> <@!{OPS_BOT}> <@{TOMAS}> <@999> <@&{ONCALL}> <@&{DESIGN}> <@&998> <#{OPS}> <#{GENERAL}> <#997>"
    );
    assert_eq!(
        inb(&text),
        "@Stanley @Ops-Bot @tomas @user_999 @oncall @Design-Team @role_998 #ops #general #channel_997"
    );
}

#[test]
fn inbound_leaves_other_markup_alone() {
    let text = "<:blob:123> <t:1700000000:R> </deploy:55> <@abc> <#> <@&> a < b";
    assert_eq!(inb(text), text);
}

#[test]
fn inbound_skips_code() {
    let text = format!("`<@{STANLEY}>` <@{STANLEY}>");
    assert_eq!(inb(&text), format!("`<@{STANLEY}>` @Stanley"));
}

#[test]
fn inbound_falls_back_when_a_name_would_not_resolve_back() {
    let a = aliases();
    let mut n = LearnedNames::new();
    // Two users claim the same name: only the first one may be written by name.
    n.add_user(Snowflake(TOMAS), "tomas", None);
    n.add_user(Snowflake(TOMAS + 1), "tomas", Some("Zoë"));
    let mapper = Mapper::new(&a, &n);
    assert_eq!(mapper.inbound(&format!("<@{TOMAS}>")), "@tomas");
    assert_eq!(
        mapper.inbound(&format!("<@{}>", TOMAS + 1)),
        format!("@user_{}", TOMAS + 1)
    );
}

#[test]
fn round_trip_restores_discord_text() {
    let (a, n) = (aliases(), learned());
    let mapper = Mapper::new(&a, &n);
    let discord = format!(
        "hey <@{STANLEY}>, <@&{ONCALL}> and <@{TOMAS}> see <#{RELEASE_ROOM}>. also <@5> in <#{GENERAL}>!\n`<@{STANLEY}>`"
    );
    let readable = mapper.inbound(&discord);
    assert_eq!(mapper.outbound(&readable), discord);
    let nick = format!("<@!{STANLEY}>");
    assert_eq!(
        mapper.outbound(&mapper.inbound(&nick)),
        format!("<@{STANLEY}>")
    );
}

#[test]
fn unchanged_text_is_returned_borrowed() {
    let a = aliases();
    let mapper = Mapper::new(&a, &NoNames);
    assert!(matches!(
        mapper.outbound("nothing to see"),
        std::borrow::Cow::Borrowed(_)
    ));
    assert!(matches!(
        mapper.inbound("nothing <here>"),
        std::borrow::Cow::Borrowed(_)
    ));
}

#[test]
fn session_references_in_every_form_resolve() {
    let a = aliases();
    let mapper = Mapper::new(&a, &NoNames);
    for reference in [
        "334455667788990011",
        "<#334455667788990011>",
        "ops",
        "#ops",
        "#OPS",
        "  ops \n",
    ] {
        assert_eq!(
            mapper.resolve_session(reference),
            Ok(Snowflake(OPS)),
            "{reference:?}"
        );
    }
    assert_eq!(mapper.session_token(Snowflake(OPS)), Some("ops"));
    assert_eq!(mapper.session_token(Snowflake(GENERAL)), None);
}

#[test]
fn learned_channel_names_resolve_as_sessions() {
    let (a, n) = (aliases(), learned());
    assert_eq!(
        Mapper::new(&a, &n).resolve_session("#general"),
        Ok(Snowflake(GENERAL))
    );
}

#[test]
fn unknown_session_suggests_the_nearest_token() {
    let a = aliases();
    let err = Mapper::new(&a, &NoNames)
        .resolve_session("opps")
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Unknown session 'opps'. Did you mean 'ops'? Expected a channel id, a <#id> mention, or one of: ops, release-room"
    );
    assert!(matches!(err, SessionRefError::Unknown { .. }));
}

#[test]
fn malformed_ids_are_refused_with_the_reason() {
    let a = aliases();
    let mapper = Mapper::new(&a, &NoNames);
    assert!(matches!(
        mapper.resolve_session("1234"),
        Err(SessionRefError::BadId { .. })
    ));
    assert!(matches!(
        mapper.resolve_session("<#abc>"),
        Err(SessionRefError::BadId { .. })
    ));
    assert!(matches!(
        mapper.resolve_session("   "),
        Err(SessionRefError::Empty { .. })
    ));
}

#[test]
fn readable_names_a_single_mention() {
    let (a, n) = (aliases(), learned());
    let mapper = Mapper::new(&a, &n);
    assert_eq!(mapper.readable(Mention::Channel(Snowflake(OPS))), "#ops");
    assert_eq!(mapper.readable(Mention::User(Snowflake(1))), "@user_1");
}

#[test]
fn discord_mentions_lists_each_mention_once_outside_code() {
    let found = entity::discord_mentions(
        "<@123456789012345678> and <@!123456789012345678>, <@&445566778899001122> in \
         <#334455667788990011> `<@523456789012345678>` <@12x> <#",
    );
    assert_eq!(
        found,
        vec![
            Mention::User(Snowflake(STANLEY)),
            Mention::Role(Snowflake(ONCALL)),
            Mention::Channel(Snowflake(OPS)),
        ]
    );
    assert!(entity::discord_mentions("").is_empty());
}

#[test]
fn outbound_notes_what_it_left_as_text_and_why() {
    let (a, n) = (aliases(), learned());
    let mapper = Mapper::new(&a, &n);
    let report = mapper.outbound_noted(
        "hello @Nobody and #nochannel, @everyone @here; @Stanley in #ops, again @Nobody. `@Hidden`",
    );
    assert_eq!(
        report.text,
        format!("hello @Nobody and #nochannel, @everyone @here; <@{STANLEY}> in <#{OPS}>, again @Nobody. `@Hidden`")
    );
    let notes: Vec<(&str, NoteKind)> = report
        .notes
        .iter()
        .map(|n| (n.token.as_str(), n.kind))
        .collect();
    assert_eq!(
        notes,
        [
            ("@Nobody", NoteKind::UnknownName),
            ("#nochannel", NoteKind::UnknownChannel),
            ("@everyone", NoteKind::MassMention),
            ("@here", NoteKind::MassMention),
        ]
    );
    assert_eq!(report.channels, [("#ops".to_owned(), Snowflake(OPS))]);
    // The plain rewrite is the same text.
    assert_eq!(
        mapper.outbound("hello @Nobody and #ops"),
        mapper.outbound_noted("hello @Nobody and #ops").text
    );
}

#[test]
fn a_name_several_users_share_is_noted_with_every_candidate() {
    let a = aliases();
    let mut n = LearnedNames::new();
    n.add_user(Snowflake(TOMAS), "alex", None);
    n.add_user(Snowflake(TOMAS + 1), "Alex", None);
    n.add_channel(Snowflake(GENERAL), "general");
    n.add_channel(Snowflake(GENERAL + 1), "general");
    let mapper = Mapper::new(&a, &n);
    let report = mapper.outbound_noted("@alex see #general; @Stanley is configured");
    assert_eq!(
        report.text,
        format!("<@{TOMAS}> see <#{GENERAL}>; <@{STANLEY}> is configured")
    );
    assert_eq!(report.notes.len(), 2, "{report:?}");
    assert_eq!(report.notes[0].kind, NoteKind::Ambiguous);
    assert_eq!(
        report.notes[0].candidates,
        [Snowflake(TOMAS), Snowflake(TOMAS + 1)]
    );
    assert_eq!(report.notes[1].token, "#general");
    assert_eq!(
        report.notes[1].candidates,
        [Snowflake(GENERAL), Snowflake(GENERAL + 1)]
    );
}

#[test]
fn notes_are_bounded() {
    let (a, n) = (aliases(), learned());
    let text: String = (0..500).map(|i| format!("@nobody{i} ")).collect();
    let report = Mapper::new(&a, &n).outbound_noted(&text);
    assert_eq!(report.notes.len(), entity::MAX_NOTES);
    assert_eq!(report.more, 500 - entity::MAX_NOTES);
}
