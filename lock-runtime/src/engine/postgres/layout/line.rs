//! The statements on a lock table's line on PostgreSQL, for fair and
//! read-write locks (see `engine::sql::queue`): a ticket taken, looked at,
//! marked held and dropped; the readers' row joined, freed or handed to
//! them; the held tickets renewed, listed and swept. A part of `layout`,
//! in a file of its own: written with the lock row's statement pieces.

use super::{FREED, FROM_CTE, NOW, PgTable, Q, announced, channel_literal, cte_now, take_row, us};
use crate::engine::sql::Table;
use crate::engine::sql::queue::READERS;

/// The statements on a lock table's line (see `engine::sql::queue`).
#[derive(Debug, Clone)]
pub(crate) struct Line {
    /// `$1` name, `$2` holder id, `$3` side, `$4` how long (an interval): a ticket at the
    /// back of the line, counting that long; its `seq`.
    pub(crate) enqueue: String,
    /// `$1` name, `$2` seq, `$3` reader, `$4` how long (an interval): the ticket made to count
    /// that long from now; a row (when it is there) saying whether no live
    /// ticket before it keeps it out.
    pub(crate) look: String,
    /// `$1` name, `$2` holder id, `$3` lease (an interval), `$4` seq: the row taken
    /// and the ticket marked held; the token, when taken.
    pub(crate) take_turn: String,
    /// `$1` name, `$2` seq, `$3` lease (an interval): the readers' row joined and
    /// the ticket marked held; the token, when joined.
    pub(crate) join: String,
    /// `$1` seq, `$2` lease (an interval): the ticket marked held.
    pub(crate) mark: String,
    /// `$1` name, `$2` holder id: its ticket dropped (and
    /// announced); a row if it was there.
    pub(crate) drop_ticket: String,
    /// `$1` name: the readers' row's token and whether a held reader is
    /// left, when the readers hold it.
    pub(crate) readers_left: String,
    /// `$1` name, `$2` token: the readers' row freed (and
    /// announced) if its token is that; a row if it was.
    pub(crate) free_readers: String,
    /// `$1` name, `$2` holder id: the holder's row handed to the readers
    /// when a held reader is in line; a row if it was.
    pub(crate) hand_to_readers: String,
    /// `$1` names, `$2` holder ids, `$3` lease (an interval): the held tickets
    /// renewed, and the readers' rows of the readers among them; the
    /// tickets renewed.
    pub(crate) renew_tickets: String,
    /// `$1` name, `$2` holder id: the readers' row's token raised while
    /// the holder's ticket holds it; the token.
    pub(crate) reenter_read: String,
    /// `$1` name: the live tickets in order (holder id, side, held).
    pub(crate) tickets: String,
    /// The live tickets in order (name, holder id, side, held).
    pub(crate) all_tickets: String,
    /// `$1` name: the held tickets dropped; their holder ids.
    pub(crate) force_tickets: String,
    /// `$1` how long (an interval): tickets run out that long ago deleted.
    pub(crate) sweep_tickets: String,
}

impl Line {
    pub(super) fn new(table: &Table, keep_rows: bool) -> Line {
        let t = table.quoted(Q);
        let q = table.queue().quoted(Q);
        let w = table.waiting().quoted(Q);
        let channel = channel_literal(table);
        let held_reader = |name: &str| {
            format!(
                "EXISTS (SELECT 1 FROM {q} r WHERE r.name = {name} AND r.side = 'r' AND r.held \
                 AND r.ticket_until > {NOW})"
            )
        };
        let enqueue = format!(
            "INSERT INTO {q} (name, holder, side, ticket_until) \
             VALUES ($1, $2, $3, {NOW} + {}) RETURNING seq",
            us("$4")
        );
        let look = format!(
            "WITH mine AS (UPDATE {q} SET ticket_until = {NOW} + {} WHERE seq = $2 RETURNING seq) \
             SELECT NOT EXISTS (SELECT 1 FROM {q} e WHERE e.name = $1 AND e.seq < $2 \
               AND e.ticket_until > {NOW} AND (NOT $3::boolean OR e.side <> 'r')) FROM mine",
            us("$4")
        );
        // The row taken as the plain acquisition takes it, for a fair
        // lock's or writer's holder or for the readers (their end the latest
        // of theirs), and ticket `seq` marked held in the same statement.
        let now = cte_now(table);
        let turn = |seq: &str, taken: String| {
            format!(
                "WITH {now}, taken AS ({taken}), \
                 mine AS (UPDATE {q} SET held = true, ticket_until = {NOW} + {} \
                   WHERE seq = {seq} AND EXISTS (SELECT 1 FROM taken)) \
                 SELECT fence FROM taken",
                us("$3")
            )
        };
        let take_turn = turn("$4", take_row(&t, "$2", FROM_CTE, "EXCLUDED.lock_until"));
        let join = turn(
            "$2",
            take_row(
                &t,
                &format!("'{READERS}'"),
                &format!("{FROM_CTE} WHERE EXISTS (SELECT 1 FROM {q} WHERE seq = $2)"),
                "GREATEST(l.lock_until, EXCLUDED.lock_until)",
            ),
        );
        let mark = format!(
            "UPDATE {q} SET held = true, ticket_until = {NOW} + {} WHERE seq = $1",
            us("$2")
        );
        // A ticket dropped may let the next one in: announced to the name's
        // registered waiters.
        let drop_ticket = format!(
            "WITH gone AS (DELETE FROM {q} WHERE name = $1 AND holder = $2 RETURNING name) \
             SELECT {} FROM gone",
            announced(&w, &channel)
        );
        let readers_left = format!(
            "SELECT fence, {} FROM {t} WHERE name = $1 AND locked_by = '{READERS}' \
             AND lock_until > {NOW}",
            held_reader("$1")
        );
        let free = if keep_rows {
            format!(
                "UPDATE {t} SET lock_until = {FREED} \
                 WHERE name = $1 AND locked_by = '{READERS}' AND fence = $2 RETURNING name"
            )
        } else {
            format!(
                "DELETE FROM {t} WHERE name = $1 AND locked_by = '{READERS}' AND fence = $2 \
                 RETURNING name"
            )
        };
        let free_readers = format!(
            "WITH gone AS ({free}) \
             SELECT {} FROM gone",
            announced(&w, &channel)
        );
        let hand_to_readers = format!(
            "UPDATE {t} SET locked_by = '{READERS}' WHERE name = $1 AND locked_by = $2 \
             AND lock_until > {NOW} AND {} RETURNING name",
            held_reader("$1")
        );
        let renew_tickets = format!(
            "WITH mine AS (UPDATE {q} AS m SET ticket_until = {NOW} + {} \
               FROM unnest($1::text[], $2::text[]) AS h(name, holder) \
               WHERE m.name = h.name AND m.holder = h.holder AND m.held \
                 AND m.ticket_until > {NOW} \
               RETURNING m.name, m.holder, m.side), \
             readers AS (UPDATE {t} AS l SET lock_until = GREATEST(l.lock_until, {NOW} + {}) \
               WHERE l.locked_by = '{READERS}' AND l.lock_until > {NOW} \
                 AND l.name IN (SELECT name FROM mine WHERE side = 'r')) \
             SELECT name::text, holder::text FROM mine",
            us("$3"),
            us("$3")
        );
        let reenter_read = format!(
            "UPDATE {t} SET fence = fence + 1 WHERE name = $1 AND lock_until > {NOW} \
             AND EXISTS (SELECT 1 FROM {q} r WHERE r.name = $1 AND r.holder = $2 AND r.held \
               AND r.ticket_until > {NOW}) RETURNING fence"
        );
        let tickets = format!(
            "SELECT holder::text, side::text, held FROM {q} \
             WHERE name = $1 AND ticket_until > {NOW} ORDER BY seq"
        );
        let all_tickets = format!(
            "SELECT name::text, holder::text, side::text, held FROM {q} \
             WHERE ticket_until > {NOW} ORDER BY seq"
        );
        let force_tickets =
            format!("DELETE FROM {q} WHERE name = $1 AND held RETURNING holder::text");
        let sweep_tickets = format!("DELETE FROM {q} WHERE ticket_until < {NOW} - {}", us("$1"));
        Line {
            enqueue,
            look,
            take_turn,
            join,
            mark,
            drop_ticket,
            readers_left,
            free_readers,
            hand_to_readers,
            renew_tickets,
            reenter_read,
            tickets,
            all_tickets,
            force_tickets,
            sweep_tickets,
        }
    }
}
