//! A web page the operator visits must not drive a tool server on their machine. With
//! `toolserver.insecure_no_auth` nothing else stands in its way: a cross-site form or a
//! "simple" `fetch` (`Content-Type: text/plain`, no preflight) could post into Discord, mint a
//! token or reload the config, and a page that rebinds its own DNS name to 127.0.0.1 reads the
//! answers. Each is tried here with the headers a browser sends, against the real binary.

use fake_discord::demo;
use serde_json::json;

use crate::support::{bot_posts, http_send, Allow, Fake, Sections, Switchboard, TempDir};

/// A request a page might send (method, path, headers, body) and the refusal it gets (status,
/// code).
type Try<'a> = (
    &'a str,
    &'a str,
    Vec<(&'a str, &'a str)>,
    &'a str,
    u16,
    &'a str,
);

/// What a program sends: this server's `Host`, JSON, no `Origin`.
fn program(host: &str) -> Vec<(&str, &str)> {
    vec![("Host", host), ("Content-Type", "application/json")]
}

fn error_code(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"]["code"].as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("<not an error body: {body}>"))
}

#[test]
fn a_web_page_cannot_drive_a_server_without_auth() {
    let fake = Fake::start();
    let dir = TempDir::new("robust-browsers");
    let sb = Switchboard::start_sections(
        &fake,
        dir.path(),
        &Allow::default(),
        Sections {
            toolserver: "console = true",
            no_auth: true,
            ..Sections::default()
        },
    );
    let host = sb.url.trim_start_matches("http://").to_owned();
    let port = host.rsplit_once(':').map(|(_, p)| p.to_owned()).unwrap();
    let send = json!({"tool": "surface.messages.send", "input": {"sessionId": "#ops", "text": "from a program"}}).to_string();
    let cross = json!({"tool": "surface.messages.send", "input": {"sessionId": "#ops", "text": "from a web page"}}).to_string();
    let mint = json!({"sessionId": "#ops", "scope": ["*"]}).to_string();
    let mcp = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "surface.messages.send", "arguments": {"sessionId": "#ops", "text": "from a web page"}}}).to_string();

    // A program is served: no token needed on this server.
    let (status, body) = http_send(&sb.url, "POST", "/v1/call", &program(&host), &send).unwrap();
    assert_eq!(status, 200, "{body}");
    for name in [
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        "127.0.0.1".to_owned(),
        "LOCALHOST".to_owned(),
    ] {
        let (status, body) = http_send(&sb.url, "GET", "/health", &[("Host", &name)], "").unwrap();
        assert_eq!(status, 200, "Host: {name}: {body}");
    }

    let evil_host = format!("rebound.evil.example:{port}");
    let page = format!("http://{host}");
    let tries: Vec<Try<'_>> = vec![
        // A cross-site form or fetch without preflight: text/plain, urlencoded, none.
        (
            "POST",
            "/v1/call",
            vec![("Host", &host), ("Content-Type", "text/plain")],
            &cross,
            415,
            "unsupported_media_type",
        ),
        (
            "POST",
            "/v1/call",
            vec![
                ("Host", &host),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ],
            &cross,
            415,
            "unsupported_media_type",
        ),
        (
            "POST",
            "/v1/call",
            vec![("Host", &host)],
            &cross,
            415,
            "unsupported_media_type",
        ),
        (
            "POST",
            "/v1/batch",
            vec![("Host", &host), ("Content-Type", "text/plain")],
            "{}",
            415,
            "unsupported_media_type",
        ),
        (
            "POST",
            "/v1/capabilities",
            vec![("Host", &host), ("Content-Type", "text/plain")],
            &mint,
            415,
            "unsupported_media_type",
        ),
        (
            "POST",
            "/v1/admin/reload",
            vec![("Host", &host)],
            "",
            415,
            "unsupported_media_type",
        ),
        (
            "POST",
            "/mcp",
            vec![
                ("Host", &host),
                ("Content-Type", "text/plain"),
                ("Accept", "application/json, text/event-stream"),
            ],
            &mcp,
            415,
            "unsupported_media_type",
        ),
        (
            "POST",
            "/console/api/login",
            vec![
                ("Host", &host),
                ("Content-Type", "text/plain"),
                ("Origin", &page),
            ],
            "{\"token\":\"\"}",
            415,
            "unsupported_media_type",
        ),
        // DNS rebinding: the page's own name, now pointing at 127.0.0.1.
        (
            "POST",
            "/v1/call",
            vec![("Host", &evil_host), ("Content-Type", "application/json")],
            &cross,
            403,
            "host_not_allowed",
        ),
        (
            "POST",
            "/v1/capabilities",
            vec![("Host", &evil_host), ("Content-Type", "application/json")],
            &mint,
            403,
            "host_not_allowed",
        ),
        (
            "POST",
            "/v1/admin/reload",
            vec![("Host", &evil_host), ("Content-Type", "application/json")],
            "{}",
            403,
            "host_not_allowed",
        ),
        (
            "POST",
            "/mcp",
            vec![
                ("Host", &evil_host),
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
            ],
            &mcp,
            403,
            "host_not_allowed",
        ),
        (
            "GET",
            "/v1/events",
            vec![("Host", &evil_host)],
            "",
            403,
            "host_not_allowed",
        ),
        (
            "GET",
            "/v1/tools",
            vec![("Host", &evil_host)],
            "",
            403,
            "host_not_allowed",
        ),
        (
            "GET",
            "/health",
            vec![("Host", &evil_host)],
            "",
            403,
            "host_not_allowed",
        ),
        (
            "GET",
            "/",
            vec![("Host", &evil_host)],
            "",
            403,
            "host_not_allowed",
        ),
        ("GET", "/health", vec![], "", 403, "host_not_allowed"),
        // A page of another origin, with JSON (after a preflight nobody answers, or a browser
        // that skips it).
        (
            "POST",
            "/v1/call",
            vec![
                ("Host", &host),
                ("Content-Type", "application/json"),
                ("Origin", "http://evil.example"),
            ],
            &cross,
            403,
            "cross_origin",
        ),
        (
            "POST",
            "/v1/call",
            vec![
                ("Host", &host),
                ("Content-Type", "application/json"),
                ("Origin", "null"),
            ],
            &cross,
            403,
            "cross_origin",
        ),
        (
            "POST",
            "/v1/call",
            vec![
                ("Host", &host),
                ("Content-Type", "application/json"),
                ("Sec-Fetch-Site", "cross-site"),
            ],
            &cross,
            403,
            "cross_origin",
        ),
        (
            "POST",
            "/v1/admin/reload",
            vec![
                ("Host", &host),
                ("Content-Type", "application/json"),
                ("Origin", "http://localhost:3000"),
            ],
            "{}",
            403,
            "cross_origin",
        ),
        (
            "POST",
            "/mcp",
            vec![
                ("Host", &host),
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
                ("Origin", "http://evil.example"),
            ],
            &mcp,
            403,
            "cross_origin",
        ),
        (
            "POST",
            "/console/api/login",
            vec![
                ("Host", &host),
                ("Content-Type", "application/json"),
                ("Origin", "http://evil.example"),
            ],
            "{\"token\":\"\"}",
            403,
            "cross_origin",
        ),
        (
            "GET",
            "/v1/events",
            vec![("Host", &host), ("Origin", "http://evil.example")],
            "",
            403,
            "cross_origin",
        ),
        (
            "GET",
            "/console/api/events",
            vec![
                ("Host", &host),
                ("Sec-Fetch-Site", "cross-site"),
                ("Sec-Fetch-Mode", "cors"),
            ],
            "",
            403,
            "cross_origin",
        ),
    ];
    for (method, path, headers, body, want_status, want_code) in &tries {
        let (status, answer) = http_send(&sb.url, method, path, headers, body).unwrap();
        assert_eq!(
            (status, error_code(&answer).as_str()),
            (*want_status, *want_code),
            "{method} {path} {headers:?}: {answer}"
        );
    }
    // A link to the console from another site still opens its page (a navigation changes
    // nothing, and the login cookie is SameSite=Strict).
    let (status, page_body) = http_send(
        &sb.url,
        "GET",
        "/",
        &[
            ("Host", &host),
            ("Sec-Fetch-Site", "cross-site"),
            ("Sec-Fetch-Mode", "navigate"),
        ],
        "",
    )
    .unwrap();
    assert_eq!(status, 200, "{page_body}");

    // Nothing a page tried reached Discord, and no token was minted.
    let posts: Vec<String> = bot_posts(&fake, demo::OPS)
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect();
    assert!(posts.iter().any(|p| p == "from a program"), "{posts:?}");
    assert!(
        !posts.iter().any(|p| p.contains("web page")),
        "a page posted: {posts:?}"
    );
    assert!(
        !sb.stderr().contains("config reloaded"),
        "a page reloaded the config:\n{}",
        sb.stderr()
    );
    // The tools CLI, which sends what a program sends, still works.
    let listed = sb.tools(&["surface.sessions.list"]);
    assert_eq!(listed.code, Some(0), "{listed:?}");
}
