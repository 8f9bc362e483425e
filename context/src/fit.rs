//! The budget fitter: makes a [`Request`] fit `context_tokens − answer_tokens`, or says
//! exactly why it cannot.
//!
//! Each round, without a model:
//! 1. the parts that are never cut — the system message, the tool schemas, the summary, the
//!    two most recent entries (turns) and the trigger messages — must fit, or the fit fails
//!    with [`FitError::TooBig`] naming the biggest part and how far over it is;
//! 2. if everything read fits, nothing changes;
//! 3. phase 1, pruning: tool results older than the two most recent turns are replaced by
//!    `[output pruned: N chars]`, oldest first, until the request fits; results of
//!    `protected_tools` are never pruned;
//! 4. only when every prunable result is pruned and it still does not fit, older entries are
//!    dropped, oldest first, until it fits, and the fit asks for a compaction (phase 2,
//!    [`CompactionPlan`]) of the dropped part — and a little more, so that the next rounds
//!    do not compact again at once (see [`Budget::compact_keep_percent`]).
//!
//! A fitted request can always be sent as it is: the compaction is the runner's next step
//! when it can afford a model call, not a condition of sending.

use std::collections::HashSet;

use serde::Serialize;
use serde_json::Value;

use crate::request::{
    render_messages, Entry, Request, MESSAGE_OVERHEAD, REPLY_PRIMING, TOOL_CALL_OVERHEAD,
    TOOL_RESULT_OVERHEAD,
};
use crate::tokens::TokenCounter;

/// How many of the most recent entries are always kept whole.
pub const RECENT_TURNS: usize = 2;

/// The budget settings (`[agent]`, a channel's `context_tokens` overriding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// The most any request may carry, the answer's reserve included (`agent.context_tokens`).
    pub context_tokens: usize,
    /// The reserve for the answer (`agent.answer_tokens`).
    pub answer_tokens: usize,
    /// How many transcript messages are read at most (`agent.context_messages`); triggers do
    /// not count against it.
    pub context_messages: usize,
    /// Callables whose results are never pruned (`agent.protected_tools`).
    pub protected_tools: Vec<String>,
    /// After a compaction, the verbatim transcript should take at most this share (percent) of
    /// the room the fixed parts leave, so that compaction is not needed again next round.
    pub compact_keep_percent: u8,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            context_tokens: 32_000,
            answer_tokens: 4_000,
            context_messages: 300,
            protected_tools: Vec::new(),
            compact_keep_percent: 50,
        }
    }
}

impl Budget {
    /// What a request may carry: `context_tokens − answer_tokens`.
    pub fn limit(&self) -> usize {
        self.context_tokens.saturating_sub(self.answer_tokens)
    }
}

/// A part of a request, as a fit error names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// The system message (prompts, instruction files, notes).
    SystemMessage,
    /// The tool schemas.
    ToolSchemas,
    /// The summary of compacted turns.
    Summary,
    /// The two most recent turns, kept whole.
    RecentTurns,
    /// The messages this run answers.
    Triggers,
    /// The chat format's own framing.
    Framing,
}

impl Part {
    fn advice(self) -> &'static str {
        match self {
            Part::SystemMessage => "shorten the system prompt or lower agent.instructions_max_chars, or raise context_tokens",
            Part::ToolSchemas => "narrow the run's tool scope (agent.tool_scope or the channel's) or raise context_tokens",
            Part::Summary => "the stored summary is too long for this budget; raise context_tokens or clear the session's summary",
            Part::RecentTurns => "a result in the last two turns is too big to send; ask for less (a narrower read or a smaller limit) or raise context_tokens",
            Part::Triggers => "the messages to answer are too long for this budget; raise context_tokens or lower agent.batch_max",
            Part::Framing => "raise context_tokens",
        }
    }
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Part::SystemMessage => "the system message",
            Part::ToolSchemas => "the tool schemas",
            Part::Summary => "the summary",
            Part::RecentTurns => "the two most recent turns",
            Part::Triggers => "the messages to answer",
            Part::Framing => "the chat framing",
        })
    }
}

/// Why a request cannot be fitted. It is never sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FitError {
    /// The answer's reserve leaves nothing for the request.
    #[error(
        "agent.answer_tokens ({answer_tokens}) must be less than context_tokens ({context_tokens})"
    )]
    Budget {
        /// `context_tokens`.
        context_tokens: usize,
        /// `answer_tokens`.
        answer_tokens: usize,
    },
    /// What can never be cut is bigger than the budget.
    #[error("the request cannot fit: what cannot be cut takes {needed} tokens, {over_by} over the {limit} a request may carry (context_tokens − answer_tokens); the biggest part is {part} ({part_tokens} tokens): {advice}", advice = part.advice())]
    TooBig {
        /// The biggest part that cannot be cut.
        part: Part,
        /// Its tokens.
        part_tokens: usize,
        /// All parts that cannot be cut, with their tokens.
        parts: Vec<(Part, usize)>,
        /// Their sum.
        needed: usize,
        /// `context_tokens − answer_tokens`.
        limit: usize,
        /// `needed − limit`.
        over_by: usize,
    },
}

/// What the fit did, for the `context.pruned` event and the logs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FitReport {
    /// Tokens of everything read, nothing pruned or dropped.
    pub before_tokens: usize,
    /// Tokens of the fitted request.
    pub after_tokens: usize,
    /// Tool results replaced by the pruned marker (in kept entries).
    pub pruned_results: usize,
    /// Characters those results had.
    pub pruned_chars: usize,
    /// Entries (messages, tool rounds) dropped.
    pub dropped_entries: usize,
    /// Transcript messages beyond `context_messages`, not read.
    pub unread_messages: usize,
}

/// The part of the conversation a compaction should summarise (phase 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionPlan {
    /// Indices into the request's entries, oldest first: the dropped ones and as many older
    /// kept ones as bring the verbatim part down to `compact_keep_percent`.
    pub entries: Vec<usize>,
    /// How many of them the fit had to drop (the first ones).
    pub dropped: usize,
    /// Their tokens in the request, as the fit counted them.
    pub tokens: usize,
}

/// A request cut to its budget: which entries are kept and which results pruned.
#[derive(Debug, Clone)]
pub struct Fitted<'r> {
    request: &'r Request,
    system: String,
    kept: Vec<bool>,
    pruned: HashSet<(usize, usize)>,
    /// Tokens of the fitted request, counted as [`crate::request::count_chat`] counts.
    pub tokens: usize,
    /// What was done.
    pub report: FitReport,
    /// When entries had to be dropped: what to summarise.
    pub compaction: Option<CompactionPlan>,
}

impl Fitted<'_> {
    /// The chat messages to send.
    pub fn messages(&self) -> Vec<Value> {
        render_messages(
            self.request,
            &self.system,
            (0..self.kept.len()).filter(|&i| self.kept[i]),
            |entry, call| self.pruned.contains(&(entry, call)),
        )
    }

    /// The `tools` to send.
    pub fn tools(&self) -> Vec<Value> {
        self.request.tools.to_json()
    }

    /// Whether the entry at `index` is in the request.
    pub fn keeps(&self, index: usize) -> bool {
        self.kept.get(index).copied().unwrap_or(false)
    }

    /// Whether the result of call `call` of entry `entry` is pruned.
    pub fn prunes(&self, entry: usize, call: usize) -> bool {
        self.pruned.contains(&(entry, call))
    }
}

/// Tokens of one entry: whole, and what pruning each prunable result would save.
struct Weighed {
    whole: usize,
    /// (call index, tokens saved, chars) for every result that may be pruned.
    savings: Vec<(usize, usize, usize)>,
}

fn weigh(entry: &Entry, counter: &dyn TokenCounter, protected: &[String]) -> Weighed {
    match entry {
        Entry::Message(m) => Weighed {
            whole: MESSAGE_OVERHEAD + counter.count(m.content()),
            savings: Vec::new(),
        },
        Entry::Round(round) => {
            let mut whole = MESSAGE_OVERHEAD + counter.count(&round.text);
            let mut savings = Vec::new();
            for (i, call) in round.calls.iter().enumerate() {
                let name = counter.count(&call.name);
                let result = counter.count(&call.result);
                whole += TOOL_CALL_OVERHEAD + name + counter.count(&call.arguments);
                whole += TOOL_RESULT_OVERHEAD + name + result;
                if !protected.contains(&call.tool) {
                    let pruned = counter.count(&call.pruned_result());
                    if pruned < result {
                        savings.push((i, result - pruned, call.result.chars().count()));
                    }
                }
            }
            Weighed { whole, savings }
        }
    }
}

/// Fits `request` into `budget`, counting with `counter` (see the module docs).
pub fn fit<'r>(
    request: &'r Request,
    budget: &Budget,
    counter: &dyn TokenCounter,
) -> Result<Fitted<'r>, FitError> {
    if budget.answer_tokens >= budget.context_tokens {
        return Err(FitError::Budget {
            context_tokens: budget.context_tokens,
            answer_tokens: budget.answer_tokens,
        });
    }
    let limit = budget.limit();
    let entries = &request.entries;
    let n = entries.len();

    // What is read: every trigger and round, and the newest `context_messages` others.
    let mut read = vec![true; n];
    let mut unread = 0;
    let mut messages_seen = 0;
    for i in (0..n).rev() {
        if let Entry::Message(m) = &entries[i] {
            if !m.is_trigger() {
                messages_seen += 1;
                if messages_seen > budget.context_messages {
                    read[i] = false;
                    unread += 1;
                }
            }
        }
    }
    // The two most recent entries read, and the triggers: never pruned, never dropped.
    let mut recent = vec![false; n];
    for i in (0..n).rev().filter(|&i| read[i]).take(RECENT_TURNS) {
        recent[i] = true;
    }

    let system = request.system_text();
    let mut parts: Vec<(Part, usize)> = vec![(Part::Framing, REPLY_PRIMING)];
    if !system.is_empty() {
        parts.push((
            Part::SystemMessage,
            MESSAGE_OVERHEAD + counter.count(&system),
        ));
    }
    if !request.tools.is_empty() {
        parts.push((Part::ToolSchemas, request.tools.tokens(counter)));
    }
    if let Some(summary) = &request.summary {
        parts.push((
            Part::Summary,
            MESSAGE_OVERHEAD + counter.count(&summary.render()),
        ));
    }
    let weights: Vec<Option<Weighed>> = (0..n)
        .map(|i| read[i].then(|| weigh(&entries[i], counter, &budget.protected_tools)))
        .collect();
    let weight = |i: usize| weights[i].as_ref().map_or(0, |w| w.whole);
    let (mut recent_tokens, mut trigger_tokens) = (0, 0);
    for i in 0..n {
        if recent[i] {
            recent_tokens += weight(i);
        } else if entries[i].is_trigger() {
            trigger_tokens += weight(i);
        }
    }
    if recent_tokens > 0 {
        parts.push((Part::RecentTurns, recent_tokens));
    }
    if trigger_tokens > 0 {
        parts.push((Part::Triggers, trigger_tokens));
    }
    let needed: usize = parts.iter().map(|(_, t)| t).sum();
    if needed > limit {
        let (part, part_tokens) = parts
            .iter()
            .copied()
            .max_by_key(|(_, t)| *t)
            .unwrap_or((Part::Framing, 0));
        return Err(FitError::TooBig {
            part,
            part_tokens,
            parts,
            needed,
            limit,
            over_by: needed - limit,
        });
    }
    let fixed: usize = parts
        .iter()
        .filter(|(p, _)| !matches!(p, Part::RecentTurns | Part::Triggers))
        .map(|(_, t)| t)
        .sum();

    let before: usize = fixed + (0..n).map(weight).sum::<usize>();
    let mut total = before;
    let cuttable = |i: usize| read[i] && !recent[i] && !entries[i].is_trigger();

    // Phase 1: prune older results, oldest first, until it fits.
    let mut pruned: HashSet<(usize, usize)> = HashSet::new();
    'prune: for i in (0..n).filter(|&i| cuttable(i)) {
        if total <= limit {
            break;
        }
        if let Some(w) = &weights[i] {
            for &(call, saved, _) in &w.savings {
                if total <= limit {
                    break 'prune;
                }
                pruned.insert((i, call));
                total -= saved;
            }
        }
    }
    let pruned_weight = |i: usize| {
        weights[i].as_ref().map_or(0, |w| {
            w.whole
                - w.savings
                    .iter()
                    .filter(|(call, _, _)| pruned.contains(&(i, *call)))
                    .map(|(_, saved, _)| saved)
                    .sum::<usize>()
        })
    };

    // Still too big: drop older entries, oldest first, and ask for a compaction of them.
    let mut kept = read.clone();
    let mut dropped = Vec::new();
    for i in (0..n).filter(|&i| cuttable(i)) {
        if total <= limit {
            break;
        }
        kept[i] = false;
        total -= pruned_weight(i);
        dropped.push(i);
    }

    let compaction = (!dropped.is_empty()).then(|| {
        let mut plan_entries = dropped.clone();
        let mut plan_tokens: usize = dropped.iter().map(|&i| pruned_weight(i)).sum();
        // Summarise more than the minimum: the verbatim part should leave room to grow.
        let room = limit.saturating_sub(fixed + recent_tokens + trigger_tokens);
        let target = room * usize::from(budget.compact_keep_percent.min(100)) / 100;
        let mut verbatim: usize = (0..n)
            .filter(|&i| kept[i] && cuttable(i))
            .map(pruned_weight)
            .sum();
        for i in (0..n).filter(|&i| kept[i] && cuttable(i)) {
            if verbatim <= target {
                break;
            }
            verbatim -= pruned_weight(i);
            plan_tokens += pruned_weight(i);
            plan_entries.push(i);
        }
        plan_entries.sort_unstable();
        CompactionPlan {
            dropped: dropped.len(),
            entries: plan_entries,
            tokens: plan_tokens,
        }
    });

    pruned.retain(|(i, _)| kept[*i]);
    let pruned_chars = pruned
        .iter()
        .filter_map(|&(i, call)| {
            weights[i]
                .as_ref()
                .and_then(|w| w.savings.iter().find(|(c, _, _)| *c == call))
                .map(|(_, _, chars)| *chars)
        })
        .sum();
    Ok(Fitted {
        request,
        system,
        report: FitReport {
            before_tokens: before,
            after_tokens: total,
            pruned_results: pruned.len(),
            pruned_chars,
            dropped_entries: dropped.len(),
            unread_messages: unread,
        },
        kept,
        pruned,
        tokens: total,
        compaction,
    })
}
