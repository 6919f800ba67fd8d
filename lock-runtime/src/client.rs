//! The client: one connection, one pub/sub path, one watchdog per client.

use std::fmt;
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::mpsc;

use crate::background::{self, Background};
use crate::conn::Conn;
use crate::engine::Store;
use crate::local::LocalQueues;
use crate::own::OwnHolds;
use crate::pubsub::PubSub;
use crate::watchdog::{self, Watchdog};
use crate::{Config, LockError};

/// A connection to the lock store (Redis, or etcd) that hands out locks. One per process is the norm;
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
    // Dropped after `core`'s last user here: stops the runtime thread.
    _background: Background,
}

/// The store a client's locks live on, and what its tasks share there.
pub(crate) enum Engine {
    /// Redis (standalone, Sentinel or Cluster).
    Redis(Arc<Core>),
    /// etcd.
    #[cfg(feature = "etcd")]
    Etcd(Arc<crate::engine::etcd::Etcd>),
}

/// What the tasks of a client on Redis share.
pub(crate) struct Core {
    /// Random per client: the first half of every holder id.
    pub(crate) id: String,
    /// Standalone, Sentinel or Cluster (see [`crate::conn`]).
    pub(crate) conn: Conn,
    pub(crate) config: Config,
    pub(crate) pubsub: PubSub,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) local: LocalQueues,
    /// This client's live guards, for `inspect`.
    pub(crate) own: OwnHolds,
    pub(crate) runtime: Handle,
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
            Store::Redis => Engine::Redis(connect_redis(config, runtime).await?),
            #[cfg(feature = "etcd")]
            Store::Etcd => Engine::Etcd(crate::engine::etcd::Etcd::connect(config, runtime).await?),
        };
        Ok(LockClient {
            inner: Arc::new(Inner {
                engine,
                _background: background,
            }),
        })
    }

    /// The store this client's locks live on.
    pub(crate) fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// The Redis engine's shared state. Only the Redis paths call this, and
    /// only after the engine was matched (every entry point routes by
    /// [`engine`](Self::engine) first).
    pub(crate) fn core(&self) -> &Arc<Core> {
        match &self.inner.engine {
            Engine::Redis(core) => core,
            #[cfg(feature = "etcd")]
            Engine::Etcd(_) => unreachable!("a Redis path was reached by a client on etcd"),
        }
    }

    /// The Redis engine's shared state, or [`LockError::Unsupported`]
    /// naming `what` on another engine.
    #[cfg_attr(not(feature = "etcd"), allow(unused_variables))]
    pub(crate) fn redis(&self, what: &str) -> Result<&Arc<Core>, LockError> {
        match &self.inner.engine {
            Engine::Redis(core) => Ok(core),
            #[cfg(feature = "etcd")]
            Engine::Etcd(_) => Err(crate::engine::unsupported("etcd", what)),
        }
    }

    /// The engine's name: `"redis"`, `"etcd"`.
    pub fn engine_name(&self) -> &'static str {
        match &self.inner.engine {
            Engine::Redis(_) => "redis",
            #[cfg(feature = "etcd")]
            Engine::Etcd(_) => "etcd",
        }
    }

    /// The client's background runtime.
    pub(crate) fn runtime(&self) -> &Handle {
        match &self.inner.engine {
            Engine::Redis(core) => &core.runtime,
            #[cfg(feature = "etcd")]
            Engine::Etcd(etcd) => &etcd.runtime,
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
            Engine::Redis(core) => &core.id,
            #[cfg(feature = "etcd")]
            Engine::Etcd(etcd) => &etcd.id,
        }
    }

    /// The configuration the client was built from.
    pub fn config(&self) -> &Config {
        match &self.inner.engine {
            Engine::Redis(core) => &core.config,
            #[cfg(feature = "etcd")]
            Engine::Etcd(etcd) => &etcd.config,
        }
    }

    /// Number of holds the watchdog is keeping alive.
    pub fn renewed_locks(&self) -> usize {
        match &self.inner.engine {
            Engine::Redis(core) => core.watchdog.len(),
            #[cfg(feature = "etcd")]
            Engine::Etcd(etcd) => etcd.renewed(),
        }
    }
}

/// Connects to Redis on the client's `runtime` and starts its pub/sub
/// dispatcher and watchdog there.
async fn connect_redis(config: Config, runtime: Handle) -> Result<Arc<Core>, LockError> {
    let handle = runtime.clone();
    background::run(&runtime, async move {
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
            watchdog: Arc::new(Watchdog::default()),
            local: LocalQueues::default(),
            own: OwnHolds::default(),
            runtime: handle,
        });
        watchdog::spawn(
            Arc::downgrade(&core.watchdog),
            core.conn.clone(),
            core.config.watchdog_timeout,
            period,
        );
        Ok::<_, LockError>(core)
    })
    .await?
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
