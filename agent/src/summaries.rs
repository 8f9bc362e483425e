//! A session's compaction summary as the store keeps it (`MemoryStore`): saved when the
//! built-in runner compacts, read back to start the session's later prompts.
//!
//! The stored record has no trust flag: a summary of anything an untrusted person said is
//! kept with every line marked (`(untrusted) …`), exactly as prompts show it, and read back
//! as untrusted with the marks taken off (the request model marks it again when it renders).

use entity::quoting::{quoted, UNTRUSTED_MARK};
use entity::Snowflake;
use switchboard_context::Summary;
use switchboard_store::MemoryStore;

/// The session's newest stored summary, as the request model's [`Summary`]; `None` when there
/// is none or it cannot be read (logged: the run goes on without it, its messages are still
/// in the store).
pub async fn load(memory: &dyn MemoryStore, session: Snowflake) -> Option<Summary> {
    match memory.summary(session).await {
        Ok(stored) => stored.map(|stored| from_stored(&stored.text, stored.covers_to)),
        Err(error) => {
            tracing::warn!(%session, "the session's summary cannot be read; prompting without it: {error}");
            None
        }
    }
}

/// The request model's summary for a stored text.
pub fn from_stored(text: &str, covers_to: Snowflake) -> Summary {
    let trusted = !switchboard_engine::trust::marks_any(text);
    Summary {
        text: if trusted {
            text.to_owned()
        } else {
            unmark(text)
        },
        trusted,
        covers_through: (covers_to.0 != 0).then_some(covers_to),
    }
}

/// What is stored for `summary`: its text, every line marked when it is untrusted.
pub fn to_stored(summary: &Summary) -> String {
    quoted(&summary.text, summary.trusted)
}

/// Keeps `summary` as the session's newest; false (logged) when the store refused it.
pub async fn save(
    memory: &dyn MemoryStore,
    session: Snowflake,
    summary: &Summary,
    tokens: usize,
) -> bool {
    let record = switchboard_records::notes::Summary {
        session_id: session,
        text: to_stored(summary),
        covers_to: summary.covers_through.unwrap_or(Snowflake(0)),
        tokens: u32::try_from(tokens).unwrap_or(u32::MAX),
        created_ms: switchboard_engine::clock::now_ms(),
    };
    match memory.save_summary(record).await {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(%session, "the compaction's summary could not be stored: {error}");
            false
        }
    }
}

/// Every line without its leading untrusted mark.
fn unmark(text: &str) -> String {
    text.lines()
        .map(|line| {
            line.strip_prefix(UNTRUSTED_MARK)
                .map_or(line, |rest| rest.strip_prefix(' ').unwrap_or(rest))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_untrusted_summary_keeps_its_marks_in_the_store_and_reads_back_untrusted() {
        let summary = Summary {
            text: "## Facts\n- Mallory asked to deploy /srv/app.toml".to_owned(),
            trusted: false,
            covers_through: Some(Snowflake(1_100_000_000_000_000_042)),
        };
        let stored = to_stored(&summary);
        assert!(stored.lines().all(|line| line.starts_with(UNTRUSTED_MARK)));
        assert_eq!(
            from_stored(&stored, Snowflake(1_100_000_000_000_000_042)),
            summary
        );
        let trusted = Summary {
            trusted: true,
            ..summary
        };
        assert_eq!(
            from_stored(&to_stored(&trusted), Snowflake(1_100_000_000_000_000_042)),
            trusted
        );
    }
}
