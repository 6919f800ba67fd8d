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
#[cfg(several_engines)]
use futures_util::future::Either;
use tracing::Instrument;

use crate::client::Engine;
use crate::client::LockClient;
use crate::error::LockError;
use crate::guard::{Held, LockGuard};
pub(crate) use crate::request::Options;
use crate::request::Target;

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
    /// it with [`LockError::Config`]. The minimum belongs to the call chain
    /// (a hold and its re-entries): a release that leaves other holds of the
    /// holder only counts down, and the chain's last release, whichever
    /// guard it is and whether released or dropped, applies the latest
    /// minimum any hold of the chain asked for. Waiters told a longer lease
    /// are woken to retry. A lost lease is reported as usual.
    pub fn hold_at_least(mut self, minimum: Duration) -> Self {
        self.options.hold_at_least = Some(minimum);
        self
    }

    /// Acquires the lock, waiting as configured.
    // Not an `async fn`: one would keep the builder twice (its argument and
    // the local it is moved to), and every waiting task carries this future.
    pub fn acquire(self) -> impl Future<Output = Result<LockGuard, LockError>> + Send + 'static {
        acquire_hold(self.client, self.target, self.options).map(|held| held.map(LockGuard::single))
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

/// An SQL engine's acquisition `$sql` in the last slot of the engines'
/// `Either`s: right of every other engine the build has (each engine's
/// future is left of the later engines' and right of the earlier ones').
#[cfg(any(feature = "postgres", feature = "mysql"))]
macro_rules! sql_slot {
    ($sql:expr) => {{
        let sql = $sql;
        #[cfg(feature = "zookeeper")]
        let sql = Either::Right(sql);
        #[cfg(feature = "etcd")]
        let sql = Either::Right(sql);
        #[cfg(feature = "redis")]
        let sql = Either::Right(sql);
        sql
    }};
}

/// The acquisition every single-name kind shares, on whichever engine the
/// client has (each checks the options first, with
/// [`check_options`](crate::request::check_options), and records the outcome).
///
/// Not an `async fn`, for the size of the future (see [`LockBuilder::acquire`]).
pub(crate) fn acquire_hold(
    client: LockClient,
    target: Target,
    options: Options,
) -> impl Future<Output = Result<Held, LockError>> + Send + 'static {
    let span = tracing::debug_span!(
        "acquire",
        lock = target.name(),
        kind = target.kind(),
        reenter = tracing::field::Empty,
    );
    let alive = client.alive();
    // Each engine's future is polled where it stands (no async block that
    // would keep what it moves in twice, no box): every waiting task
    // carries it, and they are about the same size (a Redis waiter's is
    // kept small for it: see `engine::redis::acquire`).
    let acquiring = match client.engine() {
        #[cfg(feature = "redis")]
        Engine::Redis(core) => {
            let redis = crate::engine::redis::acquire(core.clone(), alive, target, options)
                .map(|held| held.map(Held::Redis));
            #[cfg(several_engines)]
            let redis = Either::Left(redis);
            redis
        }
        #[cfg(feature = "etcd")]
        Engine::Etcd(etcd) => {
            let etcd = crate::turns::acquire(alive, etcd.clone(), target, options)
                .map(|held| held.map(Held::Etcd));
            #[cfg(any(feature = "zookeeper", feature = "postgres", feature = "mysql"))]
            let etcd = Either::Left(etcd);
            #[cfg(feature = "redis")]
            let etcd = Either::Right(etcd);
            etcd
        }
        #[cfg(feature = "zookeeper")]
        Engine::ZooKeeper(zk) => {
            let zk = crate::turns::acquire(alive, zk.clone(), target, options)
                .map(|held| held.map(Held::ZooKeeper));
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            let zk = Either::Left(zk);
            #[cfg(feature = "etcd")]
            let zk = Either::Right(zk);
            #[cfg(feature = "redis")]
            let zk = Either::Right(zk);
            zk
        }
        // The SQL engines share the last slot: PostgreSQL left of MySQL
        // when the build has both.
        #[cfg(feature = "postgres")]
        Engine::Postgres(pg) => {
            let pg = crate::turns::acquire(alive, pg.clone(), target, options)
                .map(|held| held.map(Held::Postgres));
            #[cfg(feature = "mysql")]
            let pg = Either::Left(pg);
            sql_slot!(pg)
        }
        #[cfg(feature = "mysql")]
        Engine::MySql(my) => {
            let my = crate::turns::acquire(alive, my.clone(), target, options)
                .map(|held| held.map(Held::MySql));
            #[cfg(feature = "postgres")]
            let my = Either::Right(my);
            sql_slot!(my)
        }
        #[cfg(no_engine)]
        Engine::None(never) => std::future::ready(match *never {}),
    };
    acquiring.instrument(span)
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
