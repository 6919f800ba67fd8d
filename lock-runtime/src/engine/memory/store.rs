//! A memory store: the locks of every client in this process that names
//! it (`memory://<store>`), and its fault hooks' switches. Plain data
//! under one mutex: every step of the engine is one short critical
//! section, and waiters wait outside it on the name's [`Notify`].
//!
//! Time is tokio's, read by the caller ([`Instant::now`] in the task that
//! makes the call): under `tokio::time::pause()` a lease ends when the
//! test's clock passes it.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::request::Kind;

/// Every store of the process, by name: a store lives while a client or a
/// hooks handle names it.
static STORES: Mutex<BTreeMap<String, Weak<Store>>> = Mutex::new(BTreeMap::new());

/// The store named `name`, made when no client or handle names it.
pub(crate) fn named(name: &str) -> Arc<Store> {
    let mut stores = STORES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(store) = stores.get(name).and_then(Weak::upgrade) {
        return store;
    }
    stores.retain(|_, store| store.strong_count() > 0);
    let store = Arc::new(Store {
        name: name.to_owned(),
        state: Mutex::default(),
    });
    stores.insert(name.to_owned(), Arc::downgrade(&store));
    store
}

/// One store's locks and switches.
pub(crate) struct Store {
    pub(crate) name: String,
    state: Mutex<State>,
}

/// What a store keeps.
#[derive(Default)]
pub(crate) struct State {
    /// The last fencing token given, store-wide: every token is larger
    /// than every earlier one, of any name.
    token: u64,
    /// Per lock name, its holders and its fair queue.
    pub(crate) locks: HashMap<String, Lock>,
    /// Clients (by id) whose renewals fail.
    pub(crate) failing: HashSet<String>,
    /// Clients (by id) cut off: every call fails as on a cut link.
    pub(crate) cut: HashSet<String>,
}

/// One lock name.
#[derive(Default)]
pub(crate) struct Lock {
    /// Who holds it, by holder id.
    pub(crate) holders: BTreeMap<String, Entry>,
    /// A fair lock's or a semaphore's waiters' holder ids, head first.
    pub(crate) queue: VecDeque<String>,
    /// Woken at every change a waiter may be waiting for.
    pub(crate) changed: Arc<Notify>,
    /// Acquisitions waiting for a change (one per client for a plain
    /// lock: the client's other tasks queue in their process; a fair
    /// waiter or a permit's waits in `queue` instead).
    pub(crate) waiting: usize,
}

/// One holder's hold of a name.
pub(crate) struct Entry {
    pub(crate) side: Kind,
    /// The fencing token of the hold that made it.
    pub(crate) token: u64,
    /// The lease's end (a `hold_at_least` minimum's, once kept).
    pub(crate) until: Instant,
    /// Released, and kept only by a `hold_at_least` minimum.
    pub(crate) kept: bool,
    /// The holder's record, told when the entry goes for another reason
    /// than its own release.
    pub(crate) record: Option<Weak<dyn Told>>,
}

/// A holder's record, as an entry tells it that the entry is gone (ended,
/// taken away).
pub(crate) trait Told: Send + Sync {
    fn gone(&self);
}

/// The answer of one try at a name.
pub(crate) enum Try {
    /// Taken.
    Taken,
    /// Kept out: wait for a change of the name, or until this instant
    /// (when the lease that keeps it out ends).
    Busy(Option<Instant>),
}

impl Store {
    /// The store's state, locked.
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    /// The next fencing token.
    pub(crate) fn token(&mut self) -> u64 {
        self.token += 1;
        self.token
    }

    /// Lock `name`, its ended leases gone (their holders told), as of
    /// `now`; `None` when nobody holds or waits for it.
    pub(crate) fn lock(&mut self, name: &str, now: Instant) -> Option<&mut Lock> {
        let lock = self.locks.get_mut(name)?;
        let before = lock.holders.len();
        lock.holders.retain(|_, entry| {
            let live = entry.until > now;
            if !live {
                tell(entry);
            }
            live
        });
        if lock.holders.len() != before {
            lock.changed.notify_waiters();
        }
        Some(lock)
    }

    /// `holder`'s live entry of lock `name` as of `now`.
    pub(crate) fn entry(&mut self, name: &str, holder: &str, now: Instant) -> Option<&mut Entry> {
        self.lock(name, now)?.holders.get_mut(holder)
    }

    /// Lock `name`, made when missing, as of `now`.
    pub(crate) fn lock_or_new(&mut self, name: &str, now: Instant) -> &mut Lock {
        if self.lock(name, now).is_none() {
            self.locks.insert(name.to_owned(), Lock::default());
        }
        self.locks.get_mut(name).expect("just made")
    }

    /// Forgets lock `name` when nobody holds or waits for it any more.
    pub(crate) fn tidy(&mut self, name: &str) {
        if self.locks.get(name).is_some_and(|lock| {
            lock.holders.is_empty() && lock.queue.is_empty() && lock.waiting == 0
        }) {
            self.locks.remove(name);
        }
    }

    /// Whether client `id` is cut off.
    pub(crate) fn is_cut(&self, id: &str) -> bool {
        self.cut.contains(id)
    }
}

impl Lock {
    /// One try of `holder` at the lock as `side`: taken (its entry made,
    /// until `until`; its record learns of it once made) or kept out.
    /// `under`: the holder id of this client's own write that a read is
    /// taken under, which keeps everyone else out. A fair waiter or a
    /// permit's kept out keeps its place in the queue: a permit is taken
    /// while fewer than its bound of the name's entries are permits' and
    /// its place is among the first of the queue that many fill.
    pub(crate) fn try_take(
        &mut self,
        holder: &str,
        side: Kind,
        under: Option<&str>,
        until: Instant,
    ) -> Try {
        // A read under this client's write joins it only while that write
        // holds the name (a write lost meanwhile keeps nobody out).
        let under = under.is_some_and(|write| {
            self.holders
                .get(write)
                .is_some_and(|e| e.side == Kind::Write && !e.kept)
        });
        // Places a waiter may take at once, from the queue's head.
        let (free, places) = match side {
            Kind::Read => (
                under || !self.holders.values().any(|e| e.side != Kind::Read),
                1,
            ),
            Kind::Reentrant | Kind::Fair | Kind::Write => (self.holders.is_empty(), 1),
            Kind::Semaphore(permits) => {
                let permits = usize::try_from(permits).unwrap_or(usize::MAX);
                let others = self
                    .holders
                    .values()
                    .any(|e| !matches!(e.side, Kind::Semaphore(_)));
                let left = permits.saturating_sub(self.holders.len());
                (!others && left > 0, left)
            }
        };
        let lined = matches!(side, Kind::Fair | Kind::Semaphore(_));
        if lined && !self.queue.iter().any(|h| h == holder) {
            self.queue.push_back(holder.to_owned());
        }
        let first = !lined || self.queue.iter().take(places).any(|h| h == holder);
        if !(free && first) {
            return Try::Busy(self.holders.values().map(|e| e.until).min());
        }
        if lined {
            // The line moved: the waiters behind learn the new holder's end.
            self.queue.retain(|h| h != holder);
            self.changed.notify_waiters();
        }
        self.holders.insert(
            holder.to_owned(),
            Entry {
                side,
                token: 0,
                until,
                kept: false,
                record: None,
            },
        );
        Try::Taken
    }

    /// Removes `holder`'s fair ticket, if it has one; waiters behind it
    /// are told.
    pub(crate) fn leave_queue(&mut self, holder: &str) {
        let before = self.queue.len();
        self.queue.retain(|h| h != holder);
        if self.queue.len() != before {
            self.changed.notify_waiters();
        }
    }

    /// Removes `holder`'s entry: whether it had one. Waiters are told.
    pub(crate) fn free(&mut self, holder: &str) -> bool {
        let freed = self.holders.remove(holder).is_some();
        if freed {
            self.changed.notify_waiters();
        }
        freed
    }

    /// Removes every holder's entry (each told its hold is lost): whether
    /// there was one.
    pub(crate) fn free_all(&mut self) -> bool {
        let holders = std::mem::take(&mut self.holders);
        for entry in holders.values() {
            tell(entry);
        }
        self.changed.notify_waiters();
        !holders.is_empty()
    }
}

/// Tells an entry's record that its entry is gone.
fn tell(entry: &Entry) {
    if let Some(record) = entry.record.as_ref().and_then(Weak::upgrade) {
        record.gone();
    }
}

/// One acquisition counted among lock `name`'s waiters while it lives.
pub(crate) struct Waiting {
    store: Arc<Store>,
    name: String,
}

impl Waiting {
    /// Counts a waiter of `lock`, lock `name` of `store` (whose state the
    /// caller has locked).
    pub(crate) fn count(store: &Arc<Store>, name: &str, lock: &mut Lock) -> Waiting {
        lock.waiting += 1;
        Waiting {
            store: store.clone(),
            name: name.to_owned(),
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut state = self.store.state();
        if let Some(lock) = state.locks.get_mut(&self.name) {
            lock.waiting = lock.waiting.saturating_sub(1);
        }
        state.tidy(&self.name);
    }
}
