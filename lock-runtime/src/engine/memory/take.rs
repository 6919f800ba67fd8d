//! One acquisition on a memory store, driven by the shared `kept` layer:
//! each try takes the name's entry or waits, on the name's wake-up or the
//! end of the lease that keeps it out, whichever comes first; a fair
//! waiter holds a place in the name's queue meanwhile ([`Made`], undone
//! when the acquisition fails or is dropped).

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use super::hold::{MemHold, Record, reenter};
use super::store::{Try, Waiting};
use super::{Mem, Side};
use crate::background::Background;
use crate::clock::valid_until;
use crate::error::LockError;
use crate::holder::Chain;
use crate::kept::{Deleted, Downgrade, Taken, Taking, Undo, list, lost};
use crate::request::{Options, Target, timed_out};

/// Who takes a hold, and on which side.
type How<'a> = crate::kept::How<'a, Record, Side>;

impl Taking for Mem {
    crate::kept::taking_fields!(client | m | m);

    type Record = Record;
    type Side = Side;
    type Made = Made;
    type More = ();
    const ENGINE: &'static str = super::ENGINE;

    fn side(target: &Target) -> Result<Side, LockError> {
        Ok(Side::of(target))
    }

    fn reenter<'a>(
        alive: Arc<Background>,
        record: Arc<Record>,
        side: Side,
        chain: Chain,
        options: &'a Options,
        metric: &'static str,
    ) -> impl Future<Output = Result<MemHold, LockError>> + Send + 'a {
        reenter(alive, record, side, chain, options, metric)
    }

    fn made(self: &Arc<Self>, holder: &str) -> Made {
        Made {
            mem: self.clone(),
            name: String::new(),
            holder: holder.to_owned(),
            queued: false,
            entry: false,
        }
    }

    fn take<'a>(
        self: &'a Arc<Self>,
        target: &'a Target,
        options: &'a Options,
        how: &'a How<'a>,
        made: &'a mut Made,
    ) -> impl Future<Output = Result<Taken<()>, LockError>> + Send + 'a {
        take(self, target, options, how, made)
    }

    fn record(
        self: &Arc<Self>,
        name: &str,
        options: &Options,
        how: &How<'_>,
        taken: &Taken<()>,
        made: &mut Made,
        turn: Option<OwnedMutexGuard<()>>,
    ) -> Result<Arc<Record>, LockError> {
        let lease = options.lease.unwrap_or(self.config.watchdog_timeout);
        let record = Arc::new(Record {
            mem: self.clone(),
            name: name.to_owned(),
            holder: how.holder.to_owned(),
            side: how.side,
            // The acquisition's runtime (the client's own when it is
            // polled outside one).
            runtime: tokio::runtime::Handle::try_current().unwrap_or_else(|_| self.runtime.clone()),
            fixed: options.lease.is_some(),
            until: Mutex::new(valid_until(taken.sent, lease)),
            holds: AtomicUsize::new(1),
            deleted: Deleted::default(),
            turn: Mutex::new(turn),
            downgrade: Downgrade::new(how.under.cloned()),
            renewal: Mutex::new(None),
        });
        // The entry learns its record, so that whatever ends it tells the
        // hold; one that ended meanwhile is a hold lost.
        let mut state = self.store.state();
        let Some(entry) = state.entry(name, how.holder, Instant::now()) else {
            return Err(lost(name));
        };
        let told: std::sync::Weak<dyn super::store::Told> = Arc::downgrade(&record) as _;
        entry.record = Some(told);
        drop(state);
        made.entry = false;
        list(&self.records, &record, how.under);
        record.start();
        Ok(record)
    }
}

/// One try at the hold: taken at once when free, else a wait for the
/// name's next change or the end of the lease that keeps it out, and
/// again, until the deadline.
async fn take(
    mem: &Arc<Mem>,
    target: &Target,
    options: &Options,
    how: &How<'_>,
    made: &mut Made,
) -> Result<Taken<()>, LockError> {
    let name = target.name();
    let lease = options.lease.unwrap_or(mem.config.watchdog_timeout);
    let under = how.under.map(|write| write.holder.as_str());
    made.name = name.to_owned();
    // Counted among the name's waiters from its first wait until it is
    // done (taken, out of time, failed or dropped).
    let mut waiting = None;
    loop {
        let now = Instant::now();
        let (busy, mut changed) = {
            let mut state = mem.state()?;
            let lock = state.lock_or_new(name, now);
            // Armed before the try, under the store's lock: a change after
            // the try wakes this waiter.
            let mut changed = Box::pin(lock.changed.clone().notified_owned());
            changed.as_mut().enable();
            let once = options.wait == Some(std::time::Duration::ZERO)
                || how.deadline.is_some_and(|d| now >= d);
            let tried = lock.try_take(how.holder, how.side, under, now + lease);
            match tried {
                Try::Taken => {
                    made.queued = false;
                    made.entry = true;
                    return Ok(Taken {
                        token: state.token(),
                        sent: now,
                        more: (),
                    });
                }
                // Out of time: a fair waiter's place goes with it now, not
                // once its undo runs (the next try must not find it).
                Try::Busy(_) if once => {
                    lock.leave_queue(how.holder);
                    made.queued = false;
                    state.tidy(name);
                    return Err(timed_out(target, options));
                }
                Try::Busy(until) => {
                    made.queued = how.side == Side::Fair;
                    // A fair waiter is counted by its place in the queue,
                    // which stays until its undo (when dropped) is done.
                    if waiting.is_none() && how.side != Side::Fair {
                        waiting = Some(Waiting::count(&mem.store, name, lock));
                    }
                    (until, changed)
                }
            }
        };
        let wake = match (busy, how.deadline) {
            (Some(until), Some(deadline)) => Some(until.min(deadline)),
            (until, deadline) => until.or(deadline),
        };
        match wake {
            Some(at) => {
                tokio::select! {
                    () = changed.as_mut() => {}
                    () = tokio::time::sleep_until(at) => {}
                }
            }
            None => changed.await,
        }
    }
}

/// What an acquisition has made in the store so far: a fair waiter's
/// place in the queue, or an entry not yet handed to its record. Undone
/// when the acquisition fails or is dropped.
pub(crate) struct Made {
    mem: Arc<Mem>,
    name: String,
    holder: String,
    queued: bool,
    entry: bool,
}

impl Undo for Made {
    fn take(&mut self) -> Option<Made> {
        if !self.queued && !self.entry {
            return None;
        }
        let made = Made {
            mem: self.mem.clone(),
            name: self.name.clone(),
            holder: self.holder.clone(),
            queued: self.queued,
            entry: self.entry,
        };
        (self.queued, self.entry) = (false, false);
        Some(made)
    }

    async fn clear(&mut self) -> Result<(), LockError> {
        // Undone whatever the fault hooks say: the waiter's own process
        // forgets it, as a server forgets a dead session's. On the client's
        // runtime, whose clock is not the test's: no lease is judged here.
        let mut state = self.mem.store.state();
        if let Some(lock) = state.locks.get_mut(&self.name) {
            if self.queued {
                lock.leave_queue(&self.holder);
            }
            if self.entry {
                lock.free(&self.holder);
            }
        }
        state.tidy(&self.name);
        (self.queued, self.entry) = (false, false);
        Ok(())
    }

    fn may_outlive(&self) -> bool {
        false
    }

    fn what(&self) -> String {
        self.name.clone()
    }
}
