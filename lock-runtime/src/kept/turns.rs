//! The turns of one client's acquisitions of a name, in arrival order: for
//! a plain lock only the head of a name's queue has a record in the store,
//! and the others wait here, in the process (a fair lock's and a
//! read-write lock's waiters each have a record of their own). And the
//! client's records, per lock name and holder id.

use foldhash::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::OwnedMutexGuard;

use crate::error::LockError;
use crate::holder::Who;
use crate::request::{Kind, Request, within};

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

    /// Waits, within the wait, for this client's turn at `request`'s
    /// name (FIFO); a zero wait takes it only if free. The turn is the
    /// client's until the guard drops.
    pub(crate) async fn turn(&self, request: &Request) -> Result<OwnedMutexGuard<()>, LockError> {
        let queue = self.queue(&request.name);
        if request.once() {
            return queue.try_lock_owned().map_err(|_| request.timed_out());
        }
        within!(queue.lock_owned(), request.deadline, request)
    }
}

/// Per hold (lock name and holder id), a client's record of its hold there
/// (the engines whose holds share a record with their re-entries), keyed
/// by the hold's own [`Who`].
pub(crate) type Records<R> = Mutex<HashMap<Arc<Who>, Weak<R>>>;

/// The live records of lock `name` in `records`. Upgraded with the map
/// unlocked: dropping a last `Arc` of a record locks the map.
#[cfg_attr(not(remote_turns), allow(dead_code))]
pub(crate) fn records_of<R>(records: &Records<R>, name: &str) -> Vec<Arc<R>> {
    let weak: Vec<Weak<R>> = records
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|(who, _)| who.name == name)
        .map(|(_, record)| record.clone())
        .collect();
    weak.iter().filter_map(Weak::upgrade).collect()
}

/// What a record holds, or a re-entry asks for: on etcd and ZooKeeper,
/// also the side of a contender's key or node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Mutex,
    Read,
    Write,
}

/// What a lock of each kind holds, as re-entry sees it (a fair lock is a
/// mutex, and so is a semaphore's permit: its scope re-enters it).
impl From<Kind> for Access {
    fn from(kind: Kind) -> Access {
        match kind {
            Kind::Reentrant | Kind::Fair | Kind::Semaphore(_) => Access::Mutex,
            Kind::Read => Access::Read,
            Kind::Write => Access::Write,
        }
    }
}
