//! The builders and the one acquire loop every single-name kind shares.
//!
//! Data flows one way: the builder runs the acquire loop, which takes the
//! hold through the kind's script (`hold`, in the caller's task, on its
//! runtime's near connection) and wraps a success in a [`LockGuard`]; the
//! guard registers with the watchdog and, at release, unregisters and gives
//! the hold back through `hold` again. The kinds made of several holds
//! (`multi`, `quorum`, `segmented`) are built on guards.
pub(crate) mod multi;
#[cfg(feature = "redis")]
pub(crate) mod quorum;
pub(crate) mod read_write;
pub(crate) mod segmented;

use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::Either;
use tracing::Instrument;

use crate::client::LockClient;
use crate::error::LockError;
use crate::guard::{Held, LockGuard};
use crate::request::{Kind, Request};

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
    request: Request,
}

impl LockBuilder {
    /// An acquisition of lock `name` of `kind` on `client`.
    pub(crate) fn new(client: LockClient, name: String, kind: Kind) -> Self {
        let request = Request::new(name, kind, client.config());
        LockBuilder { client, request }
    }

    /// Longest time to wait for the lock; then `Err(LockError::Timeout)`.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.request.wait = Some(wait);
        self
    }

    /// A fixed lease: the lock expires after it unless released first, and
    /// the watchdog leaves it alone.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.request.fixed_lease(lease);
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
    /// it with [`LockError::Config`]. The minimum belongs to the call chain
    /// (a hold and its re-entries): a release that leaves other holds of the
    /// holder only counts down, and the chain's last release, whichever
    /// guard it is and whether released or dropped, applies the latest
    /// minimum any hold of the chain asked for. Waiters told a longer lease
    /// are woken to retry. A lost lease is reported as usual.
    pub fn hold_at_least(mut self, minimum: Duration) -> Self {
        self.request.hold_at_least = Some(minimum);
        self
    }

    /// Acquires the lock, waiting as configured.
    // Not an `async fn`: one would keep the builder twice (its argument and
    // the local it is moved to), and every waiting task carries this future.
    pub fn acquire(self) -> impl Future<Output = Result<LockGuard, LockError>> + Send + 'static {
        acquire_hold(self.client, self.request).map(|held| held.map(LockGuard::single))
    }

    /// One attempt: `Ok(None)` when someone else holds the lock.
    pub async fn try_acquire(mut self) -> Result<Option<LockGuard>, LockError> {
        self.request.wait = Some(Duration::ZERO);
        match self.acquire().await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The acquisition every single-name kind shares, on whichever engine the
/// client has (each checks the request first, with
/// [`Request::check`], and records the outcome).
///
/// Not an `async fn`, for the size of the future (see [`LockBuilder::acquire`]).
pub(crate) fn acquire_hold(
    client: LockClient,
    request: Request,
) -> impl Future<Output = Result<Held, LockError>> + Send + 'static {
    let span = tracing::debug_span!(
        "acquire",
        lock = request.name.as_str(),
        kind = request.kind.label(),
        reenter = tracing::field::Empty,
    );
    // Polled where it stands (no async block that would keep what it
    // moves in twice, no box): every waiting task carries it (a Redis
    // waiter's is kept small for it: see `engine::redis::acquire`).
    let engine = client.engine();
    if matches!(request.kind, Kind::Semaphore(_)) && !engine.semaphores() {
        let refused = crate::engine::seam::unsupported(engine.name(), "semaphores yet");
        return Either::Left(std::future::ready(Err(refused)));
    }
    let acquiring = engine.acquire(client.alive(), request);
    Either::Right(acquiring.instrument(span))
}

/// The client's entry point to this module's locks.
impl LockClient {
    /// A reentrant lock (Redisson's `RLock`): one holder at a time, which may
    /// take it again inside its guard's [`scope`](crate::LockGuard::scope).
    pub fn lock(&self, name: impl Into<String>) -> LockBuilder {
        LockBuilder::new(self.clone(), name.into(), Kind::Reentrant)
    }

    /// A fair lock (Redisson's `RFairLock`): a reentrant lock that goes to
    /// waiters in the order they first asked for it, across tasks and
    /// clients. A waiter that gives up or dies does not block those behind
    /// it (see [`Config::fair_wait_timeout`](crate::Config::fair_wait_timeout)).
    pub fn fair_lock(&self, name: impl Into<String>) -> LockBuilder {
        LockBuilder::new(self.clone(), name.into(), Kind::Fair)
    }

    /// A permit of semaphore `name` of `permits` permits (DESIGN §11): at
    /// most `permits` holders of the name at once, across tasks and
    /// clients (at most 5 calls to a partner's API across the fleet, say).
    ///
    /// A permit is a hold as a lock's is: its lease is renewed by the
    /// watchdog (or fixed by [`lease`](LockBuilder::lease)), its guard
    /// tells its loss ([`LockGuard::lost`](crate::LockGuard::lost)), its
    /// fencing token rises across every permit of the name, and an
    /// acquisition in its guard's [`scope`](crate::LockGuard::scope)
    /// re-enters it. Outside a scope every acquisition is a new permit,
    /// even in the same task.
    ///
    /// Each acquisition carries its own `permits`, and is admitted only
    /// while fewer than that many permits of the name are held, whoever
    /// holds them (Curator's semantics: a deploy that raises the bound
    /// needs no migration; clients that disagree each keep their own
    /// bound). Waiters are served in arrival order within a client, and
    /// none starves across clients. `permits` of 0 is
    /// [`LockError::Config`] when acquired. A name is one kind: a name
    /// held as a lock keeps a permit out until it is free, and the other
    /// way round.
    ///
    /// ```
    /// # async fn demo(client: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    ///
    /// let permit = client
    ///     .semaphore("partner:acme", 5)
    ///     .wait(Duration::from_secs(2))
    ///     .acquire()
    ///     .await?; // else LockError::Timeout
    /// // ... one of at most 5 calls to the partner, fleet-wide ...
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> LockBuilder {
        LockBuilder::new(self.clone(), name.into(), Kind::Semaphore(permits))
    }
}
