//! The read-write lock's scripts (Redisson's `RReadWriteLock` layout; see
//! `lock::read_write`).

use crate::LockError;
use crate::client::Core;
use crate::conn::Conn;
use crate::hold::{Attempt, Try, answer};
use crate::keys;
use crate::scripts::SCRIPTS;

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
