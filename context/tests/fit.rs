//! The budget fitter's promises, over generated requests and budgets: a fitted request never
//! carries more than `context_tokens − answer_tokens` (as an independent count of what is sent
//! says), pruning comes before any drop or compaction, protected tools and the two most recent
//! turns are never cut, and what cannot fit fails with the part and the overrun.

mod common;

use common::{counter, Rng};
use proptest::prelude::*;
use protocol::Snowflake;
use switchboard_context::fit::RECENT_TURNS;
use switchboard_context::{
    count_chat, fit, Block, Budget, Entry, FitError, Message, Part, Request, Speaker, Summary,
    ToolCall, ToolRound, Tools,
};

const TOOLS: [&str; 4] = [
    "surface.messages.list",
    "surface.messages.search",
    "surface.help",
    "workflow.get",
];

/// One entry's shape; texts are generated from a seed (cheap for long ones).
#[derive(Debug, Clone)]
enum Shape {
    Message {
        seed: u64,
        chars: usize,
        who: usize,
        trigger: bool,
    },
    Round {
        seed: u64,
        calls: Vec<(usize, usize)>,
    },
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        3 => (any::<u64>(), 0usize..1500, 0usize..8, prop::bool::weighted(0.05)).prop_map(|(seed, chars, who, trigger)| Shape::Message { seed, chars, who, trigger }),
        2 => (any::<u64>(), prop::collection::vec((0usize..TOOLS.len(), 0usize..12_000), 1..4)).prop_map(|(seed, calls)| Shape::Round { seed, calls }),
    ]
}

fn build(shapes: &[Shape], system_chars: usize, tools: usize, summary_chars: usize) -> Request {
    let mut rng = Rng::new(7);
    let entries = shapes
        .iter()
        .enumerate()
        .map(|(i, shape)| match shape {
            Shape::Message {
                seed,
                chars,
                who,
                trigger,
            } => {
                let mut rng = Rng::new(*seed);
                let speaker = match who {
                    6 | 7 => Speaker::Bot,
                    n => {
                        let (id, name, trusted) = common::PEOPLE[*n];
                        Speaker::Person {
                            id: Snowflake(id),
                            name: name.into(),
                            trusted,
                        }
                    }
                };
                let message = Message::new(
                    speaker,
                    Some(common::message_id(i)),
                    "t",
                    common::words(&mut rng, *chars),
                );
                Entry::Message(if *trigger { message.trigger() } else { message })
            }
            Shape::Round { seed, calls } => {
                let mut rng = Rng::new(*seed);
                Entry::Round(ToolRound {
                    text: String::new(),
                    calls: calls
                        .iter()
                        .enumerate()
                        .map(|(c, &(tool, chars))| ToolCall {
                            id: format!("call_{i}_{c}"),
                            name: TOOLS[tool].replace('.', "__"),
                            tool: TOOLS[tool].to_owned(),
                            arguments: "{\"limit\":50}".into(),
                            started: Some("2026-11-26T06:00:00Z".into()),
                            duration_ms: Some(12),
                            result: if chars == 0 {
                                String::new()
                            } else {
                                common::tool_result(&mut rng, chars)
                            },
                        })
                        .collect(),
                })
            }
        })
        .collect();
    Request {
        system: vec![Block::System(common::words(&mut rng, system_chars))],
        tools: Tools::new(common::tool_schemas().into_iter().take(tools).collect()),
        summary: (summary_chars > 0).then(|| Summary {
            text: common::words(&mut rng, summary_chars),
            trusted: summary_chars.is_multiple_of(2),
            covers_through: None,
        }),
        entries,
    }
}

fn budget() -> impl Strategy<Value = Budget> {
    (
        1_000usize..40_000,
        0usize..4_000,
        1usize..400,
        prop::collection::vec(0usize..TOOLS.len(), 0..2),
    )
        .prop_map(
            |(context_tokens, answer_tokens, context_messages, protected)| Budget {
                context_tokens,
                answer_tokens: answer_tokens.min(context_tokens - 1),
                context_messages,
                protected_tools: protected.into_iter().map(|t| TOOLS[t].to_owned()).collect(),
                compact_keep_percent: 50,
            },
        )
}

/// Which entries the budget reads, and which of them are the two most recent.
fn read_and_recent(request: &Request, budget: &Budget) -> (Vec<bool>, Vec<bool>) {
    let n = request.entries.len();
    let mut read = vec![true; n];
    let mut seen = 0;
    for i in (0..n).rev() {
        if let Entry::Message(m) = &request.entries[i] {
            if !m.is_trigger() {
                seen += 1;
                read[i] = seen <= budget.context_messages;
            }
        }
    }
    let mut recent = vec![false; n];
    for i in (0..n).rev().filter(|&i| read[i]).take(RECENT_TURNS) {
        recent[i] = true;
    }
    (read, recent)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Every fitted request, counted again from the messages and tools it sends, carries at
    /// most `context_tokens − answer_tokens`; every refusal names a real overrun.
    #[test]
    fn a_fitted_request_fits_or_the_error_says_by_how_much(
        shapes in prop::collection::vec(shape(), 0..40),
        system_chars in 0usize..6_000,
        tools in 0usize..24,
        summary_chars in prop_oneof![Just(0usize), 1usize..4_000],
        budget in budget(),
    ) {
        let request = build(&shapes, system_chars, tools, summary_chars);
        match fit(&request, &budget, counter()) {
            Ok(fitted) => {
                let sent = count_chat(counter(), &fitted.messages(), &fitted.tools());
                prop_assert_eq!(sent, fitted.tokens, "the fitter's sum and an independent count agree");
                prop_assert!(fitted.tokens <= budget.limit(), "{} > {}", fitted.tokens, budget.limit());
                prop_assert_eq!(fitted.report.after_tokens, fitted.tokens);
            }
            Err(FitError::TooBig { needed, limit, over_by, part, part_tokens, parts }) => {
                prop_assert_eq!(limit, budget.limit());
                prop_assert!(needed > limit);
                prop_assert_eq!(over_by, needed - limit);
                prop_assert_eq!(parts.iter().map(|(_, t)| t).sum::<usize>(), needed);
                prop_assert!(parts.iter().all(|(_, t)| *t <= part_tokens) && parts.contains(&(part, part_tokens)));
                // Independently: the uncuttable parts alone, sent whole, are over the limit.
                let (read, recent) = read_and_recent(&request, &budget);
                let mut minimal = request.clone();
                minimal.entries = request.entries.iter().enumerate()
                    .filter(|(i, e)| read[*i] && (recent[*i] || e.is_trigger()))
                    .map(|(_, e)| e.clone())
                    .collect();
                let roomy = Budget { context_tokens: usize::MAX / 2, answer_tokens: 0, ..budget.clone() };
                let whole = fit(&minimal, &roomy, counter()).expect("fits a huge budget");
                prop_assert_eq!(whole.tokens, needed);
            }
            Err(other) => prop_assert!(false, "unexpected {other}"),
        }
    }

    /// Nothing is dropped (and no compaction asked for) while a prunable result is left;
    /// protected tools' results and the two most recent turns are never cut; triggers are kept.
    #[test]
    fn pruning_comes_first_and_spares_protected_tools_and_recent_turns(
        shapes in prop::collection::vec(shape(), 1..40),
        budget in budget(),
    ) {
        let request = build(&shapes, 200, 5, 0);
        let Ok(fitted) = fit(&request, &budget, counter()) else { return Ok(()) };
        let (read, recent) = read_and_recent(&request, &budget);
        let dropped_any = fitted.report.dropped_entries > 0;
        prop_assert_eq!(dropped_any, fitted.compaction.is_some());
        for (i, entry) in request.entries.iter().enumerate() {
            if !read[i] {
                prop_assert!(!fitted.keeps(i));
                continue;
            }
            if recent[i] || entry.is_trigger() {
                prop_assert!(fitted.keeps(i), "recent turn or trigger {i} dropped");
            }
            let Entry::Round(round) = entry else { continue };
            for (c, call) in round.calls.iter().enumerate() {
                let protected = budget.protected_tools.contains(&call.tool);
                if protected || recent[i] {
                    prop_assert!(!fitted.prunes(i, c), "entry {i} call {c} pruned (protected {protected})");
                } else if dropped_any && fitted.keeps(i) {
                    let saves = counter_count(&call.pruned_result()) < counter_count(&call.result);
                    prop_assert!(!saves || fitted.prunes(i, c), "entry {i} call {c} left whole while entries were dropped");
                }
            }
        }
        // Dropped entries are the oldest cuttable ones.
        if let Some(plan) = &fitted.compaction {
            let cuttable: Vec<usize> = (0..request.entries.len())
                .filter(|&i| read[i] && !recent[i] && !request.entries[i].is_trigger())
                .collect();
            prop_assert_eq!(&plan.entries[..plan.dropped], &cuttable[..plan.dropped]);
            prop_assert!(plan.entries.iter().all(|i| cuttable.contains(i)));
        }
    }

    /// A request that fits whole is sent whole.
    #[test]
    fn a_request_that_fits_is_not_cut(shapes in prop::collection::vec(shape(), 0..12)) {
        let request = build(&shapes, 100, 3, 0);
        let roomy = Budget { context_tokens: 10_000_000, context_messages: 1_000, ..Budget::default() };
        let fitted = fit(&request, &roomy, counter()).expect("fits");
        prop_assert_eq!(fitted.report.pruned_results, 0);
        prop_assert_eq!(fitted.report.dropped_entries, 0);
        prop_assert_eq!(fitted.report.before_tokens, fitted.tokens);
    }
}

fn counter_count(text: &str) -> usize {
    switchboard_context::TokenCounter::count(counter(), text)
}

#[test]
fn tool_schemas_too_big_for_the_budget_are_named() {
    let request = build(&[], 10, 23, 0);
    let budget = Budget {
        context_tokens: 2_500,
        answer_tokens: 500,
        ..Budget::default()
    };
    let error = fit(&request, &budget, counter()).expect_err("23 tools take over 2,000 tokens");
    let FitError::TooBig { part, over_by, .. } = &error else {
        panic!("{error}")
    };
    assert_eq!(*part, Part::ToolSchemas);
    assert!(*over_by > 0);
    let message = error.to_string();
    assert!(
        message.contains("the tool schemas") && message.contains("tool scope"),
        "{message}"
    );
}

#[test]
fn a_huge_result_in_the_last_turn_is_refused_not_sent() {
    let mut rng = Rng::new(3);
    let mut request = common::channel_request(&mut rng, 20);
    request
        .entries
        .push(common::round(&mut rng, 1, "surface.messages.list", 200_000));
    let error = fit(&request, &Budget::default(), counter()).expect_err("too big");
    assert!(
        matches!(
            error,
            FitError::TooBig {
                part: Part::RecentTurns,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn an_answer_reserve_as_big_as_the_context_is_refused() {
    let request = build(&[], 10, 0, 0);
    let budget = Budget {
        context_tokens: 4_000,
        answer_tokens: 4_000,
        ..Budget::default()
    };
    assert_eq!(
        fit(&request, &budget, counter())
            .expect_err("no room")
            .to_string(),
        "agent.answer_tokens (4000) must be less than context_tokens (4000)"
    );
}

#[test]
fn context_messages_bounds_what_is_read() {
    let mut rng = Rng::new(5);
    let request = common::channel_request(&mut rng, 50);
    let budget = Budget {
        context_messages: 10,
        ..Budget::default()
    };
    let fitted = fit(&request, &budget, counter()).expect("fits");
    assert_eq!(fitted.report.unread_messages, 40);
    assert_eq!(
        fitted.messages().len(),
        1 + 10 + 1,
        "system, ten messages, the trigger"
    );
    assert!(
        fitted.compaction.is_none(),
        "unread messages are not summarised"
    );
}
