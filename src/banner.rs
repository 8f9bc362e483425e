//! What `switchboard playground` prints once it listens: where everything is, and lines to try
//! that work as printed with the config it runs — the demo channels that config allows (a
//! clear warning when it allows none, instead of advertising `#ops` to an agent that will
//! ignore it), the demo agent's phrases only when the demo agent answers, and approvals decided
//! in the console, which the playground always serves.

use std::net::SocketAddr;

use demo_world::{ChannelKind, BOT, STANLEY};
use entity::{LearnedNames, Mapper, Snowflake};
use switchboard_config::{Config, Policy, Runner};
use switchboard_engine::allowlist::AllowRules;
use switchboard_engine::surface::{ChannelLocation, SessionKind};

/// One demo session the config allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoSession {
    pub id: u64,
    /// How to name it (`#ops`, `#incident-42`, `#channel_<id>` for the DM).
    pub reference: String,
    /// How people know it: the reference, or "the DM with stanley".
    pub described: String,
    pub kind: SessionKind,
    /// Whether the bot may post there (not in `#secret`).
    pub bot_can_send: bool,
}

/// The demo guild's channels, threads and DMs that `config`'s allowlist allows, in the demo
/// world's order, each named as [`Mapper::session_reference`] names it with the config's
/// aliases.
pub fn allowed_demo_sessions(config: &Config) -> Vec<DemoSession> {
    let rules = AllowRules::new(&config.discord);
    let mut names = LearnedNames::new();
    for channel in demo_world::CHANNELS {
        names.add_channel(Snowflake(channel.id), channel.name);
    }
    let mapper = Mapper::new(&config.aliases, &names);
    let guild = Some(Snowflake(demo_world::GUILD));
    let channels = demo_world::CHANNELS.iter().map(|channel| {
        let kind = match channel.kind {
            ChannelKind::Text => SessionKind::Channel,
            ChannelKind::Thread => SessionKind::Thread,
        };
        let location = ChannelLocation {
            guild_id: guild,
            parent_channel_id: channel.parent.map(Snowflake),
            kind,
        };
        let reference = mapper.session_reference(Snowflake(channel.id));
        (
            channel.id,
            location,
            reference.clone(),
            reference,
            channel.bot_can_send,
        )
    });
    let dms = demo_world::DMS.iter().map(|dm| {
        let location = ChannelLocation {
            guild_id: None,
            parent_channel_id: None,
            kind: SessionKind::Dm,
        };
        let who = demo_world::user(dm.recipient).map_or("a demo user", |user| user.username);
        let reference = mapper.session_reference(Snowflake(dm.id));
        let described = format!("the DM with {who} ({reference})");
        (dm.id, location, reference, described, true)
    });
    channels
        .chain(dms)
        // The demo guild has no categories.
        .filter(|(id, location, ..)| rules.allows(Snowflake(*id), location, None))
        .map(
            |(id, location, reference, described, bot_can_send)| DemoSession {
                id,
                reference,
                described,
                kind: location.kind,
                bot_can_send,
            },
        )
        .collect()
}

/// Everything the banner says, from the config the playground runs.
pub struct Banner {
    fake_url: String,
    token: String,
    tools: String,
    agent: String,
    demo_agent: bool,
    allowed: Vec<DemoSession>,
    asks: bool,
}

impl Banner {
    /// `tools` is how to run the CLI from here (a path, or a `cargo run` line).
    pub fn new(config: &Config, fake_url: &str, token: &str, tools: String) -> Banner {
        let runner = config.agent.as_ref().map(|agent| &agent.runner);
        let agent = match runner {
            Some(Runner::OpenAi(model)) => {
                format!("the model {} at {}", model.model, model.base_url)
            }
            Some(Runner::Command { program, .. }) => format!("the command {program}"),
            Some(Runner::Demo) => "the built-in demo agent".to_owned(),
            None => "none (the config has no [agent]: nothing answers)".to_owned(),
        };
        let permissions = &config.permissions;
        Banner {
            fake_url: fake_url.to_owned(),
            token: token.to_owned(),
            tools,
            agent,
            demo_agent: matches!(runner, Some(Runner::Demo)),
            allowed: allowed_demo_sessions(config),
            asks: permissions.default == Policy::Ask
                || permissions
                    .rules
                    .iter()
                    .any(|rule| rule.policy == Policy::Ask),
        }
    }

    /// The warning the playground logs when the config allows no demo session, if it does.
    pub fn nothing_allowed(&self) -> Option<String> {
        self.allowed.is_empty().then(|| {
            format!(
                "this config allows none of the demo guild's channels, threads or DMs, so the agent \
                 will not see a single message there and every call to them is refused. To try it \
                 here, allow some in [discord]: allowed_channel_ids = [\"{ops}\"] (#ops, with its \
                 threads), allowed_guild_ids = [\"{guild}\"] (the whole demo guild), or \
                 allow_dms = true (the DM with stanley) — or run `switchboard playground \
                 --extra-config FILE` to lay your [agent] and rules over the playground's own config",
                ops = demo_world::OPS,
                guild = demo_world::GUILD,
            )
        })
    }

    /// The banner, once the tool server listens at `addr`.
    pub fn render(&self, addr: SocketAddr) -> String {
        let Banner {
            fake_url,
            token,
            tools,
            agent,
            ..
        } = self;
        let allowed = if self.allowed.is_empty() {
            "none of the demo guild's channels (see the warning below)".to_owned()
        } else {
            self.allowed
                .iter()
                .map(|s| s.described.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut text = format!(
            r#"
switchboard playground: switchboard against a fake Discord (demo guild "Lab"), no token needed.
  fake Discord  {fake_url}   (control API under /_fake/)
  tool server   http://{addr}
  console       http://{addr}/   (log in with the SWITCHBOARD_TOKEN below)
  agent         {agent}
  allowed       {allowed}

In another shell:
  export SWITCHBOARD_URL=http://{addr}
  export SWITCHBOARD_TOKEN={token}

Try:
  {tools} surface.sessions.list --output=text
"#
        );
        let Some(place) = self.trigger_place() else {
            if let Some(warning) = self.nothing_allowed() {
                text.push_str(&format!("\nWARNING: {warning}.\n"));
            }
            text.push_str("\nCtrl-C stops everything.\n");
            return text;
        };
        let reference = &place.reference;
        let id = place.id;
        text.push_str(&format!(
            "  {tools} surface.messages.send --session-id={reference} \"hello @Stanley\"\n"
        ));
        if self.demo_agent || self.agent_configured() {
            text.push_str(&format!(
                r#"
Talk to the agent as a demo user (stanley) in {described}:
  curl -s -X POST {fake_url}/_fake/messages -H 'content-type: application/json' \
    -d '{{"channel_id":"{id}","author_id":"{STANLEY}","content":"<@{BOT}> summarize"}}'
and see its reply:
  {tools} surface.messages.list --session-id={reference} --limit=3 --output=text
"#,
                described = place.described,
            ));
        }
        if self.demo_agent {
            text.push_str("The demo agent also understands help, ask @Tomas <question>, ");
            match self
                .allowed
                .iter()
                .find(|s| s.id != id && s.bot_can_send && s.kind != SessionKind::Dm)
            {
                Some(other) => text.push_str(&format!("post to {} <text>, ", other.reference)),
                None => text.push_str("post to #channel <text>, "),
            }
            text.push_str("search <words> and thread <name>.\n");
        }
        if self.asks {
            text.push_str(&format!(
                "When a rule asks first (as posting from {reference} into another channel does in the \
                 built-in config), an approval card appears: approve or deny it in the console, \
                 http://{addr}/ (Approvals), logged in with the SWITCHBOARD_TOKEN above.\n"
            ));
        }
        text.push_str(&format!(
            "\nEverything the agent did:  {tools} audit.list --output=text\nCtrl-C stops everything.\n"
        ));
        text
    }

    fn agent_configured(&self) -> bool {
        !self.agent.starts_with("none")
    }

    /// Where the banner's examples post: `#ops` when allowed, else the first allowed channel
    /// the bot may post in, else an allowed thread, else the DM.
    fn trigger_place(&self) -> Option<&DemoSession> {
        let postable = || self.allowed.iter().filter(|s| s.bot_can_send);
        postable()
            .find(|s| s.id == demo_world::OPS)
            .or_else(|| postable().find(|s| s.kind == SessionKind::Channel))
            .or_else(|| postable().find(|s| s.kind == SessionKind::Thread))
            .or_else(|| postable().next())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        let text = format!("{text}\n{}", demo_world::alias_sections());
        Config::parse(&text, "test.toml").unwrap_or_else(|report| panic!("{report}"))
    }

    fn addr() -> SocketAddr {
        "127.0.0.1:7311".parse().expect("addr")
    }

    fn banner(text: &str) -> Banner {
        Banner::new(
            &config(text),
            "http://127.0.0.1:1",
            "t0k",
            "tools".to_owned(),
        )
    }

    #[test]
    fn a_config_that_allows_no_demo_channel_says_so_and_advertises_none() {
        let b = banner(
            "[discord]\nallowed_channel_ids = [\"334455667788990011\"]\n[agent]\nrunner = \"demo\"",
        );
        assert!(b.allowed.is_empty());
        let text = b.render(addr());
        assert!(
            text.contains("allowed       none of the demo guild's channels"),
            "{text}"
        );
        assert!(text.contains("WARNING: this config allows none"), "{text}");
        assert!(
            text.contains(&format!("allowed_channel_ids = [\"{}\"]", demo_world::OPS)),
            "{text}"
        );
        for advertised in [
            "--session-id=#ops",
            "summarize",
            "post to",
            "_fake/messages",
        ] {
            assert!(
                !text.contains(advertised),
                "{advertised} is advertised: {text}"
            );
        }
    }

    #[test]
    fn the_allowed_demo_channels_are_listed_and_used_by_the_examples() {
        let b = banner(&format!(
            "[discord]\nallowed_channel_ids = [\"{}\"]\n[agent]\nrunner = \"demo\"",
            demo_world::RELEASE_ROOM
        ));
        let names: Vec<&str> = b.allowed.iter().map(|s| s.reference.as_str()).collect();
        assert_eq!(names, ["#release-room"]);
        let text = b.render(addr());
        assert!(text.contains("allowed       #release-room\n"), "{text}");
        assert!(
            text.contains(&format!("\"channel_id\":\"{}\"", demo_world::RELEASE_ROOM)),
            "{text}"
        );
        assert!(
            text.contains("--session-id=#release-room --limit=3"),
            "{text}"
        );
        assert!(!text.contains("#ops"), "{text}");
        assert!(b.nothing_allowed().is_none());
    }

    #[test]
    fn a_guild_allows_every_channel_and_thread_and_dms_add_the_dm() {
        let b = banner(&format!(
            "[discord]\nallowed_guild_ids = [\"{}\"]\nallow_dms = true",
            demo_world::GUILD
        ));
        let names: Vec<&str> = b.allowed.iter().map(|s| s.described.as_str()).collect();
        assert_eq!(
            names,
            [
                "#ops",
                "#release-room",
                "#secret",
                "#random",
                "#incident-42",
                "#off-topic-thread",
                &format!("the DM with stanley (#channel_{})", demo_world::STANLEY_DM)
            ]
        );
        // No [agent]: nothing to talk to, and no demo phrases.
        let text = b.render(addr());
        assert!(!text.contains("Talk to the agent"), "{text}");
        assert!(!text.contains("demo agent also"), "{text}");
    }

    #[test]
    fn demo_phrases_only_for_the_demo_agent_and_approvals_point_to_the_console() {
        let command = banner(&format!(
            "[discord]\nallowed_channel_ids = [\"{}\"]\n[agent]\nrunner = \"command\"\ncommand = [\"/bin/true\"]",
            demo_world::OPS
        ));
        let text = command.render(addr());
        assert!(text.contains("Talk to the agent"), "{text}");
        assert!(!text.contains("demo agent also"), "{text}");
        assert!(!text.contains("approval"), "no rule asks: {text}");

        let asking = banner(&format!(
            "[discord]\nallowed_channel_ids = [\"{ops}\", \"{room}\"]\n[agent]\nrunner = \"demo\"\n\
             [permissions]\napprovers = [\"@Stanley\"]\n[[permissions.rules]]\ntool = \"surface.messages.send\"\n\
             session = \"#release-room\"\norigin = \"#ops\"\npolicy = \"ask\"",
            ops = demo_world::OPS,
            room = demo_world::RELEASE_ROOM
        ));
        let text = asking.render(addr());
        assert!(text.contains("post to #release-room <text>"), "{text}");
        assert!(
            text.contains("approve or deny it in the console, http://127.0.0.1:7311/ (Approvals)"),
            "{text}"
        );
        assert!(!text.contains("_fake/components"), "{text}");
    }
}
