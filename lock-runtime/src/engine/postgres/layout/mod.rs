//! The lock table on PostgreSQL and the statements that work on it
//! (DESIGN §10): ShedLock's four columns and our `fence`, every time the
//! database's clock in UTC, every caller's value a bound parameter, the
//! table's name validated and quoted. The table's announcement channel,
//! made from that validated name, is written in as a string literal (see
//! `channel_literal`), as the readers' and kept holders' marks are.

use crate::engine::sql::permits::PERMITS;
use crate::engine::sql::queue::READERS;
use crate::engine::sql::table::fnv;
use crate::engine::sql::{KEPT, Table};
use crate::error::LockError;

// The line's and the permits' statements: parts of the layout, written
// with its pieces.
mod line;
mod permits;

pub(super) use line::Line;
pub(super) use permits::Permits;

/// How PostgreSQL quotes an identifier.
pub(crate) const Q: char = '"';

/// The database's clock, in UTC, as a `timestamp` (ShedLock's
/// `usingDbTime()` convention; `clock_timestamp()`, not the transaction's
/// start, so that two times of one statement are read when they are
/// used). UTC by a zero offset (`timezone(interval '0', ..)`): the same
/// `timestamp` as `timezone('utc', ..)`, whatever the session's time zone,
/// but by a subtraction, where the zone's name is looked up and the time
/// converted through the calendar on every call.
const NOW: &str = "timezone(interval '0', clock_timestamp())";

/// The end a freed row gets (with `keep_rows`): the clock ([`NOW`]) cut
/// down to the whole millisecond, so that it reads as free at once to a
/// reader whose clock holds milliseconds (ShedLock's statements on MySQL,
/// `UTC_TIMESTAMP(3)`), and is stored exactly in a column that holds only
/// milliseconds (`TIMESTAMP(3)`, which would round it up).
const FREED: &str = "date_trunc('milliseconds', timezone(interval '0', clock_timestamp()))";

/// The name `$1`'s lock on `table` for the statement's transaction
/// (`pg_advisory_xact_lock`, its two-`int4` key: the table's hash and the
/// name's), taken by every statement that may make the name's row before
/// it reads the clock. A row made anew takes its first token from that
/// clock ([`clock_us`]); with the lock, no other acquisition of the name
/// can take it and give it back between the clock's read and the row's
/// write, so the time is later than every earlier holder's token was
/// fixed (DECISIONS, "A new row's token"). Releases take no such lock: a
/// row's delete only ever lets a later statement in.
fn name_lock(table: &Table) -> String {
    // The low 32 bits of the hash, as the signed key the server takes.
    let key = fnv(&table.qualified()) as u32 as i32;
    format!("pg_advisory_xact_lock({key}, hashtext($1))")
}

/// [`NOW`] read once, after [`name_lock`]: `now.t` of a sub-select that
/// takes the lock in a level of its own. `OFFSET 0` keeps each level from
/// being merged into the one above: the lock is taken before the clock is
/// read, and the clock is read once however often `now.t` is used.
fn now_after_lock(table: &Table) -> String {
    format!(
        "(SELECT {NOW} AS t FROM (SELECT {} OFFSET 0) g OFFSET 0)",
        name_lock(table)
    )
}

/// The first try's `FROM`: [`now_after_lock`] as `now`, without a CTE.
fn first_from(table: &Table) -> String {
    format!("FROM {} now", now_after_lock(table))
}

/// The CTE `now` of a statement: [`now_after_lock`].
fn cte_now(table: &Table) -> String {
    format!("now AS {}", now_after_lock(table))
}

/// What a statement with the CTE `now` reads its time from.
const FROM_CTE: &str = "FROM now";

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
    /// The line of fair and read-write locks beside it: `<name>_queue` (a
    /// hash of the name when that is longer than an identifier; see
    /// `engine::sql::queue`).
    fn queue(&self) -> Table;
    /// The statements that make the line and its index.
    fn queue_ddl(&self) -> String;
    /// The permits of semaphores beside it: `<name>_permits` (a hash of
    /// the name when that is longer than an identifier; see
    /// `engine::sql::permits`).
    fn permits(&self) -> Table;
    /// The statement that makes the permits table.
    fn permits_ddl(&self) -> String;
    /// The statement that makes the waiters' table: who waits for which
    /// name, until when (a waiter that died is forgotten then).
    /// `force_unlock` and the line's releases announce a name only when it
    /// has a waiter; a plain lock's release, when a waiter marked its row
    /// (see [`Statements::give_back`]).
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
        self.beside("waiting", 63)
    }

    fn queue(&self) -> Table {
        self.beside("queue", 63)
    }

    fn permits(&self) -> Table {
        self.beside("permits", 63)
    }

    fn ddl(&self) -> String {
        format!(
            "{}\n{}\n{}\n{}",
            self.lock_ddl(),
            self.waiting_ddl(),
            self.queue_ddl(),
            self.permits_ddl()
        )
    }

    fn permits_ddl(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (\n    \
             name VARCHAR(255) COLLATE \"C\" NOT NULL,\n    \
             slot INTEGER NOT NULL,\n    \
             lock_until TIMESTAMP NOT NULL,\n    \
             locked_at TIMESTAMP NOT NULL,\n    \
             locked_by VARCHAR(255) NOT NULL,\n    \
             fence BIGINT NOT NULL DEFAULT 0,\n    \
             PRIMARY KEY (name, slot)\n);",
            self.permits().quoted(Q)
        )
    }

    fn queue_ddl(&self) -> String {
        let queue = self.queue();
        format!(
            "CREATE TABLE IF NOT EXISTS {} (\n    \
             seq BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,\n    \
             name VARCHAR(255) COLLATE \"C\" NOT NULL,\n    \
             holder VARCHAR(255) NOT NULL,\n    \
             side CHAR(1) NOT NULL,\n    \
             held BOOLEAN NOT NULL DEFAULT false,\n    \
             ticket_until TIMESTAMP NOT NULL\n);\n\
             CREATE INDEX IF NOT EXISTS {} ON {} (name, seq);",
            queue.quoted(Q),
            Table {
                schema: None,
                name: queue.beside("by_name", 63).name
            }
            .quoted(Q),
            queue.quoted(Q),
        )
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

/// The columns a lock table must have, and the types each may be (as
/// `pg_type.typname` names them).
pub(crate) const COLUMNS: [(&str, &[&str]); 5] = [
    ("name", &["varchar", "text"]),
    ("lock_until", &["timestamp"]),
    ("locked_at", &["timestamp"]),
    ("locked_by", &["varchar", "text"]),
    ("fence", &["int8"]),
];

/// The columns a permits table must have: the lock table's, and `slot`.
pub(crate) const PERMIT_COLUMNS: [(&str, &[&str]); 6] = [
    ("name", &["varchar", "text"]),
    ("slot", &["int4"]),
    ("lock_until", &["timestamp"]),
    ("locked_at", &["timestamp"]),
    ("locked_by", &["varchar", "text"]),
    ("fence", &["int8"]),
];

/// The statements on one table, written once per client.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    /// `$1` name, `$2` holder id, `$3` lease (an interval): the lock taken (a row
    /// made, or a free one's taken over) with its token, or the time the
    /// holder's row has left in µs and its holder (no token). A waiter's
    /// look: a held row (but the readers') is marked, its token raised by
    /// one, so that its holder's release announces the name.
    pub(crate) acquire: String,
    /// `$1` name, `$2` holder id, `$3` lease (an interval): the lock taken as by
    /// `acquire`, with its token; no row when it is not. For an
    /// acquisition's first try with `keep_rows` or a fixed lease (else
    /// after a `claim` that found a row, in a one-attempt call), which has
    /// no registration to drop and, when the lock is free, no holder to
    /// read: `acquire`'s one write without its two looks, the clock read as
    /// the statement came in.
    pub(crate) first_try: String,
    /// `$1` name, `$2` holder id: the lock taken for the client's
    /// watchdog lease (written in: see [`interval_literal`]) when no row of
    /// the name is there (`ON CONFLICT DO NOTHING`), with its token; no
    /// row when one is. For the first try of a client whose releases
    /// delete rows (without `keep_rows`), of a hold the watchdog renews
    /// (a fixed lease tries `first_try` first): an uncontended name has no
    /// row, and making one is about a tenth cheaper for the server than
    /// `first_try`'s upsert (which a row that is there gets next: free by
    /// its lease, or an earlier try's of the same holder).
    pub(crate) claim: String,
    /// `$1` names, `$2` holder ids, `$3` lease (an interval): the rows still
    /// held by those holders move their end to the lease from now; the
    /// rows renewed.
    pub(crate) renew: String,
    /// `$1` name, `$2` holder id: the holder's row deleted
    /// (kept and freed, with `keep_rows`) and the release announced to the
    /// name's registered waiters; a row when it was the holder's. For the
    /// rows of the line (whose waiters leave no mark) and undos.
    pub(crate) release: String,
    /// `$1` name, `$2` holder id, `$3` the token the holder last knew its
    /// row by: `release` for a plain lock's guard, announced only when the
    /// row's token moved past `$3` (a waiter's look marked
    /// it: see `acquire`), without a look at the waiters' table and
    /// without `RETURNING`: its row count says whether the row was the
    /// holder's.
    pub(crate) give_back: String,
    /// `$1` name, `$2` holder id, `$3` how long (an interval): the holder's row
    /// kept taken that long from now (a `hold_at_least` minimum), marked
    /// kept; a row when it was the holder's.
    pub(crate) keep: String,
    /// `$1` name, `$2` holder id: the holder's row's token raised (a
    /// re-entry's own token); the token, when it is still the holder's.
    pub(crate) reenter: String,
    /// `$1` name, `$2` holder id, `$3` lease (an interval): a held row's end moved
    /// to the lease from now, if later; a row when it was the holder's.
    pub(crate) extend: String,
    /// `$1` name: the row freed whoever holds it, and
    /// announced; its holder, when it was held.
    pub(crate) force: String,
    /// `$1` name: the holder, token and time left in µs of a held row.
    pub(crate) inspect: String,
    /// The held rows: name, holder, time left in µs.
    pub(crate) held: String,
    /// `$1` name, `$2` waiter (its holder id), `$3` how long (an interval): the
    /// waiter registered (or its registration made longer), so that a
    /// release of the name announces it.
    pub(crate) wait: String,
    /// `$1` name, `$2` waiter: its registration gone.
    pub(crate) unwait: String,
    /// `$1` how long (an interval): rows free that long deleted (none with
    /// `keep_rows`), names locked once whose holder died before deleting
    /// its row, and waiters' registrations run out that long ago.
    pub(crate) sweep: String,
    /// The line's statements (fair and read-write locks).
    pub(crate) line: Line,
    /// The permits' statements (semaphores).
    pub(crate) permits: Permits,
}

/// `$p`, a span of time the client sends as an `interval`
/// ([`Interval`](super::Interval): in binary, its microseconds), taken in
/// as it is: a number of microseconds times `interval '1 microsecond'`
/// would cost the server a conversion and a multiplication on every run.
fn us(p: &str) -> String {
    format!("{p}::interval")
}

/// `d` as an `interval` literal, exact to the µs: `interval '<h> hours <s>
/// seconds <µs> microseconds'`, each field far within the 32-bit integer
/// the server reads it as, up to [`MAX_DURATION`](crate::MAX_DURATION)
/// (876,000 hours). Written into the statement rather than sent, as the
/// channel is (see [`channel_literal`]): the client's watchdog lease, the
/// same for every hold it renews.
fn interval_literal(d: std::time::Duration) -> String {
    let us = crate::engine::sql::micros(d);
    format!(
        "interval '{} hours {} seconds {} microseconds'",
        us / 3_600_000_000,
        us / 1_000_000 % 3600,
        us % 1_000_000
    )
}

/// The channel of `table` ([`PgTable::channel`]) as a string literal:
/// nothing to escape (a table's name is letters, digits and `_`, see
/// [`Table::parse`], and its channel those and `.`). Written into the
/// statements rather than sent: the server takes each parameter in (its
/// type looked up, its value read) on every run, a sixtieth of an
/// uncontended acquire and release.
fn channel_literal(table: &Table) -> String {
    format!("'{}'", table.channel())
}

/// Whether lock row `l` may be taken by the row proposed (`EXCLUDED`): its
/// lease is over, or it is already the same holder's.
const FREE: &str = "(l.lock_until <= EXCLUDED.locked_at OR l.locked_by = EXCLUDED.locked_by)";

/// The time `at` in whole µs since 1970 (a new row's first token), read
/// as a float: `date_part` divides the time's exact µs by 10^6, the
/// product multiplies back, each rounding once, by at most a quarter µs
/// each while the seconds stay below 2^32 (until 2106), so the cast
/// rounds to the exact µs. `extract`'s exact numeric costs the server
/// about a hundredth of an uncontended acquire and release more.
/// `tests/tests/postgres.rs` checks the two agree, and that a new row's
/// token is its `locked_at` in exact µs.
fn clock_us(at: &str) -> String {
    format!("(date_part('epoch', {at}) * 1000000)::bigint")
}

/// A taken row's token: one past the row's, or the clock in µs when that
/// is larger (a row made anew starts its tokens from the clock, so a
/// name's tokens keep rising across deletes, and past a ShedLock holder,
/// which writes none).
const NEXT_FENCE: &str = "GREATEST(l.fence + 1, EXCLUDED.fence)";

/// The head of an upsert of lock row `$1` for `holder` until `$3` from
/// `now.t`, read `from` (see [`insert_row`]), up to its `DO UPDATE SET`.
fn upsert_row(t: &str, holder: &str, from: &str) -> String {
    format!(
        "{} ON CONFLICT (name) DO UPDATE SET ",
        insert_row(t, holder, from, &us("$3"))
    )
}

/// An insert of lock row `$1` for `holder` until `lease` (an interval)
/// from the time `now.t` (a `timestamp` in UTC, read `from`: see
/// [`now_after_lock`]); a row made anew starts its tokens from that time
/// in µs ([`clock_us`]).
fn insert_row(t: &str, holder: &str, from: &str, lease: &str) -> String {
    format!(
        "INSERT INTO {t} AS l (name, lock_until, locked_at, locked_by, fence) \
         SELECT $1, now.t + {lease}, now.t, {holder}, \
                {} {from}",
        clock_us("now.t")
    )
}

/// Lock row `$1` taken for `holder` until `$3` from `now.t`, read `from` (see
/// [`insert_row`]): made, or taken over when [`FREE`], its end then
/// set to `until`; its token raised ([`NEXT_FENCE`]). Answers the token
/// when taken.
fn take_row(t: &str, holder: &str, from: &str, until: &str) -> String {
    format!(
        "{}lock_until = {until}, locked_at = EXCLUDED.locked_at, \
           locked_by = EXCLUDED.locked_by, fence = {NEXT_FENCE} \
         WHERE {FREE} RETURNING fence",
        upsert_row(t, holder, from)
    )
}

/// [`take_row`] for `$2` with its lease for a waiter's look: when the row
/// is held (by anyone but the readers or the permits, whose rows are
/// freed with an announcement to registered waiters), its `fence` is
/// raised by one instead, the waiter's mark ([`Statements::give_back`] announces a name
/// whose row was marked while it was held). Answers the token and whether
/// the row is now `$2`'s.
fn take_or_mark_row(t: &str) -> String {
    let taken = |column: &str| {
        format!("{column} = CASE WHEN {FREE} THEN EXCLUDED.{column} ELSE l.{column} END")
    };
    format!(
        "{}{}, {}, {}, fence = CASE WHEN {FREE} THEN {NEXT_FENCE} ELSE l.fence + 1 END \
         WHERE {FREE} OR l.locked_by NOT IN ('{READERS}', '{PERMITS}') \
         RETURNING fence, locked_by = $2 AS mine",
        upsert_row(t, "$2", FROM_CTE),
        taken("lock_until"),
        taken("locked_at"),
        taken("locked_by"),
    )
}

/// The announcement, on channel `channel`, of the name of a row a CTE
/// `gone` freed (a row of the lock table or of the line): only when a
/// waiter registered in waiters' table `w` waits for it, since a notifying
/// transaction's commit is serialized with every other's, and an
/// uncontended release has nobody to wake.
fn announced(w: &str, channel: &str) -> String {
    format!(
        "CASE WHEN EXISTS (SELECT 1 FROM {w} v WHERE v.name = gone.name \
           AND v.wait_until > {NOW}) THEN pg_notify({channel}, gone.name) END"
    )
}

impl Statements {
    /// The statements on `table`; with `keep_rows`, a release frees a row
    /// instead of deleting it (ShedLock only ever updates a row it
    /// inserted once). `lease`, the client's watchdog lease, is written
    /// into `claim`.
    pub(crate) fn new(table: &Table, keep_rows: bool, lease: std::time::Duration) -> Statements {
        let t = table.quoted(Q);
        let w = table.waiting().quoted(Q);
        let channel = channel_literal(table);
        let left =
            |until: &str| format!("(extract(epoch from ({until} - {NOW})) * 1000000)::bigint");
        let acquire = format!(
            "WITH {}, taken AS ({}), \
             unwait AS (DELETE FROM {w} v USING taken \
               WHERE taken.mine AND v.name = $1 AND v.waiter = $2) \
             SELECT (SELECT fence FROM taken WHERE mine), h.left, h.locked_by \
             FROM (SELECT 1) one LEFT JOIN (\
               SELECT (extract(epoch from (h.lock_until - now.t)) * 1000000)::bigint AS left, \
                      h.locked_by::text AS locked_by \
               FROM {t} h, now WHERE h.name = $1) h ON true",
            cte_now(table),
            take_or_mark_row(&t)
        );
        // The clock read once, after the name's lock (see `first_from`).
        let first = first_from(table);
        let first_try = take_row(&t, "$2", &first, "EXCLUDED.lock_until");
        let claim = format!(
            "{} ON CONFLICT (name) DO NOTHING RETURNING fence",
            insert_row(&t, "$2", &first, &interval_literal(lease))
        );
        let renew = format!(
            "UPDATE {t} AS l SET lock_until = {NOW} + {} \
             FROM unnest($1::text[], $2::text[]) AS h(name, holder) \
             WHERE l.name = h.name AND l.locked_by = h.holder AND l.lock_until > {NOW} \
             RETURNING l.name::text, l.locked_by::text",
            us("$3")
        );
        let free = if keep_rows {
            format!("UPDATE {t} SET lock_until = {FREED} WHERE name = $1 AND locked_by = $2")
        } else {
            format!("DELETE FROM {t} WHERE name = $1 AND locked_by = $2")
        };
        let release = format!(
            "WITH gone AS ({free} RETURNING name) \
             SELECT {} FROM gone",
            announced(&w, &channel)
        );
        // Announced from the condition, without `RETURNING` (whose rows
        // the server keeps and sends: about a tenth of an uncontended
        // pair's time): the row count says whether it was the holder's.
        // Should the server look at the announcement before the holder
        // (never deleting then), a waiter wakes for nothing and looks
        // again.
        let give_back =
            format!("{free} AND (fence = $3 OR pg_notify({channel}, name) IS NOT NULL)");
        let keep = format!(
            "UPDATE {t} SET lock_until = {NOW} + {}, \
             locked_by = locked_by || '{KEPT}' \
             WHERE name = $1 AND locked_by = $2 RETURNING name",
            us("$3")
        );
        let reenter = format!(
            "UPDATE {t} SET fence = fence + 1 \
             WHERE name = $1 AND locked_by = $2 AND lock_until > {NOW} RETURNING fence"
        );
        let extend = format!(
            "UPDATE {t} SET lock_until = \
               GREATEST(lock_until, {NOW} + {}) \
             WHERE name = $1 AND locked_by = $2 AND lock_until > {NOW} RETURNING name",
            us("$3")
        );
        let force_free = if keep_rows {
            format!(
                "UPDATE {t} SET lock_until = {FREED} WHERE name = $1 AND lock_until > {NOW} \
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
             SELECT gone.locked_by::text, {} \
             FROM gone",
            announced(&w, &channel)
        );
        let wait = format!(
            "INSERT INTO {w} (name, waiter, wait_until) \
             VALUES ($1, $2, {NOW} + {}) \
             ON CONFLICT (name, waiter) DO UPDATE SET wait_until = EXCLUDED.wait_until",
            us("$3")
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
        let old = format!("{NOW} - {}", us("$1"));
        let sweep = if keep_rows {
            // A table shared with ShedLock keeps its rows.
            format!("DELETE FROM {w} WHERE wait_until < {old}")
        } else {
            format!(
                "WITH waiters AS (DELETE FROM {w} WHERE wait_until < {old}) \
                 DELETE FROM {t} WHERE lock_until < {old}"
            )
        };
        let line = Line::new(table, keep_rows);
        let permits = Permits::new(table, keep_rows);
        Statements {
            acquire,
            first_try,
            claim,
            renew,
            release,
            give_back,
            keep,
            reenter,
            extend,
            force,
            inspect,
            held,
            wait,
            unwait,
            sweep,
            line,
            permits,
        }
    }
}

/// Whether `locked_by` is one of this crate's holder ids (`<client
/// uuid>:<n>`, perhaps marked kept), or the permits' (whose row is freed
/// with an announcement to registered waiters): a holder that announces
/// its release. ShedLock writes its host's name, and announces nothing.
pub(crate) fn announces(locked_by: &str) -> bool {
    if locked_by == PERMITS {
        return true;
    }
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
mod tests;
