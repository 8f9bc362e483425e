//! `store.url`: which backend keeps the data, and where.
//!
//! | spelling | backend |
//! |---|---|
//! | `sqlite:///abs/path.db` | SQLite, an absolute path |
//! | `sqlite://rel/path.db` | SQLite, a path relative to switchboard's working directory (as `store.path` is) |
//! | `sqlite://:memory:` | SQLite's private in-memory database (what `store.path = ":memory:"` meant) |
//! | `memory:` | the in-memory backend: nothing outlives the process |
//! | `postgres://…`, `postgresql://…` | PostgreSQL (`switchboard-store-postgres`: several nodes on one database) |

use std::path::PathBuf;

/// The default `store.url`.
pub const DEFAULT_STORE_URL: &str = "sqlite://switchboard.db";

/// The schemes `store.url` knows, as an error lists them.
pub const KNOWN_SCHEMES: [&str; 4] = ["sqlite://", "memory:", "postgres://", "postgresql://"];

/// Where a store lives, parsed from `store.url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// An SQLite file (or SQLite's in-memory database).
    Sqlite(SqliteLocation),
    /// The in-memory backend.
    Memory,
    /// A PostgreSQL connection string, as given.
    Postgres(String),
}

/// Where an SQLite store is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqliteLocation {
    /// A file: absolute, or relative to switchboard's working directory.
    File(PathBuf),
    /// SQLite's private in-memory database.
    Memory,
}

/// Why a `store.url` is not one switchboard can use. Each says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreUrlError {
    /// Nothing was given.
    #[error("store.url is empty; write one of {}, e.g. \"{DEFAULT_STORE_URL}\"", KNOWN_SCHEMES.join(", "))]
    Empty,
    /// A scheme switchboard has no backend for.
    #[error("store.url \"{url}\" uses the scheme \"{scheme}\", which switchboard does not know; it knows {}, e.g. \"{DEFAULT_STORE_URL}\"", KNOWN_SCHEMES.join(", "))]
    UnknownScheme {
        /// The URL as given.
        url: String,
        /// Its scheme (what came before `:`), or the whole text when it has none.
        scheme: String,
    },
    /// `sqlite://` without a path.
    #[error("store.url \"{0}\" names no file; write sqlite://switchboard.db (relative to the working directory) or sqlite:///var/lib/switchboard/store.db (absolute)")]
    NoPath(String),
    /// `sqlite:path` without `//`.
    #[error("store.url \"{url}\" is missing \"//\" after the scheme; write \"sqlite://{path}\"")]
    MissingSlashes {
        /// The URL as given.
        url: String,
        /// The path it seems to name.
        path: String,
    },
    /// `memory:` with something after it.
    #[error("store.url \"{0}\": the memory backend takes no path; write \"memory:\"")]
    MemoryWithPath(String),
    /// A NUL character or a line break in the URL.
    #[error("store.url contains a control character; write a plain path such as \"{DEFAULT_STORE_URL}\"")]
    ControlCharacter,
}

impl StoreUrl {
    /// Parses a `store.url`. Pure: relative paths stay relative (the file is opened against
    /// the working directory, as `store.path` is).
    pub fn parse(url: &str) -> Result<StoreUrl, StoreUrlError> {
        let url = url.trim();
        if url.is_empty() {
            return Err(StoreUrlError::Empty);
        }
        if url.chars().any(char::is_control) {
            return Err(StoreUrlError::ControlCharacter);
        }
        let Some((scheme, rest)) = url.split_once(':') else {
            return Err(StoreUrlError::UnknownScheme {
                url: url.to_owned(),
                scheme: url.to_owned(),
            });
        };
        match scheme.to_ascii_lowercase().as_str() {
            "sqlite" => {
                let Some(path) = rest.strip_prefix("//") else {
                    return Err(StoreUrlError::MissingSlashes {
                        url: url.to_owned(),
                        path: rest.to_owned(),
                    });
                };
                match path {
                    "" | "/" => Err(StoreUrlError::NoPath(url.to_owned())),
                    ":memory:" => Ok(StoreUrl::Sqlite(SqliteLocation::Memory)),
                    path => Ok(StoreUrl::Sqlite(SqliteLocation::File(PathBuf::from(path)))),
                }
            }
            "memory" if rest.is_empty() => Ok(StoreUrl::Memory),
            "memory" => Err(StoreUrlError::MemoryWithPath(url.to_owned())),
            "postgres" | "postgresql" => Ok(StoreUrl::Postgres(url.to_owned())),
            _ => Err(StoreUrlError::UnknownScheme {
                url: url.to_owned(),
                scheme: scheme.to_owned(),
            }),
        }
    }

    /// What `store.path = PATH` means in `store.url` terms (`":memory:"` is SQLite's in-memory
    /// database, as it always was).
    pub fn from_store_path(path: &str) -> StoreUrl {
        match path {
            ":memory:" | "" => StoreUrl::Sqlite(SqliteLocation::Memory),
            path => StoreUrl::Sqlite(SqliteLocation::File(PathBuf::from(path))),
        }
    }

    /// The `store.url` spelling of this location (what check-config suggests for a
    /// `store.path`). A PostgreSQL URL is given back as it was.
    pub fn spelling(&self) -> String {
        match self {
            StoreUrl::Sqlite(SqliteLocation::Memory) => "sqlite://:memory:".to_owned(),
            StoreUrl::Sqlite(SqliteLocation::File(path)) => format!("sqlite://{}", path.display()),
            StoreUrl::Memory => "memory:".to_owned(),
            StoreUrl::Postgres(url) => url.clone(),
        }
    }

    /// The backend's name: `sqlite`, `memory` or `postgres`.
    pub fn backend(&self) -> &'static str {
        match self {
            StoreUrl::Sqlite(_) => "sqlite",
            StoreUrl::Memory => "memory",
            StoreUrl::Postgres(_) => "postgres",
        }
    }
}

impl std::str::FromStr for StoreUrl {
    type Err = StoreUrlError;

    fn from_str(url: &str) -> Result<StoreUrl, StoreUrlError> {
        StoreUrl::parse(url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn file(path: &str) -> StoreUrl {
        StoreUrl::Sqlite(SqliteLocation::File(PathBuf::from(path)))
    }

    #[test]
    fn sqlite_urls_name_absolute_and_relative_files() {
        assert_eq!(
            StoreUrl::parse("sqlite:///abs/path.db"),
            Ok(file("/abs/path.db"))
        );
        assert_eq!(
            StoreUrl::parse("sqlite://rel/path.db"),
            Ok(file("rel/path.db"))
        );
        assert_eq!(
            StoreUrl::parse(DEFAULT_STORE_URL),
            Ok(file("switchboard.db"))
        );
        assert_eq!(StoreUrl::parse(" SQLite://a.db "), Ok(file("a.db")));
        assert_eq!(
            StoreUrl::parse("sqlite://:memory:"),
            Ok(StoreUrl::Sqlite(SqliteLocation::Memory))
        );
    }

    #[test]
    fn memory_and_postgres_are_recognised() {
        assert_eq!(StoreUrl::parse("memory:"), Ok(StoreUrl::Memory));
        let pg = "postgres://sb@localhost/sb?host=/run/postgresql";
        assert_eq!(StoreUrl::parse(pg), Ok(StoreUrl::Postgres(pg.into())));
        assert_eq!(StoreUrl::parse(pg).unwrap().backend(), "postgres");
        assert!(matches!(
            StoreUrl::parse("postgresql://x/y"),
            Ok(StoreUrl::Postgres(_))
        ));
    }

    #[test]
    fn an_unknown_scheme_names_the_ones_switchboard_knows() {
        let err = StoreUrl::parse("mysql://db/switchboard").unwrap_err();
        assert_eq!(
            err,
            StoreUrlError::UnknownScheme {
                url: "mysql://db/switchboard".into(),
                scheme: "mysql".into()
            }
        );
        let text = err.to_string();
        for scheme in KNOWN_SCHEMES {
            assert!(text.contains(scheme), "{text}");
        }
        assert!(matches!(
            StoreUrl::parse("switchboard.db"),
            Err(StoreUrlError::UnknownScheme { .. })
        ));
    }

    #[test]
    fn malformed_urls_say_what_to_write() {
        assert_eq!(StoreUrl::parse(""), Err(StoreUrlError::Empty));
        assert_eq!(
            StoreUrl::parse("sqlite://"),
            Err(StoreUrlError::NoPath("sqlite://".into()))
        );
        assert!(StoreUrl::parse("sqlite:a.db")
            .unwrap_err()
            .to_string()
            .contains("\"sqlite://a.db\""));
        assert!(matches!(
            StoreUrl::parse("memory:/x"),
            Err(StoreUrlError::MemoryWithPath(_))
        ));
        assert_eq!(
            StoreUrl::parse("sqlite://a\0.db"),
            Err(StoreUrlError::ControlCharacter)
        );
    }

    #[test]
    fn a_store_path_has_a_url_spelling_that_parses_back() {
        for path in [
            "switchboard.db",
            "/var/lib/sb/store.db",
            "data/x.db",
            ":memory:",
        ] {
            let url = StoreUrl::from_store_path(path);
            assert_eq!(StoreUrl::parse(&url.spelling()), Ok(url), "{path}");
        }
    }

    proptest! {
        #[test]
        fn any_text_parses_or_is_a_typed_error(text in ".{0,64}") {
            match StoreUrl::parse(&text) {
                Ok(url) => prop_assert!(StoreUrl::parse(&url.spelling()).is_ok()),
                Err(err) => prop_assert!(!err.to_string().is_empty()),
            }
        }
    }
}
