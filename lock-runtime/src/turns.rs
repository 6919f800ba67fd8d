//! The turns of one client's acquisitions of a name, in arrival order, for
//! the engines whose store holds one record per client and name (etcd,
//! ZooKeeper): only the head of a name's queue has a record in the store,
//! and the others wait here, in the process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::OwnedMutexGuard;

use crate::error::LockError;
use crate::request::{Options, Target, timed_out, within};

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
