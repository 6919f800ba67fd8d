//! Guards: proof of holding, the loss signal, and release.

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::Instrument;

use crate::conn::connection_lost;
use crate::hold::{Keep, Which};
use crate::holder::{Chain, ScopedHold};
use crate::own::Listed;
use crate::request::Target;
use crate::telemetry::HeldMetric;
use crate::watchdog::{HoldKey, Registration, Validity, valid_until};

use crate::{LockClient, LockError};

/// How a hold's lease is kept.
enum Lease {
    /// Renewed by the client's watchdog until release.
    Watchdog {
        registration: Registration,
        validity: watch::Receiver<Validity>,
    },
    /// Fixed: counts as lost from `until` (the lease, less the safety margin,
    /// from before the acquire call).
    Fixed { until: Instant },
}

/// One hold on one lock by one holder, on whichever engine the client has.
pub(crate) enum Held {
    /// On Redis (the layouts of DESIGN §4).
    Redis(RedisHold),
    /// On etcd (see `engine::etcd`).
    #[cfg(feature = "etcd")]
    Etcd(crate::engine::etcd::EtcdHold),
}

/// Calls `$call` on whichever engine's hold `$held` is.
macro_rules! on_engine {
    ($held:expr, $h:ident => $call:expr) => {
        match $held {
            Held::Redis($h) => $call,
            #[cfg(feature = "etcd")]
            Held::Etcd($h) => $call,
        }
    };
}

impl Held {
    pub(crate) fn name(&self) -> &str {
        on_engine!(self, h => h.name())
    }

    pub(crate) fn token(&self) -> u64 {
        on_engine!(self, h => h.token())
    }

    fn holder(&self) -> &str {
        on_engine!(self, h => h.holder())
    }

    fn scoped(&self) -> ScopedHold {
        on_engine!(self, h => h.scoped())
    }

    fn expire_by(&mut self, at: Instant) {
        on_engine!(self, h => h.expire_by(at))
    }

    fn is_lost(&self) -> bool {
        on_engine!(self, h => h.is_lost())
    }

    fn remaining(&self) -> Duration {
        on_engine!(self, h => h.remaining())
    }

    async fn extend(&mut self, lease: Duration) -> Result<(), LockError> {
        on_engine!(self, h => h.extend(lease).await)
    }

    async fn lost(&self) {
        on_engine!(self, h => h.lost().await)
    }

    async fn release(self) -> Result<(), LockError> {
        on_engine!(self, h => h.release().await)
    }

    /// The client's runtime, where a dropped guard's release runs.
    fn runtime(&self) -> tokio::runtime::Handle {
        on_engine!(self, h => h.runtime())
    }
}

/// One hold on one Redis lock by one holder.
pub(crate) struct RedisHold {
    client: LockClient,
    target: Target,
    holder: String,
    token: u64,
    lease: Lease,
    /// In the client's list of live guards (see `inspect`) until dropped.
    _listed: Listed,
    /// The hold's `kind` label (see `telemetry`).
    metric: &'static str,
    /// In `lock_held` until dropped.
    _held: HeldMetric,
    /// `hold_at_least`: until when the lock stays taken (from the acquire's
    /// answer); a release before then leaves the lock taken until then.
    keep: Option<Instant>,
    /// What this hold shares with the other holds of its call chain on the
    /// lock (its re-entries, or the hold it re-entered): made when a scope
    /// first needs it, or given by the scope a re-entry was made in.
    chain: std::sync::OnceLock<Chain>,
    /// Which of its holder's holds this is (see [`Which`]).
    which: Which,
    /// How many local handovers in a row led to this hold (0: taken by an
    /// acquire script; see `local::Handed::streak`).
    streak: u32,
}

impl RedisHold {
    /// Wraps a fresh acquisition, confirmed by a call sent at `sent`; a
    /// watchdog lease (`lease` None) is registered here.
    pub(crate) fn new(
        client: LockClient,
        target: Target,
        holder: String,
        token: u64,
        sent: Instant,
        lease: Option<Duration>,
        metric: &'static str,
    ) -> RedisHold {
        let which = Which::first(token);
        let listed = client
            .core()
            .own
            .list(target.name(), &holder, token, sent, lease);
        let lease = match lease {
            Some(lease) => Lease::Fixed {
                until: valid_until(sent, lease),
            },
            None => {
                let (registration, validity) = client.core().watchdog.register(
                    HoldKey {
                        kind: target.renew_kind(),
                        name: target.name().to_owned(),
                        holder: holder.clone(),
                    },
                    sent,
                    client.core().config.watchdog_timeout,
                    metric,
                );
                Lease::Watchdog {
                    registration,
                    validity,
                }
            }
        };
        RedisHold {
            client,
            target,
            holder,
            token,
            lease,
            _listed: listed,
            metric,
            _held: HeldMetric::start(metric),
            keep: None,
            chain: std::sync::OnceLock::new(),
            which,
            streak: 0,
        }
    }

    /// This hold re-entered a hold of its call chain, whose scope gave
    /// `chain`.
    pub(crate) fn reentered(&mut self, chain: Chain) {
        self.which = Which::reentry(self.token);
        let _ = self.chain.set(chain);
    }

    /// The hold was handed over, the `streak`-th local handover in a row.
    pub(crate) fn handed_in_streak(&mut self, streak: u32) {
        self.streak = streak;
    }

    /// Keeps the lock taken until `minimum` after `taken` when released
    /// sooner (`hold_at_least`), whichever hold of the call chain is given
    /// back last.
    pub(crate) fn hold_at_least(&mut self, taken: Instant, minimum: Duration) {
        let until = taken.checked_add(minimum);
        self.keep = until;
        if let (Some(chain), Some(until)) = (self.chain.get(), until) {
            chain.keep_until(until);
        }
    }

    /// What the holds of this hold's call chain share (made on first use,
    /// holding this hold's minimum).
    fn chain(&self) -> &Chain {
        self.chain.get_or_init(|| {
            let chain = Chain::default();
            if let Some(until) = self.keep {
                chain.keep_until(until);
            }
            chain
        })
    }

    pub(crate) fn token(&self) -> u64 {
        self.token
    }

    pub(crate) fn name(&self) -> &str {
        self.target.name()
    }

    fn holder(&self) -> &str {
        &self.holder
    }

    fn runtime(&self) -> tokio::runtime::Handle {
        self.client.core().runtime.clone()
    }

    /// This hold as a scope sees it.
    fn scoped(&self) -> ScopedHold {
        ScopedHold {
            client: self.client.core().id.clone(),
            name: self.target.name().to_owned(),
            holder: self.holder.clone(),
            chain: self.chain().clone(),
        }
    }

    /// Reports a fixed lease lost no later than `at` (a quorum lock's
    /// validity ends before its nodes' keys expire). Watchdog leases keep
    /// their own loss signal.
    pub(crate) fn expire_by(&mut self, at: Instant) {
        if let Lease::Fixed { until } = &mut self.lease {
            *until = (*until).min(at);
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        match &self.lease {
            Lease::Watchdog { validity, .. } => validity.borrow().is_lost(),
            Lease::Fixed { until } => Instant::now() >= *until,
        }
    }

    /// The lease left by the client's clock: zero once lost.
    pub(crate) fn remaining(&self) -> Duration {
        let until = match &self.lease {
            Lease::Watchdog { validity, .. } => {
                let validity = *validity.borrow();
                if validity.lost {
                    return Duration::ZERO;
                }
                validity.until
            }
            Lease::Fixed { until } => *until,
        };
        until.saturating_duration_since(Instant::now())
    }

    /// Makes a fixed lease last at least `lease` from now (never shorter
    /// than it was: another hold of the holder may have been promised more).
    async fn extend(&mut self, lease: Duration) -> Result<(), LockError> {
        let name = self.target.name().to_owned();
        let Lease::Fixed { until } = &mut self.lease else {
            return Err(LockError::Config(format!(
                "lock `{name}`: extend is for fixed leases (acquired with .lease(..)); the \
                 watchdog renews this guard's lease until release"
            )));
        };
        if Instant::now() >= *until {
            return Err(LockError::Lost { name });
        }
        let key = HoldKey {
            kind: self.target.renew_kind(),
            name: name.clone(),
            holder: self.holder.clone(),
        };
        let core = self.client.core().clone();
        let sent = Instant::now();
        let renewed = self
            .client
            .on_background(async move { crate::watchdog::renew_one(&core.conn, &key, lease).await })
            .await?
            .map_err(|e| LockError::from_redis(&name, e))?;
        if !renewed {
            // Gone (expired, force-unlocked): lost for good.
            *until = Instant::now().min(*until);
            return Err(LockError::Lost { name });
        }
        *until = (*until).max(valid_until(sent, lease));
        crate::telemetry::renewed(1);
        Ok(())
    }

    pub(crate) async fn lost(&self) {
        match &self.lease {
            Lease::Watchdog { validity, .. } => {
                let mut validity = validity.clone();
                loop {
                    let now = *validity.borrow_and_update();
                    if now.is_lost() {
                        return;
                    }
                    tokio::select! {
                        changed = validity.changed() => {
                            // The watchdog forgot the hold: treat as lost.
                            if changed.is_err() {
                                return;
                            }
                        }
                        () = tokio::time::sleep_until(now.until.into()) => {}
                    }
                }
            }
            Lease::Fixed { until } => tokio::time::sleep_until((*until).into()).await,
        }
    }

    /// Gives the hold back. Completes even if the caller stops waiting: on a
    /// near connection the caller's task runs it and a task of its own
    /// finishes it if the caller leaves; otherwise it runs on the client's
    /// background runtime throughout. Retries a call that lost its connection
    /// with the same request id (the unlock latch makes that idempotent), on
    /// the client's own connection, which reconnects.
    ///
    /// Only this hold is given back (a read hold by its token). A hold that
    /// already counts as lost by the guard's clock is still given back if
    /// the server has it (so nothing stays held), but reports
    /// [`LockError::Lost`]: its body may have run without exclusion.
    pub(crate) async fn release(self) -> Result<(), LockError> {
        let was_lost = self.is_lost();
        let RedisHold {
            client,
            target,
            holder,
            lease,
            _listed: listed,
            keep,
            chain,
            which,
            streak,
            metric,
            ..
        } = self;
        // The chain's minimum (its holds' latest, this one's included),
        // whichever of them asked for it: the release that turns out to be
        // the chain's last applies it.
        let keep = chain.get().map_or(keep, Chain::kept_until);
        let fixed = matches!(lease, Lease::Fixed { .. });
        // A guard being released is no longer listed as live.
        drop(listed);
        // A loss the watchdog found was counted there; any other is counted
        // here. Read once unregistered: from then on the watchdog cannot
        // find this hold lost (and count it) any more.
        let mut counted = false;
        if let Lease::Watchdog {
            registration,
            validity,
        } = &lease
        {
            // Before the unlock: a released guard is never renewed again.
            client.core().watchdog.unregister(registration);
            counted = validity.borrow().lost;
        }
        let core = client.core().clone();
        let near = core.conn.near_here();
        let mut conn = near.clone().unwrap_or_else(|| core.conn.clone());
        let span = tracing::debug_span!("release", lock = target.name());
        let work = async move {
            let request = crate::holder::call_id(&core.id);
            let mut tries = 0;
            loop {
                tries += 1;
                // The first call may hand the lock to a waiter of this
                // client. Retries (same request id) are plain unlocks: a
                // handover's latch reads as released there, while a retried
                // handover would name a holder other than the one it made.
                // From each try's time: a retry keeps no longer than the
                // minimum. A lock kept taken is not handed over either.
                let kept = Keep::left(keep, fixed);
                let unlocked = if tries == 1 && kept.ms == 0 {
                    crate::hold::handoff::unlock_or_hand_off(
                        &core, &conn, &target, &holder, &request, which, streak,
                    )
                    .await
                } else {
                    target
                        .unlock(&core, &conn, &holder, &request, which, kept)
                        .await
                };
                match unlocked {
                    Ok(-1) => {
                        return Err(LockError::Lost {
                            name: target.name().to_owned(),
                        });
                    }
                    Ok(_) if was_lost => {
                        return Err(LockError::Lost {
                            name: target.name().to_owned(),
                        });
                    }
                    Ok(_) => return Ok(()),
                    Err(LockError::Redis(e))
                        if tries < crate::config::UNLOCK_TRIES && connection_lost(&e) =>
                    {
                        tracing::debug!(error = %e, "unlock failed; retrying");
                        // On the client's runtime: this call may be
                        // finished there for a caller who left, and a
                        // timer of the caller's runtime fires only while
                        // that runtime is driven.
                        let pause = Duration::from_millis(50 * u64::from(tries));
                        let _ = core.runtime.spawn(tokio::time::sleep(pause)).await;
                        conn = core.conn.clone();
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        .instrument(span);
        let result = if near.is_some() {
            // The caller's task runs it; if the caller leaves, the rest (the
            // same request id, so retries stay idempotent) runs on its own.
            let runtime = client.core().runtime.clone();
            crate::background::finish_on_drop(&runtime, work, |_| async {}).await
        } else {
            client
                .on_background(work)
                .await
                .and_then(|released| released)
        };
        if matches!(result, Err(LockError::Lost { .. })) && !counted {
            crate::telemetry::lost(metric);
        }
        result
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
    pub(crate) fn tolerate(&mut self, k: usize) {
        self.tolerated = k;
    }

    /// See [`Held::expire_by`].
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
    pub async fn release(mut self) -> Result<(), LockError> {
        let mut holds = std::mem::take(&mut self.holds);
        // One hold (most guards): released without the joining machinery's
        // allocations and copies. Boxed, as the joining would: a caller's
        // task carries this future's size while it waits for a lock.
        if holds.len() == 1
            && let Some(held) = holds.pop()
        {
            return self.within_tolerance([Box::pin(held.release()).await]);
        }
        let results = futures_util::future::join_all(holds.into_iter().map(Held::release)).await;
        self.within_tolerance(results)
    }

    /// The first error of the holds' `results` when more of them failed
    /// than the guard tolerates (a quorum lock's minority), else `Ok`.
    fn within_tolerance(
        &self,
        results: impl IntoIterator<Item = Result<(), LockError>>,
    ) -> Result<(), LockError> {
        let mut errors = results.into_iter().filter_map(Result::err);
        match errors.next() {
            Some(e) if 1 + errors.count() > self.tolerated => Err(e),
            _ => Ok(()),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        for held in self.holds.drain(..) {
            let runtime = held.runtime();
            let name = held.name().to_owned();
            runtime.spawn(async move {
                if let Err(e) = held.release().await {
                    tracing::warn!(lock = %name, error = %e, "release of a dropped guard failed");
                }
            });
        }
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
