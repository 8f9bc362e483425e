//! The compact form a message takes in the read cache: 72 bytes plus one allocation for its
//! text (content and readable text back to back, or once when they are equal). Channel and id
//! are the keys of the maps that hold it.

use std::sync::atomic::{AtomicU64, Ordering};

use switchboard_records::time::{edit_wins, format_micros, instant_micros, parse_micros};
use switchboard_records::{Attachment, Message, Reaction, Snowflake};

/// A timestamp kept as microseconds since the Unix epoch when Discord's string is exactly
/// what [`format_micros`] gives back; otherwise the string itself is kept in [`Extras`].
const RAW_TIMESTAMP: i64 = i64::MIN;
/// No edited timestamp.
const NO_TIMESTAMP: i64 = i64::MIN + 1;

const FLAG_AUTHOR_IS_BOT: u8 = 1;
/// `text` equals `content`; the body holds it once.
const FLAG_TEXT_IS_CONTENT: u8 = 2;

/// The rarely-present parts of a message, boxed so a plain message pays one pointer for them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Extras {
    attachments: Vec<Attachment>,
    reactions: Vec<Reaction>,
    raw_timestamp: Option<Box<str>>,
    raw_edited_timestamp: Option<Box<str>>,
    /// The canonical text when `content` is too long for `content_len` (never in practice:
    /// Discord caps messages at 4,000 characters).
    long_text: Option<Box<str>>,
}

impl Extras {
    fn is_empty(&self) -> bool {
        *self == Extras::default()
    }
}

/// Revisions handed out in this process: one counter for every store, so a number names one
/// state of one message even across stores.
static REVISIONS: AtomicU64 = AtomicU64::new(1);

fn next_revision() -> u64 {
    REVISIONS.fetch_add(1, Ordering::Relaxed)
}

/// A message in the hot maps: 72 bytes plus one allocation for its text (content and
/// canonical text back to back, or once when they are equal). Channel and id are the keys of
/// the maps that hold it.
#[derive(Debug, Clone)]
pub(crate) struct HotMessage {
    /// A new number for each state it takes (stored, edited, its reactions changed): readers
    /// cache what they derive under its id and this, and look it up without building the
    /// message (issue 22 §5; hashing the message per read cost more than the cache saved).
    revision: u64,
    author_id: u64,
    /// 0 when the message replies to nothing.
    reply_to: u64,
    timestamp: i64,
    edited_timestamp: i64,
    body: Box<str>,
    content_len: u32,
    flags: u8,
    extras: Option<Box<Extras>>,
}

impl HotMessage {
    pub(crate) fn new(message: &Message) -> HotMessage {
        let mut extras = Extras {
            attachments: message.attachments.clone(),
            reactions: message.reactions.clone(),
            ..Extras::default()
        };
        let timestamp = match parse_micros(&message.timestamp) {
            Some(micros) => micros,
            None => {
                extras.raw_timestamp = Some(message.timestamp.as_str().into());
                RAW_TIMESTAMP
            }
        };
        let edited_timestamp = encode_edited(message.edited_timestamp.as_deref(), &mut extras);
        let mut flags = 0;
        if message.author_is_bot {
            flags |= FLAG_AUTHOR_IS_BOT;
        }
        let (body, content_len) =
            encode_body(&message.content, &message.text, &mut flags, &mut extras);
        HotMessage {
            revision: next_revision(),
            author_id: message.author_id.0,
            reply_to: message.reply_to.map_or(0, |id| id.0),
            timestamp,
            edited_timestamp,
            body,
            content_len,
            flags,
            extras: (!extras.is_empty()).then(|| Box::new(extras)),
        }
    }

    pub(crate) fn to_stored(&self, id: Snowflake, channel_id: Snowflake) -> Message {
        let extras = self.extras.as_deref();
        Message {
            id,
            channel_id,
            author_id: Snowflake(self.author_id),
            author_is_bot: self.flags & FLAG_AUTHOR_IS_BOT != 0,
            content: self.content().to_owned(),
            text: self.text().to_owned(),
            timestamp: decode_timestamp(
                self.timestamp,
                extras.and_then(|e| e.raw_timestamp.as_deref()),
            )
            .unwrap_or_default(),
            edited_timestamp: decode_timestamp(
                self.edited_timestamp,
                extras.and_then(|e| e.raw_edited_timestamp.as_deref()),
            ),
            reply_to: (self.reply_to != 0).then_some(Snowflake(self.reply_to)),
            attachments: extras.map(|e| e.attachments.clone()).unwrap_or_default(),
            reactions: extras.map(|e| e.reactions.clone()).unwrap_or_default(),
        }
    }

    pub(crate) fn author_id(&self) -> u64 {
        self.author_id
    }

    /// Changes whenever what readers see of it changes; never repeats within the process.
    pub(crate) fn revision(&self) -> u64 {
        self.revision
    }

    /// Whether an edit stamped `edited` may replace what this message holds
    /// ([`edit_wins`]).
    pub(crate) fn accepts_edit(&self, edited: Option<&str>) -> bool {
        let held = match self.edited_timestamp {
            NO_TIMESTAMP => None,
            RAW_TIMESTAMP => self
                .extras
                .as_deref()
                .and_then(|e| e.raw_edited_timestamp.as_deref())
                .and_then(instant_micros),
            micros => Some(micros),
        };
        edit_wins(held, edited)
    }

    pub(crate) fn content(&self) -> &str {
        self.body
            .get(..self.content_len as usize)
            .unwrap_or(&self.body)
    }

    pub(crate) fn text(&self) -> &str {
        if let Some(text) = self.extras.as_deref().and_then(|e| e.long_text.as_deref()) {
            return text;
        }
        if self.flags & FLAG_TEXT_IS_CONTENT != 0 {
            return self.content();
        }
        self.body
            .get(self.content_len as usize..)
            .unwrap_or_default()
    }

    /// Replaces content and text and sets the edited timestamp.
    pub(crate) fn edit(&mut self, content: &str, text: &str, edited_timestamp: Option<&str>) {
        let mut extras = self.extras.take().map(|e| *e).unwrap_or_default();
        extras.long_text = None;
        self.flags &= !FLAG_TEXT_IS_CONTENT;
        let (body, content_len) = encode_body(content, text, &mut self.flags, &mut extras);
        self.body = body;
        self.content_len = content_len;
        self.edited_timestamp = encode_edited(edited_timestamp, &mut extras);
        self.set_extras(extras);
        self.revision = next_revision();
    }

    pub(crate) fn reactions(&self) -> &[Reaction] {
        self.extras.as_deref().map_or(&[], |e| &e.reactions)
    }

    pub(crate) fn set_reactions(&mut self, reactions: Vec<Reaction>) {
        let mut extras = self.extras.take().map(|e| *e).unwrap_or_default();
        extras.reactions = reactions;
        self.set_extras(extras);
        self.revision = next_revision();
    }

    fn set_extras(&mut self, extras: Extras) {
        self.extras = (!extras.is_empty()).then(|| Box::new(extras));
    }
}

fn encode_edited(edited: Option<&str>, extras: &mut Extras) -> i64 {
    extras.raw_edited_timestamp = None;
    match edited {
        None => NO_TIMESTAMP,
        Some(edited) => match parse_micros(edited) {
            Some(micros) => micros,
            None => {
                extras.raw_edited_timestamp = Some(edited.into());
                RAW_TIMESTAMP
            }
        },
    }
}

fn encode_body(content: &str, text: &str, flags: &mut u8, extras: &mut Extras) -> (Box<str>, u32) {
    let Ok(content_len) = u32::try_from(content.len()) else {
        extras.long_text = Some(text.into());
        return (content.into(), u32::MAX);
    };
    if content == text {
        *flags |= FLAG_TEXT_IS_CONTENT;
        return (content.into(), content_len);
    }
    let mut body = String::with_capacity(content.len() + text.len());
    body.push_str(content);
    body.push_str(text);
    (body.into_boxed_str(), content_len)
}

fn decode_timestamp(value: i64, raw: Option<&str>) -> Option<String> {
    match value {
        NO_TIMESTAMP => None,
        RAW_TIMESTAMP => Some(raw.unwrap_or_default().to_owned()),
        micros => format_micros(micros),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(content: &str, text: &str, timestamp: &str) -> Message {
        Message {
            id: Snowflake(10),
            channel_id: Snowflake(1),
            author_id: Snowflake(7),
            author_is_bot: true,
            content: content.into(),
            text: text.into(),
            timestamp: timestamp.into(),
            edited_timestamp: None,
            reply_to: Some(Snowflake(9)),
            attachments: Vec::new(),
            reactions: Vec::new(),
        }
    }

    #[test]
    fn hot_message_is_72_bytes() {
        assert_eq!(std::mem::size_of::<HotMessage>(), 72);
    }

    #[test]
    fn every_change_a_reader_sees_gives_a_new_revision() {
        let mut hot = HotMessage::new(&message("a", "a", "2026-11-22T12:00:00Z"));
        let again = HotMessage::new(&message("a", "a", "2026-11-22T12:00:00Z"));
        assert_ne!(hot.revision(), again.revision(), "one number per state");
        let stored = hot.revision();
        hot.edit("b", "b", Some("2026-11-22T12:01:00Z"));
        let edited = hot.revision();
        assert_ne!(edited, stored);
        hot.set_reactions(vec![Reaction {
            emoji: "👍".into(),
            count: 1,
            me: false,
        }]);
        assert_ne!(hot.revision(), edited);
        assert!(hot.revision() > stored, "never repeats");
    }

    #[test]
    fn other_timestamp_forms_are_kept_verbatim() {
        for ts in [
            "2026-11-22T12:00:00Z",
            "2026-11-22T12:00:00+00:00",
            "2026-11-22T12:00:00.000000+01:00",
            "2026-02-30T12:00:00.000000+00:00",
            "not a time",
            "",
        ] {
            assert_eq!(parse_micros(ts), None, "{ts}");
            let stored = message("a", "a", ts);
            assert_eq!(
                HotMessage::new(&stored).to_stored(stored.id, stored.channel_id),
                stored
            );
        }
    }

    #[test]
    fn body_holds_content_and_text() {
        let same = message("hello", "hello", "2026-11-22T12:00:00.000000+00:00");
        let hot = HotMessage::new(&same);
        assert_eq!(&*hot.body, "hello");
        assert_eq!(hot.to_stored(same.id, same.channel_id), same);

        let differs = message("hi <@7>", "hi @bob", "2026-11-22T12:00:00.000000+00:00");
        let mut hot = HotMessage::new(&differs);
        assert!(hot.extras.is_none());
        assert_eq!((hot.content(), hot.text()), ("hi <@7>", "hi @bob"));
        hot.edit("same", "same", Some("2026-11-22T12:00:01.000000+00:00"));
        assert_eq!((hot.content(), hot.text()), ("same", "same"));
        hot.edit("x <@7>", "x @bob", Some("later"));
        let back = hot.to_stored(differs.id, differs.channel_id);
        assert_eq!(
            (back.content.as_str(), back.text.as_str()),
            ("x <@7>", "x @bob")
        );
        assert_eq!(back.edited_timestamp.as_deref(), Some("later"));
    }
}
