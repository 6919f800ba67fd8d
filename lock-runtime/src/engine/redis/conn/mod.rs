//! The client's connection to Redis, whatever the topology.
//!
//! [`Conn`] is what every script call, the pub/sub dispatcher and the
//! watchdog talk through. It implements [`redis::aio::ConnectionLike`], so a
//! call site reads the same on a single server, behind Sentinel and on a
//! cluster. One file per topology:
//!
//! - `standalone`: redis' `ConnectionManager`, which reconnects to the one
//!   server and resubscribes.
//! - `sentinel`: a multiplexed connection to the master the sentinels name,
//!   found again when it breaks or is demoted.
//! - `cluster`: redis' cluster connection (routing by slot, `MOVED`/`ASK`,
//!   retries through a failover, resubscription per slot owner), and the
//!   slot arithmetic.
//!
//! The client's own connection, and every reconnection of it, is made on
//! the client's background runtime (the caller of [`Conn::connect`] runs
//! there, and the sentinel reconnect task is spawned on the handle it is
//! given), so the client outlives the runtimes of its callers.
//!
//! Acquire and release calls take the **near connection** of the runtime
//! they run on ([`Conn::near_here`], `near`): a connection whose driver runs
//! on that runtime, so their round trips wake no other thread. A near
//! connection serves its own runtime only: a call that goes on elsewhere
//! (its caller went away and the rest runs on the client's runtime, see
//! `background::finish_on_drop`) must not depend on that runtime being
//! driven again. So a request in flight on it when the call moves fails as
//! a lost connection (the retry and reconcile paths take over, on the
//! client's own connection), and a request made on it from anywhere else
//! goes over the client's own connection.
//!
//! It also owns two topology-dependent decisions: the pub/sub flavour
//! (sharded `SSUBSCRIBE`/`SPUBLISH` on a cluster of Redis 7 or newer, classic
//! otherwise) and replica sync (`WAIT` after an acquisition, `replicas`).

mod cluster;
mod near;
mod replicas;
mod scan;
mod sentinel;
mod standalone;

use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, PushInfo, PushKind, RedisError, RedisFuture, RedisResult, Value};
use tokio::runtime::Handle;
use tokio::sync::mpsc;

pub(crate) use self::cluster::slot;
use self::near::{Maker, Near};
use self::replicas::Replicas;
use self::sentinel::SentinelLink;
use crate::config::Config;
use crate::config::{ReplicaSync, Topology};
use crate::error::LockError;

/// The connection of one client. Cheap to clone; clones share everything.
#[derive(Clone)]
pub(crate) struct Conn {
    link: Link,
    shared: Arc<Shared>,
    /// The runtime whose near connection `link` is, if it is one.
    near: Option<tokio::runtime::Id>,
}

#[derive(Clone)]
enum Link {
    Standalone(ConnectionManager),
    Sentinel(SentinelLink),
    /// The client's cluster connection, or a runtime's near one.
    Cluster(ClusterConnection),
    /// A standalone near connection.
    Plain(MultiplexedConnection),
}

/// Decisions made at connect time, the replica view, the near connections.
struct Shared {
    sharded: bool,
    replica_sync: ReplicaSync,
    replica_sync_timeout: Duration,
    /// Who has replicas, as last looked up (Auto mode only).
    replicas: Replicas,
    /// How long a replica lookup may take before it counts as unknown.
    lookup_bound: Duration,
    /// Standalone and Cluster.
    near: Option<Near>,
    /// The client's own connection: what near connections hand over to
    /// off their runtime, and what the replica view is looked up on.
    own: Link,
    /// The client's own runtime.
    home: Handle,
}

impl Conn {
    /// Connects as `config` says. Push frames (pub/sub messages) go to
    /// `pushes`. Must run on the client's runtime: the connections' driver
    /// tasks are spawned on the current runtime, and `runtime` is where the
    /// Sentinel link reconnects.
    pub(crate) async fn connect(
        config: &Config,
        pushes: mpsc::UnboundedSender<PushInfo>,
        runtime: Handle,
    ) -> Result<Conn, LockError> {
        config.check()?;
        let (link, maker) = match &config.topology {
            Topology::Standalone => {
                let (manager, maker) = standalone::connect(config, pushes).await?;
                (Link::Standalone(manager), Some(maker))
            }
            Topology::Sentinel { .. } => (
                Link::Sentinel(SentinelLink::connect(config, pushes, runtime.clone()).await?),
                None,
            ),
            Topology::Cluster { .. } => {
                let own = cluster::client(config, Some(pushes))?;
                let near = cluster::client(config, None)?;
                (
                    Link::Cluster(own.get_async_connection().await?),
                    Some(Maker::Cluster(near)),
                )
            }
        };
        let sharded = match (&link, config.sharded_pubsub) {
            (Link::Cluster(cluster), wanted) => {
                let supported = cluster::server_major_version(cluster).await? >= 7;
                match wanted {
                    Some(true) if !supported => {
                        return Err(LockError::Config(
                            "sharded pub/sub needs Redis 7 or newer on every cluster node".into(),
                        ));
                    }
                    Some(wanted) => wanted,
                    None => supported,
                }
            }
            // `Config::check` refused `Some(true)` outside a cluster.
            _ => false,
        };
        Ok(Conn {
            link: link.clone(),
            shared: Arc::new(Shared {
                sharded,
                replica_sync: config.replica_sync,
                replica_sync_timeout: config.replica_sync_wait(),
                replicas: Replicas::new(),
                lookup_bound: config.response_timeout.saturating_mul(2),
                near: maker.map(|maker| Near::new(maker, runtime.id())),
                own: link.clone(),
                home: runtime,
            }),
            near: None,
        })
    }

    /// The current runtime's near connection, when it has one ready. The
    /// first call from a runtime starts making it there, and gets `None`
    /// (the caller then uses this connection).
    pub(crate) fn near_here(&self) -> Option<Conn> {
        let (id, link) = Near::here(&self.shared)?;
        Some(Conn {
            link,
            shared: self.shared.clone(),
            near: Some(id),
        })
    }

    /// The client's own connection (this one, when it is not a near one).
    fn own(&self) -> Conn {
        Conn {
            link: self.shared.own.clone(),
            shared: self.shared.clone(),
            near: None,
        }
    }

    /// This connection where it may serve the current task: a near
    /// connection on its own runtime, else the client's own connection.
    fn usable_here(&self) -> Conn {
        match self.near {
            Some(_) if moved_off() => self.own(),
            _ => self.clone(),
        }
    }

    /// The command unlock scripts announce a release with: `spublish` when
    /// waiters listen with sharded pub/sub, else `publish`.
    pub(crate) fn publish_command(&self) -> &'static str {
        if self.shared.sharded {
            "spublish"
        } else {
            "publish"
        }
    }

    /// Whether the connection is to a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster(_))
    }

    /// Whether the connection sends a command again when its answer was
    /// lost: a cluster's does (through a failover), one server's and
    /// Sentinel's never do. A script a command runs must then answer a
    /// second run as it answered the first (the latches).
    pub(crate) fn resends(&self) -> bool {
        self.is_cluster()
    }

    /// On a cluster, a lock's keys and channels must share one slot. The
    /// derived names wrap the lock name in `{}` unless it has a hash tag of
    /// its own; a name with a `{` or `}` but no non-empty tag (`"q{"`,
    /// `"{}x"`) cannot be kept in one slot and is refused (elsewhere it is
    /// fine).
    pub(crate) fn check_slot_name(&self, name: &str) -> Result<(), LockError> {
        if self.is_cluster() && name.contains(['{', '}']) && !cluster::has_hash_tag(name) {
            return Err(LockError::BadName {
                name: name.to_owned(),
                reason: "on a Redis Cluster, a lock name with `{` or `}` needs a non-empty {hash tag} so that its keys share one slot",
            });
        }
        Ok(())
    }

    /// Listens to `channel` (sharded or classic, as decided at connect).
    pub(crate) async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        match &mut self.link {
            Link::Standalone(manager) => manager.subscribe(channel).await,
            Link::Sentinel(sentinel) => sentinel.subscribe(channel).await,
            Link::Cluster(cluster) if self.shared.sharded => cluster.ssubscribe(channel).await,
            Link::Cluster(cluster) => cluster.subscribe(channel).await,
            // The dispatcher uses the client's own connection, never a near one.
            Link::Plain(near) => near.subscribe(channel).await,
        }
    }

    /// Stops listening to `channel`.
    pub(crate) async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match &mut self.link {
            Link::Standalone(manager) => manager.unsubscribe(channel).await,
            Link::Sentinel(sentinel) => sentinel.unsubscribe(channel).await,
            Link::Cluster(cluster) if self.shared.sharded => cluster.sunsubscribe(channel).await,
            Link::Cluster(cluster) => cluster.unsubscribe(channel).await,
            Link::Plain(near) => near.unsubscribe(channel).await,
        }
    }

    /// Whether `push` says the server dropped our subscription to a channel
    /// without being asked: a cluster node does that with sharded channels
    /// whose slot moved away from it (resharding, demotion after a failover).
    pub(crate) fn is_lost_subscription(&self, push: &PushInfo) -> bool {
        self.shared.sharded && push.kind == PushKind::SUnsubscribe
    }

    /// Whether `push` says a cluster node's connection closed. redis-rs then
    /// serves that node's slots from another node of the shard (the promoted
    /// replica, after a failover) but moves subscriptions only at its next
    /// slot-map refresh, which nothing may trigger: the caller subscribes
    /// again itself.
    pub(crate) fn is_lost_node(&self, push: &PushInfo) -> bool {
        self.is_cluster() && push.kind == PushKind::Disconnection
    }

    /// Changes whenever the Sentinel link moves to another master.
    fn epoch(&self) -> u64 {
        match &self.link {
            Link::Sentinel(sentinel) => sentinel.epoch(),
            _ => 0,
        }
    }

    /// This near connection's runtime and the client's shared state, for
    /// [`watch_near`]; `None` for the client's own connection.
    fn near_watch(&self) -> Option<(tokio::runtime::Id, Arc<Shared>)> {
        self.near.map(|id| (id, self.shared.clone()))
    }
}

/// Whether the current task has moved off the runtime of the near
/// connections it was given: the only such task is one that finishes a call
/// whose caller left, on the client's runtime (`background::finish_on_drop`).
fn moved_off() -> bool {
    crate::background::finishing_for_one_who_left()
}

/// The error of a request left in flight on a near connection by a call
/// that moved off its runtime: its answer may never be read (nothing need
/// drive that runtime again), so it counts as lost.
fn left_behind() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "the call left its runtime's near connection; its answer counts as lost",
    ))
}

/// `call` on a near connection (`near`): when its answer says the connection
/// is gone, the connection is forgotten and the runtime's next call makes a
/// new one. Polled off that runtime, it fails at once as a lost connection
/// (see [`left_behind`]). On the client's own connection, `call` itself.
fn watch_near<'a, T: Send + 'a>(
    near: Option<(tokio::runtime::Id, Arc<Shared>)>,
    mut call: RedisFuture<'a, T>,
) -> RedisFuture<'a, T> {
    let Some((id, shared)) = near else {
        return call;
    };
    Box::pin(async move {
        // Checked at every poll, before the request's own (whose timers
        // and connection driver belong to that runtime).
        let answer = std::future::poll_fn(|cx| {
            if moved_off() {
                Poll::Ready(None)
            } else {
                call.as_mut().poll(cx).map(Some)
            }
        })
        .await;
        let Some(answer) = answer else {
            return Err(left_behind());
        };
        if let Err(e) = &answer
            && connection_lost(e)
            && let Some(near) = &shared.near
        {
            near.forget(id);
        }
        answer
    })
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        if self.near.is_some() && moved_off() {
            let mut own = self.own();
            return Box::pin(async move { own.req_packed_command(cmd).await });
        }
        let near = self.near_watch();
        let call = match &mut self.link {
            Link::Standalone(manager) => manager.req_packed_command(cmd),
            Link::Sentinel(sentinel) => sentinel.req_packed_command(cmd),
            Link::Cluster(cluster) => cluster.req_packed_command(cmd),
            Link::Plain(plain) => plain.req_packed_command(cmd),
        };
        watch_near(near, call)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        if self.near.is_some() && moved_off() {
            let mut own = self.own();
            return Box::pin(async move { own.req_packed_commands(pipeline, offset, count).await });
        }
        let near = self.near_watch();
        let call = match &mut self.link {
            Link::Standalone(manager) => manager.req_packed_commands(pipeline, offset, count),
            Link::Sentinel(sentinel) => sentinel.req_packed_commands(pipeline, offset, count),
            Link::Cluster(cluster) => cluster.req_packed_commands(pipeline, offset, count),
            Link::Plain(plain) => plain.req_packed_commands(pipeline, offset, count),
        };
        watch_near(near, call)
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Standalone(manager) => manager.get_db(),
            Link::Sentinel(sentinel) => sentinel.get_db(),
            Link::Cluster(cluster) => cluster.get_db(),
            Link::Plain(plain) => plain.get_db(),
        }
    }
}

/// Whether a call failed because its connection is gone or did not
/// answer, and whether an error may heal by itself: written beside
/// `LockError` (whose `is_transient` says the same for any engine).
pub(crate) use crate::error::{
    redis_connection_lost as connection_lost, redis_transient as transient,
};
