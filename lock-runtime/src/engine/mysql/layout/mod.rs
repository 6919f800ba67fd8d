//! The lock table on MySQL and MariaDB and the statements that work on it
//! (DESIGN §10): ShedLock's four columns and our `fence`, every time the
//! database's clock in UTC (`UTC_TIMESTAMP(6)`), every value a bound
//! parameter, the table's name validated and quoted. MySQL has no
//! `RETURNING`: a statement's answer is its affected rows and, for the
//! token, `LAST_INSERT_ID(expr)` (sent back in the same answer).

use crate::engine::sql::{KEPT, Table};
use crate::error::LockError;

// The line's and the permits' statements: parts of the layout, written
// with its pieces.
mod line;
mod permits;

use line::Line;
pub(crate) use permits::{PERMIT_COLUMNS, Permits, permits, permits_ddl};

/// How MySQL quotes an identifier.
pub(crate) const Q: char = '`';

/// The database's clock, in UTC (ShedLock's `usingDbTime()` convention).
/// One value for the whole statement.
const NOW: &str = "UTC_TIMESTAMP(6)";

/// The end a freed row gets (with `keep_rows`): the clock ([`NOW`]) cut
/// down to the whole millisecond, so that it reads as free at once to a
/// reader whose clock holds milliseconds (ShedLock's statements,
/// `UTC_TIMESTAMP(3)`), and is stored exactly in a column that holds only
/// milliseconds (MySQL rounds into a `TIMESTAMP(3)`).
const FREED: &str =
    "TIMESTAMPADD(MICROSECOND, -(MICROSECOND(UTC_TIMESTAMP(6)) % 1000), UTC_TIMESTAMP(6))";

/// The statement that makes the lock table: ShedLock's columns (names
/// compared byte for byte: `utf8mb4_bin`), times as `DATETIME(6)` (UTC
/// whatever the session's time zone) and `fence`.
pub(crate) fn ddl(table: &Table) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n    \
         name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,\n    \
         lock_until DATETIME(6) NOT NULL,\n    \
         locked_at DATETIME(6) NOT NULL,\n    \
         locked_by VARCHAR(255) NOT NULL,\n    \
         fence BIGINT NOT NULL DEFAULT 0\n) ENGINE=InnoDB;",
        table.quoted(Q)
    )
}

/// The statements that make the lock table, its slots, its line and its
/// permits (`lockctl schema`).
pub(crate) fn all_ddl(table: &Table) -> String {
    format!(
        "{}\n{}\n{}\n{}\n{}",
        ddl(table),
        slots_ddl(table),
        slots_rows(table),
        queue_ddl(table),
        permits_ddl(table)
    )
}

/// How many slots a lock table has: the names of the table are spread
/// over them by `CRC32(name) % SLOTS`.
pub(crate) const SLOTS: u32 = 32 * 32;

/// The slots beside the lock table: `<name>_slots` (a hash of the name when
/// that is longer than an identifier), one row per slot, never written
/// after they are made. Every statement that may make a name's row first
/// locks the name's slot (`FOR UPDATE`, until its end) and only then reads
/// the clock for a new row's token: no other acquisition of the name can
/// take the row and give it back in between, so the time is later than
/// every earlier holder's token was fixed (DECISIONS, "A new row's
/// token"). Two names of one slot take their rows one after the other.
pub(crate) fn slots(table: &Table) -> Table {
    table.beside("slots", 64)
}

/// The statement that makes the slots' table.
pub(crate) fn slots_ddl(table: &Table) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n    \
         slot SMALLINT NOT NULL PRIMARY KEY\n) ENGINE=InnoDB;",
        slots(table).quoted(Q)
    )
}

/// The statement that makes the slots' rows that are missing: the pairs
/// of 0 to 31 (a recursion 32 deep, far within the servers' limit on
/// one, 1,000 by default).
pub(crate) fn slots_rows(table: &Table) -> String {
    format!(
        "INSERT IGNORE INTO {} (slot) \
         WITH RECURSIVE n (i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 31) \
         SELECT a.i * 32 + b.i FROM n a, n b;",
        slots(table).quoted(Q),
    )
}

/// The line of fair and read-write locks beside the lock table:
/// `<name>_queue` (a hash of the name when that is longer than an
/// identifier; see `engine::sql::queue`).
pub(crate) fn queue(table: &Table) -> Table {
    table.beside("queue", 64)
}

/// The statement that makes the line.
pub(crate) fn queue_ddl(table: &Table) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n    \
         seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,\n    \
         name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n    \
         holder VARCHAR(255) NOT NULL,\n    \
         side CHAR(1) NOT NULL,\n    \
         held BOOLEAN NOT NULL DEFAULT FALSE,\n    \
         ticket_until DATETIME(6) NOT NULL,\n    \
         KEY by_name (name, seq)\n) ENGINE=InnoDB;",
        queue(table).quoted(Q)
    )
}

/// The columns a lock table must have, and the types each may be (as
/// `information_schema.COLUMNS.DATA_TYPE` names them).
pub(crate) const COLUMNS: [(&str, &[&str]); 5] = [
    ("name", &["varchar", "char"]),
    ("lock_until", &["datetime", "timestamp"]),
    ("locked_at", &["datetime", "timestamp"]),
    ("locked_by", &["varchar", "char", "text"]),
    ("fence", &["bigint"]),
];

/// The statements on one table, written once per client. `?` are bound
/// in the order each one's doc gives.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    /// Name, lease in µs, holder id, name: the row made where none is (its token
    /// as the last insert id, affected rows 1), else nothing (0). `None`
    /// with `keep_rows`, where rows stay: [`acquire`](Self::acquire) is
    /// the first try there.
    pub(crate) claim: Option<Sql>,
    /// Name, lease in µs, holder id, name: the row made, or taken over when
    /// free (or already the holder's), its token raised; affected rows 1 or 2
    /// and the token as the last insert id when taken, 0 when held.
    pub(crate) acquire: Sql,
    /// Name: a row's time left in µs and holder.
    pub(crate) look: Sql,
    /// Lease in µs, then (name, holder id) pairs: see [`renew`](Self::renew).
    renew_head: String,
    /// (name, holder id) pairs: which of them hold their rows.
    held_of_head: String,
    /// Name, holder id: the holder's row deleted (freed, with
    /// `keep_rows`); affected rows 1 when it was the holder's.
    pub(crate) release: Sql,
    /// How long in µs, name, holder id: the holder's row kept taken that
    /// long from now (a `hold_at_least` minimum), marked kept.
    pub(crate) keep: Sql,
    /// Name, holder id: a held row's token raised (the re-entry's own
    /// token, as the last insert id).
    pub(crate) reenter: Sql,
    /// Lease in µs, name, holder id: a held row's end moved to the lease
    /// from now, if later.
    pub(crate) extend: Sql,
    /// Name, holder id: whether the row is the holder's and held.
    pub(crate) holds: Sql,
    /// Name: the holder, token and time left in µs of a held row.
    pub(crate) inspect: Sql,
    /// The held rows: name, holder, time left in µs.
    pub(crate) held: Sql,
    /// Name, holder id: a held row freed whoever holds it (the holder
    /// found by [`inspect`](Self::inspect) first).
    pub(crate) force: Sql,
    /// How old in µs: rows free that long deleted (none with
    /// `keep_rows`).
    pub(crate) sweep: Option<Sql>,
    /// The line's statements (fair and read-write locks).
    pub(crate) line: Line,
    /// The permits' statements (semaphores).
    pub(crate) permits: Permits,
    /// How many [`Sql`]s there are (each connection has a place for each).
    pub(crate) count: usize,
}

impl Statements {
    /// The statements on `table`; with `keep_rows`, a release frees a row
    /// instead of deleting it (ShedLock only ever updates a row it
    /// inserted once).
    pub(crate) fn new(table: &Table, keep_rows: bool) -> Statements {
        let t = table.quoted(Q);
        let slots = slots(table).quoted(Q);
        let left = |until: &str| format!("TIMESTAMPDIFF(MICROSECOND, {NOW}, {until})");
        let acquire = take_row(&t, &slots, "?", "VALUES(lock_until)");
        // IGNORE turns a value MySQL would refuse into a warning: the
        // engine reads a claim that made its row with warnings as not
        // taken (see `engine::mysql::take`), and tries the upsert, which
        // refuses the value.
        let claim = insert_row("INSERT IGNORE", &t, &slots, "?");
        let look = format!(
            "SELECT {}, locked_by FROM {t} WHERE name = ?",
            left("lock_until")
        );
        let renew_head = format!(
            "UPDATE {t} SET lock_until = TIMESTAMPADD(MICROSECOND, ?, {NOW}) \
             WHERE lock_until > {NOW} AND (name, locked_by) IN "
        );
        let held_of_head = format!(
            "SELECT name, locked_by FROM {t} WHERE lock_until > {NOW} AND (name, locked_by) IN "
        );
        let release = if keep_rows {
            format!("UPDATE {t} SET lock_until = {FREED} WHERE name = ? AND locked_by = ?")
        } else {
            format!("DELETE FROM {t} WHERE name = ? AND locked_by = ?")
        };
        let keep = format!(
            "UPDATE {t} SET lock_until = TIMESTAMPADD(MICROSECOND, ?, {NOW}), \
             locked_by = CONCAT(locked_by, '{KEPT}') WHERE name = ? AND locked_by = ?"
        );
        let reenter = format!(
            "UPDATE {t} SET fence = LAST_INSERT_ID(fence + 1) \
             WHERE name = ? AND locked_by = ? AND lock_until > {NOW}"
        );
        let extend = format!(
            "UPDATE {t} SET lock_until = \
               GREATEST(lock_until, TIMESTAMPADD(MICROSECOND, ?, {NOW})) \
             WHERE name = ? AND locked_by = ? AND lock_until > {NOW}"
        );
        let holds =
            format!("SELECT 1 FROM {t} WHERE name = ? AND locked_by = ? AND lock_until > {NOW}");
        let inspect = format!(
            "SELECT locked_by, fence, {} FROM {t} WHERE name = ? AND lock_until > {NOW}",
            left("lock_until")
        );
        let held = format!(
            "SELECT name, locked_by, {} FROM {t} WHERE lock_until > {NOW} ORDER BY name",
            left("lock_until")
        );
        let force = if keep_rows {
            format!(
                "UPDATE {t} SET lock_until = {FREED} \
                 WHERE name = ? AND locked_by = ? AND lock_until > {NOW}"
            )
        } else {
            format!("DELETE FROM {t} WHERE name = ? AND locked_by = ? AND lock_until > {NOW}")
        };
        // A table shared with ShedLock keeps its rows.
        let sweep = (!keep_rows).then(|| {
            format!(
                "DELETE FROM {t} WHERE lock_until < TIMESTAMPADD(MICROSECOND, -?, {NOW}) \
                 LIMIT 1000"
            )
        });
        let mut n = Numbering(0);
        let line = Line::new(table, keep_rows, &mut n);
        let permits = Permits::new(table, keep_rows, &mut n);
        Statements {
            line,
            permits,
            claim: (!keep_rows).then(|| n.sql(claim)),
            acquire: n.sql(acquire),
            look: n.sql(look),
            renew_head,
            held_of_head,
            release: n.sql(release),
            keep: n.sql(keep),
            reenter: n.sql(reenter),
            extend: n.sql(extend),
            holds: n.sql(holds),
            inspect: n.sql(inspect),
            held: n.sql(held),
            force: n.sql(force),
            sweep: sweep.map(|sweep| n.sql(sweep)),
            count: n.0,
        }
    }

    /// The renewal of `n` rows (a lease in µs, then `n` name and holder
    /// id pairs), and the look at which of them are held since (the pairs
    /// again).
    pub(crate) fn renew(&self, n: usize) -> (String, String) {
        let pairs = vec!["(?, ?)"; n].join(", ");
        (
            format!("{}({pairs})", self.renew_head),
            format!("{}({pairs})", self.held_of_head),
        )
    }
}

/// Name, lease in µs (then holder id, when `holder` is `?`), name again:
/// lock row `name` taken for `holder`, made or taken over when free (or
/// already `holder`'s), its end then set to `until`, its token raised and
/// sent back as the last insert id; affected rows 1 or 2 when taken, 0
/// when held.
///
/// Assignments of ON DUPLICATE KEY UPDATE run left to right, each seeing
/// the ones before: `fence` and `locked_at` first (the row as it was), then
/// `locked_by` (after which the condition holds exactly when it held
/// before), then `lock_until`. A row made anew is [`insert_row`]'s.
fn take_row(t: &str, slots: &str, holder: &str, until: &str) -> String {
    let free = "(lock_until <= VALUES(locked_at) OR locked_by = VALUES(locked_by))";
    format!(
        "{} ON DUPLICATE KEY UPDATE \
           fence = IF({free}, LAST_INSERT_ID(GREATEST(fence + 1, VALUES(fence))), fence), \
           locked_at = IF({free}, VALUES(locked_at), locked_at), \
           locked_by = IF({free}, VALUES(locked_by), locked_by), \
           lock_until = IF({free}, {until}, lock_until)",
        insert_row("INSERT", t, slots, holder)
    )
}

/// The database's clock in µs since 1970, UTC, read when the expression is
/// evaluated (`SYSDATE(6)`), not as the statement came in: the
/// statement's start in UTC, plus the time since by the session's clock
/// (never less than the start, should the session's zone step back
/// meanwhile). `SYSDATE` is unsafe for statement-based replication
/// (`binlog_format=STATEMENT`): a replica would write another token.
const LATE_US: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) \
     + GREATEST(0, TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)))";

/// Name, lease in µs (then holder id, when `holder` is `?`), name again:
/// lock row `name` made for `holder` by `insert` (`INSERT`, or `INSERT
/// IGNORE`), its token the clock in µs read by a sub-select that first
/// locks the name's slot (see [`slots`]; [`LATE_US`], sent back as the
/// last insert id), so that a name's tokens keep rising across deletes
/// (and past a ShedLock holder, which writes none). (A sub-select in
/// `VALUES` costs the server less than an `INSERT ... SELECT`.) Without
/// its slot's row the token is `NULL`, which the `NOT NULL` column
/// refuses: the client checks the slots when it connects.
fn insert_row(insert: &str, t: &str, slots: &str, holder: &str) -> String {
    format!(
        "{insert} INTO {t} (name, lock_until, locked_at, locked_by, fence) \
         VALUES (?, TIMESTAMPADD(MICROSECOND, ?, {NOW}), {NOW}, {holder}, \
                 LAST_INSERT_ID((SELECT {LATE_US} FROM {slots} \
                   WHERE slot = CRC32(?) % {SLOTS} FOR UPDATE)))"
    )
}

/// One of a client's statements, numbered: each connection prepares it
/// once, when first run there, and keeps it in its place `at` (see
/// `engine::mysql::Link`).
#[derive(Debug, Clone)]
pub(crate) struct Sql {
    pub(crate) text: String,
    pub(crate) at: usize,
}

/// Numbers a client's statements in the order they are made.
struct Numbering(usize);

impl Numbering {
    fn sql(&mut self, text: String) -> Sql {
        let at = self.0;
        self.0 += 1;
        Sql { text, at }
    }
}

/// The character set of a table's `name` column, as far as a lock name
/// can be checked against it before a write (MySQL would refuse a
/// character outside it, or, outside strict mode, store `?`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Charset {
    /// `utf8mb4` (and binary strings): every name.
    Any,
    /// `utf8mb3` (`utf8`): the Basic Multilingual Plane.
    Bmp,
    /// `latin1`: ASCII and U+00A0 to U+00FF.
    Latin1,
    /// `ascii`, and any other (checked as ASCII).
    Ascii,
}

impl Charset {
    /// The set `information_schema` names `name`.
    pub(crate) fn of(name: Option<&str>) -> Charset {
        match name.map(str::to_ascii_lowercase).as_deref() {
            None | Some("utf8mb4" | "binary") => Charset::Any,
            Some("utf8mb3" | "utf8") => Charset::Bmp,
            Some("latin1") => Charset::Latin1,
            Some(_) => Charset::Ascii,
        }
    }

    fn holds(self, c: char) -> bool {
        match self {
            Charset::Any => true,
            Charset::Bmp => u32::from(c) <= 0xFFFF,
            Charset::Latin1 => c.is_ascii() || ('\u{A0}'..='\u{FF}').contains(&c),
            Charset::Ascii => c.is_ascii(),
        }
    }
}

/// Refuses a name MySQL cannot store faithfully or the table cannot hold
/// (before any write): a NUL byte, more characters than the `name` column
/// takes, a trailing space (MySQL compares `VARCHAR`s padded with spaces:
/// `a` and `a ` would be one lock), or a character outside the column's
/// character set.
pub(crate) fn check_name(
    name: &str,
    longest: Option<usize>,
    charset: Charset,
) -> Result<(), LockError> {
    crate::engine::sql::check_name(name, longest, super::ENGINE)?;
    if name.ends_with(' ') {
        return Err(LockError::BadName {
            name: name.to_owned(),
            reason: "a name on MySQL must not end with a space (MySQL compares names padded \
                     with spaces: `a` and `a ` would be one lock)",
        });
    }
    if !name.chars().all(|c| charset.holds(c)) {
        return Err(LockError::BadName {
            name: name.to_owned(),
            reason: "the name has characters outside the character set of the lock table's \
                     `name` column",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_against_the_columns_character_set() {
        assert!(check_name("stock:1", Some(255), Charset::Ascii).is_ok());
        assert!(check_name("bücher", Some(255), Charset::Latin1).is_ok());
        assert!(check_name("書", Some(255), Charset::Latin1).is_err());
        assert!(check_name("書", Some(255), Charset::Bmp).is_ok());
        assert!(check_name("🔒", Some(255), Charset::Bmp).is_err());
        assert!(check_name("🔒", Some(255), Charset::Any).is_ok());
        assert!(check_name("a ", Some(255), Charset::Any).is_err());
        assert!(check_name(" a", Some(255), Charset::Any).is_ok());
        assert!(check_name("a\0", Some(255), Charset::Any).is_err());
        assert_eq!(Charset::of(Some("utf8mb3")), Charset::Bmp);
        assert_eq!(Charset::of(Some("UTF8MB4")), Charset::Any);
        assert_eq!(Charset::of(Some("cp1251")), Charset::Ascii);
    }

    #[test]
    fn a_renewal_binds_a_pair_per_row() {
        let st = Statements::new(&Table::parse("locks", 64).unwrap(), false);
        let (renew, held) = st.renew(2);
        assert_eq!(renew.matches('?').count(), 5);
        assert!(renew.ends_with("IN ((?, ?), (?, ?))"), "{renew}");
        assert_eq!(held.matches('?').count(), 4);
        assert!(ddl(&Table::parse("a.b", 64).unwrap()).contains("`a`.`b`"));
    }
}
