//! The scenario, without a model server: a 300-message channel and a 12-round tool
//! loop with large tool results, driven the way the runner will drive it (fit every round;
//! compact when the fit asks, through a scripted model whose summaries lose an identifier a
//! later turn still refers to). Every request — the runs' and the compaction's — fits 32k.

mod common;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use common::{counter, message_id, Rng};
use switchboard_context::compact::{self, CompactionRequest, CompactionSettings};
use switchboard_context::events::{Compacted, Pruned};
use switchboard_context::request::SUMMARY_HEADER;
use switchboard_context::{count_chat, fit, Budget, Entry, TokenCounter};

/// Runs a future whose every await is ready (the scripted model answers at once).
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the scripted model never waits"),
    }
}

/// A compaction model that writes a structured summary keeping every identifier it was asked
/// to keep — except `lose`, which it always leaves out (a bad summary, planned).
fn scripted_model(
    lose: String,
) -> impl FnMut(CompactionRequest) -> std::future::Ready<Result<String, ()>> {
    move |request: CompactionRequest| {
        let user = request.messages[1]["content"]
            .as_str()
            .expect("user")
            .to_owned();
        let listed = user
            .split_once("keep each of them verbatim in the summary: ")
            .map(|(_, rest)| rest.lines().next().unwrap_or("").to_owned())
            .unwrap_or_default();
        let kept: Vec<&str> = listed
            .split(", ")
            .filter(|i| !i.is_empty() && *i != lose)
            .collect();
        std::future::ready(Ok(format!(
            "## Decisions\n- roll the idle timeout to 60s in prod\n## Open questions\n- who reviews PR 412\n## Facts\n- identifiers: {}\n## Who asked what\n- Stanley (user 1000000000000000101) asked about the deploy",
            kept.join(", ")
        )))
    }
}

#[test]
fn a_300_message_channel_and_a_12_round_tool_loop_fit_32k() {
    let mut rng = Rng::new(42);
    let mut request = common::channel_request(&mut rng, 300);
    // The trigger refers to an early message: whatever summarises it must keep its id.
    let planted = message_id(5);
    if let Some(Entry::Message(trigger)) = request.entries.last_mut() {
        *trigger = switchboard_context::Message::new(
            trigger.speaker().clone(),
            trigger.id(),
            trigger.timestamp(),
            format!("{} and message {planted}", trigger.text()),
        )
        .trigger();
    }
    let budget = Budget {
        protected_tools: vec!["surface.help".to_owned()],
        ..Budget::default()
    };
    let settings = CompactionSettings::default();
    let limit = budget.limit();
    assert_eq!(limit, 28_000);

    let mut first_pruned = None;
    let mut first_compacted = None;
    let mut compactions = 0;
    let mut model = scripted_model(planted.to_string());
    for round in 0..=12usize {
        if round > 0 {
            let tool = if round == 4 {
                "surface.help"
            } else {
                "surface.messages.list"
            };
            request
                .entries
                .push(common::round(&mut rng, round, tool, 13_000));
        }
        let fitted = fit(&request, &budget, counter()).expect("fits");
        assert!(fitted.tokens <= limit, "round {round}: {}", fitted.tokens);
        assert_eq!(
            count_chat(counter(), &fitted.messages(), &fitted.tools()),
            fitted.tokens
        );
        let pruned = Pruned::from_report(&fitted.report);
        if fitted.report.pruned_results > 0 && first_pruned.is_none() {
            first_pruned = Some(round);
        }
        let Some(plan) = fitted.compaction.clone() else {
            continue;
        };
        assert!(pruned.is_some_and(|p| p.dropped_entries > 0));
        let before = fitted.report.clone();
        let job =
            compact::prepare(&request, &plan, &budget, &settings, counter()).expect("prepared");
        // The compaction's own requests fit the budget too.
        let mut model_calls = Vec::new();
        let outcome = ready(job.run(counter(), |req: CompactionRequest| {
            assert!(
                req.tokens <= limit,
                "compaction request of {} tokens",
                req.tokens
            );
            assert_eq!(count_chat(counter(), &req.messages, &[]), req.tokens);
            model_calls.push(req.clone());
            model(req)
        }))
        .expect("scripted");
        assert_eq!(
            outcome.retries,
            job.chunks(),
            "every chunk's summary lost the planted id once"
        );
        assert!(outcome
            .kept_by_guard
            .iter()
            .any(|i| i.to_string() == planted.to_string()));
        let retry = model_calls[1].messages[1]["content"]
            .as_str()
            .expect("retry");
        assert!(retry.contains(&format!(
            "left out these identifiers, which later messages still refer to: {planted}"
        )));
        let summarised = job.summarised_entries();
        compact::apply(&mut request, &plan, outcome.summary.clone()).expect("applied");
        let after = fit(&request, &budget, counter()).expect("fits after compaction");
        assert!(after.tokens <= limit);
        assert!(
            after.compaction.is_none(),
            "one compaction makes room for the next rounds"
        );
        let event = Compacted::new(
            &before,
            &after.report,
            &outcome,
            summarised,
            job.skipped_entries(),
        );
        assert!(event.after_tokens < event.before_tokens);
        // The summary starts the next prompt, right after the system message, and keeps the id.
        let messages = after.messages();
        let summary = messages[1]["content"].as_str().expect("summary");
        assert!(summary.starts_with(SUMMARY_HEADER), "{summary}");
        assert!(
            summary.contains(&planted.to_string()),
            "the guard restored {planted}: {summary}"
        );
        // Some summarised messages were untrusted: every line of the summary says so.
        assert!(summary
            .lines()
            .skip(1)
            .all(|l| l.starts_with("(untrusted)")));
        compactions += 1;
        first_compacted.get_or_insert(round);
    }
    let (pruned_at, compacted_at) = (
        first_pruned.expect("pruned"),
        first_compacted.expect("compacted"),
    );
    assert!(
        pruned_at < compacted_at,
        "pruned at round {pruned_at}, compacted at {compacted_at}"
    );
    assert_eq!(compactions, 1);

    // At the end: the protected tool's result is whole, the last two rounds are whole.
    let fitted = fit(&request, &budget, counter()).expect("fits");
    for (i, entry) in request.entries.iter().enumerate() {
        if let Entry::Round(round) = entry {
            if round.calls[0].tool == "surface.help" && fitted.keeps(i) {
                assert!(!fitted.prunes(i, 0));
            }
        }
    }
    let n = request.entries.len();
    for i in [n - 1, n - 2] {
        assert!(fitted.keeps(i) && !fitted.prunes(i, 0));
    }
}

#[test]
fn a_part_bigger_than_a_request_is_summarised_in_chunks_within_the_budget() {
    let mut rng = Rng::new(9);
    let mut request = common::channel_request(&mut rng, 300);
    request.tools = switchboard_context::Tools::default();
    let budget = Budget {
        context_tokens: 9_000,
        answer_tokens: 1_000,
        ..Budget::default()
    };
    let settings = CompactionSettings {
        summary_tokens: 800,
        max_chunks: 3,
    };
    let fitted = fit(&request, &budget, counter()).expect("fits");
    let plan = fitted
        .compaction
        .clone()
        .expect("a 300-message channel does not fit 8k");
    let job = compact::prepare(&request, &plan, &budget, &settings, counter()).expect("prepared");
    assert_eq!(job.chunks(), 3, "capped at max_chunks");
    assert!(
        job.skipped_entries() > 0,
        "the oldest are left to the store"
    );
    assert_eq!(
        job.summarised_entries() + job.skipped_entries(),
        plan.entries.len()
    );
    let mut previous: Option<String> = None;
    for k in 0..job.chunks() {
        let req = job.request(k, previous.as_deref(), counter());
        assert!(req.tokens <= budget.limit(), "chunk {k}: {}", req.tokens);
        assert_eq!(count_chat(counter(), &req.messages, &[]), req.tokens);
        // A long rolling summary (the guard's additions included) still fits.
        previous = Some(format!("## Facts\n{}", common::words(&mut rng, 4_000)));
        let retry = job.retry(
            k,
            previous.as_deref(),
            &job.must_keep(k, previous.as_deref()),
            counter(),
        );
        assert!(
            retry.tokens <= budget.limit(),
            "retry {k}: {}",
            retry.tokens
        );
        let summary = previous.clone().unwrap_or_default();
        let padded = job.keep_missing(k, None, &summary, &job.must_keep(k, None), counter());
        assert!(counter().count(&padded) <= counter().count(&summary) + compact::KEEP_TOKENS);
    }
}
