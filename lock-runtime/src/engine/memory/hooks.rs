//! The fault hooks of a memory store (DESIGN §12), by client id: what the
//! public [`MemoryStore`](crate::memory::MemoryStore) does to a store's
//! locks and switches, below the client (which it names by id).

use std::collections::HashSet;
use std::sync::Arc;

use super::store::{self, State, Store};

/// A handle on one memory store's hooks; the store lives while a client
/// or a handle names it.
#[derive(Clone)]
pub(crate) struct Hooks {
    store: Arc<Store>,
}

impl Hooks {
    /// The hooks of store `name`, made when no client names it yet.
    pub(crate) fn named(name: &str) -> Hooks {
        Hooks {
            store: store::named(name),
        }
    }

    /// The store's name.
    pub(crate) fn name(&self) -> &str {
        &self.store.name
    }

    /// Ends every hold of lock `name` now; whether it was held.
    pub(crate) fn expire(&self, name: &str) -> bool {
        self.store.free_all(name)
    }

    /// Whether client `id`'s renewals fail.
    pub(crate) fn fail_renewals(&self, id: &str, failing: bool) {
        switch(&mut self.store.state().failing, id, failing);
    }

    /// Whether client `id` is cut off.
    pub(crate) fn cut(&self, id: &str, cut: bool) {
        switch(&mut self.store.state().cut, id, cut);
    }

    /// How many acquisitions wait in the store for lock `name`.
    pub(crate) fn waiting(&self, name: &str) -> usize {
        self.store
            .state()
            .locks
            .get(name)
            .map_or(0, |lock| lock.waiting + lock.queue.len())
    }
}

/// Puts client `id` in `set` or takes it out.
fn switch(set: &mut HashSet<String>, id: &str, on: bool) {
    if on {
        set.insert(id.to_owned());
    } else {
        set.remove(id);
    }
}

impl Store {
    /// Ends every hold of `name` (see [`Hooks::expire`]). Reads no clock:
    /// a hook may be called off the test's runtime.
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
