//! A real serenity client with a poise framework runs against the fake: READY, GUILD_CREATE,
//! a MESSAGE_CREATE reaches the handler, its reply is recorded in `/_fake/requests`, a slash
//! command is answered by poise, and after a dropped socket the client resumes and receives the
//! message injected while it was away.

mod common;

use std::future::IntoFuture;
use std::time::Duration;

use common::within;
use fake_discord::{
    demo, FakeDiscord, Fault, GatewayFaultKind, SlashCommand, Snowflake, UserMessage, World,
};
use serenity::all as s;
use serenity::async_trait;
use tokio::sync::mpsc;

#[derive(Debug)]
enum Seen {
    Ready,
    GuildCreate(u64, usize),
    Message(String),
    Resumed,
    Unknown(String),
}

struct Handler {
    tx: mpsc::UnboundedSender<Seen>,
}

#[async_trait]
impl s::EventHandler for Handler {
    async fn ready(&self, _ctx: s::Context, _ready: s::Ready) {
        let _ = self.tx.send(Seen::Ready);
    }

    async fn guild_create(&self, _ctx: s::Context, guild: s::Guild, _is_new: Option<bool>) {
        let _ = self
            .tx
            .send(Seen::GuildCreate(guild.id.get(), guild.channels.len()));
    }

    async fn message(&self, ctx: s::Context, msg: s::Message) {
        if msg.author.bot {
            return;
        }
        let _ = self.tx.send(Seen::Message(msg.content.clone()));
        if msg.content == "hello bot" {
            let _ = msg.reply(&ctx.http, "hello human").await;
        }
    }

    async fn resume(&self, _ctx: s::Context, _event: s::ResumedEvent) {
        let _ = self.tx.send(Seen::Resumed);
    }
}

struct Raw {
    tx: mpsc::UnboundedSender<Seen>,
}

#[async_trait]
impl s::RawEventHandler for Raw {
    async fn raw_event(&self, _ctx: s::Context, event: s::Event) {
        if let s::Event::Unknown(unknown) = event {
            let _ = self.tx.send(Seen::Unknown(unknown.kind));
        }
    }
}

type Error = Box<dyn std::error::Error + Send + Sync>;
type Context<'a> = poise::Context<'a, (), Error>;

/// Answers with Pong!
#[poise::command(slash_command)]
async fn ping(ctx: Context<'_>) -> Result<(), Error> {
    ctx.say("Pong!").await?;
    Ok(())
}

async fn expect_seen(
    rx: &mut mpsc::UnboundedReceiver<Seen>,
    what: &str,
    mut pred: impl FnMut(&Seen) -> bool,
) {
    within(what, async {
        loop {
            match rx.recv().await {
                Some(Seen::Unknown(kind)) => panic!("serenity could not parse a {kind} dispatch"),
                Some(seen) if pred(&seen) => return,
                Some(_) => continue,
                None => panic!("handler channel closed waiting for {what}"),
            }
        }
    })
    .await;
}

/// Polls `check` every 10 ms until it returns Some.
async fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    within(what, async {
        loop {
            if let Some(v) = check() {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serenity_and_poise_run_against_the_fake() {
    let fake = FakeDiscord::start(World::demo()).await.expect("start");
    let (tx, mut rx) = mpsc::unbounded_channel();

    let http = s::HttpBuilder::new("fake-token")
        .proxy(fake.base_url())
        .ratelimiter_disabled(true)
        .build();
    let framework = poise::Framework::builder()
        .options(poise::FrameworkOptions {
            commands: vec![ping()],
            ..Default::default()
        })
        .setup(|ctx, _ready, framework| {
            Box::pin(async move {
                poise::builtins::register_globally(ctx, &framework.options().commands).await?;
                Ok(())
            })
        })
        .build();
    let intents = s::GatewayIntents::non_privileged() | s::GatewayIntents::MESSAGE_CONTENT;
    let mut client = within(
        "client build",
        s::ClientBuilder::new_with_http(http, intents)
            .framework(framework)
            .event_handler(Handler { tx: tx.clone() })
            .raw_event_handler(Raw { tx })
            .into_future(),
    )
    .await
    .expect("client builds");
    let shards = client.shard_manager.clone();
    let runner = tokio::spawn(async move { client.start().await });

    expect_seen(&mut rx, "READY", |s| matches!(s, Seen::Ready)).await;
    expect_seen(
        &mut rx,
        "GUILD_CREATE",
        |s| matches!(s, Seen::GuildCreate(id, n) if *id == demo::GUILD && *n >= 4),
    )
    .await;

    // A user's message reaches the handler; its reply goes out over REST.
    fake.post_message(UserMessage {
        channel_id: demo::OPS.into(),
        author_id: demo::STANLEY.into(),
        content: "hello bot".into(),
        reply_to: None,
        ..Default::default()
    })
    .expect("post");
    expect_seen(
        &mut rx,
        "MESSAGE_CREATE",
        |s| matches!(s, Seen::Message(c) if c == "hello bot"),
    )
    .await;
    let reply_path = format!("/api/v10/channels/{}/messages", demo::OPS);
    let reply = eventually("reply recorded", || {
        fake.requests()
            .into_iter()
            .find(|r| r.method == "POST" && r.path == reply_path && r.status == 200)
    })
    .await;
    assert_eq!(
        reply.body.as_ref().and_then(|b| b["content"].as_str()),
        Some("hello human")
    );

    // poise registers its commands in setup, then answers the slash command.
    eventually("ping registered", || {
        let commands = fake.commands();
        commands["global"]
            .as_array()?
            .iter()
            .any(|c| c["name"] == "ping")
            .then_some(())
    })
    .await;
    let invoked = fake
        .invoke_command(SlashCommand {
            channel_id: demo::OPS.into(),
            user_id: demo::STANLEY.into(),
            name: "ping".into(),
            options: serde_json::json!([]),
        })
        .expect("invoke");
    let interaction_id =
        Snowflake::from_digits(invoked["id"].as_str().expect("id")).expect("snowflake");
    let answered = eventually("slash command answered", || {
        let i = fake.interaction(interaction_id).ok()?;
        (!i["original_message"].is_null()).then_some(i)
    })
    .await;
    assert_eq!(answered["response"]["type"], 4);
    assert_eq!(answered["original_message"]["content"], "Pong!");

    // Drop the socket, inject a message while the client is away, and see it after RESUME.
    let hit = fake
        .inject_fault(Fault {
            rest: None,
            gateway: Some(GatewayFaultKind::Drop),
            handshakes: None,
        })
        .expect("fault");
    assert_eq!(hit, 1);
    // serenity reconnects within milliseconds, so the closed socket may already be replaced
    // by the time we look: either observation means the drop happened.
    eventually("socket closed", || {
        let state = fake.state();
        (state.connections_open == 0 || state.connections >= 2).then_some(())
    })
    .await;
    fake.post_message(UserMessage {
        channel_id: demo::RELEASE_ROOM.into(),
        author_id: demo::TOMAS.into(),
        content: "sent while you were away".into(),
        reply_to: None,
        ..Default::default()
    })
    .expect("post while away");
    expect_seen(
        &mut rx,
        "resumed message",
        |s| matches!(s, Seen::Message(c) if c == "sent while you were away"),
    )
    .await;
    let state = fake.state();
    assert_eq!(
        state.sessions_identified, 1,
        "the client resumed instead of re-identifying"
    );
    assert_eq!(state.sessions_resumed, 1);

    within("shutdown shards", shards.shutdown_all()).await;
    runner.abort();
    fake.shutdown().await;
}
