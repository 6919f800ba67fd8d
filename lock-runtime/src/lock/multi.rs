//! The multi lock (Redisson's `RedissonMultiLock`): all or none over several
//! locks, which may live on different clients (different servers).
//!
//! Acquisition never blocks while holding: it waits for one lock, then takes
//! the others with single attempts in a fixed order (server, then name). When
//! one of them is busy it gives back what it took, waits for that one, and
//! starts again from it. Two callers asking for overlapping sets in any order
//! therefore cannot deadlock, and the fixed order keeps them from livelocking
//! in the common case: both contend for the same first lock.

use std::fmt;
use std::time::Duration;
use tokio::time::Instant;

use tracing::Instrument;

use crate::client::LockClient;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::lock::{LockBuilder, acquire_hold};
use crate::request::{Kind, Request};

/// Several locks taken and released as one: [`acquire`](Self::acquire)
/// returns once every lock is held, and the one [`LockGuard`] releases them
/// all. Same builder shape as [`LockBuilder`]: [`wait`](Self::wait),
/// [`lease`](Self::lease), [`acquire`](Self::acquire),
/// [`try_acquire`](Self::try_acquire).
///
/// ```no_run
/// # async fn demo(client: lock_runtime::LockClient, other_server: lock_runtime::LockClient)
/// # -> Result<(), lock_runtime::LockError> {
/// use std::time::Duration;
/// use lock_runtime::MultiLock;
///
/// // Names on one client.
/// let guard = client.multi_lock(["account:1", "account:2"]).wait(Duration::from_secs(2)).acquire().await?;
/// assert_eq!(guard.name(), "account:1+account:2");
/// guard.release().await?;
///
/// // Locks on several clients (several servers), of any kind.
/// let guard = MultiLock::new()
///     .with(&client, "account:1")
///     .with_lock(other_server.lock("ledger"))
///     .acquire()
///     .await?;
/// # drop(guard);
/// # Ok(()) }
/// ```
///
/// - **Order.** Locks are taken in a fixed order (by server address, then
///   name) whatever the order they were given in; a lock given twice (same
///   server, same name) is taken once.
/// - **Waiting.** No lock is held while waiting: when one is busy, those
///   already taken are given back at once, the caller waits (on the unlock
///   channel, like a single lock) for the busy one, takes it and tries the
///   others again. `wait` bounds the whole acquisition; when it runs out the
///   error is [`LockError::Timeout`] naming the lock that was still busy.
/// - **Guard.** Its [`name`](LockGuard::name) is the names joined by `+` in
///   acquisition order; its [`token`](LockGuard::token) is the largest of the
///   locks' fencing tokens, which strictly increases from one acquisition of
///   the same set to the next (each lock's token does). It is lost when any
///   of the locks is.
#[derive(Clone, Default)]
#[must_use = "a lock builder does nothing until acquired"]
pub struct MultiLock {
    locks: Vec<(LockClient, Request)>,
    wait: Option<Duration>,
    lease: Option<Duration>,
}

impl MultiLock {
    /// An empty multi lock; add locks with [`with`](Self::with) and
    /// [`with_lock`](Self::with_lock).
    pub fn new() -> Self {
        MultiLock::default()
    }

    /// Adds the reentrant lock `name` of `client`.
    pub fn with(self, client: &LockClient, name: impl Into<String>) -> Self {
        self.with_kind(client, name.into(), Kind::Reentrant)
    }

    /// Adds a lock of any kind, as its builder (e.g. `client.lock("a")`).
    /// The builder's own `wait`, `lease` and `hold_at_least` are not used:
    /// the multi lock's apply to every lock in it.
    pub fn with_lock(self, lock: LockBuilder) -> Self {
        self.with_kind(&lock.client, lock.request.name, lock.request.kind)
    }

    /// Adds the lock `name` of `kind` on `client`.
    pub(crate) fn with_kind(mut self, client: &LockClient, name: String, kind: Kind) -> Self {
        let request = Request::new(name, kind, client.config());
        self.locks.push((client.clone(), request));
        self
    }

    /// Longest time to wait for all the locks; then `Err(LockError::Timeout)`.
    /// Left out: wait until acquired. `Duration::ZERO`: one attempt.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// A fixed lease for every lock (else the watchdog keeps them alive).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Acquires every lock, waiting as configured. Errors: `Timeout` (naming
    /// the lock still busy), `Config` for an empty set or one name given with
    /// two different kinds, and any error of the single locks. Nothing stays
    /// held after an error, nor when the future is dropped.
    pub async fn acquire(self) -> Result<LockGuard, LockError> {
        let started = Instant::now();
        let result = self.acquire_all().await;
        let outcome = crate::telemetry::outcome(&result);
        crate::telemetry::acquired("multi", outcome, started.elapsed());
        result
    }

    async fn acquire_all(self) -> Result<LockGuard, LockError> {
        let (wait, lease) = (self.wait, self.lease);
        let mut locks = plan(self.locks)?;
        if let Some(lease) = lease {
            locks.iter_mut().for_each(|l| l.request.fixed_lease(lease));
        }
        let name = locks
            .iter()
            .map(|l| l.request.name.as_str())
            .collect::<Vec<_>>()
            .join("+");
        let timeout = |busy: &Request| LockError::Timeout {
            name: busy.name.clone(),
            waited: wait.unwrap_or_default(),
        };
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        let span = tracing::debug_span!("acquire_multi", lock = %name);
        async move {
            // The lock to wait for; the others get one attempt each.
            let mut lead = 0;
            loop {
                let wait = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                // One holder number for every part of this round (a multi
                // lock's holds on one client share one holder id), new each
                // round: a give-back of an earlier round that failed or is
                // late can never meet this round's holds.
                let number = crate::holder::fresh_number();
                let part = |lock: &Planned, wait| Request {
                    wait,
                    ..lock.request.clone().part_of("multi", Some(number))
                };
                let mut taken = LockGuard::group(name.clone(), 0, Vec::new());
                let first = &locks[lead];
                match acquire_hold(first.client.clone(), part(first, wait)).await {
                    Ok(held) => taken.absorb(LockGuard::single(held)),
                    Err(LockError::Timeout { .. }) => return Err(timeout(&first.request)),
                    Err(e) => return Err(e),
                }
                let mut busy = None;
                for (i, lock) in locks.iter().enumerate().filter(|(i, _)| *i != lead) {
                    let once = part(lock, Some(Duration::ZERO));
                    match acquire_hold(lock.client.clone(), once).await {
                        Ok(held) => taken.absorb(LockGuard::single(held)),
                        Err(LockError::Timeout { .. }) => {
                            busy = Some(i);
                            break;
                        }
                        Err(e) => {
                            give_back(taken).await;
                            return Err(e);
                        }
                    }
                }
                let Some(busy) = busy else {
                    tracing::debug!(token = taken.token(), "acquired all");
                    return Ok(taken);
                };
                // Holding nothing while waiting is what rules out deadlocks.
                give_back(taken).await;
                tracing::debug!(
                    busy = %locks[busy].request.name,
                    "one lock busy; retrying from it"
                );
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(timeout(&locks[busy].request));
                }
                lead = busy;
            }
        }
        .instrument(span)
        .await
    }

    /// One attempt at every lock: `Ok(None)` when one of them is busy (and
    /// then none is held).
    pub async fn try_acquire(mut self) -> Result<Option<LockGuard>, LockError> {
        self.wait = Some(Duration::ZERO);
        match self.acquire().await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.locks.iter().map(|(_, r)| r.name.as_str()).collect();
        f.debug_struct("MultiLock")
            .field("locks", &names)
            .field("wait", &self.wait)
            .field("lease", &self.lease)
            .finish()
    }
}

/// One lock of the set, with the server it lives on.
struct Planned {
    server: String,
    client: LockClient,
    request: Request,
}

/// Sorts the set into acquisition order and drops repeats.
fn plan(locks: Vec<(LockClient, Request)>) -> Result<Vec<Planned>, LockError> {
    if locks.is_empty() {
        return Err(LockError::Config(
            "a multi lock needs at least one lock".into(),
        ));
    }
    let mut planned: Vec<Planned> = locks
        .into_iter()
        .map(|(client, request)| Planned {
            // The first sort key: every caller orders the same locks alike.
            server: client.config().server_identity(),
            client,
            request,
        })
        .collect();
    // Stable: of repeats, the one given first stays.
    planned.sort_by(|a, b| (&a.server, &a.request.name).cmp(&(&b.server, &b.request.name)));
    let mut kept: Vec<Planned> = Vec::with_capacity(planned.len());
    for lock in planned {
        if let Some(last) = kept.last()
            && last.server == lock.server
            && last.request.name == lock.request.name
        {
            if last.request.kind != lock.request.kind {
                return Err(LockError::Config(format!(
                    "lock `{}` appears twice in a multi lock with different kinds",
                    lock.request.name
                )));
            }
            continue;
        }
        kept.push(lock);
    }
    Ok(kept)
}

/// Releases the locks taken in a failed round, waiting for it so that the
/// next caller finds them free.
async fn give_back(taken: LockGuard) {
    if let Err(e) = taken.release().await {
        tracing::debug!(error = %e, "giving back a partial multi lock failed");
    }
}

/// The client's entry point to this module's locks.
impl LockClient {
    /// Several reentrant locks of this client taken as one, all or none
    /// (Redisson's `MultiLock`). For locks on several clients (servers) or
    /// of other kinds, build a [`MultiLock`] with `with` / `with_lock`.
    pub fn multi_lock<I>(&self, names: I) -> MultiLock
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        names
            .into_iter()
            .fold(MultiLock::new(), |multi, name| multi.with(self, name))
    }
}
