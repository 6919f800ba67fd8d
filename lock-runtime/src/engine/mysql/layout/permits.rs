//! The statements on a lock table's permits on MySQL and MariaDB, for
//! semaphores (see `engine::sql::permits`): a slot taken, the permits' row
//! taken with it and the token written in; a permit given back, kept,
//! re-entered, extended, renewed, listed, freed and swept. A part of
//! `layout`, in a file of its own: written with the lock row's statement
//! pieces, numbered with the lock row's statements.

use super::{FREED, NOW, Numbering, Q, Sql, slots, take_row};
use crate::engine::sql::permits::PERMITS;
use crate::engine::sql::{KEPT, Table};

/// The permits of semaphores beside the lock table: `<name>_permits` (a
/// hash of the name when that is longer than an identifier; see
/// `engine::sql::permits`).
pub(crate) fn permits(table: &Table) -> Table {
    table.beside("permits", 64)
}

/// The statement that makes the permits table.
pub(crate) fn permits_ddl(table: &Table) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n    \
         name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n    \
         slot INT NOT NULL,\n    \
         lock_until DATETIME(6) NOT NULL,\n    \
         locked_at DATETIME(6) NOT NULL,\n    \
         locked_by VARCHAR(255) NOT NULL,\n    \
         fence BIGINT NOT NULL DEFAULT 0,\n    \
         PRIMARY KEY (name, slot)\n) ENGINE=InnoDB;",
        permits(table).quoted(Q)
    )
}

/// The columns a permits table must have: the lock table's, and `slot`.
pub(crate) const PERMIT_COLUMNS: [(&str, &[&str]); 6] = [
    ("name", &["varchar", "char"]),
    ("slot", &["int"]),
    ("lock_until", &["datetime", "timestamp"]),
    ("locked_at", &["datetime", "timestamp"]),
    ("locked_by", &["varchar", "char", "text"]),
    ("fence", &["bigint"]),
];

/// The statements on a lock table's permits (see
/// `engine::sql::permits`).
#[derive(Debug, Clone)]
pub(crate) struct Permits {
    /// Name, lease in µs, holder id, name, name, holder id, bound, name,
    /// holder id, name, holder id: the lowest free slot below the bound
    /// taken for the holder (made, or an expired permit's taken over; the
    /// holder's own first), its token not yet written (0); affected rows 1
    /// or 2 when taken, 0 when none was.
    pub(crate) take: Sql,
    /// Name, lease in µs, name: the permits' row taken (made, taken over
    /// when free, or shared: its end the latest), its token raised (the
    /// last insert id); affected rows 0 when another kind holds the name.
    pub(crate) take_row: Sql,
    /// Token, name, holder id: the token written into the holder's permit.
    pub(crate) token: Sql,
    /// Name, name, name, bound, bound: the µs left of a row of another
    /// kind that holds the name, the µs until the first live permit ends,
    /// and whether a slot below the bound is free.
    pub(crate) look: Sql,
    /// Name, holder id: the holder's permit deleted.
    pub(crate) drop: Sql,
    /// Name, name: the permits' row's token and whether a live permit is
    /// left, while the permits hold the name.
    pub(crate) left: Sql,
    /// Name, token: the permits' row freed (deleted; with `keep_rows`, its
    /// lease ended) if its token is that.
    pub(crate) free: Sql,
    /// How long in µs, name: the permits' row held at least that long from
    /// now.
    pub(crate) row_at_least: Sql,
    /// How long in µs, name, holder id: the holder's permit kept taken
    /// that long from now, marked kept.
    pub(crate) keep: Sql,
    /// Name, name, holder id: the permits' row's token raised (the last
    /// insert id) while the holder's permit is live.
    pub(crate) reenter: Sql,
    /// Lease in µs, name, holder id: a live permit's end moved to the
    /// lease from now, if later.
    pub(crate) extend: Sql,
    /// Name, holder id: whether the holder's permit is live.
    pub(crate) holds: Sql,
    /// Name: every permit (holder id, whether live).
    pub(crate) all_of: Sql,
    /// Name: every permit deleted.
    pub(crate) force: Sql,
    /// Name: the permits' row freed.
    pub(crate) force_row: Sql,
    /// Name: the live permits in slot order (holder id, token, µs left).
    pub(crate) holders: Sql,
    /// The live permits (name, holder id, token, µs left).
    pub(crate) all_holders: Sql,
    /// How old in µs: permits expired that long ago deleted.
    pub(crate) sweep: Sql,
    p: String,
    t: String,
}

impl Permits {
    pub(super) fn new(table: &Table, keep_rows: bool, n: &mut Numbering) -> Permits {
        let t = table.quoted(Q);
        let p = permits(table).quoted(Q);
        let slots = slots(table).quoted(Q);
        let left = |until: &str| format!("TIMESTAMPDIFF(MICROSECOND, {NOW}, {until})");
        // Taken over when expired, or already the holder's (an earlier
        // try's whose answer was lost). The assignments run left to
        // right, each seeing the ones before: `locked_by` last but one, so
        // the condition reads the same in each (see `take_row`).
        let free = "(lock_until <= VALUES(locked_at) OR locked_by = VALUES(locked_by))";
        let take = format!(
            "INSERT INTO {p} (name, slot, lock_until, locked_at, locked_by, fence) \
             SELECT ?, f.s, TIMESTAMPADD(MICROSECOND, ?, {NOW}), {NOW}, ?, 0 FROM (\
               SELECT c.s FROM (\
                 SELECT 0 AS s \
                 UNION SELECT slot + 1 FROM {p} WHERE name = ? AND lock_until > {NOW} \
                 UNION SELECT slot FROM {p} WHERE name = ? AND locked_by = ?) c \
               WHERE c.s < ? AND NOT EXISTS (SELECT 1 FROM {p} o WHERE o.name = ? \
                 AND o.slot = c.s AND o.lock_until > {NOW} AND o.locked_by <> ?) \
               ORDER BY EXISTS (SELECT 1 FROM {p} o WHERE o.name = ? AND o.slot = c.s \
                 AND o.locked_by = ?) DESC, c.s \
               LIMIT 1) f \
             ON DUPLICATE KEY UPDATE \
               fence = IF({free}, 0, fence), \
               locked_at = IF({free}, VALUES(locked_at), locked_at), \
               locked_by = IF({free}, VALUES(locked_by), locked_by), \
               lock_until = IF({free}, VALUES(lock_until), lock_until)"
        );
        let shared = take_row(
            &t,
            &slots,
            &format!("'{PERMITS}'"),
            "GREATEST(lock_until, VALUES(lock_until))",
        );
        let token = format!("UPDATE {p} SET fence = ? WHERE name = ? AND locked_by = ?");
        let look = format!(
            "SELECT (SELECT {} FROM {t} WHERE name = ? AND locked_by <> '{PERMITS}' \
               AND lock_until > {NOW}), \
             (SELECT {} FROM {p} WHERE name = ? AND lock_until > {NOW}), \
             (SELECT COUNT(*) FROM {p} WHERE name = ? AND lock_until > {NOW} AND slot < ?) < ?",
            left("lock_until"),
            left("MIN(lock_until)")
        );
        let drop = format!("DELETE FROM {p} WHERE name = ? AND locked_by = ?");
        let left_now = format!(
            "SELECT fence, EXISTS (SELECT 1 FROM {p} o WHERE o.name = ? AND o.lock_until > {NOW}) \
             FROM {t} WHERE name = ? AND locked_by = '{PERMITS}' AND lock_until > {NOW}"
        );
        let free_row = if keep_rows {
            format!(
                "UPDATE {t} SET lock_until = {FREED} \
                 WHERE name = ? AND locked_by = '{PERMITS}' AND fence = ?"
            )
        } else {
            format!("DELETE FROM {t} WHERE name = ? AND locked_by = '{PERMITS}' AND fence = ?")
        };
        let row_at_least = format!(
            "UPDATE {t} SET lock_until = GREATEST(lock_until, TIMESTAMPADD(MICROSECOND, ?, {NOW})) \
             WHERE name = ? AND locked_by = '{PERMITS}'"
        );
        let keep = format!(
            "UPDATE {p} SET lock_until = TIMESTAMPADD(MICROSECOND, ?, {NOW}), \
             locked_by = CONCAT(locked_by, '{KEPT}') WHERE name = ? AND locked_by = ?"
        );
        let reenter = format!(
            "UPDATE {t} SET fence = LAST_INSERT_ID(fence + 1) \
             WHERE name = ? AND locked_by = '{PERMITS}' AND lock_until > {NOW} \
               AND EXISTS (SELECT 1 FROM {p} o WHERE o.name = ? AND o.locked_by = ? \
                 AND o.lock_until > {NOW})"
        );
        let extend = format!(
            "UPDATE {p} SET lock_until = \
               GREATEST(lock_until, TIMESTAMPADD(MICROSECOND, ?, {NOW})) \
             WHERE name = ? AND locked_by = ? AND lock_until > {NOW}"
        );
        let holds =
            format!("SELECT 1 FROM {p} WHERE name = ? AND locked_by = ? AND lock_until > {NOW}");
        let all_of = format!("SELECT locked_by, lock_until > {NOW} FROM {p} WHERE name = ?");
        let force = format!("DELETE FROM {p} WHERE name = ?");
        let force_row = if keep_rows {
            format!(
                "UPDATE {t} SET lock_until = {FREED} \
                 WHERE name = ? AND locked_by = '{PERMITS}' AND lock_until > {NOW}"
            )
        } else {
            format!("DELETE FROM {t} WHERE name = ? AND locked_by = '{PERMITS}'")
        };
        let holders = format!(
            "SELECT locked_by, fence, {} FROM {p} WHERE name = ? AND lock_until > {NOW} \
             ORDER BY slot",
            left("lock_until")
        );
        let all_holders = format!(
            "SELECT name, locked_by, fence, {} FROM {p} WHERE lock_until > {NOW} \
             ORDER BY name, slot",
            left("lock_until")
        );
        let sweep = format!(
            "DELETE FROM {p} WHERE lock_until < TIMESTAMPADD(MICROSECOND, -?, {NOW}) LIMIT 1000"
        );
        Permits {
            take: n.sql(take),
            take_row: n.sql(shared),
            token: n.sql(token),
            look: n.sql(look),
            drop: n.sql(drop),
            left: n.sql(left_now),
            free: n.sql(free_row),
            row_at_least: n.sql(row_at_least),
            keep: n.sql(keep),
            reenter: n.sql(reenter),
            extend: n.sql(extend),
            holds: n.sql(holds),
            all_of: n.sql(all_of),
            force: n.sql(force),
            force_row: n.sql(force_row),
            holders: n.sql(holders),
            all_holders: n.sql(all_holders),
            sweep: n.sql(sweep),
            p,
            t,
        }
    }

    /// The renewal of `n` live permits (a lease in µs, then `n` name and
    /// holder id pairs), the renewal of their names' permits' rows (a
    /// lease in µs, then the pairs), and the look at which permits are
    /// live since (the pairs).
    pub(crate) fn renew(&self, n: usize) -> [String; 3] {
        let (p, t) = (&self.p, &self.t);
        let pairs = vec!["(?, ?)"; n].join(", ");
        [
            format!(
                "UPDATE {p} SET lock_until = TIMESTAMPADD(MICROSECOND, ?, {NOW}) \
                 WHERE lock_until > {NOW} AND (name, locked_by) IN ({pairs})"
            ),
            format!(
                "UPDATE {t} SET lock_until = GREATEST(lock_until, TIMESTAMPADD(MICROSECOND, ?, {NOW})) \
                 WHERE locked_by = '{PERMITS}' AND name IN \
                   (SELECT name FROM {p} WHERE lock_until > {NOW} AND (name, locked_by) IN ({pairs}))"
            ),
            format!(
                "SELECT name, locked_by FROM {p} WHERE lock_until > {NOW} \
                 AND (name, locked_by) IN ({pairs})"
            ),
        ]
    }
}
