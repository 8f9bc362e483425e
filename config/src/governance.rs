//! Governance: `[permissions]` (allow / ask / deny rules, approvers), `[sessions.*]` tool
//! scopes, `[[toolserver.tokens]]`, `[hooks]` and `[audit]` — read, then checked against the
//! aliases and the callables the tool server registers (an unknown tool name never widens
//! anything: it is an error with a did-you-mean).

use std::collections::BTreeMap;
use std::time::Duration;

use entity::{AliasKind, Aliases, Snowflake};
use serde::Deserialize;
use toml::Spanned;

use crate::report::Collector;
use crate::validate::{bounded, env_name, principals, ID_HELP};
use crate::{Known, Principal};

// ---- the file's shape ----

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPermissions {
    #[serde(default = "default_policy")]
    pub default: Spanned<String>,
    #[serde(default)]
    pub approvers: Vec<Spanned<String>>,
    #[serde(default = "default_ask_timeout_s")]
    pub ask_timeout_s: Spanned<u64>,
    #[serde(default)]
    pub approvals_channel: Option<Spanned<String>>,
    #[serde(default = "yes")]
    pub console_approves: bool,
    #[serde(default)]
    pub allow_self_approval: bool,
    #[serde(default)]
    pub rules: Vec<RawRule>,
}

impl Default for RawPermissions {
    fn default() -> Self {
        RawPermissions {
            default: default_policy(),
            approvers: Vec::new(),
            ask_timeout_s: default_ask_timeout_s(),
            approvals_channel: None,
            console_approves: true,
            allow_self_approval: false,
            rules: Vec::new(),
        }
    }
}

fn yes() -> bool {
    true
}

fn default_policy() -> Spanned<String> {
    Spanned::new(0..0, "allow".to_owned())
}

fn default_ask_timeout_s() -> Spanned<u64> {
    Spanned::new(0..0, 300)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRule {
    pub tool: Spanned<String>,
    pub policy: Spanned<String>,
    #[serde(default)]
    pub session: Option<Spanned<String>>,
    #[serde(default)]
    pub origin: Option<Spanned<String>>,
    #[serde(default)]
    pub caller: Option<Spanned<String>>,
    #[serde(default)]
    pub command: Option<Spanned<String>>,
    #[serde(default)]
    pub path: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSessionSettings {
    #[serde(default)]
    pub tool_scope: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub workspace: Option<Spanned<String>>,
    #[serde(default)]
    pub agent: Option<Spanned<String>>,
    pub system_prompt: Option<Spanned<String>>,
    #[serde(default)]
    pub context_tokens: Option<Spanned<u64>>,
    #[serde(default)]
    pub require_mention: Option<bool>,
}

/// The `[sessions]` table: a session (alias or id) → its settings.
pub(crate) type RawSessions = BTreeMap<Spanned<String>, RawSessionSettings>;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawToken {
    pub name: Spanned<String>,
    pub token_env: Spanned<String>,
    #[serde(default)]
    pub scope: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHooks {
    #[serde(default)]
    pub before: Vec<RawHook>,
    #[serde(default)]
    pub after: Vec<RawHook>,
    #[serde(default)]
    pub prompt: Vec<RawPromptHook>,
    #[serde(default = "default_on_error")]
    pub on_error: Spanned<String>,
}

impl Default for RawHooks {
    fn default() -> Self {
        RawHooks {
            before: Vec::new(),
            after: Vec::new(),
            prompt: Vec::new(),
            on_error: default_on_error(),
        }
    }
}

fn default_on_error() -> Spanned<String> {
    Spanned::new(0..0, "deny".to_owned())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHook {
    pub tool: Spanned<String>,
    pub command: Spanned<Vec<String>>,
    #[serde(default = "default_hook_timeout_ms")]
    pub timeout_ms: Spanned<u64>,
}

/// `[[hooks.prompt]]`: a command that may rewrite the built-in runner's request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPromptHook {
    pub command: Spanned<Vec<String>>,
    #[serde(default = "default_hook_timeout_ms")]
    pub timeout_ms: Spanned<u64>,
    #[serde(default)]
    pub required: bool,
}

fn default_hook_timeout_ms() -> Spanned<u64> {
    Spanned::new(0..0, 5_000)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAudit {
    #[serde(default = "default_text_chars")]
    pub text_chars: Spanned<u64>,
    #[serde(default)]
    pub redact: bool,
    #[serde(default = "default_retention_days")]
    pub retention_days: Spanned<u64>,
}

impl Default for RawAudit {
    fn default() -> Self {
        RawAudit {
            text_chars: default_text_chars(),
            redact: false,
            retention_days: default_retention_days(),
        }
    }
}

fn default_text_chars() -> Spanned<u64> {
    Spanned::new(0..0, 200)
}

fn default_retention_days() -> Spanned<u64> {
    Spanned::new(0..0, 90)
}

// ---- the typed config ----

/// What the permission stage does with a call: run it, ask a person first, or refuse it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// The call runs.
    Allow,
    /// An approver must say yes in Discord (or the console) before it runs.
    Ask,
    /// The call is refused (`denied`, exit 3) and reaches nothing.
    Deny,
}

impl Policy {
    /// `allow`, `ask` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Allow => "allow",
            Policy::Ask => "ask",
            Policy::Deny => "deny",
        }
    }
}

/// Where a rule applies: one session by id, or every session whose alias matches a glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionMatch {
    /// This channel, thread or DM (given as an id, `<#id>`, or an alias).
    Id(Snowflake),
    /// Sessions whose configured alias matches this glob (`*` for any run of characters;
    /// case-insensitive), such as `release-*`.
    AliasGlob(String),
}

/// Whose calls a rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallerMatch {
    /// Agent runs (their capability tokens): the default.
    Run,
    /// The operator token.
    Operator,
    /// The named service token `[[toolserver.tokens]]` with this name.
    Token(String),
}

/// One `[[permissions.rules]]` entry. Rules are evaluated in order; the last one that matches
/// decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// A callable id or glob (`surface.messages.*`).
    pub tool: String,
    /// What a matching call gets.
    pub policy: Policy,
    /// Where the call acts; `None`: anywhere.
    pub session: Option<SessionMatch>,
    /// The session the run started in; `None`: any.
    pub origin: Option<SessionMatch>,
    /// Whose calls.
    pub caller: CallerMatch,
    /// `command = "GLOB"` (only for `shell.run`): matched against each pipeline segment of
    /// the command on its own (`switchboard_commandline`); the strictest segment decides.
    pub command: Option<String>,
    /// `path = "GLOB"` (only for `fs.*`): matched against the path the call names, relative
    /// to the workspace (`*` stays within a directory, `**` crosses them).
    pub path: Option<String>,
    /// Where the rule is written, for `/tools` and the audit log: `permissions.rules[N]`.
    pub name: String,
}

/// `[permissions]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permissions {
    /// What calls no rule matches get (`permissions.default`, default `allow`).
    pub default: Policy,
    /// Who may answer an ask: users and roles (`permissions.approvers`). Empty: nobody can, so
    /// every ask is denied when it times out.
    pub approvers: Vec<Principal>,
    /// An ask nobody answers within this is denied (`permissions.ask_timeout_s`, default 300).
    pub ask_timeout: Duration,
    /// Where approval requests are posted (`permissions.approvals_channel`); `None`: the session
    /// the run started in (for a call without a run: the session it acts in).
    pub approvals_channel: Option<Snowflake>,
    /// Whether the operator console may approve and deny too (`permissions.console_approves`,
    /// default true).
    pub console_approves: bool,
    /// Whether someone may decide an ask their own call or run waits on
    /// (`permissions.allow_self_approval`, default false): the token or operator that made the
    /// call, or the Discord user whose message started the run.
    pub allow_self_approval: bool,
    /// The rules, in file order.
    pub rules: Vec<Rule>,
}

impl Default for Permissions {
    fn default() -> Self {
        Permissions {
            default: Policy::Allow,
            approvers: Vec::new(),
            ask_timeout: Duration::from_secs(300),
            approvals_channel: None,
            console_approves: true,
            allow_self_approval: false,
            rules: Vec::new(),
        }
    }
}

/// `[sessions.NAME]`: a session's own settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSettings {
    /// The session (from the table's key: an alias or an id).
    pub channel_id: Snowflake,
    /// What a run started here may call (globs): intersected with `agent.tool_scope`. `None`:
    /// no limit beyond the agent's.
    pub tool_scope: Option<Vec<String>>,
    /// `workspace = "PATH"`: the project directory this session's workspace is (instead of
    /// `ROOT/<session id>`); its threads work there too.
    pub workspace: Option<std::path::PathBuf>,
    /// `agent = "NAME"`: the agent that answers here (and in its threads) instead of
    /// `agents.default`.
    pub agent: Option<switchboard_agents::AgentName>,
    /// `system_prompt = "…"`: appended to the `openai` runner's system message for runs in
    /// this session (and its threads) only.
    pub system_prompt: Option<String>,
    /// `context_tokens = N` (1,000 to 2,000,000, more than `agent.answer_tokens`): the token
    /// budget of the `openai` runner's requests here, in place of `agent.context_tokens`.
    pub context_tokens: Option<usize>,
    /// `require_mention = true | false`: whether a message here must mention the bot (or reply
    /// to it) to start a run, overriding the channel's rule (`agent.active_channel_ids`, DMs,
    /// the bot's threads); its threads inherit it. `None`: the channel's rule.
    pub require_mention: Option<bool>,
}

/// `[[toolserver.tokens]]`: a named service token (for MCP clients, CI, the console) with a
/// scope of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedToken {
    /// Its name, as rules (`caller = "token:NAME"`) and the audit log name it.
    pub name: String,
    /// The environment variable that holds the token.
    pub token_env: String,
    /// Callable globs it may call; `console` also lets it log in to the operator console.
    pub scope: Vec<String>,
}

/// What happens when a hook fails or times out (`hooks.on_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookFailure {
    /// The call is refused (the default).
    Deny,
    /// The call goes on as if the hook had allowed it.
    Allow,
}

/// One `[[hooks.before]]` / `[[hooks.after]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    /// A callable id or glob it applies to.
    pub tool: String,
    /// The program and its arguments (no shell).
    pub command: Vec<String>,
    /// How long it may take before it counts as failed.
    pub timeout: Duration,
}

/// One `[[hooks.prompt]]` entry: run before each request of the built-in `openai` runner
/// to the model, with the request's messages; may rewrite the system prompt and the messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptHook {
    /// The program and its arguments (no shell).
    pub command: Vec<String>,
    /// How long it may take before it counts as failed (`timeout_ms`, default 5,000).
    pub timeout: Duration,
    /// `required` (default false): a failure fails the run instead of sending the request
    /// as it was.
    pub required: bool,
}

/// `[hooks]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hooks {
    /// Run after the permission stage, before the handler; may refuse or rewrite the input.
    pub before: Vec<Hook>,
    /// Run after the handler; may transform the answer.
    pub after: Vec<Hook>,
    /// Run before each model request of the built-in runner, in order; may rewrite it.
    pub prompt: Vec<PromptHook>,
    /// What a failing before/after hook means (prompt hooks: their own `required`).
    pub on_error: HookFailure,
}

impl Default for Hooks {
    fn default() -> Self {
        Hooks {
            before: Vec::new(),
            after: Vec::new(),
            prompt: Vec::new(),
            on_error: HookFailure::Deny,
        }
    }
}

/// `[audit]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    /// Text fields of a call's input are cut to this many characters in the log
    /// (`audit.text_chars`, default 200).
    pub text_chars: usize,
    /// Keep only a hash of each input, not the input (`audit.redact`).
    pub redact: bool,
    /// Rows older than this are pruned (`audit.retention_days`, default 90).
    pub retention: Duration,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            text_chars: 200,
            redact: false,
            retention: Duration::from_secs(90 * 86_400),
        }
    }
}

// ---- checks ----

/// The scope word that lets a named token log in to the console.
pub const CONSOLE_SCOPE: &str = "console";

/// A glob (`*` for any run of characters) against a whole string: the records crate's, which
/// audit filters match with too.
pub use switchboard_records::glob_matches;

/// A callable glob that must match at least one registered callable (when the callables are
/// known), else a located error with the nearest id.
pub(crate) fn tool_glob(
    value: &Spanned<String>,
    key: &str,
    known: &Known,
    extra: &[&str],
    c: &mut Collector,
) -> String {
    let glob = value.get_ref().trim().to_owned();
    let Some(callables) = &known.callables else {
        return glob;
    };
    if extra.contains(&glob.as_str()) || callables.iter().any(|id| glob_matches(&glob, id)) {
        return glob;
    }
    let near = entity::nearest(&glob.replace('*', ""), callables.iter().map(String::as_str));
    let help = match near {
        Some(near) => format!("did you mean `{near}`? Name a callable (`tools --list` shows them) or a glob such as `surface.messages.*`"),
        None => "name a callable (`tools --list` shows them) or a glob such as `surface.messages.*`".to_owned(),
    };
    c.add(
        Some(value.span()),
        key,
        format!("'{glob}' matches no callable"),
        help,
    );
    glob
}

/// Every entry of a tool scope.
pub(crate) fn tool_scope(
    values: &[Spanned<String>],
    key: &str,
    known: &Known,
    extra: &[&str],
    c: &mut Collector,
) -> Vec<String> {
    values
        .iter()
        .enumerate()
        .map(|(index, value)| tool_glob(value, &format!("{key}[{index}]"), known, extra, c))
        .collect()
}

fn policy(value: &Spanned<String>, key: &str, c: &mut Collector) -> Policy {
    match value.get_ref().trim() {
        "allow" => Policy::Allow,
        "ask" => Policy::Ask,
        "deny" => Policy::Deny,
        other => {
            c.add(
                Some(value.span()),
                key,
                format!("unknown policy '{other}'"),
                "use \"allow\", \"ask\" or \"deny\"",
            );
            Policy::Deny
        }
    }
}

/// A session written as an id, `<#id>` or an alias (with or without `#`).
pub(crate) fn session_ref(
    value: &Spanned<String>,
    key: &str,
    aliases: &Aliases,
    c: &mut Collector,
) -> Option<Snowflake> {
    let written = value.get_ref().trim();
    let bare = written
        .strip_prefix("<#")
        .and_then(|rest| rest.strip_suffix('>'))
        .unwrap_or(written);
    if !bare.is_empty() && bare.bytes().all(|b| b.is_ascii_digit()) {
        return match bare.parse::<Snowflake>() {
            Ok(id) => Some(id),
            Err(error) => {
                c.add(Some(value.span()), key, error.to_string(), ID_HELP);
                None
            }
        };
    }
    let name = bare.trim_start_matches('#');
    match aliases.id_for(AliasKind::Session, name) {
        Some(id) => Some(id),
        None => {
            let known = aliases.iter(AliasKind::Session).map(|(alias, _)| alias);
            let help = match entity::nearest(name, known) {
                Some(near) => format!("did you mean \"#{near}\"? Name a session alias from [entity.sessions], or write the id"),
                None => "name a session alias from [entity.sessions], or write the channel id as a quoted string".to_owned(),
            };
            c.add(
                Some(value.span()),
                key,
                format!("'{written}' is not a configured session alias, nor an id"),
                help,
            );
            None
        }
    }
}

fn session_match(
    value: &Spanned<String>,
    key: &str,
    aliases: &Aliases,
    c: &mut Collector,
) -> Option<SessionMatch> {
    let written = value.get_ref().trim();
    if written.contains('*') {
        let glob = entity::normalize_name(written.trim_start_matches('#'));
        let any = aliases
            .iter(AliasKind::Session)
            .any(|(alias, _)| glob_matches(&glob, &entity::normalize_name(alias)));
        if !any {
            c.add(
                Some(value.span()),
                key,
                format!("'{written}' matches no session alias"),
                "a session glob matches the aliases in [entity.sessions] (such as \"release-*\"); add the alias, or name the session by id",
            );
        }
        return Some(SessionMatch::AliasGlob(glob));
    }
    session_ref(value, key, aliases, c).map(SessionMatch::Id)
}

fn caller_match(
    value: Option<&Spanned<String>>,
    key: &str,
    token_names: &[String],
    c: &mut Collector,
) -> CallerMatch {
    let Some(value) = value else {
        return CallerMatch::Run;
    };
    let written = value.get_ref().trim();
    match written {
        "run" => CallerMatch::Run,
        "operator" => CallerMatch::Operator,
        _ => match written.strip_prefix("token:") {
            Some(name) if token_names.iter().any(|t| t == name) => {
                CallerMatch::Token(name.to_owned())
            }
            Some(name) => {
                c.add(
                    Some(value.span()),
                    key,
                    format!("no [[toolserver.tokens]] entry is named '{name}'"),
                    "name a token defined in [[toolserver.tokens]], or use \"run\" or \"operator\"",
                );
                CallerMatch::Token(name.to_owned())
            }
            None => {
                c.add(
                    Some(value.span()),
                    key,
                    format!("unknown caller '{written}'"),
                    "use \"run\" (agent runs, the default), \"operator\", or \"token:NAME\"",
                );
                CallerMatch::Run
            }
        },
    }
}

/// `command = "GLOB"`: a glob the command parser's matcher compiles, on a rule for `shell.run`.
fn command_glob(
    value: &Spanned<String>,
    tool: &Spanned<String>,
    key: &str,
    c: &mut Collector,
) -> String {
    if !glob_matches(tool.get_ref().trim(), "shell.run") {
        c.add(
            Some(value.span()),
            key,
            format!(
                "command = applies to shell.run, but this rule's tool is '{}'",
                tool.get_ref().trim()
            ),
            "write tool = \"shell.run\" on a rule with a command glob",
        );
    }
    rule_glob(value, key, "command", "git status*", c, |glob| {
        switchboard_commandline::CommandGlob::new(glob).map(drop).map_err(|error| {
            (error.to_string(), "`*` matches anything, `?` one character, `[…]` a class, `{a,b}` alternatives; escape a literal one with `\\`")
        })
    })
}

/// `path = "GLOB"`: a path glob, on a rule for `fs.*`.
fn path_glob(
    value: &Spanned<String>,
    tool: &Spanned<String>,
    key: &str,
    c: &mut Collector,
) -> String {
    let tool = tool.get_ref().trim();
    if !tool.starts_with("fs.") {
        c.add(
            Some(value.span()),
            key,
            format!("path = applies to fs.* callables, but this rule's tool is '{tool}'"),
            "write tool = \"fs.write\" (or another fs.* callable or \"fs.*\") on a rule with a path glob",
        );
    }
    rule_glob(value, key, "path", "src/**", c, |glob| {
        path_matcher(glob).map(drop).map_err(|error| {
            (format!("path glob {glob:?} is not valid: {error}"), "`*` matches within a directory, `**` across directories, `?` one character, `{a,b}` alternatives")
        })
    })
}

/// A rule's `command`/`path` glob, trimmed; empty, or refused by `compile` (what is wrong and
/// the help line), it is a finding at its span.
fn rule_glob(
    value: &Spanned<String>,
    key: &str,
    what: &str,
    example: &str,
    c: &mut Collector,
    compile: impl FnOnce(&str) -> Result<(), (String, &'static str)>,
) -> String {
    let glob = value.get_ref().trim().to_owned();
    if glob.is_empty() {
        c.add(
            Some(value.span()),
            key,
            format!("the {what} glob is empty"),
            format!("write a glob such as \"{example}\""),
        );
    } else if let Err((message, help)) = compile(&glob) {
        c.add(Some(value.span()), key, message, help);
    }
    glob
}

/// A `path = "GLOB"` matcher: `*` stays within one directory, `**` crosses them.
pub fn path_matcher(glob: &str) -> Result<globset::GlobMatcher, globset::Error> {
    Ok(globset::GlobBuilder::new(glob)
        .literal_separator(true)
        .backslash_escape(true)
        .build()?
        .compile_matcher())
}

pub(crate) fn permissions(
    raw: &RawPermissions,
    aliases: &Aliases,
    known: &Known,
    token_names: &[String],
    console: bool,
    c: &mut Collector,
) -> Permissions {
    let default = policy(&raw.default, "permissions.default", c);
    let approvers = principals(&raw.approvers, "permissions.approvers", aliases, c);
    let ask_timeout = Duration::from_secs(bounded(
        &raw.ask_timeout_s,
        "permissions.ask_timeout_s",
        5..=86_400,
        c,
    ));
    let approvals_channel = raw
        .approvals_channel
        .as_ref()
        .and_then(|value| session_ref(value, "permissions.approvals_channel", aliases, c));
    let rules = raw
        .rules
        .iter()
        .enumerate()
        .map(|(index, rule)| {
            let key = |field: &str| format!("permissions.rules[{index}].{field}");
            Rule {
                tool: tool_glob(&rule.tool, &key("tool"), known, &[], c),
                policy: policy(&rule.policy, &key("policy"), c),
                session: rule
                    .session
                    .as_ref()
                    .and_then(|s| session_match(s, &key("session"), aliases, c)),
                origin: rule
                    .origin
                    .as_ref()
                    .and_then(|s| session_match(s, &key("origin"), aliases, c)),
                caller: caller_match(rule.caller.as_ref(), &key("caller"), token_names, c),
                command: rule
                    .command
                    .as_ref()
                    .map(|glob| command_glob(glob, &rule.tool, &key("command"), c)),
                path: rule
                    .path
                    .as_ref()
                    .map(|glob| path_glob(glob, &rule.tool, &key("path"), c)),
                name: format!("permissions.rules[{index}]"),
            }
        })
        .collect();
    let has_ask = default == Policy::Ask || raw.rules.iter().any(|r| r.policy.get_ref() == "ask");
    // The operator console answers asks too when it is served and may decide them, so a
    // console-only setup needs no Discord approver.
    let console_answers = console && raw.console_approves;
    if has_ask && !console_answers && approvers.is_empty() && raw.approvers.is_empty() {
        c.add(
            Some(raw.default.span()),
            "permissions.approvers",
            "some calls are asked, but nobody may approve them",
            "add the users or roles who may answer to permissions.approvers (\"@Mira\", \"@oncall\"), or answer in the operator console (toolserver.console = true with permissions.console_approves = true); otherwise every ask is denied when it times out",
        );
    }
    Permissions {
        default,
        approvers,
        ask_timeout,
        approvals_channel,
        console_approves: raw.console_approves,
        allow_self_approval: raw.allow_self_approval,
        rules,
    }
}

pub(crate) fn sessions(
    raw: &RawSessions,
    aliases: &Aliases,
    known: &Known,
    workspace_on: bool,
    agents: &[switchboard_agents::AgentName],
    c: &mut Collector,
) -> Vec<SessionSettings> {
    let mut settings: Vec<SessionSettings> = Vec::new();
    for (name, table) in raw {
        let key = format!("sessions.{}", name.get_ref());
        let Some(channel_id) = session_ref(name, &key, aliases, c) else {
            continue;
        };
        if settings.iter().any(|s| s.channel_id == channel_id) {
            c.add(
                Some(name.span()),
                &key,
                format!("session {channel_id} has settings twice (by alias and by id)"),
                "keep one [sessions.*] table per session",
            );
            continue;
        }
        let tool_scope = table
            .tool_scope
            .as_ref()
            .map(|scope| tool_scope(scope, &format!("{key}.tool_scope"), known, &[], c));
        let workspace = table.workspace.as_ref().and_then(|path| {
            crate::workspace::session_workspace(path, &format!("{key}.workspace"), workspace_on, c)
        });
        let agent = table.agent.as_ref().and_then(|name| {
            crate::agents::session_agent(name, &format!("{key}.agent"), agents, c)
        });
        let system_prompt = table.system_prompt.as_ref().and_then(|prompt| {
            if prompt.get_ref().trim().is_empty() {
                c.add(
                    Some(prompt.span()),
                    format!("{key}.system_prompt"),
                    "the prompt is empty",
                    "write what runs in this session should be told, or remove the key",
                );
                return None;
            }
            Some(prompt.get_ref().clone())
        });
        let context_tokens = table.context_tokens.as_ref().map(|tokens| {
            crate::validate::bounded_because(
                tokens,
                &format!("{key}.context_tokens"),
                1_000..=2_000_000,
                "tokens one request to the model may carry here, the answer's reserve included",
                c,
            ) as usize
        });
        settings.push(SessionSettings {
            channel_id,
            tool_scope,
            workspace,
            agent,
            system_prompt,
            context_tokens,
            require_mention: table.require_mention,
        });
    }
    settings
}

pub(crate) fn tokens(
    raw: &[RawToken],
    known: &Known,
    agents: &[switchboard_agents::AgentName],
    c: &mut Collector,
) -> Vec<NamedToken> {
    let mut tokens: Vec<NamedToken> = Vec::new();
    for (index, token) in raw.iter().enumerate() {
        let key = |field: &str| format!("toolserver.tokens[{index}].{field}");
        let name = token.name.get_ref().trim().to_owned();
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !valid {
            c.add(
                Some(token.name.span()),
                key("name"),
                format!("'{name}' is not a token name"),
                "use letters, digits, '-' and '_' (rules name it as caller = \"token:NAME\")",
            );
        } else if tokens.iter().any(|t| t.name == name) {
            c.add(
                Some(token.name.span()),
                key("name"),
                format!("two tokens are named '{name}'"),
                "give each [[toolserver.tokens]] entry its own name",
            );
        }
        tokens.push(NamedToken {
            name,
            token_env: env_name(&token.token_env, &key("token_env"), c),
            scope: token
                .scope
                .iter()
                .enumerate()
                .map(|(index, value)| {
                    let key = format!("{}[{index}]", key("scope"));
                    crate::agents::token_agent_entry(value, &key, agents, c)
                        .unwrap_or_else(|| tool_glob(value, &key, known, &[CONSOLE_SCOPE], c))
                })
                .collect(),
        });
    }
    tokens
}

pub(crate) fn hooks(raw: &RawHooks, known: &Known, c: &mut Collector) -> Hooks {
    let on_error = match raw.on_error.get_ref().trim() {
        "deny" => HookFailure::Deny,
        "allow" => HookFailure::Allow,
        other => {
            c.add(
                Some(raw.on_error.span()),
                "hooks.on_error",
                format!("unknown value '{other}'"),
                "use \"deny\" (a failing hook refuses the call; the default) or \"allow\"",
            );
            HookFailure::Deny
        }
    };
    let list = |hooks: &[RawHook], table: &str, c: &mut Collector| -> Vec<Hook> {
        hooks
            .iter()
            .enumerate()
            .filter_map(|(index, hook)| {
                let key = |field: &str| format!("hooks.{table}[{index}].{field}");
                let tool = tool_glob(&hook.tool, &key("tool"), known, &[], c);
                let (command, timeout) =
                    hook_command(&hook.command, &hook.timeout_ms, &key, "./check-send.sh", c)?;
                Some(Hook {
                    tool,
                    command,
                    timeout,
                })
            })
            .collect()
    };
    let prompt = raw
        .prompt
        .iter()
        .enumerate()
        .filter_map(|(index, hook)| {
            let key = |field: &str| format!("hooks.prompt[{index}].{field}");
            let (command, timeout) = hook_command(
                &hook.command,
                &hook.timeout_ms,
                &key,
                "./rewrite-prompt.sh",
                c,
            )?;
            Some(PromptHook {
                command,
                timeout,
                required: hook.required,
            })
        })
        .collect();
    Hooks {
        before: list(&raw.before, "before", c),
        after: list(&raw.after, "after", c),
        prompt,
        on_error,
    }
}

/// A hook's command line (not empty) and timeout (1 ms to 10 minutes); `None` (reported)
/// without a program.
fn hook_command(
    command: &Spanned<Vec<String>>,
    timeout_ms: &Spanned<u64>,
    key: &dyn Fn(&str) -> String,
    example: &str,
    c: &mut Collector,
) -> Option<(Vec<String>, Duration)> {
    let timeout = Duration::from_millis(bounded(timeout_ms, &key("timeout_ms"), 1..=600_000, c));
    let words = command.get_ref();
    if words.is_empty() || words[0].trim().is_empty() {
        c.add(
            Some(command.span()),
            key("command"),
            "the command is empty",
            format!("write the program and its arguments, such as [\"{example}\", \"--strict\"]"),
        );
        return None;
    }
    Some((words.clone(), timeout))
}

pub(crate) fn audit(raw: &RawAudit, c: &mut Collector) -> AuditConfig {
    AuditConfig {
        text_chars: bounded(&raw.text_chars, "audit.text_chars", 0..=100_000, c) as usize,
        redact: raw.redact,
        retention: Duration::from_secs(
            bounded(&raw.retention_days, "audit.retention_days", 1..=36_500, c) * 86_400,
        ),
    }
}

/// Sessions by id, for lookups: the settings of `channel_id`, when it has any.
pub fn session_settings(
    settings: &[SessionSettings],
    channel_id: Snowflake,
) -> Option<&SessionSettings> {
    settings.iter().find(|s| s.channel_id == channel_id)
}
