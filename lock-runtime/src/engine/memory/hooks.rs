//! Fault hooks for a memory store (DESIGN §12): what a test does to the
//! locks of a store to drive its service's loss, busy and fallback paths
//! without a server.

use std::sync::Arc;

use super::store::{self, State, Store};
use crate::client::LockClient;

/// A handle on memory store `name` (the store of every client whose URL is
/// `memory://<name>`), made when no client names it yet; the store lives
/// while a client or a handle names it.
pub fn store(name: &str) -> MemoryStore {
    MemoryStore {
        store: store::named(name),
    }
}

/// The fault hooks of one memory store (see [`store`]).
#[derive(Clone)]
pub struct MemoryStore {
    store: Arc<Store>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("name", &self.store.name)
            .finish()
    }
}

impl MemoryStore {
    /// Ends every hold of lock `name` now, as if its lease ran out: the
    /// holders' guards count as lost at once (`lost()` resolves, `on_lost`
    /// runs, their release is [`LockError::Lost`](crate::LockError::Lost))
    /// and the waiters are woken. Whether it was held.
    pub fn expire(&self, name: &str) -> bool {
        self.store.free_all(name)
    }

    /// While `failing`, every renewal of `client`'s holds fails: a hold
    /// without a fixed lease ends when its lease does (the watchdog's
    /// lease, [`Config::watchdog_timeout`](crate::Config::watchdog_timeout)),
    /// and its guard counts as lost then.
    pub fn fail_renewals(&self, client: &LockClient, failing: bool) {
        switch(&mut self.store.state().failing, client, failing);
    }

    /// Cuts `client` off: each of its calls fails with a transient
    /// [`LockError::Store`](crate::LockError::Store), as on a cut link (a
    /// waiting acquisition tries again until its wait ends), and its holds
    /// are not renewed. Its holds stay in the store until their leases
    /// end. Until [`heal`](Self::heal).
    pub fn partition(&self, client: &LockClient) {
        switch(&mut self.store.state().cut, client, true);
    }

    /// How many acquisitions wait in the store for lock `name` (a plain
    /// lock's: one per client, whose other tasks queue in their process;
    /// a fair or read-write lock's: each): what a test awaits, instead of
    /// sleeping, before it releases a lock to a waiter.
    pub fn waiting(&self, name: &str) -> usize {
        self.store
            .state()
            .locks
            .get(name)
            .map_or(0, |lock| lock.waiting + lock.queue.len())
    }

    /// Ends [`partition`](Self::partition): `client`'s calls reach the
    /// store again.
    pub fn heal(&self, client: &LockClient) {
        switch(&mut self.store.state().cut, client, false);
    }
}

/// Puts `client` in `set` or takes it out.
fn switch(set: &mut std::collections::HashSet<String>, client: &LockClient, on: bool) {
    let id = client.id().to_owned();
    if on {
        set.insert(id);
    } else {
        set.remove(&id);
    }
}

impl Store {
    /// Ends every hold of `name` (see [`MemoryStore::expire`]). Reads no
    /// clock: a hook may be called off the test's runtime.
    pub(crate) fn free_all(&self, name: &str) -> bool {
        let mut state = self.state();
        let freed = state
            .locks
            .get_mut(name)
            .is_some_and(|lock| lock.free_all());
        State::tidy(&mut state, name);
        freed
    }
}
