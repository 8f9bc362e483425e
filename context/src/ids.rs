//! The identifiers a summary must not lose: Discord ids (messages, users, channels — any
//! snowflake, bare or in `<@id>`, `<@!id>`, `<@&id>`, `<#id>`, message links), users by name
//! (`@name`), channels by name (`#name`) and file paths (`/srv/app/x.log`, `./run.sh`,
//! `src/main.rs`, `~/notes.md`, `Cargo.toml`).
//!
//! Extraction runs `regex` (linear time, no backtracking) over text that is already bounded
//! by the budget.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use regex::Regex;

/// An identifier found in text. Names compare without case (`@Mira` is `@mira`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ident {
    /// A Discord id (a snowflake: 17 to 20 digits).
    Id(u64),
    /// A user by name, lowercased, without the `@`.
    User(String),
    /// A channel by name, lowercased, without the `#`.
    Channel(String),
    /// A file path, as written.
    Path(String),
}

impl std::fmt::Display for Ident {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ident::Id(id) => write!(f, "{id}"),
            Ident::User(name) => write!(f, "@{name}"),
            Ident::Channel(name) => write!(f, "#{name}"),
            Ident::Path(path) => f.write_str(path),
        }
    }
}

static IDS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?:^|[^0-9])([0-9]{17,20})(?:[^0-9]|$)").expect("ids"));
static URLS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s<>]+").expect("urls"));
static USERS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|[^\w@/.\-<])@([\p{L}\p{N}_][\p{L}\p{N}_.\-]{0,31})").expect("users")
});
static CHANNELS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:^|[^\w&#/<])#([\p{L}\p{N}_][\p{L}\p{N}_\-]{0,99})").expect("channels")
});
static PATHS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r#"(?:^|[\s"'`(\[<=:,])("#,
        // Rooted: /a/b, ./a, ../a, ~/a.
        r"(?:~|\.{1,2})?/[\w.\-]+(?:/[\w.\-]+)*",
        // Relative with a directory: a/b.c, a/b/c.
        r"|[\w.\-]+(?:/[\w.\-]+)+",
        // A file name with an extension: Cargo.toml, deploy-3.log.
        r"|[\w\-]{2,}\.[A-Za-z][A-Za-z0-9]{0,7}",
        r")"
    ))
    .expect("paths")
});

/// Names that are not users or channels.
const NOT_USERS: &[&str] = &["everyone", "here"];

/// Every identifier in `text`, in a set.
pub fn extract(text: &str) -> BTreeSet<Ident> {
    let mut found = BTreeSet::new();
    extract_into(text, &mut found);
    found
}

/// Adds every identifier in `text` to `found`.
pub fn extract_into(text: &str, found: &mut BTreeSet<Ident>) {
    // Ids first, URLs included (a message link names its channel and message).
    let mut at = 0;
    while let Some(m) = IDS.captures_at(text, at) {
        let digits = m.get(1).expect("group 1");
        if let Ok(id) = digits.as_str().parse::<u64>() {
            found.insert(Ident::Id(id));
        }
        // The match may have eaten the next id's leading separator: go on from its digits' end.
        at = digits.end();
    }
    // A URL's path is not a file path and its fragment is not a channel.
    let masked = URLS.replace_all(text, " ");
    for m in USERS.captures_iter(&masked) {
        let name = trim_name(&m[1]);
        // A name of digits is an id (written `@123` by someone); ids are found above.
        if name.chars().any(char::is_alphabetic) && !NOT_USERS.contains(&name.as_str()) {
            found.insert(Ident::User(name));
        }
    }
    for m in CHANNELS.captures_iter(&masked) {
        let name = trim_name(&m[1]);
        if name.chars().any(char::is_alphabetic) {
            found.insert(Ident::Channel(name));
        }
    }
    for m in PATHS.captures_iter(&masked) {
        let path = m[1].trim_end_matches(['.', '-']);
        if is_path(path) {
            found.insert(Ident::Path(path.to_owned()));
        }
    }
}

fn trim_name(name: &str) -> String {
    name.trim_end_matches(['.', '-']).to_lowercase()
}

/// Whether a candidate looks like a file path and not like a slash command, a ratio, a
/// version or a date.
fn is_path(path: &str) -> bool {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if segments.is_empty() || !path.chars().any(char::is_alphabetic) {
        return false;
    }
    let rooted = path.starts_with('/');
    let dotted = path.starts_with("./") || path.starts_with("../") || path.starts_with("~/");
    // `/status` alone is a slash command, `and/or` is prose; a path has a directory and a
    // file, or a leading ./, ../, ~/, or an extension.
    let has_extension = segments
        .last()
        .and_then(|last| last.rsplit_once('.'))
        .is_some_and(|(stem, ext)| {
            !stem.is_empty() && !ext.is_empty() && ext.chars().any(|c| c.is_ascii_alphabetic())
        });
    dotted || has_extension || (rooted && segments.len() >= 2) || segments.len() >= 3
}

/// Whether `text` keeps `ident`: an id as the same number (not inside a longer one), a name
/// as a whole word in any case (with or without its `@`/`#`), a path exactly.
pub fn appears_in(ident: &Ident, text: &str, text_lower: &str) -> bool {
    match ident {
        Ident::Id(id) => contains_whole(text, &id.to_string(), |c| c.is_ascii_digit()),
        Ident::User(name) | Ident::Channel(name) => {
            contains_whole(text_lower, name, |c| c.is_alphanumeric() || c == '_')
        }
        Ident::Path(path) => text.contains(path.as_str()),
    }
}

/// Whether `needle` occurs in `haystack` with no `joins` character on either side.
fn contains_whole(haystack: &str, needle: &str, joins: impl Fn(char) -> bool) -> bool {
    if needle.is_empty() {
        return false;
    }
    haystack.match_indices(needle).any(|(at, _)| {
        let before = haystack[..at].chars().next_back();
        let after = haystack[at + needle.len()..].chars().next();
        !before.is_some_and(&joins) && !after.is_some_and(&joins)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idents(text: &str) -> Vec<String> {
        extract(text).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn discord_forms_are_found() {
        let text = "<@123456789012345678> and <@!223456789012345678> in <#323456789012345678>, role <@&423456789012345678>; see https://discord.com/channels/1/523456789012345678/623456789012345678";
        let found = idents(text);
        for id in [
            "123456789012345678",
            "223456789012345678",
            "323456789012345678",
            "423456789012345678",
            "523456789012345678",
            "623456789012345678",
        ] {
            assert!(found.contains(&id.to_owned()), "{id} in {found:?}");
        }
        assert!(
            !found.iter().any(|f| f.contains("discord.com")),
            "{found:?}"
        );
    }

    #[test]
    fn names_and_paths_are_found_and_lookalikes_are_not() {
        let found = idents("@Mira asked in #release-room about /srv/app/logs/deploy-3.log, ./run.sh, src/main.rs, ~/notes.md and Cargo.toml. Mail mira@example.com, run /status, v1.2.3, 3/4, and/or @everyone #1");
        for expected in [
            "@mira",
            "#release-room",
            "/srv/app/logs/deploy-3.log",
            "./run.sh",
            "src/main.rs",
            "~/notes.md",
            "Cargo.toml",
        ] {
            assert!(
                found.contains(&expected.to_owned()),
                "{expected} in {found:?}"
            );
        }
        for unexpected in [
            "@example.com",
            "/status",
            "v1.2.3",
            "3/4",
            "and/or",
            "@everyone",
            "#1",
        ] {
            assert!(
                !found.contains(&unexpected.to_owned()),
                "{unexpected} in {found:?}"
            );
        }
    }

    #[test]
    fn adjacent_ids_are_both_found() {
        let found = idents("123456789012345678 223456789012345678,323456789012345678");
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            idents("12345678901234567890123").is_empty(),
            "too long for a snowflake"
        );
    }

    #[test]
    fn appearing_means_a_whole_word_or_number() {
        let text = "Mira asked about 1234567890123456789 in the ops channel; see /srv/x.log";
        let lower = text.to_lowercase();
        assert!(appears_in(&Ident::User("mira".into()), text, &lower));
        assert!(appears_in(&Ident::Channel("ops".into()), text, &lower));
        assert!(appears_in(&Ident::Id(1234567890123456789), text, &lower));
        assert!(appears_in(&Ident::Path("/srv/x.log".into()), text, &lower));
        assert!(!appears_in(&Ident::Id(234567890123456789), text, &lower));
        assert!(!appears_in(&Ident::User("mir".into()), text, &lower));
        assert!(!appears_in(&Ident::Path("/srv/y.log".into()), text, &lower));
    }
}
