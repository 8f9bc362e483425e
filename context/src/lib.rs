//! The built-in agent's context, kept a measured, bounded thing: what a request to the model
//! may carry and what gives way when it is too much. Pure: no store, no call engine, no
//! network; the agent's runner calls it each round.
//!
//! - [`tokens`]: counting with the real OpenAI tokenizers ([`Tiktoken`], o200k_base or
//!   cl100k_base by model, vocabularies compiled in) behind [`TokenCounter`], through a
//!   process-wide [`Memo`]; a calibrated [`Estimate`] measured against them.
//! - [`request`]: the request model ([`Request`]: system [`Block`]s, [`Tools`], a
//!   [`Summary`], [`Entry`]s — transcript [`Message`]s with author and trust, tool
//!   [`ToolRound`]s with name, arguments, timing and results) and how a chat request is counted
//!   ([`count_chat`]).
//! - [`mod@fit`]: the budget fitter — pruning (phase 1), then dropping with a
//!   [`CompactionPlan`] (phase 2), or a typed [`FitError`].
//! - [`compact`]: the compaction requests, the summary's parser, the identifier guard, the
//!   retry and the fallback, and [`compact::apply`].
//! - [`instructions`]: `AGENTS.md`, `CLAUDE.md`, `.switchboard/instructions.md` discovery.
//! - [`prompts`]: provider prompts chosen by model-name glob.
//! - [`batch`]: a burst of messages as one turn.
//! - [`events`]: the `context.pruned` / `context.compacted` payloads.
//!
//! # How the runner uses this
//!
//! At startup (and on reload): `let counter = Memo::new(Tiktoken::for_model(&agent.model))`
//! — building the vocabulary takes a few hundred milliseconds once, so do it there, not in a
//! run; keep one `Memo` for the process (bounded: two generations of 65,536 counts).
//! `ProviderPrompts::new(agent.prompts)` (a bad glob is a config error naming its key).
//!
//! Each run:
//! 1. Collect the trigger(s): when runs were busy, [`batch::batch`] the pending triggers
//!    (`agent.batch_max`); the answered-trigger record covers every `answered` message; the
//!    `rest` start their own runs, in order.
//! 2. Build the [`Request`]:
//!    - `system`: [`Block::System`] with `ProviderPrompts::select(model)` (else
//!      `agent.system_prompt`), [`Block::Channel`] with `[sessions.X] system_prompt`, one
//!      [`Block::Instructions`] per file of
//!      [`instructions::discover`]`(workspace.root, session_dir, agent.instructions_max_chars)`
//!      (log each `skipped` with its reason), and, when [`Request::any_untrusted`] or the
//!      batch's `any_untrusted`, a [`Block::Note`] saying what the untrusted mark means;
//!    - `tools`: [`Tools::new`] from the run's scope (`core.tools_for(caller)`, one
//!      [`ToolSchema`] per callable: the function name, description and input schema
//!      `openai.rs` sends today);
//!    - `summary`: the session's stored summary, if any;
//!    - `entries`: the session's messages after the summary's `covers_through`, at most
//!      `agent.context_messages`, oldest first, as [`Message::new`] (the bot's own as
//!      [`Speaker::Bot`], others as [`Speaker::Person`] with `trusted` decided by user id),
//!      leaving out those the batch answers; then the batch's `turn` (or the trigger as a
//!      [`Message::trigger`]).
//! 3. Each round of the tool loop:
//!    - `let fitted = fit(&request, &budget, &counter)?` — a [`FitError`] fails the run with
//!      its message (it says which part is too big, by how much, and what to change); the
//!      request is not sent;
//!    - publish [`events::Pruned::from_report`] when it is `Some` ([`events::PRUNED`]);
//!    - if `fitted.compaction` is `Some(plan)` and no compaction ran yet this round:
//!      `let job = compact::prepare(&request, &plan, &budget, &settings, &counter)?`,
//!      `let outcome = job.run(&counter, |req| model_call(req.messages, req.max_tokens)).await`;
//!      on success store `outcome.summary` for the session (the console shows it), then
//!      [`compact::apply`]`(&mut request, &plan, outcome.summary)`, fit again, and publish
//!      [`events::Compacted`] ([`events::COMPACTED`]) with the fits before and after. On a
//!      model error, log it and send the first fit (it already fits: the dropped part is
//!      only missing its summary). Run at most one compaction per round;
//!    - send `fitted.messages()` and `fitted.tools()` (the last round, which offers no tools,
//!      may fit with `request.tools` emptied to get the schemas' room back);
//!    - append the model's calls and their results as one [`ToolRound`] ([`ToolCall`] with the
//!      function name, the callable's id, the arguments, when it started, how long it took,
//!      the result text) to `request.entries`.
//!
//! The budget is [`Budget`]: `agent.context_tokens` (a channel's `context_tokens`
//! overriding), `agent.answer_tokens`, `agent.context_messages` (the fit also enforces it:
//! older messages are not read, not summarised), `agent.protected_tools`.
//!
//! A cold fit tokenizes what the memo has not seen (milliseconds for a long session, see
//! below): call `fit` and `compact::prepare` where blocking a few milliseconds is fine, or on
//! `spawn_blocking`; better, count messages into the memo as they are stored, off the run's
//! path, rendered exactly as the run will render them (the agent's warmer does). The compaction's own requests fit the same `context_tokens −
//! answer_tokens` and ask for at most `summary_tokens` (2,000) back.
//!
//! # Decisions
//!
//! - **Counter**: the runner counts with the tokenizer through the [`Memo`], not with the
//!   estimate. The estimate's error on the test corpus is within 18% for each kind of text
//!   but −50% on text it was not fitted to (random letters, base64), and it is no faster than
//!   the warm memo; the tokenizer is exact.
//! - **Tokenizer**: `bpe-openai`, not `tiktoken-rs`: the same counts (pinned by the tests
//!   against `tiktoken-rs` on the corpus and on arbitrary Unicode), 1.5–2.5× faster (its
//!   pre-split is a linear `regex-automata` search, not a backtracking VM), and no backtrack
//!   limit to hit, so a whole text is counted at once and the count is exact (byte chunks
//!   counted minified JSON a token high). Measured (`BENCHMARKS.md`): a 300-message session's
//!   prompt (18k tokens) builds in about 0.4–0.6 ms warm — every round and run after the
//!   first — and 2.3–3.7 ms with nothing counted before, over the 2 ms target: tokenizing
//!   costs about 100 ns per token (the pre-split and the merge about half each). So the
//!   agent counts off the run's path: its warmer (`agent/src/warm.rs`) counts each message
//!   into the same [`Memo`] when it is stored (and the recent sessions' messages at start),
//!   rendered as the transcript renders it, and the first prompt of a session only tokenizes
//!   its system message, tool schemas and whatever the warmer dropped. [`Memo::stats`] shows
//!   the hits and misses.
//! - **Model names** tiktoken does not know (Claude, Llama, Mistral, local models) count with
//!   o200k_base: their own tokenizers are not available offline. Counts for them are an
//!   approximation; the budget (32k by default) is far below their windows.
//! - **A turn** is an [`Entry`]: a transcript message, or one tool round (the assistant's
//!   calls with their results). The two most recent entries are kept whole; the messages this
//!   run answers are never dropped. So in a 12-round tool loop the last two rounds' results
//!   stay whole while older ones are pruned.
//! - **Pruning order**: oldest results first, only as many as needed, decided afresh each
//!   round: after a compaction made room, results pruned before may be sent whole again.
//! - **Protected tools** (`protected_tools`) are never pruned; their round may still be
//!   dropped and summarised like any older entry once nothing else can give way, or one big
//!   protected result would make every later round unfittable.
//! - **Compaction size**: a compaction summarises the dropped part and, beyond it, the oldest
//!   kept entries until the verbatim part takes at most `compact_keep_percent` (50%) of the
//!   room, so the next rounds do not compact again at once.
//! - **The summary** is sent as a user message right after the system message, never in the
//!   system message: it summarises what people said and has no more authority than they
//!   had; when anything it covers was untrusted, every line of it carries the mark.
//! - **Chunked compaction**: a part bigger than one request is summarised chunk by chunk,
//!   each request carrying the summary so far (a rolling summary); at most `max_chunks` (4)
//!   chunks, the oldest beyond that left to the store and search. Each chunk is guarded:
//!   what it or the summary before it names and later turns refer to must survive.
//! - **Trust of a summary** follows the messages it covers; tool output does not make it
//!   untrusted (most rounds read messages) but the compaction prompt says tool output is
//!   data, never instructions.
//! - **Untrusted marks** follow the agent's contract (`(untrusted)` at the start of every
//!   line, authors with their ids); [`trust`] is this crate's copy of the agent's quoting,
//!   since the crate depends on no engine: the wiring should make one of the two call the
//!   other.
//! - **Instruction cap**: `instructions_max_chars` caps all files together; files longer than
//!   a fair share are cut to head and tail, shorter ones stay whole.
//! - **Globs**: case-insensitive, `*` crosses `/`.

pub mod batch;
pub mod compact;
pub mod events;
pub mod fit;
pub mod ids;
pub mod instructions;
pub mod prompts;
pub mod request;
pub mod schema;
pub mod tokens;
pub mod trust;

pub use fit::{fit, Budget, CompactionPlan, FitError, FitReport, Fitted, Part};
pub use request::{
    count_chat, Block, Entry, Message, Request, Speaker, Summary, ToolCall, ToolRound, Tools,
};
pub use schema::ToolSchema;
pub use tokens::{Encoding, Estimate, Memo, MemoStats, Tiktoken, TokenCounter};
