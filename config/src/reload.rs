//! What a reload of the config file changes: the config to run with (the new file's, with every
//! setting that cannot change while running kept at its running value), what changed, and what
//! needs a restart.

use std::collections::BTreeMap;

use entity::{normalize_name, AliasKind, Aliases, Snowflake};

use crate::Config;

/// What applying a new config file to a running service does.
#[derive(Debug, Clone)]
pub struct ReloadPlan {
    /// The config to run with from now on: the new file's, except that every setting named in
    /// [`ReloadPlan::restart_needed`] keeps its running value.
    pub effective: Config,
    /// What takes effect for the next call or event, one line per part
    /// (`aliases: 2 added, 1 removed`); empty when nothing that can change live changed.
    pub changes: Vec<String>,
    /// Settings the file changes that only a restart applies (`toolserver.bind`); until then
    /// they keep their running value.
    pub restart_needed: Vec<&'static str>,
}

impl ReloadPlan {
    /// One line for the operator: `aliases: 2 added, 1 removed; restart needed for:
    /// toolserver.bind`, or `no changes`.
    pub fn summary(&self) -> String {
        let mut parts = self.changes.clone();
        if !self.restart_needed.is_empty() {
            parts.push(format!(
                "restart needed for: {}",
                self.restart_needed.join(", ")
            ));
        }
        if parts.is_empty() {
            "no changes".to_owned()
        } else {
            parts.join("; ")
        }
    }

    /// Whether anything changes now.
    pub fn changes_anything(&self) -> bool {
        !self.changes.is_empty()
    }
}

/// Settings that are read once, when the service starts: the secrets' variables, the listener
/// and its connection loop, the store, and whether an agent runs at all. A reload names each
/// one that changed and keeps its running value; everything else takes effect live.
pub const RESTART_ONLY: &[&str] = &[
    "discord.token_env",
    "discord.api_base_url",
    "discord.invalid_request_percent",
    "discord.shard_count",
    "toolserver.bind",
    "toolserver.operator_token_env",
    "toolserver.insecure_no_auth",
    "toolserver.max_concurrent_calls",
    "toolserver.max_connections",
    "toolserver.header_read_timeout_ms",
    "toolserver.idle_timeout_s",
    "toolserver.body_read_timeout_ms",
    "toolserver.tokens",
    "store",
    "cluster",
    "audit.retention_days",
    "agent (added or removed)",
    "agent.max_concurrent_runs",
    "workspace",
];

/// Keeps `old` in `new` when they differ, noting `name`.
fn keep<T: PartialEq + Clone>(
    name: &'static str,
    old: &T,
    new: &mut T,
    restart: &mut Vec<&'static str>,
) {
    if old != new {
        restart.push(name);
        *new = old.clone();
    }
}

/// Plans applying `new` (validated) over the `running` config.
pub fn plan_reload(running: &Config, mut new: Config) -> ReloadPlan {
    let mut restart = Vec::new();
    let r = &mut restart;
    let old_shards = running.discord.shard_count;
    let (old_d, new_d) = (&running.discord, &mut new.discord);
    keep(
        "discord.token_env",
        &old_d.token_env,
        &mut new_d.token_env,
        r,
    );
    keep(
        "discord.api_base_url",
        &old_d.api_base_url,
        &mut new_d.api_base_url,
        r,
    );
    // The REST client's invalid-request budget is set when it is built.
    keep(
        "discord.invalid_request_percent",
        &old_d.invalid_request_percent,
        &mut new_d.invalid_request_percent,
        r,
    );
    let (old_t, new_t) = (&running.toolserver, &mut new.toolserver);
    keep("toolserver.bind", &old_t.bind, &mut new_t.bind, r);
    keep(
        "toolserver.operator_token_env",
        &old_t.operator_token_env,
        &mut new_t.operator_token_env,
        r,
    );
    keep(
        "toolserver.insecure_no_auth",
        &old_t.insecure_no_auth,
        &mut new_t.insecure_no_auth,
        r,
    );
    keep(
        "toolserver.max_concurrent_calls",
        &old_t.max_concurrent_calls,
        &mut new_t.max_concurrent_calls,
        r,
    );
    keep(
        "toolserver.max_connections",
        &old_t.max_connections,
        &mut new_t.max_connections,
        r,
    );
    keep(
        "toolserver.header_read_timeout_ms",
        &old_t.header_read_timeout,
        &mut new_t.header_read_timeout,
        r,
    );
    keep(
        "toolserver.idle_timeout_s",
        &old_t.idle_timeout,
        &mut new_t.idle_timeout,
        r,
    );
    keep(
        "toolserver.body_read_timeout_ms",
        &old_t.body_read_timeout,
        &mut new_t.body_read_timeout,
        r,
    );
    keep("toolserver.tokens", &old_t.tokens, &mut new_t.tokens, r);
    // The store is opened once; every key of it (those added later too) needs a restart.
    keep("store", &running.store, &mut new.store, r);
    // The gateway's shards and this node's place in the cluster are set up once, at start.
    keep(
        "discord.shard_count",
        &old_shards,
        &mut new.discord.shard_count,
        r,
    );
    keep("cluster", &running.cluster, &mut new.cluster, r);
    // The sandbox is probed and its walls set once, at start.
    keep("workspace", &running.workspace, &mut new.workspace, r);
    keep(
        "audit.retention_days",
        &running.audit.retention,
        &mut new.audit.retention,
        r,
    );
    match (&running.agent, &mut new.agent) {
        (Some(old), Some(agent)) => keep(
            "agent.max_concurrent_runs",
            &old.max_concurrent_runs,
            &mut agent.max_concurrent_runs,
            r,
        ),
        (None, None) => {}
        (old, agent) => {
            r.push("agent (added or removed)");
            agent.clone_from(old);
        }
    }

    let mut changes = Vec::new();
    if let Some(line) = alias_changes(&running.aliases, &new.aliases) {
        changes.push(line);
    } else if running.alias_comments != new.alias_comments {
        changes.push("alias comments changed".to_owned());
    }
    if let Some(line) = allowlist_changes(running, &new) {
        changes.push(line);
    }
    let (old_d, new_d) = (&running.discord, &new.discord);
    if old_d.admins != new_d.admins {
        changes.push(format!(
            "discord.admins: {} → {}",
            old_d.admins.len(),
            new_d.admins.len()
        ));
    }
    if old_d.allow_role_mentions != new_d.allow_role_mentions {
        changes.push(format!(
            "discord.allow_role_mentions: {}",
            new_d.allow_role_mentions
        ));
    }
    let (old_t, new_t) = (&running.toolserver, &new.toolserver);
    if old_t.rate_limits != new_t.rate_limits {
        changes.push("toolserver.rate_limits changed (budgets start afresh)".to_owned());
    }
    for (name, changed) in [
        (
            "toolserver.call_timeout_s",
            old_t.call_timeout != new_t.call_timeout,
        ),
        (
            "toolserver.download_max_bytes",
            old_t.download_max_bytes != new_t.download_max_bytes,
        ),
        (
            "toolserver.max_parts_per_send",
            old_t.max_parts_per_send != new_t.max_parts_per_send,
        ),
    ] {
        if changed {
            changes.push(format!("{name} changed"));
        }
    }
    if running.permissions != new.permissions {
        changes.push(format!(
            "permissions changed ({} rules)",
            new.permissions.rules.len()
        ));
    }
    if running.sessions != new.sessions {
        changes.push("sessions changed".to_owned());
    }
    if running.hooks != new.hooks {
        changes.push(format!(
            "hooks changed ({} before, {} after)",
            new.hooks.before.len(),
            new.hooks.after.len()
        ));
    }
    if running.audit != new.audit {
        changes.push("audit changed".to_owned());
    }
    if running.agent != new.agent {
        changes.push("agent settings changed".to_owned());
    }
    if running.agents != new.agents {
        changes.push("agents changed".to_owned());
    }
    if let Some(line) = schedule_changes(&running.schedules, &new.schedules) {
        changes.push(line);
    }
    if let Some(line) = budget_changes(&running.budgets, &new.budgets) {
        changes.push(line);
    }
    ReloadPlan {
        effective: new,
        changes,
        restart_needed: restart,
    }
}

/// Names listed per kind of schedule change before the rest is counted (`+3 more`).
const NAMES_LISTED: usize = 5;

/// `schedules: 1 added (digest), 1 removed (standup), 1 changed (weekly)` — by `[[schedules]]`
/// name; `None` when none was added, removed or changed.
fn schedule_changes(old: &[crate::ScheduleEntry], new: &[crate::ScheduleEntry]) -> Option<String> {
    let by_id = |entries: &[crate::ScheduleEntry]| -> BTreeMap<String, crate::ScheduleEntry> {
        entries.iter().map(|e| (e.id.clone(), e.clone())).collect()
    };
    let (old, new) = (by_id(old), by_id(new));
    let name = |id: &String| id.strip_prefix("config:").unwrap_or(id).to_owned();
    let added: Vec<String> = new
        .keys()
        .filter(|id| !old.contains_key(*id))
        .map(name)
        .collect();
    let removed: Vec<String> = old
        .keys()
        .filter(|id| !new.contains_key(*id))
        .map(name)
        .collect();
    let changed: Vec<String> = new
        .iter()
        .filter(|(id, entry)| old.get(*id).is_some_and(|was| was != *entry))
        .map(|(id, _)| name(id))
        .collect();
    let mut parts = Vec::new();
    for (names, what) in [(added, "added"), (removed, "removed"), (changed, "changed")] {
        if names.is_empty() {
            continue;
        }
        let mut listed = names
            .iter()
            .take(NAMES_LISTED)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if names.len() > NAMES_LISTED {
            listed.push_str(&format!(", +{} more", names.len() - NAMES_LISTED));
        }
        parts.push(format!("{} {what} ({listed})", names.len()));
    }
    (!parts.is_empty()).then(|| format!("schedules: {}", parts.join(", ")))
}

/// `budgets changed: user, exempt` — the parts of `[budgets]` that differ; `None` when none.
fn budget_changes(old: &crate::BudgetsConfig, new: &crate::BudgetsConfig) -> Option<String> {
    let (o, n) = (&old.budgets, &new.budgets);
    let parts: Vec<&str> = [
        ("user", o.user != n.user),
        ("session", o.session != n.session),
        ("guild", o.guild != n.guild),
        ("agent", o.agent != n.agent),
        ("tz", o.tz != n.tz),
        (
            "exempt",
            o.exempt != n.exempt || old.exempt_principals != new.exempt_principals,
        ),
    ]
    .into_iter()
    .filter_map(|(part, differs)| differs.then_some(part))
    .collect();
    (!parts.is_empty()).then(|| format!("budgets changed: {}", parts.join(", ")))
}

/// Every alias of every kind: (kind, normalized name) → id.
fn alias_table(aliases: &Aliases) -> BTreeMap<(u8, String), Snowflake> {
    let kinds = [
        (0, AliasKind::User),
        (1, AliasKind::Role),
        (2, AliasKind::Session),
    ];
    kinds
        .into_iter()
        .flat_map(|(rank, kind)| {
            aliases
                .iter(kind)
                .map(move |(name, id)| ((rank, normalize_name(name)), id))
        })
        .collect()
}

/// `aliases: 2 added, 1 removed, 1 changed`, or `None` when they are the same.
fn alias_changes(old: &Aliases, new: &Aliases) -> Option<String> {
    let (old, new) = (alias_table(old), alias_table(new));
    let added = new.keys().filter(|key| !old.contains_key(*key)).count();
    let removed = old.keys().filter(|key| !new.contains_key(*key)).count();
    let changed = new
        .iter()
        .filter(|(key, id)| old.get(*key).is_some_and(|was| was != *id))
        .count();
    let parts: Vec<String> = [(added, "added"), (removed, "removed"), (changed, "changed")]
        .into_iter()
        .filter(|(count, _)| *count > 0)
        .map(|(count, what)| format!("{count} {what}"))
        .collect();
    (!parts.is_empty()).then(|| format!("aliases: {}", parts.join(", ")))
}

/// `allowlist: 1 channel added, DMs now allowed`, or `None` when it is the same.
fn allowlist_changes(old: &Config, new: &Config) -> Option<String> {
    let (old, new) = (&old.discord, &new.discord);
    let mut parts = Vec::new();
    for (one, many, was, now) in [
        (
            "guild",
            "guilds",
            &old.allowed_guild_ids,
            &new.allowed_guild_ids,
        ),
        (
            "channel",
            "channels",
            &old.allowed_channel_ids,
            &new.allowed_channel_ids,
        ),
        (
            "category",
            "categories",
            &old.allowed_category_ids,
            &new.allowed_category_ids,
        ),
    ] {
        let added = now.iter().filter(|id| !was.contains(id)).count();
        let removed = was.iter().filter(|id| !now.contains(id)).count();
        for (count, how) in [(added, "added"), (removed, "removed")] {
            if count > 0 {
                let noun = if count == 1 { one } else { many };
                parts.push(format!("{count} {noun} {how}"));
            }
        }
    }
    if old.allow_dms != new.allow_dms {
        parts.push(if new.allow_dms {
            "DMs now allowed".to_owned()
        } else {
            "DMs now denied".to_owned()
        });
    }
    (!parts.is_empty()).then(|| format!("allowlist: {}", parts.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[discord]
allowed_channel_ids = ["334455667788990011"]
[entity.users]
stanley = "123456789012345678"
[entity.sessions]
ops = "334455667788990011"
"#;

    fn parse(text: &str) -> Config {
        Config::parse(text, "t.toml").expect("valid")
    }

    #[test]
    fn the_same_file_changes_nothing() {
        let plan = plan_reload(&parse(BASE), parse(BASE));
        assert!(plan.changes.is_empty() && plan.restart_needed.is_empty());
        assert_eq!(plan.summary(), "no changes");
    }

    #[test]
    fn aliases_are_counted_and_restart_only_keys_keep_their_value() {
        let new = r#"
[discord]
allowed_channel_ids = ["334455667788990011", "334455667788990022"]
allow_dms = true
[entity.users]
mira = "123456789012345679"
nadia = "123456789012345680"
[entity.sessions]
ops = "334455667788990011"
[toolserver]
bind = "127.0.0.1:9999"
[store]
path = "elsewhere.db"
"#;
        let running = parse(BASE);
        let plan = plan_reload(&running, parse(new));
        assert_eq!(
            plan.summary(),
            "aliases: 2 added, 1 removed; allowlist: 1 channel added, DMs now allowed; restart needed for: toolserver.bind, store"
        );
        assert_eq!(plan.effective.toolserver.bind, running.toolserver.bind);
        assert_eq!(plan.effective.store, running.store);
        assert!(plan
            .effective
            .aliases
            .id_for(AliasKind::User, "nadia")
            .is_some());
        assert!(plan.effective.discord.allow_dms);
    }

    /// A `[[schedules]]` entry in #ops.
    fn schedule(name: &str, every: &str) -> String {
        format!("\n[[schedules]]\nname = \"{name}\"\nsession = \"#ops\"\nprompt = \"p\"\nevery = \"{every}\"\n")
    }

    #[test]
    fn schedules_added_removed_and_changed_are_named_and_budgets_changes_listed() {
        let running = format!(
            "{BASE}{}{}\n[budgets.user]\ntokens_per_day = 100\n",
            schedule("digest", "15m"),
            schedule("standup", "1h")
        );
        let new = format!(
            "{BASE}{}{}\n[budgets]\nexempt = [\"admins\"]\n[budgets.user]\ntokens_per_day = 200\n[budgets.guild]\nusd_per_day = 2\n",
            schedule("digest", "30m"),
            schedule("weekly", "1h")
        );
        let plan = plan_reload(&parse(&running), parse(&new));
        assert_eq!(
            plan.summary(),
            "schedules: 1 added (weekly), 1 removed (standup), 1 changed (digest); budgets changed: user, guild, exempt"
        );
        assert_eq!(plan.effective.schedules.len(), 2, "schedules apply live");
        // The same schedules and budgets change nothing.
        let plan = plan_reload(&parse(&new), parse(&new));
        assert_eq!(plan.summary(), "no changes");
    }

    #[test]
    fn many_schedules_added_are_listed_up_to_a_bound_then_counted() {
        let many: String = (0..8).map(|n| schedule(&format!("s{n}"), "1h")).collect();
        let plan = plan_reload(&parse(BASE), parse(&format!("{BASE}{many}")));
        assert_eq!(
            plan.summary(),
            "schedules: 8 added (s0, s1, s2, s3, s4, +3 more)"
        );
    }

    #[test]
    fn an_agent_cannot_come_or_go_live() {
        let with_agent = format!("{BASE}\n[agent]\nrunner = \"command\"\ncommand = [\"cat\"]\n");
        let plan = plan_reload(&parse(BASE), parse(&with_agent));
        assert_eq!(plan.restart_needed, ["agent (added or removed)"]);
        assert!(plan.effective.agent.is_none());
    }

    #[test]
    fn garbage_is_a_report_never_a_crash() {
        // On a thread with the stack a blocking task gets (2 MiB): deep nesting must not
        // overflow it.
        let nested = format!("a = {}", "[".repeat(200_000));
        let tables = "[a.".repeat(100_000);
        let inline = format!("a = {}", "{b = ".repeat(100_000));
        let cases = [
            nested,
            tables,
            inline,
            "\u{0}\u{1}[[[".to_owned(),
            "allow_dms = \"yes\"".to_owned(),
        ];
        std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || {
                for case in &cases {
                    assert!(Config::parse(case, "g.toml").is_err());
                }
            })
            .expect("thread")
            .join()
            .expect("no panic");
    }
}
