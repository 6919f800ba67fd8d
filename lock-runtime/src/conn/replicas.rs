//! Replica sync: `WAIT` after an acquisition, as [`Config::replica_sync`]
//! says, and the view of who has replicas that the `Auto` mode reads.
//!
//! [`Config::replica_sync`]: crate::Config::replica_sync

use std::time::{Duration, Instant};

use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{RedisError, Value};

use super::cluster::{replicas_per_range, slot};
use super::{Conn, Link};
use crate::LockError;
use crate::config::ReplicaSync;

/// How old a replica view may be before it is looked up again.
const REPLICA_VIEW_MAX_AGE: Duration = Duration::from_secs(5);

impl Conn {
    /// Waits until a replica has everything this connection wrote to the
    /// master of `name` so far (the acquisition just made), as
    /// [`Config::replica_sync`](crate::Config::replica_sync) says. `Err(NotReplicated)` when no replica
    /// acknowledged within the timeout.
    pub(crate) async fn sync_replicas(&self, name: &str) -> Result<(), LockError> {
        let mode = self.shared.replica_sync;
        if mode == ReplicaSync::Off {
            return Ok(());
        }
        if mode == ReplicaSync::Auto && self.replicas_of(name, false).await? == 0 {
            return Ok(());
        }
        let waited = self.shared.replica_sync_timeout;
        let mut wait = redis::cmd("WAIT");
        wait.arg(1).arg(waited.as_millis().max(1) as u64);
        let mut conn = self.clone();
        let acknowledged: i64 = match &mut conn.link {
            // The master of the lock's slot, on the connection the script used.
            Link::Cluster(cluster) => redis::from_redis_value(
                cluster
                    .route_command(
                        wait,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
                            slot(name),
                            SlotAddr::Master,
                        ))),
                    )
                    .await?,
            )
            .map_err(RedisError::from)?,
            _ => wait.query_async(&mut conn).await?,
        };
        if acknowledged >= 1 {
            return Ok(());
        }
        // A stale view (the replicas went away, e.g. promoted in a failover)
        // is no reason to fail in Auto mode: look again.
        if mode == ReplicaSync::Auto && self.replicas_of(name, true).await? == 0 {
            return Ok(());
        }
        Err(LockError::NotReplicated {
            name: name.to_owned(),
            waited,
        })
    }

    /// How many replicas the master of `name` has, from a view at most
    /// [`REPLICA_VIEW_MAX_AGE`] old (or a fresh one when `fresh`).
    async fn replicas_of(&self, name: &str, fresh: bool) -> Result<usize, LockError> {
        let mut view = self.shared.replicas.lock().await;
        let epoch = self.epoch();
        let stale = match &*view {
            Some(v) => fresh || v.epoch != epoch || v.fetched.elapsed() > REPLICA_VIEW_MAX_AGE,
            None => true,
        };
        if stale {
            *view = Some(match ReplicaView::fetch(&mut self.clone(), epoch).await {
                Ok(fetched) => fetched,
                // Auto mode does not fail an acquisition over this lookup (e.g.
                // an ACL user without ROLE): it counts no replicas until the
                // view is due again.
                Err(e) => {
                    tracing::warn!(error = %e, "cannot tell whether the master has replicas; not waiting for them");
                    ReplicaView::unknown(epoch)
                }
            });
        }
        Ok(view.as_ref().map_or(0, |v| v.replicas_of(name)))
    }
}

/// Who has replicas: the one master's count, or a count per slot range.
pub(super) struct ReplicaView {
    fetched: Instant,
    epoch: u64,
    /// `(first slot, last slot, replicas)` on a cluster; empty otherwise.
    ranges: Vec<(u16, u16, usize)>,
    /// The master's replicas outside a cluster.
    single: usize,
}

impl ReplicaView {
    async fn fetch(conn: &mut Conn, epoch: u64) -> Result<ReplicaView, LockError> {
        let mut view = ReplicaView::unknown(epoch);
        if let Link::Cluster(cluster) = &mut conn.link {
            // CLUSTER NODES rather than SLOTS: SLOTS hides replicas that have
            // not reported a replication offset yet (a fresh shard).
            let text = super::cluster::nodes(cluster).await?;
            view.ranges = replicas_per_range(&text);
        } else {
            // ["master", offset, [[ip, port, offset], ...]]
            let role: Vec<Value> = redis::cmd("ROLE").query_async(conn).await?;
            view.single = match role.get(2) {
                Some(Value::Array(replicas)) => replicas.len(),
                _ => 0,
            };
        }
        Ok(view)
    }

    fn unknown(epoch: u64) -> ReplicaView {
        ReplicaView {
            fetched: Instant::now(),
            epoch,
            ranges: Vec::new(),
            single: 0,
        }
    }

    fn replicas_of(&self, name: &str) -> usize {
        if self.ranges.is_empty() {
            return self.single;
        }
        let slot = slot(name);
        self.ranges
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .map_or(0, |(_, _, replicas)| *replicas)
    }
}
