//! The operations on any lock on PostgreSQL, ShedLock's holders included:
//! `inspect`, `locks` (lockctl's list) and `force_unlock`.

use std::collections::HashMap;

use super::Pg;
use super::layout::check_name;
use crate::engine::sql::permits::{self, PERMITS, Permit};
use crate::engine::sql::queue::{Ticket, describe};
use crate::error::LockError;
use crate::info::LockInfo;

/// What lock `name` looks like on PostgreSQL; `None` when nobody holds it
/// (no row, or a row whose lease ended).
pub(crate) async fn inspect(pg: &Pg, name: &str) -> Result<Option<LockInfo>, LockError> {
    check_name(name, pg.longest)?;
    let rows = pg.query(|s| &s.inspect, &[&name]).await?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let locked_by: String = row.get(0);
    if locked_by == PERMITS {
        let held: Vec<Permit> = pg
            .query_permits(|p| &p.holders, &[&name])
            .await?
            .iter()
            .map(|p| (p.get(0), p.get(1), p.get(2)))
            .collect();
        return Ok(permits::describe(&pg.common, name, row.get(2), &held));
    }
    let tickets: Vec<Ticket> = match pg.lined {
        true => pg.query_line(|l| &l.tickets, &[&name]).await?,
        false => Vec::new(),
    }
    .iter()
    .map(|t| (t.get(0), t.get(1), t.get(2)))
    .collect();
    Ok(Some(describe(
        &pg.common,
        name,
        &locked_by,
        row.get(2),
        &tickets,
    )))
}

/// The held locks whose names match `pattern` (`*` and `?` wildcards), in
/// name order.
pub(crate) async fn locks(pg: &Pg, pattern: &str) -> Result<Vec<LockInfo>, LockError> {
    let rows = pg.query(|s| &s.held, &[]).await?;
    let mut tickets: HashMap<String, Vec<Ticket>> = HashMap::new();
    let all = match pg.lined {
        true => pg.query_line(|l| &l.all_tickets, &[]).await?,
        false => Vec::new(),
    };
    for t in all {
        tickets
            .entry(t.get(0))
            .or_default()
            .push((t.get(1), t.get(2), t.get(3)));
    }
    // The permits, when a semaphore is among the held.
    let mut held: HashMap<String, Vec<Permit>> = HashMap::new();
    if rows.iter().any(|row| row.get::<_, String>(1) == PERMITS) {
        for p in pg.query_permits(|p| &p.all_holders, &[]).await? {
            held.entry(p.get(0))
                .or_default()
                .push((p.get(1), p.get(2), p.get(3)));
        }
    }
    Ok(rows
        .iter()
        .filter_map(|row| {
            let name: String = row.get(0);
            if !crate::request::glob(pattern.as_bytes(), name.as_bytes()) {
                return None;
            }
            let locked_by: String = row.get(1);
            if locked_by == PERMITS {
                let permits_held = held.get(&name).map_or(&[][..], Vec::as_slice);
                return permits::describe(&pg.common, &name, row.get(2), permits_held);
            }
            let line = tickets.get(&name).map_or(&[][..], Vec::as_slice);
            Some(describe(&pg.common, &name, &locked_by, row.get(2), line))
        })
        .collect())
}

/// Frees lock `name` whoever holds it (deleted, or with `keep_rows` its
/// lease ended) and announces it: a waiter gets it, and the old holder's
/// guard reports the loss. Whether it was held.
pub(crate) async fn force_unlock(pg: &Pg, name: &str) -> Result<bool, LockError> {
    check_name(name, pg.longest)?;
    // The permits first, with their row: a semaphore is freed whole.
    let permits = match pg.permitted {
        true => pg.query_permits(|p| &p.force, &[&name]).await?,
        false => Vec::new(),
    };
    let mut holders: Vec<String> = permits.iter().map(|r| r.get(0)).collect();
    let mut held = permits.iter().any(|r| r.get::<_, bool>(1));
    // The held tickets next: a reader let in meanwhile finds the row
    // freed, or is lost with the rest.
    let readers = match pg.lined {
        true => pg.query_line(|l| &l.force_tickets, &[&name]).await?,
        false => Vec::new(),
    };
    let rows = pg.query(|s| &s.force, &[&name]).await?;
    held |= rows
        .iter()
        .any(|r| r.get::<_, String>(0) != crate::engine::sql::permits::PERMITS);
    holders.extend(rows.iter().map(|r| r.get::<_, String>(0)));
    holders.extend(readers.iter().map(|r| r.get::<_, String>(0)));
    pg.deleted(name, &holders);
    Ok(held)
}
