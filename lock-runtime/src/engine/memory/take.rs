//! One acquisition on a memory store, driven by the shared `kept` layer:
//! each try takes the name's entry or waits, on the name's wake-up or the
//! end of the lease that keeps it out, whichever comes first; a fair
//! waiter holds a place in the name's queue meanwhile ([`Made`], undone
//! when the acquisition fails or is dropped).

use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use super::Mem;
use super::hold::{Record, reenter};
use super::store::{Try, Waiting};
use crate::clock::valid_until;
use crate::error::LockError;
use crate::holder::Who;
use crate::kept::{Taken, Taking, Undo, listed, lost};
use crate::request::{Kind, Request};

impl Taking for Mem {
    crate::kept::taking_fields!(client | m | m, take by module);

    type Record = Record;
    type Made = Made;
    type More = ();
    const ENGINE: &'static str = super::ENGINE;

    fn made(self: &Arc<Self>, who: &Arc<Who>) -> Made {
        Made {
            mem: self.clone(),
            who: who.clone(),
            queued: false,
            entry: false,
        }
    }

    fn record(
        self: &Arc<Self>,
        request: &Request,
        who: &Arc<Who>,
        under: Option<&Arc<Record>>,
        taken: &Taken<()>,
        made: &mut Made,
        turn: Option<OwnedMutexGuard<()>>,
    ) -> Result<Arc<Record>, LockError> {
        let name = request.name.as_str();
        let record = Arc::new(Record {
            mem: self.clone(),
            base: crate::kept::Base::new(who, turn, under),
            side: request.kind,
            // The acquisition's runtime (the client's own when it is
            // polled outside one).
            runtime: tokio::runtime::Handle::try_current().unwrap_or_else(|_| self.runtime.clone()),
            fixed: !request.lease.renewed,
            until: Mutex::new(valid_until(taken.sent, request.lease.length)),
            renewal: Mutex::new(None),
        });
        // The entry learns its record, so that whatever ends it tells the
        // hold; one that ended meanwhile is a hold lost.
        let mut state = self.store.state();
        let Some(entry) = state.entry(name, &who.holder, Instant::now()) else {
            return Err(lost(name));
        };
        let told: std::sync::Weak<dyn super::store::Told> = Arc::downgrade(&record) as _;
        entry.record = Some(told);
        drop(state);
        made.entry = false;
        Ok(listed(&self.records, record, under))
    }
}

/// One try at the hold: taken at once when free, else a wait for the
/// name's next change or the end of the lease that keeps it out, and
/// again, until the deadline.
async fn take(
    mem: &Arc<Mem>,
    request: &Request,
    who: &Who,
    under: Option<&Arc<Record>>,
    made: &mut Made,
) -> Result<Taken<()>, LockError> {
    let holder = who.holder.as_str();
    let (name, side, lease) = (request.name.as_str(), request.kind, request.lease.length);
    let under = under.map(|write| write.who.holder.as_str());
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
            let once = request.once() || request.deadline.is_some_and(|d| now >= d);
            let tried = lock.try_take(holder, side, under, now + lease);
            match tried {
                Try::Taken => {
                    made.queued = false;
                    made.entry = true;
                    let token = state.token();
                    if let Some(entry) = state.entry(name, holder, now) {
                        entry.token = token;
                    }
                    return Ok(Taken {
                        token,
                        sent: now,
                        more: (),
                    });
                }
                // Out of time: a fair waiter's place goes with it now, not
                // once its undo runs (the next try must not find it).
                Try::Busy(_) if once => {
                    lock.leave_queue(holder);
                    made.queued = false;
                    state.tidy(name);
                    return Err(request.timed_out());
                }
                Try::Busy(until) => {
                    let lined = matches!(side, Kind::Fair | Kind::Semaphore(_));
                    made.queued = lined;
                    // A fair waiter or a permit's is counted by its place
                    // in the queue, which stays until its undo (when
                    // dropped) is done.
                    if waiting.is_none() && !lined {
                        waiting = Some(Waiting::count(&mem.store, name, lock));
                    }
                    (until, changed)
                }
            }
        };
        let wake = match (busy, request.deadline) {
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
    /// The hold it is for: the lock's name and the holder id.
    who: Arc<Who>,
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
            who: self.who.clone(),
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
        if let Some(lock) = state.locks.get_mut(&self.who.name) {
            if self.queued {
                lock.leave_queue(&self.who.holder);
            }
            if self.entry {
                lock.free(&self.who.holder);
            }
        }
        state.tidy(&self.who.name);
        (self.queued, self.entry) = (false, false);
        Ok(())
    }

    fn may_outlive(&self) -> bool {
        false
    }

    fn what(&self) -> String {
        self.who.name.clone()
    }
}
