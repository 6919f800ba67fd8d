//! The lock table on PostgreSQL and the statements that work on it
//! (DESIGN §10): ShedLock's four columns and our `fence`, every time the
//! database's clock in UTC, every value a bound parameter, the table's
//! name validated and quoted.

use crate::engine::sql::{KEPT, Table};
use crate::error::LockError;

/// How PostgreSQL quotes an identifier.
pub(crate) const Q: char = '"';

/// The database's clock, in UTC, as a `timestamp` (ShedLock's
/// `usingDbTime()` convention; `clock_timestamp()`, not the transaction's
/// start, so that two times of one statement are read when they are
/// used).
const NOW: &str = "timezone('utc', clock_timestamp())";

/// What PostgreSQL adds to a lock table: its announcement channel, its
/// waiters' table, and the statements that make both.
pub(crate) trait PgTable {
    /// The channel the table's releases are announced on (`LISTEN`'s
    /// identifier, and `pg_notify`'s first argument): the table's name
    /// with its schema, so that two tables never wake each other.
    fn channel(&self) -> String;
    /// The table of waiters beside it: `<name>_waiting` (a hash of the
    /// name when that is longer than an identifier).
    fn waiting(&self) -> Table;
    /// The statements that make the lock table and its waiters' table.
    fn ddl(&self) -> String;
    /// The statement that makes the waiters' table: who waits for which
    /// name, until when (a waiter that died is forgotten then). A release
    /// announces a name only when it has a waiter.
    fn waiting_ddl(&self) -> String;
    /// The statement that makes the lock table: ShedLock's columns (names
    /// compared byte for byte: `COLLATE "C"`) and `fence`.
    fn lock_ddl(&self) -> String;
}

impl PgTable for Table {
    fn channel(&self) -> String {
        let qualified = self.qualified();
        // A channel is an identifier: at most 63 bytes (`pg_notify` refuses
        // a longer one, `LISTEN` cuts it short). A longer qualified name is
        // named by a hash of it (FNV-1a), the same in every client.
        if qualified.len() <= 63 {
            return qualified;
        }
        format!("locks_{:016x}", fnv(&qualified))
    }

    fn waiting(&self) -> Table {
        let name = format!("{}_waiting", self.name);
        let name = if name.len() <= 63 {
            name
        } else {
            format!("locks_waiting_{:016x}", fnv(&self.name))
        };
        Table {
            schema: self.schema.clone(),
            name,
        }
    }

    fn ddl(&self) -> String {
        format!("{}\n{}", self.lock_ddl(), self.waiting_ddl())
    }

    fn waiting_ddl(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (\n    \
             name VARCHAR(255) COLLATE \"C\" NOT NULL,\n    \
             waiter VARCHAR(255) NOT NULL,\n    \
             wait_until TIMESTAMP NOT NULL,\n    \
             PRIMARY KEY (name, waiter)\n);",
            self.waiting().quoted(Q)
        )
    }

    fn lock_ddl(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (\n    \
             name VARCHAR(255) COLLATE \"C\" NOT NULL PRIMARY KEY,\n    \
             lock_until TIMESTAMP NOT NULL,\n    \
             locked_at TIMESTAMP NOT NULL,\n    \
             locked_by VARCHAR(255) NOT NULL,\n    \
             fence BIGINT NOT NULL DEFAULT 0\n);",
            self.quoted(Q)
        )
    }
}

/// FNV-1a of `text`: a short name for a long one, the same in every
/// client.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The columns a lock table must have, and the types each may be (as
/// `pg_type.typname` names them).
pub(crate) const COLUMNS: [(&str, &[&str]); 5] = [
    ("name", &["varchar", "text"]),
    ("lock_until", &["timestamp"]),
    ("locked_at", &["timestamp"]),
    ("locked_by", &["varchar", "text"]),
    ("fence", &["int8"]),
];

/// The statements on one table, written once per client.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    /// `$1` name, `$2` holder id, `$3` lease in µs: the lock taken (a row
    /// made, or a free one's taken over) with its token, or the time the
    /// holder's row has left in µs and its holder (no token).
    pub(crate) acquire: String,
    /// `$1` names, `$2` holder ids, `$3` lease in µs: the rows still
    /// held by those holders move their end to the lease from now; the
    /// rows renewed.
    pub(crate) renew: String,
    /// `$1` name, `$2` holder id, `$3` channel: the holder's row deleted
    /// (kept and freed, with `keep_rows`) and the release announced; a
    /// row when it was the holder's.
    pub(crate) release: String,
    /// `$1` name, `$2` holder id, `$3` how long in µs: the holder's row
    /// kept taken that long from now (a `hold_at_least` minimum), marked
    /// kept; a row when it was the holder's.
    pub(crate) keep: String,
    /// `$1` name, `$2` holder id: the holder's row's token raised (a
    /// re-entry's own token); the token, when it is still the holder's.
    pub(crate) reenter: String,
    /// `$1` name, `$2` holder id, `$3` lease in µs: a held row's end moved
    /// to the lease from now, if later; a row when it was the holder's.
    pub(crate) extend: String,
    /// `$1` name, `$2` channel: the row freed whoever holds it, and
    /// announced; its holder, when it was held.
    pub(crate) force: String,
    /// `$1` name: the holder, token and time left in µs of a held row.
    pub(crate) inspect: String,
    /// The held rows: name, holder, time left in µs.
    pub(crate) held: String,
    /// `$1` name, `$2` waiter (its holder id), `$3` how long in µs: the
    /// waiter registered (or its registration made longer), so that a
    /// release of the name announces it.
    pub(crate) wait: String,
    /// `$1` name, `$2` waiter: its registration gone.
    pub(crate) unwait: String,
    /// Rows free for over a minute deleted (none with `keep_rows`): names
    /// locked once, whose holder died before deleting its row.
    pub(crate) sweep: String,
}

impl Statements {
    /// The statements on `table`; with `keep_rows`, a release frees a row
    /// instead of deleting it (ShedLock only ever updates a row it
    /// inserted once).
    pub(crate) fn new(table: &Table, keep_rows: bool) -> Statements {
        let t = table.quoted(Q);
        let w = table.waiting().quoted(Q);
        // A name is announced only when a waiter waits for it: a notifying
        // transaction's commit is serialized with every other's, and an
        // uncontended release has nobody to wake.
        let waited = |name: &str| {
            format!("EXISTS (SELECT 1 FROM {w} v WHERE v.name = {name} AND v.wait_until > {NOW})")
        };
        let left =
            |until: &str| format!("(extract(epoch from ({until} - {NOW})) * 1000000)::bigint");
        // A row made anew starts its tokens from the clock in µs, so a
        // name's tokens keep rising across deletes (and past a ShedLock
        // holder, which writes none).
        let acquire = format!(
            "WITH now AS (SELECT {NOW} AS t), \
             taken AS (\
               INSERT INTO {t} AS l (name, lock_until, locked_at, locked_by, fence) \
               SELECT $1, now.t + $3::bigint * interval '1 microsecond', now.t, $2, \
                      (extract(epoch from now.t) * 1000000)::bigint FROM now \
               ON CONFLICT (name) DO UPDATE SET lock_until = EXCLUDED.lock_until, \
                 locked_at = EXCLUDED.locked_at, locked_by = EXCLUDED.locked_by, \
                 fence = GREATEST(l.fence + 1, EXCLUDED.fence) \
               WHERE l.lock_until <= EXCLUDED.locked_at OR l.locked_by = EXCLUDED.locked_by \
               RETURNING fence), \
             unwait AS (DELETE FROM {w} v USING taken WHERE v.name = $1 AND v.waiter = $2) \
             SELECT (SELECT fence FROM taken), h.left, h.locked_by \
             FROM (SELECT 1) one LEFT JOIN (\
               SELECT (extract(epoch from (h.lock_until - now.t)) * 1000000)::bigint AS left, \
                      h.locked_by::text AS locked_by \
               FROM {t} h, now WHERE h.name = $1) h ON true"
        );
        let renew = format!(
            "UPDATE {t} AS l SET lock_until = {NOW} + $3::bigint * interval '1 microsecond' \
             FROM unnest($1::text[], $2::text[]) AS h(name, holder) \
             WHERE l.name = h.name AND l.locked_by = h.holder AND l.lock_until > {NOW} \
             RETURNING l.name::text, l.locked_by::text"
        );
        let free = if keep_rows {
            format!(
                "UPDATE {t} SET lock_until = {NOW} WHERE name = $1 AND locked_by = $2 \
                 RETURNING name"
            )
        } else {
            format!("DELETE FROM {t} WHERE name = $1 AND locked_by = $2 RETURNING name")
        };
        let release = format!(
            "WITH gone AS ({free}) \
             SELECT CASE WHEN {} THEN pg_notify($3, gone.name) END FROM gone",
            waited("gone.name")
        );
        let keep = format!(
            "UPDATE {t} SET lock_until = {NOW} + $3::bigint * interval '1 microsecond', \
             locked_by = locked_by || '{KEPT}' \
             WHERE name = $1 AND locked_by = $2 RETURNING name"
        );
        let reenter = format!(
            "UPDATE {t} SET fence = fence + 1 \
             WHERE name = $1 AND locked_by = $2 AND lock_until > {NOW} RETURNING fence"
        );
        let extend = format!(
            "UPDATE {t} SET lock_until = \
               GREATEST(lock_until, {NOW} + $3::bigint * interval '1 microsecond') \
             WHERE name = $1 AND locked_by = $2 AND lock_until > {NOW} RETURNING name"
        );
        let force_free = if keep_rows {
            format!(
                "UPDATE {t} SET lock_until = {NOW} WHERE name = $1 AND lock_until > {NOW} \
                 RETURNING name, locked_by"
            )
        } else {
            format!(
                "DELETE FROM {t} WHERE name = $1 AND lock_until > {NOW} \
                 RETURNING name, locked_by"
            )
        };
        let force = format!(
            "WITH gone AS ({force_free}) \
             SELECT gone.locked_by::text, CASE WHEN {} THEN pg_notify($2, gone.name) END \
             FROM gone",
            waited("gone.name")
        );
        let wait = format!(
            "INSERT INTO {w} (name, waiter, wait_until) \
             VALUES ($1, $2, {NOW} + $3::bigint * interval '1 microsecond') \
             ON CONFLICT (name, waiter) DO UPDATE SET wait_until = EXCLUDED.wait_until"
        );
        let unwait = format!("DELETE FROM {w} WHERE name = $1 AND waiter = $2");
        let inspect = format!(
            "SELECT locked_by::text, fence, {} FROM {t} WHERE name = $1 AND lock_until > {NOW}",
            left("lock_until")
        );
        let held = format!(
            "SELECT name::text, locked_by::text, {} FROM {t} WHERE lock_until > {NOW} \
             ORDER BY name",
            left("lock_until")
        );
        let old = format!("{NOW} - $1::bigint * interval '1 microsecond'");
        let sweep = if keep_rows {
            // A table shared with ShedLock keeps its rows.
            format!("DELETE FROM {w} WHERE wait_until < {old}")
        } else {
            format!(
                "WITH waiters AS (DELETE FROM {w} WHERE wait_until < {old}) \
                 DELETE FROM {t} WHERE lock_until < {old}"
            )
        };
        Statements {
            acquire,
            renew,
            release,
            keep,
            reenter,
            extend,
            force,
            inspect,
            held,
            wait,
            unwait,
            sweep,
        }
    }
}

/// Whether `locked_by` is one of this crate's holder ids (`<client
/// uuid>:<n>`, perhaps marked kept): a holder that announces its release.
/// ShedLock writes its host's name, and announces nothing.
pub(crate) fn announces(locked_by: &str) -> bool {
    let id = locked_by.strip_suffix(KEPT).unwrap_or(locked_by);
    id.split_once(':').is_some_and(|(client, n)| {
        client.len() == 36 && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    })
}

/// Refuses a name PostgreSQL cannot store or the table cannot hold
/// (before any write): a NUL byte, or more characters than the `name`
/// column takes.
pub(crate) fn check_name(name: &str, longest: Option<usize>) -> Result<(), LockError> {
    crate::engine::sql::check_name(name, longest, super::ENGINE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_and_waiting_tables_fit_an_identifier() {
        let t = Table::parse("ops.job_locks", 63).unwrap();
        assert_eq!(t.channel(), "ops.job_locks");
        let long = Table::parse(&format!("{}.{}", "s".repeat(63), "t".repeat(63)), 63).unwrap();
        assert!(long.channel().len() <= 63, "{}", long.channel());
        assert_eq!(long.channel(), long.clone().channel());
        assert!(long.waiting().name.len() <= 63);
        assert_eq!(
            Table::parse("locks", 63).unwrap().waiting().name,
            "locks_waiting"
        );
    }

    #[test]
    fn our_holder_ids_announce_and_shedlocks_hosts_do_not() {
        let ours = "0b0e8d5e-3c1f-4a77-9d0e-2f6a1c9b7e11:42";
        assert!(announces(ours));
        assert!(announces(&format!("{ours}{KEPT}")));
        assert!(!announces("batch-host-7"));
        assert!(!announces("10.0.0.5:8080"));
    }
}
