//! The statements on a lock table's line on MySQL and MariaDB, for fair
//! and read-write locks (see `engine::sql::queue`): a ticket taken,
//! refreshed, marked held and dropped; the readers' row joined, freed or
//! handed to them; the held tickets renewed, listed and swept. A part of
//! `layout`, in a file of its own: written with the lock row's statement
//! pieces, numbered with the lock row's statements.

use super::{FREED, NOW, Numbering, Q, Sql, queue, slots, take_row};
use crate::engine::sql::Table;
use crate::engine::sql::queue::READERS;

/// The statements on a lock table's line (see `engine::sql::queue`).
#[derive(Debug, Clone)]
pub(crate) struct Line {
    /// Name, holder id, side, µs: a ticket at the back of the line,
    /// counting that long (its `seq` the last insert id).
    pub(crate) enqueue: Sql,
    /// µs, seq: the ticket made to count that long from now.
    pub(crate) refresh: Sql,
    /// Seq: whether the ticket is there.
    pub(crate) there: Sql,
    /// Name, seq, reader (1 or 0): whether no live ticket before it keeps
    /// it out.
    pub(crate) first: Sql,
    /// µs, seq: the ticket marked held that long.
    pub(crate) mark: Sql,
    /// Seq: the ticket's mark taken back.
    pub(crate) unmark: Sql,
    /// Name, lease in µs, name: the readers' row joined (made, taken over when
    /// free, or shared), its token raised (the last insert id).
    pub(crate) join: Sql,
    /// Name, holder id: its ticket dropped.
    pub(crate) drop_ticket: Sql,
    /// Name, name: the readers' row's token and whether a held reader is
    /// left, when the readers hold it.
    pub(crate) readers_left: Sql,
    /// Name, token: the readers' row freed if its token is that.
    pub(crate) free_readers: Sql,
    /// Name, holder id, name: the holder's row handed to the readers when
    /// a held reader is in line.
    pub(crate) hand_to_readers: Sql,
    /// Name, name, holder id: the readers' row's token raised (the last
    /// insert id) while the holder's ticket holds it.
    pub(crate) reenter_read: Sql,
    /// Name: the live tickets in order (holder id, side, held).
    pub(crate) tickets: Sql,
    /// The live tickets in order (name, holder id, side, held).
    pub(crate) all_tickets: Sql,
    /// Name: the holders of the held tickets.
    pub(crate) held_tickets: Sql,
    /// Name, holder id: a held ticket dropped.
    pub(crate) force_ticket: Sql,
    /// How old in µs: tickets run out that long ago deleted.
    pub(crate) sweep: Sql,
    q: String,
    t: String,
}

impl Line {
    pub(super) fn new(table: &Table, keep_rows: bool, n: &mut Numbering) -> Line {
        let t = table.quoted(Q);
        let q = queue(table).quoted(Q);
        let slots = slots(table).quoted(Q);
        let held_reader = format!(
            "EXISTS (SELECT 1 FROM {q} r WHERE r.name = ? AND r.side = 'r' AND r.held = 1 \
             AND r.ticket_until > {NOW})"
        );
        let enqueue = format!(
            "INSERT INTO {q} (name, holder, side, held, ticket_until) \
             VALUES (?, ?, ?, 0, TIMESTAMPADD(MICROSECOND, ?, {NOW}))"
        );
        let refresh = format!(
            "UPDATE {q} SET ticket_until = TIMESTAMPADD(MICROSECOND, ?, {NOW}) WHERE seq = ?"
        );
        let there = format!("SELECT 1 FROM {q} WHERE seq = ?");
        let first = format!(
            "SELECT NOT EXISTS (SELECT 1 FROM {q} e WHERE e.name = ? AND e.seq < ? \
             AND e.ticket_until > {NOW} AND (? = 0 OR e.side <> 'r'))"
        );
        let mark = format!(
            "UPDATE {q} SET held = 1, ticket_until = TIMESTAMPADD(MICROSECOND, ?, {NOW}) \
             WHERE seq = ?"
        );
        let unmark = format!("UPDATE {q} SET held = 0 WHERE seq = ?");
        // For the readers: their end the latest of theirs.
        let join = take_row(
            &t,
            &slots,
            &format!("'{READERS}'"),
            "GREATEST(lock_until, VALUES(lock_until))",
        );
        let drop_ticket = format!("DELETE FROM {q} WHERE name = ? AND holder = ?");
        let readers_left = format!(
            "SELECT fence, {held_reader} FROM {t} WHERE name = ? AND locked_by = '{READERS}' \
             AND lock_until > {NOW}"
        );
        let free_readers = if keep_rows {
            format!(
                "UPDATE {t} SET lock_until = {FREED} \
                 WHERE name = ? AND locked_by = '{READERS}' AND fence = ?"
            )
        } else {
            format!("DELETE FROM {t} WHERE name = ? AND locked_by = '{READERS}' AND fence = ?")
        };
        let hand_to_readers = format!(
            "UPDATE {t} SET locked_by = '{READERS}' WHERE name = ? AND locked_by = ? \
             AND lock_until > {NOW} AND {held_reader}"
        );
        let reenter_read = format!(
            "UPDATE {t} SET fence = LAST_INSERT_ID(fence + 1) WHERE name = ? \
             AND lock_until > {NOW} AND EXISTS (SELECT 1 FROM {q} r WHERE r.name = ? \
               AND r.holder = ? AND r.held = 1 AND r.ticket_until > {NOW})"
        );
        let tickets = format!(
            "SELECT holder, side, held FROM {q} WHERE name = ? AND ticket_until > {NOW} \
             ORDER BY seq"
        );
        let all_tickets = format!(
            "SELECT name, holder, side, held FROM {q} WHERE ticket_until > {NOW} ORDER BY seq"
        );
        let held_tickets = format!("SELECT holder FROM {q} WHERE name = ? AND held = 1");
        let force_ticket = format!("DELETE FROM {q} WHERE name = ? AND holder = ? AND held = 1");
        let sweep = format!(
            "DELETE FROM {q} WHERE ticket_until < TIMESTAMPADD(MICROSECOND, -?, {NOW}) LIMIT 1000"
        );
        Line {
            enqueue: n.sql(enqueue),
            refresh: n.sql(refresh),
            there: n.sql(there),
            first: n.sql(first),
            mark: n.sql(mark),
            unmark: n.sql(unmark),
            join: n.sql(join),
            drop_ticket: n.sql(drop_ticket),
            readers_left: n.sql(readers_left),
            free_readers: n.sql(free_readers),
            hand_to_readers: n.sql(hand_to_readers),
            reenter_read: n.sql(reenter_read),
            tickets: n.sql(tickets),
            all_tickets: n.sql(all_tickets),
            held_tickets: n.sql(held_tickets),
            force_ticket: n.sql(force_ticket),
            sweep: n.sql(sweep),
            q,
            t,
        }
    }

    /// The renewal of `n` held tickets (a lease in µs, then `n` name and
    /// holder id pairs), the renewal of the readers' rows among them (a
    /// lease in µs, then the pairs), and the look at which tickets are
    /// held since (the pairs).
    pub(crate) fn renew(&self, n: usize) -> [String; 3] {
        let (q, t) = (&self.q, &self.t);
        let pairs = vec!["(?, ?)"; n].join(", ");
        [
            format!(
                "UPDATE {q} SET ticket_until = TIMESTAMPADD(MICROSECOND, ?, {NOW}) \
                 WHERE held = 1 AND ticket_until > {NOW} AND (name, holder) IN ({pairs})"
            ),
            format!(
                "UPDATE {t} SET lock_until = GREATEST(lock_until, TIMESTAMPADD(MICROSECOND, ?, {NOW})) \
                 WHERE locked_by = '{READERS}' AND lock_until > {NOW} AND name IN \
                   (SELECT name FROM {q} WHERE side = 'r' AND held = 1 AND (name, holder) IN ({pairs}))"
            ),
            format!(
                "SELECT name, holder FROM {q} WHERE held = 1 AND ticket_until > {NOW} \
                 AND (name, holder) IN ({pairs})"
            ),
        ]
    }
}
