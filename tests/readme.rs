//! Every command line README.md shows works as shown: the lines of its `sh`/`bash` blocks and
//! the commands quoted in its text (`switchboard playground --extra-config FILE`).
//!
//! - `switchboard ...` (and `cargo run ... -- ...`) is parsed by the binary's own command line
//!   definition (`src/cli.rs`, included below), so a flag the README names and the binary lacks
//!   fails here. The ones that finish on their own without a server — `check-config`,
//!   `rewrite`, `resolve-session` — are also run, by the real binary, in a directory set up as
//!   the README's `cp` lines say, and print exactly the `#   ` lines shown under them. The
//!   others start a server or talk to one, so they are parsed only.
//! - `tools ...` is run by the real binary against a port nothing listens on: it must get as
//!   far as calling the server (exit 6, `unreachable`), which it does only when it understood
//!   every word.
//! - other `cargo` lines name real packages (`-p`), paths (`--path`) and test files
//!   (`--test`); `bash FILE` and `./FILE` name files in the repository (`./FILE` executable);
//!   `cp SRC ...` copies a file the repository has.

mod support;

#[path = "../src/cli.rs"]
#[allow(dead_code)]
mod cli;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use clap::Parser;
use support::{wait_bounded, TempDir};

const WAIT: Duration = Duration::from_secs(20);

/// Text in code that starts like a command but is not one: a log line the README quotes.
const QUOTED_OUTPUT: &[&str] =
    &["switchboard ready: tool server listening; connecting to the gateway"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn readme() -> String {
    std::fs::read_to_string(root().join("README.md")).expect("README.md")
}

/// One command line the README shows.
#[derive(Debug, Clone)]
struct Shown {
    /// Where: `README.md:LINE`.
    place: String,
    /// The line as written.
    line: String,
    /// The output lines shown under it (`#   ...`), if any.
    output: Vec<String>,
}

/// The command lines of the README's shell blocks and the commands quoted in its text.
fn shown_commands(readme: &str) -> Vec<Shown> {
    let mut shown: Vec<Shown> = Vec::new();
    let mut prose = String::new();
    // The README line of each line of `prose`.
    let mut prose_lines: Vec<usize> = Vec::new();
    let mut fence: Option<String> = None;
    for (index, raw) in readme.lines().enumerate() {
        let line = raw.trim();
        if let Some(info) = line.strip_prefix("```") {
            fence = match fence {
                Some(_) => None,
                None => Some(info.trim().to_owned()),
            };
            continue;
        }
        match fence.as_deref() {
            Some("sh" | "bash" | "shell" | "console" | "") => {
                if let Some(output) = line.strip_prefix("#   ") {
                    if let Some(last) = shown.last_mut() {
                        last.output.push(output.to_owned());
                    }
                } else if !line.is_empty() && !line.starts_with('#') {
                    shown.push(Shown {
                        place: format!("README.md:{}", index + 1),
                        line: line.to_owned(),
                        output: Vec::new(),
                    });
                }
            }
            Some(_) => {}
            None => {
                prose.push_str(raw);
                prose.push('\n');
                prose_lines.push(index + 1);
            }
        }
    }
    // Inline code: every other piece between backticks; a span may wrap onto the next line.
    let mut offset = 0;
    for (i, piece) in prose.split('`').enumerate() {
        if i % 2 == 1 && !piece.contains("\n\n") {
            let line = piece.split_whitespace().collect::<Vec<_>>().join(" ");
            let first = line.split(' ').next().unwrap_or_default();
            // `./switchboard.toml` is a path; `./test.sh` a command.
            let program = matches!(first, "switchboard" | "tools" | "cargo" | "bash")
                || (first.starts_with("./") && first.ends_with(".sh"));
            if program && !QUOTED_OUTPUT.contains(&line.as_str()) {
                let at = prose[..offset].matches('\n').count();
                shown.push(Shown {
                    place: format!("README.md:{}", prose_lines.get(at).copied().unwrap_or(0)),
                    line,
                    output: Vec::new(),
                });
            }
        }
        offset += piece.len() + 1;
    }
    shown
}

/// What a shown line asks to run, after its shell syntax: each command of a pipeline, with the
/// text an `echo` before it pipes in.
#[derive(Debug)]
struct Step {
    words: Vec<String>,
    stdin: Option<String>,
}

fn steps(shown: &Shown) -> Vec<Step> {
    let words = shlex::split(&shown.line)
        .unwrap_or_else(|| panic!("{}: not a shell line: {}", shown.place, shown.line));
    let mut steps = Vec::new();
    let mut piped = None;
    for command in words.split(|w| w == "|") {
        // Leading NAME=VALUE words set the environment; they run nothing here.
        let command: Vec<String> = command
            .iter()
            .skip_while(|w| w.split_once('=').is_some_and(|(name, _)| is_env_name(name)))
            .cloned()
            .collect();
        if command.first().map(String::as_str) == Some("echo") {
            piped = Some(format!("{}\n", command[1..].join(" ")));
            continue;
        }
        if !command.is_empty() {
            steps.push(Step {
                words: command,
                stdin: piped.take(),
            });
        }
    }
    steps
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// How a shown step was checked, for the summary at the end.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Checked {
    Parsed,
    Ran,
    CalledTools,
    Cargo,
    File,
    Shell,
}

/// The `switchboard` words of a `cargo run` line (`cargo run --release -- playground`), or the
/// `tools` words of `cargo run -p tools -- ...`.
fn cargo_run(words: &[String]) -> (&'static str, Vec<String>) {
    let (flags, rest) = match words.iter().position(|w| w == "--") {
        Some(at) => (&words[..at], words[at + 1..].to_vec()),
        None => (words, Vec::new()),
    };
    let package = flags
        .windows(2)
        .find(|pair| pair[0] == "-p" || pair[0] == "--package")
        .map(|pair| pair[1].as_str());
    match package {
        Some("tools") => ("tools", rest),
        None | Some("switchboard") => ("switchboard", rest),
        Some(other) => panic!("cargo run -p {other}: not a binary of this repository"),
    }
}

/// A directory set up the way the README's "Trying the config" block says: its `cp` lines.
fn config_dir() -> TempDir {
    let dir = TempDir::new("readme");
    std::fs::copy(
        root().join("switchboard.example.toml"),
        dir.path().join("switchboard.toml"),
    )
    .expect("copy the example config");
    std::fs::copy(root().join(".env.example"), dir.path().join(".env")).expect("copy .env");
    dir
}

/// Parses `switchboard` words with the binary's definition; runs the ones that finish alone.
fn check_switchboard(shown: &Shown, words: &[String], stdin: Option<&str>, dir: &Path) -> Checked {
    let argv = std::iter::once("switchboard".to_owned()).chain(words.iter().cloned());
    if let Err(error) = cli::Cli::try_parse_from(argv) {
        panic!(
            "{}: `{}` does not parse: {}",
            shown.place,
            shown.line,
            error.render()
        );
    }
    let runs_alone = matches!(
        words.first().map(String::as_str),
        Some("check-config" | "rewrite" | "resolve-session")
    );
    if !runs_alone {
        return Checked::Parsed;
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(words)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn switchboard");
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        std::io::Write::write_all(&mut pipe, text.as_bytes()).expect("stdin");
    }
    let out = child.stdout.take().expect("stdout");
    let err = child.stderr.take().expect("stderr");
    let read = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let (out, err) = (read(Box::new(out)), read(Box::new(err)));
    let status = wait_bounded(&mut child, WAIT)
        .unwrap_or_else(|| panic!("{}: `{}` did not finish", shown.place, shown.line));
    let (stdout, stderr) = (out.join().expect("stdout"), err.join().expect("stderr"));
    assert_eq!(
        status.code(),
        Some(0),
        "{}: `{}` failed:\n{stdout}{stderr}",
        shown.place,
        shown.line
    );
    if !shown.output.is_empty() {
        let printed: Vec<&str> = stdout.lines().collect();
        assert_eq!(
            printed, shown.output,
            "{}: `{}` prints what the README shows under it",
            shown.place, shown.line
        );
    }
    Checked::Ran
}

/// Runs `tools` words against a port nothing listens on: understood lines try the server.
fn check_tools(shown: &Shown, words: &[String], closed: &str, dir: &Path) -> Checked {
    let mut child = Command::new(support::tools_bin())
        .args(words)
        .current_dir(dir)
        .env_clear()
        .env("SWITCHBOARD_URL", closed)
        .env("SWITCHBOARD_TOKEN", "readme")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tools");
    let mut stderr = String::new();
    let status = wait_bounded(&mut child, WAIT)
        .unwrap_or_else(|| panic!("{}: `{}` did not finish", shown.place, shown.line));
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    assert!(
        status.code() == Some(6) && stderr.contains("\"unreachable\""),
        "{}: `{}` was not understood (it should only fail to reach the server): {status:?}\n{stderr}",
        shown.place,
        shown.line
    );
    Checked::CalledTools
}

/// `cargo` lines other than `run`: the packages, paths and tests they name exist.
fn check_cargo(shown: &Shown, words: &[String]) -> Checked {
    for pair in words.windows(2) {
        let value = pair[1].as_str();
        let exists = match pair[0].as_str() {
            "-p" | "--package" => {
                let manifest = if value == "switchboard" {
                    root().join("Cargo.toml")
                } else {
                    root().join(value).join("Cargo.toml")
                };
                std::fs::read_to_string(manifest)
                    .is_ok_and(|text| text.contains(&format!("name = \"{value}\"")))
            }
            "--path" => root().join(value).join("Cargo.toml").is_file(),
            "--test" => root().join("tests").join(format!("{value}.rs")).is_file(),
            _ => continue,
        };
        assert!(
            exists,
            "{}: `{}` names {} {value}, which this repository does not have",
            shown.place, shown.line, pair[0]
        );
    }
    Checked::Cargo
}

fn check_file(shown: &Shown, path: &str, executable: bool) -> Checked {
    let file: PathBuf = root().join(path);
    assert!(
        file.is_file(),
        "{}: `{}` names {path}, which is not in the repository",
        shown.place,
        shown.line
    );
    if executable {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file)
            .expect("metadata")
            .permissions()
            .mode();
        assert!(
            mode & 0o111 != 0,
            "{}: {path} is not executable",
            shown.place
        );
    }
    Checked::File
}

#[test]
fn every_command_line_the_readme_shows_works_as_shown() {
    let readme = readme();
    let shown = shown_commands(&readme);
    let dir = config_dir();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://{}", listener.local_addr().expect("addr"))
    };
    let mut checked = Vec::new();
    for line in &shown {
        for step in steps(line) {
            let words = &step.words;
            let program = words[0].as_str();
            let args = &words[1..];
            let how = match program {
                "switchboard" => check_switchboard(line, args, step.stdin.as_deref(), dir.path()),
                // `tools` alone names the CLI.
                "tools" if args.is_empty() => continue,
                "tools" => check_tools(line, args, &closed, dir.path()),
                "cargo" if args.first().map(String::as_str) == Some("run") => {
                    match cargo_run(&args[1..]) {
                        ("tools", rest) if rest.is_empty() => Checked::Cargo,
                        ("tools", rest) => check_tools(line, &rest, &closed, dir.path()),
                        (_, rest) => {
                            check_switchboard(line, &rest, step.stdin.as_deref(), dir.path())
                        }
                    }
                }
                "cargo" => check_cargo(line, args),
                "bash" => check_file(line, &args[0], false),
                "cp" => check_file(line, &args[0], false),
                local if local.starts_with("./") => check_file(line, local, true),
                _ => Checked::Shell,
            };
            checked.push((how, line.line.clone()));
        }
    }
    // The extraction itself found what the README is known to show.
    let lines: Vec<&str> = checked.iter().map(|(_, line)| line.as_str()).collect();
    for expected in [
        "cargo run --release -- playground",
        "switchboard playground --extra-config FILE",
        "switchboard playground --agent-url URL --model NAME",
        "tools surface.messages.list --session-id=#ops --limit=20 --output=text",
        "switchboard resolve-session '#ops'               # unknown -> exit 4",
    ] {
        assert!(
            lines.contains(&expected),
            "the README's `{expected}` was not found among: {lines:#?}"
        );
    }
    let ran = checked
        .iter()
        .filter(|(how, _)| *how == Checked::Ran)
        .count();
    let called = checked
        .iter()
        .filter(|(how, _)| *how == Checked::CalledTools)
        .count();
    assert!(
        ran >= 4,
        "check-config, rewrite both ways, resolve-session ran: {checked:#?}"
    );
    assert!(called >= 8, "the tools lines ran: {checked:#?}");
    for quoted in QUOTED_OUTPUT {
        assert!(
            readme.contains(quoted),
            "QUOTED_OUTPUT lists `{quoted}`, which the README no longer has: drop it"
        );
    }
}

/// The fenced command lines of the README's "The two commands" section.
fn the_two_commands(readme: &str) -> Vec<String> {
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("The two commands"))
        .expect("a '## The two commands' section");
    let mut commands = Vec::new();
    let mut fenced = false;
    for line in section.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if fenced && !line.trim().is_empty() {
            commands.push(line.trim().to_owned());
        }
    }
    commands
}

#[test]
fn the_readme_shows_two_commands_and_ci_runs_exactly_the_second() {
    let commands = the_two_commands(&readme());
    assert_eq!(commands, ["cargo run --release -- playground", "./test.sh"]);
    let ci = std::fs::read_to_string(root().join(".ci/run")).expect(".ci/run");
    let runs: Vec<&str> = ci
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter(|l| !l.starts_with("set ") && !l.starts_with("cd "))
        .collect();
    assert_eq!(runs, [format!("exec {}", commands[1])], ".ci/run:\n{ci}");
}

/// A directory of stand-ins for what `test.sh` looks for, plus the real programs it runs, as
/// the whole `PATH` of a run: what is "installed" is exactly what the test put there.
struct Shims {
    dir: TempDir,
    log: PathBuf,
}

impl Shims {
    fn new() -> Shims {
        let dir = TempDir::new("test-sh");
        let log = dir.path().join("calls.log");
        let shims = Shims { dir, log };
        for real in ["bash", "dirname", "env", "cmp"] {
            let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
                .map(|d| d.join(real))
                .find(|p| p.is_file())
                .unwrap_or_else(|| panic!("no {real} on PATH"));
            std::os::unix::fs::symlink(found, shims.dir.path().join(real)).expect("link");
        }
        // A Rust toolchain with rustfmt and clippy: the script's precondition.
        shims.script("cargo", "exit 0");
        shims
    }

    fn script(&self, name: &str, body: &str) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.dir.path().join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("write shim");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    /// Everything `test.sh` checks for is there but `missing` (Debian package names).
    fn installed_all_but(&self, missing: &[&str]) {
        for (package, program) in [
            ("chromium", "chromium"),
            ("chromium-driver", "chromedriver"),
            ("prometheus", "promtool"),
            ("python3-venv", "python3"),
            ("bubblewrap", "bwrap"),
            ("gcc", "cc"),
        ] {
            let path = self.dir.path().join(program);
            let _ = std::fs::remove_file(&path);
            if !missing.contains(&package) {
                self.script(program, "exit 0");
            }
        }
        let listed: Vec<&str> = ["postgresql", "libc6-dev"]
            .into_iter()
            .filter(|p| !missing.contains(p))
            .collect();
        self.script(
            "dpkg-query",
            &format!(
                "for p in {}; do [ \"$3\" = \"$p\" ] && printf 'install ok installed' && exit 0; done; exit 1",
                listed.join(" ")
            ),
        );
    }

    /// `id -u` answers `uid`; `sudo` and `apt-get` only write down how they were called.
    fn as_user(&self, uid: u32) {
        self.script("id", &format!("echo {uid}"));
        self.script("sudo", "echo \"sudo $*\" >> \"$SHIM_LOG\"; exec \"$@\"");
        self.script(
            "apt-get",
            "echo \"apt-get [$DEBIAN_FRONTEND] $*\" >> \"$SHIM_LOG\"",
        );
    }

    /// Runs `./test.sh ARG` with only the shims on PATH; its exit code, stdout, and the calls.
    fn run(&self, arg: &str) -> (Option<i32>, String, Vec<String>) {
        let _ = std::fs::remove_file(&self.log);
        let mut child = Command::new(root().join("test.sh"))
            .arg(arg)
            .env_clear()
            .env("PATH", self.dir.path())
            .env("SHIM_LOG", &self.log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run test.sh");
        let mut stdout = String::new();
        std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut stdout)
            .expect("stdout");
        let status = wait_bounded(&mut child, WAIT).expect("test.sh finishes");
        let calls = std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        (status.code(), stdout, calls)
    }
}

#[test]
fn test_sh_plans_to_install_exactly_what_is_missing() {
    let shims = Shims::new();
    shims.installed_all_but(&[
        "chromium",
        "chromium-driver",
        "prometheus",
        "python3-venv",
        "postgresql",
        "bubblewrap",
        "gcc",
        "libc6-dev",
    ]);
    let (code, out, _) = shims.run("--plan");
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        out,
        "packages: apt-get install chromium chromium-driver prometheus python3-venv postgresql bubblewrap gcc libc6-dev\n\
         rust components: all present\n"
    );
    shims.installed_all_but(&["postgresql", "bubblewrap"]);
    let (_, out, _) = shims.run("--plan");
    assert!(
        out.starts_with("packages: apt-get install postgresql bubblewrap\n"),
        "{out}"
    );
    shims.installed_all_but(&[]);
    let (_, out, _) = shims.run("--plan");
    assert!(out.starts_with("packages: all present\n"), "{out}");
}

#[test]
fn test_sh_installs_what_is_missing_once_with_sudo_only_when_not_root() {
    let shims = Shims::new();
    shims.installed_all_but(&["postgresql"]);
    shims.as_user(1000);
    let (code, _, calls) = shims.run("--setup");
    assert_eq!(code, Some(0), "{calls:#?}");
    assert_eq!(
        calls,
        [
            "sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq",
            "apt-get [noninteractive] update -qq",
            "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql",
            "apt-get [noninteractive] install -y -qq --no-install-recommends postgresql",
        ]
    );
    shims.installed_all_but(&["bubblewrap"]);
    shims.as_user(0);
    let (code, _, calls) = shims.run("--setup");
    assert_eq!(code, Some(0), "{calls:#?}");
    assert_eq!(
        calls,
        [
            "apt-get [noninteractive] update -qq",
            "apt-get [noninteractive] install -y -qq --no-install-recommends bubblewrap",
        ]
    );
    // Everything there: nothing is installed, nothing asks for root.
    shims.installed_all_but(&[]);
    shims.as_user(1000);
    let (code, _, calls) = shims.run("--setup");
    assert_eq!(code, Some(0));
    assert!(calls.is_empty(), "{calls:#?}");
}

#[test]
fn this_machine_has_everything_test_sh_installs() {
    // test.sh set this machine up before the suite ran: its checks must agree (a check that
    // never passes would reinstall on every run).
    let output = Command::new(root().join("test.sh"))
        .arg("--plan")
        .stdin(Stdio::null())
        .output()
        .expect("run test.sh --plan");
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{out}");
    assert_eq!(out, "packages: all present\nrust components: all present\n");
}
