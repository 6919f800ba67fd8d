//! One acquire script call that a cancelled caller cannot leave half
//! done: finished without the caller, its hold given back, and an attempt
//! whose answer was lost settled by the reconcile before its error is
//! returned.

use tokio::sync::oneshot;

use super::reconcile::reconcile;
use super::{Attempt, Keep, Try, Unlock, Which};
use crate::background;
use crate::engine::redis::Core;
use crate::engine::redis::conn::Conn;
use crate::error::LockError;
use crate::holder;
use crate::request::Request;

/// Runs `lock`'s acquire script once. If the caller goes away before the
/// answer arrives, the call is finished without it and a hold taken for it
/// is given back, so a cancelled acquire never leaves a lock behind. When
/// the answer is lost (a timeout, a broken connection), the attempt is
/// reconciled before the error is returned (see [`reconcile`]).
///
/// The call goes through the near connection of the caller's runtime when it
/// has one. When its connection turns out dead (closed while idle, by an
/// idle timeout, a proxy or `CLIENT KILL`) and the reconcile proved that the
/// attempt took nothing and never will, it is made once more on the client's
/// own connection, which reconnects: a connection lost between calls costs
/// the caller nothing.
///
/// An attempt whose answer was lost and whose reconcile did not settle in
/// time also returns that reconcile, still under way ([`Unsettled`]): until
/// it ends, the attempt may yet take a hold under the holder's id, so the
/// holder makes no new attempt before (the give-back could not tell two
/// first holds of one holder apart).
pub(crate) async fn attempt_once(
    core: &std::sync::Arc<Core>,
    lock: &Request,
    how: &Try,
) -> (Result<Attempt, LockError>, Option<Unsettled>) {
    match attempt_on(core, lock, how, core.conn.near_here()).await {
        (Err(LockError::Redis(e)), Settled::Yes)
            if crate::engine::redis::conn::connection_lost(&e) =>
        {
            tracing::debug!(error = %e, "an attempt's connection was lost; trying again on the client's own");
            match attempt_on(core, lock, how, None).await {
                (result, Settled::Later(unsettled)) => (result, Some(unsettled)),
                (result, _) => (result, None),
            }
        }
        (result, Settled::Later(unsettled)) => (result, Some(unsettled)),
        (result, _) => (result, None),
    }
}

/// Whether a failed attempt was reconciled (see [`attempt_once`]).
enum Settled {
    /// Its answer was lost and the reconcile settled in time: it holds
    /// nothing and never will.
    Yes,
    /// Nothing to reconcile (it answered, or failed for another reason).
    No,
    /// The reconcile is still under way, or gave up.
    Later(Unsettled),
}

/// The reconcile of an attempt whose answer was lost, when it did not
/// settle in time: see [`attempt_once`].
pub(crate) enum Unsettled {
    /// Still under way (it retries while Redis is unreachable).
    Pending(tokio::task::JoinHandle<bool>),
    /// It gave up on an error that does not heal: the attempt may have
    /// taken a hold under the holder's id that nothing gives back before its
    /// lease ends, so the holder makes no further attempt.
    GaveUp,
}

impl Unsettled {
    /// Resolves when the reconcile has ended, with whether it settled: the
    /// attempt can take nothing any more (settled, or past the time a
    /// request can still arrive). `false`: it gave up.
    pub(crate) async fn ended(self) -> bool {
        match self {
            Unsettled::Pending(reconcile) => reconcile.await.unwrap_or(false),
            Unsettled::GaveUp => false,
        }
    }
}

/// One attempt on `near` (the caller's runtime's near connection), or on the
/// client's own connection (`None`). Also says whether a lost answer was
/// reconciled in time (then the attempt holds nothing and never will), or
/// the reconcile still under way.
///
/// On a near connection the call runs in the caller's task (see
/// [`background::finish_on_drop`]); otherwise as a task on the client's
/// background runtime.
async fn attempt_on(
    core: &std::sync::Arc<Core>,
    lock: &Request,
    how: &Try,
    near: Option<Conn>,
) -> (Result<Attempt, LockError>, Settled) {
    // What the call and its clean-up share, whichever of them ends up
    // running (one allocation, not a copy each).
    let call = std::sync::Arc::new(Call {
        core: core.clone(),
        conn: near.clone().unwrap_or_else(|| core.conn.clone()),
        lock: lock.clone(),
        // A fresh attempt id (not a copy of the caller's, then replaced).
        how: Try {
            holder: how.holder.clone(),
            lease: how.lease,
            reenter: how.reenter,
            attempt: holder::call_id(&core.id),
        },
    });
    let attempt = {
        let call = call.clone();
        async move { call.lock.attempt(&call.core, &call.conn, &call.how).await }
    };
    let result = if near.is_some() {
        let left = call.clone();
        background::finish_on_drop(&core.runtime, attempt, move |answer| async move {
            left.abandoned(answer).await;
        })
        .await
    } else {
        let (answer, answered) = oneshot::channel();
        let mut answered = Answered {
            answered,
            undo: Some(call.clone()),
        };
        let left = call.clone();
        core.runtime.spawn(async move {
            if let Err(answer) = answer.send(attempt.await) {
                left.abandoned(answer).await;
            }
        });
        let Ok(result) = (&mut answered.answered).await else {
            return (Err(LockError::Shutdown), Settled::No);
        };
        answered.undo = None;
        result
    };
    let mut settled = Settled::No;
    // Whether the reconcile settled: `Yes`, else `Later` (still under way,
    // or it gave up).
    if let Err(e) = &result
        && needs_reconcile(e)
    {
        // The script may have run: find the hold and give it back, or make
        // sure the attempt can no longer take it, before reporting.
        let work = reconcile(core.clone(), lock.clone(), call.how.clone());
        let mut reconciled = core.runtime.spawn(work);
        let bound = core.config.response_timeout.saturating_mul(2);
        settled = match tokio::time::timeout(bound, &mut reconciled).await {
            Ok(Ok(true)) => Settled::Yes,
            Ok(_) => Settled::Later(Unsettled::GaveUp),
            Err(_) => Settled::Later(Unsettled::Pending(reconciled)),
        };
    }
    (result, settled)
}

/// Whether a failed attempt may have left a hold: its answer was lost (it
/// may still run on the server), or it took the lock but no replica
/// confirmed it.
pub(crate) fn needs_reconcile(e: &LockError) -> bool {
    match e {
        LockError::Redis(e) => crate::engine::redis::conn::connection_lost(e),
        LockError::NotReplicated { .. } => true,
        _ => false,
    }
}

/// The waiting end of [`attempt_once`]. An answer can land in the channel
/// after the caller's last poll and before it drops the future (a timeout
/// that fired just then): the sender sees no error, so the receiver undoes it.
struct Answered {
    answered: oneshot::Receiver<Result<Attempt, LockError>>,
    undo: Option<std::sync::Arc<Call>>,
}

impl Drop for Answered {
    fn drop(&mut self) {
        let Some(call) = self.undo.take() else {
            return;
        };
        // After close, a later send fails and the spawned task undoes it.
        self.answered.close();
        if let Ok(answer) = self.answered.try_recv() {
            let runtime = call.core.runtime.clone();
            runtime.spawn(async move { call.abandoned(answer).await });
        }
    }
}

/// One acquire script call: on which connection, for what.
struct Call {
    core: std::sync::Arc<Core>,
    conn: Conn,
    lock: Request,
    how: Try,
}

impl Call {
    /// Cleans up after the call, whose caller went away: a hold taken is
    /// given back, and so is a place taken in a fair queue (the caller's own
    /// give-up may have run before this attempt, e.g. during a script
    /// reload, and found nothing to remove). An answer that was lost is
    /// reconciled.
    async fn abandoned(&self, answer: Result<Attempt, LockError>) {
        let (core, lock, how) = (&self.core, &self.lock, &self.how);
        match answer {
            Ok(Attempt::Acquired { token }) => {
                let given_back = lock
                    .unlock(
                        core,
                        &self.conn,
                        &how.holder,
                        Unlock::again(&how.attempt),
                        Which::taken(how, token),
                        Keep::NONE,
                    )
                    .await;
                if let Err(e) = given_back {
                    tracing::warn!(lock = lock.name.as_str(), error = %e, "could not undo a cancelled acquire");
                }
            }
            Ok(Attempt::Busy { .. }) => {
                if let Some(cleanup) = lock.give_up(core, &how.holder) {
                    cleanup.retrying().await;
                }
            }
            Ok(Attempt::Gone) => {}
            Err(e) if needs_reconcile(&e) => {
                reconcile(core.clone(), lock.clone(), how.clone()).await;
            }
            Err(_) => {}
        }
    }
}
