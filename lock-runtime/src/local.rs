//! In-process waiting queues: of the tasks in one client waiting for the same
//! lock, only the one at the head contends in Redis; the others wait here in
//! FIFO order. An unlock message then wakes one task, not all of them.
//!
//! A queue keeps two things between its heads:
//!
//! - **The subscription** to the lock's channel: a new head takes it over
//!   from the one that left, so draining a queue costs no `SUBSCRIBE` /
//!   `UNSUBSCRIBE` round trips; it goes when the queue empties.
//! - **The handoff slot**: a sleeping head may leave an [`Offer`] there. A
//!   task of the same client that releases the lock takes it and hands the
//!   lock over in the same script (see `lock::handoff`), so the head holds it
//!   one round trip after the release began, with no message in between.
//!   At most [`MAX_STREAK`] handoffs follow one another; then a release frees
//!   the lock and announces it, so that waiters of other clients get their
//!   turn.

use std::collections::HashMap;
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
    slot: Option<Slot>,
    /// Handoffs since the lock was last freed for everyone.
    streak: u32,
}

/// A sleeping head's offer to take the lock over: the holder id and lease it
/// would hold it under, the id of that acquisition (its acquire latch), and
/// where to say it was handed over. Dropping the sender without a value
/// wakes the head.
pub(crate) struct Slot {
    pub(crate) holder: String,
    pub(crate) attempt: String,
    pub(crate) lease: Option<Duration>,
    pub(crate) handed: oneshot::Sender<Handed>,
}

/// The lock was handed over: the fencing token of the new hold, and when the
/// script that made it was sent (its lease counts from then).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handed {
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

    /// The offer of queue `key`'s head, for a releasing task to hand the lock
    /// to; `None` when there is none, or when the streak is at its bound
    /// (then the streak starts over: this release is for everyone).
    pub(crate) fn take_offer(&self, key: &str) -> Option<Slot> {
        let queue = self.queues().get(key)?.clone();
        let mut handoff = queue.handoff();
        if handoff.streak >= MAX_STREAK {
            handoff.streak = 0;
            return None;
        }
        match handoff.slot.take() {
            Some(slot) if !slot.handed.is_closed() => {
                handoff.streak += 1;
                Some(slot)
            }
            _ => {
                handoff.streak = 0;
                None
            }
        }
    }

    /// Leaves an offer in queue `key`'s handoff slot (replacing an older
    /// one of its head's); `None` when the queue is gone. Only the head, in
    /// its turn, offers. Await [`Offer::handed`]; drop the offer to withdraw
    /// it. A handover that arrives unclaimed (the offer dropped just after
    /// it was taken) goes to `unclaimed`, which must give that hold back.
    pub(crate) fn offer(
        &self,
        key: &str,
        holder: String,
        attempt: String,
        lease: Option<Duration>,
        unclaimed: Unclaimed,
    ) -> Option<Offer> {
        let queue = self.queues().get(key)?.clone();
        let (handed, receiver) = oneshot::channel();
        queue.handoff().slot = Some(Slot {
            holder,
            attempt: attempt.clone(),
            lease,
            handed,
        });
        Some(Offer {
            queue: Some(queue),
            attempt,
            receiver,
            unclaimed: Some(unclaimed),
        })
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
    /// yet. Call it at the head (after [`turn`](Self::turn)).
    pub(crate) async fn subscription<F>(
        &mut self,
        subscribe: F,
    ) -> Result<&mut Subscription, crate::LockError>
    where
        F: Future<Output = Result<Subscription, crate::LockError>>,
    {
        let Some(turn) = self.turn.as_mut() else {
            return Err(crate::LockError::Shutdown);
        };
        if turn.is_none() {
            **turn = Some(subscribe.await?);
        }
        match turn.as_mut() {
            Some(subscription) => Ok(subscription),
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

/// A head's offer in its queue's handoff slot. Dropping it withdraws it.
pub(crate) struct Offer {
    queue: Option<Arc<Queue>>,
    attempt: String,
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
            let mut handoff = queue.handoff();
            if handoff
                .slot
                .as_ref()
                .is_some_and(|slot| slot.attempt == self.attempt)
            {
                handoff.slot = None;
            }
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
    async fn offers_are_taken_at_most_a_streak_in_a_row() {
        let queues = LocalQueues::default();
        let mut head = queues.ticket("a".into());
        head.turn().await;
        for _ in 0..MAX_STREAK {
            let _offer = queues.offer("a", "h".into(), "x".into(), None, Box::new(|_| {}));
            assert!(queues.take_offer("a").is_some());
        }
        let offer = queues.offer("a", "h".into(), "y".into(), None, Box::new(|_| {}));
        assert!(
            queues.take_offer("a").is_none(),
            "the streak is at its bound"
        );
        assert!(queues.take_offer("a").is_some(), "a new streak begins");
        drop(offer);
        let offer = queues.offer("a", "h".into(), "z".into(), None, Box::new(|_| {}));
        drop(offer);
        assert!(
            queues.take_offer("a").is_none(),
            "a withdrawn offer is gone"
        );
    }
}
