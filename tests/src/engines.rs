//! One store of any engine, for the contract tests that run on every one
//! (`tests/tests/engines/`): a [`Store`] starts a Redis [`Server`], an
//! [`Etcd`] server, a [`ZooKeeper`] server, a [`Postgres`] server or a
//! [`MariaDb`] server, hands out lock clients for it, and tells, the way
//! another program would see it in the store, how many callers wait for a
//! lock (an event a test awaits instead of sleeping).

use std::time::{Duration, Instant};

use lock_runtime::{Config, LockClient};

use crate::etcd::Etcd;
use crate::mariadb::MariaDb;
use crate::postgres::Postgres;
use crate::zookeeper::{ZooKeeper, zk_children};
use crate::{Kind, Server, numsub};

/// A test's store: a fresh server of one engine, stopped when dropped.
pub enum Store {
    /// A `redis-server` (engine `redis`).
    Redis(Server),
    /// A single-member `etcd` (engine `etcd`).
    Etcd(Etcd),
    /// A standalone ZooKeeper server (engine `zookeeper`).
    ZooKeeper(ZooKeeper),
    /// A PostgreSQL server (engine `postgres`).
    Postgres(Postgres),
    /// A MariaDB server (engine `mysql`, URL scheme `mysql`).
    MySql(MariaDb),
    /// A memory store of this process (engine `memory`), of a name no
    /// other test uses, with its fault hooks.
    Memory(Memory),
}

/// A memory store for a test, and the clients handed out for it (which
/// "stopping" it cuts off: it has no server to stop).
pub struct Memory {
    name: String,
    hooks: lock_runtime::memory::MemoryStore,
    clients: std::sync::Mutex<Vec<LockClient>>,
}

impl Store {
    /// A fresh Redis server on a free loopback port.
    pub fn redis() -> Store {
        Store::Redis(Server::start())
    }

    /// A fresh single-member etcd server on free loopback ports.
    pub fn etcd() -> Store {
        Store::Etcd(Etcd::start())
    }

    /// A fresh standalone ZooKeeper server on a free loopback port.
    pub fn zookeeper() -> Store {
        Store::ZooKeeper(ZooKeeper::start())
    }

    /// A fresh PostgreSQL server on a free loopback port.
    pub fn postgres() -> Store {
        Store::Postgres(Postgres::start())
    }

    /// A fresh MariaDB server on a free loopback port.
    pub fn mysql() -> Store {
        Store::MySql(MariaDb::start())
    }

    /// A fresh memory store (the test kit's engine, DESIGN §12).
    pub fn memory() -> Store {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("test-{}-{n}", std::process::id());
        let hooks = lock_runtime::memory::store(&name);
        Store::Memory(Memory {
            name,
            hooks,
            clients: std::sync::Mutex::default(),
        })
    }

    /// The engine's name, as [`LockClient::engine_name`] gives it.
    pub fn engine(&self) -> &'static str {
        match self {
            Store::Redis(_) => "redis",
            Store::Etcd(_) => "etcd",
            Store::ZooKeeper(_) => "zookeeper",
            Store::Postgres(_) => "postgres",
            Store::MySql(_) => "mysql",
            Store::Memory(_) => "memory",
        }
    }

    /// The URL scheme of the engine (`redis`, `etcd`, `zk`, `postgres`,
    /// `mysql`).
    pub fn scheme(&self) -> &'static str {
        match self {
            Store::Redis(_) => "redis",
            Store::Etcd(_) => "etcd",
            Store::ZooKeeper(_) => "zk",
            Store::Postgres(_) => "postgres",
            Store::MySql(_) => "mysql",
            Store::Memory(_) => "memory",
        }
    }

    /// The URL a lock client (or `lockctl --url`) is configured with.
    pub fn url(&self) -> String {
        match self {
            Store::Redis(server) => server.url(),
            Store::Etcd(etcd) => etcd.url(),
            Store::ZooKeeper(zk) => zk.url(),
            Store::Postgres(pg) => pg.url(),
            Store::MySql(my) => my.url(),
            Store::Memory(memory) => format!("memory://{}", memory.name),
        }
    }

    /// Stops the server (its data is gone with it, on Redis; etcd and the
    /// SQL servers keep it on disk): clients of it meet a dead store. A
    /// memory store has no server: the clients handed out for it are cut
    /// off (`MemoryStore::partition`).
    pub fn stop(&mut self) {
        match self {
            Store::Redis(server) => server.stop(),
            Store::Etcd(etcd) => etcd.stop(),
            Store::ZooKeeper(zk) => zk.stop(),
            Store::Postgres(pg) => pg.stop(),
            Store::MySql(my) => my.stop(),
            // No server: every client handed out is cut off, for good.
            Store::Memory(memory) => {
                for client in memory.clients.lock().unwrap().iter() {
                    memory.hooks.partition(client);
                }
            }
        }
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
        if let Store::Memory(memory) = self {
            memory.clients.lock().unwrap().push(client.clone());
        }
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
        match self {
            Store::Redis(server) => {
                let mut raw = server.raw().await;
                let n = match kind {
                    Kind::Reentrant => {
                        numsub(&mut raw, &format!("redisson_lock__channel:{{{name}}}")).await
                    }
                    Kind::Read | Kind::Write => {
                        numsub(&mut raw, &format!("redisson_rwlock:{{{name}}}")).await
                    }
                    Kind::Fair => redis::cmd("LLEN")
                        .arg(format!("redisson_lock_queue:{{{name}}}"))
                        .query_async(&mut raw)
                        .await
                        .expect("LLEN"),
                };
                usize::try_from(n).unwrap_or(0)
            }
            Store::Etcd(etcd) => {
                let keys = etcd_keys(&etcd.endpoint(), name).await;
                let read = |key: &String| key[name.len() + 1..].starts_with("read/");
                let holders = match keys.first() {
                    None => 0,
                    Some(first) if read(first) => keys.iter().take_while(|k| read(k)).count(),
                    Some(_) => 1,
                };
                keys.len() - holders
            }
            Store::ZooKeeper(zk) => {
                let children = zk_children(&zk.connect_string(), &format!("/locks/{name}")).await;
                let read = |child: &String| child.contains("__READ__");
                let holders = match children.first() {
                    None => 0,
                    Some(first) if read(first) => children.iter().take_while(|c| read(c)).count(),
                    Some(_) => 1,
                };
                children.len() - holders
            }
            // A plain lock's waiter has no row: counted in the process.
            Store::Postgres(pg) if kind == Kind::Reentrant => {
                lock_runtime::__private::sql_waiting(&pg.url(), name)
            }
            Store::MySql(my) if kind == Kind::Reentrant => {
                lock_runtime::__private::sql_waiting(&my.url(), name)
            }
            Store::Postgres(pg) => pg
                .sql_async(&format!(
                    "SELECT count(*) FROM distributed_locks_queue WHERE name = '{name}' \
                     AND NOT held AND ticket_until > timezone('utc', clock_timestamp())"
                ))
                .await
                .parse()
                .expect("a count"),
            Store::Memory(memory) => memory.hooks.waiting(name),
            Store::MySql(my) => my
                .sql_async(&format!(
                    "SELECT count(*) FROM distributed_locks_queue WHERE name = '{name}' \
                     AND held = 0 AND ticket_until > UTC_TIMESTAMP(6)"
                ))
                .await
                .parse()
                .expect("a count"),
        }
    }

    /// Waits (at most `within`, generous: it asserts no speed) until
    /// exactly `n` callers wait for lock `name` (see
    /// [`waiting`](Self::waiting)). Panics with the last count otherwise.
    pub async fn until_waiting(&self, kind: Kind, name: &str, n: usize, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let now = self.waiting(kind, name).await;
            if now == n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "on {}: {n} waiters for {kind:?} lock {name} never came ({now} wait)",
                self.engine()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
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
