//! The lock kinds, their builder, and the one acquire loop they share.
//!
//! Data flows one way: the builder runs the acquire loop, which runs the
//! kind's script on the client's background runtime and wraps a success in a
//! [`LockGuard`]; the guard registers with the watchdog and, at release,
//! unregisters and runs the kind's unlock script.

pub(crate) mod fair;
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
use crate::keys;
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
}

impl Target {
    pub(crate) fn name(&self) -> &str {
        match self {
            Target::Reentrant { name } => name,
            Target::Fair { name } | Target::Read { name } | Target::Write { name } => name,
        }
    }

    fn kind(&self) -> &'static str {
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
    async fn attempt(
        &self,
        core: &Core,
        conn: &Conn,
        holder: &str,
        lease: Duration,
    ) -> Result<Attempt, LockError> {
        let attempt = match self {
            Target::Reentrant { name } => reentrant::attempt(core, conn, name, holder, lease).await,
            Target::Fair { name } => fair::attempt(core, conn, name, holder, lease).await,
            Target::Read { name } => {
                read_write::attempt(core, conn, name, holder, lease, false).await
            }
            Target::Write { name } => {
                read_write::attempt(core, conn, name, holder, lease, true).await
            }
        }?;
        if let Attempt::Acquired { .. } = attempt
            && let Err(e) = conn.sync_replicas(self.name()).await
        {
            // A hold no replica confirmed could vanish in a failover: give it back.
            let request = uuid::Uuid::new_v4().to_string();
            if let Err(undo) = self.unlock(core, conn, holder, &request).await {
                tracing::warn!(lock = self.name(), error = %undo, "could not give back an unreplicated hold");
            }
            return Err(e);
        }
        Ok(attempt)
    }

    /// One unlock script call on `conn`: 1 freed, 0 still held
    /// (re-entries), -1 not held.
    pub(crate) async fn unlock(
        &self,
        core: &Core,
        conn: &Conn,
        holder: &str,
        request: &str,
    ) -> Result<i64, LockError> {
        match self {
            Target::Reentrant { name } => {
                reentrant::unlock(core, conn, name, holder, request).await
            }
            Target::Fair { name } => fair::unlock(core, conn, name, holder, request).await,
            Target::Read { name } => {
                read_write::unlock_read(core, conn, name, holder, request).await
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

/// Options of one acquisition, shared by every kind's builder.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Options {
    pub(crate) wait: Option<Duration>,
    pub(crate) lease: Option<Duration>,
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
/// is given back, so a cancelled acquire never leaves a lock behind.
///
/// With a near connection on the caller's runtime the call runs in the
/// caller's task (see [`background::finish_on_drop`]); otherwise as a task on
/// the client's background runtime.
async fn attempt_once(
    client: &LockClient,
    target: &Target,
    holder: &str,
    lease: Duration,
) -> Result<Attempt, LockError> {
    let core = client.core().clone();
    let near = core.conn.near_here();
    let conn = near.clone().unwrap_or_else(|| core.conn.clone());
    let call = {
        let (core, conn) = (core.clone(), conn.clone());
        let (target, holder) = (target.clone(), holder.to_owned());
        async move { target.attempt(&core, &conn, &holder, lease).await }
    };
    let (target, holder) = (target.clone(), holder.to_owned());
    if near.is_some() {
        let runtime = core.runtime.clone();
        return background::finish_on_drop(&runtime, call, move |left| async move {
            abandoned(&core, &conn, &target, &holder, left).await;
        })
        .await;
    }
    let (answer, answered) = oneshot::channel();
    let mut answered = Answered {
        answered,
        undo: Some((core.clone(), target.clone(), holder.clone())),
    };
    core.runtime.clone().spawn(async move {
        if let Err(left) = answer.send(call.await) {
            abandoned(&core, &conn, &target, &holder, left).await;
        }
    });
    let result = (&mut answered.answered)
        .await
        .map_err(|_| LockError::Shutdown)?;
    answered.undo = None;
    result
}

/// Cleans up after an attempt whose caller went away: a hold taken is given
/// back, and so is a place taken in a fair queue (the caller's own give-up
/// may have run before this attempt, e.g. during a script reload, and found
/// nothing to remove).
async fn abandoned(
    core: &Core,
    conn: &Conn,
    target: &Target,
    holder: &str,
    left: Result<Attempt, LockError>,
) {
    match left {
        Ok(Attempt::Acquired { .. }) => undo_attempt(core, conn, target, holder).await,
        Ok(Attempt::Busy { .. }) => {
            if let Some(cleanup) = target.give_up(core, holder) {
                cleanup.await;
            }
        }
        Err(_) => {}
    }
}

/// Gives back a hold that was taken for a caller who went away.
async fn undo_attempt(core: &Core, conn: &Conn, target: &Target, holder: &str) {
    let request = uuid::Uuid::new_v4().to_string();
    if let Err(e) = target.unlock(core, conn, holder, &request).await {
        tracing::warn!(lock = target.name(), error = %e, "could not undo a cancelled acquire");
    }
}

/// The waiting end of [`attempt_once`]. An answer can land in the channel
/// after the caller's last poll and before it drops the future (a timeout
/// that fired just then): the sender sees no error, so the receiver undoes it.
struct Answered {
    answered: oneshot::Receiver<Result<Attempt, LockError>>,
    undo: Option<(std::sync::Arc<Core>, Target, String)>,
}

impl Drop for Answered {
    fn drop(&mut self) {
        let Some((core, target, holder)) = self.undo.take() else {
            return;
        };
        // After close, a later send fails and the spawned task undoes it.
        self.answered.close();
        if let Ok(Ok(Attempt::Acquired { .. })) = self.answered.try_recv() {
            let runtime = core.runtime.clone();
            runtime.spawn(async move { undo_attempt(&core, &core.conn, &target, &holder).await });
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
pub(crate) async fn acquire_hold(
    client: &LockClient,
    target: Target,
    options: Options,
) -> Result<Held, LockError> {
    keys::check_name(target.name())?;
    if options.lease.is_some_and(|l| l.is_zero()) {
        return Err(LockError::Config("a lease must be longer than zero".into()));
    }
    let core = client.core();
    let holder = core.holder_id();
    let lease = options.lease.unwrap_or(core.config.watchdog_timeout);
    let span = tracing::debug_span!("acquire", lock = target.name(), kind = target.kind());
    async {
        let started = Instant::now();
        let deadline = options.wait.and_then(|w| started.checked_add(w));
        let timeout = || LockError::Timeout {
            name: target.name().to_owned(),
            waited: options.wait.unwrap_or_default(),
        };
        let mut give_up = GiveUpOnDrop {
            core,
            target: &target,
            holder: &holder,
            armed: true,
        };
        let mut sent = Instant::now();
        let token = match attempt_once(client, &target, &holder, lease).await? {
            Attempt::Acquired { token } => token,
            Attempt::Busy { .. } => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(timeout());
                }
                let mut ticket = core.local.ticket(target.local_queue(&holder));
                match deadline {
                    Some(d) => tokio::time::timeout_at(d.into(), ticket.turn())
                        .await
                        .map_err(|_| timeout())?,
                    None => ticket.turn().await,
                }
                let mut messages = core.pubsub.subscribe(target.channel(&holder)).await?;
                loop {
                    messages.mark_seen();
                    sent = Instant::now();
                    let ttl_ms = match attempt_once(client, &target, &holder, lease).await? {
                        Attempt::Acquired { token } => break token,
                        Attempt::Busy { ttl_ms } => ttl_ms,
                    };
                    let now = Instant::now();
                    let mut sleep = nap(ttl_ms);
                    if let Some(d) = deadline {
                        if now >= d {
                            return Err(timeout());
                        }
                        sleep = sleep.min(d - now);
                    }
                    let _ = tokio::time::timeout(sleep, messages.changed()).await;
                }
            }
        };
        give_up.armed = false;
        tracing::debug!(token, "acquired");
        Ok(Held::new(
            client.clone(),
            target.clone(),
            holder.clone(),
            token,
            options.lease.map(|l| sent + l),
        ))
    }
    .instrument(span)
    .await
}

/// Runs `fut` on `client`'s background runtime (see [`background`]).
pub(crate) async fn on_background<T: Send + 'static>(
    client: &LockClient,
    fut: impl Future<Output = T> + Send + 'static,
) -> Result<T, LockError> {
    background::run(&client.core().runtime, fut).await
}
