//! Clean-up that must reach Redis even through a fault: retried with
//! backoff while the connection is lost, for a bounded time.

use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

use crate::engine::redis::conn::transient;
use crate::error::LockError;

/// Runs `once` until it succeeds, fails for a reason other than one that
/// heals (a lost connection: a timeout, a refused or broken connection; a
/// server loading its data, a cluster or master not ready, a demoted master
/// while a failover completes: see [`heals`]), or `within` has passed;
/// pauses 50 ms, doubling up to 1 s, between tries. Returns the last result.
pub(crate) async fn while_unreachable<T, F, Fut>(
    within: Duration,
    mut once: F,
) -> Result<T, LockError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LockError>>,
{
    let until = Instant::now().checked_add(within);
    let mut pause = Duration::from_millis(50);
    loop {
        let result = once().await;
        let unreachable = matches!(&result, Err(LockError::Redis(e)) if heals(e));
        if !unreachable || until.is_some_and(|until| Instant::now() >= until) {
            return result;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

/// Whether clean-up that failed with `e` may succeed later: a fault that may
/// heal ([`transient`]), or `READONLY` (a demoted master, until the client
/// follows the failover).
fn heals(e: &redis::RedisError) -> bool {
    transient(e) || e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
}
