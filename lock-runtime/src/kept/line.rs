//! A line of contenders that queue by age (etcd's keys, ZooKeeper's
//! nodes): who holds at its front ([`holding`]), and what `inspect` shows
//! of it ([`info`]; of a semaphore's, [`permits`]).

use std::time::Duration;

use super::record::Record;
use super::take::holds_of;
use super::turns::{Access, Records};
use crate::info::{HolderInfo, LockInfo, LockKind, RwMode};
use crate::own::OwnHolds;

/// One contender of a line, as `inspect` reads it.
pub(crate) struct Contender {
    /// What it holds or waits for.
    pub(crate) side: Access,
    /// Its holder id.
    pub(crate) id: String,
    /// Only a `hold_at_least` minimum keeps it.
    pub(crate) kept: bool,
}

/// How many of a line (its contenders' sides, oldest first) hold: the
/// first contender, or the reads before the first that is not one.
pub(crate) fn holding(mut sides: impl Iterator<Item = Access>) -> usize {
    match sides.next() {
        None => 0,
        Some(Access::Read) => 1 + sides.take_while(|side| *side == Access::Read).count(),
        Some(_) => 1,
    }
}

/// What lock `name` looks like when `line` is its contenders, oldest
/// first (`None` when there are none): the holders at the front (with
/// this client's own counts and guards from its `records` and `own`), the
/// queue behind them, and the kind the sides tell (read-write when any is
/// not a plain mutex, fair when a plain one has a queue).
pub(crate) fn info<R: Record>(
    name: &str,
    line: Vec<Contender>,
    records: &Records<R>,
    own: &OwnHolds,
    ttl: Option<Duration>,
) -> Option<LockInfo> {
    let first = line.first()?.side;
    let held = holding(line.iter().map(|c| c.side));
    let read_write = line.iter().any(|c| c.side != Access::Mutex);
    let mut line = line.into_iter();
    let holders = line
        .by_ref()
        .take(held)
        .map(|c| HolderInfo {
            guards: own.guards(name, &c.id),
            count: holds_of(records, name, &c.id, c.kept),
            write: c.side == Access::Write,
            id: c.id,
            token: None,
            lease_left: None,
        })
        .collect();
    let queue: Vec<String> = line.map(|c| c.id).collect();
    let (kind, mode) = match (read_write, first) {
        (true, Access::Read) => (LockKind::ReadWrite, Some(RwMode::Read)),
        (true, _) => (LockKind::ReadWrite, Some(RwMode::Write)),
        (false, _) if queue.is_empty() => (LockKind::Reentrant, None),
        (false, _) => (LockKind::Fair, None),
    };
    Some(LockInfo {
        name: name.to_owned(),
        kind,
        mode,
        holders,
        ttl,
        queue,
    })
}

/// One permit of a semaphore that holds, as `inspect` reads it.
pub(crate) struct Permit {
    /// Its holder id.
    pub(crate) id: String,
    /// Only a `hold_at_least` minimum keeps it.
    pub(crate) kept: bool,
    /// Its fencing token, where the store keeps one per permit.
    pub(crate) token: Option<u64>,
    /// What is left of its lease, where the store keeps one per permit.
    pub(crate) lease_left: Option<Duration>,
}

/// What semaphore `name` looks like when `held` are its permits that
/// hold (with this client's own counts and guards from its `records` and
/// `own`) and `queue` the holder ids waiting behind them; `None` when no
/// permit holds. Its lease is the longest permit's.
pub(crate) fn permits<R: Record>(
    name: &str,
    held: Vec<Permit>,
    queue: Vec<String>,
    records: &Records<R>,
    own: &OwnHolds,
) -> Option<LockInfo> {
    if held.is_empty() {
        return None;
    }
    let holders: Vec<HolderInfo> = held
        .into_iter()
        .map(|p| HolderInfo {
            guards: own.guards(name, &p.id),
            count: holds_of(records, name, &p.id, p.kept),
            write: false,
            id: p.id,
            token: p.token,
            lease_left: p.lease_left,
        })
        .collect();
    Some(LockInfo {
        name: name.to_owned(),
        kind: LockKind::Semaphore,
        mode: None,
        ttl: holders.iter().filter_map(|h| h.lease_left).max(),
        holders,
        queue,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_contender_holds_or_the_reads_before_the_first_that_is_not_one() {
        use Access::{Mutex, Read, Write};
        assert_eq!(holding([].into_iter()), 0);
        assert_eq!(holding([Mutex, Mutex].into_iter()), 1);
        assert_eq!(holding([Write, Read].into_iter()), 1);
        assert_eq!(holding([Read, Read, Write, Read].into_iter()), 2);
        assert_eq!(holding([Read, Read].into_iter()), 2);
    }
}
