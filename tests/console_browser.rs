//! The operator console in a real browser: Debian's `chromium`, driven through `chromedriver`
//! (WebDriver), against `switchboard playground` with a command agent and an approval rule.
//! The test FAILS when the browser or its driver is missing (`./test.sh` installs both).
//! A failing step saves a screenshot as `target/console-failure.png`; the main view is saved
//! as `target/console-main.png`, and with `UPDATE_README_SCREENSHOT=1` also copied over the
//! README's `docs/console.png`.

mod support;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use support::TempDir;

/// How long any one thing the test waits for may take.
const WAIT: Duration = Duration::from_secs(20);

/// Kills a child process this test started when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn target_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    let _ = std::fs::create_dir_all(&dir);
    dir
}

fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([
            PathBuf::from("/usr/bin"),
            PathBuf::from("/usr/lib/chromium"),
        ])
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free loopback port")
}

/// The playground, started with `extra` appended to its config; its console URL, operator
/// token and fake Discord URL, read from its banner.
struct Playground {
    _child: Killed,
    url: String,
    token: String,
    fake: String,
}

fn start_playground(extra: &Path) -> Playground {
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(["playground", "--port", "0", "--config"])
        .arg(extra)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start switchboard playground");
    let stdout = child.stdout.take().expect("stdout");
    let child = Killed(child);
    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + WAIT;
    let (mut url, mut token, mut fake) = (None, None, None);
    while url.is_none() || token.is_none() || fake.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line: String = lines
            .recv_timeout(left)
            .expect("the playground prints its banner in time");
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["console", address, ..] => url = Some(address.trim_end_matches('/').to_owned()),
            ["fake", "Discord", address, ..] => fake = Some((*address).to_owned()),
            ["export", assignment] if assignment.starts_with("SWITCHBOARD_TOKEN=") => {
                token = Some(assignment["SWITCHBOARD_TOKEN=".len()..].to_owned());
            }
            _ => {}
        }
    }
    // Keep draining the banner so the child never blocks on a full pipe.
    std::thread::spawn(move || while lines.recv().is_ok() {});
    Playground {
        _child: child,
        url: url.unwrap_or_default(),
        token: token.unwrap_or_default(),
        fake: fake.unwrap_or_default(),
    }
}

fn start_chromedriver(driver: &Path, port: u16) -> Killed {
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let child = Killed(child);
    let deadline = Instant::now() + WAIT;
    loop {
        let ready = ureq::get(&format!("http://127.0.0.1:{port}/status"))
            .call()
            .is_ok();
        if ready {
            return child;
        }
        assert!(
            Instant::now() < deadline,
            "chromedriver did not answer on port {port}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A step's failure: what went wrong.
type Step<T> = Result<T, String>;

fn fail<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |error| format!("{what}: {error}")
}

async fn text_of(client: &Client, css: &str) -> Step<String> {
    client
        .find(Locator::Css(css))
        .await
        .map_err(fail(css))?
        .text()
        .await
        .map_err(fail(css))
}

/// Waits (bounded) until the element `css` shows text containing `wanted`.
async fn wait_text(client: &Client, css: &str, wanted: &str) -> Step<()> {
    let deadline = Instant::now() + WAIT;
    let mut last = String::new();
    while Instant::now() < deadline {
        if let Ok(text) = text_of(client, css).await {
            if text.contains(wanted) {
                return Ok(());
            }
            last = text;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    Err(format!(
        "{css} never showed {wanted:?}; last text: {last:?}"
    ))
}

/// Clicks `css` once it exists (again if a refresh replaced it under the click).
async fn click(client: &Client, css: &str) -> Step<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        let element = client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css(css))
            .await
            .map_err(fail(css))?;
        match element.click().await {
            Ok(()) => return Ok(()),
            Err(error) if Instant::now() > deadline => return Err(format!("{css}: {error}")),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn type_into(client: &Client, css: &str, text: &str) -> Step<()> {
    let element = client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css(css))
        .await
        .map_err(fail(css))?;
    element.clear().await.map_err(fail(css))?;
    element.send_keys(text).await.map_err(fail(css))
}

async fn screenshot(client: &Client, name: &str) {
    if let Ok(png) = client.screenshot().await {
        let _ = std::fs::write(target_dir().join(name), png);
    }
}

async fn script(client: &Client, source: &str) -> Step<Value> {
    client
        .execute(source, Vec::new())
        .await
        .map_err(fail("script"))
}

/// Waits (bounded) until `source` (a script body) returns true.
async fn wait_script(client: &Client, source: &str, within: Duration) -> Step<()> {
    let deadline = Instant::now() + within;
    loop {
        if script(client, source).await? == json!(true) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("never true: {source}"));
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

async fn journey(client: &Client, playground: &Playground) -> Step<()> {
    let url = &playground.url;
    client
        .goto(&format!("{url}/"))
        .await
        .map_err(fail("open the console"))?;

    // A wrong token is refused, and the page says so.
    type_into(client, "#token", "not-the-token").await?;
    click(client, "#login-button").await?;
    wait_text(client, "#login-error", "not valid").await?;

    // The right one logs in: the demo channels are listed.
    type_into(client, "#token", &playground.token).await?;
    click(client, "#login-button").await?;
    wait_text(client, "#session-list", "#ops").await?;
    wait_text(client, "#session-list", "#release-room").await?;
    let stored = script(
        client,
        "return document.cookie + '|' + JSON.stringify(localStorage) + '|' + location.href",
    )
    .await?;
    let stored = stored.as_str().unwrap_or_default().to_owned();
    if stored.contains(&playground.token) {
        return Err(format!("the token is visible to the page: {stored}"));
    }

    // The page follows the console's event stream: it says so, and does not poll.
    client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#live-mode[data-mode='live']"))
        .await
        .map_err(fail("the live indicator"))?;

    // Post as a demo user in #ops; the message and the agent's reply appear without a reload,
    // brought by the stream.
    click(client, "[data-session='1000000000000000401']").await?;
    wait_text(client, "#session-title", "#ops").await?;
    script(client, "window.__notReloaded = true; return null").await?;
    let created_before = script(client, "return live.kinds['message.created'] || 0")
        .await?
        .as_u64()
        .unwrap_or(0);
    type_into(
        client,
        "#compose-text",
        "hello from the console, @switchboard",
    )
    .await?;
    click(client, "#compose button[type=submit]").await?;
    wait_text(client, "#messages", "hello from the console").await?;
    wait_text(client, "#messages", "pong from the test agent").await?;
    let same_page = script(client, "return window.__notReloaded === true").await?;
    if same_page != json!(true) {
        return Err("the page reloaded to show the message".into());
    }
    let live = script(
        client,
        "const n = document.getElementById('live-mode'); return { mode: n.dataset.mode, polls: live.polls, created: live.kinds['message.created'] || 0, events: live.events }",
    )
    .await?;
    if live["mode"] != "live" || live["polls"] != json!(0) {
        return Err(format!(
            "the page polled instead of following the stream: {live}"
        ));
    }
    // The demo user's message and the agent's reply, each announced by the stream.
    if live["created"].as_u64().unwrap_or(0) < created_before + 2 {
        return Err(format!(
            "the stream did not bring both messages (message.created before: {created_before}): {live}"
        ));
    }
    screenshot(client, "console-main.png").await;
    if std::env::var_os("UPDATE_README_SCREENSHOT").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/console.png");
        std::fs::copy(target_dir().join("console-main.png"), &docs)
            .map_err(fail("copy the screenshot to docs/console.png"))?;
    }

    // A call that needs approval waits; the console approves it; the message is posted in the
    // fake Discord and the audit log has a row for it, decided by the console.
    let call_url = format!("{url}/v1/call");
    let token = playground.token.clone();
    let waiting = std::thread::spawn(move || -> Result<Value, String> {
        let mut response = ureq::post(&call_url)
            .header("authorization", &format!("Bearer {token}"))
            .config()
            .http_status_as_error(false)
            .build()
            .header("content-type", "application/json")
            .send(
                json!({
                    "tool": "surface.messages.send",
                    "input": {"sessionId": "#release-room", "text": "approved in the console"}
                })
                .to_string(),
            )
            .map_err(|e| e.to_string())?;
        let text = response
            .body_mut()
            .read_to_string()
            .map_err(|e| e.to_string())?;
        serde_json::from_str(&text).map_err(|e| e.to_string())
    });
    click(client, "#tab-approvals").await?;
    wait_text(client, "#approvals", "surface.messages.send").await?;
    wait_text(client, "#approvals", "approved in the console").await?;
    screenshot(client, "console-approvals.png").await;
    click(client, "#approvals button.approve").await?;
    let answer = waiting
        .join()
        .map_err(|_| "the waiting call panicked".to_owned())??;
    if answer["ok"] != json!(true) {
        return Err(format!("the approved call did not succeed: {answer}"));
    }
    let requests = ureq::get(&format!("{}/_fake/requests", playground.fake))
        .call()
        .map_err(fail("read the fake's requests"))?
        .body_mut()
        .read_to_string()
        .map_err(fail("read the fake's requests"))?;
    let requests: Value = serde_json::from_str(&requests).map_err(fail("the fake's requests"))?;
    let posted = requests.as_array().into_iter().flatten().any(|request| {
        request["method"] == "POST"
            && request["path"] == "/api/v10/channels/1000000000000000402/messages"
            && request["body"]
                .to_string()
                .contains("approved in the console")
    });
    if !posted {
        return Err("the approved message never reached the fake Discord".into());
    }
    click(client, "#tab-audit").await?;
    wait_text(client, "#audit-rows", "surface.messages.send").await?;
    wait_text(client, "#audit-rows", "console").await?;
    // A row opens to its input.
    click(client, "#audit-rows tr.row button").await?;
    wait_text(client, "#audit-rows", "\"input\"").await?;
    screenshot(client, "console-audit.png").await;

    // Change #ops's scope: exactly one callable.
    click(client, "#tab-scopes").await?;
    wait_text(client, "#scope-effective", "surface.messages.send").await?;
    script(
        client,
        "const s = document.getElementById('scope-session'); s.value = '1000000000000000401'; s.dispatchEvent(new Event('change')); document.querySelector('#scope-form [name=action]').value = 'set'; return null",
    )
    .await?;
    type_into(client, "#scope-form [name=tools]", "surface.messages.list").await?;
    click(client, "#scope-form button[type=submit]").await?;
    let deadline = Instant::now() + WAIT;
    loop {
        let effective = text_of(client, "#scope-effective")
            .await
            .unwrap_or_default();
        if effective.trim() == "surface.messages.list" {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("the scope did not change: {effective:?}"));
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    wait_text(client, "#scope-source", "changed").await?;
    screenshot(client, "console-scopes.png").await;

    // Keyboard: the digit keys switch views.
    click(client, "#tab-scopes").await?;
    client
        .active_element()
        .await
        .map_err(fail("focus"))?
        .send_keys("5")
        .await
        .map_err(fail("key 5"))?;
    wait_text(client, "#health-detail", "Gateway").await?;
    // Rate-limit headroom from the REST client, and the sampled sparklines (inline SVG).
    wait_text(client, "#rate-limits", "Global (per second)").await?;
    wait_text(client, "#rate-limits", "Invalid requests").await?;
    wait_text(client, "#rate-limits", "POST /channels/").await?;
    client
        .wait()
        .at_most(Duration::from_secs(30))
        .for_element(Locator::Css(
            "#sparklines figure[data-spark='Calls'] svg polyline",
        ))
        .await
        .map_err(fail("the calls sparkline"))?;
    screenshot(client, "console-health.png").await;
    let polls = script(client, "return live.polls").await?;
    if polls != json!(0) {
        return Err(format!(
            "the page polled {polls} times while the stream was up"
        ));
    }

    // At 390 px wide nothing spills sideways.
    client
        .set_window_size(390, 844)
        .await
        .map_err(fail("resize"))?;
    click(client, "#tab-sessions").await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let overflow = script(client, "return document.documentElement.scrollWidth").await?;
    if overflow.as_u64().unwrap_or(u64::MAX) > 400 {
        return Err(format!("at 390 px the page is {overflow} px wide"));
    }
    screenshot(client, "console-narrow.png").await;
    client
        .set_window_size(1440, 900)
        .await
        .map_err(fail("resize"))?;

    // When the stream fails the page polls, says so, and goes back to the stream once it can:
    // with the page's stream closed and gone from the server, four other streams of this login
    // take its four slots, so the page's next stream is refused (503) until they close.
    click(client, "#tab-sessions").await?;
    script(
        client,
        "live.source.close(); live.source = null; return null",
    )
    .await?;
    wait_script(
        client,
        "return fetch('/console/api/health').then((r) => r.json()).then((h) => h.eventStreams === 0)",
        Duration::from_secs(40),
    )
    .await?;
    script(
        client,
        "window.__extra = [1, 2, 3, 4].map(() => new EventSource('/console/api/events')); return null",
    )
    .await?;
    wait_script(
        client,
        "return window.__extra.every((s) => s.readyState === EventSource.OPEN)",
        WAIT,
    )
    .await?;
    script(client, "openStream(); return null").await?;
    client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#live-mode[data-mode='polling']"))
        .await
        .map_err(fail("the polling indicator when the stream is refused"))?;
    wait_script(client, "return live.polls > 0", WAIT).await?;
    script(
        client,
        "window.__extra.forEach((s) => s.close()); return null",
    )
    .await?;
    // The server frees the closed streams' slots by the next heartbeat (15 s); the page retries
    // every 10 s.
    client
        .wait()
        .at_most(Duration::from_secs(60))
        .for_element(Locator::Css("#live-mode[data-mode='live']"))
        .await
        .map_err(fail("back to live after the stream came back"))?;
    let polls = script(client, "const before = live.polls; return new Promise((done) => setTimeout(() => done(live.polls - before), 3000))").await?;
    if polls != json!(0) {
        return Err(format!(
            "the page kept polling after the stream came back ({polls} polls in 3 s)"
        ));
    }

    // Logout: the login form comes back and the API refuses the old session.
    click(client, "#logout").await?;
    client
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#login:not([hidden])"))
        .await
        .map_err(fail("the login form after logout"))?;
    let status = client
        .execute_async(
            "const done = arguments[0]; fetch('/console/api/me').then(r => done(r.status));",
            Vec::new(),
        )
        .await
        .map_err(fail("fetch after logout"))?;
    if status != json!(401) {
        return Err(format!("after logout /console/api/me answered {status}"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_logs_in_shows_sessions_posts_approves_and_changes_scopes() {
    let chromium = find_program(&["chromium", "chromium-browser"]).expect(
        "chromium is not installed: apt-get install chromium chromium-driver (./test.sh does this)",
    );
    let driver = find_program(&["chromedriver"]).expect(
        "chromedriver is not installed: apt-get install chromium-driver (./test.sh does this)",
    );

    let dir = TempDir::new("console");
    let agent = dir.path().join("agent.sh");
    std::fs::write(
        &agent,
        "#!/bin/sh\ncat >/dev/null\necho 'pong from the test agent'\n",
    )
    .expect("write the agent");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755))
            .expect("make the agent executable");
    }
    let extra = dir.path().join("extra.toml");
    std::fs::write(
        &extra,
        format!(
            r##"[discord]
allowed_channel_ids = ["{ops}", "{release_room}"]
allow_dms = true

{aliases}
[agent]
runner = "command"
command = ["{agent}"]
active_channel_ids = ["{ops}"]

[permissions]
approvers = ["@stanley"]

[[permissions.rules]]
tool = "surface.messages.send"
session = "#release-room"
caller = "operator"
policy = "ask"
"##,
            agent = agent.display(),
            ops = demo_world::OPS,
            release_room = demo_world::RELEASE_ROOM,
            aliases = demo_world::alias_sections(),
        ),
    )
    .expect("write the extra config");

    let playground = start_playground(&extra);
    let port = free_port();
    let _driver = start_chromedriver(&driver, port);
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".to_owned(),
        json!({
            "binary": chromium.display().to_string(),
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1440,900", "--no-first-run", "--disable-extensions"]
        }),
    );
    let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .expect("chromedriver starts a chromium session");
    let outcome = tokio::time::timeout(Duration::from_secs(180), journey(&client, &playground))
        .await
        .unwrap_or_else(|_| Err("the journey took over 180 s".into()));
    if outcome.is_err() {
        screenshot(&client, "console-failure.png").await;
    }
    let _ = client.close().await;
    if let Err(error) = outcome {
        panic!(
            "{error} (screenshot: {})",
            target_dir().join("console-failure.png").display()
        );
    }
}
