//! The operations on any lock, on whichever engine the client has:
//! `inspect`, `locks` and `force_unlock` (each engine reads its own layout).

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
        let inspect = self.engine().inspect(name.to_owned());
        self.on_background(inspect).await?
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
        let locks = self.engine().locks(pattern.to_owned());
        self.on_background(locks).await?
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
        let force_unlock = self.engine().force_unlock(name.to_owned());
        self.on_background(force_unlock).await?
    }
}
