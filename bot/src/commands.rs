//! Slash commands: their definitions (registered with Discord through the one REST client),
//! and the interactions Discord sends for them — commands, autocompletes and approval button
//! clicks — each answered through the same client (`POST /interactions/{id}/{token}/callback`),
//! so no request to Discord bypasses its rate limiter.
//!
//! Commands answer only in sessions the allowlist allows (elsewhere: a private refusal that
//! says nothing about the service), never show addresses or tokens, and never ping anyone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use entity::Snowflake;
use serde_json::{json, Value};
use serenity::model::application::{CommandDataOptionValue, CommandInteraction, Interaction};
use serenity::model::gateway::Ready;
use serenity::prelude::{Context, EventHandler};
use switchboard_engine::allowlist::Allowlist;
use switchboard_engine::auth::DiscordUser;
use switchboard_engine::runs::Runs;
use switchboard_engine::scopes::SessionTools;
use switchboard_engine::surface::{ChannelLocation, SessionKind};
use switchboard_engine::Core;

use crate::rest::DiscordRest;
use switchboard_store::Store;

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
    /// The one REST client: registers the commands and answers every interaction.
    pub rest: DiscordRest,
}

const NOT_HERE: &str = "switchboard is not active in this channel.";

/// `type` of an interaction answer that posts a message.
const CHANNEL_MESSAGE_WITH_SOURCE: u8 = 4;
/// `type` of an interaction answer with autocomplete choices.
const AUTOCOMPLETE_RESULT: u8 = 8;
/// The message flag only the invoking user sees.
const EPHEMERAL: u64 = 1 << 6;
/// Discord's option type for a string.
const STRING_OPTION: u8 = 3;
/// Most autocomplete choices Discord takes.
const MAX_CHOICES: usize = 25;
/// Longest choice name and value Discord takes, in characters.
const CHOICE_CHARS: usize = 100;

/// The slash commands, as `PUT /applications/{id}/commands` takes them.
pub fn definitions() -> Value {
    json!([
        {
            "type": 1,
            "name": "status",
            "description": "Shows what the agent is doing in this channel (only you see the answer)",
        },
        {
            "type": 1,
            "name": "abort",
            "description": "Stops the agent's running request in this channel, if you asked for it (admins: any)",
        },
        {
            "type": 1,
            "name": "tools",
            "description": "Shows the tools the agent may use here and the rules that apply (admins: change them)",
            "options": [
                {
                    "type": STRING_OPTION,
                    "name": "action",
                    "description": "show (default); admins: enable, disable, set or reset",
                    "required": false,
                    "autocomplete": true,
                },
                {
                    "type": STRING_OPTION,
                    "name": "tools",
                    "description": "A tool or glob (surface.pins.*); for set: all, none, or several with commas",
                    "required": false,
                    "autocomplete": true,
                },
            ],
        },
        {
            "type": 1,
            "name": "agent",
            "description": "Shows which agent answers in this channel (admins: set NAME or reset)",
            "options": [
                {
                    "type": STRING_OPTION,
                    "name": "action",
                    "description": "show (default); admins: set or reset",
                    "required": false,
                },
                {
                    "type": STRING_OPTION,
                    "name": "name",
                    "description": "For set: the agent that answers here from now on",
                    "required": false,
                },
            ],
        },
        {
            "type": 1,
            "name": "undo",
            "description": "Puts this channel's workspace back as it was before the agent's last run (its starter or admins)",
            "options": [
                {
                    "type": STRING_OPTION,
                    "name": "run",
                    "description": "The run to undo (run-…); default: the last one that changed the workspace",
                    "required": false,
                },
            ],
        },
    ])
}

/// Who invoked a command, where, with what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// The command's name.
    pub name: String,
    /// The channel it was invoked in.
    pub channel: Snowflake,
    /// Its guild; `None` in a DM.
    pub guild: Option<Snowflake>,
    /// The invoking user.
    pub user: Snowflake,
    /// Their roles in the guild (empty in a DM).
    pub roles: Vec<Snowflake>,
    /// The string options given, by name; options of any other type are ignored.
    pub options: Vec<(String, String)>,
}

impl Invocation {
    /// What a slash command interaction says.
    pub fn from_interaction(command: &CommandInteraction) -> Invocation {
        Invocation {
            name: command.data.name.clone(),
            channel: Snowflake(command.channel_id.get()),
            guild: command.guild_id.map(|g| Snowflake(g.get())),
            user: Snowflake(command.user.id.get()),
            roles: command
                .member
                .as_ref()
                .map(|member| member.roles.iter().map(|r| Snowflake(r.get())).collect())
                .unwrap_or_default(),
            options: command
                .data
                .options
                .iter()
                .filter_map(|option| match &option.value {
                    CommandDataOptionValue::String(value) => {
                        Some((option.name.clone(), value.clone()))
                    }
                    _ => None,
                })
                .collect(),
        }
    }

    fn option(&self, name: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A command's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// What it says.
    pub text: String,
    /// Whether everyone in the channel sees it (else only the invoking user).
    pub public: bool,
}

impl Reply {
    fn private(text: impl Into<String>) -> Reply {
        Reply {
            text: text.into(),
            public: false,
        }
    }

    /// The interaction answer's body: a message that pings nobody.
    pub fn body(&self) -> Value {
        let text: String = self.text.chars().take(2_000).collect();
        let mut data = json!({ "content": text, "allowed_mentions": { "parse": [] } });
        if !self.public {
            data["flags"] = json!(EPHEMERAL);
        }
        json!({ "type": CHANNEL_MESSAGE_WITH_SOURCE, "data": data })
    }
}

/// Whether the command was invoked in a session the allowlist allows.
fn allowed_here(data: &Data, invocation: &Invocation) -> bool {
    let channel = invocation.channel;
    let fallback = ChannelLocation {
        guild_id: invocation.guild,
        parent_channel_id: None,
        kind: if invocation.guild.is_some() {
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

/// The answer to a slash command.
pub async fn answer(data: &Data, invocation: &Invocation) -> Reply {
    if !allowed_here(data, invocation) {
        return Reply::private(NOT_HERE);
    }
    match invocation.name.as_str() {
        "status" => status(data, invocation).await,
        "abort" => abort(data, invocation).await,
        "tools" => tools(data, invocation).await,
        "undo" => undo(data, invocation).await,
        "agent" => agent(data, invocation).await,
        other => {
            tracing::info!(command = other, "an unknown slash command was invoked");
            Reply::private(format!(
                "switchboard has no /{} command; its commands are /status, /abort, /tools, /agent and /undo.",
                other.chars().take(32).collect::<String>()
            ))
        }
    }
}

fn session_name(data: &Data, channel: Snowflake) -> String {
    data.core.session_reference(channel)
}

/// The invoking user as a caller: `/status` and `/abort` are calls of `runs.list` and
/// `runs.abort` as them, through the pipeline, audited like any call.
fn invoker(invocation: &Invocation) -> switchboard_engine::CallContext {
    crate::approvals::discord_context(DiscordUser::caller(
        invocation.user,
        invocation.roles.clone(),
        "",
    ))
}

async fn status(data: &Data, invocation: &Invocation) -> Reply {
    let channel = invocation.channel;
    let cached = data.store.messages(channel, 1000, None, None).len();
    let name = session_name(data, channel);
    let listed = data
        .core
        .call(
            &invoker(invocation),
            "runs.list",
            json!({ "sessionId": channel.to_string() }),
        )
        .await;
    let runs = match listed {
        Ok(output) => {
            let listed: Value = serde_json::from_str(output.get()).unwrap_or(Value::Null);
            let runs = listed["runs"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default();
            let state = |run: &&Value| run["state"].as_str().unwrap_or_default().to_owned();
            let running = runs.iter().find(|run| state(run) == "running").map_or_else(
                || "nothing running".to_owned(),
                |run| {
                    format!(
                        "running a request from {}",
                        run["requestedByName"].as_str().unwrap_or("someone")
                    )
                },
            );
            let waiting = runs.iter().filter(|run| state(run) == "queued").count();
            format!("Agent: {running}, {waiting} waiting.")
        }
        Err(error) if error.code == protocol::ErrorCode::NoAgent => {
            "No agent is configured.".to_owned()
        }
        Err(error) => format!("Agent: unknown ({}).", error.message),
    };
    Reply::private(format!(
        "switchboard is connected. {name}: {cached} cached messages. {runs}"
    ))
}

async fn abort(data: &Data, invocation: &Invocation) -> Reply {
    let stopped = data
        .core
        .call(
            &invoker(invocation),
            "runs.abort",
            json!({ "sessionId": invocation.channel.to_string() }),
        )
        .await;
    match stopped {
        Ok(_) => Reply {
            text: "Stopping the running request.".to_owned(),
            public: true,
        },
        Err(error) => Reply::private(match error.code {
            protocol::ErrorCode::NoAgent => "No agent is configured here.".to_owned(),
            protocol::ErrorCode::NothingRunning => "Nothing is running in this channel.".to_owned(),
            protocol::ErrorCode::NotYourRun => error.message,
            _ => format!("Nothing was stopped: {}", error.message),
        }),
    }
}

async fn tools(data: &Data, invocation: &Invocation) -> Reply {
    let channel = invocation.channel;
    let name = session_name(data, channel);
    let action = invocation.option("action").map(str::trim).unwrap_or("show");
    if action == "show" || action.is_empty() {
        return Reply::private(describe_tools(
            &data.core.session_tools(channel).await,
            &name,
        ));
    }
    // The operator callable, as the invoking user: the pipeline checks they are an admin,
    // applies the rules and writes the audit row.
    let changed = data
        .core
        .call(
            &invoker(invocation),
            "admin.tools.set",
            json!({
                "sessionId": channel.to_string(),
                "action": action,
                "tools": invocation.option("tools"),
            }),
        )
        .await;
    match changed {
        // What the session allows now, as `/tools` shows it.
        Ok(_) => Reply::private(format!(
            "Done; effective from the next call.\n{}",
            describe_tools(&data.core.session_tools(channel).await, &name)
        )),
        Err(error) if error.code == protocol::ErrorCode::NotAdmin => Reply::private(error.message),
        Err(error) => Reply::private(format!("Nothing changed: {}", error.message)),
    }
}

/// `/agent`: which agent answers here; `/agent set NAME` and `/agent reset` are
/// `admin.agent.set` as the invoking user (the callable lets only admins change it).
async fn agent(data: &Data, invocation: &Invocation) -> Reply {
    let channel = invocation.channel;
    let Some(runs) = &data.runs else {
        return Reply::private("No agent is configured.");
    };
    let describe = |shown: switchboard_engine::handoff::SessionAgent| match shown.agent {
        Some(name) => {
            let why = match shown.source {
                "set" => "set with /agent",
                "config" => "bound in the config",
                _ => "the default",
            };
            format!(
                "Agent here: **{name}** ({why}). Configured: {}.",
                shown.agents.join(", ")
            )
        }
        None => "No agent answers here.".to_owned(),
    };
    let action = invocation.option("action").map(str::trim).unwrap_or("show");
    let agent = match action {
        "show" | "" => return Reply::private(describe(runs.session_agent(channel).await)),
        "reset" => None,
        "set" => match invocation.option("name").map(str::trim) {
            Some(name) if !name.is_empty() => Some(name),
            _ => {
                return Reply::private(
                    "`/agent set` takes the agent's name: /agent action:set name:NAME",
                )
            }
        },
        other => {
            return Reply::private(format!(
                "unknown action `{}`: use show, set or reset",
                other.chars().take(32).collect::<String>()
            ))
        }
    };
    let changed = data
        .core
        .call(
            &invoker(invocation),
            "admin.agent.set",
            json!({ "sessionId": channel.to_string(), "agent": agent }),
        )
        .await;
    match changed {
        Ok(_) => Reply::private(format!(
            "Done; from the next run. {}",
            describe(runs.session_agent(channel).await)
        )),
        Err(error) if error.code == protocol::ErrorCode::NotAdmin => Reply::private(error.message),
        Err(error) => Reply::private(format!("Nothing changed: {}", error.message)),
    }
}

/// `/undo`: `workspace.undo` as the invoking user (the callable lets admins and the run's
/// starter undo), in this channel's workspace.
async fn undo(data: &Data, invocation: &Invocation) -> Reply {
    let caller = DiscordUser::caller(invocation.user, invocation.roles.clone(), "");
    let undone = data
        .core
        .call(
            &crate::approvals::discord_context(caller),
            "workspace.undo",
            json!({
                "sessionId": invocation.channel.to_string(),
                "run": invocation.option("run").map(str::trim).filter(|r| !r.is_empty()),
            }),
        )
        .await;
    match undone {
        Ok(answer) => {
            let answer: Value = serde_json::from_str(answer.get()).unwrap_or_default();
            let run = answer["run"].as_str().unwrap_or("the last run");
            let paths: Vec<String> = answer["restored"]
                .as_array()
                .map(|restored| {
                    restored
                        .iter()
                        .map(|r| {
                            format!(
                                "{} ({})",
                                r["path"].as_str().unwrap_or("?"),
                                r["action"].as_str().unwrap_or("restored")
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            let list = if paths.is_empty() {
                "nothing to put back".to_owned()
            } else {
                paths.join(", ")
            };
            Reply {
                text: format!("Undid {run}: {list}."),
                public: true,
            }
        }
        Err(error) => Reply::private(format!("Nothing undone: {}", error.message)),
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
            let mut applies = vec![format!("for {}", rule.caller)];
            if let Some(session) = &rule.session {
                applies.push(format!("in {session}"));
            }
            if let Some(origin) = &rule.origin {
                applies.push(format!("from runs started in {origin}"));
            }
            text.push_str(&format!(
                "• `{}` {} → **{}** ({})\n",
                rule.tool,
                applies.join(", "),
                rule.policy,
                rule.name
            ));
        }
    }
    if text.chars().count() > TOOLS_ANSWER_CHARS {
        text = text.chars().take(TOOLS_ANSWER_CHARS).collect();
        text.push('…');
    }
    text
}

/// The choices offered while `/tools` is typed: `option` is the focused option's name,
/// `partial` what was typed so far.
pub fn suggestions(core: &Core, option: &str, partial: &str) -> Vec<String> {
    let partial = partial.trim();
    let mut names: Vec<String> = match option {
        "action" => {
            let partial = partial.to_lowercase();
            TOOLS_ACTIONS
                .iter()
                .filter(|action| action.starts_with(&partial))
                .map(|action| (*action).to_owned())
                .collect()
        }
        "tools" => {
            let mut names = core.callable_suggestions(partial);
            for special in ["all", "none"] {
                if special.starts_with(partial) {
                    names.insert(0, special.to_owned());
                }
            }
            names
        }
        _ => Vec::new(),
    };
    names.retain(|name| !name.is_empty() && name.chars().count() <= CHOICE_CHARS);
    names.truncate(MAX_CHOICES);
    names
}

fn choices_body(names: &[String]) -> Value {
    let choices: Vec<Value> = names
        .iter()
        .map(|name| json!({ "name": name, "value": name }))
        .collect();
    json!({ "type": AUTOCOMPLETE_RESULT, "data": { "choices": choices } })
}

/// How many times a node that claimed the registration tries it (the others rely on it).
const REGISTRATION_TRIES: u32 = 3;

/// PUTs `definitions` as the application's global commands, tried [`REGISTRATION_TRIES`]
/// times with a backoff; whether it worked.
async fn register_commands(rest: &DiscordRest, application: Snowflake, definitions: Value) -> bool {
    let mut failed = None;
    for attempt in 0..REGISTRATION_TRIES {
        if attempt > 0 {
            tokio::time::sleep(std::time::Duration::from_secs(2 << attempt)).await;
        }
        match rest
            .set_global_commands(application, definitions.clone())
            .await
        {
            Ok(_) => return true,
            Err(error) => failed = Some(error),
        }
    }
    if let Some(error) = failed {
        tracing::warn!(%error, "could not register slash commands");
    }
    false
}

/// The once key of registering `definitions`: a changed set is a new key, so a new version
/// rolled out registers at once.
fn registration_key(definitions: &Value) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(definitions.to_string().as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("discord.commands:{hex}")
}

/// Registers the commands once, at the first READY (once per cluster on a shared store), and
/// answers every interaction.
pub struct Interactions {
    data: Data,
    registered: Arc<AtomicBool>,
}

impl Interactions {
    /// Handles the interactions of `data`'s service.
    pub fn new(data: Data) -> Interactions {
        Interactions {
            data,
            registered: Arc::new(AtomicBool::new(false)),
        }
    }

    async fn respond(&self, id: Snowflake, token: &str, body: Value, what: &str) {
        if let Err(error) = self.data.rest.interaction_response(id, token, body).await {
            tracing::warn!(%error, what, "could not answer an interaction");
        }
    }
}

#[async_trait]
impl EventHandler for Interactions {
    async fn ready(&self, _: Context, ready: Ready) {
        // Commands are global: once per process is enough, not once per re-identify.
        if self.registered.swap(true, Ordering::SeqCst) {
            return;
        }
        let application = Snowflake(ready.application.id.get());
        let definitions = definitions();
        let backend = Arc::clone(self.data.store.backend());
        let rest = self.data.rest.clone();
        let registered = Arc::clone(&self.registered);
        // Off the event handler: a node may wait for another node's claim to end.
        tokio::spawn(async move {
            let register = || {
                let (rest, definitions) = (rest.clone(), definitions.clone());
                async move { register_commands(&rest, application, definitions).await }
            };
            let outcome = if backend.shared() {
                // Several nodes: the one that claims this set of commands registers it.
                let key = registration_key(&definitions);
                crate::registration::once_per_cluster(
                    &*backend,
                    &key,
                    crate::registration::CLAIM_MS,
                    register,
                )
                .await
            } else if register().await {
                crate::registration::Registered::Here
            } else {
                crate::registration::Registered::Failed
            };
            match outcome {
                crate::registration::Registered::Here => {}
                crate::registration::Registered::Elsewhere => {
                    tracing::info!("slash commands are registered by another node of the cluster");
                }
                crate::registration::Registered::Failed
                | crate::registration::Registered::GaveUp => {
                    tracing::warn!(?outcome, "slash commands are not registered from this node; the next READY tries again");
                    registered.store(false, Ordering::SeqCst);
                }
            }
        });
    }

    async fn interaction_create(&self, _: Context, interaction: Interaction) {
        match interaction {
            Interaction::Command(command) => {
                let invocation = Invocation::from_interaction(&command);
                let reply = answer(&self.data, &invocation).await;
                self.respond(
                    Snowflake(command.id.get()),
                    &command.token,
                    reply.body(),
                    "a slash command",
                )
                .await;
            }
            Interaction::Autocomplete(typing) => {
                let names = match typing.data.autocomplete() {
                    Some(focused) if typing.data.name == "tools" => {
                        suggestions(&self.data.core, focused.name, focused.value)
                    }
                    _ => Vec::new(),
                };
                self.respond(
                    Snowflake(typing.id.get()),
                    &typing.token,
                    choices_body(&names),
                    "an autocomplete",
                )
                .await;
            }
            Interaction::Component(click) => {
                crate::approvals::on_component(&self.data.rest, &click, &self.data.core).await;
            }
            other => {
                tracing::debug!(kind = ?other.kind(), "an interaction switchboard does not handle");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_pings_nobody_is_private_unless_public_and_fits_a_message() {
        let private = Reply::private(format!("@everyone {}", "x".repeat(3_000))).body();
        assert_eq!(private["type"], 4);
        assert_eq!(private["data"]["flags"], EPHEMERAL);
        assert_eq!(private["data"]["allowed_mentions"]["parse"], json!([]));
        assert_eq!(
            private["data"]["content"]
                .as_str()
                .map(|c| c.chars().count()),
            Some(2_000)
        );
        let public = Reply {
            text: "Stopping the running request.".into(),
            public: true,
        }
        .body();
        assert!(public["data"]["flags"].is_null(), "{public}");
        assert_eq!(public["data"]["allowed_mentions"]["parse"], json!([]));
    }

    #[test]
    fn each_rule_says_where_from_where_and_whose_calls_it_governs() {
        use switchboard_engine::scopes::RuleView;
        let rule = |name: &str, caller: &str, origin: Option<&str>| RuleView {
            name: name.into(),
            tool: "surface.messages.send".into(),
            policy: "ask",
            session: Some("#release-room".into()),
            origin: origin.map(Into::into),
            caller: caller.into(),
        };
        let tools = SessionTools {
            session_id: Snowflake(1),
            effective: vec!["surface.messages.send".into()],
            overridden: false,
            session_scope: None,
            rules: vec![
                rule("permissions.rules[0]", "run", Some("#ops")),
                rule("permissions.rules[1]", "operator", None),
                rule("permissions.rules[2]", "token:ci", None),
            ],
            default_policy: "allow",
        };
        let text = describe_tools(&tools, "#release-room");
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with('•')).collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].contains("for run, in #release-room, from runs started in #ops"),
            "{text}"
        );
        assert!(lines[1].contains("for operator"), "{text}");
        assert!(lines[2].contains("for token:ci"), "{text}");
        assert_ne!(lines[1], lines[2], "three rules on one tool are told apart");
    }

    #[test]
    fn autocomplete_choices_name_and_value_each_suggestion() {
        let body = choices_body(&["surface.pins.add".to_owned()]);
        assert_eq!(body["type"], AUTOCOMPLETE_RESULT);
        assert_eq!(
            body["data"]["choices"],
            json!([{"name": "surface.pins.add", "value": "surface.pins.add"}])
        );
        assert_eq!(choices_body(&[])["data"]["choices"], json!([]));
    }

    #[test]
    fn the_definitions_are_what_discord_takes() {
        let commands = definitions();
        let commands = commands.as_array().expect("an array");
        assert_eq!(commands.len(), 5);
        for command in commands {
            let name = command["name"].as_str().expect("a name");
            assert!(name.len() <= 32 && name.chars().all(|c| c.is_ascii_lowercase()));
            let description = command["description"].as_str().expect("a description");
            assert!(
                (1..=100).contains(&description.chars().count()),
                "{name}: {description}"
            );
        }
    }
}
