//! The lock tables on PostgreSQL at connect time: made when missing (or
//! the statements to run, for a role that may not), the lock table's
//! columns checked, and the statements of `lockctl schema`.

use super::Site;
use super::errors::store_error;
use super::layout::{self, PgTable, Q};
use crate::config::Config;
use crate::engine::sql::table::{Found, check_column};
use crate::error::LockError;
use tokio_postgres::error::SqlState;

/// The statements that make the lock tables `config`'s URL names
/// (`lockctl schema`).
pub(crate) fn ddl(config: &Config) -> Result<String, LockError> {
    Ok(Site::parse(config)?.table.ddl())
}

/// Makes the table `quoted` with `ddl` when it is missing. A role that may
/// not gets [`LockError::Config`] with the statements to run (both of
/// `table`'s).
async fn make(
    client: &tokio_postgres::Client,
    ddl: String,
    quoted: &str,
    table: &crate::engine::sql::Table,
) -> Result<(), LockError> {
    let exists = || async {
        client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&quoted])
            .await
            .map(|row| row.get::<_, bool>(0))
            .map_err(|e| store_error(&e))
    };
    if !exists().await?
        && let Err(e) = client.batch_execute(&ddl).await
        // Made meanwhile by another client (whose commit made ours fail on
        // one of the names it takes: the table's, its row type's, its
        // sequence's or index's): it is there.
        && !exists().await?
    {
        return Err(match e.code() {
            Some(code) if *code == SqlState::INSUFFICIENT_PRIVILEGE => LockError::Config(format!(
                "the table {quoted} is missing and this role may not create it; \
                 have the lock tables made with:\n{}",
                table.ddl()
            )),
            _ => store_error(&e),
        });
    }
    Ok(())
}

/// Makes the lock table when it is missing and checks its columns; the
/// `name` column's length, and whether the line and the permits table are
/// there (made when missing, if this role may; the permits table's
/// columns checked). A role that may not create the lock table gets
/// [`LockError::Config`] with the statements to run.
pub(super) async fn prepare_table(
    client: &tokio_postgres::Client,
    site: &Site,
) -> Result<(Option<usize>, bool, bool), LockError> {
    let table = &site.table;
    let quoted = table.quoted(Q);
    make(client, table.lock_ddl(), &quoted, table).await?;
    make(
        client,
        table.waiting_ddl(),
        &table.waiting().quoted(Q),
        table,
    )
    .await?;
    // Plain locks need no line: a role that may not make it still locks.
    let lined = match make(client, table.queue_ddl(), &table.queue().quoted(Q), table).await {
        Ok(()) => true,
        Err(LockError::Config(_)) => false,
        Err(e) => return Err(e),
    };
    // Nor semaphores: a role that may not make their table still locks.
    let permits = table.permits().quoted(Q);
    let permitted = match make(client, table.permits_ddl(), &permits, table).await {
        Ok(()) => true,
        Err(LockError::Config(_)) => false,
        Err(e) => return Err(e),
    };
    let longest = check_columns(client, &quoted, &layout::COLUMNS).await?;
    if permitted {
        check_columns(client, &permits, &layout::PERMIT_COLUMNS).await?;
    }
    Ok((longest, lined, permitted))
}

/// Refuses table `quoted` when one of its `columns` (each of one of its
/// types) is missing or not what it must be (see [`check_column`]); the
/// `name` column's length.
async fn check_columns(
    client: &tokio_postgres::Client,
    quoted: &str,
    columns: &[(&str, &[&str])],
) -> Result<Option<usize>, LockError> {
    // From the catalog, not `information_schema` (which shows only the
    // columns this role may use).
    let found = client
        .query(
            "SELECT a.attname::text, t.typname::text, \
                    CASE WHEN a.atttypmod > 4 THEN a.atttypmod - 4 END, a.attnotnull \
             FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped",
            &[&quoted],
        )
        .await
        .map_err(|e| store_error(&e))?;
    let mut longest = None;
    for (column, types) in columns {
        let row = found.iter().find(|r| r.get::<_, String>(0) == *column);
        let kind = row.map(|r| r.get::<_, String>(1));
        let seen = row.zip(kind.as_deref()).map(|(r, kind)| Found {
            kind,
            nullable: !r.get::<_, bool>(3),
            length: r
                .get::<_, Option<i32>>(2)
                .and_then(|n| usize::try_from(n).ok()),
        });
        let length = check_column(quoted, column, types, seen)?;
        if *column == "name" {
            longest = length;
        }
    }
    Ok(longest)
}
