//! Attachments over real HTTP: multipart message creates (Discord's `payload_json` +
//! `files[n]`), their limits and errors, the attachment objects in answers and dispatches,
//! the CDN route serving the bytes, the request log's parts, and control-API attachments.

mod common;

use std::net::{Ipv4Addr, SocketAddr};

use common::{get, http_bytes, multipart, post, Gateway, Part, RawAnswer, ALL_INTENTS};
use fake_discord::{
    demo, FakeDiscord, FakeOptions, NewAttachment, RateLimits, UserMessage, Window, World,
};
use serde_json::{json, Value};

fn messages_path(channel: u64) -> String {
    format!("/api/v10/channels/{channel}/messages")
}

async fn start() -> FakeDiscord {
    FakeDiscord::start(World::demo()).await.expect("start")
}

async fn start_with_upload_limit(max_upload_bytes: usize) -> FakeDiscord {
    FakeDiscord::start_with(
        World::demo(),
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        FakeOptions {
            max_upload_bytes,
            ..FakeOptions::default()
        },
    )
    .await
    .expect("start")
}

async fn post_form(fake: &FakeDiscord, channel: u64, parts: &[Part<'_>]) -> RawAnswer {
    let (content_type, body) = multipart(parts);
    http_bytes(
        &fake.base_url(),
        "POST",
        &messages_path(channel),
        Some(&content_type),
        &body,
        true,
    )
    .await
}

/// GETs a URL the fake handed out (no auth, like Discord's CDN).
async fn fetch(fake: &FakeDiscord, url: &str) -> RawAnswer {
    let base = fake.base_url();
    let path = url.strip_prefix(&base).expect("a URL of this fake");
    http_bytes(&base, "GET", path, None, b"", false).await
}

fn held(fake: &FakeDiscord, channel: u64) -> usize {
    fake.channel_messages(channel.into())
        .expect("channel")
        .len()
}

#[tokio::test]
async fn multipart_create_with_two_files() {
    let fake = start().await;
    let mut gw = Gateway::connect(&fake.gateway_url()).await;
    gw.identify(ALL_INTENTS, 1).await;
    let payload = json!({"content": "see files", "nonce": "n-files", "enforce_nonce": true});
    let payload_text = payload.to_string();
    let binary: &[u8] = &[0, 1, 2, 255, 254, b'\r', b'\n', b'-', b'-'];
    let a = post_form(
        &fake,
        demo::OPS,
        &[
            (
                "payload_json",
                None,
                Some("application/json"),
                payload_text.as_bytes(),
            ),
            (
                "files[0]",
                Some("report.txt"),
                Some("text/plain"),
                b"hello\n",
            ),
            ("files[1]", Some("../odd name.bin"), None, binary),
        ],
    )
    .await;
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    let message = a.json();
    assert_eq!(message["content"], "see files");
    let attachments = message["attachments"]
        .as_array()
        .expect("attachments")
        .clone();
    assert_eq!(attachments.len(), 2, "{message}");
    assert_eq!(attachments[0]["filename"], "report.txt");
    assert_eq!(attachments[0]["size"], 6);
    assert_eq!(attachments[0]["content_type"], "text/plain");
    assert_eq!(attachments[1]["filename"], "../odd name.bin");
    assert_eq!(attachments[1]["size"], binary.len());
    assert_eq!(attachments[1]["content_type"], "application/octet-stream");
    for (attachment, bytes) in attachments.iter().zip([&b"hello\n"[..], binary]) {
        let id = attachment["id"].as_str().expect("string id");
        let url = attachment["url"].as_str().expect("url");
        assert_eq!(attachment["proxy_url"], attachment["url"]);
        let prefix = format!("{}/attachments/{}/{id}/", fake.base_url(), demo::OPS);
        assert!(url.starts_with(&prefix), "{url}");
        let served = fetch(&fake, url).await;
        assert_eq!(served.status, 200, "{url}");
        assert_eq!(served.body, bytes, "{url}");
        assert_eq!(
            served.header("content-type"),
            attachment["content_type"].as_str()
        );
        assert_eq!(
            served.header("content-length"),
            Some(bytes.len().to_string().as_str())
        );
    }
    assert!(attachments[1]["url"]
        .as_str()
        .expect("url")
        .ends_with("/..%2Fodd%20name.bin"));

    // The dispatch carries the same attachments, and serenity parses it.
    let frame = gw.dispatch("MESSAGE_CREATE").await;
    assert_eq!(frame["d"]["attachments"], message["attachments"]);
    let parsed: serenity::all::Message =
        serde_json::from_value(frame["d"].clone()).expect("serenity parses the dispatch");
    assert_eq!(parsed.attachments.len(), 2);
    assert_eq!(parsed.attachments[1].filename, "../odd name.bin");
    assert_eq!(parsed.attachments[1].size as usize, binary.len());

    // The request log keeps every part, bytes included, and payload_json as the body.
    let log = fake.requests();
    let recorded = log
        .iter()
        .rev()
        .find(|r| r.method == "POST" && r.path == messages_path(demo::OPS))
        .expect("logged");
    assert_eq!(recorded.status, 200);
    assert_eq!(recorded.body.as_ref(), Some(&payload));
    let names: Vec<&str> = recorded.parts.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["payload_json", "files[0]", "files[1]"]);
    assert_eq!(recorded.parts[0].content, payload_text.as_bytes());
    assert_eq!(recorded.parts[1].filename.as_deref(), Some("report.txt"));
    assert_eq!(
        recorded.parts[1].content_type.as_deref(),
        Some("text/plain")
    );
    assert_eq!(recorded.parts[1].content, &b"hello\n"[..]);
    assert_eq!(
        recorded.parts[2].filename.as_deref(),
        Some("../odd name.bin")
    );
    assert_eq!(recorded.parts[2].content_type, None);
    assert_eq!(recorded.parts[2].size, binary.len());
    assert_eq!(recorded.parts[2].content, binary);
    // ... and over the control API, as base64.
    let logged = get(&fake.base_url(), "/_fake/requests").await;
    let last = logged
        .body
        .as_array()
        .and_then(|l| {
            l.iter()
                .rev()
                .find(|r| r["path"] == messages_path(demo::OPS))
        })
        .cloned()
        .expect("in the JSON log");
    assert_eq!(last["parts"][1]["content_base64"], "aGVsbG8K");

    // Same nonce again: the first message comes back and nothing new is stored.
    let again = post_form(
        &fake,
        demo::OPS,
        &[
            ("payload_json", None, None, payload_text.as_bytes()),
            ("files[0]", Some("other.txt"), None, b"other"),
        ],
    )
    .await;
    assert_eq!(again.status, 200);
    assert_eq!(again.json()["id"], message["id"]);
    assert_eq!(held(&fake, demo::OPS), 1);
    fake.shutdown().await;
}

#[tokio::test]
async fn eleven_files_is_400() {
    let fake = start().await;
    let names: Vec<String> = (0..11).map(|i| format!("files[{i}]")).collect();
    let mut parts: Vec<Part> = vec![("payload_json", None, None, br#"{"content":"x"}"#)];
    for name in &names {
        parts.push((name, Some("f.txt"), None, b"x"));
    }
    let a = post_form(&fake, demo::OPS, &parts).await;
    assert_eq!(a.status, 400);
    let body = a.json();
    assert_eq!(body["code"], 50035, "{body}");
    assert_eq!(
        body["errors"]["files"]["_errors"][0]["code"],
        "BASE_TYPE_MAX_LENGTH"
    );
    assert_eq!(held(&fake, demo::OPS), 0);
    // Ten is fine.
    let a = post_form(&fake, demo::OPS, &parts[..11]).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json()["attachments"].as_array().map(Vec::len), Some(10));
}

#[tokio::test]
async fn file_over_the_upload_limit_is_413_and_posts_nothing() {
    let fake = start_with_upload_limit(16).await;
    let a = post_form(
        &fake,
        demo::OPS,
        &[
            ("payload_json", None, None, br#"{"content":"big"}"#),
            ("files[0]", Some("small.txt"), None, b"0123456789abcdef"),
            ("files[1]", Some("big.txt"), None, b"0123456789abcdefX"),
        ],
    )
    .await;
    assert_eq!(a.status, 413);
    assert_eq!(
        a.json(),
        json!({"code": 40005, "message": "Request entity too large"})
    );
    assert_eq!(held(&fake, demo::OPS), 0);
    assert_eq!(fake.requests().last().map(|r| r.status), Some(413));
    // At the limit exactly is fine.
    let a = post_form(
        &fake,
        demo::OPS,
        &[
            ("payload_json", None, None, br#"{"content":"ok"}"#),
            ("files[0]", Some("small.txt"), None, b"0123456789abcdef"),
        ],
    )
    .await;
    assert_eq!(a.status, 200);
    // The control API applies the same limit.
    let err = fake
        .post_message(UserMessage {
            channel_id: demo::OPS.into(),
            author_id: demo::STANLEY.into(),
            attachments: vec![NewAttachment::new("big.bin", vec![7u8; 17])],
            ..Default::default()
        })
        .expect_err("too big");
    assert!(err.to_string().contains("40005"), "{err}");
    assert_eq!(held(&fake, demo::OPS), 1);
}

#[tokio::test]
async fn files_only_message_needs_no_content_and_attachments_rename_files() {
    let fake = start().await;
    let payload = json!({
        "attachments": [{"id": 1, "filename": "renamed.md", "description": "notes"}, {"id": "0"}]
    })
    .to_string();
    let a = post_form(
        &fake,
        demo::OPS,
        &[
            ("files[0]", Some("a.png"), None, b"\x89PNG"),
            ("payload_json", None, None, payload.as_bytes()),
            ("files[1]", Some("b.txt"), None, b"# hi"),
        ],
    )
    .await;
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    let message = a.json();
    assert_eq!(message["content"], "");
    assert_eq!(message["attachments"][0]["filename"], "a.png");
    assert_eq!(message["attachments"][0]["content_type"], "image/png");
    assert!(message["attachments"][0].get("description").is_none());
    assert_eq!(message["attachments"][1]["filename"], "renamed.md");
    assert_eq!(message["attachments"][1]["description"], "notes");
    assert_eq!(message["attachments"][1]["content_type"], "text/markdown");
    let served = fetch(
        &fake,
        message["attachments"][1]["url"].as_str().expect("url"),
    )
    .await;
    assert_eq!(served.body, b"# hi");

    // Without files, an empty payload is still an empty message.
    let a = post_form(&fake, demo::OPS, &[("payload_json", None, None, b"{}")]).await;
    assert_eq!(a.status, 400);
    assert_eq!(a.json()["code"], 50006);
    // An attachments entry must name an uploaded file.
    let a = post_form(
        &fake,
        demo::OPS,
        &[
            ("payload_json", None, None, br#"{"attachments":[{"id":3}]}"#),
            ("files[0]", Some("a.txt"), None, b"a"),
        ],
    )
    .await;
    assert_eq!(a.status, 400);
    let body = a.json();
    assert_eq!(body["code"], 50035);
    assert!(
        body["errors"]["attachments"]["0"]["id"].is_object(),
        "{body}"
    );
    // The JSON path takes an empty attachments list (serenity always sends one) but no
    // references to files it does not have.
    let a = post(
        &fake.base_url(),
        &messages_path(demo::OPS),
        &json!({"content": "json", "attachments": []}),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.body["attachments"], json!([]));
    let json_request = fake.requests().pop().expect("logged");
    assert!(json_request.parts.is_empty());
    let logged = get(&fake.base_url(), "/_fake/requests").await;
    let last = logged.body.as_array().and_then(|l| l.last()).cloned();
    assert!(
        last.is_some_and(|r| r.get("parts").is_none()),
        "JSON requests log no parts"
    );
    let a = post(
        &fake.base_url(),
        &messages_path(demo::OPS),
        &json!({"content": "json", "attachments": [{"id": 0}]}),
    )
    .await;
    assert_eq!(a.body["code"], 50035);
    assert_eq!(held(&fake, demo::OPS), 2);
}

#[tokio::test]
async fn malformed_forms_are_400_naming_the_part() {
    // More creates in #ops than Discord's 5 per 5 s: the bucket is widened, this is about forms.
    let fake = FakeDiscord::start_with(
        World::demo(),
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        FakeOptions {
            rate_limits: RateLimits {
                message_create: Window::new(100, 1_000),
                ..RateLimits::discord()
            },
            ..FakeOptions::default()
        },
    )
    .await
    .expect("start");
    let payload: &[u8] = br#"{"content":"x"}"#;
    let cases: Vec<(Vec<Part>, &str)> = vec![
        (
            vec![("files[0]", Some("a.txt"), None, b"a")],
            "payload_json",
        ),
        (
            vec![
                ("payload_json", None, None, payload),
                ("file", Some("a.txt"), None, b"a"),
            ],
            "file",
        ),
        (
            vec![
                ("payload_json", None, None, payload),
                ("content", None, None, b"hi"),
            ],
            "content",
        ),
        (
            vec![
                ("payload_json", None, None, payload),
                ("files[0]", None, None, b"a"),
            ],
            "files[0]",
        ),
        (
            vec![
                ("payload_json", None, None, payload),
                ("files[2]", Some(""), None, b"a"),
            ],
            "files[2]",
        ),
        (
            vec![
                ("payload_json", None, None, payload),
                ("files[0]", Some("a"), None, b"a"),
                ("files[0]", Some("b"), None, b"b"),
            ],
            "files[0]",
        ),
    ];
    for (parts, named) in cases {
        let a = post_form(&fake, demo::OPS, &parts).await;
        let body = a.json();
        assert_eq!(a.status, 400, "{named}: {body}");
        assert_eq!(body["code"], 50035, "{named}: {body}");
        assert!(body["errors"][named].is_object(), "{named}: {body}");
    }
    // payload_json must be JSON, as a JSON body must.
    let a = post_form(&fake, demo::OPS, &[("payload_json", None, None, b"{nope")]).await;
    assert_eq!(a.status, 400);
    assert_eq!(a.json()["code"], 50109);
    // Access is still checked first.
    let a = post_form(
        &fake,
        demo::SECRET,
        &[("payload_json", None, None, payload)],
    )
    .await;
    assert_eq!(a.status, 403);
    assert_eq!(a.json()["code"], 50013);
    assert_eq!(held(&fake, demo::OPS), 0);
}

#[tokio::test]
async fn garbage_multipart_bodies_are_400_not_a_panic() {
    let fake = start().await;
    let base = fake.base_url();
    let path = messages_path(demo::OPS);
    let garbage: [(&str, &[u8]); 4] = [
        (
            "multipart/form-data; boundary=xyz",
            b"this is not multipart at all",
        ),
        ("multipart/form-data", b"--xyz\r\n\r\n"),
        (
            "multipart/form-data; boundary=xyz",
            b"--xyz\r\nContent-Disposition: form-data; name=\"payload_json\"\r\n\r\n{\"content\"",
        ),
        (
            "multipart/form-data; boundary=xyz",
            &[0xff, 0xfe, 0x00, 0x01],
        ),
    ];
    for (content_type, body) in garbage {
        let a = http_bytes(&base, "POST", &path, Some(content_type), body, true).await;
        assert_eq!(
            a.status,
            400,
            "{content_type}: {}",
            String::from_utf8_lossy(&a.body)
        );
        let answer = a.json();
        assert_eq!(answer["code"], 50035, "{content_type}: {answer}");
        assert_eq!(
            answer["errors"]["_errors"][0]["code"], "MULTIPART_INVALID",
            "{content_type}: {answer}"
        );
    }
    // Multipart to a JSON-only route is still "invalid JSON".
    let (ct, body) = multipart(&[("payload_json", None, None, br#"{"content":"x"}"#)]);
    let a = http_bytes(
        &base,
        "PATCH",
        &format!("{path}/123"),
        Some(&ct),
        &body,
        true,
    )
    .await;
    assert_eq!(a.json()["code"], 50109);
    // Still serving.
    assert_eq!(get(&base, "/api/v10/users/@me").await.status, 200);
    assert_eq!(held(&fake, demo::OPS), 0);
}

#[tokio::test]
async fn control_api_attachments() {
    let fake = start().await;
    let base = fake.base_url();
    let mut gw = Gateway::connect(&fake.gateway_url()).await;
    gw.identify(ALL_INTENTS, 1).await;
    let a = post(
        &base,
        "/_fake/messages",
        &json!({
            "channel_id": demo::OPS.to_string(),
            "author_id": demo::STANLEY.to_string(),
            "attachments": [
                {"filename": "../../etc/passwd", "content_base64": "cm9vdDp4OjA6MA=="},
                {"filename": "log", "content_base64": "", "content_type": "text/x-log"}
            ]
        }),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let attachments = a.body["attachments"]
        .as_array()
        .expect("attachments")
        .clone();
    assert_eq!(attachments.len(), 2);
    assert_eq!(attachments[0]["filename"], "../../etc/passwd");
    assert_eq!(attachments[0]["content_type"], "application/octet-stream");
    assert_eq!(attachments[1]["content_type"], "text/x-log");
    assert_eq!(attachments[1]["size"], 0);
    let url = attachments[0]["url"].as_str().expect("url");
    assert!(url.ends_with("/..%2F..%2Fetc%2Fpasswd"), "{url}");
    let served = fetch(&fake, url).await;
    assert_eq!(served.status, 200);
    assert_eq!(served.body, b"root:x:0:0");
    let frame = gw.dispatch("MESSAGE_CREATE").await;
    assert_eq!(frame["d"]["attachments"], a.body["attachments"]);
    serde_json::from_value::<serenity::all::Message>(frame["d"].clone())
        .expect("serenity parses a user's attachments");

    let bad = |attachment: Value| {
        let base = base.clone();
        async move {
            post(
                &base,
                "/_fake/messages",
                &json!({
                    "channel_id": demo::OPS.to_string(),
                    "author_id": demo::STANLEY.to_string(),
                    "content": "x",
                    "attachments": [attachment]
                }),
            )
            .await
        }
    };
    let a = bad(json!({"filename": "a.txt", "content_base64": "not base64!"})).await;
    assert_eq!(a.status, 400);
    assert!(a.text.contains("content_base64"), "{}", a.text);
    let a = bad(json!({"filename": "", "content_base64": "eA=="})).await;
    assert_eq!(a.status, 400);
    assert!(a.text.contains("attachments[0].filename"), "{}", a.text);
    let a = bad(json!({"filename": "f".repeat(1025), "content_base64": "eA=="})).await;
    assert_eq!(a.status, 400);
    let a = bad(json!({"filename": "a", "content_base64": "eA==", "content_type": "nope"})).await;
    assert_eq!(a.status, 400);
    assert!(a.text.contains("content_type"), "{}", a.text);
    let a = bad(json!({"filename": "a", "content_base64": "eA==", "size": 1})).await;
    assert_eq!(a.status, 400);
    let eleven: Vec<Value> = (0..11)
        .map(|_| json!({"filename": "a", "content_base64": "eA=="}))
        .collect();
    let a = post(
        &base,
        "/_fake/messages",
        &json!({"channel_id": demo::OPS.to_string(), "author_id": demo::STANLEY.to_string(), "attachments": eleven}),
    )
    .await;
    assert_eq!(a.status, 400);
    // Neither content nor attachments: Discord's empty-message refusal.
    let a = post(
        &base,
        "/_fake/messages",
        &json!({"channel_id": demo::OPS.to_string(), "author_id": demo::STANLEY.to_string()}),
    )
    .await;
    assert_eq!(a.status, 400);
    assert_eq!(a.body["discord"]["code"], 50006);
    assert_eq!(held(&fake, demo::OPS), 1);

    // The Rust API does the same.
    let posted = fake
        .post_message(UserMessage {
            channel_id: demo::STANLEY_DM.into(),
            author_id: demo::STANLEY.into(),
            content: "a file for you".into(),
            attachments: vec![NewAttachment {
                filename: "data.json".into(),
                content: b"{}".to_vec(),
                content_type: None,
            }],
            ..Default::default()
        })
        .expect("post with a file");
    assert_eq!(posted["attachments"][0]["content_type"], "application/json");
    let served = fetch(
        &fake,
        posted["attachments"][0]["url"].as_str().expect("url"),
    )
    .await;
    assert_eq!(served.body, b"{}");
}

#[tokio::test]
async fn unknown_attachment_urls_are_404() {
    let fake = start().await;
    let posted = fake
        .post_message(UserMessage {
            channel_id: demo::OPS.into(),
            author_id: demo::STANLEY.into(),
            attachments: vec![NewAttachment::new("a.txt", b"a".to_vec())],
            ..Default::default()
        })
        .expect("post");
    let id = posted["attachments"][0]["id"]
        .as_str()
        .expect("id")
        .to_string();
    let base = fake.base_url();
    let ok = format!("/attachments/{}/{id}/a.txt", demo::OPS);
    assert_eq!(
        http_bytes(&base, "GET", &ok, None, b"", false).await.status,
        200
    );
    for path in [
        format!("/attachments/{}/{id}/b.txt", demo::OPS),
        format!("/attachments/{}/{id}/a.txt", demo::RANDOM),
        format!("/attachments/{}/1/a.txt", demo::OPS),
        format!("/attachments/{}/nope/a.txt", demo::OPS),
        format!("/attachments/{}/{id}", demo::OPS),
        format!("/attachments/{}/{id}/%FF", demo::OPS),
    ] {
        let a = http_bytes(&base, "GET", &path, None, b"", false).await;
        assert_eq!(a.status, 404, "{path}");
    }
    // CDN fetches are not REST requests: only the path no route matches is logged (as every
    // unknown path is).
    let logged: Vec<String> = fake.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(logged, [format!("/attachments/{}/{id}", demo::OPS)]);
}

#[tokio::test]
async fn files_of_several_megabytes_pass_both_apis() {
    use base64::Engine as _;
    let fake = start().await;
    let big: Vec<u8> = (0..3 * 1024 * 1024 + 17).map(|i| (i % 251) as u8).collect();
    let a = post_form(
        &fake,
        demo::OPS,
        &[
            ("payload_json", None, None, b"{}"),
            ("files[0]", Some("big.bin"), None, &big),
        ],
    )
    .await;
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    let served = fetch(
        &fake,
        a.json()["attachments"][0]["url"].as_str().expect("url"),
    )
    .await;
    assert!(served.body == big, "served bytes differ");
    let encoded = base64::engine::general_purpose::STANDARD.encode(&big);
    let a = post(
        &fake.base_url(),
        "/_fake/messages",
        &json!({
            "channel_id": demo::OPS.to_string(),
            "author_id": demo::STANLEY.to_string(),
            "attachments": [{"filename": "big.bin", "content_base64": encoded}]
        }),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(a.body["attachments"][0]["size"], big.len());
}
