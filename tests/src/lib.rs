//! Test harness: real `redis-server` processes on free loopback ports, started
//! by the tests themselves and stopped when dropped (or when the test process
//! ends). Never the machine's 6379.

pub mod engines;
pub mod etcd;
pub mod fault;
pub mod lockctl;
pub mod mariadb;
pub mod postgres;
pub mod proxy;
pub mod recorded;
pub mod shedlock;
pub mod sql_server;
pub mod topology;
pub mod zookeeper;

use std::future::Future;
use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient};
use std::process::{Child, Command, Stdio};

/// A redis-server owned by a test. Stopped when dropped, and also when the
/// test process dies without dropping it (a `static` server, a panic with
/// `panic = "abort"`, a kill): the server runs under a small `sh` keeper that
/// stops it as soon as the test process's end of its stdin pipe closes.
pub struct Server {
    process: Option<Child>,
    port: u16,
    args: Vec<String>,
}

impl Server {
    /// Starts a fresh server on a free loopback port and waits until it
    /// answers `PING`. Panics (failing the test) when no server will start.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Like [`start`](Self::start), with extra `redis-server` arguments
    /// (e.g. `["--maxmemory", "10mb"]`).
    pub fn start_with(args: &[&str]) -> Server {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        for _ in 0..5 {
            let port = free_port();
            if let Some(process) = spawn_on(port, &args) {
                return Server {
                    process: Some(process),
                    port,
                    args,
                };
            }
        }
        panic!("could not start redis-server (is it installed? `apt-get install redis-server`)");
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the server and waits until it is gone (its data is lost:
    /// nothing is persisted).
    pub fn stop(&mut self) {
        if let Some(mut keeper) = self.process.take() {
            // Closing the keeper's stdin makes it stop the server.
            drop(keeper.stdin.take());
            let _ = keeper.wait();
        }
    }

    /// Starts the server again on the same port, empty.
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(process) = spawn_on(self.port, &self.args) {
                self.process = Some(process);
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("could not restart redis-server on port {}", self.port);
    }

    /// A server that persists every write before answering it
    /// (`--appendonly yes --appendfsync always`) in `dir`, so that a
    /// [`crash`](Self::crash) and [`restart`](Self::restart) keep all data,
    /// and that accepts `DEBUG` from loopback.
    pub fn start_persistent(dir: &std::path::Path) -> Server {
        let dir = dir.to_string_lossy();
        Server::start_with(&[
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--dir",
            &dir,
            "--enable-debug-command",
            "local",
        ])
    }

    /// Kills the server with SIGKILL (no shutdown, no final save) and waits
    /// until it is gone. [`restart`](Self::restart) brings it back.
    pub fn crash(&mut self) {
        let Some(mut keeper) = self.process.take() else {
            return;
        };
        if let Some(pid) = server_pid(self.port) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        // The keeper returns once its server is gone.
        drop(keeper.stdin.take());
        let _ = keeper.wait();
    }

    /// Whether the server is running.
    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    /// A plain connection, for looking at (and tampering with) the data the
    /// way another program would.
    pub async fn raw(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("valid url")
            .get_multiplexed_async_connection()
            .await
            .expect("raw connection to the test server")
    }

    /// A lock client with the default configuration.
    pub async fn client(&self) -> LockClient {
        self.client_with(|c| c).await
    }

    /// A lock client whose configuration `tune` adjusts.
    pub async fn client_with(&self, tune: impl FnOnce(Config) -> Config) -> LockClient {
        LockClient::connect(tune(Config::new(self.url())))
            .await
            .expect("lock client connects to the test server")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Runs `redis-server` under a keeper shell: the keeper stops the server when
/// its stdin reaches end of file, i.e. when we close it or when we die.
pub fn keep(server_args: &[String]) -> std::io::Result<Child> {
    const KEEPER: &str =
        r#"redis-server "$@" & server=$!; read _ignored; kill $server 2>/dev/null; wait $server"#;
    Command::new("sh")
        .arg("-c")
        .arg(KEEPER)
        .arg("sh")
        .args(server_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

/// Arguments every test server shares: `port` on loopback, no persistence,
/// working directory `dir`, logging to `logfile` (`""`: none).
pub fn server_args(port: u16, dir: &std::path::Path, logfile: &str) -> Vec<String> {
    [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        &dir.to_string_lossy(),
        "--logfile",
        logfile,
    ]
    .iter()
    .map(|a| a.to_string())
    .collect()
}

fn spawn_on(port: u16, extra: &[String]) -> Option<Child> {
    let mut args = server_args(port, &std::env::temp_dir(), "");
    args.extend(extra.iter().cloned());
    let mut keeper = keep(&args).ok()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = keeper.try_wait() {
            // Exited: most likely the port was taken meanwhile.
            return None;
        }
        if ping(port) {
            return Some(keeper);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(keeper.stdin.take());
    let _ = keeper.wait();
    None
}

/// The process id of the server on `port` (`INFO server`).
fn server_pid(port: u16) -> Option<u32> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(2))
        .ok()?;
    let info: String = redis::cmd("INFO").arg("server").query(&mut conn).ok()?;
    info.lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}

fn ping(port: u16) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
        return false;
    };
    let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(200)) else {
        return false;
    };
    match redis::cmd("PING").query::<String>(&mut conn) {
        Ok(_) => true,
        // Up, but wants a password first.
        Err(e) => e.code() == Some("NOAUTH"),
    }
}

/// Waits until `check` holds, checking every 10 ms, for at most `within`
/// (generous: this bounds a wait for an event, it asserts no speed). Panics
/// with `what` when it never holds.
pub async fn eventually<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return;
        }
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Subscribers of `channel` on the server (`PUBSUB NUMSUB`).
pub async fn numsub(conn: &mut redis::aio::MultiplexedConnection, channel: &str) -> i64 {
    let (_, n): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(conn)
        .await
        .expect("PUBSUB NUMSUB");
    n
}

/// Mutual exclusion under load: on each client, `tasks` tasks each make
/// `rounds` non-atomic read-modify-write increments of the plain key
/// `counter` (set to 0 first), each under a guard from `lock`. Returns the
/// final count: clients × tasks × rounds when no increment was lost.
pub async fn count_under_lock<L, Fut>(
    server: &Server,
    clients: &[LockClient],
    counter: &str,
    (tasks, rounds): (usize, usize),
    lock: L,
) -> i64
where
    L: Fn(LockClient) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<lock_runtime::LockGuard, lock_runtime::LockError>> + Send,
{
    use redis::AsyncCommands;
    let mut raw = server.raw().await;
    let _: () = raw.set(counter, 0).await.expect("SET");
    let mut handles = Vec::new();
    for client in clients {
        for _ in 0..tasks {
            let (client, lock, counter) = (client.clone(), lock.clone(), counter.to_owned());
            let mut conn = raw.clone();
            handles.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = lock(client.clone()).await.expect("acquire");
                    let n: i64 = conn.get(&counter).await.expect("GET");
                    tokio::task::yield_now().await;
                    let _: () = conn.set(&counter, n + 1).await.expect("SET");
                    guard.release().await.expect("release");
                }
            }));
        }
    }
    for handle in handles {
        handle.await.expect("a counting task panicked");
    }
    raw.get(counter).await.expect("GET")
}

/// Awaits a spawned task (or any future of a nested `Result`) that must end
/// within `within` (generous: it bounds a wait, it asserts no speed), and
/// unwraps both layers of its result.
pub async fn finish<T, E, J>(
    within: Duration,
    task: impl Future<Output = Result<Result<T, E>, J>>,
) -> T
where
    E: std::fmt::Debug,
    J: std::fmt::Debug,
{
    tokio::time::timeout(within, task)
        .await
        .expect("the task did not finish in time")
        .expect("the task failed to run")
        .expect("the task returned an error")
}

/// Waits until nobody listens on `channel` any more. Unsubscribing follows
/// the last waiter's exit through the client's pub/sub dispatcher, so it is
/// an event to await, not a state to sample. Panics after 20 s.
pub async fn until_unsubscribed(conn: &redis::aio::MultiplexedConnection, channel: &str) {
    eventually(
        &format!("no subscriber left on {channel}"),
        Duration::from_secs(20),
        || {
            let mut conn = conn.clone();
            async move { numsub(&mut conn, channel).await == 0 }
        },
    )
    .await;
}

/// Takes the lock `builder` describes and releases it, panicking on any
/// error: a check that the lock is free and works.
pub async fn take_and_release(builder: lock_runtime::LockBuilder) {
    let guard = builder.acquire().await.expect("acquire");
    guard.release().await.expect("release");
}

/// How long the first future inside a [`Section`] stays there waiting for a
/// second one to come in: far longer than the Redis round trip a second
/// holder would need to get in, were the lock to let it.
pub const OVERLAP_WINDOW: Duration = Duration::from_secs(2);

/// Counts the futures inside a critical section at once. The first to enter
/// waits inside (up to [`OVERLAP_WINDOW`]) for another one to enter too: an
/// await point at which a second holder, polled by the same task, would get
/// in if the lock let it. `max` is then 2.
pub struct Section {
    inside: tokio::sync::watch::Sender<usize>,
    entries: std::sync::atomic::AtomicUsize,
    max: std::sync::atomic::AtomicUsize,
}

impl Default for Section {
    fn default() -> Self {
        Section::new()
    }
}

impl Section {
    /// Nobody inside yet.
    pub fn new() -> Section {
        Section {
            inside: tokio::sync::watch::channel(0).0,
            entries: Default::default(),
            max: Default::default(),
        }
    }

    /// Enters, runs `work`, waits for company if first, leaves.
    pub async fn enter<T>(&self, work: impl Future<Output = T>) -> T {
        use std::sync::atomic::Ordering;
        self.inside.send_modify(|n| *n += 1);
        self.max.fetch_max(*self.inside.borrow(), Ordering::SeqCst);
        let out = work.await;
        if self.entries.fetch_add(1, Ordering::SeqCst) == 0 {
            let mut inside = self.inside.subscribe();
            let _ = tokio::time::timeout(OVERLAP_WINDOW, inside.wait_for(|n| *n >= 2)).await;
            self.max.fetch_max(*self.inside.borrow(), Ordering::SeqCst);
        }
        self.inside.send_modify(|n| *n -= 1);
        out
    }

    /// The most futures that were inside at once.
    pub fn max(&self) -> usize {
        self.max.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The channels someone listens on (`PUBSUB CHANNELS` and, on Redis 7 or
/// newer, `PUBSUB SHARDCHANNELS`), sorted.
pub async fn channels(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let mut all: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query_async(conn)
        .await
        .expect("PUBSUB CHANNELS");
    let sharded: Vec<String> = redis::cmd("PUBSUB")
        .arg("SHARDCHANNELS")
        .query_async(conn)
        .await
        .unwrap_or_default();
    all.extend(sharded);
    all.sort();
    all
}

/// Waits until nobody listens on any channel of the server (a lock's waiters
/// have all gone, and their client has let go of every subscription). Panics
/// with the channels still subscribed after `within`.
pub async fn until_no_channels(conn: &redis::aio::MultiplexedConnection, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let left = channels(&mut conn.clone()).await;
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "channels still subscribed with no waiter left: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Every key of the server and its remaining lifetime in ms (`PTTL`: -1
/// when it has none), sorted by key.
pub async fn keys_and_ttls(conn: &mut redis::aio::MultiplexedConnection) -> Vec<(String, i64)> {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(conn)
        .await
        .expect("KEYS");
    let mut out = Vec::new();
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(conn)
            .await
            .expect("PTTL");
        if ttl != -2 {
            out.push((key, ttl));
        }
    }
    out.sort();
    out
}

/// A fresh, empty directory for one test's server files (AOF, RDB, logs),
/// under the system's temp dir, unique to this process and `tag`.
pub fn scratch_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lock-runtime-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// Pauses the server's writes for `ms` milliseconds (`CLIENT PAUSE ms
/// WRITE`): scripts, writes and their expiries wait, reads go on. A fault
/// that heals by itself.
pub async fn pause_writes(raw: &mut redis::aio::MultiplexedConnection, ms: u64) {
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg("WRITE")
        .query_async(raw)
        .await
        .expect("CLIENT PAUSE");
}

/// The kinds of single-name lock, for tests that run one scenario on each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `client.lock(name)`.
    Reentrant,
    /// `client.fair_lock(name)`.
    Fair,
    /// `client.read_write_lock(name).write()`.
    Write,
    /// `client.read_write_lock(name).read()`.
    Read,
}

impl Kind {
    /// A builder of this kind of lock on `name`.
    pub fn builder(self, client: &LockClient, name: &str) -> lock_runtime::LockBuilder {
        match self {
            Kind::Reentrant => client.lock(name),
            Kind::Fair => client.fair_lock(name),
            Kind::Write => client.read_write_lock(name).write(),
            Kind::Read => client.read_write_lock(name).read(),
        }
    }

    /// The field of the lock's hash that counts `holder`'s holds of this
    /// kind (a writer's is `<holder>:write`).
    pub fn field(self, holder: &str) -> String {
        match self {
            Kind::Write => format!("{holder}:write"),
            _ => holder.to_owned(),
        }
    }
}

/// A throwaway certificate authority and a server certificate it signed
/// for `127.0.0.1` (PEM files in a test's directory, made by `openssl`), for
/// TLS test servers.
pub struct Certificates {
    /// The authority's certificate: what a client trusts.
    pub ca: std::path::PathBuf,
    /// The server's certificate.
    pub cert: std::path::PathBuf,
    /// The server's key.
    pub key: std::path::PathBuf,
}

/// Makes [`Certificates`] in `dir`.
pub fn certificates(dir: &std::path::Path) -> Certificates {
    let file = |name: &str| dir.join(name);
    let openssl = |args: &[&str]| {
        let made = Command::new("openssl")
            .current_dir(dir)
            .args(args)
            .output()
            .expect("openssl runs");
        assert!(
            made.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&made.stderr)
        );
    };
    std::fs::write(
        file("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .expect("the test directory is writable");
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=test CA",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "key.pem",
        "-out",
        "server.csr",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        "server.ext",
        "-out",
        "cert.pem",
    ]);
    Certificates {
        ca: file("ca.pem"),
        cert: file("cert.pem"),
        key: file("key.pem"),
    }
}
