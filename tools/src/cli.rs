//! The command line's own options — `--list`, `--output`, `--url`, `--timeout`, `--help`,
//! `--version` — defined once, in [`Cli`], and parsed by clap wherever they stand:
//! `tools --output=text ID ...` and `tools ID ... --output=text` are the same call.
//!
//! Everything else on the line belongs to the callable (`--field=value`, `--field:json=JSON`,
//! `--input=...`, bare words, `--`); those names come from the server's schema, so clap can't
//! declare them, and [`crate::args`] reads them. clap 4 has no mode for "known options anywhere,
//! unknown `--x=y` words kept in order": an unknown `--x=y` is an error unless a positional
//! accepts hyphen values, and once such a positional holds a value it takes every later word,
//! known options included (`Arg::allow_hyphen_values`: "prior arguments with
//! allow_hyphen_values(true) get precedence over known flags"). So [`parse`] first [`route`]s
//! the line: a word naming one of the options (asked of clap's `Command`; no name is written
//! there) goes to clap where it stands, with its separate value if it takes one; every other
//! word is handed to clap after `--`, in order, as the `words` positional. Only clap knows what
//! an option means, what values it takes and how it is documented.

use std::ffi::{OsStr, OsString};
use std::time::Duration;

use clap::builder::{Arg, Command};
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{ArgAction, CommandFactory, FromArgMatches, Parser, ValueEnum};
use protocol::ErrorCode;

use crate::args::UsageError;

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
  tools --batch FILE|-   several calls at once, from a JSON array of {tool, input} objects;
                         exits with the first failed call's code (0 when all succeeded)

Environment:
  SWITCHBOARD_URL        the server (default http://127.0.0.1:7311)
  SWITCHBOARD_TOKEN      bearer token
  SWITCHBOARD_REQUEST_ID, SWITCHBOARD_SESSION_ID, SWITCHBOARD_CLIENT, SWITCHBOARD_CWD,
  SWITCHBOARD_TOOL_CALL_ID
                         context, sent as x-switchboard-* headers

Exit codes: 0 ok, 1 internal, 2 usage, 3 denied, 4 not_found, 5 conflict,
  6 unavailable (rate limited, server unreachable), 7 timeout, 8 cancelled.";

/// How a result is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Compact JSON on one line.
    Json,
    /// Indented JSON.
    Pretty,
    /// Human-readable text.
    Text,
}

// The options may stand before or after the callable id ([`route`]); given twice, the last
// one counts (`args_override_self`). `--help` is a plain flag rather than clap's help action so
// that `tools ID --help` can show the callable's help. `--version` is declared here rather than
// generated so that `route` sees it without `Command::build` (which also renders usage strings:
// work, and code pages, that every call would pay for).

/// Call switchboard's tool server.
#[derive(Debug, Parser)]
#[command(
    name = "tools",
    version,
    about = "Call switchboard's tool server: tools ID [--field=value ...] [WORDS ...]",
    override_usage = "tools ID [--field=value ...] [--field:json=JSON] [--input=JSON|@file|@-] [WORDS ...]\n       \
                      tools --list\n       tools help ID\n       tools --batch FILE|-",
    after_help = AFTER_HELP,
    arg_required_else_help = true,
    args_override_self = true,
    disable_help_flag = true,
    disable_version_flag = true
)]
pub struct Cli {
    /// List the callables you may call.
    #[arg(long)]
    pub list: bool,

    /// Run a batch: a JSON array of {"tool","input"} calls from FILE, or stdin for '-'
    /// (POST /v1/batch; at most 50 calls). Prints one {"ok",...} result per call, in order.
    #[arg(long, value_name = "FILE|-")]
    pub batch: Option<String>,

    /// Output: json (the value on one line; default for calls), pretty, or text (for humans;
    /// default for --list and help).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub output: Option<OutputFormat>,

    /// The tool server; overrides SWITCHBOARD_URL.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,

    /// Give up on the server after this many seconds [default: 60].
    #[arg(long, value_name = "SECONDS", value_parser = parse_timeout)]
    pub timeout: Option<Duration>,

    /// The call's idempotency key (POST /v1/call's Idempotency-Key): the same key and input
    /// within 24 h runs the call once and answers its first answer again. Default: a fresh
    /// random one for each invocation.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,

    /// Print help; after an ID, that callable's fields and examples.
    #[arg(short = 'h', long, action = ArgAction::SetTrue)]
    pub help: bool,

    /// Print version.
    // clap prints it and exits while parsing, so this is never set.
    #[arg(short = 'V', long, action = ArgAction::Version)]
    version: Option<bool>,

    /// The callable id, then its field flags and bare words.
    #[arg(value_name = "ID [ARGS]")]
    pub words: Vec<String>,
}

/// Parses a whole command line, program name first.
pub fn parse(argv: impl IntoIterator<Item = OsString>) -> Result<Cli, clap::Error> {
    let mut cmd = Cli::command();
    let argv = route(&cmd, argv);
    let mut matches = cmd.try_get_matches_from_mut(argv)?;
    Cli::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut cmd))
}

/// A parse error as the CLI reports it: the code for the kind of mistake, and clap's message
/// (its error and tips, without the usage block) on one line.
pub fn usage_error(e: &clap::Error) -> UsageError {
    let code = match e.kind() {
        // `--list=yes`
        ErrorKind::TooManyValues => ErrorCode::UnexpectedValue,
        // `--output` with nothing after it
        ErrorKind::InvalidValue
            if matches!(
                e.get(ContextKind::InvalidValue),
                Some(ContextValue::String(v)) if v.is_empty()
            ) =>
        {
            ErrorCode::MissingValue
        }
        _ => ErrorCode::BadOption,
    };
    let rendered = e.render().to_string();
    let message: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:"))
        .filter(|l| !l.is_empty())
        .map(|l| l.strip_prefix("error: ").unwrap_or(l))
        .collect();
    UsageError::new(code, format!("{}; see 'tools --help'", message.join(" ")))
}

/// The CLI's own long option that `name` (a flag as typed, without `--` and `=value`) is most
/// likely a typo of: `lst` → `list`, `hlep` → `help`, `outptu` → `output`. `input` counts too,
/// though [`crate::args`] reads it. `None` when no option is within [`typo_distance`].
pub fn near_own_option(name: &str) -> Option<(String, usize)> {
    let cmd = Cli::command();
    cmd.get_arguments()
        .filter_map(Arg::get_long)
        .chain(["input"])
        .map(|long| (typo_distance(name, long), long))
        .filter(|&(distance, long)| distance > 0 && distance <= typo_limit(long))
        .min_by_key(|&(distance, _)| distance)
        .map(|(distance, long)| (long.to_owned(), distance))
}

/// Edits between a flag as typed and a name, ignoring case; swapping two neighbours is one edit.
pub fn typo_distance(typed: &str, name: &str) -> usize {
    strsim::osa_distance(&typed.to_ascii_lowercase(), &name.to_ascii_lowercase())
}

/// How many edits still read as a typo of `name`: one for short names (`list`, `url`), two from
/// six letters (`output`, `timeout`). Tighter than it could be on purpose: `--limit` is a real
/// field two edits from `--list`.
fn typo_limit(name: &str) -> usize {
    if name.chars().count() >= 6 {
        2
    } else {
        1
    }
}

/// The long help, as `--help` prints it.
pub fn long_help() -> String {
    Cli::command().render_long_help().to_string()
}

/// Reorders a command line for clap: the program name, the words that name one of `cmd`'s
/// options (each with its separate value, if it takes one and the next word is not an option),
/// then `--` and all other words in their order. After a `--` on the line everything is a word.
pub fn route(cmd: &Command, argv: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut argv = argv.into_iter().peekable();
    let mut own: Vec<OsString> = argv.next().into_iter().collect();
    let mut words = Vec::new();
    while let Some(word) = argv.next() {
        if word == "--" {
            words.push(word);
            words.extend(argv);
            break;
        }
        match option_of(cmd, &word) {
            Some(separate_value) => {
                own.push(word);
                if separate_value {
                    own.extend(argv.next_if(|next| !looks_like_option(next)));
                }
            }
            None => words.push(word),
        }
    }
    if !words.is_empty() {
        own.push("--".into());
        own.extend(words);
    }
    own
}

/// For a word that names one of `cmd`'s options (`--long`, `--long=value`, `-s`): whether the
/// option's value is the next word. `None` for any other word.
fn option_of(cmd: &Command, word: &OsStr) -> Option<bool> {
    let word = word.to_str()?;
    if let Some(long) = word.strip_prefix("--") {
        let (name, attached) = match long.split_once('=') {
            Some((name, _)) => (name, true),
            None => (long, false),
        };
        let arg = cmd.get_arguments().find(|a| {
            a.get_long() == Some(name) || a.get_all_aliases().is_some_and(|al| al.contains(&name))
        })?;
        return Some(!attached && takes_value(arg));
    }
    let mut chars = word.strip_prefix('-')?.chars();
    let (Some(short), None) = (chars.next(), chars.next()) else {
        return None;
    };
    let arg = cmd.get_arguments().find(|a| {
        a.get_short() == Some(short)
            || a.get_all_short_aliases()
                .is_some_and(|al| al.contains(&short))
    })?;
    Some(takes_value(arg))
}

fn takes_value(arg: &Arg) -> bool {
    arg.get_action().takes_values()
}

/// What clap would read as an option rather than a value (`-` alone is a value).
fn looks_like_option(word: &OsStr) -> bool {
    let bytes = word.as_encoded_bytes();
    bytes.len() > 1 && bytes[0] == b'-'
}

/// `--timeout=SECONDS`: a positive number of seconds, fractions allowed.
fn parse_timeout(v: &str) -> Result<Duration, String> {
    v.parse::<f64>()
        .ok()
        .filter(|s| *s > 0.0)
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| "not a positive number of seconds, e.g. --timeout=30".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(ws: &[&str]) -> Vec<OsString> {
        std::iter::once("tools")
            .chain(ws.iter().copied())
            .map(OsString::from)
            .collect()
    }

    fn parse_ok(ws: &[&str]) -> Cli {
        parse(argv(ws)).unwrap_or_else(|e| panic!("{ws:?} should parse, got {e}"))
    }

    fn parse_err(ws: &[&str]) -> ErrorKind {
        match parse(argv(ws)) {
            Ok(cli) => panic!("{ws:?} should fail, got {cli:?}"),
            Err(e) => e.kind(),
        }
    }

    fn routed(ws: &[&str]) -> Vec<String> {
        route(&Cli::command(), argv(ws))
            .into_iter()
            .skip(1)
            .map(|w| w.into_string().expect("utf-8"))
            .collect()
    }

    #[test]
    fn the_command_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn route_sees_every_option_without_a_build() {
        fn names(cmd: &Command) -> Vec<(Option<String>, Option<char>)> {
            cmd.get_arguments()
                .map(|a| (a.get_long().map(str::to_owned), a.get_short()))
                .collect()
        }
        let mut built = Cli::command();
        built.build();
        assert_eq!(names(&Cli::command()), names(&built));
    }

    #[test]
    fn own_options_are_taken_anywhere() {
        let cli = parse_ok(&[
            "--output=text",
            "x.y",
            "--url=http://127.0.0.1:1",
            "hello",
            "--session-id=#ops",
            "--timeout=2.5",
        ]);
        assert_eq!(cli.output, Some(OutputFormat::Text));
        assert_eq!(cli.url.as_deref(), Some("http://127.0.0.1:1"));
        assert_eq!(cli.timeout, Some(Duration::from_millis(2500)));
        assert_eq!(cli.words, ["x.y", "hello", "--session-id=#ops"]);
    }

    #[test]
    fn a_separate_value_is_taken_unless_it_looks_like_an_option() {
        let cli = parse_ok(&["x.y", "--output", "pretty", "hi", "--timeout", "3"]);
        assert_eq!(cli.output, Some(OutputFormat::Pretty));
        assert_eq!(cli.timeout, Some(Duration::from_secs(3)));
        assert_eq!(cli.words, ["x.y", "hi"]);
        assert_eq!(
            routed(&["x.y", "--output", "--text=hi"]),
            ["--output", "--", "x.y", "--text=hi"]
        );
        assert_eq!(
            parse_err(&["x.y", "--output", "--text=hi"]),
            ErrorKind::InvalidValue
        );
    }

    #[test]
    fn field_flags_words_and_double_dash_stay_in_order() {
        assert_eq!(
            routed(&[
                "x.y",
                "--a=1",
                "hello",
                "--list",
                "-5",
                "-x",
                "--",
                "--output=text",
                "-h"
            ]),
            [
                "--list",
                "--",
                "x.y",
                "--a=1",
                "hello",
                "-5",
                "-x",
                "--",
                "--output=text",
                "-h"
            ]
        );
        assert_eq!(routed(&["--list"]), ["--list"]);
        assert!(routed(&[]).is_empty());
    }

    #[test]
    fn help_list_and_version_are_recognised_anywhere() {
        let cli = parse_ok(&["x.y", "--help"]);
        assert!(cli.help);
        assert_eq!(cli.words, ["x.y"]);
        assert!(parse_ok(&["x.y", "-h"]).help);
        assert!(parse_ok(&["-h"]).help);
        assert!(parse_ok(&["x.y", "--list"]).list);
        assert_eq!(parse_err(&["x.y", "--version"]), ErrorKind::DisplayVersion);
        assert_eq!(parse_err(&["-V", "x.y"]), ErrorKind::DisplayVersion);
    }

    #[test]
    fn the_last_occurrence_counts() {
        let cli = parse_ok(&["--output=json", "x.y", "--output=text", "--list", "--list"]);
        assert_eq!(cli.output, Some(OutputFormat::Text));
        assert!(cli.list);
    }

    /// The usage error a line that clap refuses becomes.
    fn usage_err(ws: &[&str]) -> UsageError {
        match parse(argv(ws)) {
            Ok(cli) => panic!("{ws:?} should fail, got {cli:?}"),
            Err(e) => usage_error(&e),
        }
    }

    #[test]
    fn own_options_without_value_are_usage_errors() {
        for opt in ["--output", "--url", "--timeout"] {
            let e = usage_err(&["x.y", opt]);
            assert_eq!(e.code, "missing_value", "{opt}");
            assert!(e.message.contains(opt), "{}", e.message);
            assert_eq!(usage_err(&[opt, "--list"]).code, "missing_value", "{opt}");
        }
        assert_eq!(usage_err(&["--list=yes"]).code, "unexpected_value");
        assert_eq!(usage_err(&["x.y", "--help=yes"]).code, "unexpected_value");
    }

    #[test]
    fn bad_option_values_are_usage_errors() {
        assert_eq!(usage_err(&["x.y", "--output=yaml"]).code, "bad_option");
        assert_eq!(usage_err(&["--output=yaml", "x.y"]).code, "bad_option");
        for t in ["0", "-1", "soon", "NaN", "inf", "1e400"] {
            let e = usage_err(&["x.y", &format!("--timeout={t}")]);
            assert_eq!(e.code, "bad_option", "{t}");
            assert!(e.message.contains("positive number"), "{}", e.message);
        }
    }

    #[test]
    fn a_usage_message_is_one_line_without_the_usage_block() {
        let e = usage_err(&["--list=yes"]);
        assert_eq!(
            e.message,
            "unexpected value 'yes' for '--list' found; no more were expected; see 'tools --help'"
        );
    }

    #[test]
    fn typos_of_own_options_are_named_and_real_fields_are_not() {
        let near = |name: &str| near_own_option(name).map(|(option, _)| option);
        assert_eq!(near("lst").as_deref(), Some("list"));
        assert_eq!(near("hlep").as_deref(), Some("help"));
        assert_eq!(near("OUTPTU").as_deref(), Some("output"));
        assert_eq!(near("ouput").as_deref(), Some("output"));
        assert_eq!(near("inptu").as_deref(), Some("input"));
        for field in ["limit", "list", "session-id", "text", "u", "urls-list"] {
            assert_eq!(near(field), None, "{field}");
        }
    }

    #[test]
    fn no_arguments_asks_for_help() {
        assert_eq!(
            parse_err(&[]),
            ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        );
    }
}
