//! Which agent answers in a session, and how its answer says so.
//!
//! A session's agent is, in order: the one `/agent set` bound it to (kept in the store, so it
//! holds on every node and across restarts), the
//! one `[sessions.X] agent` binds it (or its channel, for a thread) to, else `agents.default`.
//! With one agent configured (`[agent]` alone included) the bridge's own config answers
//! everywhere and no answer is labelled, as before named agents.

use std::sync::Arc;

use entity::Snowflake;
use switchboard_config::{AgentConfig, AgentName, AnswerLabel, Config};
use switchboard_engine::handoff::SessionAgent;
use switchboard_engine::surface::SessionKind;
use switchboard_engine::Core;
use switchboard_store::AgentBindingStore;

/// Most sessions `/agent set` may bind (an admin's command, but the table must stay bounded).
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
    /// The store could not read or keep the binding; nothing changed.
    #[error("the binding could not be kept ({0}); nothing changed, try again")]
    Store(String),
}

/// Binds `session` to the configured agent `name` in `store` (`None`: back to the config's),
/// durably: every node reads it at each run's start.
pub async fn bind(
    config: &Config,
    store: &dyn AgentBindingStore,
    session: Snowflake,
    name: Option<&str>,
) -> Result<(), BindError> {
    let store_error = |e: switchboard_store::StoreError| BindError::Store(e.to_string());
    let Some(name) = name else {
        return store.bind_agent(session, None).await.map_err(store_error);
    };
    let names = config.agents.names();
    let Some(found) = names.iter().find(|n| n.as_str() == name.trim()) else {
        return Err(BindError::Unknown {
            name: name.to_owned(),
            near: switchboard_agents::nearest_agent(name.trim(), &names),
        });
    };
    if store
        .bound_agent(session)
        .await
        .map_err(store_error)?
        .is_none()
    {
        let census = store.agent_bindings().await.map_err(store_error)?;
        if census.len() >= MAX_BOUND_SESSIONS {
            return Err(BindError::Full);
        }
    }
    store
        .bind_agent(session, Some(found.to_string()))
        .await
        .map_err(store_error)
}

/// The configured agent `/agent set` bound `session` (or, for a thread, its channel) to, read
/// from the store; `None` when none is, or the one bound is no longer configured. A store that
/// cannot answer binds nothing (the config's agent answers) and says so in the log.
async fn bound(
    core: &Core,
    store: &dyn AgentBindingStore,
    config: &Config,
    session: Snowflake,
) -> Option<AgentName> {
    let read = |id: Snowflake| async move {
        match store.bound_agent(id).await {
            Ok(name) => name.and_then(|n| config.agents.get(&n).map(|a| a.name.clone())),
            Err(error) => {
                tracing::warn!(session = %id, %error, "could not read the session's /agent set binding; the config's agent answers");
                None
            }
        }
    };
    if let Some(name) = read(session).await {
        return Some(name);
    }
    read(thread_parent(core, session)?).await
}

/// A thread's channel (a thread answers with its channel's agent unless bound itself).
fn thread_parent(core: &Core, session: Snowflake) -> Option<Snowflake> {
    core.surface()
        .session(session)
        .filter(|s| s.kind == SessionKind::Thread)
        .and_then(|s| s.parent_id)
}

/// The agent that answers in `session`: see the module's doc. `own` is the bridge's own
/// config (`[agent]`, or the default agent's as the bridge was given it).
pub async fn for_session(
    core: &Core,
    bindings: &dyn AgentBindingStore,
    own: Arc<AgentConfig>,
    session: Snowflake,
) -> RunAgent {
    resolve(core, bindings, own, session).await.0
}

/// The agent a run must use because its trigger names one (a schedule's `agent`), when that
/// agent is still configured; `None`: the session's agent answers ([`for_session`]).
pub fn requested(config: &Config, trigger_agent: Option<&AgentName>) -> Option<RunAgent> {
    let named = config.agents.get(trigger_agent?.as_str())?;
    Some(RunAgent::configured(named, config.agents.agents.len() > 1))
}

/// What `/agent` shows for `session`.
pub async fn describe(
    core: &Core,
    bindings: &dyn AgentBindingStore,
    own: Arc<AgentConfig>,
    session: Snowflake,
) -> SessionAgent {
    let (agent, source) = resolve(core, bindings, own, session).await;
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

async fn resolve(
    core: &Core,
    bindings: &dyn AgentBindingStore,
    own: Arc<AgentConfig>,
    session: Snowflake,
) -> (RunAgent, &'static str) {
    let settings = core.settings();
    let config = settings.config();
    // One agent configured: nothing to bind, and no store read per run.
    if config.agents.agents.len() <= 1 {
        let agent = RunAgent {
            name: config.agents.agents.first().map(|a| a.name.clone()),
            config: own,
            labelled: false,
        };
        return (agent, "default");
    }
    let bound = bound(core, bindings, config, session)
        .await
        .and_then(|name| config.agents.get(name.as_str()));
    let parent = thread_parent(core, session);
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

    #[tokio::test]
    async fn bindings_name_configured_agents_are_kept_in_the_store_and_stay_bounded() {
        let config = config(TWO);
        let store = switchboard_store::MemoryBackend::new(Default::default());
        let session = Snowflake(1_000_000_000_000_000_401);
        assert_eq!(
            bind(&config, &store, session, Some("relase")).await,
            Err(BindError::Unknown {
                name: "relase".into(),
                near: Some(AgentName::parse("release").unwrap())
            })
        );
        bind(&config, &store, session, Some(" release "))
            .await
            .unwrap();
        assert_eq!(
            store.bound_agent(session).await.unwrap().as_deref(),
            Some("release"),
            "kept in the store, by its configured name"
        );
        bind(&config, &store, session, None).await.unwrap();
        assert_eq!(store.bound_agent(session).await.unwrap(), None);
        for id in 0..MAX_BOUND_SESSIONS as u64 {
            store
                .bind_agent(Snowflake(id), Some("support".into()))
                .await
                .unwrap();
        }
        assert_eq!(
            bind(&config, &store, session, Some("support")).await,
            Err(BindError::Full)
        );
        // Rebinding a bound session still works when full.
        bind(&config, &store, Snowflake(0), Some("release"))
            .await
            .unwrap();
        // A closed store refuses with a typed error, not a panic.
        use switchboard_store::Backend as _;
        store.close().await.unwrap();
        assert!(matches!(
            bind(&config, &store, session, None).await,
            Err(BindError::Store(_))
        ));
    }
}
