//! Properties of the agent records: note scopes read back whatever the id and refuse any other
//! text without panicking; a usage report loses and invents nothing.

use proptest::prelude::*;
use switchboard_records::usage::fold_usage;
use switchboard_records::{
    NoteScope, Snowflake, UsageBy, UsageCharge, UsageQuery, UsageRow, UsageTotals,
};

fn row() -> impl Strategy<Value = UsageRow> {
    (
        0u8..4,
        prop::option::of(0u64..5),
        prop::option::of(0u64..3),
        any::<bool>(),
        0u64..1_000_000,
        0u64..1_000_000,
        0u64..1_000,
        0u64..(10 * 86_400_000),
    )
        .prop_map(
            |(agent, user, session, estimated, tokens_in, tokens_out, usd, at_ms)| UsageRow {
                charge: UsageCharge {
                    run_id: "r".into(),
                    agent: format!("agent-{agent}"),
                    user: user.map(|u| format!("user-{u}")),
                    session: session.map(|s| format!("session-{s}")),
                    guild: None,
                    model: "m".into(),
                },
                tokens_in,
                tokens_out,
                micro_usd: usd,
                estimated,
                at_ms,
            },
        )
}

fn by() -> impl Strategy<Value = UsageBy> {
    prop_oneof![
        Just(UsageBy::User),
        Just(UsageBy::Session),
        Just(UsageBy::Guild),
        Just(UsageBy::Agent),
        Just(UsageBy::Day),
    ]
}

proptest! {
    #[test]
    fn a_note_scope_reads_back_for_any_id(id in 10_000_000_000_000_000u64..=u64::MAX) {
        for scope in [NoteScope::Session(Snowflake(id)), NoteScope::User(Snowflake(id))] {
            prop_assert_eq!(scope.to_string().parse::<NoteScope>(), Ok(scope));
        }
    }

    #[test]
    fn any_text_parses_to_a_scope_or_a_refusal_that_says_what_to_write(
        text in "(global|session:|user:|channel:)?[0-9a-z:]{0,24}|.{0,80}",
    ) {
        match text.parse::<NoteScope>() {
            Ok(scope) => {
                let spelled = scope.to_string();
                prop_assert_eq!(spelled.parse::<NoteScope>(), Ok(scope));
            }
            Err(refusal) => prop_assert!(refusal.to_string().contains("session:<id>")),
        }
    }

    #[test]
    fn a_report_sums_every_row_in_its_window_once(
        rows in prop::collection::vec(row(), 0..60),
        by in by(),
        since in 0u64..(5 * 86_400_000),
        span in 0u64..(10 * 86_400_000),
    ) {
        let query = UsageQuery { by, since_ms: since, until_ms: since + span, limit: usize::MAX };
        let groups = fold_usage(&rows, &query);
        let mut want = UsageTotals::default();
        rows.iter()
            .filter(|r| r.at_ms >= query.since_ms && r.at_ms < query.until_ms)
            .for_each(|r| want.add(r));
        let mut got = UsageTotals::default();
        for group in &groups {
            got.calls += group.totals.calls;
            got.tokens_in += group.totals.tokens_in;
            got.tokens_out += group.totals.tokens_out;
            got.micro_usd += group.totals.micro_usd;
            got.estimated |= group.totals.estimated;
        }
        prop_assert_eq!(got, want);
        prop_assert!(groups.windows(2).all(|w| w[0].totals.tokens() >= w[1].totals.tokens()));
        let keys: std::collections::BTreeSet<_> = groups.iter().map(|g| &g.key).collect();
        prop_assert_eq!(keys.len(), groups.len(), "one group per key");
        let cut = fold_usage(&rows, &UsageQuery { limit: 2, ..query });
        prop_assert_eq!(&cut[..], &groups[..groups.len().min(2)]);
    }
}
