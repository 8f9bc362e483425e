//! Slash commands (poise): the one `Data` type, the commands users can run in Discord, and the
//! one `on_error` that answers the user.
//!
//! Commands answer only in sessions the allowlist allows (elsewhere: an ephemeral refusal that
//! says nothing about the service), and never show addresses or tokens.

// `#[poise::command]` wraps each command in a new `pub fn` (returning its `poise::Command`) that
// carries no docs: poise takes the doc comment for the slash command's description and leaves it
// on the inner function. missing_docs cannot be satisfied for `status` and `abort`, so it is off
// for this module; every other public item here is documented.
#![allow(missing_docs)]

use std::sync::Arc;

use entity::Snowflake;
use poise::CreateReply;
use toolserver::allowlist::Allowlist;
use toolserver::surface::{ChannelLocation, SessionKind};

use toolserver::runs::{AbortOutcome, Runs};
use toolserver::scopes::{ScopeChange, SessionTools};
use toolserver::Core;

use crate::store::Store;

/// What every command can reach.
pub struct Data {
    /// The store: where commands find sessions (for the allowlist too) and count cached messages.
    pub store: Store,
    /// Decides where commands answer at all; elsewhere they refuse, privately.
    pub allowlist: Arc<Allowlist>,
    /// `None` when no agent is configured.
    pub runs: Option<Arc<dyn Runs>>,
    /// The tool server's core: session scopes for `/tools`, approvals for button clicks.
    pub core: Arc<Core>,
    /// The one REST client: answers approval clicks.
    pub rest: crate::rest::DiscordRest,
}

/// What a command fails with; [`on_error`] logs it and tells the user, privately, that the command
/// failed.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
/// What every command receives: poise's context over [`Data`] and [`Error`].
pub type Context<'a> = poise::Context<'a, Data, Error>;

const NOT_HERE: &str = "switchboard is not active in this channel.";

/// Whether the command was invoked in a session the allowlist allows.
fn allowed_here(ctx: Context<'_>) -> bool {
    let data = ctx.data();
    let channel = Snowflake(ctx.channel_id().get());
    let fallback = ChannelLocation {
        guild_id: ctx.guild_id().map(|g| Snowflake(g.get())),
        parent_channel_id: None,
        kind: if ctx.guild_id().is_some() {
            SessionKind::Channel
        } else {
            SessionKind::Dm
        },
    };
    data.allowlist
        .allows_cached(channel, |id| match data.store.session(id) {
            Some(session) => Some(crate::surface::location(&session)),
            None => (id == channel).then_some(fallback),
        })
}

async fn private(ctx: Context<'_>, text: impl Into<String>) -> Result<(), Error> {
    ctx.send(CreateReply::default().content(text).ephemeral(true))
        .await?;
    Ok(())
}

/// Whether the invoking user is in `discord.admins` (by id, or through a role).
async fn is_admin(ctx: Context<'_>) -> bool {
    // The admins in force now: a reload changes them for the next command.
    let settings = ctx.data().core.settings();
    let admins = &settings.config().discord.admins;
    if admins.is_empty() {
        return false;
    }
    let user = Snowflake(ctx.author().id.get());
    let roles: Vec<Snowflake> = match ctx.author_member().await {
        Some(member) => member.roles.iter().map(|r| Snowflake(r.get())).collect(),
        None => Vec::new(),
    };
    switchboard_config::any_principal_matches(admins, user, &roles)
}

/// Shows what the agent is doing in this channel (only you see the answer).
#[poise::command(slash_command)]
pub async fn status(ctx: Context<'_>) -> Result<(), Error> {
    if !allowed_here(ctx) {
        return private(ctx, NOT_HERE).await;
    }
    let data = ctx.data();
    let channel = Snowflake(ctx.channel_id().get());
    let cached = data.store.messages(channel, 1000, None, None).len();
    let session = data.store.session(channel);
    let name = session.map_or_else(|| "this channel".to_owned(), |s| format!("#{}", s.name));
    let runs = match &data.runs {
        None => "No agent is configured.".to_owned(),
        Some(runs) => {
            let status = runs.status(channel);
            let running = status.running.map_or_else(
                || "nothing running".to_owned(),
                |t| format!("running a request from {}", t.author_name),
            );
            format!("Agent: {running}, {} waiting.", status.waiting.len())
        }
    };
    private(
        ctx,
        format!("switchboard is connected. {name}: {cached} cached messages. {runs}"),
    )
    .await
}

/// Stops the agent's running request in this channel, if you asked for it (admins: any).
#[poise::command(slash_command)]
pub async fn abort(ctx: Context<'_>) -> Result<(), Error> {
    if !allowed_here(ctx) {
        return private(ctx, NOT_HERE).await;
    }
    let Some(runs) = &ctx.data().runs else {
        return private(ctx, "No agent is configured here.").await;
    };
    let channel = Snowflake(ctx.channel_id().get());
    let user = Snowflake(ctx.author().id.get());
    let admin = is_admin(ctx).await;
    match runs.abort(channel, user, admin) {
        AbortOutcome::Stopped => {
            ctx.say("Stopping the running request.").await?;
            Ok(())
        }
        AbortOutcome::NotYours { owner } => {
            private(
                ctx,
                format!("The running request is {owner}'s; only they or an admin can stop it."),
            )
            .await
        }
        AbortOutcome::NothingRunning => private(ctx, "Nothing is running in this channel.").await,
    }
}

/// The actions `/tools` takes.
const TOOLS_ACTIONS: [&str; 5] = ["show", "enable", "disable", "set", "reset"];

/// Most characters of a `/tools` answer (a message holds 2,000).
const TOOLS_ANSWER_CHARS: usize = 1_900;

/// What `/tools` answers: the effective scope and the rules, cut to fit one message.
pub fn describe_tools(tools: &SessionTools, session_name: &str) -> String {
    let mut text = format!("**Tools the agent may use in {session_name}**");
    if tools.effective.is_empty() {
        text.push_str(": none.\n");
    } else {
        text.push_str(&format!(": {}\n", tools.effective.len()));
        for id in &tools.effective {
            text.push_str(&format!("`{id}` "));
        }
        text.push('\n');
    }
    text.push_str(match (&tools.session_scope, tools.overridden) {
        (_, true) => {
            "Set here with /tools (an admin can `/tools action:reset` to go back to the config).\n"
        }
        (Some(_), false) => "From the config ([sessions.*] tool_scope).\n",
        (None, false) => "No session limit: the agent's own tool_scope applies.\n",
    });
    if tools.rules.is_empty() {
        text.push_str(&format!(
            "No permission rules apply here; calls are **{}** by default.",
            tools.default_policy
        ));
    } else {
        text.push_str(&format!(
            "Rules (the last match wins; otherwise {}):\n",
            tools.default_policy
        ));
        for rule in &tools.rules {
            text.push_str(&format!(
                "• `{}` → **{}** ({})\n",
                rule.tool, rule.policy, rule.name
            ));
        }
    }
    if text.chars().count() > TOOLS_ANSWER_CHARS {
        text = text.chars().take(TOOLS_ANSWER_CHARS).collect();
        text.push('…');
    }
    text
}

fn choices(names: Vec<String>) -> poise::serenity_prelude::CreateAutocompleteResponse {
    poise::serenity_prelude::CreateAutocompleteResponse::new().set_choices(
        names
            .into_iter()
            .map(poise::serenity_prelude::AutocompleteChoice::from)
            .collect(),
    )
}

async fn autocomplete_action(
    _ctx: Context<'_>,
    partial: &str,
) -> poise::serenity_prelude::CreateAutocompleteResponse {
    let partial = partial.trim().to_lowercase();
    choices(
        TOOLS_ACTIONS
            .iter()
            .filter(|action| action.starts_with(&partial))
            .map(|action| (*action).to_owned())
            .collect(),
    )
}

async fn autocomplete_tools(
    ctx: Context<'_>,
    partial: &str,
) -> poise::serenity_prelude::CreateAutocompleteResponse {
    let mut suggestions = ctx.data().core.callable_suggestions(partial);
    if "all".starts_with(partial.trim()) {
        suggestions.insert(0, "all".to_owned());
    }
    if "none".starts_with(partial.trim()) {
        suggestions.insert(0, "none".to_owned());
    }
    suggestions.truncate(25);
    choices(suggestions)
}

/// Shows the tools the agent may use here and the rules that apply (admins: change them).
#[poise::command(slash_command, rename = "tools")]
pub async fn tools_command(
    ctx: Context<'_>,
    #[description = "show (default); admins: enable, disable, set or reset"]
    #[autocomplete = "autocomplete_action"]
    action: Option<String>,
    #[description = "A tool or glob (surface.pins.*); for set: all, none, or several with commas"]
    #[autocomplete = "autocomplete_tools"]
    tools: Option<String>,
) -> Result<(), Error> {
    if !allowed_here(ctx) {
        return private(ctx, NOT_HERE).await;
    }
    let data = ctx.data();
    let channel = Snowflake(ctx.channel_id().get());
    let name = data
        .store
        .session(channel)
        .map_or_else(|| "this channel".to_owned(), |s| format!("#{}", s.name));
    let action = action.as_deref().map(str::trim).unwrap_or("show");
    if action == "show" || action.is_empty() {
        return private(
            ctx,
            describe_tools(&data.core.session_tools(channel), &name),
        )
        .await;
    }
    let change = match ScopeChange::parse(action, tools.as_deref()) {
        Ok(change) => change,
        Err(error) => return private(ctx, format!("Nothing changed: {error}.")).await,
    };
    if !is_admin(ctx).await {
        return private(
            ctx,
            "Only admins (discord.admins in the config) can change the tools of a channel; `/tools` alone shows them.",
        )
        .await;
    }
    let by = format!("discord:{}", ctx.author().id.get());
    match data.core.change_session_tools(channel, &change, &by) {
        Ok(after) => {
            tracing::info!(session = %channel, %by, ?change, "a session's tool scope changed");
            private(
                ctx,
                format!(
                    "Done; effective from the next call.\n{}",
                    describe_tools(&after, &name)
                ),
            )
            .await
        }
        Err(error) => private(ctx, format!("Nothing changed: {error}.")).await,
    }
}

/// Every command, for registration.
pub fn all() -> Vec<poise::Command<Data, Error>> {
    vec![status(), abort(), tools_command()]
}

/// The one error handler: the user gets a short ephemeral answer, the log gets the detail.
pub async fn on_error(error: poise::FrameworkError<'_, Data, Error>) {
    match error {
        poise::FrameworkError::Command { error, ctx, .. } => {
            tracing::warn!(command = %ctx.command().name, %error, "command failed");
            let answer = ctx
                .send(
                    CreateReply::default()
                        .content("That command failed; the operator can find why in the log.")
                        .ephemeral(true),
                )
                .await;
            if let Err(error) = answer {
                tracing::debug!(%error, "could not tell the user the command failed");
            }
        }
        other => {
            if let Err(error) = poise::builtins::on_error(other).await {
                tracing::warn!(%error, "handling a command error failed");
            }
        }
    }
}
