//! Slash commands (poise): the one `Data` type and the commands users can run in Discord.

use std::net::SocketAddr;

use entity::Snowflake;

use crate::bridge::Bridge;
use crate::store::Store;

/// What every command can reach.
pub struct Data {
    pub store: Store,
    pub tool_server: SocketAddr,
    /// `None` when no agent is configured.
    pub bridge: Option<Bridge>,
}

pub type Error = Box<dyn std::error::Error + Send + Sync>;
pub type Context<'a> = poise::Context<'a, Data, Error>;

/// Shows what switchboard knows about this channel.
#[poise::command(slash_command)]
pub async fn status(ctx: Context<'_>) -> Result<(), Error> {
    let data = ctx.data();
    let channel = Snowflake(ctx.channel_id().get());
    let cached = data.store.messages(channel, 1000, None, None).len();
    let session = data.store.session(channel);
    let name = session.map_or_else(|| "this channel".to_owned(), |s| format!("#{}", s.name));
    let runs = match &data.bridge {
        None => "No agent is configured.".to_owned(),
        Some(bridge) => {
            let status = bridge.status(channel);
            let running = status.running.map_or_else(
                || "nothing running".to_owned(),
                |t| format!("running a request from {}", t.author_name),
            );
            format!("Agent: {running}, {} waiting.", status.waiting.len())
        }
    };
    ctx.say(format!(
        "switchboard is connected. {name}: {cached} cached messages. {runs} The tool server listens on {}.",
        data.tool_server
    ))
    .await?;
    Ok(())
}

/// Stops the agent's running run in this channel (queued requests stay).
#[poise::command(slash_command)]
pub async fn abort(ctx: Context<'_>) -> Result<(), Error> {
    let channel = Snowflake(ctx.channel_id().get());
    let answer = match &ctx.data().bridge {
        None => "No agent is configured here.",
        Some(bridge) if bridge.abort(channel) => "Stopping the running request.",
        Some(_) => "Nothing is running in this channel.",
    };
    ctx.say(answer).await?;
    Ok(())
}

/// Every command, for registration.
pub fn all() -> Vec<poise::Command<Data, Error>> {
    vec![status(), abort()]
}
