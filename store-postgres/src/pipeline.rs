//! Statements sent together: a transaction is `BEGIN`, its statements and `COMMIT` written to
//! the connection at once and answered in one round trip (tokio-postgres pipelines requests
//! that are in flight together). Every part is sent before the first answer is awaited, so a
//! caller that stops waiting never leaves a connection inside a half-sent transaction.
//!
//! A statement that fails aborts the transaction; the `COMMIT` after it then rolls back (and
//! says so without an error), so the result is the first statement error, if any.

use futures_util::future::{join3, join_all};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Error, Row};

/// A parameter a statement owns.
pub(crate) type Param = Box<dyn ToSql + Sync + Send>;

/// One statement and its parameters.
pub(crate) struct Stmt {
    pub(crate) sql: &'static str,
    pub(crate) params: Vec<Param>,
}

impl Stmt {
    pub(crate) fn new(sql: &'static str, params: Vec<Param>) -> Stmt {
        Stmt { sql, params }
    }
}

/// Boxes a parameter.
pub(crate) fn p<T: ToSql + Sync + Send + 'static>(value: T) -> Param {
    Box::new(value)
}

async fn prepare(
    client: &deadpool_postgres::Client,
    stmts: &[Stmt],
) -> Result<Vec<tokio_postgres::Statement>, Error> {
    join_all(stmts.iter().map(|s| client.prepare_cached(s.sql)))
        .await
        .into_iter()
        .collect()
}

fn refs(stmt: &Stmt) -> Vec<&(dyn ToSql + Sync)> {
    stmt.params
        .iter()
        .map(|param| &**param as &(dyn ToSql + Sync))
        .collect()
}

/// Runs `stmts` in one transaction, sent at once; the rows of each.
pub(crate) async fn transaction(
    client: &deadpool_postgres::Client,
    stmts: &[Stmt],
) -> Result<Vec<Vec<Row>>, Error> {
    transaction_as(client, "BEGIN", stmts).await
}

/// [`transaction`] begun with `begin` (`BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY` for
/// a consistent read of several tables).
pub(crate) async fn transaction_as(
    client: &deadpool_postgres::Client,
    begin: &'static str,
    stmts: &[Stmt],
) -> Result<Vec<Vec<Row>>, Error> {
    let prepared = prepare(client, stmts).await?;
    let params: Vec<_> = stmts.iter().map(refs).collect();
    let plain: &Client = client;
    let queries = prepared
        .iter()
        .zip(&params)
        .map(|(statement, params)| plain.query(statement, params));
    let (begin, results, commit) = join3(
        plain.batch_execute(begin),
        join_all(queries),
        plain.batch_execute("COMMIT"),
    )
    .await;
    begin?;
    let rows = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    commit?;
    Ok(rows)
}

/// Runs `stmts` one after the other, each on its own (no transaction), sent at once; the rows
/// of each.
pub(crate) async fn each(
    client: &deadpool_postgres::Client,
    stmts: &[Stmt],
) -> Result<Vec<Vec<Row>>, Error> {
    let prepared = prepare(client, stmts).await?;
    let params: Vec<_> = stmts.iter().map(refs).collect();
    let plain: &Client = client;
    join_all(
        prepared
            .iter()
            .zip(&params)
            .map(|(statement, params)| plain.query(statement, params)),
    )
    .await
    .into_iter()
    .collect()
}
