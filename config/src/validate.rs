//! The semantic pass: ids, alias names, clashes, addresses and env var names.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use entity::{is_valid_alias, normalize_name, AliasKind, Aliases, Snowflake};
use toml::Spanned;

use crate::raw::{RawAlias, RawConfig};
use crate::report::Collector;
use crate::{
    AgentConfig, AliasComments, Config, DiscordConfig, Known, OpenAiRunner, Principal, Quota,
    RateLimits, ReplyInThread, Runner, StoreConfig, StreamMode, ToolserverConfig,
};

pub(crate) const ID_HELP: &str = "a Discord id is 17 to 20 digits, written as a quoted string; in Discord, enable Developer Mode and use \"Copy ID\"";

/// [`bounded`] (with a note on what the number means: [`bounded_because`]) of the number at
/// `raw.KEY`, the problem named by `KEY` (`raw.KEY in PREFIX`: by `PREFIX.KEY`): the key is
/// written once, so it is always the number's.
macro_rules! bounded {
    ($c:expr, $raw:ident . $first:ident $(. $rest:ident)*, $range:expr) => {
        bounded_because(&$raw.$first$(.$rest)*, key!($first $(. $rest)*), $range, "", $c)
    };
    ($c:expr, $raw:ident . $first:ident $(. $rest:ident)*, $range:expr, $because:expr) => {
        bounded_because(&$raw.$first$(.$rest)*, key!($first $(. $rest)*), $range, $because, $c)
    };
    // A key of a table whose path is only known at run time (`agents.NAME`): `PREFIX.KEY`.
    ($c:expr, $raw:ident . $key:ident in $prefix:expr, $range:expr) => {
        bounded!($c, $raw.$key in $prefix, $range, "")
    };
    ($c:expr, $raw:ident . $key:ident in $prefix:expr, $range:expr, $because:expr) => {
        bounded_because(
            &$raw.$key,
            &format!("{}.{}", $prefix, stringify!($key)),
            $range,
            $because,
            $c,
        )
    };
}

/// A config key from its path (`toolserver.call_timeout_s`).
macro_rules! key {
    ($first:ident $(. $rest:ident)*) => {
        concat!(stringify!($first) $(, ".", stringify!($rest))*)
    };
}

pub(crate) fn validate(raw: RawConfig, known: &Known, c: &mut Collector) -> Option<Config> {
    let (aliases, alias_comments) = aliases(&raw, c);
    // First: tokens' `agent:NAME` entries and `[sessions.X] agent` name these.
    let agents = crate::agents::agents(&raw, known, &aliases, c);
    let agent_names = agents.names();
    for (index, value) in raw.discord.allowed_channel_ids.iter().enumerate() {
        let category = value
            .get_ref()
            .trim()
            .parse::<Snowflake>()
            .ok()
            .and_then(|id| known.categories.get(&id));
        if let Some(name) = category {
            c.add(
                Some(value.span()),
                format!("discord.allowed_channel_ids[{index}]"),
                format!("{} is a category ({name}), not a channel", value.get_ref().trim()),
                "a listed channel allows itself and its threads only, so this allows nothing; to allow every channel in the category, move the id to discord.allowed_category_ids",
            );
        }
    }
    let discord = DiscordConfig {
        token_env: env_name(&raw.discord.token_env, "discord.token_env", c),
        allowed_guild_ids: ids(
            &raw.discord.allowed_guild_ids,
            "discord.allowed_guild_ids",
            c,
        ),
        allowed_channel_ids: ids(
            &raw.discord.allowed_channel_ids,
            "discord.allowed_channel_ids",
            c,
        ),
        allowed_category_ids: ids(
            &raw.discord.allowed_category_ids,
            "discord.allowed_category_ids",
            c,
        ),
        admins: principals(&raw.discord.admins, "discord.admins", &aliases, c),
        allow_dms: raw.discord.allow_dms,
        allow_role_mentions: raw.discord.allow_role_mentions,
        api_base_url: raw
            .discord
            .api_base_url
            .as_ref()
            .and_then(|url| base_url(url, c)),
        invalid_request_percent: bounded!(
            c,
            raw.discord.invalid_request_percent,
            1..=100,
            "percent of Discord's 10,000 invalid requests per 10 minutes"
        ) as u8,
        shard_count: crate::cluster::shard_count(raw.discord.shard_count.as_ref(), c),
    };
    let toolserver = ToolserverConfig {
        bind: bind(&raw.toolserver.bind, c),
        operator_token_env: env_name(
            &raw.toolserver.operator_token_env,
            "toolserver.operator_token_env",
            c,
        ),
        insecure_no_auth: raw.toolserver.insecure_no_auth,
        console: raw.toolserver.console,
        metrics_public: *raw.toolserver.metrics_public.get_ref(),
        allowed_hosts: allowed_hosts(&raw.toolserver.allowed_hosts, c),
        call_timeout: Duration::from_secs(bounded!(c, raw.toolserver.call_timeout_s, 1..=3600)),
        max_concurrent_calls: bounded!(c, raw.toolserver.max_concurrent_calls, 1..=100_000)
            as usize,
        download_max_bytes: bounded!(c, raw.toolserver.download_max_bytes, 1..=1024 * 1024 * 1024),
        max_parts_per_send: bounded!(c, raw.toolserver.max_parts_per_send, 1..=100) as usize,
        max_connections: bounded!(
            c,
            raw.toolserver.max_connections,
            1..=65_536,
            "each open connection holds a file descriptor; more clients wait in the accept queue, so a few hundred is plenty for agents on one machine"
        ) as usize,
        header_read_timeout: Duration::from_millis(bounded!(
            c,
            raw.toolserver.header_read_timeout_ms,
            1..=300_000,
            "milliseconds a client may take to send a request head (and a keep-alive connection may wait for its next request); 10000 suits every local client"
        )),
        idle_timeout: Duration::from_secs(bounded!(
            c,
            raw.toolserver.idle_timeout_s,
            1..=3600,
            "seconds a connection may move no bytes while no call runs on it"
        )),
        body_read_timeout: Duration::from_millis(bounded!(
            c,
            raw.toolserver.body_read_timeout_ms,
            1..=600_000,
            "milliseconds a request's whole body may take to arrive after its head; bodies are at most 1 MiB"
        )),
        rate_limits: rate_limits(&raw.toolserver.rate_limits, c),
        tokens: crate::governance::tokens(&raw.toolserver.tokens, known, &agent_names, c),
    };
    if toolserver.insecure_no_auth && !toolserver.bind.ip().is_loopback() {
        c.add(
            Some(raw.toolserver.bind.span()),
            "toolserver.bind",
            format!(
                "insecure_no_auth is set but the tool server binds {}, which is not loopback",
                toolserver.bind
            ),
            "serving without a token is only allowed on 127.0.0.1 or [::1]: bind loopback, or set an operator token and remove insecure_no_auth",
        );
    }
    if toolserver.metrics_public && !toolserver.bind.ip().is_loopback() {
        c.add(
            Some(raw.toolserver.metrics_public.span()),
            "toolserver.metrics_public",
            format!(
                "metrics_public is set but the tool server binds {}, which is not loopback",
                toolserver.bind
            ),
            "/metrics is served without a token only on 127.0.0.1 or [::1]: bind loopback, or remove metrics_public and scrape with the operator token",
        );
    }
    let (url, path_note) = store_url(&raw.store, c);
    let store = StoreConfig {
        url,
        path_note,
        messages_per_channel: bounded!(c, raw.store.messages_per_channel, 1..=1_000_000) as usize,
        backfill_max_messages: bounded!(
            c,
            raw.store.backfill_max_messages,
            0..=10_000,
            "missed messages fetched per channel after a fresh identify; 0 turns backfill off"
        ) as usize,
        backfill_max_age: Duration::from_secs(bounded!(
            c,
            raw.store.backfill_max_age_s,
            60..=2_592_000,
            "seconds: missed messages older than this are not fetched"
        )),
    };
    let cluster = crate::cluster::cluster(&raw.cluster, discord.shard_count, &store.url, c);
    let agent = agents.default_agent().map(|a| a.config.clone());
    let token_names: Vec<String> = toolserver.tokens.iter().map(|t| t.name.clone()).collect();
    let permissions = crate::governance::permissions(
        &raw.permissions,
        &aliases,
        known,
        &token_names,
        raw.toolserver.console,
        c,
    );
    let workspace = raw
        .workspace
        .as_ref()
        .map(|w| crate::workspace::workspace(w, c));
    let sessions = crate::governance::sessions(
        &raw.sessions,
        &aliases,
        known,
        workspace.is_some(),
        &agent_names,
        c,
    );
    if let Some(agent) = &agent {
        for (name, table) in &raw.sessions {
            let Some(tokens) = table.context_tokens.as_ref() else {
                continue;
            };
            let value = *tokens.get_ref();
            if (1_000..=2_000_000).contains(&value) && value <= agent.answer_tokens as u64 {
                c.add(
                    Some(tokens.span()),
                    format!("sessions.{}.context_tokens", name.get_ref()),
                    format!(
                        "{value} leaves no room for the request: it must be more than agent.answer_tokens ({})",
                        agent.answer_tokens
                    ),
                    "raise this session's context_tokens or lower agent.answer_tokens",
                );
            }
        }
    }
    let hooks = crate::governance::hooks(&raw.hooks, known, c);
    let audit = crate::governance::audit(&raw.audit, c);
    let schedules = crate::plans::schedules(&raw.schedules, &agent_names, &aliases, c);
    let scheduler = crate::plans::scheduler(raw.scheduler.as_ref(), c);
    let budgets = crate::plans::budgets(raw.budgets.as_ref(), &aliases, &toolserver.tokens, c);
    Some(Config {
        schedules,
        scheduler,
        budgets,
        agent,
        agents,
        discord,
        aliases,
        alias_comments,
        toolserver,
        store,
        cluster,
        permissions,
        sessions,
        hooks,
        audit,
        workspace,
    })
}

/// A number within `range`; out of range is a problem at its span and yields the nearest bound.
pub(crate) fn bounded(
    value: &Spanned<u64>,
    key: &str,
    range: std::ops::RangeInclusive<u64>,
    c: &mut Collector,
) -> u64 {
    bounded_because(value, key, range, "", c)
}

/// [`bounded`], with a note on what the number means added to the help line.
pub(crate) fn bounded_because(
    value: &Spanned<u64>,
    key: &str,
    range: std::ops::RangeInclusive<u64>,
    because: &str,
    c: &mut Collector,
) -> u64 {
    let mut findings = switchboard_agents::Findings::new();
    let number = switchboard_agents::bounded(value, key, range, because, &mut findings);
    c.report(findings);
    number
}

/// One agent table, `[agent]` or `[agents.NAME]`: `prefix` is its key path (`agent`,
/// `agents.NAME`), so every problem names the table it is in.
pub(crate) fn agent_config(
    raw: &crate::raw::RawAgent,
    prefix: &str,
    known: &Known,
    aliases: &Aliases,
    c: &mut Collector,
) -> Option<AgentConfig> {
    let runner = match raw.runner.get_ref().as_str() {
        "command" => match &raw.command {
            Some(command)
                if !command.get_ref().is_empty() && !command.get_ref()[0].trim().is_empty() =>
            {
                let words = command.get_ref();
                Some(Runner::Command {
                    program: words[0].clone(),
                    args: words[1..].to_vec(),
                    cwd: PathBuf::from(raw.cwd.clone().unwrap_or_else(|| ".".to_owned())),
                })
            }
            Some(command) => {
                c.add(
                    Some(command.span()),
                    format!("{prefix}.command"),
                    "the command is empty",
                    "write the program and its arguments, such as [\"./agent.sh\", \"--fast\"]",
                );
                None
            }
            None => {
                c.add(
                    Some(raw.runner.span()),
                    format!("{prefix}.command"),
                    "runner = \"command\" needs agent.command",
                    "add command = [\"program\", \"arg\", ...]",
                );
                None
            }
        },
        "openai" => openai_runner(raw, prefix, c),
        "demo" => Some(Runner::Demo),
        other => {
            c.add(
                Some(raw.runner.span()),
                format!("{prefix}.runner"),
                format!("unknown runner '{other}'"),
                "use runner = \"command\", runner = \"openai\" or runner = \"demo\"",
            );
            None
        }
    };
    let mut env_passthrough = Vec::new();
    for (index, name) in raw.env_passthrough.iter().enumerate() {
        let checked = env_name(name, &format!("{prefix}.env_passthrough[{index}]"), c);
        env_passthrough.push(checked);
    }
    // Every key is checked before the runner decides, so all problems are reported at once.
    let timeout = Duration::from_secs(bounded!(c, raw.timeout_s in prefix, 1..=86_400));
    let context_messages = bounded!(c, raw.context_messages in prefix, 0..=1_000) as usize;
    let context_tokens = bounded!(
        c,
        raw.context_tokens in prefix,
        1_000..=2_000_000,
        "tokens one request to the model may carry, the answer's reserve included"
    ) as usize;
    let answer_tokens = bounded!(
        c,
        raw.answer_tokens in prefix,
        1..=1_000_000,
        "tokens kept for the model's answer"
    ) as usize;
    // Only when both are in range: one out-of-range number is one problem, not two.
    if answer_tokens >= context_tokens
        && *raw.answer_tokens.get_ref() == answer_tokens as u64
        && *raw.context_tokens.get_ref() == context_tokens as u64
    {
        c.add(
            Some(raw.answer_tokens.span()),
            format!("{prefix}.answer_tokens"),
            format!(
                "{answer_tokens} leaves no room for the request: it must be less than agent.context_tokens ({context_tokens})"
            ),
            format!(
                "lower answer_tokens (such as {}) or raise context_tokens",
                (context_tokens / 8).max(1)
            ),
        );
    }
    let protected_tools = crate::governance::tool_scope(
        &raw.protected_tools,
        &format!("{prefix}.protected_tools"),
        known,
        &[],
        c,
    );
    let memory_max_chars = bounded!(
        c,
        raw.memory_max_chars in prefix,
        100..=100_000,
        "characters of notes one memory scope may hold"
    ) as usize;
    let instructions_max_chars = bounded!(
        c,
        raw.instructions_max_chars in prefix,
        0..=1_000_000,
        "characters of instruction files in the system message; 0 reads none"
    ) as usize;
    let mut prompts = Vec::new();
    if let Some(table) = &raw.prompts {
        for (key, prompt) in &table.get_ref().0 {
            let name = format!("{prefix}.prompts.\"{key}\"");
            if prompt.trim().is_empty() {
                c.add(
                    Some(table.span()),
                    name.clone(),
                    "the prompt is empty",
                    "write the system prompt for models matching this glob, or remove the key",
                );
            }
            if key != "default" {
                if let Err(error) = globset::GlobBuilder::new(key)
                    .case_insensitive(true)
                    .build()
                {
                    c.add(
                        Some(table.span()),
                        name,
                        format!("not a model-name glob: {}", error.kind()),
                        "write a glob such as \"gpt-*\" or \"claude-*\" (quoted), or default",
                    );
                    continue;
                }
            }
            prompts.push((key.clone(), prompt.clone()));
        }
    }
    // The TOML parser does not keep a table's order, so the most specific glob (the longest)
    // comes first; among as long ones, by text.
    prompts.sort_by(|(a, _), (b, _)| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    let queue_per_session = bounded!(c, raw.queue_per_session in prefix, 0..=1_000) as usize;
    let batch = match raw.batch.as_ref().map(|b| (b, b.get_ref().as_str())) {
        None | Some((_, "turn")) => crate::BatchMode::Turn,
        Some((_, "off")) => crate::BatchMode::Off,
        Some((spanned, other)) => {
            c.add(
                Some(spanned.span()),
                format!("{prefix}.batch"),
                format!("unknown batch mode '{other}'"),
                "use batch = \"turn\" (messages that queued while a run was busy are answered together by the next run) or batch = \"off\" (one run per message)",
            );
            crate::BatchMode::Turn
        }
    };
    let batch_max = bounded!(
        c,
        raw.batch_max in prefix,
        1..=100,
        "queued messages one run answers together"
    ) as usize;
    let max_concurrent_runs = bounded!(c, raw.max_concurrent_runs in prefix, 1..=256) as usize;
    let missed_triggers = match raw
        .missed_triggers
        .as_ref()
        .map(|m| (m, m.get_ref().as_str()))
    {
        None | Some((_, "reply")) => crate::MissedTriggers::Reply,
        Some((_, "ignore")) => crate::MissedTriggers::Ignore,
        Some((value, other)) => {
            c.add(
                Some(value.span()),
                format!("{prefix}.missed_triggers"),
                format!("unknown value '{other}'"),
                "use missed_triggers = \"reply\" (answer triggers missed while the gateway was away, when younger than agent.missed_max_age_s) or \"ignore\"",
            );
            crate::MissedTriggers::Reply
        }
    };
    let interrupted = match raw.interrupted.as_ref().map(|m| (m, m.get_ref().as_str())) {
        None | Some((_, "notify")) => crate::Interrupted::Notify,
        Some((_, "rerun")) => crate::Interrupted::Rerun,
        Some((value, other)) => {
            c.add(
                Some(value.span()),
                format!("{prefix}.interrupted"),
                format!("unknown value '{other}'"),
                "use interrupted = \"notify\" (a run cut short by a node's death says so in reply to its question) or \"rerun\" (it runs again)",
            );
            crate::Interrupted::Notify
        }
    };
    // Answered triggers are remembered for eight days (the store's record), so a missed
    // trigger may be at most a week old to be answered once only.
    let missed_max_age = Duration::from_secs(
        bounded!(c, raw.missed_max_age_s in prefix, 1..=604_800, "seconds; at most a week"),
    );
    let active_channel_ids = ids(
        &raw.active_channel_ids,
        &format!("{prefix}.active_channel_ids"),
        c,
    );
    let allow_bots = ids(&raw.allow_bots, &format!("{prefix}.allow_bots"), c);
    let max_bot_turns = bounded!(c, raw.max_bot_turns in prefix, 1..=100) as u32;
    let trusted_users = principals(
        &raw.trusted_users,
        &format!("{prefix}.trusted_users"),
        aliases,
        c,
    );
    for (index, principal) in trusted_users.iter().enumerate() {
        if matches!(principal, Principal::Role(_)) {
            c.add(
                Some(raw.trusted_users[index].span()),
                format!("{prefix}.trusted_users[{index}]"),
                "roles can't be trusted users yet: switchboard does not keep members' roles for past messages",
                "list the users themselves (\"@Mira\" or a user id)",
            );
        }
    }
    let stream = match raw.stream.as_ref().map(|s| (s, s.get_ref().as_str())) {
        None | Some((_, "edit")) => StreamMode::Edit,
        Some((_, "off")) => StreamMode::Off,
        Some((spanned, other)) => {
            c.add(
                Some(spanned.span()),
                format!("{prefix}.stream"),
                format!("unknown stream mode '{other}'"),
                "use stream = \"edit\" (a draft edited as the answer is written) or stream = \"off\"",
            );
            StreamMode::Edit
        }
    };
    let reply_in_thread = match raw
        .reply_in_thread
        .as_ref()
        .map(|s| (s, s.get_ref().as_str()))
    {
        None | Some((_, "never")) => ReplyInThread::Never,
        Some((_, "always")) => ReplyInThread::Always,
        Some((_, "long")) => ReplyInThread::Long,
        Some((spanned, other)) => {
            c.add(
                Some(spanned.span()),
                format!("{prefix}.reply_in_thread"),
                format!("unknown reply_in_thread '{other}'"),
                "use reply_in_thread = \"never\" (answer in the channel), \"always\" (answer in a thread started from the message) or \"long\" (a thread only when the answer is longer than one message)",
            );
            ReplyInThread::Never
        }
    };
    let stream_interval =
        Duration::from_millis(bounded!(c, raw.stream_interval_ms in prefix, 250..=60_000));
    let answer_label = match raw.answer_label.as_ref().map(|s| (s, s.get_ref().as_str())) {
        None | Some((_, "prefix")) => crate::AnswerLabel::Prefix,
        Some((_, "footer")) => crate::AnswerLabel::Footer,
        Some((_, "off")) => crate::AnswerLabel::Off,
        Some((spanned, other)) => {
            c.add(
                Some(spanned.span()),
                format!("{prefix}.answer_label"),
                format!("unknown answer_label '{other}'"),
                "use answer_label = \"prefix\" (the agent's name before the answer), \"footer\" (on a small line after it) or \"off\"; it shows only when more than one agent is configured",
            );
            crate::AnswerLabel::Prefix
        }
    };
    let config = AgentConfig {
        answer_label,
        runner: runner?,
        timeout,
        env_passthrough,
        context_messages,
        context_tokens,
        answer_tokens,
        protected_tools,
        memory_max_chars,
        instructions_max_chars,
        prompts,
        queue_per_session,
        batch,
        batch_max,
        max_concurrent_runs,
        active_channel_ids,
        allow_bots,
        tool_scope: match &raw.tool_scope {
            Some(scope) => {
                crate::governance::tool_scope(scope, &format!("{prefix}.tool_scope"), known, &[], c)
            }
            None => crate::DEFAULT_TOOL_SCOPE
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
        },
        error_reply: raw
            .error_reply
            .clone()
            .unwrap_or_else(|| "Sorry, I couldn't finish that ({reason}).".to_owned()),
        max_bot_turns,
        trusted_users,
        stream,
        stream_interval,
        reply_in_thread,
        missed_triggers,
        interrupted,
        price: crate::plans::price(
            raw.price_in_per_mtok.as_ref(),
            raw.price_out_per_mtok.as_ref(),
            prefix,
            c,
        ),
        missed_max_age,
    };
    Some(config)
}

fn openai_runner(raw: &crate::raw::RawAgent, prefix: &str, c: &mut Collector) -> Option<Runner> {
    let base_url = match &raw.base_url {
        Some(url) => base_url_value(url, &format!("{prefix}.base_url"), c),
        None => {
            c.add(
                Some(raw.runner.span()),
                format!("{prefix}.base_url"),
                "runner = \"openai\" needs agent.base_url",
                "add base_url = \"http://127.0.0.1:PORT/v1\" (an OpenAI-compatible server)",
            );
            None
        }
    };
    let model = match &raw.model {
        Some(model) if !model.get_ref().trim().is_empty() => Some(model.get_ref().clone()),
        _ => {
            c.add(
                Some(raw.runner.span()),
                format!("{prefix}.model"),
                "runner = \"openai\" needs agent.model",
                "add model = \"the model's name on that server\"",
            );
            None
        }
    };
    let api_key_env = raw
        .api_key_env
        .as_ref()
        .map(|name| env_name(name, &format!("{prefix}.api_key_env"), c));
    let max_tool_rounds = bounded!(c, raw.max_tool_rounds in prefix, 1..=64) as usize;
    Some(Runner::OpenAi(OpenAiRunner {
        base_url: base_url?,
        model: model?,
        api_key_env,
        system_prompt: raw.system_prompt.clone().unwrap_or_else(|| {
            "You are an assistant in a Discord server. Use the tools to read and act in Discord. Answer briefly.".to_owned()
        }),
        max_tool_rounds,
    }))
}

fn rate_limits(raw: &crate::raw::RawRateLimits, c: &mut Collector) -> RateLimits {
    let quota = |rate: &Spanned<u64>, burst: &Spanned<u64>, key: &str, c: &mut Collector| Quota {
        per_minute: bounded(
            rate,
            &format!("toolserver.rate_limits.{key}_per_minute"),
            1..=100_000_000,
            c,
        ) as u32,
        burst: bounded(
            burst,
            &format!("toolserver.rate_limits.{key}_burst"),
            1..=10_000_000,
            c,
        ) as u32,
    };
    RateLimits {
        per_caller: quota(
            &raw.per_caller_per_minute,
            &raw.per_caller_burst,
            "per_caller",
            c,
        ),
        per_channel_mutating: quota(
            &raw.per_channel_mutating_per_minute,
            &raw.per_channel_mutating_burst,
            "per_channel_mutating",
            c,
        ),
    }
}

pub(crate) fn env_name(value: &Spanned<String>, key: &str, c: &mut Collector) -> String {
    let name = value.get_ref();
    let mut bytes = name.bytes();
    let valid = matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        c.add(
            Some(value.span()),
            key,
            format!("'{name}' is not an environment variable name"),
            "this key holds the NAME of the environment variable that holds the secret (letters, digits, '_'), never the secret itself; put the secret in the environment or in .env",
        );
    }
    name.clone()
}

fn ids(values: &[Spanned<String>], key: &str, c: &mut Collector) -> Vec<Snowflake> {
    let mut ids = Vec::with_capacity(values.len());
    for (index, value) in values.iter().enumerate() {
        match value.get_ref().trim().parse::<Snowflake>() {
            Ok(id) => ids.push(id),
            Err(error) => c.add(
                Some(value.span()),
                format!("{key}[{index}]"),
                error.to_string(),
                ID_HELP,
            ),
        }
    }
    ids
}

/// Users and roles by alias (`@Mira`, `Mira`, `@oncall`), mention (`<@id>`, `<@&id>`) or id.
pub(crate) fn principals(
    values: &[Spanned<String>],
    key: &str,
    aliases: &Aliases,
    c: &mut Collector,
) -> Vec<Principal> {
    let mut principals = Vec::with_capacity(values.len());
    for (index, value) in values.iter().enumerate() {
        let written = value.get_ref().trim();
        let key_path = format!("{key}[{index}]");
        if let Some(id) = written
            .strip_prefix("<@&")
            .and_then(|rest| rest.strip_suffix('>'))
        {
            match id.parse::<Snowflake>() {
                Ok(id) => principals.push(Principal::Role(id)),
                Err(error) => c.add(Some(value.span()), &key_path, error.to_string(), ID_HELP),
            }
            continue;
        }
        if let Some(id) = written
            .strip_prefix("<@")
            .and_then(|rest| rest.strip_suffix('>'))
        {
            match id.trim_start_matches('!').parse::<Snowflake>() {
                Ok(id) => principals.push(Principal::User(id)),
                Err(error) => c.add(Some(value.span()), &key_path, error.to_string(), ID_HELP),
            }
            continue;
        }
        if !written.is_empty() && written.bytes().all(|b| b.is_ascii_digit()) {
            match written.parse::<Snowflake>() {
                Ok(id) => principals.push(Principal::Id(id)),
                Err(error) => c.add(Some(value.span()), &key_path, error.to_string(), ID_HELP),
            }
            continue;
        }
        let name = written.strip_prefix('@').unwrap_or(written);
        if let Some(id) = aliases.id_for(AliasKind::User, name) {
            principals.push(Principal::User(id));
        } else if let Some(id) = aliases.id_for(AliasKind::Role, name) {
            principals.push(Principal::Role(id));
        } else {
            let known = aliases
                .iter(AliasKind::User)
                .chain(aliases.iter(AliasKind::Role))
                .map(|(alias, _)| alias);
            let help = match entity::nearest(name, known) {
                Some(near) => format!("did you mean \"@{near}\"? Name a user or role alias from [entity.users] / [entity.roles], or write the id"),
                None => "name a user or role alias from [entity.users] / [entity.roles], or write the id as a quoted string".to_owned(),
            };
            c.add(
                Some(value.span()),
                &key_path,
                format!("'{written}' is not a configured user or role alias, nor an id"),
                help,
            );
        }
    }
    principals
}

fn base_url(url: &Spanned<String>, c: &mut Collector) -> Option<String> {
    base_url_value(url, "discord.api_base_url", c)
}

fn base_url_value(url: &Spanned<String>, key: &str, c: &mut Collector) -> Option<String> {
    let value = url.get_ref().trim();
    let rest = value
        .strip_prefix("http://")
        .or_else(|| value.strip_prefix("https://"));
    let host = rest.map(|r| r.split('/').next().unwrap_or(""));
    let valid = matches!(host, Some(h) if !h.is_empty()) && !value.contains(char::is_whitespace);
    if valid {
        Some(value.trim_end_matches('/').to_owned())
    } else {
        c.add(
            Some(url.span()),
            key,
            format!("'{value}' is not an http(s) base URL"),
            "write it like \"http://127.0.0.1:PORT\"",
        );
        None
    }
}

fn bind(value: &Spanned<String>, c: &mut Collector) -> SocketAddr {
    match value.get_ref().trim().parse::<SocketAddr>() {
        Ok(addr) => addr,
        Err(_) => {
            c.add(
                Some(value.span()),
                "toolserver.bind",
                format!("'{}' is not an address to listen on", value.get_ref()),
                "write an IP address and port, such as \"127.0.0.1:7311\" or \"[::1]:7311\" (host names are not accepted)",
            );
            crate::DEFAULT_BIND
                .parse()
                .expect("the default bind address parses")
        }
    }
}

/// `toolserver.allowed_hosts`: host names as `Host` carries them (no scheme, port or path),
/// lowercased, a trailing dot dropped.
fn allowed_hosts(values: &[Spanned<String>], c: &mut Collector) -> Vec<String> {
    let mut hosts = Vec::with_capacity(values.len());
    for value in values {
        let text = value.get_ref().trim();
        let host = text.trim_end_matches('.').to_ascii_lowercase();
        let usable = !host.is_empty()
            && host.len() <= 253
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if usable {
            hosts.push(host);
        } else {
            c.add(
                Some(value.span()),
                "toolserver.allowed_hosts",
                format!("'{text}' is not a host name"),
                "write the name as browsers send it in Host, without scheme, port or path, such as \"switchboard.lan\" (the bind address and localhost are always allowed)",
            );
        }
    }
    hosts
}

type RawAliasMap = BTreeMap<Spanned<String>, Spanned<RawAlias>>;

fn aliases(raw: &RawConfig, c: &mut Collector) -> (Aliases, AliasComments) {
    let mut aliases = Aliases::new();
    let mut comments = AliasComments::new();
    let tables: [(AliasKind, &str, &RawAliasMap); 3] = [
        (AliasKind::User, "entity.users", &raw.entity.users),
        (AliasKind::Session, "entity.sessions", &raw.entity.sessions),
        (AliasKind::Role, "entity.roles", &raw.entity.roles),
    ];
    // Normalized name -> (kind, spelling) of the first user or role alias that claimed it.
    let mut mention_names: HashMap<String, (AliasKind, String)> = HashMap::new();
    for (kind, table, entries) in tables {
        let mut in_file_order: Vec<_> = entries.iter().collect();
        in_file_order.sort_by_key(|(name, _)| name.span().start);
        let mut seen: HashMap<String, String> = HashMap::new();
        for (name, value) in in_file_order {
            let alias = name.get_ref();
            let key_path = format!("{table}.{alias}");
            let id = match value.get_ref().discord.trim().parse::<Snowflake>() {
                Ok(id) => Some(id),
                Err(error) => {
                    c.add(Some(value.span()), &key_path, error.to_string(), ID_HELP);
                    None
                }
            };
            if !is_valid_alias(alias) {
                c.add(
                    Some(name.span()),
                    &key_path,
                    format!("'{alias}' is not a valid alias name"),
                    "use letters, digits, '_', '-' and '.', starting with a letter, digit or '_' (the characters a @mention or #token can hold)",
                );
                continue;
            }
            let normalized = normalize_name(alias);
            if kind != AliasKind::Session && matches!(normalized.as_str(), "everyone" | "here") {
                c.add(
                    Some(name.span()),
                    &key_path,
                    format!("'{alias}' is Discord's own @{normalized}; an alias cannot take that name"),
                    "rename the alias: @everyone and @here are Discord's words and switchboard never turns them into pings",
                );
                continue;
            }
            if let Some(first) = seen.get(&normalized) {
                c.add(
                    Some(name.span()),
                    &key_path,
                    format!("alias '{alias}' differs from '{first}' only by case"),
                    "aliases are matched ignoring case: remove or rename one of them",
                );
                continue;
            }
            seen.insert(normalized.clone(), alias.clone());
            if kind != AliasKind::Session {
                match mention_names.get(&normalized) {
                    Some((other_kind, other)) if *other_kind != kind => {
                        c.add(
                            Some(name.span()),
                            &key_path,
                            format!(
                                "'{alias}' is both a {} alias ('{other}') and a {} alias",
                                other_kind.as_str(),
                                kind.as_str()
                            ),
                            "@name must mean one thing: rename the user or the role alias",
                        );
                        continue;
                    }
                    _ => {
                        mention_names.insert(normalized, (kind, alias.clone()));
                    }
                }
            }
            if let Some(id) = id {
                // Names were checked above, so adding cannot fail.
                let _ = aliases.add(kind, alias, id);
                if let Some(comment) = &value.get_ref().comment {
                    comments.insert((kind, alias.clone()), comment.clone());
                }
            }
        }
    }
    (aliases, comments)
}

/// `store.url`, or `store.path` read as `sqlite://PATH` (with the note that says so), or the
/// default. A scheme switchboard does not know is a located problem naming the ones it knows.
fn store_url(
    raw: &crate::raw::RawStore,
    c: &mut Collector,
) -> (switchboard_store::StoreUrl, Option<String>) {
    use switchboard_store::{StoreUrl, DEFAULT_STORE_URL, KNOWN_SCHEMES};
    let default = || StoreUrl::parse(DEFAULT_STORE_URL).unwrap_or(StoreUrl::Memory);
    match (&raw.url, &raw.path) {
        (Some(url), path) => {
            if let Some(path) = path {
                c.add(
                    Some(path.span()),
                    "store.path",
                    "store.path and store.url both name the store",
                    "keep store.url and remove store.path (store.path = \"PATH\" is the older spelling of store.url = \"sqlite://PATH\")",
                );
            }
            match StoreUrl::parse(url.get_ref()) {
                Ok(parsed) => (parsed, None),
                Err(error) => {
                    c.add(
                        Some(url.span()),
                        "store.url",
                        error.to_string(),
                        format!(
                            "write one of {} — e.g. \"{DEFAULT_STORE_URL}\", \"sqlite:///var/lib/switchboard/store.db\", \"memory:\" or \"postgres://switchboard@localhost/switchboard\"",
                            KNOWN_SCHEMES.join(", ")
                        ),
                    );
                    (default(), None)
                }
            }
        }
        (None, Some(path)) => {
            if path.get_ref().trim().is_empty() {
                c.add(
                    Some(path.span()),
                    "store.path",
                    "the store path is empty",
                    format!("set store.url, e.g. \"{DEFAULT_STORE_URL}\", or \"memory:\""),
                );
                return (default(), None);
            }
            let url = StoreUrl::from_store_path(path.get_ref());
            let note = format!(
                "store.path is read as store.url = \"{}\"; write that instead",
                url.spelling()
            );
            (url, Some(note))
        }
        (None, None) => (default(), None),
    }
}
