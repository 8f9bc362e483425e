//! Usage and hard budgets, as pure logic: no store, no clock, no model calls.
//!
//! - [`Usage`]: one model call's prompt and completion tokens, as the model reported them
//!   (`usage.prompt_tokens` / `usage.completion_tokens`) or estimated from text length
//!   ([`Usage::estimate`], four characters a token) and marked so.
//! - Money is whole micro-dollars (`u64`) everywhere. Prices (`price_in_per_mtok`,
//!   `price_out_per_mtok`, dollars per million tokens) and caps are read from the TOML
//!   number's decimal text ([`RawUsd`], [`parse_usd`]), never multiplied as floats; a call's
//!   cost ([`Usage::cost_micros`]) is exact, rounded up to the micro-dollar.
//! - [`Budgets`]: `[budgets.user]`, `[budgets.session]`, `[budgets.guild]`, `[budgets.agent]`,
//!   each with any of `tokens_per_day`, `tokens_per_month`, `usd_per_day`, `usd_per_month`
//!   (applied to each user, each session, …), `budgets.exempt`, and `budgets.tz` (default
//!   UTC): days and months start at local midnight there ([`windows`]; a midnight a DST
//!   change skips starts the day at its first existing time).
//! - [`check`] before a run (refused at or over a cap: the model is not called) and
//!   [`crossed`] before each later model round (stop, say so); a [`Refusal`] names the cap
//!   (the one that resets last when several are reached), and gives the in-chat
//!   [`Refusal::notice`] (a Discord timestamp, no mention) or the plain [`Refusal::message`].
//! - [`report`]: `usage.report`'s fold over usage rows by user, session, guild, agent or day,
//!   answering `{rows: [{user|session|guild|agent|day, promptTokens, completionTokens,
//!   totalTokens, usd, usdMicros, estimated}]}`.
//! - [`RawBudgets`] / [`budgets`] and [`price`]: the config sections, reporting located
//!   [`switchboard_agents::Finding`]s.
//!
//! # How the service wires this
//!
//! - Config: `RawConfig` gains `budgets: Option<RawBudgets>`; the agent tables (`[agent]`,
//!   `[agents.NAME]`) gain `price_in_per_mtok` / `price_out_per_mtok` as
//!   `Option<Spanned<RawUsd>>`, checked with [`price`]. [`Exempt::Principal`] entries are
//!   resolved by the config crate's principal rules at `budgets.exempt[index]`, and
//!   [`Exempt::Token`] names checked against `[[toolserver.tokens]]`.
//! - Store: a `usage` row per model call ([`UsageRecord`]: at, run id, user, session, guild,
//!   agent, tokens, estimated, micro-dollars), written by the runner after each model answer
//!   (the OpenAI runner reads `usage` from the answer, and asks for it when streaming with
//!   `stream_options.include_usage`; a command runner's usage is estimated). The usage
//!   aggregate answers, for a run's keys, the sums in [`Windows::day`] and
//!   [`Windows::month`] ([`Spending`]), indexed by (scope key, at).
//! - Runs: before the model is first called, unless the caller is exempt, the agent computes
//!   [`windows`] of now in `budgets.tz`, asks the store for the [`Spending`] of each of
//!   [`Budgets::capped_scopes`], and calls [`check`]; a refusal posts [`Refusal::notice`] (the
//!   chat API answers 429 with [`Refusal::message`]) and records no run. Before each later
//!   round it calls [`crossed`] with the run's own [`Spent`] so far and stops on `Some`.
//! - `usage.report` (operator): input [`ReportInput`] (`since` parsed as `audit.list` parses
//!   it), answer [`UsageReport`] from [`report`] over the rows since then (or the store's
//!   equivalent SQL, checked against [`report`] in the store's conformance suite);
//!   `switchboard usage` prints the same rows, and the console's daily chart is
//!   `by = "day"`.

#![warn(missing_docs)]

mod budget;
mod config;
mod money;
mod report;
mod usage;

pub use budget::{
    check, crossed, windows, Budgets, Cap, Caps, Decision, Exempt, Period, Refusal, Scope,
    Spending, Spent, Unit, Window, Windows,
};
pub use config::{budgets, RawBudgets, RawCaps, MAX_TOKEN_CAP};
pub use money::{
    format_usd, group_digits, parse_usd, usd_number, MoneyError, RawUsd, MAX_USD, MICROS_PER_USD,
};
pub use report::{report, By, ReportInput, ReportRow, UsageRecord, UsageReport};
pub use usage::{price, Price, Usage, CHARS_PER_TOKEN};
