//! The reentrant lock's handoff script (Redisson's `RLock` layout: a HASH
//! of holder id to hold count, with a PEXPIRE lease); its acquire and unlock
//! calls are built with the other layouts' in [`Request`](crate::request::Request).

use crate::engine::redis::Core;
use crate::engine::redis::conn::Conn;
use crate::engine::redis::hold::{Try, Unlock, Which};
use crate::engine::redis::keys;
use crate::engine::redis::scripts::{Eval, SCRIPTS};
use crate::error::LockError;

/// Gives back the hold `which` of `holder` and, when that frees the lock, hands it to the hold
/// `to` describes (a waiter of this client) in the same script. Returns
/// `(2, token)` handed over, `(1, 0)` freed and announced, `(0, 0)` still
/// held by the holder's other holds, `(-1, 0)` not held; `request` makes a
/// retried call idempotent, with [`Request::unlock`](crate::request::Request::unlock) too.
pub(crate) async fn hand_off(
    core: &Core,
    conn: &Conn,
    name: &str,
    holder: &str,
    request: Unlock<'_>,
    which: Which,
    to: &Try,
) -> Result<(i64, u64), LockError> {
    let record = crate::engine::redis::scripts::latch_record(conn, false);
    let latch = keys::unlock_latch(name, request.id);
    let keys = [
        name,
        &keys::lock_channel(name),
        &latch,
        &keys::token_key(name),
        &to.latch(name),
        &keys::holds_key(name),
    ];
    let mut call = Eval::with_keys(&SCRIPTS.handoff, &keys);
    call.arg(holder)
        .arg(crate::config::millis(core.config.unlock_latch_ttl()))
        .arg(core.conn.publish_command())
        .arg(which.counted())
        .arg(&to.holder)
        .arg(to.lease_ms())
        .arg(record)
        .arg(request.first_arg(conn));
    let (code, token): (i64, i64) = call
        .invoke(conn)
        .await
        .map_err(|e| LockError::from_redis(name, e))?;
    Ok((code, token as u64))
}
