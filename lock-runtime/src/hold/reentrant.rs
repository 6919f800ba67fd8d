//! The reentrant lock's scripts (Redisson's `RLock` layout): a HASH of holder
//! id to hold count, with a PEXPIRE lease.

use crate::LockError;
use crate::client::Core;
use crate::conn::Conn;
use crate::hold::{Attempt, Try, answer};
use crate::keys;
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
/// With `keep.ms` > 0 a last hold leaves the lock taken for that long
/// (`hold_at_least`) instead of freeing it.
pub(crate) async fn unlock(
    core: &Core,
    conn: &Conn,
    name: &str,
    holder: &str,
    request: &str,
    keep: super::Keep,
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
        .arg(keep.ms)
        .arg(if keep.within_lease { "1" } else { "0" })
        .invoke_async(&mut conn)
        .await
        .map_err(|e| LockError::from_redis(name, e))
}

/// Gives back one hold and, when that frees the lock, hands it to the hold
/// `to` describes (a waiter of this client) in the same script. Returns
/// `(2, token)` handed over, `(1, 0)` freed and announced, `(0, 0)` still
/// held by the holder's other holds, `(-1, 0)` not held; `request` makes a
/// retried call idempotent, with [`unlock`] too.
pub(crate) async fn hand_off(
    core: &Core,
    conn: &Conn,
    name: &str,
    holder: &str,
    request: &str,
    to: &Try,
) -> Result<(i64, u64), LockError> {
    let record = crate::scripts::latch_record(conn, false);
    let mut conn = conn.clone();
    let (code, token): (i64, i64) = SCRIPTS
        .handoff
        .key(name)
        .key(keys::lock_channel(name))
        .key(keys::unlock_latch(name, request))
        .key(keys::token_key(name))
        .key(to.latch(name))
        .arg(holder)
        .arg(crate::config::millis(core.config.unlock_latch_ttl()))
        .arg(core.conn.publish_command())
        .arg(&to.holder)
        .arg(to.lease_ms())
        .arg(record)
        .invoke_async(&mut conn)
        .await
        .map_err(|e| LockError::from_redis(name, e))?;
    Ok((code, token as u64))
}
