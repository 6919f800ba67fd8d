//! What is the fair lock's own: a waiter leaving its queue (its acquire and
//! unlock calls are built with the other layouts' in
//! [`Request`](crate::request::Request)). The layout (Redisson's `RFairLock`): the reentrant
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

use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::engine::redis::Core;
use crate::engine::redis::conn::Conn;
use crate::engine::redis::keys;
use crate::engine::redis::retry;
use crate::engine::redis::scripts::{Eval, SCRIPTS};
use crate::error::LockError;

/// The clean-up of a waiter that leaves without the lock: out of the queue
/// and the deadlines, those behind it moved up.
pub(crate) struct GiveUp {
    conn: Conn,
    name: String,
    holder: String,
    wait: u64,
    publish: &'static str,
    /// How long to retry while Redis is unreachable: until the place would
    /// have been evicted anyway (the wait time past a lease). A place left
    /// behind after that is evicted at its deadline, and the queue keys
    /// expire with the last deadline.
    within: Duration,
}

impl GiveUp {
    pub(crate) fn new(core: &Core, name: &str, holder: &str) -> Self {
        GiveUp {
            conn: core.conn.clone(),
            name: name.to_owned(),
            holder: holder.to_owned(),
            wait: wait_ms(core),
            publish: core.conn.publish_command(),
            within: core
                .config
                .fair_wait_timeout
                .saturating_add(core.config.watchdog_timeout),
        }
    }

    /// Leaves before the caller goes on (a wait that ran out, a failed try:
    /// the place must be gone when `try_acquire` says the lock is busy). The
    /// leaving runs on the client's runtime, which drives the client's own
    /// connection, and starts at once; the answer of its first try is
    /// announced on the channel returned (closed unanswered when the
    /// runtime has shut down). While Redis cannot be reached it goes on
    /// retrying there.
    pub(crate) fn now(self, runtime: &Handle) -> oneshot::Receiver<()> {
        let (tried, first) = oneshot::channel();
        runtime.spawn(self.leave(Some(tried)));
        first
    }

    /// Leaves in the background, retried while Redis is unreachable (a
    /// dropped acquisition cannot wait).
    pub(crate) fn in_background(self, runtime: &Handle) {
        runtime.spawn(self.leave(None));
    }

    /// Leaves, retried while Redis is unreachable.
    pub(crate) async fn retrying(self) {
        self.leave(None).await;
    }

    /// Leaves, retried while Redis is unreachable; tells `tried` when the
    /// first try has its answer.
    async fn leave(self, mut tried: Option<oneshot::Sender<()>>) {
        let left = retry::while_unreachable(self.within, || {
            let tried = tried.take();
            let leaving = &self;
            async move {
                let left = leaving.once().await;
                if let Some(tried) = tried {
                    let _ = tried.send(());
                }
                left
            }
        })
        .await;
        self.report(left);
    }

    async fn once(&self) -> Result<i64, LockError> {
        let name = self.name.as_str();
        let keys = [
            name,
            &keys::fair_queue(name),
            &keys::fair_timeouts(name),
            &keys::lock_channel(name),
        ];
        let mut call = Eval::with_keys(&SCRIPTS.fair_give_up, &keys);
        call.arg(&self.holder).arg(self.wait).arg(self.publish);
        call.invoke(&self.conn)
            .await
            .map_err(|e| LockError::from_redis(name, e))
    }

    fn report(&self, left: Result<i64, LockError>) {
        match left {
            Ok(_) => tracing::debug!(lock = %self.name, "left the fair queue"),
            Err(e) => {
                tracing::warn!(lock = %self.name, error = %e, "could not leave the fair queue; its deadline will evict the place");
            }
        }
    }
}

/// How long a fair waiter's place is kept past the lock's lease, in ms.
pub(super) fn wait_ms(core: &Core) -> u64 {
    crate::config::millis(core.config.fair_wait_timeout)
}
