//! Real ZooKeeper servers on loopback, started and stopped by their owner
//! (a test, a demo, a benchmark): a standalone server ([`ZooKeeper`]) and a
//! three-member ensemble ([`ZkEnsemble`]). Never the machine's 2181: every
//! port is a free one. (The tests' clients of them, Apache Curator and a
//! reader of a lock's nodes, are the tests' own: `tests::zookeeper`.)
//!
//! The servers are the jars of Debian's `zookeeper` package (ZooKeeper 3.8),
//! run with `java ... org.apache.zookeeper.server.quorum.QuorumPeerMain
//! <cfg>`; Curator is `libcurator-recipes-java` (5.4). `tools/setup.sh`
//! installs both. The class path is the jars in `/usr/share/java` (see
//! [`SERVER_JARS`] and [`CURATOR_JARS`]): Debian's jars name their own
//! dependencies in their manifests' `Class-Path`, so these few are enough.
//!
//! Every server runs under a small `sh` keeper (like [`crate::Redis`] and
//! [`crate::etcd`]) that kills it with `SIGKILL` as soon as the owning
//! process's end of the keeper's stdin closes: when the harness stops it, and
//! also when that process dies without dropping it. Each server's
//! configuration, data and log live in a fresh directory under the system's
//! temp dir, removed on drop.
//!
//! Every server has `tickTime` 500 ms and allows sessions of 1 s to 60 s
//! (`minSessionTimeout`, `maxSessionTimeout`), so that tests can let short
//! sessions expire. ZooKeeper checks expiry once a tick: a session ends up
//! to one tick after its timeout.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::start::{Outcome, free_ports, wait_for};
pub use crate::start::{PROBE_EVERY, fresh_dir, log_tail};

/// How long a start, a restart or a return to service may take before the
/// harness gives up (generous: a JVM starting on a loaded two-core machine
/// is slow; it bounds a wait, it asserts no speed).
pub const READY_WITHIN: Duration = Duration::from_secs(60);

/// Start-up attempts on fresh ports when a server exits at once (most likely
/// because a port picked as free was taken meanwhile).
const ATTEMPTS: usize = 5;

/// ZooKeeper's default ports (2181 clients, 2888 quorum, 3888 election,
/// 8080 admin): never used.
const DEFAULT_PORTS: &[u16] = &[2181, 2888, 3888, 8080];

/// The jars a server runs from: ZooKeeper (its manifest names its other
/// dependencies: jute, netty, metrics, jackson, commons-*) and slf4j-simple,
/// so that it logs (to its stderr, which the keeper appends to its log file).
pub const SERVER_JARS: &[&str] = &[
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/slf4j-api.jar",
    "/usr/share/java/slf4j-simple.jar",
];

/// The jars the Curator driver is compiled against and runs with: Curator's
/// recipes, framework and client, the ZooKeeper client, and their guava and
/// slf4j (slf4j-simple logs to the driver's stderr, kept in its log file).
pub const CURATOR_JARS: &[&str] = &[
    "/usr/share/java/curator-recipes.jar",
    "/usr/share/java/curator-framework.jar",
    "/usr/share/java/curator-client.jar",
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/guava.jar",
    "/usr/share/java/slf4j-api.jar",
    "/usr/share/java/slf4j-simple.jar",
];

/// JVM options of every server and driver: small heaps, a quick start, no
/// `hsperfdata` files, and slf4j-simple's format with a clock.
pub const JVM_OPTIONS: &[&str] = &[
    "-Xms16m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Djava.net.preferIPv4Stack=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
];

/// Runs `java "$@"` (after the log file, `$1`) in the background, prints its
/// pid (for `SIGSTOP`/`SIGCONT`), and `SIGKILL`s it when its stdin reaches
/// end of file. The keeper itself ends when `java` does, so its exit tells
/// that the server is gone. (A background job of a non-interactive shell
/// reads `/dev/null`, hence the stdin copy on fd 3.)
const KEEPER: &str = r#"log=$1; shift
exec 3<&0
java "$@" >>"$log" 2>&1 3<&- &
pid=$!
echo $pid
{ read _ignored <&3; kill -9 $pid; } >/dev/null 2>&1 &
exec 3<&-
wait $pid"#;

/// A standalone ZooKeeper server owned by a test, on a free loopback port.
/// Killed, and its directory removed, when dropped.
pub struct ZooKeeper {
    node: Node,
    dir: PathBuf,
}

impl ZooKeeper {
    /// Starts a fresh server and waits until it serves (it answers the
    /// `srvr` four-letter word with `Mode: standalone`). Panics (failing the
    /// test) with the tail of its log when no server will start within 60 s.
    pub fn start() -> ZooKeeper {
        ZooKeeper::start_with(&[])
    }

    /// [`start`](Self::start), or why no server started.
    pub fn try_start() -> Result<ZooKeeper, String> {
        ZooKeeper::try_start_with(&[])
    }

    /// [`start`](Self::start) with extra JVM options for the server, e.g.
    /// ZooKeeper's system properties. `-Dznode.container.checkIntervalMs=200`
    /// makes the server delete empty container nodes within 200 ms instead
    /// of 60 s: Curator creates a lock's node (`/locks/<name>`) and its
    /// missing parents (`/locks`) as containers, so a lock root vanishes
    /// once its last lock is released and the check runs.
    pub fn start_with(jvm_options: &[&str]) -> ZooKeeper {
        ZooKeeper::try_start_with(jvm_options).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`start_with`](Self::start_with), or why no server started (not
    /// installed, or it did not serve: with the tail of its log).
    pub fn try_start_with(jvm_options: &[&str]) -> Result<ZooKeeper, String> {
        if let Some(jar) = SERVER_JARS.iter().find(|jar| !Path::new(jar).is_file()) {
            return Err(format!(
                "no ZooKeeper: {jar} is missing (Debian/Ubuntu: `sudo apt-get install \
                 zookeeper`; or run tools/setup.sh)"
            ));
        }
        for attempt in 1..=ATTEMPTS {
            let dir = fresh_dir("lock-tests-zk-");
            let ports = free_ports(1, DEFAULT_PORTS);
            let mut node = Node::new(0, ports[0], 0, 0, &dir);
            node.jvm_options = jvm_options.iter().map(|o| o.to_string()).collect();
            node.configure(&[]);
            node.spawn();
            let port = node.client_port;
            let outcome = wait_for(READY_WITHIN, || node.exited(), || serves(port));
            match outcome {
                Outcome::Ready => return Ok(ZooKeeper { node, dir }),
                Outcome::Exited if attempt < ATTEMPTS => {
                    drop(node);
                    let _ = std::fs::remove_dir_all(&dir);
                }
                outcome => {
                    let log = log_tail(&node.log);
                    drop(node);
                    let _ = std::fs::remove_dir_all(&dir);
                    // Asked only once no server started: a JVM's start is slow.
                    if Command::new("java")
                        .arg("-version")
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .status()
                        .is_err()
                    {
                        return Err(
                            "no ZooKeeper: `java` is not installed (run tools/setup.sh)".into()
                        );
                    }
                    return Err(format!(
                        "ZooKeeper did not start ({outcome:?}); its log ends with:\n{log}"
                    ));
                }
            }
        }
        unreachable!("the last attempt returns")
    }

    /// The connect string of ZooKeeper clients: `127.0.0.1:<port>`.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.node.client_port)
    }

    /// The URL a lock client is configured with:
    /// `zk://127.0.0.1:<port>/locks`.
    pub fn url(&self) -> String {
        format!("zk://{}/locks", self.connect_string())
    }

    /// The loopback port clients connect to.
    pub fn port(&self) -> u16 {
        self.node.client_port
    }

    /// Whether the server process runs (it was not stopped; it may be
    /// paused).
    pub fn is_running(&self) -> bool {
        self.node.keeper.is_some()
    }

    /// Whether the server serves right now: it answers `srvr` with a mode
    /// within a second. False while it is stopped or paused.
    pub fn is_serving(&self) -> bool {
        serves(self.node.client_port)
    }

    /// Kills the server with `SIGKILL` (also when paused) and waits until it
    /// is gone. Its data stays: [`restart`](Self::restart) brings it back,
    /// sessions and their ephemeral nodes included (ZooKeeper keeps them in
    /// its snapshot and log), as long as they do not expire meanwhile.
    pub fn stop(&mut self) {
        self.node.kill();
    }

    /// Starts the stopped server again, on the same port, with its data, and
    /// waits (without blocking the runtime) until it serves. Does nothing
    /// when it runs. Panics with its log's tail when it will not serve within
    /// 60 s.
    pub async fn restart(&mut self) {
        if !self.is_running() {
            let port = self.node.client_port;
            self.node.restart(move || serves(port)).await;
        }
    }

    /// Freezes the server (`SIGSTOP` to its JVM): connections stay open but
    /// nothing is answered, and no session expires on it. A fault for
    /// [`resume`](Self::resume) to heal.
    pub fn pause(&self) {
        self.node.signal("STOP");
    }

    /// Lets a [`pause`](Self::pause)d server go on (`SIGCONT`). Sessions whose
    /// clients stayed silent longer than their timeout meanwhile expire on
    /// its next tick.
    pub fn resume(&self) {
        self.node.signal("CONT");
    }

    /// The server's log file (ZooKeeper's own log at INFO).
    pub fn log(&self) -> &Path {
        &self.node.log
    }

    /// The last 30 lines of the server's log, for assertion messages.
    pub fn log_tail(&self) -> String {
        log_tail(&self.node.log)
    }

    /// The directory holding the server's configuration (`zk0.cfg`), data
    /// (`zk0.data`) and log (`zk0.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        self.node.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A three-member ZooKeeper ensemble (members 0, 1 and 2, whose `myid` is
/// 1, 2 and 3) owned by a test, on free loopback ports (a client, a quorum
/// and an election port each). Members can be crashed and restarted with
/// their data. All are killed, and their files removed, when dropped.
pub struct ZkEnsemble {
    nodes: Vec<Node>,
    dir: PathBuf,
}

impl ZkEnsemble {
    /// Starts three members together and waits until the ensemble serves:
    /// every member answers `srvr` with `Mode: leader` or `Mode: follower`,
    /// and exactly one leads. Panics (failing the test) with the tail of
    /// their logs when no ensemble will form within 60 s.
    pub fn start() -> ZkEnsemble {
        for attempt in 1..=ATTEMPTS {
            let dir = fresh_dir("lock-tests-zk-ensemble-");
            let ports = free_ports(9, DEFAULT_PORTS);
            let mut nodes: Vec<Node> = (0..3)
                .map(|i| {
                    Node::new(
                        i + 1,
                        ports[3 * i],
                        ports[3 * i + 1],
                        ports[3 * i + 2],
                        &dir,
                    )
                })
                .collect();
            let peers: Vec<Peer> = nodes.iter().map(Node::peer).collect();
            for node in &mut nodes {
                node.configure(&peers);
                node.spawn();
            }
            let all: Vec<u16> = nodes.iter().map(|n| n.client_port).collect();
            let outcome = wait_for(
                READY_WITHIN,
                || nodes.iter_mut().any(Node::exited),
                || leader_among(&all).is_some(),
            );
            let started = ZkEnsemble { nodes, dir };
            match outcome {
                Outcome::Ready => return started,
                Outcome::Exited if attempt < ATTEMPTS => drop(started),
                outcome => {
                    let logs = started.logs();
                    drop(started);
                    panic!(
                        "the ZooKeeper ensemble did not form ({outcome:?}); its logs end with:\n{logs}"
                    );
                }
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// The connect string of ZooKeeper clients, every member (running or
    /// not): `127.0.0.1:<p0>,127.0.0.1:<p1>,127.0.0.1:<p2>`.
    pub fn connect_string(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.client_port))
            .collect();
        hosts.join(",")
    }

    /// The URL a lock client is configured with:
    /// `zk://127.0.0.1:<p0>,127.0.0.1:<p1>,127.0.0.1:<p2>/locks`.
    pub fn url(&self) -> String {
        format!("zk://{}/locks", self.connect_string())
    }

    /// Member `i`'s client port (for a client pinned to one member:
    /// `127.0.0.1:<port>`).
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].client_port
    }

    /// Whether member `i`'s process runs (it was not stopped; it may be
    /// paused).
    pub fn is_running(&self, i: usize) -> bool {
        self.nodes[i].keeper.is_some()
    }

    /// Member `i`'s role right now, as `srvr` says it (`"leader"`,
    /// `"follower"`), or `None` when it does not serve (stopped, paused, or
    /// looking for a leader).
    pub fn mode(&self, i: usize) -> Option<String> {
        mode(self.nodes[i].client_port)
    }

    /// The index of the current leader: the running member that answers
    /// `srvr` with `Mode: leader`, while every other running member answers
    /// `follower`. Panics when there is none right now (after a fault, use
    /// [`wait_for_leader`](Self::wait_for_leader)).
    pub fn leader(&self) -> usize {
        let running = self.running_ports();
        let leader = leader_among(&running)
            .unwrap_or_else(|| panic!("no ZooKeeper leader right now; {}", self.modes()));
        self.index_of(leader)
    }

    /// Waits until the running members serve with one leader (see
    /// [`leader`](Self::leader)) and returns its index. Probes every 50 ms
    /// without blocking the runtime; panics after `within`.
    pub async fn wait_for_leader(&self, within: Duration) -> usize {
        let running = self.running_ports();
        let deadline = Instant::now() + within;
        loop {
            let ports = running.clone();
            let leader = tokio::task::spawn_blocking(move || leader_among(&ports))
                .await
                .expect("the probe does not panic");
            if let Some(leader) = leader {
                return self.index_of(leader);
            }
            assert!(
                Instant::now() < deadline,
                "no ZooKeeper leader within {within:?}; {}",
                self.modes()
            );
            tokio::time::sleep(PROBE_EVERY).await;
        }
    }

    /// Crashes member `i` (`SIGKILL`, also when paused) and waits until the
    /// process is gone. When a quorum (two members) still runs, then waits
    /// (without blocking the runtime) until it serves again: a new leader
    /// when `i` led. Its data stays for [`start_member`](Self::start_member).
    /// Panics with the logs' tails when the rest will not serve within 60 s.
    pub async fn stop_member(&mut self, i: usize) {
        self.nodes[i].kill();
        if self.running_ports().len() >= 2 {
            self.wait_until_serving(READY_WITHIN).await;
        }
    }

    /// Starts the stopped member `i` again, on the same ports, with its data.
    /// When a quorum then runs, waits (without blocking the runtime) until
    /// the member serves (as a follower, or leader) and the running members
    /// agree on one leader; without a quorum it cannot serve, and this only
    /// waits until its process stays up a moment. Does nothing when it runs.
    /// Panics with the logs' tails when it will not serve within 60 s.
    pub async fn start_member(&mut self, i: usize) {
        if self.is_running(i) {
            return;
        }
        let quorum = self.running_ports().len() + 1 >= 2;
        let port = self.nodes[i].client_port;
        if quorum {
            self.nodes[i].restart(move || mode(port).is_some()).await;
            self.wait_until_serving(READY_WITHIN).await;
        } else {
            self.nodes[i].restart_unserved().await;
        }
    }

    /// Freezes member `i` (`SIGSTOP`): it answers nobody, neither clients
    /// nor its peers, until [`resume_member`](Self::resume_member).
    pub fn pause_member(&self, i: usize) {
        self.nodes[i].signal("STOP");
    }

    /// Lets a paused member `i` go on (`SIGCONT`).
    pub fn resume_member(&self, i: usize) {
        self.nodes[i].signal("CONT");
    }

    /// Member `i`'s log file.
    pub fn log(&self, i: usize) -> &Path {
        &self.nodes[i].log
    }

    /// The last 30 lines of every member's log, for assertion messages.
    pub fn logs(&self) -> String {
        let logs: Vec<String> = self
            .nodes
            .iter()
            .map(|n| {
                format!(
                    "--- member {} (myid {}):\n{}",
                    n.id - 1,
                    n.id,
                    log_tail(&n.log)
                )
            })
            .collect();
        logs.join("\n")
    }

    /// The directory holding each member's configuration (`zk<myid>.cfg`),
    /// data (`zk<myid>.data`) and log (`zk<myid>.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Waits until the running members serve with one leader; panics with
    /// their logs after `within`.
    async fn wait_until_serving(&self, within: Duration) {
        let running = self.running_ports();
        let deadline = Instant::now() + within;
        loop {
            let ports = running.clone();
            let serving = tokio::task::spawn_blocking(move || leader_among(&ports).is_some())
                .await
                .expect("the probe does not panic");
            if serving {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the ZooKeeper ensemble does not serve again within {within:?}; {}\n{}",
                self.modes(),
                self.logs()
            );
            tokio::time::sleep(PROBE_EVERY).await;
        }
    }

    /// The client ports of the running members.
    fn running_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.keeper.is_some())
            .map(|n| n.client_port)
            .collect()
    }

    fn index_of(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.client_port == port)
            .expect("a member's port")
    }

    /// Every member's mode, for panic messages.
    fn modes(&self) -> String {
        let modes: Vec<String> = (0..self.nodes.len())
            .map(|i| {
                let state = if self.is_running(i) {
                    self.mode(i).unwrap_or_else(|| "not serving".into())
                } else {
                    "stopped".into()
                };
                format!("member {i}: {state}")
            })
            .collect();
        modes.join(", ")
    }
}

impl Drop for ZkEnsemble {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One ZooKeeper server process of a test (standalone or a member), and its
/// files.
struct Node {
    /// `myid`: 1, 2, 3 in an ensemble; 0 when standalone.
    id: usize,
    client_port: u16,
    quorum_port: u16,
    election_port: u16,
    cfg: PathBuf,
    data: PathBuf,
    log: PathBuf,
    keeper: Option<Child>,
    /// The JVM's pid while it runs.
    pid: Option<u32>,
    /// The test's extra JVM options.
    jvm_options: Vec<String>,
}

/// What a member's configuration says of each member.
struct Peer {
    id: usize,
    quorum_port: u16,
    election_port: u16,
}

impl Node {
    fn new(id: usize, client_port: u16, quorum_port: u16, election_port: u16, dir: &Path) -> Node {
        Node {
            id,
            client_port,
            quorum_port,
            election_port,
            cfg: dir.join(format!("zk{id}.cfg")),
            data: dir.join(format!("zk{id}.data")),
            log: dir.join(format!("zk{id}.log")),
            keeper: None,
            pid: None,
            jvm_options: Vec::new(),
        }
    }

    fn peer(&self) -> Peer {
        Peer {
            id: self.id,
            quorum_port: self.quorum_port,
            election_port: self.election_port,
        }
    }

    /// Writes its configuration (an ensemble's when `peers` are given, else
    /// a standalone server's) and its data directory with `myid`.
    fn configure(&self, peers: &[Peer]) {
        std::fs::create_dir_all(&self.data).expect("a data directory for ZooKeeper");
        let mut cfg = format!(
            "tickTime=500\n\
             initLimit=20\n\
             syncLimit=10\n\
             dataDir={data}\n\
             clientPort={port}\n\
             clientPortAddress=127.0.0.1\n\
             minSessionTimeout=1000\n\
             maxSessionTimeout=60000\n\
             maxClientCnxns=0\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=*\n\
             forceSync=no\n",
            data = self.data.display(),
            port = self.client_port,
        );
        for peer in peers {
            cfg.push_str(&format!(
                "server.{}=127.0.0.1:{}:{}\n",
                peer.id, peer.quorum_port, peer.election_port
            ));
        }
        if !peers.is_empty() {
            std::fs::write(self.data.join("myid"), format!("{}\n", self.id))
                .expect("ZooKeeper's myid written");
        }
        std::fs::write(&self.cfg, cfg).expect("ZooKeeper's configuration written");
    }

    /// Starts the server under a keeper and reads the JVM's pid.
    fn spawn(&mut self) {
        let mut keeper = Command::new("sh")
            .arg("-c")
            .arg(KEEPER)
            .arg("sh")
            .arg(&self.log)
            .args(JVM_OPTIONS)
            .arg("-Dzookeeper.admin.enableServer=false")
            .args(&self.jvm_options)
            .arg("-cp")
            .arg(classpath(SERVER_JARS))
            .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
            .arg(&self.cfg)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh runs");
        let mut pid = String::new();
        if let Some(mut out) = keeper.stdout.take() {
            // One short line, written at once; the keeper holds the pipe
            // open until it ends, so read only up to the newline.
            let mut byte = [0u8; 1];
            while out.read(&mut byte).is_ok_and(|n| n == 1) && byte[0] != b'\n' {
                pid.push(char::from(byte[0]));
            }
        }
        self.pid = pid.trim().parse().ok();
        self.keeper = Some(keeper);
    }

    /// Whether the process has ended by itself (false when it was never
    /// started or was killed).
    fn exited(&mut self) -> bool {
        self.keeper
            .as_mut()
            .is_some_and(|keeper| !matches!(keeper.try_wait(), Ok(None)))
    }

    /// `SIGKILL`s the server (through its keeper) and waits until it is gone.
    fn kill(&mut self) {
        if let Some(mut keeper) = self.keeper.take() {
            drop(keeper.stdin.take());
            let _ = keeper.wait();
        }
        self.pid = None;
    }

    /// Sends `SIGSTOP` or `SIGCONT` to the running JVM.
    fn signal(&self, signal: &str) {
        let pid = self.pid.expect("the ZooKeeper server runs");
        let sent = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .is_ok_and(|s| s.success());
        assert!(sent, "kill -{signal} {pid} failed");
        if signal == "STOP" {
            // A stop is delivered to each of the JVM's threads in its own
            // time: until all of them are stopped, one may still answer.
            let deadline = Instant::now() + Duration::from_secs(10);
            while !all_stopped(pid) {
                assert!(Instant::now() < deadline, "pid {pid} not stopped in 10 s");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Starts the server again with its data and waits until `ready`;
    /// retries while it exits at once (a port still or again taken). Panics
    /// with its log's tail after 60 s.
    async fn restart(&mut self, ready: impl Fn() -> bool + Clone + Send + 'static) {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            self.spawn();
            let outcome = loop {
                if self.exited() {
                    break Outcome::Exited;
                }
                let probe = ready.clone();
                if tokio::task::spawn_blocking(probe)
                    .await
                    .expect("the probe does not panic")
                {
                    break Outcome::Ready;
                }
                if Instant::now() >= deadline {
                    break Outcome::TimedOut;
                }
                tokio::time::sleep(PROBE_EVERY).await;
            };
            match outcome {
                Outcome::Ready => return,
                Outcome::Exited if Instant::now() < deadline => {
                    self.kill();
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                outcome => {
                    self.kill();
                    panic!(
                        "ZooKeeper (myid {}) did not restart ({outcome:?}); its log ends with:\n{}",
                        self.id,
                        log_tail(&self.log)
                    );
                }
            }
        }
    }

    /// Starts a member that cannot serve (no quorum) again: waits only
    /// until its process has stayed up for a moment.
    async fn restart_unserved(&mut self) {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            self.spawn();
            tokio::time::sleep(Duration::from_millis(500)).await;
            if !self.exited() {
                return;
            }
            self.kill();
            assert!(
                Instant::now() < deadline,
                "ZooKeeper (myid {}) did not restart; its log ends with:\n{}",
                self.id,
                log_tail(&self.log)
            );
        }
    }
}

/// Sends a four-letter word (`srvr`, `ruok`, `stat`, ...) to the server on
/// `port` and returns its whole answer; `None` when it does not answer
/// within a second or two (it is down, paused, or refuses).
pub fn four_letter(port: u16, word: &str) -> Option<String> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(1)))
        .ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

/// The server's `Mode:` as `srvr` says it (`standalone`, `leader`,
/// `follower`), or `None` when it does not serve (it answers "This ZooKeeper
/// instance is not currently serving requests" while looking for a leader).
fn mode(port: u16) -> Option<String> {
    parse_mode(&four_letter(port, "srvr")?)
}

fn parse_mode(srvr: &str) -> Option<String> {
    srvr.lines()
        .find_map(|line| line.strip_prefix("Mode: "))
        .map(|mode| mode.trim().to_owned())
}

/// Whether the server on `port` serves (answers `srvr` with any mode).
/// Whether every thread of process `pid` is stopped (state `T` in
/// `/proc/<pid>/task/*/stat`, the field after the command's parenthesis).
fn all_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state == "T" || state == "t")
        })
    })
}

fn serves(port: u16) -> bool {
    mode(port).is_some()
}

/// The port among `running` whose server leads, when every one of them
/// serves and exactly one leads and at least two run (a quorum of three).
fn leader_among(running: &[u16]) -> Option<u16> {
    if running.len() < 2 {
        return None;
    }
    let mut leader = None;
    for &port in running {
        match mode(port)?.as_str() {
            "leader" if leader.is_none() => leader = Some(port),
            "follower" => {}
            _ => return None,
        }
    }
    leader
}

/// `jars` joined with `:`; panics, saying what to install, when one is
/// missing.
pub fn classpath(jars: &[&str]) -> String {
    for jar in jars {
        assert!(
            Path::new(jar).is_file(),
            "{jar} is missing: install ZooKeeper and Curator (`bash tools/setup.sh`)"
        );
    }
    jars.join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_mode_of_srvr() {
        let srvr = "Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0.0/0\nMode: follower\nNode count: 5\n";
        assert_eq!(parse_mode(srvr).as_deref(), Some("follower"));
        assert_eq!(
            parse_mode("This ZooKeeper instance is not currently serving requests\n"),
            None
        );
    }
}
