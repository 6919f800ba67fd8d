//! A hold on a memory store once taken: the record a client keeps of its
//! entry (shared by a hold and its re-entries), its renewals, and the
//! guard's side of it: loss, `extend`, release. Taking one is in `take`.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use super::Mem;
use super::store::{State, Told};
use crate::background::Background;
use crate::clock::valid_until;
use crate::error::LockError;
use crate::holder::Chain;
use crate::kept::{Access, Counted, Hold, give_back_retried, lost};
use crate::request::Kind;
use crate::request::Request;

/// A client's entry for one name, shared by a hold and its re-entries.
pub(crate) struct Record {
    pub(super) mem: Arc<Mem>,
    /// Who the hold is, its chain's count, its loss, its turn and its
    /// downgrade.
    pub(crate) base: crate::kept::Base<Record>,
    pub(super) side: Kind,
    /// The runtime that acquired it: its renewals run there, and every
    /// instant the record reads is that runtime's (a test's paused clock),
    /// wherever the record is used (see [`Record::now`]).
    pub(super) runtime: Handle,
    /// A fixed lease (no renewals).
    pub(super) fixed: bool,
    /// Until when the hold counts as held, by the client's clock.
    pub(super) until: Mutex<Instant>,
    /// The task renewing the hold: the hold counts among the client's
    /// renewed ones while it runs (it ends with the hold, or with the
    /// runtime that took it).
    pub(super) renewal: Mutex<Option<tokio::task::AbortHandle>>,
}

crate::kept::base_of!(Record);

impl Drop for Record {
    fn drop(&mut self) {
        self.stop_renewing();
        crate::kept::unlist(&self.mem.records, &self.who);
    }
}

/// A hold on a memory store.
pub(crate) type MemHold = Hold<Record>;

impl Record {
    /// The entry is known gone: the hold is lost, and this client's next
    /// acquisition of the name may go ahead.
    pub(crate) fn gone(&self) {
        self.deleted.set();
        self.stop_renewing();
        drop(self.turn.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    /// Stops the renewals, if they run.
    fn stop_renewing(&self) {
        let task = self
            .renewal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(task) = task {
            task.abort();
        }
    }

    /// Whether the hold's renewals run.
    pub(super) fn renewing(&self) -> bool {
        self.renewal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|task| !task.is_finished())
    }

    fn until(&self) -> Instant {
        *self.until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Now, by the clock of the runtime that acquired the hold (a test's
    /// paused clock), wherever it is asked: a guard dropped at the end of
    /// a test is given back on the client's own runtime, whose clock is
    /// not the test's.
    pub(super) fn now(&self) -> Instant {
        let _clock = self.runtime.enter();
        Instant::now()
    }

    /// Starts the renewals of a hold without a fixed lease, on the runtime
    /// that acquired it: every third of the watchdog's lease until the
    /// hold is gone. A round whose renewal fails (a fault hook) leaves the
    /// lease to end; once the hold is lost by its own clock it is not
    /// brought back, and the record counts as gone.
    pub(super) fn start(self: &Arc<Record>) {
        if self.fixed {
            return;
        }
        let record = Arc::downgrade(self);
        let lease = self.mem.config.watchdog_timeout;
        let mut renewal = self.renewal.lock().unwrap_or_else(|p| p.into_inner());
        if self.deleted.is_set() {
            return;
        }
        let task = self.runtime.spawn(async move {
            loop {
                // The next round, or the moment the hold counts as lost if
                // that comes first (then it is known gone at once).
                let Some(wake) = record
                    .upgrade()
                    .map(|r| (r.now() + lease / 3).min(r.until()))
                else {
                    return;
                };
                tokio::time::sleep_until(wake).await;
                let Some(record) = record.upgrade() else {
                    return;
                };
                if crate::kept::Record::is_lost(&*record) {
                    record.gone();
                    return;
                }
                if record.renew(lease) {
                    crate::telemetry::renewed(1);
                }
            }
        });
        *renewal = Some(task.abort_handle());
    }

    /// One renewal to `lease` from now: whether it was made (no fault hook
    /// fails it, and the entry is still this hold's).
    fn renew(&self, lease: Duration) -> bool {
        let now = self.now();
        let state = self.mem.store.state();
        if state.failing.contains(&self.mem.id) || state.is_cut(&self.mem.id) {
            return false;
        }
        self.prolong(state, now, lease)
    }

    /// Moves the end of the hold's entry, and of the hold by the client's
    /// clock, to `lease` from `now` if that is later (a renewal, an
    /// `extend`): whether the entry is still this hold's (else the record
    /// is gone).
    fn prolong(&self, mut state: MutexGuard<'_, State>, now: Instant, lease: Duration) -> bool {
        let Some(entry) = state
            .entry(&self.who.name, &self.who.holder, now)
            .filter(|e| !e.kept)
        else {
            state.tidy(&self.who.name);
            drop(state);
            self.gone();
            return false;
        };
        entry.until = entry.until.max(now + lease);
        drop(state);
        let mut until = self.until.lock().unwrap_or_else(|p| p.into_inner());
        *until = (*until).max(valid_until(now, lease));
        true
    }
}

impl Told for Record {
    fn gone(&self) {
        Record::gone(self);
    }
}

impl crate::kept::Record for Record {
    // The runtime is the client's own, which lives while the hold does: a
    // dropped guard's release runs there even when the runtime that took
    // the hold (a test's) is gone; the record reads its instants by that
    // runtime's clock still.
    crate::kept::record_fields!(client | r | r.mem);

    fn is_lost(&self) -> bool {
        self.deleted.is_set() || self.now() >= self.until()
    }

    fn remaining(&self) -> Duration {
        if self.deleted.is_set() {
            return Duration::ZERO;
        }
        self.until().saturating_duration_since(self.now())
    }

    async fn lost(&self) {
        crate::kept::gone_or_ended(&self.deleted, || Some(self.until())).await;
    }

    fn give_back(
        self: Arc<Self>,
        keep: Option<Instant>,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'static {
        give_back_retried(self, keep, 0)
    }

    async fn give_back_once(self: Arc<Self>, keep: Option<Instant>) -> Result<bool, LockError> {
        give_back_once(&self, keep)
    }

    fn may_outlive(&self) -> bool {
        !crate::kept::Record::is_lost(self)
    }

    fn start(self: &Arc<Self>) {
        Record::start(self)
    }
}

/// Frees the record's entry, or keeps it until `keep` (a `hold_at_least`
/// minimum: it then ends by the clock): whether it was still this hold's.
/// A hold lost by its own clock is not kept.
fn give_back_once(record: &Record, keep: Option<Instant>) -> Result<bool, LockError> {
    let now = record.now();
    let lost = crate::kept::Record::is_lost(record);
    let mut state = record.mem.state()?;
    let there = match state.lock(&record.who.name, now) {
        None => false,
        Some(lock) => match keep.filter(|k| *k > now && !lost) {
            Some(keep) => match lock.holders.get_mut(&record.who.holder) {
                Some(entry) => {
                    entry.kept = true;
                    entry.until = keep;
                    entry.record = None;
                    // Its end moved: the waiters sleep until the new one.
                    lock.changed.notify_waiters();
                    true
                }
                None => false,
            },
            None => lock.free(&record.who.holder),
        },
    };
    state.tidy(&record.who.name);
    drop(state);
    record.gone();
    Ok(there)
}

/// A re-entry of `record`'s hold: a token of its own;
/// [`LockError::Lost`] when the entry is gone.
pub(super) async fn reenter(
    alive: Arc<Background>,
    record: Arc<Record>,
    chain: Chain,
    request: &Request,
) -> Result<MemHold, LockError> {
    let counted = Counted::count(record, Access::from(request.kind), chain)?;
    let record = counted.record().clone();
    let now = record.now();
    let token = {
        let mut state = record.mem.state()?;
        let held = state
            .entry(&record.who.name, &record.who.holder, now)
            .is_some();
        held.then(|| state.token())
    };
    let Some(token) = token else {
        record.gone();
        return Err(lost(&record.who.name));
    };
    Ok(counted.hold(alive, token, now, request))
}

impl MemHold {
    /// Moves a fixed lease's end to `lease` from now; one that already
    /// lasts at least that long is left as it is (a lease never shrinks).
    pub(crate) async fn extend(&mut self, lease: Duration) -> Result<(), LockError> {
        let record = self.record().clone();
        let name = &record.who.name;
        if !record.fixed {
            return Err(LockError::Config(format!(
                "lock `{name}`: extend is for fixed leases (acquired with .lease(..)); the \
                 watchdog keeps this guard's hold until release"
            )));
        }
        let now = record.now();
        if crate::kept::Record::is_lost(&*record) {
            return Err(lost(name));
        }
        if !record.prolong(record.mem.state()?, now, lease) {
            return Err(lost(name));
        }
        crate::telemetry::renewed(1);
        Ok(())
    }
}

crate::engine::seam::hold_by_inherent!(impl [] for MemHold);
