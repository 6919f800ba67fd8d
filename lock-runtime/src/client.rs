//! The client: one connection, one pub/sub path, one watchdog per client.

use std::fmt;
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::mpsc;

use crate::background::{self, Background};
use crate::conn::Conn;
use crate::inspect::LockInfo;
use crate::local::LocalQueues;
use crate::lock::multi::MultiLock;
use crate::lock::read_write::ReadWriteLock;
use crate::lock::segmented::SegmentedLock;
use crate::lock::{LockBuilder, Target};
use crate::own::OwnHolds;
use crate::pubsub::PubSub;
use crate::watchdog::{self, Watchdog};
use crate::{Config, LockError};

/// A connection to Redis that hands out locks. One per process is the norm;
/// cloning is cheap and shares everything.
///
/// Dropping the last clone (and the last guard) stops the client's
/// background thread.
#[derive(Clone)]
pub struct LockClient {
    inner: Arc<Inner>,
}

struct Inner {
    core: Arc<Core>,
    // Dropped after `core`'s last user here: stops the runtime thread.
    _background: Background,
}

/// What the client's tasks share.
pub(crate) struct Core {
    /// Random per client: the first half of every holder id.
    pub(crate) id: String,
    /// Standalone, Sentinel or Cluster (see [`crate::conn`]).
    pub(crate) conn: Conn,
    pub(crate) config: Config,
    pub(crate) pubsub: PubSub,
    pub(crate) watchdog: Watchdog,
    pub(crate) local: LocalQueues,
    /// This client's live guards, for `inspect`.
    pub(crate) own: OwnHolds,
    pub(crate) runtime: Handle,
}

impl LockClient {
    /// Connects to Redis. Fails with [`LockError::Config`] for a configuration
    /// that cannot work and [`LockError::Redis`] when the server cannot be
    /// reached within the connect timeout.
    pub async fn connect(config: Config) -> Result<LockClient, LockError> {
        config.check()?;
        crate::telemetry::describe();
        #[cfg(feature = "tls")]
        let _ = rustls::crypto::ring::default_provider().install_default();
        let background = Background::start()?;
        let runtime = background.handle().clone();
        let handle = runtime.clone();
        let core = background::run(&runtime, async move {
            let (pushes_in, pushes) = mpsc::unbounded_channel();
            let conn = tokio::time::timeout(
                config.connect_timeout,
                Conn::connect(&config, pushes_in, handle.clone()),
            )
            .await
            .map_err(|_| {
                LockError::Redis(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "timed out connecting to redis",
                )))
            })
            .and_then(|conn| conn)
            .map_err(|e| config.connect_error(e))?;
            let pubsub = PubSub::start(conn.clone(), pushes);
            let period = config.watchdog_timeout / 3;
            let core = Arc::new(Core {
                id: uuid::Uuid::new_v4().to_string(),
                conn,
                config,
                pubsub,
                watchdog: Watchdog::default(),
                local: LocalQueues::default(),
                own: OwnHolds::default(),
                runtime: handle,
            });
            watchdog::spawn(Arc::downgrade(&core), period);
            Ok::<_, LockError>(core)
        })
        .await??;
        Ok(LockClient {
            inner: Arc::new(Inner {
                core,
                _background: background,
            }),
        })
    }

    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.inner.core
    }

    /// This client's id: the first half of the holder ids it writes.
    pub fn id(&self) -> &str {
        &self.inner.core.id
    }

    /// The configuration the client was built from.
    pub fn config(&self) -> &Config {
        &self.inner.core.config
    }

    /// Number of holds the watchdog is keeping alive.
    pub fn renewed_locks(&self) -> usize {
        self.inner.core.watchdog.len()
    }

    /// A reentrant lock (Redisson's `RLock`): one holder at a time, which may
    /// take it again inside its guard's [`scope`](crate::LockGuard::scope).
    pub fn lock(&self, name: impl Into<String>) -> LockBuilder {
        LockBuilder::new(self.clone(), Target::Reentrant { name: name.into() })
    }

    /// A fair lock (Redisson's `RFairLock`): a reentrant lock that goes to
    /// waiters in the order they first asked for it, across tasks and
    /// clients. A waiter that gives up or dies does not block those behind
    /// it (see [`Config::fair_wait_timeout`]).
    pub fn fair_lock(&self, name: impl Into<String>) -> LockBuilder {
        LockBuilder::new(self.clone(), Target::Fair { name: name.into() })
    }

    /// A read-write lock (Redisson's `RReadWriteLock`): take its
    /// [`read`](ReadWriteLock::read) side (shared) or its
    /// [`write`](ReadWriteLock::write) side (exclusive).
    pub fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock::new(self.clone(), name.into())
    }

    /// Several reentrant locks of this client taken as one, all or none
    /// (Redisson's `MultiLock`). For locks on several clients (servers) or
    /// of other kinds, build a [`MultiLock`] with `with` / `with_lock`.
    pub fn multi_lock<I>(&self, names: I) -> MultiLock
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        names
            .into_iter()
            .fold(MultiLock::new(), |multi, name| multi.with(self, name))
    }

    /// A lock split into `segments` reentrant locks (segment `i` is the lock
    /// `{name:seg:i}`, its own cluster hash tag): one holder per segment at a
    /// time, all segments taken in ascending order. See [`SegmentedLock`].
    pub fn segmented_lock(&self, name: impl Into<String>, segments: usize) -> SegmentedLock {
        SegmentedLock::on_client(self.clone(), name.into(), segments)
    }

    /// What lock `name` looks like in Redis, whatever its kind (recognised
    /// by its layout, see [`LockInfo`]): its holders with their hold counts,
    /// the remaining lease, a fair lock's queue, a read-write lock's mode.
    /// `None` when it is free. For holder ids of this client, each holder
    /// also lists its live guards (token, task, age). Works on locks held
    /// by any client, Redisson's included. Read in one script call.
    ///
    /// Fails with [`LockError::WrongType`] when the key holds something
    /// that is not a lock.
    pub async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let core = self.inner.core.clone();
        let name = name.to_owned();
        crate::background::run(&core.runtime.clone(), async move {
            crate::inspect::inspect(&core, &name).await
        })
        .await?
    }

    /// The held locks whose names match `pattern` (glob-style, as Redis
    /// `SCAN ... MATCH`: `"stock:*"`; `"*"` for all), with what
    /// [`inspect`](Self::inspect) tells of each, sorted by name. Scans every
    /// master of a cluster. Hashes that are not locks are skipped.
    ///
    /// An operator's tool: it walks the whole key space (`SCAN`, which does
    /// not block the server, then one call per lock found). A lock taken or
    /// freed during the walk may or may not be listed.
    pub async fn locks(&self, pattern: &str) -> Result<Vec<LockInfo>, LockError> {
        let core = self.inner.core.clone();
        let pattern = pattern.to_owned();
        crate::background::run(&core.runtime.clone(), async move {
            crate::inspect::locks(&core, &pattern).await
        })
        .await?
    }

    /// Frees lock `name` whatever its kind and whoever holds it, and wakes
    /// every waiter (Redisson's `forceUnlock`): the lock's hash goes, with a
    /// read-write lock's read holds and a fair lock's queue (its waiters ask
    /// again when woken). The fencing token counter stays, so tokens keep
    /// rising. Returns whether a lock was there.
    ///
    /// The holder is not told at once: its guard learns the loss at its next
    /// renewal (watchdog leases; [`LockGuard::lost`](crate::LockGuard::lost)
    /// resolves) or at its release ([`LockError::Lost`]). An operator's tool
    /// for a lock whose holder is stuck; a working holder loses its
    /// exclusion.
    pub async fn force_unlock(&self, name: &str) -> Result<bool, LockError> {
        let core = self.inner.core.clone();
        let name = name.to_owned();
        crate::background::run(&core.runtime.clone(), async move {
            crate::inspect::force_unlock(&core, &name).await
        })
        .await?
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("id", &self.inner.core.id)
            .field("config", &self.inner.core.config)
            .finish()
    }
}
