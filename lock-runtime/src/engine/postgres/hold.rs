//! A hold on PostgreSQL once taken: the record a client keeps of its row
//! (shared by a hold and its re-entries), the watchdog that renews the
//! client's rows, and the guard's side: loss, `extend`, release. Taking
//! one is in `take`.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedMutexGuard, watch};

use super::Pg;
use crate::background::Background;
use crate::clock::valid_until;
use crate::error::LockError;
use crate::holder::Chain;
pub(super) use crate::kept::lost;
use crate::kept::{Counted, Hold, give_back_retried};
use crate::own::OwnHolds;
use crate::request::Options;
use crate::turns::{Downgrade, Kind};

/// A client's one row for one name, shared by a hold and its re-entries.
/// The process queue's turn is kept until it is dropped, after the row is
/// given back.
pub(crate) struct Record {
    pub(super) pg: Arc<Pg>,
    pub(super) name: String,
    pub(super) holder: String,
    /// Until when the hold counts, by this client's clock: the last
    /// confirmed renewal's send time plus the lease (less the safety
    /// margin), or a fixed lease's end.
    pub(super) until: Mutex<Instant>,
    /// A fixed lease: nothing renews the row.
    pub(super) fixed: bool,
    /// Its row is kept by a `hold_at_least` minimum (its holder id marked
    /// kept).
    pub(super) kept: std::sync::atomic::AtomicBool,
    /// Live holds of the chain (a hold and its re-entries).
    pub(super) holds: AtomicUsize,
    /// The row is known gone (freed by someone else: `force_unlock`; or
    /// taken over after its lease ran out).
    pub(super) deleted: watch::Sender<bool>,
    /// The process queue's turn: passed on when the record goes, or as
    /// soon as its row is known gone.
    pub(super) turn: Mutex<Option<OwnedMutexGuard<()>>>,
    pub(super) downgrade: Downgrade<Record>,
}

/// A hold on PostgreSQL: the record it shares with its chain, and its own
/// token.
pub(crate) type PgHold = Hold<Record>;

impl Drop for Record {
    fn drop(&mut self) {
        crate::kept::unlist(&self.pg.records, &self.name, &self.holder);
    }
}

impl Record {
    /// The row is known gone: the hold is lost, and this client's next
    /// acquisition of the name may go ahead.
    pub(super) fn gone(&self) {
        self.deleted.send_replace(true);
        drop(self.turn.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    fn until(&self) -> Instant {
        *self.until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A renewal sent at `sent` was confirmed: the hold lasts the lease
    /// from then.
    fn renewed(&self, sent: Instant) {
        let mut until = self.until.lock().unwrap_or_else(|p| p.into_inner());
        *until = (*until).max(valid_until(sent, self.pg.config.watchdog_timeout));
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
        let mut deleted = self.deleted.subscribe();
        let gone = async move {
            let _ = deleted.wait_for(|d| *d).await;
        };
        let mut gone = std::pin::pin!(gone);
        loop {
            let until = self.until();
            tokio::select! {
                () = tokio::time::sleep_until(until.into()) => {
                    if Instant::now() >= self.until() {
                        return;
                    }
                }
                () = &mut gone => return,
            }
        }
    }
}

impl crate::kept::Record for Record {
    fn name(&self) -> &str {
        &self.name
    }

    fn holder(&self) -> &str {
        &self.holder
    }

    fn client_id(&self) -> &str {
        &self.pg.id
    }

    fn own(&self) -> &OwnHolds {
        &self.pg.own
    }

    fn runtime(&self) -> &tokio::runtime::Handle {
        &self.pg.runtime
    }

    fn kind(&self) -> Kind {
        Kind::Mutex
    }

    fn downgrade(&self) -> &Downgrade<Record> {
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
pub(super) async fn reenter(
    alive: Arc<Background>,
    record: Arc<Record>,
    chain: Chain,
    options: &Options,
    metric: &'static str,
) -> Result<PgHold, LockError> {
    let counted = Counted::count(record, Kind::Mutex, chain)?;
    let record = counted.record().clone();
    let sent = Instant::now();
    let rows = record
        .pg
        .query(|s| &s.reenter, &[&record.name, &record.holder])
        .await?;
    let Some(row) = rows.first() else {
        record.gone();
        return Err(lost(&record.name));
    };
    let token = u64::try_from(row.get::<_, i64>(0)).unwrap_or(0);
    Ok(counted.hold(alive, token, sent, options, metric))
}

impl PgHold {
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
        let runtime = record.pg.runtime.clone();
        let moving = record.clone();
        let moved = crate::background::run(&runtime, async move {
            let record = moving;
            let sent = Instant::now();
            let micros = micros(lease);
            let rows = record
                .pg
                .query(|s| &s.extend, &[&record.name, &record.holder, &micros])
                .await?;
            Ok::<_, LockError>((!rows.is_empty()).then_some(sent))
        })
        .await??;
        let Some(sent) = moved else {
            record.gone();
            return Err(lost(&name));
        };
        {
            let mut until = record.until.lock().unwrap_or_else(|p| p.into_inner());
            *until = (*until).max(valid_until(sent, lease));
        }
        crate::telemetry::renewed(1);
        Ok(())
    }
}

/// `d` in whole microseconds, for a statement.
pub(super) fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// Gives `record`'s row back: freed and announced, or kept taken until
/// `keep` (a `hold_at_least` minimum; freed then from the client's
/// runtime); whether it was still the holder's. Tried again on faults.
async fn give_back(record: Arc<Record>, keep: Option<Instant>) -> Result<bool, LockError> {
    record.pg.keeper.forget(&record);
    let keep = keep.filter(|k| *k > Instant::now());
    let released = give_back_retried(record.clone(), keep, 0).await;
    if let (Some(keep), Ok(true)) = (keep, &released) {
        let runtime = record.pg.runtime.clone();
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
async fn give_back_once(record: &Record, keep: Option<Instant>) -> Result<bool, LockError> {
    let pg = &record.pg;
    if let Some(keep) = keep.filter(|k| *k > Instant::now()) {
        let left = micros(keep.saturating_duration_since(Instant::now()));
        let rows = pg
            .query(|s| &s.keep, &[&record.name, &record.holder, &left])
            .await?;
        let there = !rows.is_empty();
        if there {
            record
                .kept
                .store(true, std::sync::atomic::Ordering::Release);
        }
        return Ok(there && !*record.deleted.borrow());
    }
    let holder = if record.kept.load(std::sync::atomic::Ordering::Acquire) {
        [record.holder.as_str(), super::layout::KEPT].concat()
    } else {
        record.holder.clone()
    };
    let channel = pg.channel();
    let rows = pg
        .query(|s| &s.release, &[&record.name, &holder, &channel])
        .await?;
    record.gone();
    Ok(!rows.is_empty())
}

/// The watchdog: renews the rows of the client's holds without a fixed
/// lease, all in one statement, every third of the watchdog timeout.
#[derive(Default)]
pub(crate) struct Keeper {
    kept: Mutex<Vec<Weak<Record>>>,
    /// Rounds so far: every [`SWEEP_EVERY`]th also sweeps the table.
    rounds: AtomicUsize,
}

/// How many rounds apart the table's long-free rows are swept.
const SWEEP_EVERY: usize = 30;

/// How long a row is free before a sweep deletes it.
const FREE_FOR: Duration = Duration::from_secs(60);

impl Keeper {
    /// Starts the rounds on the client's runtime, for as long as the
    /// client lives.
    pub(super) fn start(pg: &Arc<Pg>) {
        let weak = Arc::downgrade(pg);
        let every = pg.config.watchdog_timeout / 3;
        pg.runtime.spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(pg) = weak.upgrade() else {
                    return;
                };
                pg.keeper.round(&pg).await;
            }
        });
    }

    /// Keeps `record`'s row renewed.
    pub(super) fn keep(&self, record: &Arc<Record>) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.retain(|r| r.strong_count() > 0);
        kept.push(Arc::downgrade(record));
    }

    /// Stops renewing `record`'s row.
    fn forget(&self, record: &Arc<Record>) {
        self.kept
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|r| r.strong_count() > 0 && !std::ptr::eq(r.as_ptr(), Arc::as_ptr(record)));
    }

    /// How many holds it renews.
    pub(super) fn holds(&self) -> usize {
        self.live().len()
    }

    fn live(&self) -> Vec<Arc<Record>> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner()).clone();
        kept.iter()
            .filter_map(Weak::upgrade)
            .filter(|r| !*r.deleted.borrow())
            .collect()
    }

    /// One round: every kept row renewed in one statement; those not
    /// renewed (gone, or taken over) are lost at once. A round that fails
    /// renews nothing: the holds count down by their clocks.
    async fn round(&self, pg: &Pg) {
        if self
            .rounds
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .is_multiple_of(SWEEP_EVERY)
        {
            let _ = pg.query(|s| &s.sweep, &[&micros(FREE_FOR)]).await;
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
        let names: Vec<&str> = records.iter().map(|r| r.name.as_str()).collect();
        let holders: Vec<&str> = records.iter().map(|r| r.holder.as_str()).collect();
        let lease = micros(pg.config.watchdog_timeout);
        let sent = Instant::now();
        let Ok(rows) = pg.query(|s| &s.renew, &[&names, &holders, &lease]).await else {
            return;
        };
        let renewed: Vec<(String, String)> = rows
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect();
        let mut n = 0;
        for record in &records {
            if renewed
                .iter()
                .any(|(name, holder)| *name == record.name && *holder == record.holder)
            {
                record.renewed(sent);
                n += 1;
            } else if record.holds.load(std::sync::atomic::Ordering::Acquire) > 0 {
                record.gone();
            }
        }
        crate::telemetry::renewed(n);
    }
}
