//! The undo of what a failed or dropped acquisition made in the store
//! ([`Undo`], [`Pending`]): in a task of the client's runtime, kept running
//! until it is done, the process queue's turn passed on only once what
//! keeps the lock taken is gone.

use std::sync::Arc;

use tokio::sync::{OwnedMutexGuard, oneshot};

use crate::background::Background;
use crate::error::{LockError, transient};
use crate::request::backoff;

/// What an acquisition made in the store so far (a record, a lease; or a
/// call that may have made one): undone when the acquisition fails or is
/// dropped.
pub(crate) trait Undo: Send + Sized + 'static {
    /// Takes what there is to undo, leaving nothing; `None` when nothing
    /// is.
    fn take(&mut self) -> Option<Self>;
    /// One try at undoing it; what is undone is forgotten.
    fn clear(&mut self) -> impl Future<Output = Result<(), LockError>> + Send + '_;
    /// Whether the store may still keep what is left alive (worth trying
    /// on).
    fn may_outlive(&self) -> bool;
    /// Whether what is left may keep the lock taken (a record, a row), so
    /// that the process queue's turn passes on only once it is undone; a
    /// waiter's registration for announcements keeps nobody out, and the
    /// turn passes on at once.
    fn keeps_out(&self) -> bool {
        true
    }
    /// What is left, for the log.
    fn what(&self) -> String;
}

/// What an acquisition has made so far, undone when it fails or is
/// dropped (in a task of the client's runtime, kept running until it is
/// done): its record deleted, and only then the process queue's turn
/// passed on.
pub(crate) struct Pending<U: Undo> {
    /// The client's runtime, kept running until the undo is done.
    alive: Arc<Background>,
    /// A mutex record's turn in the process queue.
    pub(crate) turn: Option<OwnedMutexGuard<()>>,
    pub(crate) made: U,
}

impl<U: Undo> Pending<U> {
    pub(crate) fn new(alive: Arc<Background>, turn: Option<OwnedMutexGuard<()>>, made: U) -> Self {
        Pending { alive, turn, made }
    }

    /// Undoes what was made, waiting until its first try is done (the
    /// turn passed on): any later tries go on in the background.
    pub(crate) async fn give_up(&mut self) {
        let (made, turn) = (self.made.take(), self.turn.take());
        let (passed_in, passed) = oneshot::channel();
        self.alive
            .spawn_keeping(async move { undo(made, turn, Some(passed_in)).await });
        let _ = passed.await;
    }
}

impl<U: Undo> Drop for Pending<U> {
    fn drop(&mut self) {
        let (made, mut turn) = (self.made.take(), self.turn.take());
        // Nothing left that keeps the lock taken: the turn passes on now,
        // not once a task of the client's runtime gets to it (the caller's
        // next acquisition may come first).
        if !made.as_ref().is_some_and(Undo::keeps_out) {
            drop(turn.take());
        }
        if made.is_none() && turn.is_none() {
            return;
        }
        self.alive
            .spawn_keeping(async move { undo(made, turn, None).await });
    }
}

/// Undoes `made`, trying again while the store may keep it, and passes
/// the turn on after the first try.
async fn undo<U: Undo>(
    made: Option<U>,
    turn: Option<OwnedMutexGuard<()>>,
    passed: Option<oneshot::Sender<()>>,
) {
    let (mut turn, mut passed) = (turn, passed);
    if !made.as_ref().is_some_and(Undo::keeps_out) {
        drop(turn.take());
        if let Some(passed) = passed.take() {
            let _ = passed.send(());
        }
    }
    if let Some(mut made) = made {
        for tries in 1.. {
            let cleared = made.clear().await;
            drop(turn.take());
            if let Some(passed) = passed.take() {
                let _ = passed.send(());
            }
            match cleared {
                Err(e) if transient(&e) && made.may_outlive() => {
                    if tries == crate::config::UNLOCK_TRIES {
                        tracing::warn!(record = made.what(), error = %e, "an abandoned lock record is not deleted yet; trying on");
                    }
                    tokio::time::sleep(backoff(tries)).await;
                }
                Err(e) => {
                    tracing::warn!(record = made.what(), error = %e, "could not delete an abandoned lock record");
                    break;
                }
                Ok(()) => break,
            }
        }
    }
    drop(turn);
    if let Some(passed) = passed {
        let _ = passed.send(());
    }
}
