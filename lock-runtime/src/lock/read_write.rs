//! The read-write lock (Redisson's `RReadWriteLock` layout): one HASH `name`
//! with `mode` = `read` | `write`, a field per reader (its holder id, the
//! number of its read holds) and the writer's field `<holder id>:write`.
//! Read hold `k` of a reader has its own key
//! `{name}:<holder id>:rwlock_timeout:<k>` that expires with that hold's
//! lease; the hash expires with the longest hold. Waiters listen on
//! `redisson_rwlock:{name}`.

use crate::client::LockClient;
use crate::lock::LockBuilder;
use crate::request::Kind;

/// A read-write lock (Redisson's `RReadWriteLock`), from
/// [`LockClient::read_write_lock`]: any number of readers at a time, or one
/// writer.
///
/// - Readers share the lock; a writer waits for every reader, and readers
///   wait for a writer. Releasing the write lock wakes every waiting reader
///   at once.
/// - Inside the write guard's [`scope`](crate::LockGuard::scope), read holds
///   may be taken too (downgrade): after the write lock is released they
///   keep reading, and writers keep waiting.
/// - Inside a read guard's scope, asking for the write lock fails at once
///   with [`LockError::NotHeld`](crate::LockError::NotHeld) instead of waiting for ever (two readers
///   upgrading would wait for each other). Outside any scope a write is
///   another holder and simply waits for the readers.
/// - Each read hold has its own lease: one that runs out (a fixed `lease`,
///   or a client that died) stops counting, and the next writer gets in.
/// - Both sides are reentrant along the call chain (inside a guard's scope)
///   and take fencing tokens from the lock's one counter. Releasing a read
///   hold gives back that hold, found by its token, never a newer one.
/// - Readers do not queue behind a waiting writer (as in Redisson): under a
///   steady stream of readers a writer may wait long.
///
/// ```no_run
/// # async fn demo(client: lock_runtime::LockClient) -> Result<(), lock_runtime::LockError> {
/// let doc = client.read_write_lock("doc:7");
/// let reading = doc.read().acquire().await?;
/// // ... other readers may read at the same time ...
/// reading.release().await?;
/// let writing = doc.write().acquire().await?;
/// // ... no one else reads or writes ...
/// writing.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ReadWriteLock {
    client: LockClient,
    name: String,
}

impl ReadWriteLock {
    pub(crate) fn new(client: LockClient, name: String) -> Self {
        ReadWriteLock { client, name }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The read side: shared with other readers.
    pub fn read(&self) -> LockBuilder {
        LockBuilder::new(self.client.clone(), self.name.clone(), Kind::Read)
    }

    /// The write side: exclusive.
    pub fn write(&self) -> LockBuilder {
        LockBuilder::new(self.client.clone(), self.name.clone(), Kind::Write)
    }
}

/// The client's entry point to this module's locks.
impl LockClient {
    /// A read-write lock (Redisson's `RReadWriteLock`): take its
    /// [`read`](ReadWriteLock::read) side (shared) or its
    /// [`write`](ReadWriteLock::write) side (exclusive).
    pub fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock::new(self.clone(), name.into())
    }
}
