//! Which events a subscriber may see: what it could read through the pipeline.
//!
//! An event is shown where the subscriber's matching read would pass — the same scope,
//! allowlist and permission rules (only an outright allow: an ask would need an approver):
//!
//! | events | the matching read |
//! |---|---|
//! | `message.*`, `run.*`, `context.*` | `surface.messages.list` or `surface.messages.read` in the event's session |
//! | `workflow.*` | `workflow.get` or `workflow.list` in the event's session |
//! | `shell.*` | `shell.list` in the event's session |
//! | `fs.changed` | `fs.list` or `fs.read` in the event's session |
//! | `call.finished` | its own calls; every caller's with `audit.list` (the audit log shows them) |
//! | `approval.*` | its own calls' approvals only (listing every approval is the operator's) |
//! | `gateway.state` | everyone |
//!
//! The operator sees everything. Each answer is kept per subscriber, session and family until
//! the rules, the allowlist or a session's `/tools` scope change (the governance generation), so
//! a stream with many events in a few sessions looks each up once.

use std::collections::HashMap;
use std::sync::Arc;

use entity::Snowflake;
use protocol::ErrorCode;
use serde_json::json;
use switchboard_config::Policy;

use crate::auth::{Caller, TokenEnd};
use crate::error::ToolError;
use crate::events::{Admit, Audience, Event, EventsQuery, Filter, Subscriber};
use crate::server::Core;

/// The reads that stand for a session's messages (and the runs that answer them).
const MESSAGE_READS: &[&str] = &["surface.messages.list", "surface.messages.read"];
/// The reads that stand for a session's workflows.
const WORKFLOW_READS: &[&str] = &["workflow.get", "workflow.list"];
/// The reads that stand for a session's commands.
const SHELL_READS: &[&str] = &["shell.list"];
/// The reads that stand for a session's files.
const FILE_READS: &[&str] = &["fs.list", "fs.read"];
/// Sessions remembered per subscriber before the memory starts afresh.
const REMEMBERED: usize = 1024;

/// What an event carries, as far as who may see it goes.
enum Carries {
    Everyone,
    /// What one of these reads in the event's session would show.
    Session(&'static [&'static str]),
    /// One caller's call: its own, or for whoever may read the audit log.
    Call,
    /// One caller's approval: its own only.
    Approval,
    /// A type this table does not know: the operator's only.
    Unknown,
}

fn carries(kind: &str) -> Carries {
    if kind.starts_with("message.") || kind.starts_with("run.") || kind.starts_with("context.") {
        Carries::Session(MESSAGE_READS)
    } else if kind.starts_with("workflow.") {
        Carries::Session(WORKFLOW_READS)
    } else if kind.starts_with("shell.") {
        Carries::Session(SHELL_READS)
    } else if kind == "fs.changed" {
        Carries::Session(FILE_READS)
    } else if kind == "call.finished" {
        Carries::Call
    } else if kind.starts_with("approval.") {
        Carries::Approval
    } else if kind == "gateway.state" {
        Carries::Everyone
    } else {
        Carries::Unknown
    }
}

/// A subscriber that is not the operator: what it may read.
struct Reader {
    core: Arc<Core>,
    caller: Caller,
    key: Arc<str>,
    generation: u64,
    /// (the reads' first id, session) → may read.
    sessions: HashMap<(&'static str, Snowflake), bool>,
    /// May read every caller's calls (`audit.list`).
    audit: Option<bool>,
}

impl Reader {
    /// Forgets what was worked out from rules that changed since.
    fn refresh(&mut self) {
        let now = self.core.governance().generation();
        if now != self.generation {
            self.generation = now;
            self.sessions.clear();
            self.audit = None;
        }
    }

    /// Whether a read the rules allow outright, in `session` (none: a read of no session).
    fn allowed(&self, tool: &str, session: Option<Snowflake>) -> bool {
        let targets: Vec<Snowflake> = session.into_iter().collect();
        self.core.may_call(&self.caller, tool)
            && self
                .core
                .settings()
                .governance
                .decide(tool, &self.caller, &targets)
                .policy
                == Policy::Allow
    }

    fn reads_audit(&mut self) -> bool {
        if let Some(known) = self.audit {
            return known;
        }
        let known = self.allowed("audit.list", None);
        self.audit = Some(known);
        known
    }

    async fn reads_session(&mut self, reads: &'static [&'static str], session: Snowflake) -> bool {
        let mut may = reads.iter().any(|tool| self.allowed(tool, Some(session)));
        if may {
            let settings = self.core.settings();
            may = self
                .core
                .allowlist
                .check_with(&settings.allow, self.core.surface.as_ref(), session)
                .await
                .is_ok();
        }
        if self.sessions.len() >= REMEMBERED {
            self.sessions.clear();
        }
        self.sessions.insert((reads[0], session), may);
        may
    }
}

impl Audience for Reader {
    fn admits<'a>(&'a mut self, event: &'a Event) -> Admit<'a> {
        self.refresh();
        let own = event.caller.as_deref() == Some(&*self.key);
        match carries(&event.kind) {
            Carries::Everyone => Admit::Now(true),
            Carries::Unknown => Admit::Now(false),
            Carries::Approval => Admit::Now(own),
            Carries::Call => Admit::Now(own || self.reads_audit()),
            Carries::Session(reads) => match event.session {
                None => Admit::Now(false),
                Some(session) => match self.sessions.get(&(reads[0], session)) {
                    Some(known) => Admit::Now(*known),
                    None => Admit::Later(Box::pin(self.reads_session(reads, session))),
                },
            },
        }
    }
}

/// The subscriber `caller` is for the event hub: the operator sees everything; any other
/// caller what it may read, its streams counted; a capability's stream ends with its token.
pub fn subscriber(core: &Arc<Core>, caller: &Caller) -> Subscriber {
    let key = match caller.limit_key() {
        crate::auth::CallerKey::Named(key) => key,
        crate::auth::CallerKey::Operator | crate::auth::CallerKey::Anonymous => {
            return Subscriber::default();
        }
    };
    let until = caller.capability().map(|capability| {
        let capability = Arc::new(capability.clone());
        let ended: std::pin::Pin<Box<dyn std::future::Future<Output = serde_json::Value> + Send>> =
            Box::pin(async move {
                let (reason, message) = match capability.ended().await {
                    TokenEnd::Finished => (
                        "run_finished",
                        "this capability token's run finished, and its stream ends with it",
                    ),
                    TokenEnd::Aborted => (
                        "run_aborted",
                        "this capability token's run was aborted, and its stream ends with it",
                    ),
                    TokenEnd::Expired => (
                        "token_expired",
                        "this capability token expired, and its stream ends with it",
                    ),
                };
                json!({ "reason": reason, "message": message })
            });
        ended
    });
    Subscriber {
        caller: Some(Arc::clone(&key)),
        audience: Some(Box::new(Reader {
            core: Arc::clone(core),
            caller: caller.clone(),
            key,
            generation: core.governance().generation(),
            sessions: HashMap::new(),
            audit: None,
        })),
        until,
    }
}

/// The filter a `caller` gets for `query`: a capability sees its own session only, message
/// events need the right to read messages, `types` and `session` narrow it. The same rules for
/// `/v1/events` and the console's relay.
pub fn caller_filter(
    core: &Core,
    caller: &Caller,
    query: &EventsQuery,
) -> Result<Filter, ToolError> {
    let scope_session = caller.capability().map(|c| c.grant.session_id);
    let session = match query.session.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(reference) => Some(
            entity::Mapper::new(core.settings().aliases(), core.surface.as_ref())
                .resolve_session(reference)
                .map_err(|error| {
                    ToolError::not_found(ErrorCode::UnknownSession, error.to_string())
                })?,
        ),
    };
    if let (Some(bound), Some(asked)) = (scope_session, session) {
        if bound != asked {
            return Err(ToolError::denied(
                ErrorCode::OutOfScope,
                format!("this capability token sees the events of session {bound} only"),
            ));
        }
    }
    Ok(Filter {
        types: query
            .types
            .as_deref()
            .map(crate::events::parse_types)
            .transpose()?
            .unwrap_or_default(),
        session,
        scope_session,
    })
}
