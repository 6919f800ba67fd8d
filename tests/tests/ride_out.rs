//! Waiters ride out faults that heal (issue 23, defect 6): an attempt that
//! fails on a timeout or a lost connection while the waiter still has time
//! is made again (a fresh attempt; the failed one is reconciled first), and
//! the caller gets the lock or `Timeout`. Errors that will not heal still
//! fail at once.

use std::time::Duration;

use lock_runtime::{LockBuilder, LockClient, LockError};
use redis::AsyncCommands;
use tests::{Kind, Server, eventually, numsub};
use tokio::time::timeout;

const WITHIN: Duration = Duration::from_secs(30);

/// What the holder that keeps a waiter of `kind` out holds.
fn keeping_out(kind: Kind, client: &LockClient, name: &str) -> LockBuilder {
    match kind {
        Kind::Read => client.read_write_lock(name).write(),
        _ => kind.builder(client, name),
    }
}

/// Whether a waiter of `kind` is waiting now (it made its first attempt and
/// listens for its turn).
async fn waiting(kind: Kind, raw: &mut redis::aio::MultiplexedConnection, name: &str) -> bool {
    match kind {
        Kind::Reentrant => numsub(raw, &format!("redisson_lock__channel:{{{name}}}")).await > 0,
        Kind::Fair => {
            let queued: i64 = raw
                .llen(format!("redisson_lock_queue:{{{name}}}"))
                .await
                .unwrap();
            queued > 0
        }
        Kind::Write | Kind::Read => numsub(raw, &format!("redisson_rwlock:{{{name}}}")).await > 0,
        Kind::Semaphore(_) => numsub(raw, &format!("redisson_sc:{{{name}}}")).await > 0,
    }
}

/// A waiter (wait 20 s, response timeout 1 s) whose retry, at the holder's
/// lease end, meets `CLIENT PAUSE 6000 WRITE`: its attempts time out for
/// six seconds. It used to fail with `Redis(timed out)` with most of its
/// wait left; it gets the lock once the pause ends.
async fn a_waiter_rides_out_a_pause(kind: Kind) {
    let server = Server::start();
    let waiter = server
        .client_with(|c| c.response_timeout(Duration::from_secs(1)))
        .await;
    let holder = server.client().await;
    let mut raw = server.raw().await;
    let name = format!("{kind:?}");

    // Never released: its lease ends it, during the pause.
    let held = keeping_out(kind, &holder, &name)
        .lease(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    let wait = Duration::from_secs(20);
    let taken = tokio::spawn({
        let (waiter, name) = (waiter.clone(), name.clone());
        async move { kind.builder(&waiter, &name).wait(wait).acquire().await }
    });
    eventually("the waiter waits", WITHIN, || {
        let (mut raw, name) = (raw.clone(), name.clone());
        async move { waiting(kind, &mut raw, &name).await }
    })
    .await;
    tests::pause_writes(&mut raw, 6000).await;
    let guard = timeout(WITHIN, taken)
        .await
        .expect("the waiter answers within its wait")
        .unwrap()
        .unwrap_or_else(|e| panic!("{kind:?}: the waiter gave up on a fault that healed: {e:?}"));
    assert!(!guard.is_lost(), "{kind:?}");
    guard.release().await.unwrap();
    drop(held);
}

#[tokio::test]
async fn a_reentrant_waiter_rides_out_a_pause() {
    a_waiter_rides_out_a_pause(Kind::Reentrant).await;
}

#[tokio::test]
async fn a_fair_waiter_rides_out_a_pause() {
    a_waiter_rides_out_a_pause(Kind::Fair).await;
}

#[tokio::test]
async fn a_write_waiter_rides_out_a_pause() {
    a_waiter_rides_out_a_pause(Kind::Write).await;
}

#[tokio::test]
async fn a_read_waiter_rides_out_a_pause() {
    a_waiter_rides_out_a_pause(Kind::Read).await;
}

/// A wait that runs out while Redis does not answer ends in `Timeout`, not
/// in the fault; an error that will not heal (a key of another type) fails
/// at once, whatever the wait.
#[tokio::test]
async fn faults_within_the_wait_end_in_timeout_and_lasting_errors_fail_at_once() {
    let server = Server::start();
    let waiter = server
        .client_with(|c| c.response_timeout(Duration::from_millis(300)))
        .await;
    let holder = server.client().await;
    let mut raw = server.raw().await;

    let held = holder
        .lock("busy")
        .lease(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    tests::pause_writes(&mut raw, 4000).await;
    let waited = timeout(
        WITHIN,
        waiter.lock("busy").wait(Duration::from_secs(2)).acquire(),
    )
    .await
    .expect("the wait ends");
    assert!(
        matches!(waited, Err(LockError::Timeout { .. })),
        "a wait spent on a fault is a timeout: {waited:?}"
    );
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query_async(&mut raw)
        .await
        .unwrap();

    let _: () = raw.rpush("list", "x").await.unwrap();
    let refused = timeout(
        Duration::from_secs(5),
        waiter.lock("list").wait(Duration::from_secs(60)).acquire(),
    )
    .await
    .expect("a lasting error fails at once, not at the end of the wait");
    assert!(
        matches!(refused, Err(LockError::WrongType { .. })),
        "{refused:?}"
    );
    drop(held);
}

/// A re-entry that meets a fault tries again in place, never in the
/// client's queue for the lock (found in review): there it would wait behind
/// this client's other waiters, who wait for the very hold it re-enters.
#[tokio::test]
async fn a_reentry_rides_out_a_fault_in_place() {
    let server = Server::start();
    let client = server
        .client_with(|c| c.response_timeout(Duration::from_millis(500)))
        .await;
    let mut raw = server.raw().await;
    let outer = client.lock("deep").acquire().await.unwrap();
    // Another task of the same client waits for the lock.
    let other = tokio::spawn({
        let client = client.clone();
        async move { client.lock("deep").acquire().await.map(drop) }
    });
    eventually("the other task waits", WITHIN, || {
        let mut raw = raw.clone();
        async move { numsub(&mut raw, "redisson_lock__channel:{deep}").await > 0 }
    })
    .await;
    tests::pause_writes(&mut raw, 2000).await;
    let inner = timeout(
        WITHIN,
        outer.scope(client.lock("deep").wait(Duration::from_secs(15)).acquire()),
    )
    .await
    .expect("the re-entry answers")
    .expect("the re-entry rode out the pause");
    inner.release().await.unwrap();
    outer.release().await.unwrap();
    timeout(WITHIN, other)
        .await
        .expect("the other task gets its turn")
        .unwrap()
        .unwrap();
}
