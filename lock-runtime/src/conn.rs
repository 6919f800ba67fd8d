//! The client's connection to Redis, whatever the topology.
//!
//! [`Conn`] is what every script call, the pub/sub dispatcher and the
//! watchdog talk through. It implements [`redis::aio::ConnectionLike`], so a
//! call site reads the same on a single server, behind Sentinel and on a
//! cluster:
//!
//! - **Standalone**: redis' `ConnectionManager`, which reconnects to the one
//!   server and resubscribes.
//! - **Sentinel**: a multiplexed connection to the master the sentinels name.
//!   When it breaks (or the node says `READONLY`: it was demoted), the
//!   sentinels are asked again, in the background, until they name a master
//!   that answers as one; commands meanwhile wait for it up to the connect
//!   timeout. Subscriptions are made again on the new master.
//! - **Cluster**: redis' cluster connection, which routes each command by the
//!   slot of its first key, follows `MOVED`/`ASK`, retries through a
//!   failover, and resubscribes each channel on the node that owns its slot.
//!
//! Every connection, and every reconnection, is made on the client's own
//! runtime (the caller of [`Conn::connect`] runs there, and the sentinel
//! reconnect task is spawned on the handle it is given), so the client
//! outlives the runtimes of its callers.
//!
//! On a single server, acquire and release calls made from a caller's
//! current-thread runtime go through a **near connection**: a plain
//! multiplexed connection whose driver runs on that caller's runtime, made
//! in the background on the runtime's first lock call
//! ([`Conn::near_here`]). A round trip through it wakes no other thread; the
//! client's own connection stays the path for everything else.
//! A near connection that fails is forgotten and made again; one whose
//! runtime shut down is never asked for again (runtime ids are not reused).
//!
//! It also owns two topology-dependent decisions: the pub/sub flavour
//! (sharded `SSUBSCRIBE`/`SPUBLISH` on a cluster of Redis 7 or newer, classic
//! otherwise) and replica sync (`WAIT` after an acquisition).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, Pipeline, ProtocolVersion, PushInfo, PushKind, RedisError,
    RedisFuture, RedisResult, TlsMode, Value,
};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};

use crate::client::Core;
use crate::config::{ReplicaSync, Topology};
use crate::{Config, LockError};

/// The connection of one client. Cheap to clone; clones share everything.
#[derive(Clone)]
pub(crate) struct Conn {
    link: Link,
    shared: Arc<Shared>,
}

#[derive(Clone)]
enum Link {
    Standalone(ConnectionManager),
    Sentinel(SentinelLink),
    Cluster(ClusterConnection),
    /// A near connection on the runtime with this id (standalone only).
    Near(tokio::runtime::Id, MultiplexedConnection),
}

/// The near connections of a standalone client, per caller runtime.
struct Near {
    client: redis::Client,
    config: AsyncConnectionConfig,
    /// The client's own runtime, which needs none.
    home: tokio::runtime::Id,
    conns: Mutex<HashMap<tokio::runtime::Id, NearState>>,
}

enum NearState {
    /// Being made on that runtime.
    Connecting,
    Ready(MultiplexedConnection),
    /// Could not be made; tried again after [`NEAR_RETRY`].
    Failed(Instant),
}

/// How many runtimes' near connections are kept at most.
const NEAR_MAX: usize = 64;

/// How long after a failed near connection the next one is tried.
const NEAR_RETRY: Duration = Duration::from_secs(1);

/// Decisions made at connect time, and the replica view.
struct Shared {
    sharded: bool,
    replica_sync: ReplicaSync,
    replica_sync_timeout: Duration,
    /// Who has replicas, as last looked up (Auto mode only).
    replicas: tokio::sync::Mutex<Option<ReplicaView>>,
    /// Standalone only.
    near: Option<Near>,
}

/// How old a replica view may be before it is looked up again.
const REPLICA_VIEW_MAX_AGE: Duration = Duration::from_secs(5);

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
        let mut near = None;
        let link = match &config.topology {
            Topology::Standalone => {
                let client = redis::Client::open(config.connection_info()?)
                    .map_err(|e| LockError::Config(format!("{e}")))?;
                near = Some(Near {
                    client: client.clone(),
                    config: AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(config.connect_timeout))
                        .set_response_timeout(Some(config.response_timeout)),
                    home: runtime.id(),
                    conns: Mutex::new(HashMap::new()),
                });
                let manager_config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(config.connect_timeout))
                    .set_response_timeout(Some(config.response_timeout))
                    .set_number_of_retries(3)
                    .set_push_sender(pushes)
                    .set_automatic_resubscription();
                Link::Standalone(ConnectionManager::new_with_config(client, manager_config).await?)
            }
            Topology::Sentinel { .. } => {
                Link::Sentinel(SentinelLink::connect(config, pushes, runtime).await?)
            }
            Topology::Cluster { .. } => {
                let client = ClusterClientBuilder::new(config.cluster_seeds()?)
                    .use_protocol(ProtocolVersion::RESP3)
                    .push_sender(pushes)
                    .connection_timeout(config.connect_timeout)
                    .response_timeout(config.response_timeout)
                    // Through a failover: ~100 ms apart at first, at most 1 s,
                    // about ten seconds in all before a command fails.
                    .retries(16)
                    .min_retry_wait(100)
                    .max_retry_wait(1000)
                    .build()
                    .map_err(|e| LockError::Config(format!("{e}")))?;
                Link::Cluster(client.get_async_connection().await?)
            }
        };
        let sharded = match (&link, config.sharded_pubsub) {
            (Link::Cluster(cluster), wanted) => {
                let supported = server_major_version(cluster).await? >= 7;
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
            link,
            shared: Arc::new(Shared {
                sharded,
                replica_sync: config.replica_sync,
                replica_sync_timeout: config.replica_sync_wait(),
                replicas: tokio::sync::Mutex::new(None),
                near,
            }),
        })
    }

    /// The current runtime's near connection, when it has one ready. The
    /// first call from a current-thread caller runtime starts making it
    /// there, and gets `None` (the caller then uses this connection).
    pub(crate) fn near_here(&self) -> Option<Conn> {
        let near = self.shared.near.as_ref()?;
        let runtime = Handle::try_current().ok()?;
        let id = runtime.id();
        // Only current-thread runtimes gain: there a hop to the client's
        // thread is two extra thread wake-ups per call. Measured on a
        // multi-thread runtime, the client's own hot thread does better than
        // a driver task that moves between workers (BENCHMARKS.md).
        if id == near.home
            || runtime.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread
        {
            return None;
        }
        let mut conns = near.conns.lock().unwrap_or_else(|p| p.into_inner());
        match conns.get(&id) {
            Some(NearState::Ready(conn)) => {
                return Some(Conn {
                    link: Link::Near(id, conn.clone()),
                    shared: self.shared.clone(),
                });
            }
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
        let shared = Arc::downgrade(&self.shared);
        runtime.spawn(async move {
            let Some(made) = shared.upgrade() else { return };
            let Some(near) = made.near.as_ref() else {
                return;
            };
            let connecting = near
                .client
                .get_multiplexed_async_connection_with_config(&near.config);
            let state = match connecting.await {
                Ok(conn) => NearState::Ready(conn),
                Err(e) => {
                    tracing::debug!(error = %e, "no near connection; using the client's own");
                    NearState::Failed(Instant::now())
                }
            };
            let mut conns = near.conns.lock().unwrap_or_else(|p| p.into_inner());
            conns.insert(id, state);
        });
        None
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

    /// Listens to `channel` (sharded or classic, as decided at connect).
    pub(crate) async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        match &mut self.link {
            Link::Standalone(manager) => manager.subscribe(channel).await,
            Link::Sentinel(sentinel) => sentinel.subscribe(channel).await,
            Link::Cluster(cluster) if self.shared.sharded => cluster.ssubscribe(channel).await,
            Link::Cluster(cluster) => cluster.subscribe(channel).await,
            // The dispatcher uses the client's own connection, never a near one.
            Link::Near(_, near) => near.subscribe(channel).await,
        }
    }

    /// Stops listening to `channel`.
    pub(crate) async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match &mut self.link {
            Link::Standalone(manager) => manager.unsubscribe(channel).await,
            Link::Sentinel(sentinel) => sentinel.unsubscribe(channel).await,
            Link::Cluster(cluster) if self.shared.sharded => cluster.sunsubscribe(channel).await,
            Link::Cluster(cluster) => cluster.unsubscribe(channel).await,
            Link::Near(_, near) => near.unsubscribe(channel).await,
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

    /// Waits until a replica has everything this connection wrote to the
    /// master of `name` so far (the acquisition just made), as
    /// [`Config::replica_sync`] says. `Err(NotReplicated)` when no replica
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

    /// Changes whenever the Sentinel link moves to another master.
    fn epoch(&self) -> u64 {
        match &self.link {
            Link::Sentinel(sentinel) => sentinel.epoch(),
            _ => 0,
        }
    }
}

impl Core {
    /// The publish command for unlock scripts' announcements (`publish` or
    /// `spublish`); pass it to the scripts that take one.
    pub(crate) fn publish_command(&self) -> &'static str {
        self.conn.publish_command()
    }

    /// On a cluster, a lock's keys and channels must share one slot. The
    /// derived names wrap the lock name in `{}` unless it has a hash tag of
    /// its own; a name with a `{` or `}` but no non-empty tag (`"q{"`,
    /// `"{}x"`) cannot be kept in one slot and is refused (elsewhere it is
    /// fine).
    pub(crate) fn check_slot_name(&self, name: &str) -> Result<(), LockError> {
        if self.conn.is_cluster() && name.contains(['{', '}']) && !has_hash_tag(name) {
            return Err(LockError::BadName {
                name: name.to_owned(),
                reason: "on a Redis Cluster, a lock name with `{` or `}` needs a non-empty {hash tag} so that its keys share one slot",
            });
        }
        Ok(())
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.link {
            Link::Standalone(manager) => manager.req_packed_command(cmd),
            Link::Sentinel(sentinel) => sentinel.req_packed_command(cmd),
            Link::Cluster(cluster) => cluster.req_packed_command(cmd),
            Link::Near(id, near) => {
                let (id, shared) = (*id, self.shared.clone());
                let call = near.req_packed_command(cmd);
                Box::pin(async move {
                    let answer = call.await;
                    if let Err(e) = &answer
                        && connection_lost(e)
                    {
                        shared.forget_near(id);
                    }
                    answer
                })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.link {
            Link::Standalone(manager) => manager.req_packed_commands(pipeline, offset, count),
            Link::Sentinel(sentinel) => sentinel.req_packed_commands(pipeline, offset, count),
            Link::Cluster(cluster) => cluster.req_packed_commands(pipeline, offset, count),
            Link::Near(_, near) => near.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Standalone(manager) => manager.get_db(),
            Link::Sentinel(sentinel) => sentinel.get_db(),
            Link::Cluster(cluster) => cluster.get_db(),
            Link::Near(_, near) => near.get_db(),
        }
    }
}

impl Shared {
    /// Forgets the near connection of runtime `id` after it failed: the next
    /// call from that runtime makes a new one.
    fn forget_near(&self, id: tokio::runtime::Id) {
        if let Some(near) = &self.near {
            let mut conns = near.conns.lock().unwrap_or_else(|p| p.into_inner());
            conns.remove(&id);
        }
    }
}

/// Whether a call failed because its connection is gone or did not answer
/// (not a script or server error): the call may be retried on another.
pub(crate) fn connection_lost(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() || e.is_timeout()
}

/// Whether `key` has a non-empty hash tag: text between its first `{` and
/// the next `}`.
fn has_hash_tag(key: &str) -> bool {
    key.split_once('{')
        .and_then(|(_, rest)| rest.find('}'))
        .is_some_and(|len| len > 0)
}

/// The cluster slot of `key`: CRC16 (XMODEM) of the key, or of its hash tag
/// (the text between the first `{` and the next `}`, when not empty), modulo
/// 16384. Scripts touching several keys must keep them in one slot.
pub(crate) fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    let mut crc: u16 = 0;
    for &byte in hashed {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// The major version of a (random) cluster node.
async fn server_major_version(cluster: &ClusterConnection) -> Result<u32, LockError> {
    let mut cluster = cluster.clone();
    let mut info = redis::cmd("INFO");
    info.arg("server");
    let text: String = redis::from_redis_value(
        cluster
            .route_command(info, RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random))
            .await?,
    )
    .map_err(RedisError::from)?;
    Ok(text
        .lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .and_then(|v| v.trim().split('.').next()?.parse().ok())
        .unwrap_or(0))
}

/// `(first slot, last slot, replicas)` from a `CLUSTER NODES` text: for each
/// master's slot ranges, its replicas that are not marked failed.
fn replicas_per_range(text: &str) -> Vec<(u16, u16, usize)> {
    // <id> <addr> <flags> <master id or -> <ping> <pong> <epoch> <link> <slot>...
    let nodes: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let failed = |flags: &str| flags.split(',').any(|f| f == "fail" || f == "noaddr");
    let mut ranges = Vec::new();
    for master in nodes.iter().filter(|n| n.len() >= 8) {
        if !master[2].split(',').any(|f| f == "master") {
            continue;
        }
        let replicas = nodes
            .iter()
            .filter(|n| n.len() >= 4 && n[3] == master[0] && !failed(n[2]))
            .count();
        // Slot entries: `a-b` or `a`; migrations (`[...]`) are skipped.
        for entry in master[8..].iter().filter(|e| !e.starts_with('[')) {
            let (first, last) = entry.split_once('-').unwrap_or((entry, entry));
            if let (Ok(first), Ok(last)) = (first.parse(), last.parse()) {
                ranges.push((first, last, replicas));
            }
        }
    }
    ranges
}

/// Who has replicas: the one master's count, or a count per slot range.
struct ReplicaView {
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
            let mut nodes = redis::cmd("CLUSTER");
            nodes.arg("NODES");
            let text: String = redis::from_redis_value(
                cluster
                    .route_command(
                        nodes,
                        RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
                    )
                    .await?,
            )
            .map_err(RedisError::from)?;
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

// ---------------------------------------------------------------------------
// Sentinel

/// A connection to the master the sentinels name, that asks them again when
/// the master goes away.
#[derive(Clone)]
struct SentinelLink(Arc<SentinelState>);

struct SentinelState {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    current: Mutex<Current>,
    /// The epoch of the last connection installed.
    installed: watch::Sender<u64>,
    /// Where push frames of every connection go (the pub/sub dispatcher).
    pushes: mpsc::UnboundedSender<PushInfo>,
    /// Classic channels subscribed, to subscribe again on a new master.
    channels: Mutex<HashSet<String>>,
    connect_timeout: Duration,
    response_timeout: Duration,
    db: i64,
    runtime: Handle,
}

struct Current {
    /// Counts connections made; a failure report names the one it saw fail.
    epoch: u64,
    conn: Option<MultiplexedConnection>,
    reconnecting: bool,
}

fn no_master(detail: &str) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        format!("no master available from the sentinels: {detail}"),
    ))
}

impl SentinelLink {
    async fn connect(
        config: &Config,
        pushes: mpsc::UnboundedSender<PushInfo>,
        runtime: Handle,
    ) -> Result<SentinelLink, LockError> {
        let (sentinels, master, settings) = config.sentinel_setup()?;
        let db = settings.db();
        let mut node = SentinelNodeConnectionInfo::default().set_redis_connection_info(settings);
        // The master speaks TLS when the sentinels do.
        if let Some(mode) = sentinels.iter().find_map(|s| match s.addr() {
            redis::ConnectionAddr::TcpTls { insecure, .. } => Some(if *insecure {
                TlsMode::Insecure
            } else {
                TlsMode::Secure
            }),
            _ => None,
        }) {
            node = node.set_tls_mode(mode);
        }
        let sentinel =
            SentinelClient::build(sentinels, master, Some(node), SentinelServerType::Master)
                .map_err(|e| LockError::Config(format!("{e}")))?;
        let link = SentinelLink(Arc::new(SentinelState {
            sentinel: tokio::sync::Mutex::new(sentinel),
            current: Mutex::new(Current {
                epoch: 0,
                conn: None,
                reconnecting: true,
            }),
            installed: watch::channel(0).0,
            pushes,
            channels: Mutex::new(HashSet::new()),
            connect_timeout: config.connect_timeout,
            response_timeout: config.response_timeout,
            db,
            runtime,
        }));
        // The first master is found here, so a bad configuration fails `connect`.
        let conn = link.0.open().await?;
        link.0.install(conn);
        Ok(link)
    }

    fn epoch(&self) -> u64 {
        self.0.current().epoch
    }

    fn get_db(&self) -> i64 {
        self.0.db
    }

    /// The current master's connection, waiting (up to the connect timeout)
    /// while a new master is being found.
    async fn conn(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        let deadline = tokio::time::Instant::now() + self.0.connect_timeout;
        loop {
            let mut installed = self.0.installed.subscribe();
            {
                let current = self.0.current();
                if let Some(conn) = &current.conn {
                    return Ok((current.epoch, conn.clone()));
                }
            }
            SentinelState::reconnect(&self.0);
            match tokio::time::timeout_at(deadline, installed.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Err(no_master("none found within the connect timeout")),
            }
        }
    }

    /// Reads a command's result: a broken connection, a timeout or a
    /// `READONLY` (the node was demoted) sends us to the sentinels.
    fn check<T>(&self, epoch: u64, result: &RedisResult<T>) {
        if let Err(e) = result {
            let gone = e.is_io_error()
                || e.is_connection_dropped()
                || e.is_unrecoverable_error()
                || e.is_timeout()
                || e.code() == Some("READONLY");
            if gone {
                self.0.invalidate(epoch);
            }
        }
    }

    async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        self.0.channels().insert(channel.to_owned());
        let (epoch, mut conn) = self.conn().await?;
        let result = conn.subscribe(channel).await;
        self.check(epoch, &result);
        if result.is_err() {
            self.0.channels().remove(channel);
        }
        result
    }

    async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        self.0.channels().remove(channel);
        // A new master's connection will not have it; only the current one may.
        let current = self.0.current().conn.clone();
        match current {
            Some(mut conn) => conn.unsubscribe(channel).await,
            None => Ok(()),
        }
    }

    // Not inlined: the MIR inliner would otherwise pull the reconnect logic
    // into every caller's future and overflow the query depth of deep ones.
    #[inline(never)]
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (epoch, mut conn) = self.conn().await?;
            let result = conn.send_packed_command(cmd).await;
            self.check(epoch, &result);
            result
        })
    }

    #[inline(never)]
    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (epoch, mut conn) = self.conn().await?;
            let result = conn.send_packed_commands(pipeline, offset, count).await;
            self.check(epoch, &result);
            result
        })
    }
}

impl SentinelState {
    fn current(&self) -> MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn channels(&self) -> MutexGuard<'_, HashSet<String>> {
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops connection `epoch` (if it is still the current one) and starts
    /// looking for the master again.
    fn invalidate(self: &Arc<Self>, epoch: u64) {
        {
            let mut current = self.current();
            if current.epoch != epoch || current.conn.is_none() {
                return;
            }
            tracing::warn!("lost the master's connection; asking the sentinels");
            current.conn = None;
        }
        SentinelState::reconnect(self);
    }

    /// Starts the reconnect task on the client's runtime, unless it runs.
    fn reconnect(this: &Arc<Self>) {
        {
            let mut current = this.current();
            if current.reconnecting || current.conn.is_some() {
                return;
            }
            current.reconnecting = true;
        }
        let weak = Arc::downgrade(this);
        this.runtime.spawn(async move {
            let mut backoff = Duration::from_millis(50);
            loop {
                let Some(state) = weak.upgrade() else { return };
                match state.open().await {
                    Ok(conn) => {
                        state.install(conn);
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "no master yet; asking the sentinels again")
                    }
                }
                drop(state);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        });
    }

    /// Asks the sentinels for the master, connects to it (checking that it
    /// answers as a master) and subscribes the known channels there.
    async fn open(self: &Arc<Self>) -> Result<MultiplexedConnection, LockError> {
        let epoch = self.current().epoch + 1;
        let within = self.connect_timeout;
        let client = {
            let mut sentinel = self.sentinel.lock().await;
            tokio::time::timeout(within, sentinel.async_get_client())
                .await
                .map_err(|_| no_master("the sentinels did not answer in time"))??
        };
        let (pushes, mut pushed) = mpsc::unbounded_channel::<PushInfo>();
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(within))
            .set_response_timeout(Some(self.response_timeout))
            .set_push_sender(pushes);
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let channels: Vec<String> = self.channels().iter().cloned().collect();
        if !channels.is_empty() {
            conn.subscribe(&channels).await?;
        }
        // Forwards this connection's pushes; its end means the master is gone.
        let forward_to = self.pushes.clone();
        let weak: Weak<SentinelState> = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(push) = pushed.recv().await {
                if push.kind == PushKind::Disconnection
                    && let Some(state) = weak.upgrade()
                {
                    state.invalidate(epoch);
                }
                let _ = forward_to.send(push);
            }
        });
        Ok(conn)
    }

    fn install(&self, conn: MultiplexedConnection) {
        let epoch = {
            let mut current = self.current();
            current.epoch += 1;
            current.conn = Some(conn);
            current.reconnecting = false;
            current.epoch
        };
        tracing::debug!(epoch, "connected to the master the sentinels name");
        self.installed.send_replace(epoch);
    }
}

#[cfg(test)]
mod tests {
    use super::slot;

    #[test]
    fn replicas_are_counted_per_master_range() {
        let text = "\
m1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 [5461->-m2]
r1 127.0.0.1:7003@17003 slave m1 0 0 1 connected
m2 127.0.0.1:7001@17001 master - 0 0 2 connected 5461-10922 16000
r2 127.0.0.1:7004@17004 slave,fail m2 0 0 2 disconnected
m3 127.0.0.1:7002@17002 master,fail - 0 0 3 disconnected
";
        assert_eq!(
            super::replicas_per_range(text),
            vec![(0, 5460, 1), (5461, 10922, 0), (16000, 16000, 0)]
        );
    }

    #[test]
    fn slots_match_redis() {
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("bar"), 5061);
        assert_eq!(slot("123456789"), 12739);
        assert_eq!(slot("{foo}:anything"), slot("foo"));
        assert_eq!(slot("redisson_lock__channel:{foo}"), slot("foo"));
        // An empty tag does not count: the whole key is hashed.
        assert_ne!(slot("{}foo"), slot("foo"));
    }

    #[test]
    fn hash_tags_are_recognised() {
        assert!(super::has_hash_tag("a{b}c"));
        assert!(super::has_hash_tag("}{a}"));
        assert!(!super::has_hash_tag("{}a"));
        assert!(!super::has_hash_tag("q{"));
        assert!(!super::has_hash_tag("a}b"));
    }
}
