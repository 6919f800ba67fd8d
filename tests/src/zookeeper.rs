//! The tests' ZooKeeper: the servers of the workspace's harness
//! ([`servers::zookeeper`], re-exported here: a standalone [`ZooKeeper`] and
//! a three-member [`ZkEnsemble`]), plus two clients independent of the
//! engine under test: Apache Curator, the Java recipes the engine
//! interoperates with, driven as a child process ([`Curator`]), and a Rust
//! reader of a lock's nodes ([`zk_children`]). The Curator driver exits by
//! itself when its stdin closes.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};

pub use servers::zookeeper::*;

/// The children of `path` (their names, not paths), sorted by their
/// sequence numbers as Curator sorts them (see [`sequence_of`]): the holder
/// of a lock first, then its waiters in line. Empty when `path` does not
/// exist. Reads through its own short ZooKeeper session (the
/// `zookeeper-client` crate), independent of the engine under test; panics
/// when no session can be had within 30 s.
pub async fn zk_children(connect: &str, path: &str) -> Vec<String> {
    let client = zk_session(connect).await;
    let mut children = match client.list_children(path).await {
        Ok(children) => children,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("listing the children of {path} on {connect}: {e}"),
    };
    children.sort_by(|a, b| (sequence_of(a), a).cmp(&(sequence_of(b), b)));
    children
}

/// The stat of `path` (`czxid`, `ephemeral_owner`, `num_children`, ...), or
/// `None` when it does not exist. A lock node's `ephemeral_owner` is its
/// holder's session id. Its parents, which Curator creates as containers,
/// show 0 like persistent nodes (the server hides the container mark from
/// clients; see [`ZooKeeper::start_with`]). Reads through its own short
/// session, like [`zk_children`].
pub async fn zk_stat(connect: &str, path: &str) -> Option<zookeeper_client::Stat> {
    let client = zk_session(connect).await;
    client
        .check_stat(path)
        .await
        .unwrap_or_else(|e| panic!("the stat of {path} on {connect}: {e}"))
}

/// A fresh ZooKeeper session on `connect` (closed when dropped); panics when
/// none can be had within 30 s.
async fn zk_session(connect: &str) -> zookeeper_client::Client {
    let connecting = zookeeper_client::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(connect);
    tokio::time::timeout(Duration::from_secs(30), connecting)
        .await
        .unwrap_or_else(|_| panic!("no ZooKeeper session on {connect} within 30 s"))
        .unwrap_or_else(|e| panic!("no ZooKeeper session on {connect}: {e}"))
}

/// The sequence number a lock node is ordered by: the digits after the last
/// `lock-` (`InterProcessMutex`'s `_c_<uuid>-lock-0000000007`), `__READ__`
/// or `__WRIT__` (`InterProcessReadWriteLock`'s `_c_<uuid>-__READ__0000000007`)
/// in its name, which Curator sorts on; else the digits its name ends with
/// (every sequential node's name ends with ten). `u64::MAX` for a name with
/// neither, so that it sorts last.
pub fn sequence_of(name: &str) -> u64 {
    let after_marker = ["lock-", "__READ__", "__WRIT__"]
        .iter()
        .filter_map(|marker| name.rfind(marker).map(|at| at + marker.len()))
        .max()
        .map(|start| &name[start..])
        .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()));
    let digits = after_marker.unwrap_or_else(|| {
        let start = name
            .rfind(|c: char| !c.is_ascii_digit())
            .map_or(0, |at| at + 1);
        &name[start..]
    });
    digits.parse().unwrap_or(u64::MAX)
}

/// Apache Curator (5.4) as a child JVM the test drives: one
/// `CuratorFramework` on the given servers, with `InterProcessMutex`,
/// `InterProcessReadWriteLock` and `InterProcessSemaphoreV2` per path (`tests/java/CuratorLock.java`,
/// compiled on first use). Each method writes one command line to its stdin
/// and awaits its one answer line, never blocking the runtime.
///
/// Curator's locks are re-entrant: acquiring a path it holds counts up, and
/// each hold needs its release. Dropping it closes its stdin, on which it
/// closes its session (ZooKeeper deletes its lock nodes) and exits, a moment
/// later; [`close`](Self::close) waits for that, [`kill`](Self::kill) crashes
/// it instead (its nodes stay until its session expires).
pub struct Curator {
    child: tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    answers: Lines<BufReader<tokio::process::ChildStdout>>,
    dir: PathBuf,
    log: PathBuf,
}

impl Curator {
    /// Starts a Curator client on `connect` (a ZooKeeper connect string,
    /// e.g. [`ZooKeeper::connect_string`]) with a 5 s session, and waits
    /// until it is connected. Panics with its log's tail when it is not
    /// within 60 s.
    pub async fn start(connect: &str) -> Curator {
        Curator::start_with(connect, Duration::from_secs(5)).await
    }

    /// [`start`](Self::start) with another session timeout (the server
    /// grants 1 s to 60 s).
    pub async fn start_with(connect: &str, session_timeout: Duration) -> Curator {
        let classes = tokio::task::spawn_blocking(curator_classes)
            .await
            .expect("compiling the Curator driver does not panic");
        let dir = fresh_dir("lock-tests-curator-");
        let log = dir.join("curator.log");
        let log_file = std::fs::File::create(&log).expect("the driver's log file");
        let classpath = format!("{}:{}", classpath(CURATOR_JARS), classes.display());
        let mut child = tokio::process::Command::new("java")
            .args(JVM_OPTIONS)
            .arg("-cp")
            .arg(classpath)
            .arg("CuratorLock")
            .arg(connect)
            .arg(session_timeout.as_millis().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .expect("java runs (is a JDK installed? `bash tools/setup.sh`)");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("piped stdout");
        let mut curator = Curator {
            child,
            stdin,
            answers: BufReader::new(stdout).lines(),
            dir,
            log,
        };
        let first = curator.answer(READY_WITHIN, "start").await;
        if first != "ready" {
            curator.fail(&format!("Curator did not connect to {connect}: {first}"));
        }
        curator
    }

    /// `InterProcessMutex(path).acquire(timeout_ms, MILLISECONDS)`: true when
    /// it acquired the lock, false when it timed out. Panics on an error.
    pub async fn acquire(&mut self, path: &str, timeout_ms: u64) -> bool {
        self.acquire_as("acquire", path, timeout_ms).await
    }

    /// `InterProcessMutex(path).release()`. Panics on an error (e.g. it does
    /// not hold `path`).
    pub async fn release(&mut self, path: &str) {
        self.release_as("release", path).await;
    }

    /// `InterProcessReadWriteLock(path).readLock().acquire(timeout_ms,
    /// MILLISECONDS)`: true when acquired, false on timeout.
    pub async fn read_acquire(&mut self, path: &str, timeout_ms: u64) -> bool {
        self.acquire_as("read_acquire", path, timeout_ms).await
    }

    /// `InterProcessReadWriteLock(path).writeLock().acquire(timeout_ms,
    /// MILLISECONDS)`: true when acquired, false on timeout.
    pub async fn write_acquire(&mut self, path: &str, timeout_ms: u64) -> bool {
        self.acquire_as("write_acquire", path, timeout_ms).await
    }

    /// `InterProcessReadWriteLock(path).readLock().release()`.
    pub async fn read_release(&mut self, path: &str) {
        self.release_as("read_release", path).await;
    }

    /// `InterProcessReadWriteLock(path).writeLock().release()`.
    pub async fn write_release(&mut self, path: &str) {
        self.release_as("write_release", path).await;
    }

    /// `InterProcessSemaphoreV2(path, permits).acquire(timeout_ms,
    /// MILLISECONDS)`: true when it got a lease (kept until
    /// [`semaphore_release`](Self::semaphore_release)), false on timeout.
    /// Unlike the locks, every acquire is a lease of its own.
    pub async fn semaphore_acquire(&mut self, path: &str, permits: u32, timeout_ms: u64) -> bool {
        let line = format!("sem_acquire {path} {permits} {timeout_ms}");
        let within = Duration::from_millis(timeout_ms) + Duration::from_secs(30);
        match self.call(&line, within).await.as_str() {
            "acquired" => true,
            "timeout" => false,
            other => self.fail(&format!("`{line}` answered `{other}`")),
        }
    }

    /// Closes the oldest lease the driver holds on semaphore `path`.
    /// Panics when it holds none.
    pub async fn semaphore_release(&mut self, path: &str) {
        self.release_as("sem_release", path).await;
    }

    /// Sends one raw command line (see `tests/java/CuratorLock.java`) and
    /// returns its answer (`ok`, `acquired`, `timeout` or `error <why>`),
    /// waiting at most `within` for it. For tests of error answers.
    pub async fn call(&mut self, command: &str, within: Duration) -> String {
        let stdin = self.stdin.as_mut().expect("the driver's stdin is open");
        let sent = async {
            stdin.write_all(command.as_bytes()).await?;
            stdin.write_all(b"\n").await?;
            stdin.flush().await
        }
        .await;
        if let Err(e) = sent {
            self.fail(&format!("the Curator driver takes no command ({e})"));
        }
        self.answer(within, command).await
    }

    /// Ends the driver in order: closes its stdin, on which it closes its
    /// session (ZooKeeper deletes its lock nodes at once), and waits until it
    /// has exited (`SIGKILL` after 30 s).
    pub async fn close(mut self) {
        drop(self.stdin.take());
        if tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }

    /// Crashes the driver (`SIGKILL`) and waits until it is gone: its session
    /// is not closed, so its lock nodes stay until the session expires on the
    /// server (its session timeout after its last heartbeat).
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    /// The driver's log (Curator's and the ZooKeeper client's, at INFO).
    pub fn log(&self) -> &Path {
        &self.log
    }

    async fn acquire_as(&mut self, command: &str, path: &str, timeout_ms: u64) -> bool {
        let line = format!("{command} {path} {timeout_ms}");
        let within = Duration::from_millis(timeout_ms) + Duration::from_secs(30);
        match self.call(&line, within).await.as_str() {
            "acquired" => true,
            "timeout" => false,
            other => self.fail(&format!("`{line}` answered `{other}`")),
        }
    }

    async fn release_as(&mut self, command: &str, path: &str) {
        let line = format!("{command} {path}");
        let answer = self.call(&line, Duration::from_secs(30)).await;
        if answer != "ok" {
            self.fail(&format!("`{line}` answered `{answer}`"));
        }
    }

    /// The next answer line, within `within`; panics with the log's tail
    /// when there is none (the driver ended, or hangs).
    async fn answer(&mut self, within: Duration, what: &str) -> String {
        match tokio::time::timeout(within, self.answers.next_line()).await {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) | Ok(Err(_)) => {
                let status = self.child.wait().await;
                self.fail(&format!(
                    "the Curator driver ended ({status:?}) before answering `{what}`"
                ))
            }
            Err(_elapsed) => self.fail(&format!(
                "the Curator driver did not answer `{what}` within {within:?}"
            )),
        }
    }

    fn fail(&mut self, what: &str) -> ! {
        let _ = self.child.start_kill();
        panic!("{what}; its log ends with:\n{}", log_tail(&self.log));
    }
}

impl Drop for Curator {
    fn drop(&mut self) {
        // Its stdin closing ends it (it closes its session first); tokio
        // reaps it. The log may still be written to after its directory is
        // gone: harmless.
        drop(self.stdin.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The directory holding the compiled `CuratorLock.class`, compiled from
/// `tests/java/CuratorLock.java` the first time a test process asks for it.
/// It lives in the Cargo target dir (next to `deps/`), named after a hash of
/// the source and class path, so other test processes and later runs reuse
/// it; a compile goes to a private directory that is then renamed into
/// place, so concurrent processes never see half of one. Panics with
/// `javac`'s errors when it will not compile.
fn curator_classes() -> &'static Path {
    static CLASSES: OnceLock<PathBuf> = OnceLock::new();
    CLASSES.get_or_init(|| {
        const SOURCE: &str = include_str!("../java/CuratorLock.java");
        use std::hash::{DefaultHasher, Hash, Hasher};
        let classpath = classpath(CURATOR_JARS);
        let mut hasher = DefaultHasher::new();
        (SOURCE, &classpath).hash(&mut hasher);
        let base = std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.parent()?.join("curator-lock")))
            .unwrap_or_else(|| std::env::temp_dir().join("lock-tests-curator-lock"));
        let dir = base.join(format!("{:016x}", hasher.finish()));
        if dir.join("CuratorLock.class").is_file() {
            return dir;
        }
        let work = base.join(format!("tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).expect("a directory to compile the Curator driver in");
        let source = work.join("CuratorLock.java");
        std::fs::write(&source, SOURCE).expect("the driver's source written out");
        let compiled = Command::new("javac")
            .args(["-nowarn", "-encoding", "UTF-8", "-cp", &classpath, "-d"])
            .arg(&work)
            .arg(&source)
            .stdin(Stdio::null())
            .output()
            .expect("javac runs (is a JDK installed? `bash tools/setup.sh`)");
        assert!(
            compiled.status.success(),
            "javac CuratorLock.java failed:\n{}{}",
            String::from_utf8_lossy(&compiled.stdout),
            String::from_utf8_lossy(&compiled.stderr)
        );
        // Another process may have won the race: its classes are the same.
        if std::fs::rename(&work, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&work);
        }
        assert!(
            dir.join("CuratorLock.class").is_file(),
            "the compiled Curator driver is missing from {}",
            dir.display()
        );
        dir
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_lock_nodes_by_their_sequence() {
        assert_eq!(sequence_of("_c_1b2c-lock-0000000012"), 12);
        assert_eq!(sequence_of("_c_1b2c-__READ__0000000003"), 3);
        assert_eq!(sequence_of("_c_1b2c-__WRIT__0000000004"), 4);
        // The uuid's own digits never count.
        assert_eq!(sequence_of("_c_1234-lock-0000000001"), 1);
        assert_eq!(sequence_of("node0000000009"), 9);
        assert_eq!(sequence_of("leases"), u64::MAX);
    }
}
