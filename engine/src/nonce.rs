//! The nonces an agent run's posts carry, so that the same run executed again
//! (`agent.interrupted = "rerun"`) posts nothing it posted already: the platform is asked to
//! enforce each nonce (Discord's `enforce_nonce`), and a post whose nonce it saw in that
//! channel gives back the earlier message instead of a new one.
//!
//! A post's nonce is derived from the run's id, what the post is (its channel, the message it
//! replies to, its text, its files) and how many times the run posted that same thing before.
//! The same run posting the same parts gets the same nonces, whatever order its draft and its
//! tool calls take; a part whose text differs the second time gets a nonce of its own and is
//! posted (a plain send counter would hand a different part an earlier message's nonce, and the
//! platform would answer with the earlier message: the new one silently lost).
//!
//! Discord remembers a nonce only for a few minutes: a run taken up again after longer may post
//! its parts a second time.

use std::collections::HashMap;
use std::sync::Mutex;

use protocol::Snowflake;
use sha2::{Digest, Sha256};

use crate::surface::OutgoingMessage;

/// Most characters a nonce may have (Discord's limit).
pub const MAX_NONCE_CHARS: usize = 25;

/// The first character of every run nonce; the platform's own unique nonces start otherwise.
const RUN_NONCE_MARK: char = 'r';

/// How many different posts one run's counts are kept for; past it a run's further new posts
/// get unique nonces (they are posted, never merged), so the table stays bounded.
pub const MAX_COUNTED_POSTS: usize = 4_096;

/// What makes two posts of a run the same post: a digest of its channel, reply, text and files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PostKey([u8; 32]);

impl PostKey {
    /// The key of a post in `channel` replying to `reply_to`, with `content` and `files` (name
    /// and bytes of each).
    pub fn new<'a>(
        channel: Snowflake,
        reply_to: Option<Snowflake>,
        content: &str,
        files: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> PostKey {
        let mut hash = Sha256::new();
        hash.update(b"switchboard post v1\0");
        hash.update(channel.0.to_le_bytes());
        hash.update(reply_to.map_or(0, |id| id.0).to_le_bytes());
        field(&mut hash, content.as_bytes());
        for (name, bytes) in files {
            field(&mut hash, name.as_bytes());
            field(&mut hash, bytes);
        }
        PostKey(hash.finalize().into())
    }

    /// The key of a message about to be posted.
    pub fn of(message: &OutgoingMessage) -> PostKey {
        PostKey::new(
            message.channel_id.id(),
            message.reply_to,
            &message.content,
            message
                .files
                .iter()
                .map(|file| (file.filename.as_str(), file.content.as_slice())),
        )
    }
}

/// Length-prefixed, so that two fields never read as one.
fn field(hash: &mut Sha256, bytes: &[u8]) {
    hash.update((bytes.len() as u64).to_le_bytes());
    hash.update(bytes);
}

/// The nonce of the `occurrence`-th post (from 0) of `post` by the run `run_id`: `r` and 24
/// hex digits (96 bits of a SHA-256), 25 characters.
pub fn run_nonce(run_id: &str, post: &PostKey, occurrence: u32) -> String {
    let mut hash = Sha256::new();
    hash.update(b"switchboard run nonce v1\0");
    field(&mut hash, run_id.as_bytes());
    hash.update(post.0);
    hash.update(occurrence.to_le_bytes());
    let digest = hash.finalize();
    let mut nonce = String::with_capacity(MAX_NONCE_CHARS);
    nonce.push(RUN_NONCE_MARK);
    for byte in &digest[..(MAX_NONCE_CHARS - 1) / 2] {
        nonce.push_str(&format!("{byte:02x}"));
    }
    nonce
}

/// The posts one run made on this node, counted by [`PostKey`]: what gives each post its
/// nonce. Held by the run's capability (`auth::Capability`), so every call the run makes —
/// its draft, its answer, its tool calls over any front — counts here.
#[derive(Debug)]
pub struct RunPosts {
    counts: Mutex<Counts>,
}

#[derive(Debug)]
struct Counts {
    /// The run whose nonces the posts carry: this run's id, or the first execution's when it
    /// runs again under a new id.
    run_id: String,
    by_post: HashMap<PostKey, u32>,
}

impl RunPosts {
    /// No posts yet for the run `run_id`.
    pub fn new(run_id: &str) -> RunPosts {
        RunPosts {
            counts: Mutex::new(Counts {
                run_id: run_id.to_owned(),
                by_post: HashMap::new(),
            }),
        }
    }

    /// The run executes again what the run `first_run` executed (an interrupted run queued
    /// again under a new id): its posts carry that run's nonces. Called before the run posts
    /// anything.
    pub fn continue_run(&self, first_run: &str) {
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        first_run.clone_into(&mut counts.run_id);
        counts.by_post.clear();
    }

    /// The nonce of the next post of `post`; `None` once the run counted
    /// [`MAX_COUNTED_POSTS`] different posts (the platform then makes a unique one).
    pub fn next_nonce(&self, post: &PostKey) -> Option<String> {
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let full = counts.by_post.len() >= MAX_COUNTED_POSTS;
        let occurrence = match counts.by_post.get_mut(post) {
            Some(count) => {
                let occurrence = *count;
                *count = count.saturating_add(1);
                occurrence
            }
            None if full => return None,
            None => {
                counts.by_post.insert(*post, 1);
                0
            }
        };
        Some(run_nonce(&counts.run_id, post, occurrence))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(channel: u64, text: &str) -> PostKey {
        PostKey::new(Snowflake(channel), None, text, [])
    }

    fn allowed(nonce: &str) -> bool {
        nonce.chars().count() <= MAX_NONCE_CHARS
            && nonce.starts_with(RUN_NONCE_MARK)
            && nonce[1..]
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    }

    #[test]
    fn the_same_run_posting_the_same_parts_again_gets_the_same_nonces_in_order() {
        let parts = ["first part", "second part", "first part"];
        let nonces = |posts: &RunPosts| -> Vec<String> {
            parts
                .iter()
                .map(|text| posts.next_nonce(&key(7, text)).expect("counted"))
                .collect()
        };
        let first = nonces(&RunPosts::new("run-1"));
        let again = nonces(&RunPosts::new("run-1"));
        assert_eq!(first, again);
        // The same text posted twice by one run is two posts, two nonces.
        assert_ne!(first[0], first[2]);
        assert_ne!(first, nonces(&RunPosts::new("run-2")));
    }

    #[test]
    fn a_rerun_posting_its_parts_in_another_order_still_gets_their_nonces() {
        let once = RunPosts::new("run-1");
        let draft = once.next_nonce(&key(7, "*thinking*")).expect("counted");
        let tool = once.next_nonce(&key(7, "a tool's post")).expect("counted");
        let again = RunPosts::new("run-1");
        assert_eq!(again.next_nonce(&key(7, "a tool's post")), Some(tool));
        assert_eq!(again.next_nonce(&key(7, "*thinking*")), Some(draft));
    }

    #[test]
    fn a_run_queued_again_under_a_new_id_carries_the_first_runs_nonces() {
        let first = RunPosts::new("run-1").next_nonce(&key(7, "part"));
        let again = RunPosts::new("run-2");
        again.continue_run("run-1");
        assert_eq!(again.next_nonce(&key(7, "part")), first);
    }

    #[test]
    fn a_part_whose_text_changed_gets_a_nonce_of_its_own() {
        let once = RunPosts::new("run-1").next_nonce(&key(7, "the answer is 4"));
        let again = RunPosts::new("run-1").next_nonce(&key(7, "the answer is 5"));
        assert_ne!(once, again);
        let elsewhere = RunPosts::new("run-1").next_nonce(&key(8, "the answer is 4"));
        assert_ne!(once, elsewhere);
        let file = |bytes: &'static [u8]| {
            RunPosts::new("run-1").next_nonce(&PostKey::new(
                Snowflake(7),
                None,
                "",
                [("a.txt", bytes)],
            ))
        };
        assert_ne!(file(b"one"), file(b"two"));
    }

    #[test]
    fn a_run_past_its_bound_of_posts_gets_no_more_run_nonces() {
        let posts = RunPosts::new("run-1");
        for index in 0..MAX_COUNTED_POSTS {
            assert!(posts.next_nonce(&key(7, &index.to_string())).is_some());
        }
        assert_eq!(posts.next_nonce(&key(7, "one more")), None);
        // A post counted before keeps counting.
        assert!(posts.next_nonce(&key(7, "0")).is_some());
    }

    proptest! {
        #[test]
        fn run_nonces_are_stable_short_and_tell_posts_apart(
            run in "\\PC{0,40}",
            other_run in "\\PC{0,40}",
            channel in any::<u64>(),
            text in "\\PC{0,200}",
            other_text in "\\PC{0,200}",
            occurrence in any::<u32>(),
            other_occurrence in any::<u32>(),
        ) {
            let post = key(channel, &text);
            let nonce = run_nonce(&run, &post, occurrence);
            prop_assert!(allowed(&nonce), "{nonce}");
            prop_assert_eq!(nonce.len(), MAX_NONCE_CHARS);
            prop_assert_eq!(&nonce, &run_nonce(&run, &key(channel, &text), occurrence));
            if run != other_run {
                prop_assert_ne!(&nonce, &run_nonce(&other_run, &post, occurrence));
            }
            if text != other_text {
                prop_assert_ne!(&nonce, &run_nonce(&run, &key(channel, &other_text), occurrence));
            }
            if occurrence != other_occurrence {
                prop_assert_ne!(&nonce, &run_nonce(&run, &post, other_occurrence));
            }
        }
    }
}
