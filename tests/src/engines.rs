//! One store of any engine, for the contract tests that run on every one
//! (`tests/tests/engines/`): each engine's store is a [`TestStore`] (a
//! Redis [`Server`], an [`Etcd`] server, a [`ZooKeeper`] server, a
//! [`Postgres`] server, a [`MariaDb`] server, a [`Memory`] store), and a
//! [`Store`] holds one, hands out lock clients for it, and tells, the way
//! another program would see it in the store, how many callers wait for a
//! lock (an event a test awaits instead of sleeping). [`every_engine!`]
//! is the suite's one list of engines.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient};

use crate::etcd::Etcd;
use crate::mariadb::MariaDb;
use crate::postgres::Postgres;
use crate::sql_server::{Database, SqlServer};
use crate::zookeeper::{ZooKeeper, zk_children};
use crate::{Kind, Server, numsub};

/// The engines of the suite, one row each: the test's name in a case's
/// module, the [`Store`] constructor, whether the store is a server
/// (`server`) or lives in the process (`in_process`: the memory engine,
/// with no server to stop or miss), and whether it is an SQL store
/// (`sql`, ShedLock's table) or not (`other`). `every_engine!(then!(args))` calls
/// `then!(args [rows])`: the suite's macros make their tests from it, so
/// a new engine is one row here and one [`TestStore`] impl.
#[macro_export]
macro_rules! every_engine {
    ($then:ident ! ($($args:tt)*)) => {
        $then! {
            $($args)* [
                (on_redis, redis, server, other),
                (on_etcd, etcd, server, other),
                (on_zookeeper, zookeeper, server, other),
                (on_postgres, postgres, server, sql),
                (on_mysql, mysql, server, sql),
                (on_memory, memory, in_process, other),
            ]
        }
    };
}

/// What the engine suite needs of one engine's store (ShedLock's shape:
/// the cases are written once against this, each engine supplies its
/// store): its engine and URL, stopping it, and how many callers wait for
/// a lock as the store shows them (an event a test awaits instead of
/// sleeping).
pub trait TestStore: Send + Sync {
    /// The engine's name, as [`LockClient::engine_name`] gives it.
    fn engine(&self) -> &'static str;

    /// The URL a lock client (or `lockctl --url`) is configured with.
    fn url(&self) -> String;

    /// Stops the store: clients of it meet a dead store.
    fn stop(&mut self);

    /// How many callers of other clients wait for lock `name` of `kind`,
    /// as the store shows them (see [`Store::waiting`]).
    fn waiting<'a>(&'a self, kind: Kind, name: &'a str) -> Counting<'a>;

    /// How many holds of lock `name` the store keeps (see
    /// [`Store::records`]).
    fn records<'a>(&'a self, name: &'a str) -> Counting<'a>;

    /// A lock client was handed out for the store.
    fn handed_out(&self, _client: &LockClient) {}

    /// An SQL store's answer to `statement`, run by the database's own
    /// client as its superuser (see [`Store::sql`]).
    fn sql<'a>(&'a self, statement: &'a str) -> Reading<'a, String> {
        let _ = statement;
        panic!("the {} store runs no SQL", self.engine())
    }

    /// An SQL store's clock in UTC, as a statement reads it.
    fn utc_now(&self) -> &'static str {
        panic!("the {} store has no SQL clock", self.engine())
    }
}

/// Something being read from a store.
pub type Reading<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A count being read from a store.
pub type Counting<'a> = Reading<'a, usize>;

/// A test's store: a fresh store of one engine ([`TestStore`]), stopped
/// when dropped.
pub struct Store(Box<dyn TestStore>);

/// A memory store for a test, and the clients handed out for it (which
/// "stopping" it cuts off: it has no server to stop).
pub struct Memory {
    name: String,
    hooks: lock_runtime::memory::MemoryStore,
    clients: std::sync::Mutex<Vec<LockClient>>,
    /// A client of its own that reads its records (never cut off).
    reader: tokio::sync::OnceCell<LockClient>,
}

impl Store {
    /// A fresh Redis server on a free loopback port.
    pub fn redis() -> Store {
        Store(Box::new(Server::start()))
    }

    /// A fresh single-member etcd server on free loopback ports.
    pub fn etcd() -> Store {
        Store(Box::new(Etcd::start()))
    }

    /// A fresh standalone ZooKeeper server on a free loopback port.
    pub fn zookeeper() -> Store {
        Store(Box::new(ZooKeeper::start()))
    }

    /// A fresh PostgreSQL server on a free loopback port.
    pub fn postgres() -> Store {
        Store(Box::new(Postgres::start()))
    }

    /// A fresh MariaDB server on a free loopback port.
    pub fn mysql() -> Store {
        Store(Box::new(MariaDb::start()))
    }

    /// A fresh memory store (the test kit's engine, DESIGN §12), of a name
    /// no other test uses, with its fault hooks.
    pub fn memory() -> Store {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("test-{}-{n}", std::process::id());
        let hooks = lock_runtime::memory::store(&name);
        Store(Box::new(Memory {
            name,
            hooks,
            clients: std::sync::Mutex::default(),
            reader: tokio::sync::OnceCell::new(),
        }))
    }

    /// The engine's name, as [`LockClient::engine_name`] gives it.
    pub fn engine(&self) -> &'static str {
        self.0.engine()
    }

    /// The URL scheme of the engine (`redis`, `etcd`, `zk`, `postgres`,
    /// `mysql`, `memory`), as its URL has it.
    pub fn scheme(&self) -> String {
        let url = self.url();
        url.split_once("://")
            .map_or(url.clone(), |(scheme, _)| scheme.to_owned())
    }

    /// The URL a lock client (or `lockctl --url`) is configured with.
    pub fn url(&self) -> String {
        self.0.url()
    }

    /// Stops the server (its data is gone with it, on Redis; etcd and the
    /// SQL servers keep it on disk): clients of it meet a dead store. A
    /// memory store has no server: the clients handed out for it are cut
    /// off (`MemoryStore::partition`).
    pub fn stop(&mut self) {
        self.0.stop();
    }

    /// A lock client with the default configuration.
    pub async fn client(&self) -> LockClient {
        self.client_with(|c| c).await
    }

    /// A lock client whose configuration `tune` adjusts. Panics when it
    /// does not connect, or connects to another engine than this store's.
    pub async fn client_with(&self, tune: impl FnOnce(Config) -> Config) -> LockClient {
        let client = LockClient::connect(tune(Config::new(self.url())))
            .await
            .unwrap_or_else(|e| panic!("a lock client connects to the {}: {e}", self.engine()));
        assert_eq!(
            client.engine_name(),
            self.engine(),
            "the URL picks the engine"
        );
        self.0.handed_out(&client);
        client
    }

    /// How many callers of other clients wait for lock `name` of `kind`,
    /// as the store shows them:
    ///
    /// - Redis: the clients listening on the lock's unlock channel
    ///   (reentrant: `redisson_lock__channel:{name}`, read-write:
    ///   `redisson_rwlock:{name}`; one per client, however many of its
    ///   tasks wait), or the fair lock's queue (one entry per waiter);
    /// - etcd: the contender keys under `<name>/` that do not hold (one per
    ///   client and name for a mutex, one per waiting reader or writer):
    ///   in create order, the holders are the first key, or the readers'
    ///   keys before the first key that is not a reader's;
    /// - ZooKeeper: the contender nodes under `/locks/<name>` that do not
    ///   hold (one per client and name for a mutex, one per waiting reader
    ///   or writer), counted as for etcd in sequence order;
    /// - PostgreSQL: a plain lock's waiter leaves no trace in the lock
    ///   table (it sleeps until a notification), so this process's clients
    ///   count the acquisitions that wait for a release (one per client
    ///   and name); a fair lock's or read-write lock's waiter has a ticket
    ///   of its own in the line (`distributed_locks_queue`, live and not
    ///   held);
    /// - MySQL/MariaDB: likewise (a plain waiter polls, and leaves no
    ///   row);
    /// - memory: the store's own count of the acquisitions that wait (one
    ///   per client and name for a plain lock, one per waiter for the
    ///   others: `MemoryStore::waiting`).
    ///
    /// A waiter that gave up or was dropped leaves this count.
    pub async fn waiting(&self, kind: Kind, name: &str) -> usize {
        self.0.waiting(kind, name).await
    }

    /// Waits (at most `within`, generous: it asserts no speed) until
    /// exactly `n` callers wait for lock `name` (see
    /// [`waiting`](Self::waiting)). Panics with the last count otherwise.
    pub async fn until_waiting(&self, kind: Kind, name: &str, n: usize, within: Duration) {
        let what = format!("waiters for {kind:?} lock {name}");
        self.until(&what, n, within, || self.waiting(kind, name))
            .await;
    }

    /// How many holds and contenders of a reentrant lock `name` the store
    /// keeps, as another program would find them there: Redis's holder
    /// fields of the lock's hash, etcd's keys under `<name>/`, ZooKeeper's
    /// nodes under `/locks/<name>`, the SQL stores' rows of the name held
    /// by their lease, the memory store's holders (a plain waiter keeps
    /// nothing on Redis or in the SQL stores, and a key or node of its own
    /// on etcd and ZooKeeper).
    pub async fn records(&self, name: &str) -> usize {
        self.0.records(name).await
    }

    /// An SQL store's answer to `statement` (the database's own client,
    /// as its superuser: rows one a line, columns tab-separated). Panics
    /// on another store.
    pub async fn sql(&self, statement: &str) -> String {
        self.0.sql(statement).await
    }

    /// An SQL store's clock in UTC, as a statement reads it. Panics on
    /// another store.
    pub fn utc_now(&self) -> &'static str {
        self.0.utc_now()
    }

    /// Waits (at most `within`) until the store keeps exactly `n` records
    /// of lock `name` (see [`records`](Self::records)). Panics with the
    /// last count otherwise.
    pub async fn until_records(&self, name: &str, n: usize, within: Duration) {
        let what = format!("records of lock {name}");
        self.until(&what, n, within, || self.records(name)).await;
    }

    /// Waits until `count` reads `n`, at most `within`.
    async fn until<F: Future<Output = usize>>(
        &self,
        what: &str,
        n: usize,
        within: Duration,
        count: impl Fn() -> F,
    ) {
        let deadline = Instant::now() + within;
        loop {
            let now = count().await;
            if now == n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "on {}: {n} {what} never came ({now} there)",
                self.engine()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// Those of `contenders` (in arrival order) that do not hold: the holders
/// are the first, or the readers before the first that is not one.
fn not_holding<T>(contenders: &[T], read: impl Fn(&T) -> bool) -> usize {
    let holders = match contenders.first() {
        None => 0,
        Some(first) if read(first) => contenders.iter().take_while(|c| read(c)).count(),
        Some(_) => 1,
    };
    contenders.len() - holders
}

/// A fair or read-write lock's waiters in an SQL store's line: its live
/// tickets not held (`now` in the server's dialect).
fn line_sql(name: &str, now: &str) -> String {
    format!(
        "SELECT count(*) FROM distributed_locks_queue WHERE name = '{name}' \
         AND NOT held AND ticket_until > {now}"
    )
}

/// A lock's rows held by their lease in an SQL store (`now` in the
/// server's dialect).
fn rows_sql(name: &str, now: &str) -> String {
    format!("SELECT count(*) FROM distributed_locks WHERE name = '{name}' AND lock_until > {now}")
}

impl TestStore for Server {
    fn engine(&self) -> &'static str {
        "redis"
    }

    fn url(&self) -> String {
        servers::Redis::url(self)
    }

    fn stop(&mut self) {
        servers::Redis::stop(self);
    }

    fn waiting<'a>(&'a self, kind: Kind, name: &'a str) -> Counting<'a> {
        Box::pin(async move {
            let mut raw = self.raw().await;
            let n = match kind {
                Kind::Reentrant => {
                    numsub(&mut raw, &format!("redisson_lock__channel:{{{name}}}")).await
                }
                Kind::Read | Kind::Write => {
                    numsub(&mut raw, &format!("redisson_rwlock:{{{name}}}")).await
                }
                // Redisson's semaphore channel.
                Kind::Semaphore(_) => numsub(&mut raw, &format!("redisson_sc:{{{name}}}")).await,
                Kind::Fair => redis::cmd("LLEN")
                    .arg(format!("redisson_lock_queue:{{{name}}}"))
                    .query_async(&mut raw)
                    .await
                    .expect("LLEN"),
            };
            usize::try_from(n).unwrap_or(0)
        })
    }

    fn records<'a>(&'a self, name: &'a str) -> Counting<'a> {
        Box::pin(async move {
            let mut raw = self.raw().await;
            let n: i64 = redis::cmd("HLEN")
                .arg(name)
                .query_async(&mut raw)
                .await
                .expect("HLEN");
            usize::try_from(n).unwrap_or(0)
        })
    }
}

impl TestStore for Etcd {
    fn engine(&self) -> &'static str {
        "etcd"
    }

    fn url(&self) -> String {
        Etcd::url(self)
    }

    fn stop(&mut self) {
        Etcd::stop(self);
    }

    fn waiting<'a>(&'a self, kind: Kind, name: &'a str) -> Counting<'a> {
        Box::pin(async move {
            let keys = etcd_keys(&self.endpoint(), name).await;
            match kind {
                // Permits of one bound: the first `permits` keys hold.
                Kind::Semaphore(permits) => keys.len().saturating_sub(permits as usize),
                _ => not_holding(&keys, |key| key[name.len() + 1..].starts_with("read/")),
            }
        })
    }

    fn records<'a>(&'a self, name: &'a str) -> Counting<'a> {
        Box::pin(async move { etcd_keys(&self.endpoint(), name).await.len() })
    }
}

impl TestStore for ZooKeeper {
    fn engine(&self) -> &'static str {
        "zookeeper"
    }

    fn url(&self) -> String {
        ZooKeeper::url(self)
    }

    fn stop(&mut self) {
        ZooKeeper::stop(self);
    }

    fn waiting<'a>(&'a self, kind: Kind, name: &'a str) -> Counting<'a> {
        Box::pin(async move {
            let lock = format!("/locks/{name}");
            if let Kind::Semaphore(permits) = kind {
                // Curator's InterProcessSemaphoreV2: the leases beyond the
                // bound do not hold (the one of the acquisition that holds
                // the `locks` mutex while it waits for room), and every
                // acquisition not in yet has its place in that mutex.
                let connect = self.connect_string();
                let leases = zk_children(&connect, &format!("{lock}/leases")).await;
                let line = zk_children(&connect, &format!("{lock}/locks")).await;
                let permits = usize::try_from(permits).unwrap_or(usize::MAX);
                return line.len().max(leases.len().saturating_sub(permits));
            }
            let children = zk_children(&self.connect_string(), &lock).await;
            not_holding(&children, |child| child.contains("__READ__"))
        })
    }

    fn records<'a>(&'a self, name: &'a str) -> Counting<'a> {
        Box::pin(async move {
            let lock = format!("/locks/{name}");
            zk_children(&self.connect_string(), &lock).await.len()
        })
    }
}

/// Both SQL stores, in their dialects.
impl<D: Database> TestStore for SqlServer<D> {
    fn engine(&self) -> &'static str {
        D::ENGINE
    }

    fn url(&self) -> String {
        SqlServer::url(self)
    }

    fn stop(&mut self) {
        SqlServer::stop(self);
    }

    fn waiting<'a>(&'a self, kind: Kind, name: &'a str) -> Counting<'a> {
        Box::pin(async move {
            // A plain lock's waiter has no row (PostgreSQL's sleeps until
            // a notification, MySQL's polls), nor has a permit's (its
            // client's head waits for a free slot, the others for their
            // turn): counted in the process.
            if matches!(kind, Kind::Reentrant | Kind::Semaphore(_)) {
                return lock_runtime::__private::sql_waiting(&self.url(), name);
            }
            let sql = line_sql(name, D::UTC_NOW);
            self.sql_async(&sql).await.parse().expect("a count")
        })
    }

    fn records<'a>(&'a self, name: &'a str) -> Counting<'a> {
        Box::pin(async move {
            let sql = rows_sql(name, D::UTC_NOW);
            self.sql_async(&sql).await.parse().expect("a count")
        })
    }

    fn sql<'a>(&'a self, statement: &'a str) -> Reading<'a, String> {
        Box::pin(self.sql_async(statement))
    }

    fn utc_now(&self) -> &'static str {
        D::UTC_NOW
    }
}

impl TestStore for Memory {
    fn engine(&self) -> &'static str {
        "memory"
    }

    fn url(&self) -> String {
        format!("memory://{}", self.name)
    }

    /// No server: every client handed out is cut off, for good.
    fn stop(&mut self) {
        for client in self.clients.lock().unwrap().iter() {
            self.hooks.partition(client);
        }
    }

    fn waiting<'a>(&'a self, _kind: Kind, name: &'a str) -> Counting<'a> {
        Box::pin(std::future::ready(self.hooks.waiting(name)))
    }

    /// Its holders, as `inspect` on a client of its own shows them.
    fn records<'a>(&'a self, name: &'a str) -> Counting<'a> {
        Box::pin(async move {
            let connect = || async {
                let client = LockClient::connect(Config::new(self.url())).await;
                client.expect("a client of a memory store")
            };
            let client = self.reader.get_or_init(connect).await;
            let info = client.inspect(name).await.expect("inspect");
            info.map_or(0, |info| info.holders.len())
        })
    }

    fn handed_out(&self, client: &LockClient) {
        self.clients.lock().unwrap().push(client.clone());
    }
}

/// The keys under `<name>/` on the etcd server at `endpoint`, oldest
/// (lowest create revision) first, read with `etcdctl` (a process of its
/// own, awaited without blocking the runtime).
pub async fn etcd_keys(endpoint: &str, name: &str) -> Vec<String> {
    let out = tokio::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(["get", "--prefix", "--keys-only"])
        .args(["--sort-by=CREATE", "--order=ASCEND"])
        .arg(format!("{name}/"))
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("etcdctl runs (is it installed? `apt-get install etcd-client`)");
    assert!(out.status.success(), "etcdctl get: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}
