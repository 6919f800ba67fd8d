//! The fault hooks of a memory store (DESIGN §12), by client id: what the
//! public [`MemoryStore`](crate::memory::MemoryStore) does to a store's
//! locks and switches, below the client (which it names by id).

use std::collections::HashSet;

use super::store::{State, Store};

impl Store {
    /// Ends every hold of lock `name` now; whether it was held.
    pub(crate) fn expire(&self, name: &str) -> bool {
        self.state().free_all(name)
    }

    /// Whether client `id`'s renewals fail.
    pub(crate) fn fail_renewals(&self, id: &str, failing: bool) {
        switch(&mut self.state().failing, id, failing);
    }

    /// Whether client `id` is cut off.
    pub(crate) fn cut(&self, id: &str, cut: bool) {
        switch(&mut self.state().cut, id, cut);
    }

    /// How many acquisitions wait in the store for lock `name`.
    pub(crate) fn waiting(&self, name: &str) -> usize {
        self.state()
            .locks
            .get(name)
            .map_or(0, |lock| lock.waiting + lock.queue.len())
    }
}

impl State {
    /// Ends every hold of `name` (each told its hold is lost) and wakes
    /// its waiters: whether it was held. Reads no clock: a hook may be
    /// called off the test's runtime.
    pub(crate) fn free_all(&mut self, name: &str) -> bool {
        let freed = self.locks.get_mut(name).is_some_and(|lock| lock.free_all());
        self.tidy(name);
        freed
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
