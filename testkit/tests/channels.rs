//! `surface.channels.*` through the whole pipeline over the test kit's recording platform: a
//! channel is created only where the allowlist names the guild or the category, changed and deleted
//! only when its guild or category is named (a channel listed alone is used, not changed), every
//! refusal before an approver is asked and before the platform hears of it; the default agent scope
//! leaves them out and the example config asks before each.

use std::time::Duration;

use entity::Snowflake;
use protocol::{ErrorCode, ErrorKind};
use serde_json::{json, Value};
use switchboard_engine::auth::{Caller, CapabilityGrant};
use switchboard_engine::surface::{Session, SessionKind, Surface as _};
use switchboard_engine::{CallContext, ToolError};
use switchboard_testkit::platform::{demo, SurfaceCall};
use switchboard_testkit::testing::TestServer;

/// A category of the demo guild, cached by [`server`].
const CATEGORY: u64 = 1000000000000000700;
/// A channel in that category, cached by [`server`].
const IN_CATEGORY: u64 = 1000000000000000701;

/// A tool server over the demo world plus a category holding one channel, with `discord` as
/// its `[discord]` section.
async fn server(discord: &str, rest: &str) -> TestServer {
    let config = format!(
        "[discord]\n{discord}\n\n{aliases}\n[toolserver]\nbind = \"127.0.0.1:0\"\n\n{rest}",
        aliases = demo_world::alias_sections()
    );
    let server = TestServer::start(&config).await.expect("server starts");
    let guild = Some(Snowflake(demo::GUILD));
    server.surface().add_session(Session {
        id: Snowflake(CATEGORY),
        guild_id: guild,
        parent_id: None,
        kind: SessionKind::Category,
        name: "Projects".into(),
    });
    server.surface().add_session(Session {
        id: Snowflake(IN_CATEGORY),
        guild_id: guild,
        parent_id: Some(Snowflake(CATEGORY)),
        kind: SessionKind::Channel,
        name: "roadmap".into(),
    });
    server
}

fn channels(ids: &[u64]) -> String {
    let ids: Vec<String> = ids.iter().map(|id| format!("\"{id}\"")).collect();
    format!("allowed_channel_ids = [{}]", ids.join(", "))
}

fn guild() -> String {
    format!("allowed_guild_ids = [\"{}\"]", demo::GUILD)
}

fn category() -> String {
    format!("allowed_category_ids = [\"{CATEGORY}\"]")
}

fn in_session(session: u64) -> CallContext {
    CallContext {
        session_ref: Some(session.to_string()),
        ..CallContext::operator()
    }
}

async fn call_as(
    server: &TestServer,
    context: &CallContext,
    tool: &str,
    input: Value,
) -> Result<Value, ToolError> {
    server
        .core()
        .call(context, tool, input)
        .await
        .map(|raw| serde_json::from_str(raw.get()).expect("callables answer JSON"))
}

async fn call(server: &TestServer, tool: &str, input: Value) -> Result<Value, ToolError> {
    call_as(server, &CallContext::operator(), tool, input).await
}

/// An agent run started in #ops, whose capability may call `scope`.
fn run_in_ops(server: &TestServer, scope: Vec<String>) -> Caller {
    let token = server
        .core()
        .mint_capability(CapabilityGrant {
            session_id: Snowflake(demo::OPS),
            request_id: "run-1".into(),
            scope,
            ttl: Duration::from_secs(60),
            client: None,
            cwd: None,
            trigger_message_id: None,
            requested_by: None,
            gate: None,
        })
        .expect("mint");
    server.core().authenticate(Some(&token)).expect("valid")
}

/// The channel actions the platform was asked to take.
fn channel_calls(server: &TestServer) -> Vec<SurfaceCall> {
    server
        .surface()
        .calls()
        .into_iter()
        .filter(|c| {
            matches!(
                c,
                SurfaceCall::CreateChannel(_)
                    | SurfaceCall::EditChannel { .. }
                    | SurfaceCall::DeleteChannel(_)
            )
        })
        .collect()
}

fn listed(sessions: &Value, id: &str) -> Option<Value> {
    sessions["sessions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["channelId"] == id)
        .cloned()
}

#[tokio::test]
async fn a_channel_made_in_an_allowlisted_guild_is_usable_at_once() {
    let server = server(&guild(), "").await;
    let made = call(
        &server,
        "surface.channels.create",
        json!({"guild": demo::GUILD.to_string(), "name": "launch plan", "topic": "what ships when"}),
    )
    .await
    .expect("created");
    let id = made["channelId"].as_str().expect("an id").to_owned();
    assert_eq!(made["guildId"], demo::GUILD.to_string());
    assert_eq!(made["kind"], "channel");
    assert_eq!(made["reference"], "#launch-plan");
    let calls = channel_calls(&server);
    let [SurfaceCall::CreateChannel(asked)] = calls.as_slice() else {
        panic!("one creation: {calls:?}");
    };
    assert_eq!(asked.place.guild(), Snowflake(demo::GUILD));
    assert_eq!(asked.place.category(), None);
    assert_eq!(asked.topic.as_deref(), Some("what ships when"));
    // Listed, and usable through the reference it answered.
    let sessions = call(&server, "surface.sessions.list", json!({}))
        .await
        .expect("list");
    assert!(listed(&sessions, &id).is_some(), "{sessions}");
    let sent = call(
        &server,
        "surface.messages.send",
        json!({"sessionId": made["reference"], "text": "kickoff"}),
    )
    .await
    .expect("sent in the new channel");
    assert_eq!(sent["channelId"], id.as_str());
    // The guild comes from the call's session when none is named; a forum and a voice
    // channel too.
    let forum = call_as(
        &server,
        &in_session(demo::OPS),
        "surface.channels.create",
        json!({"name": "questions", "kind": "forum", "topic": "x".repeat(4096)}),
    )
    .await
    .expect("a forum in #ops' guild");
    assert_eq!(forum["kind"], "forum");
    assert_eq!(forum["guildId"], demo::GUILD.to_string());
    let voice = call(
        &server,
        "surface.channels.create",
        json!({"guild": demo::GUILD.to_string(), "name": "standup", "kind": "voice"}),
    )
    .await
    .expect("a voice channel");
    assert_eq!(voice["title"], "standup");
}

#[tokio::test]
async fn a_channel_is_made_under_an_allowlisted_category_and_nowhere_else() {
    let server = server(&category(), "").await;
    let made = call(
        &server,
        "surface.channels.create",
        json!({"parentId": CATEGORY.to_string(), "name": "launch"}),
    )
    .await
    .expect("created under the category");
    assert_eq!(made["parentChannelId"], CATEGORY.to_string());
    assert_eq!(
        made["guildId"],
        demo::GUILD.to_string(),
        "the category's guild"
    );
    // The guild alone is not listed: no channel at its top level.
    let refused = call(
        &server,
        "surface.channels.create",
        json!({"guild": demo::GUILD.to_string(), "name": "loose"}),
    )
    .await
    .expect_err("the guild is not allowlisted");
    assert_eq!(refused.kind, ErrorKind::Denied);
    assert_eq!(refused.code, ErrorCode::ChannelNotAllowed);
    assert!(
        refused.message.contains("allowed_category_ids"),
        "{}",
        refused.message
    );
    assert_eq!(
        channel_calls(&server).len(),
        1,
        "only the allowed one reached the platform"
    );
}

#[tokio::test]
async fn listing_channels_alone_allows_using_them_not_making_or_changing_them() {
    let server = server(&channels(&[demo::OPS, demo::RANDOM, CATEGORY]), "").await;
    let create = call(
        &server,
        "surface.channels.create",
        json!({"guild": demo::GUILD.to_string(), "name": "new"}),
    )
    .await
    .expect_err("no guild or category listed");
    assert_eq!(create.code, ErrorCode::ChannelNotAllowed);
    assert!(
        create.message.contains("allowed_guild_ids") && create.message.contains("not make them"),
        "{}",
        create.message
    );
    for (tool, input) in [
        (
            "surface.channels.edit",
            json!({"sessionId": "#ops", "name": "renamed"}),
        ),
        ("surface.channels.delete", json!({"sessionId": "#ops"})),
        (
            "surface.channels.edit",
            json!({"sessionId": demo::RANDOM.to_string(), "topic": "t"}),
        ),
    ] {
        let error = call(&server, tool, input.clone())
            .await
            .expect_err("refused");
        assert_eq!(error.kind, ErrorKind::Denied, "{tool} {input}");
        assert_eq!(error.code, ErrorCode::ChannelNotAllowed, "{tool} {input}");
        assert!(
            error.message.contains("may be used but not changed"),
            "{}",
            error.message
        );
    }
    // The channel is still there to use.
    call(
        &server,
        "surface.messages.send",
        json!({"sessionId": "#ops", "text": "still here"}),
    )
    .await
    .expect("#ops is allowed to use");
    assert!(
        channel_calls(&server).is_empty(),
        "{:?}",
        channel_calls(&server)
    );
}

#[tokio::test]
async fn a_channel_in_an_allowlisted_guild_or_category_is_renamed_and_deleted() {
    for discord in [guild(), category()] {
        let server = server(&discord, "").await;
        let channel = if discord == guild() {
            demo::RANDOM
        } else {
            IN_CATEGORY
        };
        let renamed = call(
            &server,
            "surface.channels.edit",
            json!({"sessionId": channel.to_string(), "name": "watercooler", "topic": "anything"}),
        )
        .await
        .expect("renamed");
        assert_eq!(renamed["title"], "watercooler", "{discord}");
        assert_eq!(renamed["reference"], "#watercooler", "{discord}");
        call(
            &server,
            "surface.messages.send",
            json!({"sessionId": "#watercooler", "text": "works under its new name"}),
        )
        .await
        .expect("the new reference works");
        let deleted = call(
            &server,
            "surface.channels.delete",
            json!({"sessionId": "#watercooler"}),
        )
        .await
        .expect("deleted");
        assert_eq!(deleted["deletedChannelId"], channel.to_string());
        let sessions = call(&server, "surface.sessions.list", json!({}))
            .await
            .expect("list");
        assert!(
            listed(&sessions, &channel.to_string()).is_none(),
            "{sessions}"
        );
        assert_eq!(
            channel_calls(&server),
            [
                SurfaceCall::EditChannel {
                    channel_id: Snowflake(channel),
                    edit: switchboard_engine::surface::ChannelEdit {
                        name: Some("watercooler".into()),
                        topic: Some("anything".into()),
                    },
                },
                SurfaceCall::DeleteChannel(Snowflake(channel)),
            ]
        );
    }
}

#[tokio::test]
async fn deleting_a_channel_takes_its_threads_and_threads_dms_and_categories_are_no_channels() {
    let server = server(&format!("{}\nallow_dms = true", guild()), "").await;
    for (session, says) in [
        (demo::INCIDENT_THREAD, "thread"),
        (demo::STANLEY_DM, "direct message"),
    ] {
        let error = call(
            &server,
            "surface.channels.delete",
            json!({"sessionId": session.to_string()}),
        )
        .await
        .expect_err("not a guild channel");
        assert_eq!(error.kind, ErrorKind::Usage, "{session}");
        assert!(error.message.contains(says), "{}", error.message);
    }
    call(
        &server,
        "surface.channels.delete",
        json!({"sessionId": "#ops"}),
    )
    .await
    .expect("deleted");
    let surface = server.surface();
    assert!(surface.session(Snowflake(demo::OPS)).is_none());
    assert!(
        surface.session(Snowflake(demo::INCIDENT_THREAD)).is_none(),
        "its thread went with it"
    );
}

#[tokio::test]
async fn bad_channel_input_is_refused_before_the_platform_hears_of_it() {
    let server = server(&guild(), "").await;
    let g = demo::GUILD.to_string();
    let cases = [
        ("surface.channels.create", json!({"guild": g, "name": ""})),
        (
            "surface.channels.create",
            json!({"guild": g, "name": "x".repeat(101)}),
        ),
        (
            "surface.channels.create",
            json!({"guild": g, "name": "v", "kind": "voice", "topic": "no"}),
        ),
        (
            "surface.channels.create",
            json!({"guild": g, "name": "t", "topic": "x".repeat(1025)}),
        ),
        (
            "surface.channels.create",
            json!({"guild": g, "name": "t", "kind": "stage"}),
        ),
        (
            "surface.channels.create",
            json!({"guild": "not-an-id", "name": "t"}),
        ),
        (
            "surface.channels.create",
            json!({"parentId": demo::OPS.to_string(), "name": "t"}),
        ),
        (
            "surface.channels.create",
            json!({"guild": g, "parentId": CATEGORY.to_string(), "name": "t", "extra": 1}),
        ),
        ("surface.channels.edit", json!({"sessionId": "#ops"})),
        (
            "surface.channels.edit",
            json!({"sessionId": "#ops", "topic": "x".repeat(1025)}),
        ),
        ("surface.channels.delete", json!({})),
        ("surface.channels.delete", json!({"sessionId": "  "})),
    ];
    for (tool, input) in cases {
        let error = call(&server, tool, input.clone())
            .await
            .expect_err("refused");
        assert_eq!(error.kind, ErrorKind::Usage, "{tool} {input}: {error:?}");
    }
    // No session to take the guild from, and none named.
    let orphan = call(&server, "surface.channels.create", json!({"name": "t"}))
        .await
        .expect_err("no guild");
    assert!(orphan.message.contains("guild=ID"), "{}", orphan.message);
    // A category of another guild than the one named.
    let other = call(
        &server,
        "surface.channels.create",
        json!({"guild": demo::OTHER_GUILD.to_string(), "parentId": CATEGORY.to_string(), "name": "t"}),
    )
    .await
    .expect_err("mismatch");
    assert_eq!(other.kind, ErrorKind::Usage);
    assert!(
        channel_calls(&server).is_empty(),
        "{:?}",
        channel_calls(&server)
    );
}

#[tokio::test]
async fn a_channel_change_the_allowlist_refuses_never_asks_an_approver() {
    let rules = "[permissions]\napprovers = [\"@Stanley\"]\n\n\
                 [[permissions.rules]]\ntool = \"surface.channels.*\"\npolicy = \"ask\"\ncaller = \"operator\"\n";
    let asked = |server: &TestServer| {
        server
            .surface()
            .calls()
            .iter()
            .filter(|c| matches!(c, SurfaceCall::PostApproval { .. }))
            .count()
    };
    let server = server(&channels(&[demo::OPS]), rules).await;
    let refused = call_as(
        &server,
        &in_session(demo::OPS),
        "surface.channels.delete",
        json!({"sessionId": "#ops"}),
    )
    .await
    .expect_err("refused by the allowlist");
    assert_eq!(refused.code, ErrorCode::ChannelNotAllowed);
    assert_eq!(asked(&server), 0, "nobody is asked about what cannot run");
    // Where it could run, the rule asks first: the card is posted and the call waits.
    let server = self::server(&guild(), rules).await;
    let core = std::sync::Arc::clone(server.core());
    let pending = tokio::spawn(async move {
        core.call(
            &in_session(demo::OPS),
            "surface.channels.delete",
            json!({"sessionId": "#random"}),
        )
        .await
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while asked(&server) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "no approval card");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!pending.is_finished(), "the delete waits for the approver");
    assert!(
        channel_calls(&server).is_empty(),
        "nothing deleted before a yes"
    );
    pending.abort();
}

#[tokio::test]
async fn channel_creation_spends_the_guilds_share_of_the_mutating_budget() {
    let server = server(
        &guild(),
        "[toolserver.rate_limits]\nper_channel_mutating_per_minute = 60\nper_channel_mutating_burst = 2\n",
    )
    .await;
    let g = demo::GUILD.to_string();
    for name in ["a", "b"] {
        call(
            &server,
            "surface.channels.create",
            json!({"guild": g, "name": name}),
        )
        .await
        .expect("within the burst");
    }
    let limited = call(
        &server,
        "surface.channels.create",
        json!({"guild": g, "name": "c"}),
    )
    .await
    .expect_err("past the guild's burst");
    assert_eq!(limited.code, ErrorCode::ChannelRateLimited);
    assert_eq!(channel_calls(&server).len(), 2);
}

#[tokio::test]
async fn the_default_agent_scope_leaves_out_channel_management_and_a_run_cannot_call_it() {
    use switchboard_config::{glob_matches, DEFAULT_TOOL_SCOPE};
    for id in switchboard_callables::callable_ids() {
        let in_default = DEFAULT_TOOL_SCOPE
            .iter()
            .any(|glob| glob_matches(glob, &id));
        // Typing is shown by the bridge as the run's own answer (no scope needed), so the
        // default scope leaves the explicit callable out too.
        let expected = !id.starts_with("surface.channels.")
            && id != "surface.typing"
            && ["surface.", "workflow.", "attachment.", "memory."]
                .iter()
                .any(|prefix| id.starts_with(prefix));
        assert_eq!(in_default, expected, "{id}");
    }
    let server = server(&guild(), "[agent]\nrunner = \"demo\"\n").await;
    let scope = server
        .core()
        .settings()
        .config()
        .agent
        .as_ref()
        .expect("an agent")
        .tool_scope
        .clone();
    let run = CallContext {
        caller: run_in_ops(&server, scope),
        ..CallContext::operator()
    };
    let error = call_as(
        &server,
        &run,
        "surface.channels.create",
        json!({"name": "sneaky"}),
    )
    .await
    .expect_err("out of the run's scope");
    assert_eq!(error.kind, ErrorKind::Denied, "{error:?}");
    assert!(channel_calls(&server).is_empty());
}

#[tokio::test]
async fn the_example_config_asks_before_each_channel_change() {
    let text = include_str!("../../switchboard.example.toml");
    let config = switchboard_config::Config::parse(text, "switchboard.example.toml")
        .unwrap_or_else(|report| panic!("{report}"));
    assert!(
        !config
            .agent
            .as_ref()
            .expect("an agent")
            .tool_scope
            .iter()
            .any(|glob| switchboard_config::glob_matches(glob, "surface.channels.create")),
        "the example's runs do not manage channels unless the operator adds it"
    );
    let rules = switchboard_engine::governance::GovernanceRules::from_config(&config);
    let server = server(&guild(), "").await;
    let run = run_in_ops(&server, vec!["surface.*".into()]);
    for tool in [
        "surface.channels.create",
        "surface.channels.edit",
        "surface.channels.delete",
    ] {
        let verdict = rules.decide(tool, &run, &[Snowflake(demo::OPS)]);
        assert_eq!(verdict.policy, switchboard_config::Policy::Ask, "{tool}");
    }
}

#[tokio::test]
async fn mcp_hosts_are_told_edit_and_delete_are_destructive() {
    let server = server(&guild(), "").await;
    let tools = server.core().tools_for(&Caller::Operator);
    let effects = |id: &str| {
        tools
            .iter()
            .find(|t| t.id == id)
            .unwrap_or_else(|| panic!("{id} is listed"))
            .effects
    };
    assert!(effects("surface.channels.delete").destructive);
    assert!(effects("surface.channels.edit").destructive);
    let create = effects("surface.channels.create");
    assert!(!create.destructive && !create.idempotent && create.open_world);
}
