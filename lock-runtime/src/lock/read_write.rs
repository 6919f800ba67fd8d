//! The read-write lock (Redisson's `RReadWriteLock` layout): one HASH `name`
//! with `mode` = `read` | `write`, a field per reader (its holder id, the
//! number of its read holds) and the writer's field `<holder id>:write`.
//! Read hold `k` of a reader has its own key
//! `{name}:<holder id>:rwlock_timeout:<k>` that expires with that hold's
//! lease; the hash expires with the longest hold. Waiters listen on
//! `redisson_rwlock:{name}`.

use crate::client::Core;
use crate::conn::Conn;
use crate::keys;
use crate::lock::{Attempt, LockBuilder, Target, Try, answer};
use crate::scripts::SCRIPTS;
use crate::{LockClient, LockError};

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
///   with [`LockError::NotHeld`] instead of waiting for ever (two readers
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
        LockBuilder::new(
            self.client.clone(),
            Target::Read {
                name: self.name.clone(),
            },
        )
    }

    /// The write side: exclusive.
    pub fn write(&self) -> LockBuilder {
        LockBuilder::new(
            self.client.clone(),
            Target::Write {
                name: self.name.clone(),
            },
        )
    }
}

/// One try at a read hold (`write` false) or the write lock (`write` true).
pub(crate) async fn attempt(
    core: &Core,
    conn: &Conn,
    name: &str,
    how: &Try,
    write: bool,
) -> Result<Attempt, LockError> {
    core.conn.check_slot_name(name)?;
    let (script, third_key) = if write {
        (&SCRIPTS.rw_write_acquire, keys::tagged(name))
    } else {
        (
            &SCRIPTS.rw_read_acquire,
            keys::rw_timeout_prefix(name, &how.holder),
        )
    };
    let reply = script
        .invoke(conn, &how.latch(name), how.reenter, |call| {
            call.key(name)
                .key(keys::token_key(name))
                .key(third_key)
                .arg(how.lease_ms())
                .arg(&how.holder)
                .arg(how.reenter_arg());
        })
        .await
        .map_err(|e| LockError::from_redis(name, e))?;
    answer(name, reply)
}

/// Gives back the read hold with fencing `token` (0: any one of the
/// holder's). Returns 1 when the holder has no read hold left, 0 when it has
/// others, -1 when this hold had already run out.
pub(crate) async fn unlock_read(
    core: &Core,
    conn: &Conn,
    name: &str,
    holder: &str,
    request: &str,
    token: u64,
) -> Result<i64, LockError> {
    let mut conn = conn.clone();
    SCRIPTS
        .rw_read_unlock
        .key(name)
        .key(keys::rw_channel(name))
        .key(keys::rw_timeout_prefix(name, holder))
        .key(keys::tagged(name))
        .key(keys::unlock_latch(name, request))
        .arg(holder)
        .arg(crate::config::millis(core.config.unlock_latch_ttl()))
        .arg(core.conn.publish_command())
        .arg(token)
        .invoke_async(&mut conn)
        .await
        .map_err(|e| LockError::from_redis(name, e))
}

/// Gives back one write hold. Returns 1 when the write lock was given up
/// (every waiting reader is woken), 0 when the holder has other write holds,
/// -1 when it did not hold the write lock.
pub(crate) async fn unlock_write(
    core: &Core,
    conn: &Conn,
    name: &str,
    holder: &str,
    request: &str,
) -> Result<i64, LockError> {
    let mut conn = conn.clone();
    SCRIPTS
        .rw_write_unlock
        .key(name)
        .key(keys::rw_channel(name))
        .key(keys::tagged(name))
        .key(keys::unlock_latch(name, request))
        .arg(holder)
        .arg(crate::config::millis(core.config.unlock_latch_ttl()))
        .arg(core.conn.publish_command())
        .invoke_async(&mut conn)
        .await
        .map_err(|e| LockError::from_redis(name, e))
}
