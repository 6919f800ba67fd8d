//! Replicated topologies on loopback, started and stopped by the tests: a
//! Redis Cluster of three masters with one replica each, and a master with
//! two replicas watched by three sentinels.
//!
//! Every process runs under the same keeper as [`crate::Server`], so it stops
//! when the test process ends even if nobody drops it (a `static` shared by a
//! test binary). Failures are crashes: [`Node::kill`] sends `SIGKILL`, so
//! nothing is flushed to replicas on the way out.
//!
//! Set-up waits for readiness, not for time: the cluster until every node says
//! `cluster_state:ok` and every replica's link is up, the sentinels until each
//! of them knows the master, both replicas and the two other sentinels.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient};
use redis::Value;

/// How long set-up and failovers may take before the harness gives up
/// (generous: it bounds a wait, it asserts no speed).
const READY_WITHIN: Duration = Duration::from_secs(60);

/// One redis-server (or sentinel) process of a topology.
pub struct Node {
    port: u16,
    keeper: Option<Child>,
}

impl Node {
    /// Starts `redis-server <args>` under a keeper, on a port picked by
    /// `args_for(port)`, retrying on another port when the first is taken.
    fn start(args_for: &mut dyn FnMut(u16) -> Vec<String>) -> Node {
        for _ in 0..5 {
            let port = crate::free_port();
            let args = args_for(port);
            let Ok(mut keeper) = crate::keep(&args) else {
                continue;
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = keeper.try_wait() {
                    break;
                }
                if ping(port) {
                    return Node {
                        port,
                        keeper: Some(keeper),
                    };
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            drop(keeper.stdin.take());
            let _ = keeper.wait();
        }
        panic!("could not start redis-server (is it installed? `apt-get install redis-server`)");
    }

    /// The loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Whether the process is running (it was not killed).
    pub fn is_running(&self) -> bool {
        self.keeper.is_some()
    }

    /// Crashes the server: `SIGKILL`, no shutdown work, nothing flushed. Waits
    /// until the process is gone.
    pub fn kill(&mut self) {
        if let Some(pid) = query::<String>(self.port, &["INFO", "server"])
            .ok()
            .and_then(|info| info_field(&info, "process_id"))
        {
            let _ = Command::new("kill")
                .args(["-KILL", &pid])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(mut keeper) = self.keeper.take() {
            drop(keeper.stdin.take());
            let _ = keeper.wait();
        }
    }

    /// A plain connection to this one node.
    pub async fn raw(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("valid url")
            .get_multiplexed_async_connection()
            .await
            .expect("raw connection to the node")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A fresh directory for one topology's config files and logs. Directories
/// left by test processes that are gone (a `static` topology is never
/// dropped) are removed on the way.
fn scratch_dir(what: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let proc = Path::new("/proc");
    if proc.is_dir()
        && let Ok(entries) = std::fs::read_dir(std::env::temp_dir())
    {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name
                .strip_prefix("lock-cluster-")
                .or_else(|| name.strip_prefix("lock-sentinel-"))
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok());
            if pid.is_some_and(|pid| !proc.join(pid.to_string()).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let dir = std::env::temp_dir().join(format!(
        "lock-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// Arguments every data node shares: loopback, no persistence, replication
/// that starts at once (diskless, no delay), and a log file for post-mortems.
fn data_node_args(port: u16, dir: &Path) -> Vec<String> {
    let log = dir.join(format!("{port}.log"));
    let mut args = crate::server_args(port, dir, &log.to_string_lossy());
    for arg in [
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
    ] {
        args.push(arg.to_owned());
    }
    args
}

fn ping(port: u16) -> bool {
    query::<String>(port, &["PING"]).is_ok_and(|pong| pong == "PONG")
}

/// One command on a fresh blocking connection to `port`.
fn query<T: redis::FromRedisValue>(port: u16, args: &[&str]) -> redis::RedisResult<T> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let mut conn = client.get_connection_with_timeout(Duration::from_millis(500))?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query(&mut conn)
}

/// `field:value` from an `INFO` text.
pub fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

/// Polls `check` every 50 ms (blocking) until it holds; panics with `what`
/// after [`READY_WITHIN`].
fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + READY_WITHIN;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "topology never became ready: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The async twin of [`wait_until`], for waits inside a test's runtime.
async fn wait_until_async(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + READY_WITHIN;
    while !check() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------
// Redis Cluster

/// A Redis Cluster on loopback: three masters with one replica each, created
/// with `redis-cli --cluster create`. The node timeout is one second, so a
/// killed master is replaced by its replica within a few seconds.
pub struct Cluster {
    nodes: Mutex<Vec<Node>>,
    dir: PathBuf,
}

impl Cluster {
    /// Starts a fresh cluster and waits until it serves every slot and every
    /// replica is in sync. Panics when it cannot.
    pub fn start() -> Cluster {
        let dir = scratch_dir("cluster");
        let nodes: Vec<Node> = (0..6)
            .map(|_| {
                Node::start(&mut |port| {
                    let mut args = data_node_args(port, &dir);
                    args.extend([
                        "--cluster-enabled".to_owned(),
                        "yes".to_owned(),
                        "--cluster-config-file".to_owned(),
                        dir.join(format!("nodes-{port}.conf"))
                            .to_string_lossy()
                            .into_owned(),
                        "--cluster-node-timeout".to_owned(),
                        "1000".to_owned(),
                        // The bus port would be port + 10000, which may be taken or out of range.
                        "--cluster-port".to_owned(),
                        crate::free_port().to_string(),
                    ]);
                    args
                })
            })
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port()));
        }
        let status = create
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("redis-cli runs (is it installed? `apt-get install redis-tools`)");
        assert!(
            status.success(),
            "redis-cli --cluster create failed: {status}"
        );
        let cluster = Cluster {
            nodes: Mutex::new(nodes),
            dir,
        };
        cluster.wait_ready();
        // Gossip tells every node who replicates whom a little later than the
        // replicas sync (CLUSTER SLOTS hides replicas until then, so the check
        // above cannot see it).
        wait_until("every node knows the three replicas", || {
            cluster.live_ports().into_iter().all(|port| {
                query::<String>(port, &["CLUSTER", "NODES"]).is_ok_and(|nodes| {
                    let flags = nodes.lines().filter_map(|l| l.split_whitespace().nth(2));
                    let (mut replicas, mut troubled) = (0, 0);
                    for f in flags {
                        replicas += f.split(',').any(|f| f == "slave") as usize;
                        troubled += f
                            .split(',')
                            .any(|f| matches!(f, "fail" | "fail?" | "handshake" | "noaddr"))
                            as usize;
                    }
                    replicas == 3 && troubled == 0
                })
            })
        });
        cluster
    }

    /// The cluster shared by the tests of one test binary, started on first use.
    /// Tests that kill nodes start their own instead.
    pub fn shared() -> &'static Cluster {
        static SHARED: std::sync::OnceLock<Cluster> = std::sync::OnceLock::new();
        SHARED.get_or_init(Cluster::start)
    }

    fn nodes(&self) -> std::sync::MutexGuard<'_, Vec<Node>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn live_ports(&self) -> Vec<u16> {
        self.nodes()
            .iter()
            .filter(|n| n.is_running())
            .map(Node::port)
            .collect()
    }

    /// `redis://` URLs of every running node (seeds for a cluster client).
    pub fn urls(&self) -> Vec<String> {
        self.nodes()
            .iter()
            .filter(|n| n.is_running())
            .map(Node::url)
            .collect()
    }

    /// Blocks until every running node reports `cluster_state:ok`, agrees on
    /// who serves each slot, and each replica's link to its master is up.
    fn wait_ready(&self) {
        wait_until(
            "cluster_state:ok, slots agreed and replicas in sync",
            || self.is_ready(),
        );
    }

    fn is_ready(&self) -> bool {
        let ports = self.live_ports();
        let mut views = Vec::new();
        for &port in &ports {
            let Ok(info) = query::<String>(port, &["CLUSTER", "INFO"]) else {
                return false;
            };
            if info_field(&info, "cluster_state").as_deref() != Some("ok") {
                return false;
            }
            let Ok(replication) = query::<String>(port, &["INFO", "replication"]) else {
                return false;
            };
            if info_field(&replication, "role").as_deref() == Some("slave")
                && info_field(&replication, "master_link_status").as_deref() != Some("up")
            {
                return false;
            }
            match slot_owners(port) {
                Some(owners) => views.push(owners),
                None => return false,
            }
        }
        views.windows(2).all(|w| w[0] == w[1])
    }

    /// The port of the master serving `key`'s slot, as the cluster sees it now.
    pub fn master_of(&self, key: &str) -> u16 {
        let slot = key_slot(key);
        for port in self.live_ports() {
            if let Some(owners) = slot_owners(port)
                && let Some(&(_, _, master, _)) = owners
                    .iter()
                    .find(|(start, end, _, _)| (*start..=*end).contains(&slot))
            {
                return master;
            }
        }
        panic!("no node knows who serves {key:?}");
    }

    /// The ports of the masters, one per shard.
    pub fn masters(&self) -> Vec<u16> {
        let port = self.live_ports()[0];
        let mut masters: Vec<u16> = slot_owners(port)
            .expect("CLUSTER SLOTS")
            .into_iter()
            .map(|(_, _, master, _)| master)
            .collect();
        masters.sort_unstable();
        masters.dedup();
        masters
    }

    /// A lock-client configuration for this cluster.
    pub fn config(&self) -> Config {
        Config::cluster(self.urls())
    }

    /// A lock client with the default configuration.
    pub async fn client(&self) -> LockClient {
        self.client_with(|c| c).await
    }

    /// A lock client whose configuration `tune` adjusts.
    pub async fn client_with(&self, tune: impl FnOnce(Config) -> Config) -> LockClient {
        LockClient::connect(tune(self.config()))
            .await
            .expect("lock client connects to the test cluster")
    }

    /// A plain connection to the node on `port`.
    pub async fn raw_node(&self, port: u16) -> redis::aio::MultiplexedConnection {
        redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .expect("valid url")
            .get_multiplexed_async_connection()
            .await
            .expect("raw connection to a cluster node")
    }

    /// A plain cluster connection, for looking at the data the way another
    /// program would.
    pub async fn raw(&self) -> redis::cluster_async::ClusterConnection {
        redis::cluster::ClusterClient::new(self.urls())
            .expect("valid urls")
            .get_async_connection()
            .await
            .expect("raw cluster connection")
    }

    /// Crashes the master serving `key` and waits until its replica has taken
    /// over (every surviving node agrees, `cluster_state:ok`). Returns the new
    /// master's port.
    pub async fn fail_over(&self, key: &str) -> u16 {
        let old = self.master_of(key);
        self.kill(old);
        let slot = key_slot(key);
        wait_until_async("a replica took over the killed master's slots", || {
            self.is_ready()
                && self.live_ports().into_iter().all(|port| {
                    slot_owners(port).is_some_and(|owners| {
                        owners.iter().any(|&(start, end, master, _)| {
                            (start..=end).contains(&slot) && master != old
                        })
                    })
                })
        })
        .await;
        self.master_of(key)
    }

    /// Crashes the node on `port`.
    pub fn kill(&self, port: u16) {
        if let Some(node) = self.nodes().iter_mut().find(|n| n.port() == port) {
            node.kill();
        }
    }

    /// Moves `key`'s slot, with its keys, from its master to the master on
    /// `to` the way `redis-cli --cluster reshard` does (IMPORTING/MIGRATING,
    /// MIGRATE, SETSLOT NODE). Clients meanwhile meet `ASK`, then `MOVED`;
    /// the old owner drops sharded subscriptions of the slot.
    pub fn move_slot_of(&self, key: &str, to: u16) {
        let slot = key_slot(key).to_string();
        let from = self.master_of(key);
        assert_ne!(from, to, "the slot is already there");
        let id = |port: u16| query::<String>(port, &["CLUSTER", "MYID"]).expect("CLUSTER MYID");
        let (from_id, to_id) = (id(from), id(to));
        let _: () =
            query(to, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]).expect("IMPORTING");
        let _: () =
            query(from, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]).expect("MIGRATING");
        loop {
            let keys: Vec<String> =
                query(from, &["CLUSTER", "GETKEYSINSLOT", &slot, "100"]).expect("GETKEYSINSLOT");
            if keys.is_empty() {
                break;
            }
            let to_port = to.to_string();
            let mut migrate = vec!["MIGRATE", "127.0.0.1", &to_port, "", "0", "5000", "KEYS"];
            migrate.extend(keys.iter().map(String::as_str));
            let _: Value = query(from, &migrate).expect("MIGRATE");
        }
        // The new owner first, then the old one, then everyone else.
        let mut order = vec![to, from];
        order.extend(
            self.masters()
                .into_iter()
                .filter(|m| *m != to && *m != from),
        );
        for port in order {
            let _: () =
                query(port, &["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]).expect("SETSLOT NODE");
        }
        wait_until("every node agrees on the moved slot", || {
            self.live_ports().into_iter().all(|port| {
                slot_owners(port).is_some_and(|owners| {
                    owners.iter().any(|&(start, end, master, _)| {
                        (start..=end).contains(&key_slot(key)) && master == to
                    })
                })
            })
        });
    }

    /// Cuts replication of the master serving `key`: its replicas cannot
    /// resynchronise (they present a password the master refuses) and their
    /// links are dropped. Writes made afterwards exist on the master only, so a
    /// crash of the master loses them. Returns the master's port.
    pub fn cut_replication_of(&self, key: &str) -> u16 {
        let master = self.master_of(key);
        for replica in replicas_of(master) {
            let _: () = query(
                replica,
                &["CONFIG", "SET", "masterauth", "no-such-password"],
            )
            .expect("CONFIG SET masterauth");
        }
        cut_replica_links(master);
        master
    }

    /// Directory with the nodes' config files and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.nodes().clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The slot of `key` (hash tags honoured), as Redis computes it (CRC16 of
/// the key or of its hash tag, modulo 16384).
pub fn key_slot(key: &str) -> u16 {
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
        crc ^= (byte as u16) << 8;
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

/// `(first slot, last slot, master port, replica ports)`.
type SlotOwner = (u16, u16, u16, Vec<u16>);

/// `(first slot, last slot, master port, replica ports)` per slot range, as
/// the node on `port` sees them, sorted.
fn slot_owners(port: u16) -> Option<Vec<SlotOwner>> {
    let ranges: Vec<Value> = query(port, &["CLUSTER", "SLOTS"]).ok()?;
    let mut owners = Vec::new();
    for range in ranges {
        let Value::Array(parts) = range else {
            return None;
        };
        let int = |v: &Value| match v {
            Value::Int(i) => Some(*i as u16),
            _ => None,
        };
        let node_port = |v: &Value| match v {
            Value::Array(node) => node.get(1).and_then(int),
            _ => None,
        };
        let start = int(parts.first()?)?;
        let end = int(parts.get(1)?)?;
        let master = node_port(parts.get(2)?)?;
        let mut replicas: Vec<u16> = parts[3..].iter().filter_map(node_port).collect();
        replicas.sort_unstable();
        owners.push((start, end, master, replicas));
    }
    owners.sort();
    Some(owners)
}

/// Ports of the replicas attached to the master on `port` (from its `ROLE`).
fn replicas_of(master: u16) -> Vec<u16> {
    let role: Vec<Value> = query(master, &["ROLE"]).expect("ROLE");
    let Some(Value::Array(replicas)) = role.get(2) else {
        return Vec::new();
    };
    replicas
        .iter()
        .filter_map(|r| match r {
            Value::Array(fields) => match fields.get(1) {
                Some(Value::BulkString(port)) => std::str::from_utf8(port).ok()?.parse().ok(),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// Drops the master's links to its replicas and waits until none is attached.
fn cut_replica_links(master: u16) {
    let _: Value = query(master, &["CLIENT", "KILL", "TYPE", "replica"]).expect("CLIENT KILL");
    wait_until("the master has no replica attached", || {
        replicas_of(master).is_empty()
    });
}

// ---------------------------------------------------------------------------
// Sentinel

/// The name the sentinels know the master by.
pub const MASTER_NAME: &str = "lockmaster";

/// A master with two replicas, watched by three sentinels (quorum two). A
/// master is declared down after 500 ms without an answer.
pub struct Sentinels {
    data: Mutex<Vec<Node>>,
    sentinels: Vec<Node>,
    dir: PathBuf,
}

impl Sentinels {
    /// Starts the master, its replicas and the sentinels, and waits until the
    /// replicas are in sync and every sentinel knows the master, both replicas
    /// and the two other sentinels. A group whose sentinels never all agree
    /// within [`READY_WITHIN`] (seen once in many runs: a set-up fault, not a
    /// lock's) is stopped and started afresh, once.
    pub fn start() -> Sentinels {
        for attempt in 1..=2 {
            match std::panic::catch_unwind(Sentinels::start_once) {
                Ok(group) => return group,
                Err(fault) if attempt == 2 => std::panic::resume_unwind(fault),
                Err(_) => eprintln!("the sentinel group never became ready; starting a new one"),
            }
        }
        unreachable!("the second attempt returns or panics")
    }

    fn start_once() -> Sentinels {
        let dir = scratch_dir("sentinel");
        let master = Node::start(&mut |port| data_node_args(port, &dir));
        let master_port = master.port();
        let mut data = vec![master];
        for _ in 0..2 {
            data.push(Node::start(&mut |port| {
                let mut args = data_node_args(port, &dir);
                args.extend([
                    "--replicaof".to_owned(),
                    "127.0.0.1".to_owned(),
                    master_port.to_string(),
                ]);
                args
            }));
        }
        wait_until("both replicas in sync with the master", || {
            data[1..].iter().all(|replica| {
                query::<String>(replica.port(), &["INFO", "replication"]).is_ok_and(|info| {
                    info_field(&info, "master_link_status").as_deref() == Some("up")
                })
            })
        });
        let sentinels = (0..3)
            .map(|_| {
                Node::start(&mut |port| {
                    let conf = dir.join(format!("sentinel-{port}.conf"));
                    std::fs::write(
                        &conf,
                        format!(
                            "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {log}\n\
                             sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                             sentinel down-after-milliseconds {MASTER_NAME} 500\n\
                             sentinel failover-timeout {MASTER_NAME} 3000\n\
                             sentinel parallel-syncs {MASTER_NAME} 2\n",
                            dir = dir.display(),
                            log = dir.join(format!("sentinel-{port}.log")).display(),
                        ),
                    )
                    .expect("write the sentinel config");
                    vec![conf.to_string_lossy().into_owned(), "--sentinel".to_owned()]
                })
            })
            .collect();
        let group = Sentinels {
            data: Mutex::new(data),
            sentinels,
            dir,
        };
        wait_until(
            "every sentinel knows the master, two replicas and two other sentinels",
            || {
                group.sentinels.iter().all(|s| {
                    sentinel_view(s.port()).is_some_and(|view| {
                        view.get("port").map(String::as_str)
                            == Some(master_port.to_string().as_str())
                            && view.get("num-slaves").map(String::as_str) == Some("2")
                            && view.get("num-other-sentinels").map(String::as_str) == Some("2")
                            && view.get("flags").map(String::as_str) == Some("master")
                    })
                })
            },
        );
        group
    }

    fn data(&self) -> std::sync::MutexGuard<'_, Vec<Node>> {
        self.data.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `redis://` URLs of the sentinels.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Node::url).collect()
    }

    /// The master's port, as the first sentinel that answers names it.
    pub fn master(&self) -> u16 {
        self.sentinels
            .iter()
            .find_map(|s| master_addr(s.port()))
            .expect("a sentinel names the master")
    }

    /// A lock-client configuration for this group (through the sentinels).
    pub fn config(&self) -> Config {
        Config::sentinel(self.sentinel_urls(), MASTER_NAME)
    }

    /// A lock client with the default configuration.
    pub async fn client(&self) -> LockClient {
        self.client_with(|c| c).await
    }

    /// A lock client whose configuration `tune` adjusts.
    pub async fn client_with(&self, tune: impl FnOnce(Config) -> Config) -> LockClient {
        LockClient::connect(tune(self.config()))
            .await
            .expect("lock client connects through the test sentinels")
    }

    /// A plain connection to the current master.
    pub async fn raw_master(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(format!("redis://127.0.0.1:{}", self.master()))
            .expect("valid url")
            .get_multiplexed_async_connection()
            .await
            .expect("raw connection to the master")
    }

    /// Crashes the master and waits until a replica has been promoted: the
    /// new master says it is one and every sentinel names it. Returns its port.
    pub async fn fail_over(&self) -> u16 {
        let old = self.master();
        if let Some(node) = self.data().iter_mut().find(|n| n.port() == old) {
            node.kill();
        }
        let mut new = 0;
        wait_until_async("the sentinels promoted a replica", || {
            let named: Vec<Option<u16>> = self.sentinels.iter().map(|s| master_addr(s.port())).collect();
            match named[0] {
                Some(port)
                    if port != old
                        && named.iter().all(|n| *n == Some(port))
                        && query::<Vec<Value>>(port, &["ROLE"])
                            .is_ok_and(|role| matches!(role.first(), Some(Value::BulkString(r)) if r == b"master")) =>
                {
                    new = port;
                    true
                }
                _ => false,
            }
        })
        .await;
        new
    }

    /// Cuts replication: the replicas cannot resynchronise with the master any
    /// more and their links are dropped, so later writes exist on the master
    /// only (a crash of the master loses them).
    pub fn cut_replication(&self) {
        let master = self.master();
        for node in self
            .data()
            .iter()
            .filter(|n| n.is_running() && n.port() != master)
        {
            let _: () = query(
                node.port(),
                &["CONFIG", "SET", "masterauth", "no-such-password"],
            )
            .expect("CONFIG SET masterauth");
        }
        cut_replica_links(master);
    }

    /// Directory with the config files and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        self.sentinels.clear();
        self.data().clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `SENTINEL MASTER <name>` as a map, from the sentinel on `port`.
fn sentinel_view(port: u16) -> Option<HashMap<String, String>> {
    query(port, &["SENTINEL", "MASTER", MASTER_NAME]).ok()
}

/// The master's port according to the sentinel on `port`.
fn master_addr(port: u16) -> Option<u16> {
    let (_, master): (String, u16) =
        query(port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME]).ok()?;
    Some(master)
}
