//! API-only sessions: where a chat-API run works when its request names no session.
//!
//! Each caller of the chat API gets one, named `api:<token name>` (`api:operator` for the
//! operator token). Its id is derived from that name, so it is the same after a restart and
//! the audit rows and usage of earlier runs still name it; it lies below 2^22, where no Discord
//! id can be (a Discord snowflake carries its millisecond timestamp above bit 22), so it never
//! names a channel. Nothing can be posted there: the allowlist knows no such channel, so a
//! run's call that acts in it is refused as in any unknown channel. The sessions made since
//! the start are listed by `surface.sessions.list` (kind `api`) to the operator and to the
//! token whose session it is.

use std::collections::BTreeMap;
use std::sync::Mutex;

use entity::Snowflake;
use protocol::ErrorCode;
use sha2::{Digest, Sha256};

use crate::auth::Caller;
use crate::error::ToolError;
use crate::surface::AllowedChannel;

/// What names an API-only session: `api:` and the token's name.
pub const API_SESSION_PREFIX: &str = "api:";

/// The most API-only sessions one process keeps (one per token name; tokens are configured,
/// so this is never reached by a working config).
pub const MAX_API_SESSIONS: usize = 1024;

/// Ids of API-only sessions are below this (Discord's are not).
const API_ID_LIMIT: u64 = 1 << 22;

/// One API-only session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiSession {
    /// Its id (below 2^22).
    pub id: Snowflake,
    /// `api:<token name>`.
    pub name: String,
    /// The caller key it belongs to (`token:<name>`, `operator`, `anonymous`).
    pub owner: String,
}

/// The id `name` (`api:…`) always has: 1 ..= 2^22 − 1, from its SHA-256.
pub fn api_session_id(name: &str) -> Snowflake {
    let digest = Sha256::digest(name.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    Snowflake(u64::from_be_bytes(first) % (API_ID_LIMIT - 1) + 1)
}

/// Whether `id` can only be an API-only session's.
pub fn is_api_session_id(id: Snowflake) -> bool {
    id.0 < API_ID_LIMIT
}

/// The API-only session's name and owner key for `caller`; `None` for callers that are not
/// API clients (a run's capability, a Discord user).
fn own_session(caller: &Caller) -> Option<(String, String)> {
    match caller {
        Caller::Operator => Some((format!("{API_SESSION_PREFIX}operator"), caller.key())),
        Caller::Unauthenticated => Some((format!("{API_SESSION_PREFIX}anonymous"), caller.key())),
        Caller::Token(token) => Some((format!("{API_SESSION_PREFIX}{}", token.name), caller.key())),
        Caller::Capability(_) | Caller::Discord(_) => None,
    }
}

/// The API-only sessions used since the start, by id.
#[derive(Debug, Default)]
pub struct ApiSessions {
    by_id: Mutex<BTreeMap<Snowflake, ApiSession>>,
}

impl ApiSessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Snowflake, ApiSession>> {
        self.by_id
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `caller`'s own API-only session, kept for listing; refused for a run or a Discord user,
    /// and when two token names would share an id (the operator renames one).
    pub fn own(&self, caller: &Caller) -> Result<(AllowedChannel, ApiSession), ToolError> {
        let Some((name, owner)) = own_session(caller) else {
            return Err(ToolError::denied(
                ErrorCode::OutOfScope,
                "only the operator and named tokens have an API session",
            ));
        };
        self.keep(ApiSession {
            id: api_session_id(&name),
            name,
            owner,
        })
    }

    /// Remembers `session` for listing (up to [`MAX_API_SESSIONS`]) and lets a run work there.
    fn keep(&self, session: ApiSession) -> Result<(AllowedChannel, ApiSession), ToolError> {
        let mut sessions = self.lock();
        if let Some(known) = sessions.get(&session.id) {
            if known.name != session.name {
                return Err(ToolError::internal(format!(
                    "the API sessions {} and {} would share id {}; rename one of the tokens",
                    known.name, session.name, session.id
                )));
            }
            return Ok((AllowedChannel::checked(known.id), known.clone()));
        }
        if sessions.len() < MAX_API_SESSIONS {
            sessions.insert(session.id, session.clone());
        }
        Ok((AllowedChannel::checked(session.id), session))
    }

    /// The session a reference (`api:NAME`, or its id) names when it is an API-only session:
    /// `Some(Ok)` when it is `caller`'s own, `Some(Err)` (403, saying whose it is not) when
    /// another's; `None` when the reference names no API-only session.
    pub fn named(
        &self,
        reference: &str,
        caller: &Caller,
    ) -> Option<Result<(AllowedChannel, ApiSession), ToolError>> {
        let reference = reference.trim();
        let id = if reference.starts_with(API_SESSION_PREFIX) {
            api_session_id(reference)
        } else {
            match reference.parse::<u64>() {
                Ok(id) if is_api_session_id(Snowflake(id)) => Snowflake(id),
                _ => return None,
            }
        };
        let own = own_session(caller).map(|(name, _)| api_session_id(&name));
        if own == Some(id) {
            return Some(self.own(caller));
        }
        // The operator may work in any API-only session it can name.
        if matches!(caller, Caller::Operator) && reference.starts_with(API_SESSION_PREFIX) {
            let token = &reference[API_SESSION_PREFIX.len()..];
            return Some(self.keep(ApiSession {
                id,
                name: reference.to_owned(),
                owner: format!("token:{token}"),
            }));
        }
        Some(Err(ToolError::denied(
            ErrorCode::Other("session_not_allowed".to_owned()),
            format!(
                "session {reference} is another caller's API session; leave the header out to use your own ({})",
                own_session(caller).map_or_else(|| "none".to_owned(), |(name, _)| name)
            ),
        )))
    }

    /// The API-only sessions `caller` may see: all for the operator, else its own.
    pub fn visible_to(&self, caller: &Caller) -> Vec<ApiSession> {
        let all = matches!(caller, Caller::Operator | Caller::Unauthenticated);
        let key = caller.key();
        self.lock()
            .values()
            .filter(|s| all || s.owner == key)
            .cloned()
            .collect()
    }

    /// The API-only session a run works in, when `caller` is the capability of a run in one
    /// (a chat-API run): a handoff from it works there too.
    pub fn session_of(&self, caller: &Caller) -> Option<AllowedChannel> {
        let Caller::Capability(capability) = caller else {
            return None;
        };
        let id = capability.grant.session_id;
        self.lock()
            .contains_key(&id)
            .then(|| AllowedChannel::checked(id))
    }

    /// The API-only session with this id, when one was used since the start.
    pub fn get(&self, id: Snowflake) -> Option<ApiSession> {
        self.lock().get(&id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn api_session_ids_never_look_like_discord_ids(name in "api:[a-zA-Z0-9_-]{1,64}") {
            let id = api_session_id(&name);
            prop_assert!(id.0 >= 1 && is_api_session_id(id));
            prop_assert_eq!(id, api_session_id(&name));
        }
    }

    #[test]
    fn a_discord_snowflake_is_not_an_api_session_id() {
        assert!(!is_api_session_id(Snowflake(1_000_000_000_000_000_401)));
        assert!(!is_api_session_id(Snowflake(1 << 22)));
    }

    #[test]
    fn the_operator_owns_api_operator_and_a_run_owns_none() {
        let sessions = ApiSessions::default();
        let (channel, session) = sessions.own(&Caller::Operator).unwrap();
        assert_eq!(session.name, "api:operator");
        assert_eq!(channel.id(), api_session_id("api:operator"));
        assert_eq!(sessions.visible_to(&Caller::Operator), vec![session]);
        let theirs = sessions.named("api:someone", &Caller::Operator).unwrap();
        assert_eq!(theirs.unwrap().1.owner, "token:someone");
        assert!(sessions.named("#ops", &Caller::Operator).is_none());
        assert!(sessions
            .named("1000000000000000401", &Caller::Operator)
            .is_none());
    }

    #[test]
    fn a_token_may_not_name_another_tokens_api_session() {
        let sessions = ApiSessions::default();
        let token = |name: &str| {
            Caller::Token(std::sync::Arc::new(crate::auth::NamedCaller {
                name: name.to_owned(),
                key: format!("token:{name}").into(),
                scope: Vec::new(),
            }))
        };
        let (_, own) = sessions
            .named("api:webui", &token("webui"))
            .unwrap()
            .unwrap();
        assert_eq!(own.owner, "token:webui");
        let refused = sessions
            .named("api:webui", &token("other"))
            .unwrap()
            .unwrap_err();
        assert_eq!(refused.status().as_u16(), 403);
        assert!(refused.message.contains("api:other"), "{}", refused.message);
        let by_id = own.id.to_string();
        assert!(sessions.named(&by_id, &token("other")).unwrap().is_err());
        assert_eq!(sessions.visible_to(&token("other")), Vec::new());
        assert_eq!(sessions.visible_to(&token("webui")), vec![own]);
    }
}
