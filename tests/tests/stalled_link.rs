//! `on_lost = "cancel"` over a stalled link: the global client reaches its
//! server through a [`Proxy`], which the test stalls while a locked body
//! runs. A binary of its own: the global client is per process, and here it
//! must go through the proxy.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_runtime::{Config, LockError, distributed_lock};
use tests::Server;
use tests::proxy::Proxy;
use tokio::sync::oneshot;
use tokio::time::timeout;

const WITHIN: Duration = Duration::from_secs(10);

/// Sets its flag when dropped: when the body holding it is dropped.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Says it started, then runs until cancelled.
#[distributed_lock(key = "job:<id>", on_lost = "cancel")]
async fn endless(
    id: u64,
    started: oneshot::Sender<()>,
    dropped: Arc<AtomicBool>,
) -> Result<(), LockError> {
    let _dropped = SetOnDrop(dropped);
    let _ = started.send(());
    std::future::pending::<()>().await;
    Ok(())
}

/// Old model: the loss was learned only when a renewal call timed out (the
/// 5 s response timeout), so the body was still running when the lease had
/// lapsed in Redis and another client held the lock. The guard's own clock
/// (lease from the send time of the last confirmed renewal) cancels it first.
#[tokio::test]
async fn a_stalled_link_cancels_the_body_before_another_client_gets_the_lock() {
    let server = Server::start();
    let proxy = Proxy::start(server.port());
    lock_runtime::init(Config::new(proxy.url()).watchdog_timeout(Duration::from_secs(2)))
        .await
        .expect("the global client connects through the proxy");
    let other = server.client().await;

    let (started_tx, started) = oneshot::channel();
    let dropped = Arc::new(AtomicBool::new(false));
    let call = tokio::spawn(endless(7, started_tx, dropped.clone()));
    timeout(WITHIN, started)
        .await
        .expect("the body started")
        .expect("the body said so");

    proxy.stall();
    let guard = other
        .lock("job:7")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the other client gets the lock once the stalled lease lapses");
    assert!(
        dropped.load(Ordering::SeqCst),
        "another client got the lock while the body still ran"
    );

    proxy.resume();
    let result = timeout(WITHIN, call)
        .await
        .expect("the locked call returned")
        .expect("the locked call's task ran");
    assert!(matches!(result, Err(LockError::Lost { .. })), "{result:?}");
    guard
        .release()
        .await
        .expect("the other client's hold is untouched");
}
