//! Test harness: the workspace's throwaway servers (the `servers` crate,
//! which the demos and the benchmarks start too: real `redis-server`,
//! `etcd`, ZooKeeper, PostgreSQL and MariaDB processes on free loopback
//! ports, started by the tests themselves and stopped when dropped, or when
//! the test process ends; never a server's default port), the topologies
//! and faults built on them, and what the tests share.

pub mod engines;
pub mod fault;
pub mod lockctl;
pub mod proxy;
pub mod recorded;
pub mod shedlock;
pub mod sql_server;
pub mod topology;
pub mod zookeeper;

pub use servers::{Certificates, certificates, etcd, free_port, keep, mariadb, postgres};
pub use servers::{scratch_dir, server_args};

use std::future::Future;
use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient};

/// A `redis-server` owned by a test: the workspace harness's
/// [`servers::Redis`] (see there: it stops when dropped, also when the
/// test process dies), with a test's clients of it.
pub struct Server(servers::Redis);

impl std::ops::Deref for Server {
    type Target = servers::Redis;

    fn deref(&self) -> &servers::Redis {
        &self.0
    }
}

impl std::ops::DerefMut for Server {
    fn deref_mut(&mut self) -> &mut servers::Redis {
        &mut self.0
    }
}

impl Server {
    /// Starts a fresh server on a free loopback port and waits until it
    /// answers `PING`. Panics (failing the test) when no server will start.
    pub fn start() -> Server {
        Server(servers::Redis::start())
    }

    /// Like [`start`](Self::start), with extra `redis-server` arguments
    /// (e.g. `["--maxmemory", "10mb"]`).
    pub fn start_with(args: &[&str]) -> Server {
        Server(servers::Redis::start_with(args))
    }

    /// A server that persists every write (see
    /// [`servers::Redis::start_persistent`]).
    pub fn start_persistent(dir: &std::path::Path) -> Server {
        Server(servers::Redis::start_persistent(dir))
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
    /// `client.semaphore(name, permits)`.
    Semaphore(u32),
}

impl Kind {
    /// A builder of this kind of lock on `name`.
    pub fn builder(self, client: &LockClient, name: &str) -> lock_runtime::LockBuilder {
        match self {
            Kind::Reentrant => client.lock(name),
            Kind::Fair => client.fair_lock(name),
            Kind::Write => client.read_write_lock(name).write(),
            Kind::Read => client.read_write_lock(name).read(),
            Kind::Semaphore(permits) => client.semaphore(name, permits),
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
