//! The turns of one client's acquisitions of a name, in arrival order, for
//! the engines whose store holds one record per client and name for a
//! plain lock (etcd, ZooKeeper): only the head of a name's queue has a
//! record in the store, and the others wait here, in the process. (A fair
//! lock's and a read-write lock's waiters each have a record of their own.) [`acquire`] is those
//! engines' acquisition up to the point where it has its turn.

use foldhash::HashMap;
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
        if let Some(kept) = queues.get_mut(name) {
            // Made again in its place when nobody waits in it any more: the
            // name's key stays (no copy of it, no second look-up).
            return kept.upgrade().unwrap_or_else(|| {
                let queue = Arc::new(tokio::sync::Mutex::new(()));
                *kept = Arc::downgrade(&queue);
                queue
            });
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

/// Per lock name and holder id, a client's record of its hold there (the
/// engines whose holds share a record with their re-entries).
pub(crate) type Records<R> = Mutex<HashMap<(String, String), Weak<R>>>;

/// The live records of lock `name` in `records`. Upgraded with the map
/// unlocked: dropping a last `Arc` of a record locks the map.
pub(crate) fn records_of<R>(records: &Records<R>, name: &str) -> Vec<Arc<R>> {
    let weak: Vec<Weak<R>> = records
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|((named, _), _)| named == name)
        .map(|(_, record)| record.clone())
        .collect();
    weak.iter().filter_map(Weak::upgrade).collect()
}

/// What a record holds, or a re-entry asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Mutex,
    Read,
    Write,
}

/// Whether a re-entry asking `asked` in the scope of a record of lock
/// `name` held as `held` joins it (`Ok(None)`), joins the write that read
/// was taken under (`Ok(Some(write))`, while that write holds; see
/// [`Downgrade`]), or is refused. A read in a write's scope is no
/// re-entry: the engine takes it as a record of its own.
pub(crate) fn may_reenter<R: Held>(
    name: &str,
    held: Kind,
    asked: Kind,
    downgrade: &Downgrade<R>,
) -> Result<Option<Arc<R>>, LockError> {
    let refused = |reason: String| {
        Err(LockError::NotHeld {
            name: name.to_owned(),
            reason,
        })
    };
    match (held, asked) {
        (Kind::Mutex, Kind::Mutex) | (Kind::Read, Kind::Read) | (Kind::Write, Kind::Write) => {
            Ok(None)
        }
        (Kind::Read, Kind::Write) if downgrade.over.as_ref().is_some_and(|w| w.holds() > 0) => {
            Ok(downgrade.over.clone())
        }
        (Kind::Write, Kind::Read) => {
            refused("a read under a write is taken as a record of its own".into())
        }
        (Kind::Read, Kind::Write) => refused(
            "this scope holds it for reading; a reader cannot take the write lock (release the \
             read hold first)"
                .into(),
        ),
        (held, asked) => refused(format!(
            "this scope holds it as a {held:?} lock, not as a {asked:?} lock (one name, one kind)"
        )),
    }
}

/// A record that counts the live holds of its chain.
pub(crate) trait Held {
    fn holds(&self) -> usize;
}

/// A read taken in the scope of this client's own write hold of the name
/// (a downgrade) has a record of its own, taken at once (the write keeps
/// everyone else out), so that once the write is given back the read is a
/// read hold that other readers share (issue 34). The write's record goes
/// when it is given back, unless a contender that keeps readers out (a
/// writer or a mutex) came between the write's and a live read's: that
/// one would get the lock while the read holds, so the write's record
/// stays until the last read under it is given back. What the engines'
/// records `R` share of that.
pub(crate) struct Downgrade<R> {
    /// On a read's record: the write it was taken under.
    pub(crate) over: Option<Arc<R>>,
    /// On a write's record: the reads taken under it.
    under: Mutex<Vec<Weak<R>>>,
    /// On a write's record: its give-back waits for the reads under it.
    #[cfg_attr(not(any(feature = "etcd", feature = "zookeeper")), allow(dead_code))]
    deferred: std::sync::atomic::AtomicBool,
}

impl<R: Held> Downgrade<R> {
    /// A record's, taken under `over` when it is a read under a write.
    pub(crate) fn new(over: Option<Arc<R>>) -> Downgrade<R> {
        Downgrade {
            over,
            under: Mutex::default(),
            deferred: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// On a write's record: `read` was taken under it.
    pub(crate) fn add(&self, read: &Arc<R>) {
        self.under
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::downgrade(read));
    }

    /// On a write's record: whether a read under it still holds (without
    /// collecting them, as [`holding_reads`](Self::holding_reads) does).
    pub(crate) fn holds_reads(&self) -> bool {
        // Read outside the lock, as `holding_reads` does: a read's count is
        // not asked under it.
        let under = self.under.lock().unwrap_or_else(|p| p.into_inner()).clone();
        under
            .iter()
            .filter_map(Weak::upgrade)
            .any(|r| r.holds() > 0)
    }

    /// On a write's record: the reads under it that still hold.
    #[cfg_attr(not(any(feature = "etcd", feature = "zookeeper")), allow(dead_code))]
    pub(crate) fn holding_reads(&self) -> Vec<Arc<R>> {
        let under = self.under.lock().unwrap_or_else(|p| p.into_inner()).clone();
        under
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|r| r.holds() > 0)
            .collect()
    }

    /// On a write's record, being given back, with a contender between it
    /// and a holding read: whether its give-back now waits for the reads
    /// (false when the last of them went meanwhile).
    #[cfg_attr(not(any(feature = "etcd", feature = "zookeeper")), allow(dead_code))]
    pub(crate) fn defer(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.deferred.store(true, Ordering::Release);
        // A read given back meanwhile did not see it deferred: then the
        // write is given back now after all (whoever takes the mark back).
        self.holds_reads() || !self.deferred.swap(false, Ordering::AcqRel)
    }

    /// On a write's record, after a read under it was given back: whether
    /// the write is to be given back now (it waited for the reads, and
    /// none holds any more).
    #[cfg_attr(not(any(feature = "etcd", feature = "zookeeper")), allow(dead_code))]
    pub(crate) fn take_deferred(&self) -> bool {
        use std::sync::atomic::Ordering;
        !self.holds_reads() && self.deferred.swap(false, Ordering::AcqRel)
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
