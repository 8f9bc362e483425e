//! Live config reload, end to end: the real binary against the fake, its config file edited
//! under it, SIGHUP, `switchboard reload` and `POST /v1/admin/reload`.

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fake_discord::demo;
use serde_json::Value;
use support::{Allow, Fake, Sections, Switchboard, TempDir, POLL};

/// How soon an edit must be in force.
const LIVE_WITHIN: Duration = Duration::from_secs(2);
/// How long to wait for a log line.
const LOGGED_WITHIN: Duration = Duration::from_secs(10);

const CI_TOKEN: &str = "ci-token-0123456789abcdef0123456789";
const ADMIN_TOKEN: &str = "admin-token-0123456789abcdef01234567";
/// `ci` may call every callable but the operator's; `admin` names `admin.*`.
const TOKENS: &str = r#"
[[toolserver.tokens]]
name = "ci"
token_env = "SWITCHBOARD_CI_TOKEN"
scope = ["surface.*", "workflow.*", "audit.*", "attachment.*"]

[[toolserver.tokens]]
name = "admin"
token_env = "SWITCHBOARD_ADMIN_TOKEN"
scope = ["admin.*"]
"#;

fn start(fake: &Fake, dir: &Path) -> Switchboard {
    start_with(fake, dir, "")
}

/// [`start`] with more tables in the config.
fn start_with(fake: &Fake, dir: &Path, extra: &str) -> Switchboard {
    Switchboard::start_sections(
        fake,
        dir,
        &Allow::default(),
        Sections {
            extra: &format!("{TOKENS}\n{extra}"),
            env: &[
                ("SWITCHBOARD_CI_TOKEN", CI_TOKEN),
                ("SWITCHBOARD_ADMIN_TOKEN", ADMIN_TOKEN),
            ],
            ..Sections::default()
        },
    )
}

/// Replaces the config the way editors do: a new file renamed over the old one.
fn replace_config(config: &Path, text: impl AsRef<[u8]>) {
    let temp = config.with_extension("toml.tmp");
    std::fs::write(&temp, text).expect("write the new config");
    std::fs::rename(&temp, config).expect("rename it over the config");
}

/// The config with one more session alias, `#war-room`, for `#ops`.
fn with_war_room(text: &str) -> String {
    let edited = text.replacen(
        "[entity.sessions]\n",
        &format!("[entity.sessions]\nwar-room = \"{}\"\n", demo::OPS),
        1,
    );
    assert_ne!(edited, text, "the config has an [entity.sessions] table");
    edited
}

fn war_room_resolves(sb: &Switchboard) -> bool {
    let out = sb.tools(&[
        "surface.messages.list",
        "--session-id=#war-room",
        "--limit=1",
    ]);
    match out.code {
        Some(0) => true,
        Some(4) => false,
        _ => panic!("unexpected answer: {out:?}"),
    }
}

/// Polls `probe` every [`POLL`] until it holds or `within` passes; how long it took.
fn within(within: Duration, mut probe: impl FnMut() -> bool) -> Option<Duration> {
    let started = Instant::now();
    loop {
        if probe() {
            return Some(started.elapsed());
        }
        if started.elapsed() > within {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

fn wait_logged(sb: &Switchboard, what: &str, count: usize) {
    let logged = within(LOGGED_WITHIN, || sb.stderr().matches(what).count() >= count);
    assert!(
        logged.is_some(),
        "'{what}' was not logged {count} time(s) within {LOGGED_WITHIN:?}:\n{}",
        sb.stderr()
    );
}

fn post_reload(sb: &Switchboard, token: Option<&str>) -> (u16, Value) {
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .new_agent();
    let mut request = agent.post(format!("{}/v1/admin/reload", sb.url));
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    // A program's POST: declared JSON (the body, empty here, is ignored).
    let mut answer = request
        .header("content-type", "application/json")
        .send_empty()
        .expect("POST /v1/admin/reload");
    let status = answer.status().as_u16();
    let body = answer.body_mut().read_to_string().expect("read the answer");
    (
        status,
        serde_json::from_str(&body).unwrap_or_else(|_| panic!("not JSON: {body}")),
    )
}

fn switchboard_cli(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_switchboard"));
    command
        .args(args)
        .env_remove("SWITCHBOARD_CONFIG")
        .env_remove("SWITCHBOARD_URL")
        .env_remove("SWITCHBOARD_TOKEN")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("run switchboard")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The problems `check-config` prints for `config`: every line after its headline.
fn check_config_problems(config: &Path) -> Vec<String> {
    let out = switchboard_cli(
        &["check-config", "--config", &config.display().to_string()],
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = text(&out.stderr);
    let lines: Vec<String> = stderr.lines().skip(1).map(str::to_owned).collect();
    assert!(
        !lines.is_empty(),
        "check-config printed no problem: {stderr}"
    );
    lines
}

#[test]
fn an_edit_takes_effect_live_and_a_broken_one_changes_nothing() {
    let fake = Fake::start();
    let dir = TempDir::new("reload-edit");
    let sb = start(&fake, dir.path());
    let original = std::fs::read_to_string(&sb.config).expect("read the config");
    assert!(!war_room_resolves(&sb));

    // An editor saves a new alias: it resolves within 2 s.
    replace_config(&sb.config, with_war_room(&original));
    let took = within(LIVE_WITHIN, || war_room_resolves(&sb));
    assert!(
        took.is_some(),
        "#war-room did not resolve within {LIVE_WITHIN:?} of the edit:\n{}",
        sb.stderr()
    );
    wait_logged(&sb, "aliases: 1 added", 1);

    // A broken edit (a wrong type, and the alias removed): refused, each problem logged as
    // check-config prints it, the alias still resolves.
    let broken = original.replacen("allow_dms = true", "allow_dms = \"yes\"", 1);
    assert_ne!(broken, original);
    replace_config(&sb.config, &broken);
    let problems = check_config_problems(&sb.config);
    for line in &problems {
        wait_logged(&sb, line.trim(), 1);
    }
    assert!(
        war_room_resolves(&sb),
        "a refused reload changed the aliases"
    );

    // Garbage of every kind: each refused, the service up and unchanged. Asked for directly,
    // so each answer is this file's.
    let huge = vec![b'#'; 5 * 1024 * 1024];
    let junk: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let deep = format!("{original}\nx = {}", "[".repeat(100_000));
    for (name, bytes) in [
        ("binary junk", junk),
        ("a 5 MiB file", huge),
        ("deep nesting", deep.into_bytes()),
        (
            "wrong types",
            original
                .replacen("[store]", "[store]\nmessages_per_channel = -3", 1)
                .into_bytes(),
        ),
    ] {
        replace_config(&sb.config, &bytes);
        let (status, body) = post_reload(&sb, Some(&sb.token));
        assert_eq!(status, 422, "{name}: {body}");
        assert_eq!(body["error"]["code"], "invalid_config", "{name}: {body}");
        assert!(
            body["error"]["details"]["problems"]
                .as_array()
                .is_some_and(|p| !p.is_empty()),
            "{name}: {body}"
        );
        assert!(war_room_resolves(&sb), "{name} changed the aliases");
    }
    // An empty file seen by the watcher is an editor's save half done, not a config that
    // allows nothing: it is skipped (an explicit reload would apply it).
    replace_config(&sb.config, "");
    wait_logged(&sb, "the config file is empty", 1);
    assert!(war_room_resolves(&sb), "an empty file changed the aliases");

    // A config that is not a file at all.
    std::fs::remove_file(&sb.config).expect("remove the config");
    std::fs::create_dir(&sb.config).expect("a directory in its place");
    let (status, body) = post_reload(&sb, Some(&sb.token));
    assert_eq!(status, 422, "{body}");
    std::fs::remove_dir(&sb.config).expect("remove the directory");

    // The file back: the alias goes with the next reload.
    replace_config(&sb.config, &original);
    let took = within(LIVE_WITHIN, || !war_room_resolves(&sb));
    assert!(
        took.is_some(),
        "the removed alias still resolves:\n{}",
        sb.stderr()
    );
    let (status, _) = support::http_get(&sb.url, "/health").expect("health");
    assert_eq!(status, 200);
}

#[test]
fn sighup_the_cli_and_the_route_reload_and_only_the_operator_may() {
    let fake = Fake::start();
    let dir = TempDir::new("reload-triggers");
    let sb = start(&fake, dir.path());
    let original = std::fs::read_to_string(&sb.config).expect("read the config");

    // SIGHUP: a reload that says so.
    let sent = Command::new("kill")
        .args(["-HUP", &sb.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success());
    wait_logged(&sb, "trigger=\"SIGHUP\"", 1);
    assert!(
        sb.stderr().contains("config reloaded from"),
        "{}",
        sb.stderr()
    );

    // A restart-only change and an alias: the alias is live, the bind is named and kept.
    let edited = with_war_room(&original).replacen(
        "[toolserver]\n",
        "[toolserver]\nmax_connections = 77\n",
        1,
    );
    replace_config(&sb.config, &edited);
    let env = [("SWITCHBOARD_TOKEN", sb.token.as_str())];
    let out = switchboard_cli(&["reload", "--url", &sb.url], &env);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("reloaded ")
            && stdout.contains("restart needed for: toolserver.max_connections"),
        "{stdout}"
    );
    assert!(war_room_resolves(&sb));
    wait_logged(&sb, "take effect only after a restart", 1);

    // The route answers what changed, as JSON.
    let (status, body) = post_reload(&sb, Some(&sb.token));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["ok"], true, "{body}");
    assert_eq!(
        body["value"]["restartNeeded"],
        serde_json::json!(["toolserver.max_connections"]),
        "{body}"
    );

    // `admin.reload` is an operator callable: a named token whose scope does not name it is
    // refused (403), no token is 401, and neither reloads anything; one whose scope names it
    // (`admin.*`) reloads.
    let (status, body) = post_reload(&sb, Some(CI_TOKEN));
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "out_of_scope", "{body}");
    let (status, body) = post_reload(&sb, Some(ADMIN_TOKEN));
    assert_eq!(status, 200, "{body}");
    let (status, body) = post_reload(&sb, None);
    assert_eq!(status, 401, "{body}");
    let out = switchboard_cli(
        &["reload", "--url", &sb.url],
        &[("SWITCHBOARD_TOKEN", CI_TOKEN)],
    );
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(text(&out.stderr).contains("out_of_scope"), "{out:?}");

    // A broken file: the CLI prints each problem as check-config does and exits 2.
    replace_config(
        &sb.config,
        original.replacen("[toolserver]\n", "[toolserver]\nbind = 42\n", 1),
    );
    let problems = check_config_problems(&sb.config);
    let out = switchboard_cli(&["reload", "--url", &sb.url], &env);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("invalid_config"), "{stderr}");
    for line in &problems {
        assert!(
            stderr.contains(line.as_str()),
            "missing '{line}' in:\n{stderr}"
        );
    }
    assert!(
        war_room_resolves(&sb),
        "a refused reload changed the aliases"
    );

    // Nothing listens: exit 6 (unavailable), as the tools CLI.
    let out = switchboard_cli(&["reload", "--url", "http://127.0.0.1:9"], &env);
    assert_eq!(out.status.code(), Some(6), "{out:?}");
}

#[test]
fn a_fifo_swapped_in_over_the_config_during_reloads_never_blocks_one() {
    let fake = Fake::start();
    let dir = TempDir::new("reload-fifo");
    // 300 reloads in a row: more than a caller's default budget for one callable.
    let sb = start_with(
        &fake,
        dir.path(),
        "[toolserver.rate_limits]\nper_caller_per_minute = 100000\nper_caller_burst = 1000\n",
    );
    let config = sb.config.clone();
    let regular = dir.path().join("regular.toml");
    std::fs::copy(&config, &regular).expect("copy the config");
    let fifo = dir.path().join("config.fifo");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo failed");
    // The config path flips between the regular file and the FIFO as fast as it can, so some
    // reload finds a regular file at the path and a FIFO when it opens it.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, config, regular, fifo) = (
            std::sync::Arc::clone(&stop),
            config.clone(),
            regular.clone(),
            fifo.clone(),
        );
        let scratch = dir.path().join("swap.tmp");
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let source = if swaps.is_multiple_of(2) {
                    &fifo
                } else {
                    &regular
                };
                let _ = std::fs::remove_file(&scratch);
                if std::fs::hard_link(source, &scratch).is_ok() {
                    let _ = std::fs::rename(&scratch, &config);
                }
                swaps += 1;
            }
            swaps
        })
    };
    let mut answers = std::collections::BTreeMap::<u16, usize>::new();
    let mut slowest = Duration::ZERO;
    for _ in 0..300 {
        let started = Instant::now();
        let (status, body) = post_reload(&sb, Some(&sb.token));
        let took = started.elapsed();
        slowest = slowest.max(took);
        // Generous: a reload blocked on the FIFO answers only after its 10 s read timeout.
        assert!(
            took < Duration::from_secs(5),
            "a reload took {took:?} ({status} {body}): it blocked on the FIFO"
        );
        *answers.entry(status).or_default() += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().expect("the swapper");
    assert!(swaps > 300, "the path flipped only {swaps} times");
    // Back to a regular file: reloads work as before.
    replace_config(&config, std::fs::read(&regular).expect("read the copy"));
    let (status, body) = post_reload(&sb, Some(&sb.token));
    assert_eq!(status, 200, "{body} after {answers:?}, slowest {slowest:?}");
}
