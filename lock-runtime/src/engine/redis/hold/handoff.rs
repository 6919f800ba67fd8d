//! Local handoff of reentrant locks: a task that releases a lock hands it,
//! in the same script, to the oldest waiter of its client's local queue for
//! that lock that offered to take it (`scripts/handoff.lua`; every waiter
//! offers, head or not). That waiter then holds the lock one round trip
//! after the release began, without a message, a wake-up through the
//! pub/sub dispatcher or an acquire script of its own; a hot name served by
//! one client costs one script per critical section instead of two. A
//! bounded streak of handoffs ([`crate::engine::redis::local::MAX_STREAK`]) is followed by
//! a release for everyone, so waiters of other clients get their turn.
//!
//! Each handoff is an acquisition of its own: a fresh holder id (so that a
//! hold it made can always be found and given back alone) and a fresh
//! attempt id (its acquire latch), exactly as if the head had sent an acquire
//! script. What can go wrong is settled the way a lost acquire answer is
//! ([`reconcile`]):
//!
//! - the answer of the handoff script is lost: the waiter is woken to try by
//!   itself, the handoff is reconciled (its latch marked abandoned, or the
//!   hold it made given back), and the release is retried with the same
//!   request id, which returns the first answer if the script had run;
//! - the waiter went away (cancelled, timed out) before or just after the
//!   handoff: the hold it would have had is reconciled, so given back;
//! - a resent script (a cluster connection resends one whose answer was
//!   lost) finds the handoff made: it answers with the token its acquire
//!   latch recorded, or without one, and then the hold is given back;
//! - no replica confirmed the handoff: the same.
//!
//! Only plain acquisitions of a reentrant lock take part: not re-entries,
//! not fair locks (their queue in Redis decides), not read/write locks, not
//! the parts of a multi lock (which share one holder number).

use std::sync::Arc;
use tokio::time::Instant;

use crate::engine::redis::Core;
use crate::engine::redis::conn::Conn;
use crate::engine::redis::hold::{
    Keep, Released, Try, Unlock, Which, needs_reconcile, reconcile, reentrant,
};
use crate::engine::redis::local::{Handed, MAX_STREAK, Parcel};
use crate::error::LockError;
use crate::request::{Kind, Request};

/// Gives back the hold of `holder` on `lock` (see [`Request::unlock`]) and,
/// when that frees a reentrant lock whose local queue has an offer, hands
/// the lock to the waiter who made the oldest one, unless the hold came at
/// the end of a full streak of handoffs (`streak`, see
/// [`Handed::streak`]): then the lock is freed and announced. Returns what
/// [`Request::unlock`] returns (a handoff counts as freed: 1).
pub(crate) async fn unlock_or_hand_off(
    core: &Arc<Core>,
    conn: &Conn,
    lock: &Request,
    holder: &str,
    request: Unlock<'_>,
    which: Which,
    streak: u32,
) -> Result<Released, LockError> {
    let name = &lock.name;
    let offer = match lock.kind {
        Kind::Reentrant if streak < MAX_STREAK => core.local.take_offer(&lock.local_queue(holder)),
        _ => None,
    };
    let Some(slot) = offer else {
        if streak >= MAX_STREAK {
            core.local.free_for_all(&lock.local_queue(holder));
        }
        return lock
            .unlock(core, conn, holder, request, which, Keep::NONE)
            .await;
    };
    // The handoff is an acquisition of its own: a fresh holder id and
    // attempt id, so that what it took can always be found and given back.
    let to = Try {
        holder: crate::holder::id(&core.id, crate::holder::fresh_number()),
        lease: slot.lease,
        reenter: false,
        attempt: crate::holder::call_id(&core.id),
    };
    let settle = |to: Try| give_back(core.clone(), lock.clone(), to);
    let sent = Instant::now();
    match reentrant::hand_off(core, conn, name, holder, request, which, &to).await {
        // A resent script (a cluster connection resends one whose answer
        // was lost) found the handoff made, with no token recorded: give
        // that hold back, the waiter tries by itself.
        Ok((2, 0)) => {
            settle(to);
            Ok(Released::Given)
        }
        Ok((2, token)) => {
            if let Err(e) = conn.sync_replicas(name).await {
                // Dropping the slot wakes the waiter; the hold goes back.
                tracing::debug!(lock = %name, error = %e, "a handoff was not replicated; giving it back");
                settle(to);
            } else {
                let handed = Handed {
                    holder: to.holder.clone(),
                    token,
                    sent,
                    streak: streak + 1,
                };
                let (core, lock) = (core.clone(), lock.clone());
                let give_back = Box::new(move || give_back(core, lock, to));
                if let Err(handoff) = slot.handed.send(Box::new(Parcel { handed, give_back })) {
                    // The waiter went away meanwhile.
                    (handoff.give_back)();
                }
            }
            Ok(Released::Given)
        }
        // Freed and announced, or still held: dropping the slot wakes the waiter.
        Ok((code, _)) => Ok(Released::from_code(code)),
        Err(e) => {
            if needs_reconcile(&e) {
                settle(to);
            }
            Err(e)
        }
    }
}

/// Gives back, in the background, the hold a handoff `to` made or may have
/// made (see [`reconcile`]).
fn give_back(core: Arc<Core>, lock: Request, to: Try) {
    let runtime = core.runtime.clone();
    runtime.spawn(reconcile(core, lock, to));
}
