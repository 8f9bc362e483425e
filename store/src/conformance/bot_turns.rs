//! The conformance tests of the loop guard's counts: one count per session for every node,
//! raced counts never answer past the limit nor say why twice, a person's message starts
//! the count again, and the count survives a reopen of a durable store.

use futures_executor::block_on;

use super::agents::race;
use super::capabilities::other_node;
use super::{id, Fixture, MakePlace, CHANNEL, OTHER};
use crate::{BotMessage, BotTurn, StoreErrorKind};
use entity::Snowflake;

fn bot(
    session: Snowflake,
    message: Snowflake,
    person_since: Option<Snowflake>,
    max: u32,
) -> BotMessage {
    BotMessage {
        session,
        message,
        person_since,
        max,
    }
}

/// Bot turns counted on two nodes add up; the first stop says why, later ones are quiet; a
/// person's newer message starts again, an older bot message is answered uncounted; other
/// sessions keep counts of their own; a durable store keeps the count through a reopen.
pub fn bot_turns_counted_on_two_nodes_add_up_until_a_person_writes(make: MakePlace<'_>) {
    let mut f = Fixture::default(make);
    let second = other_node(&f);
    let count = |backend: &dyn crate::Backend, n: u64, person: Option<u64>| {
        block_on(backend.count_bot_turn(bot(CHANNEL, id(n), person.map(id), 3))).expect("a count")
    };
    assert_eq!(count(&*f.backend, 10, None), BotTurn::Answer);
    assert_eq!(count(&*second, 11, None), BotTurn::Answer);
    assert_eq!(count(&*f.backend, 12, None), BotTurn::Answer);
    assert_eq!(count(&*second, 13, None), BotTurn::StopAndSay);
    assert_eq!(count(&*f.backend, 14, None), BotTurn::Stop);
    assert_eq!(
        block_on(f.backend.count_bot_turn(bot(OTHER, id(15), None, 3))).unwrap(),
        BotTurn::Answer,
        "another session counts on its own"
    );
    if f.place.durable() {
        f.reopen();
        assert_eq!(count(&*f.backend, 16, None), BotTurn::Stop, "kept");
    }
    // A person wrote message 20: the count starts again there.
    assert_eq!(count(&*f.backend, 21, Some(20)), BotTurn::Answer);
    let second = other_node(&f);
    assert_eq!(count(&*second, 22, None), BotTurn::Answer);
    // A bot message from before the person wrote is answered and not counted.
    assert_eq!(count(&*second, 19, None), BotTurn::Answer);
    assert_eq!(count(&*f.backend, 23, Some(18)), BotTurn::Answer);
    assert_eq!(count(&*f.backend, 24, None), BotTurn::StopAndSay);
}

/// Counts raced from many threads on two nodes: exactly the limit are answered, exactly one
/// stop says why.
pub fn bot_turns_raced_answer_the_limit_and_say_why_once(make: MakePlace<'_>) {
    let f = Fixture::default(make);
    let turns = race(&f, 12, |backend, i| {
        block_on(backend.count_bot_turn(bot(CHANNEL, id(100 + i as u64), None, 4)))
            .expect("a count")
    });
    let of = |turn| turns.iter().filter(|t| **t == turn).count();
    assert_eq!(of(BotTurn::Answer), 4, "{turns:?}");
    assert_eq!(of(BotTurn::StopAndSay), 1, "{turns:?}");
    assert_eq!(of(BotTurn::Stop), 7, "{turns:?}");
    block_on(f.backend.close()).expect("close");
    let closed = block_on(f.backend.count_bot_turn(bot(CHANNEL, id(200), None, 4)));
    assert_eq!(closed.map_err(|e| e.kind()), Err(StoreErrorKind::Closed));
}
