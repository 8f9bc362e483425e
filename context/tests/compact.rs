//! Compaction's guard and its edges: a summary that loses an identifier a later turn still
//! refers to is caught, the appended fallback restores it, and garbage answers and stale plans
//! are refused with their reason.

mod common;

use common::counter;
use proptest::prelude::*;
use protocol::Snowflake;
use switchboard_context::compact::{
    self, guard, parse_summary, CompactError, CompactionSettings, Guard, SummaryError,
};
use switchboard_context::ids::Ident;
use switchboard_context::{fit, Budget, CompactionPlan, Entry, Message, Request, Speaker};

/// An identifier and the ways a message may write it.
#[derive(Debug, Clone)]
enum Named {
    Id(u64),
    User(String),
    Channel(String),
    Path(String),
}

impl Named {
    fn written(&self, form: usize) -> String {
        match self {
            Named::Id(id) => [
                format!("<@{id}>"),
                format!("message {id}"),
                format!("<#{id}>"),
            ][form % 3]
                .clone(),
            Named::User(name) => {
                [format!("@{name}"), format!("@{}", name.to_uppercase())][form % 2].clone()
            }
            Named::Channel(name) => format!("#{name}"),
            Named::Path(path) => format!("`{path}`"),
        }
    }

    fn ident(&self) -> Ident {
        match self {
            Named::Id(id) => Ident::Id(*id),
            Named::User(name) => Ident::User(name.to_lowercase()),
            Named::Channel(name) => Ident::Channel(name.to_lowercase()),
            Named::Path(path) => Ident::Path(path.clone()),
        }
    }
}

fn named() -> impl Strategy<Value = Named> {
    prop_oneof![
        (100_000_000_000_000_000u64..999_999_999_999_999_999).prop_map(Named::Id),
        "[a-z]{3,10}".prop_map(Named::User),
        "[a-z]{3,8}-[a-z]{2,6}".prop_map(Named::Channel),
        "[a-z]{2,6}/[a-z]{2,8}\\.(rs|log|md|toml)".prop_map(|p| Named::Path(format!("/srv/{p}"))),
    ]
}

fn person(text: String, id: u64) -> Entry {
    Entry::Message(Message::new(
        Speaker::Person {
            id: Snowflake(42),
            name: "Mira Jones".into(),
            trusted: true,
        },
        Some(Snowflake(id)),
        "2026-11-26T06:00:00Z",
        text,
    ))
}

/// A request whose first `dropped.len()` entries are summarised and whose later entries
/// refer to `referred` of the identifiers the summarised part named.
fn request(dropped: &[Named], referred: &[usize]) -> (Request, CompactionPlan) {
    let mut entries: Vec<Entry> = dropped
        .iter()
        .enumerate()
        .map(|(i, n)| {
            person(
                format!("earlier: look at {} please", n.written(i)),
                10 + i as u64,
            )
        })
        .collect();
    for (j, &r) in referred.iter().enumerate() {
        let n = &dropped[r % dropped.len()];
        entries.push(person(
            format!("later: what about {}?", n.written(j + 1)),
            500 + j as u64,
        ));
    }
    entries.push(Entry::Message(
        Message::new(Speaker::Bot, None, "t", "ok").trigger(),
    ));
    let plan = CompactionPlan {
        entries: (0..dropped.len()).collect(),
        dropped: dropped.len(),
        tokens: 0,
    };
    (
        Request {
            entries,
            ..Request::default()
        },
        plan,
    )
}

/// The compaction of `plan` with the default budget and settings.
fn prepared(request: &Request, plan: &CompactionPlan) -> compact::Compaction {
    compact::prepare(
        request,
        plan,
        &Budget::default(),
        &CompactionSettings::default(),
        counter(),
    )
    .expect("prepared")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Whatever the part names and later turns refer to, the guard demands exactly those, a
    /// summary keeping them passes, and a planned bad summary that drops one is caught with
    /// that one named — then the appended fallback keeps it.
    #[test]
    fn the_guard_catches_a_summary_that_drops_an_identifier_still_referred_to(
        dropped in prop::collection::vec(named(), 1..12),
        referred in prop::collection::vec(0usize..12, 1..6),
        lose in 0usize..6,
    ) {
        let (request, plan) = request(&dropped, &referred);
        let job = prepared(&request, &plan);
        prop_assert_eq!(job.chunks(), 1);
        let must = job.must_keep(0, None);
        for &r in &referred {
            let ident = dropped[r % dropped.len()].ident();
            prop_assert!(must.contains(&ident), "{ident} referred to later but not demanded: {must:?}");
        }
        let good: Vec<String> = must.iter().map(ToString::to_string).collect();
        prop_assert_eq!(guard(&format!("## Facts\n- {}", good.join("\n- ")), &must), Guard::Ok);

        let lost = must[lose % must.len()].clone();
        let bad: Vec<String> = must.iter().filter(|i| **i != lost).map(ToString::to_string).collect();
        let bad = format!("## Facts\n- {}", bad.join("\n- "));
        // A name that is a substring of another kept one could still be "kept": only whole
        // words count, so this holds whatever the names.
        match guard(&bad, &must) {
            Guard::Missing(missing) => prop_assert_eq!(missing, vec![lost.clone()]),
            Guard::Ok => prop_assert!(false, "{lost} dropped but the guard passed: {bad}"),
        }
        let restored = job.keep_missing(0, None, &bad, std::slice::from_ref(&lost), counter());
        prop_assert_eq!(guard(&restored, &must), Guard::Ok, "{}", restored);
    }

    /// Any text the model answers is read without a panic, within the size asked for.
    #[test]
    fn any_answer_parses_or_is_refused_as_empty(answer in "(\\PC|\n|`){0,400}", size in 1usize..200) {
        match parse_summary(&answer, size, counter()) {
            Ok(parsed) => prop_assert!(switchboard_context::TokenCounter::count(counter(), &parsed.text) <= size.max(8)),
            Err(SummaryError::Empty) => prop_assert!(answer.trim().trim_matches('`').trim().is_empty() || answer.trim().starts_with("```")),
        }
    }
}

#[test]
fn an_identifier_only_the_summarised_part_mentions_is_not_demanded() {
    let dropped = vec![
        Named::Id(123_456_789_012_345_678),
        Named::User("quinn".into()),
    ];
    let (request, plan) = request(&dropped, &[1]);
    let job = prepared(&request, &plan);
    let must = job.must_keep(0, None);
    assert!(must.contains(&Ident::User("quinn".into())));
    assert!(
        !must.contains(&Ident::Id(123_456_789_012_345_678)),
        "{must:?}"
    );
}

#[test]
fn stale_and_empty_plans_are_refused() {
    let (mut request, plan) = request(&[Named::Id(123_456_789_012_345_678)], &[0]);
    let stale = CompactionPlan {
        entries: vec![99],
        dropped: 1,
        tokens: 0,
    };
    let settings = CompactionSettings::default();
    assert_eq!(
        compact::prepare(&request, &stale, &Budget::default(), &settings, counter()).err(),
        Some(CompactError::StalePlan { index: 99 })
    );
    // The trigger (last entry) may never be summarised.
    let trigger = CompactionPlan {
        entries: vec![request.entries.len() - 1],
        dropped: 1,
        tokens: 0,
    };
    assert!(matches!(
        compact::apply(&mut request, &trigger, job_summary()),
        Err(CompactError::StalePlan { .. })
    ));
    let empty = CompactionPlan {
        entries: Vec::new(),
        dropped: 0,
        tokens: 0,
    };
    assert_eq!(
        compact::prepare(&request, &empty, &Budget::default(), &settings, counter()).err(),
        Some(CompactError::EmptyPlan)
    );
    let tiny = Budget {
        context_tokens: 3_000,
        answer_tokens: 500,
        ..Budget::default()
    };
    assert!(matches!(
        compact::prepare(&request, &plan, &tiny, &settings, counter()),
        Err(CompactError::NoRoom { .. })
    ));
}

fn job_summary() -> switchboard_context::Summary {
    switchboard_context::Summary {
        text: "s".into(),
        trusted: true,
        covers_through: None,
    }
}

#[test]
fn applying_a_summary_replaces_the_summarised_entries_and_covers_the_newest() {
    let (mut request, plan) = request(
        &[
            Named::Id(123_456_789_012_345_678),
            Named::User("quinn".into()),
        ],
        &[0],
    );
    let job = prepared(&request, &plan);
    let summary = job.finish("## Facts\n- 123456789012345678".into());
    assert_eq!(summary.covers_through, Some(Snowflake(11)));
    assert!(summary.trusted);
    let before = request.entries.len();
    compact::apply(&mut request, &plan, summary.clone()).expect("applied");
    assert_eq!(request.entries.len(), before - 2);
    assert_eq!(request.summary, Some(summary));
    let fitted = fit(&request, &Budget::default(), counter()).expect("fits");
    assert!(fitted.messages()[0]["content"]
        .as_str()
        .expect("summary")
        .contains("123456789012345678"));
}
