//! A hold on an SQL engine once taken: the record a client keeps of its
//! row (shared by a hold and its re-entries), the watchdog that renews the
//! client's rows, and the guard's side: loss, `extend`, release. Taking
//! one is in each engine's `take`; the statements are the engine's
//! [`Rows`].

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::time::Instant;

use tokio::sync::OwnedMutexGuard;

use super::queue::leave;
use super::record::{Record, SqlHold};
use super::taking::{SqlTaking, Taken};
use super::{Rows, UNKNOWN_TOKEN};
use crate::background::Background;
use crate::clock::valid_until;
use crate::error::LockError;
use crate::holder::{Chain, Who};
use crate::kept::{Access, Counted, give_back_retried, listed, lost};
use crate::request::{Kind, Request};

impl<S: SqlTaking> Record<S> {
    /// The record of the row the hold `who` took for `request`, `taken` (the
    /// process queue's `turn` kept with it), listed among the client's
    /// records (under this client's write it was taken under, if any) and
    /// renewed by the watchdog unless its lease is fixed.
    pub(crate) fn taken(
        store: &Arc<S>,
        request: &Request,
        who: &Arc<Who>,
        under: Option<&Arc<Record<S>>>,
        taken: &Taken,
        turn: Option<OwnedMutexGuard<()>>,
    ) -> Arc<Record<S>> {
        let common = store.common();
        let fixed = !request.lease.renewed;
        let (sent, token) = (taken.sent, taken.token);
        let record = Arc::new(Record {
            store: store.clone(),
            base: crate::kept::Base::new(who, turn, under),
            side: request.kind,
            until: Mutex::new(valid_until(sent, request.lease.length)),
            fixed,
            kept: AtomicBool::new(false),
            token: AtomicI64::new(i64::try_from(token).unwrap_or(UNKNOWN_TOKEN)),
        });
        listed(&common.records, record, under)
    }

    /// Kept alive by the watchdog, unless its lease is fixed.
    fn start(self: &Arc<Self>) {
        if !self.fixed {
            self.store.common().keeper.keep(self);
        }
    }
}

impl<S: SqlTaking> crate::kept::Record for Record<S> {
    crate::kept::record_fields!(client | r | r.store.common(), by inherent);

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
pub(crate) async fn reenter<S: SqlTaking>(
    alive: Arc<Background>,
    record: Arc<Record<S>>,
    chain: Chain,
    request: &Request,
) -> Result<SqlHold<S>, LockError> {
    let counted = Counted::count(record, Access::from(request.kind), chain)?;
    let record = counted.record().clone();
    let sent = Instant::now();
    let (store, name, holder) = (&record.store, &record.who.name, &record.who.holder);
    let token = match record.side {
        Kind::Read => store.reenter_read(name, holder).await?,
        Kind::Semaphore(_) => store.reenter_permit(name, holder).await?,
        _ => store.reenter(name, holder).await?,
    };
    let Some(token) = token else {
        record.gone();
        return Err(lost(&record.who.name));
    };
    // Only a plain lock's release reads the token it knows.
    if record.side == Kind::Reentrant {
        record.reentered(token);
    }
    Ok(counted.hold(alive, token, sent, request))
}

impl<S: SqlTaking> SqlHold<S> {
    /// Moves a fixed lease's end to `lease` from now, by the database's
    /// clock (a lease never shrinks).
    pub(crate) async fn extend(&mut self, lease: Duration) -> Result<(), LockError> {
        let record = self.record().clone();
        let name = record.who.name.clone();
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
            let (store, name, holder) = (&record.store, &record.who.name, &record.who.holder);
            let row = match record.side {
                Kind::Read => true,
                Kind::Semaphore(_) => store.extend_permit(name, holder, lease).await?,
                _ => store.extend(name, holder, lease).await?,
            };
            let line = match record.side {
                Kind::Reentrant | Kind::Semaphore(_) => true,
                _ => {
                    store
                        .renew_tickets(&[(name.as_str(), holder.as_str())], lease)
                        .await?[0]
                }
            };
            Ok::<_, LockError>((row && line).then_some(sent))
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
async fn give_back<S: SqlTaking>(
    record: Arc<Record<S>>,
    keep: Option<Instant>,
) -> Result<bool, LockError> {
    record.store.common().keeper.forget(&record);
    let keep = keep.filter(|k| *k > Instant::now());
    let released = give_back_retried(record.clone(), keep, 0).await;
    if let (Some(keep), Ok(true)) = (keep, &released) {
        let runtime = record.store.common().runtime.clone();
        runtime.spawn(async move {
            tokio::time::sleep_until(keep).await;
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
async fn give_back_once<S: SqlTaking>(
    record: &Record<S>,
    keep: Option<Instant>,
) -> Result<bool, LockError> {
    let store = &record.store;
    let (name, holder) = (&record.who.name, &record.who.holder);
    if let Some(keep) = keep.filter(|k| *k > Instant::now()) {
        let left = keep.saturating_duration_since(Instant::now());
        // A reader's minimum is its ticket's (and the readers' row's);
        // a fair lock's or writer's is its row's, its ticket dropped.
        let there = match record.side {
            Kind::Read => {
                store
                    .renew_tickets(&[(name.as_str(), holder.as_str())], left)
                    .await?[0]
            }
            Kind::Reentrant => store.keep(name, holder, left).await?,
            Kind::Semaphore(_) => store.keep_permit(name, holder, left).await?,
            Kind::Fair | Kind::Write => {
                let there = store.keep(name, holder, left).await?;
                let mut made = SqlTaking::made(store, &record.who);
                store.drop_ticket(&mut made, name, holder).await?;
                there
            }
        };
        if there && record.side != Kind::Read {
            record.kept.store(true, Ordering::Release);
        }
        return Ok(there && !record.deleted.is_set());
    }
    let holder = match record.kept.load(Ordering::Acquire) {
        true => Cow::Owned([record.who.holder.as_str(), super::KEPT].concat()),
        false => Cow::Borrowed(record.who.holder.as_str()),
    };
    let freed = match record.side {
        Kind::Reentrant => {
            let token = record.token.load(Ordering::Acquire);
            store.release(name, &holder, token).await?
        }
        Kind::Semaphore(_) => super::permits::give_back(&**store, name, &holder).await?,
        side => {
            let mut made = SqlTaking::made(store, &record.who);
            // Only this client's reads under this write may hold beside
            // its row.
            let reads_under = record.downgrade.holds_reads();
            leave(store, &mut made, name, &holder, side, reads_under).await?
        }
    };
    record.gone();
    Ok(freed)
}

/// The watchdog: renews the rows of the client's holds without a fixed
/// lease, all in one round, every third of the watchdog timeout.
pub(crate) struct Keeper<S: Rows> {
    /// By the record's address: kept and forgotten without a scan (an
    /// acquisition and a release each touch one entry).
    kept: Mutex<foldhash::HashMap<usize, Weak<Record<S>>>>,
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
    /// client lives: the first a third of the lease after the start (no
    /// hold is older), the table's first sweep with it.
    pub(crate) fn start(store: &Arc<S>) {
        let weak = Arc::downgrade(store);
        let common = store.common();
        let every = common.config.watchdog_timeout / 3;
        common.runtime.spawn(async move {
            let first = tokio::time::Instant::now() + every;
            let mut ticks = tokio::time::interval_at(first, every);
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
            .filter(|r| !r.deleted.is_set())
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
        // Rows: a plain lock's, a fair lock's and a writer's. Tickets: a
        // fair lock's, a reader's (and the readers' row) and a writer's.
        // Permits (and their names' permits' rows).
        let pairs = |keep: fn(Kind) -> bool| -> Vec<(&str, &str)> {
            records
                .iter()
                .filter(|r| keep(r.side))
                .map(|r| (r.who.name.as_str(), r.who.holder.as_str()))
                .collect()
        };
        let permit = |side| matches!(side, Kind::Semaphore(_));
        let has_row = |side| !matches!(side, Kind::Read | Kind::Semaphore(_));
        let (rows, lines, permits) = (pairs(has_row), pairs(Kind::in_line), pairs(permit));
        let lease = store.common().config.watchdog_timeout;
        let sent = Instant::now();
        let rows = match rows.is_empty() {
            true => Vec::new(),
            false => match store.renew(&rows, lease).await {
                Ok(renewed) => renewed,
                Err(_) => return,
            },
        };
        let lines = match lines.is_empty() {
            true => Vec::new(),
            false => match store.renew_tickets(&lines, lease).await {
                Ok(renewed) => renewed,
                Err(_) => return,
            },
        };
        let permits = match permits.is_empty() {
            true => Vec::new(),
            false => match store.renew_permits(&permits, lease).await {
                Ok(renewed) => renewed,
                Err(_) => return,
            },
        };
        let (mut rows, mut lines) = (rows.into_iter(), lines.into_iter());
        let mut permits = permits.into_iter();
        let mut n = 0;
        for record in &records {
            let row = has_row(record.side).then(|| rows.next().unwrap_or(false));
            let line = record.side.in_line().then(|| lines.next().unwrap_or(false));
            let permit = permit(record.side).then(|| permits.next().unwrap_or(false));
            // A reader holds by its ticket, a permit by its own row; the
            // others by their rows.
            let renewed = row.or(line).or(permit).unwrap_or(false);
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

crate::engine::seam::hold_by_inherent!(impl [S: SqlTaking] for SqlHold<S>);
