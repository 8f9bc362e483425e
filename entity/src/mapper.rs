//! The two rewrites: agent text → Discord markup (outbound) and back (inbound).

use std::borrow::Cow;

use memchr::{memchr, memchr2};

use crate::aliases::{is_token_byte, is_word_byte};
use crate::code::segments;
use crate::{AliasKind, Aliases, NameDirectory, Snowflake};
use protocol::parse_digits;

/// What a mention token resolved to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mention {
    /// A user: `<@id>` in Discord text (`<@!id>` is read as the same).
    User(Snowflake),
    /// A role: `<@&id>` in Discord text.
    Role(Snowflake),
    /// A channel or thread: `<#id>` in Discord text.
    Channel(Snowflake),
}

impl Mention {
    fn write_discord(self, out: &mut String) {
        let (prefix, id) = match self {
            Mention::User(id) => ("<@", id),
            Mention::Role(id) => ("<@&", id),
            Mention::Channel(id) => ("<#", id),
        };
        out.push_str(prefix);
        push_id(out, id);
        out.push('>');
    }
}

/// Appends an id's decimal digits without going through `fmt`.
fn push_id(out: &mut String, id: Snowflake) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut value = id.0;
    loop {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        out.push(char::from(d));
    }
}

/// Why an `@name` or `#token` of agent text was left as text, or may not be who the writer meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoteKind {
    /// `@name` is no configured alias, known user or known role: left as text.
    UnknownName,
    /// `#token` is no configured session or known channel: left as text.
    UnknownChannel,
    /// `@everyone` or `@here`: never a mention, left as text.
    MassMention,
    /// Several users (or channels) go by this name: it became the mention of the one named
    /// first (the [`Note::candidates`] list them all).
    Ambiguous,
}

/// One `@name` or `#token` of agent text the outbound rewrite has something to say about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// The token as written (`@Nobody`, `#nochannel`).
    pub token: String,
    /// What about it.
    pub kind: NoteKind,
    /// What it became, when it became a mention.
    pub mention: Option<Mention>,
    /// For [`NoteKind::Ambiguous`]: every id that goes by the name, the chosen one first.
    pub candidates: Vec<Snowflake>,
}

/// The outbound rewrite with what it noticed: [`Mapper::outbound_noted`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outbound<'t> {
    /// The Discord text.
    pub text: Cow<'t, str>,
    /// The tokens left as text or ambiguous, each once, in order; at most [`MAX_NOTES`].
    pub notes: Vec<Note>,
    /// The channel mentions written, each once, with the token that made each; at most
    /// [`MAX_NOTES`].
    pub channels: Vec<(String, Snowflake)>,
    /// Distinct tokens noticed beyond [`MAX_NOTES`] (notes and channels together).
    pub more: usize,
}

/// Most notes (and channel mentions) an [`Outbound`] lists; the rest are counted.
pub const MAX_NOTES: usize = 20;

impl Outbound<'_> {
    fn seen(&self, token: &str) -> bool {
        self.notes.iter().any(|n| n.token == token) || self.channels.iter().any(|(t, _)| t == token)
    }

    fn room(&mut self) -> bool {
        if self.notes.len() + self.channels.len() < MAX_NOTES {
            true
        } else {
            self.more += 1;
            false
        }
    }

    fn note(
        &mut self,
        token: &str,
        kind: NoteKind,
        mention: Option<Mention>,
        candidates: Vec<Snowflake>,
    ) {
        if !self.seen(token) && self.room() {
            self.notes.push(Note {
                token: token.to_owned(),
                kind,
                mention,
                candidates,
            });
        }
    }

    fn channel(&mut self, token: &str, id: Snowflake) {
        if !self.seen(token) && self.room() {
            self.channels.push((token.to_owned(), id));
        }
    }
}

/// Rewrites text in both directions with the configured aliases and the names learned at run time.
#[derive(Clone, Copy)]
pub struct Mapper<'a> {
    pub(crate) aliases: &'a Aliases,
    pub(crate) names: &'a dyn NameDirectory,
}

const USER_FALLBACK: &str = "user_";
const ROLE_FALLBACK: &str = "role_";
const CHANNEL_FALLBACK: &str = "channel_";

fn fallback_id(key: &str, prefix: &str) -> Option<Snowflake> {
    key.strip_prefix(prefix)
        .and_then(|digits| parse_digits(digits.as_bytes()))
        .map(Snowflake)
}

/// End of the mention token starting at `start`: token bytes, minus trailing dots (punctuation).
fn token_end(bytes: &[u8], start: usize, limit: usize) -> usize {
    let mut end = start;
    while end < limit && is_token_byte(bytes[end]) {
        end += 1;
    }
    while end > start && bytes[end - 1] == b'.' {
        end -= 1;
    }
    end
}

/// True when `token`, written after `@` or `#` and followed by a space, scans back as exactly itself.
fn is_whole_token(token: &str) -> bool {
    !token.is_empty() && token.bytes().all(is_token_byte) && !token.ends_with('.')
}

fn lowercase_into(buf: &mut String, token: &str) {
    buf.clear();
    buf.push_str(token);
    buf.make_ascii_lowercase();
}

impl<'a> Mapper<'a> {
    /// A mapper over the configured aliases and the names learned at run time (pass
    /// [`NoNames`](crate::NoNames) when there are none).
    pub fn new(aliases: &'a Aliases, names: &'a dyn NameDirectory) -> Self {
        Mapper { aliases, names }
    }

    /// Resolves the token after `@` (already lowercased): the `user_<id>`/`role_<id>` fallback
    /// forms, configured users, configured roles, learned users, learned roles — in that order.
    /// `@everyone` and `@here` never resolve.
    pub fn resolve_at_key(&self, key: &str) -> Option<Mention> {
        if key == "everyone" || key == "here" {
            return None;
        }
        if let Some(id) = fallback_id(key, USER_FALLBACK) {
            return Some(Mention::User(id));
        }
        if let Some(id) = fallback_id(key, ROLE_FALLBACK) {
            return Some(Mention::Role(id));
        }
        self.aliases
            .at_mention_for_key(key)
            .or_else(|| self.names.user_by_key(key).map(Mention::User))
            .or_else(|| self.names.role_by_key(key).map(Mention::Role))
    }

    /// Resolves the token after `#` (already lowercased): `channel_<id>`, configured session
    /// tokens, learned channel names.
    pub fn resolve_hash_key(&self, key: &str) -> Option<Mention> {
        fallback_id(key, CHANNEL_FALLBACK)
            .or_else(|| self.aliases.id_for_key(AliasKind::Session, key))
            .or_else(|| self.names.channel_by_key(key))
            .map(Mention::Channel)
    }

    /// Agent text → Discord text: `@name` → `<@id>` / `<@&id>`, `#token` → `<#id>`.
    /// Code spans and fences, unknown names, `@everyone` and `@here` are left exactly as written.
    pub fn outbound<'t>(&self, text: &'t str) -> Cow<'t, str> {
        self.rewrite(text, None)
    }

    /// [`Mapper::outbound`], also saying which tokens were left as text and why, which names
    /// several users or channels share, and which channels were mentioned.
    pub fn outbound_noted<'t>(&self, text: &'t str) -> Outbound<'t> {
        let mut report = Outbound {
            text: Cow::Borrowed(""),
            notes: Vec::new(),
            channels: Vec::new(),
            more: 0,
        };
        report.text = self.rewrite(text, Some(&mut report));
        report
    }

    /// Every id other than the chosen one that also goes by `key` among the learned names, when
    /// the mention was found there (configured aliases and `user_<id>` forms are exact).
    fn others(&self, key: &str, mention: Mention) -> Vec<Snowflake> {
        let exact = fallback_id(key, USER_FALLBACK).is_some()
            || fallback_id(key, ROLE_FALLBACK).is_some()
            || fallback_id(key, CHANNEL_FALLBACK).is_some();
        match mention {
            _ if exact => Vec::new(),
            Mention::User(id) if self.aliases.at_mention_for_key(key).is_none() => {
                let mut all = self.names.users_by_key(key);
                all.extend(self.names.role_by_key(key));
                all.retain(|other| *other != id);
                all
            }
            Mention::Channel(id) if self.aliases.id_for_key(AliasKind::Session, key).is_none() => {
                let mut all = self.names.channels_by_key(key);
                all.retain(|other| *other != id);
                all
            }
            _ => Vec::new(),
        }
    }

    fn rewrite<'t>(&self, text: &'t str, mut report: Option<&mut Outbound<'_>>) -> Cow<'t, str> {
        let bytes = text.as_bytes();
        let mut out: Option<String> = None;
        let mut copied = 0;
        let mut key = String::new();
        for segment in segments(text).filter(|s| !s.code) {
            let mut pos = segment.start;
            while let Some(offset) = memchr2(b'@', b'#', &bytes[pos..segment.end]) {
                let sigil = pos + offset;
                pos = sigil + 1;
                if sigil > 0 && (is_word_byte(bytes[sigil - 1]) || bytes[sigil - 1] == b'<') {
                    continue;
                }
                let end = token_end(bytes, sigil + 1, segment.end);
                if end == sigil + 1 {
                    continue;
                }
                lowercase_into(&mut key, &text[sigil + 1..end]);
                let at = bytes[sigil] == b'@';
                let mention = if at {
                    self.resolve_at_key(&key)
                } else {
                    self.resolve_hash_key(&key)
                };
                if let Some(report) = report.as_deref_mut() {
                    let token = &text[sigil..end];
                    match mention {
                        None if at && (key == "everyone" || key == "here") => {
                            report.note(token, NoteKind::MassMention, None, Vec::new());
                        }
                        None if at => report.note(token, NoteKind::UnknownName, None, Vec::new()),
                        None => report.note(token, NoteKind::UnknownChannel, None, Vec::new()),
                        Some(found) => {
                            let others = self.others(&key, found);
                            if !others.is_empty() {
                                let (Mention::User(id) | Mention::Role(id) | Mention::Channel(id)) =
                                    found;
                                let candidates = std::iter::once(id).chain(others).collect();
                                report.note(token, NoteKind::Ambiguous, Some(found), candidates);
                            }
                            if let Mention::Channel(id) = found {
                                report.channel(token, id);
                            }
                        }
                    }
                }
                if let Some(mention) = mention {
                    let out = out.get_or_insert_with(|| String::with_capacity(text.len() + 32));
                    out.push_str(&text[copied..sigil]);
                    mention.write_discord(out);
                    copied = end;
                }
                pos = end;
            }
        }
        finish(text, out, copied)
    }

    /// Discord text → agent text: `<@id>`/`<@!id>` → `@name`, `<@&id>` → `@role`, `<#id>` →
    /// `#token`. A name is only written when the outbound rewrite maps it back to the same id;
    /// otherwise the fallback form (`@user_<id>`, `@role_<id>`, `#channel_<id>`) is.
    pub fn inbound<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let bytes = text.as_bytes();
        let mut out: Option<String> = None;
        let mut copied = 0;
        for segment in segments(text).filter(|s| !s.code) {
            let mut pos = segment.start;
            while let Some(offset) = memchr(b'<', &bytes[pos..segment.end]) {
                let open = pos + offset;
                pos = open + 1;
                let Some((mention, end)) = parse_discord_mention(bytes, open, segment.end) else {
                    continue;
                };
                let out = out.get_or_insert_with(|| String::with_capacity(text.len() + 32));
                out.push_str(&text[copied..open]);
                self.write_readable(mention, out);
                copied = end;
                pos = end;
            }
        }
        finish(text, out, copied)
    }

    /// The readable form of a mention, as the inbound rewrite writes it (`@stanley`, `#ops`).
    pub fn readable(&self, mention: Mention) -> String {
        let mut out = String::new();
        self.write_readable(mention, &mut out);
        out
    }

    fn write_readable(&self, mention: Mention, out: &mut String) {
        match mention {
            Mention::User(id) => {
                out.push('@');
                let configured = self.aliases.alias_for(AliasKind::User, id);
                if let Some(alias) = configured.filter(|a| self.names_back(a, mention)) {
                    out.push_str(alias);
                    return;
                }
                let mut found = false;
                self.names.find_user_name(id, &mut |name| {
                    let token = spaces_as_hyphens(name);
                    found = self.names_back(&token, mention);
                    if found {
                        out.push_str(&token);
                    }
                    found
                });
                if !found {
                    out.push_str(USER_FALLBACK);
                    push_id(out, id);
                }
            }
            Mention::Role(id) => {
                out.push('@');
                let configured = self.aliases.alias_for(AliasKind::Role, id);
                self.write_named(
                    out,
                    mention,
                    configured,
                    || self.names.role_name(id),
                    ROLE_FALLBACK,
                );
            }
            Mention::Channel(id) => {
                out.push('#');
                let configured = self.aliases.alias_for(AliasKind::Session, id);
                self.write_named(
                    out,
                    mention,
                    configured,
                    || self.names.channel_name(id),
                    CHANNEL_FALLBACK,
                );
            }
        }
    }

    /// Writes the configured alias, else the learned name, else `fallback<id>` — the first that
    /// the outbound rewrite maps back to `mention`.
    fn write_named(
        &self,
        out: &mut String,
        mention: Mention,
        configured: Option<&str>,
        learned: impl FnOnce() -> Option<String>,
        fallback: &str,
    ) {
        if let Some(alias) = configured.filter(|a| self.names_back(a, mention)) {
            out.push_str(alias);
            return;
        }
        if let Some(name) = learned() {
            let token = spaces_as_hyphens(&name);
            if self.names_back(&token, mention) {
                out.push_str(&token);
                return;
            }
        }
        let (Mention::User(id) | Mention::Role(id) | Mention::Channel(id)) = mention;
        out.push_str(fallback);
        push_id(out, id);
    }

    /// True when the outbound rewrite turns `token` back into exactly `mention`.
    fn names_back(&self, token: &str, mention: Mention) -> bool {
        if !is_whole_token(token) {
            return false;
        }
        let mut buffer = [0u8; 64];
        let owned;
        let key = match buffer.get_mut(..token.len()) {
            Some(slot) => {
                slot.copy_from_slice(token.as_bytes());
                slot.make_ascii_lowercase();
                // Whole tokens are ASCII, so the lowercased bytes are valid UTF-8.
                std::str::from_utf8(slot).unwrap_or_default()
            }
            None => {
                owned = token.to_ascii_lowercase();
                owned.as_str()
            }
        };
        let resolved = match mention {
            Mention::Channel(_) => self.resolve_hash_key(key),
            Mention::User(_) | Mention::Role(_) => self.resolve_at_key(key),
        };
        resolved == Some(mention)
    }
}

/// Every mention in Discord text (`<@id>`, `<@!id>`, `<@&id>`, `<#id>`), in order and once
/// each, outside code spans and fences — the ones the inbound rewrite renders. What a message
/// mentions, whatever the mentioned are called now.
pub fn discord_mentions(text: &str) -> Vec<Mention> {
    let bytes = text.as_bytes();
    let mut found: Vec<Mention> = Vec::new();
    for segment in segments(text).filter(|s| !s.code) {
        let mut pos = segment.start;
        while let Some(offset) = memchr(b'<', &bytes[pos..segment.end]) {
            let open = pos + offset;
            pos = open + 1;
            if let Some((mention, end)) = parse_discord_mention(bytes, open, segment.end) {
                if !found.contains(&mention) {
                    found.push(mention);
                }
                pos = end;
            }
        }
    }
    found
}

/// A name as a token: each space written as `-`.
fn spaces_as_hyphens(name: &str) -> Cow<'_, str> {
    if name.contains(' ') {
        Cow::Owned(name.replace(' ', "-"))
    } else {
        Cow::Borrowed(name)
    }
}

fn finish(text: &str, out: Option<String>, copied: usize) -> Cow<'_, str> {
    match out {
        None => Cow::Borrowed(text),
        Some(mut out) => {
            out.push_str(&text[copied..]);
            Cow::Owned(out)
        }
    }
}

/// Parses `<@id>`, `<@!id>`, `<@&id>` or `<#id>` at `open`; returns the mention and the index
/// just past `>`.
fn parse_discord_mention(bytes: &[u8], open: usize, limit: usize) -> Option<(Mention, usize)> {
    let mut at = open + 1;
    let kind = match bytes.get(at)? {
        b'@' => {
            at += 1;
            match bytes.get(at) {
                Some(b'&') => {
                    at += 1;
                    AliasKind::Role
                }
                Some(b'!') => {
                    at += 1;
                    AliasKind::User
                }
                _ => AliasKind::User,
            }
        }
        b'#' => {
            at += 1;
            AliasKind::Session
        }
        _ => return None,
    };
    let digits_start = at;
    while at < limit && bytes[at].is_ascii_digit() {
        at += 1;
    }
    if at >= limit || bytes[at] != b'>' {
        return None;
    }
    let id = Snowflake(parse_digits(&bytes[digits_start..at])?);
    let mention = match kind {
        AliasKind::User => Mention::User(id),
        AliasKind::Role => Mention::Role(id),
        AliasKind::Session => Mention::Channel(id),
    };
    Some((mention, at + 1))
}
