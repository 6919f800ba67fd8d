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
//!   waiters of other clients get their turn. The count goes with the holds
//!   ([`Handed::streak`]), not with a queue: a queue empties whenever the
//!   one waiter it had is handed the lock, and a count kept there would
//!   start over each time (two tasks handing a lock back and forth would
//!   keep every other client out).

use std::collections::VecDeque;
use std::collections::hash_map::Entry;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::Instant;

use tokio::sync::{OwnedMutexGuard, oneshot};

use crate::engine::redis::pubsub::Subscription;

/// How many handoffs in a row a queue takes before a release frees the lock
/// for everyone (cf. lock cohorting: a bounded streak inside one client).
pub(crate) const MAX_STREAK: u32 = 16;

/// The longest a queue's head stands back after a release for everyone.
pub(crate) const STAND_BACK_MAX: Duration = Duration::from_millis(5);

#[derive(Default)]
pub(crate) struct LocalQueues {
    queues: Mutex<foldhash::HashMap<String, Arc<Queue>>>,
}

#[derive(Default)]
struct Queue {
    /// Its key in the table, for the last ticket to remove it.
    key: String,
    /// Its tickets, counted under the table's lock: the last one to leave
    /// removes the queue. (Not the `Arc`'s count: offers and releasing
    /// tasks hold the queue too, for a moment or longer.)
    tickets: AtomicUsize,
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
    /// When a release at the end of a streak began, which freed the lock
    /// for every client: the queue's head, woken by its message, stands
    /// back for a moment before it tries (see [`Offers::stand_back`]).
    freed_for_all: Option<Instant>,
}

/// A waiter's offer to take the lock over: the lease it asked for, and
/// where to say it was handed over. Dropping
/// the sender without a value wakes the waiter.
pub(crate) struct Slot {
    id: u64,
    pub(crate) lease: Duration,
    pub(crate) handed: oneshot::Sender<Box<Parcel>>,
}

/// The lock was handed over: the new hold's holder id (fresh, unique to the
/// handoff), its fencing token, when the script that made it was sent (its
/// lease counts from then), and its place in the streak of handoffs.
#[derive(Debug, Clone)]
pub(crate) struct Handed {
    pub(crate) holder: String,
    pub(crate) token: u64,
    pub(crate) sent: Instant,
    /// How many handoffs in a row led to this hold, this one included (a
    /// hold taken by an acquire script starts a streak at 0). Its release
    /// hands the lock over only below [`MAX_STREAK`].
    pub(crate) streak: u32,
}

/// A handoff as the releasing task sends it: the hold, and how to give it
/// back if its waiter went away before taking it. The releasing task makes
/// the give-back (it knows the lock and the client), so a waiter carries
/// nothing for it while it waits. Sent boxed: each offer's channel then
/// keeps room for a pointer, not a whole handoff.
pub(crate) struct Parcel {
    pub(crate) handed: Handed,
    pub(crate) give_back: GiveBack,
}

/// Gives back a hold handed to an offer that was dropped unclaimed.
pub(crate) type GiveBack = Box<dyn FnOnce() + Send>;

impl LocalQueues {
    fn queues(&self) -> MutexGuard<'_, foldhash::HashMap<String, Arc<Queue>>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place in the queue `key`. Await [`Ticket::turn`] to reach the head.
    pub(crate) fn ticket(&self, key: String) -> Ticket<'_> {
        let mut queues = self.queues();
        let queue = match queues.entry(key) {
            Entry::Occupied(queue) => queue.get().clone(),
            Entry::Vacant(free) => {
                let queue = Arc::new(Queue {
                    key: free.key().clone(),
                    ..Queue::default()
                });
                free.insert(queue).clone()
            }
        };
        queue.tickets.fetch_add(1, Ordering::Relaxed);
        drop(queues);
        Ticket {
            queues: self,
            queue,
            turn: None,
        }
    }

    /// The oldest live offer of queue `key`, for a releasing task to hand
    /// the lock to; `None` when there is none.
    pub(crate) fn take_offer(&self, key: &str) -> Option<Slot> {
        let queue = self.queues().get(key)?.clone();
        let mut handoff = queue.handoff();
        std::iter::from_fn(|| handoff.slots.pop_front()).find(|slot| !slot.handed.is_closed())
    }

    /// A release that frees the lock for every client (its streak of
    /// handoffs is over) begins now: the head of queue `key`, if it has
    /// one, lets other clients try first.
    pub(crate) fn free_for_all(&self, key: &str) {
        if let Some(queue) = self.queues().get(key) {
            queue.handoff().freed_for_all = Some(Instant::now());
        }
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
    queue: Arc<Queue>,
    turn: Option<Seat>,
}

/// The head's place in a queue, with what it keeps for the next head (the
/// subscription).
pub(crate) type Seat = OwnedMutexGuard<Option<Subscription>>;

impl Ticket<'_> {
    /// Waits until every earlier waiter of this queue has left.
    pub(crate) async fn turn(&mut self) {
        if self.turn.is_none() {
            let seat = self.seat_free().await;
            self.sit(seat);
        }
    }

    /// The head's seat once every earlier waiter of this queue has left;
    /// give it to [`sit`](Self::sit). Borrows nothing, so the ticket can be
    /// used while waiting.
    pub(crate) fn seat_free(&self) -> impl Future<Output = Seat> + Send + 'static {
        self.queue.turn.clone().lock_owned()
    }

    /// Takes the head's seat (see [`seat_free`](Self::seat_free)).
    pub(crate) fn sit(&mut self, seat: Seat) {
        self.turn = Some(seat);
    }

    /// Where this waiter leaves its offers, usable while it waits for its
    /// turn.
    pub(crate) fn offers(&self) -> Offers {
        Offers(Arc::downgrade(&self.queue))
    }

    /// The queue's subscription, made by `subscribe` if the queue has none
    /// yet, and whether it was made now. Call it at the head (after
    /// [`turn`](Self::turn)). One taken over from an earlier head still
    /// holds the messages that head did not act on.
    pub(crate) async fn subscription<F>(
        &mut self,
        subscribe: F,
    ) -> Result<(&mut Subscription, bool), crate::error::LockError>
    where
        F: Future<Output = Result<Subscription, crate::error::LockError>>,
    {
        let Some(turn) = self.turn.as_mut() else {
            return Err(crate::error::LockError::Shutdown);
        };
        let fresh = turn.is_none();
        if fresh {
            **turn = Some(subscribe.await?);
        }
        match turn.as_mut() {
            Some(subscription) => Ok((subscription, fresh)),
            None => Err(crate::error::LockError::Shutdown),
        }
    }
}

/// Where a waiter of one queue leaves its offers (see [`Ticket::offers`]).
/// Weak: it does not keep the queue in the table (see `Ticket`'s drop).
pub(crate) struct Offers(Weak<Queue>);

impl Offers {
    /// Leaves an offer in the queue (behind the older ones). Await
    /// [`Offer::handed`]; drop the offer to withdraw it. A handoff that
    /// arrives unclaimed (the offer dropped just after it was taken) goes to
    /// the [`Parcel`]'s give-back. `None` when the queue is gone (its
    /// waiters all left).
    pub(crate) fn offer(&self, lease: Duration) -> Option<Offer> {
        let queue = self.0.upgrade()?;
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
            claimed: false,
        })
    }

    /// How long the head should stand back before it tries, having been
    /// woken by the message of a release that freed the lock for every
    /// client (see [`LocalQueues::free_for_all`]): as long again as that
    /// release took to reach it, twice. Waiters of other clients, woken by
    /// the same message, then get there first; their threads are often
    /// asleep where ours are not, and without it ours would win every such
    /// race. At most [`STAND_BACK_MAX`]. Asked once per release.
    pub(crate) fn stand_back(&self) -> Option<Duration> {
        let queue = self.0.upgrade()?;
        let freed = queue.handoff().freed_for_all.take()?;
        Some((freed.elapsed() * 2).min(STAND_BACK_MAX))
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.turn.take();
        let mut queues = self.queues.queues();
        if self.queue.tickets.fetch_sub(1, Ordering::Relaxed) == 1 {
            // The last one: its subscription goes with it.
            queues.remove(&self.queue.key);
        }
    }
}

/// A waiter's offer in its queue. Dropping it withdraws it.
pub(crate) struct Offer {
    queue: Option<Arc<Queue>>,
    id: u64,
    receiver: oneshot::Receiver<Box<Parcel>>,
    /// The handoff was taken: nothing to give back.
    claimed: bool,
}

impl Offer {
    /// `Some` when a releasing task handed the lock over (the caller now
    /// owns that hold); `None` when it took the offer but did not hand the
    /// lock over (the head should try again now).
    pub(crate) async fn handed(&mut self) -> Option<Handed> {
        std::future::poll_fn(|cx| self.poll_handed(cx)).await
    }

    /// [`handed`](Self::handed), polled by hand (inside a larger `poll_fn`,
    /// which keeps a waiter's future small). Not to be polled again once
    /// ready.
    pub(crate) fn poll_handed(&mut self, cx: &mut Context<'_>) -> Poll<Option<Handed>> {
        let handoff = ready!(Pin::new(&mut self.receiver).poll(cx)).ok();
        self.claimed |= handoff.is_some();
        Poll::Ready(handoff.map(|handoff| handoff.handed))
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
        if !self.claimed {
            // After close, a releasing task's send fails (it gives the hold
            // back itself); one that got in before is ours to give back.
            self.receiver.close();
            if let Ok(handoff) = self.receiver.try_recv() {
                (handoff.give_back)();
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
    async fn offers_are_taken_oldest_first_and_live_only() {
        let queues = LocalQueues::default();
        let mut head = queues.ticket("a".into());
        head.turn().await;
        let offers = head.offers();
        let first = offers.offer(Duration::from_secs(30)).unwrap();
        let second = offers.offer(Duration::from_secs(1)).unwrap();
        assert_eq!(
            queues.take_offer("a").unwrap().lease,
            Duration::from_secs(30),
            "the oldest first"
        );
        let taken = queues.take_offer("a").unwrap();
        assert_eq!(taken.lease, Duration::from_secs(1));
        let withdrawn = offers.offer(Duration::from_secs(30)).unwrap();
        drop(withdrawn);
        assert!(
            queues.take_offer("a").is_none(),
            "a withdrawn offer is gone"
        );
        let last = offers.offer(Duration::from_secs(30)).unwrap();
        drop(head);
        assert_eq!(queues.len(), 0, "offers keep no queue in the table");
        drop((first, second, last));
        assert!(
            offers.offer(Duration::from_secs(30)).is_none(),
            "no offer in a queue that is gone"
        );
    }

    #[tokio::test]
    async fn a_handoff_to_an_offer_that_left_is_given_back_once() {
        let queues = LocalQueues::default();
        let mut head = queues.ticket("a".into());
        head.turn().await;
        let offers = head.offers();
        let given_back = Arc::new(AtomicUsize::new(0));
        let hand_over = |slot: Slot| {
            let given_back = given_back.clone();
            let handed = Handed {
                holder: "h".into(),
                token: 7,
                sent: Instant::now(),
                streak: 1,
            };
            let give_back: GiveBack = Box::new(move || {
                given_back.fetch_add(1, Ordering::SeqCst);
            });
            assert!(
                slot.handed
                    .send(Box::new(Parcel { handed, give_back }))
                    .is_ok()
            );
        };

        // Handed over, then the offer is dropped before its waiter looked.
        let unclaimed = offers.offer(Duration::from_secs(30)).unwrap();
        hand_over(queues.take_offer("a").unwrap());
        drop(unclaimed);
        assert_eq!(given_back.load(Ordering::SeqCst), 1, "given back");

        // Handed over and taken: the waiter owns it, nothing is given back.
        let mut claimed = offers.offer(Duration::from_secs(30)).unwrap();
        hand_over(queues.take_offer("a").unwrap());
        assert_eq!(claimed.handed().await.map(|h| h.token), Some(7));
        drop(claimed);
        assert_eq!(given_back.load(Ordering::SeqCst), 1, "not given back");
    }
}
