//! A hold on an engine whose store keeps one record per client and name
//! (etcd, ZooKeeper, the SQL engines): what does not depend on the
//! store, written once below the engines. A client's [`Record`] of its hold is shared by the
//! hold and its re-entries; a [`Hold`] is one guard's share of it (its
//! token, its entry in the client's list of holds, its chain's
//! `hold_at_least` minimum). Re-entries are counted on the record
//! ([`Counted`]); only the chain's last release gives the record back,
//! finished on the client's runtime when its caller leaves, and retried
//! on faults ([`give_back_retried`]); a record learns that the store lost
//! it through [`Deleted`]. What the store does is the engine's side of
//! [`Record`].
//!
//! An acquisition's side of the same engines is here too: how a caller in
//! the scope of its own hold goes on ([`in_scope`]), when a failed try is
//! tried again ([`try_again`]), and the undo of what a failed or dropped
//! acquisition made in the store ([`Pending`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedMutexGuard, oneshot};

use crate::background::Background;
use crate::error::{LockError, transient};
use crate::holder::{Chain, ScopedHold};
use crate::own::{Listed, OwnHolds};
use crate::request::{Options, Target, backoff, pause_within, timed_out};
use crate::telemetry::HeldMetric;
use crate::turns::{Downgrade, Held, Kind, Queued, Records, may_reenter};

/// An engine's record of one client's hold of one name, shared by a hold
/// and its re-entries: what the shared [`Hold`] needs of it.
pub(crate) trait Record: Send + Sync + Sized + 'static {
    /// The lock's name.
    fn name(&self) -> &str;
    /// The holder id (`<client id>:<n>`).
    fn holder(&self) -> &str;
    /// The client's id.
    fn client_id(&self) -> &str;
    /// The client's list of its own holds.
    fn own(&self) -> &OwnHolds;
    /// The client's runtime: background work on the record runs there.
    fn runtime(&self) -> &tokio::runtime::Handle;
    /// What the record holds.
    fn kind(&self) -> Kind;
    /// A read's write, or a write's reads.
    fn downgrade(&self) -> &Downgrade<Self>;
    /// Live holds of the chain (a hold and its re-entries).
    fn count(&self) -> &AtomicUsize;
    /// Whether the hold counts as lost (by the client's clock, or known
    /// gone from the store).
    fn is_lost(&self) -> bool;
    /// How long the hold is sure to last.
    fn remaining(&self) -> Duration;
    /// Resolves once the hold is lost.
    fn lost(&self) -> impl Future<Output = ()> + Send + '_;
    /// Gives the record back once its chain's last hold is released,
    /// keeping it taken until `keep` (a `hold_at_least` minimum): whether
    /// it was still this client's.
    fn give_back(
        self: Arc<Self>,
        keep: Option<Instant>,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'static;
    /// One try at deleting the record (or keeping it until `keep`): whether
    /// it was still there. [`give_back_retried`] tries it again.
    fn give_back_once(
        self: Arc<Self>,
        keep: Option<Instant>,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'static;
    /// Whether the store may still keep the record alive, so a give-back
    /// that failed is worth trying on in the background.
    fn may_outlive(&self) -> bool;
}

impl<R: Record> Held for R {
    fn holds(&self) -> usize {
        self.count().load(Ordering::Acquire)
    }
}

/// Whether a record is known gone from the store (deleted by someone
/// else, taken over, or given back), and the wake-up of those who wait to
/// learn it ([`gone_or_ended`]). A flag and a `Notify` kept in the record:
/// a `watch` channel cost an allocation per hold and woke eight lists of
/// waiters at every release (as it was set, and again as it was dropped).
#[derive(Debug, Default)]
pub(crate) struct Deleted {
    known: AtomicBool,
    told: tokio::sync::Notify,
}

impl Deleted {
    /// The record is known gone: whoever waits in [`gone_or_ended`] learns
    /// it.
    pub(crate) fn set(&self) {
        if !self.known.swap(true, Ordering::AcqRel) {
            self.told.notify_waiters();
        }
    }

    /// Whether the record is known gone.
    pub(crate) fn is_set(&self) -> bool {
        self.known.load(Ordering::Acquire)
    }

    /// Resolves once the record is known gone.
    async fn known(&self) {
        // Made before the look: a `set` after the look wakes it (a
        // `Notified` counts `notify_waiters` calls from when it is made).
        let told = self.told.notified();
        if self.is_set() {
            return;
        }
        told.await;
    }
}

/// Resolves once `deleted` says the record is gone from the store, or once
/// the end `until` gives has passed (read again after each sleep, as an
/// `extend` moves it; `None`: no end of its own).
pub(crate) async fn gone_or_ended(deleted: &Deleted, until: impl Fn() -> Option<Instant>) {
    let gone = deleted.known();
    let ended = async {
        loop {
            match until() {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
            if until().is_some_and(|at| Instant::now() >= at) {
                return;
            }
        }
    };
    tokio::select! {
        () = gone => {}
        () = ended => {}
    }
}

/// The error of a hold known lost.
pub(crate) fn lost(name: &str) -> LockError {
    LockError::Lost {
        name: name.to_owned(),
    }
}

/// A hold: the record it shares with its chain, and its own token.
pub(crate) struct Hold<R: Record> {
    /// Keeps the client's runtime running until the hold is given back.
    alive: Arc<Background>,
    record: Arc<R>,
    token: u64,
    _listed: Listed,
    metric: &'static str,
    _held: HeldMetric,
    /// `hold_at_least`: until when the lock stays taken.
    keep: Option<Instant>,
    chain: OnceLock<Chain>,
}

impl<R: Record> Hold<R> {
    /// A hold of `record` with `token`, confirmed by a call sent at `sent`.
    pub(crate) fn new(
        alive: Arc<Background>,
        record: Arc<R>,
        token: u64,
        sent: Instant,
        options: &Options,
        metric: &'static str,
    ) -> Hold<R> {
        let listed = record
            .own()
            .list(record.name(), record.holder(), token, sent, options.lease);
        let keep = options
            .hold_at_least
            .and_then(|minimum| Instant::now().checked_add(minimum));
        Hold {
            alive,
            record,
            token,
            _listed: listed,
            metric,
            _held: HeldMetric::start(metric),
            keep,
            chain: OnceLock::new(),
        }
    }

    /// The record the hold shares with its chain.
    pub(crate) fn record(&self) -> &Arc<R> {
        &self.record
    }

    pub(crate) fn name(&self) -> &str {
        self.record.name()
    }

    pub(crate) fn token(&self) -> u64 {
        self.token
    }

    pub(crate) fn holder(&self) -> &str {
        self.record.holder()
    }

    pub(crate) fn runtime(&self) -> tokio::runtime::Handle {
        self.record.runtime().clone()
    }

    /// What the holds of this hold's call chain share (made on first use,
    /// holding this hold's minimum).
    fn chain(&self) -> &Chain {
        self.chain.get_or_init(|| Chain::keeping(self.keep))
    }

    pub(crate) fn scoped(&self) -> ScopedHold {
        ScopedHold {
            client: self.record.client_id().to_owned(),
            name: self.record.name().to_owned(),
            holder: self.record.holder().to_owned(),
            chain: self.chain().clone(),
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.record.is_lost()
    }

    pub(crate) fn remaining(&self) -> Duration {
        self.record.remaining()
    }

    pub(crate) async fn lost(&self) {
        self.record.lost().await;
    }

    /// Gives the hold back: the chain's last release gives the record back
    /// ([`Record::give_back`]); the others only count down.
    /// [`LockError::Lost`] when the hold counted as lost or the record was
    /// not this client's any more.
    pub(crate) async fn release(self) -> Result<(), LockError> {
        let was_lost = self.record.is_lost();
        let keep = self.chain.get().map_or(self.keep, Chain::kept_until);
        let Hold {
            alive,
            record,
            metric,
            _listed,
            ..
        } = self;
        drop(_listed);
        let name = record.name().to_owned();
        let last = record.count().fetch_sub(1, Ordering::AcqRel) == 1;
        let released = if last {
            // In the caller's task, with no thread hop: if the caller
            // leaves before it is done, it is done again on the client's
            // runtime (a give-back is idempotent), never finished on the
            // caller's, which may be gone.
            let mut resume = Resume(Some((record.clone(), keep)));
            let released = record.give_back(keep).await;
            resume.0 = None;
            released
        } else {
            Ok(true)
        };
        drop(alive);
        let result = match released {
            Ok(true) if !was_lost => Ok(()),
            Ok(_) => Err(lost(&name)),
            Err(e) => Err(e),
        };
        if matches!(result, Err(LockError::Lost { .. })) {
            crate::telemetry::lost(metric);
        }
        result
    }
}

/// A release whose caller left before it was done: done again on the
/// client's runtime when dropped armed.
struct Resume<R: Record>(Option<(Arc<R>, Option<Instant>)>);

impl<R: Record> Drop for Resume<R> {
    fn drop(&mut self) {
        if let Some((record, keep)) = self.0.take() {
            let runtime = record.runtime().clone();
            runtime.spawn(async move {
                if let Err(e) = record.give_back(keep).await {
                    tracing::warn!(error = %e, "the release of a hold whose caller left failed");
                }
            });
        }
    }
}

/// A re-entry of a record's hold, counted on the record: taken back when
/// dropped armed (the re-entry failed or was dropped), and then, if the
/// chain's other holds were given back meanwhile, the record is given back
/// (in the background: the caller has its error), keeping the chain's
/// minimum.
pub(crate) struct Counted<R: Record> {
    record: Arc<R>,
    chain: Chain,
    armed: bool,
}

impl<R: Record> Counted<R> {
    /// Counts a re-entry of `record` asking for `asked` in `chain`'s
    /// scope: of the write a read was taken under, when a read's scope
    /// asks for the write (see [`Downgrade`]). [`LockError::Lost`] when
    /// the hold is lost or its last release is under way.
    pub(crate) fn count(
        record: Arc<R>,
        asked: Kind,
        chain: Chain,
    ) -> Result<Counted<R>, LockError> {
        let mut record = record;
        while let Some(write) =
            may_reenter(record.name(), record.kind(), asked, record.downgrade())?
        {
            // A read under this chain's own write: the write re-entered.
            record = write;
        }
        if record.is_lost() {
            return Err(lost(record.name()));
        }
        // Counted first, never from 0: a last release under way meanwhile
        // has given the record back.
        let counted = record
            .count()
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n > 0).then_some(n + 1)
            });
        if counted.is_err() {
            return Err(lost(record.name()));
        }
        Ok(Counted {
            record,
            chain,
            armed: true,
        })
    }

    /// The record re-entered.
    pub(crate) fn record(&self) -> &Arc<R> {
        &self.record
    }

    /// The re-entry's hold, with `token` confirmed by a call sent at
    /// `sent`.
    pub(crate) fn hold(
        mut self,
        alive: Arc<Background>,
        token: u64,
        sent: Instant,
        options: &Options,
        metric: &'static str,
    ) -> Hold<R> {
        self.armed = false;
        let held = Hold::new(alive, self.record.clone(), token, sent, options, metric);
        let _ = held.chain.set(self.chain.clone());
        if let (Some(chain), Some(keep)) = (held.chain.get(), held.keep) {
            chain.keep_until(keep);
        }
        held
    }
}

impl<R: Record> Drop for Counted<R> {
    fn drop(&mut self) {
        if self.armed && self.record.count().fetch_sub(1, Ordering::AcqRel) == 1 {
            let (record, keep) = (self.record.clone(), self.chain.kept_until());
            let runtime = record.runtime().clone();
            runtime.spawn(async move {
                let _ = record.give_back(keep).await;
            });
        }
    }
}

/// Gives `record` back with [`Record::give_back_once`], trying again a
/// call whose answer was lost (each names the record, so it is
/// idempotent); a retry that finds the record gone counts as given back
/// (the lost call most likely deleted it). `tries` is how many were made
/// already. When the tries run out, the error is returned and the record
/// is given back in the background while the store may keep it alive.
pub(crate) async fn give_back_retried<R: Record>(
    record: Arc<R>,
    keep: Option<Instant>,
    mut tries: u32,
) -> Result<bool, LockError> {
    loop {
        tries += 1;
        match record.clone().give_back_once(keep).await {
            Err(e) if transient(&e) && tries < crate::config::UNLOCK_TRIES => {
                tokio::time::sleep(Duration::from_millis(50 * u64::from(tries))).await;
            }
            Err(e) if transient(&e) => {
                let runtime = record.runtime().clone();
                runtime.spawn(async move {
                    let mut tries = 0;
                    while record.may_outlive() {
                        tries += 1;
                        tokio::time::sleep(backoff(tries)).await;
                        match record.clone().give_back_once(keep).await {
                            Err(e) if transient(&e) => {}
                            _ => return,
                        }
                    }
                });
                return Err(e);
            }
            Ok(false) if tries > 1 => return Ok(true),
            result => return result,
        }
    }
}

/// How an acquisition in the scope of this client's own hold of the name
/// goes on.
pub(crate) enum InScope<R> {
    /// A re-entry of the hold.
    Reenter(Arc<R>),
    /// A read under this client's write: a record of its own, taken at
    /// once (see [`Downgrade`]).
    Under(Arc<R>),
}

/// How an acquisition of `name` asking for `asked`, in the scope of
/// `holder`'s hold of it, goes on; [`LockError::Lost`] when that hold's
/// record is gone.
pub(crate) fn in_scope<R: Record>(
    records: &Records<R>,
    name: &str,
    holder: String,
    asked: Kind,
) -> Result<InScope<R>, LockError> {
    let record = records
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(name.to_owned(), holder))
        .cloned();
    // Upgraded with the map unlocked: dropping a last `Arc` of a record
    // locks the map.
    let Some(record) = record.and_then(|r| r.upgrade()) else {
        return Err(lost(name));
    };
    if !(record.kind() == Kind::Write && asked == Kind::Read) {
        return Ok(InScope::Reenter(record));
    }
    if record.holds() == 0 {
        return Err(lost(name));
    }
    Ok(InScope::Under(record))
}

/// Lists a new `record` in the client's `records` (and, for a read under
/// this client's write, under that write).
pub(crate) fn list<R: Record>(records: &Records<R>, record: &Arc<R>, under: Option<&Arc<R>>) {
    if let Some(write) = under {
        write.downgrade().add(record);
    }
    records.lock().unwrap_or_else(|p| p.into_inner()).insert(
        (record.name().to_owned(), record.holder().to_owned()),
        Arc::downgrade(record),
    );
}

/// Takes a record that goes out of the client's `records` (its `Drop`,
/// which gives up its `name` and `holder` id, left empty, as the key: no
/// copy).
pub(crate) fn unlist<R>(records: &Records<R>, name: &mut String, holder: &mut String) {
    let key = (std::mem::take(name), std::mem::take(holder));
    let mut records = records.lock().unwrap_or_else(|p| p.into_inner());
    // One look-up; a record listed since under the same key stays.
    if let std::collections::hash_map::Entry::Occupied(listed) = records.entry(key)
        && listed.get().strong_count() == 0
    {
        listed.remove();
    }
}

/// Who takes a hold, and on which side: what each try of an acquisition
/// knows.
pub(crate) struct How<'a, R, S> {
    #[cfg_attr(not(any(feature = "etcd", feature = "zookeeper")), allow(dead_code))]
    pub(crate) side: S,
    pub(crate) holder: &'a str,
    /// The holder number (the part of the holder id after the client's).
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) number: u64,
    pub(crate) deadline: Option<Instant>,
    /// A read's: this client's write hold whose scope it is taken in.
    pub(crate) under: Option<&'a Arc<R>>,
}

/// A hold taken in the store: its token, when the call that confirmed it
/// was sent, and what else the engine learnt.
pub(crate) struct Taken<X> {
    pub(crate) token: u64,
    pub(crate) sent: Instant,
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) more: X,
}

/// An engine whose acquisitions [`take_hold`] drives: what each try does
/// in its store, and the record a hold taken gets.
pub(crate) trait Taking: Send + Sync + Sized + 'static {
    type Record: Record;
    /// Which kind of contender an acquisition is, in the store's terms.
    type Side: Copy + Send + Sync + 'static;
    type Made: Undo;
    type More: Send;
    /// The engine's name, for the log.
    const ENGINE: &'static str;
    /// The client's id.
    fn id(&self) -> &str;
    /// The client's queues, per name.
    fn turns(&self) -> &crate::turns::Turns;
    /// The client's records, per lock name and holder id.
    fn records(&self) -> &Records<Self::Record>;
    /// The side `target` takes (a name the store refuses is an error).
    fn side(target: &Target) -> Result<Self::Side, LockError>;
    fn kind(side: Self::Side) -> Kind;
    /// A re-entry of `record`'s hold.
    fn reenter<'a>(
        alive: Arc<Background>,
        record: Arc<Self::Record>,
        side: Self::Side,
        chain: Chain,
        options: &'a Options,
        metric: &'static str,
    ) -> impl Future<Output = Result<Hold<Self::Record>, LockError>> + Send + 'a;
    /// Nothing made yet, by `holder`.
    fn made(self: &Arc<Self>, holder: &str) -> Self::Made;
    /// One try at the hold.
    fn take<'a>(
        self: &'a Arc<Self>,
        target: &'a Target,
        options: &'a Options,
        how: &'a How<'a, Self::Record, Self::Side>,
        made: &'a mut Self::Made,
    ) -> impl Future<Output = Result<Taken<Self::More>, LockError>> + Send + 'a;
    /// The record of the hold `taken` (what `made` made), listed in the
    /// client's records and started (bound to what keeps it, or timed),
    /// keeping `turn` until it goes; [`LockError::Lost`] when what was
    /// made is gone.
    fn record(
        self: &Arc<Self>,
        name: &str,
        options: &Options,
        how: &How<'_, Self::Record, Self::Side>,
        taken: &Taken<Self::More>,
        made: &mut Self::Made,
        turn: Option<OwnedMutexGuard<()>>,
    ) -> Result<Arc<Self::Record>, LockError>;
}

/// An acquisition on a [`Taking`] engine is [`crate::turns::acquire`]: the
/// shared queueing in the process, then [`take_hold`].
impl<S: Taking> crate::turns::OneRecord for S {
    type Hold = Hold<S::Record>;

    fn id(&self) -> &str {
        Taking::id(self)
    }

    fn turns(&self) -> &crate::turns::Turns {
        Taking::turns(self)
    }

    fn take_hold(
        self: Arc<Self>,
        alive: Arc<Background>,
        target: &Target,
        options: Options,
        queued: Queued,
    ) -> impl Future<Output = Result<Hold<S::Record>, LockError>> + Send + '_ {
        take_hold(alive, self, target, options, queued)
    }
}

/// The count `inspect` shows for holder `id` of lock `name`: its record's
/// live holds when it is this client's, 0 when its hold is kept only by a
/// `hold_at_least` minimum, else 1 (another client's).
pub(crate) fn holds_of<R: Record>(records: &Records<R>, name: &str, id: &str, kept: bool) -> u64 {
    let record = records
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(name.to_owned(), id.to_owned()))
        .cloned();
    // Upgraded with the map unlocked: dropping a last `Arc` of a record
    // locks the map.
    match record.and_then(|r| r.upgrade()) {
        _ if kept => 0,
        Some(r) => r.holds().max(1) as u64,
        None => 1,
    }
}

/// An acquisition on a [`Taking`] engine once the options are checked and
/// its turn is in: a re-entry when the caller runs in the scope of this
/// client's hold, else tries in the store (the undo of what they made
/// when the acquisition fails or is dropped) until the hold is taken.
#[expect(
    clippy::manual_async_fn,
    reason = "an async fn keeps its arguments twice (see the comment inside)"
)]
pub(crate) fn take_hold<S: Taking>(
    alive: Arc<Background>,
    store: Arc<S>,
    target: &Target,
    options: Options,
    queued: Queued,
) -> impl Future<Output = Result<Hold<S::Record>, LockError>> + Send + '_ {
    // An async block, not an async fn: a head waits in it, and an async
    // fn keeps its arguments twice (as they came and as moved).
    async move {
        let Queued {
            reentry,
            turn,
            deadline,
        } = queued;
        let mut under = None;
        let side = S::side(target)?;
        let name = target.name();
        let metric = options.metric.unwrap_or(target.kind());
        if let Some((holder, chain)) = reentry {
            match in_scope(store.records(), name, holder, S::kind(side))? {
                InScope::Reenter(record) => {
                    return S::reenter(alive, record, side, chain, &options, metric).await;
                }
                InScope::Under(write) => under = Some(write),
            }
        }
        let number = options.number.unwrap_or_else(crate::holder::fresh_number);
        let holder = crate::holder::id(store.id(), number);
        let _waiting = crate::telemetry::WaiterMetric::start(metric);
        let mut pending = Pending::new(alive.clone(), turn, store.made(&holder));
        let how = How {
            side,
            holder: &holder,
            number,
            deadline,
            under: under.as_ref(),
        };
        let mut tries = 0;
        let taken = loop {
            tries += 1;
            match store.take(target, &options, &how, &mut pending.made).await {
                Ok(taken) => break taken,
                Err(e) => {
                    if let Err(e) = try_again(e, tries, deadline, target, &options, S::ENGINE).await
                    {
                        pending.give_up().await;
                        return Err(e);
                    }
                }
            }
        };
        let turn = pending.turn.take();
        let record = store.record(name, &options, &how, &taken, &mut pending.made, turn)?;
        Ok(Hold::new(
            alive,
            record,
            taken.token,
            taken.sent,
            &options,
            metric,
        ))
    }
}

/// After try `tries` of an acquisition failed with `e`: `Ok` once it
/// paused to try again (a fault that may heal, within the wait), else the
/// error to return. One attempt reports its fault as it is; a wait that
/// ran out on faults that may heal was a wait that ran out.
pub(crate) async fn try_again(
    e: LockError,
    tries: u32,
    deadline: Option<Instant>,
    target: &Target,
    options: &Options,
    store: &'static str,
) -> Result<(), LockError> {
    if transient(&e) && deadline.is_none_or(|d| Instant::now() < d) {
        if tries == 1 && deadline.is_none() {
            tracing::warn!(lock = target.name(), error = %e, store, "an attempt failed; waiting without a deadline, so trying again with backoff until the store answers");
        }
        pause_within(deadline, backoff(tries)).await;
        return Ok(());
    }
    let waited = options.wait != Some(Duration::ZERO);
    Err(if transient(&e) && waited {
        timed_out(target, options)
    } else {
        e
    })
}

/// What an acquisition made in the store so far (a record, a lease; or a
/// call that may have made one): undone when the acquisition fails or is
/// dropped.
pub(crate) trait Undo: Send + Sized + 'static {
    /// Takes what there is to undo, leaving nothing; `None` when nothing
    /// is.
    fn take(&mut self) -> Option<Self>;
    /// One try at undoing it; what is undone is forgotten.
    fn clear(&mut self) -> impl Future<Output = Result<(), LockError>> + Send + '_;
    /// Whether the store may still keep what is left alive (worth trying
    /// on).
    fn may_outlive(&self) -> bool;
    /// Whether what is left may keep the lock taken (a record, a row), so
    /// that the process queue's turn passes on only once it is undone; a
    /// waiter's registration for announcements keeps nobody out, and the
    /// turn passes on at once.
    fn keeps_out(&self) -> bool {
        true
    }
    /// What is left, for the log.
    fn what(&self) -> String;
}

/// What an acquisition has made so far, undone when it fails or is
/// dropped (in a task of the client's runtime, kept running until it is
/// done): its record deleted, and only then the process queue's turn
/// passed on.
pub(crate) struct Pending<U: Undo> {
    /// The client's runtime, kept running until the undo is done.
    alive: Arc<Background>,
    /// A mutex record's turn in the process queue.
    pub(crate) turn: Option<OwnedMutexGuard<()>>,
    pub(crate) made: U,
}

impl<U: Undo> Pending<U> {
    pub(crate) fn new(alive: Arc<Background>, turn: Option<OwnedMutexGuard<()>>, made: U) -> Self {
        Pending { alive, turn, made }
    }

    /// Undoes what was made, waiting until its first try is done (the
    /// turn passed on): any later tries go on in the background.
    pub(crate) async fn give_up(&mut self) {
        let (made, turn) = (self.made.take(), self.turn.take());
        let (passed_in, passed) = oneshot::channel();
        self.alive
            .spawn_keeping(async move { undo(made, turn, Some(passed_in)).await });
        let _ = passed.await;
    }
}

impl<U: Undo> Drop for Pending<U> {
    fn drop(&mut self) {
        let (made, mut turn) = (self.made.take(), self.turn.take());
        // Nothing left that keeps the lock taken: the turn passes on now,
        // not once a task of the client's runtime gets to it (the caller's
        // next acquisition may come first).
        if !made.as_ref().is_some_and(Undo::keeps_out) {
            drop(turn.take());
        }
        if made.is_none() && turn.is_none() {
            return;
        }
        self.alive
            .spawn_keeping(async move { undo(made, turn, None).await });
    }
}

/// Undoes `made`, trying again while the store may keep it, and passes
/// the turn on after the first try.
async fn undo<U: Undo>(
    made: Option<U>,
    turn: Option<OwnedMutexGuard<()>>,
    passed: Option<oneshot::Sender<()>>,
) {
    let (mut turn, mut passed) = (turn, passed);
    if !made.as_ref().is_some_and(Undo::keeps_out) {
        drop(turn.take());
        if let Some(passed) = passed.take() {
            let _ = passed.send(());
        }
    }
    if let Some(mut made) = made {
        for tries in 1.. {
            let cleared = made.clear().await;
            drop(turn.take());
            if let Some(passed) = passed.take() {
                let _ = passed.send(());
            }
            match cleared {
                Err(e) if transient(&e) && made.may_outlive() => {
                    if tries == crate::config::UNLOCK_TRIES {
                        tracing::warn!(record = made.what(), error = %e, "an abandoned lock record is not deleted yet; trying on");
                    }
                    tokio::time::sleep(backoff(tries)).await;
                }
                Err(e) => {
                    tracing::warn!(record = made.what(), error = %e, "could not delete an abandoned lock record");
                    break;
                }
                Ok(()) => break,
            }
        }
    }
    drop(turn);
    if let Some(passed) = passed {
        let _ = passed.send(());
    }
}
