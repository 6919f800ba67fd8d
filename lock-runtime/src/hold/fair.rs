//! The fair lock's scripts (Redisson's `RFairLock` layout): the reentrant
//! lock's HASH, plus a queue LIST of waiting holder ids and a ZSET of their
//! deadlines, so that the lock goes to waiters in the order they first asked.
//!
//! - A waiter joins the queue at its first failed attempt and keeps its place
//!   on every retry; each retry also pushes its deadline past the lock's
//!   current lease plus [`Config::fair_wait_timeout`](crate::Config::fair_wait_timeout),
//!   so a waiter that is alive is never evicted.
//! - A head whose deadline passed (its process died) is evicted by the next
//!   script that looks at the queue.
//! - Unlock wakes only the head, on its own channel
//!   `redisson_lock__channel:{name}:<holder id>`.
//! - A waiter that leaves without the lock (wait over, acquire cancelled)
//!   removes itself and moves those behind it up.

use crate::LockError;
use crate::client::Core;
use crate::conn::Conn;
use crate::hold::{Attempt, Try, answer};
use crate::keys;
use crate::retry;
use crate::scripts::SCRIPTS;

/// One try at taking (or re-entering) the lock; a failed try queues the
/// holder (first time) or keeps its place (later).
pub(crate) async fn attempt(
    core: &Core,
    conn: &Conn,
    name: &str,
    how: &Try,
) -> Result<Attempt, LockError> {
    core.conn.check_slot_name(name)?;
    let reply = SCRIPTS
        .fair_acquire
        .invoke(conn, &how.latch(name), how.reenter, |call| {
            call.key(name)
                .key(keys::fair_queue(name))
                .key(keys::fair_timeouts(name))
                .key(keys::token_key(name))
                .key(keys::lock_channel(name))
                .arg(how.lease_ms())
                .arg(&how.holder)
                .arg(wait_ms(core))
                .arg(core.conn.publish_command())
                .arg(how.reenter_arg());
        })
        .await
        .map_err(|e| LockError::from_redis(name, e))?;
    answer(name, reply)
}

/// Gives back one hold; `request` makes a retried call idempotent.
/// Returns 1 freed (the head of the queue is woken), 0 still held by the
/// holder's other holds, -1 not held.
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
        .fair_unlock
        .key(name)
        .key(keys::fair_queue(name))
        .key(keys::fair_timeouts(name))
        .key(keys::lock_channel(name))
        .key(keys::unlock_latch(name, request))
        .arg(holder)
        .arg(crate::config::millis(core.config.unlock_latch_ttl()))
        .arg(core.conn.publish_command())
        .arg(keep.ms)
        .arg(if keep.within_lease { "1" } else { "0" })
        .invoke_async(&mut conn)
        .await
        .map_err(|e| LockError::from_redis(name, e))
}

/// The clean-up of a waiter that leaves without the lock: out of the queue
/// and the deadlines, those behind it moved up. Retried while Redis is
/// unreachable, until its place would have been evicted anyway (the wait
/// time past a lease); a place left behind after that is evicted at its
/// deadline, and the queue keys expire with the last deadline.
pub(crate) fn give_up(
    core: &Core,
    name: &str,
    holder: &str,
) -> impl Future<Output = ()> + Send + 'static {
    let conn = core.conn.clone();
    let wait = wait_ms(core);
    let within = core
        .config
        .fair_wait_timeout
        .saturating_add(core.config.watchdog_timeout);
    let publish = core.conn.publish_command();
    let name = name.to_owned();
    let holder = holder.to_owned();
    async move {
        let left = retry::while_unreachable(within, || {
            let mut conn = conn.clone();
            let (name, holder) = (&name, &holder);
            async move {
                SCRIPTS
                    .fair_give_up
                    .key(name)
                    .key(keys::fair_queue(name))
                    .key(keys::fair_timeouts(name))
                    .key(keys::lock_channel(name))
                    .arg(holder)
                    .arg(wait)
                    .arg(publish)
                    .invoke_async::<i64>(&mut conn)
                    .await
                    .map_err(|e| LockError::from_redis(name, e))
            }
        })
        .await;
        match left {
            Ok(_) => tracing::debug!(lock = %name, "left the fair queue"),
            Err(e) => {
                tracing::warn!(lock = %name, error = %e, "could not leave the fair queue; its deadline will evict the place");
            }
        }
    }
}

fn wait_ms(core: &Core) -> u64 {
    crate::config::millis(core.config.fair_wait_timeout)
}
