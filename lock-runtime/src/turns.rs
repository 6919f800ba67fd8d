//! The turns of one client's acquisitions of a name, in arrival order, for
//! the engines whose store holds one record per client and name for a
//! plain lock (etcd, ZooKeeper): only the head of a name's queue has a
//! record in the store, and the others wait here, in the process. (A fair
//! lock's and a read-write lock's waiters each have a record of their own.) [`acquire`] is those
//! engines' acquisition up to the point where it has its turn.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::OwnedMutexGuard;

use crate::background::Background;
use crate::error::LockError;
use crate::holder;
use crate::request::{Options, Target, check_options, timed_out, within};

/// Per name, the queue its acquisitions wait in (FIFO).
#[derive(Default)]
pub(crate) struct Turns {
    queues: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl Turns {
    /// The queue of `name` (made when missing).
    fn queue(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(queue) = queues.get(name).and_then(Weak::upgrade) {
            return queue;
        }
        // Forget the queues nobody waits in any more, now and then.
        if queues.len() >= 64 && queues.len().is_power_of_two() {
            queues.retain(|_, q| q.strong_count() > 0);
        }
        let queue = Arc::new(tokio::sync::Mutex::new(()));
        queues.insert(name.to_owned(), Arc::downgrade(&queue));
        queue
    }

    /// Waits, within the wait, for this client's turn at `target`'s name
    /// (FIFO); a zero wait takes it only if free. The turn is the client's
    /// until the guard drops.
    pub(crate) async fn turn(
        &self,
        target: &Target,
        options: &Options,
        deadline: Option<Instant>,
    ) -> Result<OwnedMutexGuard<()>, LockError> {
        let queue = self.queue(target.name());
        if options.wait == Some(Duration::ZERO) {
            return queue
                .try_lock_owned()
                .map_err(|_| timed_out(target, options));
        }
        within!(queue.lock_owned(), deadline, target, options)
    }
}

/// An engine whose store holds one record per client and name: what
/// [`acquire`] needs of it.
pub(crate) trait OneRecord: Send + Sync + Sized + 'static {
    /// A hold taken.
    type Hold: Send;
    /// The client's id: the first half of its holder ids.
    fn id(&self) -> &str;
    /// The client's queues, per name.
    fn turns(&self) -> &Turns;
    /// The rest of an acquisition once its turn is in.
    fn take_hold(
        self: Arc<Self>,
        alive: Arc<Background>,
        target: &Target,
        options: Options,
        queued: Queued,
    ) -> impl Future<Output = Result<Self::Hold, LockError>> + Send + '_;
}

/// What [`acquire`] knows when it stops queueing in the process.
pub(crate) struct Queued {
    /// The holder id and chain of this client's hold, when the caller runs
    /// in its scope.
    pub(crate) reentry: Option<(String, holder::Chain)>,
    /// The turn at a mutex record, when it is one.
    pub(crate) turn: Option<OwnedMutexGuard<()>>,
    pub(crate) deadline: Option<Instant>,
}

/// Takes a hold of `target` on `engine`: a re-entry when the caller runs
/// in the scope of this client's hold of it, else a new holder that
/// queues in the process (a mutex), then in the store
/// ([`OneRecord::take_hold`]). A queued waiter carries this future and
/// the queue's only: the rest is boxed once it has its turn.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps its arguments twice (see the comment inside)"
)]
pub(crate) fn acquire<E: OneRecord>(
    alive: Arc<Background>,
    engine: Arc<E>,
    target: Target,
    options: Options,
) -> impl Future<Output = Result<E::Hold, LockError>> + Send {
    // An async block, not an async fn: what it takes is kept once, not
    // twice (its arguments and their moved copies).
    async move {
        check_options(&target, &options)?;
        let started = Instant::now();
        let deadline = options.wait.and_then(|w| started.checked_add(w));
        // A plain lock's record is one per client and name: this client's
        // turn first (a re-entry has the turn already: its scope's hold
        // keeps it). A name the store refuses is refused once it has its
        // turn, which no one holds. A fair waiter has a record of its own,
        // so that the store's line keeps arrival order across this
        // client's tasks as across clients (issue 34), as do a read-write
        // lock's.
        let mutex = matches!(target, Target::Reentrant { .. })
            && holder::in_scope(engine.id(), target.name()).is_none();
        let queued = if mutex {
            engine
                .turns()
                .turn(&target, &options, deadline)
                .await
                .map(Some)
        } else {
            Ok(None)
        };
        let result = match queued {
            Ok(turn) => {
                // Looked up again, not kept while queued (the same task's
                // scope: the same answer).
                let reentry = match mutex {
                    true => None,
                    false => holder::in_scope(engine.id(), target.name()),
                };
                let queued = Queued {
                    reentry,
                    turn,
                    deadline,
                };
                Box::pin(engine.take_hold(alive, &target, options, queued)).await
            }
            Err(e) => Err(e),
        };
        let kind = options.metric.is_none().then(|| target.kind());
        crate::telemetry::record_acquired(kind, started, &result);
        result
    }
}
