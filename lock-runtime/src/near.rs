//! Near clients: one per caller runtime, driven by that runtime.
//!
//! An engine's store client drives its connection from tasks of the runtime
//! it was made on. The client's own is made on the client's runtime thread,
//! so a call made from a caller's runtime through it wakes that thread twice
//! (about a third of an uncontended Redis acquire + release: issue 11; on
//! etcd, at 64 tasks, that one thread was the bottleneck: issue 24). So
//! acquire and release calls go through a client of the caller's own
//! runtime, made there, in the background, on its first lock call; until it
//! is ready the engine's own client serves. Each engine keeps one [`Near`]
//! of its kind of client (a Redis connection, an etcd channel).
//!
//! A near client serves only tasks of its own runtime: a call whose caller
//! left is finished on the client's runtime (`background::finish_on_drop`),
//! and a request it still had in flight on a near client counts as lost
//! (nothing need ever drive that runtime again). Each engine says how its
//! lost answers are made good.
//!
//! Runtime ids are never reused: the entry of a runtime that shut down is
//! never asked for again, and past [`NEAR_MAX`] entries all are dropped.

use std::fmt::Display;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

use tokio::runtime::{Handle, Id};

/// How many runtimes' near clients are kept at most.
const NEAR_MAX: usize = 64;

/// How long after a failed near client the next one is tried.
const NEAR_RETRY: Duration = Duration::from_secs(1);

/// The near clients (of type `T`) of one engine client.
pub(crate) struct Near<T> {
    /// The client's own runtime, which needs none.
    home: Id,
    /// Looked up on every acquire and release: hashed fast.
    states: Arc<Mutex<foldhash::HashMap<Id, State<T>>>>,
}

enum State<T> {
    /// Being made on that runtime.
    Making,
    Ready(T),
    /// Could not be made; tried again after [`NEAR_RETRY`].
    Failed(Instant),
}

type States<T> = Mutex<foldhash::HashMap<Id, State<T>>>;

fn states<T>(states: &States<T>) -> MutexGuard<'_, foldhash::HashMap<Id, State<T>>> {
    states.lock().unwrap_or_else(|p| p.into_inner())
}

impl<T: Clone + Send + 'static> Near<T> {
    /// No near clients yet; `home` is the client's own runtime.
    pub(crate) fn new(home: Id) -> Near<T> {
        Near {
            home,
            states: Arc::default(),
        }
    }

    /// The current runtime's near client, when it has one ready. The first
    /// call from a runtime starts `make` there and gets `None` (the caller
    /// then uses the engine's own client); so does a call on the client's
    /// runtime, or outside any runtime.
    pub(crate) fn here<F, M, E>(&self, make: F) -> Option<(Id, T)>
    where
        F: FnOnce() -> M,
        M: Future<Output = Result<T, E>> + Send + 'static,
        E: Display,
    {
        let runtime = Handle::try_current().ok()?;
        let id = runtime.id();
        if id == self.home {
            return None;
        }
        let mut all = states(&self.states);
        match all.get(&id) {
            Some(State::Ready(client)) => return Some((id, client.clone())),
            Some(State::Making) => return None,
            Some(State::Failed(at)) if at.elapsed() < NEAR_RETRY => return None,
            Some(State::Failed(_)) | None => {}
        }
        // Runtimes that shut down leave their entries behind: past a bound,
        // start over. A live runtime whose entry goes makes a new client at
        // its next call; calls in flight keep the old one until they finish.
        if all.len() >= NEAR_MAX {
            all.clear();
        }
        all.insert(id, State::Making);
        drop(all);
        let made = make();
        let home = Arc::downgrade(&self.states);
        runtime.spawn(async move {
            let state = match made.await {
                Ok(client) => State::Ready(client),
                Err(e) => {
                    tracing::debug!(error = %e, "no near client; using the client's own");
                    State::Failed(Instant::now())
                }
            };
            if let Some(home) = home.upgrade() {
                states(&home).insert(id, state);
            }
        });
        None
    }

    /// Forgets the near client of runtime `id` after it failed: the next
    /// call from that runtime makes a new one.
    #[cfg_attr(not(any(feature = "redis", feature = "zookeeper")), allow(dead_code))]
    pub(crate) fn forget(&self, id: Id) {
        states(&self.states).remove(&id);
    }
}
