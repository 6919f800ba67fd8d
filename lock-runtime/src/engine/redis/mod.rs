//! The Redis engine (DESIGN §4, §7): Redisson's layouts, driven by Lua
//! scripts over one multiplexed connection (standalone, Sentinel or
//! Cluster, with a near connection per caller runtime), waiters woken by
//! pub/sub, and one batched watchdog per client.

pub(crate) mod acquire;
pub(crate) mod conn;
pub(crate) mod held;
pub(crate) mod hold;
pub(crate) mod inspect;
pub(crate) mod keys;
pub(crate) mod local;
pub(crate) mod pubsub;
pub(crate) mod retry;
pub(crate) mod scripts;
pub(crate) mod watchdog;

pub(crate) use acquire::acquire;
pub(crate) use held::RedisHold;

crate::engine::seam::engine_by_parts!(
    Core, name "redis", hold RedisHold,
    connect connect,
    acquire |core, alive, request| acquire(core, alive, request),
    renewed |core| core.watchdog.len(),
    inspect inspect::inspect, locks inspect::locks, force_unlock inspect::force_unlock,
    semaphores true,
);

use std::sync::Arc;

use tokio::runtime::Handle;
use tokio::sync::mpsc;

use crate::background;
use crate::config::Config;
use crate::engine::redis::local::LocalQueues;
use crate::error::LockError;
use crate::own::OwnHolds;
use conn::Conn;
use pubsub::PubSub;
use watchdog::Watchdog;

/// What the tasks of a client on Redis share.
pub(crate) struct Core {
    /// Random per client: the first half of every holder id.
    pub(crate) id: String,
    /// Standalone, Sentinel or Cluster (see [`crate::engine::redis::conn`]).
    pub(crate) conn: Conn,
    pub(crate) config: Config,
    pub(crate) pubsub: PubSub,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) local: LocalQueues,
    /// This client's live guards, for `inspect`.
    pub(crate) own: OwnHolds,
    pub(crate) runtime: Handle,
}

/// Connects to Redis on the client's `runtime` and starts its pub/sub
/// dispatcher and watchdog there.
pub(crate) async fn connect(config: Config, runtime: Handle) -> Result<Arc<Core>, LockError> {
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
