//! In-process waiting queues: of the tasks in one client waiting for the same
//! lock, only the one at the head contends in Redis; the others wait here in
//! FIFO order. An unlock message then wakes one task, not all of them.
//!
//! A queue keeps two things between its heads:
//!
//! - **The subscription** to the lock's channel: a new head takes it over
//!   from the one that left, so draining a queue costs no `SUBSCRIBE` /
//!   `UNSUBSCRIBE` round trips; it goes when the queue empties.
//! - **Offers**: every waiter of a queue (the head and those behind it)
//!   leaves an [`Offer`] to take the lock over, in FIFO order. A task of the
//!   same client that releases the lock takes the first one and hands the
//!   lock over in the same script (see `hold::handoff`), so that waiter holds
//!   it one round trip after the release began, with no message in between,
//!   even before it reached the head. At most [`MAX_STREAK`] handoffs follow
//!   one another; then a release frees the lock and announces it, so that
//!   waiters of other clients get their turn.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedMutexGuard, oneshot};

use crate::pubsub::Subscription;

/// How many handoffs in a row a queue takes before a release frees the lock
/// for everyone (cf. lock cohorting: a bounded streak inside one client).
pub(crate) const MAX_STREAK: u32 = 8;

#[derive(Default)]
pub(crate) struct LocalQueues {
    queues: Mutex<HashMap<String, Arc<Queue>>>,
}

#[derive(Default)]
struct Queue {
    /// The head holds it; what it holds outlives each head.
    turn: Arc<tokio::sync::Mutex<Option<Subscription>>>,
    handoff: Mutex<Handoff>,
}

#[derive(Default)]
struct Handoff {
    /// The waiters' offers, oldest first.
    slots: VecDeque<Slot>,
    /// Names offers, for their withdrawal.
    next_id: u64,
    /// Handoffs since the lock was last freed for everyone.
    streak: u32,
}

/// A waiter's offer to take the lock over: the fixed lease it asked for
/// (`None`: the watchdog's), and where to say it was handed over. Dropping
/// the sender without a value wakes the waiter.
pub(crate) struct Slot {
    id: u64,
    pub(crate) lease: Option<Duration>,
    pub(crate) handed: oneshot::Sender<Handed>,
}

/// The lock was handed over: the new hold's holder id (fresh, unique to the
/// handover), the id of the handover (its acquire latch), its fencing token,
/// and when the script that made it was sent (its lease counts from then).
#[derive(Debug, Clone)]
pub(crate) struct Handed {
    pub(crate) holder: String,
    pub(crate) attempt: String,
    pub(crate) token: u64,
    pub(crate) sent: Instant,
}

impl LocalQueues {
    fn queues(&self) -> MutexGuard<'_, HashMap<String, Arc<Queue>>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place in the queue `key`. Await [`Ticket::turn`] to reach the head.
    pub(crate) fn ticket(&self, key: String) -> Ticket<'_> {
        let queue = self.queues().entry(key.clone()).or_default().clone();
        Ticket {
            queues: self,
            key,
            queue: Some(queue),
            turn: None,
        }
    }

    /// The oldest live offer of queue `key`, for a releasing task to hand
    /// the lock to; `None` when there is none, or when the streak is at its
    /// bound (then the streak starts over: this release is for everyone).
    pub(crate) fn take_offer(&self, key: &str) -> Option<Slot> {
        let queue = self.queues().get(key)?.clone();
        let mut handoff = queue.handoff();
        if handoff.streak >= MAX_STREAK {
            handoff.streak = 0;
            return None;
        }
        while let Some(slot) = handoff.slots.pop_front() {
            if !slot.handed.is_closed() {
                handoff.streak += 1;
                return Some(slot);
            }
        }
        handoff.streak = 0;
        None
    }

    /// Leaves an offer in queue `key` (behind the older ones); `None` when
    /// the queue is gone (its waiters all left). Await [`Offer::handed`];
    /// drop the offer to withdraw it. A handover that arrives unclaimed (the
    /// offer dropped just after it was taken) goes to `unclaimed`, which
    /// must give that hold back.
    pub(crate) fn offer(
        &self,
        key: &str,
        lease: Option<Duration>,
        unclaimed: Unclaimed,
    ) -> Option<Offer> {
        let queue = self.queues().get(key)?.clone();
        let (handed, receiver) = oneshot::channel();
        let id = {
            let mut handoff = queue.handoff();
            handoff.next_id += 1;
            let id = handoff.next_id;
            handoff.slots.push_back(Slot { id, lease, handed });
            id
        };
        Some(Offer {
            queue: Some(queue),
            id,
            receiver,
            unclaimed: Some(unclaimed),
        })
    }

    /// Whether queue `key` has anyone in it: a new waiter then joins it
    /// rather than trying first, so that a task which just released the
    /// lock does not take it back ahead of those who waited (FIFO inside
    /// the client).
    pub(crate) fn is_queued(&self, key: &str) -> bool {
        self.queues().contains_key(key)
    }

    /// Number of queues with someone in them (for tests of cleanup).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.queues().len()
    }
}

impl Queue {
    fn handoff(&self) -> MutexGuard<'_, Handoff> {
        self.handoff.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A waiter's place in a local queue; dropping it leaves the queue (and
/// removes the queue when it was the last one in it).
pub(crate) struct Ticket<'a> {
    queues: &'a LocalQueues,
    key: String,
    queue: Option<Arc<Queue>>,
    turn: Option<OwnedMutexGuard<Option<Subscription>>>,
}

impl Ticket<'_> {
    /// Waits until every earlier waiter of this queue has left.
    pub(crate) async fn turn(&mut self) {
        if self.turn.is_none()
            && let Some(queue) = &self.queue
        {
            self.turn = Some(queue.turn.clone().lock_owned().await);
        }
    }

    /// The queue's subscription, made by `subscribe` if the queue has none
    /// yet, and whether it was made now. Call it at the head (after
    /// [`turn`](Self::turn)). One taken over from an earlier head still
    /// holds the messages that head did not act on.
    pub(crate) async fn subscription<F>(
        &mut self,
        subscribe: F,
    ) -> Result<(&mut Subscription, bool), crate::LockError>
    where
        F: Future<Output = Result<Subscription, crate::LockError>>,
    {
        let Some(turn) = self.turn.as_mut() else {
            return Err(crate::LockError::Shutdown);
        };
        let fresh = turn.is_none();
        if fresh {
            **turn = Some(subscribe.await?);
        }
        match turn.as_mut() {
            Some(subscription) => Ok((subscription, fresh)),
            None => Err(crate::LockError::Shutdown),
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.turn.take();
        let queue = self.queue.take();
        let mut queues = self.queues.queues();
        drop(queue);
        if queues
            .get(&self.key)
            .is_some_and(|q| Arc::strong_count(q) == 1)
        {
            // The last one: its subscription goes with it.
            queues.remove(&self.key);
        }
    }
}

/// What to do with a hold handed to an offer that was dropped unclaimed.
pub(crate) type Unclaimed = Box<dyn FnOnce(Handed) + Send>;

/// A waiter's offer in its queue. Dropping it withdraws it.
pub(crate) struct Offer {
    queue: Option<Arc<Queue>>,
    id: u64,
    receiver: oneshot::Receiver<Handed>,
    unclaimed: Option<Unclaimed>,
}

impl Offer {
    /// `Some` when a releasing task handed the lock over (the caller now
    /// owns that hold); `None` when it took the offer but did not hand the
    /// lock over (the head should try again now).
    pub(crate) async fn handed(&mut self) -> Option<Handed> {
        let handed = (&mut self.receiver).await.ok();
        if handed.is_some() {
            self.unclaimed = None;
        }
        handed
    }

    fn withdraw_slot(&mut self) {
        if let Some(queue) = self.queue.take() {
            queue.handoff().slots.retain(|slot| slot.id != self.id);
        }
    }
}

impl Drop for Offer {
    fn drop(&mut self) {
        self.withdraw_slot();
        if let Some(unclaimed) = self.unclaimed.take() {
            // After close, a releasing task's send fails (it gives the hold
            // back itself); one that got in before is ours to give back.
            self.receiver.close();
            if let Ok(handed) = self.receiver.try_recv() {
                unclaimed(handed);
            }
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

    #[tokio::test]
    async fn offers_are_taken_oldest_first_at_most_a_streak_in_a_row() {
        let queues = LocalQueues::default();
        let mut head = queues.ticket("a".into());
        head.turn().await;
        let keep = || Box::new(|_| {}) as Unclaimed;
        let _first = queues.offer("a", None, keep()).unwrap();
        let _second = queues
            .offer("a", Some(Duration::from_secs(1)), keep())
            .unwrap();
        assert_eq!(
            queues.take_offer("a").unwrap().lease,
            None,
            "the oldest first"
        );
        let taken = queues.take_offer("a").unwrap();
        assert_eq!(taken.lease, Some(Duration::from_secs(1)));
        for _ in 2..MAX_STREAK {
            let _offer = queues.offer("a", None, keep()).unwrap();
            assert!(queues.take_offer("a").is_some());
        }
        let _last = queues.offer("a", None, keep()).unwrap();
        assert!(
            queues.take_offer("a").is_none(),
            "the streak is at its bound"
        );
        assert!(queues.take_offer("a").is_some(), "a new streak begins");
        let withdrawn = queues.offer("a", None, keep()).unwrap();
        drop(withdrawn);
        assert!(
            queues.take_offer("a").is_none(),
            "a withdrawn offer is gone"
        );
    }
}
