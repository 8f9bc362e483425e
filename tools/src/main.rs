//! `tools`: call switchboard's tool server from any shell, one process per action.
//!
//! `tools surface.messages.send --session-id=#ops "hello"` becomes one `POST /v1/call`; the
//! result's value is printed on stdout, an error goes to stderr as the error JSON plus one human
//! line, and the exit code says which kind of error it was. Agents run this for every action, so
//! it starts fast: blocking HTTP with no async runtime and no TLS.
//!
//! It is a crate of its own so that it builds from the wire types (`protocol`), clap,
//! `serde_json` and `ureq` alone: none of the server's runtime is compiled into it.

mod args;
mod client;
mod failure;
mod help;
mod render;

use protocol::ErrorCode;
use std::io::{self, Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser};
use protocol::context::{DEFAULT_URL, ENV_URL};
use protocol::{ErrorKind, ToolDetail};
use serde_json::Value;

use args::{OutputFormat, Parsed};
use client::Client;
use failure::Failure;

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

const AFTER_HELP: &str = "\
Fields:
  --field-name=VALUE     a field, as a string; the server converts it using the schema
                         (--session-id and --sessionId both set sessionId)
  --field:json=JSON      a field as typed JSON, e.g. --ids:json='[1,2]'
  --input=JSON|@file|@-  the base input object, inline, from a file, or from stdin
  WORDS                  bare words fill the callable's primary field (text for send)
  --                     everything after it is a bare word
  A value always follows '=': write --silent=true, not --silent.

Commands:
  tools --list           the callables you may call
  tools help ID          a callable's fields and examples (also: tools ID --help)

Environment:
  SWITCHBOARD_URL        the server (default http://127.0.0.1:7311)
  SWITCHBOARD_TOKEN      bearer token
  SWITCHBOARD_REQUEST_ID, SWITCHBOARD_SESSION_ID, SWITCHBOARD_CLIENT, SWITCHBOARD_CWD,
  SWITCHBOARD_TOOL_CALL_ID
                         context, sent as x-switchboard-* headers

Exit codes: 0 ok, 1 internal, 2 usage, 3 denied, 4 not_found, 5 conflict,
  6 unavailable (rate limited, server unreachable), 7 timeout, 8 cancelled.";

/// Call switchboard's tool server.
#[derive(Debug, Parser)]
#[command(
    name = "tools",
    version,
    about = "Call switchboard's tool server: tools ID [--field=value ...] [WORDS ...]",
    override_usage = "tools ID [--field=value ...] [--field:json=JSON] [--input=JSON|@file|@-] [WORDS ...]\n       \
                      tools --list\n       tools help ID",
    after_help = AFTER_HELP,
    arg_required_else_help = true
)]
struct Cli {
    /// List the callables you may call.
    #[arg(long)]
    list: bool,

    /// Output: json (the value on one line; default for calls), pretty, or text (for humans;
    /// default for --list and help).
    #[arg(long, value_enum, value_name = "FORMAT")]
    output: Option<OutputFormat>,

    /// The tool server; overrides SWITCHBOARD_URL.
    #[arg(long, value_name = "URL")]
    url: Option<String>,

    /// Give up on the server after this many seconds [default: 60].
    #[arg(long, value_name = "SECONDS", value_parser = timeout_arg)]
    timeout: Option<Duration>,

    /// The callable id, then its field flags and bare words.
    #[arg(
        value_name = "ID [ARGS]",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    words: Vec<String>,
}

fn timeout_arg(v: &str) -> Result<Duration, String> {
    args::parse_timeout(v).map_err(|e| e.message)
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_exit(e),
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            let mut err = io::stderr().lock();
            let _ = writeln!(err, "{}", failure.json_line());
            let _ = writeln!(err, "{}", failure.human_line());
            ExitCode::from(failure.exit_code())
        }
    }
}

/// Help and version go to stdout with 0; no arguments prints help with 2; the rest is a usage
/// error in the usual two lines.
fn clap_exit(e: clap::Error) -> ExitCode {
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
        _ => {
            let rendered = e.render().to_string();
            let message: Vec<&str> = rendered
                .lines()
                .map(str::trim)
                .filter(|l| {
                    !l.is_empty()
                        && !l.starts_with("For more information")
                        && !l.starts_with("Usage:")
                })
                .map(|l| l.strip_prefix("error: ").unwrap_or(l))
                .collect();
            let failure = Failure::new(
                ErrorKind::Usage,
                ErrorCode::BadOption,
                format!("{}; see 'tools --help'", message.join(" ")),
                Value::Object(Default::default()),
            );
            let mut err = io::stderr().lock();
            let _ = writeln!(err, "{}", failure.json_line());
            let _ = writeln!(err, "{}", failure.human_line());
            ExitCode::from(failure.exit_code())
        }
    }
}

/// Options after the callable id override those before it.
struct Settings {
    output: Option<OutputFormat>,
    url: String,
    timeout: Duration,
}

fn run(cli: Cli) -> Result<(), Failure> {
    let parsed = args::parse(&cli.words)?;
    let settings = Settings {
        output: parsed.output.or(cli.output),
        url: parsed
            .url
            .clone()
            .or(cli.url)
            .or_else(|| std::env::var(ENV_URL).ok().filter(|u| !u.trim().is_empty()))
            .unwrap_or_else(|| DEFAULT_URL.to_owned()),
        timeout: parsed.timeout.or(cli.timeout).unwrap_or(DEFAULT_TIMEOUT),
    };

    if parsed.version {
        print(&format!("tools {}\n", env!("CARGO_PKG_VERSION")));
        return Ok(());
    }
    if cli.list || parsed.list {
        return list(&settings);
    }
    if parsed.help {
        return match parsed.tool.as_deref() {
            Some(id) => tool_help(&settings, id),
            None => {
                print(&format!("{}\n", Cli::command().render_long_help()));
                Ok(())
            }
        };
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
    let client = client(settings)?;
    let mut read_stdin = || {
        let mut text = String::new();
        io::stdin().read_to_string(&mut text)?;
        Ok(text)
    };
    let request = args::build_request(&tool, parsed, &mut read_stdin)?;
    let body = serde_json::to_vec(&request).map_err(|e| {
        Failure::new(
            ErrorKind::Internal,
            ErrorCode::Internal,
            format!("cannot encode the request: {e}"),
            Value::Object(Default::default()),
        )
    })?;
    let value = client.post("/v1/call", &body).map_err(|mut f| {
        if is_unknown_tool(&f) {
            f.unknown_tool = Some(tool.clone());
        }
        f
    })?;
    print(&render::render(
        &value,
        settings.output.unwrap_or(OutputFormat::Json),
    ));
    Ok(())
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
