//! The statements on a lock table's permits on PostgreSQL, for semaphores
//! (see `engine::sql::permits`): a permit taken with its name's permits'
//! row, given back, kept, re-entered, extended, renewed, listed, freed
//! and swept. A part of `layout`, in a file of its own: written with the
//! lock row's statement pieces.

use super::{FREED, FROM_CTE, NOW, PgTable, Q, announced, channel_literal, cte_now, take_row, us};
use crate::engine::sql::permits::PERMITS;
use crate::engine::sql::{KEPT, Table};

/// The statements on a lock table's permits (see
/// `engine::sql::permits`).
#[derive(Debug, Clone)]
pub(crate) struct Permits {
    /// `$1` name, `$2` holder id, `$3` lease (an interval), `$4` the bound
    /// (an `int4`): the lowest free slot below the bound taken (made, or
    /// an expired permit's taken over; the holder's own first), with the
    /// permits' row (its token raised), and the holder's registration as
    /// a waiter dropped. One row: the token when taken; whether a slot
    /// looked free; the µs left of a row of another kind that holds the
    /// name; the µs until the first live permit ends.
    pub(crate) take: String,
    /// `$1` name, `$2` holder id: the holder's permit deleted (announced
    /// to registered waiters); a row when it was there: the permits'
    /// row's token while it is held, and whether another live permit is
    /// left.
    pub(crate) drop: String,
    /// `$1` name: the permits' row's token and whether a live permit is
    /// left, while the permits hold the name.
    pub(crate) left: String,
    /// `$1` name, `$2` token: the permits' row freed (deleted; with
    /// `keep_rows`, its lease ended) if its token is that, and announced;
    /// a row if it was.
    pub(crate) free: String,
    /// `$1` names, `$2` holder ids, `$3` lease (an interval): the live
    /// permits renewed, and their names' permits' rows to at least that;
    /// the permits renewed.
    pub(crate) renew: String,
    /// `$1` name, `$2` holder id, `$3` how long (an interval): the
    /// holder's permit kept taken that long from now, marked kept, and
    /// the permits' row at least that long; a row when it was the
    /// holder's.
    pub(crate) keep: String,
    /// `$1` name, `$2` holder id: the permits' row's token raised while
    /// the holder's permit is live; the token.
    pub(crate) reenter: String,
    /// `$1` name, `$2` holder id, `$3` lease (an interval): a live
    /// permit's end (and its permits' row's) moved to the lease from now,
    /// if later; a row when it was the holder's.
    pub(crate) extend: String,
    /// `$1` name: every permit deleted, the permits' row freed, and the
    /// name announced; per permit, its holder and whether it was live.
    pub(crate) force: String,
    /// `$1` name: the live permits in slot order (holder id, token, µs
    /// left).
    pub(crate) holders: String,
    /// The live permits (name, holder id, token, µs left).
    pub(crate) all_holders: String,
    /// `$1` how long (an interval): permits expired that long ago deleted.
    pub(crate) sweep: String,
}

impl Permits {
    pub(super) fn new(table: &Table, keep_rows: bool) -> Permits {
        let t = table.quoted(Q);
        let p = table.permits().quoted(Q);
        let w = table.waiting().quoted(Q);
        let channel = channel_literal(table);
        let left = |until: &str, at: &str| {
            format!("(extract(epoch FROM ({until} - {at})) * 1000000)::bigint")
        };
        // The live permits of `$1` at the time `at` (`o`, to narrow).
        let live =
            |at: &str| format!("SELECT 1 FROM {p} o WHERE o.name = $1 AND o.lock_until > {at}");
        // The slots a free one is among: 0, the one after each live permit
        // (the lowest free slot is one of them), and the holder's own (an
        // earlier try's whose answer was lost: taken over first).
        let free = format!(
            "SELECT c.s AS slot FROM (\
               SELECT 0 AS s \
               UNION SELECT o.slot + 1 FROM {p} o, now WHERE o.name = $1 AND o.lock_until > now.t \
               UNION SELECT o.slot FROM {p} o WHERE o.name = $1 AND o.locked_by = $2) c, now \
             WHERE c.s < $4::int AND NOT EXISTS ({} AND o.slot = c.s AND o.locked_by <> $2) \
             ORDER BY EXISTS (SELECT 1 FROM {p} o WHERE o.name = $1 AND o.slot = c.s \
               AND o.locked_by = $2) DESC, c.s \
             LIMIT 1",
            live("now.t")
        );
        // The permits' row taken for the lease, when a slot looked free:
        // made, taken over when free, or shared (its end the latest).
        let mark = take_row(
            &t,
            &format!("'{PERMITS}'"),
            &format!("{FROM_CTE}, free"),
            "GREATEST(l.lock_until, EXCLUDED.lock_until)",
        );
        let take = format!(
            "WITH {}, free AS ({free}), shared AS ({mark}), \
             taken AS (INSERT INTO {p} AS p (name, slot, lock_until, locked_at, locked_by, fence) \
               SELECT $1, free.slot, now.t + {}, now.t, $2, shared.fence FROM now, free, shared \
               ON CONFLICT (name, slot) DO UPDATE SET lock_until = EXCLUDED.lock_until, \
                 locked_at = EXCLUDED.locked_at, locked_by = EXCLUDED.locked_by, \
                 fence = EXCLUDED.fence \
               WHERE p.lock_until <= EXCLUDED.locked_at OR p.locked_by = EXCLUDED.locked_by \
               RETURNING p.fence), \
             unwait AS (DELETE FROM {w} v USING taken WHERE v.name = $1 AND v.waiter = $2) \
             SELECT (SELECT fence FROM taken), EXISTS (SELECT 1 FROM free), \
               (SELECT {} FROM {t} h WHERE h.name = $1 AND h.locked_by <> '{PERMITS}' \
                  AND h.lock_until > now.t), \
               (SELECT {} FROM {p} o WHERE o.name = $1 AND o.lock_until > now.t) \
             FROM now",
            cte_now(table),
            us("$3"),
            left("h.lock_until", "now.t"),
            left("min(o.lock_until)", "now.t"),
        );
        let held_by_permits =
            format!("l.name = $1 AND l.locked_by = '{PERMITS}' AND l.lock_until > {NOW}");
        let drop = format!(
            "WITH gone AS (DELETE FROM {p} WHERE name = $1 AND locked_by = $2 RETURNING name) \
             SELECT {}, (SELECT l.fence FROM {t} l WHERE {held_by_permits}), \
               EXISTS ({} AND o.locked_by <> $2) \
             FROM gone",
            announced(&w, &channel),
            live(NOW)
        );
        let left_now = format!(
            "SELECT l.fence, EXISTS ({}) FROM {t} l WHERE {held_by_permits}",
            live(NOW)
        );
        let free_row = if keep_rows {
            format!(
                "UPDATE {t} SET lock_until = {FREED} \
                 WHERE name = $1 AND locked_by = '{PERMITS}' AND fence = $2 RETURNING name"
            )
        } else {
            format!(
                "DELETE FROM {t} WHERE name = $1 AND locked_by = '{PERMITS}' AND fence = $2 \
                 RETURNING name"
            )
        };
        let free_permits = format!(
            "WITH gone AS ({free_row}) SELECT {} FROM gone",
            announced(&w, &channel)
        );
        let renew = format!(
            "WITH mine AS (UPDATE {p} AS m SET lock_until = {NOW} + {} \
               FROM unnest($1::text[], $2::text[]) AS h(name, holder) \
               WHERE m.name = h.name AND m.locked_by = h.holder AND m.lock_until > {NOW} \
               RETURNING m.name, m.locked_by), \
             permits_row AS (UPDATE {t} AS l SET lock_until = GREATEST(l.lock_until, {NOW} + {}) \
               WHERE l.locked_by = '{PERMITS}' AND l.name IN (SELECT name FROM mine)) \
             SELECT name::text, locked_by::text FROM mine",
            us("$3"),
            us("$3")
        );
        // The permits' row of a permit `changed` (a CTE) that lasts `$3`
        // from now: at least that long.
        let row_at_least = |changed: &str| {
            format!(
                "UPDATE {t} SET lock_until = GREATEST(lock_until, {NOW} + {}) \
                 WHERE name = $1 AND locked_by = '{PERMITS}' AND EXISTS (SELECT 1 FROM {changed})",
                us("$3")
            )
        };
        let keep = format!(
            "WITH kept AS (UPDATE {p} SET lock_until = {NOW} + {}, \
               locked_by = locked_by || '{KEPT}' \
               WHERE name = $1 AND locked_by = $2 RETURNING name), \
             permits_row AS ({}) \
             SELECT name FROM kept",
            us("$3"),
            row_at_least("kept")
        );
        let reenter = format!(
            "UPDATE {t} SET fence = fence + 1 \
             WHERE name = $1 AND locked_by = '{PERMITS}' AND lock_until > {NOW} \
               AND EXISTS ({} AND o.locked_by = $2) RETURNING fence",
            live(NOW)
        );
        let extend = format!(
            "WITH moved AS (UPDATE {p} SET lock_until = GREATEST(lock_until, {NOW} + {}) \
               WHERE name = $1 AND locked_by = $2 AND lock_until > {NOW} RETURNING name), \
             permits_row AS ({}) \
             SELECT name FROM moved",
            us("$3"),
            row_at_least("moved")
        );
        let force_row = if keep_rows {
            format!(
                "UPDATE {t} SET lock_until = {FREED} \
                 WHERE name = $1 AND locked_by = '{PERMITS}' AND lock_until > {NOW}"
            )
        } else {
            format!("DELETE FROM {t} WHERE name = $1 AND locked_by = '{PERMITS}'")
        };
        // Announced per permit deleted (one notification per transaction:
        // the server folds repeats).
        let force = format!(
            "WITH gone AS (DELETE FROM {p} WHERE name = $1 RETURNING name, locked_by, lock_until), \
             permits_row AS ({force_row}) \
             SELECT gone.locked_by::text, gone.lock_until > {NOW}, {} FROM gone",
            announced(&w, &channel)
        );
        let holders = format!(
            "SELECT locked_by::text, fence, {} FROM {p} \
             WHERE name = $1 AND lock_until > {NOW} ORDER BY slot",
            left("lock_until", NOW)
        );
        let all_holders = format!(
            "SELECT name::text, locked_by::text, fence, {} FROM {p} \
             WHERE lock_until > {NOW} ORDER BY name, slot",
            left("lock_until", NOW)
        );
        let sweep = format!("DELETE FROM {p} WHERE lock_until < {NOW} - {}", us("$1"));
        Permits {
            take,
            drop,
            left: left_now,
            free: free_permits,
            renew,
            keep,
            reenter,
            extend,
            force,
            holders,
            all_holders,
            sweep,
        }
    }
}
