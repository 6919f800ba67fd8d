//! The reentrant lock's scripts (Redisson's `RLock` layout): a HASH of holder
//! id to hold count, with a PEXPIRE lease.

use crate::LockError;
use crate::client::Core;
use crate::conn::Conn;
use crate::keys;
use crate::lock::{Attempt, Try, answer};
use crate::scripts::SCRIPTS;

/// One try at taking (or re-entering) the lock.
pub(crate) async fn attempt(
    core: &Core,
    conn: &Conn,
    name: &str,
    how: &Try,
) -> Result<Attempt, LockError> {
    core.conn.check_slot_name(name)?;
    let reply = SCRIPTS
        .reentrant_acquire
        .invoke(conn, &how.latch(name), how.reenter, |call| {
            call.key(name)
                .key(keys::token_key(name))
                .arg(how.lease_ms())
                .arg(&how.holder)
                .arg(how.reenter_arg());
        })
        .await
        .map_err(|e| LockError::from_redis(name, e))?;
    answer(name, reply)
}

/// Gives back one hold; `request` makes a retried call idempotent.
/// Returns 1 freed, 0 still held by the holder's other holds, -1 not held.
pub(crate) async fn unlock(
    core: &Core,
    conn: &Conn,
    name: &str,
    holder: &str,
    request: &str,
) -> Result<i64, LockError> {
    let mut conn = conn.clone();
    SCRIPTS
        .unlock
        .key(name)
        .key(keys::lock_channel(name))
        .key(keys::unlock_latch(name, request))
        .arg(holder)
        .arg(crate::config::millis(core.config.unlock_latch_ttl()))
        .arg(core.conn.publish_command())
        .arg("0")
        .invoke_async(&mut conn)
        .await
        .map_err(|e| LockError::from_redis(name, e))
}
