//! The operations on any lock on PostgreSQL, ShedLock's holders included:
//! `inspect`, `locks` (lockctl's list) and `force_unlock`.

use std::time::Duration;

use super::Pg;
use super::layout::check_name;
use crate::engine::sql::KEPT;
use crate::error::LockError;
use crate::info::{HolderInfo, LockInfo, LockKind};

/// What a held row says: its holder (our holder ids; ShedLock writes its
/// host's name) and the time it has left by the database's clock.
fn info(pg: &Pg, name: &str, locked_by: &str, left_us: i64) -> LockInfo {
    let (id, kept) = match locked_by.strip_suffix(KEPT) {
        Some(id) => (id.to_owned(), true),
        None => (locked_by.to_owned(), false),
    };
    let count = crate::kept::holds_of(&pg.records, name, &id, kept);
    LockInfo {
        name: name.to_owned(),
        kind: LockKind::Reentrant,
        mode: None,
        holders: vec![HolderInfo {
            guards: pg.own.guards(name, &id),
            id,
            count,
            write: false,
        }],
        ttl: Some(Duration::from_micros(u64::try_from(left_us).unwrap_or(0))),
        queue: Vec::new(),
    }
}

/// What lock `name` looks like on PostgreSQL; `None` when nobody holds it
/// (no row, or a row whose lease ended).
pub(crate) async fn inspect(pg: &Pg, name: &str) -> Result<Option<LockInfo>, LockError> {
    check_name(name, pg.longest)?;
    let rows = pg.query(|s| &s.inspect, &[&name]).await?;
    Ok(rows.first().map(|row| {
        let locked_by: String = row.get(0);
        info(pg, name, &locked_by, row.get(2))
    }))
}

/// The held locks whose names match `pattern` (`*` and `?` wildcards), in
/// name order.
pub(crate) async fn locks(pg: &Pg, pattern: &str) -> Result<Vec<LockInfo>, LockError> {
    let rows = pg.query(|s| &s.held, &[]).await?;
    Ok(rows
        .iter()
        .filter_map(|row| {
            let name: String = row.get(0);
            crate::request::glob(pattern.as_bytes(), name.as_bytes()).then(|| {
                let locked_by: String = row.get(1);
                info(pg, &name, &locked_by, row.get(2))
            })
        })
        .collect())
}

/// Frees lock `name` whoever holds it (deleted, or with `keep_rows` its
/// lease ended) and announces it: a waiter gets it, and the old holder's
/// guard reports the loss. Whether it was held.
pub(crate) async fn force_unlock(pg: &Pg, name: &str) -> Result<bool, LockError> {
    check_name(name, pg.longest)?;
    let channel = pg.channel();
    let rows = pg.query(|s| &s.force, &[&name, &channel]).await?;
    let holders: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    pg.deleted(name, &holders);
    Ok(!holders.is_empty())
}
