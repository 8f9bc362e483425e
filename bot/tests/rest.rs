//! The REST client's file paths against fake-discord: multipart uploads and capped downloads;
//! a post sent again under its nonce.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use bot::rest::DiscordRest;
use entity::Snowflake;
use fake_discord::{demo, FakeDiscord, NewAttachment, UserMessage, World};
use serde_json::json;
use switchboard_engine::surface::{Fetched, OutgoingFile, SurfaceError};

fn file(name: &str, content: &[u8]) -> OutgoingFile {
    OutgoingFile {
        filename: name.to_owned(),
        content: content.to_vec(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_go_up_as_multipart_parts_that_match() {
    let fake = FakeDiscord::start(World::demo()).await.expect("fake");
    let rest = DiscordRest::new(&fake.base_url(), "token").expect("client");
    let binary: Vec<u8> = (0..=255u8).collect();
    let answer = rest
        .send_message(
            Snowflake(demo::OPS),
            "two files",
            None,
            json!({"parse": []}),
            &[file("a.txt", b"alpha"), file("b.bin", &binary)],
            None,
        )
        .await
        .expect("posted");
    let attachments = answer["attachments"].as_array().expect("attachments");
    assert_eq!(attachments.len(), 2);
    assert_eq!(attachments[1]["filename"], "b.bin");
    assert_eq!(attachments[1]["size"], 256);

    let requests = fake.requests();
    let post = requests
        .iter()
        .rev()
        .find(|r| {
            r.method == "POST"
                && r.path
                    .ends_with(&format!("/channels/{}/messages", demo::OPS))
        })
        .expect("the upload was recorded");
    let names: Vec<(&str, Option<&str>)> = post
        .parts
        .iter()
        .map(|p| (p.name.as_str(), p.filename.as_deref()))
        .collect();
    assert_eq!(
        names,
        [
            ("payload_json", None),
            ("files[0]", Some("a.txt")),
            ("files[1]", Some("b.bin"))
        ]
    );
    assert_eq!(post.parts[1].content, b"alpha".as_slice());
    assert_eq!(post.parts[2].content, binary.as_slice());
    let payload = post.body.as_ref().expect("payload_json");
    assert_eq!(payload["content"], "two files");
    assert_eq!(
        payload["enforce_nonce"], true,
        "uploads are deduplicated too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downloads_stop_at_the_cap() {
    let fake = FakeDiscord::start(World::demo()).await.expect("fake");
    let rest = DiscordRest::new(&fake.base_url(), "token").expect("client");
    let content = vec![42u8; 2_000];
    let message = fake
        .post_message(UserMessage {
            channel_id: demo::OPS.into(),
            author_id: demo::STANLEY.into(),
            content: "here".into(),
            reply_to: None,
            attachments: vec![NewAttachment::new("data.bin", content.clone())],
        })
        .expect("posted");
    let url = message["attachments"][0]["url"].as_str().expect("url");
    assert_eq!(
        rest.fetch(url, 2_000).await.expect("fetched"),
        Fetched::Bytes(content)
    );
    assert_eq!(
        rest.fetch(url, 1_999).await.expect("answered"),
        Fetched::OverLimit
    );
    let gone = format!("{}/attachments/1/2/nothing.bin", fake.base_url());
    assert!(matches!(
        rest.fetch(&gone, 10).await,
        Err(SurfaceError::NotFound(_))
    ));
}

/// A server that streams `total` bytes in chunks without announcing a length.
fn chunked_server(total: usize) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        let Ok((mut stream, _)) = listener.accept() else {
            return;
        };
        stream
            .set_write_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut request = [0u8; 4096];
        let _ = stream.read(&mut request);
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        let chunk = vec![b'x'; 1_000];
        let mut sent = 0;
        while sent < total {
            let n = chunk.len().min(total - sent);
            if stream
                .write_all(format!("{n:x}\r\n").as_bytes())
                .and_then(|()| stream.write_all(&chunk[..n]))
                .and_then(|()| stream.write_all(b"\r\n"))
                .is_err()
            {
                return; // the client stopped reading: what the cap should do
            }
            sent += n;
        }
        let _ = stream.write_all(b"0\r\n\r\n");
    });
    format!("http://{addr}/file.bin")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_without_a_length_is_cut_off_at_the_cap() {
    let rest = DiscordRest::new("http://127.0.0.1:9", "token").expect("client");
    let small = chunked_server(3_000);
    assert_eq!(
        rest.fetch(&small, 3_000).await.expect("fetched"),
        Fetched::Bytes(vec![b'x'; 3_000])
    );
    let endless = chunked_server(50 * 1024 * 1024);
    assert_eq!(
        rest.fetch(&endless, 10_000).await.expect("answered"),
        Fetched::OverLimit
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_sent_again_under_its_nonce_gives_back_the_first_message() {
    let fake = FakeDiscord::start(World::demo()).await.expect("fake");
    let rest = DiscordRest::new(&fake.base_url(), "token").expect("client");
    let send = |text: &'static str, nonce: Option<&'static str>| {
        let rest = &rest;
        async move {
            let answer = rest
                .send_message(
                    Snowflake(demo::OPS),
                    text,
                    None,
                    json!({"parse": []}),
                    &[],
                    nonce,
                )
                .await
                .expect("posted");
            answer["id"].as_str().expect("id").to_owned()
        }
    };
    let first = send("part one", Some("r0123456789abcdef01234567")).await;
    let again = send("part one", Some("r0123456789abcdef01234567")).await;
    assert_eq!(first, again, "the same nonce gives back the first message");
    // Without a nonce of its own, every send is a new message.
    let plain = send("part one", None).await;
    let plain_again = send("part one", None).await;
    assert_ne!(plain, plain_again);
    let copies = fake
        .channel_messages(Snowflake(demo::OPS))
        .expect("channel")
        .iter()
        .filter(|m| m["content"] == "part one")
        .count();
    assert_eq!(copies, 3);
}
