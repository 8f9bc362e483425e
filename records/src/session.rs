//! Sessions: the conversations switchboard sees. "Session" always means a Discord channel,
//! thread, DM, forum or category (never a console login).

use entity::Snowflake;
use serde::{Deserialize, Serialize};

/// What kind of conversation a session is. On the wire: `"channel"`, `"thread"`, `"dm"`,
/// `"forum"`, `"category"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SessionKind {
    /// A guild channel that is none of the kinds below: text, voice, announcement or stage
    /// (Discord types 0, 2, 5 and 13, and any type switchboard does not know).
    Channel,
    /// A thread (Discord types 10, 11, 12: announcement, public, private); its parent is the
    /// channel it lives in.
    Thread,
    /// A direct message or group DM (Discord types 1 and 3); it has no guild.
    Dm,
    /// A forum or media channel (Discord types 15 and 16): it holds threads, not messages.
    Forum,
    /// A category (Discord type 4): it groups channels and holds no messages.
    Category,
    /// An API-only session (`api:<token name>`): where the chat API's runs work when their
    /// request names no session. No Discord channel; nothing is posted there.
    Api,
}

impl SessionKind {
    /// The kind of a Discord channel type.
    pub fn from_channel_type(channel_type: u64) -> SessionKind {
        match channel_type {
            1 | 3 => SessionKind::Dm,
            4 => SessionKind::Category,
            10..=12 => SessionKind::Thread,
            15 | 16 => SessionKind::Forum,
            _ => SessionKind::Channel,
        }
    }

    /// The number stores keep the kind as (SQLite and PostgreSQL alike).
    pub fn code(self) -> u8 {
        match self {
            SessionKind::Channel => 0,
            SessionKind::Thread => 1,
            SessionKind::Dm => 2,
            SessionKind::Forum => 3,
            SessionKind::Category => 4,
            SessionKind::Api => 5,
        }
    }

    /// The kind a store's number stands for; `None` for a number no kind has.
    pub fn from_code(code: i64) -> Option<SessionKind> {
        Some(match code {
            0 => SessionKind::Channel,
            1 => SessionKind::Thread,
            2 => SessionKind::Dm,
            3 => SessionKind::Forum,
            4 => SessionKind::Category,
            5 => SessionKind::Api,
            _ => return None,
        })
    }

    /// Whether messages are posted in it (channels, threads, DMs; not forums or categories).
    pub fn holds_messages(self) -> bool {
        matches!(
            self,
            SessionKind::Channel | SessionKind::Thread | SessionKind::Dm
        )
    }
}

/// A channel, thread, DM, forum or category the bot can see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The channel's id.
    pub id: Snowflake,
    /// The guild it belongs to; `None` for a DM.
    pub guild_id: Option<Snowflake>,
    /// For a thread, the channel it lives in; for a channel, its category; `None` when it has
    /// neither, and for DMs.
    pub parent_id: Option<Snowflake>,
    /// What kind of conversation it is.
    pub kind: SessionKind,
    /// The channel's name, without `#`. For a DM, a username: the recipient's, or the author's
    /// of the first message seen there.
    pub name: String,
}

/// What is known of a thread beyond its session: its archive state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadState {
    /// Archived threads take no messages until reopened.
    pub archived: bool,
    /// Only a moderator (Manage Threads) can reopen a locked thread.
    pub locked: bool,
    /// Minutes of inactivity after which Discord archives it.
    pub auto_archive_minutes: u32,
    /// Who started it, when Discord said. Not durable: every thread payload carries it, and the
    /// gateway lists the active threads again at each start.
    pub owner_id: Option<Snowflake>,
}

impl Default for ThreadState {
    /// An open, unlocked thread that archives after a day (Discord's default).
    fn default() -> Self {
        ThreadState {
            archived: false,
            locked: false,
            auto_archive_minutes: 1440,
            owner_id: None,
        }
    }
}

/// A thread: its session and its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thread {
    /// The thread's session; `parent_id` is the channel it lives in.
    pub session: Session,
    /// Its state; the default (open) when it was never learned.
    pub state: ThreadState,
}

impl Thread {
    /// The channel the thread lives in (Discord always says; a thread without one is damaged).
    pub fn parent_id(&self) -> Option<Snowflake> {
        self.session.parent_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_lowercase_on_the_wire() {
        let kinds = [
            SessionKind::Channel,
            SessionKind::Thread,
            SessionKind::Dm,
            SessionKind::Forum,
            SessionKind::Category,
            SessionKind::Api,
        ];
        let json = serde_json::to_string(&kinds).unwrap();
        assert_eq!(
            json,
            r#"["channel","thread","dm","forum","category","api"]"#
        );
        assert_eq!(
            serde_json::from_str::<Vec<SessionKind>>(&json).unwrap(),
            kinds
        );
    }

    #[test]
    fn discord_channel_types_map_to_kinds() {
        for (t, kind) in [
            (0, SessionKind::Channel),
            (1, SessionKind::Dm),
            (2, SessionKind::Channel),
            (3, SessionKind::Dm),
            (4, SessionKind::Category),
            (5, SessionKind::Channel),
            (10, SessionKind::Thread),
            (11, SessionKind::Thread),
            (12, SessionKind::Thread),
            (13, SessionKind::Channel),
            (15, SessionKind::Forum),
            (16, SessionKind::Forum),
            (99, SessionKind::Channel),
        ] {
            assert_eq!(SessionKind::from_channel_type(t), kind, "type {t}");
        }
        assert!(!SessionKind::Forum.holds_messages());
        assert!(SessionKind::Dm.holds_messages());
    }
}
