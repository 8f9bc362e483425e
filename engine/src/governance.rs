//! Governance inside the pipeline: which callables a caller may see (its token's scope, and for
//! an agent run its session's scope, with `/tools` overrides), what the permission rules decide
//! for a call; the audit log and the overrides are kept in the store's [`AuditStore`] and
//! [`ScopeStore`].

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use entity::{AliasKind, Aliases, Snowflake};
use serde_json::Value;
use switchboard_config::{glob_matches, CallerMatch, Permissions, Policy, SessionMatch};

use switchboard_store::{AuditStore, ScopeStore};

use crate::auth::{scope_allows, Caller};

pub use switchboard_records::audit::{AuditEntry, AuditFilter, AuditPage, AuditRow};

/// What the permission stage decided, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Allow, ask or deny.
    pub policy: Policy,
    /// The rule that decided (`permissions.rules[2]`), or `permissions.default`.
    pub by: Cow<'static, str>,
}

/// How strict a policy is: allow < ask < deny.
fn severity(policy: Policy) -> u8 {
    match policy {
        Policy::Allow => 0,
        Policy::Ask => 1,
        Policy::Deny => 2,
    }
}

/// A verdict ordered by its policy's strictness (for `switchboard_commandline::decide`).
#[derive(Debug, Clone)]
struct Ranked(Verdict);

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        severity(self.0.policy) == severity(other.0.policy)
    }
}
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        severity(self.0.policy).cmp(&severity(other.0.policy))
    }
}

/// What `command =` and `path =` rules look at in a call.
#[derive(Debug, Clone, Default)]
pub struct CallArgs {
    /// `shell.run`'s command, parsed.
    pub command: Option<switchboard_commandline::ParsedCommand>,
    /// An `fs.*` call's path, relative to the workspace (as [`relative_path`] makes it).
    pub path: Option<String>,
}

impl CallArgs {
    /// The arguments of `input` that rules for `tool_id` can match: `command` for
    /// `shell.run`, `path` for `fs.*` (made relative to `workspace` when it is inside it).
    pub fn of(tool_id: &str, input: &Value, workspace: Option<&std::path::Path>) -> CallArgs {
        let text = |field: &str| input.get(field).and_then(Value::as_str);
        CallArgs {
            command: (tool_id == "shell.run")
                .then(|| text("command"))
                .flatten()
                .map(switchboard_commandline::parse),
            path: tool_id
                .starts_with("fs.")
                .then(|| text("path").unwrap_or("."))
                .map(|path| relative_path(path, workspace)),
        }
    }
}

/// A path as `path =` globs match it: relative to the workspace, `.` and `..` folded away
/// lexically (`a/../b` is `b`). An absolute path inside `workspace` loses that prefix; one
/// outside it, or a `..` past the root, is kept as written (the callable refuses it).
pub fn relative_path(path: &str, workspace: Option<&std::path::Path>) -> String {
    use std::path::{Component, Path};
    let written = Path::new(path);
    let inside = match workspace {
        Some(root) if written.is_absolute() => match written.strip_prefix(root) {
            Ok(rest) => rest,
            Err(_) => return path.to_owned(),
        },
        _ if written.is_absolute() => return path.to_owned(),
        _ => written,
    };
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in inside.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return path.to_owned();
                }
            }
            Component::RootDir | Component::Prefix(_) => return path.to_owned(),
        }
    }
    if parts.is_empty() {
        return ".".to_owned();
    }
    parts
        .iter()
        .map(|p| p.to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// A rule's argument matchers, compiled once per config. A glob that does not compile (the
/// config refuses those, so only a rule built by hand) matches nothing: `Some(None)`.
#[derive(Debug, Clone, Default)]
struct ArgMatchers {
    command: Option<Option<switchboard_commandline::CommandGlob>>,
    path: Option<Option<globset::GlobMatcher>>,
}

impl ArgMatchers {
    fn of(rule: &switchboard_config::Rule) -> ArgMatchers {
        ArgMatchers {
            command: rule
                .command
                .as_deref()
                .map(|glob| switchboard_commandline::CommandGlob::new(glob).ok()),
            path: rule
                .path
                .as_deref()
                .map(|glob| switchboard_config::path_matcher(glob).ok()),
        }
    }
}

/// Who calls, as rules see it.
fn caller_matches(rule: &CallerMatch, caller: &Caller) -> bool {
    match (rule, caller) {
        (CallerMatch::Run, Caller::Capability(_)) => true,
        (CallerMatch::Operator, Caller::Operator | Caller::Unauthenticated) => true,
        (CallerMatch::Token(name), Caller::Token(token)) => &token.name == name,
        _ => false,
    }
}

/// The configured part of governance — permission rules, the aliases rules name sessions by,
/// and `[sessions.*]` scopes — as one snapshot: a reload swaps it whole, and a call decides
/// with the one it started with.
#[derive(Debug, Clone, Default)]
pub struct GovernanceRules {
    permissions: Permissions,
    /// Each rule's `command =` / `path =` matchers, by the rule's index.
    matchers: Vec<ArgMatchers>,
    aliases: Aliases,
    /// `[sessions.*]` tool scopes from the config.
    configured: HashMap<Snowflake, Vec<String>>,
}

impl GovernanceRules {
    /// From the config's permissions, aliases and session scopes.
    pub fn new(
        permissions: Permissions,
        aliases: Aliases,
        configured: impl IntoIterator<Item = (Snowflake, Vec<String>)>,
    ) -> Self {
        GovernanceRules {
            matchers: permissions.rules.iter().map(ArgMatchers::of).collect(),
            permissions,
            aliases,
            configured: configured.into_iter().collect(),
        }
    }

    /// The rules of a validated config.
    pub fn from_config(config: &switchboard_config::Config) -> Self {
        GovernanceRules::new(
            config.permissions.clone(),
            config.aliases.clone(),
            config
                .sessions
                .iter()
                .filter_map(|s| s.tool_scope.clone().map(|scope| (s.channel_id, scope))),
        )
    }

    /// The permissions config.
    pub fn permissions(&self) -> &Permissions {
        &self.permissions
    }

    fn session_matches(&self, rule: &SessionMatch, session: Snowflake) -> bool {
        match rule {
            SessionMatch::Id(id) => *id == session,
            SessionMatch::AliasGlob(glob) => self
                .aliases
                .alias_for(AliasKind::Session, session)
                .is_some_and(|alias| glob_matches(glob, &entity::normalize_name(alias))),
        }
    }

    /// The verdict for one call without arguments: [`GovernanceRules::decide_with`] where
    /// rules with a `command =` or `path =` matcher never match.
    pub fn decide(&self, tool_id: &str, caller: &Caller, targets: &[Snowflake]) -> Verdict {
        self.decide_with(tool_id, caller, targets, &CallArgs::default())
    }

    /// The verdict for one call: for each session it acts in (or once, when it acts in none),
    /// the last rule that matches decides, else `permissions.default`; across sessions the most
    /// restrictive verdict wins.
    ///
    /// A `shell.run` command is decided segment by segment (each pipeline segment matched on
    /// its own against `command =` globs, the strictest segment's verdict wins); a command the
    /// parser cannot see into (`$(…)`, `eval`, `sh -c`, …) gets the strictest verdict any rule
    /// for `shell.run` with this caller could give. A `path =` glob matches the path the call
    /// names, relative to the workspace.
    pub fn decide_with(
        &self,
        tool_id: &str,
        caller: &Caller,
        targets: &[Snowflake],
        args: &CallArgs,
    ) -> Verdict {
        let origin = caller.capability().map(|c| c.grant.session_id);
        let fallback = || -> Verdict {
            // An operator callable's scope already says who may call it (the operator, a
            // token naming it, an approver's or admin's click): `permissions.default`
            // governs calls, not governance itself, so a default of ask or deny cannot
            // stop every approval.
            if crate::auth::is_operator_callable(tool_id) {
                Verdict {
                    policy: Policy::Allow,
                    by: Cow::Borrowed("operator callable"),
                }
            } else {
                Verdict {
                    policy: self.permissions.default,
                    by: Cow::Borrowed("permissions.default"),
                }
            }
        };
        let verdict_of = |index: usize| {
            let rule = &self.permissions.rules[index];
            Verdict {
                policy: rule.policy,
                by: Cow::Owned(rule.name.clone()),
            }
        };
        let path_ok = |index: usize| match (&self.matchers[index].path, args.path.as_deref()) {
            (None, _) => true,
            (Some(glob), Some(path)) => glob.as_ref().is_some_and(|g| g.is_match(path)),
            (Some(_), None) => false,
        };
        let one = |target: Option<Snowflake>| -> Verdict {
            // The rules that apply to this call apart from its arguments, in file order.
            let candidates: Vec<usize> = self
                .permissions
                .rules
                .iter()
                .enumerate()
                .filter(|(_, rule)| glob_matches(&rule.tool, tool_id))
                .filter(|(_, rule)| caller_matches(&rule.caller, caller))
                .filter(|(_, rule)| match (&rule.session, target) {
                    (None, _) => true,
                    (Some(want), Some(target)) => self.session_matches(want, target),
                    (Some(_), None) => false,
                })
                .filter(|(_, rule)| match (&rule.origin, origin) {
                    (None, _) => true,
                    (Some(want), Some(origin)) => self.session_matches(want, origin),
                    (Some(_), None) => false,
                })
                .map(|(index, _)| index)
                .filter(|index| path_ok(*index))
                .collect();
            // The last match decides.
            let last = |segment: Option<&switchboard_commandline::Segment>| {
                candidates
                    .iter()
                    .rev()
                    .find(|index| match (&self.matchers[**index].command, segment) {
                        (None, _) => true,
                        (Some(glob), Some(segment)) => {
                            glob.as_ref().is_some_and(|g| g.matches(segment))
                        }
                        (Some(_), None) => false,
                    })
                    .map_or_else(fallback, |index| verdict_of(*index))
            };
            let Some(command) = &args.command else {
                return last(None);
            };
            // The strictest any rule for this caller could give: what an opaque command
            // gets. The default counts when some command may match no rule.
            let strictest = {
                let mut options: Vec<Verdict> =
                    candidates.iter().map(|index| verdict_of(*index)).collect();
                if candidates.is_empty()
                    || candidates
                        .iter()
                        .any(|index| self.matchers[*index].command.is_some())
                {
                    options.push(fallback());
                }
                options
                    .into_iter()
                    .max_by_key(|verdict| severity(verdict.policy))
                    .unwrap_or_else(fallback)
            };
            switchboard_commandline::decide(command, Ranked(strictest), |segment| {
                Ranked(last(Some(segment)))
            })
            .0
        };
        if targets.is_empty() {
            return one(None);
        }
        targets
            .iter()
            .map(|target| one(Some(*target)))
            .max_by_key(|verdict| severity(verdict.policy))
            .unwrap_or_else(|| one(None))
    }

    /// The rules that can apply to calls acting in `session` (for `/tools`).
    pub fn rules_for(&self, session: Snowflake) -> Vec<&switchboard_config::Rule> {
        self.permissions
            .rules
            .iter()
            .filter(|rule| {
                rule.session
                    .as_ref()
                    .is_none_or(|want| self.session_matches(want, session))
                    || rule
                        .origin
                        .as_ref()
                        .is_some_and(|want| self.session_matches(want, session))
            })
            .collect()
    }
}

/// The governance state: the configured rules (swapped whole by a reload), `/tools` overrides,
/// and where both the audit log and the overrides are kept.
pub struct Governance {
    rules: crate::cell::Live<GovernanceRules>,
    /// `/tools` overrides: the explicit callable ids a session's runs may call.
    overrides: RwLock<HashMap<Snowflake, Vec<String>>>,
    /// Where audit rows are kept.
    audit: Arc<dyn AuditStore>,
    /// Where `/tools` overrides are kept.
    scopes: Arc<dyn ScopeStore>,
    /// Bumped whenever what a caller may do can change (rules reloaded, a `/tools` override
    /// set), so what was worked out from them (event streams' read checks) is worked out
    /// again.
    generation: std::sync::atomic::AtomicU64,
}

impl Governance {
    /// From the config, the overrides kept from earlier runs, and where to keep new ones.
    pub fn new(
        permissions: Permissions,
        aliases: Aliases,
        configured: impl IntoIterator<Item = (Snowflake, Vec<String>)>,
        overrides: impl IntoIterator<Item = (Snowflake, Vec<String>)>,
        audit: Arc<dyn AuditStore>,
        scopes: Arc<dyn ScopeStore>,
    ) -> Self {
        Governance {
            rules: crate::cell::Live::new(GovernanceRules::new(permissions, aliases, configured)),
            overrides: RwLock::new(overrides.into_iter().collect()),
            audit,
            scopes,
            generation: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Changes whenever rules or overrides change (see the field).
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    pub(crate) fn changed(&self) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// The same governance, keeping audit rows in `audit` and overrides in `scopes`, starting
    /// from the `/tools` overrides `scopes` kept.
    #[must_use]
    pub fn with_stores(
        self,
        audit: Arc<dyn AuditStore>,
        scopes: Arc<dyn ScopeStore>,
        overrides: impl IntoIterator<Item = (Snowflake, Vec<String>)>,
    ) -> Governance {
        Governance {
            overrides: RwLock::new(overrides.into_iter().collect()),
            audit,
            scopes,
            ..self
        }
    }

    /// The configured rules in force now.
    pub fn rules(&self) -> Arc<GovernanceRules> {
        self.rules.load()
    }

    /// Puts reloaded rules in force for the next call.
    pub(crate) fn set_rules(&self, rules: Arc<GovernanceRules>) {
        self.rules.store(rules);
        self.changed();
    }

    /// Where audit rows are kept.
    pub fn audit(&self) -> &Arc<dyn AuditStore> {
        &self.audit
    }

    /// Keeps one audit row (queued: the store's writer commits it off the call's path). A store
    /// that refuses it (closed while shutting down) costs the row, never the call.
    pub fn record(&self, row: AuditRow) {
        if let Err(error) = self.audit.record(row) {
            tracing::warn!(%error, "could not keep an audit row");
        }
    }

    /// Where `/tools` overrides are kept.
    pub fn scopes(&self) -> &Arc<dyn ScopeStore> {
        &self.scopes
    }

    /// A session's tool scope: its `/tools` override, else its `[sessions.*]` scope; `None`:
    /// no limit beyond the agent's.
    pub fn session_scope(&self, session: Snowflake) -> Option<Vec<String>> {
        let overrides = self
            .overrides
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        overrides
            .get(&session)
            .cloned()
            .or_else(|| self.rules.load().configured.get(&session).cloned())
    }

    /// Whether a session's `/tools` override is set.
    pub fn is_overridden(&self, session: Snowflake) -> bool {
        let overrides = self
            .overrides
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        overrides.contains_key(&session)
    }

    /// Sets (`Some`) or removes (`None`) a session's `/tools` override, effective for the next
    /// call, and keeps it.
    pub fn set_session_scope(&self, session: Snowflake, scope: Option<Vec<String>>) {
        {
            let mut overrides = self
                .overrides
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match &scope {
                Some(ids) => {
                    overrides.insert(session, ids.clone());
                }
                None => {
                    overrides.remove(&session);
                }
            }
        }
        self.changed();
        if let Err(error) = self.scopes.set_session_scope(session, scope) {
            tracing::warn!(%session, %error, "could not keep the /tools override; it holds until the service stops");
        }
    }

    /// Whether a run's session lets it call `tool_id` (`[sessions.*]`, then `/tools`
    /// overrides; `audit.*` is never a run's); callers other than a run: yes. Only a part of
    /// the answer: whether a caller may call a callable is [`crate::Core::may_call`]'s.
    pub fn session_allows(&self, caller: &Caller, tool_id: &str) -> bool {
        match caller {
            Caller::Capability(capability) => {
                !tool_id.starts_with("audit.")
                    && self
                        .session_scope(capability.grant.session_id)
                        .is_none_or(|scope| scope_allows(&scope, tool_id))
            }
            _ => true,
        }
    }

    /// [`GovernanceRules::decide`] with the rules in force now.
    pub fn decide(&self, tool_id: &str, caller: &Caller, targets: &[Snowflake]) -> Verdict {
        self.rules.load().decide(tool_id, caller, targets)
    }
}

/// An input as the audit log keeps it: every string cut to `chars` characters (the cut marked
/// with `…`), or with `redact`, only a hash of the whole input.
pub fn audit_input(input: &Value, chars: usize, redact: bool) -> Value {
    use sha2::{Digest, Sha256};
    if redact {
        let text = serde_json::to_vec(input).unwrap_or_default();
        let hash: String = Sha256::digest(&text)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        return serde_json::json!({ "sha256": hash });
    }
    fn cut(value: &Value, chars: usize, depth: usize) -> Value {
        match value {
            Value::String(text) if text.chars().count() > chars => {
                let mut short: String = text.chars().take(chars).collect();
                short.push('…');
                Value::String(short)
            }
            Value::Array(items) if depth < 8 => Value::Array(
                items
                    .iter()
                    .take(50)
                    .map(|v| cut(v, chars, depth + 1))
                    .collect(),
            ),
            Value::Object(map) if depth < 8 => Value::Object(
                map.iter()
                    .take(50)
                    .map(|(k, v)| (k.clone(), cut(v, chars, depth + 1)))
                    .collect(),
            ),
            Value::Array(_) | Value::Object(_) => Value::String("…".to_owned()),
            other => other.clone(),
        }
    }
    cut(input, chars, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{CapabilityGrant, CapabilityStore, NamedCaller};
    use std::time::Duration;
    use switchboard_config::Rule;

    const OPS: Snowflake = Snowflake(1000000000000000401);
    const ROOM: Snowflake = Snowflake(1000000000000000402);

    fn rule(
        tool: &str,
        policy: Policy,
        session: Option<SessionMatch>,
        caller: CallerMatch,
        n: usize,
    ) -> Rule {
        Rule {
            tool: tool.into(),
            policy,
            session,
            origin: None,
            caller,
            command: None,
            path: None,
            name: format!("permissions.rules[{n}]"),
        }
    }

    fn governance(rules: Vec<Rule>, default: Policy) -> Governance {
        let aliases = Aliases::new()
            .with(AliasKind::Session, "ops", OPS.0)
            .and_then(|a| a.with(AliasKind::Session, "release-room", ROOM.0))
            .expect("aliases");
        Governance::new(
            Permissions {
                default,
                rules,
                ..Permissions::default()
            },
            aliases,
            [(OPS, vec!["surface.messages.*".to_owned()])],
            [],
            Arc::new(switchboard_store::MemoryBackend::new(Default::default())),
            Arc::new(switchboard_store::MemoryBackend::new(Default::default())),
        )
    }

    fn run_in(session: Snowflake, scope: &[&str]) -> Caller {
        let store = CapabilityStore::new();
        let token = store
            .mint(CapabilityGrant {
                session_id: session,
                request_id: "run-1".into(),
                scope: scope.iter().map(|s| (*s).to_owned()).collect(),
                ttl: Duration::from_secs(60),
                client: None,
                cwd: None,
                trigger_message_id: None,
                requested_by: None,
                gate: None,
            })
            .expect("mint");
        Caller::Capability(store.resolve(&token).expect("live"))
    }

    fn shell_rule(command: Option<&str>, policy: Policy, n: usize) -> Rule {
        Rule {
            command: command.map(str::to_owned),
            ..rule("shell.run", policy, None, CallerMatch::Run, n)
        }
    }

    fn command(text: &str) -> CallArgs {
        CallArgs::of("shell.run", &serde_json::json!({ "command": text }), None)
    }

    #[test]
    fn git_status_star_allows_git_status_but_not_git_status_then_rm() {
        let g = governance(
            vec![
                shell_rule(None, Policy::Ask, 0),
                shell_rule(Some("git status*"), Policy::Allow, 1),
            ],
            Policy::Allow,
        );
        let run = run_in(OPS, &["*"]);
        let decide = |text: &str| {
            g.rules()
                .decide_with("shell.run", &run, &[OPS], &command(text))
        };
        assert_eq!(decide("git status").policy, Policy::Allow);
        assert_eq!(decide("git status --short").by, "permissions.rules[1]");
        for sneaky in [
            "git status; rm x",
            "git status && rm -rf .",
            "git status | sh",
            "git status\nrm x",
            "rm x",
        ] {
            let verdict = decide(sneaky);
            assert_eq!(verdict.policy, Policy::Ask, "{sneaky}: {verdict:?}");
        }
    }

    #[test]
    fn a_command_nobody_can_see_into_gets_the_strictest_shell_rule() {
        let g = governance(
            vec![
                shell_rule(None, Policy::Allow, 0),
                shell_rule(Some("rm *"), Policy::Deny, 1),
                shell_rule(Some("echo *"), Policy::Allow, 2),
            ],
            Policy::Allow,
        );
        let run = run_in(OPS, &["*"]);
        let decide = |text: &str| {
            g.rules()
                .decide_with("shell.run", &run, &[OPS], &command(text))
        };
        assert_eq!(decide("echo hi").policy, Policy::Allow);
        for opaque in [
            "echo $(rm x)",
            "echo `rm x`",
            "eval 'rm x'",
            "sh -c 'rm x'",
            "bash -c \"echo hi\"",
            "echo 'unclosed",
        ] {
            let verdict = decide(opaque);
            assert_eq!(verdict.policy, Policy::Deny, "{opaque}: {verdict:?}");
            assert_eq!(verdict.by, "permissions.rules[1]", "{opaque}");
        }
        // Another caller's rules never count.
        let operator = g.rules().decide_with(
            "shell.run",
            &Caller::Operator,
            &[OPS],
            &command("echo $(rm x)"),
        );
        assert_eq!(operator.by, "permissions.default");
    }

    #[test]
    fn a_path_rule_matches_the_path_relative_to_the_workspace() {
        let g = governance(
            vec![Rule {
                path: Some(".env*".into()),
                ..rule("fs.*", Policy::Deny, None, CallerMatch::Run, 0)
            }],
            Policy::Allow,
        );
        let run = run_in(OPS, &["*"]);
        let root = std::path::Path::new("/srv/ws/1");
        let decide = |tool: &str, path: &str| {
            let args = CallArgs::of(tool, &serde_json::json!({ "path": path }), Some(root));
            g.rules().decide_with(tool, &run, &[OPS], &args).policy
        };
        for hidden in [".env", "./.env.local", "src/../.env", "/srv/ws/1/.env"] {
            assert_eq!(decide("fs.read", hidden), Policy::Deny, "{hidden}");
        }
        assert_eq!(decide("fs.write", ".env"), Policy::Deny);
        assert_eq!(
            decide("fs.read", "src/.env"),
            Policy::Allow,
            "* stays within a directory"
        );
        assert_eq!(decide("fs.read", "README.md"), Policy::Allow);
        // Rules with a path never match a call without one (a listing's read check).
        assert_eq!(g.decide("fs.read", &run, &[OPS]).policy, Policy::Allow);
    }

    #[test]
    fn the_last_matching_rule_wins_and_the_default_covers_the_rest() {
        let g = governance(
            vec![
                rule("surface.*", Policy::Deny, None, CallerMatch::Run, 0),
                rule(
                    "surface.messages.list",
                    Policy::Allow,
                    None,
                    CallerMatch::Run,
                    1,
                ),
                rule(
                    "surface.messages.send",
                    Policy::Ask,
                    Some(SessionMatch::AliasGlob("release-*".into())),
                    CallerMatch::Run,
                    2,
                ),
            ],
            Policy::Allow,
        );
        let run = run_in(OPS, &["*"]);
        // The last of the sessions column: across sessions the most restrictive verdict wins.
        for (tool, sessions, policy) in [
            ("surface.messages.list", &[OPS][..], Policy::Allow),
            ("surface.messages.send", &[ROOM], Policy::Ask),
            ("surface.messages.send", &[OPS], Policy::Deny),
            ("surface.messages.send", &[OPS, ROOM], Policy::Deny),
        ] {
            assert_eq!(g.decide(tool, &run, sessions).policy, policy, "{tool}");
        }
        for (tool, by) in [
            ("surface.messages.delete", "permissions.rules[0]"),
            ("workflow.create", "permissions.default"),
        ] {
            assert_eq!(g.decide(tool, &run, &[OPS]).by, by, "{tool}");
        }
        // Rules for runs do not touch the operator.
        assert_eq!(
            g.decide("surface.messages.delete", &Caller::Operator, &[OPS])
                .policy,
            Policy::Allow
        );
    }

    #[test]
    fn a_runs_scope_is_its_tokens_intersected_with_its_sessions() {
        let g = governance(Vec::new(), Policy::Allow);
        // What `Core::may_call` asks of the caller and of governance (less `workflow.*` while
        // no engine is installed).
        let may_call = |caller: &Caller, tool: &str| {
            caller.scope_allows(tool) && g.session_allows(caller, tool)
        };
        let in_ops = run_in(OPS, &["surface.*", "workflow.*"]);
        assert!(may_call(&in_ops, "surface.messages.send"));
        assert!(
            !may_call(&in_ops, "workflow.create"),
            "ops allows only surface.messages.*"
        );
        let in_room = run_in(ROOM, &["surface.*", "workflow.*"]);
        assert!(may_call(&in_room, "workflow.create"));
        assert!(!may_call(&in_room, "audit.list"));
        let everything = run_in(ROOM, &["*"]);
        assert!(
            !may_call(&everything, "audit.list"),
            "a run never reads the audit log"
        );
        g.set_session_scope(ROOM, Some(vec!["surface.messages.list".into()]));
        assert!(
            !may_call(&in_room, "workflow.create"),
            "the override applies at once"
        );
        g.set_session_scope(ROOM, None);
        assert!(may_call(&in_room, "workflow.create"));
        let token = Caller::Token(Arc::new(NamedCaller {
            name: "ci".into(),
            key: Arc::from("token:ci"),
            scope: vec!["surface.messages.list".into(), "audit.list".into()],
        }));
        assert!(may_call(&token, "audit.list"));
        assert!(!may_call(&token, "surface.messages.send"));
    }

    #[test]
    fn audit_inputs_are_cut_or_hashed() {
        let input = serde_json::json!({"text": "x".repeat(500), "limit": 5, "nested": {"a": ["y".repeat(10)]}});
        let cut = audit_input(&input, 4, false);
        assert_eq!(cut["text"], "xxxx…");
        assert_eq!(cut["limit"], 5);
        assert_eq!(cut["nested"]["a"][0], "yyyy…");
        let hashed = audit_input(&input, 4, true);
        assert_eq!(hashed["sha256"].as_str().map(str::len), Some(64));
        assert!(hashed.get("text").is_none());
    }
}
