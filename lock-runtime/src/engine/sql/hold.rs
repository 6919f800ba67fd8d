//! A hold on an SQL engine once taken: the record a client keeps of its
//! row (shared by a hold and its re-entries), the watchdog that renews the
//! client's rows, and the guard's side: loss, `extend`, release. Taking
//! one is in each engine's `take`; the statements are the engine's
//! [`Rows`].

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedMutexGuard, watch};

use super::Rows;
use crate::background::Background;
use crate::clock::valid_until;
use crate::error::LockError;
use crate::holder::Chain;
use crate::kept::{Counted, Hold, give_back_retried, list, lost};
use crate::own::OwnHolds;
use crate::request::Options;
use crate::turns::{Downgrade, Kind};

/// A client's one row for one name, shared by a hold and its re-entries.
/// The process queue's turn is kept until it is dropped, after the row is
/// given back.
pub(crate) struct Record<S: Rows> {
    pub(crate) store: Arc<S>,
    pub(crate) name: String,
    pub(crate) holder: String,
    /// Until when the hold counts, by this client's clock: the last
    /// confirmed renewal's send time plus the lease (less the safety
    /// margin), or a fixed lease's end.
    until: Mutex<Instant>,
    /// A fixed lease: nothing renews the row.
    fixed: bool,
    /// Its row is kept by a `hold_at_least` minimum (its holder id marked
    /// kept).
    kept: AtomicBool,
    /// Live holds of the chain (a hold and its re-entries).
    holds: AtomicUsize,
    /// The row is known gone (freed by someone else: `force_unlock`; or
    /// taken over after its lease ran out).
    deleted: watch::Sender<bool>,
    /// The process queue's turn: passed on when the record goes, or as
    /// soon as its row is known gone.
    turn: Mutex<Option<OwnedMutexGuard<()>>>,
    downgrade: Downgrade<Record<S>>,
}

/// A hold on an SQL engine: the record it shares with its chain, and its
/// own token.
pub(crate) type SqlHold<S> = Hold<Record<S>>;

impl<S: Rows> Drop for Record<S> {
    fn drop(&mut self) {
        crate::kept::unlist(&self.store.common().records, &self.name, &self.holder);
    }
}

impl<S: Rows> Record<S> {
    /// The record of a row `holder` took for `name` with a statement sent
    /// at `sent` (the process queue's `turn` kept with it), listed among
    /// the client's records (under the chain's record it re-enters, if
    /// any) and renewed by the watchdog unless its lease is fixed.
    pub(crate) fn taken(
        store: &Arc<S>,
        name: &str,
        holder: &str,
        options: &Options,
        sent: Instant,
        turn: Option<OwnedMutexGuard<()>>,
        under: Option<&Arc<Record<S>>>,
    ) -> Arc<Record<S>> {
        let common = store.common();
        let fixed = options.lease.is_some();
        let lease = options.lease.unwrap_or(common.config.watchdog_timeout);
        let record = Arc::new(Record {
            store: store.clone(),
            name: name.to_owned(),
            holder: holder.to_owned(),
            until: Mutex::new(valid_until(sent, lease)),
            fixed,
            kept: AtomicBool::new(false),
            holds: AtomicUsize::new(1),
            deleted: watch::channel(false).0,
            turn: Mutex::new(turn),
            downgrade: Downgrade::new(None),
        });
        list(&common.records, &record, under);
        if !fixed {
            common.keeper.keep(&record);
        }
        record
    }

    /// The row is known gone: the hold is lost, and this client's next
    /// acquisition of the name may go ahead.
    pub(crate) fn gone(&self) {
        self.deleted.send_replace(true);
        drop(self.turn.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    /// The holder id.
    pub(crate) fn holder(&self) -> &str {
        &self.holder
    }

    fn until(&self) -> Instant {
        *self.until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A renewal sent at `sent` for `lease` was confirmed: the hold lasts
    /// the lease from then.
    fn renewed(&self, sent: Instant, lease: Duration) {
        let mut until = self.until.lock().unwrap_or_else(|p| p.into_inner());
        *until = (*until).max(valid_until(sent, lease));
    }

    fn is_lost(&self) -> bool {
        *self.deleted.borrow() || Instant::now() >= self.until()
    }

    fn remaining(&self) -> Duration {
        if *self.deleted.borrow() {
            return Duration::ZERO;
        }
        self.until().saturating_duration_since(Instant::now())
    }

    async fn lost(&self) {
        crate::kept::gone_or_ended(&self.deleted, || Some(self.until())).await;
    }
}

impl<S: Rows> crate::kept::Record for Record<S> {
    fn name(&self) -> &str {
        &self.name
    }

    fn holder(&self) -> &str {
        &self.holder
    }

    fn client_id(&self) -> &str {
        &self.store.common().id
    }

    fn own(&self) -> &OwnHolds {
        &self.store.common().own
    }

    fn runtime(&self) -> &tokio::runtime::Handle {
        &self.store.common().runtime
    }

    fn kind(&self) -> Kind {
        Kind::Mutex
    }

    fn downgrade(&self) -> &Downgrade<Record<S>> {
        &self.downgrade
    }

    fn count(&self) -> &AtomicUsize {
        &self.holds
    }

    fn is_lost(&self) -> bool {
        Record::is_lost(self)
    }

    fn remaining(&self) -> Duration {
        Record::remaining(self)
    }

    fn lost(&self) -> impl Future<Output = ()> + Send + '_ {
        Record::lost(self)
    }

    fn expire_by(&self, at: Instant) {
        if self.fixed {
            let mut until = self.until.lock().unwrap_or_else(|p| p.into_inner());
            *until = (*until).min(at);
        }
    }

    fn give_back(
        self: Arc<Self>,
        keep: Option<Instant>,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'static {
        give_back(self, keep)
    }

    async fn give_back_once(self: Arc<Self>, keep: Option<Instant>) -> Result<bool, LockError> {
        give_back_once(&self, keep).await
    }

    fn may_outlive(&self) -> bool {
        // A row nobody renews ends by the database's clock; one whose
        // hold still counts may be renewed meanwhile: worth freeing.
        !Record::is_lost(self)
    }
}

/// A re-entry of `record`'s hold: its row's token raised for a token of
/// its own; [`LockError::Lost`] when the row is not the holder's any more.
pub(crate) async fn reenter<S: Rows>(
    alive: Arc<Background>,
    record: Arc<Record<S>>,
    chain: Chain,
    options: &Options,
    metric: &'static str,
) -> Result<SqlHold<S>, LockError> {
    let counted = Counted::count(record, Kind::Mutex, chain)?;
    let record = counted.record().clone();
    let sent = Instant::now();
    let Some(token) = record.store.reenter(&record.name, &record.holder).await? else {
        record.gone();
        return Err(lost(&record.name));
    };
    Ok(counted.hold(alive, token, sent, options, metric))
}

impl<S: Rows> SqlHold<S> {
    /// Moves a fixed lease's end to `lease` from now, by the database's
    /// clock (a lease never shrinks).
    pub(crate) async fn extend(&mut self, lease: Duration) -> Result<(), LockError> {
        let record = self.record().clone();
        let name = record.name.clone();
        if !record.fixed {
            return Err(LockError::Config(format!(
                "lock `{name}`: extend is for fixed leases (acquired with .lease(..)); the \
                 watchdog renews this guard's lease until release"
            )));
        }
        if record.is_lost() {
            return Err(lost(&name));
        }
        let runtime = record.store.common().runtime.clone();
        let moving = record.clone();
        let moved = crate::background::run(&runtime, async move {
            let record = moving;
            let sent = Instant::now();
            let there = record
                .store
                .extend(&record.name, &record.holder, lease)
                .await?;
            Ok::<_, LockError>(there.then_some(sent))
        })
        .await??;
        let Some(sent) = moved else {
            record.gone();
            return Err(lost(&name));
        };
        record.renewed(sent, lease);
        crate::telemetry::renewed(1);
        Ok(())
    }
}

/// Gives `record`'s row back: freed and announced, or kept taken until
/// `keep` (a `hold_at_least` minimum; freed then from the client's
/// runtime); whether it was still the holder's. Tried again on faults.
async fn give_back<S: Rows>(
    record: Arc<Record<S>>,
    keep: Option<Instant>,
) -> Result<bool, LockError> {
    record.store.common().keeper.forget(&record);
    let keep = keep.filter(|k| *k > Instant::now());
    let released = give_back_retried(record.clone(), keep, 0).await;
    if let (Some(keep), Ok(true)) = (keep, &released) {
        let runtime = record.store.common().runtime.clone();
        runtime.spawn(async move {
            tokio::time::sleep_until(keep.into()).await;
            if let Err(e) = give_back_retried(record, None, 0).await {
                tracing::warn!(error = %e, "a lock row kept for its minimum is not freed yet; it ends by its lease");
            }
        });
    }
    released
}

/// One give-back of `record`'s row: kept taken until `keep` (marked kept),
/// or freed and announced; whether it was the holder's. A freed row's
/// turn passes on.
async fn give_back_once<S: Rows>(
    record: &Record<S>,
    keep: Option<Instant>,
) -> Result<bool, LockError> {
    let store = &record.store;
    if let Some(keep) = keep.filter(|k| *k > Instant::now()) {
        let left = keep.saturating_duration_since(Instant::now());
        let there = store.keep(&record.name, &record.holder, left).await?;
        if there {
            record.kept.store(true, Ordering::Release);
        }
        return Ok(there && !*record.deleted.borrow());
    }
    let holder = if record.kept.load(Ordering::Acquire) {
        [record.holder.as_str(), super::KEPT].concat()
    } else {
        record.holder.clone()
    };
    let freed = store.release(&record.name, &holder).await?;
    record.gone();
    Ok(freed)
}

/// The watchdog: renews the rows of the client's holds without a fixed
/// lease, all in one round, every third of the watchdog timeout.
pub(crate) struct Keeper<S: Rows> {
    /// By the record's address: kept and forgotten without a scan (an
    /// acquisition and a release each touch one entry).
    kept: Mutex<std::collections::HashMap<usize, Weak<Record<S>>>>,
    /// Rounds so far: every [`SWEEP_EVERY`]th also sweeps the table.
    rounds: AtomicUsize,
}

impl<S: Rows> Default for Keeper<S> {
    fn default() -> Self {
        Keeper {
            kept: Mutex::default(),
            rounds: AtomicUsize::new(0),
        }
    }
}

/// How many rounds apart the table's long-free rows are swept.
const SWEEP_EVERY: usize = 30;

/// How long a row is free before a sweep deletes it.
const FREE_FOR: Duration = Duration::from_secs(60);

impl<S: Rows> Keeper<S> {
    /// Starts the rounds on the client's runtime, for as long as the
    /// client lives.
    pub(crate) fn start(store: &Arc<S>) {
        let weak = Arc::downgrade(store);
        let common = store.common();
        let every = common.config.watchdog_timeout / 3;
        common.runtime.spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(store) = weak.upgrade() else {
                    return;
                };
                store.common().keeper.round(&store).await;
            }
        });
    }

    /// Keeps `record`'s row renewed.
    fn keep(&self, record: &Arc<Record<S>>) {
        let at = Arc::as_ptr(record) as usize;
        self.kept
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(at, Arc::downgrade(record));
    }

    /// Stops renewing `record`'s row.
    fn forget(&self, record: &Arc<Record<S>>) {
        let at = Arc::as_ptr(record) as usize;
        self.kept
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&at);
    }

    /// How many holds it renews.
    pub(crate) fn holds(&self) -> usize {
        self.live().len()
    }

    /// The records still alive and not known gone (the others leave).
    fn live(&self) -> Vec<Arc<Record<S>>> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.retain(|_, r| r.strong_count() > 0);
        kept.values()
            .filter_map(Weak::upgrade)
            .filter(|r| !*r.deleted.borrow())
            .collect()
    }

    /// One round: every kept row renewed at once; those not renewed (gone,
    /// or taken over) are lost at once. A round that fails renews nothing:
    /// the holds count down by their clocks.
    async fn round(&self, store: &S) {
        if self
            .rounds
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(SWEEP_EVERY)
        {
            let _ = store.sweep(FREE_FOR).await;
        }
        // A hold already lost by its clock is not brought back by a late
        // renewal: it stays lost.
        let (lost, records): (Vec<_>, Vec<_>) = self.live().into_iter().partition(|r| r.is_lost());
        for record in lost {
            record.gone();
        }
        if records.is_empty() {
            return;
        }
        let holds: Vec<(&str, &str)> = records
            .iter()
            .map(|r| (r.name.as_str(), r.holder.as_str()))
            .collect();
        let lease = store.common().config.watchdog_timeout;
        let sent = Instant::now();
        let Ok(renewed) = store.renew(&holds, lease).await else {
            return;
        };
        let mut n = 0;
        for (record, renewed) in records.iter().zip(renewed) {
            if renewed {
                record.renewed(sent, lease);
                n += 1;
            } else if record.holds.load(Ordering::Acquire) > 0 {
                record.gone();
            }
        }
        crate::telemetry::renewed(n);
    }
}
