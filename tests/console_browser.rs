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
/// A named token whose scope is only `console`: it reads, and decides nothing.
const WATCH_ENV: &str = "SB_CONSOLE_TEST_WATCH_TOKEN";
const WATCH_TOKEN: &str = "watch-only-console-token-4d1f0c";
/// What the agent posts to #release-room when asked to release: longer than a Discord card
/// shows inline (and than the audit log keeps),
/// with the tail a cut preview would hide.
const TAIL: &str = "… @everyone rm -rf /";

fn release_notes() -> String {
    let mut text: String = (1..=60)
        .map(|n| format!("line {n:02} of the notes\n"))
        .collect();
    text.push_str(TAIL);
    text
}

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
        .env(WATCH_ENV, WATCH_TOKEN)
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

    markdown_is_rendered_safely(client, playground).await?;
    the_compose_box_turns_names_into_mentions(client).await?;
    approvals_show_everything_and_never_the_deciders_own(client, playground).await?;
    the_usage_chart_draws_a_bar_for_the_agents_runs(client).await?;

    click(client, "#tab-audit").await?;
    wait_text(client, "#audit-rows", "surface.messages.send").await?;
    wait_text(client, "#audit-rows", "console:operator").await?;
    // A row opens to its input.
    click(client, "#audit-rows tr.row button").await?;
    wait_text(client, "#audit-rows", "\"input\"").await?;
    screenshot(client, "console-audit.png").await;

    // Change #ops's scope: exactly one callable. Each rule shows where, from where and for whom
    // it applies, so two rules on one tool are told apart.
    click(client, "#tab-scopes").await?;
    wait_text(client, "#scope-effective", "surface.messages.send").await?;
    let rules = script(
        client,
        "return [...document.querySelectorAll('#scope-detail table.rules tbody tr')].map((tr) => [...tr.cells].map((td) => td.textContent))",
    )
    .await?;
    let run_rule = json!([
        "permissions.rules[0]",
        "surface.messages.send",
        "#release-room",
        "#ops",
        "run",
        "ask"
    ]);
    if !rules
        .as_array()
        .is_some_and(|rows| rows.contains(&run_rule))
    {
        return Err(format!(
            "the rules table does not show session, origin and caller: {rules}"
        ));
    }
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
    a_sessions_memory_is_shown_and_a_note_deleted(client, playground).await?;

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

    a_console_only_login_reads_and_decides_nothing(client).await
}

/// The scopes view shows #ops's memory: no summary yet, its notes and the notes about users;
/// deleting a note is `memory.forget` through the pipeline (audited as the console), and a
/// forged delete without the CSRF token is refused.
async fn a_sessions_memory_is_shown_and_a_note_deleted(
    client: &Client,
    playground: &Playground,
) -> Step<()> {
    let notes: [&[&str]; 2] = [
        &[
            "memory.write",
            "--scope=session",
            "--session-id=#ops",
            "--key=release-config",
            "--text=lives at /srv/release/keystone-7.toml",
        ],
        &[
            "memory.write",
            "--scope=user",
            "--session-id=#ops",
            "--user-id=1000000000000000102",
            "--key=pronouns",
            "--text=he/him",
        ],
    ];
    for args in notes {
        let written = support::tools_at(&playground.url, &playground.token, args);
        if written.code != Some(0) {
            return Err(format!("memory.write failed: {written:?}"));
        }
    }
    script(
        client,
        "const s = document.getElementById('scope-session'); s.value = '1000000000000000401'; s.dispatchEvent(new Event('change')); return null",
    )
    .await?;
    wait_text(client, "#memory-summary", "never compacted").await?;
    wait_text(client, "#memory-notes", "keystone-7.toml").await?;
    wait_text(client, "#memory-user-notes", "he/him").await?;
    // Without the CSRF token the delete is refused and the note stays.
    let forged = client
        .execute_async(
            "const done = arguments[0]; fetch('/console/api/memory/forget', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ scope: 'session:1000000000000000401', key: 'release-config' }) }).then((r) => done(r.status));",
            vec![],
        )
        .await
        .map_err(fail("forged delete"))?;
    if forged != json!(403) {
        return Err(format!("a delete without the CSRF token answered {forged}"));
    }
    click(
        client,
        "#memory-notes button.forget[data-key='release-config']",
    )
    .await?;
    wait_text(client, "#memory-notes", "No notes.").await?;
    wait_text(client, "#memory-user-notes", "he/him").await?;
    // The console's delete is the only memory.forget call: its audit row is written off the
    // call's path, so it may take a moment.
    let deadline = Instant::now() + WAIT;
    loop {
        let audit = support::tools_at(
            &playground.url,
            &playground.token,
            &["audit.list", "--tool=memory.forget", "--output=json"],
        );
        if audit.stdout.contains("release-config") {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("the delete is not in the audit log: {audit:?}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The runs panel's usage chart: the command agent's runs were charged an estimate, so the
/// chart the page shows (an SVG drawn by the server) has a bar for today.
async fn the_usage_chart_draws_a_bar_for_the_agents_runs(client: &Client) -> Step<()> {
    click(client, "#tab-runs").await?;
    wait_script(
        client,
        "const c = document.getElementById('usage-chart'); return !!c && c.complete && c.naturalWidth > 0 && c.getBoundingClientRect().height > 0",
        WAIT,
    )
    .await?;
    let svg = client
        .execute_async(
            "const done = arguments[0]; const c = document.getElementById('usage-chart'); fetch(c.src).then(async (r) => done({ status: r.status, type: r.headers.get('content-type'), text: await r.text() }));",
            Vec::new(),
        )
        .await
        .map_err(fail("fetch the usage chart the page shows"))?;
    let text = svg["text"].as_str().unwrap_or_default();
    let bars = text.matches("<rect ").count();
    if svg["status"] != json!(200)
        || !svg["type"].as_str().unwrap_or_default().contains("svg")
        || bars == 0
        || text.contains("No model usage")
    {
        return Err(format!("the usage chart has no bar for the runs: {svg}"));
    }
    screenshot(client, "console-usage.png").await;
    Ok(())
}

/// What a page fetch answered: its status and JSON body.
async fn fetch(client: &Client, method: &str, path: &str, body: Value) -> Step<Value> {
    client
        .execute_async(
            "const [method, path, body, done] = arguments; fetch(path, { method, headers: { 'content-type': 'application/json', 'x-switchboard-csrf': state.csrf }, body: JSON.stringify(body) }).then(async (r) => done({ status: r.status, body: await r.json().catch(() => null) }));",
            vec![json!(method), json!(path), body],
        )
        .await
        .map_err(fail("fetch from the page"))
}

/// Discord's Markdown in a message: a code block, inline code, bold, a link, a timestamp in
/// the viewer's zone — and no HTML from the text.
async fn markdown_is_rendered_safely(client: &Client, playground: &Playground) -> Step<()> {
    // Posted as Tomas in Discord (the compose box is one line).
    let text = "**release** `v1.2` due <t:1795664001:f>, notes at [the docs](https://example.com/docs) <img src=x onerror=window.__xss=1>\n```\nlet shipped = true;\n```";
    ureq::post(&format!("{}/_fake/messages", playground.fake))
        .header("content-type", "application/json")
        .send(
            json!({"channel_id": demo_world::OPS.to_string(), "author_id": demo_world::TOMAS.to_string(), "content": text})
                .to_string(),
        )
        .map_err(fail("post as Tomas"))?;
    wait_text(client, "#messages pre.codeblock", "let shipped = true;").await?;
    let shown = script(
        client,
        "const m = [...document.querySelectorAll('#messages .message')].find((m) => m.querySelector('pre.codeblock')); const t = m.querySelector('time.ts'); const a = m.querySelector('a'); return { text: m.querySelector('.text').textContent, strong: (m.querySelector('strong') || {}).textContent, code: (m.querySelector('code.inline') || {}).textContent, time: t && t.textContent, datetime: t && t.getAttribute('datetime'), expected: new Intl.DateTimeFormat([], { dateStyle: 'long', timeStyle: 'short' }).format(new Date(1795664001000)), href: a && a.getAttribute('href'), rel: a && a.getAttribute('rel'), imgs: document.querySelectorAll('#messages img').length, xss: window.__xss === undefined }",
    )
    .await?;
    let ok = shown["strong"] == "release"
        && shown["code"] == "v1.2"
        && shown["datetime"] == "2026-11-26T03:33:21.000Z"
        && shown["time"] == shown["expected"]
        && shown["href"] == "https://example.com/docs"
        && shown["rel"]
            .as_str()
            .is_some_and(|r| r.contains("noopener"))
        && shown["imgs"] == json!(0)
        && shown["xss"] == json!(true)
        && shown["text"].as_str().is_some_and(|t| {
            !t.contains("```")
                && !t.contains("<t:")
                && !t.contains("**")
                && t.contains("<img src=x")
        });
    if !ok {
        return Err(format!(
            "the message is not rendered as Discord does: {shown}"
        ));
    }
    screenshot(client, "console-markdown.png").await;
    Ok(())
}

/// `@switchboard` typed in the compose box is a mention, so the agent answers in a channel
/// where only a mention starts it.
async fn the_compose_box_turns_names_into_mentions(client: &Client) -> Step<()> {
    click(client, "[data-session='1000000000000000402']").await?;
    wait_text(client, "#session-title", "#release-room").await?;
    type_into(client, "#compose-text", "@switchboard are you there?").await?;
    click(client, "#compose button[type=submit]").await?;
    wait_text(client, "#messages", "are you there?").await?;
    wait_text(client, "#messages", "pong from the test agent").await?;
    let chip = script(
        client,
        "return [...document.querySelectorAll('#messages .chip')].map((c) => c.textContent)",
    )
    .await?;
    if !chip
        .as_array()
        .is_some_and(|c| c.contains(&json!("@switchboard")))
    {
        return Err(format!("the mention is not shown as one: {chip}"));
    }
    Ok(())
}

/// A run's ask shows the whole input and the operator approves it; the operator's own ask
/// shows no button, and a forged decision is refused.
async fn approvals_show_everything_and_never_the_deciders_own(
    client: &Client,
    playground: &Playground,
) -> Step<()> {
    // Stanley asks the agent in #ops to release: its run posts to #release-room, which asks.
    click(client, "[data-session='1000000000000000401']").await?;
    wait_text(client, "#session-title", "#ops").await?;
    type_into(client, "#compose-text", "release it").await?;
    click(client, "#compose button[type=submit]").await?;
    click(client, "#tab-approvals").await?;
    wait_text(client, "#approvals", "surface.messages.send").await?;
    let preview = script(
        client,
        "const p = document.querySelector('#approvals [data-preview]'); return p && p.textContent",
    )
    .await?;
    let whole = format!("sessionId: #release-room\ntext: {}", release_notes());
    if preview != json!(whole) {
        return Err(format!(
            "the approver is not shown the whole input: {preview}"
        ));
    }
    screenshot(client, "console-approvals.png").await;
    click(client, "#approvals button.approve").await?;
    click(client, "#tab-sessions").await?;
    wait_text(client, "#messages", "released by the console").await?;
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
            && request["body"]["content"]
                .as_str()
                .is_some_and(|c| c.ends_with(TAIL))
    });
    if !posted {
        return Err("the approved message never reached the fake Discord".into());
    }

    // The operator's own call waits on an ask the operator may not decide.
    let call_url = format!("{}/v1/call", playground.url);
    let token = playground.token.clone();
    std::thread::spawn(move || {
        let _ = ureq::post(&call_url)
            .header("authorization", &format!("Bearer {token}"))
            .header("content-type", "application/json")
            .send(
                json!({"tool": "surface.messages.send", "input": {"sessionId": demo_world::STANLEY_DM.to_string(), "text": "the operator's own"}})
                    .to_string(),
            );
    });
    click(client, "#tab-approvals").await?;
    wait_text(client, "#approvals", "the operator's own").await?;
    wait_text(client, "#approvals", "Your own request").await?;
    let buttons = script(
        client,
        "return document.querySelectorAll('#approvals button.approve').length",
    )
    .await?;
    if buttons != json!(0) {
        return Err(format!(
            "the operator is offered {buttons} button(s) on its own ask"
        ));
    }
    let id = script(client, "return state.approvals[0].id").await?;
    let forged = fetch(
        client,
        "POST",
        &format!("/console/api/approvals/{}", id.as_str().unwrap_or_default()),
        json!({"approve": true}),
    )
    .await?;
    if forged["status"] != json!(403) || forged["body"]["error"]["code"] != "self_approval" {
        return Err(format!("a forged self-approval was not refused: {forged}"));
    }
    Ok(())
}

/// A login whose token's scope is only `console`: it reads, sees no ask but its own, and
/// neither decides nor changes a scope — not even with a forged request.
async fn a_console_only_login_reads_and_decides_nothing(client: &Client) -> Step<()> {
    type_into(client, "#token", WATCH_TOKEN).await?;
    click(client, "#login-button").await?;
    wait_text(client, "#session-list", "#ops").await?;
    wait_text(client, "#who", "token:watch").await?;
    click(client, "#tab-approvals").await?;
    wait_text(
        client,
        "#approvals-note",
        "only the asks its own calls wait on",
    )
    .await?;
    let cards = script(
        client,
        "return document.querySelectorAll('#approvals [data-approval-card]').length",
    )
    .await?;
    if cards != json!(0) {
        return Err(format!(
            "a console-only login sees {cards} ask(s) of others"
        ));
    }
    click(client, "#tab-scopes").await?;
    wait_text(client, "#scope-readonly", "admin.tools.set").await?;
    let form_hidden = script(
        client,
        "return document.getElementById('scope-form').hidden",
    )
    .await?;
    if form_hidden != json!(true) {
        return Err("a console-only login is offered the scope form".into());
    }
    let widen = fetch(
        client,
        "POST",
        "/console/api/sessions/1000000000000000401/scope",
        json!({"action": "set", "tools": "all"}),
    )
    .await?;
    if widen["status"] != json!(403) {
        return Err(format!("a console-only login changed a scope: {widen}"));
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
    // Answers "pong"; asked to release, posts the notes to #release-room with `tools` as its
    // run (which waits for an approver) and says how it went.
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\nprompt=$(cat)\ncase \"$prompt\" in\n  *'release it'*)\n    if '{tools}' surface.messages.send --session-id=#release-room '{notes}' >/dev/null 2>&1; then echo 'released by the console'; else echo 'the release was refused'; fi ;;\n  *) echo 'pong from the test agent' ;;\nesac\n",
            tools = support::tools_bin().display(),
            notes = release_notes(),
        ),
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

# A run started in #ops asks before it posts in #release-room.
[[permissions.rules]]
tool = "surface.messages.send"
session = "#release-room"
origin = "#ops"
policy = "ask"

# The operator's own posts to Stanley's DM ask too: not the operator's to decide.
[[permissions.rules]]
tool = "surface.messages.send"
session = "{stanley_dm}"
caller = "operator"
policy = "ask"

[[toolserver.tokens]]
name = "watch"
token_env = "{WATCH_ENV}"
scope = ["console"]
"##,
            stanley_dm = demo_world::STANLEY_DM,
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
