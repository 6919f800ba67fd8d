//! Local handoff of reentrant locks: a task that releases a lock hands it,
//! in the same script, to the sleeping head of its client's local queue for
//! that lock (`scripts/handoff.lua`). The head then holds the lock one round
//! trip after the release began, without a message, a wake-up through the
//! pub/sub dispatcher or an acquire script of its own; a hot name served by
//! one client costs one script per critical section instead of two. A
//! bounded streak of handoffs ([`crate::local::MAX_STREAK`]) is followed by
//! a release for everyone, so waiters of other clients get their turn.
//!
//! Each handover is an acquisition of its own: a fresh holder id (so that a
//! hold it made can always be found and given back alone) and a fresh
//! attempt id (its acquire latch), exactly as if the head had sent an acquire
//! script. What can go wrong is settled the way a lost acquire answer is
//! ([`reconcile`]):
//!
//! - the answer of the handoff script is lost: the head is woken to try by
//!   itself, the handover is reconciled (its latch marked abandoned, or the
//!   hold it made given back), and the release is retried with the same
//!   request id, which returns the first answer if the script had run;
//! - the head went away (cancelled, timed out) before or just after the
//!   handover: the hold it would have had is reconciled, so given back;
//! - no replica confirmed the handover: the same.
//!
//! Only plain acquisitions of a reentrant lock take part: not re-entries,
//! not fair locks (their queue in Redis decides), not read/write locks, not
//! the parts of a multi lock (which share one holder number).

use std::sync::Arc;
use std::time::Instant;

use crate::LockError;
use crate::client::Core;
use crate::conn::Conn;
use crate::local::{Handed, Unclaimed};
use crate::lock::{Target, Try, needs_reconcile, reconcile, reentrant};

/// Gives back the hold of `holder` on `target` (see [`Target::unlock`]) and,
/// when that frees a reentrant lock whose local queue has an offer, hands
/// the lock to the offer's head. Returns what [`Target::unlock`] returns
/// (a handover counts as freed: 1).
pub(crate) async fn unlock_or_hand_off(
    core: &Arc<Core>,
    conn: &Conn,
    target: &Target,
    holder: &str,
    request: &str,
    token: u64,
) -> Result<i64, LockError> {
    let offer = match target {
        Target::Reentrant { name } => core
            .local
            .take_offer(&target.local_queue(holder))
            .map(|slot| (name, slot)),
        _ => None,
    };
    let Some((name, slot)) = offer else {
        return target.unlock(core, conn, holder, request, token).await;
    };
    let to = Try {
        holder: slot.holder.clone(),
        lease: slot.lease.unwrap_or(core.config.watchdog_timeout),
        reenter: false,
        attempt: slot.attempt.clone(),
    };
    let settle = || {
        core.runtime
            .spawn(reconcile(core.clone(), target.clone(), to.clone()));
    };
    let sent = Instant::now();
    match reentrant::hand_off(core, conn, name, holder, request, &to).await {
        Ok((2, token)) => {
            if let Err(e) = conn.sync_replicas(name).await {
                // Dropping the slot wakes the head; the hold goes back.
                tracing::debug!(lock = %name, error = %e, "a handover was not replicated; giving it back");
                settle();
            } else if slot.handed.send(Handed { token, sent }).is_err() {
                // The head went away meanwhile.
                settle();
            }
            Ok(1)
        }
        // Freed and announced, or still held: dropping the slot wakes the head.
        Ok((code, _)) => Ok(code),
        Err(e) => {
            if needs_reconcile(&e) {
                settle();
            }
            Err(e)
        }
    }
}

/// What gives back a hold handed to an offer dropped unclaimed: the
/// handover `to`, reconciled.
pub(crate) fn give_back_unclaimed(core: &Arc<Core>, target: &Target, to: Try) -> Unclaimed {
    let (core, target) = (core.clone(), target.clone());
    Box::new(move |_: Handed| {
        core.runtime.clone().spawn(reconcile(core, target, to));
    })
}
