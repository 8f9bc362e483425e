//! The stored types: the public rows callers hand in and get back, and the compact form a
//! message takes in the hot maps.

use chrono::{DateTime, NaiveDate, NaiveTime, SecondsFormat};
use entity::Snowflake;
use serde::{Deserialize, Serialize};

pub use switchboard_records::{
    Session as StoredSession, SessionKind, Thread as StoredThread, ThreadState,
};

/// A file attached to a message, as Discord described it; the store keeps no bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredAttachment {
    /// The file's name as uploaded, unsanitized.
    pub filename: String,
    /// Where the file is downloaded from (Discord's CDN; no bot token needed).
    pub url: String,
    /// Its size in bytes, as Discord gave it (0 when a REST answer left it out).
    pub size: u64,
    /// Its media type (`image/png`), when Discord gave one.
    pub content_type: Option<String>,
}

/// The reactions with one emoji on a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredReaction {
    /// The emoji as people read it: the character itself for a Unicode emoji (✅), `name:id`
    /// for a custom one. (Stores before schema 4 kept Unicode emoji percent-encoded, as routes
    /// write them; opening one decodes them.)
    pub emoji: String,
    /// How many users reacted with it, the bot included; never 0 (the entry goes instead).
    pub count: u32,
    /// Whether the bot itself reacted.
    pub me: bool,
}

/// A message as callers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// The message's id.
    pub id: Snowflake,
    /// The channel, thread or DM it was posted in.
    pub channel_id: Snowflake,
    /// The author's user id.
    pub author_id: Snowflake,
    /// Whether the author is a bot account (the bot itself included).
    pub author_is_bot: bool,
    /// Discord's raw text.
    pub content: String,
    /// Canonical (inbound-rewritten) text, computed by the caller.
    pub text: String,
    /// RFC 3339, as Discord sent it.
    pub timestamp: String,
    /// When it was last edited, RFC 3339 as Discord sent it; `None` if never.
    pub edited_timestamp: Option<String>,
    /// The message this one replies to (Discord's `message_reference`), if any; that message need
    /// not be cached.
    pub reply_to: Option<Snowflake>,
    /// Its files, in Discord's order.
    pub attachments: Vec<StoredAttachment>,
    /// Its reactions, one entry per emoji. A message the bot just sent starts with none.
    pub reactions: Vec<StoredReaction>,
}

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
    attachments: Vec<StoredAttachment>,
    reactions: Vec<StoredReaction>,
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

/// A message in the hot maps: 64 bytes plus one allocation for its text (content and
/// canonical text back to back, or once when they are equal). Channel and id are the keys of
/// the maps that hold it.
#[derive(Debug, Clone)]
pub(crate) struct HotMessage {
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
    pub(crate) fn new(message: &StoredMessage) -> HotMessage {
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

    pub(crate) fn to_stored(&self, id: Snowflake, channel_id: Snowflake) -> StoredMessage {
        let extras = self.extras.as_deref();
        StoredMessage {
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

    /// Whether an edit stamped `edited` may replace what this message holds: not when it holds
    /// a later edit (edits seen out of order), nor when an unedited copy arrives after an edit.
    /// A timestamp that does not parse cannot be ordered: then the later arrival wins.
    pub(crate) fn accepts_edit(&self, edited: Option<&str>) -> bool {
        let held = match self.edited_timestamp {
            NO_TIMESTAMP => return true,
            RAW_TIMESTAMP => self
                .extras
                .as_deref()
                .and_then(|e| e.raw_edited_timestamp.as_deref())
                .and_then(instant_micros),
            micros => Some(micros),
        };
        let Some(held) = held else {
            return true;
        };
        match edited {
            None => false,
            Some(edited) => instant_micros(edited).is_none_or(|new| new >= held),
        }
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
    }

    pub(crate) fn reactions(&self) -> &[StoredReaction] {
        self.extras.as_deref().map_or(&[], |e| &e.reactions)
    }

    pub(crate) fn set_reactions(&mut self, reactions: Vec<StoredReaction>) {
        let mut extras = self.extras.take().map(|e| *e).unwrap_or_default();
        extras.reactions = reactions;
        self.set_extras(extras);
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

/// Parses Discord's timestamp form `2026-11-22T12:00:00.000000+00:00` into microseconds since
/// the Unix epoch, only when formatting the result gives back exactly the same string.
pub(crate) fn parse_micros(value: &str) -> Option<i64> {
    let b = value.as_bytes();
    if b.len() != 32
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'.'
        || &b[26..] != b"+00:00"
    {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<u32> {
        let digits = b.get(range)?;
        if !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(
            digits
                .iter()
                .fold(0u32, |n, d| n * 10 + u32::from(d - b'0')),
        )
    };
    let year = i32::try_from(num(0..4)?).ok()?;
    let date = NaiveDate::from_ymd_opt(year, num(5..7)?, num(8..10)?)?;
    // Six digits of microseconds stay under a second: no leap-second form.
    let time =
        NaiveTime::from_hms_micro_opt(num(11..13)?, num(14..16)?, num(17..19)?, num(20..26)?)?;
    let total = date.and_time(time).and_utc().timestamp_micros();
    (format_micros(total).as_deref() == Some(value)).then_some(total)
}

/// Any RFC 3339 timestamp as microseconds since the Unix epoch (Discord's form the fast way),
/// to order edits; `None` when it does not parse.
pub(crate) fn instant_micros(value: &str) -> Option<i64> {
    parse_micros(value).or_else(|| {
        DateTime::parse_from_rfc3339(value)
            .ok()
            .map(|instant| instant.timestamp_micros())
    })
}

/// Formats microseconds since the Unix epoch the way Discord does; `None` outside chrono's
/// range (about the years -262144 to 262143), which [`parse_micros`] never gives.
pub(crate) fn format_micros(total: i64) -> Option<String> {
    DateTime::from_timestamp_micros(total)
        .map(|instant| instant.to_rfc3339_opts(SecondsFormat::Micros, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(content: &str, text: &str, timestamp: &str) -> StoredMessage {
        StoredMessage {
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
    fn hot_message_is_64_bytes() {
        assert_eq!(std::mem::size_of::<HotMessage>(), 64);
    }

    #[test]
    fn discord_timestamps_round_trip_through_micros() {
        for ts in [
            "2026-11-22T12:00:00.000000+00:00",
            "2015-01-01T00:00:00.123000+00:00",
            "2000-02-29T23:59:59.999999+00:00",
            "1970-01-01T00:00:00.000000+00:00",
        ] {
            let micros = parse_micros(ts).unwrap();
            assert_eq!(format_micros(micros).as_deref(), Some(ts));
        }
        assert_eq!(
            parse_micros("1970-01-01T00:00:01.000000+00:00"),
            Some(1_000_000)
        );
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
