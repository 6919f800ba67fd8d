//! Semaphores on the SQL engines (DESIGN §11): a permits table beside the
//! lock table, written once for both databases in its layout and its
//! rules; each engine gives the statements ([`Rows`]'s permit part, and
//! its own `take`).
//!
//! # Layout
//!
//! Beside the lock table `<table>` is its permits table,
//! `<table>_permits` (a hash of the name when that is longer than an
//! identifier), one row per permit, with the lock table's columns and a
//! slot:
//!
//! | column | what |
//! | --- | --- |
//! | `name` | the semaphore's name |
//! | `slot` | the permit's place, `0` to `N - 1`: with `name`, the primary key |
//! | `lock_until` | the permit's lease's end, by the database's clock |
//! | `locked_at` | when it was taken |
//! | `locked_by` | its holder id (marked kept under `hold_at_least`) |
//! | `fence` | its token |
//!
//! A semaphore's name also has a row in the lock table, the permits' row
//! ([`PERMITS`] its holder, as the readers share theirs), whose end is at
//! least the latest of its permits' and whose `fence` is the name's
//! token counter. So plain, fair and read-write locks (and ShedLock) find
//! the name held while permits are, and a permit finds it held while one
//! of those holds it: one kind per name, never read as another.
//!
//! - **Admission.** One statement (on MySQL, its first statement) takes
//!   the lowest slot below the acquisition's own bound N that no live
//!   permit holds (an expired permit's slot is taken over), by an insert
//!   into the primary key `(name, slot)`: two acquisitions can never hold
//!   one slot, whatever their snapshots saw, so a name never has more
//!   live permits than the largest bound its acquirers ask for (all of
//!   them, when they agree on N) under READ COMMITTED and any number of
//!   concurrent acquirers. A statement whose snapshot showed a slot free
//!   that another acquisition took first lost a race: it looks again at
//!   once. Clients that disagree on N each keep their own bound: a
//!   permit of bound N is taken only in slots `0..N`, so a larger bound's
//!   permits in the slots above do not keep it out (DECISIONS).
//! - **Tokens.** The admission takes the permits' row too (made, taken
//!   over when free, or shared when the permits hold it), raising its
//!   `fence` as a lock's acquisition raises its row's (§10: a row made
//!   anew starts from the database clock), and the permit's token is
//!   that: tokens rise across every permit of the name. PostgreSQL does
//!   both in the admission's statement; MySQL takes the slot first, then
//!   the permits' row (its slot given back when another kind holds the
//!   name), then writes the token into the permit.
//! - **Release.** A release deletes its permit (and tells waiters); the
//!   last one frees the permits' row: it reads the row's token and
//!   whether a live permit is left, and frees the row only if its token
//!   is still that one (an admission meanwhile raised it), looking again
//!   if not ([`give_back`]). An admission that lost its race may leave
//!   the permits' row one lease longer than its permits; the next release
//!   or its end frees it.
//! - **Leases.** The watchdog renews a client's permits in one round, and
//!   their names' permits' rows to at least that end; a fixed lease,
//!   `extend`, `hold_at_least`, loss by the guard's clock: as for a lock.
//!   An expired permit is reclaimed by the next admission (its slot taken
//!   over); a sweep deletes those long expired.
//! - **Waiting.** A client's waiters of one name queue in the process
//!   ([`Common::permit_turns`](super::Common::permit_turns)), in arrival
//!   order: the head waits in the store, and each client's head has its
//!   turn at every release, so no client starves. A one-attempt call does
//!   not queue. On PostgreSQL the head registers as a plain waiter does,
//!   and a release announces the name; on MySQL it polls, capped as its
//!   locks' waiters.
//! - **Faults.** An acquisition dropped or failed deletes its permit by
//!   its holder id, through the connection of its tries (so after a try
//!   whose answer was lost), and frees the permits' row when it was the
//!   last.

use std::time::Duration;

use super::taking::SqlTaking;
use super::{Common, KEPT, Rows};
use crate::error::LockError;
use crate::info::{HolderInfo, LockInfo, LockKind};

/// The holder id of a semaphore's row in the lock table, the permits'
/// row (no holder id of ours starts with a space, and ShedLock writes a
/// host name).
pub(crate) const PERMITS: &str = " permits";

/// How many times in a row an admission that lost a race looks again at
/// once, before it waits as a busy one does.
pub(crate) const RACES: u32 = 4;

/// The permits' row of a name while it is held: its token, and whether a
/// live permit is left (besides the one just given back); `None` when the
/// permits do not hold the name.
pub(crate) type Left = Option<(i64, bool)>;

/// A live permit, as `inspect` reads it: holder id, token, time left in
/// µs.
pub(crate) type Permit = (String, i64, i64);

/// The error of a permit on a client whose permits table (`quoted`, made
/// with `ddl`) is missing and may not be made by its role.
pub(crate) fn no_permits(quoted: &str, ddl: &str) -> LockError {
    LockError::Config(format!(
        "semaphores keep their permits beside the lock table: the table {quoted} is missing \
         and this role may not create it; have it made with:\n{ddl}"
    ))
}

/// Gives back `holder`'s permit of `name`: deleted, and the permits' row
/// freed when it was the last. Whether the permit was there.
pub(crate) async fn give_back<S: Rows>(s: &S, name: &str, holder: &str) -> Result<bool, LockError> {
    let (had, left) = s.drop_permit(name, holder).await?;
    if had {
        settle(s, name, left).await?;
    }
    Ok(had)
}

/// Frees the permits' row of `name`, `left` as a look found it, when no
/// live permit is left: only if its token is still the one read with
/// that (an admission meanwhile raised it), looking again if not.
pub(crate) async fn settle<S: Rows>(s: &S, name: &str, left: Left) -> Result<(), LockError> {
    let mut left = left;
    for _ in 0..16 {
        let Some((fence, others)) = left else {
            return Ok(());
        };
        if others || s.free_permits(name, fence).await? {
            return Ok(());
        }
        left = s.permits_left(name).await?;
    }
    Ok(())
}

/// What `inspect` shows of semaphore `name` with the live `permits` (in
/// slot order) while its permits' row has `left_us` left: each holder
/// with its token and lease left; `None` when no permit is live.
pub(crate) fn describe<S: SqlTaking>(
    common: &Common<S>,
    name: &str,
    left_us: i64,
    permits: &[Permit],
) -> Option<LockInfo> {
    if permits.is_empty() {
        return None;
    }
    let micros = |us: i64| Duration::from_micros(u64::try_from(us).unwrap_or(0));
    let holders = permits
        .iter()
        .map(|(locked_by, fence, left)| {
            let (id, kept) = match locked_by.strip_suffix(KEPT) {
                Some(id) => (id, true),
                None => (locked_by.as_str(), false),
            };
            HolderInfo {
                guards: common.own.guards(name, id),
                count: crate::kept::holds_of(&common.records, name, id, kept),
                id: id.to_owned(),
                write: false,
                token: u64::try_from(*fence).ok().filter(|t| *t > 0),
                lease_left: Some(micros(*left)),
            }
        })
        .collect();
    let latest = permits.iter().map(|p| p.2).max().unwrap_or(0);
    Some(LockInfo {
        name: name.to_owned(),
        kind: LockKind::Semaphore,
        mode: None,
        holders,
        ttl: Some(micros(left_us.min(latest).max(0))),
        queue: Vec::new(),
    })
}
