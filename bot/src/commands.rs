//! Slash commands (poise): the one `Data` type and the commands users can run in Discord.

use std::net::SocketAddr;

use entity::Snowflake;

use crate::store::Store;

/// What every command can reach.
pub struct Data {
    pub store: Store,
    pub tool_server: SocketAddr,
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
    ctx.say(format!(
        "switchboard is connected. {name}: {cached} cached messages. The tool server listens on {}.",
        data.tool_server
    ))
    .await?;
    Ok(())
}

/// Every command, for registration.
pub fn all() -> Vec<poise::Command<Data, Error>> {
    vec![status()]
}
