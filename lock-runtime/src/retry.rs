//! Clean-up that must reach Redis even through a fault: retried with
//! backoff while the connection is lost, for a bounded time.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::LockError;
use crate::conn::connection_lost;

/// Runs `once` until it succeeds, fails for a reason other than a lost
/// connection (a timeout, a refused or broken connection), or `within` has
/// passed; pauses 50 ms, doubling up to 1 s, between tries. Returns the last
/// result.
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
        let unreachable = matches!(&result, Err(LockError::Redis(e)) if connection_lost(e));
        if !unreachable || until.is_some_and(|until| Instant::now() >= until) {
            return result;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}
