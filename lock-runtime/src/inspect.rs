//! The operations on any lock, on whichever engine the client has:
//! `inspect`, `locks` and `force_unlock` (each engine reads its own layout).

use crate::client::Engine;
#[cfg(feature = "etcd")]
use crate::engine::etcd;
#[cfg(feature = "mysql")]
use crate::engine::mysql;
#[cfg(feature = "postgres")]
use crate::engine::postgres;
#[cfg(feature = "redis")]
use crate::engine::redis::inspect::{force_unlock, inspect, locks};
#[cfg(feature = "zookeeper")]
use crate::engine::zookeeper;
use crate::error::LockError;
use crate::info::LockInfo;

/// Operations: what a lock looks like, and freeing a stuck one.
impl crate::client::LockClient {
    /// What lock `name` looks like in Redis, whatever its kind (recognised
    /// by its layout, see [`LockInfo`]): its holders with their hold counts,
    /// the remaining lease, a fair lock's queue, a read-write lock's mode.
    /// `None` when it is free. For holder ids of this client, each holder
    /// also lists its live guards (token, task, age). Works on locks held
    /// by any client, Redisson's included. Read in one script call.
    ///
    /// Fails with [`LockError::WrongType`] when the key holds something
    /// that is not a lock.
    pub async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let name = name.to_owned();
        match self.engine() {
            #[cfg(feature = "redis")]
            Engine::Redis(core) => {
                let core = core.clone();
                self.on_background(async move { inspect(&core, &name).await })
                    .await?
            }
            #[cfg(feature = "etcd")]
            Engine::Etcd(etcd) => {
                let etcd = etcd.clone();
                self.on_background(async move { etcd::inspect(&etcd, &name).await })
                    .await?
            }
            #[cfg(feature = "zookeeper")]
            Engine::ZooKeeper(zk) => {
                let zk = zk.clone();
                self.on_background(async move { zookeeper::inspect(&zk, &name).await })
                    .await?
            }
            #[cfg(feature = "postgres")]
            Engine::Postgres(pg) => {
                let pg = pg.clone();
                self.on_background(async move { postgres::inspect(&pg, &name).await })
                    .await?
            }
            #[cfg(feature = "mysql")]
            Engine::MySql(my) => {
                let my = my.clone();
                self.on_background(async move { mysql::inspect(&my, &name).await })
                    .await?
            }
            #[cfg(no_engine)]
            Engine::None(never) => match *never {},
        }
    }

    /// The held locks whose names match `pattern` (glob-style, as Redis
    /// `SCAN ... MATCH`: `"stock:*"`; `"*"` for all), with what
    /// [`inspect`](Self::inspect) tells of each, sorted by name. Scans every
    /// master of a cluster. Hashes that are not locks are skipped.
    ///
    /// An operator's tool: it walks the whole key space (`SCAN`, which does
    /// not block the server, then one call per lock found). A lock taken or
    /// freed during the walk may or may not be listed.
    pub async fn locks(&self, pattern: &str) -> Result<Vec<LockInfo>, LockError> {
        let pattern = pattern.to_owned();
        match self.engine() {
            #[cfg(feature = "redis")]
            Engine::Redis(core) => {
                let core = core.clone();
                self.on_background(async move { locks(&core, &pattern).await })
                    .await?
            }
            #[cfg(feature = "etcd")]
            Engine::Etcd(etcd) => {
                let etcd = etcd.clone();
                self.on_background(async move { etcd::locks(&etcd, &pattern).await })
                    .await?
            }
            #[cfg(feature = "zookeeper")]
            Engine::ZooKeeper(zk) => {
                let zk = zk.clone();
                self.on_background(async move { zookeeper::locks(&zk, &pattern).await })
                    .await?
            }
            #[cfg(feature = "postgres")]
            Engine::Postgres(pg) => {
                let pg = pg.clone();
                self.on_background(async move { postgres::locks(&pg, &pattern).await })
                    .await?
            }
            #[cfg(feature = "mysql")]
            Engine::MySql(my) => {
                let my = my.clone();
                self.on_background(async move { mysql::locks(&my, &pattern).await })
                    .await?
            }
            #[cfg(no_engine)]
            Engine::None(never) => match *never {},
        }
    }

    /// Frees lock `name` whatever its kind and whoever holds it, and wakes
    /// every waiter (Redisson's `forceUnlock`): the lock's hash goes, with a
    /// read-write lock's read holds and a fair lock's queue (its waiters ask
    /// again when woken). The fencing token counter stays, so tokens keep
    /// rising. Returns whether a lock was there.
    ///
    /// The holder is not told at once: its guard learns the loss at its next
    /// renewal (watchdog leases; [`LockGuard::lost`](crate::LockGuard::lost)
    /// resolves) or at its release ([`LockError::Lost`]). An operator's tool
    /// for a lock whose holder is stuck; a working holder loses its
    /// exclusion.
    pub async fn force_unlock(&self, name: &str) -> Result<bool, LockError> {
        let name = name.to_owned();
        match self.engine() {
            #[cfg(feature = "redis")]
            Engine::Redis(core) => {
                let core = core.clone();
                self.on_background(async move { force_unlock(&core, &name).await })
                    .await?
            }
            #[cfg(feature = "etcd")]
            Engine::Etcd(etcd) => {
                let etcd = etcd.clone();
                self.on_background(async move { etcd::force_unlock(&etcd, &name).await })
                    .await?
            }
            #[cfg(feature = "zookeeper")]
            Engine::ZooKeeper(zk) => {
                let zk = zk.clone();
                self.on_background(async move { zookeeper::force_unlock(&zk, &name).await })
                    .await?
            }
            #[cfg(feature = "postgres")]
            Engine::Postgres(pg) => {
                let pg = pg.clone();
                self.on_background(async move { postgres::force_unlock(&pg, &name).await })
                    .await?
            }
            #[cfg(feature = "mysql")]
            Engine::MySql(my) => {
                let my = my.clone();
                self.on_background(async move { mysql::force_unlock(&my, &name).await })
                    .await?
            }
            #[cfg(no_engine)]
            Engine::None(never) => match *never {},
        }
    }
}
