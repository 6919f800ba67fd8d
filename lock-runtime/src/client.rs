//! The client: one connection, one pub/sub path, one watchdog per client.

use std::fmt;
use std::sync::Arc;

use tokio::runtime::Handle;

use crate::background::{self, Background};
use crate::config::Config;
use crate::engine::Store;
use crate::error::LockError;

/// A connection to the lock store (Redis, etcd or ZooKeeper) that hands out locks. One per process is the norm;
/// cloning is cheap and shares everything.
///
/// Dropping the last clone (and the last guard) stops the client's
/// background thread.
#[derive(Clone)]
pub struct LockClient {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    /// The client's runtime thread: stopped when the last clone and the
    /// last hold (which keeps a reference) are gone.
    background: Arc<Background>,
}

/// The store a client's locks live on, and what its tasks share there.
pub(crate) enum Engine {
    /// Redis (standalone, Sentinel or Cluster).
    #[cfg(feature = "redis")]
    Redis(Arc<crate::engine::redis::Core>),
    /// etcd.
    #[cfg(feature = "etcd")]
    Etcd(Arc<crate::engine::etcd::Etcd>),
    /// ZooKeeper.
    #[cfg(feature = "zookeeper")]
    ZooKeeper(Arc<crate::engine::zookeeper::Zk>),
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(Arc<crate::engine::postgres::Pg>),
    /// On MySQL or MariaDB (see `engine::mysql`).
    #[cfg(feature = "mysql")]
    MySql(Arc<crate::engine::mysql::My>),
    /// None: a build without any engine (no client can be made).
    #[cfg(no_engine)]
    None(std::convert::Infallible),
}

/// The value of an engine that a build without engines cannot have.
#[cfg(no_engine)]
pub(crate) fn absurd<T>(never: impl std::borrow::Borrow<std::convert::Infallible>) -> T {
    match *never.borrow() {}
}

impl LockClient {
    /// Connects to the store the configuration's URL names (Redis, or etcd
    /// with the `etcd` feature). Fails with [`LockError::Config`] for a
    /// configuration that cannot work (an engine this build does not have
    /// names the feature to enable) and with [`LockError::Connect`] (Redis)
    /// or [`LockError::Store`] (etcd) when the store cannot be reached
    /// within the connect timeout.
    pub async fn connect(config: Config) -> Result<LockClient, LockError> {
        config.check()?;
        let store = Store::of(&config)?;
        crate::telemetry::describe();
        #[cfg(feature = "tls")]
        let _ = rustls::crypto::ring::default_provider().install_default();
        let background = Background::start()?;
        let runtime = background.handle().clone();
        let engine = match store {
            #[cfg(feature = "redis")]
            Store::Redis => Engine::Redis(crate::engine::redis::connect(config, runtime).await?),
            #[cfg(feature = "etcd")]
            Store::Etcd => Engine::Etcd(crate::engine::etcd::Etcd::connect(config, runtime).await?),
            #[cfg(feature = "zookeeper")]
            Store::ZooKeeper => {
                Engine::ZooKeeper(crate::engine::zookeeper::Zk::connect(config, runtime).await?)
            }
            #[cfg(feature = "mysql")]
            Store::MySql => {
                Engine::MySql(crate::engine::mysql::My::connect(config, runtime).await?)
            }
            #[cfg(feature = "postgres")]
            Store::Postgres => {
                Engine::Postgres(crate::engine::postgres::Pg::connect(config, runtime).await?)
            }
        };
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
    pub(crate) fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The Redis engine's shared state, or [`LockError::Unsupported`]
    /// naming `what` on another engine.
    #[cfg(feature = "redis")]
    #[cfg_attr(
        not(any(
            feature = "etcd",
            feature = "zookeeper",
            feature = "postgres",
            feature = "mysql"
        )),
        allow(unused_variables)
    )]
    pub(crate) fn redis(&self, what: &str) -> Result<&Arc<crate::engine::redis::Core>, LockError> {
        match &self.inner.engine {
            Engine::Redis(core) => Ok(core),
            #[cfg(feature = "etcd")]
            Engine::Etcd(_) => Err(crate::engine::unsupported("etcd", what)),
            #[cfg(feature = "zookeeper")]
            Engine::ZooKeeper(_) => Err(crate::engine::unsupported("zookeeper", what)),
            #[cfg(feature = "postgres")]
            Engine::Postgres(_) => Err(crate::engine::unsupported("postgres", what)),
            #[cfg(feature = "mysql")]
            Engine::MySql(_) => Err(crate::engine::unsupported("mysql", what)),
        }
    }

    /// The engine's name: `"redis"`, `"etcd"`.
    pub fn engine_name(&self) -> &'static str {
        match &self.inner.engine {
            #[cfg(feature = "redis")]
            Engine::Redis(_) => "redis",
            #[cfg(feature = "etcd")]
            Engine::Etcd(_) => "etcd",
            #[cfg(feature = "zookeeper")]
            Engine::ZooKeeper(_) => "zookeeper",
            #[cfg(feature = "postgres")]
            Engine::Postgres(_) => "postgres",
            #[cfg(feature = "mysql")]
            Engine::MySql(_) => "mysql",
            #[cfg(no_engine)]
            Engine::None(never) => match *never {},
        }
    }

    /// For tests only, not a public API: runs the etcd session's sweep of
    /// `key` as if the session's last listing of its lease's keys had
    /// shown it there (the interleaving of issue 34's item 11, forced).
    /// Whether it deleted the key; `false` on another engine.
    #[doc(hidden)]
    pub async fn __sweep_as_listed(&self, key: &str) -> bool {
        match &self.inner.engine {
            #[cfg(feature = "etcd")]
            Engine::Etcd(etcd) => {
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
        match &self.inner.engine {
            #[cfg(feature = "redis")]
            Engine::Redis(core) => &core.runtime,
            #[cfg(feature = "etcd")]
            Engine::Etcd(etcd) => &etcd.runtime,
            #[cfg(feature = "zookeeper")]
            Engine::ZooKeeper(zk) => &zk.runtime,
            #[cfg(feature = "postgres")]
            Engine::Postgres(pg) => &pg.runtime,
            #[cfg(feature = "mysql")]
            Engine::MySql(my) => &my.runtime,
            #[cfg(no_engine)]
            Engine::None(never) => match *never {},
        }
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
        match &self.inner.engine {
            #[cfg(feature = "redis")]
            Engine::Redis(core) => &core.id,
            #[cfg(feature = "etcd")]
            Engine::Etcd(etcd) => &etcd.id,
            #[cfg(feature = "zookeeper")]
            Engine::ZooKeeper(zk) => &zk.id,
            #[cfg(feature = "postgres")]
            Engine::Postgres(pg) => &pg.id,
            #[cfg(feature = "mysql")]
            Engine::MySql(my) => &my.id,
            #[cfg(no_engine)]
            Engine::None(never) => match *never {},
        }
    }

    /// The configuration the client was built from.
    pub fn config(&self) -> &Config {
        match &self.inner.engine {
            #[cfg(feature = "redis")]
            Engine::Redis(core) => &core.config,
            #[cfg(feature = "etcd")]
            Engine::Etcd(etcd) => &etcd.config,
            #[cfg(feature = "zookeeper")]
            Engine::ZooKeeper(zk) => &zk.config,
            #[cfg(feature = "postgres")]
            Engine::Postgres(pg) => &pg.config,
            #[cfg(feature = "mysql")]
            Engine::MySql(my) => &my.config,
            #[cfg(no_engine)]
            Engine::None(never) => match *never {},
        }
    }

    /// Number of holds the watchdog is keeping alive.
    pub fn renewed_locks(&self) -> usize {
        match &self.inner.engine {
            #[cfg(feature = "redis")]
            Engine::Redis(core) => core.watchdog.len(),
            #[cfg(feature = "etcd")]
            Engine::Etcd(etcd) => etcd.renewed(),
            #[cfg(feature = "zookeeper")]
            Engine::ZooKeeper(zk) => zk.renewed(),
            #[cfg(feature = "postgres")]
            Engine::Postgres(pg) => pg.renewed(),
            #[cfg(feature = "mysql")]
            Engine::MySql(my) => my.renewed(),
            #[cfg(no_engine)]
            Engine::None(never) => match *never {},
        }
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
