//! The memory engine (DESIGN §12): locks kept in this process, for tests.
//! Every client of the process whose URL is `memory://<store>` shares
//! store `<store>`'s locks, so one test can run several instances of a
//! service; a store is never shared with another process.
//!
//! It keeps the whole contract of the other engines: re-entry, fencing
//! tokens (one counter per store: every token is larger than every earlier
//! one of the store's life), leases that end by the clock, the watchdog, loss by the guard's
//! own clock, fair and read-write locks, semaphores, `hold_at_least`,
//! multi locks, `inspect` and `force_unlock`. Quorum locks are
//! [`LockError::Unsupported`], as on every engine but Redis.
//!
//! - **Virtual time.** Every instant is tokio's, and every timer is
//!   tokio's: under `tokio::time::pause()` (`#[tokio::test(start_paused =
//!   true)]`, with tokio's `test-util` feature) a 30 s lease ends when the
//!   test's clock passes 30 s, in no real time, and the watchdog renews on
//!   that clock. An acquisition and the operations read the clock in the
//!   task that makes the call; a hold reads it by the runtime that
//!   acquired it (`Record::now`), wherever it is used, and its renewals
//!   run there. A dropped guard's release runs on the client's own
//!   runtime, which lives while the hold does: a guard dropped as its
//!   test's runtime ends is still given back. So a client (the global one
//!   too) serves one `#[tokio::test]` after another.
//! - **The watchdog.** A hold without a fixed lease is renewed every third
//!   of [`Config::watchdog_timeout`]; a hold whose renewals fail is lost
//!   by the guard's clock when its lease ends.
//! - **Faults.** [`hooks`] (`lock_runtime::memory::store(name)`) ends
//!   holds, fails a client's renewals, and cuts a client off, so a test
//!   can drive `on_lost`, `on_busy = "skip"`, `fallback` and
//!   `hold_at_least` paths without a server.
//!
//! The engine goes through the seam alone: it keeps its holds in records
//! of the shared kind (`kept`), and its own code is this folder.

mod hold;
mod hooks;
mod ops;
pub(crate) mod store;
mod take;

use std::sync::Arc;

use tokio::runtime::Handle;

use crate::background::Background;
use crate::config::Config;
use crate::error::LockError;
use crate::info::LockInfo;
use crate::own::OwnHolds;
use crate::request::Request;

pub(crate) use hold::MemHold;

/// The engine's name in errors and metrics.
pub(crate) const ENGINE: &str = "memory";

/// What the tasks of a client on a memory store share.
pub(crate) struct Mem {
    /// Random per client: the first half of every holder id.
    pub(crate) id: String,
    pub(crate) config: Config,
    /// The client's background runtime (its own thread).
    pub(crate) runtime: Handle,
    /// The store the URL names.
    pub(crate) store: Arc<store::Store>,
    /// Per name, the turns of its mutex acquisitions (FIFO).
    turns: crate::kept::Turns,
    /// Per lock name and holder id, its record (for re-entries).
    records: crate::kept::Records<hold::Record>,
    /// This client's live guards, for `inspect`.
    pub(crate) own: OwnHolds,
}

impl Mem {
    /// A client of the store `config`'s URL names (`memory://<store>`).
    async fn connect(config: Config, runtime: Handle) -> Result<Arc<Mem>, LockError> {
        let store = store::named(store_name(config.url())?);
        Ok(Arc::new(Mem {
            id: uuid::Uuid::new_v4().to_string(),
            config,
            runtime,
            store,
            turns: crate::kept::Turns::default(),
            records: std::sync::Mutex::default(),
            own: OwnHolds::default(),
        }))
    }

    /// The store's state, locked for one step of this client; a transient
    /// [`LockError::Store`] when a fault hook cut the client off.
    fn state(&self) -> Result<std::sync::MutexGuard<'_, store::State>, LockError> {
        let state = self.store.state();
        match state.is_cut(&self.id) {
            true => Err(cut_off(&self.store.name)),
            false => Ok(state),
        }
    }

    /// How many of the client's holds are renewed now. Upgraded with the
    /// map unlocked: dropping a last `Arc` of a record locks the map.
    fn renewed(&self) -> usize {
        let records: Vec<_> = self
            .records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        records
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .filter(|record| record.renewing())
            .count()
    }
}

/// The store's name in a `memory://<store>` URL.
fn store_name(url: &str) -> Result<&str, LockError> {
    let name = url.strip_prefix("memory://").unwrap_or_default();
    if name.is_empty() || name.contains(['/', '?', '#', '@']) {
        return Err(LockError::Config(format!(
            "{url:?}: a memory URL is memory://<store>, a plain name (`memory://shop`): every \
             client of this process that names the store shares its locks"
        )));
    }
    Ok(name)
}

/// The error of a call of a client that a fault hook cut off.
fn cut_off(store: &str) -> LockError {
    LockError::Store {
        engine: ENGINE,
        message: format!("cut off from memory store `{store}` (a fault hook: heal it)"),
        transient: true,
    }
}

impl crate::engine::seam::Engine for Mem {
    const NAME: &'static str = ENGINE;
    const IN_PROCESS: bool = true;
    const SEMAPHORES: bool = true;
    type Hold = MemHold;

    fn connect(
        config: Config,
        runtime: Handle,
    ) -> impl Future<Output = Result<Arc<Self>, LockError>> + Send {
        Mem::connect(config, runtime)
    }

    fn id(&self) -> &str {
        &self.id
    }

    fn config(&self) -> &Config {
        &self.config
    }

    fn runtime(&self) -> &Handle {
        &self.runtime
    }

    fn renewed(&self) -> usize {
        Mem::renewed(self)
    }

    fn acquire(
        self: Arc<Self>,
        alive: Arc<Background>,
        request: Request,
    ) -> impl Future<Output = Result<MemHold, LockError>> + Send + 'static {
        crate::kept::acquire(alive, self, request)
    }

    // The operations are done as they are asked, in the caller's task (on
    // its clock): what the client then awaits on its runtime is ready.
    fn inspect(
        self: Arc<Self>,
        name: String,
    ) -> impl Future<Output = Result<Option<LockInfo>, LockError>> + Send + 'static {
        std::future::ready(ops::inspect(&self, &name))
    }

    fn locks(
        self: Arc<Self>,
        pattern: String,
    ) -> impl Future<Output = Result<Vec<LockInfo>, LockError>> + Send + 'static {
        std::future::ready(ops::locks(&self, &pattern))
    }

    fn force_unlock(
        self: Arc<Self>,
        name: String,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'static {
        std::future::ready(ops::force_unlock(&self, &name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_configuration_says_it_is_of_this_process_only() {
        let shown = format!("{:?}", Config::new("memory://shop"));
        assert!(shown.contains("in this process only"), "{shown}");
        let redis = format!("{:?}", Config::new("redis://127.0.0.1:1"));
        assert!(!redis.contains("in this process only"), "{redis}");
    }

    #[test]
    fn a_memory_url_names_a_store() {
        assert_eq!(store_name("memory://shop").ok(), Some("shop"));
        for bad in [
            "memory://",
            "memory://a/b",
            "memory://x?y=1",
            "memory://u@x",
        ] {
            assert!(
                matches!(store_name(bad), Err(LockError::Config(_))),
                "{bad}"
            );
        }
    }
}
