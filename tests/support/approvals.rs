//! Approvals end to end: a `tools` call left waiting for an approval in the background, the
//! approval card the fake Discord holds, and a click on its buttons.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fake_discord::ComponentClick;
use serde_json::Value;

use super::{poll, tools_bin, wait_bounded, Fake, Switchboard};

/// How long a call, a card or the bot's answer to a click may take.
const WAIT: Duration = Duration::from_secs(20);

/// A `tools` call running in the background, its stderr lines arriving on a channel.
pub struct Background {
    child: Child,
    stderr: mpsc::Receiver<String>,
    stdout: std::thread::JoinHandle<String>,
}

impl Background {
    pub fn start(sb: &Switchboard, args: &[&str]) -> Background {
        let mut child = Command::new(tools_bin())
            .args(args)
            .env("SWITCHBOARD_URL", &sb.url)
            .env("SWITCHBOARD_TOKEN", &sb.token)
            .env_remove("SWITCHBOARD_TOOL_CALL_ID")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tools");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut out = child.stdout.take().expect("stdout");
        let stdout = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut out, &mut text);
            text
        });
        Background {
            child,
            stderr: lines,
            stdout,
        }
    }

    /// Waits for the stderr line saying the call waits for an approval; its id.
    pub fn waiting_line(&self) -> (String, String) {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .stderr
                .recv_timeout(left)
                .expect("tools says it waits for an approval");
            if line.starts_with("waiting for approval in ") {
                let id = line
                    .split("(id ")
                    .nth(1)
                    .and_then(|rest| rest.split(')').next())
                    .expect("an id in the waiting line")
                    .to_owned();
                return (line, id);
            }
        }
    }

    pub fn still_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// Exit code, stdout, the rest of stderr.
    pub fn finish(mut self) -> (Option<i32>, String, String) {
        let status = wait_bounded(&mut self.child, WAIT).expect("tools finishes");
        let stdout = self.stdout.join().unwrap_or_default();
        let stderr: Vec<String> = self.stderr.try_iter().collect();
        (status.code(), stdout, stderr.join("\n"))
    }
}

/// The approval card for `id` as the fake holds it.
pub fn card(fake: &Fake, channel: u64, id: &str) -> Value {
    poll("the approval card", WAIT, || {
        fake.fake
            .channel_messages(channel.into())
            .ok()?
            .into_iter()
            .find(|m| {
                m["components"][0]["components"][0]["custom_id"]
                    == format!("sb:approve:{id}").as_str()
            })
    })
}

/// Clicks approve (or deny) on `card` as `user`; the bot's answer to the click.
pub fn click(fake: &Fake, card: &Value, user: u64, approve: bool) -> Value {
    let id = card["components"][0]["components"][if approve { 0 } else { 1 }]["custom_id"]
        .as_str()
        .expect("custom_id")
        .to_owned();
    let clicked = fake
        .fake
        .click_component(ComponentClick {
            message_id: card["id"]
                .as_str()
                .expect("id")
                .parse::<u64>()
                .expect("id")
                .into(),
            user_id: user.into(),
            custom_id: id,
        })
        .expect("the fake takes the click");
    let interaction = clicked["id"].as_str().expect("interaction id").to_owned();
    poll("the bot answers the click", WAIT, || {
        let shown = fake
            .fake
            .interaction(interaction.parse::<u64>().expect("id").into())
            .ok()?;
        (!shown["response"].is_null()).then_some(shown)
    })
}
