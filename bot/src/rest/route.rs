//! Discord's route keys: a request's rate-limit bucket is found from its method and route
//! template, split by the route's major parameters (the channel, guild, or webhook and its
//! token), so `POST /channels/1/messages` and `POST /channels/2/messages` are limited apart
//! while every message id of one channel shares a bucket.

use reqwest::Method;

/// Where a request goes, as the rate limits see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Method, template and major parameters: `POST /channels/1/messages`. Holds webhook and
    /// interaction tokens, so it is never logged.
    pub(crate) key: String,
    /// The key with tokens left out, for logs and errors: `POST /channels/1/messages/{id}`.
    pub(crate) label: String,
    /// The major parameters alone (`channels/1`); a bucket Discord names is per this.
    pub(crate) major: String,
    /// Interaction callbacks and follow-ups are outside the bot's global limit.
    pub(crate) global_exempt: bool,
}

/// What the next path segment is.
#[derive(Clone, Copy)]
enum Next {
    Plain,
    /// A channel or guild id: a major parameter.
    Major,
    /// A webhook or interaction id, then its token: both major.
    MajorThenToken,
    /// A webhook or interaction token: major, and secret.
    Token,
    /// A reaction's emoji: its bucket is the route's, whatever the emoji.
    Emoji,
}

impl Route {
    /// The route of `method` on `path` (under `/api/v10`, query ignored).
    pub fn of(method: &Method, path: &str) -> Route {
        let path = path.split(['?', '#']).next().unwrap_or_default();
        let mut key = format!("{method} ");
        let mut label = key.clone();
        let mut major = String::new();
        let mut global_exempt = false;
        let mut next = Next::Plain;
        for (index, segment) in path.split('/').filter(|s| !s.is_empty()).enumerate() {
            key.push('/');
            label.push('/');
            let shown = match next {
                Next::Major | Next::MajorThenToken => {
                    push_major(&mut major, segment);
                    key.push_str(segment);
                    label.push_str(segment);
                    None
                }
                Next::Token => {
                    push_major(&mut major, segment);
                    key.push_str(segment);
                    label.push_str("{token}");
                    None
                }
                Next::Emoji => Some("{emoji}"),
                Next::Plain if segment.bytes().all(|b| b.is_ascii_digit()) => Some("{id}"),
                Next::Plain => Some(segment),
            };
            if let Some(shown) = shown {
                key.push_str(shown);
                label.push_str(shown);
            }
            next = match (next, segment) {
                (Next::MajorThenToken, _) => Next::Token,
                (Next::Plain, "channels" | "guilds") => Next::Major,
                (Next::Plain, "webhooks" | "interactions") => {
                    if index == 0 {
                        global_exempt = true;
                        Next::MajorThenToken
                    } else {
                        Next::Plain
                    }
                }
                (Next::Plain, "reactions") => Next::Emoji,
                _ => Next::Plain,
            };
        }
        Route {
            key,
            label,
            major,
            global_exempt,
        }
    }
}

fn push_major(major: &mut String, segment: &str) {
    if !major.is_empty() {
        major.push('/');
    }
    major.push_str(segment);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn major_parameters_split_buckets_and_minor_ids_do_not() {
        let a = Route::of(&Method::PATCH, "/channels/1/messages/10");
        let b = Route::of(&Method::PATCH, "/channels/1/messages/11");
        let c = Route::of(&Method::PATCH, "/channels/2/messages/10");
        assert_eq!(a.key, b.key);
        assert_ne!(a.key, c.key);
        assert_eq!(a.key, "PATCH /channels/1/messages/{id}");
        assert_eq!(a.major, "1");
        assert!(!a.global_exempt);
        // The method is part of the key: deletes have buckets of their own.
        assert_ne!(
            a.key,
            Route::of(&Method::DELETE, "/channels/1/messages/10").key
        );
    }

    #[test]
    fn emoji_and_queries_do_not_split_buckets() {
        let a = Route::of(
            &Method::PUT,
            "/channels/1/messages/2/reactions/%E2%9C%85/@me",
        );
        let b = Route::of(&Method::PUT, "/channels/1/messages/3/reactions/blob:9/@me");
        assert_eq!(a.key, b.key);
        assert_eq!(a.key, "PUT /channels/1/messages/{id}/reactions/{emoji}/@me");
        let listed = Route::of(&Method::GET, "/channels/1/messages?after=5&limit=100");
        assert_eq!(listed.key, "GET /channels/1/messages");
    }

    #[test]
    fn interaction_tokens_are_major_but_never_shown() {
        let route = Route::of(&Method::POST, "/interactions/77/s3cret/callback");
        assert!(route.global_exempt);
        assert!(route.key.contains("s3cret"));
        assert!(!route.label.contains("s3cret"), "{}", route.label);
        assert_eq!(route.label, "POST /interactions/77/{token}/callback");
        let webhook = Route::of(&Method::PATCH, "/webhooks/5/tok/messages/@original");
        assert_eq!(webhook.major, "5/tok");
        assert!(!webhook.label.contains("tok/"), "{}", webhook.label);
        let commands = Route::of(&Method::PUT, "/applications/9/commands");
        assert!(!commands.global_exempt);
        assert_eq!(commands.key, "PUT /applications/{id}/commands");
    }
}
