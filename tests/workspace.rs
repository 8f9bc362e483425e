//! The agent's workspace end to end: the real `switchboard run` (its own binary as the
//! sandbox's helper, the real bubblewrap), the fake Discord, and a scripted OpenAI-compatible
//! model or the `tools` CLI. A run writes, edits, runs and commits and its answer reaches
//! Discord; escapes through the callables fail; rules on commands decide per segment and an
//! ask card shows the exact command; `/undo` puts back a file a run changed; `/abort` kills a
//! run's background command.
//!
//! These tests need `bwrap` (Debian's bubblewrap): they fail, never skip, without it.

#[path = "support/events.rs"]
mod events;
#[path = "support/model.rs"]
mod model;
mod support;

use support::approvals::{card, click, Background};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use events::{next_event, subscribe};
use fake_discord::demo;
use model::{messages, text, tool_call, tool_results, FakeModel};
use serde_json::Value;
use support::{
    command_agent, poll, script, slash, tools_in, Allow, Fake, Sections, Switchboard, TempDir,
};

const BOT_MENTION: &str = "<@1000000000000000001>";
const WAIT: Duration = Duration::from_secs(20);
const WORKSPACE_SCOPE: &str =
    r#"tool_scope = ["surface.*", "fs.*", "shell.*", "git.*", "workspace.undo"]"#;

/// `[workspace]` with its root in `dir`.
fn workspace_section(dir: &Path, extra: &str) -> String {
    format!(
        "[workspace]\nroot = \"{}\"\ntimeout_s = 20\nmax_timeout_s = 60\n{extra}\n",
        dir.join("ws").display()
    )
}

/// Where `#ops`'s workspace is.
fn ops_dir(dir: &Path) -> PathBuf {
    dir.join("ws").join(demo::OPS.to_string())
}

fn start(fake: &Fake, dir: &Path, extra: &str) -> Switchboard {
    start_with_toolserver(fake, dir, extra, "")
}

/// [`start`] with more keys in `[toolserver]`.
fn start_with_toolserver(fake: &Fake, dir: &Path, extra: &str, toolserver: &str) -> Switchboard {
    assert!(
        Command::new("bwrap")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "bwrap is missing: install bubblewrap (apt-get install bubblewrap)"
    );
    let sb = Switchboard::start_sections(
        fake,
        dir,
        &Allow::default(),
        Sections {
            extra,
            toolserver,
            ..Sections::default()
        },
    );
    let (_, health) = support::http_get(&sb.url, "/health").expect("/health");
    assert!(health.contains(r#""sandbox":"ready""#), "{health}");
    sb
}

/// A `tools` call as the operator in `#ops`: its exit code, and the answer's value (exit 0)
/// or its error body.
fn call(sb: &Switchboard, args: &[&str]) -> (Option<i32>, Value) {
    call_within(sb, args, Duration::from_secs(30))
}

/// [`call`] for a command that may take up to `bound`.
fn call_within(sb: &Switchboard, args: &[&str], bound: Duration) -> (Option<i32>, Value) {
    let mut all = args.to_vec();
    all.extend(["--session-id=#ops", "--output=json"]);
    let out = support::tools_in_within(
        &sb.url,
        &sb.token,
        Path::new(env!("CARGO_MANIFEST_DIR")),
        &all,
        bound,
    );
    let value = out
        .stdout
        .lines()
        .chain(out.stderr.lines())
        .find_map(|line| serde_json::from_str::<Value>(line).ok())
        .unwrap_or_else(|| Value::String(format!("{out:?}")));
    (out.code, value)
}

fn error_code(answer: &Value) -> String {
    answer["error"]["code"]
        .as_str()
        .or_else(|| answer["code"].as_str())
        .map_or_else(|| answer.to_string(), str::to_owned)
}

/// The bot's reply to `trigger` in `channel` (a run in the sandbox may take a while).
fn reply_to(fake: &Fake, sb: &Switchboard, channel: u64, trigger: &str) -> Value {
    support::reply_to_within(fake, sb, channel, trigger, Duration::from_secs(40))
}

fn openai_agent(model: &FakeModel) -> String {
    format!(
        "[agent]\nrunner = \"openai\"\nbase_url = \"{}\"\nmodel = \"fake-model\"\nmax_tool_rounds = 8\ntimeout_s = 60\nstream = \"off\"\n{WORKSPACE_SCOPE}\n",
        model.base_url
    )
}

/// The tool results the model was sent so far, in order.
fn results(request: &Value) -> Vec<Value> {
    tool_results(request).into_iter().map(|(_, v)| v).collect()
}

#[test]
fn a_run_writes_edits_runs_and_commits_and_its_answer_reaches_discord() {
    let model = FakeModel::start(|requests| {
        let last = requests.last().expect("the current request");
        let done = results(last);
        match done.len() {
            0 => tool_call(
                "c1",
                "fs__write",
                r#"{"path":"notes.txt","content":"alpha\n    beta  \n"}"#,
            ),
            // Tab indentation and no trailing spaces: not the file's exact text.
            1 => tool_call(
                "c2",
                "fs__edit",
                r#"{"path":"notes.txt","old":"\tbeta","new":"    gamma"}"#,
            ),
            2 => tool_call(
                "c3",
                "shell__run",
                r#"{"command":"git init -q && git config user.name Agent && git config user.email agent@example.com && git add -A && cat notes.txt"}"#,
            ),
            3 => tool_call("c4", "git__commit", r#"{"message":"Add notes"}"#),
            _ => {
                let shell = &done[2]["value"]["stdout"];
                let commit = &done[3]["value"]["hash"];
                text(&format!(
                    "Committed {} with: {}",
                    commit.as_str().unwrap_or("?"),
                    shell.as_str().unwrap_or("?").trim().replace('\n', " / ")
                ))
            }
        }
    });
    let fake = Fake::start();
    let dir = TempDir::new("ws-run");
    let extra = format!(
        "{}\n{}",
        workspace_section(dir.path(), ""),
        openai_agent(&model)
    );
    let sb = start(&fake, dir.path(), &extra);
    let trigger = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} write the notes and commit them"),
    );
    let reply = reply_to(&fake, &sb, demo::OPS, &trigger);
    let content = reply["content"].as_str().unwrap_or_default().to_owned();
    let requests = model.requests();
    let done = results(requests.last().expect("requests"));
    assert_eq!(done.len(), 4, "{done:?}");
    for (i, result) in done.iter().enumerate() {
        assert_eq!(result["ok"], true, "tool call {i}: {result}");
    }
    assert_eq!(done[0]["value"]["kind"], "created", "{}", done[0]);
    assert_ne!(done[1]["value"]["strategy"], "exact", "{}", done[1]);
    assert!(done[1]["value"]["diff"]
        .as_str()
        .unwrap_or("")
        .contains("+    gamma"));
    assert_eq!(done[2]["value"]["exitCode"], 0, "{}", done[2]);
    let hash = done[3]["value"]["hash"].as_str().expect("a commit hash");
    assert_eq!(hash.len(), 40, "{hash}");
    assert!(
        content.contains(hash) && content.contains("alpha /     gamma"),
        "the answer in Discord: {content}"
    );
    // On disk, in #ops's own workspace.
    let ops = ops_dir(dir.path());
    assert_eq!(
        std::fs::read_to_string(ops.join("notes.txt")).expect("notes.txt"),
        "alpha\n    gamma\n"
    );
    let log = Command::new("git")
        .args(["-C", &ops.display().to_string(), "log", "--format=%H %s"])
        .output()
        .expect("git log");
    assert_eq!(
        String::from_utf8_lossy(&log.stdout).trim(),
        format!("{hash} Add notes")
    );
    // The model was offered the workspace callables (they are in the run's scope).
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    for name in ["fs__write", "fs__edit", "shell__run", "git__commit"] {
        assert!(offered.contains(&name), "{name} not offered: {offered:?}");
    }
    assert!(messages(&requests[0]).len() > 1);
}

#[test]
fn writes_outside_the_workspace_are_refused() {
    let fake = Fake::start();
    let dir = TempDir::new("ws-outside");
    let sb = start(&fake, dir.path(), &workspace_section(dir.path(), ""));
    let outside = dir.path().join("outside.txt");
    for path in [
        "/etc/switchboard-e2e".to_owned(),
        "../outside.txt".to_owned(),
        "../../outside.txt".to_owned(),
        outside.display().to_string(),
    ] {
        let (code, answer) = call(&sb, &["fs.write", &format!("--path={path}"), "--content=x"]);
        assert_eq!(code, Some(3), "{path}: {answer}");
        assert_eq!(error_code(&answer), "outside_workspace", "{path}: {answer}");
    }
    // A symlink leading out, made inside with the shell.
    let (code, answer) = call(&sb, &["shell.run", "ln -s /etc etc-link && ln -s .. up"]);
    assert_eq!(code, Some(0), "{answer}");
    for path in ["etc-link/switchboard-e2e", "up/outside.txt"] {
        let (_, answer) = call(&sb, &["fs.write", &format!("--path={path}"), "--content=x"]);
        assert_eq!(error_code(&answer), "outside_workspace", "{path}: {answer}");
    }
    // The shell: the host is read-only; the workspaces' directory (other sessions') is
    // covered by an empty one, so what a command writes there stays in the sandbox.
    let other = dir.path().join("ws").join("1000000000000000402");
    std::fs::create_dir_all(&other).expect("another session's workspace");
    std::fs::write(other.join("theirs.txt"), "theirs").expect("theirs.txt");
    let (_, answer) = call(&sb, &["shell.run", "echo x > /etc/switchboard-e2e"]);
    assert_ne!(answer["exitCode"], 0, "{answer}");
    assert!(
        answer["stderr"]
            .as_str()
            .unwrap_or("")
            .contains("Read-only"),
        "{answer}"
    );
    let (_, answer) = call(
        &sb,
        &[
            "shell.run",
            "cat ../1000000000000000402/theirs.txt; echo x > ../outside.txt; ls -a ..",
        ],
    );
    let listed = answer["stdout"].as_str().unwrap_or("");
    assert!(
        !listed.contains("theirs") && !listed.contains("1000000000000000402"),
        "{answer}"
    );
    assert!(!Path::new("/etc/switchboard-e2e").exists());
    assert!(!outside.exists());
    assert!(!dir.path().join("ws").join("outside.txt").exists());
}

/// A secret file in the home directory, removed on drop.
struct Secret(PathBuf);

impl Drop for Secret {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_secret_in_the_home_directory_cannot_be_read() {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    let secret = Secret(home.join(format!(".switchboard-e2e-secret-{}", std::process::id())));
    std::fs::write(&secret.0, "hunter2-e2e").expect("write the secret");
    let fake = Fake::start();
    let dir = TempDir::new("ws-secret");
    let sb = start(&fake, dir.path(), &workspace_section(dir.path(), ""));
    let path = secret.0.display().to_string();
    let (_, answer) = call(&sb, &["fs.read", &format!("--path={path}")]);
    assert_eq!(error_code(&answer), "outside_workspace", "{answer}");
    let (_, answer) = call(
        &sb,
        &["shell.run", &format!("cat {path}; cat ~/.ssh/* 2>&1")],
    );
    assert!(
        !answer.to_string().contains("hunter2-e2e"),
        "the secret leaked: {answer}"
    );
}

#[test]
fn a_listener_on_loopback_is_unreachable_with_the_network_off() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let fake = Fake::start();
    let dir = TempDir::new("ws-network");
    let sb = start(&fake, dir.path(), &workspace_section(dir.path(), ""));
    let (_, answer) = call(
        &sb,
        &[
            "shell.run",
            &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"),
        ],
    );
    assert_eq!(answer["stdout"], "", "{answer}");
    assert_ne!(answer["exitCode"], 0, "{answer}");
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the sandbox reached the listener"
    );
}

/// Pids of host processes whose command line is exactly `argv`.
fn processes(argv: &[&str]) -> Vec<u32> {
    let want = argv.join("\0") + "\0";
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            (cmdline == want.as_bytes()).then_some(pid)
        })
        .collect()
}

#[test]
fn a_fork_bomb_a_gigabyte_of_output_and_a_sleep_past_its_timeout_are_contained() {
    let fake = Fake::start();
    let dir = TempDir::new("ws-limits");
    // The gigabyte's `--timeout-s=50` holds only under a call timeout past it (a foreground
    // command is cut a second before the call's, 30 s by default) and a wait for `tools` past
    // it: a gigabyte piped through the sandbox takes longer than 30 s on a busy 2-core machine.
    let sb = start_with_toolserver(
        &fake,
        dir.path(),
        &workspace_section(dir.path(), ""),
        "call_timeout_s = 60",
    );

    // A fork bomb ends at its timeout (or the process limit), and the service goes on.
    let started = Instant::now();
    let (code, answer) = call(&sb, &["shell.run", ":(){ :|:& };:", "--timeout-s=5"]);
    assert!(code == Some(0) || code == Some(7), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(25));
    let (code, answer) = call(&sb, &["shell.run", "echo alive"]);
    assert_eq!(
        (code, answer["stdout"].as_str()),
        (Some(0), Some("alive\n")),
        "{answer}"
    );

    // A gigabyte of output: the answer keeps the tail within the bounds and says where the
    // rest went.
    let (code, answer) = call_within(
        &sb,
        &[
            "shell.run",
            "head -c 1000000000 /dev/zero | tr '\\0' a",
            "--timeout-s=50",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(
        code,
        Some(0),
        "{}",
        answer.to_string().chars().take(500).collect::<String>()
    );
    let stdout = answer["stdout"].as_str().expect("stdout");
    assert!(stdout.len() <= 51_200, "{} bytes answered", stdout.len());
    assert!(answer["stdoutCut"].is_object(), "the cut is said");

    // A command past its timeout is killed with what it started: nothing is left.
    let (code, answer) = call(
        &sb,
        &["shell.run", "sleep 971 & sleep 972", "--timeout-s=2"],
    );
    assert_eq!(code, Some(7), "{answer}");
    assert_eq!(error_code(&answer), "timeout", "{answer}");
    poll("no sleep left behind", Duration::from_secs(5), || {
        (processes(&["sleep", "971"]).is_empty() && processes(&["sleep", "972"]).is_empty())
            .then_some(())
    });
}

/// Kills the host processes with these command lines on drop (a failed test's leftovers).
struct Reap(&'static [&'static str]);

impl Drop for Reap {
    fn drop(&mut self) {
        for pid in processes(self.0) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

fn wait_for_commands(fake: &Fake) {
    poll("the slash commands", WAIT, || {
        let commands = fake.fake.commands();
        let global = commands["global"].as_array()?;
        global.iter().any(|c| c["name"] == "undo").then_some(())
    });
}

#[test]
fn a_background_command_does_not_outlive_an_abort_of_its_run() {
    let _reap = Reap(&["sleep", "973"]);
    let fake = Fake::start();
    let dir = TempDir::new("ws-abort");
    let out = dir.path();
    // The run hands its token out and waits; the test acts as the run with it.
    let agent = script(
        out,
        "agent.sh",
        &format!(
            "cat > /dev/null\nprintf %s \"$SWITCHBOARD_TOKEN\" > \"{d}/token\"\nsleep 30\necho NO_REPLY",
            d = out.display()
        ),
    );
    let extra = format!(
        "{}\n{}",
        workspace_section(out, ""),
        command_agent(&agent, out, 60, WORKSPACE_SCOPE)
    );
    let sb = start(&fake, out, &extra);
    wait_for_commands(&fake);
    fake.post(demo::OPS, demo::STANLEY, &format!("{BOT_MENTION} go"));
    let token = poll("the run's token", WAIT, || {
        std::fs::read_to_string(out.join("token"))
            .ok()
            .filter(|t| t.starts_with("sbcap_"))
    });
    let started = tools_in(
        &sb.url,
        &token,
        out,
        &[
            "shell.run",
            "sleep 973",
            "--background=true",
            "--output=json",
        ],
    );
    assert_eq!(started.code, Some(0), "{started:?}");
    poll("the background sleep", WAIT, || {
        (!processes(&["sleep", "973"]).is_empty()).then_some(())
    });
    let answer = slash(
        &fake,
        demo::OPS,
        demo::STANLEY,
        "abort",
        serde_json::json!([]),
    );
    assert!(answer.to_lowercase().contains("stopping"), "{answer}");
    poll("the background sleep to be killed", WAIT, || {
        processes(&["sleep", "973"]).is_empty().then_some(())
    });
}

#[test]
fn undo_in_discord_restores_a_file_the_run_changed() {
    let model = FakeModel::start(|requests| {
        let last = requests.last().expect("the current request");
        match results(last).len() {
            0 => tool_call(
                "e1",
                "fs__edit",
                r#"{"path":"plan.md","old":"ship on friday","new":"ship never"}"#,
            ),
            1 => tool_call(
                "e2",
                "fs__write",
                r#"{"path":"new.md","content":"made by the run\n"}"#,
            ),
            _ => text("Changed the plan."),
        }
    });
    let fake = Fake::start();
    let dir = TempDir::new("ws-undo");
    let extra = format!(
        "{}\n{}",
        workspace_section(dir.path(), ""),
        openai_agent(&model)
    );
    let sb = start(&fake, dir.path(), &extra);
    wait_for_commands(&fake);
    // The operator's own write: no run, no checkpoint.
    let (code, answer) = call(
        &sb,
        &["fs.write", "--path=plan.md", "--content=ship on friday\n"],
    );
    assert_eq!(code, Some(0), "{answer}");
    let trigger = fake.post(
        demo::OPS,
        demo::STANLEY,
        &format!("{BOT_MENTION} change the plan"),
    );
    let reply = reply_to(&fake, &sb, demo::OPS, &trigger);
    assert_eq!(reply["content"], "Changed the plan.");
    let plan = ops_dir(dir.path()).join("plan.md");
    assert_eq!(std::fs::read_to_string(&plan).unwrap(), "ship never\n");

    // Someone else may not undo it; the person who started the run may.
    let refused = slash(&fake, demo::OPS, demo::TOMAS, "undo", serde_json::json!([]));
    assert!(refused.contains("Nothing undone"), "{refused}");
    assert_eq!(std::fs::read_to_string(&plan).unwrap(), "ship never\n");
    let undone = poll("the run's after-snapshot", WAIT, || {
        let answer = slash(
            &fake,
            demo::OPS,
            demo::STANLEY,
            "undo",
            serde_json::json!([]),
        );
        answer.starts_with("Undid").then_some(answer)
    });
    assert!(
        undone.contains("plan.md") && undone.contains("new.md"),
        "{undone}"
    );
    assert_eq!(std::fs::read_to_string(&plan).unwrap(), "ship on friday\n");
    assert!(!ops_dir(dir.path()).join("new.md").exists());
}

#[test]
fn an_ask_card_shows_the_exact_command_and_cwd_and_its_approval_covers_only_that_command() {
    let fake = Fake::start();
    let dir = TempDir::new("ws-ask");
    let permissions = r#"
[permissions]
default = "allow"
approvers = ["@Stanley"]
ask_timeout_s = 10

[[permissions.rules]]
tool = "shell.run"
caller = "operator"
policy = "ask"

[[permissions.rules]]
tool = "shell.run"
caller = "operator"
command = "git status*"
policy = "allow"

[[permissions.rules]]
tool = "fs.write"
caller = "operator"
policy = "ask"
"#;
    let extra = format!("{}\n{permissions}", workspace_section(dir.path(), ""));
    let sb = start(&fake, dir.path(), &extra);
    let ops = ops_dir(dir.path());

    // `git status*` runs at once (not a repository: git says so, an ordinary answer).
    let (code, answer) = call(&sb, &["shell.run", "git status"]);
    assert_eq!(code, Some(0), "{answer}");
    // `git status; rm x` is not `git status*`: it asks, showing the exact command and cwd.
    std::fs::write(ops.join("x"), "keep me").expect("x");
    let asked = Background::start(
        &sb,
        &[
            "shell.run",
            "--session-id=#ops",
            "--output=json",
            "git status; rm x",
        ],
    );
    let id = asked.waiting_line().1;
    let shown = card(&fake, demo::OPS, &id);
    let shown_text = shown.to_string();
    assert!(shown_text.contains("git status; rm x"), "{shown_text}");
    assert!(
        shown_text.contains(&format!("cwd: {}", ops.canonicalize().unwrap().display())),
        "{shown_text}"
    );
    click(&fake, &shown, demo::STANLEY, false);
    let (code, _, _) = asked.finish();
    assert_eq!(code, Some(3), "denied");
    assert!(ops.join("x").exists(), "a denied command ran");

    // `echo $(rm x)` cannot be seen into: the strictest rule (ask), never the allow.
    let asked = Background::start(
        &sb,
        &[
            "shell.run",
            "--session-id=#ops",
            "--output=json",
            "echo $(rm x)",
        ],
    );
    let id = asked.waiting_line().1;
    let first = card(&fake, demo::OPS, &id);
    click(&fake, &first, demo::STANLEY, true);
    let (code, stdout, _) = asked.finish();
    assert_eq!(code, Some(0), "{stdout}");
    assert!(!ops.join("x").exists());

    // The approval covered that command once: the same or a changed command asks again.
    let again = Background::start(
        &sb,
        &[
            "shell.run",
            "--session-id=#ops",
            "--output=json",
            "echo $(rm y)",
        ],
    );
    let second = again.waiting_line().1;
    assert_ne!(second, id, "a new approval");
    click(
        &fake,
        &card(&fake, demo::OPS, &second),
        demo::STANLEY,
        false,
    );
    assert_eq!(again.finish().0, Some(3));
}

#[test]
fn commands_and_writes_are_events_on_the_feed() {
    let fake = Fake::start();
    let dir = TempDir::new("ws-events");
    let sb = start(&fake, dir.path(), &workspace_section(dir.path(), ""));
    let events = subscribe(&sb.url, &sb.token, "");
    std::thread::sleep(Duration::from_millis(300));
    let (code, answer) = call(&sb, &["shell.run", "printf hi"]);
    assert_eq!(code, Some(0), "{answer}");
    let started = next_event(&events, "shell.started", WAIT);
    assert_eq!(started["id"], answer["id"], "{started}");
    assert_eq!(started["session"], demo::OPS.to_string(), "{started}");
    assert!(
        started["argv"].to_string().contains("printf hi"),
        "{started}"
    );
    assert!(started["cwd"].is_string(), "{started}");
    let exited = next_event(&events, "shell.exited", WAIT);
    assert_eq!(exited["id"], answer["id"], "{exited}");
    assert_eq!(
        (exited["code"].as_i64(), exited["bytes"].as_u64()),
        (Some(0), Some(2)),
        "{exited}"
    );
    assert!(exited["ms"].is_u64(), "{exited}");
    let (code, answer) = call(&sb, &["fs.write", "--path=a.txt", "--content=x"]);
    assert_eq!(code, Some(0), "{answer}");
    let changed = next_event(&events, "fs.changed", WAIT);
    assert_eq!(
        (changed["path"].as_str(), changed["kind"].as_str()),
        (Some("a.txt"), Some("created")),
        "{changed}"
    );
    // The same events are in the audit rows of the calls that caused them (issue 24).
    let (code, page) = call(&sb, &["audit.list", "--tool=shell.run"]);
    assert_eq!(code, Some(0), "{page}");
    let row = &page["audit"][0];
    assert_eq!(row["events"][0]["type"], "shell.started", "{row}");
    assert_eq!(row["events"][0]["id"], started["id"], "{row}");
    assert_eq!(row["events"][0]["argv"], started["argv"], "{row}");
    assert_eq!(row["events"][0]["cwd"], started["cwd"], "{row}");
    assert_eq!(row["events"][1]["type"], "shell.exited", "{row}");
    assert_eq!(
        (
            row["events"][1]["code"].as_i64(),
            row["events"][1]["bytes"].as_u64()
        ),
        (Some(0), Some(2)),
        "{row}"
    );
    assert!(row["events"][1]["ms"].is_u64(), "{row}");
    let (_, page) = call(&sb, &["audit.list", "--tool=fs.write"]);
    let row = &page["audit"][0];
    assert_eq!(
        row["events"],
        serde_json::json!([{"type": "fs.changed", "path": "a.txt", "kind": "created"}]),
        "{row}"
    );
    // A call that caused nothing has no events.
    let (_, page) = call(&sb, &["audit.list", "--tool=audit.list"]);
    assert!(page["audit"][0].get("events").is_none(), "{page}");
}

#[test]
fn health_and_shell_say_unavailable_when_bwrap_is_missing_and_nothing_runs() {
    let fake = Fake::start();
    let dir = TempDir::new("ws-nobwrap");
    let sb = Switchboard::start_sections(
        &fake,
        dir.path(),
        &Allow::default(),
        Sections {
            extra: &workspace_section(dir.path(), ""),
            // A PATH without bwrap (the sandbox looks it up there).
            env: &[("PATH", "/nonexistent")],
            ..Sections::default()
        },
    );
    let (_, health) = support::http_get(&sb.url, "/health").expect("/health");
    assert!(
        health.contains("unavailable") && health.contains("bubblewrap"),
        "{health}"
    );
    let (code, answer) = call(&sb, &["shell.run", "touch ran"]);
    assert_eq!(code, Some(6), "{answer}");
    assert_eq!(error_code(&answer), "sandbox_unavailable", "{answer}");
    assert!(
        answer.to_string().contains("apt-get install bubblewrap"),
        "{answer}"
    );
    assert!(!ops_dir(dir.path()).join("ran").exists());
    let (code, answer) = call(&sb, &["git.status"]);
    assert_eq!(
        (code, error_code(&answer)),
        (Some(6), "sandbox_unavailable".to_owned())
    );
    // The files are the service's own: they still work.
    let (code, answer) = call(&sb, &["fs.write", "--path=a.txt", "--content=x"]);
    assert_eq!(code, Some(0), "{answer}");
}

#[test]
fn check_config_warns_when_the_sandbox_cannot_run() {
    let dir = TempDir::new("ws-check");
    let config = dir.path().join("switchboard.toml");
    std::fs::write(&config, workspace_section(dir.path(), "")).expect("config");
    let check = |path: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_switchboard"));
        command
            .args(["check-config", "--config"])
            .arg(&config)
            .env_remove("SWITCHBOARD_CONFIG")
            .current_dir(dir.path())
            .stdin(Stdio::null());
        if let Some(path) = path {
            command.env("PATH", path);
        }
        let out = command.output().expect("check-config");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (code, stdout) = check(None);
    assert_eq!(code, Some(0), "{stdout}");
    assert!(stdout.contains("sandbox: ready"), "{stdout}");
    let (code, stdout) = check(Some("/nonexistent"));
    assert_eq!(code, Some(0), "a warning, not an error: {stdout}");
    assert!(
        stdout.contains("warning: the workspace's sandbox is unavailable")
            && stdout.contains("bubblewrap"),
        "{stdout}"
    );
}

#[test]
fn a_command_longer_than_the_call_may_take_answers_its_own_timeout_with_its_output() {
    let _reap = Reap(&["sleep", "974"]);
    let fake = Fake::start();
    let dir = TempDir::new("ws-call-timeout");
    let sb = Switchboard::start_sections(
        &fake,
        dir.path(),
        &Allow::default(),
        Sections {
            toolserver: "call_timeout_s = 3",
            extra: &workspace_section(dir.path(), ""),
            ..Sections::default()
        },
    );
    let (code, answer) = call(&sb, &["shell.run", "echo started; sleep 974"]);
    assert_eq!(code, Some(7), "{answer}");
    let details = &answer["error"]["details"];
    assert_eq!(details["seconds"], 2, "the command's own timeout: {answer}");
    assert_eq!(details["output"]["stdout"], "started\n", "{answer}");
    poll("no sleep left behind", Duration::from_secs(5), || {
        processes(&["sleep", "974"]).is_empty().then_some(())
    });
}
