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
//! made again at the runtime's next call. What near clients share with the
//! other engines' (which runtime gets one, how many are kept) is
//! `crate::near`.

use std::sync::Arc;

use redis::AsyncConnectionConfig;
use redis::cluster::ClusterClient;
use tokio::runtime::Id;

use super::{Link, Shared};

/// The near connections of one client.
pub(super) struct Near {
    maker: Maker,
    links: crate::near::Near<Link>,
}

/// How a near connection is made.
#[derive(Clone)]
pub(super) enum Maker {
    Standalone {
        client: redis::Client,
        config: AsyncConnectionConfig,
    },
    Cluster(ClusterClient),
}

impl Near {
    pub(super) fn new(maker: Maker, home: Id) -> Near {
        Near {
            maker,
            links: crate::near::Near::new(home),
        }
    }

    /// The current runtime's near connection, when it has one ready. The
    /// first call from a runtime starts making it there and gets `None`.
    pub(super) fn here(shared: &Arc<Shared>) -> Option<(Id, Link)> {
        let near = shared.near.as_ref()?;
        near.links.here(|| {
            let maker = near.maker.clone();
            async move {
                match maker {
                    Maker::Standalone { client, config } => client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                        .map(Link::Plain),
                    Maker::Cluster(client) => {
                        client.get_async_connection().await.map(Link::Cluster)
                    }
                }
            }
        })
    }

    /// Forgets the near connection of runtime `id` after it failed: the next
    /// call from that runtime makes a new one.
    pub(super) fn forget(&self, id: Id) {
        self.links.forget(id);
    }
}
