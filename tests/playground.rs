//! `switchboard playground` end to end, as a newcomer meets it: the real binary with its own
//! fake Discord, talked to the way its banner says (posting as a demo user through the fake's
//! control API), the built-in demo agent answering every phrase it knows — with its tool calls
//! through the pipeline (an approval card for a post elsewhere, rows in the audit log) — and
//! the flags `--data`, `--config`.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fake_discord::demo;
use serde_json::{json, Value};
use support::console::ConsoleLogin;
use support::{http_get, poll, tools_at, wait_bounded, TempDir, POLL};

const WAIT: Duration = Duration::from_secs(20);

/// A running `switchboard playground`, killed on drop.
struct Playground {
    child: Child,
    fake: String,
    url: String,
    token: String,
    /// The banner's lines, as printed.
    banner: Vec<String>,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Playground {
    /// Starts the playground in `cwd` (so no `.env` of the repository is read) with `args`
    /// after `playground --port 0`; waits for the banner and the gateway.
    fn start(cwd: &Path, args: &[&str]) -> Playground {
        support::tools_bin();
        let mut child = Command::new(env!("CARGO_BIN_EXE_switchboard"))
            .args(["playground", "--port", "0"])
            .args(args)
            .current_dir(cwd)
            .env_remove("SWITCHBOARD_CONFIG")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_MODEL")
            .env_remove("OPENAI_API_KEY")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the playground");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&stderr);
        let pipe = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                kept.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(line);
            }
        });
        let (tx, banner) = mpsc::channel();
        let out = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut lines = Vec::new();
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match banner.recv_timeout(left) {
                Ok(line) if line.contains("Ctrl-C stops everything") => break,
                Ok(line) => lines.push(line),
                Err(_) => {
                    let logged = stderr.lock().map(|l| l.join("\n")).unwrap_or_default();
                    panic!("no banner in {WAIT:?}:\n{}\n{logged}", lines.join("\n"));
                }
            }
        }
        let field = |prefix: &str| -> String {
            lines
                .iter()
                .find_map(|l| l.trim().strip_prefix(prefix))
                .map(|rest| {
                    rest.split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_owned()
                })
                .unwrap_or_else(|| panic!("no '{prefix}' in the banner:\n{}", lines.join("\n")))
        };
        let playground = Playground {
            fake: field("fake Discord"),
            url: field("tool server"),
            token: field("export SWITCHBOARD_TOKEN="),
            banner: lines,
            child,
            stderr,
        };
        playground.wait_ready();
        playground
    }

    fn wait_ready(&self) {
        poll("the playground's gateway", WAIT, || {
            let (_, body) = http_get(&self.url, "/health").ok()?;
            let health: Value = serde_json::from_str(&body).ok()?;
            (health["discord"] == "ready").then_some(())
        });
    }

    fn logged(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .join("\n")
    }

    /// Posts as a demo user through the fake's control API, as the banner's curl does.
    fn post(&self, channel: u64, author: u64, content: &str) -> String {
        let body = json!({
            "channel_id": channel.to_string(),
            "author_id": author.to_string(),
            "content": content,
        });
        let text = ureq::post(format!("{}/_fake/messages", self.fake))
            .content_type("application/json")
            .send(body.to_string().as_bytes())
            .expect("the fake takes the message")
            .body_mut()
            .read_to_string()
            .expect("body");
        let posted: Value = serde_json::from_str(&text).expect("json");
        posted["id"].as_str().expect("id").to_owned()
    }

    fn messages(&self, channel: u64) -> Vec<Value> {
        let (status, body) = http_get(&self.fake, &format!("/_fake/channels/{channel}/messages"))
            .expect("the fake answers");
        assert_eq!(status, 200, "{body}");
        let messages: Value = serde_json::from_str(&body).expect("json");
        messages.as_array().cloned().unwrap_or_default()
    }

    /// The bot's reply to `trigger` in `channel`.
    fn reply_to(&self, channel: u64, trigger: &str) -> String {
        let found = poll_or_log(self, "the demo agent's reply", || {
            self.messages(channel).into_iter().find(|m| {
                m["author"]["id"] == demo::BOT.to_string().as_str()
                    && m["message_reference"]["message_id"] == trigger
            })
        });
        found["content"].as_str().expect("content").to_owned()
    }

    /// Mentions the bot in `channel` as `author`; its reply.
    fn ask(&self, channel: u64, author: u64, text: &str) -> String {
        let trigger = self.post(channel, author, &format!("<@{}> {text}", demo::BOT));
        self.reply_to(channel, &trigger)
    }

    fn tools(&self, args: &[&str]) -> support::ToolsOutput {
        tools_at(&self.url, &self.token, args)
    }

    /// SIGTERM, then the exit status.
    fn stop(mut self) -> Option<i32> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        wait_bounded(&mut self.child, WAIT).and_then(|s| s.code())
    }
}

impl Drop for Playground {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = wait_bounded(&mut self.child, Duration::from_secs(5));
    }
}

fn poll_or_log<T>(playground: &Playground, what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(found) = probe() {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: nothing after {WAIT:?}\n{}",
            playground.logged()
        );
        std::thread::sleep(POLL);
    }
}

fn has_tool(playground: &Playground, id: &str) -> bool {
    let out = playground.tools(&["--list", "--output=json"]);
    assert_eq!(out.code, Some(0), "{out:?}");
    out.stdout.contains(&format!("\"{id}\""))
}

#[test]
fn the_demo_agent_answers_each_phrase_it_knows_and_explains_the_rest() {
    let dir = TempDir::new("playground-phrases");
    let pg = Playground::start(dir.path(), &[]);
    assert!(
        pg.banner
            .iter()
            .any(|l| l.contains("surface.messages.list --session-id=#ops")),
        "the banner says how to see the reply: {:#?}",
        pg.banner
    );

    // The banner's own example.
    pg.post(
        demo::OPS,
        demo::TOMAS,
        &format!("deploy went fine, thanks <@{}>", demo::STANLEY),
    );
    let summary = pg.ask(demo::OPS, demo::STANLEY, "summarize");
    // `#ops` went out as a channel link.
    assert!(
        summary.starts_with(&format!("<#{}>:", demo::OPS)),
        "{summary}"
    );
    assert!(summary.contains("Tomas 1"), "counts by author: {summary}");
    assert!(
        summary.contains("Tomas: deploy went fine, thanks @Stanley"),
        "the last lines with mentions rendered: {summary}"
    );
    assert!(
        !summary.contains(&format!("<@{}>", demo::STANLEY)),
        "quoted lines ping nobody: {summary}"
    );

    let help = pg.ask(demo::OPS, demo::STANLEY, "help");
    for phrase in [
        "summarize",
        "ask @user",
        "post to #channel",
        "search",
        "thread",
    ] {
        assert!(help.contains(phrase), "help lists {phrase}: {help}");
    }
    assert!(
        help.contains("Mention me with one of them"),
        "in a channel that needs a mention, help says so: {help}"
    );

    // Garbage gets a short friendly explanation, never silence.
    let unknown = pg.ask(demo::OPS, demo::STANLEY, "what's the weather on Mars?");
    assert!(unknown.starts_with("I didn't catch that."), "{unknown}");
    assert!(unknown.contains("summarize"), "{unknown}");
    for garbage in [
        "ask",
        "post to",
        "post to #ops",
        "\u{202e}\u{0007}```@everyone",
        "thread",
    ] {
        let answer = pg.ask(demo::OPS, demo::STANLEY, garbage);
        assert!(!answer.is_empty(), "{garbage:?} gets an answer");
        assert!(!answer.contains("@everyone"), "{garbage:?}: {answer}");
    }

    // search and thread work once their callables exist; until then they say so.
    for (phrase, tool) in [
        ("search deploy", "surface.messages.search"),
        ("thread incident-7", "surface.threads.create"),
    ] {
        let answer = pg.ask(demo::OPS, demo::STANLEY, phrase);
        if has_tool(&pg, tool) {
            assert!(!answer.contains("isn't available"), "{phrase}: {answer}");
        } else {
            assert!(
                answer.contains("isn't available in this build"),
                "{phrase}: {answer}"
            );
        }
    }

    // ask: a workflow waits for Tomas; his answer resumes it and the agent reports back.
    let question = pg.post(
        demo::OPS,
        demo::STANLEY,
        &format!(
            "<@{}> ask <@{}> is the build signed?",
            demo::BOT,
            demo::TOMAS
        ),
    );
    let asked = pg.reply_to(demo::OPS, &question);
    assert!(
        asked.contains(&format!("<@{}>", demo::TOMAS)) && asked.contains("Stanley asks"),
        "{asked}"
    );
    pg.post(demo::OPS, demo::TOMAS, "yes, signed by release-bot");
    let reported = poll_or_log(&pg, "the report after the answer", || {
        pg.messages(demo::OPS).into_iter().find(|m| {
            m["author"]["id"] == demo::BOT.to_string().as_str()
                && m["content"]
                    .as_str()
                    .is_some_and(|c| c.contains("Tomas answered: yes, signed by release-bot"))
        })
    });
    assert_eq!(
        reported["message_reference"]["message_id"], question,
        "the report replies to the question's trigger"
    );

    // Every tool call took the pipeline with the run's capability: the audit log has them.
    let audit = pg.tools(&["audit.list", "--limit=200", "--output=json"]);
    assert_eq!(audit.code, Some(0), "{audit:?}");
    let rows = audit.json()["audit"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for tool in ["surface.messages.list", "workflow.create", "workflow.get"] {
        assert!(
            rows.iter().any(|r| r["tool"] == tool
                && r["caller"].as_str().is_some_and(|c| c.starts_with("cap:"))),
            "{tool} audited as a run's call: {rows:?}"
        );
    }
}

#[test]
fn post_to_another_channel_asks_an_approver_with_buttons_first() {
    let dir = TempDir::new("playground-approval");
    let pg = Playground::start(dir.path(), &[]);
    let trigger = pg.post(
        demo::OPS,
        demo::STANLEY,
        &format!("<@{}> post to #release-room ship it", demo::BOT),
    );
    let card = poll_or_log(&pg, "the approval card in #ops", || {
        pg.messages(demo::OPS).into_iter().find(|m| {
            m["components"][0]["components"][0]["custom_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("sb:approve:"))
        })
    });
    let content = card["content"].as_str().unwrap_or_default();
    assert!(content.contains("surface.messages.send"), "{content}");
    let released = |pg: &Playground| {
        pg.messages(demo::RELEASE_ROOM)
            .iter()
            .any(|m| m["content"] == "ship it")
    };
    assert!(!released(&pg), "nothing is posted before the approval");
    let click = |user: u64| -> Value {
        let click = json!({
            "message_id": card["id"],
            "user_id": user.to_string(),
            "custom_id": card["components"][0]["components"][0]["custom_id"],
        });
        let answer = ureq::post(format!("{}/_fake/components", pg.fake))
            .content_type("application/json")
            .send(click.to_string().as_bytes())
            .expect("the fake takes the click")
            .body_mut()
            .read_to_string()
            .expect("the click's answer");
        let interaction: Value = serde_json::from_str(&answer).expect("json");
        let id = interaction["id"]
            .as_str()
            .expect("an interaction id")
            .to_owned();
        poll_or_log(&pg, "the bot answers the click", || {
            let (_, body) = http_get(&pg.fake, &format!("/_fake/interactions/{id}")).ok()?;
            let shown: Value = serde_json::from_str(&body).ok()?;
            (!shown["response"].is_null()).then_some(shown)
        })
    };
    // Stanley's message started the run: his click is refused, privately, and changes nothing.
    let own = click(demo::STANLEY);
    assert_eq!(own["response"]["data"]["flags"], 64, "{own}");
    assert!(
        own["response"]["data"]["content"]
            .as_str()
            .is_some_and(|c| c.contains("your own request")),
        "{own}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(!released(&pg), "a self-approval posts nothing");
    // Tomas, the other approver, decides it — as the banner says.
    let approved = click(demo::TOMAS);
    assert_eq!(approved["response"]["type"], 7, "{approved}");
    let reply = pg.reply_to(demo::OPS, &trigger);
    assert_eq!(reply, format!("Posted in <#{}>.", demo::RELEASE_ROOM));
    assert!(released(&pg));
}

#[test]
fn run_a_command_asks_with_the_exact_command_then_answers_with_its_output() {
    let dir = TempDir::new("playground-run");
    let pg = Playground::start(dir.path(), &[]);
    let trigger = pg.post(
        demo::OPS,
        demo::STANLEY,
        &format!(
            "<@{}> run echo hello-from-the-sandbox | tr a-z A-Z",
            demo::BOT
        ),
    );
    let card = poll_or_log(&pg, "the approval card in #ops", || {
        pg.messages(demo::OPS).into_iter().find(|m| {
            m["components"][0]["components"][0]["custom_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("sb:approve:"))
        })
    });
    let content = card["content"].as_str().unwrap_or_default();
    assert!(
        content.contains("shell.run")
            && content.contains("echo hello-from-the-sandbox | tr a-z A-Z")
            && content.contains("cwd: "),
        "the card shows the exact command and where it runs: {content}"
    );
    // Tomas approves the run Stanley started.
    let click = json!({
        "message_id": card["id"],
        "user_id": demo::TOMAS.to_string(),
        "custom_id": card["components"][0]["components"][0]["custom_id"],
    });
    ureq::post(format!("{}/_fake/components", pg.fake))
        .content_type("application/json")
        .send(click.to_string().as_bytes())
        .expect("the fake takes the click");
    let reply = pg.reply_to(demo::OPS, &trigger);
    assert!(
        reply.contains("exited 0") && reply.contains("HELLO-FROM-THE-SANDBOX"),
        "{reply}"
    );
}

#[test]
fn the_banners_approval_line_works_as_printed() {
    let dir = TempDir::new("playground-banner-approval");
    let pg = Playground::start(dir.path(), &[]);
    let said = pg
        .banner
        .join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        !said.contains("_fake/components"),
        "no click line that cannot work as printed: {said}"
    );
    // "... approve or deny it in the console, http://ADDR/ (Approvals), logged in with the
    // SWITCHBOARD_TOKEN above."
    let console = said
        .split("approve or deny it in the console, ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(|url| url.trim_end_matches(','))
        .unwrap_or_else(|| panic!("the banner says where to approve: {said}"))
        .to_owned();
    assert_eq!(console, format!("{}/", pg.url));
    assert!(
        said.contains("(Approvals), logged in with the SWITCHBOARD_TOKEN above"),
        "{said}"
    );

    let trigger = pg.post(
        demo::OPS,
        demo::STANLEY,
        &format!("<@{}> post to #release-room ship it", demo::BOT),
    );
    let login = ConsoleLogin::new(&console, &pg.token);
    let pending = poll_or_log(&pg, "the ask in the console", || {
        login.pending().into_iter().next()
    });
    login.approve(pending["id"].as_str().expect("an approval id"));
    let reply = pg.reply_to(demo::OPS, &trigger);
    assert_eq!(reply, format!("Posted in <#{}>.", demo::RELEASE_ROOM));
    assert!(pg
        .messages(demo::RELEASE_ROOM)
        .iter()
        .any(|m| m["content"] == "ship it"));
}

#[test]
fn the_banner_names_the_allowed_demo_channels_and_warns_when_there_are_none() {
    let dir = TempDir::new("playground-allowed");
    let pg = Playground::start(dir.path(), &[]);
    let allowed = pg
        .banner
        .iter()
        .find_map(|l| l.trim().strip_prefix("allowed"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("an allowed line: {:#?}", pg.banner));
    assert_eq!(
        allowed,
        format!(
            "#ops, #release-room, #incident-42, the DM with stanley (#channel_{})",
            demo::STANLEY_DM
        )
    );
    drop(pg);

    // The README's real-Discord example allows only its own ids: none of the demo's.
    let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/real-discord.toml");
    let pg = Playground::start(dir.path(), &["--config", real.to_str().expect("utf-8")]);
    let said = pg.banner.join("\n");
    assert!(
        said.contains("allowed       none of the demo guild's channels"),
        "{said}"
    );
    assert!(said.contains("WARNING: this config allows none"), "{said}");
    assert!(
        said.contains(&format!("allowed_channel_ids = [\"{}\"]", demo::OPS)),
        "the warning says how to allow one: {said}"
    );
    for advertised in [
        "--session-id=#ops",
        "summarize",
        "post to",
        "_fake/messages",
    ] {
        assert!(
            !said.contains(advertised),
            "{advertised} is advertised: {said}"
        );
    }
    poll_or_log(&pg, "the warning in the log", || {
        pg.logged()
            .lines()
            .any(|l| l.contains("WARN") && l.contains("allows none of the demo guild"))
            .then_some(())
    });
}

#[test]
fn data_keeps_the_store_and_the_default_temp_dir_goes_away() {
    let dir = TempDir::new("playground-data");
    let data = dir.path().join("data");
    let pg = Playground::start(dir.path(), &["--data", data.to_str().expect("utf-8")]);
    let reply = pg.ask(demo::OPS, demo::STANLEY, "help");
    assert!(reply.contains("summarize"));
    assert_eq!(pg.stop(), Some(0));
    assert!(
        data.join("switchboard.db").is_file(),
        "--data keeps the store"
    );

    let pg = Playground::start(dir.path(), &[]);
    let temporary = std::env::temp_dir().join(format!("switchboard-playground-{}", pg.child.id()));
    assert!(temporary.is_dir(), "{}", temporary.display());
    assert_eq!(pg.stop(), Some(0));
    assert!(
        !temporary.exists(),
        "the temporary store is removed at exit"
    );
}

#[test]
fn config_is_honoured_against_the_demo_world() {
    let dir = TempDir::new("playground-config");
    let file = dir.path().join("mine.toml");
    std::fs::write(
        &file,
        format!(
            "[discord]\nallowed_channel_ids = [\"{ops}\"]\n\n[agent]\nrunner = \"demo\"\nactive_channel_ids = [\"{ops}\"]\n",
            ops = demo::OPS
        ),
    )
    .expect("write the config");
    let pg = Playground::start(dir.path(), &["--config", file.to_str().expect("utf-8")]);
    // An active channel: no mention needed, which only this file says.
    let trigger = pg.post(demo::OPS, demo::STANLEY, "help");
    let reply = pg.reply_to(demo::OPS, &trigger);
    assert!(reply.contains("summarize"), "{reply}");
    assert!(
        reply.contains("no need to mention me") && !reply.contains("Mention me"),
        "help does not ask for a mention where none is needed: {reply}"
    );
}

#[test]
fn extra_config_is_laid_over_the_playgrounds_own_config() {
    let dir = TempDir::new("playground-extra");
    let file = dir.path().join("extra.toml");
    std::fs::write(
        &file,
        format!(
            "[agent]\nactive_channel_ids = [\"{ops}\"]\n\n[entity.users]\nmira = \"{tomas}\"\n",
            ops = demo::OPS,
            tomas = demo::TOMAS
        ),
    )
    .expect("write the extra config");
    let pg = Playground::start(
        dir.path(),
        &["--extra-config", file.to_str().expect("utf-8")],
    );
    // The file's key: #ops is an active channel, no mention needed.
    let trigger = pg.post(demo::OPS, demo::STANLEY, "help");
    let reply = pg.reply_to(demo::OPS, &trigger);
    assert!(reply.contains("no need to mention me"), "{reply}");
    // The playground's own config stays beneath it: its session aliases and allowlist, with
    // the file's user alias beside its own.
    let sent = pg.tools(&[
        "surface.messages.send",
        "--session-id=#release-room",
        "hi @mira and @Stanley",
    ]);
    assert_eq!(sent.code, Some(0), "{sent:?}");
    let posted = pg.messages(demo::RELEASE_ROOM);
    assert!(
        posted
            .iter()
            .any(|m| m["content"]
                == format!("hi <@{}> and <@{}>", demo::TOMAS, demo::STANLEY).as_str()),
        "{posted:?}"
    );
}

/// Runs `switchboard playground --port 0 ARGS` in `dir`, which must exit 2 by itself; its
/// stderr.
fn refused<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(dir: &Path, args: &[S]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["playground", "--port", "0"])
        .args(args)
        .current_dir(dir)
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_MODEL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let status = wait_bounded(&mut child, WAIT).expect("exits by itself");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("stderr");
    assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
    stderr
}

#[test]
fn a_broken_extra_config_or_one_beside_config_is_refused_with_exit_2() {
    let dir = TempDir::new("playground-extra-refused");
    let typo = dir.path().join("typo.toml");
    std::fs::write(&typo, "[agent]\nrunnr = \"demo\"\n").expect("write");
    let not_toml = dir.path().join("not-toml.toml");
    std::fs::write(&not_toml, "[agent\n").expect("write");
    let whole = dir.path().join("whole.toml");
    std::fs::write(&whole, "").expect("write");
    let path = |p: &Path| p.to_str().expect("utf-8").to_owned();
    for (args, says) in [
        (
            vec!["--extra-config".to_owned(), path(&typo)],
            "agent.runnr",
        ),
        (
            vec!["--extra-config".to_owned(), path(&not_toml)],
            "not TOML",
        ),
        (
            vec![
                "--extra-config".to_owned(),
                path(&typo),
                "--config".to_owned(),
                path(&whole),
            ],
            "give one",
        ),
    ] {
        let stderr = refused(dir.path(), &args);
        assert!(stderr.contains(says), "{args:?} says {says}: {stderr}");
    }
}

#[test]
fn a_broken_config_or_a_model_without_its_url_is_refused_with_exit_2() {
    let dir = TempDir::new("playground-refused");
    let file = dir.path().join("broken.toml");
    std::fs::write(&file, "[agent]\nrunner = \"telepathy\"\n").expect("write");
    for args in [
        vec!["--config", file.to_str().expect("utf-8")],
        vec!["--model", "llama3"],
    ] {
        let stderr = refused(dir.path(), &args);
        assert!(
            stderr.contains("telepathy") || stderr.contains("--agent-url"),
            "{args:?} says what is wrong: {stderr}"
        );
    }
}

#[test]
fn workflow_tools_are_absent_when_no_agent_can_resume_them() {
    let fake = support::Fake::start();
    let dir = TempDir::new("no-agent-workflows");
    let sb = support::Switchboard::start(&fake, dir.path(), &support::Allow::default());
    let listed = sb.tools(&["--list", "--output=json"]);
    assert_eq!(listed.code, Some(0), "{listed:?}");
    assert!(!listed.stdout.contains("workflow."), "{}", listed.stdout);
    let called = sb.tools(&["workflow.list"]);
    assert_eq!(called.code, Some(3), "denied, not retryable: {called:?}");
    assert!(
        called.stderr.contains("workflows_unavailable"),
        "{called:?}"
    );
}
