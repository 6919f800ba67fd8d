//! The operations on any lock on MySQL, ShedLock's holders included:
//! `inspect`, `locks` (lockctl's list) and `force_unlock`.

use std::collections::HashMap;

use super::My;
use crate::engine::sql::permits::{self, PERMITS, Permit};
use crate::engine::sql::queue::{Ticket, describe};
use crate::error::LockError;
use crate::info::LockInfo;
use mysql_async::{Params, Row};

/// What lock `name` looks like on MySQL; `None` when nobody holds it (no
/// row, or a row whose lease ended).
pub(crate) async fn inspect(my: &My, name: &str) -> Result<Option<LockInfo>, LockError> {
    my.check_name(name)?;
    let answer = my
        .query::<(String, i64, i64)>(&my.st.inspect, (name,).into())
        .await?;
    let Some((locked_by, _, left)) = answer.rows.first() else {
        return Ok(None);
    };
    if locked_by == PERMITS {
        let held = my
            .query::<Permit>(&my.st.permits.holders, (name,).into())
            .await?
            .rows;
        return Ok(permits::describe(&my.common, name, *left, &held));
    }
    let tickets = match my.lined {
        true => {
            my.query::<Ticket>(&my.st.line.tickets, (name,).into())
                .await?
                .rows
        }
        false => Vec::new(),
    };
    Ok(Some(describe(&my.common, name, locked_by, *left, &tickets)))
}

/// The held locks whose names match `pattern` (`*` and `?` wildcards), in
/// name order.
pub(crate) async fn locks(my: &My, pattern: &str) -> Result<Vec<LockInfo>, LockError> {
    let answer = my
        .query::<(String, String, i64)>(&my.st.held, Params::Empty)
        .await?;
    let mut tickets: HashMap<String, Vec<Ticket>> = HashMap::new();
    let all = match my.lined {
        true => {
            my.query::<(String, String, String, bool)>(&my.st.line.all_tickets, Params::Empty)
                .await?
                .rows
        }
        false => Vec::new(),
    };
    for (name, holder, side, held) in all {
        tickets.entry(name).or_default().push((holder, side, held));
    }
    // The permits, when a semaphore is among the held.
    let mut held: HashMap<String, Vec<Permit>> = HashMap::new();
    if answer
        .rows
        .iter()
        .any(|(_, locked_by, _)| locked_by == PERMITS)
    {
        let all = my
            .query::<(String, String, i64, i64)>(&my.st.permits.all_holders, Params::Empty)
            .await?
            .rows;
        for (name, holder, fence, left) in all {
            held.entry(name).or_default().push((holder, fence, left));
        }
    }
    Ok(answer
        .rows
        .iter()
        .filter(|(name, _, _)| crate::request::glob(pattern.as_bytes(), name.as_bytes()))
        .filter_map(|(name, locked_by, left)| {
            if locked_by == PERMITS {
                let permits_held = held.get(name).map_or(&[][..], Vec::as_slice);
                return permits::describe(&my.common, name, *left, permits_held);
            }
            let line = tickets.get(name).map_or(&[][..], Vec::as_slice);
            Some(describe(&my.common, name, locked_by, *left, line))
        })
        .collect())
}

/// Frees lock `name` whoever holds it (deleted, or with `keep_rows` its
/// lease ended): a waiter gets it, and the old holder's guard reports the
/// loss. Whether it was held.
pub(crate) async fn force_unlock(my: &My, name: &str) -> Result<bool, LockError> {
    my.check_name(name)?;
    // The permits first, with their row: a semaphore is freed whole.
    let mut permits_held = false;
    if my.permitted {
        let st = &my.st.permits;
        let all = my
            .query::<(String, bool)>(&st.all_of, (name,).into())
            .await?
            .rows;
        my.query::<Row>(&st.force, (name,).into()).await?;
        my.query::<Row>(&st.force_row, (name,).into()).await?;
        permits_held = all.iter().any(|(_, live)| *live);
        let holders: Vec<String> = all.into_iter().map(|(holder, _)| holder).collect();
        my.deleted(name, &holders);
    }
    // The held tickets next: a reader let in meanwhile finds the row
    // freed, or is lost with the rest.
    let held = match my.lined {
        true => {
            my.query::<String>(&my.st.line.held_tickets, (name,).into())
                .await?
                .rows
        }
        false => Vec::new(),
    };
    let mut readers = Vec::new();
    for holder in held {
        let dropped = my
            .query::<Row>(&my.st.line.force_ticket, (name, holder.as_str()).into())
            .await?;
        if dropped.affected > 0 {
            readers.push(holder);
        }
    }
    my.deleted(name, &readers);
    // The holder looked up, then its row freed by its holder id: a holder
    // that changed in between is looked up again.
    for _ in 0..8 {
        let mut conn = None;
        let held = my
            .on::<(String, i64, i64)>(&mut conn, &my.st.inspect, (name,).into())
            .await?;
        let Some((locked_by, _, _)) = held.rows.into_iter().next() else {
            return Ok(permits_held);
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
