//! Operations on any lock, found by its Redis layout: what `inspect`
//! reads and `force_unlock` deletes.
//!
//! Every kind of lock keeps a HASH at the lock's name (DESIGN §4). A hash
//! with a `mode` field is a read-write lock; one with a fair queue or waiter
//! deadlines beside it is a fair lock; any other is a reentrant lock. A fair
//! lock that nobody waits for has no queue, and then reads as reentrant: the
//! two layouts are the same. A semaphore keeps a ZSET of its permits there
//! (DESIGN §11): holder to lease end.

use std::time::Duration;

use super::Core;
use super::keys;
use super::scripts::SCRIPTS;
use crate::error::LockError;
use crate::info::{HolderInfo, LockInfo, LockKind, RwMode};

/// The inspect script's answer.
type Snapshot = (String, i64, Vec<String>, Vec<String>, i64);

/// Reads lock `name`'s keys; `None` when it is free.
pub(crate) async fn inspect(core: &Core, name: &str) -> Result<Option<LockInfo>, LockError> {
    crate::request::check_name(name)?;
    core.conn.check_slot_name(name)?;
    let (kind, pttl, fields, queue, fair): Snapshot = SCRIPTS
        .inspect
        .key(name)
        .key(keys::fair_queue(name))
        .key(keys::fair_timeouts(name))
        .key(keys::holds_key(name))
        .invoke_async(&mut core.conn.clone())
        .await
        .map_err(|e| LockError::from_redis(name, e))?;
    match kind.as_str() {
        "hash" => {}
        "zset" => {
            return permits(core, name, pttl, &fields).map(Some).ok_or_else(|| {
                LockError::WrongType {
                    name: name.to_owned(),
                }
            });
        }
        "none" => return Ok(None),
        _ => {
            return Err(LockError::WrongType {
                name: name.to_owned(),
            });
        }
    }
    read_layout(core, name, pttl, &fields, queue, fair == 1)
        .map(Some)
        .ok_or_else(|| LockError::WrongType {
            name: name.to_owned(),
        })
}

/// The held locks whose names match `pattern` (`SCAN ... MATCH pattern TYPE
/// hash`, and `TYPE zset` for semaphores, on every master, then one inspect
/// per key that is a lock), sorted by name. Keys that are not locks are
/// skipped, and so are locks freed between the scan and their inspect.
pub(crate) async fn locks(core: &Core, pattern: &str) -> Result<Vec<LockInfo>, LockError> {
    let mut names = core.conn.scan(pattern, "hash").await?;
    // Not a fair lock's waiter deadlines, a ZSET of holder ids too.
    let permits = core.conn.scan(pattern, "zset").await?;
    names.extend(permits.into_iter().filter(|n| !n.starts_with("redisson_")));
    names.sort();
    let mut found = Vec::new();
    for name in names {
        match inspect(core, &name).await {
            Ok(Some(info)) => found.push(info),
            Ok(None) | Err(LockError::WrongType { .. } | LockError::BadName { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(found)
}

/// Whether `field` can be a holder's field: `<client id>:<n>`, and for a
/// read-write lock's writer `<client id>:<n>:write`.
fn holder_field(field: &str) -> bool {
    let id = field.strip_suffix(":write").unwrap_or(field);
    matches!(
        id.rsplit_once(':'),
        Some((client, n)) if !client.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    )
}

/// Makes a [`LockInfo`] of the script's answer; `None` when the hash is
/// not a lock (a field that is no holder id, a count that is no number).
fn read_layout(
    core: &Core,
    name: &str,
    pttl: i64,
    fields: &[String],
    queue: Vec<String>,
    fair: bool,
) -> Option<LockInfo> {
    let mut mode = None;
    let mut holders = Vec::new();
    for pair in fields.chunks(2) {
        let [field, value] = pair else { continue };
        if field == "mode" {
            mode = Some(if value == "write" {
                RwMode::Write
            } else {
                RwMode::Read
            });
            continue;
        }
        if !holder_field(field) {
            return None;
        }
        holders.push((field.as_str(), value.parse::<u64>().ok()?));
    }
    let own = format!("{}:", core.id);
    let holders = holders
        .into_iter()
        .map(|(field, count)| {
            let (id, write) = match field.strip_suffix(":write") {
                Some(id) if mode.is_some() => (id, true),
                _ => (field, false),
            };
            let guards = if id.starts_with(&own) {
                core.own.guards(name, id)
            } else {
                Vec::new()
            };
            HolderInfo {
                id: id.to_owned(),
                count,
                write,
                guards,
                token: None,
                lease_left: None,
            }
        })
        .collect();
    let kind = match (mode, fair) {
        (Some(_), _) => LockKind::ReadWrite,
        (None, true) => LockKind::Fair,
        (None, false) => LockKind::Reentrant,
    };
    Some(LockInfo {
        name: name.to_owned(),
        kind,
        mode,
        holders,
        ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        queue,
    })
}

/// A semaphore's [`LockInfo`] from the inspect script's answer (its live
/// permits: holder, ms left, holds); `None` when a member is no holder id.
fn permits(core: &Core, name: &str, longest: i64, fields: &[String]) -> Option<LockInfo> {
    let own = format!("{}:", core.id);
    let mut holders = Vec::new();
    for permit in fields.chunks(3) {
        let [id, left, count] = permit else {
            return None;
        };
        if !holder_field(id) || id.ends_with(":write") {
            return None;
        }
        let guards = match id.starts_with(&own) {
            true => core.own.guards(name, id),
            false => Vec::new(),
        };
        holders.push(HolderInfo {
            id: id.clone(),
            count: count.parse().ok()?,
            write: false,
            guards,
            token: None,
            lease_left: Some(Duration::from_millis(left.parse().ok()?)),
        });
    }
    Some(LockInfo {
        name: name.to_owned(),
        kind: LockKind::Semaphore,
        mode: None,
        holders,
        ttl: u64::try_from(longest).ok().map(Duration::from_millis),
        queue: Vec::new(),
    })
}

/// Deletes lock `name` whatever its kind and wakes every waiter; a fair
/// lock's queue goes too. Whether a lock was there.
pub(crate) async fn force_unlock(core: &Core, name: &str) -> Result<bool, LockError> {
    crate::request::check_name(name)?;
    core.conn.check_slot_name(name)?;
    // This client's own holds of it, taken before the script runs: their
    // guards learn the loss as soon as it answers.
    let own = core.watchdog.holds_of(name);
    let deleted: i64 = SCRIPTS
        .force_unlock
        .key(name)
        .key(keys::lock_channel(name))
        .key(keys::fair_queue(name))
        .key(keys::fair_timeouts(name))
        .key(keys::rw_channel(name))
        .key(keys::tagged(name))
        .key(keys::holds_key(name))
        .key(keys::semaphore_channel(name))
        .arg(core.conn.publish_command())
        .invoke_async(&mut core.conn.clone())
        .await
        .map_err(|e| LockError::from_redis(name, e))?;
    if deleted == 1 {
        tracing::warn!(lock = name, "force-unlocked");
        core.watchdog.deleted(&own);
    }
    Ok(deleted == 1)
}

#[cfg(test)]
mod tests {
    use super::holder_field;

    #[test]
    fn holder_fields_are_client_ids_and_numbers() {
        for ok in ["6f1c:57", "a:b:1", "c:1:write"] {
            assert!(holder_field(ok), "{ok}");
        }
        for bad in ["price", ":1", "c:", "c:x", "c:1:read", "write"] {
            assert!(!holder_field(bad), "{bad}");
        }
    }
}
