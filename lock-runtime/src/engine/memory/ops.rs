//! The operations on any lock of a memory store: `inspect`, `locks`
//! (lockctl's list) and `force_unlock`, each done at once, on the
//! caller's clock.

use tokio::time::Instant;

use super::Mem;
use super::store::Lock;
use crate::error::LockError;
use crate::info::{HolderInfo, LockInfo, LockKind, RwMode};
use crate::request::Kind;
use crate::request::check_name;

/// What lock `name` looks like; `None` when nobody holds it.
pub(crate) fn inspect(mem: &Mem, name: &str) -> Result<Option<LockInfo>, LockError> {
    check_name(name)?;
    let now = Instant::now();
    let mut state = mem.state()?;
    let info = state
        .lock(name, now)
        .and_then(|lock| info(mem, name, lock, now));
    state.tidy(name);
    Ok(info)
}

/// What `lock` looks like as of `now`.
fn info(mem: &Mem, name: &str, lock: &Lock, now: Instant) -> Option<LockInfo> {
    if lock.holders.is_empty() {
        return None;
    }
    let read_write = lock
        .holders
        .values()
        .any(|e| matches!(e.side, Kind::Read | Kind::Write));
    let semaphore = lock
        .holders
        .values()
        .any(|e| matches!(e.side, Kind::Semaphore(_)));
    let holders = lock
        .holders
        .iter()
        .map(|(id, entry)| HolderInfo {
            id: id.clone(),
            count: crate::kept::holds_of(&mem.records, name, id, entry.kept),
            write: entry.side == Kind::Write,
            guards: mem.own.guards(name, id),
            token: semaphore.then_some(entry.token),
            lease_left: semaphore.then(|| entry.until.saturating_duration_since(now)),
        })
        .collect();
    let (kind, mode) = match read_write {
        true if lock.holders.values().any(|e| e.side == Kind::Write) => {
            (LockKind::ReadWrite, Some(RwMode::Write))
        }
        true => (LockKind::ReadWrite, Some(RwMode::Read)),
        false if semaphore => (LockKind::Semaphore, None),
        false if lock.queue.is_empty() => (LockKind::Reentrant, None),
        false => (LockKind::Fair, None),
    };
    let until = lock.holders.values().map(|e| e.until).max()?;
    Some(LockInfo {
        name: name.to_owned(),
        kind,
        mode,
        holders,
        ttl: Some(until.saturating_duration_since(now)),
        queue: lock.queue.iter().cloned().collect(),
    })
}

/// The held locks whose names match `pattern` (`*` and `?` wildcards), by
/// name.
pub(crate) fn locks(mem: &Mem, pattern: &str) -> Result<Vec<LockInfo>, LockError> {
    let now = Instant::now();
    let mut state = mem.state()?;
    let mut names: Vec<String> = state
        .locks
        .keys()
        .filter(|name| crate::request::glob(pattern.as_bytes(), name.as_bytes()))
        .cloned()
        .collect();
    names.sort();
    let infos = names
        .iter()
        .filter_map(|name| {
            let lock = state.lock(name, now)?;
            info(mem, name, lock, now)
        })
        .collect();
    for name in &names {
        state.tidy(name);
    }
    Ok(infos)
}

/// Ends every hold of lock `name` (their guards count as lost at once)
/// and wakes its waiters: whether it was held.
pub(crate) fn force_unlock(mem: &Mem, name: &str) -> Result<bool, LockError> {
    check_name(name)?;
    Ok(mem.state()?.free_all(name))
}
