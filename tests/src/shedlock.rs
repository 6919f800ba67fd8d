//! A test client that locks the way a Java service does with ShedLock's
//! JDBC provider on PostgreSQL configured with `usingDbTime()`: ShedLock's
//! own SQL statements, text as ShedLock builds it, on a table the engine
//! under test shares (DESIGN §10). It is written from ShedLock's source
//! (repository `lukas-krecan/ShedLock`), never from the engine's:
//!
//! - the statements: `providers/sql/shedlock-sql-support/src/main/java/net/
//!   javacrumbs/shedlock/provider/sql/PostgresSqlServerTimeStatementsSource.java`
//!   (what `SqlStatementsSource.create` in `SqlStatementsSource.java`, same
//!   directory, picks for `POSTGRES_SQL` when `getUseDbTime()` is set);
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
//! Parameters are named in ShedLock's text (`:name`, `:lockedBy`,
//! `:lockAtMostForInterval`, `:lockAtLeastForInterval`); Spring's
//! `NamedParameterJdbcTemplate` turns every occurrence into a positional
//! parameter of its own, and so does [`positional`] (`$1`, `$2`, ...).

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls};

/// ShedLock's `now` with `usingDbTime()` on PostgreSQL: the database's
/// clock in UTC (`CURRENT_TIMESTAMP`, the start of the statement's
/// transaction). Source: `PostgresSqlServerTimeStatementsSource.java`
/// (`private static final String now`).
pub const NOW: &str = "timezone('utc', CURRENT_TIMESTAMP)";

/// ShedLock's column names (`SqlConfiguration.ColumnNames`, defaults of
/// `SqlConfigurationBuilder` in `SqlConfiguration.java`).
const NAME: &str = "name";
const LOCK_UNTIL: &str = "lock_until";
const LOCKED_AT: &str = "locked_at";
const LOCKED_BY: &str = "locked_by";

/// ShedLock's four statements for PostgreSQL with `usingDbTime()`, built
/// as `PostgresSqlServerTimeStatementsSource.java` concatenates them
/// (repository `lukas-krecan/ShedLock`, path `providers/sql/
/// shedlock-sql-support/src/main/java/net/javacrumbs/shedlock/provider/
/// sql/PostgresSqlServerTimeStatementsSource.java`), with ShedLock's named
/// parameters still in them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statements {
    /// `getInsertStatement()`: the row made, or an expired one taken over
    /// (`ON CONFLICT ... DO UPDATE ... WHERE lock_until <= now`).
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
    /// The statements on `table`, substituted as ShedLock does: the table
    /// name as configured, unquoted, and the default column names.
    pub fn new(table: &str) -> Statements {
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
        // `getExtendStatement()`
        let extend = format!(
            "UPDATE {table} SET {LOCK_UNTIL} = {lock_at_most_for} WHERE {NAME} = :name \
             AND {LOCKED_BY} = :lockedBy AND {LOCK_UNTIL} > {NOW}"
        );
        Statements {
            insert,
            update,
            extend,
            unlock,
        }
    }
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
    let mut out = String::with_capacity(sql.len());
    let mut params = Vec::new();
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
        let param = match &rest[..len] {
            "name" => Param::Name,
            "lockedBy" => Param::LockedBy,
            "lockAtMostForInterval" => Param::LockAtMostFor,
            "lockAtLeastForInterval" => Param::LockAtLeastFor,
            other => panic!("ShedLock's PostgreSQL statements have no parameter :{other}"),
        };
        params.push(param);
        out.push_str(&format!("${}", params.len()));
        for _ in 0..len {
            chars.next();
        }
    }
    (out, params)
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

/// Whether `e` is what `JdbcTemplateStorageAccessor` catches as
/// `DuplicateKeyException` or `ConcurrencyFailureException` (Spring's
/// translation of SQLSTATE 23505, and of 40001, 40P01 and 55P03) and
/// takes for "not locked" rather than a failure.
fn busy(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|code| {
        *code == SqlState::UNIQUE_VIOLATION
            || *code == SqlState::T_R_SERIALIZATION_FAILURE
            || *code == SqlState::T_R_DEADLOCK_DETECTED
            || *code == SqlState::LOCK_NOT_AVAILABLE
    })
}

/// One ShedLock instance (a `JdbcTemplateLockProvider` built with
/// `usingDbTime()`, as `StorageBasedLockProvider`) on a PostgreSQL table:
/// its connection, its statements, its `locked_by` value, and its cache of
/// the names it inserted (`LockRecordRegistry`).
///
/// Like ShedLock, every instance on one host writes the same `locked_by`
/// (the host name) unless given another ([`ShedLockPg::locked_by`]).
pub struct ShedLockPg {
    client: Client,
    statements: Statements,
    locked_by: String,
    /// `LockRecordRegistry`: names whose row this instance made, or found
    /// already there.
    inserted: Mutex<HashSet<String>>,
}

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
        Ok(ShedLockPg {
            client,
            statements: Statements::new(table),
            locked_by: host_name(),
            inserted: Mutex::default(),
        })
    }

    /// This instance with `value` as its `locked_by` (ShedLock's
    /// `withLockedByValue`).
    pub fn locked_by(mut self, value: &str) -> ShedLockPg {
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
        self.inserted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Whether this instance remembers having inserted `name`'s row
    /// (`LockRecordRegistry.lockRecordRecentlyCreated`).
    pub fn remembers(&self, name: &str) -> bool {
        self.inserted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(name)
    }

    /// Runs `sql` (ShedLock's text) with the values of `name`, `at_most`
    /// and `at_least` bound to its named parameters: whether it changed a
    /// row (`jdbcTemplate.update(sql, params) > 0` in
    /// `JdbcTemplateStorageAccessor.execute`). One statement in a
    /// transaction of its own, as Spring's `REQUIRES_NEW` transaction runs
    /// it.
    async fn execute(
        &self,
        sql: &str,
        name: &str,
        at_most: Duration,
        at_least: Duration,
    ) -> Result<bool, tokio_postgres::Error> {
        let (sql, params) = positional(sql);
        let (at_most, at_least) = (seconds(at_most), seconds(at_least));
        let values: Vec<&(dyn ToSql + Sync)> = params
            .iter()
            .map(|param| -> &(dyn ToSql + Sync) {
                match param {
                    Param::Name => &name,
                    Param::LockedBy => &self.locked_by,
                    Param::LockAtMostFor => &at_most,
                    Param::LockAtLeastFor => &at_least,
                }
            })
            .collect();
        Ok(self.client.execute(&sql, &values).await? > 0)
    }

    /// ShedLock's `LockProvider.lock` with a `LockConfiguration` of `name`,
    /// `lockAtMostFor` = `at_most`, `lockAtLeastFor` = `at_least`:
    /// whether the lock was taken. `StorageBasedLockProvider.doLock`:
    /// unless this instance inserted (or found) the name's row before, the
    /// insert statement first (taken when it changed a row; a duplicate key
    /// or a concurrency failure is "not taken"), and the name remembered
    /// either way; then, when the insert did not take it, the update
    /// statement (taken when it changed a row). An unexpected error of the
    /// update forgets the name again, if this call remembered it.
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
                Err(e) if busy(&e) => false,
                Err(e) => panic!("ShedLock's insert failed (LockException): {e:?}"),
            };
            self.inserted
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name.to_owned());
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
            Err(e) if busy(&e) => false,
            Err(e) => {
                if try_to_create {
                    self.inserted
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(name);
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
                Err(e) if busy(&e) => continue,
                Err(e) => panic!("ShedLock's unlock failed: {e:?}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_read_as_shedlock_builds_them() {
        let s = Statements::new("shedlock");
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
        let (sql, params) = positional(&Statements::new("shedlock").update);
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
}
