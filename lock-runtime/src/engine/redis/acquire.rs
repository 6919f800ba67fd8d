//! The Redis engine's acquire loop: one script round trip when the lock is
//! free; otherwise queue locally, subscribe, retry, and sleep until an
//! unlock message, a handoff from a releasing task of this client, or the
//! holder's lease ends.
//!
//! The holder is the scope's when the caller runs in the scope of a hold of
//! this lock on this client (a re-entry), else a new one.

use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::time::Instant;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

use super::Core;
use super::RedisHold;
use super::conn::connection_lost;
use super::hold::fair::GiveUp;
use super::hold::{Attempt, Busy, Try, Unsettled, attempt_once};
use crate::background::Background;
use crate::engine::redis::local::Handed;
use crate::error::LockError;
use crate::holder;
use crate::request::{Kind, Request, backoff, pause_within};

/// Takes the hold `request` asks for (see the module docs). Not an `async
/// fn`, for the size of the future: every waiting task carries it.
pub(crate) fn acquire(
    core: Arc<Core>,
    alive: Arc<Background>,
    request: Request,
) -> impl Future<Output = Result<RedisHold, LockError>> + Send + 'static {
    let mut acquisition = Acquisition {
        core,
        alive,
        request,
        started: Instant::now(),
        unsettled: std::sync::Mutex::new(None),
    };
    async move {
        acquisition.request.check()?;
        acquisition.started = acquisition.request.start();
        let result = acquisition.take().await;
        let request = &acquisition.request;
        let kind = request.recorded.then_some(request.metric);
        crate::telemetry::record_acquired(kind, acquisition.started, &result);
        result
    }
}

/// Runs the kind's give-up clean-up for the hold `how` (in the background)
/// unless disarmed (`how` taken) or [`left`](Self::leave) already.
struct GiveUpOnDrop<'a> {
    acquisition: &'a Acquisition,
    how: Option<&'a Try>,
}

impl GiveUpOnDrop<'_> {
    /// Gives up (disarmed) because of `failure`, and returns it. A fair try
    /// that found the lock busy must have left the queue by the time it
    /// returns: its leaving starts at once, and this waits for the first
    /// try's answer (already started, so a caller dropped meanwhile loses
    /// nothing). After a lost connection it leaves in the background: a
    /// first try would most likely only add a timeout of its own.
    async fn left(&mut self, failure: LockError) -> LockError {
        if let Some(first_try) = self.leave(&failure) {
            // An error: the client's runtime has shut down.
            let _ = first_try.await;
        }
        failure
    }

    /// Starts giving up because of `failure` (see [`left`](Self::left)).
    fn leave(&mut self, failure: &LockError) -> Option<oneshot::Receiver<()>> {
        let (give_up, runtime) = self.disarm()?;
        if matches!(failure, LockError::Redis(e) if connection_lost(e)) {
            give_up.in_background(runtime);
            None
        } else {
            Some(give_up.now(runtime))
        }
    }

    /// The kind's give-up for the hold, if armed and the kind has one
    /// (disarms), with the client's runtime to run it on.
    fn disarm(&mut self) -> Option<(GiveUp, &Handle)> {
        let core = &self.acquisition.core;
        let how = self.how.take()?;
        let give_up = self.acquisition.request.give_up(core, &how.holder)?;
        Some((give_up, &core.runtime))
    }
}

impl Drop for GiveUpOnDrop<'_> {
    fn drop(&mut self) {
        if let Some((give_up, runtime)) = self.disarm() {
            give_up.in_background(runtime);
        }
    }
}

/// How long to sleep before retrying a busy lock (not [`Busy::Soon`],
/// which backs off).
fn nap(busy: Busy) -> Duration {
    match busy {
        Busy::Now | Busy::Soon => Duration::ZERO,
        // No lease at all: only a message (or this poll) tells us it is free.
        Busy::NoLease => Duration::from_secs(1),
        Busy::For(ms) => Duration::from_millis(ms),
    }
}

/// What one acquire attempt came to.
enum Tried {
    Taken(Handed),
    Busy(Busy),
}

/// One acquisition, which its steps borrow (one reference each, not three:
/// every waiting task carries these futures).
struct Acquisition {
    core: Arc<Core>,
    /// Keeps the client's runtime running (a hold taken keeps it on).
    alive: Arc<Background>,
    request: Request,
    /// When it was first polled: its wait counts from then.
    started: Instant,
    /// The reconcile of a failed attempt, still under way: the next attempt
    /// waits for it (see [`attempt_once`]).
    /// Boxed: rare, and every waiting task carries this.
    unsettled: std::sync::Mutex<Option<Box<Unsettled>>>,
}

impl Acquisition {
    /// The hold to take: the scope's when the caller runs in the scope of a
    /// hold of this lock on this client (a re-entry), else a new one.
    fn how(&self) -> Try {
        let core = &self.core;
        let request = &self.request;
        let scoped = holder::in_scope(&core.id, &request.name);
        let reenter = scoped.is_some();
        let holder = match scoped {
            Some((who, _)) => who.holder.clone(),
            None => holder::new_id(&core.id, request.number),
        };
        Try {
            holder,
            lease: request.lease.length,
            reenter,
            attempt: String::new(),
        }
    }

    /// Whether this client already has waiters for the lock, which a new
    /// holder queues behind (FIFO inside the client) instead of attempting.
    /// Not in [`take`](Self::take): the queue's key would stay in its future.
    fn behind_others(&self, how: &Try) -> bool {
        !how.reenter && (self.core.local).is_queued(&self.request.local_queue(&how.holder))
    }

    /// One acquire script call: the hold taken (a streak of its own, at 0),
    /// or the holder's remaining lease when busy (see [`Attempt::Busy`]).
    /// A re-entry that finds its hold gone is an error ([`LockError::Lost`]).
    async fn attempt(&self, how: &Try) -> Result<Tried, LockError> {
        // Not before an earlier attempt whose answer was lost can take
        // nothing any more: the reconcile gives back what it took by the
        // holder id alone.
        let unsettled = self
            .unsettled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(unsettled) = unsettled {
            // Boxed: rare, and its timer would be in every waiter's future.
            Box::pin(self.settled(*unsettled)).await?;
        }
        let sent = Instant::now();
        let (answer, unsettled) = Box::pin(attempt_once(&self.core, &self.request, how)).await;
        *self.unsettled.lock().unwrap_or_else(|p| p.into_inner()) = unsettled.map(Box::new);
        match answer? {
            Attempt::Acquired { token } => Ok(Tried::Taken(Handed {
                holder: how.holder.clone(),
                token,
                sent,
                streak: 0,
            })),
            Attempt::Busy(busy) => Ok(Tried::Busy(busy)),
            Attempt::Gone => Err(lost(&self.request)),
        }
    }

    /// Waits, within the wait, for the reconcile of an earlier attempt to end
    /// (see [`attempt_once`]); an error when the wait ran out, or when it
    /// gave up: that attempt may hold the lock under this holder id until
    /// its lease ends and nothing could give it back, so no new attempt is
    /// made under the same id.
    async fn settled(&self, unsettled: Unsettled) -> Result<(), LockError> {
        let ended = unsettled.ended();
        let settled = match self.deadline() {
            Some(d) => match tokio::time::timeout_at(d, ended).await {
                Ok(settled) => settled,
                Err(_) => return Err(self.request.timed_out()),
            },
            None => ended.await,
        };
        if settled {
            return Ok(());
        }
        Err(LockError::Redis(redis::RedisError::from((
            redis::ErrorKind::Client,
            "an earlier attempt whose answer was lost could not be reconciled",
            format!(
                "lock `{}`: not trying again under its holder id",
                self.request.name
            ),
        ))))
    }

    /// Takes the hold: one attempt, else waiting.
    // `self.` throughout, not references in locals: the locals of an
    // `async fn` that live across an `.await` are kept in its future. Not
    // an `async fn`: one keeps its arguments twice, and every waiting task
    // carries this future.
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn keeps its arguments twice"
    )]
    fn take(&self) -> impl Future<Output = Result<RedisHold, LockError>> + Send + '_ {
        async move {
            let how = self.how();
            tracing::Span::current().record("reenter", how.reenter);
            let mut give_up = GiveUpOnDrop {
                acquisition: self,
                how: Some(&how),
            };
            match self.first_tries(&how).await {
                Ok(Some(taken)) => {
                    give_up.how = None;
                    return Ok(self.held(taken, how.reenter));
                }
                Ok(None) => {}
                Err(e) => return Err(e),
            }
            // The failure out of the `match` before the give-up's await: a
            // scrutinee kept across it would keep a place in every waiter's
            // future.
            let failure = match self.wait(&how).await {
                Ok(taken) => {
                    give_up.how = None;
                    return Ok(self.held(taken, how.reenter));
                }
                Err(e) => e,
            };
            Err(give_up.left(failure).await)
        }
    }

    /// The tries before waiting: the hold taken, `None` to wait for it (the
    /// lock is busy, or this client has waiters for it already), or an
    /// error that ends the acquisition. A future of its own, not part of
    /// [`take`](Self::take)'s: its count of tries would otherwise keep a
    /// place in every waiter's future.
    // No local `Handed` lives on across an await: every waiting task would
    // carry its room.
    async fn first_tries(&self, how: &Try) -> Result<Option<Handed>, LockError> {
        let mut tries = 0;
        while !self.behind_others(how) {
            tries += 1;
            match self.attempt(how).await {
                Ok(Tried::Taken(taken)) => return Ok(Some(taken)),
                Ok(Tried::Busy(_)) => break,
                Err(e) if !self.rides_out(&e, tries) => return Err(e),
                // Tried again while waiting.
                Err(_) if !how.reenter => break,
                // A re-entry never queues for a turn (the waiters it would
                // queue behind may wait for its own call chain): it tries
                // again in place, after the pause below.
                Err(_) => {}
            }
            // Boxed, and with no error kept across it: rare, and this
            // future is in every waiter's.
            Box::pin(self.pause(backoff(tries))).await;
        }
        Ok(None)
    }

    /// The guard's hold for what was `taken`; when it re-entered, it joins
    /// the call chain of the scope it was made in (read here, where the
    /// acquisition runs: in that scope).
    fn held(&self, taken: Handed, reentered: bool) -> RedisHold {
        tracing::debug!(token = taken.token, streak = taken.streak, "acquired");
        let request = &self.request;
        let mut held = RedisHold::new(
            self.core.clone(),
            self.alive.clone(),
            request.clone(),
            taken,
        );
        if reentered && let Some((_, chain)) = holder::in_scope(&self.core.id, &request.name) {
            held.reentered(chain);
        }
        if let Some(minimum) = request.hold_at_least {
            // From the answer: the lock was taken no later than now.
            held.hold_at_least(Instant::now(), minimum);
        }
        held
    }

    /// Waits in the client's local queue for the lock until it is handed
    /// over or this waiter reaches the head, which then contends in Redis.
    /// Returns the hold (one taken by its own script counts as a handoff
    /// at streak 0). Not an `async fn`, as [`take`](Self::take) is not.
    #[expect(
        clippy::manual_async_fn,
        reason = "an async fn keeps its arguments twice"
    )]
    fn wait<'a>(
        &'a self,
        how: &'a Try,
    ) -> impl Future<Output = Result<Handed, LockError>> + Send + 'a {
        async move {
            if self.deadline().is_some_and(|d| Instant::now() >= d) {
                return Err(self.request.timed_out());
            }
            let _waiting = crate::telemetry::WaiterMetric::start(self.request.metric);
            let handoffs = self.takes_handoffs(how);
            let queue = self.request.local_queue(&how.holder);
            let mut ticket = self.core.local.ticket(queue);
            let offers = ticket.offers();
            let mut offer = if handoffs {
                offers.offer(self.request.lease.length)
            } else {
                None
            };
            // Boxed, and only with a deadline: most waiters have none, and each
            // queued waiter's task carries this future.
            let mut expiry = self
                .deadline()
                .map(|d| Box::pin(tokio::time::sleep_until(d)));
            // One `turn` future throughout: the queue is FIFO. One `poll_fn`
            // rather than `select!`: each queued waiter's task carries it.
            let mut turn = std::pin::pin!(ticket.seat_free());
            loop {
                let woken = std::future::poll_fn(|cx| {
                    // A handoff first: it is a hold already taken.
                    if let Some(offer) = offer.as_mut()
                        && let Poll::Ready(handed) = offer.poll_handed(cx)
                    {
                        return Poll::Ready(Woken::Handed(handed));
                    }
                    if let Poll::Ready(seat) = turn.as_mut().poll(cx) {
                        return Poll::Ready(Woken::Head(seat));
                    }
                    match expiry.as_mut().map(|expiry| expiry.as_mut().poll(cx)) {
                        Some(Poll::Ready(())) => Poll::Ready(Woken::Expired),
                        _ => Poll::Pending,
                    }
                })
                .await;
                match woken {
                    Woken::Handed(Some(handed)) => return Ok(handed),
                    // Taken but not handed over: offer again (only a waiter
                    // that takes handoffs has an offer).
                    Woken::Handed(None) => offer = offers.offer(self.request.lease.length),
                    Woken::Head(seat) => {
                        ticket.sit(seat);
                        break;
                    }
                    Woken::Expired => return Err(self.request.timed_out()),
                }
            }
            // Boxed: the many waiters still queued (in `turn` above) do not carry
            // the head's larger state.
            Box::pin(self.contend(how, &mut ticket, &offers, offer)).await
        }
    }

    /// The head of a local queue contends in Redis: subscribe (or take over
    /// the queue's subscription), retry, and sleep until an unlock message,
    /// the holder's lease end, or a handoff to its `offer` from a releasing
    /// task of this client. Returns the hold, as [`wait`](Self::wait) does.
    async fn contend(
        &self,
        how: &Try,
        ticket: &mut crate::engine::redis::local::Ticket<'_>,
        offers: &crate::engine::redis::local::Offers,
        mut offer: Option<crate::engine::redis::local::Offer>,
    ) -> Result<Handed, LockError> {
        let (messages, fresh) = ticket.subscription(self.subscribe(how)).await?;
        // A head that took over the queue's subscription with its offer in
        // place first waits, without an attempt: the lock most likely went
        // to an earlier waiter of this client, who will hand it on or
        // announce its release (a message the subscription keeps for us).
        // Attempting at once would race every release of this client's
        // streak and win the one meant for everyone, so other clients would
        // starve.
        let mut wait_first = !fresh && offer.is_some();
        // Answers in a row with no lease to sleep by (see `backoff`).
        let mut unclear = 0;
        loop {
            let busy = if wait_first {
                wait_first = false;
                // Bounded: the holder may die without a message.
                Busy::NoLease
            } else {
                messages.mark_seen();
                // Offered before each attempt, so that a release racing the
                // attempt can hand the lock over.
                if offer.is_none() && self.takes_handoffs(how) {
                    offer = offers.offer(self.request.lease.length);
                }
                match self.attempt(how).await {
                    Ok(Tried::Taken(taken)) => return Ok(taken),
                    Ok(Tried::Busy(busy)) => busy,
                    // A fault that may heal, with time left: try again
                    // (a fresh attempt; the failed one is reconciled first).
                    Err(e) => {
                        self.fault(e, unclear + 1)?;
                        Busy::Soon
                    }
                }
            };
            let now = Instant::now();
            let mut sleep = if busy == Busy::Soon {
                unclear += 1;
                backoff(unclear)
            } else {
                unclear = 0;
                nap(busy)
            };
            if let Some(d) = self.deadline() {
                if now >= d {
                    return Err(self.request.timed_out());
                }
                sleep = sleep.min(d - now);
            }
            let handed = async {
                match offer.as_mut() {
                    Some(offer) => Some(offer.handed().await),
                    None => std::future::pending().await,
                }
            };
            let handed = tokio::select! {
                message = tokio::time::timeout(sleep, messages.changed()) => {
                    if message.is_ok()
                        && let Some(pause) = offers.stand_back()
                    {
                        let left = self.deadline().map(|d| d.saturating_duration_since(Instant::now()));
                        tokio::time::sleep(left.map_or(pause, |left| pause.min(left))).await;
                    }
                    None
                }
                handed = handed => handed,
            };
            match handed {
                Some(Some(handed)) => return Ok(handed),
                // Taken but not handed over: a new offer, a new try.
                Some(None) => offer = None,
                // Still offered.
                None => {}
            }
        }
    }

    /// Whether a failed attempt is made again instead of failing the
    /// acquisition: its error may heal ([`transient`](crate::engine::redis::conn::transient):
    /// a lost connection, a timeout, a server loading), and the wait has time
    /// left. Without a `wait` it is retried for as long as it takes, and the
    /// first failure of a run (`nth` 1) says so in a warning.
    fn rides_out(&self, e: &LockError, nth: u32) -> bool {
        let LockError::Redis(e) = e else {
            return false;
        };
        if !crate::engine::redis::conn::transient(e) {
            return false;
        }
        match self.deadline() {
            Some(d) if Instant::now() >= d => false,
            Some(_) => {
                tracing::debug!(lock = self.request.name.as_str(), error = %e, "an attempt failed; trying again within the wait");
                true
            }
            None => {
                if nth == 1 {
                    tracing::warn!(lock = self.request.name.as_str(), error = %e, "an attempt failed; waiting without a deadline, so trying again with backoff until Redis answers");
                }
                true
            }
        }
    }

    /// What a waiter does about an error `e` of its `nth` try in a row:
    /// `Ok` to try again (see [`rides_out`](Self::rides_out)); a fault that
    /// may heal but outlasted the wait is [`LockError::Timeout`] (the lock
    /// was not had within it); any other error is returned as it is.
    fn fault(&self, e: LockError, nth: u32) -> Result<(), LockError> {
        if self.rides_out(&e, nth) {
            return Ok(());
        }
        match e {
            LockError::Redis(e) if crate::engine::redis::conn::transient(&e) => {
                tracing::warn!(lock = self.request.name.as_str(), error = %e, "the wait ran out while Redis failed to answer");
                Err(self.request.timed_out())
            }
            e => Err(e),
        }
    }

    /// Sleeps for `pause`, or until the wait ends if that is sooner.
    async fn pause(&self, pause: Duration) {
        pause_within(self.deadline(), pause).await;
    }

    /// Subscribes to the channel that tells this waiter to try again,
    /// riding out faults as attempts do (with backoff, within the wait).
    async fn subscribe(
        &self,
        how: &Try,
    ) -> Result<crate::engine::redis::pubsub::Subscription, LockError> {
        let pubsub = &self.core.pubsub;
        let mut tries = 0;
        loop {
            match pubsub.subscribe(self.request.channel(&how.holder)).await {
                Err(e) => {
                    tries += 1;
                    self.fault(e, tries)?;
                    // Boxed: rare, and a head's future would carry its timer.
                    Box::pin(self.pause(backoff(tries))).await;
                }
                subscribed => return subscribed,
            }
        }
    }

    /// When the wait ends; `None`: never (no `wait`, or one the clock
    /// cannot represent).
    fn deadline(&self) -> Option<Instant> {
        self.request.deadline
    }

    /// Only plain acquisitions of a reentrant lock take handoffs (see
    /// `handoff`): the waiter offers to take the lock over while it waits
    /// for its turn, and after.
    fn takes_handoffs(&self, how: &Try) -> bool {
        self.request.kind == Kind::Reentrant && !how.reenter && self.request.number.is_none()
    }
}

/// The error of an acquisition the server says is gone (see [`Attempt::Gone`]).
fn lost(request: &Request) -> LockError {
    LockError::Lost {
        name: request.name.clone(),
    }
}

/// What woke a queued waiter (see [`Acquisition::wait`]).
enum Woken {
    /// Its offer was taken: the hold it was handed, if any.
    Handed(Option<Handed>),
    /// It is the head of its queue now.
    Head(crate::engine::redis::local::Seat),
    /// Its deadline passed.
    Expired,
}
