//! Replica sync: `WAIT` after an acquisition, as [`Config::replica_sync`]
//! says, and the view of who has replicas that the `Auto` mode reads.
//!
//! [`Config::replica_sync`]: crate::Config::replica_sync

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use redis::RedisError;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use tokio::sync::watch;

use super::cluster::{replicas_per_range, slot};
use super::{Conn, Link};
use crate::config::ReplicaSync;
use crate::error::LockError;

/// How old a replica view may be before it is looked up again.
const REPLICA_VIEW_MAX_AGE: Duration = Duration::from_secs(5);

/// How many whole seconds (`INFO replication`'s `lag`: since the replica's
/// last acknowledgement, which it sends every second) a replica may be
/// behind and still be waited for in Auto mode.
pub(crate) const REPLICA_LAG_MAX_SECS: u64 = 2;

impl Conn {
    /// Waits until a replica has everything this connection wrote to the
    /// master of `name` so far (the acquisition just made), as
    /// [`Config::replica_sync`](crate::Config::replica_sync) says. `Err(NotReplicated)` when no replica
    /// acknowledged within the timeout.
    ///
    /// Auto mode waits only when the master has a healthy replica (online,
    /// acknowledged within [`REPLICA_LAG_MAX_SECS`]): one that is attached
    /// but not healthy (its first sync, stopped, partitioned) does not stop
    /// locking. Such a skipped wait is counted
    /// (`lock_replica_sync_skipped_total`).
    pub(crate) async fn sync_replicas(&self, name: &str) -> Result<(), LockError> {
        let mode = self.shared.replica_sync;
        if mode == ReplicaSync::Off {
            return Ok(());
        }
        if mode == ReplicaSync::Auto && !self.health_of(name, false).await.worth_waiting() {
            return Ok(());
        }
        let waited = self.shared.replica_sync_timeout;
        let mut wait = redis::cmd("WAIT");
        wait.arg(1).arg(waited.as_millis().max(1) as u64);
        // Off the caller's runtime (its caller went away), a near connection
        // hands over to the client's own: `WAIT` then counts the writes of
        // that one, which is enough for a call whose hold is given back
        // anyway.
        let mut conn = self.usable_here();
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
        // A stale view (the replicas went away, were promoted in a failover,
        // or stopped acknowledging since) is no reason to fail in Auto mode:
        // look again.
        if mode == ReplicaSync::Auto && !self.health_of(name, true).await.worth_waiting() {
            return Ok(());
        }
        Err(LockError::NotReplicated {
            name: name.to_owned(),
            waited,
        })
    }

    /// The replicas of the master of `name`, from a view at most
    /// [`REPLICA_VIEW_MAX_AGE`] old (or one looked up after this call began,
    /// when `fresh`).
    ///
    /// The view is looked up by one task at a time, on the client's own
    /// runtime and connection (see [`Replicas`]); callers wait for its
    /// answer holding nothing, so a caller that goes away (or whose runtime
    /// stops being driven) holds up nobody. A lookup that fails or takes
    /// longer than twice the response timeout gives an unknown view: no
    /// replicas, not waited for.
    async fn health_of(&self, name: &str, fresh: bool) -> Health {
        let replicas = &self.shared.replicas;
        let epoch = self.own().epoch();
        let since = Instant::now();
        let usable = |view: &Option<Arc<ReplicaView>>| {
            view.as_ref().is_some_and(|v| {
                v.epoch == epoch
                    && if fresh {
                        v.asked >= since
                    } else {
                        v.asked.elapsed() <= REPLICA_VIEW_MAX_AGE
                    }
            })
        };
        let mut seen = replicas.view.subscribe();
        if !usable(&seen.borrow_and_update()) {
            self.refresh_replicas();
            // Ends: every lookup ends (bounded), and one asked after `since`
            // follows (see `refresh_replicas`). The sender lives in `shared`.
            let _ = seen
                .wait_for(|view| usable(view) || view.as_ref().is_some_and(|v| v.asked >= since))
                .await;
        }
        let view = seen.borrow();
        view.as_ref()
            .map_or(Health::default(), |v| v.health_of(name))
    }

    /// Starts a lookup of the replica view on the client's runtime and
    /// connection, unless one runs: then that one looks up once more when
    /// it is done, so that every caller gets a view asked after it came.
    fn refresh_replicas(&self) {
        {
            let mut state = self.shared.replicas.lock();
            if state.running {
                state.again = true;
                return;
            }
            state.running = true;
        }
        let own = self.own();
        let home = self.shared.home.clone();
        home.spawn(async move {
            // Whatever ends this task (done, or dropped with the runtime),
            // the next caller can start another.
            let _running = Running(own.shared.clone());
            loop {
                let asked = Instant::now();
                let epoch = own.epoch();
                let bound = own.shared.lookup_bound;
                let fetched =
                    match tokio::time::timeout(bound, ReplicaView::fetch(&mut own.clone(), epoch, asked))
                        .await
                    {
                        Ok(Ok(fetched)) => fetched,
                        // Auto mode does not fail an acquisition over this
                        // lookup (e.g. an ACL user without INFO): it counts
                        // no replicas until the view is due again.
                        Ok(Err(e)) => {
                            tracing::warn!(error = %e, "cannot tell whether the master has replicas; not waiting for them");
                            ReplicaView::unknown(epoch, asked)
                        }
                        Err(_) => {
                            tracing::warn!(?bound, "no answer about the master's replicas; not waiting for them");
                            ReplicaView::unknown(epoch, asked)
                        }
                    };
                own.shared.replicas.view.send_modify(|view| {
                    let before = view.take();
                    *view = Some(Arc::new(fetched.after(before.as_deref())));
                });
                let mut state = own.shared.replicas.lock();
                if !state.again {
                    state.running = false;
                    return;
                }
                state.again = false;
            }
        });
    }
}

/// The replica view of a client, and its single lookup task.
pub(super) struct Replicas {
    /// The last view looked up; `None` before the first.
    view: watch::Sender<Option<Arc<ReplicaView>>>,
    lookup: Mutex<Lookup>,
}

#[derive(Default)]
struct Lookup {
    /// A lookup task runs.
    running: bool,
    /// Someone asked for a view after the running lookup began.
    again: bool,
}

impl Replicas {
    pub(super) fn new() -> Replicas {
        Replicas {
            view: watch::channel(None).0,
            lookup: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lookup> {
        self.lookup.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Marks the lookup task ended when dropped. Dropped before it finished
/// (the client's runtime shut down), it also publishes an unknown view, so
/// that nobody waits for it.
struct Running(Arc<super::Shared>);

impl Drop for Running {
    fn drop(&mut self) {
        let mut state = self.0.replicas.lock();
        if state.running {
            state.running = false;
            state.again = false;
            drop(state);
            self.0.replicas.view.send_modify(|view| {
                *view = Some(Arc::new(ReplicaView::unknown(
                    view.as_ref().map_or(0, |v| v.epoch),
                    Instant::now(),
                )));
            });
        }
    }
}

/// The replicas of one master, as Auto mode sees them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Health {
    /// Attached to it, in any state.
    pub(super) attached: usize,
    /// Online and acknowledging: worth a `WAIT`.
    pub(super) healthy: usize,
}

impl Health {
    /// Whether Auto mode waits: a healthy replica. Attached replicas none of
    /// which is healthy are a skipped wait, counted.
    fn worth_waiting(self) -> bool {
        if self.healthy > 0 {
            return true;
        }
        if self.attached > 0 {
            crate::telemetry::replica_sync_skipped();
        }
        false
    }

    /// Attached replicas, none of them healthy.
    fn degraded(self) -> bool {
        self.attached > 0 && self.healthy == 0
    }

    /// The replicas listed in an `INFO replication` text (`slave<n>:` lines:
    /// `ip=..,port=..,state=online,offset=..,lag=..`), and those of them
    /// online with a `lag` of at most [`REPLICA_LAG_MAX_SECS`].
    pub(super) fn from_info(info: &str) -> Health {
        let mut health = Health::default();
        for line in info.lines() {
            let Some((key, fields)) = line.trim().split_once(':') else {
                continue;
            };
            if !key
                .strip_prefix("slave")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            {
                continue;
            }
            health.attached += 1;
            let field = |name: &str| {
                fields
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            };
            let online = field("state") == Some("online");
            let recent = field("lag")
                .and_then(|lag| lag.parse::<u64>().ok())
                .is_some_and(|lag| lag <= REPLICA_LAG_MAX_SECS);
            if online && recent {
                health.healthy += 1;
            }
        }
        health
    }
}

/// Who has replicas: the one master's, or those of each slot range's master.
pub(super) struct ReplicaView {
    /// When the lookup began.
    asked: Instant,
    epoch: u64,
    /// `(first slot, last slot, master's replicas)` on a cluster; empty otherwise.
    ranges: Vec<(u16, u16, Health)>,
    /// The master's replicas outside a cluster.
    single: Health,
}

impl ReplicaView {
    async fn fetch(conn: &mut Conn, epoch: u64, asked: Instant) -> Result<ReplicaView, LockError> {
        let mut view = ReplicaView::unknown(epoch, asked);
        if let Link::Cluster(cluster) = &mut conn.link {
            // CLUSTER NODES rather than SLOTS: SLOTS hides replicas that have
            // not reported a replication offset yet (a fresh shard). It tells
            // which masters have replicas, not whether they replicate: each
            // master with some is asked (`INFO replication`, routed by its
            // first slot, as `WAIT` is).
            let text = super::cluster::nodes(cluster).await?;
            // Per master: (id, what it said).
            let mut asked: Vec<(String, Health)> = Vec::new();
            for (master, first, last, attached) in replicas_per_range(&text) {
                let known = asked.iter().find(|(id, _)| *id == master).map(|(_, h)| *h);
                let health = match known {
                    Some(health) => health,
                    None if attached == 0 => Health::default(),
                    None => {
                        let mut info = redis::cmd("INFO");
                        info.arg("replication");
                        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                            Route::new(first, SlotAddr::Master),
                        ));
                        let told = match cluster.route_command(info, route).await {
                            Ok(text) => {
                                redis::from_redis_value::<String>(text).map_err(RedisError::from)
                            }
                            Err(e) => Err(e),
                        };
                        match told {
                            Ok(text) => {
                                let told = Health::from_info(&text);
                                Health {
                                    // Those the cluster knows, connected or not.
                                    attached: attached.max(told.attached),
                                    healthy: told.healthy,
                                }
                            }
                            // Not known: not waited for (Auto), nor counted.
                            Err(e) => {
                                tracing::debug!(error = %e, first, last, "cannot ask a master about its replicas");
                                Health::default()
                            }
                        }
                    }
                };
                asked.push((master, health));
                view.ranges.push((first, last, health));
            }
        } else {
            let mut info = redis::cmd("INFO");
            info.arg("replication");
            let text: String = info.query_async(conn).await?;
            view.single = Health::from_info(&text);
        }
        Ok(view)
    }

    fn unknown(epoch: u64, asked: Instant) -> ReplicaView {
        ReplicaView {
            asked,
            epoch,
            ranges: Vec::new(),
            single: Health::default(),
        }
    }

    /// This view, taking over from `before`: warns once per episode, when a
    /// master whose replicas were healthy (or not known) has replicas now,
    /// none of them healthy.
    fn after(self, before: Option<&ReplicaView>) -> ReplicaView {
        let was_degraded = |first: Option<u16>| {
            before.is_some_and(|b| match first {
                Some(first) => b.ranges.iter().any(|(f, _, h)| *f == first && h.degraded()),
                None => b.single.degraded(),
            })
        };
        if self.single.degraded() && !was_degraded(None) {
            tracing::warn!(
                attached = self.single.attached,
                "the master's replicas are all out of sync or not acknowledging; acquisitions do not wait for them (ReplicaSync::Auto)"
            );
        }
        for (first, last, health) in &self.ranges {
            if health.degraded() && !was_degraded(Some(*first)) {
                tracing::warn!(
                    first,
                    last,
                    attached = health.attached,
                    "the replicas of the master of these slots are all out of sync or not acknowledging; acquisitions do not wait for them (ReplicaSync::Auto)"
                );
            }
        }
        self
    }

    fn health_of(&self, name: &str) -> Health {
        if self.ranges.is_empty() {
            return self.single;
        }
        let slot = slot(name);
        self.ranges
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .map_or(Health::default(), |(_, _, health)| *health)
    }
}

#[cfg(test)]
mod tests {
    use super::Health;

    #[test]
    fn only_online_replicas_that_acknowledge_are_healthy() {
        let info = "# Replication\r
role:master\r
connected_slaves:4\r
slave0:ip=127.0.0.1,port=7001,state=online,offset=100,lag=0\r
slave1:ip=127.0.0.1,port=7002,state=wait_bgsave,offset=0,lag=0\r
slave2:ip=127.0.0.1,port=7003,state=online,offset=90,lag=7\r
slave3:ip=127.0.0.1,port=7004,state=online,offset=99,lag=2\r
slave_read_only:1\r
master_repl_offset:100\r
";
        assert_eq!(
            Health::from_info(info),
            Health {
                attached: 4,
                healthy: 2
            }
        );
        assert_eq!(
            Health::from_info("role:master\r\nconnected_slaves:0\r\n"),
            Health::default()
        );
    }
}
