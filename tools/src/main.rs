//! `tools`: call switchboard's tool server from any shell, one process per action.
//!
//! `tools surface.messages.send --session-id=#ops "hello"` becomes one `POST /v1/call`; the
//! result's value is printed on stdout, an error goes to stderr as the error JSON plus one human
//! line, and the exit code says which kind of error it was. Agents run this for every action, so
//! it starts fast: blocking HTTP with no async runtime and no TLS.
//!
//! It is a crate of its own so that it builds from the wire types (`protocol`), clap,
//! `serde_json` and `ureq` alone: none of the server's runtime is compiled into it. The CLI's own
//! options are clap's ([`cli`]); the callable's fields and words are read by [`args`].

mod args;
mod cli;
mod client;
mod failure;
mod help;
mod render;
mod waiting;

use std::io::{self, Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use protocol::context::{DEFAULT_URL, ENV_URL};
use protocol::{ErrorCode, ErrorKind, ToolDetail};
use serde_json::Value;

use args::Parsed;
use cli::{Cli, OutputFormat};
use client::Client;
use failure::Failure;

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// The HTTP timeout of a call itself: the longest an approval can keep it waiting
/// (`permissions.ask_timeout_s` at most a day) and a little more. The `--timeout` is kept by
/// [`waiting::post_call`], which extends it only while an approval is pending.
const CALL_HTTP_TIMEOUT: Duration = Duration::from_secs(86_400 + 60);

fn main() -> ExitCode {
    let cli = match cli::parse(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => return clap_exit(&e),
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => fail(&failure),
    }
}

/// The two stderr lines of a failure, and its exit code.
fn fail(failure: &Failure) -> ExitCode {
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "{}", failure.json_line());
    let _ = writeln!(err, "{}", failure.human_line());
    ExitCode::from(failure.exit_code())
}

/// Version goes to stdout with 0; no arguments prints help with 2; the rest is a usage error in
/// the usual two lines.
fn clap_exit(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind as Clap;
    match e.kind() {
        Clap::DisplayHelp | Clap::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        Clap::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(ErrorKind::Usage.exit_code())
        }
        _ => fail(&Failure::from(cli::usage_error(e))),
    }
}

/// What the call needs beyond its words.
struct Settings {
    output: Option<OutputFormat>,
    url: String,
    timeout: Duration,
    /// `--idempotency-key`; a call makes up one when it is not given.
    idempotency_key: Option<String>,
}

fn run(cli: Cli) -> Result<(), Failure> {
    let parsed = args::parse(&cli.words)?;
    let settings = Settings {
        output: cli.output,
        url: cli
            .url
            .or_else(|| std::env::var(ENV_URL).ok().filter(|u| !u.trim().is_empty()))
            .unwrap_or_else(|| DEFAULT_URL.to_owned()),
        timeout: cli.timeout.unwrap_or(DEFAULT_TIMEOUT),
        idempotency_key: cli.idempotency_key,
    };

    if cli.help || parsed.help {
        return match parsed.tool.as_deref() {
            Some(id) => tool_help(&settings, id),
            None => {
                print(&cli::long_help());
                Ok(())
            }
        };
    }
    if cli.list {
        return list(&settings);
    }
    if let Some(source) = &cli.batch {
        if parsed.tool.is_some() {
            return Err(Failure::from(args::UsageError::new(
                ErrorCode::UnexpectedArgument,
                "--batch takes its calls from the file; give no callable id with it",
            )));
        }
        return batch(&settings, source);
    }
    call(&settings, parsed)
}

fn client(settings: &Settings) -> Result<Client, Failure> {
    let env = |name: &str| std::env::var(name).ok();
    Ok(Client::new(&settings.url, settings.timeout, &env)?)
}

/// `tools --list`: `GET /v1/tools`.
fn list(settings: &Settings) -> Result<(), Failure> {
    let list = client(settings)?.get("/v1/tools")?;
    match settings.output.unwrap_or(OutputFormat::Text) {
        OutputFormat::Text => print(&help::list_text(&list)),
        format => print(&render::render(&list, format)),
    }
    Ok(())
}

/// `tools help ID` / `tools ID --help`: `GET /v1/tools/{id}`.
fn tool_help(settings: &Settings, id: &str) -> Result<(), Failure> {
    let client = client(settings)?;
    let path = format!("/v1/tools/{}", client::path_segment(id));
    let detail = client.get(&path).map_err(|mut f| {
        if f.info.kind == ErrorKind::NotFound {
            f.unknown_tool = Some(id.to_owned());
        }
        f
    })?;
    match settings.output.unwrap_or(OutputFormat::Text) {
        OutputFormat::Text => {
            let parsed: ToolDetail = serde_json::from_value(detail).map_err(|e| {
                Failure::new(
                    ErrorKind::Internal,
                    ErrorCode::BadResponse,
                    format!(
                        "switchboard at {} answered {path} with an unexpected shape ({e})",
                        client.base()
                    ),
                    Value::Object(Default::default()),
                )
            })?;
            print(&help::tool_help(&parsed));
        }
        format => print(&render::render(&detail, format)),
    }
    Ok(())
}

/// `tools ID ...`: `POST /v1/call`.
fn call(settings: &Settings, mut parsed: Parsed) -> Result<(), Failure> {
    let tool = match parsed.tool.take() {
        Some(tool) if !tool.trim().is_empty() => tool,
        _ => {
            return Err(Failure::from(args::UsageError::new(
                ErrorCode::MissingTool,
                "no callable id given: write tools ID [--field=value ...]; 'tools --list' shows the ids",
            )))
        }
    };
    let env = |name: &str| std::env::var(name).ok();
    let mut call_client = Client::new(&settings.url, CALL_HTTP_TIMEOUT, &env)?;
    let tool_call_id = call_client.ensure_tool_call_id();
    // One key per invocation: the server runs the call once for it. (The CLI sends each call
    // once and never retries by itself; a caller that runs it again with --idempotency-key K
    // gets the first answer.)
    let key = settings
        .idempotency_key
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    call_client.set_idempotency_key(&key)?;
    let look = Client::new(
        &settings.url,
        settings.timeout.min(waiting::look_timeout()),
        &env,
    )?;
    let mut read_stdin = || {
        let mut text = String::new();
        io::stdin().read_to_string(&mut text)?;
        Ok(text)
    };
    let typed = parsed.typed_fields();
    let request = args::build_request(&tool, parsed, &mut read_stdin)?;
    let body = serde_json::to_vec(&request).map_err(|e| {
        Failure::new(
            ErrorKind::Internal,
            ErrorCode::Internal,
            format!("cannot encode the request: {e}"),
            Value::Object(Default::default()),
        )
    })?;
    let mut say = |line: &str| {
        let mut err = io::stderr().lock();
        let _ = writeln!(err, "{line}");
    };
    let value = waiting::post_call(
        call_client,
        &look,
        body,
        &tool_call_id,
        settings.timeout,
        &mut say,
    )
    .map_err(|mut f| {
        if is_unknown_tool(&f) {
            f.unknown_tool = Some(tool.clone());
        }
        mistyped_option(f, &tool, &typed)
    })?;
    print(&render::render(
        &value,
        settings.output.unwrap_or(OutputFormat::Json),
    ));
    Ok(())
}

/// The server's `unknown_field` about a flag that is a typo of one of the CLI's own options
/// (`--outptu=text`) becomes the usage error it is: the option is named, not the callable's
/// fields. A flag at least as close to one of the callable's fields (`--limt=5`, `limit`) is
/// left to the server's answer.
fn mistyped_option(failure: Failure, tool: &str, typed: &[(String, String)]) -> Failure {
    if failure.info.code != ErrorCode::UnknownField {
        return failure;
    }
    let details = &failure.info.details;
    let Some(field) = details.get("field").and_then(Value::as_str) else {
        return failure;
    };
    let Some((_, name)) = typed.iter().find(|(f, _)| f == field) else {
        return failure;
    };
    let Some((option, distance)) = cli::near_own_option(name) else {
        return failure;
    };
    let nearer_field = details
        .get("known")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .any(|known| {
            cli::typo_distance(name, known).min(cli::typo_distance(name, &args::kebab(known)))
                <= distance
        });
    if nearer_field {
        return failure;
    }
    Failure::from(args::UsageError::new(
        ErrorCode::UnknownOption,
        format!(
            "unknown option '--{name}'; did you mean '--{option}'? ('{tool}' has no field '{field}' either)"
        ),
    ))
}

/// `tools --batch FILE|-`: `POST /v1/batch` with the calls in a JSON array. Prints the
/// results array; exits with the first failed call's exit code, 0 when every call succeeded.
fn batch(settings: &Settings, source: &str) -> Result<(), Failure> {
    let text = if source == "-" {
        let mut text = String::new();
        io::stdin().read_to_string(&mut text).map(|_| text)
    } else {
        std::fs::read_to_string(source)
    }
    .map_err(|e| {
        Failure::from(args::UsageError::new(
            ErrorCode::BadInput,
            format!("cannot read the batch from {source}: {e}"),
        ))
    })?;
    let calls: Value = serde_json::from_str(&text).map_err(|e| {
        Failure::from(args::UsageError::new(
            ErrorCode::BadJson,
            format!("the batch in {source} is not JSON: {e}; write [{{\"tool\": \"surface.…\", \"input\": {{…}}}}, …]"),
        ))
    })?;
    let calls = match calls {
        Value::Array(calls) => calls,
        // The request body itself is accepted too.
        Value::Object(mut map) if map.get("calls").is_some_and(Value::is_array) => {
            match map.remove("calls") {
                Some(Value::Array(calls)) => calls,
                _ => Vec::new(),
            }
        }
        _ => {
            return Err(Failure::from(args::UsageError::new(
                ErrorCode::BadInput,
                format!("the batch in {source} must be a JSON array of {{\"tool\": \"surface.…\", \"input\": {{…}}}}"),
            )))
        }
    };
    let env = |name: &str| std::env::var(name).ok();
    let client = Client::new(&settings.url, settings.timeout, &env)?;
    let body = serde_json::to_vec(&serde_json::json!({ "calls": calls })).map_err(|e| {
        Failure::new(
            ErrorKind::Internal,
            ErrorCode::Internal,
            format!("cannot encode the batch: {e}"),
            Value::Object(Default::default()),
        )
    })?;
    let value = client.post("/v1/batch", &body)?;
    let results = value
        .get("results")
        .cloned()
        .unwrap_or(Value::Array(Vec::new()));
    print(&render::render(
        &results,
        settings.output.unwrap_or(OutputFormat::Json),
    ));
    let first_failure = results.as_array().into_iter().flatten().find_map(|result| {
        (result.get("ok") != Some(&Value::Bool(true)))
            .then(|| serde_json::from_value::<protocol::ErrorInfo>(result["error"].clone()).ok())
            .flatten()
    });
    match first_failure {
        Some(info) => Err(Failure::from_info(info)),
        None => Ok(()),
    }
}

/// A `not_found` about the callable itself rather than, say, a session.
fn is_unknown_tool(f: &Failure) -> bool {
    f.info.kind == ErrorKind::NotFound && f.info.code == ErrorCode::UnknownTool
}

/// Writes to stdout; a closed pipe (`tools --list | head -1`) is not an error.
fn print(text: &str) {
    let mut out = io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}
