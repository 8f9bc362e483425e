//! `memory.*`: short notes the agent keeps across conversations (issue 25 §4), per session or
//! per Discord user, in the store's `MemoryStore` ([`Core::memory`](crate::Core::memory)).
//!
//! A run's notes belong to its own session (`scope: "session"`) or to the person who asked
//! for the run (`scope: "user"`); another caller (the operator, a named token) names the
//! session (`sessionId`) or the user (`userId`). A scope holds at most
//! `agent.memory_max_chars` characters of notes and [`MAX_NOTES`] notes: a write past that is
//! refused with what the scope holds, so the agent can forget something first. A note written
//! in a run whose requester is not in `agent.trusted_users` is kept as untrusted: later
//! prompts show it with the untrusted mark. Every call is audited like any other.
//! `memory.summary` reads the session's current compaction summary (what starts its prompts).
//! `admin.memory.list`, an operator callable, pages through every note of every scope.

use async_trait::async_trait;
use protocol::{Effects, ErrorCode};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use switchboard_records::notes::{Note, NoteLimits, NoteScope};
use switchboard_store::NotePut;

use crate::error::ToolError;
use crate::invocation::{Invocation, PlanContext};
use crate::registry::{
    example, output, output_schema, Planned, Registry, SessionRequest, Tool, ToolOutput, ToolSpec,
};
use entity::Snowflake;

/// The most notes one scope holds.
pub const MAX_NOTES: usize = 50;
/// The longest key, in characters.
pub const MAX_KEY_CHARS: usize = 64;
/// `agent.memory_max_chars` when there is no `[agent]`.
const DEFAULT_MAX_CHARS: usize = 4_000;
/// The longest search query, in characters.
const MAX_QUERY_CHARS: usize = 200;

/// Registers `memory.write`, `memory.read`, `memory.search`, `memory.forget`.
pub fn register(registry: &mut Registry) {
    registry.register(WriteNote);
    registry.register(ReadNotes);
    registry.register(SearchNotes);
    registry.register(ForgetNote);
    registry.register(ReadSummary);
    registry.register(ListAllNotes);
}

/// Whose notes: `session` or `user`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScopeKind {
    /// The session's (the run's own, or `sessionId`).
    Session,
    /// A Discord user's (the run's requester, or `userId`).
    User,
}

/// A scope worked out at plan time: a user's is known; a session's is the call's target.
#[derive(Debug, Clone, Copy)]
enum Whose {
    Session,
    User(Snowflake),
}

fn store_error(error: switchboard_store::StoreError) -> ToolError {
    ToolError::store_unavailable(error.to_string())
}

fn invalid(message: impl Into<String>, field: &str) -> ToolError {
    ToolError::usage(ErrorCode::InvalidInput, message).with_details(json!({ "field": field }))
}

/// The plan's scope and the session the call acts in (allowlisted like any session).
fn whose(
    cx: &PlanContext<'_>,
    scope: ScopeKind,
    session_id: &Option<String>,
    user_id: &Option<String>,
) -> Result<(Whose, SessionRequest), ToolError> {
    let user_id = user_id.as_deref();
    let session = SessionRequest::session_id(session_id.as_deref(), 0);
    let run_user = cx
        .context
        .caller
        .capability()
        .and_then(|c| c.grant.requested_by);
    let whose = match scope {
        ScopeKind::Session => Whose::Session,
        ScopeKind::User => match (run_user, user_id) {
            (Some(user), None) => Whose::User(user),
            (Some(user), Some(named)) => {
                let named = crate::invocation::parse_id("userId", named)?;
                if named != user {
                    return Err(invalid(
                        "a run keeps notes only about the person who asked for it; leave userId out",
                        "userId",
                    ));
                }
                Whose::User(user)
            }
            (None, Some(named)) => Whose::User(crate::invocation::parse_id("userId", named)?),
            (None, None) => {
                return Err(invalid(
                    "scope \"user\" needs userId outside an agent run",
                    "userId",
                ))
            }
        },
    };
    Ok((whose, session))
}

fn note_scope(cx: &Invocation<'_>, whose: Whose) -> Result<NoteScope, ToolError> {
    Ok(match whose {
        Whose::Session => NoteScope::Session(cx.target()?.channel_id()),
        Whose::User(user) => NoteScope::User(user),
    })
}

/// A key: trimmed, 1 to [`MAX_KEY_CHARS`] characters, no control characters.
fn key(text: &str) -> Result<String, ToolError> {
    let key = text.trim();
    let chars = key.chars().count();
    if chars == 0 || chars > MAX_KEY_CHARS || key.chars().any(char::is_control) {
        return Err(invalid(
            format!(
                "key must be 1 to {MAX_KEY_CHARS} characters without line breaks or control characters, got {chars}"
            ),
            "key",
        ));
    }
    Ok(key.to_owned())
}

fn max_chars(settings: &crate::live::Settings) -> usize {
    settings
        .config()
        .agent
        .as_ref()
        .map_or(DEFAULT_MAX_CHARS, |agent| agent.memory_max_chars)
}

/// A note as callables answer it.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NoteView {
    /// `session:<id>` or `user:<id>`.
    pub scope: String,
    /// Its key.
    pub key: String,
    /// The note.
    pub text: String,
    /// Written while someone the operator does not trust was speaking.
    pub untrusted: bool,
    /// When it was last written, ms since the Unix epoch.
    pub updated_ms: u64,
}

impl From<Note> for NoteView {
    fn from(note: Note) -> NoteView {
        NoteView {
            scope: note.scope.to_string(),
            key: note.key,
            text: note.text,
            untrusted: note.untrusted,
            updated_ms: note.updated_ms,
        }
    }
}

/// What the reading callables answer.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NotesAnswer {
    /// The notes, by key.
    pub notes: Vec<NoteView>,
}

pub struct WriteNote;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WriteNoteInput {
    /// `session` or `user`.
    pub scope: ScopeKind,
    /// The note's key within its scope (1 to 64 characters); writing a key again replaces it.
    pub key: String,
    /// The note (at most agent.memory_max_chars characters, all the scope's notes together).
    pub text: String,
    /// The session (alias like `#ops`, or id); an agent run's is its own.
    pub session_id: Option<String>,
    /// The user's id, for `scope: "user"` outside a run.
    pub user_id: Option<String>,
}

pub struct WritePlan {
    whose: Whose,
    key: String,
    text: String,
}

#[async_trait]
impl Tool for WriteNote {
    type Input = WriteNoteInput;
    type Plan = WritePlan;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "memory.write",
            description: "Keep a short note for later conversations: about this session, or about the person who asked.",
            help: "Notes are listed in later prompts of the session (scope session) or wherever the user talks (scope user). Writing a key again replaces its note. A scope holds at most agent.memory_max_chars characters and 50 notes; forget one first when it is full. A note written while an untrusted person spoke is shown as untrusted later.",
            mutating: true,
            primary: None,
            title: "Keep a note",
            effects: Effects::LOCAL_READ,
            output_schema: Some(output_schema::<NoteView>()),
            examples: vec![example(
                "Remember where the release config lives",
                "tools memory.write --scope=session --key=release-config --text='/srv/release/keystone.toml'",
                json!({"scope": "session", "key": "release-config", "text": "/srv/release/keystone.toml"}),
            )],
        }
    }

    fn plan(
        &self,
        cx: &PlanContext<'_>,
        input: WriteNoteInput,
    ) -> Result<Planned<WritePlan>, ToolError> {
        let (whose, session) = whose(cx, input.scope, &input.session_id, &input.user_id)?;
        let key = key(&input.key)?;
        let text = input.text.trim().to_owned();
        let limit = max_chars(cx.settings());
        let chars = text.chars().count();
        if chars == 0 || chars > limit {
            return Err(invalid(
                format!(
                    "text must be 1 to {limit} characters (agent.memory_max_chars), got {chars}"
                ),
                "text",
            ));
        }
        Ok(Planned::in_session(WritePlan { whose, key, text }, session))
    }

    async fn run(&self, cx: &Invocation<'_>, plan: WritePlan) -> Result<ToolOutput, ToolError> {
        let scope = note_scope(cx, plan.whose)?;
        let config = cx.settings().config();
        let trusted = config
            .agent
            .as_ref()
            .map_or(&[][..], |agent| agent.trusted_users.as_slice());
        let trust = switchboard_engine::trust::Trust::new(trusted, cx.surface().bot_user_id());
        // Who spoke: the run's requester; an operator's or a token's notes are their own.
        let untrusted = cx
            .context
            .caller
            .capability()
            .and_then(|c| c.grant.requested_by)
            .is_some_and(|user| !trust.trusts(user));
        let note = Note {
            scope,
            key: plan.key,
            text: plan.text,
            untrusted,
            updated_ms: crate::clock::now_ms(),
        };
        let limits = NoteLimits {
            max_notes: MAX_NOTES,
            max_chars: max_chars(cx.settings()),
        };
        match cx
            .core
            .memory()
            .put_note(note.clone(), limits)
            .await
            .map_err(store_error)?
        {
            NotePut::Saved => output(&NoteView::from(note)),
            NotePut::Full { notes, chars } => Err(ToolError::usage(
                ErrorCode::InvalidInput,
                format!(
                    "{scope} is full: it holds {notes} notes and {chars} characters (at most {MAX_NOTES} notes and {} characters); forget a note (memory.forget) or shorten this one",
                    limits.max_chars
                ),
            )
            .with_details(json!({"field": "text", "notes": notes, "chars": chars}))),
        }
    }
}

pub struct ReadNotes;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReadNotesInput {
    /// `session` or `user`.
    pub scope: ScopeKind,
    /// One note's key; without it, every note of the scope.
    pub key: Option<String>,
    /// The session (alias like `#ops`, or id); an agent run's is its own.
    pub session_id: Option<String>,
    /// The user's id, for `scope: "user"` outside a run.
    pub user_id: Option<String>,
}

pub struct ReadPlan {
    whose: Whose,
    key: Option<String>,
}

#[async_trait]
impl Tool for ReadNotes {
    type Input = ReadNotesInput;
    type Plan = ReadPlan;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "memory.read",
            description: "Read the notes kept about this session or the person who asked (one by key, or all).",
            help: "Answers the scope's notes by key; with key, that note only (none when it is not kept).",
            mutating: false,
            primary: None,
            title: "Read notes",
            effects: Effects::LOCAL_READ,
            output_schema: Some(output_schema::<NotesAnswer>()),
            examples: vec![example(
                "Every note of #ops",
                "tools memory.read --scope=session --session-id=#ops",
                json!({"scope": "session", "sessionId": "#ops"}),
            )],
        }
    }

    fn plan(
        &self,
        cx: &PlanContext<'_>,
        input: ReadNotesInput,
    ) -> Result<Planned<ReadPlan>, ToolError> {
        let (whose, session) = whose(cx, input.scope, &input.session_id, &input.user_id)?;
        let key = input.key.as_deref().map(key).transpose()?;
        Ok(Planned::in_session(ReadPlan { whose, key }, session))
    }

    async fn run(&self, cx: &Invocation<'_>, plan: ReadPlan) -> Result<ToolOutput, ToolError> {
        let scope = note_scope(cx, plan.whose)?;
        let memory = cx.core.memory();
        let notes = match plan.key {
            Some(key) => memory
                .note(scope, &key)
                .await
                .map_err(store_error)?
                .into_iter()
                .collect(),
            None => memory.notes(scope, MAX_NOTES).await.map_err(store_error)?,
        };
        output(&NotesAnswer {
            notes: notes.into_iter().map(NoteView::from).collect(),
        })
    }
}

pub struct SearchNotes;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SearchNotesInput {
    /// Words to find (all of them, in any case) in the notes' keys and texts.
    pub query: String,
    /// The session (alias like `#ops`, or id); an agent run's is its own.
    pub session_id: Option<String>,
    /// Also search the notes about this user (outside a run; a run's requester's are searched).
    pub user_id: Option<String>,
}

pub struct SearchPlan {
    words: Vec<String>,
    user: Option<Snowflake>,
}

#[async_trait]
impl Tool for SearchNotes {
    type Input = SearchNotesInput;
    type Plan = SearchPlan;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "memory.search",
            description: "Find notes kept about this session or the person who asked, by words.",
            help: "Every word must appear in the note's key or text (any case). Searches the session's notes and the user's.",
            mutating: false,
            primary: None,
            title: "Search notes",
            effects: Effects::LOCAL_READ,
            output_schema: Some(output_schema::<NotesAnswer>()),
            examples: vec![example(
                "Notes about deploys",
                "tools memory.search --query=deploy --session-id=#ops",
                json!({"query": "deploy", "sessionId": "#ops"}),
            )],
        }
    }

    fn plan(
        &self,
        cx: &PlanContext<'_>,
        input: SearchNotesInput,
    ) -> Result<Planned<SearchPlan>, ToolError> {
        let query = input.query.trim();
        let chars = query.chars().count();
        if chars == 0 || chars > MAX_QUERY_CHARS {
            return Err(invalid(
                format!("query must be 1 to {MAX_QUERY_CHARS} characters, got {chars}"),
                "query",
            ));
        }
        let words = query.split_whitespace().map(str::to_lowercase).collect();
        let user = match whose(cx, ScopeKind::User, &input.session_id, &input.user_id) {
            Ok((Whose::User(user), _)) => Some(user),
            Ok((Whose::Session, _)) => None,
            // No user outside a run unless named: only the session's notes.
            Err(_) if input.user_id.is_none() => None,
            Err(error) => return Err(error),
        };
        Ok(Planned::in_session(
            SearchPlan { words, user },
            SessionRequest::session_id(input.session_id.as_deref(), 0),
        ))
    }

    async fn run(&self, cx: &Invocation<'_>, plan: SearchPlan) -> Result<ToolOutput, ToolError> {
        let memory = cx.core.memory();
        let mut scopes = vec![NoteScope::Session(cx.target()?.channel_id())];
        scopes.extend(plan.user.map(NoteScope::User));
        let mut found = Vec::new();
        for scope in scopes {
            for note in memory.notes(scope, MAX_NOTES).await.map_err(store_error)? {
                let haystack = format!("{} {}", note.key, note.text).to_lowercase();
                if plan
                    .words
                    .iter()
                    .all(|word| haystack.contains(word.as_str()))
                {
                    found.push(NoteView::from(note));
                }
            }
        }
        output(&NotesAnswer { notes: found })
    }
}

pub struct ForgetNote;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ForgetNoteInput {
    /// `session` or `user`.
    pub scope: ScopeKind,
    /// The note's key.
    pub key: String,
    /// The session (alias like `#ops`, or id); an agent run's is its own.
    pub session_id: Option<String>,
    /// The user's id, for `scope: "user"` outside a run.
    pub user_id: Option<String>,
}

/// Whether a note was forgotten.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Forgotten {
    /// False when there was no such note.
    pub forgotten: bool,
}

#[async_trait]
impl Tool for ForgetNote {
    type Input = ForgetNoteInput;
    type Plan = ReadPlan;

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "memory.forget",
            description: "Forget a note kept about this session or the person who asked.",
            help: "Answers whether there was such a note.",
            mutating: true,
            primary: None,
            title: "Forget a note",
            effects: Effects::LOCAL_OVERWRITE,
            output_schema: Some(output_schema::<Forgotten>()),
            examples: vec![example(
                "Forget a note of #ops",
                "tools memory.forget --scope=session --key=release-config --session-id=#ops",
                json!({"scope": "session", "key": "release-config", "sessionId": "#ops"}),
            )],
        }
    }

    fn plan(
        &self,
        cx: &PlanContext<'_>,
        input: ForgetNoteInput,
    ) -> Result<Planned<ReadPlan>, ToolError> {
        let (whose, session) = whose(cx, input.scope, &input.session_id, &input.user_id)?;
        let key = Some(key(&input.key)?);
        Ok(Planned::in_session(ReadPlan { whose, key }, session))
    }

    async fn run(&self, cx: &Invocation<'_>, plan: ReadPlan) -> Result<ToolOutput, ToolError> {
        let scope = note_scope(cx, plan.whose)?;
        let key = plan.key.unwrap_or_default();
        let forgotten = cx
            .core
            .memory()
            .forget_note(scope, &key)
            .await
            .map_err(store_error)?;
        output(&Forgotten { forgotten })
    }
}

pub struct ReadSummary;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReadSummaryInput {
    /// The session (alias like `#ops`, or id); an agent run's is its own.
    pub session_id: Option<String>,
}

/// A session's current summary.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SummaryAnswer {
    /// The summary (untrusted lines marked), or none when the session was never compacted.
    pub summary: Option<String>,
    /// The newest message it covers: prompts list only later ones.
    pub covers_to: Option<String>,
    /// Its size in tokens.
    pub tokens: Option<u32>,
    /// When it was written, ms since the Unix epoch.
    pub created_ms: Option<u64>,
}

#[async_trait]
impl Tool for ReadSummary {
    type Input = ReadSummaryInput;
    type Plan = ();

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "memory.summary",
            description: "Read the session's current summary: what compaction wrote for its older conversation, which starts its prompts.",
            help: "Answers summary null when the session was never compacted. The summarised messages stay in the store and in search.",
            mutating: false,
            primary: None,
            title: "Read a session's summary",
            effects: Effects::LOCAL_READ,
            output_schema: Some(output_schema::<SummaryAnswer>()),
            examples: vec![example(
                "The summary of #ops",
                "tools memory.summary --session-id=#ops",
                json!({"sessionId": "#ops"}),
            )],
        }
    }

    fn plan(
        &self,
        _cx: &PlanContext<'_>,
        input: ReadSummaryInput,
    ) -> Result<Planned<()>, ToolError> {
        Ok(Planned::in_session(
            (),
            SessionRequest::session_id(input.session_id.as_deref(), 0),
        ))
    }

    async fn run(&self, cx: &Invocation<'_>, _plan: ()) -> Result<ToolOutput, ToolError> {
        let session = cx.target()?.channel_id();
        let summary = cx
            .core
            .memory()
            .summary(session)
            .await
            .map_err(store_error)?;
        output(&SummaryAnswer {
            covers_to: summary.as_ref().map(|s| s.covers_to.to_string()),
            tokens: summary.as_ref().map(|s| s.tokens),
            created_ms: summary.as_ref().map(|s| s.created_ms),
            summary: summary.map(|s| s.text),
        })
    }
}

/// The most notes one `admin.memory.list` page holds.
pub const MAX_LIST_PAGE: u32 = 1_000;

pub struct ListAllNotes;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ListAllNotesInput {
    /// Notes per page (1 to 1,000; default 1,000).
    pub limit: Option<u32>,
    /// Where the previous page ended: its `next` (`<scope>\t<key>`); without it, the first page.
    pub after: Option<String>,
}

/// What `admin.memory.list` answers.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllNotesPage {
    /// The notes, by scope then key.
    pub notes: Vec<NoteView>,
    /// Pass as `after` for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

#[async_trait]
impl Tool for ListAllNotes {
    type Input = ListAllNotesInput;
    type Plan = (usize, Option<(NoteScope, String)>);

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            id: "admin.memory.list",
            description: "Every note the agent keeps, in every session and about every user, by scope then key.",
            help: "An operator callable: the operator, or a token whose scope names it; an agent run never. Pages of at most 1,000: pass the answer's next as after for the next page. memory.read reads one scope; memory.forget deletes a note.",
            mutating: false,
            primary: None,
            title: "List all notes",
            effects: Effects::LOCAL_READ,
            output_schema: Some(output_schema::<AllNotesPage>()),
            examples: vec![example(
                "Every note",
                "tools admin.memory.list",
                json!({}),
            )],
        }
    }

    fn plan(
        &self,
        _: &PlanContext<'_>,
        input: ListAllNotesInput,
    ) -> Result<Planned<Self::Plan>, ToolError> {
        let limit = input.limit.unwrap_or(MAX_LIST_PAGE);
        if !(1..=MAX_LIST_PAGE).contains(&limit) {
            return Err(invalid(
                format!("limit must be 1 to {MAX_LIST_PAGE}, got {limit}"),
                "limit",
            ));
        }
        let after = match input.after.as_deref() {
            None => None,
            Some(cursor) => {
                let bad = || {
                    invalid(
                        "after must be the next of a previous answer (<scope>\\t<key>, such as session:1000000000000000401\\trelease-config)",
                        "after",
                    )
                };
                let (scope, key) = cursor.split_once('\t').ok_or_else(bad)?;
                Some((
                    scope.parse::<NoteScope>().map_err(|_| bad())?,
                    key.to_owned(),
                ))
            }
        };
        Ok(Planned::nowhere((limit as usize, after)))
    }

    async fn run(
        &self,
        cx: &Invocation<'_>,
        (limit, after): Self::Plan,
    ) -> Result<ToolOutput, ToolError> {
        // One more than the page tells whether another page follows.
        let mut notes = cx
            .core
            .memory()
            .notes_after(after, limit + 1)
            .await
            .map_err(store_error)?;
        let more = notes.len() > limit;
        notes.truncate(limit);
        let next = more
            .then(|| notes.last().map(|n| format!("{}\t{}", n.scope, n.key)))
            .flatten();
        output(&AllNotesPage {
            notes: notes.into_iter().map(NoteView::from).collect(),
            next,
        })
    }
}
