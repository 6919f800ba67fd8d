//! The builders and the one acquire loop every single-name kind shares.
//!
//! Data flows one way: the builder runs the acquire loop, which takes the
//! hold through the kind's script (`hold`, in the caller's task, on its
//! runtime's near connection) and wraps a success in a [`LockGuard`]; the
//! guard registers with the watchdog and, at release, unregisters and gives
//! the hold back through `hold` again. The kinds made of several holds
//! (`multi`, `quorum`, `segmented`) are built on guards.
pub(crate) mod multi;
pub(crate) mod quorum;
pub(crate) mod read_write;
pub(crate) mod segmented;

use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::client::Core;
use crate::config::check_lease;
use crate::guard::{Held, LockGuard};
use crate::hold::{Attempt, Target, Try, attempt_once, handoff};
use crate::holder;
use crate::keys;
use crate::{LockClient, LockError};

/// Options of one acquisition, shared by every kind's builder.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Options {
    pub(crate) wait: Option<Duration>,
    pub(crate) lease: Option<Duration>,
    /// The holder number of a new hold (a multi lock's parts share one);
    /// `None`: a fresh one. Ignored when the scope re-enters.
    pub(crate) number: Option<u64>,
    /// The `kind` label of a part of a multi or quorum lock (`"multi"`,
    /// `"quorum"`), which records its own acquisition; `None`: the lock's
    /// own kind, and the acquisition is recorded here.
    pub(crate) metric: Option<&'static str>,
    /// Keep the lock taken at least this long after it was acquired, even
    /// when released sooner (`hold_at_least`).
    pub(crate) hold_at_least: Option<Duration>,
}

/// Builds one acquisition of a lock: [`wait`](Self::wait) and
/// [`lease`](Self::lease), then [`acquire`](Self::acquire) or
/// [`try_acquire`](Self::try_acquire).
///
/// - `wait` left out: wait until acquired. `Duration::ZERO`: one attempt.
/// - `lease` left out: the watchdog keeps the lock alive until release.
///   Set: the lock expires after `lease` unless released first.
#[derive(Debug, Clone)]
#[must_use = "a lock builder does nothing until acquired"]
pub struct LockBuilder {
    client: LockClient,
    target: Target,
    options: Options,
}

impl LockBuilder {
    pub(crate) fn new(client: LockClient, target: Target) -> Self {
        LockBuilder {
            client,
            target,
            options: Options::default(),
        }
    }

    /// Longest time to wait for the lock; then `Err(LockError::Timeout)`.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = Some(wait);
        self
    }

    /// A fixed lease: the lock expires after it unless released first, and
    /// the watchdog leaves it alone.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.options.lease = Some(lease);
        self
    }

    /// Keeps the lock taken at least `minimum` after it was acquired, even
    /// when the guard is released sooner (ShedLock's `lockAtLeastFor`): the
    /// release then sets the lock to expire when the minimum ends, instead
    /// of freeing it (no one takes it before). A release after the minimum frees
    /// it as usual. For run-once jobs on several instances whose timers
    /// drift: the instance that ran a slot keeps the others out of it.
    ///
    /// The minimum counts from the acquire's answer. A watchdog lease is
    /// lengthened or shortened to what is left of it; a fixed
    /// [`lease`](Self::lease) is only shortened, and a minimum longer than
    /// it is refused with [`LockError::Config`] (the lease would end the
    /// hold first). Reentrant and fair locks; a read or write lock refuses
    /// it with [`LockError::Config`]. A release that leaves other holds of
    /// the holder (re-entries) only counts down; the release of the last
    /// hold applies its own guard's minimum. Inside a scope the inner guard
    /// is released first, so the outer guard's minimum is the one applied;
    /// a builder user who releases an outer guard before its re-entry gets
    /// the re-entry's. Waiters told a longer lease are woken to retry. A
    /// lost lease is reported as usual.
    pub fn hold_at_least(mut self, minimum: Duration) -> Self {
        self.options.hold_at_least = Some(minimum);
        self
    }

    /// Acquires the lock, waiting as configured.
    pub async fn acquire(self) -> Result<LockGuard, LockError> {
        let held = acquire_hold(&self.client, self.target, self.options).await?;
        Ok(LockGuard::single(held))
    }

    /// One attempt: `Ok(None)` when someone else holds the lock.
    pub async fn try_acquire(mut self) -> Result<Option<LockGuard>, LockError> {
        self.options.wait = Some(Duration::ZERO);
        match self.acquire().await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Runs the kind's give-up clean-up (in the background) unless disarmed.
struct GiveUpOnDrop<'a> {
    core: &'a Core,
    target: &'a Target,
    holder: &'a str,
    armed: bool,
}

impl Drop for GiveUpOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed
            && let Some(cleanup) = self.target.give_up(self.core, self.holder)
        {
            self.core.runtime.spawn(cleanup);
        }
    }
}

/// How long to sleep before retrying, given the holder's remaining lease.
fn nap(ttl_ms: i64) -> Duration {
    match ttl_ms {
        // Gone since the attempt: retry at once.
        -2 => Duration::ZERO,
        // No lease at all: only a message (or this poll) tells us it is free.
        ms if ms < 0 => Duration::from_secs(1),
        ms => Duration::from_millis(ms as u64),
    }
}

/// The acquire loop every single-name kind shares: one script round trip when
/// the lock is free; otherwise queue locally, subscribe, retry, and sleep until
/// an unlock message or the holder's lease ends.
///
/// The holder is the scope's when the caller runs in the scope of a hold of
/// this lock on this client (a re-entry), else a new one.
pub(crate) async fn acquire_hold(
    client: &LockClient,
    target: Target,
    options: Options,
) -> Result<Held, LockError> {
    keys::check_name(target.name())?;
    check_lease(options.lease)?;
    if let Some(minimum) = options.hold_at_least {
        crate::config::check_duration("hold_at_least", minimum)?;
        if matches!(target, Target::Read { .. } | Target::Write { .. }) {
            return Err(LockError::Config(format!(
                "lock `{}`: hold_at_least is for reentrant and fair locks, not read-write locks",
                target.name()
            )));
        }
        if let Some(lease) = options.lease
            && minimum > lease
        {
            return Err(LockError::Config(format!(
                "lock `{}`: hold_at_least ({minimum:?}) is longer than the fixed lease \
                 ({lease:?}), which ends the hold first; make the lease at least as long, \
                 or leave it out (the watchdog then keeps the lock until the minimum)",
                target.name()
            )));
        }
    }
    let core = client.core();
    let scoped = holder::in_scope(&core.id, target.name());
    let reenter = scoped.is_some();
    let holder = scoped.unwrap_or_else(|| {
        holder::id(
            &core.id,
            options.number.unwrap_or_else(holder::fresh_number),
        )
    });
    let lease = options.lease.unwrap_or(core.config.watchdog_timeout);
    let how = Try {
        holder,
        lease,
        reenter,
        attempt: String::new(),
    };
    let span = tracing::debug_span!(
        "acquire",
        lock = target.name(),
        kind = target.kind(),
        reenter
    );
    let metric = options.metric.unwrap_or(target.kind());
    let started = Instant::now();
    let result = async {
        // A deadline the clock cannot represent is no deadline.
        let deadline = options.wait.and_then(|w| started.checked_add(w));
        let timeout = || LockError::Timeout {
            name: target.name().to_owned(),
            waited: options.wait.unwrap_or_default(),
        };
        let gone = || LockError::Lost {
            name: target.name().to_owned(),
        };
        let mut give_up = GiveUpOnDrop {
            core,
            target: &target,
            holder: &how.holder,
            armed: true,
        };
        let mut sent = Instant::now();
        let mut holder_id = how.holder.clone();
        // Behind this client's waiters when there are any (FIFO inside the
        // client); first a plain attempt otherwise.
        let queue = target.local_queue(&how.holder);
        let queued = !reenter && core.local.is_queued(&queue);
        let first = if queued {
            Attempt::Busy { ttl_ms: -2 }
        } else {
            Box::pin(attempt_once(client, &target, &how)).await?
        };
        let token = match first {
            Attempt::Acquired { token } => token,
            Attempt::Gone => return Err(gone()),
            Attempt::Busy { .. } => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(timeout());
                }
                let _waiting = crate::telemetry::WaiterMetric::start(metric);
                let mut ticket = core.local.ticket(queue.clone());
                // Only plain acquisitions of a reentrant lock take handovers
                // (see `handoff`): the waiter offers to take the lock over
                // while it waits for its turn, and after.
                let handovers = matches!(target, Target::Reentrant { .. })
                    && !reenter
                    && options.number.is_none();
                let offer_now = || {
                    handovers
                        .then(|| handoff::offer(core, &target, &queue, options.lease))
                        .flatten()
                };
                let mut offer = offer_now();
                let waited = async {
                    // One `turn` future throughout: the queue is FIFO.
                    let mut turn = std::pin::pin!(ticket.turn());
                    loop {
                        let handed = async {
                            match offer.as_mut() {
                                Some(offer) => offer.handed().await,
                                None => std::future::pending().await,
                            }
                        };
                        let woken = tokio::select! {
                            () = &mut turn => return None,
                            handed = handed => handed,
                        };
                        match woken {
                            Some(handed) => return Some(handed),
                            // Taken but not handed over: offer again.
                            None => offer = offer_now(),
                        }
                    }
                };
                let waited = match deadline {
                    Some(d) => tokio::time::timeout_at(d.into(), waited)
                        .await
                        .map_err(|_| timeout())?,
                    None => waited.await,
                };
                let (holder, token, at) = match waited {
                    Some(handed) => (handed.holder, handed.token, handed.sent),
                    // Boxed: the many waiters still queued (in `turn` above)
                    // do not carry the head's larger state.
                    None => {
                        Box::pin(contend(
                            client,
                            &target,
                            &how,
                            &mut ticket,
                            offer,
                            Waiting {
                                deadline,
                                wait: options.wait,
                                lease: options.lease,
                                queue: &queue,
                                handovers,
                            },
                        ))
                        .await?
                    }
                };
                holder_id = holder;
                sent = at;
                token
            }
        };
        give_up.armed = false;
        tracing::debug!(token, "acquired");
        let mut held = Held::new(
            client.clone(),
            target.clone(),
            holder_id,
            token,
            sent,
            options.lease,
            metric,
        );
        if let Some(minimum) = options.hold_at_least {
            // From the answer: the lock was taken no later than now.
            held.hold_at_least(Instant::now(), minimum);
        }
        Ok(held)
    }
    .instrument(span)
    .await;
    if options.metric.is_none() {
        let outcome = crate::telemetry::outcome(&result);
        crate::telemetry::acquired(metric, outcome, started.elapsed());
    }
    result
}

/// How the head of a local queue waits (see [`contend`]).
struct Waiting<'a> {
    deadline: Option<Instant>,
    /// What the caller asked to wait, for the timeout error.
    wait: Option<Duration>,
    /// The caller's fixed lease, if any (a handed-over hold gets it too).
    lease: Option<Duration>,
    /// The local queue's key.
    queue: &'a str,
    /// Whether this acquisition takes handovers (see `handoff`).
    handovers: bool,
}

/// The head of a local queue contends in Redis: subscribe (or take over the
/// queue's subscription), retry, and sleep until an unlock message, the
/// holder's lease end, or a handover to its `offer` from a releasing task of
/// this client. Returns the holder id, fencing token and send time of the
/// hold.
async fn contend(
    client: &LockClient,
    target: &Target,
    how: &Try,
    ticket: &mut crate::local::Ticket<'_>,
    mut offer: Option<crate::local::Offer>,
    waiting: Waiting<'_>,
) -> Result<(String, u64, Instant), LockError> {
    let core = client.core();
    let timeout = || LockError::Timeout {
        name: target.name().to_owned(),
        waited: waiting.wait.unwrap_or_default(),
    };
    let gone = || LockError::Lost {
        name: target.name().to_owned(),
    };
    let (messages, fresh) = ticket
        .subscription(core.pubsub.subscribe(target.channel(&how.holder)))
        .await?;
    // A head that took over the queue's subscription with its offer in place
    // first waits, without an attempt: the lock most likely went to an
    // earlier waiter of this client, who will hand it on or announce its
    // release (a message the subscription keeps for us). Attempting at once
    // would race every release of this client's streak and win the one
    // meant for everyone, so other clients would starve.
    let mut wait_first = !fresh && offer.is_some();
    loop {
        let ttl_ms = if wait_first {
            wait_first = false;
            // Bounded: the holder may die without a message.
            -1
        } else {
            messages.mark_seen();
            // Offered before each attempt, so that a release racing the
            // attempt can hand the lock over.
            if waiting.handovers && offer.is_none() {
                offer = handoff::offer(core, target, waiting.queue, waiting.lease);
            }
            let sent = Instant::now();
            match Box::pin(attempt_once(client, target, how)).await? {
                Attempt::Acquired { token } => return Ok((how.holder.clone(), token, sent)),
                Attempt::Gone => return Err(gone()),
                Attempt::Busy { ttl_ms } => ttl_ms,
            }
        };
        let now = Instant::now();
        let mut sleep = nap(ttl_ms);
        if let Some(d) = waiting.deadline {
            if now >= d {
                return Err(timeout());
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
            _ = tokio::time::timeout(sleep, messages.changed()) => None,
            handed = handed => handed,
        };
        match handed {
            Some(Some(handed)) => return Ok((handed.holder, handed.token, handed.sent)),
            // Taken but not handed over: a new offer, a new try.
            Some(None) => offer = None,
            // Still offered.
            None => {}
        }
    }
}

/// The client's entry point to this module's locks.
impl LockClient {
    /// A reentrant lock (Redisson's `RLock`): one holder at a time, which may
    /// take it again inside its guard's [`scope`](crate::LockGuard::scope).
    pub fn lock(&self, name: impl Into<String>) -> LockBuilder {
        LockBuilder::new(self.clone(), Target::Reentrant { name: name.into() })
    }

    /// A fair lock (Redisson's `RFairLock`): a reentrant lock that goes to
    /// waiters in the order they first asked for it, across tasks and
    /// clients. A waiter that gives up or dies does not block those behind
    /// it (see [`Config::fair_wait_timeout`](crate::Config::fair_wait_timeout)).
    pub fn fair_lock(&self, name: impl Into<String>) -> LockBuilder {
        LockBuilder::new(self.clone(), Target::Fair { name: name.into() })
    }
}
