//! Which agent answers in a session, and how its answer says so.
//!
//! A session's agent is, in order: the one `/agent set` bound it to (kept by the bridge), the
//! one `[sessions.X] agent` binds it (or its channel, for a thread) to, else `agents.default`.
//! With one agent configured (`[agent]` alone included) the bridge's own config answers
//! everywhere and no answer is labelled, as before named agents.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use entity::Snowflake;
use switchboard_config::{AgentConfig, AgentName, AnswerLabel, Config};
use switchboard_engine::handoff::SessionAgent;
use switchboard_engine::surface::SessionKind;
use switchboard_engine::Core;

/// Most sessions `/agent set` may bind (an admin's command, but the map must stay bounded).
pub const MAX_BOUND_SESSIONS: usize = 10_000;

/// The agent a run uses.
#[derive(Debug, Clone)]
pub struct RunAgent {
    /// Its name; `None` when the bridge runs its own one config (one agent configured).
    pub name: Option<AgentName>,
    /// Its settings.
    pub config: Arc<AgentConfig>,
    /// Whether its answers say which agent wrote them (more than one agent configured).
    pub labelled: bool,
}

impl RunAgent {
    /// The configured agent `named`, its answers labelled or not.
    fn configured(named: &switchboard_config::NamedAgent, labelled: bool) -> RunAgent {
        RunAgent {
            name: Some(named.name.clone()),
            config: Arc::new(named.config.clone()),
            labelled,
        }
    }

    /// `text` as posted: with the agent's name before it or after it when answers are
    /// labelled (`answer_label`).
    pub fn label<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        match (&self.name, self.labelled, self.config.answer_label) {
            (Some(name), true, AnswerLabel::Prefix) => format!("**{name}:** {text}").into(),
            (Some(name), true, AnswerLabel::Footer) => format!("{text}\n-# {name}").into(),
            _ => text.into(),
        }
    }
}

/// `/agent set` bindings, by session: in memory, bounded.
#[derive(Default)]
pub struct Bindings {
    by_session: Mutex<HashMap<Snowflake, AgentName>>,
}

/// Why `/agent set` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// No configured agent has that name.
    #[error("'{name}' is not a configured agent{}", near.as_ref().map(|n| format!(" — did you mean `{n}`?")).unwrap_or_default())]
    Unknown {
        /// The name as given.
        name: String,
        /// The configured agent nearest to it.
        near: Option<AgentName>,
    },
    /// [`MAX_BOUND_SESSIONS`] sessions are bound already.
    #[error(
        "{MAX_BOUND_SESSIONS} sessions are bound to agents already; reset one with /agent reset"
    )]
    Full,
}

impl Bindings {
    /// The agent `/agent set` bound `session` to.
    pub fn get(&self, session: Snowflake) -> Option<AgentName> {
        self.lock().get(&session).cloned()
    }

    /// Binds `session` to the configured agent `name` (`None`: back to the config's).
    pub fn set(
        &self,
        config: &Config,
        session: Snowflake,
        name: Option<&str>,
    ) -> Result<(), BindError> {
        let mut map = self.lock();
        let Some(name) = name else {
            map.remove(&session);
            return Ok(());
        };
        let names = config.agents.names();
        let Some(found) = names.iter().find(|n| n.as_str() == name.trim()) else {
            return Err(BindError::Unknown {
                name: name.to_owned(),
                near: switchboard_agents::nearest_agent(name.trim(), &names),
            });
        };
        if map.len() >= MAX_BOUND_SESSIONS && !map.contains_key(&session) {
            return Err(BindError::Full);
        }
        map.insert(session, found.clone());
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Snowflake, AgentName>> {
        self.by_session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The agent that answers in `session`: see the module's doc. `own` is the bridge's own
/// config (`[agent]`, or the default agent's as the bridge was given it).
pub fn for_session(
    core: &Core,
    bindings: &Bindings,
    own: Arc<AgentConfig>,
    session: Snowflake,
) -> RunAgent {
    resolve(core, bindings, own, session).0
}

/// The agent a run must use because its trigger names one (a schedule's `agent`), when that
/// agent is still configured; `None`: the session's agent answers ([`for_session`]).
pub fn requested(config: &Config, trigger_agent: Option<&AgentName>) -> Option<RunAgent> {
    let named = config.agents.get(trigger_agent?.as_str())?;
    Some(RunAgent::configured(named, config.agents.agents.len() > 1))
}

/// What `/agent` shows for `session`.
pub fn describe(
    core: &Core,
    bindings: &Bindings,
    own: Arc<AgentConfig>,
    session: Snowflake,
) -> SessionAgent {
    let (agent, source) = resolve(core, bindings, own, session);
    let settings = core.settings();
    SessionAgent {
        agent: agent.name.map(|n| n.to_string()),
        source,
        agents: settings
            .config()
            .agents
            .names()
            .iter()
            .map(ToString::to_string)
            .collect(),
    }
}

fn resolve(
    core: &Core,
    bindings: &Bindings,
    own: Arc<AgentConfig>,
    session: Snowflake,
) -> (RunAgent, &'static str) {
    let settings = core.settings();
    let config = settings.config();
    if config.agents.agents.len() <= 1 {
        let agent = RunAgent {
            name: config.agents.agents.first().map(|a| a.name.clone()),
            config: own,
            labelled: false,
        };
        return (agent, "default");
    }
    // A thread answers with its channel's agent unless bound itself.
    let parent = core
        .surface()
        .session(session)
        .filter(|s| s.kind == SessionKind::Thread)
        .and_then(|s| s.parent_id);
    let bound = bindings
        .get(session)
        .or_else(|| parent.and_then(|p| bindings.get(p)))
        .and_then(|name| config.agents.get(name.as_str()));
    let configured = || {
        let binding = |id| {
            switchboard_config::session_settings(&config.sessions, id)
                .and_then(|s| s.agent.as_ref())
                .and_then(|name| config.agents.get(name.as_str()))
        };
        binding(session).or_else(|| parent.and_then(binding))
    };
    let (named, source) = match (bound, configured()) {
        (Some(named), _) => (Some(named), "set"),
        (None, Some(named)) => (Some(named), "config"),
        (None, None) => (config.agents.default_agent(), "default"),
    };
    let agent = match named {
        Some(named) => RunAgent::configured(named, true),
        None => RunAgent {
            name: None,
            config: own,
            labelled: false,
        },
    };
    (agent, source)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::parse(text, "test.toml").expect("a valid config")
    }

    const TWO: &str = "[agents]\ndefault = \"support\"\n[agents.support]\nrunner = \"demo\"\n[agents.release]\nrunner = \"demo\"\nanswer_label = \"footer\"\n";

    fn run_agent(config: &Config, name: &str, labelled: bool) -> RunAgent {
        RunAgent::configured(config.agents.get(name).expect("configured"), labelled)
    }

    #[test]
    fn answers_say_which_agent_wrote_them_only_when_labelled() {
        let config = config(TWO);
        assert_eq!(
            run_agent(&config, "support", true).label("hi"),
            "**support:** hi"
        );
        assert_eq!(
            run_agent(&config, "release", true).label("hi"),
            "hi\n-# release"
        );
        assert_eq!(run_agent(&config, "support", false).label("hi"), "hi");
    }

    #[test]
    fn a_trigger_that_names_a_configured_agent_runs_with_it_and_an_unknown_name_falls_back() {
        let config = config(TWO);
        let release = AgentName::parse("release").unwrap();
        let chosen = requested(&config, Some(&release)).expect("release is configured");
        assert_eq!(chosen.name.as_ref(), Some(&release));
        assert_eq!(chosen.config.answer_label, AnswerLabel::Footer);
        assert!(
            chosen.labelled,
            "two agents are configured: answers say which"
        );
        let gone = AgentName::parse("retired").unwrap();
        assert!(requested(&config, Some(&gone)).is_none());
        assert!(requested(&config, None).is_none());
    }

    #[test]
    fn bindings_name_configured_agents_and_stay_bounded() {
        let config = config(TWO);
        let bindings = Bindings::default();
        let session = Snowflake(1_000_000_000_000_000_401);
        assert_eq!(
            bindings.set(&config, session, Some("relase")),
            Err(BindError::Unknown {
                name: "relase".into(),
                near: Some(AgentName::parse("release").unwrap())
            })
        );
        bindings.set(&config, session, Some("release")).unwrap();
        assert_eq!(bindings.get(session).unwrap().as_str(), "release");
        bindings.set(&config, session, None).unwrap();
        assert_eq!(bindings.get(session), None);
        for id in 0..MAX_BOUND_SESSIONS as u64 {
            bindings
                .set(&config, Snowflake(id), Some("support"))
                .unwrap();
        }
        assert_eq!(
            bindings.set(&config, session, Some("support")),
            Err(BindError::Full)
        );
        // Rebinding a bound session still works when full.
        bindings
            .set(&config, Snowflake(0), Some("release"))
            .unwrap();
    }
}
