//! The reentrant lock's scripts (Redisson's `RLock` layout): a HASH of holder
//! id to hold count, with a PEXPIRE lease.

use std::time::Duration;

use crate::LockError;
use crate::client::Core;
use crate::conn::Conn;
use crate::keys;
use crate::lock::Attempt;
use crate::scripts::SCRIPTS;

/// One try at taking (or re-entering) the lock.
pub(crate) async fn attempt(
    core: &Core,
    conn: &Conn,
    name: &str,
    holder: &str,
    lease: Duration,
) -> Result<Attempt, LockError> {
    core.check_slot_name(name)?;
    let (acquired, value): (i64, i64) = SCRIPTS
        .reentrant_acquire
        .invoke(conn, name, |call| {
            call.key(name)
                .key(keys::token_key(name))
                .arg(lease.as_millis().max(1) as u64)
                .arg(holder);
        })
        .await
        .map_err(|e| LockError::from_redis(name, e))?;
    Ok(if acquired == 1 {
        Attempt::Acquired {
            token: value as u64,
        }
    } else {
        Attempt::Busy { ttl_ms: value }
    })
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
        .arg(core.config.unlock_latch_ttl().as_millis() as u64)
        .arg(core.publish_command())
        .arg("0")
        .invoke_async(&mut conn)
        .await
        .map_err(|e| LockError::from_redis(name, e))
}
