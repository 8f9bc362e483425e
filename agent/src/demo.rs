//! `runner = "demo"`: the playground's agent. No model and no network: it understands a few
//! phrases and acts on them with the run's own capability through [`Core::call`], the same
//! pipeline as any agent — so scopes, permission rules (an `ask` shows approval buttons),
//! rate limits and the audit log all show. Everything it says is deterministic.
//!
//! Callables other branches add later (`surface.messages.search`, `surface.threads.create`)
//! are looked up in the registry at run time: the phrases that need them start working as soon
//! as they exist, and say plainly that the feature is missing until then.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use switchboard_engine::runs::Trigger;
use switchboard_engine::{CallContext, Core, ToolError};

/// Messages read for a summary.
const SUMMARY_WINDOW: u32 = 50;
/// Lines quoted at the end of a summary.
const SUMMARY_LINES: usize = 5;
/// Characters kept of each quoted line.
const QUOTE_CHARS: usize = 120;
/// How long an `ask` waits for its answer before resuming with "no answer".
const ASK_TIMEOUT_S: u64 = 3_600;
/// Results quoted from a search.
const SEARCH_RESULTS: usize = 5;

const SEARCH_TOOL: &str = "surface.messages.search";
const THREAD_TOOL: &str = "surface.threads.create";
const RUN_TOOL: &str = "shell.run";
/// Characters of a command's output quoted back.
const OUTPUT_CHARS: usize = 1_500;

/// What the demo agent can do, as `help` lists it (and the fallback repeats), after the line
/// that says how to ask ([`Mentions::how_to_ask`]).
const PHRASES: &str = "• `summarize` — who has been talking here, and the last few lines
• `ask @user <question>` — I ask them here and report back when they answer
• `post to #channel <text>` — I post it there (the playground asks an approver first: click Approve)
• `search <words>` — find messages that contain them
• `thread <name>` — start a thread and continue there
• `run <command>` — run it in this channel's workspace, in the sandbox (an approver sees the exact command first)
• `help` — this list
To use a real model instead, start the playground with --agent-url URL --model NAME.";

/// Where people must mention the agent for it to answer, as the bridge decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mentions {
    /// A mention is needed in the session this run answers in (not in a DM, an active channel,
    /// or a thread the bot started when `agent.reply_in_thread` is not `never`).
    pub needed_here: bool,
    /// A mention is needed in a thread the bot starts (`agent.reply_in_thread = "never"`).
    pub needed_in_new_threads: bool,
}

impl Mentions {
    fn how_to_ask(self) -> &'static str {
        if self.needed_here {
            "Mention me with one of them:"
        } else {
            "Write one of them here (no need to mention me):"
        }
    }

    /// The whole `help` text.
    pub fn help(self) -> String {
        format!(
            "I'm the playground's demo agent: no model, just a few phrases. {}\n{PHRASES}",
            self.how_to_ask()
        )
    }
}

/// One parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phrase {
    /// `help`.
    Help,
    /// `summarize`.
    Summarize,
    /// `ask @user <question>`.
    Ask {
        /// The user as written (`@Tomas`).
        user: String,
        /// The question.
        question: String,
    },
    /// `post to #channel <text>`.
    PostTo {
        /// The session as written (`#release-room`).
        session: String,
        /// What to post.
        text: String,
    },
    /// `search <words>`.
    Search(String),
    /// `thread <name>`.
    Thread(String),
    /// `run <command>`.
    Run(String),
    /// Anything else (what was said, for the log).
    Unknown,
    /// A phrase named with its argument missing: says what it needs.
    Incomplete(&'static str),
}

/// Reads what a trigger asks for. `bot_mention` is how the bot's own mention reads (`@switchboard`);
/// it is removed wherever it stands, with greetings and punctuation around the request.
pub fn parse(text: &str, bot_mention: &str) -> Phrase {
    let mut rest = text.to_owned();
    if !bot_mention.is_empty() {
        rest = rest.replace(bot_mention, " ");
    }
    let mut rest = rest.trim();
    // Greetings and politeness in front of the request.
    loop {
        let trimmed = rest.trim_start_matches(|c: char| c.is_whitespace() || ",.:;!".contains(c));
        let lower = trimmed.to_lowercase();
        let skipped = ["hi ", "hello ", "hey ", "please ", "can you ", "could you "]
            .iter()
            .find(|word| lower.starts_with(*word))
            .map(|word| &trimmed[word.len()..]);
        match skipped {
            Some(after) => rest = after,
            None => {
                rest = trimmed;
                break;
            }
        }
    }
    let rest = rest.trim_end();
    let (head, tail) = match rest.split_once(char::is_whitespace) {
        Some((head, tail)) => (head, tail.trim()),
        None => (rest, ""),
    };
    let head = head
        .trim_end_matches(|c: char| ",:.!?".contains(c))
        .to_lowercase();
    match head.as_str() {
        "help" | "?" | "commands" => Phrase::Help,
        "summarize" | "summarise" | "summary" | "recap" => Phrase::Summarize,
        "ask" => match tail.split_once(char::is_whitespace) {
            Some((user, question)) if !question.trim().is_empty() => Phrase::Ask {
                user: user.trim_end_matches([',', ':']).to_owned(),
                question: question.trim().to_owned(),
            },
            _ => Phrase::Incomplete("`ask @user <question>`: name who to ask, then the question"),
        },
        "post" => {
            let after_to = tail
                .strip_prefix("to ")
                .or_else(|| tail.strip_prefix("in "))
                .unwrap_or(tail)
                .trim_start();
            match after_to.split_once(char::is_whitespace) {
                Some((session, text)) if !text.trim().is_empty() => Phrase::PostTo {
                    session: session.trim_end_matches([',', ':']).to_owned(),
                    text: text.trim().to_owned(),
                },
                _ => Phrase::Incomplete(
                    "`post to #channel <text>`: name the channel, then what to post",
                ),
            }
        }
        "search" | "find" if !tail.is_empty() => Phrase::Search(tail.to_owned()),
        "search" | "find" => Phrase::Incomplete("`search <words>`: say what to look for"),
        "thread" if !tail.is_empty() => Phrase::Thread(tail.to_owned()),
        "thread" => Phrase::Incomplete("`thread <name>`: give the thread a name"),
        "run" if !tail.is_empty() => Phrase::Run(tail.to_owned()),
        "run" => Phrase::Incomplete("`run <command>`: say which command to run"),
        _ => Phrase::Unknown,
    }
}

/// The demo agent's answer to `trigger`: acts through `core` with the run's `context` (its
/// capability), and returns the text to post as the reply.
pub async fn answer(
    core: &Core,
    context: &CallContext,
    trigger: &Trigger,
    mentions: Mentions,
) -> String {
    if let Some(workflow_id) = &trigger.workflow_id {
        return report_answers(core, context, trigger, workflow_id).await;
    }
    let bot_mention = core
        .surface()
        .bot_user_id()
        .map(|id| core.readable(&format!("<@{id}>")).into_owned())
        .unwrap_or_default();
    let phrase = parse(&trigger.text, &bot_mention);
    tracing::debug!(?phrase, "demo agent");
    match phrase {
        Phrase::Help => mentions.help(),
        Phrase::Summarize => summarize(core, context, trigger).await,
        Phrase::Ask { user, question } => ask(core, context, trigger, &user, &question).await,
        Phrase::PostTo { session, text } => post_to(core, context, &session, &text).await,
        Phrase::Search(words) => search(core, context, trigger, &words).await,
        Phrase::Thread(name) => thread(core, context, trigger, &name, mentions).await,
        Phrase::Run(command) => run_command(core, context, &command).await,
        Phrase::Incomplete(usage) => format!("Almost: {usage}."),
        Phrase::Unknown => format!("I didn't catch that. {}", mentions.help()),
    }
}

async fn call(
    core: &Core,
    context: &CallContext,
    tool: &str,
    input: Value,
) -> Result<Value, ToolError> {
    let output = core.call(context, tool, input).await?;
    serde_json::from_str(output.get())
        .map_err(|error| ToolError::internal(format!("{tool} answered with invalid JSON: {error}")))
}

/// Quoted text that cannot close the code block it stands in, cut to `QUOTE_CHARS`.
fn quote(text: &str) -> String {
    let flat = text.replace("```", "'''").replace('\n', " ");
    let mut cut: String = flat.chars().take(QUOTE_CHARS).collect();
    if flat.chars().count() > QUOTE_CHARS {
        cut.push('…');
    }
    cut
}

fn session_name(core: &Core, channel: entity::Snowflake) -> String {
    core.readable(&format!("<#{channel}>")).into_owned()
}

async fn summarize(core: &Core, context: &CallContext, trigger: &Trigger) -> String {
    let listed = call(
        core,
        context,
        "surface.messages.list",
        json!({"sessionId": trigger.channel_id.to_string(), "limit": SUMMARY_WINDOW}),
    )
    .await;
    let listed = match listed {
        Ok(value) => value,
        Err(error) => return format!("I couldn't read this channel: {}", error.message),
    };
    let trigger_id = trigger.message_id.map(|id| id.to_string());
    let messages: Vec<&Value> = listed["messages"]
        .as_array()
        .map(|all| {
            all.iter()
                .filter(|m| m["messageId"].as_str() != trigger_id.as_deref())
                .collect()
        })
        .unwrap_or_default();
    let name = session_name(core, trigger.channel_id);
    if messages.is_empty() {
        return format!("Nothing has been said in {name} yet (that I have seen).");
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for message in &messages {
        *counts
            .entry(message["authorName"].as_str().unwrap_or("someone"))
            .or_default() += 1;
    }
    let mut by_count: Vec<(&str, usize)> = counts.into_iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let who = by_count
        .iter()
        .map(|(author, count)| format!("{author} {count}"))
        .collect::<Vec<_>>()
        .join(", ");
    let last: Vec<String> = messages
        .iter()
        .skip(messages.len().saturating_sub(SUMMARY_LINES))
        .map(|m| {
            format!(
                "{}: {}",
                m["authorName"].as_str().unwrap_or("someone"),
                quote(m["text"].as_str().unwrap_or_default())
            )
        })
        .collect();
    // The quoted lines stand in a code block: their @names stay text and ping nobody.
    format!(
        "{name}: {count} message{s} from {authors} people ({who}). The last {shown}:\n```\n{lines}\n```",
        count = messages.len(),
        s = if messages.len() == 1 { "" } else { "s" },
        authors = by_count.len(),
        shown = last.len(),
        lines = last.join("\n"),
    )
}

async fn ask(
    core: &Core,
    context: &CallContext,
    trigger: &Trigger,
    user: &str,
    question: &str,
) -> String {
    let created = call(
        core,
        context,
        "workflow.create",
        json!({
            "tasks": [{
                "sessionId": trigger.channel_id.to_string(),
                "fromUserId": user,
                "summary": question,
            }],
            "timeoutS": ASK_TIMEOUT_S,
            "resumePrompt": format!("Tell {} what came back.", trigger.author_name),
        }),
    )
    .await;
    match created {
        Ok(_) => {
            let user = if user.starts_with('@') || user.starts_with("<@") {
                user.to_owned()
            } else {
                format!("@{user}")
            };
            format!(
                "{user}, {asker} asks: {question}\n(Answer here; I'll pass it on. I wait up to {hours} hour.)",
                asker = trigger.author_name,
                hours = ASK_TIMEOUT_S / 3_600,
            )
        }
        Err(error) => format!("I couldn't ask: {}", error.message),
    }
}

async fn report_answers(
    core: &Core,
    context: &CallContext,
    trigger: &Trigger,
    workflow_id: &str,
) -> String {
    let found = call(
        core,
        context,
        "workflow.get",
        json!({ "workflowId": workflow_id }),
    )
    .await;
    let workflow = match found {
        Ok(value) => value["workflow"].clone(),
        Err(error) => return format!("I lost track of a question ({}).", error.message),
    };
    let lines: Vec<String> = workflow["tasks"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|task| {
            let summary = task["summary"].as_str().unwrap_or("your question");
            match task.get("answer").filter(|a| !a.is_null()) {
                Some(answer) => format!(
                    "“{summary}” — {} answered: {}",
                    answer["authorName"].as_str().unwrap_or("someone"),
                    answer["text"].as_str().unwrap_or_default()
                ),
                None => format!("“{summary}” — no answer came in time."),
            }
        })
        .collect();
    format!("@{}, {}", trigger.author_name, lines.join("\n"))
}

async fn post_to(core: &Core, context: &CallContext, session: &str, text: &str) -> String {
    let sent = call(
        core,
        context,
        "surface.messages.send",
        json!({"sessionId": session, "text": text}),
    )
    .await;
    match sent {
        Ok(_) => format!("Posted in {session}."),
        Err(error) => match error.code.as_str() {
            "approval_denied" => format!("Not posted in {session}: an approver said no."),
            "approval_expired" => {
                format!("Not posted in {session}: nobody approved it in time.")
            }
            _ => format!("Not posted in {session}: {}", error.message),
        },
    }
}

/// `run <command>`: `shell.run` in this session's workspace; the answer quotes the tail of its
/// output.
async fn run_command(core: &Core, context: &CallContext, command: &str) -> String {
    if let Err(why) = available(core, context, RUN_TOOL, "running commands") {
        return why;
    }
    let command = command.trim_matches('`').trim();
    match call(core, context, RUN_TOOL, json!({ "command": command })).await {
        Ok(answer) => {
            let mut output = answer["stdout"].as_str().unwrap_or_default().to_owned();
            let stderr = answer["stderr"].as_str().unwrap_or_default();
            if !stderr.is_empty() {
                output.push_str(stderr);
            }
            let chars = output.chars().count();
            let tail: String = output
                .chars()
                .skip(chars.saturating_sub(OUTPUT_CHARS))
                .collect::<String>()
                .replace("```", "'''");
            let code = answer["exitCode"]
                .as_i64()
                .map_or_else(|| "was stopped".to_owned(), |c| format!("exited {c}"));
            if tail.trim().is_empty() {
                format!("`{}` {code}, with no output.", quote(command))
            } else {
                format!(
                    "`{}` {code}:\n```\n{}\n```",
                    quote(command),
                    tail.trim_end()
                )
            }
        }
        Err(error) => match error.code.as_str() {
            "approval_denied" => "Not run: an approver said no.".to_owned(),
            "approval_expired" => "Not run: nobody approved it in time.".to_owned(),
            _ => format!("Not run: {}", error.message),
        },
    }
}

/// Whether this build has `tool`, and whether this run may call it: `Err` says why not.
fn available(core: &Core, context: &CallContext, tool: &str, feature: &str) -> Result<(), String> {
    if !core
        .tools_for(&CallContext::operator().caller)
        .iter()
        .any(|entry| entry.id == tool)
    {
        return Err(format!(
            "Sorry, {feature} isn't available in this build of switchboard (it has no `{tool}`)."
        ));
    }
    if !core.may_call(&context.caller, tool) {
        return Err(format!(
            "Sorry, {feature} is switched off for me here (`{tool}` is outside this session's tool scope)."
        ));
    }
    Ok(())
}

/// The property names of a callable's input schema.
fn input_fields(core: &Core, tool: &str) -> Vec<String> {
    core.tools_for(&CallContext::operator().caller)
        .into_iter()
        .find(|entry| entry.id == tool)
        .and_then(|entry| {
            entry.input_schema["properties"]
                .as_object()
                .map(|p| p.keys().cloned().collect())
        })
        .unwrap_or_default()
}

async fn search(core: &Core, context: &CallContext, trigger: &Trigger, words: &str) -> String {
    if let Err(why) = available(core, context, SEARCH_TOOL, "search") {
        return why;
    }
    let fields = input_fields(core, SEARCH_TOOL);
    let mut input = json!({});
    let query_field = ["query", "text", "q", "words"]
        .into_iter()
        .find(|f| fields.iter().any(|have| have == f))
        .unwrap_or("query");
    input[query_field] = json!(words);
    if fields.iter().any(|f| f == "sessionId") {
        input["sessionId"] = json!(trigger.channel_id.to_string());
    }
    let found = match call(core, context, SEARCH_TOOL, input).await {
        Ok(value) => value,
        Err(error) => return format!("The search failed: {}", error.message),
    };
    // Whatever the answer's shape, its first list holds the hits.
    let hits: Vec<Value> = found
        .as_object()
        .and_then(|object| object.values().find_map(Value::as_array).cloned())
        .unwrap_or_default();
    if hits.is_empty() {
        return format!("Nothing matches “{words}”.");
    }
    let lines: Vec<String> = hits
        .iter()
        .take(SEARCH_RESULTS)
        .map(|hit| {
            format!(
                "{}: {}",
                hit["message"]["authorName"]
                    .as_str()
                    .or_else(|| hit["authorName"].as_str())
                    .unwrap_or("someone"),
                quote(
                    hit["message"]["text"]
                        .as_str()
                        .or_else(|| hit["text"].as_str())
                        .unwrap_or_default()
                )
            )
        })
        .collect();
    format!(
        "{} match{} for “{words}”:\n```\n{}\n```",
        hits.len(),
        if hits.len() == 1 { "" } else { "es" },
        lines.join("\n")
    )
}

async fn thread(
    core: &Core,
    context: &CallContext,
    trigger: &Trigger,
    name: &str,
    mentions: Mentions,
) -> String {
    if let Err(why) = available(core, context, THREAD_TOOL, "starting threads") {
        return why;
    }
    let fields = input_fields(core, THREAD_TOOL);
    let mut input = json!({ "name": name });
    if fields.iter().any(|f| f == "sessionId") {
        input["sessionId"] = json!(trigger.channel_id.to_string());
    }
    if let Some(message_id) = trigger.message_id {
        if fields.iter().any(|f| f == "messageId") {
            input["messageId"] = json!(message_id.to_string());
        }
    }
    let created = match call(core, context, THREAD_TOOL, input).await {
        Ok(value) => value,
        Err(error) => return format!("I couldn't start the thread: {}", error.message),
    };
    let thread_id = ["threadId", "sessionId", "channelId", "id"]
        .into_iter()
        .find_map(|key| created[key].as_str().map(str::to_owned));
    let Some(thread_id) = thread_id else {
        return format!("Started the thread “{name}”.");
    };
    let greeting = if mentions.needed_in_new_threads {
        format!(
            "Let's continue here, {}. Mention me with `help` to see what I can do.",
            trigger.author_name
        )
    } else {
        format!(
            "Let's continue here, {}. No need to mention me in this thread: write `help` to see what I can do.",
            trigger.author_name
        )
    };
    match call(
        core,
        context,
        "surface.messages.send",
        json!({"sessionId": thread_id, "text": greeting}),
    )
    .await
    {
        Ok(_) => format!("Started <#{thread_id}>; see you there."),
        Err(error) => format!(
            "Started the thread, but couldn't post in it: {}",
            error.message
        ),
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn help_asks_for_a_mention_only_where_one_is_needed() {
        let needed = Mentions {
            needed_here: true,
            needed_in_new_threads: true,
        };
        let free = Mentions {
            needed_here: false,
            needed_in_new_threads: false,
        };
        assert!(needed.help().contains("Mention me with one of them:"));
        assert!(free.help().contains("no need to mention me"));
        assert!(!free.help().contains("Mention me"));
        for mentions in [needed, free] {
            assert!(mentions.help().contains("• `thread <name>`"));
        }
    }

    use super::*;

    const BOT: &str = "@switchboard";

    #[test]
    fn phrases_are_read_around_greetings_mentions_and_punctuation() {
        assert_eq!(parse("@switchboard help", BOT), Phrase::Help);
        assert_eq!(parse("hi @switchboard, summarize!", BOT), Phrase::Summarize);
        assert_eq!(
            parse("@switchboard please ask @Tomas is the build signed?", BOT),
            Phrase::Ask {
                user: "@Tomas".to_owned(),
                question: "is the build signed?".to_owned()
            }
        );
        assert_eq!(
            parse("@switchboard post to #release-room ship it", BOT),
            Phrase::PostTo {
                session: "#release-room".to_owned(),
                text: "ship it".to_owned()
            }
        );
        assert_eq!(
            parse("search deploy failed @switchboard", BOT),
            Phrase::Search("deploy failed".to_owned())
        );
        assert_eq!(
            parse("@switchboard thread incident 7", BOT),
            Phrase::Thread("incident 7".to_owned())
        );
    }

    #[test]
    fn missing_arguments_say_what_is_needed_and_anything_else_is_unknown() {
        assert!(matches!(
            parse("@switchboard ask", BOT),
            Phrase::Incomplete(_)
        ));
        assert!(matches!(
            parse("@switchboard ask @Tomas", BOT),
            Phrase::Incomplete(_)
        ));
        assert!(matches!(
            parse("@switchboard post to #ops", BOT),
            Phrase::Incomplete(_)
        ));
        assert!(matches!(parse("search", BOT), Phrase::Incomplete(_)));
        assert_eq!(parse("@switchboard", BOT), Phrase::Unknown);
        assert_eq!(parse("", BOT), Phrase::Unknown);
        assert_eq!(parse("what's the weather", BOT), Phrase::Unknown);
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_without_panicking(text in "\\PC{0,200}") {
            let _ = parse(&text, BOT);
            let _ = quote(&text);
        }
    }

    #[test]
    fn quotes_cannot_close_their_code_block_and_are_cut() {
        let quoted = quote(&format!("```{}", "x".repeat(500)));
        assert!(!quoted.contains("```"));
        assert!(quoted.chars().count() <= QUOTE_CHARS + 1);
    }
}
