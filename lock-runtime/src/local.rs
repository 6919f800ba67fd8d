//! In-process waiting queues: of the tasks in one client waiting for the same
//! lock, only the one at the head contends in Redis; the others wait here in
//! FIFO order. An unlock message then wakes one task, not all of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

#[derive(Default)]
pub(crate) struct LocalQueues {
    queues: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl LocalQueues {
    /// A place in the queue `key`. Await [`Ticket::turn`] to reach the head.
    pub(crate) fn ticket(&self, key: String) -> Ticket<'_> {
        let queue = {
            let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
            queues.entry(key.clone()).or_default().clone()
        };
        Ticket {
            queues: self,
            key,
            queue: Some(queue),
            turn: None,
        }
    }

    /// Number of queues with someone in them (for tests of cleanup).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.queues.lock().map(|q| q.len()).unwrap_or(0)
    }
}

/// A waiter's place in a local queue; dropping it leaves the queue (and
/// removes the queue when it was the last one in it).
pub(crate) struct Ticket<'a> {
    queues: &'a LocalQueues,
    key: String,
    queue: Option<Arc<tokio::sync::Mutex<()>>>,
    turn: Option<OwnedMutexGuard<()>>,
}

impl Ticket<'_> {
    /// Waits until every earlier waiter of this queue has left.
    pub(crate) async fn turn(&mut self) {
        if self.turn.is_none()
            && let Some(queue) = &self.queue
        {
            self.turn = Some(queue.clone().lock_owned().await);
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.turn.take();
        let queue = self.queue.take();
        let mut queues = self.queues.queues.lock().unwrap_or_else(|p| p.into_inner());
        drop(queue);
        if queues
            .get(&self.key)
            .is_some_and(|q| Arc::strong_count(q) == 1)
        {
            queues.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn queues_are_fifo_and_cleaned_up() {
        let queues = LocalQueues::default();
        let mut first = queues.ticket("a".into());
        first.turn().await;
        let mut second = queues.ticket("a".into());
        // The first ticket holds the turn: the second cannot complete.
        assert!(
            futures_util::FutureExt::now_or_never(second.turn()).is_none(),
            "second must wait for first"
        );
        drop(first);
        second.turn().await;
        drop(second);
        assert_eq!(queues.len(), 0);
    }
}
