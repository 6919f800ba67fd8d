//! The client: one engine's connection to its store (see `engine`), and
//! the runtime thread its background work runs on.

use std::fmt;
use std::sync::Arc;

use tokio::runtime::Handle;

use crate::background::{self, Background};
use crate::config::Config;
use crate::engine::{Connected, Store};
use crate::error::LockError;

/// A connection to the lock store (Redis, etcd, ZooKeeper, PostgreSQL or
/// MySQL/MariaDB: the URL's scheme picks it) that hands out locks. One per
/// process is the norm; cloning is cheap and shares everything.
///
/// Dropping the last clone (and the last guard) stops the client's
/// background thread.
#[derive(Clone)]
pub struct LockClient {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Connected,
    /// The client's runtime thread: stopped when the last clone and the
    /// last hold (which keeps a reference) are gone.
    background: Arc<Background>,
}

impl LockClient {
    /// Connects to the store the configuration's URL names (Redis by
    /// default; etcd, ZooKeeper, PostgreSQL and MySQL/MariaDB with their
    /// features). Fails with [`LockError::Config`] for a configuration that
    /// cannot work (an engine this build does not have names the feature
    /// to enable) and with [`LockError::Connect`] (Redis) or
    /// [`LockError::Store`] (the other engines) when the store cannot be
    /// reached within the connect timeout.
    pub async fn connect(config: Config) -> Result<LockClient, LockError> {
        config.check()?;
        let store = Store::of(&config)?;
        crate::telemetry::describe();
        #[cfg(feature = "tls")]
        let _ = rustls::crypto::ring::default_provider().install_default();
        let background = Background::start()?;
        let runtime = background.handle().clone();
        let engine = store.connect(config, runtime).await?;
        Ok(LockClient {
            inner: Arc::new(Inner {
                engine,
                background: Arc::new(background),
            }),
        })
    }

    /// The client's runtime thread, kept running by every reference (a
    /// hold keeps one, so a guard outliving its client still releases).
    pub(crate) fn alive(&self) -> Arc<Background> {
        self.inner.background.clone()
    }

    /// The store this client's locks live on.
    pub(crate) fn engine(&self) -> &Connected {
        &self.inner.engine
    }

    /// The Redis engine's shared state, or [`LockError::Unsupported`]
    /// naming `what` on another engine.
    #[cfg(feature = "redis")]
    pub(crate) fn redis(&self, what: &str) -> Result<&Arc<crate::engine::redis::Core>, LockError> {
        match &self.inner.engine {
            Connected::Redis(core) => Ok(core),
            // Every other engine (none in a build of Redis alone).
            #[allow(unreachable_patterns)]
            other => Err(crate::engine::seam::unsupported(
                other.name(),
                what.to_owned(),
            )),
        }
    }

    /// The engine's name: `"redis"`, `"etcd"`.
    pub fn engine_name(&self) -> &'static str {
        self.inner.engine.name()
    }

    /// For tests only, not a public API: runs the etcd session's sweep of
    /// `key` as if the session's last listing of its lease's keys had
    /// shown it there (the interleaving of issue 34's item 11, forced).
    /// Whether it deleted the key; `false` on another engine.
    #[doc(hidden)]
    pub async fn __sweep_as_listed(&self, key: &str) -> bool {
        match &self.inner.engine {
            #[cfg(feature = "etcd")]
            Connected::Etcd(etcd) => {
                let (etcd, key) = (etcd.clone(), key.to_owned());
                crate::background::run(&etcd.runtime.clone(), async move {
                    etcd.sweep_as_listed(&key).await
                })
                .await
                .unwrap_or(false)
            }
            // Every other engine (none in a build of etcd alone).
            #[allow(unreachable_patterns)]
            _ => {
                let _ = key;
                false
            }
        }
    }

    /// The client's background runtime.
    pub(crate) fn runtime(&self) -> &Handle {
        self.inner.engine.runtime()
    }

    /// Runs `fut` on the client's background runtime and waits for it (see
    /// [`background`]): it runs to completion even if the caller stops
    /// waiting.
    pub(crate) fn on_background<T, F>(
        &self,
        fut: F,
    ) -> impl std::future::Future<Output = Result<T, LockError>> + use<T, F>
    where
        T: Send + 'static,
        F: std::future::Future<Output = T> + Send + 'static,
    {
        background::run(self.runtime(), fut)
    }

    /// This client's id: the first half of the holder ids it writes.
    pub fn id(&self) -> &str {
        self.inner.engine.id()
    }

    /// The configuration the client was built from.
    pub fn config(&self) -> &Config {
        self.inner.engine.config()
    }

    /// Number of holds the watchdog is keeping alive.
    pub fn renewed_locks(&self) -> usize {
        self.inner.engine.renewed()
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("engine", &self.engine_name())
            .field("id", &self.id())
            .field("config", self.config())
            .finish()
    }
}
