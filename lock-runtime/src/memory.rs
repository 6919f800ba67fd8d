//! The memory engine (feature `memory`, URLs `memory://<store>`; DESIGN
//! §12): locks kept in this process, for tests of services that lock, and
//! its fault hooks ([`store`]).
//!
//! Every client of the process that names the same store shares its
//! locks: two clients are two instances of a service. It keeps the whole
//! contract of the other engines, and every timer it uses is tokio's: on a
//! paused clock (`#[tokio::test(start_paused = true)]`, tokio's
//! `test-util` feature) a lease ends when the test's clock passes it, in no
//! real time. A hold's renewals run on the runtime that acquired it, and
//! a hold reads its instants by that runtime's clock; a guard dropped as
//! its test ends is given back on the client's own runtime. So one client
//! (the global one too) serves one test's runtime after another.
//!
//! Two tests that run at once each have a clock of their own: when they
//! share a store, give each its own lock names (or each its own store), as
//! a lease is judged by the clock of whoever looks at it. Fencing tokens
//! rise within a store's life (while a client or a handle names it). A
//! store is never shared with another process, and `lockctl` refuses
//! `memory://` URLs.
//!
//! ```
//! use std::time::Duration;
//! use lock_runtime::{distributed_lock, memory, Config, LockClient, LockError};
//!
//! #[distributed_lock(key = "report:<day>", on_busy = "skip", client = locks)]
//! async fn report(locks: &LockClient, day: u32, runs: &mut u32) -> Result<(), LockError> {
//!     *runs += 1;
//!     Ok(())
//! }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), LockError> {
//! let a = LockClient::connect(Config::new("memory://doc-shop")).await?;
//! let b = LockClient::connect(Config::new("memory://doc-shop")).await?;
//! let store = memory::store("doc-shop");
//! let mut runs = 0;
//!
//! // Another instance holds the report's lock: this one skips it.
//! let held = b.lock("report:7").lease(Duration::from_secs(600)).acquire().await?;
//! report(&a, 7, &mut runs).await?;
//! assert_eq!(runs, 0);
//!
//! // Ten minutes later by the test's clock (none really), the lease is over.
//! tokio::time::sleep(Duration::from_secs(601)).await;
//! assert!(held.is_lost());
//! report(&a, 7, &mut runs).await?;
//! assert_eq!(runs, 1);
//!
//! // Faults: a hold taken away, a client cut off.
//! let guard = a.lock("stock:42").acquire().await?;
//! store.expire("stock:42");
//! assert!(guard.is_lost());
//! store.partition(&a);
//! assert!(a.lock("stock:42").try_acquire().await.unwrap_err().is_transient());
//! store.heal(&a);
//! assert!(a.lock("stock:42").try_acquire().await?.is_some());
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

use crate::client::LockClient;
use crate::engine::memory::store::{self, Store};

/// A handle on memory store `name` (the store of every client whose URL is
/// `memory://<name>`), made when no client names it yet; the store lives
/// while a client or a handle names it.
pub fn store(name: &str) -> MemoryStore {
    MemoryStore(store::named(name))
}

/// The fault hooks of one memory store (see [`store`]).
#[derive(Clone)]
pub struct MemoryStore(Arc<Store>);

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("name", &self.0.name)
            .finish()
    }
}

impl MemoryStore {
    /// Ends every hold of lock `name` now, as if its lease ran out: the
    /// holders' guards count as lost at once (`lost()` resolves, `on_lost`
    /// runs, their release is [`LockError::Lost`](crate::LockError::Lost))
    /// and the waiters are woken. Whether it was held.
    pub fn expire(&self, name: &str) -> bool {
        self.0.expire(name)
    }

    /// While `failing`, every renewal of `client`'s holds fails: a hold
    /// without a fixed lease ends when its lease does (the watchdog's
    /// lease, [`Config::watchdog_timeout`](crate::Config::watchdog_timeout)),
    /// and its guard counts as lost then (`lost()` resolves, and the
    /// client's next acquisition of the name goes ahead although the lost
    /// guard is not dropped yet).
    pub fn fail_renewals(&self, client: &LockClient, failing: bool) {
        self.0.fail_renewals(client.id(), failing);
    }

    /// Cuts `client` off: each of its calls fails with a transient
    /// [`LockError::Store`](crate::LockError::Store), as on a cut link (a
    /// waiting acquisition tries again until its wait ends), and its holds
    /// are not renewed. Its holds stay in the store until their leases
    /// end. Until [`heal`](Self::heal).
    pub fn partition(&self, client: &LockClient) {
        self.0.cut(client.id(), true);
    }

    /// Ends [`partition`](Self::partition): `client`'s calls reach the
    /// store again.
    pub fn heal(&self, client: &LockClient) {
        self.0.cut(client.id(), false);
    }

    /// How many acquisitions wait in the store for lock `name` (a plain
    /// lock's: one per client, whose other tasks queue in their process;
    /// a fair or read-write lock's: each): what a test awaits, instead of
    /// sleeping, before it releases a lock to a waiter.
    pub fn waiting(&self, name: &str) -> usize {
        self.0.waiting(name)
    }
}
