//! `store copy` from the memory backend into SQLite files: everything moves, a second run
//! writes nothing, a stopped run is finished by the next.

use switchboard_store::{MemoryBackend, MemoryOptions};
use switchboard_store_sqlite::{SqliteBackend, SqliteOptions};

mod support;
use support::TempDir;

#[test]
fn a_memory_store_copies_into_sqlite_completely_idempotently_and_resumably() {
    let dir = TempDir::new("copy");
    let from = MemoryBackend::new(MemoryOptions::default());
    let whole = SqliteBackend::open(
        &dir.0.join("whole.db").to_string_lossy(),
        SqliteOptions::default(),
    )
    .unwrap();
    let halted = SqliteBackend::open(
        &dir.0.join("halted.db").to_string_lossy(),
        SqliteOptions::default(),
    )
    .unwrap();
    switchboard_store::conformance::copy_is_complete_idempotent_and_resumable(
        &from, &whole, &halted,
    );
}
