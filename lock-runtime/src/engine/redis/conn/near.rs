//! Near connections: one per caller runtime, driven by that runtime.
//!
//! Acquire and release calls go through the near connection of the runtime
//! they are made on, so a round trip wakes no thread but the caller's own
//! (the hop to the client's background thread cost a third of an uncontended
//! acquire + release: issue 11). A runtime's near connection is made there,
//! in the background, on its first lock call; until it is ready, and for
//! everything else (pub/sub, the watchdog, reconciling lost answers), the
//! client's own connection serves.
//!
//! Standalone and Cluster have them: a plain multiplexed connection to the
//! server, or a cluster connection of the runtime's own (which routes,
//! follows redirections and retries like the client's). Sentinel does not:
//! its master moves, and a near connection would need the failover checks of
//! the Sentinel link (see `sentinel`); it keeps the client's connection.
//!
//! A near connection whose call fails with a lost connection is forgotten and
//! made again at the runtime's next call; one whose runtime shut down is
//! never asked for again (runtime ids are not reused), and at most
//! [`NEAR_MAX`] are kept.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::AsyncConnectionConfig;
use redis::cluster::ClusterClient;
use tokio::runtime::{Handle, Id};

use super::{Link, Shared};

/// How many runtimes' near connections are kept at most.
const NEAR_MAX: usize = 64;

/// How long after a failed near connection the next one is tried.
const NEAR_RETRY: Duration = Duration::from_secs(1);

/// The near connections of one client.
pub(super) struct Near {
    maker: Maker,
    /// The client's own runtime, which needs none.
    home: Id,
    /// Looked up on every acquire and release: hashed fast.
    conns: Mutex<foldhash::HashMap<Id, NearState>>,
}

/// How a near connection is made.
pub(super) enum Maker {
    Standalone {
        client: redis::Client,
        config: AsyncConnectionConfig,
    },
    Cluster(ClusterClient),
}

enum NearState {
    /// Being made on that runtime.
    Connecting,
    Ready(Link),
    /// Could not be made; tried again after [`NEAR_RETRY`].
    Failed(Instant),
}

impl Near {
    pub(super) fn new(maker: Maker, home: Id) -> Near {
        Near {
            maker,
            home,
            conns: Mutex::default(),
        }
    }

    fn conns(&self) -> MutexGuard<'_, foldhash::HashMap<Id, NearState>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current runtime's near connection, when it has one ready. The
    /// first call from a runtime starts making it there and gets `None`.
    pub(super) fn here(shared: &Arc<Shared>) -> Option<(Id, Link)> {
        let near = shared.near.as_ref()?;
        let runtime = Handle::try_current().ok()?;
        let id = runtime.id();
        if id == near.home {
            return None;
        }
        let mut conns = near.conns();
        match conns.get(&id) {
            Some(NearState::Ready(link)) => return Some((id, link.clone())),
            Some(NearState::Connecting) => return None,
            Some(NearState::Failed(at)) if at.elapsed() < NEAR_RETRY => return None,
            Some(NearState::Failed(_)) | None => {}
        }
        // Runtimes that shut down leave their entries behind (their ids are
        // never asked for again): past a bound, start over. A live runtime
        // whose entry goes makes a new connection at its next call; calls in
        // flight keep the old one until they finish.
        if conns.len() >= NEAR_MAX {
            conns.clear();
        }
        conns.insert(id, NearState::Connecting);
        drop(conns);
        let shared = Arc::downgrade(shared);
        runtime.spawn(async move {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let Some(near) = shared.near.as_ref() else {
                return;
            };
            let made = match &near.maker {
                Maker::Standalone { client, config } => client
                    .get_multiplexed_async_connection_with_config(config)
                    .await
                    .map(Link::Plain),
                Maker::Cluster(client) => client.get_async_connection().await.map(Link::Cluster),
            };
            let state = match made {
                Ok(link) => NearState::Ready(link),
                Err(e) => {
                    tracing::debug!(error = %e, "no near connection; using the client's own");
                    NearState::Failed(Instant::now())
                }
            };
            near.conns().insert(id, state);
        });
        None
    }

    /// Forgets the near connection of runtime `id` after it failed: the next
    /// call from that runtime makes a new one.
    pub(super) fn forget(&self, id: Id) {
        self.conns().remove(&id);
    }
}
