//! The lock kinds, their builder, and the one acquire loop they share.
//!
//! Data flows one way: the builder runs the acquire loop, which runs the
//! kind's script (in the caller's task, on its runtime's near connection)
//! and wraps a success in a
//! [`LockGuard`]; the guard registers with the watchdog and, at release,
//! unregisters and runs the kind's unlock script.

pub(crate) mod fair;
pub(crate) mod handoff;
pub(crate) mod multi;
pub(crate) mod quorum;
pub(crate) mod read_write;
pub(crate) mod reentrant;
pub(crate) mod segmented;

use std::future::Future;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tracing::Instrument;

use crate::background;
use crate::client::Core;
use crate::conn::Conn;
use crate::guard::{Held, LockGuard};
use crate::holder;
use crate::keys;
use crate::retry;
use crate::watchdog::RenewKind;
use crate::{LockClient, LockError};

/// What one hold is on: the kind of lock and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// Redisson's `RLock`.
    Reentrant { name: String },
    /// Redisson's `RFairLock`.
    Fair { name: String },
    /// The read side of Redisson's `RReadWriteLock`.
    Read { name: String },
    /// The write side of Redisson's `RReadWriteLock`.
    Write { name: String },
}

/// The answer of one acquire script.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Attempt {
    /// Taken (or re-entered); the fencing token of this acquisition.
    Acquired { token: u64 },
    /// Someone else has it; its remaining lease in ms (-1: none, -2: gone).
    Busy { ttl_ms: i64 },
    /// A re-entry found the hold of its scope gone: nothing was taken.
    Gone,
}

/// What one acquire script call is asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Try {
    /// The holder id written into the lock.
    pub(crate) holder: String,
    /// The lease the new hold is promised.
    pub(crate) lease: Duration,
    /// Re-entering a hold of the caller's scope: the holder must still hold
    /// the lock (else [`Attempt::Gone`]), and a taken hold is recorded in
    /// the latch so that a lost answer can be reconciled.
    pub(crate) reenter: bool,
    /// This attempt's id: names its latch, and is the request id of every
    /// give-back of what it took, so that the unlock latch lets only one of
    /// them count (a give-back retried by [`reconcile`] counts once).
    pub(crate) attempt: String,
}

impl Try {
    /// `'1'` / `'0'`, the scripts' re-entry argument.
    pub(crate) fn reenter_arg(&self) -> &'static str {
        if self.reenter { "1" } else { "0" }
    }

    /// This attempt's latch key on lock `name` (see
    /// `scripts/acquire_latch.lua`).
    pub(crate) fn latch(&self, name: &str) -> String {
        keys::acquire_latch(name, &self.attempt)
    }

    /// The lease in whole milliseconds, for the scripts.
    pub(crate) fn lease_ms(&self) -> u64 {
        crate::config::millis(self.lease)
    }
}

/// Decodes an acquire script's `{code, value}` answer.
pub(crate) fn answer(name: &str, (code, value): (i64, i64)) -> Result<Attempt, LockError> {
    match code {
        1 => Ok(Attempt::Acquired {
            token: value as u64,
        }),
        0 => Ok(Attempt::Busy { ttl_ms: value }),
        3 => Ok(Attempt::Gone),
        // Abandoned before it ran: nothing taken, try again at once.
        4 => Ok(Attempt::Busy { ttl_ms: -2 }),
        _ => Err(LockError::NotHeld {
            name: name.to_owned(),
            reason: "this call chain holds a read lock and asked for the write lock: upgrading \
                     a read lock is not supported (two readers upgrading would wait for each \
                     other for ever); release the read lock first, or take the write lock \
                     first and read under it"
                .to_owned(),
        }),
    }
}

impl Target {
    pub(crate) fn name(&self) -> &str {
        match self {
            Target::Reentrant { name } => name,
            Target::Fair { name } | Target::Read { name } | Target::Write { name } => name,
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Target::Reentrant { .. } => "reentrant",
            Target::Fair { .. } => "fair",
            Target::Read { .. } => "read",
            Target::Write { .. } => "write",
        }
    }

    /// Waiters of the same local queue take turns contending in Redis.
    fn local_queue(&self, holder: &str) -> String {
        match self {
            // The Redis queue orders fair waiters (each joins it at its first
            // attempt) and unlock wakes only its head: a local queue could
            // only disagree with that order, so each fair waiter is alone.
            Target::Fair { name } => format!("fair:{name}:{holder}"),
            _ => format!("{}:{}", self.kind(), self.name()),
        }
    }

    /// The channel whose messages mean "try again now".
    fn channel(&self, holder: &str) -> String {
        match self {
            Target::Reentrant { name } => keys::lock_channel(name),
            Target::Fair { name } => keys::fair_waiter_channel(name, holder),
            Target::Read { name } | Target::Write { name } => keys::rw_channel(name),
        }
    }

    pub(crate) fn renew_kind(&self) -> RenewKind {
        match self {
            Target::Reentrant { .. } | Target::Fair { .. } => RenewKind::Hash,
            Target::Read { .. } | Target::Write { .. } => RenewKind::ReadWrite,
        }
    }

    /// One acquire script call on `conn`, then replica sync when it took the
    /// lock (on the same connection: `WAIT` counts that connection's writes).
    async fn attempt(&self, core: &Core, conn: &Conn, how: &Try) -> Result<Attempt, LockError> {
        let attempt = match self {
            Target::Reentrant { name } => reentrant::attempt(core, conn, name, how).await,
            Target::Fair { name } => fair::attempt(core, conn, name, how).await,
            Target::Read { name } => read_write::attempt(core, conn, name, how, false).await,
            Target::Write { name } => read_write::attempt(core, conn, name, how, true).await,
        }?;
        if let Attempt::Acquired { .. } = attempt {
            // A hold no replica confirmed could vanish in a failover: the
            // error makes the caller reconcile the attempt, which gives the
            // hold back (see [`needs_reconcile`]).
            conn.sync_replicas(self.name()).await?;
        }
        Ok(attempt)
    }

    /// One unlock script call on `conn` for the hold with fencing `token`
    /// (a read hold is found by it; 0: any one hold of the holder): 1 freed,
    /// 0 still held (re-entries), -1 not held.
    pub(crate) async fn unlock(
        &self,
        core: &Core,
        conn: &Conn,
        holder: &str,
        request: &str,
        token: u64,
    ) -> Result<i64, LockError> {
        self.unlock_keeping(core, conn, holder, request, token, Keep::NONE)
            .await
    }

    /// [`unlock`](Self::unlock), except that a last hold of a reentrant or
    /// fair lock leaves the lock taken as `keep` says (`hold_at_least`): it
    /// expires then, and nobody is woken. Read and write holds (acquire
    /// refuses the option for them) are given back as `unlock` does.
    pub(crate) async fn unlock_keeping(
        &self,
        core: &Core,
        conn: &Conn,
        holder: &str,
        request: &str,
        token: u64,
        keep: Keep,
    ) -> Result<i64, LockError> {
        match self {
            Target::Reentrant { name } => {
                reentrant::unlock(core, conn, name, holder, request, keep).await
            }
            Target::Fair { name } => fair::unlock(core, conn, name, holder, request, keep).await,
            Target::Read { name } => {
                read_write::unlock_read(core, conn, name, holder, request, token).await
            }
            Target::Write { name } => {
                read_write::unlock_write(core, conn, name, holder, request).await
            }
        }
    }

    /// Clean-up when a waiter gives up (timeout or cancellation) without the lock.
    fn give_up(
        &self,
        core: &Core,
        holder: &str,
    ) -> Option<impl Future<Output = ()> + Send + 'static> {
        match self {
            // A fair waiter leaves the queue.
            Target::Fair { name } => Some(fair::give_up(core, name, holder)),
            Target::Reentrant { .. } | Target::Read { .. } | Target::Write { .. } => None,
        }
    }
}

/// What a last release leaves behind (`hold_at_least`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Keep {
    /// The lock stays taken this many ms more; 0: it is freed.
    pub(crate) ms: u64,
    /// The lease is fixed and bounds the minimum: a key that expires sooner
    /// is left to expire as it is, never lengthened.
    pub(crate) within_lease: bool,
}

impl Keep {
    /// Free the lock.
    pub(crate) const NONE: Keep = Keep {
        ms: 0,
        within_lease: false,
    };

    /// What a release now leaves of `hold_at_least` (when the lock was
    /// taken, and the minimum), in whole ms rounded up; `fixed`: the lease
    /// is fixed and bounds it.
    pub(crate) fn left(hold_at_least: Option<(Instant, Duration)>, fixed: bool) -> Keep {
        let left = hold_at_least.map_or(Duration::ZERO, |(taken, minimum)| {
            minimum.saturating_sub(taken.elapsed())
        });
        Keep {
            ms: u64::try_from(left.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX),
            within_lease: fixed,
        }
    }
}

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

/// Runs `target`'s acquire script once. If the caller goes away before the
/// answer arrives, the call is finished without it and a hold taken for it
/// is given back, so a cancelled acquire never leaves a lock behind. When
/// the answer is lost (a timeout, a broken connection), the attempt is
/// reconciled before the error is returned (see [`reconcile`]).
///
/// The call goes through the near connection of the caller's runtime when it
/// has one. When its connection turns out dead (closed while idle, by an
/// idle timeout, a proxy or `CLIENT KILL`) and the reconcile proved that the
/// attempt took nothing and never will, it is made once more on the client's
/// own connection, which reconnects: a connection lost between calls costs
/// the caller nothing.
async fn attempt_once(
    client: &LockClient,
    target: &Target,
    how: &Try,
) -> Result<Attempt, LockError> {
    let core = client.core();
    match attempt_on(core, target, how, core.conn.near_here()).await {
        (Err(LockError::Redis(e)), true) if crate::conn::connection_lost(&e) => {
            tracing::debug!(error = %e, "an attempt's connection was lost; trying again on the client's own");
            attempt_on(core, target, how, None).await.0
        }
        (result, _) => result,
    }
}

/// One attempt on `near` (the caller's runtime's near connection), or on the
/// client's own connection (`None`). Also says whether a lost answer was
/// reconciled in time: then the attempt holds nothing and never will.
///
/// On a near connection the call runs in the caller's task (see
/// [`background::finish_on_drop`]); otherwise as a task on the client's
/// background runtime.
async fn attempt_on(
    core: &std::sync::Arc<Core>,
    target: &Target,
    how: &Try,
    near: Option<Conn>,
) -> (Result<Attempt, LockError>, bool) {
    let core = core.clone();
    let conn = near.clone().unwrap_or_else(|| core.conn.clone());
    let how = Try {
        attempt: holder::call_id(&core.id),
        ..how.clone()
    };
    let call = {
        let (core, conn) = (core.clone(), conn.clone());
        let (target, how) = (target.clone(), how.clone());
        async move { target.attempt(&core, &conn, &how).await }
    };
    let result = if near.is_some() {
        let runtime = core.runtime.clone();
        let (core, target, how) = (core.clone(), target.clone(), how.clone());
        background::finish_on_drop(&runtime, call, move |left| async move {
            abandoned(&core, &conn, &target, &how, left).await;
        })
        .await
    } else {
        let (answer, answered) = oneshot::channel();
        let mut answered = Answered {
            answered,
            undo: Some((core.clone(), target.clone(), how.clone())),
        };
        {
            let (core, target, how) = (core.clone(), target.clone(), how.clone());
            core.runtime.clone().spawn(async move {
                if let Err(left) = answer.send(call.await) {
                    abandoned(&core, &conn, &target, &how, left).await;
                }
            });
        }
        let Ok(result) = (&mut answered.answered).await else {
            return (Err(LockError::Shutdown), false);
        };
        answered.undo = None;
        result
    };
    let mut settled = false;
    if let Err(e) = &result
        && needs_reconcile(e)
    {
        // The script may have run: find the hold and give it back, or make
        // sure the attempt can no longer take it, before reporting.
        let work = reconcile(core.clone(), target.clone(), how);
        let reconciled = core.runtime.spawn(work);
        let bound = core.config.response_timeout.saturating_mul(2);
        settled = matches!(tokio::time::timeout(bound, reconciled).await, Ok(Ok(true)));
    }
    (result, settled)
}

/// Whether a failed attempt may have left a hold: its answer was lost (it
/// may still run on the server), or it took the lock but no replica
/// confirmed it.
fn needs_reconcile(e: &LockError) -> bool {
    match e {
        LockError::Redis(e) => crate::conn::connection_lost(e),
        LockError::NotReplicated { .. } => true,
        _ => false,
    }
}

/// How long [`reconcile`] keeps trying, and how long its `abandoned` mark
/// lasts: past TCP's retransmission limit (about 15 minutes with Linux's
/// defaults), so a request held up in a partition cannot arrive after both.
const RECONCILE_FOR: Duration = Duration::from_secs(16 * 60);

/// Settles an attempt whose answer was lost, so that it leaves no hold
/// behind: marks its latch abandoned (`SET NX`), which keeps the attempt from
/// taking anything if it has not run yet (it may still be on its way). If it
/// had run, the hold it took is given back: a re-entry recorded its token in
/// the latch; a new holder's hold shows by itself (the holder id is new, so
/// any hold under it is this attempt's). Retried with backoff while Redis is
/// unreachable, for [`RECONCILE_FOR`].
///
/// One case is left to the lease: a re-entry whose record in the latch
/// (30 s) expired before the reconcile reached Redis (a partition longer
/// than that, after the re-entry ran) keeps its count until the lease ends.
///
/// Returns whether it settled: the attempt holds nothing and never will.
async fn reconcile(core: std::sync::Arc<Core>, target: Target, how: Try) -> bool {
    let settled =
        retry::while_unreachable(RECONCILE_FOR, || reconcile_once(&core, &target, &how)).await;
    if let Err(e) = &settled {
        tracing::warn!(lock = target.name(), error = %e, "could not reconcile a lost acquire answer; the lease will end it");
    }
    settled.is_ok()
}

async fn reconcile_once(core: &Core, target: &Target, how: &Try) -> Result<(), LockError> {
    let name = target.name();
    let latch = how.latch(name);
    let mut conn = core.conn.clone();
    let marked: Option<String> = redis::cmd("SET")
        .arg(&latch)
        .arg("abandoned")
        .arg("NX")
        .arg("PX")
        .arg(RECONCILE_FOR.as_millis() as u64)
        .query_async(&mut conn)
        .await
        .map_err(|e| LockError::from_redis(name, e))?;
    let token = if marked.is_some() {
        if how.reenter {
            // A re-entry records what it took: nothing recorded, nothing taken.
            return Ok(());
        }
        0
    } else {
        let recorded: Option<String> = redis::cmd("GET")
            .arg(&latch)
            .query_async(&mut conn)
            .await
            .map_err(|e| LockError::from_redis(name, e))?;
        match recorded.as_deref().map(str::parse::<u64>) {
            Some(Ok(token)) => token,
            // A new holder's hold shows by itself, whatever the latch says:
            // `abandoned` may be our own earlier `SET` whose answer was lost,
            // sent after the attempt had run.
            _ if !how.reenter => 0,
            // A re-entry that ran recorded its token before any `SET NX` of
            // ours could land: `abandoned` (or an expired latch) means it
            // took nothing.
            _ => return Ok(()),
        }
    };
    let freed = target
        .unlock(core, &core.conn, &how.holder, &how.attempt, token)
        .await?;
    if freed >= 0 {
        tracing::debug!(
            lock = name,
            "gave back a hold whose acquire answer was lost"
        );
    }
    if !how.reenter
        && let Some(cleanup) = target.give_up(core, &how.holder)
    {
        cleanup.await;
    }
    Ok(())
}

/// Cleans up after an attempt whose caller went away: a hold taken is given
/// back, and so is a place taken in a fair queue (the caller's own give-up
/// may have run before this attempt, e.g. during a script reload, and found
/// nothing to remove). An answer that was lost is reconciled.
async fn abandoned(
    core: &std::sync::Arc<Core>,
    conn: &Conn,
    target: &Target,
    how: &Try,
    left: Result<Attempt, LockError>,
) {
    match left {
        Ok(Attempt::Acquired { token }) => undo_attempt(core, conn, target, how, token).await,
        Ok(Attempt::Busy { .. }) => {
            if let Some(cleanup) = target.give_up(core, &how.holder) {
                cleanup.await;
            }
        }
        Ok(Attempt::Gone) => {}
        Err(e) if needs_reconcile(&e) => {
            reconcile(core.clone(), target.clone(), how.clone()).await;
        }
        Err(_) => {}
    }
}

/// Gives back a hold that was taken for a caller who went away.
async fn undo_attempt(core: &Core, conn: &Conn, target: &Target, how: &Try, token: u64) {
    if let Err(e) = target
        .unlock(core, conn, &how.holder, &how.attempt, token)
        .await
    {
        tracing::warn!(lock = target.name(), error = %e, "could not undo a cancelled acquire");
    }
}

/// The waiting end of [`attempt_once`]. An answer can land in the channel
/// after the caller's last poll and before it drops the future (a timeout
/// that fired just then): the sender sees no error, so the receiver undoes it.
struct Answered {
    answered: oneshot::Receiver<Result<Attempt, LockError>>,
    undo: Option<(std::sync::Arc<Core>, Target, Try)>,
}

impl Drop for Answered {
    fn drop(&mut self) {
        let Some((core, target, how)) = self.undo.take() else {
            return;
        };
        // After close, a later send fails and the spawned task undoes it.
        self.answered.close();
        if let Ok(left) = self.answered.try_recv() {
            let runtime = core.runtime.clone();
            runtime.spawn(async move {
                let conn = core.conn.clone();
                abandoned(&core, &conn, &target, &how, left).await;
            });
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

/// Checks a lease asked for: longer than zero, at most [`crate::MAX_DURATION`].
pub(crate) fn check_lease(lease: Option<Duration>) -> Result<(), LockError> {
    match lease {
        Some(lease) if lease.is_zero() => {
            Err(LockError::Config("a lease must be longer than zero".into()))
        }
        Some(lease) => crate::config::check_duration("lease", lease),
        None => Ok(()),
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

/// Runs `fut` on `client`'s background runtime (see [`background`]).
pub(crate) async fn on_background<T: Send + 'static>(
    client: &LockClient,
    fut: impl Future<Output = T> + Send + 'static,
) -> Result<T, LockError> {
    background::run(&client.core().runtime, fut).await
}
