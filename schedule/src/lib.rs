//! Scheduled prompts that prove delivery, as pure logic: no store, no clock, no runs.
//!
//! - [`Spec`]: exactly one of `at` (RFC 3339), `every` (`"2s"`, `"15m"`, `"1h30m"`: whole
//!   seconds, 1 s to 366 days, parsed by `humantime`) or `cron` (five fields, in the IANA zone
//!   `tz`, default UTC, parsed and walked by `croner`: a daily job whose time a spring-forward
//!   skips runs right after the gap, and once only in a repeated autumn hour, as Vixie cron
//!   does). [`Spec::next_after`] is the next firing strictly after a time;
//!   [`Spec::latest_at_or_before`] the last one at or before. Refusals ([`SpecError`]) name the
//!   field (the cron field too) and say what to write; a bad `tz` suggests the zone it
//!   resembles.
//! - [`due`]: at a tick, from the schedule's cursor (the last firing handled), now and
//!   `scheduler.missed_max_age_s`, which firing runs (at most one, the latest, when young
//!   enough) and which are recorded as skipped (one record with a count: arithmetic for
//!   `every`, capped for `cron`, so a year down under `every = "1s"` is decided at once).
//! - [`judge`]: a firing's run is judged by what it posted — message ids, or the agent's
//!   whole answer `NO_REPLY` on purpose — and a run that posted nothing otherwise is a failed
//!   delivery. [`after_firing`]: three failed firings in a row pause the schedule, with
//!   [`pause_notice`] to post in its session; [`resume`] clears it.
//! - [`CreateInput`], [`ScheduleRef`], [`ListInput`], [`ScheduleView`]: the callables' inputs
//!   and answers (JSON Schema via schemars); [`ScheduleId`] (`sch_…` or `config:NAME`).
//! - [`RawSchedule`] / [`schedules`] and [`RawScheduler`] / [`scheduler`]: the `[[schedules]]`
//!   entries and the `[scheduler]` table (TOML cannot have `[[schedules]]` and a
//!   `schedules.missed_max_age_s` key both, so the settings are `scheduler.*`), reporting
//!   located [`switchboard_agents::Finding`]s.
//!
//! # How the service wires this
//!
//! Store rows (through the schedules aggregate of the store traits):
//! - `schedules`: id, session id, agent, prompt, the [`When`] words, the `every` anchor,
//!   status and failures in a row ([`Health`]), the cursor, `next_at`, created by / at, and a
//!   claim (`claimed_by`, `lease_until`) so one node fires a firing. A `[[schedules]]` entry
//!   is upserted at start and on reload under its `config:NAME` id (an entry removed from the
//!   config is marked cancelled); `schedule.create` inserts with [`ScheduleId::from_random`].
//!   `scheduler.max_schedules` and `max_per_session` bound the rows.
//! - `schedule_receipts`: schedule id, firing time, recorded at, run id, the [`Outcome`] as
//!   JSON; the newest `scheduler.receipts_kept` per schedule are kept.
//!
//! The scheduler loop (one task per node): sleep until the earliest `next_at` (or a change
//! feed wake-up, at most a minute), then per schedule whose `next_at` has come: call [`due`]
//! with its cursor, and in one store transaction claim it, move the cursor to
//! [`Due::cursor`], write a `skipped` receipt for [`Due::skipped`] and set `next_at` to
//! [`Due::next`]. A firing is therefore handled once even across restarts. Then, if
//! [`Due::run`], start a run (depth 0, the schedule's agent or the session's, under the
//! session's scope) whose trigger is the prompt, collect what it posted into a [`RunReport`],
//! write the receipt from [`judge`] and the health from [`after_firing`]; when
//! [`Step::paused_now`], post [`pause_notice`] in the session through `Core::call`.
//!
//! Callables: `schedule.create` (input [`CreateInput`], `check` with the configured agents,
//! then the session through the pipeline's resolve and allowlist; answers [`ScheduleView`]),
//! `schedule.list` ([`ListInput`]), `schedule.get`, `schedule.cancel` and `schedule.resume`
//! ([`ScheduleRef`], the id as main field so `tools schedule.get ID` works; a `config:` id
//! cannot be cancelled, only removed from the config). A refusal's `code()` becomes the
//! protocol's error code.

#![warn(missing_docs)]

mod api;
mod config;
mod due;
mod receipt;
mod spec;

pub use api::{
    check_prompt, CreateError, CreateInput, ListInput, NewSchedule, PromptError, ScheduleId,
    ScheduleIdError, ScheduleRef, ScheduleView, CONFIG_ID_PREFIX, MAX_ID_CHARS, MAX_PROMPT_CHARS,
};
pub use config::{
    scheduler, schedules, ConfigSchedule, RawSchedule, RawScheduler, SchedulerSettings,
};
pub use due::{due, Due, Skipped, MAX_COUNTED_CRON_FIRINGS};
pub use receipt::{
    after_firing, judge, pause_notice, resume, FailReason, Health, Outcome, Receipt, RunReport,
    Status, Step, NO_REPLY, PAUSE_AFTER_FAILURES,
};
pub use spec::{
    parse_cron, parse_tz, Anchor, CronField, CronSpec, PastAt, Spec, SpecError, When, WhenField,
    CRON_FIELDS, MAX_EVERY_S, MAX_SPEC_CHARS, MIN_EVERY_S,
};
