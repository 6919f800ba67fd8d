//! Real `etcd` servers on loopback, started and stopped by the tests: a
//! single member ([`Etcd`]) and a three-member cluster ([`EtcdCluster`]),
//! plus `etcdctl` as a second, independent client ([`etcdctl`],
//! [`etcdctl_lock`]). Never the machine's 2379/2380: every port is a free one.
//!
//! Every `etcd` runs under a small `sh` keeper (like [`crate::Redis`]) that
//! kills it with `SIGKILL` as soon as the test process's end of the keeper's
//! stdin closes: when the harness stops it, and also when the test process
//! dies without dropping it. Each server's data and log live in a fresh
//! directory under the system's temp dir, removed on drop.
//!
//! Written against etcd 3.4 (`etcd --logger zap`, `ETCDCTL_API=3`).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::start::{Outcome, free_ports, fresh_dir, log_tail, wait_for};

/// How long start-up and restarts may take before the harness gives up
/// (generous: it bounds a wait, it asserts no speed).
const READY_WITHIN: Duration = Duration::from_secs(20);

/// Start-up attempts on fresh ports when `etcd` exits at once (most likely
/// because a port picked as free was taken meanwhile).
const ATTEMPTS: usize = 5;

/// etcd's default ports (clients, peers): never used.
const DEFAULT_PORTS: &[u16] = &[2379, 2380];

/// Runs `etcd "$@"` (after the log file, `$1`) in the background, and
/// `SIGKILL`s it when its stdin reaches end of file. The keeper itself ends
/// when `etcd` does, so its exit tells that `etcd` is gone. (A background
/// job of a non-interactive shell reads `/dev/null`, hence the stdin copy on
/// fd 3.)
const KEEPER: &str = r#"log=$1; shift
exec 3<&0
etcd "$@" >>"$log" 2>&1 3<&- &
pid=$!
{ read _ignored <&3; kill -9 $pid; } >/dev/null 2>&1 &
exec 3<&-
wait $pid"#;

/// A single-member etcd server owned by a test, on free loopback ports.
/// Killed, and its data directory removed, when dropped.
pub struct Etcd {
    member: Member,
    dir: PathBuf,
    cluster: Cluster,
}

impl Etcd {
    /// Starts a fresh server and waits until it answers
    /// `etcdctl endpoint health`. Panics (failing the test) with the tail of
    /// its log when no server will start within 20 s.
    pub fn start() -> Etcd {
        Etcd::start_with(false)
    }

    /// [`start`](Self::start), serving clients over TLS only, with a
    /// throwaway self-signed certificate for `127.0.0.1` ([`ca`](Self::ca)).
    /// [`url`](Self::url) is then `etcds://…`.
    pub fn start_tls() -> Etcd {
        Etcd::start_with(true)
    }

    fn start_with(tls: bool) -> Etcd {
        Etcd::try_start_with(tls).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`start`](Self::start), or why no server started (not installed, or
    /// it did not answer: with the tail of its log).
    pub fn try_start() -> Result<Etcd, String> {
        Etcd::try_start_with(false)
    }

    fn try_start_with(tls: bool) -> Result<Etcd, String> {
        for attempt in 1..=ATTEMPTS {
            let dir = fresh_dir("lock-tests-etcd-");
            let ports = free_ports(2, DEFAULT_PORTS);
            let mut member = Member::new("n0", ports[0], ports[1], &dir);
            if tls {
                member.tls = Some(crate::certificates(&dir));
            }
            let cluster = Cluster::of(std::slice::from_ref(&member));
            member.spawn(&cluster, "new");
            let endpoint = member.endpoint();
            let ca = member.tls.as_ref().map(|tls| tls.ca.clone());
            let outcome = wait_for(
                READY_WITHIN,
                || member.exited(),
                || healthy(&endpoint, ca.as_deref()),
            );
            match outcome {
                Outcome::Ready => {
                    return Ok(Etcd {
                        member,
                        dir,
                        cluster,
                    });
                }
                Outcome::Exited if attempt < ATTEMPTS => {
                    drop(member);
                    let _ = std::fs::remove_dir_all(&dir);
                }
                outcome => {
                    let log = log_tail(&member.log);
                    drop(member);
                    let _ = std::fs::remove_dir_all(&dir);
                    // Asked only once no server started.
                    for program in ["etcd", "etcdctl"] {
                        if Command::new(program)
                            .arg("--version")
                            .stdout(Stdio::null())
                            .stderr(Stdio::null())
                            .status()
                            .is_err()
                        {
                            return Err(format!(
                                "no etcd: `{program}` is not installed (Debian/Ubuntu: `sudo apt-get \
                                 install etcd-server etcd-client`; or run tools/setup.sh)"
                            ));
                        }
                    }
                    return Err(format!(
                        "etcd did not start ({outcome:?}); its log ends with:\n{log}"
                    ));
                }
            }
        }
        unreachable!("the last attempt returns")
    }

    /// The client URL for `etcdctl` and etcd client libraries:
    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        self.member.endpoint()
    }

    /// The URL a lock client is configured with: `etcd://127.0.0.1:<port>`
    /// (`etcds://` when it serves TLS).
    pub fn url(&self) -> String {
        let scheme = if self.member.tls.is_some() {
            "etcds"
        } else {
            "etcd"
        };
        format!("{scheme}://127.0.0.1:{}", self.member.client_port)
    }

    /// The certificate of the authority that signed a TLS server's, in PEM.
    pub fn ca(&self) -> Option<&Path> {
        self.member.tls.as_ref().map(|tls| tls.ca.as_path())
    }

    /// The loopback port clients connect to.
    pub fn port(&self) -> u16 {
        self.member.client_port
    }

    /// Whether the server is running (it was not stopped).
    pub fn is_running(&self) -> bool {
        self.member.keeper.is_some()
    }

    /// Kills the server with `SIGKILL` and waits until it is gone. Its data
    /// stays: [`restart`](Self::restart) brings it back.
    pub fn stop(&mut self) {
        self.member.kill();
    }

    /// Starts the stopped server again, on the same port, with its data, and
    /// waits until it answers. Does nothing when it runs.
    pub fn restart(&mut self) {
        if !self.is_running() {
            self.member.restart(&self.cluster, true);
        }
    }

    /// The directory holding the server's data (`n0.data`) and log
    /// (`n0.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.member.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A three-member etcd cluster (`n0`, `n1`, `n2`) owned by a test, on free
/// loopback ports. Members can be crashed and restarted with their data. All
/// are killed, and their data removed, when dropped.
pub struct EtcdCluster {
    members: Vec<Member>,
    dir: PathBuf,
    cluster: Cluster,
}

impl EtcdCluster {
    /// Starts three members together and waits until every one of them
    /// answers `etcdctl endpoint health` and they agree on a leader. Panics
    /// (failing the test) with the tail of their logs when no cluster will
    /// form within 20 s.
    pub fn start() -> EtcdCluster {
        for attempt in 1..=ATTEMPTS {
            let dir = fresh_dir("lock-tests-etcd-");
            let ports = free_ports(6, DEFAULT_PORTS);
            let mut members: Vec<Member> = (0..3)
                .map(|i| Member::new(&format!("n{i}"), ports[2 * i], ports[2 * i + 1], &dir))
                .collect();
            let cluster = Cluster::of(&members);
            for member in &mut members {
                member.spawn(&cluster, "new");
            }
            let all: Vec<String> = members.iter().map(Member::endpoint).collect();
            let outcome = wait_for(
                READY_WITHIN,
                || members.iter_mut().any(Member::exited),
                || healthy(&all.join(","), None) && leader_endpoint(&all).is_some(),
            );
            let started = EtcdCluster {
                members,
                dir,
                cluster,
            };
            match outcome {
                Outcome::Ready => return started,
                Outcome::Exited if attempt < ATTEMPTS => drop(started),
                outcome => {
                    let logs: Vec<String> = started
                        .members
                        .iter()
                        .map(|m| format!("--- {}:\n{}", m.name, log_tail(&m.log)))
                        .collect();
                    drop(started);
                    panic!(
                        "the etcd cluster did not form ({outcome:?}); its logs end with:\n{}",
                        logs.join("\n")
                    );
                }
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// The URL a lock client is configured with:
    /// `etcd://127.0.0.1:<p0>,127.0.0.1:<p1>,127.0.0.1:<p2>` (all members,
    /// running or not).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect();
        format!("etcd://{}", hosts.join(","))
    }

    /// Every member's client URL (`http://127.0.0.1:<port>`), by index,
    /// running or not. Join them with `,` for [`etcdctl`].
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::endpoint).collect()
    }

    /// Whether member `i` is running (it was not stopped).
    pub fn is_running(&self, i: usize) -> bool {
        self.members[i].keeper.is_some()
    }

    /// The index of the current leader: the running member that says it
    /// leads, and that every other running member that answers names too.
    /// Panics when there is none right now (after a fault, use
    /// [`wait_for_leader`](Self::wait_for_leader)).
    pub fn leader(&self) -> usize {
        self.leader_now().unwrap_or_else(|| {
            panic!(
                "no etcd leader right now; `endpoint status` says:\n{}",
                self.status_json()
            )
        })
    }

    /// Waits until the running members agree on a leader (see
    /// [`leader`](Self::leader)) and returns its index. Polls every 50 ms
    /// without blocking the runtime in between; panics after `within`.
    pub async fn wait_for_leader(&self, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            if let Some(leader) = self.leader_now() {
                return leader;
            }
            assert!(
                Instant::now() < deadline,
                "no etcd leader within {within:?}; `endpoint status` says:\n{}",
                self.status_json()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Crashes member `i`: `SIGKILL`, then waits until the process is gone.
    /// Its data stays for [`start_member`](Self::start_member).
    pub fn stop_member(&mut self, i: usize) {
        self.members[i].kill();
    }

    /// Starts the stopped member `i` again, on the same ports, with its data
    /// (`--initial-cluster-state existing`). When a quorum is then running,
    /// waits (blocking the thread, usually well under a second) until the
    /// member answers `endpoint health`; without a quorum it cannot, and
    /// this returns once the process is up. Does nothing when it runs.
    pub fn start_member(&mut self, i: usize) {
        if self.is_running(i) {
            return;
        }
        let running = self.members.iter().filter(|m| m.keeper.is_some()).count() + 1;
        let quorum = running > self.members.len() / 2;
        self.members[i].restart(&self.cluster, quorum);
    }

    /// The directory holding each member's data (`n<i>.data`) and log
    /// (`n<i>.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The index of the leader the running members agree on, if any.
    fn leader_now(&self) -> Option<usize> {
        let leader = leader_endpoint(&self.running())?;
        self.members.iter().position(|m| m.endpoint() == leader)
    }

    /// The client URLs of the running members.
    fn running(&self) -> Vec<String> {
        self.members
            .iter()
            .filter(|m| m.keeper.is_some())
            .map(Member::endpoint)
            .collect()
    }

    /// `etcdctl endpoint status -w json` of the running members, for panic
    /// messages.
    fn status_json(&self) -> String {
        let out = status(&self.running());
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            member.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `etcdctl --endpoints=<endpoint> <args>` (API v3) to completion and
/// returns its output. `endpoint` may list several, comma-separated. Panics
/// only when `etcdctl` cannot be run at all.
pub fn etcdctl(endpoint: &str, args: &[&str]) -> Output {
    etcdctl_command(endpoint)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("etcdctl runs (is it installed? `apt-get install etcd-client`)")
}

/// Starts `etcdctl --endpoints=<endpoint> lock <name>`: another client
/// contending for the etcd lock `name` (etcd's `concurrency.Mutex`, session
/// TTL 10 s). See [`EtcdctlLock`].
pub fn etcdctl_lock(endpoint: &str, name: &str) -> EtcdctlLock {
    etcdctl_lock_with_ttl(endpoint, name, Duration::from_secs(10))
}

/// Like [`etcdctl_lock`], with the session lease's TTL (`--ttl`, in whole
/// seconds, rounded up; etcd raises anything under 2 s to 2 s). It bounds
/// how long the lock outlives an `etcdctl` that was [`kill`](EtcdctlLock::kill)ed.
pub fn etcdctl_lock_with_ttl(endpoint: &str, name: &str, ttl: Duration) -> EtcdctlLock {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    let mut child = etcdctl_command(endpoint)
        .arg("lock")
        .arg(format!("--ttl={}", secs.max(1)))
        .arg(name)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("etcdctl runs (is it installed? `apt-get install etcd-client`)");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut stderr = child.stderr.take().expect("piped stderr");
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    EtcdctlLock {
        child: Some(child),
        lines,
        stderr: Some(stderr),
        key: None,
    }
}

/// A running `etcdctl lock <name>`: it waits for the lock, then prints the
/// key it holds it by (`<name>/<lease id in hex>`) and holds it until
/// interrupted. [`release`](Self::release) (or dropping it) interrupts it
/// with `SIGINT`, on which `etcdctl` deletes its key, so the next waiter gets
/// the lock at once; a waiter that never got the lock withdraws its key the
/// same way. If the test process dies instead, `etcdctl` goes on holding
/// until its session expires (at the latest a TTL after its server is gone).
pub struct EtcdctlLock {
    child: Option<Child>,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    stderr: Option<JoinHandle<String>>,
    key: Option<String>,
}

impl EtcdctlLock {
    /// The key `etcdctl` holds the lock by (`<name>/<lease id in hex>`), once
    /// it holds it: waits at most `within` for that, and returns `None` when
    /// it still waits for the lock. Panics, with its error output, when
    /// `etcdctl` ended without taking the lock.
    pub async fn acquired(&mut self, within: Duration) -> Option<String> {
        if self.key.is_none() {
            match tokio::time::timeout(within, self.lines.recv()).await {
                Err(_elapsed) => return None,
                Ok(Some(key)) => self.key = Some(key),
                Ok(None) => {
                    let status = self.child.take().map(|mut child| child.wait());
                    let stderr = self.stderr.take().map(|t| t.join().unwrap_or_default());
                    panic!(
                        "etcdctl lock ended without the lock ({status:?}): {}",
                        stderr.unwrap_or_default()
                    );
                }
            }
        }
        self.key.clone()
    }

    /// Lets go: interrupts `etcdctl` (`SIGINT`), which deletes its key (and
    /// thereby releases the lock or leaves the queue), and waits until it has
    /// ended (`SIGKILL` after 5 s, e.g. when its server is gone).
    pub fn release(mut self) {
        self.interrupt();
    }

    /// Crashes `etcdctl` (`SIGKILL`): its key, and so the lock, stays until
    /// its session lease expires, a TTL (10 s by default) later.
    pub fn kill(mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn interrupt(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !matches!(child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for EtcdctlLock {
    fn drop(&mut self) {
        self.interrupt();
    }
}

/// One `etcd` process of a test server or cluster, and its files.
struct Member {
    name: String,
    client_port: u16,
    peer_port: u16,
    data: PathBuf,
    log: PathBuf,
    keeper: Option<Child>,
    /// Its certificates when it serves clients over TLS.
    tls: Option<crate::Certificates>,
}

/// What every member of one cluster is started with.
struct Cluster {
    /// `n0=http://127.0.0.1:<peer>,…`
    initial: String,
    /// Unique per cluster, so that members of two test clusters never talk.
    token: String,
}

impl Cluster {
    fn of(members: &[Member]) -> Cluster {
        let initial: Vec<String> = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect();
        Cluster {
            initial: initial.join(","),
            token: format!(
                "lock-tests-{}-{}",
                std::process::id(),
                members[0].client_port
            ),
        }
    }
}

impl Member {
    fn new(name: &str, client_port: u16, peer_port: u16, dir: &Path) -> Member {
        Member {
            name: name.to_owned(),
            client_port,
            peer_port,
            data: dir.join(format!("{name}.data")),
            log: dir.join(format!("{name}.log")),
            keeper: None,
            tls: None,
        }
    }

    fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    /// Starts `etcd` under a keeper; `state` is `new` or `existing`.
    fn spawn(&mut self, cluster: &Cluster, state: &str) {
        let client = self.endpoint();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let keeper = Command::new("sh")
            .arg("-c")
            .arg(KEEPER)
            .arg("sh")
            .arg(&self.log)
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(&self.data)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &cluster.initial])
            .args(["--initial-cluster-token", &cluster.token])
            .args(["--initial-cluster-state", state])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .args(["--log-level", "error"])
            .args(self.tls.iter().flat_map(|tls| {
                [
                    "--cert-file".into(),
                    tls.cert.as_os_str().to_owned(),
                    "--key-file".into(),
                    tls.key.as_os_str().to_owned(),
                ]
            }))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh runs");
        self.keeper = Some(keeper);
    }

    /// Whether the process has ended by itself (false when it was never
    /// started or was killed).
    fn exited(&mut self) -> bool {
        self.keeper
            .as_mut()
            .is_some_and(|keeper| !matches!(keeper.try_wait(), Ok(None)))
    }

    /// `SIGKILL`s `etcd` (through its keeper) and waits until it is gone.
    fn kill(&mut self) {
        if let Some(mut keeper) = self.keeper.take() {
            drop(keeper.stdin.take());
            let _ = keeper.wait();
        }
    }

    /// Starts `etcd` again with its data; retries while it exits at once (its
    /// port still or again taken). When `serve` says it can, waits until it
    /// answers `endpoint health`, else only until it has run for a moment.
    fn restart(&mut self, cluster: &Cluster, serve: bool) {
        let endpoint = self.endpoint();
        let ca = self.tls.as_ref().map(|tls| tls.ca.clone());
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            self.spawn(cluster, "existing");
            let outcome = if serve {
                wait_for(
                    deadline.saturating_duration_since(Instant::now()),
                    || self.exited(),
                    || healthy(&endpoint, ca.as_deref()),
                )
            } else {
                // It cannot answer before a quorum runs: it only has to stay
                // up for a moment.
                match wait_for(Duration::from_millis(200), || self.exited(), || false) {
                    Outcome::TimedOut => Outcome::Ready,
                    outcome => outcome,
                }
            };
            match outcome {
                Outcome::Ready => return,
                Outcome::Exited if Instant::now() < deadline => {
                    self.kill();
                    std::thread::sleep(Duration::from_millis(100));
                }
                outcome => {
                    self.kill();
                    panic!(
                        "etcd {} did not restart ({outcome:?}); its log ends with:\n{}",
                        self.name,
                        log_tail(&self.log)
                    );
                }
            }
        }
    }
}

/// `etcdctl` with API v3 and `--endpoints=<endpoint>`.
fn etcdctl_command(endpoint: &str) -> Command {
    let mut command = Command::new("etcdctl");
    command
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"));
    command
}

/// Whether every endpoint listed commits a proposal (`endpoint health`).
/// Whether `endpoints` answer `etcdctl endpoint health`; `ca`: the
/// certificate a TLS server's is signed with.
fn healthy(endpoints: &str, ca: Option<&Path>) -> bool {
    Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .args(ca.map(|ca| format!("--cacert={}", ca.display())))
        .args([
            "--dial-timeout=1s",
            "--command-timeout=2s",
            "endpoint",
            "health",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `endpoint status -w json` of the `running` endpoints (pass no dead one:
/// each would cost a timeout).
fn status(running: &[String]) -> Output {
    if running.is_empty() {
        return Command::new("true").output().expect("true runs");
    }
    Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", running.join(",")))
        .args(["--dial-timeout=1s", "--command-timeout=2s"])
        .args(["endpoint", "status", "-w", "json"])
        .stdin(Stdio::null())
        .output()
        .expect("etcdctl runs (is it installed? `apt-get install etcd-client`)")
}

/// The endpoint, among `running`, that says it leads and that every other
/// one that answers names as its leader. (Right after a leader is killed the
/// others still name it for an election timeout: it does not answer, so
/// nobody qualifies until a new leader is elected.)
fn leader_endpoint(running: &[String]) -> Option<String> {
    let statuses = parse_status(&String::from_utf8_lossy(&status(running).stdout));
    let leader = statuses
        .iter()
        .find(|s| s.leader != 0 && s.leader == s.member_id)?;
    if statuses.iter().any(|s| s.leader != leader.member_id) {
        return None;
    }
    Some(leader.endpoint.clone())
}

/// One entry of `etcdctl endpoint status -w json`.
#[derive(Debug, PartialEq)]
struct Status {
    endpoint: String,
    member_id: u64,
    leader: u64,
}

/// Reads `[{"Endpoint":"…","Status":{"header":{…,"member_id":N,…},…,
/// "leader":N,…}},…]` (etcd 3.4's shape) without a JSON parser: the ids are
/// plain numbers, the endpoints plain strings.
fn parse_status(json: &str) -> Vec<Status> {
    fn number(s: &str, key: &str) -> Option<u64> {
        let rest = &s[s.find(key)? + key.len()..];
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    }
    json.split("{\"Endpoint\":\"")
        .skip(1)
        .filter_map(|entry| {
            Some(Status {
                endpoint: entry[..entry.find('"')?].to_owned(),
                member_id: number(entry, "\"member_id\":")?,
                leader: number(entry, "\"leader\":")?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_endpoint_status() {
        let json = r#"[{"Endpoint":"http://127.0.0.1:1","Status":{"header":{"cluster_id":9,"member_id":11,"revision":1,"raft_term":2},"version":"3.4.23","dbSize":20480,"leader":22,"raftIndex":4,"raftTerm":2,"raftAppliedIndex":4,"dbSizeInUse":16384}},{"Endpoint":"http://127.0.0.1:2","Status":{"header":{"cluster_id":9,"member_id":22,"revision":1,"raft_term":2},"version":"3.4.23","dbSize":20480,"leader":22,"raftIndex":4,"raftTerm":2,"raftAppliedIndex":4,"dbSizeInUse":16384}}]"#;
        assert_eq!(
            parse_status(json),
            vec![
                Status {
                    endpoint: "http://127.0.0.1:1".into(),
                    member_id: 11,
                    leader: 22
                },
                Status {
                    endpoint: "http://127.0.0.1:2".into(),
                    member_id: 22,
                    leader: 22
                },
            ]
        );
    }
}
