//! Test clients that lock the way a Java service does with ShedLock's
//! JDBC provider configured with `usingDbTime()`, on PostgreSQL
//! ([`ShedLockPg`]) and on MySQL/MariaDB ([`ShedLockMy`]): ShedLock's own
//! SQL statements, text as ShedLock builds it, on a table the engine under
//! test shares (DESIGN §10). They are written from ShedLock's source
//! (repository `lukas-krecan/ShedLock`), never from the engine's:
//!
//! - the statements: `providers/sql/shedlock-sql-support/src/main/java/net/
//!   javacrumbs/shedlock/provider/sql/PostgresSqlServerTimeStatementsSource.java`
//!   and `MySqlServerTimeStatementsSource.java` (same directory): what
//!   `SqlStatementsSource.create` in `SqlStatementsSource.java` picks, through
//!   `DatabaseProduct.java`, for `POSTGRES_SQL`, and for `MY_SQL` and
//!   `MARIA_DB` alike, when `getUseDbTime()` is set;
//! - the defaults (table `shedlock`, columns `name`, `lock_until`,
//!   `locked_at`, `locked_by`, `locked_by` = the host name):
//!   `providers/sql/shedlock-sql-support/src/main/java/net/javacrumbs/
//!   shedlock/provider/sql/SqlConfiguration.java` and `shedlock-core/src/
//!   main/java/net/javacrumbs/shedlock/support/Utils.java`;
//! - how a statement runs and what counts as "busy":
//!   `providers/jdbc/shedlock-provider-jdbc-template/src/main/java/net/
//!   javacrumbs/shedlock/provider/jdbctemplate/JdbcTemplateStorageAccessor.java`;
//! - the insert-then-update logic and the cache of inserted names:
//!   `shedlock-core/src/main/java/net/javacrumbs/shedlock/support/
//!   StorageBasedLockProvider.java` and `LockRecordRegistry.java` (same
//!   directory); `extend`/`unlock` of a held lock: `shedlock-core/src/main/
//!   java/net/javacrumbs/shedlock/core/AbstractSimpleLock.java`.
//!
//! As in ShedLock, that logic is one, [`ShedLock`] (its
//! `StorageBasedLockProvider`), the same on both databases; what differs is
//! the statements' text ([`Statements::postgres`], [`Statements::mysql`])
//! and how a statement runs and fails there, an [`Accessor`]: [`PgClient`]
//! ([`ShedLockPg`]) and [`MyCli`] ([`ShedLockMy`]).
//!
//! Parameters are named in ShedLock's text (`:name`, `:lockedBy`,
//! `:lockAtMostForInterval`, `:lockAtLeastForInterval` on PostgreSQL;
//! `:lockAtMostForMicros`, `:lockAtLeastForMicros` on MySQL); Spring's
//! `NamedParameterJdbcTemplate` turns every occurrence into a positional
//! parameter of its own, and so does [`positional`] (`$1`, `$2`, ...) for
//! PostgreSQL. On MySQL the statements run through the `mariadb` CLI
//! instead (see [`MyCli`]), and [`inline`] puts each value in as an
//! SQL literal.

use std::collections::HashSet;
use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls};

use crate::mariadb::{Maria, MariaDb};
use crate::sql_server::Database;

/// ShedLock's `now` with `usingDbTime()` on PostgreSQL: the database's
/// clock in UTC (`CURRENT_TIMESTAMP`, the start of the statement's
/// transaction). Source: `PostgresSqlServerTimeStatementsSource.java`
/// (`private static final String now`).
pub const NOW: &str = "timezone('utc', CURRENT_TIMESTAMP)";
/// ShedLock's `now` with `usingDbTime()` on MySQL and MariaDB: the
/// database's clock in UTC, to the millisecond. Source:
/// `MySqlServerTimeStatementsSource.java` (`private static final String
/// now`).
pub const MY_NOW: &str = "UTC_TIMESTAMP(3)";

/// ShedLock's column names (`SqlConfiguration.ColumnNames`, defaults of
/// `SqlConfigurationBuilder` in `SqlConfiguration.java`).
const NAME: &str = "name";
const LOCK_UNTIL: &str = "lock_until";
const LOCKED_AT: &str = "locked_at";
const LOCKED_BY: &str = "locked_by";

/// ShedLock's four statements for one database with `usingDbTime()`,
/// built as its `SqlStatementsSource` for that database concatenates them
/// (repository `lukas-krecan/ShedLock`, directory `providers/sql/
/// shedlock-sql-support/src/main/java/net/javacrumbs/shedlock/provider/
/// sql/`), with ShedLock's named parameters still in them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statements {
    /// `getInsertStatement()`: the row made when there is none. On
    /// PostgreSQL an expired one is taken over too (`ON CONFLICT ... DO
    /// UPDATE ... WHERE lock_until <= now`); on MySQL (`INSERT IGNORE`) a
    /// row already there is left alone (no row changed).
    pub insert: String,
    /// `getUpdateStatement()`: an expired row taken over.
    pub update: String,
    /// `getExtendStatement()`: a held row's end moved to `lockAtMostFor`
    /// from now.
    pub extend: String,
    /// `getUnlockStatement()`: the row's end set to `locked_at +
    /// lockAtLeastFor`, or now when that has passed.
    pub unlock: String,
}

impl Statements {
    /// PostgreSQL's statements (`PostgresSqlServerTimeStatementsSource.java`)
    /// on `table`, substituted as ShedLock does: the table name as
    /// configured, unquoted, and the default column names.
    pub fn postgres(table: &str) -> Statements {
        // `lockAtMostFor()`: now + make_interval(secs => :lockAtMostForInterval)
        let lock_at_most_for = format!("{NOW} + make_interval(secs => :lockAtMostForInterval)");
        // `lockAtLeastFor()`
        let lock_at_least_for = "make_interval(secs => :lockAtLeastForInterval)";
        // `updateClause()`
        let update_clause = format!(
            " SET {LOCK_UNTIL} = {lock_at_most_for}, {LOCKED_AT} = {NOW}, {LOCKED_BY} = :lockedBy \
             WHERE {table}.{NAME} = :name AND {table}.{LOCK_UNTIL} <= {NOW}"
        );
        // `getInsertStatement()`
        let insert = format!(
            "INSERT INTO {table}({NAME}, {LOCK_UNTIL}, {LOCKED_AT}, {LOCKED_BY}) \
             VALUES(:name, {lock_at_most_for}, {NOW}, :lockedBy) \
             ON CONFLICT ({NAME}) DO UPDATE{update_clause}"
        );
        // `getUpdateStatement()`
        let update = format!("UPDATE {table}{update_clause}");
        // `getUnlockStatement()`: lockAtLeastFor = lockedAt() + " + " + lockAtLeastFor()
        let at_least = format!("{LOCKED_AT} + {lock_at_least_for}");
        let unlock = format!(
            "UPDATE {table} SET {LOCK_UNTIL} = CASE WHEN {at_least} > {NOW} THEN {at_least} \
             ELSE {NOW} END WHERE {NAME} = :name AND {LOCKED_BY} = :lockedBy"
        );
        Statements {
            insert,
            update,
            extend: extend(table, &lock_at_most_for, NOW),
            unlock,
        }
    }

    /// MySQL's and MariaDB's statements
    /// (`MySqlServerTimeStatementsSource.java`) on `table`, substituted as
    /// ShedLock does: the table name as configured, unquoted, and the
    /// default column names.
    pub fn mysql(table: &str) -> Statements {
        // `lockAtMostFor`
        let lock_at_most_for = format!("TIMESTAMPADD(MICROSECOND, :lockAtMostForMicros, {MY_NOW})");
        // `getInsertStatement()`
        let insert = format!(
            "INSERT IGNORE INTO {table}({NAME}, {LOCK_UNTIL}, {LOCKED_AT}, {LOCKED_BY}) \
             VALUES(:name, {lock_at_most_for}, {MY_NOW}, :lockedBy)"
        );
        // `getUpdateStatement()`
        let update = format!(
            "UPDATE {table} SET {LOCK_UNTIL} = {lock_at_most_for}, {LOCKED_AT} = {MY_NOW}, \
             {LOCKED_BY} = :lockedBy WHERE {NAME} = :name AND {LOCK_UNTIL} <= {MY_NOW}"
        );
        // `getUnlockStatement()`: its local `lockAtLeastFor`
        let at_least = format!("TIMESTAMPADD(MICROSECOND, :lockAtLeastForMicros, {LOCKED_AT})");
        let unlock = format!(
            "UPDATE {table} SET {LOCK_UNTIL} = IF ({at_least} > {MY_NOW} , {at_least}, {MY_NOW}) \
             WHERE {NAME} = :name AND {LOCKED_BY} = :lockedBy"
        );
        Statements {
            insert,
            update,
            extend: extend(table, &lock_at_most_for, MY_NOW),
            unlock,
        }
    }
}

/// `getExtendStatement()`, written alike by both sources: `table`'s row
/// of `:name`, still held by `:lockedBy` at `now`, held until
/// `lock_at_most_for` (from now).
fn extend(table: &str, lock_at_most_for: &str, now: &str) -> String {
    format!(
        "UPDATE {table} SET {LOCK_UNTIL} = {lock_at_most_for} WHERE {NAME} = :name \
         AND {LOCKED_BY} = :lockedBy AND {LOCK_UNTIL} > {now}"
    )
}

/// A named parameter of ShedLock's statements (the keys of
/// `PostgresSqlServerTimeStatementsSource.params`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// `:name`: the lock's name.
    Name,
    /// `:lockedBy`: `configuration.getLockedByValue()` (the host name).
    LockedBy,
    /// `:lockAtMostForInterval`: `lockAtMostFor` in seconds, to the
    /// millisecond.
    LockAtMostFor,
    /// `:lockAtLeastForInterval`: `lockAtLeastFor` in seconds, to the
    /// millisecond.
    LockAtLeastFor,
}

/// `sql` with each occurrence of a named parameter (`:name`) replaced by
/// the next positional one (`$1`, `$2`, ...), as Spring's
/// `NamedParameterJdbcTemplate` gives each occurrence a `?` of its own;
/// the parameters in order. `::` (a cast) and quoted text are left alone.
///
/// # Panics
///
/// On a parameter name ShedLock's PostgreSQL statements do not use.
pub fn positional(sql: &str) -> (String, Vec<Param>) {
    let mut params = Vec::new();
    let out = replace_named(sql, |name| {
        let param = match name {
            "name" => Param::Name,
            "lockedBy" => Param::LockedBy,
            "lockAtMostForInterval" => Param::LockAtMostFor,
            "lockAtLeastForInterval" => Param::LockAtLeastFor,
            other => panic!("ShedLock's PostgreSQL statements have no parameter :{other}"),
        };
        params.push(param);
        format!("${}", params.len())
    });
    (out, params)
}

/// `sql` with each occurrence of a named parameter (`:name`: a colon, then
/// letters, digits and `_`) replaced by what `replace` gives for its name,
/// the way Spring's `NamedParameterUtils` finds them: `::` (a PostgreSQL
/// cast) and text in single quotes are left alone.
fn replace_named(sql: &str, mut replace: impl FnMut(&str) -> String) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.char_indices().peekable();
    let mut quoted = false;
    while let Some((i, c)) = chars.next() {
        if c == '\'' {
            quoted = !quoted;
            out.push(c);
            continue;
        }
        if c != ':' || quoted {
            out.push(c);
            continue;
        }
        if chars.peek().is_some_and(|&(_, next)| next == ':') {
            out.push_str("::");
            chars.next();
            continue;
        }
        let rest = &sql[i + 1..];
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        out.push_str(&replace(&rest[..len]));
        for _ in 0..len {
            chars.next();
        }
    }
    out
}

/// `d` as ShedLock binds an interval on PostgreSQL with `usingDbTime()`:
/// `BigDecimal.valueOf(duration.toMillis()).scaleByPowerOfTen(-3)`, whole
/// milliseconds as seconds (`toSeconds` in
/// `PostgresSqlServerTimeStatementsSource.java`). JDBC sends a `numeric`
/// that PostgreSQL casts to `make_interval`'s `secs double precision`;
/// tokio-postgres binds the `double precision` the server infers for the
/// parameter, the same number of milliseconds.
pub fn seconds(d: Duration) -> f64 {
    d.as_millis() as f64 / 1000.0
}

/// What ShedLock's default `locked_by` is: the host's name
/// (`Utils.getHostname()`, `InetAddress.getLocalHost().getHostName()`),
/// `"unknown"` when there is none.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// A named parameter of ShedLock's MySQL statements (the keys of
/// `MySqlServerTimeStatementsSource.params`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MyParam {
    /// `:name`: the lock's name.
    Name,
    /// `:lockedBy`: `configuration.getLockedByValue()` (the host name).
    LockedBy,
    /// `:lockAtMostForMicros`: `lockAtMostFor` in whole microseconds
    /// ([`micros`]).
    LockAtMostForMicros,
    /// `:lockAtLeastForMicros`: `lockAtLeastFor` in whole microseconds
    /// ([`micros`]).
    LockAtLeastForMicros,
}

/// `sql` with each occurrence of a named parameter replaced by the SQL
/// literal `value` gives for it: what the server would see of a JDBC
/// statement with its parameters bound, for a client (the `mariadb` CLI)
/// that binds none.
///
/// # Panics
///
/// On a parameter name ShedLock's MySQL statements do not use.
pub fn inline(sql: &str, value: impl Fn(MyParam) -> String) -> String {
    replace_named(sql, |name| {
        value(match name {
            "name" => MyParam::Name,
            "lockedBy" => MyParam::LockedBy,
            "lockAtMostForMicros" => MyParam::LockAtMostForMicros,
            "lockAtLeastForMicros" => MyParam::LockAtLeastForMicros,
            other => panic!("ShedLock's MySQL statements have no parameter :{other}"),
        })
    })
}

/// `text` as a MySQL string literal, in single quotes, escaped for the
/// default `sql_mode` (where a backslash escapes): `'` doubled, `\` and
/// NUL as `\\` and `\0`.
pub fn string_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// `d` as ShedLock binds it on MySQL with `usingDbTime()`:
/// `duration.toNanos() / 1_000`, whole microseconds (`params` in
/// `MySqlServerTimeStatementsSource.java`).
pub fn micros(d: Duration) -> u128 {
    d.as_nanos() / 1_000
}

/// The values a ShedLock instance binds to its statements' named
/// parameters (the `params` of its `SqlStatementsSource`).
#[derive(Debug, Clone, Copy)]
pub struct Values<'a> {
    /// `:name`: the lock's name.
    pub name: &'a str,
    /// `:lockedBy`: the instance's `locked_by` value.
    pub locked_by: &'a str,
    /// `lockAtMostFor` (`:lockAtMostForInterval`, `:lockAtMostForMicros`).
    pub at_most: Duration,
    /// `lockAtLeastFor` (`:lockAtLeastForInterval`,
    /// `:lockAtLeastForMicros`).
    pub at_least: Duration,
}

/// How `JdbcTemplateStorageAccessor` takes a statement's error, after
/// Spring's translation of the database's error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// `DuplicateKeyException` or `DataIntegrityViolationException`: "not
    /// locked" for the insert and the update.
    Conflict,
    /// `ConcurrencyFailureException`: "not locked" for the insert and the
    /// update, and the unlock tried again.
    Concurrency,
    /// Anything else: ShedLock throws (here, a panic).
    Unexpected,
}

/// How a ShedLock instance runs one of its statements on its database:
/// the part of `JdbcTemplateStorageAccessor` (and of Spring's JDBC under
/// it) that differs by database. The rest, ShedLock's
/// `StorageBasedLockProvider`, is [`ShedLock`], the same on every
/// database.
pub trait Accessor: Send + Sync {
    /// A statement's error.
    type Error: std::fmt::Debug + Send;

    /// Runs `sql` (ShedLock's text, with its named parameters) with
    /// `values` bound to them, as Spring's `REQUIRES_NEW` transaction runs
    /// it: one statement in a transaction of its own. Whether it changed a
    /// row (`jdbcTemplate.update(sql, params) > 0` in
    /// `JdbcTemplateStorageAccessor.execute`).
    fn execute(
        &self,
        sql: &str,
        values: Values<'_>,
    ) -> impl Future<Output = Result<bool, Self::Error>> + Send;

    /// How ShedLock takes `error`.
    fn failure(error: &Self::Error) -> Failure;
}

/// One ShedLock instance (a `JdbcTemplateLockProvider` built with
/// `usingDbTime()`, as `StorageBasedLockProvider`) on a table of the
/// database `A` reaches: how it runs a statement there, its statements,
/// its `locked_by` value, and its cache of the names it inserted
/// (`LockRecordRegistry`). [`ShedLockPg`] on PostgreSQL, [`ShedLockMy`]
/// on MySQL/MariaDB.
///
/// Like ShedLock, every instance on one host writes the same `locked_by`
/// (the host name) unless given another ([`ShedLock::locked_by`]).
pub struct ShedLock<A> {
    accessor: A,
    statements: Statements,
    locked_by: String,
    /// `LockRecordRegistry`: names whose row this instance made, or found
    /// already there.
    inserted: Mutex<HashSet<String>>,
}

impl<A: Accessor> ShedLock<A> {
    /// An instance that runs `statements` through `accessor`, with the
    /// host name as `locked_by`.
    pub fn with_accessor(accessor: A, statements: Statements) -> ShedLock<A> {
        ShedLock {
            accessor,
            statements,
            locked_by: host_name(),
            inserted: Mutex::default(),
        }
    }

    /// This instance with `value` as its `locked_by` (ShedLock's
    /// `withLockedByValue`).
    pub fn locked_by(mut self, value: &str) -> ShedLock<A> {
        value.clone_into(&mut self.locked_by);
        self
    }

    /// The value this instance writes in `locked_by`.
    pub fn locked_by_value(&self) -> &str {
        &self.locked_by
    }

    /// The statements this instance runs, with their named parameters.
    pub fn statements(&self) -> &Statements {
        &self.statements
    }

    /// Forgets the names it inserted (`StorageBasedLockProvider.clearCache`).
    pub fn clear_cache(&self) {
        self.registry().clear();
    }

    /// Whether this instance remembers having inserted `name`'s row
    /// (`LockRecordRegistry.lockRecordRecentlyCreated`).
    pub fn remembers(&self, name: &str) -> bool {
        self.registry().contains(name)
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.inserted.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `sql` with `name`'s values (see [`Accessor::execute`]).
    async fn execute(
        &self,
        sql: &str,
        name: &str,
        at_most: Duration,
        at_least: Duration,
    ) -> Result<bool, A::Error> {
        let values = Values {
            name,
            locked_by: &self.locked_by,
            at_most,
            at_least,
        };
        self.accessor.execute(sql, values).await
    }

    /// ShedLock's `LockProvider.lock` with a `LockConfiguration` of `name`,
    /// `lockAtMostFor` = `at_most`, `lockAtLeastFor` = `at_least`:
    /// whether the lock was taken. `StorageBasedLockProvider.doLock`:
    /// unless this instance inserted (or found) the name's row before, the
    /// insert statement first (taken when it changed a row; a conflict or a
    /// concurrency failure, see [`Failure`], is "not taken"), and the name
    /// remembered either way; then, when the insert did not take it, the
    /// update statement (taken when it changed a row). An unexpected error
    /// of the update forgets the name again, if this call remembered it.
    ///
    /// # Panics
    ///
    /// On what ShedLock throws: `at_least` longer than `at_most`, an empty
    /// name (`LockConfiguration`), an unexpected database error
    /// (`LockException`).
    pub async fn lock(&self, name: &str, at_most: Duration, at_least: Duration) -> bool {
        assert!(
            at_least <= at_most,
            "lockAtLeastFor is longer than lockAtMostFor for lock '{name}'."
        );
        assert!(!name.is_empty(), "lock name can not be empty");
        let try_to_create = !self.remembers(name);
        if try_to_create {
            // JdbcTemplateStorageAccessor.insertRecord
            let inserted = match self
                .execute(&self.statements.insert, name, at_most, at_least)
                .await
            {
                Ok(changed) => changed,
                Err(e) if A::failure(&e) != Failure::Unexpected => false,
                Err(e) => panic!("ShedLock's insert failed (LockException): {e:?}"),
            };
            self.registry().insert(name.to_owned());
            if inserted {
                return true;
            }
        }
        // JdbcTemplateStorageAccessor.updateRecord
        match self
            .execute(&self.statements.update, name, at_most, at_least)
            .await
        {
            Ok(changed) => changed,
            Err(e) if A::failure(&e) != Failure::Unexpected => false,
            Err(e) => {
                if try_to_create {
                    self.registry().remove(name);
                }
                panic!("ShedLock's update failed (LockException): {e:?}")
            }
        }
    }

    /// ShedLock's `SimpleLock.extend(lockAtMostFor, lockAtLeastFor)` of a
    /// held lock `name` (`JdbcTemplateStorageAccessor.extend`, the extend
    /// statement): whether the lock, still held by this `locked_by`, now
    /// lasts `at_most` from now.
    ///
    /// # Panics
    ///
    /// On `at_least` longer than `at_most` (`LockConfiguration`), or a
    /// database error (ShedLock does not catch any here).
    pub async fn extend(&self, name: &str, at_most: Duration, at_least: Duration) -> bool {
        assert!(
            at_least <= at_most,
            "lockAtLeastFor is longer than lockAtMostFor for lock '{name}'."
        );
        self.execute(&self.statements.extend, name, at_most, at_least)
            .await
            .unwrap_or_else(|e| panic!("ShedLock's extend failed: {e:?}"))
    }

    /// ShedLock's `SimpleLock.unlock()` of a lock `name` taken with
    /// `lockAtLeastFor` = `at_least` (`JdbcTemplateStorageAccessor.unlock`,
    /// the unlock statement): the row's end set to `locked_at + at_least`,
    /// or now when that has passed. Tried up to 10 times on a concurrency
    /// failure, as ShedLock does; then given up silently (ShedLock logs
    /// it).
    ///
    /// # Panics
    ///
    /// On any other database error.
    pub async fn unlock(&self, name: &str, at_least: Duration) {
        for _ in 0..10 {
            // `lockAtMostFor` is in the parameters' map but not in the
            // statement.
            match self
                .execute(&self.statements.unlock, name, at_least, at_least)
                .await
            {
                Ok(_) => return,
                Err(e) if A::failure(&e) == Failure::Concurrency => continue,
                Err(e) => panic!("ShedLock's unlock failed: {e:?}"),
            }
        }
    }
}

/// A ShedLock instance on PostgreSQL (see [`PgClient`]).
pub type ShedLockPg = ShedLock<PgClient>;

impl ShedLockPg {
    /// Connects to `url` (`postgres://user:password@host:port/db`) and
    /// locks in `table` (ShedLock's `withTableName`), with the host name as
    /// `locked_by`. The connection is driven by a task of the current
    /// tokio runtime.
    pub async fn connect(url: &str, table: &str) -> Result<ShedLockPg, tokio_postgres::Error> {
        let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(ShedLock::with_accessor(
            PgClient { client },
            Statements::postgres(table),
        ))
    }
}

/// How ShedLock's statements run on PostgreSQL: on one connection, each in
/// a transaction of its own (autocommit), with each occurrence of a named
/// parameter bound to a positional one ([`positional`]).
pub struct PgClient {
    client: Client,
}

impl Accessor for PgClient {
    type Error = tokio_postgres::Error;

    async fn execute(&self, sql: &str, values: Values<'_>) -> Result<bool, tokio_postgres::Error> {
        let (sql, params) = positional(sql);
        let (at_most, at_least) = (seconds(values.at_most), seconds(values.at_least));
        let bound: Vec<&(dyn ToSql + Sync)> = params
            .iter()
            .map(|param| -> &(dyn ToSql + Sync) {
                match param {
                    Param::Name => &values.name,
                    Param::LockedBy => &values.locked_by,
                    Param::LockAtMostFor => &at_most,
                    Param::LockAtLeastFor => &at_least,
                }
            })
            .collect();
        Ok(self.client.execute(&sql, &bound).await? > 0)
    }

    /// Spring's translation of SQLSTATE 23505 (`DuplicateKeyException`),
    /// and of 40001, 40P01 and 55P03 (`ConcurrencyFailureException`).
    fn failure(e: &tokio_postgres::Error) -> Failure {
        match e.code() {
            Some(code) if *code == SqlState::UNIQUE_VIOLATION => Failure::Conflict,
            Some(code)
                if *code == SqlState::T_R_SERIALIZATION_FAILURE
                    || *code == SqlState::T_R_DEADLOCK_DETECTED
                    || *code == SqlState::LOCK_NOT_AVAILABLE =>
            {
                Failure::Concurrency
            }
            _ => Failure::Unexpected,
        }
    }
}

/// Why a statement of [`MyCli`] failed: the server's error number
/// (`ERROR 1213 (40001) ...` of the CLI), when it names one, and the CLI's
/// error output.
#[derive(Debug, Clone)]
pub struct CliError {
    /// MySQL's error number.
    pub code: Option<u32>,
    /// The CLI's error output (or why it did not run).
    pub message: String,
}

/// A ShedLock instance on MySQL/MariaDB (see [`MyCli`]).
pub type ShedLockMy = ShedLock<MyCli>;

impl ShedLockMy {
    /// An instance on `server` that locks in `table` (ShedLock's
    /// `withTableName`), with the host name as `locked_by`.
    pub fn new(server: &MariaDb, table: &str) -> ShedLockMy {
        let cli = MyCli {
            dir: server.dir().to_owned(),
            port: server.port(),
            zone: None,
        };
        ShedLock::with_accessor(cli, Statements::mysql(table))
    }

    /// [`new`](Self::new), its sessions in time zone `zone` (`SET
    /// time_zone`), as a JDBC URL with `connectionTimeZone=<zone>&
    /// forceConnectionTimeZoneToSession=true` sets them.
    pub fn in_zone(server: &MariaDb, table: &str, zone: &str) -> ShedLockMy {
        let cli = MyCli {
            dir: server.dir().to_owned(),
            port: server.port(),
            zone: Some(zone.to_owned()),
        };
        ShedLock::with_accessor(cli, Statements::mysql(table))
    }
}

/// How ShedLock's statements run on MySQL/MariaDB: each, as Spring's
/// `REQUIRES_NEW` transaction does, in a transaction of its own (`START
/// TRANSACTION`, the statement, `COMMIT`) on a session of its own: one run
/// of the `mariadb` CLI as `root` over the server's socket. Its session
/// keeps the server's time zone ([`crate::mariadb::TIME_ZONE`], `+05:45`),
/// as a JDBC session does that sets none, and speaks `utf8mb4` (`SET
/// NAMES`). Values go in as SQL literals ([`inline`]); whether a statement
/// changed a row (`jdbcTemplate.update(...) > 0`) is `SELECT ROW_COUNT()`
/// right after it in the same session. (`ROW_COUNT()` counts rows
/// changed, where Connector/J's default counts rows matched: the same for
/// ShedLock's statements, each of which moves `lock_until` or `locked_at`
/// of every row it matches.)
pub struct MyCli {
    /// The server's directory (its socket) and port: how to reach it as
    /// root.
    dir: PathBuf,
    port: u16,
    /// The session's time zone, when one is forced on it.
    zone: Option<String>,
}

impl MyCli {
    /// Runs `script` in the database `locks` as root, through the
    /// `mariadb` CLI (a process awaited without blocking the runtime):
    /// its output, or its error.
    async fn run(&self, script: &str) -> Result<String, CliError> {
        let cli = Maria::superuser_cli(&self.dir, self.port);
        let mut child = tokio::process::Command::from(cli)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| CliError {
                code: None,
                message: format!("the mariadb CLI does not run: {e}"),
            })?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        let script = script.to_owned();
        let writer = tokio::spawn(async move {
            let _ = stdin.write_all(script.as_bytes()).await;
        });
        let out = child.wait_with_output().await.map_err(|e| CliError {
            code: None,
            message: format!("the mariadb CLI: {e}"),
        })?;
        let _ = writer.await;
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        let message = String::from_utf8_lossy(&out.stderr).into_owned();
        let code = message
            .split_once("ERROR ")
            .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|digits| digits.parse().ok());
        Err(CliError { code, message })
    }
}

impl Accessor for MyCli {
    type Error = CliError;

    async fn execute(&self, sql: &str, values: Values<'_>) -> Result<bool, CliError> {
        let statement = inline(sql, |param| match param {
            MyParam::Name => string_literal(values.name),
            MyParam::LockedBy => string_literal(values.locked_by),
            MyParam::LockAtMostForMicros => micros(values.at_most).to_string(),
            MyParam::LockAtLeastForMicros => micros(values.at_least).to_string(),
        });
        let zone = self
            .zone
            .as_ref()
            .map(|zone| format!("SET time_zone = {};\n", string_literal(zone)))
            .unwrap_or_default();
        let script = format!(
            "SET NAMES utf8mb4;\n{zone}START TRANSACTION;\n{statement};\nSELECT ROW_COUNT();\nCOMMIT;\n"
        );
        let out = self.run(&script).await?;
        let changed: i64 = out
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("ROW_COUNT() of {statement:?}: {out:?}"));
        Ok(changed > 0)
    }

    /// Spring's translation of MySQL's error numbers (`sql-error-codes.xml`,
    /// MySQL and MariaDB): `DuplicateKeyException` (1062) and
    /// `DataIntegrityViolationException` (e.g. 1451, 1452), and
    /// `ConcurrencyFailureException`: a deadlock (1213), a lock wait
    /// timeout (1205), `NOWAIT` (3572).
    fn failure(e: &CliError) -> Failure {
        match e.code {
            Some(1062 | 1451 | 1452) => Failure::Conflict,
            Some(1213 | 1205 | 3572) => Failure::Concurrency,
            _ => Failure::Unexpected,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_read_as_shedlock_builds_them() {
        let s = Statements::postgres("shedlock");
        assert_eq!(
            s.insert,
            "INSERT INTO shedlock(name, lock_until, locked_at, locked_by) \
             VALUES(:name, timezone('utc', CURRENT_TIMESTAMP) + make_interval(secs => \
             :lockAtMostForInterval), timezone('utc', CURRENT_TIMESTAMP), :lockedBy) \
             ON CONFLICT (name) DO UPDATE SET lock_until = timezone('utc', CURRENT_TIMESTAMP) \
             + make_interval(secs => :lockAtMostForInterval), locked_at = timezone('utc', \
             CURRENT_TIMESTAMP), locked_by = :lockedBy WHERE shedlock.name = :name AND \
             shedlock.lock_until <= timezone('utc', CURRENT_TIMESTAMP)"
        );
        assert_eq!(
            s.unlock,
            "UPDATE shedlock SET lock_until = CASE WHEN locked_at + make_interval(secs => \
             :lockAtLeastForInterval) > timezone('utc', CURRENT_TIMESTAMP) THEN locked_at + \
             make_interval(secs => :lockAtLeastForInterval) ELSE timezone('utc', \
             CURRENT_TIMESTAMP) END WHERE name = :name AND locked_by = :lockedBy"
        );
    }

    #[test]
    fn every_occurrence_is_a_parameter_of_its_own() {
        let (sql, params) = positional(&Statements::postgres("shedlock").update);
        assert_eq!(params, [Param::LockAtMostFor, Param::LockedBy, Param::Name]);
        assert!(sql.contains("make_interval(secs => $1)"), "{sql}");
        assert!(
            sql.contains("locked_by = $2 WHERE shedlock.name = $3"),
            "{sql}"
        );
        let (cast, none) = positional("SELECT 'a:b', 1::bigint");
        assert_eq!(cast, "SELECT 'a:b', 1::bigint");
        assert!(none.is_empty());
    }

    #[test]
    fn intervals_are_whole_milliseconds_in_seconds() {
        assert_eq!(seconds(Duration::from_micros(2_500_900)), 2.5);
        assert_eq!(seconds(Duration::ZERO), 0.0);
    }

    #[test]
    fn mysql_statements_read_as_shedlock_builds_them() {
        let s = Statements::mysql("shedlock");
        assert_eq!(
            s.insert,
            "INSERT IGNORE INTO shedlock(name, lock_until, locked_at, locked_by) \
             VALUES(:name, TIMESTAMPADD(MICROSECOND, :lockAtMostForMicros, UTC_TIMESTAMP(3)), \
             UTC_TIMESTAMP(3), :lockedBy)"
        );
        assert_eq!(
            s.update,
            "UPDATE shedlock SET lock_until = TIMESTAMPADD(MICROSECOND, :lockAtMostForMicros, \
             UTC_TIMESTAMP(3)), locked_at = UTC_TIMESTAMP(3), locked_by = :lockedBy \
             WHERE name = :name AND lock_until <= UTC_TIMESTAMP(3)"
        );
        assert_eq!(
            s.unlock,
            "UPDATE shedlock SET lock_until = IF (TIMESTAMPADD(MICROSECOND, \
             :lockAtLeastForMicros, locked_at) > UTC_TIMESTAMP(3) , TIMESTAMPADD(MICROSECOND, \
             :lockAtLeastForMicros, locked_at), UTC_TIMESTAMP(3)) WHERE name = :name \
             AND locked_by = :lockedBy"
        );
        assert_eq!(
            s.extend,
            "UPDATE shedlock SET lock_until = TIMESTAMPADD(MICROSECOND, :lockAtMostForMicros, \
             UTC_TIMESTAMP(3)) WHERE name = :name AND locked_by = :lockedBy \
             AND lock_until > UTC_TIMESTAMP(3)"
        );
    }

    #[test]
    fn mysql_values_go_in_as_literals() {
        let sql = inline(&Statements::mysql("shedlock").update, |param| match param {
            MyParam::Name => string_literal("it's a \\ name\0"),
            MyParam::LockedBy => string_literal("host"),
            MyParam::LockAtMostForMicros => micros(Duration::from_nanos(2_500_000_999)).to_string(),
            MyParam::LockAtLeastForMicros => unreachable!("not in the update"),
        });
        assert!(
            sql.contains("TIMESTAMPADD(MICROSECOND, 2500000, UTC_TIMESTAMP(3))"),
            "{sql}"
        );
        assert!(
            sql.contains("locked_by = 'host' WHERE name = 'it''s a \\\\ name\\0'"),
            "{sql}"
        );
    }
}
