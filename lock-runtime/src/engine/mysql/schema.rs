//! The lock tables on MySQL at connect time: made when missing (or the
//! statements to run, for a role that may not), the slots' rows, the
//! lock table's columns and the `name` column's collation checked, and
//! the statements of `lockctl schema`.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use super::Site;
use super::errors::{server_code, store_error};
use super::layout::{self, Charset, Q};
use crate::config::Config;
use crate::engine::sql::table::{Found, check_column};
use crate::error::LockError;

/// The statement that makes the lock table `config`'s URL names
/// (`lockctl schema`).
pub(crate) fn ddl(config: &Config) -> Result<String, LockError> {
    Ok(layout::all_ddl(&Site::parse(config)?.table))
}

/// A column as `information_schema.COLUMNS` describes it: its name, data
/// type, length, whether it may be NULL (`YES`), character set, collation
/// and whole type (`varchar(64)`).
type Column = (
    String,
    String,
    Option<u64>,
    String,
    Option<String>,
    Option<String>,
    String,
);

/// What the tables a client locks on look like, as it connects.
pub(super) struct Shape {
    /// The lock table's `name` column's length.
    pub(super) longest: Option<usize>,
    /// The lock table's `name` column's character set.
    pub(super) charset: Charset,
    /// Whether the line is there.
    pub(super) lined: bool,
    /// Whether the permits table is there.
    pub(super) permitted: bool,
    /// The permits table's `name` column's length.
    pub(super) permit_longest: Option<usize>,
}

/// Makes the lock table when it is missing and checks its columns; the
/// `name` column's length and character set, and whether the line and
/// the permits table are there (made when missing, if this role may; the
/// permits table's columns checked). A role that may not create the lock
/// table gets [`LockError::Config`] with the statements to run.
pub(super) async fn prepare_table(conn: &mut Conn, site: &Site) -> Result<Shape, LockError> {
    let table = &site.table;
    make(conn, table, table, &layout::ddl(table)).await?;
    prepare_slots(conn, table).await?;
    // Plain locks need no line: a role that may not make it still locks.
    let queue = layout::queue(table);
    let lined = match make(conn, table, &queue, &layout::queue_ddl(table)).await {
        Ok(()) => true,
        Err(LockError::Config(_)) => false,
        Err(e) => return Err(e),
    };
    // Nor semaphores.
    let permits = layout::permits(table);
    let permitted = match make(conn, table, &permits, &layout::permits_ddl(table)).await {
        Ok(()) => true,
        Err(LockError::Config(_)) => false,
        Err(e) => return Err(e),
    };
    let (longest, charset) = check_columns(conn, table, &layout::COLUMNS).await?;
    let permit_longest = match permitted {
        true => {
            check_columns(conn, &permits, &layout::PERMIT_COLUMNS)
                .await?
                .0
        }
        false => None,
    };
    Ok(Shape {
        longest,
        charset,
        lined,
        permitted,
        permit_longest,
    })
}

/// Refuses `table` when one of its `columns` (each of one of its types)
/// is missing or not what it must be (see [`check_column`]), or its
/// `name` column folds case (see [`binary`]); the `name` column's length
/// and character set.
async fn check_columns(
    conn: &mut Conn,
    table: &crate::engine::sql::Table,
    columns: &[(&str, &[&str])],
) -> Result<(Option<usize>, Charset), LockError> {
    let quoted = table.quoted(Q);
    let found: Vec<Column> = conn
        .exec(
            "SELECT COLUMN_NAME, DATA_TYPE, CHARACTER_MAXIMUM_LENGTH, IS_NULLABLE, \
                    CHARACTER_SET_NAME, COLLATION_NAME, COLUMN_TYPE \
             FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?",
            (table.schema.clone(), table.name.clone()),
        )
        .await
        .map_err(|e| store_error(&e))?;
    let mut longest = None;
    let mut charset = Charset::Any;
    let mut folds = None;
    for (column, types) in columns {
        let row = found.iter().find(|c| c.0.eq_ignore_ascii_case(column));
        let kind = row.map(|c| c.1.to_ascii_lowercase());
        let seen = row.zip(kind.as_deref()).map(|(c, kind)| Found {
            kind,
            nullable: c.3.eq_ignore_ascii_case("YES"),
            length: c.2.and_then(|n| usize::try_from(n).ok()),
        });
        let length = check_column(&quoted, column, types, seen)?;
        if let (Some((_, _, _, _, set, collation, whole)), "name") = (row, *column) {
            longest = length;
            charset = Charset::of(set.as_deref());
            folds = Some((whole, set, collation));
        }
    }
    // Once every column is there, of its type.
    if let Some((whole, set, collation)) = folds {
        binary(&quoted, whole, set.as_deref(), collation.as_deref())?;
    }
    Ok((longest, charset))
}

/// Refuses a `name` column (of whole type `whole`, in character set
/// `set`) whose collation `collation` is not binary: one that folds case
/// (`utf8mb4_general_ci`, the default of many servers, and so of a
/// ShedLock table made without one) makes `Job` and `job` one lock, and
/// a hold that took over another spelling's row would read as lost at its
/// first renewal. The error names the statement that makes it binary.
fn binary(
    quoted: &str,
    whole: &str,
    set: Option<&str>,
    collation: Option<&str>,
) -> Result<(), LockError> {
    let Some(collation) = collation else {
        return Ok(());
    };
    if collation.ends_with("_bin") {
        return Ok(());
    }
    let set = set.unwrap_or("utf8mb4");
    Err(LockError::Config(format!(
        "the table {quoted}: its `name` column compares names by the collation {collation}, \
         which may make two names one lock (`Job` and `job`); names must compare byte for \
         byte: ALTER TABLE {quoted} MODIFY name {whole} CHARACTER SET {set} COLLATE {set}_bin \
         NOT NULL;"
    )))
}

/// Makes the slots beside lock table `table` (see [`layout::slots`]) when
/// they are missing, and their rows: an acquisition whose name's slot has
/// no row could never take it.
async fn prepare_slots(
    conn: &mut Conn,
    table: &crate::engine::sql::Table,
) -> Result<(), LockError> {
    let slots = layout::slots(table);
    make(conn, table, &slots, &layout::slots_ddl(table)).await?;
    let count = format!("SELECT COUNT(*) FROM {}", slots.quoted(Q));
    let counted = conn.query_first::<u64, _>(&count).await;
    if counted.map_err(|e| store_error(&e))? == Some(u64::from(layout::SLOTS)) {
        return Ok(());
    }
    if let Err(e) = conn.query_drop(layout::slots_rows(table)).await {
        return Err(match server_code(&e) {
            // Denied: INSERT (1142).
            Some(1142) => LockError::Config(format!(
                "the table {} lacks rows and this role may not insert them; run:\n{}",
                slots.quoted(Q),
                layout::slots_rows(table)
            )),
            _ => store_error(&e),
        });
    }
    match conn
        .query_first::<u64, _>(&count)
        .await
        .map_err(|e| store_error(&e))?
    {
        Some(n) if n == u64::from(layout::SLOTS) => Ok(()),
        n => Err(LockError::Config(format!(
            "the table {} is not a slots table: it has {} rows, not the {} slots 0 to {}",
            slots.quoted(Q),
            n.unwrap_or(0),
            layout::SLOTS,
            layout::SLOTS - 1
        ))),
    }
}

/// Makes `which` (the lock table `table`, its slots or its line) with `ddl` when it
/// is missing. A role that may not gets [`LockError::Config`] with the
/// statements to run.
async fn make(
    conn: &mut Conn,
    table: &crate::engine::sql::Table,
    which: &crate::engine::sql::Table,
    ddl: &str,
) -> Result<(), LockError> {
    let exists: Option<u64> = conn
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?",
            (which.schema.clone(), which.name.clone()),
        )
        .await
        .map_err(|e| store_error(&e))?;
    if exists.unwrap_or(0) == 0
        && let Err(e) = conn.query_drop(ddl).await
    {
        return Err(match server_code(&e) {
            // Denied: CREATE (1142), or the database (1044).
            Some(1142 | 1044) => LockError::Config(format!(
                "the table {} is missing and this role may not create it; \
                 have the lock tables made with:\n{}",
                which.quoted(Q),
                layout::all_ddl(table)
            )),
            _ => store_error(&e),
        });
    }
    Ok(())
}
