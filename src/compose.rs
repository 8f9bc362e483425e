//! The playground's compose box: the console posts as a demo user through the in-process fake
//! Discord (server side; the browser never reaches the fake).

use std::sync::Arc;

use entity::Snowflake;
use fake_discord::{FakeDiscord, UserMessage};
use serde_json::Value;
use switchboard_console::{Compose, ComposeFuture, ComposeUser};

/// Posts through the fake as one of the demo world's users.
pub struct FakeCompose {
    fake: Arc<FakeDiscord>,
}

impl FakeCompose {
    /// Posts through `fake`.
    pub fn new(fake: Arc<FakeDiscord>) -> FakeCompose {
        FakeCompose { fake }
    }
}

impl Compose for FakeCompose {
    fn users(&self) -> Vec<ComposeUser> {
        demo_world::USERS
            .iter()
            .map(|user| ComposeUser {
                id: Snowflake(user.id),
                name: user.global_name.unwrap_or(user.username).to_owned(),
            })
            .collect()
    }

    fn post(&self, channel: Snowflake, author: Snowflake, content: String) -> ComposeFuture<'_> {
        let result = self
            .fake
            .post_message(UserMessage {
                channel_id: channel,
                author_id: author,
                content,
                reply_to: None,
                attachments: Vec::new(),
            })
            .map_err(|error| error.to_string());
        Box::pin(async move { result.map(|message: Value| message) })
    }
}
