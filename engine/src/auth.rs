//! Who is calling: the operator token, per-run capability tokens, and tool scopes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use entity::Snowflake;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Prefix of capability tokens, so a leaked one is recognisable in logs and scanners.
pub const CAPABILITY_PREFIX: &str = "sbcap_";

pub(crate) fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The operator's token, kept only as a digest and compared in constant time.
#[derive(Clone)]
pub struct OperatorToken {
    digest: [u8; 32],
}

impl OperatorToken {
    /// Keeps the digest of `token`; the token itself is not stored.
    pub fn new(token: &str) -> Self {
        OperatorToken {
            digest: digest(token),
        }
    }

    /// Whether `presented` is the operator's token, compared in constant time.
    pub fn matches(&self, presented: &str) -> bool {
        // Hashing first makes the comparison independent of the presented token's length.
        digest(presented).ct_eq(&self.digest).into()
    }
}

impl std::fmt::Debug for OperatorToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OperatorToken(..)")
    }
}

/// What a capability token is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapabilityGrant {
    /// The session (channel, thread or DM id) the run belongs to: its calls' default session,
    /// which a session header cannot change.
    pub session_id: Snowflake,
    /// The run's id (`run-<hex>` for agent runs, `op-<hex>` when the operator mints one
    /// without naming it), fixed for every call the token makes; logged with each call.
    pub request_id: String,
    /// Glob patterns of callable ids (`surface.*`, `surface.messages.list`, `*`).
    pub scope: Vec<String>,
    /// How long the token lives from minting; a token past it is refused as expired.
    pub ttl: Duration,
    /// Who is calling (`discord` for agent runs), replacing any client header; `None` keeps
    /// the header's.
    pub client: Option<String>,
    /// The working directory files are read from and saved to; `None`: no file access. A
    /// header naming another directory is refused.
    pub cwd: Option<String>,
    /// The message that started the run.
    pub trigger_message_id: Option<Snowflake>,
    /// Who asked for the run (the trigger's author), for the audit log.
    pub requested_by: Option<Snowflake>,
    /// What the token's calls wait for before they act (an agent run's: its trigger's
    /// answered-record being durable); `None`: they never wait.
    pub gate: Option<crate::run_gate::RunGate>,
}

/// How a capability stopped working.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenEnd {
    /// Its run finished (the token was revoked).
    Finished,
    /// Its run was aborted (`/abort`, the console) or stopped before it could act.
    Aborted,
    /// It outlived its `ttl`.
    Expired,
}

/// A live capability, found by its token.
#[derive(Debug, Clone)]
pub struct Capability {
    /// A short, non-secret name for logs: the first hex digits of the token's digest.
    pub id: String,
    /// `cap:<id>`, shared: the caller's key for rate limits and logs.
    pub key: Arc<str>,
    /// What the token was minted for.
    pub grant: CapabilityGrant,
    /// When it stops working: minting time plus the grant's `ttl`.
    pub expires_at: Instant,
    /// Told when the token is revoked, so what waits on its run (an approval, an event
    /// stream) stops at once.
    ending: Arc<tokio::sync::watch::Sender<Option<TokenEnd>>>,
    /// An agent run's posts, counted for their nonces (`nonce::RunPosts`): only a run minted
    /// on this node with a gate (an agent run or a handoff's sub-run); `None` for the others,
    /// whose posts get unique nonces.
    pub posts: Option<Arc<crate::nonce::RunPosts>>,
}

impl PartialEq for Capability {
    fn eq(&self, other: &Capability) -> bool {
        self.id == other.id && self.grant == other.grant && self.expires_at == other.expires_at
    }
}

impl Eq for Capability {}

impl Capability {
    /// A live capability for the token whose digest is `token_digest`, named by its first
    /// hex digits.
    pub(crate) fn new(
        token_digest: &[u8; 32],
        grant: CapabilityGrant,
        expires_at: Instant,
    ) -> Self {
        let id: String = token_digest[..4]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Capability {
            key: Arc::from(format!("cap:{id}")),
            id,
            posts: grant
                .gate
                .is_some()
                .then(|| Arc::new(crate::nonce::RunPosts::new(&grant.request_id))),
            grant,
            expires_at,
            ending: Arc::new(tokio::sync::watch::Sender::new(None)),
        }
    }

    /// Tells what waits on the token that it ended as `how`.
    pub(crate) fn finish(&self, how: TokenEnd) {
        self.ending.send_replace(Some(how));
    }

    /// Whether anything waits on the token's end (an approval, an event stream).
    pub(crate) fn awaited(&self) -> bool {
        self.ending.receiver_count() > 0
    }

    /// Resolves when the token stops working: revoked (its run finished or was aborted), or
    /// expired.
    pub async fn ended(&self) -> TokenEnd {
        let mut ending = self.ending.subscribe();
        let revoked = async {
            match ending.wait_for(Option::is_some).await {
                Ok(end) => end.unwrap_or(TokenEnd::Finished),
                // The store dropped the sender with the token: it is gone.
                Err(_) => TokenEnd::Finished,
            }
        };
        tokio::select! {
            end = revoked => end,
            () = tokio::time::sleep_until(self.expires_at.into()) => TokenEnd::Expired,
        }
    }

    /// How it ended, if it has (without waiting).
    pub fn end(&self) -> Option<TokenEnd> {
        if let Some(end) = *self.ending.borrow() {
            return Some(end);
        }
        (self.expires_at <= Instant::now()).then_some(TokenEnd::Expired)
    }
}

/// Why a presented capability token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapabilityRefusal {
    /// No live token has this digest, and none ended recently: never issued here (or
    /// forgotten since).
    Unknown,
    /// The token outlived its `ttl`; it is forgotten as it is refused.
    Expired,
    /// The token's run ended (finished or aborted) a short while ago.
    Ended(TokenEnd),
}

/// How many ended tokens are remembered, so a late call learns why its run is over.
const ENDED_KEPT: usize = 4096;

/// Minted capability tokens, stored by digest only.
#[derive(Debug, Default)]
pub struct CapabilityStore {
    by_digest: DashMap<[u8; 32], Arc<Capability>>,
    /// Tokens revoked before they expired: how they ended, until they would have expired.
    ended: DashMap<[u8; 32], (TokenEnd, Instant)>,
}

/// Random bytes from the operating system, hex-encoded.
pub fn random_hex(bytes: usize) -> Result<String, getrandom::Error> {
    let mut buffer = vec![0u8; bytes];
    getrandom::fill(&mut buffer)?;
    Ok(buffer.iter().map(|b| format!("{b:02x}")).collect())
}

impl CapabilityStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Mints a token with 256 random bits; only its digest is kept.
    pub fn mint(&self, grant: CapabilityGrant) -> Result<String, getrandom::Error> {
        let token = format!("{CAPABILITY_PREFIX}{}", random_hex(32)?);
        let token_digest = digest(&token);
        let expires_at = Instant::now() + grant.ttl;
        self.by_digest.insert(
            token_digest,
            Arc::new(Capability::new(&token_digest, grant, expires_at)),
        );
        Ok(token)
    }

    /// The live capability `token` names, as kept: unlike [`CapabilityStore::resolve`], an
    /// expired one is left for the next call to be told it expired.
    pub(crate) fn kept(&self, token: &str) -> Option<Arc<Capability>> {
        self.by_digest
            .get(&digest(token))
            .map(|entry| Arc::clone(entry.value()))
    }

    /// The live capability `token` names, or why it is refused; an expired token is dropped.
    pub fn resolve(&self, token: &str) -> Result<Arc<Capability>, CapabilityRefusal> {
        let key = digest(token);
        let capability = self
            .by_digest
            .get(&key)
            .map(|entry| Arc::clone(entry.value()))
            .ok_or_else(|| match self.ended.get(&key) {
                Some(ended) => CapabilityRefusal::Ended(ended.0),
                None => CapabilityRefusal::Unknown,
            })?;
        if capability.expires_at <= Instant::now() {
            self.by_digest.remove(&key);
            capability.ending.send_replace(Some(TokenEnd::Expired));
            return Err(CapabilityRefusal::Expired);
        }
        Ok(capability)
    }

    /// Revokes one token, its run finished; true when it was live.
    pub fn revoke(&self, token: &str) -> bool {
        self.end(token, TokenEnd::Finished)
    }

    /// Ends one token (`how`: its run finished or was aborted): what waits on it stops now,
    /// and a late call with it is told why. True when it was live.
    pub fn end(&self, token: &str, how: TokenEnd) -> bool {
        self.end_digest(digest(token), how)
    }

    /// [`CapabilityStore::end`] by the token's digest.
    pub(crate) fn end_digest(&self, key: [u8; 32], how: TokenEnd) -> bool {
        let Some((_, capability)) = self.by_digest.remove(&key) else {
            return false;
        };
        capability.ending.send_replace(Some(how));
        self.remember_end(key, how, capability.expires_at);
        true
    }

    /// Remembers that the token with digest `key` ended as `how`, until it would have expired
    /// (`until`), so a late call is told why — also for a token another node minted.
    pub(crate) fn remember_end(&self, key: [u8; 32], how: TokenEnd, until: Instant) {
        let now = Instant::now();
        if self.ended.len() >= ENDED_KEPT {
            self.ended.retain(|_, (_, until)| *until > now);
            if self.ended.len() >= ENDED_KEPT {
                self.ended.clear();
            }
        }
        if until > now {
            self.ended.insert(key, (how, until));
        }
    }

    /// Drops expired tokens (telling what waits on them) and ended ones past their expiry;
    /// returns how many live tokens are left.
    pub fn prune_expired(&self) -> usize {
        let now = Instant::now();
        self.by_digest.retain(|_, capability| {
            let live = capability.expires_at > now;
            if !live {
                capability.ending.send_replace(Some(TokenEnd::Expired));
            }
            live
        });
        self.ended.retain(|_, (_, until)| *until > now);
        self.by_digest.len()
    }

    /// How many tokens are stored, expired ones not yet pruned included.
    pub fn len(&self) -> usize {
        self.by_digest.len()
    }

    /// True when no token is stored.
    pub fn is_empty(&self) -> bool {
        self.by_digest.is_empty()
    }
}

pub use switchboard_config::glob_matches;

/// True when any pattern in `scope` matches the callable id.
pub fn scope_allows(scope: &[String], tool_id: &str) -> bool {
    scope.iter().any(|pattern| glob_matches(pattern, tool_id))
}

/// Whether `tool_id` is an operator callable: governance itself (`approvals.*`, `admin.*`), usage (`usage.*`)
/// and the agent's runs (`runs.*`).
/// An agent run never gets one, whatever its scope says (`["*"]` included); a named token gets
/// one only when its scope names it, exactly or by a glob (`approvals.*`, `admin.*`, `*`).
pub fn is_operator_callable(tool_id: &str) -> bool {
    OPERATOR_NAMESPACES
        .iter()
        .any(|namespace| tool_id.starts_with(namespace))
}

/// The namespaces of the operator callables.
const OPERATOR_NAMESPACES: [&str; 4] = ["approvals.", "admin.", "runs.", "usage."];

/// What a Discord user may call: deciding an ask (an approver's button), changing a
/// session's tools (an admin's `/tools`), `/status` and `/abort` in their channel, and undoing
/// a run's changes to the workspace (`/undo`); the handlers check `permissions.approvers`,
/// `discord.admins` and whose run it is.
pub const DISCORD_CALLABLES: [&str; 6] = [
    "approvals.decide",
    "admin.tools.set",
    "admin.agent.set",
    "runs.list",
    "runs.abort",
    "workspace.undo",
];

/// What a named token with an `agent:NAME` grant may call whatever its scope: its own runs
/// (the chat API's, its `agent.handoff`s'), listed and stopped; [`Caller::own_runs_only`].
pub const OWN_RUNS_CALLABLES: [&str; 2] = ["runs.list", "runs.abort"];

/// Whether a token's scope grants an agent (`agent:NAME`, `agent:*`).
fn grants_an_agent(scope: &[String]) -> bool {
    scope.iter().any(|entry| entry.starts_with("agent:"))
}

/// A caller's key, cheap to clone and hash.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CallerKey {
    /// The operator token.
    Operator,
    /// No token (`insecure_no_auth`).
    Anonymous,
    /// A token with a name of its own (`cap:<id>`).
    Named(Arc<str>),
}

impl CallerKey {
    /// The key of a caller without a name of its own (`Named` keys are owned).
    pub fn static_name(&self) -> &'static str {
        match self {
            CallerKey::Operator => "operator",
            CallerKey::Anonymous => "anonymous",
            CallerKey::Named(_) => "named",
        }
    }

    /// The key as written in logs.
    pub fn as_str(&self) -> &str {
        match self {
            CallerKey::Operator => "operator",
            CallerKey::Anonymous => "anonymous",
            CallerKey::Named(name) => name,
        }
    }
}

/// A named service token from `[[toolserver.tokens]]`, as a caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedCaller {
    /// Its name in the config.
    pub name: String,
    /// `token:<name>`: the caller's key for rate limits, rules and logs.
    pub key: Arc<str>,
    /// Callable globs it may call (and `console`).
    pub scope: Vec<String>,
}

/// A named token, kept only as a digest.
#[derive(Clone)]
pub(crate) struct NamedToken {
    digest: [u8; 32],
    pub(crate) caller: Arc<NamedCaller>,
}

impl NamedToken {
    pub(crate) fn new(token: &str, name: &str, scope: Vec<String>) -> Self {
        NamedToken {
            digest: digest(token),
            caller: Arc::new(NamedCaller {
                name: name.to_owned(),
                key: Arc::from(format!("token:{name}")),
                scope,
            }),
        }
    }

    /// Compared in constant time, like the operator token.
    pub(crate) fn matches(&self, presented_digest: &[u8; 32]) -> bool {
        presented_digest.ct_eq(&self.digest).into()
    }
}

/// The digest tokens are kept (and compared) as.
pub(crate) fn token_digest(token: &str) -> [u8; 32] {
    digest(token)
}

/// A Discord user acting through switchboard's buttons and slash commands (Discord
/// authenticated them; the bot builds this from the interaction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscordUser {
    /// The user's id.
    pub id: Snowflake,
    /// Their roles in the guild where they acted (empty in a DM).
    pub roles: Vec<Snowflake>,
    /// Their name, for people.
    pub name: String,
    /// `discord:<id>`: the caller's key for rate limits and the audit log.
    pub key: Arc<str>,
}

impl DiscordUser {
    /// The user `id` (with `roles`, named `name`) as a caller.
    pub fn caller(id: Snowflake, roles: Vec<Snowflake>, name: impl Into<String>) -> Caller {
        Caller::Discord(Arc::new(DiscordUser {
            id,
            roles,
            name: name.into(),
            key: Arc::from(format!("discord:{id}")),
        }))
    }
}

/// Who is making a call.
#[derive(Debug, Clone)]
pub enum Caller {
    /// The operator token: everything is visible; rules with `caller = "operator"` apply.
    Operator,
    /// An agent run's capability token: its grant's scope, intersected with its session's.
    Capability(Arc<Capability>),
    /// A named service token: its own scope.
    Token(Arc<NamedCaller>),
    /// `insecure_no_auth` on a loopback bind.
    Unauthenticated,
    /// A Discord user clicking an approval button or changing `/tools`: only
    /// [`DISCORD_CALLABLES`].
    Discord(Arc<DiscordUser>),
}

impl Caller {
    /// A stable key for per-caller rate limits and the audit log.
    pub fn key(&self) -> String {
        self.limit_key().as_str().to_owned()
    }

    /// The same key, without allocating: what rate limits are kept under.
    pub fn limit_key(&self) -> CallerKey {
        match self {
            Caller::Operator => CallerKey::Operator,
            Caller::Capability(c) => CallerKey::Named(Arc::clone(&c.key)),
            Caller::Token(t) => CallerKey::Named(Arc::clone(&t.key)),
            Caller::Unauthenticated => CallerKey::Anonymous,
            Caller::Discord(user) => CallerKey::Named(Arc::clone(&user.key)),
        }
    }

    /// For `runs.list` / `runs.abort`: `Some(key)` when the caller sees and stops only the runs
    /// it started (`RunView::started_by` = its key) — a named token whose scope does not name
    /// the callable but grants an agent; `None` when it sees every run.
    pub fn own_runs_only(&self, tool_id: &str) -> Option<String> {
        match self {
            Caller::Token(t) if !scope_allows(&t.scope, tool_id) => Some(self.key()),
            _ => None,
        }
    }

    /// Whether the caller's own scope names `tool_id` (its token's globs; a run never gets an
    /// operator callable). Only a part of the answer: whether a caller may call a callable is
    /// [`crate::Core::may_call`]'s, which adds the run's session scope.
    pub fn scope_allows(&self, tool_id: &str) -> bool {
        match self {
            Caller::Operator | Caller::Unauthenticated => true,
            Caller::Capability(c) => {
                !is_operator_callable(tool_id) && scope_allows(&c.grant.scope, tool_id)
            }
            Caller::Token(t) => {
                scope_allows(&t.scope, tool_id)
                    || (OWN_RUNS_CALLABLES.contains(&tool_id) && grants_an_agent(&t.scope))
            }
            Caller::Discord(_) => DISCORD_CALLABLES.contains(&tool_id),
        }
    }

    /// Who this caller is as an approval's owner or decider: `operator` (the operator token,
    /// or no token under `insecure_no_auth`: the same person), `token:NAME`, `cap:ID`, or
    /// `discord:<user id>`.
    pub fn principal(&self) -> String {
        match self {
            Caller::Operator | Caller::Unauthenticated => "operator".to_owned(),
            other => other.key(),
        }
    }

    /// The run this call belongs to, for a capability.
    pub fn capability(&self) -> Option<&Capability> {
        match self {
            Caller::Capability(c) => Some(c),
            _ => None,
        }
    }
}

/// Which front made a call: set by the front itself, so a client cannot claim another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Front {
    /// The API (`/v1/call`, `/v1/batch`, the CLI, MCP) and in-process callers that say
    /// nothing more (the bot's buttons and commands, a run's own tool calls).
    #[default]
    Api,
    /// A console login (its login cookie): an approval it decides is `console:...`'s.
    Console,
    /// The agent bridge showing its run's own answer in the run's session — the reply, the
    /// draft, the ⏳/✅ reactions, typing — with the run's capability as the caller. Such a
    /// call needs no scope or permission rule (the audit row says `run-answer`); the
    /// allowlist, rate limits and hooks apply as to any call.
    RunAnswer,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(ttl: Duration) -> CapabilityGrant {
        CapabilityGrant {
            session_id: Snowflake(1000000000000000401),
            request_id: "run-1".into(),
            scope: vec!["surface.*".into()],
            ttl,
            client: None,
            cwd: None,
            trigger_message_id: None,
            requested_by: None,
            gate: None,
        }
    }

    fn token(scope: &[&str]) -> Caller {
        Caller::Token(Arc::new(NamedCaller {
            name: "t".into(),
            key: "token:t".into(),
            scope: scope.iter().map(|s| (*s).to_owned()).collect(),
        }))
    }

    #[test]
    fn a_token_with_an_agent_grant_lists_and_stops_only_its_own_runs() {
        let chat = token(&["agent:support"]);
        assert!(chat.scope_allows("runs.list") && chat.scope_allows("runs.abort"));
        assert!(!chat.scope_allows("runs.other") && !chat.scope_allows("approvals.list"));
        assert_eq!(chat.own_runs_only("runs.list").as_deref(), Some("token:t"));
        let ops = token(&["agent:support", "runs.*"]);
        assert_eq!(ops.own_runs_only("runs.list"), None);
        let plain = token(&["surface.*"]);
        assert!(!plain.scope_allows("runs.list"));
        assert_eq!(Caller::Operator.own_runs_only("runs.list"), None);
    }

    #[test]
    fn globs_match_whole_ids() {
        assert!(glob_matches("surface.*", "surface.messages.send"));
        assert!(glob_matches("*", "anything"));
        assert!(glob_matches(
            "surface.messages.list",
            "surface.messages.list"
        ));
        assert!(glob_matches("surface.*.list", "surface.messages.list"));
        assert!(!glob_matches("surface.messages", "surface.messages.list"));
        assert!(!glob_matches("surface.*", "workflow.create"));
        assert!(!glob_matches("", "x"));
        assert!(glob_matches("a**b", "ab"));
    }

    #[test]
    fn minted_tokens_are_long_random_and_stored_hashed() {
        let store = CapabilityStore::new();
        let a = store.mint(grant(Duration::from_secs(60))).unwrap();
        let b = store.mint(grant(Duration::from_secs(60))).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), CAPABILITY_PREFIX.len() + 64);
        assert!(store.by_digest.contains_key(&digest(&a)));
        assert!(store.resolve(&a).is_ok());
        assert_eq!(
            store.resolve("sbcap_nope").unwrap_err(),
            CapabilityRefusal::Unknown
        );
    }

    #[test]
    fn expired_tokens_are_refused_and_forgotten() {
        let store = CapabilityStore::new();
        let token = store.mint(grant(Duration::ZERO)).unwrap();
        assert_eq!(
            store.resolve(&token).unwrap_err(),
            CapabilityRefusal::Expired
        );
        assert!(store.is_empty());
    }

    #[tokio::test]
    async fn revoked_tokens_stop_working_and_say_how_their_run_ended() {
        let store = CapabilityStore::new();
        let token = store.mint(grant(Duration::from_secs(60))).unwrap();
        let live = store.resolve(&token).unwrap();
        assert_eq!(live.end(), None);
        let waiting = tokio::spawn({
            let live = Arc::clone(&live);
            async move { live.ended().await }
        });
        assert!(store.end(&token, TokenEnd::Aborted));
        assert_eq!(waiting.await.unwrap(), TokenEnd::Aborted);
        assert_eq!(live.end(), Some(TokenEnd::Aborted));
        assert_eq!(
            store.resolve(&token).unwrap_err(),
            CapabilityRefusal::Ended(TokenEnd::Aborted)
        );
        assert!(!store.revoke(&token), "ended once");
        let finished = store.mint(grant(Duration::from_secs(60))).unwrap();
        assert!(store.revoke(&finished));
        assert_eq!(
            store.resolve(&finished).unwrap_err(),
            CapabilityRefusal::Ended(TokenEnd::Finished)
        );
        assert_eq!(
            store.resolve("sbcap_never").unwrap_err(),
            CapabilityRefusal::Unknown
        );
    }

    #[tokio::test]
    async fn an_expiring_token_ends_what_waits_on_it() {
        let store = CapabilityStore::new();
        let token = store.mint(grant(Duration::from_millis(50))).unwrap();
        let live = store.resolve(&token).unwrap();
        assert_eq!(live.ended().await, TokenEnd::Expired);
    }

    #[test]
    fn ended_tokens_are_remembered_boundedly() {
        let store = CapabilityStore::new();
        for _ in 0..ENDED_KEPT + 10 {
            let token = store.mint(grant(Duration::from_secs(60))).unwrap();
            store.end(&token, TokenEnd::Aborted);
            assert!(store.ended.len() <= ENDED_KEPT);
        }
        assert!(store.is_empty());
    }

    #[test]
    fn operator_token_compares_by_value() {
        let op = OperatorToken::new("s3cret");
        assert!(op.matches("s3cret"));
        assert!(!op.matches("s3cre"));
        assert!(!op.matches(""));
    }
}
