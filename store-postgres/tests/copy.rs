//! `store copy` from an SQLite file into PostgreSQL: everything moves, a second run writes
//! nothing, a stopped run is finished by the next.

use switchboard_store_postgres::testing::PgCluster;
use switchboard_store_postgres::{PgBackend, PgOptions};
use switchboard_store_sqlite::{SqliteBackend, SqliteOptions};

#[test]
fn an_sqlite_store_copies_into_postgres_completely_idempotently_and_resumably() {
    let dir = std::env::temp_dir().join(format!("switchboard-pg-copy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let from = SqliteBackend::open(
        &dir.join("from.db").to_string_lossy(),
        SqliteOptions::default(),
    )
    .unwrap();
    let cluster = PgCluster::shared();
    let open = || {
        let name = cluster.database().unwrap();
        PgBackend::open(&cluster.url(&name), PgOptions::default()).unwrap()
    };
    let (whole, halted) = (open(), open());
    switchboard_store::conformance::copy_is_complete_idempotent_and_resumable(
        &from, &whole, &halted,
    );
    drop(from);
    let _ = std::fs::remove_dir_all(&dir);
}
