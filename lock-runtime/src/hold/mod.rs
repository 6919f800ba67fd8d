//! One hold in Redis: what it is on ([`Target`]), the scripts that take
//! it and give it back (the handover script in `reentrant`, a fair
//! waiter's leaving in `fair`; `handoff` for handovers inside a client), and how an
//! attempt whose answer was lost is settled ([`reconcile`]).
//!
//! Below the acquire loop (`lock`, which takes holds through it) and the
//! guard (`guard`, which gives them back through it).

pub(crate) mod fair;
pub(crate) mod handoff;
pub(crate) mod reentrant;

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::background;
use crate::client::Core;
use crate::conn::Conn;
use crate::holder;
use crate::keys;
use crate::request::Target;
use crate::retry;
use crate::scripts::Eval;
use crate::watchdog::RenewKind;
use crate::{LockClient, LockError};

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

/// Which of its holder's holds a release gives back. The scripts that count
/// a holder's holds in one field name each of them once the holder
/// re-enters (`scripts/holds.lua`): a release counts only while its hold is
/// live, so a copy of it that reaches Redis late (past its unlock latch)
/// changes nothing. A read hold is found by its token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Which {
    token: u64,
    reentry: bool,
}

impl Which {
    /// The holder's first hold (taken by a new holder), with fencing `token`
    /// (0 when unknown: a lost answer's; such a holder has no other hold).
    pub(crate) fn first(token: u64) -> Which {
        Which {
            token,
            reentry: false,
        }
    }

    /// A re-entry, with fencing `token`.
    pub(crate) fn reentry(token: u64) -> Which {
        Which {
            token,
            reentry: true,
        }
    }

    /// The hold the attempt `how` took, with fencing `token`.
    pub(crate) fn taken(how: &Try, token: u64) -> Which {
        if how.reenter {
            Which::reentry(token)
        } else {
            Which::first(token)
        }
    }

    /// As the unlock scripts of `target` name it: a read hold by its token
    /// (0: any one hold of the holder); any other hold `0` for the holder's
    /// first, else its re-entry's token.
    fn arg(self, target: &Target) -> u64 {
        match target {
            Target::Read { .. } => self.token,
            _ => self.counted(),
        }
    }

    /// As the scripts of the layouts that count a holder's holds in one
    /// field name it: `0` for the holder's first, else the re-entry's token.
    fn counted(self) -> u64 {
        if self.reentry { self.token } else { 0 }
    }
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
fn answer(name: &str, (code, value): (i64, i64)) -> Result<Attempt, LockError> {
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

/// What a hold on each kind of lock is in Redis.
impl Target {
    /// Waiters of the same local queue take turns contending in Redis.
    pub(crate) fn local_queue(&self, holder: &str) -> String {
        match self {
            // The Redis queue orders fair waiters (each joins it at its first
            // attempt) and unlock wakes only its head: a local queue could
            // only disagree with that order, so each fair waiter is alone.
            Target::Fair { name } => ["fair:", name, ":", holder].concat(),
            _ => [self.kind(), ":", self.name()].concat(),
        }
    }

    /// The channel whose messages mean "try again now".
    pub(crate) fn channel(&self, holder: &str) -> String {
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
    ///
    /// The layouts' acquire scripts share the shape of their calls: the
    /// layout's keys (the lock's first), then the attempt's latch; ARGV the lease and the holder, the layout's own
    /// arguments, then whether it re-enters. A failed fair try queues the
    /// holder (first time) or keeps its place (later).
    pub(crate) async fn attempt(
        &self,
        core: &Core,
        conn: &Conn,
        how: &Try,
    ) -> Result<Attempt, LockError> {
        let scripts = &crate::scripts::SCRIPTS;
        let name = self.name();
        core.conn.check_slot_name(name)?;
        let token = keys::token_key(name);
        let holds = keys::holds_key(name);
        let args = |call: &mut Eval| {
            call.arg(how.lease_ms()).arg(&how.holder);
            if let Target::Fair { .. } = self {
                call.arg(fair::wait_ms(core))
                    .arg(core.conn.publish_command());
            }
            call.arg(how.reenter_arg());
        };
        let (latch, record) = (&how.latch(name), how.reenter);
        let call = match self {
            Target::Reentrant { .. } => {
                let keys = [name, &token, &holds];
                scripts
                    .reentrant_acquire
                    .call(conn, &keys, latch, record, args)
            }
            Target::Fair { .. } => {
                let keys = [
                    name,
                    &keys::fair_queue(name),
                    &keys::fair_timeouts(name),
                    &token,
                    &keys::lock_channel(name),
                    &holds,
                ];
                scripts.fair_acquire.call(conn, &keys, latch, record, args)
            }
            // A read hold's own lease key, named by the holder.
            Target::Read { .. } => {
                let keys = [
                    name,
                    &token,
                    &keys::rw_timeout_prefix(name, &how.holder),
                    &holds,
                ];
                scripts
                    .rw_read_acquire
                    .call(conn, &keys, latch, record, args)
            }
            Target::Write { .. } => {
                let keys = [name, &token, &keys::tagged(name), &holds];
                scripts
                    .rw_write_acquire
                    .call(conn, &keys, latch, record, args)
            }
        };
        let reply = call
            .invoke(conn)
            .await
            .map_err(|e| LockError::from_redis(name, e))?;
        let attempt = answer(name, reply)?;
        if let Attempt::Acquired { .. } = attempt {
            // A hold no replica confirmed could vanish in a failover: the
            // error makes the caller reconcile the attempt, which gives the
            // hold back (see [`needs_reconcile`]).
            conn.sync_replicas(name).await?;
        }
        Ok(attempt)
    }

    /// One unlock script call on `conn` for the hold `which` of `holder`:
    /// 1 freed, 0 still held (re-entries; or that hold was given back
    /// before, by a copy of this call), -1 not held. A last hold of a reentrant
    /// or fair lock leaves the lock taken as `keep` says (`hold_at_least`):
    /// it expires then, and nobody is woken. Read and write holds (acquire
    /// refuses the option for them) ignore `keep`.
    ///
    /// The layouts' unlock scripts share the shape of their calls: the
    /// layout's keys (the lock's first), then the unlock latch of `request`
    /// (which makes a retried call idempotent); ARGV the holder, the latch's
    /// TTL and the publish command, then the layout's own arguments. What a
    /// freed lock wakes: a reentrant lock's waiters (its channel), a fair
    /// lock's head (its own channel), every waiting reader and writer after
    /// the write lock or a holder's last read hold.
    pub(crate) async fn unlock(
        &self,
        core: &Core,
        conn: &Conn,
        holder: &str,
        request: &str,
        which: Which,
        keep: Keep,
    ) -> Result<i64, LockError> {
        let scripts = &crate::scripts::SCRIPTS;
        let name = self.name();
        let latch = keys::unlock_latch(name, request);
        // Last: the record of re-entered holds (see `Which`).
        let holds = keys::holds_key(name);
        let (script, keys): (_, &[&str]) = match self {
            Target::Reentrant { .. } => (
                &scripts.unlock,
                &[name, &keys::lock_channel(name), &latch, &holds],
            ),
            Target::Fair { .. } => (
                &scripts.fair_unlock,
                &[
                    name,
                    &keys::fair_queue(name),
                    &keys::fair_timeouts(name),
                    &keys::lock_channel(name),
                    &latch,
                    &holds,
                ],
            ),
            // A read hold's own lease key: found by the holder.
            Target::Read { .. } => (
                &scripts.rw_read_unlock,
                &[
                    name,
                    &keys::rw_channel(name),
                    &keys::rw_timeout_prefix(name, holder),
                    &keys::tagged(name),
                    &latch,
                    &holds,
                ],
            ),
            Target::Write { .. } => (
                &scripts.rw_write_unlock,
                &[
                    name,
                    &keys::rw_channel(name),
                    &keys::tagged(name),
                    &latch,
                    &holds,
                ],
            ),
        };
        let mut call = Eval::with_keys(script, keys);
        call.arg(holder)
            .arg(crate::config::millis(core.config.unlock_latch_ttl()))
            .arg(core.conn.publish_command())
            .arg(which.arg(self));
        let within_lease = if keep.within_lease { "1" } else { "0" };
        match self {
            // The message "0": it wakes one waiter.
            Target::Reentrant { .. } => call.arg("0").arg(keep.ms).arg(within_lease),
            Target::Fair { .. } => call.arg(keep.ms).arg(within_lease),
            Target::Read { .. } | Target::Write { .. } => &mut call,
        };
        call.invoke(conn)
            .await
            .map_err(|e| LockError::from_redis(name, e))
    }

    /// Clean-up when a waiter gives up (timeout or cancellation) without the lock.
    pub(crate) fn give_up(&self, core: &Core, holder: &str) -> Option<fair::GiveUp> {
        match self {
            // A fair waiter leaves the queue.
            Target::Fair { name } => Some(fair::GiveUp::new(core, name, holder)),
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

    /// What a release now leaves of `hold_at_least` (until when the lock
    /// stays taken), in whole ms rounded up; `fixed`: the lease is fixed and
    /// bounds it.
    pub(crate) fn left(hold_at_least: Option<Instant>, fixed: bool) -> Keep {
        let left = hold_at_least.map_or(Duration::ZERO, |until| {
            until.saturating_duration_since(Instant::now())
        });
        Keep {
            ms: u64::try_from(left.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX),
            within_lease: fixed,
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
///
/// An attempt whose answer was lost and whose reconcile did not settle in
/// time also returns that reconcile, still under way ([`Unsettled`]): until
/// it ends, the attempt may yet take a hold under the holder's id, so the
/// holder makes no new attempt before (the give-back could not tell two
/// first holds of one holder apart).
pub(crate) async fn attempt_once(
    client: &LockClient,
    target: &Target,
    how: &Try,
) -> (Result<Attempt, LockError>, Option<Unsettled>) {
    let core = client.core();
    match attempt_on(core, target, how, core.conn.near_here()).await {
        (Err(LockError::Redis(e)), Settled::Yes) if crate::conn::connection_lost(&e) => {
            tracing::debug!(error = %e, "an attempt's connection was lost; trying again on the client's own");
            match attempt_on(core, target, how, None).await {
                (result, Settled::Later(unsettled)) => (result, Some(unsettled)),
                (result, _) => (result, None),
            }
        }
        (result, Settled::Later(unsettled)) => (result, Some(unsettled)),
        (result, _) => (result, None),
    }
}

/// Whether a failed attempt was reconciled (see [`attempt_once`]).
enum Settled {
    /// Its answer was lost and the reconcile settled in time: it holds
    /// nothing and never will.
    Yes,
    /// Nothing to reconcile (it answered, or failed for another reason).
    No,
    /// The reconcile is still under way, or gave up.
    Later(Unsettled),
}

/// The reconcile of an attempt whose answer was lost, when it did not
/// settle in time: see [`attempt_once`].
pub(crate) enum Unsettled {
    /// Still under way (it retries while Redis is unreachable).
    Pending(tokio::task::JoinHandle<bool>),
    /// It gave up on an error that does not heal: the attempt may have
    /// taken a hold under the holder's id that nothing gives back before its
    /// lease ends, so the holder makes no further attempt.
    GaveUp,
}

impl Unsettled {
    /// Resolves when the reconcile has ended, with whether it settled: the
    /// attempt can take nothing any more (settled, or past the time a
    /// request can still arrive). `false`: it gave up.
    pub(crate) async fn ended(self) -> bool {
        match self {
            Unsettled::Pending(reconcile) => reconcile.await.unwrap_or(false),
            Unsettled::GaveUp => false,
        }
    }
}

/// One attempt on `near` (the caller's runtime's near connection), or on the
/// client's own connection (`None`). Also says whether a lost answer was
/// reconciled in time (then the attempt holds nothing and never will), or
/// the reconcile still under way.
///
/// On a near connection the call runs in the caller's task (see
/// [`background::finish_on_drop`]); otherwise as a task on the client's
/// background runtime.
async fn attempt_on(
    core: &std::sync::Arc<Core>,
    target: &Target,
    how: &Try,
    near: Option<Conn>,
) -> (Result<Attempt, LockError>, Settled) {
    // What the call and its clean-up share, whichever of them ends up
    // running (one allocation, not a copy each).
    let call = std::sync::Arc::new(Call {
        core: core.clone(),
        conn: near.clone().unwrap_or_else(|| core.conn.clone()),
        target: target.clone(),
        // A fresh attempt id (not a copy of the caller's, then replaced).
        how: Try {
            holder: how.holder.clone(),
            lease: how.lease,
            reenter: how.reenter,
            attempt: holder::call_id(&core.id),
        },
    });
    let attempt = {
        let call = call.clone();
        async move { call.target.attempt(&call.core, &call.conn, &call.how).await }
    };
    let result = if near.is_some() {
        let left = call.clone();
        background::finish_on_drop(&core.runtime, attempt, move |answer| async move {
            left.abandoned(answer).await;
        })
        .await
    } else {
        let (answer, answered) = oneshot::channel();
        let mut answered = Answered {
            answered,
            undo: Some(call.clone()),
        };
        let left = call.clone();
        core.runtime.spawn(async move {
            if let Err(answer) = answer.send(attempt.await) {
                left.abandoned(answer).await;
            }
        });
        let Ok(result) = (&mut answered.answered).await else {
            return (Err(LockError::Shutdown), Settled::No);
        };
        answered.undo = None;
        result
    };
    let mut settled = Settled::No;
    // Whether the reconcile settled: `Yes`, else `Later` (still under way,
    // or it gave up).
    if let Err(e) = &result
        && needs_reconcile(e)
    {
        // The script may have run: find the hold and give it back, or make
        // sure the attempt can no longer take it, before reporting.
        let work = reconcile(core.clone(), target.clone(), call.how.clone());
        let mut reconciled = core.runtime.spawn(work);
        let bound = core.config.response_timeout.saturating_mul(2);
        settled = match tokio::time::timeout(bound, &mut reconciled).await {
            Ok(Ok(true)) => Settled::Yes,
            Ok(_) => Settled::Later(Unsettled::GaveUp),
            Err(_) => Settled::Later(Unsettled::Pending(reconciled)),
        };
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
        .unlock(
            core,
            &core.conn,
            &how.holder,
            &how.attempt,
            Which::taken(how, token),
            Keep::NONE,
        )
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
        cleanup.retrying().await;
    }
    Ok(())
}

/// The waiting end of [`attempt_once`]. An answer can land in the channel
/// after the caller's last poll and before it drops the future (a timeout
/// that fired just then): the sender sees no error, so the receiver undoes it.
struct Answered {
    answered: oneshot::Receiver<Result<Attempt, LockError>>,
    undo: Option<std::sync::Arc<Call>>,
}

impl Drop for Answered {
    fn drop(&mut self) {
        let Some(call) = self.undo.take() else {
            return;
        };
        // After close, a later send fails and the spawned task undoes it.
        self.answered.close();
        if let Ok(answer) = self.answered.try_recv() {
            let runtime = call.core.runtime.clone();
            runtime.spawn(async move { call.abandoned(answer).await });
        }
    }
}

/// One acquire script call: on which connection, for what.
struct Call {
    core: std::sync::Arc<Core>,
    conn: Conn,
    target: Target,
    how: Try,
}

impl Call {
    /// Cleans up after the call, whose caller went away: a hold taken is
    /// given back, and so is a place taken in a fair queue (the caller's own
    /// give-up may have run before this attempt, e.g. during a script
    /// reload, and found nothing to remove). An answer that was lost is
    /// reconciled.
    async fn abandoned(&self, answer: Result<Attempt, LockError>) {
        let (core, target, how) = (&self.core, &self.target, &self.how);
        match answer {
            Ok(Attempt::Acquired { token }) => {
                let given_back = target
                    .unlock(
                        core,
                        &self.conn,
                        &how.holder,
                        &how.attempt,
                        Which::taken(how, token),
                        Keep::NONE,
                    )
                    .await;
                if let Err(e) = given_back {
                    tracing::warn!(lock = target.name(), error = %e, "could not undo a cancelled acquire");
                }
            }
            Ok(Attempt::Busy { .. }) => {
                if let Some(cleanup) = target.give_up(core, &how.holder) {
                    cleanup.retrying().await;
                }
            }
            Ok(Attempt::Gone) => {}
            Err(e) if needs_reconcile(&e) => {
                reconcile(core.clone(), target.clone(), how.clone()).await;
            }
            Err(_) => {}
        }
    }
}
