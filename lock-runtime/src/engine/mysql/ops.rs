//! The operations on any lock on MySQL, ShedLock's holders included:
//! `inspect`, `locks` (lockctl's list) and `force_unlock`.

use std::time::Duration;

use super::My;
use crate::engine::sql::KEPT;
use crate::error::LockError;
use crate::info::{HolderInfo, LockInfo, LockKind};
use mysql_async::Row;

/// What a held row says: its holder (our holder ids; ShedLock writes its
/// host's name) and the time it has left by the database's clock.
fn info(my: &My, name: &str, locked_by: &str, left_us: i64) -> LockInfo {
    let (id, kept) = match locked_by.strip_suffix(KEPT) {
        Some(id) => (id.to_owned(), true),
        None => (locked_by.to_owned(), false),
    };
    let count = crate::kept::holds_of(&my.records, name, &id, kept);
    LockInfo {
        name: name.to_owned(),
        kind: LockKind::Reentrant,
        mode: None,
        holders: vec![HolderInfo {
            guards: my.own.guards(name, &id),
            id,
            count,
            write: false,
        }],
        ttl: Some(Duration::from_micros(u64::try_from(left_us).unwrap_or(0))),
        queue: Vec::new(),
    }
}

/// What lock `name` looks like on MySQL; `None` when nobody holds it (no
/// row, or a row whose lease ended).
pub(crate) async fn inspect(my: &My, name: &str) -> Result<Option<LockInfo>, LockError> {
    my.check_name(name)?;
    let answer = my
        .query::<(String, i64, i64)>(&my.st.inspect, (name,).into())
        .await?;
    Ok(answer
        .rows
        .first()
        .map(|(locked_by, _, left)| info(my, name, locked_by, *left)))
}

/// The held locks whose names match `pattern` (`*` and `?` wildcards), in
/// name order.
pub(crate) async fn locks(my: &My, pattern: &str) -> Result<Vec<LockInfo>, LockError> {
    let answer = my
        .query::<(String, String, i64)>(&my.st.held, mysql_async::Params::Empty)
        .await?;
    Ok(answer
        .rows
        .iter()
        .filter(|(name, _, _)| crate::request::glob(pattern.as_bytes(), name.as_bytes()))
        .map(|(name, locked_by, left)| info(my, name, locked_by, *left))
        .collect())
}

/// Frees lock `name` whoever holds it (deleted, or with `keep_rows` its
/// lease ended): a waiter gets it, and the old holder's guard reports the
/// loss. Whether it was held.
pub(crate) async fn force_unlock(my: &My, name: &str) -> Result<bool, LockError> {
    my.check_name(name)?;
    // The holder looked up, then its row freed by its holder id: a holder
    // that changed in between is looked up again.
    for _ in 0..8 {
        let mut conn = None;
        let held = my
            .on::<(String, i64, i64)>(&mut conn, &my.st.inspect, (name,).into())
            .await?;
        let Some((locked_by, _, _)) = held.rows.into_iter().next() else {
            return Ok(false);
        };
        let freed = my
            .on::<Row>(&mut conn, &my.st.force, (name, locked_by.as_str()).into())
            .await?;
        if freed.affected > 0 {
            my.deleted(name, &[locked_by]);
            return Ok(true);
        }
    }
    Err(LockError::Store {
        engine: super::ENGINE,
        message: format!("lock `{name}` changed holders while it was being freed; try again"),
        transient: true,
    })
}
