//! Guards: proof of holding, the loss signal, and release, whatever the
//! engine: a guard's holds are each its engine's ([`Held`]).

use std::fmt;
use std::time::Duration;
#[cfg(feature = "redis")]
use tokio::time::Instant;

use crate::error::LockError;

pub(crate) use crate::engine::Held;

/// What only Redis's holds do.
impl Held {
    /// A fixed lease's end moved to `at` at the latest: for a quorum lock's
    /// holds, which are all on Redis (the only engine with quorum locks).
    #[cfg(feature = "redis")]
    fn expire_by(&mut self, at: Instant) {
        // Irrefutable in a build of Redis alone.
        #[allow(irrefutable_let_patterns)]
        if let Held::Redis(held) = self {
            held.expire_by(at);
        }
    }
}

/// Proof that the caller holds a lock. Release it with
/// [`release`](LockGuard::release) to learn whether the lease held to the
/// end; dropping it releases in the background (never blocking, never
/// panicking).
///
/// A guard may stand for several holds (a multi lock, a quorum lock): then
/// it is lost when any of them is (a quorum lock: when fewer than a majority
/// remain), and release gives all of them back.
#[must_use = "dropping a guard releases the lock at once"]
pub struct LockGuard {
    name: String,
    token: u64,
    holds: Vec<Held>,
    /// How many holds may be lost before the guard is (a quorum's spare nodes).
    tolerated: usize,
}

impl LockGuard {
    pub(crate) fn single(held: Held) -> LockGuard {
        LockGuard {
            name: held.name().to_owned(),
            token: held.token(),
            holds: vec![held],
            tolerated: 0,
        }
    }

    /// A guard over several holds, all released together.
    pub(crate) fn group(name: String, token: u64, holds: Vec<Held>) -> LockGuard {
        LockGuard {
            name,
            token,
            holds,
            tolerated: 0,
        }
    }

    /// Moves `other`'s holds into this group; the token becomes the larger.
    pub(crate) fn absorb(&mut self, mut other: LockGuard) {
        self.token = self.token.max(other.token);
        self.holds.append(&mut other.holds);
    }

    /// Lets `k` holds be lost (or fail to release) before the guard counts
    /// as lost: a quorum lock holds while a majority of its nodes do.
    #[cfg(feature = "redis")]
    pub(crate) fn tolerate(&mut self, k: usize) {
        self.tolerated = k;
    }

    /// See [`Held::expire_by`].
    #[cfg(feature = "redis")]
    pub(crate) fn expire_by(&mut self, at: Instant) {
        for held in &mut self.holds {
            held.expire_by(at);
        }
    }

    /// The fencing token of this acquisition: strictly increasing per lock
    /// name (re-entries included). Pass it to the storage you protect and
    /// have it refuse writes with a token older than one it has seen: that
    /// keeps a holder whose lease silently ran out (a long GC-like pause) from
    /// doing harm.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The holder id written into Redis for this guard's hold,
    /// `<client id>:<n>` (Redisson's layout). Every acquisition made outside
    /// a scope has a new one; a re-entry has its scope's. A multi lock's
    /// holds on one client share one; for a quorum lock this is the first
    /// node's.
    pub fn holder_id(&self) -> &str {
        self.holds.first().map_or("", Held::holder)
    }

    /// Runs `fut` in the scope of this guard's holds: an acquisition of the
    /// same lock on the same client awaited inside `fut` (at any depth)
    /// re-enters the hold instead of waiting for it. Everything else is
    /// another holder: other tasks, and other futures of the same task
    /// (`join!`, `select!`) that are not inside the scope.
    ///
    /// Any future works, borrowing allowed, with no `Send` or `'static`
    /// bound; the result is `Send` when `fut` is. Scopes nest: the
    /// enclosing scope is the one the returned future runs in (a spawned
    /// task starts with none). A re-entry inside
    /// the scope of a hold that is gone (its lease ran out, it was deleted)
    /// fails with [`LockError::Lost`] rather than take the lock anew.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// let outer = client.lock("stock:42").acquire().await?;
    /// outer
    ///     .scope(async {
    ///         // Re-enters: the hold count is 2 until `inner` is released.
    ///         let inner = client.lock("stock:42").acquire().await?;
    ///         inner.release().await
    ///     })
    ///     .await?;
    /// outer.release().await
    /// # }
    /// ```
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> + use<F> {
        let holds = self.holds.iter().map(Held::scoped).collect();
        crate::holder::scoped(holds, fut)
    }

    /// Whether the lease counts as lost: the watchdog found the lock gone,
    /// or, by this client's clock, the lease (less a safety margin of 1% + 2
    /// ms) has run out since the send time of the last call that confirmed
    /// it, so the server may expire it at any moment. Once lost, always lost.
    pub fn is_lost(&self) -> bool {
        self.holds.iter().filter(|h| h.is_lost()).count() > self.tolerated
    }

    /// The lease left by this client's clock (the time until
    /// [`is_lost`](Self::is_lost) turns true unless it is renewed first):
    /// zero once lost. A watchdog lease shows the time to the last
    /// confirmed renewal's end, so it stays between two and three thirds of
    /// the watchdog timeout while renewals go through. For a guard over
    /// several holds, the time until it counts as lost.
    pub fn remaining(&self) -> Duration {
        let mut left: Vec<Duration> = self.holds.iter().map(Held::remaining).collect();
        left.sort();
        left.get(self.tolerated).copied().unwrap_or_default()
    }

    /// Extends a fixed lease (one acquired with
    /// [`lease`](crate::LockBuilder::lease)): the lock now lasts at least
    /// `lease` from this call (a lease never shrinks: a longer one promised
    /// before is kept), on every hold of the guard, and
    /// [`remaining`](Self::remaining) grows accordingly.
    ///
    /// Fails with [`LockError::Lost`] when the lease is already lost (by
    /// this client's clock, or the lock is gone: expired, force-unlocked);
    /// a lost hold is never revived. Fails with [`LockError::Config`] for a
    /// watchdog lease (the watchdog renews it) and for a zero or too long
    /// `lease`.
    ///
    /// ```no_run
    /// # async fn demo(client: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
    /// use std::time::Duration;
    /// let mut guard = client.lock("report").lease(Duration::from_secs(10)).acquire().await?;
    /// // ... the work runs long:
    /// guard.extend(Duration::from_secs(30)).await?;
    /// assert!(guard.remaining() > Duration::from_secs(20));
    /// guard.release().await
    /// # }
    /// ```
    pub async fn extend(&mut self, lease: Duration) -> Result<(), LockError> {
        crate::config::check_lease(Some(lease))?;
        let results =
            futures_util::future::join_all(self.holds.iter_mut().map(|h| h.extend(lease))).await;
        self.within_tolerance(results)
    }

    /// Resolves when the lease is lost; never, while it holds.
    pub async fn lost(&self) {
        use futures_util::stream::{FuturesUnordered, StreamExt};
        let mut losses: FuturesUnordered<_> = self.holds.iter().map(Held::lost).collect();
        let mut lost = 0;
        while losses.next().await.is_some() {
            lost += 1;
            if lost > self.tolerated {
                return;
            }
        }
        std::future::pending().await
    }

    /// Releases the lock. `Err(LockError::Lost)` when the lease was lost
    /// before (the lock was not ours any more, and another holder's lock is
    /// never touched).
    pub fn release(mut self) -> impl Future<Output = Result<(), LockError>> + Send + 'static {
        // Not an `async fn`: its future keeps the holds and the tolerance,
        // not the guard twice (an async fn's argument and its moved copy).
        // The holds stay armed until the future first runs: a release
        // dropped before that gives them back in the background, as a
        // dropped guard does.
        let mut unstarted = Unstarted(std::mem::take(&mut self.holds));
        let tolerated = self.tolerated;
        drop(self);
        async move {
            // One hold (most guards): released without the joining
            // machinery's allocations and copies (its future boxed by
            // `Held::release`, made before the await, so that no hold is
            // kept in scope across it).
            let one = match unstarted.0.len() {
                1 => unstarted.0.pop().map(Held::release),
                _ => None,
            };
            if let Some(one) = one {
                let released = one.await;
                return within_tolerance(tolerated, [released]);
            }
            let holds = std::mem::take(&mut unstarted.0);
            let results =
                futures_util::future::join_all(holds.into_iter().map(Held::release)).await;
            within_tolerance(tolerated, results)
        }
    }

    /// [`within_tolerance`] of this guard.
    fn within_tolerance(
        &self,
        results: impl IntoIterator<Item = Result<(), LockError>>,
    ) -> Result<(), LockError> {
        within_tolerance(self.tolerated, results)
    }
}

/// The first error of the holds' `results` when more of them failed than
/// `tolerated` (a quorum lock's minority), else `Ok`.
fn within_tolerance(
    tolerated: usize,
    results: impl IntoIterator<Item = Result<(), LockError>>,
) -> Result<(), LockError> {
    let mut errors = results.into_iter().filter_map(Result::err);
    match errors.next() {
        Some(e) if 1 + errors.count() > tolerated => Err(e),
        _ => Ok(()),
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        release_in_background(self.holds.drain(..));
    }
}

/// The holds of a [`LockGuard::release`] that has not run yet: given back
/// in the background if it is dropped so.
struct Unstarted(Vec<Held>);

impl Drop for Unstarted {
    fn drop(&mut self) {
        release_in_background(self.0.drain(..));
    }
}

/// Gives `holds` back on their clients' runtimes (the guard is gone).
fn release_in_background(holds: impl Iterator<Item = Held>) {
    for held in holds {
        let runtime = held.runtime();
        let name = held.name().to_owned();
        runtime.spawn(async move {
            if let Err(e) = held.release().await {
                tracing::warn!(lock = %name, error = %e, "release of a dropped guard failed");
            }
        });
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name)
            .field("token", &self.token)
            .field("holds", &self.holds.len())
            .finish()
    }
}
