//! The parse guard: every dispatch and REST answer the fake produces must deserialize with
//! serenity's own model types. A payload serenity cannot parse is silently dropped in
//! production (`Event::Unknown`), so this test is what keeps the fake honest.

mod common;

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};

use common::{within, Gateway, ALL_INTENTS};
use fake_discord::{
    demo, ChannelPatch, FakeDiscord, FakeOptions, NewAttachment, NewChannel, RateLimits,
    SlashCommand, Snowflake, UserMessage, World,
};
use serenity::all as s;
use serenity::model::event::{Event, GatewayEvent};

fn http(fake: &FakeDiscord) -> s::Http {
    s::HttpBuilder::new("fake-token")
        .proxy(fake.base_url())
        .ratelimiter_disabled(true)
        .application_id(s::ApplicationId::new(demo::BOT))
        .build()
}

fn user_message(
    channel: u64,
    author: u64,
    content: &str,
    reply_to: Option<Snowflake>,
) -> UserMessage {
    UserMessage {
        channel_id: channel.into(),
        author_id: author.into(),
        content: content.to_string(),
        reply_to,
        ..Default::default()
    }
}

fn id_of(v: &serde_json::Value) -> Snowflake {
    Snowflake::from_digits(v["id"].as_str().expect("id")).expect("snowflake")
}

#[tokio::test]
async fn serenity_parses_everything() {
    // serenity's own ratelimiter is off (it would talk to discord.com) and this test is about
    // parsing, not pacing: every bucket is widened out of the way.
    let fake = FakeDiscord::start_with(
        World::demo(),
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        FakeOptions {
            rate_limits: RateLimits::unthrottled(),
            ..FakeOptions::default()
        },
    )
    .await
    .expect("start");
    let mut gw = Gateway::connect(&fake.gateway_url()).await;
    gw.identify(ALL_INTENTS, 1).await;
    let http = http(&fake);
    let ops = s::ChannelId::new(demo::OPS);

    // REST answers, parsed by serenity's typed calls.
    within("gateway", http.get_gateway())
        .await
        .expect("GET /gateway");
    within("gateway/bot", http.get_bot_gateway())
        .await
        .expect("GET /gateway/bot");
    let me = within("users/@me", http.get_current_user())
        .await
        .expect("users/@me");
    assert_eq!(me.id.get(), demo::BOT);
    within("app", http.get_current_application_info())
        .await
        .expect("application");
    for id in [demo::OPS, demo::INCIDENT_THREAD, demo::STANLEY_DM] {
        within("get channel", http.get_channel(s::ChannelId::new(id)))
            .await
            .expect("channel parses");
    }
    within("user", http.get_user(s::UserId::new(demo::STANLEY)))
        .await
        .expect("user");
    within("dm", s::UserId::new(demo::TOMAS).create_dm_channel(&http))
        .await
        .expect("create dm");
    let commands = vec![s::CreateCommand::new("ping").description("Ping the bot")];
    within(
        "global commands",
        s::Command::set_global_commands(&http, commands.clone()),
    )
    .await
    .expect("global commands");
    within(
        "guild commands",
        s::GuildId::new(demo::GUILD).set_commands(&http, commands),
    )
    .await
    .expect("guild commands");

    let user_msg = fake
        .post_message(user_message(
            demo::OPS,
            demo::STANLEY,
            "hi <@1000000000000000001>",
            None,
        ))
        .expect("post");
    let sent = within(
        "send",
        ops.send_message(
            &http,
            s::CreateMessage::new()
                .content("hello <@1000000000000000101>")
                .reference_message((ops, s::MessageId::new(id_of(&user_msg).0)))
                .nonce(s::Nonce::String("n-1".into()))
                .enforce_nonce(true),
        ),
    )
    .await
    .expect("send parses");
    assert_eq!(
        sent.referenced_message.as_ref().map(|m| m.id.get()),
        Some(id_of(&user_msg).0)
    );
    let listed = within("list", ops.messages(&http, s::GetMessages::new().limit(10)))
        .await
        .expect("list");
    assert_eq!(listed.len(), 2);
    within("get one", ops.message(&http, sent.id))
        .await
        .expect("get message");
    within(
        "edit",
        ops.edit_message(&http, sent.id, s::EditMessage::new().content("edited")),
    )
    .await
    .expect("edit");
    let thumbs = s::ReactionType::Unicode("👍".to_string());
    within("react", http.create_reaction(ops, sent.id, &thumbs))
        .await
        .expect("react");
    within(
        "reactors",
        ops.reaction_users(&http, sent.id, thumbs.clone(), Some(10), None::<s::UserId>),
    )
    .await
    .expect("reactors");
    within("message with reactions", ops.message(&http, sent.id))
        .await
        .expect("message with reactions parses");
    within("unreact", http.delete_reaction_me(ops, sent.id, &thumbs))
        .await
        .expect("unreact");
    // Files: serenity's multipart upload, its Attachment model, and its download.
    let with_files = within(
        "send files",
        ops.send_message(
            &http,
            s::CreateMessage::new()
                .content("two files")
                .add_file(s::CreateAttachment::bytes(b"alpha".to_vec(), "a.txt"))
                .add_file(
                    s::CreateAttachment::bytes(vec![0u8, 159, 146, 150], "b c.png")
                        .description("a picture"),
                ),
        ),
    )
    .await
    .expect("multipart send parses");
    assert_eq!(with_files.attachments.len(), 2);
    assert_eq!(with_files.attachments[0].filename, "a.txt");
    assert_eq!(with_files.attachments[1].filename, "b c.png");
    assert_eq!(
        with_files.attachments[1].description.as_deref(),
        Some("a picture")
    );
    assert_eq!(
        with_files.attachments[1].content_type.as_deref(),
        Some("image/png")
    );
    let downloaded = within("download", with_files.attachments[1].download())
        .await
        .expect("attachment downloads");
    assert_eq!(downloaded, vec![0u8, 159, 146, 150]);
    let user_files = fake
        .post_message(UserMessage {
            channel_id: demo::OPS.into(),
            author_id: demo::STANLEY.into(),
            attachments: vec![NewAttachment::new("../../etc/passwd", b"root:x".to_vec())],
            ..Default::default()
        })
        .expect("user attachment");
    let parsed: s::Message =
        serde_json::from_value(user_files.clone()).expect("serenity parses a user attachment");
    assert_eq!(parsed.attachments[0].filename, "../../etc/passwd");
    let downloaded = within("download user file", parsed.attachments[0].download())
        .await
        .expect("user attachment downloads");
    assert_eq!(downloaded, b"root:x".to_vec());

    within("typing", ops.broadcast_typing(&http))
        .await
        .expect("typing");
    let extra = within("send2", ops.say(&http, "to delete"))
        .await
        .expect("say");
    let extra2 = within("send3", ops.say(&http, "to delete too"))
        .await
        .expect("say");
    within("bulk", ops.delete_messages(&http, [extra.id, extra2.id]))
        .await
        .expect("bulk delete");
    let doomed = within("send4", ops.say(&http, "bye")).await.expect("say");
    within("delete", ops.delete_message(&http, doomed.id))
        .await
        .expect("delete");

    // Events caused by users and by the world changing.
    let dm = fake
        .post_message(user_message(demo::STANLEY_DM, demo::STANLEY, "psst", None))
        .expect("dm");
    fake.post_message(user_message(
        demo::INCIDENT_THREAD,
        demo::TOMAS,
        "in thread",
        None,
    ))
    .expect("thread msg");
    fake.edit_message(demo::STANLEY_DM.into(), id_of(&dm), "psst (edited)")
        .expect("edit dm");
    fake.react(
        demo::STANLEY_DM.into(),
        id_of(&dm),
        demo::STANLEY.into(),
        "🎉",
        true,
    )
    .expect("dm reaction");
    fake.react(
        demo::OPS.into(),
        id_of(&user_msg),
        demo::TOMAS.into(),
        &format!("shipit:{}", demo::SHIPIT_EMOJI),
        true,
    )
    .expect("custom reaction");
    fake.react(
        demo::OPS.into(),
        id_of(&user_msg),
        demo::TOMAS.into(),
        &format!("shipit:{}", demo::SHIPIT_EMOJI),
        false,
    )
    .expect("remove reaction");
    fake.typing(demo::OPS.into(), demo::STANLEY.into())
        .expect("typing");
    fake.typing(demo::STANLEY_DM.into(), demo::STANLEY.into())
        .expect("dm typing");
    let chan = fake
        .create_channel(NewChannel {
            guild_id: demo::GUILD.into(),
            name: "new-room".into(),
            kind: 0,
            parent_id: None,
            topic: None,
            bot_can_see: true,
            bot_can_send: true,
            bot_can_manage_messages: false,
        })
        .expect("channel");
    fake.update_channel(
        id_of(&chan),
        ChannelPatch {
            topic: Some("t".into()),
            ..ChannelPatch::default()
        },
    )
    .expect("update");
    let thread = fake
        .create_channel(NewChannel {
            guild_id: demo::GUILD.into(),
            name: "new-thread".into(),
            kind: 11,
            parent_id: Some(id_of(&chan)),
            topic: None,
            bot_can_see: true,
            bot_can_send: true,
            bot_can_manage_messages: false,
        })
        .expect("thread");
    fake.update_channel(
        id_of(&thread),
        ChannelPatch {
            archived: Some(true),
            ..ChannelPatch::default()
        },
    )
    .expect("archive");
    fake.delete_channel(id_of(&chan))
        .expect("delete channel + thread");
    fake.delete_message(demo::STANLEY_DM.into(), id_of(&dm))
        .expect("delete dm");

    // A slash command, answered through serenity's interaction calls.
    let invoked = fake
        .invoke_command(SlashCommand {
            channel_id: demo::OPS.into(),
            user_id: demo::STANLEY.into(),
            name: "ping".into(),
            options: serde_json::json!([]),
        })
        .expect("invoke");
    let frame = gw.dispatch("INTERACTION_CREATE").await;
    let event: GatewayEvent =
        serde_json::from_value(frame.clone()).expect("interaction frame parses");
    let GatewayEvent::Dispatch(_, Event::InteractionCreate(create)) = event else {
        panic!("not an interaction: {frame}")
    };
    let command = create
        .interaction
        .as_command()
        .expect("a command interaction")
        .clone();
    assert_eq!(command.id.get(), id_of(&invoked).0);
    within(
        "respond",
        command.create_response(
            &http,
            s::CreateInteractionResponse::Message(
                s::CreateInteractionResponseMessage::new().content("pong"),
            ),
        ),
    )
    .await
    .expect("respond");
    within("get response", command.get_response(&http))
        .await
        .expect("@original parses");
    within(
        "edit response",
        command.edit_response(&http, s::EditInteractionResponse::new().content("pong!")),
    )
    .await
    .expect("edit @original");
    let follow = within(
        "followup",
        command.create_followup(
            &http,
            s::CreateInteractionResponseFollowup::new().content("more"),
        ),
    )
    .await
    .expect("followup");
    within("get followup", command.get_followup(&http, follow.id))
        .await
        .expect("get followup");
    within("delete followup", command.delete_followup(&http, follow.id))
        .await
        .expect("delete followup");

    // A button on a message, clicked, parsed as a component interaction and answered with an
    // update of that message through serenity.
    let card = within(
        "post a card",
        s::ChannelId::new(demo::OPS).send_message(
            &http,
            s::CreateMessage::new().content("approve?").components(vec![
                s::CreateActionRow::Buttons(vec![
                    s::CreateButton::new("sb:approve:x").label("Approve")
                ]),
            ]),
        ),
    )
    .await
    .expect("a message with a button");
    fake.click_component(fake_discord::ComponentClick {
        message_id: card.id.get().into(),
        user_id: demo::TOMAS.into(),
        custom_id: "sb:approve:x".into(),
    })
    .expect("click");
    let frame = gw.dispatch("INTERACTION_CREATE").await;
    let event: GatewayEvent =
        serde_json::from_value(frame.clone()).expect("component frame parses");
    let GatewayEvent::Dispatch(_, Event::InteractionCreate(create)) = event else {
        panic!("not an interaction: {frame}")
    };
    let click = create
        .interaction
        .as_message_component()
        .expect("a component interaction")
        .clone();
    assert_eq!(click.data.custom_id, "sb:approve:x");
    assert_eq!(click.message.id, card.id);
    within(
        "update the card",
        click.create_response(
            &http,
            s::CreateInteractionResponse::UpdateMessage(
                s::CreateInteractionResponseMessage::new().content("approved"),
            ),
        ),
    )
    .await
    .expect("update");

    // Drain to a marker and parse every frame the gateway sent.
    fake.post_message(user_message(demo::OPS, demo::STANLEY, "END", None))
        .expect("marker");
    loop {
        let f = gw.dispatch("MESSAGE_CREATE").await;
        if f["d"]["content"] == "END" {
            break;
        }
    }
    let mut names = BTreeSet::new();
    for frame in &gw.frames {
        let event: GatewayEvent = serde_json::from_value(frame.clone())
            .unwrap_or_else(|e| panic!("serenity cannot parse {frame}: {e}"));
        if let GatewayEvent::Dispatch(_, event) = event {
            let name = event.name().unwrap_or_else(|| {
                panic!("serenity sees an Unknown event (payload dropped in production): {frame}")
            });
            names.insert(name);
        }
    }
    for expected in [
        "READY",
        "GUILD_CREATE",
        "MESSAGE_CREATE",
        "MESSAGE_UPDATE",
        "MESSAGE_DELETE",
        "MESSAGE_DELETE_BULK",
        "MESSAGE_REACTION_ADD",
        "MESSAGE_REACTION_REMOVE",
        "CHANNEL_CREATE",
        "CHANNEL_UPDATE",
        "CHANNEL_DELETE",
        "THREAD_CREATE",
        "THREAD_UPDATE",
        "THREAD_DELETE",
        "INTERACTION_CREATE",
        "TYPING_START",
    ] {
        assert!(names.contains(expected), "no {expected} among {names:?}");
    }
    fake.shutdown().await;
}
