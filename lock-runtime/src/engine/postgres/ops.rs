//! The operations on any lock on PostgreSQL, ShedLock's holders included:
//! `inspect`, `locks` (lockctl's list) and `force_unlock`.

use std::collections::HashMap;

use super::Pg;
use super::layout::check_name;
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
    let tickets: Vec<Ticket> = match pg.lined {
        true => pg.query_line(|l| &l.tickets, &[&name]).await?,
        false => Vec::new(),
    }
    .iter()
    .map(|t| (t.get(0), t.get(1), t.get(2)))
    .collect();
    let locked_by: String = row.get(0);
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
    Ok(rows
        .iter()
        .filter_map(|row| {
            let name: String = row.get(0);
            crate::request::glob(pattern.as_bytes(), name.as_bytes()).then(|| {
                let locked_by: String = row.get(1);
                let line = tickets.get(&name).map_or(&[][..], Vec::as_slice);
                describe(&pg.common, &name, &locked_by, row.get(2), line)
            })
        })
        .collect())
}

/// Frees lock `name` whoever holds it (deleted, or with `keep_rows` its
/// lease ended) and announces it: a waiter gets it, and the old holder's
/// guard reports the loss. Whether it was held.
pub(crate) async fn force_unlock(pg: &Pg, name: &str) -> Result<bool, LockError> {
    check_name(name, pg.longest)?;
    // The held tickets first: a reader let in meanwhile finds the row
    // freed, or is lost with the rest.
    let readers = match pg.lined {
        true => pg.query_line(|l| &l.force_tickets, &[&name]).await?,
        false => Vec::new(),
    };
    let rows = pg.query(|s| &s.force, &[&name]).await?;
    let mut holders: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    let held = !holders.is_empty();
    holders.extend(readers.iter().map(|r| r.get::<_, String>(0)));
    pg.deleted(name, &holders);
    Ok(held)
}
