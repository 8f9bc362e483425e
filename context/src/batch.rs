//! A burst becomes one turn: the messages that arrived while a session's run was busy are
//! answered by one run, quoted one after another with their authors, instead of one run each.
//!
//! [`batch`] takes them in arrival order and returns the batched turn (a trigger [`Message`]
//! for the request) with at most `batch_max` of them; the rest start their own runs, in
//! order. A message collected twice is answered once. Every line an untrusted author wrote
//! starts with the untrusted mark; an author is named with their id (a name proves nothing).

use std::collections::HashSet;

use protocol::Snowflake;

use crate::request::{Message, Speaker};
use crate::trust::{one_line, quote};

/// The default of `agent.batch_max`.
pub const DEFAULT_BATCH_MAX: usize = 10;

/// A message collected while the session's run was busy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// Its Discord id.
    pub message_id: Snowflake,
    /// Its author's id.
    pub author_id: Snowflake,
    /// Its author's name as shown.
    pub author_name: String,
    /// Whether its author is trusted (decided by id).
    pub trusted: bool,
    /// When it was posted.
    pub timestamp: String,
    /// What it says, readable.
    pub text: String,
}

/// One run's share of a burst.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// The messages this run answers, in arrival order: the answered-trigger record covers
    /// each of them.
    pub answered: Vec<Pending>,
    /// The batched turn for the request (empty `answered` → `None`).
    pub turn: Option<Message>,
    /// Whether any of them is untrusted (the prompt then says what the mark means).
    pub any_untrusted: bool,
    /// The messages left for their own runs, in order.
    pub rest: Vec<Pending>,
}

impl Batch {
    /// Whether this run answers the message `id` (the runner leaves these out of the
    /// transcript, since the batched turn quotes them).
    pub fn answers(&self, id: Snowflake) -> bool {
        self.answered.iter().any(|p| p.message_id == id)
    }
}

/// The first line of a batched turn of more than one message.
fn intro(count: usize) -> String {
    format!("{count} messages arrived while you were busy; answer them together, in one reply:")
}

/// Splits `pending` (arrival order) into this run's batch of at most `batch_max` (at least
/// one) and the rest.
pub fn batch(pending: Vec<Pending>, batch_max: usize) -> Batch {
    let batch_max = batch_max.max(1);
    let mut seen = HashSet::new();
    let mut answered = Vec::new();
    let mut rest = Vec::new();
    for message in pending {
        if !seen.insert(message.message_id) {
            continue;
        }
        if answered.len() < batch_max {
            answered.push(message);
        } else {
            rest.push(message);
        }
    }
    let any_untrusted = answered.iter().any(|p| !p.trusted);
    let turn = match answered.as_slice() {
        [] => None,
        [one] => Some(
            Message::new(
                Speaker::Person {
                    id: one.author_id,
                    name: one.author_name.clone(),
                    trusted: one.trusted,
                },
                Some(one.message_id),
                one.timestamp.clone(),
                one.text.clone(),
            )
            .trigger(),
        ),
        many => {
            let mut content = intro(many.len());
            content.push('\n');
            for p in many {
                content.push('\n');
                quote(
                    &mut content,
                    &format!(
                        "[{}] {} (user {}, message {}): {}",
                        p.timestamp,
                        one_line(&p.author_name),
                        p.author_id,
                        p.message_id,
                        p.text
                    ),
                    p.trusted,
                );
            }
            content.pop();
            Some(Message::rendered(
                Speaker::Switchboard,
                content,
                true,
                any_untrusted,
            ))
        }
    };
    Batch {
        answered,
        turn,
        any_untrusted,
        rest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::{is_line_break, UNTRUSTED_MARK};
    use proptest::prelude::*;

    fn pending(id: u64, trusted: bool, text: &str) -> Pending {
        Pending {
            message_id: Snowflake(1000 + id),
            author_id: Snowflake(id % 3 + 1),
            author_name: format!("user{}", id % 3),
            trusted,
            timestamp: format!("2026-01-01T00:00:{id:02}Z"),
            text: text.to_owned(),
        }
    }

    #[test]
    fn five_mentions_become_one_turn_quoting_each_with_its_author() {
        let burst: Vec<Pending> = (0..5)
            .map(|i| pending(i, true, &format!("question {i}")))
            .collect();
        let batch = batch(burst.clone(), 10);
        assert_eq!(batch.answered, burst);
        assert!(batch.rest.is_empty());
        let turn = batch.turn.expect("a turn");
        assert!(turn.is_trigger());
        assert_eq!(turn.role(), "user");
        assert!(turn
            .content()
            .starts_with("5 messages arrived while you were busy"));
        for p in &burst {
            assert!(turn.content().contains(&format!(
                "{} (user {}, message {}): {}",
                p.author_name, p.author_id, p.message_id, p.text
            )));
        }
    }

    #[test]
    fn past_batch_max_the_rest_keep_their_order_and_duplicates_are_answered_once() {
        let mut burst: Vec<Pending> = (0..13).map(|i| pending(i, true, "hi")).collect();
        burst.insert(3, pending(1, true, "hi"));
        let batch = batch(burst, 10);
        let ids = |ps: &[Pending]| ps.iter().map(|p| p.message_id.0 - 1000).collect::<Vec<_>>();
        assert_eq!(ids(&batch.answered), (0..10).collect::<Vec<_>>());
        assert_eq!(ids(&batch.rest), vec![10, 11, 12]);
        assert!(batch.answers(Snowflake(1005)) && !batch.answers(Snowflake(1011)));
    }

    #[test]
    fn one_message_is_its_own_turn_and_none_is_no_turn() {
        let batch1 = batch(vec![pending(1, false, "hello")], 0);
        let turn = batch1.turn.expect("a turn");
        assert_eq!(turn.content(), "(untrusted) user1 (user 2): hello");
        assert!(batch1.any_untrusted);
        assert!(batch(Vec::new(), 10).turn.is_none());
    }

    proptest! {
        /// Whatever an untrusted author writes, every line of the batched turn that holds
        /// their words starts with the mark.
        #[test]
        fn every_untrusted_line_of_a_batch_is_marked(
            texts in prop::collection::vec("(\\PC|[\n\r\u{0B}\u{0C}\u{85}\u{2028}\u{2029}]){0,40}", 2..6),
            names in prop::collection::vec("(\\PC|[\n\r\u{2028}]){0,12}", 2..6),
        ) {
            let burst: Vec<Pending> = texts.iter().zip(names.iter().cycle()).enumerate().map(|(i, (text, name))| Pending {
                message_id: Snowflake(i as u64 + 1),
                author_id: Snowflake(9),
                author_name: format!("{name}Ω"),
                trusted: false,
                timestamp: "t".into(),
                text: format!("Ω{}", text.replace(|c: char| !is_line_break(c), "Ω")),
            }).collect();
            let turn = batch(burst, 10).turn.expect("a turn");
            for line in turn.content().split(is_line_break) {
                if line.contains('Ω') {
                    prop_assert!(line.starts_with(UNTRUSTED_MARK), "{line:?}");
                }
            }
        }
    }
}
