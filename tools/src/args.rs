//! The callable's words: its id, field flags, `--input`, and positionals. The CLI's own options
//! (`--output`, `--list`, ...) never get here: clap takes them wherever they stand ([`crate::cli`]).
//!
//! Parsing happens in two steps so that nothing is read before we know it is needed:
//! [`parse`] sorts the words (no I/O), [`build_request`] reads `--input=@file` / `@-` and builds
//! the [`CallRequest`]. Field values stay strings in `args`; the server converts them with the
//! callable's schema, so the CLI needs no schema.

use protocol::ErrorCode;
use std::io;
use std::path::PathBuf;

use protocol::CallRequest;
use serde_json::{Map, Value};

/// A command line that can't be understood. Always exit code 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError {
    /// Machine-readable reason, e.g. `missing_value`.
    pub code: ErrorCode,
    pub message: String,
}

impl UsageError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        UsageError {
            code,
            message: message.into(),
        }
    }
}

/// Where `--input` takes its base object from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputSource {
    Inline(String),
    File(PathBuf),
    Stdin,
}

/// The words, sorted.
#[derive(Debug, Default, PartialEq)]
pub struct Parsed {
    /// The callable id (for `tools help ID`, the id after `help`).
    pub tool: Option<String>,
    /// `tools help [ID]`.
    pub help: bool,
    pub input: Option<InputSource>,
    /// `--field:json=JSON`, already parsed: (camelCase field, the flag as typed, value).
    pub json_fields: Vec<(String, String, Value)>,
    /// `--field=value`: camelCase field → JSON string.
    pub args: Map<String, Value>,
    pub positional: Vec<String>,
    /// camelCase field → the flag that set it, to report duplicates.
    seen: Vec<(String, String)>,
}

/// Sorts the words clap left over (the `words` of [`crate::cli::Cli`]), in their order.
pub fn parse(words: &[String]) -> Result<Parsed, UsageError> {
    let mut p = Parsed::default();
    let mut words = words.iter();
    while let Some(word) = words.next() {
        if word == "--" {
            words.by_ref().for_each(|word| p.word(word));
            break;
        }
        if let Some(flag) = word.strip_prefix("--") {
            p.flag(word, flag)?;
        } else if word.starts_with('-') && word.len() > 1 && !looks_numeric(word) {
            return Err(UsageError::new(
                ErrorCode::UnknownOption,
                format!(
                    "unknown option '{word}': field flags are written --field=value; \
                     to pass a word starting with '-', put it after '--'"
                ),
            ));
        } else {
            p.word(word);
        }
    }
    if p.tool.as_deref() == Some("help") {
        p.help = true;
        p.tool = None;
        let mut ids = std::mem::take(&mut p.positional).into_iter();
        p.tool = ids.next();
        if let Some(extra) = ids.next() {
            return Err(UsageError::new(
                ErrorCode::UnexpectedArgument,
                format!("'tools help' takes one callable id, got an extra word '{extra}'"),
            ));
        }
    }
    Ok(p)
}

impl Parsed {
    /// Each field a `--field=value` or `--field:json=JSON` flag set, with the flag's name as
    /// typed (`outptu` for `--outptu=text`): to tell a mistyped option of the CLI from a field.
    pub fn typed_fields(&self) -> Vec<(String, String)> {
        self.seen
            .iter()
            .map(|(field, word)| {
                let name = flag_of(word).trim_start_matches('-');
                (
                    field.clone(),
                    name.strip_suffix(":json").unwrap_or(name).to_owned(),
                )
            })
            .collect()
    }

    /// A bare word: the callable id if there is none yet, else a positional.
    fn word(&mut self, word: &str) {
        if self.tool.is_none() {
            self.tool = Some(word.to_owned());
        } else {
            self.positional.push(word.to_owned());
        }
    }

    /// One `--...` word; `flag` is the word without the leading `--`.
    fn flag(&mut self, word: &str, flag: &str) -> Result<(), UsageError> {
        let (name, value) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (flag, None),
        };
        match (name, value) {
            ("input", None) => {
                return Err(UsageError::new(
                    ErrorCode::MissingValue,
                    "--input needs a value after '=', e.g. --input='{\"text\":\"hi\"}'",
                ));
            }
            ("input", Some(v)) => {
                if self.input.is_some() {
                    return Err(UsageError::new(
                        ErrorCode::DuplicateField,
                        "--input is given twice; give one base object",
                    ));
                }
                self.input = Some(parse_input_source(v)?);
            }
            (name, None) if self.tool.is_none() => {
                return Err(UsageError::new(
                    ErrorCode::UnknownOption,
                    match crate::cli::near_own_option(name) {
                        Some((option, _)) => {
                            format!("unknown option '{word}'; did you mean '--{option}'? See 'tools --help'")
                        }
                        None => format!("unknown option '{word}'; see 'tools --help'"),
                    },
                ))
            }
            (name, None) => {
                if let Some((option, _)) = crate::cli::near_own_option(name) {
                    return Err(UsageError::new(
                        ErrorCode::UnknownOption,
                        format!(
                            "unknown option '{word}'; did you mean '--{option}'? \
                             (a field flag takes a value: --{name}=VALUE)"
                        ),
                    ));
                }
                field_name(word, name.strip_suffix(":json").unwrap_or(name))?;
                return Err(UsageError::new(
                    ErrorCode::MissingValue,
                    format!(
                        "{word} has no value: values use '=', e.g. --{name}=true or --{name}=VALUE"
                    ),
                ));
            }
            (name, Some(v)) => {
                if let Some(json_name) = name.strip_suffix(":json") {
                    let field = field_name(word, json_name)?;
                    let value: Value = serde_json::from_str(v).map_err(|e| {
                        UsageError::new(
                            ErrorCode::BadJson,
                            format!(
                                "--{name} is not valid JSON ({e}); e.g. --{json_name}:json='[1,2]'"
                            ),
                        )
                    })?;
                    self.note(&field, word)?;
                    self.json_fields.push((field, format!("--{name}"), value));
                } else {
                    let field = field_name(word, name)?;
                    self.note(&field, word)?;
                    self.args.insert(field, Value::String(v.to_owned()));
                }
            }
        }
        Ok(())
    }

    /// Records that `word` sets `field`; a second setting is an error.
    fn note(&mut self, field: &str, word: &str) -> Result<(), UsageError> {
        if let Some((_, first)) = self.seen.iter().find(|(f, _)| f == field) {
            return Err(UsageError::new(
                ErrorCode::DuplicateField,
                format!(
                    "field '{field}' is given twice ({} and {}); give it once",
                    flag_of(first),
                    flag_of(word)
                ),
            ));
        }
        self.seen.push((field.to_owned(), word.to_owned()));
        Ok(())
    }
}

/// `--name=value` → `--name`, for messages.
fn flag_of(word: &str) -> &str {
    word.split_once('=').map_or(word, |(name, _)| name)
}

/// Numbers like `-5` or `-0.5` are positional words, not options.
fn looks_numeric(word: &str) -> bool {
    word[1..].parse::<f64>().is_ok()
}

fn parse_input_source(v: &str) -> Result<InputSource, UsageError> {
    match v.strip_prefix('@') {
        Some("-") => Ok(InputSource::Stdin),
        Some("") => Err(UsageError::new(
            ErrorCode::MissingValue,
            "--input=@ needs a file name (--input=@input.json) or '-' for stdin (--input=@-)",
        )),
        Some(path) => Ok(InputSource::File(PathBuf::from(path))),
        None => Ok(InputSource::Inline(v.to_owned())),
    }
}

/// The camelCase field for a flag name: `session-id` → `sessionId`; `sessionId` stays.
fn field_name(word: &str, name: &str) -> Result<String, UsageError> {
    let bad = || {
        UsageError::new(
            ErrorCode::BadFlag,
            format!(
                "'{word}' is not a field flag: write --field-name=value (letters, digits, '-' and '_', \
                 starting with a letter)"
            ),
        )
    };
    let starts_with_letter = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
    let allowed = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !starts_with_letter || !allowed || name.ends_with('-') || name.contains("--") {
        return Err(bad());
    }
    let mut field = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '-' {
            upper = true;
        } else if upper {
            field.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            field.push(c);
        }
    }
    Ok(field)
}

/// Builds the request for a call: reads `--input` (file or stdin through `read_stdin`), checks
/// it is an object, and merges the `--field:json` values into it.
pub fn build_request(
    tool: &str,
    parsed: Parsed,
    read_stdin: &mut dyn FnMut() -> io::Result<String>,
) -> Result<CallRequest, UsageError> {
    let base = match &parsed.input {
        None => None,
        Some(source) => {
            let (text, from) = match source {
                InputSource::Inline(text) => (text.clone(), "--input".to_owned()),
                InputSource::File(path) => {
                    let text = std::fs::read_to_string(path).map_err(|e| {
                        UsageError::new(
                            ErrorCode::BadInput,
                            format!("--input=@{}: cannot read the file: {e}", path.display()),
                        )
                    })?;
                    (text, format!("--input=@{}", path.display()))
                }
                InputSource::Stdin => {
                    let text = read_stdin().map_err(|e| {
                        UsageError::new(
                            ErrorCode::BadInput,
                            format!("--input=@-: cannot read stdin: {e}"),
                        )
                    })?;
                    (text, "--input=@-".to_owned())
                }
            };
            match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(map)) => Some(map),
                Ok(other) => {
                    return Err(UsageError::new(
                        ErrorCode::BadInput,
                        format!(
                            "{from} must be a JSON object like {{\"text\":\"hi\"}}, not {}",
                            json_kind(&other)
                        ),
                    ))
                }
                Err(e) => {
                    return Err(UsageError::new(
                        ErrorCode::BadJson,
                        format!("{from} is not valid JSON ({e})"),
                    ))
                }
            }
        }
    };
    let mut input = base.clone();
    for (field, flag, value) in parsed.json_fields {
        if base.as_ref().is_some_and(|b| b.contains_key(&field)) {
            return Err(given_by_input(&field, &flag));
        }
        input.get_or_insert_with(Map::new).insert(field, value);
    }
    if let Some(base) = &base {
        if let Some(field) = parsed.args.keys().find(|k| base.contains_key(*k)) {
            return Err(given_by_input(field, &format!("--{}", kebab(field))));
        }
    }
    Ok(CallRequest {
        tool: tool.to_owned(),
        input,
        args: parsed.args,
        positional: parsed.positional,
    })
}

fn given_by_input(field: &str, flag: &str) -> UsageError {
    UsageError::new(
        ErrorCode::DuplicateField,
        format!("field '{field}' is given by both --input and {flag}; give it once"),
    )
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `sessionId` → `session-id`, for help and messages.
pub fn kebab(field: &str) -> String {
    let mut out = String::with_capacity(field.len() + 4);
    for c in field.chars() {
        if c.is_ascii_uppercase() {
            out.push('-');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn words(ws: &[&str]) -> Vec<String> {
        ws.iter().map(std::string::ToString::to_string).collect()
    }

    fn parse_ok(ws: &[&str]) -> Parsed {
        match parse(&words(ws)) {
            Ok(p) => p,
            Err(e) => panic!("{ws:?} should parse, got {e:?}"),
        }
    }

    fn parse_err(ws: &[&str]) -> UsageError {
        match parse(&words(ws)) {
            Ok(p) => panic!("{ws:?} should fail, got {p:?}"),
            Err(e) => e,
        }
    }

    fn no_stdin() -> io::Result<String> {
        panic!("stdin must not be read")
    }

    fn request(ws: &[&str]) -> Result<CallRequest, UsageError> {
        let p = parse(&words(ws))?;
        let tool = p.tool.clone().unwrap_or_default();
        build_request(&tool, p, &mut no_stdin)
    }

    #[test]
    fn kebab_flags_become_camel_case_fields() {
        let p = parse_ok(&["x.y", "--session-id=#ops", "--reply-to-message-id=12"]);
        assert_eq!(p.tool.as_deref(), Some("x.y"));
        assert_eq!(p.args.get("sessionId"), Some(&json!("#ops")));
        assert_eq!(p.args.get("replyToMessageId"), Some(&json!("12")));
    }

    #[test]
    fn camel_case_flags_pass_through() {
        let p = parse_ok(&["x.y", "--sessionId=#ops", "--a_b=1"]);
        assert_eq!(p.args.get("sessionId"), Some(&json!("#ops")));
        assert_eq!(p.args.get("a_b"), Some(&json!("1")));
    }

    #[test]
    fn values_stay_strings_even_booleans_and_numbers() {
        let p = parse_ok(&["x.y", "--silent=true", "--limit=5", "--empty="]);
        assert_eq!(p.args.get("silent"), Some(&json!("true")));
        assert_eq!(p.args.get("limit"), Some(&json!("5")));
        assert_eq!(p.args.get("empty"), Some(&json!("")));
    }

    #[test]
    fn value_keeps_everything_after_the_first_equals() {
        let p = parse_ok(&["x.y", "--text=a=b --c"]);
        assert_eq!(p.args.get("text"), Some(&json!("a=b --c")));
    }

    #[test]
    fn flag_without_equals_is_a_usage_error_that_shows_the_fix() {
        let e = parse_err(&["x.y", "--silent"]);
        assert_eq!(e.code, "missing_value");
        assert!(e.message.contains("--silent=true"), "{}", e.message);
        assert_eq!(parse_err(&["--bogus"]).code, "unknown_option");
    }

    #[test]
    fn input_without_value_is_a_usage_error() {
        assert_eq!(parse_err(&["x.y", "--input"]).code, "missing_value");
    }

    #[test]
    fn json_flags_are_parsed_into_input() {
        let r = request(&[
            "x.y",
            "--ids:json=[1,2]",
            "--opts:json={\"a\":true}",
            "--n=3",
        ]);
        let r = r.expect("parses");
        let input = r.input.expect("input");
        assert_eq!(input.get("ids"), Some(&json!([1, 2])));
        assert_eq!(input.get("opts"), Some(&json!({"a": true})));
        assert_eq!(r.args.get("n"), Some(&json!("3")));
    }

    #[test]
    fn json_flag_kebab_name_is_converted() {
        let r = request(&["x.y", "--message-ids:json=[\"1\"]"]).expect("parses");
        assert_eq!(
            r.input.expect("input").get("messageIds"),
            Some(&json!(["1"]))
        );
    }

    #[test]
    fn invalid_json_flag_is_a_usage_error() {
        assert_eq!(parse_err(&["x.y", "--ids:json=[1,"]).code, "bad_json");
        assert_eq!(parse_err(&["x.y", "--ids:json="]).code, "bad_json");
        assert_eq!(parse_err(&["x.y", "--ids:json"]).code, "missing_value");
    }

    #[test]
    fn garbage_flags_are_usage_errors() {
        for w in [
            "--=x",
            "--:json=1",
            "--:json=",
            "---x=1",
            "--1abc=2",
            "--a--b=1",
            "--a-=1",
            "--a b=1",
            "--é=1",
            "--a:yaml=1",
        ] {
            assert_eq!(parse_err(&["x.y", w]).code, "bad_flag", "{w}");
        }
    }

    #[test]
    fn unknown_short_options_are_usage_errors_but_negative_numbers_are_words() {
        assert_eq!(parse_err(&["x.y", "-x"]).code, "unknown_option");
        let p = parse_ok(&["x.y", "-5", "-", "-0.5"]);
        assert_eq!(p.positional, vec!["-5", "-", "-0.5"]);
    }

    #[test]
    fn double_dash_ends_flags() {
        let p = parse_ok(&["x.y", "--a=1", "--", "--b=2", "-x", "--help"]);
        assert_eq!(p.positional, vec!["--b=2", "-x", "--help"]);
        assert!(!p.help);
        assert_eq!(p.args.len(), 1);
    }

    #[test]
    fn double_dash_before_the_id_leaves_it_the_id() {
        let p = parse_ok(&["--", "x.y", "--a=1"]);
        assert_eq!(p.tool.as_deref(), Some("x.y"));
        assert_eq!(p.positional, vec!["--a=1"]);
        assert!(p.args.is_empty());
    }

    #[test]
    fn the_help_word_asks_for_help() {
        let p = parse_ok(&["help", "x.y"]);
        assert!(p.help);
        assert_eq!(p.tool.as_deref(), Some("x.y"));
        let p = parse_ok(&["help"]);
        assert!(p.help && p.tool.is_none());
        assert_eq!(parse_err(&["help", "a", "b"]).code, "unexpected_argument");
    }

    #[test]
    fn a_field_given_twice_is_a_usage_error() {
        assert_eq!(
            parse_err(&["x.y", "--text=a", "--text=b"]).code,
            "duplicate_field"
        );
        assert_eq!(
            parse_err(&["x.y", "--session-id=a", "--sessionId=b"]).code,
            "duplicate_field"
        );
        assert_eq!(
            parse_err(&["x.y", "--ids=a", "--ids:json=[]"]).code,
            "duplicate_field"
        );
        assert_eq!(
            parse_err(&["x.y", "--input={}", "--input={}"]).code,
            "duplicate_field"
        );
    }

    #[test]
    fn positionals_are_kept_in_order() {
        let r = request(&["x.y", "hello", "--a=1", "world"]).expect("parses");
        assert_eq!(r.tool, "x.y");
        assert_eq!(r.positional, vec!["hello", "world"]);
        assert_eq!(r.input, None);
    }

    #[test]
    fn inline_input_is_the_base_object() {
        let r = request(&["x.y", "--input={\"text\":\"hi\",\"n\":2}", "--c:json=1"]).expect("ok");
        assert_eq!(
            Value::Object(r.input.expect("input")),
            json!({"text": "hi", "n": 2, "c": 1})
        );
    }

    #[test]
    fn input_must_be_a_json_object() {
        for v in ["[1]", "\"s\"", "3", "null", "true"] {
            assert_eq!(
                request(&["x.y", &format!("--input={v}")]).map(|_| ()),
                Err(UsageError {
                    code: ErrorCode::BadInput,
                    message: format!(
                        "--input must be a JSON object like {{\"text\":\"hi\"}}, not {}",
                        json_kind(&serde_json::from_str(v).expect("json"))
                    ),
                })
            );
        }
        assert_eq!(
            request(&["x.y", "--input={"])
                .map(|_| ())
                .map_err(|e| e.code),
            Err(ErrorCode::BadJson)
        );
        assert_eq!(
            request(&["x.y", "--input="])
                .map(|_| ())
                .map_err(|e| e.code),
            Err(ErrorCode::BadJson)
        );
    }

    #[test]
    fn input_from_a_file() {
        let path =
            std::env::temp_dir().join(format!("tools-args-test-{}.json", std::process::id()));
        std::fs::write(&path, "{\"text\":\"from file\"}").expect("write");
        let arg = format!("--input=@{}", path.display());
        let r = request(&["x.y", &arg]);
        let _ = std::fs::remove_file(&path);
        assert_eq!(
            r.expect("ok").input.expect("input").get("text"),
            Some(&json!("from file"))
        );
    }

    #[test]
    fn input_from_a_missing_file_is_a_usage_error() {
        let e = request(&["x.y", "--input=@/nonexistent/tools-test.json"]).map(|_| ());
        assert_eq!(e.map_err(|e| e.code), Err(ErrorCode::BadInput));
        assert_eq!(parse_err(&["x.y", "--input=@"]).code, "missing_value");
    }

    #[test]
    fn input_from_stdin_uses_the_injected_reader() {
        let p = parse_ok(&["x.y", "--input=@-", "--silent=true"]);
        let mut reads = 0;
        let mut stdin = || {
            reads += 1;
            Ok("{\"text\":\"piped\"}".to_owned())
        };
        let r = build_request("x.y", p, &mut stdin).expect("ok");
        assert_eq!(reads, 1);
        assert_eq!(r.input.expect("input").get("text"), Some(&json!("piped")));
        assert_eq!(r.args.get("silent"), Some(&json!("true")));
    }

    #[test]
    fn stdin_read_errors_are_usage_errors() {
        let p = parse_ok(&["x.y", "--input=@-"]);
        let mut stdin = || Err(io::Error::other("closed"));
        let e = build_request("x.y", p, &mut stdin).map(|_| ());
        assert_eq!(e.map_err(|e| e.code), Err(ErrorCode::BadInput));
    }

    #[test]
    fn a_field_in_both_input_and_a_flag_is_a_usage_error() {
        let e = request(&["x.y", "--input={\"text\":\"a\"}", "--text=b"]).map(|_| ());
        assert_eq!(e.map_err(|e| e.code), Err(ErrorCode::DuplicateField));
        let e = request(&["x.y", "--input={\"text\":\"a\"}", "--text:json=\"b\""]).map(|_| ());
        assert_eq!(e.map_err(|e| e.code), Err(ErrorCode::DuplicateField));
    }

    #[test]
    fn kebab_round_trips_camel_case() {
        assert_eq!(kebab("replyToMessageId"), "reply-to-message-id");
        assert_eq!(kebab("text"), "text");
    }
}
