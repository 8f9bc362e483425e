//! What a send or an edit says about its `@name` and `#token`s beside posting: each one left as
//! plain text and why, each name several people or channels share, each channel mentioned
//! that this server may not read. An agent that wrote `hello @Nobody` learns that nobody was
//! pinged instead of a bare 200.

use entity::{Mention, NoteKind, Outbound};
use schemars::JsonSchema;
use serde::Serialize;

use crate::invocation::PlanContext;
use crate::surface::ChannelLocation;

/// One token of the text the answer has something to say about.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MentionWarning {
    /// The token as written (`@Nobody`, `#nochannel`).
    pub(crate) token: String,
    /// Why: `unknown_name` and `unknown_channel` (left as text: nobody was pinged, nothing
    /// linked), `mass_mention` (`@everyone`/`@here`, never a mention), `ambiguous_name`
    /// (several go by it: the first was mentioned), `channel_not_allowed` (linked, but this
    /// server may not read or post there).
    pub(crate) reason: &'static str,
    /// What happened and what to do instead.
    pub(crate) message: String,
    /// For `ambiguous_name`: every id that goes by the name, the one mentioned first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) candidates: Vec<String>,
}

/// The warnings of one rewrite: at most [`entity::MAX_NOTES`], and how many more there were.
#[derive(Debug, Clone, Default)]
pub struct MentionWarnings {
    pub(crate) list: Vec<MentionWarning>,
    pub(crate) more: usize,
}

impl MentionWarnings {
    /// The warnings of `report`, the outbound rewrite of an agent's text, with the allowlist
    /// of the call's settings for the channels it links.
    pub(crate) fn of(cx: &PlanContext<'_>, report: &Outbound<'_>) -> MentionWarnings {
        let mut list: Vec<MentionWarning> = report
            .notes
            .iter()
            .map(|note| {
                let token = note.token.clone();
                let (reason, message) = match note.kind {
                    NoteKind::UnknownName => (
                        "unknown_name",
                        format!("{token} is no user, role or alias switchboard knows: it was sent as plain text and pinged nobody. Use a name from the session's messages, an alias from the config, or @user_<id>"),
                    ),
                    NoteKind::UnknownChannel => (
                        "unknown_channel",
                        format!("{token} is no channel or session alias switchboard knows: it was sent as plain text, not a link. surface.sessions.list shows the channels, or write #channel_<id>"),
                    ),
                    NoteKind::MassMention => (
                        "mass_mention",
                        format!("{token} never becomes a mention here: it was sent as plain text and pinged nobody"),
                    ),
                    NoteKind::Ambiguous => (
                        "ambiguous_name",
                        format!("{token} is the name of {} {}: it was written as the first one's mention. If you meant another, edit the message with @user_<id> or #channel_<id> from candidates", note.candidates.len(), match note.mention {
                            Some(Mention::Channel(_)) => "channels",
                            _ => "users",
                        }),
                    ),
                };
                MentionWarning {
                    token,
                    reason,
                    message,
                    candidates: note.candidates.iter().map(ToString::to_string).collect(),
                }
            })
            .collect();
        let rules = &cx.settings.allow;
        let surface = cx.core.surface().as_ref();
        for (token, id) in &report.channels {
            // Only a channel whose place is known can be judged; an unknown one may be allowed.
            let known = surface.session(*id).is_some();
            let allowed = rules.allows_cached(*id, |channel| {
                surface
                    .session(channel)
                    .map(|info| ChannelLocation::from(&info))
            });
            if known && !allowed {
                list.push(MentionWarning {
                    token: token.clone(),
                    reason: "channel_not_allowed",
                    message: format!("{token} was linked, but switchboard may not read or post in that channel: people who can see it can follow the link; you cannot act there"),
                    candidates: Vec::new(),
                });
            }
        }
        MentionWarnings {
            list,
            more: report.more,
        }
    }
}
