//! The client: one connection, one pub/sub path, one watchdog per client.

use std::fmt;
use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::mpsc;

use crate::background::{self, Background};
use crate::conn::Conn;
use crate::local::LocalQueues;
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
    pub(crate) watchdog: Arc<Watchdog>,
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
        background::run(&self.inner.core.runtime, fut)
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
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("id", &self.inner.core.id)
            .field("config", &self.inner.core.config)
            .finish()
    }
}
