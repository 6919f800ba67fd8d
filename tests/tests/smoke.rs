//! Smoke test of the reentrant lock.

use std::time::Duration;
use tests::Server;

#[tokio::test]
async fn acquire_release_and_wait() {
    let server = Server::start();
    let client = server.client().await;
    let guard = client.lock("smoke").acquire().await.unwrap();
    assert!(guard.token() > 0);
    let other = server.client().await;
    assert!(other.lock("smoke").try_acquire().await.unwrap().is_none());
    let waiter = tokio::spawn({
        let other = other.clone();
        async move {
            other
                .lock("smoke")
                .wait(Duration::from_secs(10))
                .acquire()
                .await
        }
    });
    // Released once the waiter listens, so that it is woken by the unlock.
    let raw = server.raw().await;
    tests::eventually("the waiter listens", Duration::from_secs(10), || {
        let mut raw = raw.clone();
        async move { tests::numsub(&mut raw, "redisson_lock__channel:{smoke}").await == 1 }
    })
    .await;
    guard.release().await.unwrap();
    let g2 = waiter.await.unwrap().unwrap();
    g2.release().await.unwrap();
}
